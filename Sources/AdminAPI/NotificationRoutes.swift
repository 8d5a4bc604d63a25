import APNsCore
import HTTP1Server
import Networking

/// The notification journal: lists, look-ups, deletes, the long poll for the first match and
/// the stream of every record as it happens.
struct NotificationRoutes: AdminResource {
    unowned let api: AdminService

    /// Records looked at per hold of the state lock: under a millisecond, so a filter that
    /// matches little in a large journal does not hold it for the whole scan.
    static let recordsPerLock = 5000
    /// Record bytes one list response may carry (its JSON is up to about twice that).
    static let listByteBudget = 16 << 20

    func addRoutes(to r: inout AdminRouter) {
        r.add("GET", "/api/v1/events", "server-sent events: every record as it happens") { req, _, http in
            try eventStream(req, http)
        }
        r.add("GET", "/api/v1/notifications", "list, newest first, with filters") { req, _, http in
            try listNotifications(req, http)
        }
        r.add("DELETE", "/api/v1/notifications", "delete records matching the filters") { req, _, _ in
            var query = try Self.query(req)
            query.deviceIDMatchesBroadcasts = false
            let deleted = state.withWorld { world in world.deleteRecords(where: query.matches) }
            api.events.recordsDeleted(deleted)
            return .json(200, ["deleted": .int(Int64(deleted))])
        }
        r.add("GET", "/api/v1/notifications/latest", "the newest record matching the filters") { req, _, _ in
            let query = try Self.query(req)
            guard let record = state.readJournal({ $0.records.newestFirst(limit: 1, where: query.matches).first }) else {
                throw AdminError(404, "no notification matches")
            }
            return .json(200, AdminJSON.record(record))
        }
        r.add("GET", "/api/v1/notifications/wait", "long-poll for the first matching record") { req, _, http in
            try wait(req, http)
        }
        r.add("GET", "/api/v1/notifications/{id}", "one record by apns-id or apns-unique-id") { _, p, _ in
            .json(200, AdminJSON.record(try record(p["id"] ?? "")))
        }
        r.add("GET", "/api/v1/notifications/{id}/curl", "a curl command that sends the recorded request again") { req, p, _ in
            try curlCommand(try record(p["id"] ?? ""), req)
        }
        r.add("GET", "/api/v1/notifications/{id}/apns", "the payload as an .apns file for the Simulator") { _, p, _ in
            try simulatorFile(try record(p["id"] ?? ""))
        }
        r.add("GET", "/api/v1/notifications/{id}/log", "the delivery log: each state with when, as Apple's console shows it") { _, p, _ in
            .json(200, Self.deliveryLog(try record(p["id"] ?? "")))
        }
    }

    /// `{"apnsId", "uniqueId", "outcome", "log": [{"at", "atMs", "state", "console", "note"}]}`.
    static func deliveryLog(_ record: NotificationRecord) -> JSONValue {
        let entries: [JSONValue] = DeliveryLog.entries(for: record).map { entry in
            [
                "at": .string(RFC3339.format(milliseconds: entry.atMs)), "atMs": .int(entry.atMs), "state": .string(entry.state),
                "console": .string(entry.console), "note": entry.note.map(JSONValue.string) ?? .null,
            ]
        }
        return [
            "apnsId": .string(record.apnsID), "uniqueId": record.uniqueID.map(JSONValue.string) ?? .null,
            "outcome": .string(record.outcome.rawValue), "log": .array(entries),
        ]
    }

    /// The newest record whose apns-id or apns-unique-id is `id`.
    private func record(_ id: String) throws -> NotificationRecord {
        // Not `readJournal`: one record is looked for, and records other instances wrote are
        // matched in their stored form rather than all decoded first.
        let record = state.readWorld { $0.records.newest(withID: id) }
        guard let record else { throw AdminError(404, "no notification with apns-id or apns-unique-id \(id)") }
        return record
    }

    /// `?host=apple` (default): Apple's host for the record's environment; `?host=emulator`:
    /// this emulator's listener for it.
    private func curlCommand(_ record: NotificationRecord, _ request: HTTP1Request) throws -> HTTP1ServerResponse {
        let target: PushExport.CurlTarget
        switch request.query["host"] ?? "apple" {
        case "apple": target = .apple(record.environment)
        case "emulator": target = try emulatorTarget(record.environment)
        case let other: throw AdminError(400, "host must be apple or emulator, not '\(other)'")
        }
        let command = try Self.exported { () throws(PushExport.Refusal) in try PushExport.curlCommand(record, to: target) }
        return HTTP1ServerResponse(status: 200, headers: [("Content-Type", "text/plain; charset=utf-8")], body: Array(command.utf8))
    }

    private func emulatorTarget(_ environment: APNsEnvironment) throws -> PushExport.CurlTarget {
        let addresses = host.addresses.objectValue ?? JSONObject()
        let production = environment == .production
        let target = PushExport.CurlTarget.emulator(
            environment, direct: addresses[production ? "production" : "sandbox"]?.stringValue,
            listen: addresses["listen"]?.arrayValue?.first?.stringValue,
            h2c: addresses[production ? "h2cProduction" : "h2cSandbox"]?.stringValue,
            caFile: addresses["caFile"]?.stringValue)
        guard let target else { throw AdminError(409, "the emulator has no listener that serves \(environment.rawValue) pushes") }
        return target
    }

    private func simulatorFile(_ record: NotificationRecord) throws -> HTTP1ServerResponse {
        let file = try Self.exported { () throws(PushExport.Refusal) in try PushExport.simulatorFile(record) }
        return HTTP1ServerResponse(
            status: 200,
            headers: [("Content-Type", "application/json"), ("Content-Disposition", "attachment; filename=\"\(record.apnsID).apns\"")],
            body: file)
    }

    /// An export's refusal as 409 (the journal kept part of the request) or 422.
    private static func exported<T>(_ body: () throws(PushExport.Refusal) -> T) throws -> T {
        do { return try body() } catch {
            throw AdminError(error.kind == .incomplete ? 409 : 422, error.message)
        }
    }

    /// Newest first. `limit` keeps its old meaning (≥ 0, no maximum but the journal's size and
    /// the byte budget below); `cursor` continues below the last record of the previous page,
    /// by sequence number, so records added meanwhile do not shift it.
    private func listNotifications(_ request: HTTP1Request, _ http: HTTP1Connection) throws -> HTTP1ServerResponse? {
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
        let query = try Self.query(request, also: ["limit", "cursor"])
        // One more than asked tells whether another page follows.
        var records = newestRecords(limit == Int.max ? limit : limit + 1, before: before, query, bytes: Self.listByteBudget)
        let more = records.count > limit
        // With `limit=0` the page is empty and the next one starts at the newest match.
        let nextAfterEmptyPage = records.first.map { $0.sequence &+ 1 }
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
        // Pages under 1 MiB (the web UI's, most scripts') are not counted, so they are never
        // refused for others' big ones.
        let bytes = records.reduce(0) { $0 + $1.accountedBytes }
        let held = bytes < 1 << 20 ? 0 : bytes
        guard api.listAnswerBudget.take(held) else {
            api.metrics.listBudgetRefusals.add()
            throw AdminError(
                503,
                "list answers holding \(api.listAnswerBudget.limit >> 20) MiB of records are on their way to clients that have not read them yet; "
                    + "retry, or ask for fewer (limit)")
        }
        let below = records.last?.sequence ?? nextAfterEmptyPage
        let next = (more || truncated) ? below.map { PageRequest.encode(list: "notifications", String($0)) } : nil
        let kept = records
        return answerOffLoop(http, heldBytes: held) {
            .page("notifications", kept.map(AdminJSON.record), nextCursor: next, extra: truncated ? [("truncated", true)] : [])
        }
    }

    /// Up to `count` records matching `query`, newest first, below `before`: scanned
    /// `recordsPerLock` at a time, and no further once they pass `bytes` (the page's budget:
    /// one more than fits tells that it was cut).
    private func newestRecords(_ count: Int, before: UInt64?, _ query: NotificationQuery, bytes: Int = .max) -> [NotificationRecord] {
        var records: [NotificationRecord] = []
        var position = before
        var taken = 0
        while records.count < count, taken <= bytes {
            let (slice, resume) = state.readJournal {
                $0.records.scanNewestFirst(
                    limit: count - records.count, before: position, scanning: Self.recordsPerLock,
                    where: query.matches)
            }
            for record in slice {
                records.append(record)
                taken += record.accountedBytes
                if taken > bytes { break }
            }
            guard let resume, taken <= bytes else { break }
            position = resume
        }
        return records
    }

    /// `GET /api/v1/notifications/wait`: the first record matching the filters — among those
    /// received since `since` when given, else the next to arrive — or 408 after `timeout`.
    private func wait(_ request: HTTP1Request, _ http: HTTP1Connection) throws -> HTTP1ServerResponse? {
        let query = try Self.query(request, also: ["timeout"])
        var timeout = 30.0
        if let text = request.query["timeout"] {
            guard let value = Double(text), value >= 0, value <= 600 else {
                throw AdminError(400, "timeout must be a number of seconds from 0 to 600, not '\(text)'")
            }
            timeout = value
        }
        let loop = http.connection.loop
        let events = api.events
        var answered = false
        var waiterID: UInt64 = 0
        var timer: TimerID?
        let finish: (HTTP1ServerResponse) -> Void = { response in
            guard !answered else { return }
            answered = true
            events.remove(waiter: waiterID)
            if let timer { loop.cancel(timer) }
            http.respond(response)
        }
        // Listen first, then look at what is already there, so nothing slips between.
        let limit = api.settings.maxWaiters
        guard
            let id = events.addWaiter(
                query: query, loop: loop, limit: limit,
                deliver: { record in
                    finish(.json(200, AdminJSON.record(record)))
                })
        else {
            throw AdminError(503, "\(limit) long polls are waiting already (--admin-max-waiters); try again later")
        }
        waiterID = id
        if query.sinceMs != nil {
            let existing = state.readJournal { $0.records.oldest(where: query.matches) }
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
    private func eventStream(_ request: HTTP1Request, _ http: HTTP1Connection) throws -> HTTP1ServerResponse? {
        let query = try Self.query(request, also: ["access_token"])
        guard http.startStream(contentType: "text/event-stream") else { return nil }
        http.sendStreamChunk(Array(": apns-emulator events\nretry: 1000\n\n".utf8))
        let metrics = api.metrics
        let events = api.events
        let peer = http.connection.peer
        let client = EventStreamClient(id: events.newID(), query: query, http: http) { [weak host = api.host] _ in
            metrics.streamsDropped.add()
            host?.warn("admin: event stream client \(peer) dropped: it fell \(EventStreamClient.maxQueuedBytes >> 20) MiB behind")
        }
        http.onStreamDrained = { client.drain() }
        events.add(client)
        let loop = http.connection.loop
        func scheduleKeepAlive() {
            loop.schedule(afterMilliseconds: 15_000) { [weak http, weak client] in
                guard let http, !http.isClosed, let client else { return }
                client.enqueue(.ping)
                scheduleKeepAlive()
            }
        }
        scheduleKeepAlive()
        http.whenClosed { events.remove(stream: client.id) }
        return nil
    }
}
