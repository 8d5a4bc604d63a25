import APNsCore
import HTTP1Server

/// Virtual and socket devices and the apps on them: create (one or a batch), list, change,
/// erase, restore, tap; install, change, uninstall, reinstall, rotate.
struct DeviceRoutes: AdminResource {
    unowned let api: AdminService

    func addRoutes(to r: inout AdminRouter) {
        r.add("GET", "/api/v1/devices", "list devices, a page at a time") { req, _, http in try listDevices(req, http) }
        r.add("POST", "/api/v1/devices", "create a virtual device with an app") { req, _, _ in try createDevice(req) }
        r.add("POST", "/api/v1/devices/batch", "create many virtual devices with the same app") { req, _, _ in try createDevices(req) }
        r.add("GET", "/api/v1/devices/{deviceId}", "one device") { _, p, _ in try getDevice(try Self.deviceID(p)) }
        r.add("PATCH", "/api/v1/devices/{deviceId}", "set online/offline, Low Power Mode, Focus, summary, ring switch, lock") { req, p, _ in
            try patchDevice(try Self.deviceID(p), req)
        }
        r.add("DELETE", "/api/v1/devices/{deviceId}", "remove a device") { _, p, _ in try deleteDevice(try Self.deviceID(p)) }
        r.add("POST", "/api/v1/devices/{deviceId}/erase", "erase all content and settings") { req, p, _ in
            try req.refuseBody()
            let id = try Self.deviceID(p)
            let activityMessages = try deviceCall { world, now throws(DeviceRequestError) in
                try world.refuseWhileDisconnected(deviceID: id, what: "the apps it has, installing them again")
                return try world.eraseDevice(id, nowMs: now)
            }
            // A connected device hears of each change as of its own request (the device
            // command keeps its list of apps from these, for its next hello).
            tellDevice(id, [["type": "erased"]] + activityMessages)
            return try getDevice(id)
        }
        r.add("POST", "/api/v1/devices/{deviceId}/restore", "restore another device's backup onto this one") { req, p, _ in
            let target = try Self.deviceID(p)
            let body = try req.jsonObject()
            try body.refuseUnknownFields(["fromDeviceId"])
            guard let source = try Self.string(body, "fromDeviceId") else {
                throw AdminError(400, "\"fromDeviceId\" is required")
            }
            guard DeviceRegistry.isValidDeviceID(source) else { throw AdminError(400, "\"fromDeviceId\": \(DeviceRegistry.deviceIDRule)") }
            let (entries, messages) = try deviceCall { world, now throws(DeviceRequestError) in
                try world.restoreBackup(from: source, to: target, nowMs: now)
            }
            let restored: JSONValue = [
                "type": "restored", "fromDeviceId": .string(source),
                "bundleIds": .array(Array(Set(entries.map(\.bundleID))).sorted().map(JSONValue.string)),
            ]
            tellDevice(target, messages.target + entries.map(World.registeredMessage) + messages.targetAfterRegistered + [restored])
            host.dispatch(messages.source)
            return .json(200, ["deviceId": .string(target), "fromDeviceId": .string(source), "tokens": .array(entries.map(AdminJSON.token))])
        }
        r.add("POST", "/api/v1/devices/{deviceId}/tap", "tap a notification on screen") { req, p, _ in
            let id = try Self.deviceID(p)
            let body = try req.jsonObject()
            try body.refuseUnknownFields(["apnsId"])
            guard let apnsID = try Self.string(body, "apnsId"), !apnsID.isEmpty else {
                throw AdminError(400, "\"apnsId\" is required: the apns-id of a notification on screen or in Notification Center")
            }
            let tapped = try deviceCall { world, now throws(DeviceRequestError) in try world.tap(deviceID: id, apnsID: apnsID, nowMs: now) }
            let answer = JSONObject([
                ("apnsId", .string(tapped.apnsID)), ("bundleId", .string(tapped.bundleID)),
                ("callbacks", .array(tapped.callbacks.map(JSONValue.string))), ("launched", .bool(tapped.launched)),
            ])
            // A connected device hears of it as of its own `tap` (the respond route does the same).
            tellDevice(id, .object(JSONObject([("type", "tapped")] + answer.members)))
            host.dispatch(tapped.frames)
            return .json(200, .object(answer))
        }
        r.add("POST", "/api/v1/devices/{deviceId}/notifications/{id}/respond", "the user acts on a notification") { req, p, _ in
            try respond(deviceID: try Self.deviceID(p), apnsID: p["id"] ?? "", req)
        }
        r.add("GET", "/api/v1/devices/{deviceId}/notification-center", "what the device shows: groups, badges, summary") { _, p, _ in
            let id = try Self.deviceID(p)
            let now = self.now
            guard let view = state.readWorld({ $0.notificationCenter(deviceID: id, nowMs: now) }) else {
                throw AdminError(404, "no device with id '\(id)'")
            }
            return .json(200, AdminJSON.notificationCenter(view))
        }
        r.add("POST", "/api/v1/devices/{deviceId}/apps", "install an app") { req, p, _ in
            try installApp(deviceID: try Self.deviceID(p), req)
        }
        r.add("PATCH", "/api/v1/devices/{deviceId}/apps/{bundleId}", "set permission, app state, background mode, notification setup") { req, p, _ in
            try patchApp(deviceID: try Self.deviceID(p), bundleID: try Self.bundleID(p), req)
        }
        r.add("DELETE", "/api/v1/devices/{deviceId}/apps/{bundleId}", "uninstall: later pushes get 410") { _, p, _ in
            try uninstall(deviceID: try Self.deviceID(p), bundleID: try Self.bundleID(p))
        }
        r.add("POST", "/api/v1/devices/{deviceId}/apps/{bundleId}/reinstall", "uninstall and install again: new token") { req, p, _ in
            try req.refuseBody()
            let (id, bundle) = (try Self.deviceID(p), try Self.bundleID(p))
            let (entries, messages) = try deviceCall { world, now throws(DeviceRequestError) in
                try world.reinstallApp(deviceID: id, bundleID: bundle, nowMs: now)
            }
            tellDevice(id, messages)
            return .json(200, ["tokens": .array(entries.map(AdminJSON.token))])
        }
        r.add("POST", "/api/v1/devices/{deviceId}/apps/{bundleId}/rotate", "APNs replaces the app's tokens") { req, p, _ in
            try req.refuseBody()
            let (id, bundle) = (try Self.deviceID(p), try Self.bundleID(p))
            let entries = try deviceCall { world, now throws(DeviceRequestError) in
                try world.rotateTokens(deviceID: id, bundleID: bundle, nowMs: now)
            }
            tellDevice(id, entries.map(World.registeredMessage))
            return .json(200, ["tokens": .array(entries.map(AdminJSON.token))])
        }
    }

    /// Oldest first (creation time, then id). Under the lock only the page's devices are
    /// copied, from the registry's ordered index; their JSON is made after it is released.
    private func listDevices(_ request: HTTP1Request, _ http: HTTP1Connection) throws -> HTTP1ServerResponse? {
        try keyedPage(request, http, list: "devices", { $0.registry.devicesPage(after: $1, limit: $2) }, json: AdminJSON.device)
    }

    private func getDevice(_ id: String) throws -> HTTP1ServerResponse {
        let now = self.now
        let (found, owner, wakes) = state.readWorld { world in
            let device = world.registry.devices[id]
            let wakes = (device?.apps.keys).map { bundles in
                Dictionary(uniqueKeysWithValues: bundles.map { ($0, world.backgroundWakesLeft(deviceID: id, bundleID: $0, nowMs: now)) })
            }
            return (device, world.owner(of: id), wakes ?? [:])
        }
        guard let device = found, case .object(var json) = AdminJSON.device(device) else { throw AdminError(404, "no device with id '\(id)'") }
        // Each app's background budget as it stands (only here: a list would read every budget).
        if case .array(let apps) = json["apps"] ?? .null {
            json["apps"] = .array(
                apps.map { app in
                    guard case .object(var fields) = app, let bundle = fields["bundleId"]?.stringValue, let left = wakes[bundle] else { return app }
                    fields["backgroundWakesLeft"] = .int(Int64(left))
                    return .object(fields)
                })
        }
        // Several instances (`--redis`): the one that decides this device's deliveries.
        if let owner, owner > 0 { json["ownerInstance"] = .int(Int64(owner)) }
        return .json(200, .object(json))
    }

    private func deleteDevice(_ id: String) throws -> HTTP1ServerResponse {
        let now = self.now
        do {
            host.dispatch(try state.withWorld { world throws(RegistryError) in try world.removeDevice(id, nowMs: now) })
        } catch {
            throw AdminError(Self.status(for: error), error.description)
        }
        return .json(200, ["deviceId": .string(id), "deleted": true])
    }

    private func patchDevice(_ id: String, _ request: HTTP1Request) throws -> HTTP1ServerResponse {
        let body = try request.jsonObject()
        try body.refuseUnknownFields(["online", "lowPowerMode"] + DeviceAttention.fields)
        let online = try Self.bool(body, "online")
        let lowPower = try Self.bool(body, "lowPowerMode")
        let switches = DeviceAttention.mentions(body)
        guard online != nil || lowPower != nil || switches else {
            throw AdminError(400, "give any of \"online\", \"lowPowerMode\", \"focus\", \"scheduledSummary\", \"muted\", \"locked\"")
        }
        let frames = try deviceCall { world, now throws(DeviceRequestError) in
            if lowPower != nil { try world.refuseWhileDisconnected(deviceID: id, what: "its Low Power Mode") }
            // The switches first: a refused one changes nothing else.
            if switches { _ = try world.changeAttention(deviceID: id, body) }
            return try world.setPresence(deviceID: id, lowPowerMode: lowPower, online: online, nowMs: now)
        }
        host.dispatch(frames)
        if lowPower != nil || switches, let device = state.readWorld({ $0.registry.devices[id] }) {
            // As its own `device` request would be answered: the device command keeps it for its
            // next hello (a reconnect would otherwise undo the change).
            tellDevice(id, device.updatedMessage)
        }
        return try getDevice(id)
    }

    private func createDevice(_ request: HTTP1Request) throws -> HTTP1ServerResponse {
        let body = try request.jsonObject()
        let app = try Self.appRequest(body, also: ["deviceId"])
        var deviceID: String?
        if let value = body["deviceId"] {
            guard let text = value.stringValue, DeviceRegistry.isValidDeviceID(text) else {
                throw AdminError(400, "\"deviceId\": \(DeviceRegistry.deviceIDRule)")
            }
            deviceID = text
        }
        let now = self.now
        let entry: TokenEntry
        do {
            entry = try state.withWorld { world throws(RegistryError) in
                try world.createVirtualDevice(id: deviceID, app: app.registration, fixedToken: app.token, nowMs: now)
            }
        } catch {
            throw AdminError(Self.status(for: error), error.description)
        }
        host.log("admin: virtual device \(entry.deviceID) with \(entry.bundleID) (\(entry.environment.rawValue)) token \(entry.token)")
        return .json(201, Self.created(entry))
    }

    /// `POST /api/v1/devices/batch`: many virtual devices in one call (load tests).
    private func createDevices(_ request: HTTP1Request) throws -> HTTP1ServerResponse {
        let body = try request.jsonObject()
        guard let count = body["count"]?.intValue, (1...Int64(World.maxBatchDevices)).contains(count) else {
            throw AdminError(400, "\"count\" must be a whole number from 1 to \(World.maxBatchDevices) (call again for more)")
        }
        if body["token"] != nil { throw AdminError(400, "\"token\" cannot be pinned for a batch") }
        if body["deviceId"] != nil { throw AdminError(400, "a batch takes \"idPrefix\" (ids PREFIX1…PREFIXN), not \"deviceId\"") }
        var prefix: String?
        if let value = body["idPrefix"] {
            guard let text = value.stringValue, DeviceRegistry.isValidDeviceID(text + String(count)) else {
                throw AdminError(400, "\"idPrefix\": with the number after it, \(DeviceRegistry.deviceIDRule)")
            }
            prefix = text
        }
        let app = try Self.appRequest(body, also: ["count", "idPrefix"])
        let now = self.now
        let entries: [TokenEntry]
        do {
            entries = try state.withWorld { world throws(RegistryError) in
                try world.addVirtualDevices(count: Int(count), app: app.registration, kind: app.kind, idPrefix: prefix, nowMs: now)
            }
        } catch {
            throw AdminError(Self.status(for: error), error.description)
        }
        host.log("admin: \(entries.count) virtual devices with \(app.bundleID) (\(app.environment.rawValue))")
        // Built as bytes directly: 100,000 devices are about 11 MB of JSON.
        var out: [UInt8] = []
        out.reserveCapacity(entries.count * (entries.first.map { $0.token.utf8.count + $0.deviceID.utf8.count + 30 } ?? 0) + 64)
        out.append(contentsOf: #"{"bundleId":"#.utf8)
        JSONValue.string(app.bundleID).append(to: &out)
        out.append(contentsOf: #","environment":"#.utf8)
        JSONValue.string(app.environment.rawValue).append(to: &out)
        out.append(contentsOf: #","devices":["#.utf8)
        for (index, entry) in entries.enumerated() {
            if index > 0 { out.append(0x2C) }
            out.append(contentsOf: #"{"deviceId":"#.utf8)
            JSONValue.string(entry.deviceID).append(to: &out)
            out.append(contentsOf: #","token":""#.utf8)
            out.append(contentsOf: entry.token.utf8)
            out.append(contentsOf: #""}"#.utf8)
        }
        out.append(contentsOf: "]}".utf8)
        out.append(0x0A)
        return HTTP1ServerResponse(status: 201, headers: [("Content-Type", "application/json")], body: out)
    }

    private func installApp(deviceID: String, _ request: HTTP1Request) throws -> HTTP1ServerResponse {
        let body = try request.jsonObject()
        // The body of a device creation is taken as it is; its device must be this one.
        if let named = try Self.string(body, "deviceId"), named != deviceID {
            throw AdminError(400, "\"deviceId\" is \(named) but the path names device \(deviceID); leave it out")
        }
        let app = try Self.appRequest(body, also: ["deviceId"])
        let now = self.now
        let entry: TokenEntry
        do {
            entry = try state.withWorld { world throws(RegistryError) in
                try world.installApp(
                    deviceID: deviceID, bundleID: app.bundleID, environment: app.environment, kinds: [app.kind],
                    fixedToken: app.token, settings: app.settings, nowMs: now)[0]
            }
        } catch {
            throw AdminError(Self.status(for: error), error.description)
        }
        tellDevice(deviceID, [World.registeredMessage(entry)])
        return .json(201, Self.created(entry))
    }

    private func patchApp(deviceID: String, bundleID: String, _ request: HTTP1Request) throws -> HTTP1ServerResponse {
        let body = try request.jsonObject()
        try body.refuseUnknownFields(["appState", "authorization", "backgroundMode", "badge"] + NotificationSetup.fields)
        let appState = try Self.choice(body, "appState", AppState.self)
        let authorization = try Self.choice(body, "authorization", Authorization.self)
        let backgroundMode = try Self.bool(body, "backgroundMode")
        let setup = NotificationSetup.mentions(body) || body["badge"] != nil
        guard appState != nil || authorization != nil || backgroundMode != nil || setup else {
            throw AdminError(
                400,
                "give any of \"appState\", \"authorization\", \"backgroundMode\", \"badge\", "
                    + NotificationSetup.fieldList)
        }
        let (app, frames) = try deviceCall { world, now throws(DeviceRequestError) in
            if appState != nil || authorization != nil || backgroundMode != nil || NotificationSetup.mentions(body) {
                try world.refuseWhileDisconnected(deviceID: deviceID, what: "its apps' settings")
            }
            // The setup first: a refused one changes nothing else.
            if setup { _ = try world.changeNotifications(deviceID: deviceID, bundleID: bundleID, body) }
            let frames = try world.updateApp(
                deviceID: deviceID, bundleID: bundleID, appState: appState, authorization: authorization,
                backgroundMode: backgroundMode, nowMs: now
            ).1
            guard let app = world.registry.devices[deviceID]?.apps[bundleID] else {
                throw DeviceRequestError(RegistryError.appNotInstalled(deviceID: deviceID, bundleID: bundleID))
            }
            return (app, frames)
        }
        host.dispatch(frames)
        let message = World.appUpdatedMessage(bundleID: bundleID, app.settings, setupOf: setup ? app : nil)
        // Tell a connected device what changed, as its own `app` request would be answered.
        tellDevice(deviceID, .object(message))
        return .json(200, .object(JSONObject([("deviceId", .string(deviceID))] + message.members.filter { $0.key != "type" })))
    }

    private func respond(deviceID: String, apnsID: String, _ request: HTTP1Request) throws -> HTTP1ServerResponse {
        let body = try request.jsonObject()
        try body.refuseUnknownFields(["action", "text"])
        guard let action = try Self.string(body, "action") else {
            throw AdminError(400, "\"action\" is required: \"default\" (a tap), \"dismiss\", or one of the notification's action identifiers")
        }
        let text = try Self.string(body, "text")
        let answer = try deviceCall { world, now throws(DeviceRequestError) in
            try world.respond(deviceID: deviceID, apnsID: apnsID, action: action, text: text, nowMs: now)
        }
        let fields = answer.effect.json(apnsID: answer.apnsID, bundleID: answer.bundleID, launched: answer.launched)
        // The answer first, then what it caused (the app's new state, pushes it released), as
        // the device's own `respond` is answered.
        tellDevice(deviceID, .object(JSONObject([("type", "responded")] + fields.members)))
        host.dispatch(answer.frames)
        return .json(200, .object(JSONObject([("deviceId", .string(deviceID))] + fields.members)))
    }

    private func uninstall(deviceID: String, bundleID: String) throws -> HTTP1ServerResponse {
        let (invalidAt, tokens, activityMessages) = try deviceCall { world, now throws(DeviceRequestError) in
            try world.refuseWhileDisconnected(deviceID: deviceID, what: "the apps it has, installing \(bundleID) again")
            return try world.uninstallApp(deviceID: deviceID, bundleID: bundleID, nowMs: now)
        }
        host.log("admin: uninstalled \(bundleID) from \(deviceID)")
        tellDevice(deviceID, [World.uninstalledMessage(bundleID: bundleID, invalidAtMs: invalidAt, tokens: tokens)] + activityMessages)
        return .json(
            200,
            [
                "deviceId": .string(deviceID), "bundleId": .string(bundleID),
                "unregisteredAt": .int(invalidAt), "tokens": .array(tokens.map(AdminJSON.token)),
            ])
    }
}
