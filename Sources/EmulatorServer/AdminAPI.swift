import APNsCore
import Foundation
import Networking
import OpenSSLCrypto

/// The admin/inspection HTTP API (docs/admin-api.md; docs/openapi.json). Paths and JSON
/// field names are a public contract.
final class AdminAPI: @unchecked Sendable {
    /// Unowned: the emulator owns its admin server, which owns this.
    unowned let emulator: Emulator
    let events: EventHub
    private(set) var router = AdminRouter()

    init(emulator: Emulator, events: EventHub) {
        self.emulator = emulator
        self.events = events
        buildRoutes()
    }

    var state: EmulatorState { emulator.state }
    var clock: any EmulatorClock { emulator.clock }
    var now: Int64 { clock.nowMilliseconds() }

    /// With `--redis`, changes wait for Redis (the lease, the write): they run here, one at
    /// a time, so the admin loop keeps answering reads from this instance's copy meanwhile.
    private let sharedChanges = DispatchQueue(label: "apns-admin-shared-changes")

    func handle(_ request: AdminRequest, _ http: HTTP1Connection) {
        if state.coordinator != nil, request.method != "GET", request.method != "HEAD" {
            let loop = http.connection.loop
            let confined = ConfinedConnection(http: http)
            sharedChanges.async { [self] in
                let (response, ran) = answer(request, confined.http)
                loop.execute { [self] in deliver(response, to: request, changed: ran, confined.http) }
            }
            return
        }
        let (response, ran) = answer(request, http)
        deliver(response, to: request, changed: ran, http)
    }

    /// The connection taken to the change queue and back. Only its own loop uses it: change
    /// routes never touch the connection (only GET routes stream or wait on it).
    private struct ConfinedConnection: @unchecked Sendable { let http: HTTP1Connection }

    /// The route's answer (nil when the route answers by itself: streams, long polls), and
    /// whether its handler ran (only then may a change have been made).
    private func answer(_ request: AdminRequest, _ http: HTTP1Connection) -> (AdminResponse?, ran: Bool) {
        var ran = false
        do {
            switch router.match(method: request.method, path: request.path) {
            case .found(let route, let parameters):
                if request.method != "GET", request.method != "HEAD", let reason = state.unavailableReason {
                    // --redis: a change now would be this instance's alone (and lost at the
                    // reload); --state-dir: it could not be kept.
                    throw AdminError(503, "the emulator cannot take changes now: \(reason)")
                }
                ran = true
                return (try route.handler(request, parameters, http), true)
            case .wrongMethod(let allowed):
                let unique = Array(Set(allowed)).sorted()
                var error = AdminResponse.error(405, "\(request.method) is not allowed on \(request.path); use \(unique.joined(separator: " or "))")
                error.headers.append(("Allow", unique.joined(separator: ", ")))
                return (error, false)
            case .notFound:
                throw AdminError(404, "no such endpoint: \(request.path); see /api/v1/openapi.json")
            }
        } catch let error as AdminError {
            return (.error(error.status, error.message), ran)
        } catch {
            return (.error(500, "\(error)"), ran)
        }
    }

    /// Sends the answer on the connection's loop; with `--state-dir` an answer to a change
    /// waits until the change (and everything before it) is committed.
    private func deliver(_ response: AdminResponse?, to request: AdminRequest, changed: Bool, _ http: HTTP1Connection) {
        guard let response else { return }
        if changed, request.method != "GET", let durability = emulator.durability,
            let ticket = durability.uncommittedTicket(everything: true)
        {
            durability.afterCommit(ticket, on: http.connection.loop) { committed in
                guard committed else {
                    let reason = durability.unavailableReason ?? "the state directory could not commit it"
                    http.respond(.error(503, "the change was made in memory but is not in the state directory: \(reason). It is written once the directory takes writes again, unless the emulator stops first"))
                    return
                }
                http.respond(response)
            }
            return
        }
        http.respond(response)
    }

    // MARK: Routes

    private func buildRoutes() {
        var r = AdminRouter()
        r.add("GET", "/livez", "liveness", open: true) { _, _, _ in .json(200, ["status": "live"]) }
        r.add("GET", "/readyz", "readiness", open: true) { [unowned self] _, _, _ in
            if let reason = state.unavailableReason { return .json(503, ["status": "unavailable", "reason": .string(reason)]) }
            return emulator.isReady ? .json(200, ["status": "ready"]) : .json(503, ["status": "starting"])
        }
        r.add("GET", "/metrics", "Prometheus metrics") { [unowned self] _, _, _ in
            AdminResponse(status: 200, headers: [("Content-Type", "text/plain; version=0.0.4")],
                          body: Array(emulator.metricsText().utf8))
        }
        r.add("GET", "/", "web UI", open: true) { _, _, _ in UIAssets.response(for: "index.html") }
        r.add("GET", "/ui/{file}", "web UI assets", open: true) { _, p, _ in UIAssets.response(for: p["file"] ?? "") }
        r.add("GET", "/api/v1/openapi.json", "this API as OpenAPI 3") { _, _, _ in
            AdminResponse(status: 200, headers: [("Content-Type", "application/json")], body: Array(UIAssets.openAPI.utf8))
        }
        r.add("GET", "/api/v1/info", "version, uptime, addresses, counts") { [unowned self] _, _, _ in .json(200, info()) }
        r.add("POST", "/api/v1/reset", "back to the configured start state") { [unowned self] _, _, _ in
            Self.dispose(state.reset())
            emulator.backendCalls.reset()
            emulator.offsetClock.resetOffset()
            emulator.providers.resetCounters()
            emulator.adminMetrics.reset()
            emulator.devices.reattachAll()
            emulator.log("admin: reset to the configured start state")
            return .json(200, ["reset": true])
        }
        r.add("GET", "/api/v1/events", "server-sent events: every record as it happens") { [unowned self] req, _, http in
            try eventStream(req, http)
        }

        // Notifications
        r.add("GET", "/api/v1/notifications", "list, newest first, with filters") { [unowned self] req, _, http in
            try listNotifications(req, http)
        }
        r.add("DELETE", "/api/v1/notifications", "delete records matching the filters") { [unowned self] req, _, _ in
            let query = try Self.query(req)
            let deleted = state.withWorld { world in world.deleteRecords(where: query.matches) }
            return .json(200, ["deleted": .int(Int64(deleted))])
        }
        r.add("GET", "/api/v1/notifications/latest", "the newest record matching the filters") { [unowned self] req, _, _ in
            let query = try Self.query(req)
            guard let record = state.readWorld({ $0.records.newestFirst(limit: 1, where: query.matches).first }) else {
                throw AdminError(404, "no notification matches")
            }
            return .json(200, AdminJSON.record(record))
        }
        r.add("GET", "/api/v1/notifications/wait", "long-poll for the first matching record") { [unowned self] req, _, http in
            try wait(req, http)
        }
        r.add("GET", "/api/v1/notifications/{id}", "one record by apns-id or apns-unique-id") { [unowned self] _, p, _ in
            let id = p["id"] ?? ""
            let record = state.readWorld { world in
                world.records.newestFirst(limit: 1) { $0.apnsID.caseInsensitiveCompare(id) == .orderedSame
                    || $0.uniqueID?.caseInsensitiveCompare(id) == .orderedSame }.first
            }
            guard let record else { throw AdminError(404, "no notification with apns-id or apns-unique-id \(id)") }
            return .json(200, AdminJSON.record(record))
        }

        // Devices
        r.add("GET", "/api/v1/devices", "list devices, a page at a time") { [unowned self] req, _, http in try listDevices(req, http) }
        r.add("POST", "/api/v1/devices", "create a virtual device with an app") { [unowned self] req, _, _ in
            try createDevice(req)
        }
        r.add("GET", "/api/v1/devices/{deviceId}", "one device") { [unowned self] _, p, _ in try getDevice(try Self.deviceID(p)) }
        r.add("PATCH", "/api/v1/devices/{deviceId}", "set online/offline and Low Power Mode") { [unowned self] req, p, _ in
            try patchDevice(try Self.deviceID(p), req)
        }
        r.add("DELETE", "/api/v1/devices/{deviceId}", "remove a device") { [unowned self] _, p, _ in try deleteDevice(try Self.deviceID(p)) }
        r.add("POST", "/api/v1/devices/{deviceId}/erase", "erase all content and settings") { [unowned self] _, p, _ in
            let id = try Self.deviceID(p)
            try deviceCall { world, now throws(DeviceRequestError) in try world.eraseDevice(id, nowMs: now) }
            return try getDevice(id)
        }
        r.add("POST", "/api/v1/devices/{deviceId}/restore", "restore another device's backup onto this one") { [unowned self] req, p, _ in
            let target = try Self.deviceID(p)
            guard let source = try req.jsonObject()["fromDeviceId"]?.stringValue else {
                throw AdminError(400, "\"fromDeviceId\" is required")
            }
            guard DeviceRegistry.isValidDeviceID(source) else { throw AdminError(400, "\"fromDeviceId\": \(DeviceRegistry.deviceIDRule)") }
            let entries = try deviceCall { world, now throws(DeviceRequestError) in
                try world.restoreBackup(from: source, to: target, nowMs: now)
            }
            return .json(200, ["deviceId": .string(target), "fromDeviceId": .string(source), "tokens": .array(entries.map(AdminJSON.token))])
        }
        r.add("POST", "/api/v1/devices/{deviceId}/tap", "tap a notification on screen") { [unowned self] req, p, _ in
            let id = try Self.deviceID(p)
            guard let apnsID = try req.jsonObject()["apnsId"]?.stringValue else { throw AdminError(400, "\"apnsId\" is required") }
            let tapped = try deviceCall { world, now throws(DeviceRequestError) in try world.tap(deviceID: id, apnsID: apnsID, nowMs: now) }
            emulator.devices.dispatch(tapped.frames)
            return .json(200, ["apnsId": .string(apnsID), "bundleId": .string(tapped.bundleID),
                               "callbacks": .array(tapped.callbacks.map(JSONValue.string)), "launched": .bool(tapped.launched)])
        }
        r.add("POST", "/api/v1/devices/{deviceId}/apps", "install an app") { [unowned self] req, p, _ in
            try installApp(deviceID: try Self.deviceID(p), req)
        }
        r.add("PATCH", "/api/v1/devices/{deviceId}/apps/{bundleId}", "set permission, app state, background mode") { [unowned self] req, p, _ in
            try patchApp(deviceID: try Self.deviceID(p), bundleID: try Self.bundleID(p), req)
        }
        r.add("DELETE", "/api/v1/devices/{deviceId}/apps/{bundleId}", "uninstall: later pushes get 410") { [unowned self] _, p, _ in
            try uninstall(deviceID: try Self.deviceID(p), bundleID: try Self.bundleID(p))
        }
        r.add("POST", "/api/v1/devices/{deviceId}/apps/{bundleId}/reinstall", "uninstall and install again: new token") { [unowned self] _, p, _ in
            try reinstall(deviceID: try Self.deviceID(p), bundleID: try Self.bundleID(p))
        }
        r.add("POST", "/api/v1/devices/{deviceId}/apps/{bundleId}/rotate", "APNs replaces the app's tokens") { [unowned self] _, p, _ in
            let (id, bundle) = (try Self.deviceID(p), try Self.bundleID(p))
            let entries = try deviceCall { world, now throws(DeviceRequestError) in
                try world.rotateTokens(deviceID: id, bundleID: bundle, nowMs: now)
            }
            return .json(200, ["tokens": .array(entries.map(AdminJSON.token))])
        }

        // Tokens
        r.add("GET", "/api/v1/tokens", "every token issued, with its state, a page at a time") { [unowned self] req, _, http in
            try listTokens(req, http)
        }
        r.add("GET", "/api/v1/tokens/{token}", "one token") { [unowned self] _, p, _ in
            let token = (p["token"] ?? "").lowercased()
            guard let entry = state.readWorld({ $0.registry.token(token) }) else { throw AdminError(404, "no token \(token)") }
            return .json(200, AdminJSON.token(entry))
        }
        r.add("PUT", "/api/v1/tokens/{token}/state", "set a token's state directly") { [unowned self] req, p, _ in
            try setTokenState((p["token"] ?? "").lowercased(), req)
        }

        // Keys and apps
        r.add("GET", "/api/v1/keys", "provider keys") { [unowned self] req, _, http in try listKeys(req, http) }
        r.add("POST", "/api/v1/keys", "add a provider key") { [unowned self] req, _, _ in try addKey(req) }
        r.add("DELETE", "/api/v1/keys/{keyId}", "remove a provider key") { [unowned self] _, p, _ in
            let id = p["keyId"]!
            guard state.withWorld({ $0.credentials.removeKey(id: id) }) != nil else { throw AdminError(404, "no key \(id)") }
            return .json(200, ["keyId": .string(id), "deleted": true])
        }
        r.add("GET", "/api/v1/apps", "which team owns which bundle") { [unowned self] req, _, http in try listApps(req, http) }
        r.add("POST", "/api/v1/apps", "add an app to a team") { [unowned self] req, _, _ in try addApp(req) }
        r.add("DELETE", "/api/v1/apps/{bundleId}", "remove an app") { [unowned self] _, p, _ in
            let bundle = try Self.bundleID(p)
            guard state.withWorld({ $0.credentials.removeApp(bundleID: bundle) }) != nil else {
                throw AdminError(404, "no app \(bundle)")
            }
            return .json(200, ["bundleId": .string(bundle), "deleted": true])
        }

        // Faults
        r.add("GET", "/api/v1/faults", "fault rules in order") { [unowned self] req, _, http in try listFaults(req, http) }
        r.add("POST", "/api/v1/faults", "add a fault rule") { [unowned self] req, _, _ in
            var rule = try FaultJSON.parse(try req.jsonObject())
            let position = req.query["position"].flatMap(Int.init)
            rule.id = state.withWorld { $0.faults.add(rule, at: position) }
            emulator.log("admin: fault rule \(rule.id) added")
            return .json(201, FaultJSON.rule(rule))
        }
        r.add("DELETE", "/api/v1/faults", "remove every fault rule") { [unowned self] _, _, _ in
            state.withWorld { $0.faults.removeAll() }
            return .json(200, ["deleted": true])
        }
        r.add("GET", "/api/v1/faults/{id}", "one fault rule") { [unowned self] _, p, _ in
            let id = p["id"]!
            guard let rule = state.readWorld({ $0.faults.rules.first { $0.id == id } }) else { throw AdminError(404, "no fault rule \(id)") }
            return .json(200, FaultJSON.rule(rule))
        }
        r.add("DELETE", "/api/v1/faults/{id}", "remove a fault rule") { [unowned self] _, p, _ in
            let id = p["id"]!
            guard state.withWorld({ $0.faults.remove(id: id) }) else { throw AdminError(404, "no fault rule \(id)") }
            return .json(200, ["id": .string(id), "deleted": true])
        }
        addAccountRoutes(&r)
        addBatchRoutes(&r)
        addStatsRoutes(&r)
        router = r
    }

    // MARK: Helpers

    /// Frees the world a reset replaced off the event loops (1,000,000 devices take seconds),
    /// 5,000 devices at a time with a pause between, then gives its pages back to the OS, which
    /// glibc would otherwise keep (a reset used to leave the process at 2.1 GB).
    static func dispose(_ replaced: ReplacedWorld) {
        let thread = Thread {
            // The lowest priority: throwing the old world away must not take a core from a loop.
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)  // 0: this thread, on Linux
            while replaced.freeSome(5000) { usleep(1000) }
            replaced.free()
            Memory.returnFreedPages()
        }
        thread.start()
    }

    /// The `{deviceId}` of a path, refused (400) unless it is a valid id.
    static func bundleID(_ parameters: [String: String]) throws -> String {
        let bundle = parameters["bundleId"] ?? ""
        guard DeviceRegistry.isValidBundleID(bundle) else { throw AdminError(400, RegistryError.invalidBundleID(bundle).description) }
        return bundle
    }

    static func deviceID(_ parameters: [String: String]) throws -> String {
        let id = parameters["deviceId"] ?? ""
        guard DeviceRegistry.isValidDeviceID(id) else { throw AdminError(400, "the device id in the path: \(DeviceRegistry.deviceIDRule)") }
        return id
    }

    static func query(_ request: AdminRequest) throws -> NotificationQuery {
        do { return try NotificationQuery.parse(request.query) } catch { throw AdminError(400, error.description) }
    }

    /// Runs a device operation; its frames go to the device's connection.
    func deviceCall<T: Sendable>(_ body: (inout World, Int64) throws(DeviceRequestError) -> T) throws -> T {
        let now = self.now
        do {
            return try state.withWorld { world throws(DeviceRequestError) in try body(&world, now) }
        } catch {
            throw AdminError(error.isNotFound ? 404 : error.code == DeviceRequestError.tooManyApps ? 409 : 400, error.message)
        }
    }

    private func info() -> JSONValue {
        let (records, evicted, devices, tokens, keys, apps, faults, pending) = state.readWorld { w in
            (w.records.count, w.records.evicted, w.registry.devices.count, w.registry.tokens.count, w.credentials.keys.count,
             w.credentials.apps.count, w.faults.rules.count, w.delivery.pendingCount)
        }
        return [
            "version": .string(Emulator.version),
            "startedAt": .string(RFC3339.format(milliseconds: emulator.startedAtMs)),
            "uptimeSeconds": .int((now - emulator.startedAtMs) / 1000),
            "addresses": emulator.addresses.json,
            "counts": [
                "notifications": .int(Int64(records)), "notificationsDropped": .int(Int64(evicted)),
                "devices": .int(Int64(devices)), "tokens": .int(Int64(tokens)), "keys": .int(Int64(keys)),
                "apps": .int(Int64(apps)), "faultRules": .int(Int64(faults)), "pendingDeliveries": .int(Int64(pending)),
                "providerConnections": .int(Int64(emulator.providers.openConnections.load(ordering: .relaxed))),
                "deviceConnections": .int(Int64(emulator.devices.connectionCount)),
            ],
        ]
    }

    // MARK: Notifications

    /// Newest first. `limit` keeps its old meaning (≥ 0, no maximum but the journal's size and
    /// the byte budget below); `cursor` continues below the last record of the previous page,
    /// by sequence number, so records added meanwhile do not shift it.
    private func listNotifications(_ request: AdminRequest, _ http: HTTP1Connection) throws -> AdminResponse? {
        var limit = 1000
        if let text = request.query["limit"] {
            guard let value = Int(text), value >= 0 else { throw AdminError(400, "limit must be a whole number ≥ 0, not '\(text)'") }
            limit = value
        }
        var before: UInt64?
        if let cursor = request.query["cursor"], !cursor.isEmpty {
            guard let sequence = UInt64(try PageRequest.decode(cursor, list: "notifications")) else {
                throw AdminError(400, "cursor is not a \"nextCursor\" of notifications; start again without one")
            }
            before = sequence
        }
        let query = try Self.query(request)
        // One more than asked tells whether another page follows.
        var records = newestRecords(limit == Int.max ? limit : limit + 1, before: before, query)
        let more = records.count > limit
        if more { records.removeLast() }
        // A response is bounded in bytes too: records can be large (4 KB payloads, full
        // header lists), and `limit` can ask for the whole journal.
        var budget = Self.listByteBudget
        let fitting = records.prefix { record in
            budget -= record.accountedBytes
            return budget >= 0
        }.count
        let truncated = fitting < records.count
        records.removeLast(records.count - max(fitting, min(1, records.count)))
        let next = (more || truncated) ? records.last.map { PageRequest.encode(list: "notifications", String($0.sequence)) } : nil
        let kept = records
        return answerOffLoop(http) {
            .page("notifications", kept.map(AdminJSON.record), nextCursor: next, extra: truncated ? [("truncated", true)] : [])
        }
    }

    /// Records looked at per hold of the state lock: under a millisecond, so a filter that
    /// matches little in a large journal does not hold it for the whole scan.
    static let recordsPerLock = 5000

    /// Up to `count` records matching `query`, newest first, below `before`: scanned
    /// `recordsPerLock` at a time.
    private func newestRecords(_ count: Int, before: UInt64?, _ query: NotificationQuery) -> [NotificationRecord] {
        var records: [NotificationRecord] = []
        var position = before
        while records.count < count {
            let (slice, resume) = state.readWorld {
                $0.records.scanNewestFirst(limit: count - records.count, before: position, scanning: Self.recordsPerLock,
                                           where: query.matches)
            }
            records += slice
            guard let resume else { break }
            position = resume
        }
        return records
    }

    /// Record bytes one list response may carry (its JSON is up to about twice that).
    static let listByteBudget = 16 << 20

    /// `GET /api/v1/notifications/wait`: the first record matching the filters — among those
    /// received since `since` when given, else the next to arrive — or 408 after `timeout`.
    private func wait(_ request: AdminRequest, _ http: HTTP1Connection) throws -> AdminResponse? {
        let query = try Self.query(request)
        var timeout = 30.0
        if let text = request.query["timeout"] {
            guard let value = Double(text), value >= 0, value <= 600 else {
                throw AdminError(400, "timeout must be a number of seconds from 0 to 600, not '\(text)'")
            }
            timeout = value
        }
        let loop = http.connection.loop
        var answered = false
        var waiterID: UInt64 = 0
        var timer: TimerID?
        let finish: (AdminResponse) -> Void = { [events] response in
            guard !answered else { return }
            answered = true
            events.remove(waiter: waiterID)
            if let timer { loop.cancel(timer) }
            http.respond(response)
        }
        // Listen first, then look at what is already there, so nothing slips between.
        let limit = emulator.configuration.admin.maxWaiters
        guard let id = events.addWaiter(query: query, loop: loop, limit: limit, deliver: { record in
            finish(.json(200, AdminJSON.record(record)))
        }) else {
            throw AdminError(503, "\(limit) long polls are waiting already (--admin-max-waiters); try again later")
        }
        waiterID = id
        if query.sinceMs != nil {
            let existing = state.readWorld { $0.records.oldest(where: query.matches) }
            if let existing {
                finish(.json(200, AdminJSON.record(existing)))
                return nil
            }
        }
        timer = loop.schedule(afterMilliseconds: Int64(timeout * 1000)) {
            finish(.error(408, "no notification matched within \(timeout) seconds"))
        }
        http.whenClosed { finish(.error(499, "client went away")) }
        return nil
    }

    /// `GET /api/v1/events`: server-sent events, one `notification` event per record added or
    /// changed (the record's JSON), `reset` after a reset, and a comment every 15 s. A client
    /// that falls `EventStreamClient.maxQueuedBytes` behind is disconnected.
    private func eventStream(_ request: AdminRequest, _ http: HTTP1Connection) throws -> AdminResponse? {
        let query = try Self.query(request)
        guard http.startStream(contentType: "text/event-stream") else { return nil }
        http.sendStreamChunk(Array(": apns-emulator events\nretry: 1000\n\n".utf8))
        let metrics = emulator.adminMetrics
        let peer = http.connection.peer
        let client = EventStreamClient(id: events.newID(), query: query, http: http) { [weak self] _ in
            metrics.streamsDropped.add()
            self?.emulator.log("admin: event stream client \(peer) dropped: it fell \(EventStreamClient.maxQueuedBytes >> 20) MiB behind")
        }
        http.eventStream = client
        events.add(client)
        let loop = http.connection.loop
        func scheduleKeepAlive() {
            loop.schedule(afterMilliseconds: 15_000) { [weak http, weak client] in
                guard let http, !http.isClosed, let client else { return }
                client.enqueue(.keepAlive)
                scheduleKeepAlive()
            }
        }
        scheduleKeepAlive()
        http.whenClosed { [events] in events.remove(stream: client.id) }
        return nil
    }

    // MARK: Devices

    /// Oldest first (creation time, then id). Under the lock only the page's devices are
    /// copied, from the registry's ordered index; their JSON is made after it is released.
    private func listDevices(_ request: AdminRequest, _ http: HTTP1Connection) throws -> AdminResponse? {
        let page = try PageRequest(request, list: "devices")
        let after = try page.listKey(list: "devices")
        let (devices, more) = inSlices(after: after, limit: page.limit) { $0.registry.devicesPage(after: $1, limit: $2) }
        let next = more ? devices.last.map { PageRequest.cursor(list: "devices", $0.listKey) } : nil
        return answerOffLoop(http) { .page("devices", devices.map(AdminJSON.device), nextCursor: next) }
    }

    private func getDevice(_ id: String) throws -> AdminResponse {
        guard let device = state.readWorld({ $0.registry.devices[id] }) else { throw AdminError(404, "no device with id '\(id)'") }
        return .json(200, AdminJSON.device(device))
    }

    private func deleteDevice(_ id: String) throws -> AdminResponse {
        let now = self.now
        do {
            try state.withWorld { world throws(RegistryError) in try world.registry.removeDevice(id: id, nowMs: now) }
        } catch {
            throw AdminError(Self.status(for: error), error.description)
        }
        return .json(200, ["deviceId": .string(id), "deleted": true])
    }

    private func patchDevice(_ id: String, _ request: AdminRequest) throws -> AdminResponse {
        let body = try request.jsonObject()
        let online = try Self.bool(body, "online")
        let lowPower = try Self.bool(body, "lowPowerMode")
        guard online != nil || lowPower != nil else { throw AdminError(400, "give \"online\" and/or \"lowPowerMode\" (true or false)") }
        let frames = try deviceCall { world, now throws(DeviceRequestError) -> [DeviceFrame] in
            var frames: [DeviceFrame] = []
            if let lowPower { frames += try world.setLowPowerMode(deviceID: id, lowPower, nowMs: now) }
            if let online { frames += try world.setForcedOffline(deviceID: id, !online, nowMs: now) }
            return frames
        }
        emulator.devices.dispatch(frames)
        return try getDevice(id)
    }

    /// Fields shared by device creation and app installation.
    struct AppRequest {
        var bundleID: String
        var environment: APNsEnvironment
        var kind: TokenKind
        var token: String?
        var settings: AppSettings
    }

    func appRequest(_ body: JSONObject) throws -> AppRequest {
        guard let bundle = body["bundleId"]?.stringValue else {
            throw AdminError(400, "\"bundleId\" is required, e.g. {\"bundleId\":\"com.example.app\",\"environment\":\"sandbox\"}")
        }
        guard DeviceRegistry.isValidBundleID(bundle) else { throw AdminError(400, RegistryError.invalidBundleID(bundle).description) }
        guard let envText = body["environment"]?.stringValue else {
            throw AdminError(400, "\"environment\" is required: \"sandbox\" or \"production\"")
        }
        guard let environment = APNsEnvironment(rawValue: envText) else {
            throw AdminError(400, "\"environment\" must be \"sandbox\" or \"production\", not \"\(envText)\"")
        }
        let kindText = body["kind"]?.stringValue ?? "app"
        guard let kind = TokenKind(rawValue: kindText) else {
            throw AdminError(400, "\"kind\" must be one of \(TokenKind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        var token: String?
        if let value = body["token"] {
            guard let text = value.stringValue, Hex.isEvenLengthHex(Substring(text)) else {
                throw AdminError(400, "\"token\" must be an even-length hex string")
            }
            token = text
        }
        var settings = AppSettings()
        if let value = try Self.choice(body, "authorization", Authorization.self) { settings.authorization = value }
        if let value = try Self.choice(body, "appState", AppState.self) { settings.appState = value }
        if let value = try Self.bool(body, "backgroundMode") { settings.backgroundMode = value }
        return AppRequest(bundleID: bundle, environment: environment, kind: kind, token: token, settings: settings)
    }

    private func createDevice(_ request: AdminRequest) throws -> AdminResponse {
        let body = try request.jsonObject()
        let app = try appRequest(body)
        var deviceID: String?
        if let value = body["deviceId"] {
            guard let text = value.stringValue, DeviceRegistry.isValidDeviceID(text) else {
                throw AdminError(400, "\"deviceId\": \(DeviceRegistry.deviceIDRule)")
            }
            deviceID = text
        }
        let now = self.now
        let result = state.withWorld { world -> Result<TokenEntry, RegistryError> in
            // All or nothing: a failed registration leaves no half-made device.
            let device: Device
            do throws(RegistryError) {
                device = try world.registry.addDevice(id: deviceID, isVirtual: true, nowMs: now)
            } catch {
                return .failure(error)
            }
            do throws(RegistryError) {
                let entries = try world.installApp(deviceID: device.id, bundleID: app.bundleID, environment: app.environment,
                                                   kinds: [app.kind], fixedToken: app.token, settings: app.settings, nowMs: now)
                return .success(entries[0])
            } catch {
                world.registry.discard(newDevices: [device.id])
                return .failure(error)
            }
        }
        switch result {
        case .success(let entry):
            emulator.log("admin: virtual device \(entry.deviceID) with \(entry.bundleID) (\(entry.environment.rawValue)) token \(entry.token)")
            return .json(201, Self.created(entry))
        case .failure(let error):
            throw AdminError(Self.status(for: error), error.description)
        }
    }

    private func installApp(deviceID: String, _ request: AdminRequest) throws -> AdminResponse {
        let app = try appRequest(try request.jsonObject())
        let now = self.now
        let result = state.withWorld { world -> Result<TokenEntry, RegistryError> in
            do throws(RegistryError) {
                let entries = try world.installApp(deviceID: deviceID, bundleID: app.bundleID, environment: app.environment,
                                                   kinds: [app.kind], fixedToken: app.token, settings: app.settings, nowMs: now)
                return .success(entries[0])
            } catch {
                return .failure(error)
            }
        }
        switch result {
        case .success(let entry): return .json(201, Self.created(entry))
        case .failure(let error): throw AdminError(Self.status(for: error), error.description)
        }
    }

    private func patchApp(deviceID: String, bundleID: String, _ request: AdminRequest) throws -> AdminResponse {
        let body = try request.jsonObject()
        let appState = try Self.choice(body, "appState", AppState.self)
        let authorization = try Self.choice(body, "authorization", Authorization.self)
        let backgroundMode = try Self.bool(body, "backgroundMode")
        guard appState != nil || authorization != nil || backgroundMode != nil else {
            throw AdminError(400, "give any of \"appState\", \"authorization\", \"backgroundMode\"")
        }
        let (settings, frames) = try deviceCall { world, now throws(DeviceRequestError) in
            try world.updateApp(deviceID: deviceID, bundleID: bundleID, appState: appState, authorization: authorization,
                                backgroundMode: backgroundMode, nowMs: now)
        }
        emulator.devices.dispatch(frames)
        if let connection = state.readWorld({ $0.registry.devices[deviceID]?.connectionID }) {
            // Tell a connected device what changed, as its own `app` request would be answered.
            emulator.devices.dispatch([DeviceFrame(deviceID: deviceID, connectionID: connection, message: [
                "type": "appUpdated", "bundleId": .string(bundleID), "authorization": .string(settings.authorization.rawValue),
                "appState": .string(settings.appState.rawValue), "backgroundMode": .bool(settings.backgroundMode),
            ])])
        }
        return .json(200, ["deviceId": .string(deviceID), "bundleId": .string(bundleID),
                           "authorization": .string(settings.authorization.rawValue), "appState": .string(settings.appState.rawValue),
                           "backgroundMode": .bool(settings.backgroundMode)])
    }

    private func uninstall(deviceID: String, bundleID: String) throws -> AdminResponse {
        let (invalidAt, tokens) = try deviceCall { world, now throws(DeviceRequestError) in
            try world.uninstallApp(deviceID: deviceID, bundleID: bundleID, nowMs: now)
        }
        emulator.log("admin: uninstalled \(bundleID) from \(deviceID)")
        return .json(200, [
            "deviceId": .string(deviceID), "bundleId": .string(bundleID),
            "unregisteredAt": .int(invalidAt), "tokens": .array(tokens.map(AdminJSON.token)),
        ])
    }

    private func reinstall(deviceID: String, bundleID: String) throws -> AdminResponse {
        let entries = try deviceCall { world, now throws(DeviceRequestError) -> [TokenEntry] in
            guard let app = world.registry.devices[deviceID]?.apps[bundleID] else {
                throw DeviceRequestError("bad_request", "app \(bundleID) is not installed on device \(deviceID)")
            }
            _ = try world.uninstallApp(deviceID: deviceID, bundleID: bundleID, nowMs: now)
            let registration = AppRegistration(bundleID: bundleID, environment: app.environment, settings: app.settings,
                                               kinds: app.tokens.keys.sorted { $0.rawValue < $1.rawValue })
            _ = try world.install(registration, deviceID: deviceID, nowMs: now)
            return world.registry.devices[deviceID]?.apps[bundleID]?.tokens.values.compactMap { world.registry.token($0) } ?? []
        }
        return .json(200, ["tokens": .array(entries.map(AdminJSON.token))])
    }

    /// Rows copied under the state lock per hold: about a millisecond's worth (the copy of a
    /// row from a table of 1,000,000 costs about 1 µs), so a page of 10,000 takes ten short
    /// holds, with pushes in between, rather than one of 10 ms.
    static let rowsPerLock = 1000

    /// A page read `rowsPerLock` rows at a time, each slice going on after the last row of the
    /// one before (as the next page would), and whether rows follow.
    private func inSlices<Row: ListedRow>(after: ListKey?, limit: Int,
                                          _ take: (borrowing World, ListKey?, Int) -> (rows: [Row], more: Bool))
        -> (rows: [Row], more: Bool)
    {
        var rows: [Row] = []
        var position = after
        while true {
            let slice = state.readWorld { take($0, position, min(Self.rowsPerLock, limit - rows.count)) }
            rows += slice.rows
            guard slice.more, rows.count < limit, let last = slice.rows.last else { return (rows, slice.more) }
            position = last.listKey
        }
    }

    /// Oldest first (issue time, then token), a page at a time, as devices are.
    private func listTokens(_ request: AdminRequest, _ http: HTTP1Connection) throws -> AdminResponse? {
        let page = try PageRequest(request, list: "tokens")
        let after = try page.listKey(list: "tokens")
        let (tokens, more) = inSlices(after: after, limit: page.limit) { $0.registry.tokensPage(after: $1, limit: $2) }
        let next = more ? tokens.last.map { PageRequest.cursor(list: "tokens", $0.listKey) } : nil
        return answerOffLoop(http) { .page("tokens", tokens.map(AdminJSON.token), nextCursor: next) }
    }

    /// `PUT /api/v1/tokens/{token}/state` with `{"state": "active" | "unregistered" | "expired" |
    /// "rate-limited", "since": ms or RFC 3339 (unregistered only; default now)}`.
    private func setTokenState(_ token: String, _ request: AdminRequest) throws -> AdminResponse {
        let body = try request.jsonObject()
        guard let text = body["state"]?.stringValue else {
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
                if let ms = value.intValue { since = ms }
                else if let iso = value.stringValue.flatMap(RFC3339.parse) { since = iso }
                else { throw AdminError(400, "\"since\" must be milliseconds since the epoch or an RFC 3339 time") }
            }
            newState = .unregistered(sinceMs: since)
        default:
            throw AdminError(400, "\"state\" must be active, unregistered, expired or rate-limited, not '\(text)'")
        }
        let entry = state.withWorld { world -> TokenEntry? in
            guard world.registry.setState(token: token, newState) else { return nil }
            return world.registry.token(token)
        }
        guard let entry else { throw AdminError(404, "no token \(token)") }
        return .json(200, AdminJSON.token(entry))
    }

    static func created(_ entry: TokenEntry) -> JSONValue {
        [
            "deviceId": .string(entry.deviceID), "token": .string(entry.token), "bundleId": .string(entry.bundleID),
            "environment": .string(entry.environment.rawValue), "kind": .string(entry.kind.rawValue),
            "topic": .string(entry.topic),
        ]
    }

    static func status(for error: RegistryError) -> Int {
        if error.isNotFound { return 404 }
        switch error {
        case .deviceExists, .tokenInUse, .tooManyApps: return 409
        default: return 400
        }
    }

    // MARK: Keys and apps

    /// By key id. The lock is held only to take the dictionary (a reference); keys are few,
    /// so they are sorted per page, outside it.
    private func listKeys(_ request: AdminRequest, _ http: HTTP1Connection) throws -> AdminResponse? {
        let page = try PageRequest(request, list: "keys")
        let all = state.readWorld { $0.credentials.keys }
        return answerOffLoop(http) {
            let (keys, next) = Self.pageByName(all.values, name: \.keyID, page, list: "keys")
            return .page("keys", keys.map(AdminJSON.key), nextCursor: next)
        }
    }

    /// The page of `rows` after the cursor's name, in name order, and the next cursor.
    static func pageByName<C: Collection>(_ rows: C, name: (C.Element) -> String, _ page: PageRequest, list: String)
        -> ([C.Element], String?)
    {
        var candidates = rows.filter { page.position == nil || name($0) > page.position! }
        candidates.sort { name($0) < name($1) }
        let more = candidates.count > page.limit
        let rows = Array(candidates.prefix(page.limit))
        return (rows, more ? rows.last.map { PageRequest.encode(list: list, name($0)) } : nil)
    }

    /// `POST /api/v1/keys` with `teamId`, `keyId`, the key as `pem` (a .p8 or a public key PEM)
    /// or `path` (inside `--keys-dir` only), and optional `environment`, `topics`, `relatedKeyId`.
    private func addKey(_ request: AdminRequest) throws -> AdminResponse {
        var body = try request.jsonObject()
        let pem: String
        if let text = body["pem"]?.stringValue {
            pem = text
            body["path"] = "api"
        } else if let path = body["path"]?.stringValue {
            pem = try KeyFiles.read(path, keysDirectory: emulator.configuration.admin.keysDirectory)
        } else {
            throw AdminError(400, "give the key as \"pem\" (the .p8 text or a PEM public key), or a \"path\" inside --keys-dir")
        }
        let spec: ServeConfiguration.AuthKeySpec
        do { spec = try ServeConfiguration.authKey(fromObject: body) } catch { throw AdminError(400, error.description) }
        let key: ES256PublicKey
        do { key = try ES256PublicKey(pemPrivateOrPublic: pem) } catch {
            throw AdminError(400, "\(error); expected a PKCS#8 EC P-256 private key (.p8) or a PEM public key")
        }
        let providerKey = ProviderKey(teamID: spec.teamID, keyID: spec.keyID, environment: spec.environment,
                                      topics: spec.topics.map(Set.init), relatedKeyID: spec.relatedKeyID,
                                      verifier: ES256SignatureVerifier(key: key), source: body["pem"] != nil ? "api" : spec.path,
                                      pem: pem, addedAtRunTime: true)
        state.withWorld { $0.credentials.add(providerKey) }
        emulator.log("admin: key \(spec.teamID):\(spec.keyID) added")
        return .json(201, AdminJSON.key(providerKey))
    }

    /// By bundle id, paged as keys are.
    private func listApps(_ request: AdminRequest, _ http: HTTP1Connection) throws -> AdminResponse? {
        let page = try PageRequest(request, list: "apps")
        let all = state.readWorld { $0.credentials.apps }
        return answerOffLoop(http) {
            let (apps, next) = Self.pageByName(all, name: \.key, page, list: "apps")
            return .page("apps", apps.map { ["bundleId": .string($0.key), "teamId": .string($0.value.teamID)] }, nextCursor: next)
        }
    }

    /// In the order they are tried; the cursor is a position in that order, so a rule added or
    /// removed between pages shifts the rest by one.
    private func listFaults(_ request: AdminRequest, _ http: HTTP1Connection) throws -> AdminResponse? {
        let page = try PageRequest(request, list: "faults")
        let start = Int(clamping: try page.number(list: "faults") ?? 0)
        let (rules, more) = state.readWorld { world -> ([FaultRule], Bool) in
            let all = world.faults.rules
            guard start < all.count else { return ([], false) }
            let end = min(all.count, start + page.limit)
            return (Array(all[start..<end]), end < all.count)
        }
        let next = more ? PageRequest.encode(list: "faults", String(start + rules.count)) : nil
        return answerOffLoop(http) { .page("faults", rules.map(FaultJSON.rule), nextCursor: next) }
    }

    private func addApp(_ request: AdminRequest) throws -> AdminResponse {
        let body = try request.jsonObject()
        guard let team = body["teamId"]?.stringValue, let bundle = body["bundleId"]?.stringValue else {
            throw AdminError(400, "\"teamId\" and \"bundleId\" are required")
        }
        do { _ = try ServeConfiguration.parseApp("\(team):\(bundle)") } catch { throw AdminError(400, error.description) }
        state.withWorld { $0.credentials.addApp(teamID: team, bundleID: bundle) }
        return .json(201, ["bundleId": .string(bundle), "teamId": .string(team)])
    }

    // MARK: Field parsing

    static func bool(_ body: JSONObject, _ key: String) throws -> Bool? {
        guard let value = body[key], value != .null else { return nil }
        guard let bool = value.boolValue else { throw AdminError(400, "\"\(key)\" must be true or false") }
        return bool
    }

    static func choice<T: RawRepresentable & CaseIterable>(_ body: JSONObject, _ key: String, _: T.Type) throws -> T?
        where T.RawValue == String
    {
        guard let value = body[key], value != .null else { return nil }
        guard let text = value.stringValue, let parsed = T(rawValue: text) else {
            throw AdminError(400, "\"\(key)\" must be one of \(T.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return parsed
    }
}
