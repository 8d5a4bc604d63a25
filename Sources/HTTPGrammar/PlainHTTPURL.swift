/// An `http://host[:port]/path?query` URL taken apart, or why it is not one: the one grammar
/// for the HTTP/1.1 client (`HTTPURL`) and for the checks of a backend hook's URL when it is
/// set, so a hook is refused for what its calls would fail on.
///
/// Plain http only, no user info (`user@host`), a port from 1 to 65535, and a path and query
/// already percent-encoded (no spaces, control or non-ASCII characters). A `#fragment` is
/// dropped: it is never sent.
public struct PlainHTTPURL: Sendable, Equatable {
    /// A name or an address; an IPv6 address without its brackets.
    public var host: String
    public var port: UInt16
    /// The path and query as sent in the request line; "/" when the URL has none.
    public var target: String

    public enum Problem: Error, Sendable, Equatable {
        /// An https:// URL.
        case https
        /// Why it is not an http URL.
        case invalid(String)

        /// The message for `url`: `'…' is not a usable URL: why (expected http://host[:port]/path)`.
        public func message(_ url: String) -> String {
            switch self {
            case .https: return "'\(url)' is https: only http:// is supported"
            case .invalid(let why): return "'\(url)' is not a usable URL: \(why) (expected http://host[:port]/path)"
            }
        }
    }

    public static func parse(_ string: String) throws(Problem) -> PlainHTTPURL {
        guard let colon = string.indices.first(where: { string[$0...].hasPrefix("://") }) else {
            throw .invalid("no http:// at the start")
        }
        let schemeEnd = colon..<string.index(colon, offsetBy: 3)
        switch string[..<schemeEnd.lowerBound].lowercased() {
        case "http": break
        case "https": throw .https
        default: throw .invalid("only http:// is supported")
        }
        var rest = string[schemeEnd.upperBound...]
        if let fragment = rest.firstIndex(of: "#") { rest = rest[..<fragment] }
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        let pathAndQuery = rest[authorityEnd...]
        guard !authority.contains("@") else { throw .invalid("user info (user@host) is not supported") }

        let hostText: Substring
        let portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw .invalid("an IPv6 address without its closing ]") }
            hostText = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            guard after.isEmpty || after.hasPrefix(":") else { throw .invalid("text after the IPv6 address") }
            portText = after.isEmpty ? nil : after.dropFirst()
            guard hostText.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." || $0 == "%" }), hostText.contains(":") else {
                throw .invalid("'\(hostText)' is not an IPv6 address")
            }
        } else {
            let colon = authority.firstIndex(of: ":")
            hostText = colon.map { authority[..<$0] } ?? authority
            portText = colon.map { authority[authority.index(after: $0)...] }
            guard hostText.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "." || $0 == "_") }) else {
                throw .invalid("'\(hostText)' is not a host name or address")
            }
        }
        guard !hostText.isEmpty else { throw .invalid("no host") }
        var port: UInt16 = 80
        if let portText {
            guard let number = UInt16(portText), number > 0 else { throw .invalid("port '\(portText)' is not a number from 1 to 65535") }
            port = number
        }
        // Request-line syntax: a space or a line break would split or end the line.
        guard pathAndQuery.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw .invalid("the path or query has spaces, control or non-ASCII characters (percent-encode them)")
        }
        return PlainHTTPURL(
            host: String(hostText), port: port,
            target: pathAndQuery.isEmpty ? "/" : pathAndQuery.hasPrefix("?") ? "/" + pathAndQuery : String(pathAndQuery))
    }
}
