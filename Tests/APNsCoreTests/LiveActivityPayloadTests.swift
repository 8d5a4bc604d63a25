// LiveActivityPayloadTests: the fixtures of the Live Activity tests, and one row per reason a
// device silently drops a start or an update (the sentence it says, and whether it counts as
// ignored or refused).
import APNsCore
import Testing

/// Times, names and payload builders for the Live Activity tests.
enum LiveFixture {
    static let t0: Int64 = 1_700_000_000_000
    static let seconds0: Int64 = 1_700_000_000
    static let minute: Int64 = 60_000
    static let hour: Int64 = 3_600_000
    static let bundle = "com.example.app"
    static let type = "DeliveryAttributes"

    /// A book (seeded) with the app declaring `types`, and its push-to-start token for the first.
    static func book(
        types: [String] = [type], frequentUpdates: Bool = false, policy: LiveActivityPolicy = LiveActivityPolicy()
    ) throws -> (LiveActivityBook, String) {
        var book = LiveActivityBook(policy: policy, seed: 42)
        try book.declare(bundleID: bundle, types: types, frequentUpdates: frequentUpdates)
        return (book, try #require(book.pushToStartToken(bundleID: bundle, type: types[0])))
    }

    /// `{"aps": …}`: `base`, then `overrides` set and `removing` taken out.
    static func payload(_ base: [(String, JSONValue)], _ overrides: [(String, JSONValue)], removing: [String]) -> JSONValue {
        var aps = JSONObject(base.map { (key: $0.0, value: $0.1) })
        for (key, value) in overrides { aps[key] = value }
        for key in removing { aps[key] = nil }
        return .object(JSONObject([(key: "aps", value: .object(aps))]))
    }

    static func start(
        timestamp: Int64 = seconds0, _ overrides: [(String, JSONValue)] = [], removing: [String] = []
    ) -> JSONValue {
        payload(
            [
                ("event", "start"), ("timestamp", .int(timestamp)), ("attributes-type", .string(type)), ("attributes", ["orderID": "A1"]),
                ("content-state", ["status": "preparing", "eta": 1_700_001_800]), ("alert", ["title": "Order", "body": "Preparing"]),
                ("input-push-token", 1),
            ], overrides, removing: removing)
    }

    static func update(
        timestamp: Int64, status: String = "on the way", _ overrides: [(String, JSONValue)] = [], removing: [String] = []
    ) -> JSONValue {
        payload([("event", "update"), ("timestamp", .int(timestamp)), ("content-state", ["status": .string(status)])], overrides, removing: removing)
    }

    static func end(timestamp: Int64, _ overrides: [(String, JSONValue)] = []) -> JSONValue {
        payload([("event", "end"), ("timestamp", .int(timestamp)), ("content-state", ["status": "delivered"])], overrides, removing: [])
    }

    /// Starts an activity by push at `nowMs`; its id and update token (if it got one).
    static func started(
        _ book: inout LiveActivityBook, token: String, nowMs: Int64 = t0, _ overrides: [(String, JSONValue)] = [],
        removing: [String] = []
    ) throws -> (id: String, updateToken: String?) {
        let receipt = book.receiveStart(
            pushToStartToken: token, payload: start(timestamp: nowMs / 1000, overrides, removing: removing), priority: 10, nowMs: nowMs)
        #expect(receipt.outcome == .applied)
        let id = try #require(receipt.activityID)
        return (id, book.activity(id)?.pushToken)
    }

    static func status(_ book: LiveActivityBook, _ id: String) -> String? { book.activity(id)?.contentState["status"]?.stringValue }
}

/// A payload the device drops, and what it says.
struct SilentFailureRow: Sendable, CustomTestStringConvertible {
    let name: String
    let payload: JSONValue
    let outcome: LiveActivityOutcome
    var testDescription: String { name }
}

let oversizedState: JSONValue = ["status": .string(String(repeating: "x", count: 4100))]
let oversizedBytes = (["orderID": "A1"] as JSONValue).serializedBytes().count + oversizedState.serializedBytes().count

let startFailures: [SilentFailureRow] = [
    SilentFailureRow(
        name: "undeclared attributes type", payload: LiveFixture.start([("attributes-type", "DeliveryAttrs")]),
        outcome: .refused("would not start: attributes-type DeliveryAttrs is not declared by com.example.app")),
    SilentFailureRow(
        name: "content-state not an object", payload: LiveFixture.start([("content-state", "preparing")]),
        outcome: .refused("would not start: content-state is not an object")),
    SilentFailureRow(
        name: "content-state missing", payload: LiveFixture.start(removing: ["content-state"]),
        outcome: .refused("would not start: content-state is missing")),
    SilentFailureRow(
        name: "null in content-state", payload: LiveFixture.start([("content-state", ["status": "preparing", "eta": nil])]),
        outcome: .refused("would not start: content-state has a null value at /eta")),
    SilentFailureRow(
        name: "null deep in attributes", payload: LiveFixture.start([("attributes", ["stops": [["name": "A"], ["name": nil]]])]),
        outcome: .refused("would not start: attributes has a null value at /stops/1/name")),
    SilentFailureRow(
        name: "ISO-8601 date in attributes", payload: LiveFixture.start([("attributes", ["eta": "2025-01-01T10:00:00Z"])]),
        outcome: .refused("would not start: attributes.eta looks like an ISO-8601 date string; dates decode from seconds since 1970")),
    SilentFailureRow(
        name: "ISO-8601 date with offset deep in content-state",
        payload: LiveFixture.start([("content-state", ["stops": [["at": 1], ["at": "2025-01-01T10:00:00.250+02:00"]]])]),
        outcome: .refused("would not start: content-state.stops[1].at looks like an ISO-8601 date string; dates decode from seconds since 1970")),
    SilentFailureRow(
        name: "timestamp missing", payload: LiveFixture.start(removing: ["timestamp"]),
        outcome: .refused("would not start: timestamp is missing (seconds since 1970)")),
    SilentFailureRow(
        name: "timestamp a string", payload: LiveFixture.start([("timestamp", "1700000000")]),
        outcome: .refused("would not start: timestamp is not a number (seconds since 1970)")),
    SilentFailureRow(
        name: "alert missing", payload: LiveFixture.start(removing: ["alert"]),
        outcome: .refused("would not start: alert is missing (a push-to-start needs one)")),
    SilentFailureRow(
        name: "alert a number", payload: LiveFixture.start([("alert", 3)]),
        outcome: .refused("would not start: alert is neither a string nor an object")),
    SilentFailureRow(
        name: "unknown event", payload: LiveFixture.start([("event", "stop")]),
        outcome: .refused("ignored: aps.event \"stop\" is not start, update or end")),
    SilentFailureRow(
        name: "event missing", payload: LiveFixture.start(removing: ["event"]),
        outcome: .refused("ignored: aps.event is missing (start, update or end)")),
    SilentFailureRow(
        name: "attributes-type missing", payload: LiveFixture.start(removing: ["attributes-type"]),
        outcome: .refused("would not start: attributes-type is missing")),
    SilentFailureRow(
        name: "attributes not an object", payload: LiveFixture.start([("attributes", ["A1"])]),
        outcome: .refused("would not start: attributes is not an object")),
    SilentFailureRow(
        name: "stale-date not a number", payload: LiveFixture.start([("stale-date", "tomorrow")]),
        outcome: .refused("would not start: stale-date is not a number (seconds since 1970)")),
    SilentFailureRow(
        name: "relevance-score not a number", payload: LiveFixture.start([("relevance-score", "high")]),
        outcome: .refused("would not start: relevance-score is not a number")),
    SilentFailureRow(
        name: "token and channel both", payload: LiveFixture.start([("input-push-channel", "ch-1")]),
        outcome: .refused("would not start: input-push-token and input-push-channel are both set; an activity gets its updates one way")),
    SilentFailureRow(
        name: "data over 4 KB", payload: LiveFixture.start([("content-state", oversizedState)]),
        outcome: .refused(
            "would not start: attributes and content-state come to \(oversizedBytes) bytes, more than the 4096 a Live Activity may hold")),
    SilentFailureRow(
        name: "an update to a push-to-start token", payload: LiveFixture.update(timestamp: LiveFixture.seconds0),
        outcome: .ignored(
            "ignored: an update event sent to a push-to-start token; updates and ends go to the activity's update token or its channel")),
    SilentFailureRow(
        name: "no aps", payload: ["alert": "hello"], outcome: .refused("ignored: the payload has no aps object")),
]

@Suite("Live Activity silent failures")
struct LiveActivitySilentFailureTests {
    /// The rows with a null or a date string drop the push only with strict decoding (the
    /// app's fields not optional, its dates `Date`s); every other row drops it either way.
    @Test("a start the device drops says why", arguments: startFailures)
    func startFailure(row: SilentFailureRow) throws {
        var (book, token) = try LiveFixture.book(policy: LiveActivityPolicy(strictDecoding: true))
        let receipt = book.receiveStart(pushToStartToken: token, payload: row.payload, priority: 10, nowMs: LiveFixture.t0)
        #expect(receipt.outcome == row.outcome)
        #expect(receipt.activityID == nil)
        #expect(receipt.changes.isEmpty)
        #expect(book.activities().isEmpty)
    }

    /// Without strict decoding (the default) a null or an ISO-8601 string is what an optional
    /// or `String` field decodes: the start and the update are shown, and nothing is a finding.
    @Test("by default a null or a date string in the data is shown, as an optional or String field takes it")
    func lenientDecoding() throws {
        var (book, token) = try LiveFixture.book()
        let start = book.receiveStart(
            pushToStartToken: token,
            payload: LiveFixture.start([("attributes", ["orderID": "A1", "note": nil]), ("content-state", ["status": "preparing", "eta": nil])]),
            priority: 10, nowMs: LiveFixture.t0)
        #expect(start.outcome == .applied)
        let id = try #require(start.activityID)
        let updateToken = try #require(book.activity(id)?.pushToken)
        let update = book.receiveUpdate(
            updateToken: updateToken,
            payload: LiveFixture.update(
                timestamp: LiveFixture.seconds0 + 60, [("content-state", ["status": "on its way", "eta": "2026-01-01T00:00:00Z"])]),
            priority: 5, nowMs: LiveFixture.t0 + LiveFixture.minute)
        #expect(update.outcome == .applied)
        #expect(LiveFixture.status(book, id) == "on its way")
    }

    @Test("data of exactly 4096 bytes starts")
    func exactlyAtTheLimit() throws {
        var (book, token) = try LiveFixture.book()
        let attributes: JSONValue = ["orderID": "A1"]
        let padding = 4096 - attributes.serializedBytes().count - (["status": ""] as JSONValue).serializedBytes().count
        let state: JSONValue = ["status": .string(String(repeating: "x", count: padding))]
        #expect(attributes.serializedBytes().count + state.serializedBytes().count == 4096)
        let receipt = book.receiveStart(
            pushToStartToken: token, payload: LiveFixture.start([("content-state", state)]), priority: 10, nowMs: LiveFixture.t0)
        #expect(receipt.outcome == .applied)
    }

    @Test("a push-to-start token of another type does not start this one")
    func typeOfTheToken() throws {
        var (book, _) = try LiveFixture.book(types: [LiveFixture.type, "ScoreAttributes"])
        let scoreToken = try #require(book.pushToStartToken(bundleID: LiveFixture.bundle, type: "ScoreAttributes"))
        let receipt = book.receiveStart(pushToStartToken: scoreToken, payload: LiveFixture.start(), priority: 10, nowMs: LiveFixture.t0)
        #expect(
            receipt.outcome
                == .refused("would not start: attributes-type DeliveryAttributes is not the type of this push-to-start token (ScoreAttributes)"))
    }

    @Test("an unknown channel in input-push-channel does not start")
    func unknownChannel() throws {
        var (book, token) = try LiveFixture.book()
        let payload = LiveFixture.start([("input-push-channel", "ch-9")], removing: ["input-push-token"])
        let receipt = book.receiveStart(pushToStartToken: token, payload: payload, priority: 10, nowMs: LiveFixture.t0) { $0 == "ch-1" }
        #expect(
            receipt.outcome
                == .refused("would not start: input-push-channel ch-9 is not a live channel of com.example.app \(LiveActivityBook.channelScope)"))
        let known = book.receiveStart(
            pushToStartToken: token, payload: LiveFixture.start([("input-push-channel", "ch-1")], removing: ["input-push-token"]), priority: 10,
            nowMs: LiveFixture.t0
        ) { $0 == "ch-1" }
        #expect(known.outcome == .applied)
        #expect(book.activity(try #require(known.activityID))?.channelID == "ch-1")
    }

    @Test("a token nobody has is ignored, and says so")
    func unknownTokens() throws {
        var (book, _) = try LiveFixture.book()
        let start = book.receiveStart(pushToStartToken: "abcd", payload: LiveFixture.start(), priority: 10, nowMs: LiveFixture.t0)
        #expect(start.outcome == .ignored("ignored: no app on this device has push-to-start token abcd"))
        let update = book.receiveUpdate(updateToken: "ABCD", payload: LiveFixture.update(timestamp: 1), priority: 10, nowMs: LiveFixture.t0)
        #expect(update.outcome == .ignored("ignored: no Live Activity on this device has update token abcd"))
    }

    @Test("an update the device drops says why")
    func updateFailures() throws {
        var (book, token) = try LiveFixture.book(policy: LiveActivityPolicy(strictDecoding: true))
        let (id, updateToken) = try LiveFixture.started(&book, token: token)
        let updateTok = try #require(updateToken)
        let now = LiveFixture.t0 + LiveFixture.minute
        let s = LiveFixture.seconds0
        let big: JSONValue = ["status": .string(String(repeating: "y", count: 4090))]
        let bigBytes = (["orderID": "A1"] as JSONValue).serializedBytes().count + big.serializedBytes().count
        let rows: [(JSONValue, LiveActivityOutcome)] = [
            (LiveFixture.update(timestamp: s + 100), .applied),
            (
                LiveFixture.update(timestamp: s),
                .ignored("ignored: timestamp 1700000000 is older than the activity's newest (1700000100)")
            ),
            (LiveFixture.update(timestamp: s + 200, removing: ["content-state"]), .refused("would not update: content-state is missing")),
            (
                LiveFixture.update(timestamp: s + 200, [("content-state", ["status": nil])]),
                .refused("would not update: content-state has a null value at /status")
            ),
            (
                LiveFixture.update(timestamp: s + 200, [("content-state", ["eta": "2025-06-01T08:30"])]),
                .refused("would not update: content-state.eta looks like an ISO-8601 date string; dates decode from seconds since 1970")
            ),
            (LiveFixture.update(timestamp: s + 200, [("alert", true)]), .refused("would not update: alert is neither a string nor an object")),
            (
                LiveFixture.update(timestamp: s + 200, [("content-state", big)]),
                .refused("would not update: attributes and content-state come to \(bigBytes) bytes, more than the 4096 a Live Activity may hold")
            ),
            (
                LiveFixture.start(timestamp: s + 200),
                .ignored("ignored: a start event sent to an update token; starts go to the app's push-to-start token")
            ),
            (LiveFixture.update(timestamp: s + 100, status: "same second"), .applied),
        ]
        for (payload, expected) in rows {
            let receipt = book.receiveUpdate(updateToken: updateTok, payload: payload, priority: 5, nowMs: now)
            #expect(receipt.outcome == expected)
            #expect(receipt.activityID == id)
        }
        // Only the two applied rows changed anything.
        #expect(book.activity(id)?.updates == 2)
        #expect(LiveFixture.status(book, id) == "same second")
        #expect(book.activity(id)?.newestTimestamp == Double(s + 100))
    }

    @Test("the parser reads every field of a start")
    func parsesAStart() throws {
        let payload = LiveFixture.start([("stale-date", 1_700_000_600), ("relevance-score", 0.5), ("timestamp", 1_700_000_000.5)])
        let aps = try #require(LiveActivityPayload.aps(of: payload))
        let parsed = try LiveActivityPayload.parse(aps: aps).get()
        #expect(parsed.event == .start)
        #expect(parsed.timestamp == 1_700_000_000.5)
        #expect(parsed.attributesType == "DeliveryAttributes")
        #expect(parsed.attributes == ["orderID": "A1"])
        #expect(parsed.staleDateMs == 1_700_000_600_000)
        #expect(parsed.relevanceScore == 0.5)
        #expect(parsed.inputPushToken)
        #expect(parsed.inputPushChannel == nil)
        #expect(parsed.dismissalDateMs == nil)
    }

    @Test("an end needs no content-state, and reads its dismissal date")
    func parsesAnEnd() throws {
        let payload = LiveFixture.payload([("event", "end"), ("timestamp", 5), ("dismissal-date", 60)], [], removing: [])
        let parsed = try LiveActivityPayload.parse(aps: try #require(LiveActivityPayload.aps(of: payload))).get()
        #expect(parsed.event == .end)
        #expect(parsed.contentState == nil)
        #expect(parsed.dismissalDateMs == 60_000)
    }

    @Test("a payload kept as raw JSON text is read the same")
    func rawPayload() throws {
        let raw = JSONValue.raw(LiveFixture.start([("content-state", ["eta": nil])]).serializedBytes())
        var (book, token) = try LiveFixture.book(policy: LiveActivityPolicy(strictDecoding: true))
        let receipt = book.receiveStart(pushToStartToken: token, payload: raw, priority: 10, nowMs: LiveFixture.t0)
        #expect(receipt.outcome == .refused("would not start: content-state has a null value at /eta"))
    }
}
