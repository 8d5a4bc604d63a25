/// Who may use the admin API (docs/admin-api.md, "Access"), decided from a request head
/// alone, before any body is read. No I/O.
///
/// The threats are the developer's own browser: a page on any site can send requests to
/// 127.0.0.1:8197 (cross-site requests), and a name the attacker controls can be made to
/// resolve to 127.0.0.1 so the page becomes "same-origin" with the API (DNS rebinding).
/// - `Host` must name this machine (loopback names, IP literals, the bound host, or names
///   given with `--admin-allowed-host`): a rebinding attack always carries the attacker's name.
///   IP literals are safe: a browser sends one only for a page served from that address.
/// - State-changing requests must come from no page at all (no `Origin`, as curl and
///   libraries send them) or from the API's own origin (the web UI).
/// - They must not declare a body type a page may send cross-site without asking first
///   (`text/plain`, form types): a present `Content-Type` must be `application/json`. A
///   missing one is accepted, for scripts that post bytes without a type; a browser that
///   sends a body without a type also sends `Origin`, which the rule above checks.
/// - With `--admin-token`, every request but health checks and the web UI's static files
///   carries `Authorization: Bearer TOKEN`; the event stream may carry it as
///   `?access_token=` instead, as `EventSource` cannot set headers (RFC 6750 §2.3).
struct AdminAccessPolicy: Sendable {
    /// Names from `--admin-allowed-host`, lowercased.
    var allowedHosts: Set<String> = []
    /// The host the admin listener is bound to, unless it is a wildcard address.
    var boundHost: String?
    var token: String?

    struct Denial: Equatable, Sendable {
        var status: Int
        var message: String
        var headers: [(String, String)] = []
        /// The label of `apns_emulator_admin_requests_refused_total`.
        var reason: String

        static func == (a: Denial, b: Denial) -> Bool {
            a.status == b.status && a.message == b.message && a.reason == b.reason
                && a.headers.map { "\($0.0): \($0.1)" } == b.headers.map { "\($0.0): \($0.1)" }
        }
    }

    static let stateChanging: Set<String> = ["POST", "PUT", "PATCH", "DELETE"]

    /// - Parameters:
    ///   - open: the route needs no token (health checks, the web UI's files).
    ///   - queryToken: `access_token` from the query, honoured only when `acceptsQueryToken`.
    func check(_ head: HTTP1RequestHead, open: Bool, queryToken: String?, acceptsQueryToken: Bool) -> Denial? {
        // Only an HTTP/1.0 request may lack a Host (the parser enforces it), and no browser
        // sends one of those.
        let authority = head.authority
        if let authority {
            guard let host = HostName.parse(authority: authority) else {
                return Denial(status: 400, message: "the Host is not a valid host[:port]", reason: "host")
            }
            guard isAllowed(host) else {
                let name = host.host
                return Denial(status: 403, message: "Host '\(name)' is not allowed on the admin API (protection against DNS rebinding);"
                    + " to reach it by this name, start the emulator with --admin-allowed-host \(name) (or APNS_EMULATOR_ADMIN_ALLOWED_HOST=\(name))",
                    reason: "host")
            }
        }
        let changesState = Self.stateChanging.contains(head.method)
        if changesState, let origin = head.field("origin") {
            guard let authority, let request = HostName.parse(authority: authority), sameOrigin(origin, request) else {
                return Denial(status: 403, message: "cross-origin request refused: Origin \(HTTP1Syntax.printable(origin)) is not this admin API;"
                    + " state-changing requests are accepted from the web UI itself or from clients that send no Origin",
                    reason: "origin")
            }
        }
        if let token, !open {
            let given = bearer(head.field("authorization")) ?? (acceptsQueryToken ? queryToken : nil)
            guard let given else {
                return Denial(status: 401, message: "this admin API needs a token: send Authorization: Bearer TOKEN, the value of --admin-token (APNS_EMULATOR_ADMIN_TOKEN)",
                              headers: [("WWW-Authenticate", "Bearer realm=\"apns-emulator\"")], reason: "token")
            }
            guard Self.constantTimeEqual(given, token) else {
                return Denial(status: 401, message: "wrong admin token; send the value of --admin-token (APNS_EMULATOR_ADMIN_TOKEN)",
                              headers: [("WWW-Authenticate", "Bearer realm=\"apns-emulator\", error=\"invalid_token\"")], reason: "token")
            }
        }
        if changesState, let type = head.field("content-type"), Self.mediaType(type) != "application/json" {
            return Denial(status: 415, message: "Content-Type \(HTTP1Syntax.printable(type)) is not accepted: send JSON as application/json"
                + " (curl: -H 'content-type: application/json'), or no body", reason: "content-type")
        }
        return nil
    }

    func isAllowed(_ host: HostName) -> Bool {
        host.isLoopback || host.kind != .name || allowedHosts.contains(host.host) || host.host == boundHost
    }

    /// The Origin names this API: an allowed host and the same host and port the request
    /// was sent to. `null` (sandboxed frames, local files) never is.
    func sameOrigin(_ origin: String, _ request: HostName) -> Bool {
        let lower = origin.lowercased()
        let scheme = lower.hasPrefix("http://") ? "http" : lower.hasPrefix("https://") ? "https" : nil
        guard let scheme, let parsed = HostName.parse(authority: String(origin.dropFirst(scheme.count + 3))) else { return false }
        let defaultPort = scheme == "https" ? 443 : 80
        return isAllowed(parsed) && parsed.host == request.host && (parsed.port ?? defaultPort) == (request.port ?? 80)
    }

    /// The credentials of `Authorization: Bearer …` (the scheme is case-insensitive).
    func bearer(_ value: String?) -> String? {
        guard let value, value.count > 7, value.prefix(7).lowercased() == "bearer " else { return nil }
        let credentials = value.dropFirst(7).drop { $0 == " " }
        return credentials.isEmpty ? nil : String(credentials)
    }

    /// `type/subtype` of a Content-Type, lowercased, without parameters.
    static func mediaType(_ value: String) -> String {
        HTTP1Syntax.trimmed(value.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first ?? "").lowercased()
    }

    /// Compares without stopping at the first difference, so timing tells nothing about the token.
    static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8)
        let y = Array(b.utf8)
        var difference = UInt8(x.count == y.count ? 0 : 1)
        for i in 0..<max(x.count, y.count) {
            difference |= (i < x.count ? x[i] : 0) ^ (i < y.count ? y[i] : 0)
        }
        return difference == 0
    }
}

/// A host from a `Host` field, an `Origin` or a listen address: a DNS name or an IP literal.
struct HostName: Equatable, Sendable {
    enum Kind: Sendable { case name, ipv4, ipv6 }

    /// Lowercased, without brackets or a trailing dot.
    let host: String
    let port: Int?
    let kind: Kind

    /// `host[:port]` or `[v6][:port]`.
    static func parse(authority: String) -> HostName? {
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
    static func parse(host: String) -> HostName? {
        if host.hasPrefix("[") || host.contains(":") {
            let inner = host.hasPrefix("[") && host.hasSuffix("]") ? Substring(host.dropFirst().dropLast()) : Substring(host)
            return isIPv6(inner) ? HostName(host: inner.lowercased(), port: nil, kind: .ipv6) : nil
        }
        return parse(name: Substring(host), port: nil)
    }

    static func isIPv4(_ text: String) -> Bool {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { part in
            !part.isEmpty && part.count <= 3 && part.allSatisfy { $0.isASCII && $0.isNumber } && Int(part)! <= 255
        }
    }

    static func isIPv6(_ text: Substring) -> Bool {
        text.count >= 2 && text.count <= 45 && text.contains(":")
            && text.allSatisfy { $0.isHexDigit || $0 == ":" || $0 == "." }
    }

    /// `localhost`, `*.localhost` (RFC 6761: always this machine), 127.0.0.0/8 and ::1.
    var isLoopback: Bool {
        switch kind {
        case .name: return host == "localhost" || host.hasSuffix(".localhost")
        case .ipv4: return host.hasPrefix("127.")
        case .ipv6: return host == "::1" || host == "0:0:0:0:0:0:0:1"
        }
    }

    /// 0.0.0.0 or :: (every interface).
    var isWildcard: Bool { host == "0.0.0.0" || host == "::" || host == "0:0:0:0:0:0:0:0" }
}
