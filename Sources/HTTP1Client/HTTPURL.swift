/// An `http://host[:port]/path?query` URL split into what a request needs.
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
        func invalid(_ why: String) -> HTTP1ClientError {
            HTTP1ClientError(.invalidRequest, phase: .preparing, "'\(string)' is not a usable URL: \(why) (expected http://host[:port]/path)")
        }
        guard let schemeEnd = string.range(of: "://") else { throw invalid("no http:// at the start") }
        switch string[..<schemeEnd.lowerBound].lowercased() {
        case "http": break
        case "https": throw HTTP1ClientError(.httpsUnsupported, phase: .preparing, HTTP1ClientError.httpsMessage)
        default: throw invalid("only http:// is supported")
        }
        var rest = string[schemeEnd.upperBound...]
        if let fragment = rest.firstIndex(of: "#") { rest = rest[..<fragment] }
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        let pathAndQuery = rest[authorityEnd...]
        guard !authority.contains("@") else { throw invalid("user info (user@host) is not supported") }

        let hostText: Substring
        let portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw invalid("an IPv6 address without its closing ]") }
            hostText = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            guard after.isEmpty || after.hasPrefix(":") else { throw invalid("text after the IPv6 address") }
            portText = after.isEmpty ? nil : after.dropFirst()
            guard hostText.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." || $0 == "%" }), hostText.contains(":") else {
                throw invalid("'\(hostText)' is not an IPv6 address")
            }
        } else {
            let colon = authority.firstIndex(of: ":")
            hostText = colon.map { authority[..<$0] } ?? authority
            portText = colon.map { authority[authority.index(after: $0)...] }
            guard hostText.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "." || $0 == "_") }) else {
                throw invalid("'\(hostText)' is not a host name or address")
            }
        }
        guard !hostText.isEmpty else { throw invalid("no host") }
        var port: UInt16 = 80
        if let portText {
            guard let number = UInt16(portText), number > 0 else { throw invalid("port '\(portText)' is not a number from 1 to 65535") }
            port = number
        }
        // Request-line syntax: a space or a line break would split or end the line.
        guard pathAndQuery.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw invalid("the path or query has spaces, control or non-ASCII characters (percent-encode them)")
        }
        self.host = String(hostText)
        self.port = port
        self.target = pathAndQuery.isEmpty ? "/" : pathAndQuery.hasPrefix("?") ? "/" + pathAndQuery : String(pathAndQuery)
    }

    /// The Host field: brackets around IPv6, no port when it is 80.
    public var hostHeader: String {
        let name = host.contains(":") ? "[\(host)]" : host
        return port == 80 ? name : "\(name):\(port)"
    }

    public var description: String { "http://\(hostHeader)\(target)" }
}
