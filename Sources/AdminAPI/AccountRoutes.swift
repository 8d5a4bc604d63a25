import APNsCore
import BackendCalls
import HTTP1Server

/// The app's half of the chain: the apps' backends, accounts logged in on devices, the calls
/// the apps made to their backends, and the cross-account check.
struct AccountRoutes: AdminResource {
    unowned let api: AdminService

    func addRoutes(to r: inout AdminRouter) {
        r.add("GET", "/api/v1/apps/{bundleId}/backend", "the app's backend hooks") { _, p, _ in
            let bundle = try Self.bundleID(p)
            guard let backend = state.readWorld({ $0.backends[bundle] }) else { throw AdminError(404, "app \(bundle) has no backend") }
            return .json(200, backend.json)
        }
        r.add("PUT", "/api/v1/apps/{bundleId}/backend", "set the app's backend hooks") { req, p, _ in
            let bundle = try Self.bundleID(p)
            let backend: AppBackend
            let body = try req.jsonObject()
            // An empty body would set a backend that does nothing, in place of the one there.
            guard !body.isEmpty else {
                throw AdminError(
                    400,
                    "give the backend: any of \(AppBackend.fields.joined(separator: ", ")) (app-backend.md); to remove it, DELETE /api/v1/apps/\(bundle)/backend"
                )
            }
            do { backend = try AppBackend.parse(.object(body)) } catch let error as BackendConfigError {
                throw AdminError(400, error.description)
            }
            try? state.withWorld { world throws(RegistryError) in try world.setBackend(backend, bundleID: bundle) }
            host.log("admin: backend of \(bundle) set (\(backend.hooks.keys.sorted().map(\.rawValue).joined(separator: ", ")))")
            return .json(200, backend.json)
        }
        r.add("DELETE", "/api/v1/apps/{bundleId}/backend", "remove the app's backend hooks") { _, p, _ in
            let bundle = try Self.bundleID(p)
            guard state.withWorld({ $0.removeBackend(bundleID: bundle) }) else { throw AdminError(404, "app \(bundle) has no backend") }
            return .json(200, ["bundleId": .string(bundle), "deleted": true])
        }
        r.add("POST", "/api/v1/devices/{deviceId}/login", "log an account in on the device (bind; unbind first when switching)") { req, p, _ in
            let id = try Self.deviceID(p)
            let body = try req.jsonObject()
            try body.refuseUnknownFields(["userId"])
            guard let user = try Self.string(body, "userId") else { throw AdminError(400, "\"userId\" (a string) is required") }
            let previous = try deviceCall { world, _ throws(DeviceRequestError) in try world.login(deviceID: id, userID: user) }
            if previous != user {
                tellDevice(id, ["type": "loggedIn", "userId": .string(user), "previousUserId": previous.map(JSONValue.string) ?? .null])
            }
            host.log("admin: \(user) logged in on \(id)")
            return .json(200, ["deviceId": .string(id), "userId": .string(user), "previousUserId": previous.map(JSONValue.string) ?? .null])
        }
        r.add("POST", "/api/v1/devices/{deviceId}/logout", "log the account out (unbind)") { req, p, _ in
            try req.refuseBody()
            let id = try Self.deviceID(p)
            let previous = try deviceCall { world, _ throws(DeviceRequestError) in try world.logout(deviceID: id) }
            if let previous { tellDevice(id, ["type": "loggedOut", "userId": .null, "previousUserId": .string(previous)]) }
            return .json(200, ["deviceId": .string(id), "userId": .null, "previousUserId": previous.map(JSONValue.string) ?? .null])
        }
        r.add("GET", "/api/v1/devices/{deviceId}/backend-calls", "the device's apps' calls to their backends, oldest first") { req, p, http in
            let id = try Self.deviceID(p)
            guard state.readWorld({ $0.registry.devices[id] != nil }) else { throw AdminError(404, "no device with id '\(id)'") }
            return try backendCalls(deviceID: id, req, http)
        }
        r.add("GET", "/api/v1/backend-calls", "every device's backend calls, oldest first") { req, _, http in
            try backendCalls(deviceID: nil, req, http)
        }
        r.add("GET", "/api/v1/checks", "cross-account deliveries and pushes the device ignored (409 in strict mode while any exist)") { req, _, _ in
            try checks(req)
        }
    }

    private func backendCalls(deviceID: String?, _ req: HTTP1Request, _ http: HTTP1Connection) throws -> HTTP1ServerResponse? {
        try req.refuseUnknownQueryParameters(
            ["hook", "bundleId", "limit", "cursor"],
            hint: deviceID == nil ? " (one device's calls: GET /api/v1/devices/{deviceId}/backend-calls)" : "")
        let hook = req.query["hook"]
        if let hook, BackendHookKind(rawValue: hook) == nil {
            throw AdminError(400, "hook must be one of \(BackendHookKind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let list = deviceID == nil ? "backend-calls" : "device-backend-calls"
        let page = try PageRequest(req, list: list)
        let (calls, more) = host.backendCalls.calls(
            after: try page.number(list: list), limit: page.limit, deviceID: deviceID,
            hook: hook, bundleID: req.query["bundleId"])
        let next = more ? calls.last.map { PageRequest.encode(list: list, String($0.id)) } : nil
        return answerOffLoop(http) { .page("calls", calls.map(\.json), nextCursor: next) }
    }

    private func checks(_ req: HTTP1Request) throws(AdminError) -> HTTP1ServerResponse {
        try req.refuseUnknownQueryParameters(["strict"])
        // A misspelt value would turn a CI gate off without a word.
        if let text = req.query["strict"], !["true", "1", "false", "0"].contains(text) {
            throw AdminError(400, "strict must be true, 1, false or 0, not '\(text)'")
        }
        let (crossAccount, ignored, crossAccountTotal, ignoredTotal) = state.readWorld {
            ($0.crossAccountDeliveries, $0.ignoredPushes, $0.counters.crossAccountDeliveries, $0.counters.ignoredPushes)
        }
        let strict = api.settings.strictChecks || req.query["strict"] == "true" || req.query["strict"] == "1"
        var list: [(sequence: UInt64, json: JSONValue)] = crossAccount.map { ($0.sequence, Self.json($0)) }
        list += ignored.map { ($0.sequence, Self.json($0)) }
        // Oldest first, whatever the check.
        list.sort { $0.sequence < $1.sequence }
        let failed = crossAccountTotal > 0 || ignoredTotal > 0
        let body: JSONValue = .object(
            JSONObject([
                ("ok", .bool(!failed)), ("strict", .bool(strict)), ("crossAccountDeliveries", .int(Int64(crossAccountTotal))),
                ("ignoredPushes", .int(Int64(ignoredTotal))), ("failures", .array(list.map(\.json))),
            ]))
        return .json(strict && failed ? 409 : 200, body)
    }

    private static func json(_ f: CrossAccountDelivery) -> JSONValue {
        let who = f.userID.map { "\($0) was" } ?? "nobody was"
        let message = "a push for \(f.addressee) was delivered to \(f.deviceID) while \(who) logged in"
        return .object(
            JSONObject([
                ("check", "crossAccount"), ("apnsId", .string(f.apnsID)), ("sequence", .int(Int64(f.sequence))),
                ("deviceId", .string(f.deviceID)), ("bundleId", .string(f.bundleID)),
                ("userId", f.userID.map(JSONValue.string) ?? .null), ("addressee", .string(f.addressee)),
                ("at", .string(RFC3339.format(milliseconds: f.atMs))), ("message", .string(message)),
            ]))
    }

    private static func json(_ f: IgnoredPush) -> JSONValue {
        let message = "a \(f.pushType) push to \(f.deviceID) (\(f.bundleID)) was answered 200 but did nothing on the device — \(f.explanation)"
        return .object(
            JSONObject([
                ("check", "ignoredPush"), ("apnsId", .string(f.apnsID)), ("sequence", .int(Int64(f.sequence))),
                ("deviceId", .string(f.deviceID)), ("bundleId", .string(f.bundleID)), ("pushType", .string(f.pushType)),
                ("at", .string(RFC3339.format(milliseconds: f.atMs))), ("message", .string(message)),
            ]))
    }
}
