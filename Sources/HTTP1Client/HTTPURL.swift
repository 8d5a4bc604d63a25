import HTTPGrammar

/// An `http://host[:port]/path?query` URL split into what a request needs (the grammar is
/// `PlainHTTPURL`'s).
///
/// Plain http only: the client has no TLS, and an https URL is refused with
/// `HTTP1ClientError.httpsMessage` rather than sent in clear text. No user info
/// (`user@host`), and the path and query must already be percent-encoded (no spaces,
/// control or non-ASCII characters). A `#fragment` is dropped: it is never sent.
public struct HTTPURL: Sendable, Equatable, CustomStringConvertible {
    /// A name or an address; an IPv6 address without its brackets.
    public var host: String
    public var port: UInt16
    /// The path and query as sent in the request line; "/" when the URL has none.
    public var target: String

    public init(host: String, port: UInt16 = 80, target: String = "/") {
        self.host = host
        self.port = port
        self.target = target
    }

    public init(string: String) throws(HTTP1ClientError) {
        do {
            let parts = try PlainHTTPURL.parse(string)
            (host, port, target) = (parts.host, parts.port, parts.target)
        } catch {
            switch error {
            case .https: throw HTTP1ClientError(.httpsUnsupported, phase: .preparing, HTTP1ClientError.httpsMessage)
            case .invalid: throw HTTP1ClientError(.invalidRequest, phase: .preparing, error.message(string))
            }
        }
    }

    /// The Host field: brackets around IPv6, no port when it is 80.
    public var hostHeader: String {
        let name = host.contains(":") ? "[\(host)]" : host
        return port == 80 ? name : "\(name):\(port)"
    }

    public var description: String { "http://\(hostHeader)\(target)" }
}
