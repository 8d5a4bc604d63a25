/// Tells an HTTP/2 client from an HTTP/1.x one by the first bytes of a connection, so a server
/// can answer an HTTP/1.1 request (curl without `--http2`, a JDK or curl `Upgrade: h2c`
/// attempt) in words the client can show, instead of an HTTP/2 GOAWAY it reads as garbage.
public enum ConnectionPreface {
    /// The client connection preface every HTTP/2 client starts with (RFC 9113 §3.4).
    static let http2: [UInt8] = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    public enum Verdict: Equatable, Sendable {
        /// Too few bytes to tell; read more.
        case undecided
        /// The HTTP/2 preface (or something else entirely: let the HTTP/2 session reject it).
        case http2
        /// An HTTP/1.x request: its request line, as far as it has arrived.
        case http1(requestLine: String)
    }

    public static func classify(_ bytes: some Collection<UInt8>) -> Verdict {
        var index = 0
        for byte in bytes.prefix(http2.count) {
            if byte != http2[index] { return looksLikeHTTP1(bytes) }
            index += 1
        }
        return index == http2.count ? .http2 : .undecided
    }

    /// A method token (upper-case letters) and a space: `POST /3/device/… HTTP/1.1`.
    private static func looksLikeHTTP1(_ bytes: some Collection<UInt8>) -> Verdict {
        var method = 0
        for byte in bytes.prefix(16) {
            if byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") {
                method += 1
                continue
            }
            guard byte == UInt8(ascii: " "), method > 0 else { return .http2 }
            let line = bytes.prefix(200).prefix { $0 != UInt8(ascii: "\r") && $0 != UInt8(ascii: "\n") }
            return .http1(requestLine: String(decoding: line, as: UTF8.self))
        }
        return method == bytes.count ? .undecided : .http2
    }
}
