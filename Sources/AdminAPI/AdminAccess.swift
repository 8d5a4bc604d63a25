import HTTP1Server
import HTTPGrammar

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
public struct AdminAccessPolicy: Sendable {
    /// Names from `--admin-allowed-host`, lowercased.
    public var allowedHosts: Set<String> = []
    /// The host the admin listener is bound to, unless it is a wildcard address.
    public var boundHost: String?
    public var token: String?

    public init(allowedHosts: Set<String> = [], boundHost: String? = nil, token: String? = nil) {
        self.allowedHosts = allowedHosts
        self.boundHost = boundHost
        self.token = token
    }

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
                return Denial(
                    status: 403,
                    message: "Host '\(name)' is not allowed on the admin API (protection against DNS rebinding);"
                        + " to reach it by this name, start the emulator with --admin-allowed-host \(name) (or APNS_EMULATOR_ADMIN_ALLOWED_HOST=\(name))",
                    reason: "host")
            }
        }
        let changesState = Self.stateChanging.contains(head.method)
        if changesState, let origin = head.field("origin") {
            guard let authority, let request = HostName.parse(authority: authority), sameOrigin(origin, request) else {
                return Denial(
                    status: 403,
                    message: "cross-origin request refused: Origin \(HTTP1Syntax.printable(origin)) is not this admin API;"
                        + " state-changing requests are accepted from the web UI itself or from clients that send no Origin",
                    reason: "origin")
            }
        }
        if let token, !open {
            let given = bearer(head.field("authorization")) ?? (acceptsQueryToken ? queryToken : nil)
            guard let given else {
                return Denial(
                    status: 401,
                    message: "this admin API needs a token: send Authorization: Bearer TOKEN, the value of --admin-token (APNS_EMULATOR_ADMIN_TOKEN)",
                    headers: [("WWW-Authenticate", "Bearer realm=\"apns-emulator\"")], reason: "token")
            }
            guard Self.constantTimeEqual(given, token) else {
                return Denial(
                    status: 401, message: "wrong admin token; send the value of --admin-token (APNS_EMULATOR_ADMIN_TOKEN)",
                    headers: [("WWW-Authenticate", "Bearer realm=\"apns-emulator\", error=\"invalid_token\"")], reason: "token")
            }
        }
        if changesState, let type = head.field("content-type"), Self.mediaType(type) != "application/json" {
            return Denial(
                status: 415,
                message: "Content-Type \(HTTP1Syntax.printable(type)) is not accepted: send JSON as application/json"
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
