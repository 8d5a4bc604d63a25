import APNsCore
import HTTP1Server

/// Every token issued, with its state, and setting a token's state directly.
struct TokenRoutes: AdminResource {
    unowned let api: AdminService

    func addRoutes(to r: inout AdminRouter) {
        r.add("GET", "/api/v1/tokens", "every token issued, with its state, a page at a time") { req, _, http in
            try listTokens(req, http)
        }
        r.add("GET", "/api/v1/tokens/{token}", "one token") { _, p, _ in
            let token = (p["token"] ?? "").lowercased()
            guard let entry = state.readWorld({ $0.registry.token(token) }) else { throw AdminError(404, "no token \(token)") }
            return .json(200, AdminJSON.token(entry))
        }
        r.add("PUT", "/api/v1/tokens/{token}/state", "set a token's state directly") { req, p, _ in
            try setTokenState((p["token"] ?? "").lowercased(), req)
        }
    }

    /// Oldest first (issue time, then token), a page at a time, as devices are.
    private func listTokens(_ request: HTTP1Request, _ http: HTTP1Connection) throws -> HTTP1ServerResponse? {
        try keyedPage(request, http, list: "tokens", { $0.registry.tokensPage(after: $1, limit: $2) }, json: AdminJSON.token)
    }

    /// `PUT /api/v1/tokens/{token}/state` with `{"state": "active" | "unregistered" | "expired" |
    /// "rate-limited", "since": ms or RFC 3339 (unregistered only; default now)}`.
    private func setTokenState(_ token: String, _ request: HTTP1Request) throws -> HTTP1ServerResponse {
        let body = try request.jsonObject()
        try body.refuseUnknownFields(["state", "since"])
        guard let text = try Self.string(body, "state") else {
            throw AdminError(400, "\"state\" is required: active, unregistered, expired or rate-limited")
        }
        let newState: TokenState
        switch text {
        case "active": newState = .active
        case "expired": newState = .expired
        case "rate-limited": newState = .rateLimited
        case "unregistered":
            var since = now
            if let value = body["since"] {
                if let ms = value.intValue {
                    guard !looksLikeSeconds(milliseconds: ms) else { throw AdminError(400, secondsGivenForMilliseconds("\"since\"", ms)) }
                    since = ms
                } else if let iso = value.stringValue.flatMap(RFC3339.parse) {
                    since = iso
                } else {
                    throw AdminError(400, "\"since\" must be milliseconds since the epoch or an RFC 3339 time")
                }
                // The 410's timestamp: a time APNs could give (from 1970 on).
                guard since >= 0, since <= RFC3339.latestMs else {
                    throw AdminError(400, "\"since\" must be a time from 1970 to the end of year 9999")
                }
            }
            newState = .unregistered(sinceMs: since)
        default:
            throw AdminError(400, "\"state\" must be active, unregistered, expired or rate-limited, not '\(text)'")
        }
        // A token its app no longer has stays unregistered: it cannot be made to answer as if
        // the app were still there (it was: a token set active after its uninstall got 200s).
        let changed = state.withWorld { world -> Result<TokenEntry, AdminError> in
            guard let entry = world.registry.token(token) else { return .failure(AdminError(404, "no token \(token)")) }
            let unregistering = if case .unregistered = newState { true } else { false }
            if !unregistering, !world.registry.isCurrent(token: token) {
                return .failure(
                    AdminError(
                        409,
                        "token \(token) is no longer its app's (\(world.registry.whyInvalidated(entry))): it stays unregistered; only \"unregistered\" (with another \"since\") can be set on it"
                    ))
            }
            return world.setTokenState(token, newState).map { .success($0) } ?? .failure(AdminError(404, "no token \(token)"))
        }
        return .json(200, AdminJSON.token(try changed.get()))
    }
}
