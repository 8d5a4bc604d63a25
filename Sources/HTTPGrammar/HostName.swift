/// A host from a `Host` field, an `Origin` or a listen address: a DNS name or an IP literal.
public struct HostName: Equatable, Sendable {
    public enum Kind: Sendable { case name, ipv4, ipv6 }

    /// Lowercased, without brackets or a trailing dot.
    public let host: String
    public let port: Int?
    public let kind: Kind

    /// `host[:port]` or `[v6][:port]`.
    public static func parse(authority: String) -> HostName? {
        var host = Substring(authority)
        var portText: Substring = ""
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return nil }
            let rest = host[host.index(after: close)...]
            guard rest.isEmpty || rest.hasPrefix(":") else { return nil }
            portText = rest.dropFirst()
            host = host[host.index(after: host.startIndex)..<close]
            guard isIPv6(host), case .some(let port) = port(portText) else { return nil }
            return HostName(host: host.lowercased(), port: port, kind: .ipv6)
        }
        if let colon = host.lastIndex(of: ":") {
            portText = host[host.index(after: colon)...]
            host = host[..<colon]
        }
        guard case .some(let port) = port(portText) else { return nil }
        return parse(name: host, port: port)
    }

    /// The port after the colon: `.some(nil)` when there is none (`host:` is allowed by
    /// RFC 3986), nil when it is not 0–65535.
    private static func port(_ text: Substring) -> Int?? {
        guard !text.isEmpty else { return .some(nil) }
        guard text.count <= 5, text.allSatisfy({ $0.isASCII && $0.isNumber }), let value = Int(text), value <= 65535 else {
            return nil
        }
        return .some(value)
    }

    private static func parse(name raw: Substring, port: Int?) -> HostName? {
        var host = raw.lowercased()
        if host.hasSuffix(".") { host.removeLast() }
        guard !host.isEmpty, host.utf8.count <= 253 else { return nil }
        if isIPv4(host) { return HostName(host: host, port: port, kind: .ipv4) }
        let allowed = host.utf8.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x7A) || c == 0x2D || c == 0x2E || c == 0x5F
        }
        guard allowed, !host.hasPrefix("."), !host.contains("..") else { return nil }
        return HostName(host: host, port: port, kind: .name)
    }

    /// A bare host (a listen address or an `--admin-allowed-host` value).
    public static func parse(host: String) -> HostName? {
        if host.hasPrefix("[") || host.contains(":") {
            let inner = host.hasPrefix("[") && host.hasSuffix("]") ? Substring(host.dropFirst().dropLast()) : Substring(host)
            return isIPv6(inner) ? HostName(host: inner.lowercased(), port: nil, kind: .ipv6) : nil
        }
        return parse(name: Substring(host), port: nil)
    }

    public static func isIPv4(_ text: String) -> Bool {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4
            && parts.allSatisfy { part in
                !part.isEmpty && part.count <= 3 && part.allSatisfy { $0.isASCII && $0.isNumber } && Int(part)! <= 255
            }
    }

    public static func isIPv6(_ text: Substring) -> Bool {
        text.count >= 2 && text.count <= 45 && text.contains(":")
            && text.allSatisfy { $0.isHexDigit || $0 == ":" || $0 == "." }
    }

    /// `localhost`, `*.localhost` (RFC 6761: always this machine), 127.0.0.0/8 and ::1.
    public var isLoopback: Bool {
        switch kind {
        case .name: return host == "localhost" || host.hasSuffix(".localhost")
        case .ipv4: return host.hasPrefix("127.")
        case .ipv6: return host == "::1" || host == "0:0:0:0:0:0:0:1"
        }
    }

    /// 0.0.0.0 or :: (every interface).
    public var isWildcard: Bool { host == "0.0.0.0" || host == "::" || host == "0:0:0:0:0:0:0:0" }
}
