import Foundation

/// A complete request as the service sees it.
public struct HTTP1Request: Sendable {
    public var method: String
    /// The path without the query string (percent-decoding is the router's, per segment).
    public var path: String
    public var query: [String: String]
    /// By lowercased name; of a repeated field, the first.
    public var headers: [String: String]
    public var body: [UInt8]

    public init(method: String, path: String, query: [String: String], headers: [String: String], body: [UInt8]) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
    }

    public func header(_ name: String) -> String? { headers[name.lowercased()] }

    /// `/path?a=1&b=x+y` → ("/path", ["a": "1", "b": "x y"]): query names and values
    /// percent-decoded, `+` read as a space.
    public static func splitTarget(_ target: String) -> (String, [String: String]) {
        guard let mark = target.firstIndex(of: "?") else { return (target, [:]) }
        var query: [String: String] = [:]
        for pair in target[target.index(after: mark)...].split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let key = decode(kv[0])
            let value = kv.count > 1 ? decode(kv[1]) : ""
            query[key] = value
        }
        return (String(target[..<mark]), query)
    }

    static func decode(_ text: Substring) -> String {
        let plusAsSpace = text.replacingOccurrences(of: "+", with: " ")
        return plusAsSpace.removingPercentEncoding ?? plusAsSpace
    }
}

/// An answer: the server adds `Content-Length` and, when the connection ends, `Connection: close`.
public struct HTTP1ServerResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]
    /// Runs once the answer has left (its bytes are written to the socket) or can no longer
    /// leave (the connection closed): whoever counted its memory gives the count back.
    public var onSent: (@Sendable () -> Void)?

    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    static func statusText(_ status: Int) -> String {
        switch status {
        case 100: return "Continue"
        case 200: return "OK"
        case 201: return "Created"
        case 204: return "No Content"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 408: return "Request Timeout"
        case 409: return "Conflict"
        case 411: return "Length Required"
        case 413: return "Content Too Large"
        case 415: return "Unsupported Media Type"
        case 422: return "Unprocessable Content"
        case 431: return "Request Header Fields Too Large"
        case 499: return "Client Closed Request"
        case 500: return "Internal Server Error"
        case 501: return "Not Implemented"
        case 503: return "Service Unavailable"
        case 505: return "HTTP Version Not Supported"
        default: return "Status"
        }
    }
}
