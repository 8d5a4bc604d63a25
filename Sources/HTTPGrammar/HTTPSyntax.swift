// HTTPGrammar: the small pieces of HTTP's grammar that more than one module checks (tokens,
// hosts), as pure functions. Imports nothing.

/// Byte-level HTTP grammar shared by the HTTP/1.1 server's parser and the core's hook checks.
public enum HTTPSyntax {
    /// tchar (RFC 9110 §5.6.2).
    public static func isTokenChar(_ c: UInt8) -> Bool {
        switch c {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: return true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
            UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
            UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        default: return false
        }
    }

    /// A field name or method: one or more tchars.
    public static func isToken(_ text: String) -> Bool { !text.isEmpty && text.utf8.allSatisfy(isTokenChar) }
}
