import APNsCore
import Foundation
import Networking

/// A parsed HTTP/1.1 request for the admin API.
struct AdminRequest {
    var method: String
    /// The path without the query string, percent-decoded per segment by the router.
    var path: String
    var query: [String: String]
    var headers: [String: String]
    var body: [UInt8]

    func header(_ name: String) -> String? { headers[name.lowercased()] }

    /// The body as a JSON object; an empty body counts as `{}`.
    func jsonObject() throws(AdminError) -> JSONObject {
        if body.isEmpty || body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) { return JSONObject() }
        do {
            guard let object = try JSONValue.parse(body).objectValue else {
                throw AdminError(400, "the request body must be a JSON object")
            }
            return object
        } catch let error as JSONParseError {
            throw AdminError(400, "the request body is not valid JSON: \(error)")
        } catch let error as AdminError {
            throw error
        } catch {
            throw AdminError(400, "\(error)")
        }
    }
}

struct AdminResponse {
    var status: Int
    var headers: [(String, String)] = []
    var body: [UInt8] = []

    static func json(_ status: Int, _ value: JSONValue) -> AdminResponse {
        var body = value.serializedBytes()
        body.append(0x0A)
        return AdminResponse(status: status, headers: [("Content-Type", "application/json")], body: body)
    }

    static func error(_ status: Int, _ message: String) -> AdminResponse {
        json(status, ["error": .string(message), "status": .int(Int64(status))])
    }
}

/// An admin API failure with the status and message to send.
struct AdminError: Error {
    var status: Int
    var message: String
    init(_ status: Int, _ message: String) {
        self.status = status
        self.message = message
    }
}

/// How a route answers: at once, or later (long polls), or as a stream (server-sent events).
protocol AdminResponder: AnyObject {
    func respond(_ response: AdminResponse)
}

/// A minimal HTTP/1.1 server connection: Content-Length bodies, keep-alive, one request at a
/// time (a pipelined request waits until the previous one is answered).
final class HTTP1Connection: ConnectionHandler, AdminResponder {
    static let maxHeaderBytes = 64 * 1024
    static let maxBodyBytes = 8 * 1024 * 1024

    let connection: Connection
    private let route: (AdminRequest, HTTP1Connection) -> Void
    private var buffer: [UInt8] = []
    private var awaitingResponse = false
    private var keepAlive = true
    private var onClose: [() -> Void] = []

    init(connection: Connection, route: @escaping (AdminRequest, HTTP1Connection) -> Void) {
        self.connection = connection
        self.route = route
    }

    func connectionDidBecomeReady(_ connection: Connection) {}

    func connection(_ connection: Connection, didRead bytes: UnsafeRawBufferPointer) {
        buffer.append(contentsOf: bytes)
        processBuffered()
    }

    func connectionDidClose(_ connection: Connection) {
        let handlers = onClose
        onClose = []
        handlers.forEach { $0() }
    }

    /// Runs when the client goes away (cancels long polls and event streams).
    func whenClosed(_ body: @escaping () -> Void) { onClose.append(body) }

    var isClosed: Bool { connection.isClosed }

    func respond(_ response: AdminResponse) {
        guard !connection.isClosed else { return }
        var head = "HTTP/1.1 \(response.status) \(Self.statusText(response.status))\r\n"
        for (name, value) in response.headers { head += "\(name): \(value)\r\n" }
        head += "Content-Length: \(response.body.count)\r\n"
        head += keepAlive ? "\r\n" : "Connection: close\r\n\r\n"
        connection.write { out in
            out.append(contentsOf: head.utf8)
            out.append(contentsOf: response.body)
        }
        awaitingResponse = false
        if !keepAlive {
            connection.closeAfterFlush()
            return
        }
        processBuffered()
    }

    /// Starts a streamed response (server-sent events): headers now, chunks later.
    func startStream(contentType: String) {
        let head = "HTTP/1.1 200 OK\r\nContent-Type: \(contentType)\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n"
        keepAlive = false
        connection.write(Array(head.utf8))
    }

    func sendStreamChunk(_ bytes: [UInt8]) {
        connection.write(bytes)
    }

    private func processBuffered() {
        while !awaitingResponse && !connection.isClosed {
            guard let end = headerEnd() else {
                if buffer.count > Self.maxHeaderBytes { fail(431, "request headers are larger than 64 KiB") }
                return
            }
            let headText = String(decoding: buffer[..<end], as: UTF8.self)
            var lines = headText.components(separatedBy: "\r\n")
            let requestLine = lines.removeFirst().split(separator: " ")
            guard requestLine.count == 3, requestLine[2].hasPrefix("HTTP/1.") else {
                fail(400, "malformed request line")
                return
            }
            var headers: [String: String] = [:]
            for line in lines where !line.isEmpty {
                guard let colon = line.firstIndex(of: ":") else {
                    fail(400, "malformed header line")
                    return
                }
                headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
            if headers["transfer-encoding"] != nil {
                fail(411, "chunked request bodies are not supported; send Content-Length")
                return
            }
            let length = Int(headers["content-length"] ?? "0") ?? -1
            guard length >= 0, length <= Self.maxBodyBytes else {
                fail(length < 0 ? 400 : 413, length < 0 ? "invalid Content-Length" : "request body larger than 8 MiB")
                return
            }
            let bodyStart = end + 4
            guard buffer.count >= bodyStart + length else { return }
            let body = Array(buffer[bodyStart..<(bodyStart + length)])
            buffer.removeFirst(bodyStart + length)

            keepAlive = requestLine[2] == "HTTP/1.1" && headers["connection"]?.lowercased() != "close"
            let target = String(requestLine[1])
            let (path, query) = Self.splitTarget(target)
            awaitingResponse = true
            route(AdminRequest(method: String(requestLine[0]), path: path, query: query, headers: headers, body: body), self)
        }
    }

    private func headerEnd() -> Int? {
        guard buffer.count >= 4 else { return nil }
        for i in 0...(buffer.count - 4)
        where buffer[i] == 0x0D && buffer[i + 1] == 0x0A && buffer[i + 2] == 0x0D && buffer[i + 3] == 0x0A {
            return i
        }
        return nil
    }

    private func fail(_ status: Int, _ message: String) {
        keepAlive = false
        awaitingResponse = true
        respond(.error(status, message))
    }

    static func splitTarget(_ target: String) -> (String, [String: String]) {
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

    static func statusText(_ status: Int) -> String {
        switch status {
        case 200: return "OK"
        case 201: return "Created"
        case 204: return "No Content"
        case 400: return "Bad Request"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 408: return "Request Timeout"
        case 409: return "Conflict"
        case 411: return "Length Required"
        case 413: return "Payload Too Large"
        case 422: return "Unprocessable Entity"
        case 431: return "Request Header Fields Too Large"
        case 500: return "Internal Server Error"
        case 503: return "Service Unavailable"
        default: return "Status"
        }
    }
}
