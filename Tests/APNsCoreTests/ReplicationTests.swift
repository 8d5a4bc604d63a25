@testable import APNsCore
import HTTPGrammar
import Synchronization
import Testing

/// Collects what an `EmulatorState` drains, as the shared log would receive it.
final class CollectingSink: StateChangeSink, @unchecked Sendable {
    private let rows = Mutex<[StateChange]>([])
    func enqueue(_ changes: [StateChange]) -> Bool {
        rows.withLock { $0 += changes }
        return false
    }
    func wake() {}
    func peek() -> [StateChange] { rows.withLock { $0 } }
    func take() -> [StateChange] {
        rows.withLock { rows in
            defer { rows = [] }; return rows
        }
    }
}

final class ReplicaPair: @unchecked Sendable {
    static let pinned = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
    static let apps = ["com.example.app", "com.example.other"]
    let clock = ManualClock(milliseconds: 1_767_225_600_000)
    let keyA: SigningKey
    let configured: World
    let state: EmulatorState
    let sink = CollectingSink()
    let endpoint: ProviderEndpoint
    var replica: World
    var providerConnection: UInt64 = 1
    var lastApplied = ReplicationApplied()
    /// Every sequence number the replica was handed (records and notifications).
    var highestApplied: UInt64 = 0
    private(set) var failed = false
    /// The replica keeps records encoded until read, as a `--redis` follower does.
    let keepsRecordsEncoded: Bool

    init(capacity: Int = 100, options: DeliveryOptions = DeliveryOptions(), keepsRecordsEncoded: Bool = false) throws {
        self.keepsRecordsEncoded = keepsRecordsEncoded
        keyA = try SigningKey(team: "TEAMAAAAAA", key: "KEYAAAAAAA")
        var credentials = Credentials()
        credentials.add(keyA.providerKey())
        for app in Self.apps { credentials.addApp(teamID: "TEAMAAAAAA", bundleID: app) }
        var registry = DeviceRegistry(seed: 7)
        let now = clock.nowMilliseconds()
        try registry.addDevice(id: "ci", isVirtual: true, nowMs: now)
        _ = try registry.register(deviceID: "ci", bundleID: "com.example.app", environment: .sandbox, fixedToken: Self.pinned, nowMs: now)
        configured = World(credentials: credentials, registry: registry, records: RecordStore(capacity: capacity), deliveryOptions: options)
        var first = configured
        first.startTrackingChanges()
        state = EmulatorState(start: first, persistence: sink)
        state.setStartState(configured)
        endpoint = ProviderEndpoint(state: state, clock: clock)
        replica = configured
        replica.startTrackingChanges()
    }

    var now: Int64 { clock.nowMilliseconds() }

    func world<T: Sendable>(_ body: (inout World) throws -> T) rethrows -> T {
        try state.withWorld { world in try body(&world) }
    }

    /// A push as a provider sends it, through the provider endpoint.
    func push(
        _ token: String, topic: String = "com.example.app", body: String = #"{"aps":{"alert":"hi"}}"#,
        headers: [(String, String)] = []
    ) throws -> PushResponse {
        try providerPush(
            endpoint, token: token, key: keyA, issuedAt: clock.nowSeconds(), connectionID: &providerConnection,
            topic: topic, body: body, headers: headers)
    }

    func connect(
        _ deviceID: String, connection: UInt64, apps: [String] = ["com.example.app"],
        settings: AppSettings = AppSettings(), lowPower: Bool = false
    ) throws -> [DeviceFrame] {
        let hello = DeviceHello(
            deviceID: deviceID, lowPowerMode: lowPower,
            apps: apps.map {
                AppRegistration(bundleID: $0, environment: .sandbox, settings: settings, kinds: [.app])
            })
        let now = self.now
        return try state.withWorld { world throws(DeviceRequestError) in try world.connectDevice(hello, connectionID: connection, nowMs: now) }
    }

    func token(of device: String, bundle: String = "com.example.app") -> String? {
        world { $0.registry.devices[device]?.apps[bundle]?.tokens[.app] }
    }

    /// What the replica does with a stored key: any verifier will do for the comparison.
    func loadKey(_ stored: StoredKey) throws(StateStoreError) -> ProviderKey {
        ProviderKey(
            teamID: stored.teamID, keyID: stored.keyID, environment: stored.environment, topics: stored.topics.map(Set.init),
            relatedKeyID: stored.relatedKeyID, verifier: keyA.verifier, source: stored.source, pem: stored.pem,
            addedAtRunTime: stored.addedAtRunTime)
    }

    /// Hands W1's rows to W2 through the byte form, then checks the two states are equal and
    /// that the replica has nothing of its own to emit.
    @discardableResult
    func sync(_ step: String = "", sourceLocation: SourceLocation = #_sourceLocation) throws -> ReplicationApplied {
        // Kept encoded, the rows come as a follower takes them (`decodeRows`: records as they
        // arrived); otherwise decoded whole.
        let bytes = StateCodec.encode(changes: sink.take())
        let rows = keepsRecordsEncoded ? try StateCodec.decodeRows(bytes) : try StateCodec.decodeChanges(bytes).map(ReplicatedRow.change)
        for row in rows {
            switch row {
            case .keptRecord(let kept): highestApplied = max(highestApplied, kept.sequence)
            case .change(.recordSaved(let r)): highestApplied = max(highestApplied, r.sequence)
            case .change(.notificationWaiting(let w)): highestApplied = max(highestApplied, w.notification.sequence)
            default: break
            }
        }
        let pair = self
        lastApplied = try replica.applyReplicated(rows: rows, nowMs: now, configured: configured) { stored throws(StateStoreError) in
            try pair.loadKey(stored)
        }
        let leftOver = replica.takeStateChanges(recordSequences: replica.records.takeChanges())
        if !leftOver.isEmpty {
            failed = true
            Issue.record("\(step): the replica re-emits \(leftOver.count) rows", sourceLocation: sourceLocation)
        }
        let expected = world { $0.persistedState }
        let actual = replica.persistedState
        if StateCodec.encode(.reset(expected)) != StateCodec.encode(.reset(actual)) {
            failed = true
            Issue.record("\(step): \(Self.difference(expected, actual))", sourceLocation: sourceLocation)
        }
        return lastApplied
    }

    /// Which part of two states differs (the first one found), for a readable failure.
    static func difference(_ a: PersistedState, _ b: PersistedState) -> String {
        func bytes(_ s: PersistedState) -> [UInt8] { StateCodec.encode(.reset(s)) }
        var parts: [(String, (inout PersistedState) -> Void)] = []
        parts.append(("devices", { $0.devices = [] }))
        parts.append(("tokens", { $0.tokens = [] }))
        parts.append(("keys", { $0.keys = [] }))
        parts.append(("apps", { $0.apps = [] }))
        parts.append(("faults", { $0.faults = nil }))
        parts.append(("waiting", { $0.waiting = [] }))
        parts.append(("records", { $0.records = [] }))
        parts.append(("channels", { $0.channels = [] }))
        parts.append(("next sequence", { $0.nextRecordSequence = 0 }))
        var left = a
        var right = b
        var differing: [String] = []
        for (name, clear) in parts {
            var onlyA = a
            var onlyB = b
            // Everything but this part cleared: the part alone decides.
            for (other, clearOther) in parts where other != name {
                clearOther(&onlyA)
                clearOther(&onlyB)
            }
            if bytes(onlyA) != bytes(onlyB) { differing.append(name) }
            clear(&left)
            clear(&right)
        }
        var detail = "states differ in " + differing.joined(separator: ", ")
        if differing.contains("waiting") {
            detail += "\n W1 waiting: \(a.waiting.map { "\($0.notification.sequence) \($0.slot)" })"
            detail += "\n W2 waiting: \(b.waiting.map { "\($0.notification.sequence) \($0.slot)" })"
        }
        if differing.contains("records") {
            detail += "\n W1 records: \(a.records.map { "\($0.sequence) \($0.outcome.rawValue)" })"
            detail += "\n W2 records: \(b.records.map { "\($0.sequence) \($0.outcome.rawValue)" })"
        }
        if differing.contains("next sequence") { detail += "\n next: \(a.nextRecordSequence) vs \(b.nextRecordSequence)" }
        return detail
    }

    /// The replica as an emulator of its own: it accepts a push after replication.
    func replicaAcceptsAPush() throws -> PushResponse {
        let local = EmulatorState(start: replica)
        let endpoint = ProviderEndpoint(state: local, clock: clock)
        var fields: [HeaderField] = [
            HeaderField(":method", "POST"), HeaderField(":scheme", "https"), HeaderField(":authority", "127.0.0.1:2197"),
            HeaderField(":path", "/3/device/\(Self.pinned)"),
            HeaderField("authorization", "bearer \(try keyA.token(issuedAt: clock.nowSeconds()))"), HeaderField("apns-topic", "com.example.app"),
        ]
        fields.append(HeaderField("apns-priority", "10"))
        var connection = ProviderConnectionContext(
            connectionID: 99_999, listenerEnvironment: .sandbox, serverName: nil,
            tokenPolicy: TokenPolicy(), random: FastRandom(seed: 1))
        return endpoint.handle(PushRequest(streamID: 1, headers: fields, body: Array(#"{"aps":{"alert":"x"}}"#.utf8)), connection: &connection)
    }
}

@Suite("Replication between world replicas")
struct ReplicationTests {
    // MARK: The byte form

    static func device() -> Device {
        var settings = AppSettings(authorization: .provisional, appState: .terminated, backgroundMode: false)
        let setup: JSONValue = [
            "categories": [["identifier": "MSG", "actions": [["identifier": "R", "title": "Reply", "options": ["foreground"]]]]],
            "foregroundPresentation": ["banner"], "criticalAlertEntitlement": true, "localizedStrings": ["K": "%@ says hi"],
            "senderKey": "from",
        ]
        try! settings.notifications.apply(setup.objectValue!)
        var app = InstalledApp(
            bundleID: "com.example.app", environment: .production, tokens: [.app: "aa01", .voip: "bb02"],
            installedAtMs: -5, settings: settings, uploadPending: true)
        app.badge = 12
        let other = InstalledApp(bundleID: "com.example.other", environment: .sandbox, tokens: [:], installedAtMs: 9)
        var device = Device(
            id: "phone", isVirtual: true, apps: [app.bundleID: app, other.bundleID: other], createdAtMs: 1_767_225_600_000,
            connectionID: UInt64.max, lowPowerMode: true, forcedOffline: true, userID: "alice")
        let switches: JSONValue = [
            "focus": ["name": "Sleep", "allowedPeople": ["bob"]], "scheduledSummary": ["times": ["08:00"], "apps": ["com.example.app"]],
            "locked": true,
        ]
        try! device.attention.apply(switches.objectValue!)
        return device
    }

    static func tokens() -> [TokenEntry] {
        [
            TokenEntry(
                token: "aa01", deviceID: "phone", bundleID: "com.example.app", environment: .production, kind: .voip,
                state: .unregistered(sinceMs: -3), issuedAtMs: 77, pushesUntilUnregistered: 2),
            TokenEntry(token: "aa02", deviceID: "d", bundleID: "b", environment: .sandbox, kind: .app, state: .active, issuedAtMs: 0),
            TokenEntry(token: "aa03", deviceID: "d", bundleID: "b", environment: .sandbox, kind: .liveactivity, state: .expired, issuedAtMs: 1),
            TokenEntry(token: "aa04", deviceID: "d", bundleID: "b", environment: .sandbox, kind: .widgets, state: .rateLimited, issuedAtMs: 2),
        ]
    }

    static func key() -> StoredKey {
        StoredKey(
            teamID: "TEAM", keyID: "KEY", environment: .production, topics: ["com.a", "com.b"], relatedKeyID: "OTHER",
            pem: "-----BEGIN PRIVATE KEY-----\nx\n", source: "api", addedAtRunTime: true)
    }

    static func waiting() -> [WaitingNotification] {
        let n = StateCodecTests.notification()
        return [
            WaitingNotification(slot: .stored, notification: n), WaitingNotification(slot: .deferred(.lowPower), notification: n),
            WaitingNotification(slot: .deferred(.budget), notification: n), WaitingNotification(slot: .deferred(.terminated), notification: n),
            WaitingNotification(slot: .batched(releaseAtMs: -12), notification: n), WaitingNotification(slot: .inFlight, notification: n),
            WaitingNotification(slot: .handedOff, notification: n),
            WaitingNotification(
                slot: .inFlight, notification: n,
                flight: FlightRow(
                    deliveryID: 77, connectionID: 5 << 40 | 3, sentAtMs: -4,
                    verdict: DeliveryVerdict(
                        callbacks: ["willPresent", "didReceive"], display: .banner, outcome: .droppedBySystem,
                        reason: "why", usedBackgroundBudget: true))),
        ]
    }

    static func fullState() -> PersistedState {
        var state = PersistedState()
        state.initialized = true
        state.devices = [device(), Device(id: "bare", isVirtual: false, apps: [:], createdAtMs: 0)]
        state.tokens = tokens()
        state.keys = [
            key(), StoredKey(teamID: "T", keyID: "K2", environment: nil, topics: nil, relatedKeyID: nil, pem: "", source: "", addedAtRunTime: false),
        ]
        state.apps = [("com.a", "TEAM"), ("com.b", "TEAM2")]
        state.faults = FaultRulesSnapshot(rules: StateCodecTests.faultRules(), nextNumber: 12)
        state.waiting = waiting()
        state.budgets = [("phone", "com.a", BackgroundBudget(perHour: 2, arrivalUnits: 7_200_123))]
        var record = StateCodecTests.fullRecord()
        record.headerListBytes = 321
        state.records = [record, StateCodecTests.sparseRecord()]
        state.nextRecordSequence = 1_000
        state.channels = channels()
        state.liveActivities = [
            try! LiveActivityPersistenceTests.fullRow(), LiveActivityRow(deviceID: "bare", book: nil, widgets: LiveActivityBook()),
        ]
        return state
    }

    /// A live channel, a deleted one, and one with a stored message, every field set.
    static func channels() -> [BroadcastChannel] {
        let message = StoredBroadcast(key: "R", payload: [0, 1, 255], priority: 5, receivedAtMs: -1, expiresAtMs: 28_800_000)
        return [
            BroadcastChannel(id: "YQ==", bundleID: "com.a", environment: .sandbox, policy: .noMessageStored, createdAtMs: 0),
            BroadcastChannel(
                id: "Yg==", bundleID: "com.a", environment: .production, policy: .noMessageStored, createdAtMs: 1,
                deletedAtMs: 2, broadcasts: 3, lastBroadcastAtMs: 4),
            BroadcastChannel(
                id: "Yw==", bundleID: "com.b", environment: .production, policy: .mostRecentMessageStored, createdAtMs: -7,
                broadcasts: Int.max, lastBroadcastAtMs: -1, storedMessage: message),
        ]
    }

    /// One row of every kind, every field set.
    static func everyRow() -> [StateChange] {
        var record = StateCodecTests.fullRecord()
        record.headerListBytes = 321
        return [.deviceSaved(device()), .deviceRemoved(id: "phone")] + tokens().map { .tokenSaved($0) }
            + [
                .keySaved(key()), .keyRemoved(keyID: "KEY"), .appSaved(bundleID: "com.a", teamID: "TEAM"), .appRemoved(bundleID: "com.a"),
                .faultsSaved(FaultRulesSnapshot(rules: StateCodecTests.faultRules(), nextNumber: 3)),
            ]
            + waiting().map { .notificationWaiting($0) }
            + [
                .notificationDone(sequence: UInt64.max), .recordSaved(record), .recordRemoved(sequence: 5), .recordsEvicted(before: 17),
                .recordDelivered(sequence: record.sequence, delivery: record.delivery),
                .reset(fullState()), .reset(PersistedState()),
                .budgetSaved(deviceID: "phone", bundleID: "com.a", budget: BackgroundBudget(perHour: 3, arrivalUnits: -5_400_000)),
            ]
            + channels().map { .channelSaved($0) } + [.channelRemoved(id: "Yg==")]
            + [.liveActivitiesSaved(try! LiveActivityPersistenceTests.fullRow()), .liveActivitiesRemoved(deviceID: "phone")]
            + [.clockOffsetSaved(milliseconds: 3_600_000)]
    }

    /// The structs' field counts: a new field fails here until the row codec carries it.
    @Test func everyFieldIsCovered() {
        #expect(Mirror(reflecting: Self.device()).children.count == 9, "Device changed: extend the row codec")
        #expect(Mirror(reflecting: Self.device().apps.first!.value).children.count == 7, "InstalledApp changed")
        #expect(Mirror(reflecting: AppSettings()).children.count == 4, "AppSettings changed")
        // Kept as JSON (storedJSON), which names every field.
        #expect(Mirror(reflecting: NotificationSetup()).children.count == 11, "NotificationSetup changed: extend json and apply")
        #expect(Mirror(reflecting: DeviceAttention()).children.count == 4, "DeviceAttention changed: extend json and apply")
        #expect(Mirror(reflecting: Self.tokens()[0]).children.count == 8, "TokenEntry changed")
        #expect(Mirror(reflecting: Self.key()).children.count == 8, "StoredKey changed")
        // 12 in the row codec, plus clockOffsetMs (a state directory keeps it in its meta table;
        // instances sharing Redis each keep their own clock).
        #expect(Mirror(reflecting: PersistedState()).children.count == 13, "PersistedState changed")
        // 9 encoded, plus recentBroadcastsMs (this instance's rate window).
        #expect(Mirror(reflecting: Self.channels()[0]).children.count == 10, "BroadcastChannel changed")
        #expect(Mirror(reflecting: Self.channels()[2].storedMessage!).children.count == 5, "StoredBroadcast changed")
        #expect(Mirror(reflecting: Self.waiting()[0]).children.count == 3, "WaitingNotification changed")
        #expect(Mirror(reflecting: Self.waiting().last!.flight!).children.count == 4, "FlightRow changed")
        #expect(Mirror(reflecting: Self.waiting().last!.flight!.verdict).children.count == 5, "DeliveryVerdict changed")
        // 13 encoded, plus acceptedAtNanos (monotonic time of this host only).
        #expect(Mirror(reflecting: StateCodecTests.notification()).children.count == 14, "PendingNotification changed")
        #expect(Mirror(reflecting: DeviceFrame(deviceID: "", connectionID: 0, message: .null)).children.count == 4, "DeviceFrame changed")
    }

    @Test func everyRowRoundTrips() throws {
        for row in Self.everyRow() {
            let bytes = StateCodec.encode(row)
            let decoded = try StateCodec.decodeChange(bytes)
            #expect(StateCodec.encode(decoded) == bytes, "\(row.key.map { "\($0)" } ?? "unkeyed row")")
            #expect(decoded.key == row.key)
        }
        let list = StateCodec.encode(changes: Self.everyRow())
        #expect(try StateCodec.decodeChanges(list).map { StateCodec.encode($0) } == Self.everyRow().map { StateCodec.encode($0) })
        #expect(try StateCodec.decodeChanges(StateCodec.encode(changes: [])).isEmpty)
    }

    /// Byte equality above proves the codec is stable; these check the values themselves.
    @Test func decodedRowsCarryEveryValue() throws {
        func roundTrip(_ change: StateChange) throws -> StateChange { try StateCodec.decodeChange(StateCodec.encode(change)) }
        guard case .deviceSaved(let device) = try roundTrip(.deviceSaved(Self.device())) else { Issue.record("kind"); return }
        #expect(device == Self.device())
        for entry in Self.tokens() {
            guard case .tokenSaved(let decoded) = try roundTrip(.tokenSaved(entry)) else { Issue.record("kind"); return }
            #expect(decoded == entry)
        }
        guard case .keySaved(let key) = try roundTrip(.keySaved(Self.key())) else { Issue.record("kind"); return }
        #expect(key == Self.key())
        guard case .appSaved(let bundle, let team) = try roundTrip(.appSaved(bundleID: "com.a", teamID: "TEAM")) else { Issue.record("kind"); return }
        #expect(bundle == "com.a" && team == "TEAM")
        for waiting in Self.waiting() {
            guard case .notificationWaiting(let decoded) = try roundTrip(.notificationWaiting(waiting)) else { Issue.record("kind"); return }
            #expect(decoded.slot == waiting.slot)
            #expect(String(describing: decoded.notification) == String(describing: waiting.notification))
            #expect(decoded.flight == waiting.flight)
        }
        var record = StateCodecTests.fullRecord()
        record.headerListBytes = 321
        guard case .recordSaved(let decodedRecord) = try roundTrip(.recordSaved(record)) else { Issue.record("kind"); return }
        #expect(String(describing: decodedRecord) == String(describing: record), "accountedBytes and headerListBytes too")
        guard case .reset(let state) = try roundTrip(.reset(Self.fullState())) else { Issue.record("kind"); return }
        let full = Self.fullState()
        #expect(state.initialized && state.devices == full.devices && state.tokens == full.tokens && state.keys == full.keys)
        #expect(state.apps.map { "\($0.bundleID)=\($0.teamID)" } == ["com.a=TEAM", "com.b=TEAM2"])
        #expect(state.faults?.rules.map(\.id) == full.faults?.rules.map(\.id) && state.faults?.nextNumber == 12)
        #expect(state.waiting.map(\.slot) == full.waiting.map(\.slot))
        #expect(String(describing: state.records) == String(describing: full.records))
        #expect(state.nextRecordSequence == 1_000)
        #expect(state.channels == full.channels)
        #expect(state.liveActivities.map(StateCodec.encode) == full.liveActivities.map(StateCodec.encode))
        for channel in Self.channels() {
            guard case .channelSaved(let decoded) = try roundTrip(.channelSaved(channel)) else { Issue.record("kind"); return }
            #expect(decoded == channel)
        }
        guard case .reset(let empty) = try roundTrip(.reset(PersistedState())) else { Issue.record("kind"); return }
        #expect(!empty.initialized && empty.faults == nil && empty.nextRecordSequence == 1)
    }

    @Test func framesRoundTripWithRawPayloads() throws {
        let payload = Array(#"{"aps":{"alert":"ü"}}"#.utf8)
        let message: JSONValue = .object(
            JSONObject([
                ("type", "notification"), ("id", .int(-7)), ("d", .double(0.5)), ("n", .null), ("t", true), ("f", false),
                ("list", [1, "two", [.null]]), ("payload", .raw(payload)), ("dup", 1), ("dup", 2),
            ]))
        let frames = [
            DeviceFrame(deviceID: "phone", connectionID: UInt64.max, message: message, closeAfter: true),
            DeviceFrame(deviceID: "p2", connectionID: 0, message: ["type": "replaced"]),
        ]
        let decoded = try StateCodec.decodeFrames(StateCodec.encode(frames: frames))
        #expect(decoded.map(\.deviceID) == ["phone", "p2"])
        #expect(decoded.map(\.connectionID) == [UInt64.max, 0])
        #expect(decoded.map(\.closeAfter) == [true, false])
        #expect(decoded.map(\.message) == frames.map(\.message), "the raw payload stays raw, duplicate keys stay")
        #expect(try StateCodec.decodeFrames(StateCodec.encode(frames: [])).isEmpty)
    }

    @Test func damagedBytesAreErrorsNotCrashes() {
        let rows = StateCodec.encode(changes: Self.everyRow())
        // Every truncation, and every single byte changed (each either decodes or throws).
        for length in stride(from: 0, to: rows.count, by: 1) {
            #expect(throws: StateStoreError.self) { try StateCodec.decodeChanges(Array(rows.prefix(length))) }
        }
        for index in rows.indices {
            var damaged = rows
            damaged[index] ^= 0xA5
            _ = try? StateCodec.decodeChanges(damaged)
        }
        #expect(throws: StateStoreError.self) { try StateCodec.decodeChanges([StateCodec.changeFormat + 1] + rows.dropFirst()) }
        #expect(throws: StateStoreError.self) { try StateCodec.decodeChanges(rows + [0]) }
        #expect(throws: StateStoreError.self) { try StateCodec.decodeChange([1, 99]) }
        let frames = StateCodec.encode(frames: [DeviceFrame(deviceID: "d", connectionID: 1, message: ["a": [1, .raw([1, 2])]])])
        for length in 0..<frames.count {
            #expect(throws: StateStoreError.self) { try StateCodec.decodeFrames(Array(frames.prefix(length))) }
        }
        // Deep nesting is refused before it can exhaust the stack.
        let deep: [UInt8] = [1, 1, 1, UInt8(ascii: "d"), 1, 0] + Array([[UInt8]](repeating: [6, 1], count: 100_000).joined()) + [0]
        #expect(throws: StateStoreError.self) { try StateCodec.decodeFrames(deep) }
    }

    /// A write of an owner that routed hand-offs: its own journal record, and delivery parts for
    /// records of two other instances (told apart by sequence number). Each instance reads back
    /// its own parts and passes over the rest undecoded; read again later, the write comes
    /// without the parts already applied.
    @Test func anInstanceReadsItsOwnDeliveryPartsAndPassesOverTheRest() throws {
        let record = StateCodecTests.fullRecord()
        var mine = StateCodecTests.sparseRecord().delivery
        mine.outcome = .delivered
        mine.explanation = "delivered to the device"
        mine.noteTransition(.delivered, atMs: 12)
        var theirs = mine
        theirs.outcome = .stored
        let write = StateCodec.encode(changes: [
            .recordSaved(record), .recordDelivered(sequence: 100, delivery: mine), .recordDelivered(sequence: 101, delivery: theirs),
            .recordDelivered(sequence: 102, delivery: mine),
        ])
        let isMine = { (sequence: UInt64) in sequence % 2 == 0 }
        let parts = try #require(try StateCodec.deliveryParts(in: write, where: isMine))
        #expect(parts.count == 2)
        for (part, sequence) in zip(parts, [100, 102] as [UInt64]) {
            guard case .change(.recordDelivered(let found, let delivery)) = part else {
                Issue.record("not a delivery part: \(part)")
                continue
            }
            #expect(found == sequence)
            #expect(String(describing: delivery) == String(describing: mine))
        }
        // Later, with the whole write: the record and the other instance's part, not these.
        let rest = try StateCodec.decodeRows(write, skippingDeliveryOf: isMine)
        #expect(rest.count == 2)
        // (A record with a collapse id comes decoded, others kept as stored.)
        switch rest.first {
        case .keptRecord(let kept): #expect(kept.sequence == record.sequence)
        case .change(.recordSaved(let saved)): #expect(saved.sequence == record.sequence)
        default: Issue.record("the record first: \(rest)")
        }
        guard case .change(.recordDelivered(101, let delivery)) = rest.last else {
            Issue.record("part 101 last: \(rest)")
            return
        }
        #expect(delivery.outcome == .stored)
        #expect(try StateCodec.decodeRows(write).count == 4)
        // Other rows than the journal's: not this reading's to judge.
        let mixed = StateCodec.encode(changes: [.recordDelivered(sequence: 100, delivery: mine), .deviceRemoved(id: "phone")])
        #expect(try StateCodec.deliveryParts(in: mixed, where: isMine) == nil)
        // Damaged: an error, never a crash.
        for length in 0..<write.count {
            #expect(throws: StateStoreError.self) { _ = try StateCodec.deliveryParts(in: Array(write.prefix(length)), where: isMine) }
        }
    }

    /// A journal record goes into its row with its length ahead of it in three bytes, filled in
    /// once the record is written; a record longer than that holds (2 MiB) gets a longer one.
    /// Both read back whole, as a row and kept in their stored form.
    @Test func recordsOfEverySizeReadBackFromTheirRows() throws {
        for size in [0, 100, 16_384, 3_000_000] {
            var record = StateCodecTests.sparseRecord()
            record.payload = [UInt8](repeating: UInt8(ascii: "x"), count: size)
            record.payloadSize = size
            let row = StateCodec.encode(.recordSaved(record))
            guard case .recordSaved(let decoded) = try StateCodec.decodeChange(row) else {
                Issue.record("not a record")
                continue
            }
            #expect(decoded.payload.count == size)
            #expect(StateCodec.encode(decoded) == StateCodec.encode(record))
            let kept = try StateCodec.decodeRows(StateCodec.encode(changes: [.recordSaved(record)]))
            guard case .keptRecord(let stored) = kept.first else {
                Issue.record("not kept as stored: \(kept)")
                continue
            }
            #expect(stored.bytes == StateCodec.encode(record))
        }
    }

    /// Outcomes are matched by their bytes: every one reads back as itself, an unknown one is
    /// a damaged row.
    @Test func everyDeliveryOutcomeReadsBack() throws {
        for outcome in DeliveryOutcome.allCases {
            var delivery = RecordDelivery()
            delivery.outcome = outcome
            #expect(try StateCodec.decodeDelivery(StateCodec.encodeDelivery(sequence: 7, delivery)).delivery.outcome == outcome)
        }
        var delivery = RecordDelivery()
        delivery.outcome = .coalesced
        let bytes = StateCodec.encodeDelivery(sequence: 7, delivery)
        let at = try #require(bytes.firstIndex(of: UInt8(ascii: "c")))
        var unknown = bytes
        unknown[at] = UInt8(ascii: "x")
        #expect(throws: StateStoreError.self) { try StateCodec.decodeDelivery(unknown) }
    }

    @Test func storageFieldsMapBackAndRemovalsAreKnown() {
        let keys: [ChangeKey] = [
            .device("d:1"), .token("ab"), .key("K"), .app("com.a"), .faults, .waiting(7), .record(UInt64.max), .channel("a/b+="),
            .liveActivities("l:x"),
        ]
        #expect(
            keys.map(\.storageField) == ["d:d:1", "t:ab", "k:K", "a:com.a", "f", "w:7", "r:18446744073709551615", "c:a/b+=", "l:l:x"])
        #expect(keys.map { ChangeKey(storageField: $0.storageField) } == keys)
        #expect(ChangeKey(storageField: "w:x") == nil && ChangeKey(storageField: "x:1") == nil && ChangeKey(storageField: "d") == nil)
        let removals = Self.everyRow().filter(\.isRemoval).map { $0.key!.storageField }
        #expect(removals == ["d:phone", "k:KEY", "a:com.a", "w:18446744073709551615", "r:5", "c:Yg==", "l:phone"])
    }

    // MARK: Applying rows: hand-written transitions

    /// A pair whose replica (instance 2) holds "phone" on one of its sockets, which the
    /// primary (taking instance 2 for stopped) has just marked disconnected.
    private func phoneOfTheReplicaMarkedDisconnected() throws -> ReplicaPair {
        let p = try ReplicaPair()
        let mine = UInt64(2) << DeviceOwnership.instanceShift | 10
        p.replica.ownership = DeviceOwnership(members: [1, 2], me: 2)
        _ = try p.connect("phone", connection: mine)
        try p.sync("connect")
        p.world { $0.disconnectDevice("phone", connectionID: mine, nowMs: p.now) }
        return p
    }

    /// Another instance marking disconnected a device whose socket this one holds (it took this
    /// one for stopped) is told apart from a device leaving, so the socket is attached again.
    @Test func aDeviceMarkedDisconnectedElsewhereIsNamed() throws {
        let p = try phoneOfTheReplicaMarkedDisconnected()
        let applied = try p.sync("marked disconnected by instance 1")
        #expect(applied.detachedHere == ["phone"])
        // A device of another instance's socket, or one that moved to another socket, is not.
        let theirs = UInt64(1) << DeviceOwnership.instanceShift | 11
        _ = try p.connect("phone", connection: theirs)
        try p.sync("reconnect on instance 1")
        p.world { $0.disconnectDevice("phone", connectionID: theirs, nowMs: p.now) }
        #expect(try p.sync("gone from instance 1").detachedHere.isEmpty)
    }

    /// The same found by a reload (this copy was cut off and loads the state again): the
    /// loaded state has the device disconnected that this copy had on one of its sockets.
    @Test func aReloadThatFindsADeviceHeldHereDisconnectedNamesIt() throws {
        let p = try phoneOfTheReplicaMarkedDisconnected()
        let loaded = p.world { $0.persistedState }
        let pair = p
        func reload(_ state: PersistedState) throws -> ReplicationApplied {
            try p.replica.applyReplicated([.reset(state)], nowMs: p.now, configured: p.configured) { stored throws(StateStoreError) in
                try pair.loadKey(stored)
            }
        }
        #expect(try reload(loaded).detachedHere == ["phone"])
        #expect(try reload(loaded).detachedHere.isEmpty, "this copy no longer holds it")
    }

    /// A device held here marked disconnected elsewhere is attached again even when nothing
    /// was reset: the announcement alone reaches the observer. Before, only a reset did, and
    /// such devices stayed disconnected with their sockets open.
    @Test func devicesMarkedDisconnectedElsewhereAreAttachedAgainWithoutAReset() {
        let state = EmulatorState(start: World())
        let told = Mutex<[Bool]>([])
        state.observeSharedResets { reattach in told.withLock { $0.append(reattach) } }
        state.announceSharedChanges(records: [], reset: false, devicesReset: true)
        #expect(told.withLock { $0 } == [true])
        state.announceSharedChanges(records: [1], reset: false, devicesReset: false)
        #expect(told.withLock { $0 } == [true])
        // A reload alone is told too (to detach devices on connections closed here), without
        // attaching the others again.
        state.announceSharedChanges(records: [], reset: true, devicesReset: false)
        #expect(told.withLock { $0 } == [true, false])
    }

    @Test func storedThenInFlightThenAcknowledged() throws {
        let p = try ReplicaPair()
        let frames = try p.connect("phone", connection: 10)
        try p.sync("connect")
        #expect(p.replica.registry.devices["phone"]?.connectionID == 10, "the connection id is kept")
        let token = try #require(p.token(of: "phone"))
        p.world { $0.disconnectDevice("phone", connectionID: 10, nowMs: p.now) }
        let applied = try p.sync("disconnect")
        #expect(applied.leftConnections == [DeviceConnectionID(deviceID: "phone", connectionID: 10)])
        let stored = try p.push(token)
        try p.sync("stored")
        #expect(p.replica.delivery.waiting.map(\.slot) == [.stored])
        #expect(p.lastApplied.waitingDeviceIDs == ["phone"])
        #expect(frames.contains { $0.message["type"] == "welcome" })

        let again = try p.connect("phone", connection: 11)
        try p.sync("reconnect: stored → in flight")
        #expect(p.replica.delivery.waiting.map(\.slot) == [.inFlight])
        #expect(p.replica.delivery.pendingCount == 1)
        let id = UInt64(try #require(again.first { $0.message["type"] == "notification" }?.message["id"]?.intValue))
        _ = try p.state.withWorld { world throws(DeviceRequestError) in
            try world.acknowledge(deviceID: "phone", connectionID: 11, deliveryID: id, nowMs: p.now)
        }
        try p.sync("ack")
        #expect(p.replica.delivery.waiting.isEmpty)
        #expect(p.replica.records.record(sequence: stored.recordSequence)?.outcome == .delivered)
        #expect(p.lastApplied.recordSequences == [stored.recordSequence])

        // In flight again, then the device goes away: back to the store on both.
        _ = try p.push(token)
        try p.sync("in flight")
        p.world { $0.disconnectDevice("phone", connectionID: 11, nowMs: p.now) }
        try p.sync("disconnect with a delivery in flight")
        #expect(p.replica.delivery.waiting.map(\.slot) == [.stored])
        #expect(try p.replicaAcceptsAPush().recordSequence > p.highestApplied)
    }

    @Test(arguments: [false, true])
    func coalescingInTheStoreAndOnScreen(keepsRecordsEncoded: Bool) throws {
        let p = try ReplicaPair(keepsRecordsEncoded: keepsRecordsEncoded)
        _ = try p.connect("phone", connection: 10)
        let token = try #require(p.token(of: "phone"))
        p.world { $0.disconnectDevice("phone", connectionID: 10, nowMs: p.now) }
        let first = try p.push(token)
        let second = try p.push(token)
        try p.sync("two stored, one kept")
        #expect(p.replica.records.record(sequence: first.recordSequence)?.outcome == .coalesced)
        #expect(p.replica.delivery.waiting.map(\.notification.sequence) == [second.recordSequence])

        // On screen: W1 delivers to the virtual device with a collapse id; a push with the same
        // id accepted by the replica replaces it there.
        let shown = try p.push(ReplicaPair.pinned, headers: [("apns-collapse-id", "score")])
        try p.sync("delivered with a collapse id")
        #expect(p.replica.records.record(sequence: shown.recordSequence)?.outcome == .delivered)
        let local = EmulatorState(start: p.replica)
        let endpoint = ProviderEndpoint(state: local, clock: p.clock)
        var connection = ProviderConnectionContext(
            connectionID: 5, listenerEnvironment: .sandbox, serverName: nil,
            tokenPolicy: TokenPolicy(), random: FastRandom(seed: 5))
        let fields: [HeaderField] = [
            HeaderField(":method", "POST"), HeaderField(":scheme", "https"), HeaderField(":authority", "a"),
            HeaderField(":path", "/3/device/\(ReplicaPair.pinned)"),
            HeaderField("authorization", "bearer \(try p.keyA.token(issuedAt: p.clock.nowSeconds()))"), HeaderField("apns-topic", "com.example.app"),
            HeaderField("apns-collapse-id", "score"),
        ]
        let replaced = endpoint.handle(
            PushRequest(streamID: 1, headers: fields, body: Array(#"{"aps":{"alert":"2"}}"#.utf8)), connection: &connection)
        #expect(replaced.recordSequence > p.highestApplied)
        #expect(local.withWorld { $0.records.record(sequence: shown.recordSequence)?.outcome } == .coalesced)
    }

    @Test func deferredAndBatchedSlotsAndTheirRelease() throws {
        var options = DeliveryOptions()
        options.backgroundBudgetPerHour = 1
        options.lowPriorityDelayMs = 60_000
        let p = try ReplicaPair(options: options)
        let frames = try p.connect("phone", connection: 10)
        let token = try #require(p.token(of: "phone"))
        #expect(!frames.isEmpty)
        let background: [(String, String)] = [("apns-push-type", "background"), ("apns-priority", "5")]
        _ = try p.push(token, body: #"{"aps":{"content-available":1}}"#, headers: background)
        _ = try p.push(token, body: #"{"aps":{"content-available":1}}"#, headers: background)
        _ = try p.push(token, headers: [("apns-priority", "5")])
        try p.sync("batched")
        #expect(p.replica.delivery.waiting.allSatisfy { if case .batched = $0.slot { return true } else { return false } })
        p.clock.advance(seconds: 61)
        _ = p.world { $0.tick(nowMs: p.now) }
        try p.sync("released: one wake, one held, one alert")
        #expect(Set(p.replica.delivery.waiting.map { "\($0.slot)" }).count == 2)
        _ = try p.state.withWorld { world throws(DeviceRequestError) in
            try world.setLowPowerMode(deviceID: "phone", true, nowMs: p.now)
        }
        try p.sync("low power")
    }

    @Test func channelsAreReplicatedWithTheirCountsAndStoredMessages() throws {
        let p = try ReplicaPair()
        var ids = ["bGl2ZQ==", "ZGVsZXRlZA==", "c3RvcmVk"]
        let made = p.world { world in
            ["com.example.app", "com.example.app", "com.example.other"].enumerated().map { index, bundle in
                world.channels.create(
                    bundleID: bundle, environment: .sandbox, policy: index == 2 ? .mostRecentMessageStored : .noMessageStored,
                    nowMs: Int64(index), makeID: { ids.removeFirst() })!
            }
        }
        try p.sync("created")
        #expect(p.replica.channels.liveCount(bundleID: "com.example.app", environment: .sandbox) == 2)
        p.world { world in
            _ = world.channels.delete(id: made[1].id, bundleID: "com.example.app", environment: .sandbox, nowMs: 5)
            for n in 0..<3 {
                world.channels.recordBroadcast(
                    id: made[2].id,
                    message: StoredBroadcast(key: "R\(n)", payload: [UInt8(n)], priority: 10, receivedAtMs: 10 + Int64(n), expiresAtMs: 99))
            }
        }
        let rows = p.sink.peek()
        #expect(rows.filter { $0.key == .channel(made[2].id) }.count == 1, "a burst of broadcasts is one row")
        try p.sync("deleted and broadcast to")
        #expect(p.replica.channels.liveCount(bundleID: "com.example.app", environment: .sandbox) == 1)
        #expect(p.replica.channels.live(id: made[1].id, bundleID: "com.example.app", environment: .sandbox) == nil)
        #expect(p.replica.channels.channels[made[2].id]?.storedMessage?.requestID == "R2")
        #expect(p.replica.channels.channels[made[2].id]?.broadcasts == 3)
        // The replica never hands out an id it learnt about.
        var offers = [made[1].id, "ZnJlc2g="]
        let fresh = p.replica.channels.create(
            bundleID: "com.example.app", environment: .sandbox, policy: .noMessageStored, nowMs: 6, makeID: { offers.removeFirst() })
        #expect(fresh?.id == "ZnJlc2g=")
        p.state.reset()
        try p.sync("reset")
        #expect(p.replica.channels.all.isEmpty)
    }

    @Test func aResetIsAppliedAsALiveReplica() throws {
        let p = try ReplicaPair()
        _ = try p.connect("phone", connection: 10)
        let token = try #require(p.token(of: "phone"))
        _ = try p.push(token)
        _ = try p.push(ReplicaPair.pinned)
        p.world { $0.credentials.addApp(teamID: "TEAMAAAAAA", bundleID: "com.example.extra") }
        try p.sync("before the reset")
        let before = p.replica.records.nextSequence
        p.state.reset()
        let applied = try p.sync("reset")
        #expect(applied.reset)
        #expect(applied.deviceIDs == ["ci", "phone"])
        #expect(p.replica.registry.devices.keys.sorted() == ["ci"])
        #expect(p.replica.delivery.pendingCount == 0)
        #expect(p.replica.records.nextSequence == before, "numbers continue")
        #expect(try p.replicaAcceptsAPush().recordSequence >= before)

        // A reset state that names a connection and an in-flight notification keeps both.
        var state = p.world { $0.persistedState }
        var device = try #require(state.devices.first)
        device.connectionID = 77
        state.devices = [device]
        var n = StateCodecTests.notification()
        n.sequence = 500
        n.deviceID = device.id
        state.waiting = [WaitingNotification(slot: .inFlight, notification: n)]
        let pair = p
        let result = try p.replica.applyReplicated([.reset(state)], nowMs: p.now, configured: p.configured) { stored throws(StateStoreError) in
            try pair.loadKey(stored)
        }
        #expect(result.reset)
        #expect(p.replica.registry.devices[device.id]?.connectionID == 77)
        #expect(p.replica.delivery.waiting.map(\.slot) == [.inFlight])
        #expect(p.replica.records.nextSequence > 500)
        #expect(p.replica.takeStateChanges(recordSequences: p.replica.records.takeChanges()).isEmpty)
    }

    @Test(arguments: [false, true])
    func evictionKeepsBothJournalsAlike(keepsRecordsEncoded: Bool) throws {
        let p = try ReplicaPair(capacity: 3, keepsRecordsEncoded: keepsRecordsEncoded)
        var sequences: [UInt64] = []
        for round in 0..<7 {
            sequences.append(try p.push(ReplicaPair.pinned).recordSequence)
            if round % 3 == 0 { try p.sync("push \(round)") }
        }
        try p.sync("evicted")
        #expect(p.replica.records.newestFirst(limit: 10).map(\.sequence) == sequences.suffix(3).reversed())
        _ = p.world { world in world.deleteRecords { $0.sequence == sequences[5] } }
        try p.sync("deleted")
        _ = p.world { world in world.deleteRecords { _ in true } }
        try p.sync("all deleted")
        #expect(p.replica.records.count == 0)
        #expect(try p.replicaAcceptsAPush().recordSequence == sequences[6] + 1)
    }

    /// `notificationsDropped` (the journal's evictions) counts since the instance started: a
    /// reload of the shared state (a reset row) and a reset go on from the count before.
    @Test func droppedRecordsKeepCountingAcrossAReloadAndAReset() throws {
        let p = try ReplicaPair(capacity: 3)
        for _ in 0..<5 { _ = try p.push(ReplicaPair.pinned) }
        try p.sync("five pushes")
        #expect(p.world { $0.records.evicted } == 2)
        #expect(p.replica.records.evicted == 2)
        // The replica reloads the whole shared state, as after Redis came back.
        let state = p.world { $0.persistedState }
        let pair = p
        _ = try p.replica.applyReplicated([.reset(state)], nowMs: p.now, configured: p.configured) { stored throws(StateStoreError) in
            try pair.loadKey(stored)
        }
        #expect(p.replica.records.evicted == 2, "a reload started the count again")
        #expect(p.replica.records.count == 3)
        #expect(p.replica.takeStateChanges(recordSequences: p.replica.records.takeChanges()).isEmpty)
        p.state.reset()
        #expect(p.world { $0.records.evicted } == 2, "a reset started the count again")
        try p.sync("reset")
        #expect(p.replica.records.evicted == 2)
        for _ in 0..<4 { _ = try p.push(ReplicaPair.pinned) }
        try p.sync("four more")
        #expect(p.world { $0.records.evicted } == 3)
        #expect(p.replica.records.evicted == 3)
    }

    /// A follower keeps another instance's records in their stored form until something reads
    /// them, and every way of reading one gives the record the producer has.
    @Test func aFollowerKeepsRecordsEncodedUntilTheyAreRead() throws {
        let p = try ReplicaPair(keepsRecordsEncoded: true)
        let plain = try p.push(ReplicaPair.pinned)
        let collapsing = try p.push(ReplicaPair.pinned, headers: [("apns-collapse-id", "score")])
        let rejected = try p.push("not-a-token")
        try p.sync("three pushes")
        func original(_ sequence: UInt64) -> [UInt8]? { p.world { $0.records.record(sequence: sequence) }.map(StateCodec.encode) }
        func kept(_ sequence: UInt64) -> Bool {
            var found = false
            for index in 0..<p.replica.records.count {
                p.replica.records.withRecordAsStored(newestFirstIndex: index) { if $0.sequence == sequence { found = $0.keptEncoded != nil } }
            }
            return found
        }
        #expect(p.replica.records.mayKeepEncoded)
        #expect(kept(plain.recordSequence) && kept(rejected.recordSequence), "kept in their stored form")
        #expect(!kept(collapsing.recordSequence), "a collapse id is needed at once (what is on screen)")
        for sequence in [plain.recordSequence, collapsing.recordSequence, rejected.recordSequence] {
            let read = try #require(p.replica.records.record(sequence: sequence))
            #expect(read.keptEncoded == nil)
            #expect(StateCodec.encode(read) == original(sequence), "record \(sequence) reads back as the producer has it")
            #expect(p.replica.records.apnsID(sequence: sequence) == read.apnsID)
        }
        // Found by apns-id (any case) or apns-unique-id in their stored form: only the match
        // is decoded, the others stay kept.
        let producerPlain = try #require(p.world { $0.records.record(sequence: plain.recordSequence) })
        let byID = try #require(p.replica.records.newest(withID: producerPlain.apnsID.lowercased()))
        #expect(byID.sequence == plain.recordSequence && byID.keptEncoded == nil)
        #expect(kept(plain.recordSequence) && kept(rejected.recordSequence), "still kept after a lookup")
        let unique = try #require(producerPlain.uniqueID, "a sandbox push has an apns-unique-id")
        #expect(p.replica.records.newest(withID: unique.uppercased())?.sequence == plain.recordSequence)
        #expect(p.replica.records.newest(withID: "0E1B2C3D-0000-4000-8000-000000000000") == nil)
        #expect(p.replica.records.newest(withID: "") == nil)
        let byToken = p.replica.records.newestFirst(limit: 10) { $0.token == "not-a-token" }
        #expect(byToken.map(\.sequence) == [rejected.recordSequence], "a filter sees the fields")
        #expect(p.replica.records.oldest { $0.status == 200 }?.sequence == plain.recordSequence)
        // Changing what became of one leaves it kept (only its delivery part is read); it reads
        // and writes back with the change.
        p.replica.records.update(sequence: plain.recordSequence) { $0.deliveryNote = "seen" }
        #expect(kept(plain.recordSequence) && kept(rejected.recordSequence))
        #expect(p.replica.records.record(sequence: plain.recordSequence)?.deliveryNote == "seen")
        #expect(p.replica.records.delivery(sequence: plain.recordSequence)?.deliveryNote == "seen")
        let written = try #require(p.replica.records.record(sequence: plain.recordSequence).map(StateCodec.encode))
        #expect(try StateCodec.decodeRecord(written).deliveryNote == "seen")
        // A read of the journal through the state decodes everything once; other reads do not.
        let state = EmulatorState(start: p.replica)
        #expect(state.readWorld { world -> Bool in world.records.mayKeepEncoded })
        #expect(state.readJournal { world -> Bool in !world.records.mayKeepEncoded })
    }

    /// Records kept encoded are decoded outside the lock, a slice at a time; one that a newer
    /// row replaced meanwhile is not overwritten with the older one decoded.
    @Test func keptRecordsAreDecodedOutsideTheLockWithoutLosingANewerRow() throws {
        let p = try ReplicaPair(keepsRecordsEncoded: true)
        let one = try p.push(ReplicaPair.pinned)
        let two = try p.push(ReplicaPair.pinned)
        try p.sync("two pushes")
        let kept = p.replica.records.keptRecords(limit: 10)
        #expect(kept.map(\.sequence) == [two.recordSequence, one.recordSequence], "newest first")
        // A newer row of the first record arrives before the decoded ones are put back.
        p.world { world in _ = world.records.update(sequence: one.recordSequence) { $0.deliveryNote = "newer" } }
        try p.sync("the first record changed")
        p.replica.records.replaceKept(kept.map { (from: $0, to: StateCodec.decodeKept($0)) })
        #expect(p.replica.records.record(sequence: one.recordSequence)?.deliveryNote == "newer")
        p.replica.records.withRecordAsStored(newestFirstIndex: 0) { #expect($0.sequence == two.recordSequence && $0.keptEncoded == nil) }
        p.replica.records.withRecordAsStored(newestFirstIndex: 1) { #expect($0.keptEncoded != nil, "the newer row, still as it came") }
        // Through the state: slices until none is left.
        let state = EmulatorState(start: p.replica)
        #expect(state.decodeKeptRecords(slice: 1), "one decoded, more may be left")
        #expect(!state.decodeKeptRecords(slice: 1), "none left")
        #expect(state.readWorld { world -> Bool in !world.records.mayKeepEncoded })
    }

    @Test func marksMadeBeforeApplyingAreKept() throws {
        let p = try ReplicaPair()
        try p.replica.registry.addDevice(id: "local", isVirtual: true, nowMs: p.now)
        _ = try p.push(ReplicaPair.pinned)
        let rows = p.sink.take()
        let pair = p
        _ = try p.replica.applyReplicated(rows, nowMs: p.now, configured: p.configured) { stored throws(StateStoreError) in
            try pair.loadKey(stored)
        }
        let own = p.replica.takeStateChanges(recordSequences: p.replica.records.takeChanges())
        #expect(own.map { $0.key?.storageField } == ["d:local"], "only the replica's own change")
    }

    @Test func aKeyThatFailsToLoadLeavesTheWorldUntouched() throws {
        let p = try ReplicaPair()
        let before = StateCodec.encode(.reset(p.replica.persistedState))
        #expect(throws: StateStoreError.self) {
            _ = try p.replica.applyReplicated([.deviceRemoved(id: "ci"), .keySaved(Self.key())], nowMs: 0, configured: p.configured) {
                stored throws(StateStoreError) in throw StateStoreError("no \(stored.keyID)")
            }
        }
        #expect(StateCodec.encode(.reset(p.replica.persistedState)) == before)
    }

    // MARK: Applying rows: a long random run

    @Test(arguments: [false, true])
    func aLongRandomRunKeepsTheReplicaEqual(keepsRecordsEncoded: Bool) throws {
        var options = DeliveryOptions()
        options.backgroundBudgetPerHour = 2
        options.lowPriorityDelayMs = 20_000
        options.unregisteredDelayMs = 15_000
        options.unregisteredAfterPushes = 2
        options.deviceWindow = 3
        options.deviceAckTimeoutMs = 90_000
        options.defaultStorageMs = 600_000
        let p = try ReplicaPair(capacity: 40, options: options, keepsRecordsEncoded: keepsRecordsEncoded)
        var random = FastRandom(seed: 0x5EED_2026)  // a fixed seed: the same long run every time
        let sockets = ["s1", "s2", "s3"]
        let virtuals = ["v1", "v2"]
        var nextConnection: UInt64 = 100
        var deliveries: [(device: String, connection: UInt64, id: UInt64)] = []
        var runtimeKeys = 0
        var resets = 0
        var counts: [String: Int] = [:]
        var slots: Set<String> = []
        var outcomes: Set<String> = []

        func note(_ frames: [DeviceFrame]) {
            for frame in frames where frame.message["type"] == "notification" {
                if let id = frame.message["id"]?.intValue { deliveries.append((frame.deviceID, frame.connectionID, UInt64(id))) }
            }
        }
        func anyDevice() -> String? { p.world { $0.registry.devices.keys.sorted() }.randomElement(using: &random) }
        func anyApp() -> String { ReplicaPair.apps.randomElement(using: &random)! }
        func settings() -> AppSettings {
            AppSettings(
                authorization: Authorization.allCases.randomElement(using: &random)!,
                appState: AppState.allCases.randomElement(using: &random)!, backgroundMode: Bool.random(using: &random))
        }
        let now = { p.now }

        for step in 0..<2_000 {
            let action = Int.random(in: 0..<100, using: &random)
            var name = ""
            switch action {
            case 0..<30:
                name = "push"
                let tokens = p.world { $0.registry.tokens.values.map { ($0.token, $0.bundleID) }.sorted { $0.0 < $1.0 } }
                guard let (token, bundle) = tokens.randomElement(using: &random) else { break }
                var headers: [(String, String)] = []
                var body = #"{"aps":{"alert":"hi"}}"#
                switch Int.random(in: 0..<6, using: &random) {
                case 0:
                    headers = [("apns-push-type", "background"), ("apns-priority", "5")]
                    body = #"{"aps":{"content-available":1}}"#
                case 1: headers = [("apns-priority", "5")]
                case 2: headers = [("apns-collapse-id", "c\(Int.random(in: 0..<2, using: &random))")]
                case 3: headers = [("apns-expiration", "0")]
                case 4: headers = [("apns-expiration", String(p.clock.nowSeconds() + Int64.random(in: 1...120, using: &random)))]
                default: break
                }
                note(try p.push(token, topic: bundle, body: body, headers: headers).deviceFrames)
            case 30..<38:
                name = "connect"
                let device = sockets.randomElement(using: &random)!
                nextConnection += 1
                let apps = ReplicaPair.apps.filter { _ in Bool.random(using: &random) }
                if let frames = try? p.connect(
                    device, connection: nextConnection, apps: apps, settings: settings(),
                    lowPower: Int.random(in: 0..<5, using: &random) == 0)
                {
                    note(frames)
                }
            case 38..<43:
                name = "disconnect"
                let connected = p.world { w in sockets.compactMap { id in w.registry.devices[id]?.connectionID.map { (id, $0) } } }
                if let (device, connection) = connected.randomElement(using: &random) {
                    p.world { $0.disconnectDevice(device, connectionID: connection, nowMs: now()) }
                }
            case 43..<55:
                name = "ack"
                if !deliveries.isEmpty {
                    let d = deliveries.remove(at: Int.random(in: 0..<deliveries.count, using: &random))
                    if let frames = try? p.state.withWorld({ world throws(DeviceRequestError) in
                        try world.acknowledge(deviceID: d.device, connectionID: d.connection, deliveryID: d.id, nowMs: now())
                    }) {
                        note(frames)
                    }
                }
            case 55..<61:
                name = "tick"
                p.clock.advance(milliseconds: Int64.random(in: 0...40_000, using: &random))
                note(p.world { $0.tick(nowMs: now()) })
            case 61..<64:
                name = "virtual device"
                let id = virtuals.randomElement(using: &random)!
                let app = anyApp()
                let s = settings()
                p.world { w in
                    if w.registry.devices[id] == nil { _ = try? w.registry.addDevice(id: id, isVirtual: true, nowMs: now()) }
                    _ = try? w.installApp(deviceID: id, bundleID: app, environment: .sandbox, kinds: [.app], settings: s, nowMs: now())
                }
            case 64..<68:
                name = "uninstall"
                if let device = anyDevice() {
                    let app = anyApp()
                    _ = try? p.state.withWorld { world throws(DeviceRequestError) in
                        try world.uninstallApp(deviceID: device, bundleID: app, nowMs: now())
                    }
                }
            case 68..<74:
                name = "app settings"
                if let device = anyDevice() {
                    let app = anyApp()
                    let s = settings()
                    if let (_, frames) = try? p.state.withWorld({ world throws(DeviceRequestError) in
                        try world.updateApp(
                            deviceID: device, bundleID: app, appState: s.appState,
                            authorization: Bool.random(using: &random) ? s.authorization : nil,
                            backgroundMode: s.backgroundMode, nowMs: now())
                    }) {
                        note(frames)
                    }
                }
            case 74..<77:
                name = "offline / low power"
                if let device = anyDevice() {
                    let on = Bool.random(using: &random)
                    let lowPower = Bool.random(using: &random)
                    if let frames = try? p.state.withWorld({ world throws(DeviceRequestError) in
                        if lowPower { return try world.setLowPowerMode(deviceID: device, on, nowMs: now()) }
                        return try world.setForcedOffline(deviceID: device, on, nowMs: now())
                    }) {
                        note(frames)
                    }
                }
            case 77..<80:
                name = "login / logout"
                if let device = anyDevice() {
                    let user = ["alice", "bob", nil].randomElement(using: &random)!
                    _ = try? p.state.withWorld { world throws(DeviceRequestError) in
                        if let user { _ = try world.login(deviceID: device, userID: user) } else { _ = try world.logout(deviceID: device) }
                    }
                }
            case 80..<82:
                name = "rotate / erase / restore"
                if let device = anyDevice() {
                    let target = anyDevice() ?? device
                    let which = Int.random(in: 0..<3, using: &random)
                    let app = anyApp()
                    _ = try? p.state.withWorld { world throws(DeviceRequestError) in
                        switch which {
                        case 0: _ = try world.rotateTokens(deviceID: device, bundleID: app, nowMs: now())
                        case 1: try world.eraseDevice(device, nowMs: now())
                        default: _ = try world.restoreBackup(from: device, to: target, nowMs: now())
                        }
                    }
                }
            case 82..<84:
                name = "faults"
                let kind = Int.random(in: 0..<3, using: &random)
                p.world { w in
                    switch kind {
                    case 0:
                        _ = w.faults.add(
                            FaultInjectionRule(
                                id: "", match: FaultMatch(topic: "com.example.other"),
                                action: FaultAction(kind: .respond(status: 500, reason: "InternalServerError")),
                                times: 3))
                    case 1: _ = w.faults.remove(id: w.faults.rules.first?.id ?? "")
                    default: w.faults.removeAll()
                    }
                }
            case 84..<86:
                name = "keys and apps"
                runtimeKeys += 1
                let n = runtimeKeys
                let verifier = p.keyA.verifier
                let add = Bool.random(using: &random)
                p.world { w in
                    if add {
                        w.credentials.add(
                            ProviderKey(
                                teamID: "TEAMRRRRRR", keyID: "KEYRT\(n % 4)", topics: n % 2 == 0 ? ["com.r"] : nil,
                                verifier: verifier, source: "api", pem: "PEM \(n)", addedAtRunTime: true))
                        w.credentials.addApp(teamID: n % 2 == 0 ? "TEAMRRRRRR" : "TEAMSSSSSS", bundleID: "com.r\(n % 3)")
                    } else {
                        w.credentials.removeKey(id: "KEYRT\(n % 4)")
                        w.credentials.removeApp(bundleID: "com.r\(n % 3)")
                    }
                }
            case 86..<88:
                name = "token state / remove device"
                let tokens = p.world { $0.registry.tokens.keys.sorted() }
                if Bool.random(using: &random), let token = tokens.randomElement(using: &random) {
                    let state: TokenState = [.rateLimited, .expired, .active].randomElement(using: &random)!
                    p.world { _ = $0.registry.setState(token: token, state) }
                } else if let device = anyDevice(), device != "ci" {
                    p.world { _ = try? $0.registry.removeDevice(id: device, nowMs: now()) }
                }
            case 88..<90:
                name = "delete records"
                let modulus = UInt64.random(in: 2...9, using: &random)
                _ = p.world { world in world.deleteRecords { $0.sequence % modulus == 0 } }
            case 90..<92:
                name = "tap"
                let shown = p.world { w in
                    w.records.newestFirst(limit: 5) { $0.outcome == .delivered && $0.display == "banner" && $0.deviceID != nil }
                }
                if let record = shown.randomElement(using: &random), let device = record.deviceID {
                    if let result = try? p.state.withWorld({ world throws(DeviceRequestError) in
                        try world.tap(deviceID: device, apnsID: record.apnsID, nowMs: now())
                    }) {
                        note(result.frames)
                    }
                }
            case 92:
                if Int.random(in: 0..<4, using: &random) == 0 {
                    name = "reset"
                    resets += 1
                    p.state.reset()
                    deliveries = []
                } else {
                    name = "long wait"
                    p.clock.advance(seconds: 100)
                    note(p.world { $0.tick(nowMs: now()) })
                }
            default:
                name = "push to a socket device"
                if let device = sockets.randomElement(using: &random), let token = p.token(of: device) {
                    note(try p.push(token, headers: Bool.random(using: &random) ? [("apns-collapse-id", "s")] : []).deviceFrames)
                }
            }
            counts[name, default: 0] += 1
            try p.sync("step \(step) (\(name))")
            for waiting in p.replica.delivery.waiting {
                switch waiting.slot {
                case .stored: slots.insert("stored")
                case .deferred: slots.insert("deferred")
                case .batched: slots.insert("batched")
                case .inFlight: slots.insert("in flight")
                case .handedOff: slots.insert("handed off")
                }
            }
            outcomes.formUnion(p.replica.records.newestFirst(limit: 3).map(\.outcome.rawValue))
            if p.failed { break }  // one readable failure rather than two thousand
        }
        // The run went through the interesting places.
        #expect(resets >= 1)
        #expect(counts["push", default: 0] > 400)
        #expect(slots == ["stored", "deferred", "batched", "in flight"])
        // (A held push shows in the slots above: its record's outcome, sampled from the newest
        // three, may be replaced before a sample sees it.)
        #expect(outcomes.isSuperset(of: ["delivered", "stored", "coalesced", "expired", "pending"]), "\(outcomes)")
        print("replication run: \(counts.sorted { $0.key < $1.key }), outcomes \(outcomes.sorted()), resets \(resets)")
        #expect(try p.replicaAcceptsAPush().recordSequence > p.highestApplied)
    }
}
