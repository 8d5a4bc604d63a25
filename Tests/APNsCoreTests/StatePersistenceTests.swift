import HTTPGrammar
@testable import APNsCore
import Testing

/// Hands every drained change straight to the store, as the writer thread would (minus the
/// thread), so a "crash" is simply dropping the `EmulatorState`.
final class DirectSink: StateChangeSink, @unchecked Sendable {
    let store: any StateStore
    init(_ store: any StateStore) { self.store = store }
    func enqueue(_ changes: [StateChange]) -> Bool {
        try! store.write(changes)
        return false
    }
    func wake() {}
}

/// A configured start state (team A's key and app, a configured virtual device with a
/// pinned token), an emulator state persisting into an in-memory store, and restarts from it.
final class PersistenceFixture: @unchecked Sendable {
    static let pinned = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
    let clock = ManualClock(milliseconds: 1_767_225_600_000)
    let keyA: SigningKey
    let runtimeKey: SigningKey
    let store = InMemoryStateStore()
    let configured: World
    private(set) var state: EmulatorState
    private(set) var endpoint: ProviderEndpoint
    var connectionID: UInt64 = 1

    init(capacity: Int = 100, options: DeliveryOptions = DeliveryOptions()) throws {
        keyA = try SigningKey(team: "TEAMAAAAAA", key: "KEYAAAAAAA")
        runtimeKey = try SigningKey(team: "TEAMRRRRRR", key: "KEYRRRRRRR")
        var credentials = Credentials()
        credentials.add(keyA.providerKey())
        credentials.addApp(teamID: "TEAMAAAAAA", bundleID: "com.example.app")
        var registry = DeviceRegistry(seed: 7)
        let now = clock.nowMilliseconds()
        try registry.addDevice(id: "ci", isVirtual: true, nowMs: now)
        _ = try registry.register(deviceID: "ci", bundleID: "com.example.app", environment: .sandbox, fixedToken: Self.pinned, nowMs: now)
        configured = World(credentials: credentials, registry: registry, records: RecordStore(capacity: capacity), deliveryOptions: options)
        var world = configured
        world.startTrackingChanges()
        try store.write([.reset(world.persistedState)])
        state = EmulatorState(start: world, persistence: DirectSink(store))
        endpoint = ProviderEndpoint(state: state, clock: clock)
        attach()
    }

    private func attach() {
        state.setStartState(configured)
        endpoint = ProviderEndpoint(state: state, clock: clock)
    }

    /// The process dies (nothing is flushed: every change already went to the store) and
    /// starts again from the store over the same configuration.
    func restart() throws {
        let persisted = try store.load()
        let runtime = runtimeKey
        var world = try World.restoring(persisted, over: configured, nowMs: clock.nowMilliseconds()) { stored throws(StateStoreError) in
            guard stored.keyID == runtime.keyID else { throw StateStoreError("unknown key \(stored.keyID)") }
            return ProviderKey(
                teamID: stored.teamID, keyID: stored.keyID, environment: stored.environment,
                topics: stored.topics.map(Set.init), relatedKeyID: stored.relatedKeyID,
                verifier: runtime.verifier, source: stored.source, pem: stored.pem, addedAtRunTime: true)
        }
        try store.write(world.takeStateChanges(recordSequences: world.records.takeChanges()))
        world.records.trackChanges = false
        state = EmulatorState(start: world, persistence: DirectSink(store))
        attach()
    }

    var now: Int64 { clock.nowMilliseconds() }

    func world<T: Sendable>(_ body: (inout World) throws -> T) rethrows -> T {
        try state.withWorld { world in try body(&world) }
    }

    func push(
        _ token: String, key: SigningKey? = nil, topic: String = "com.example.app", body: String = #"{"aps":{"alert":"hi"}}"#,
        headers: [(String, String)] = []
    ) throws -> PushResponse {
        try providerPush(
            endpoint, token: token, key: key ?? keyA, issuedAt: clock.nowSeconds(), connectionID: &connectionID,
            topic: topic, body: body, headers: headers)
    }

    func record(_ sequence: UInt64) -> NotificationRecord? { state.withWorld { $0.records.record(sequence: sequence) } }

    /// A socket device saying hello on a new connection; returns its frames.
    func connect(
        _ deviceID: String, connection: UInt64, apps: [String] = ["com.example.app"],
        settings: AppSettings = AppSettings()
    ) throws -> [DeviceFrame] {
        let hello = DeviceHello(
            deviceID: deviceID, lowPowerMode: false,
            apps: apps.map {
                AppRegistration(bundleID: $0, environment: .sandbox, settings: settings, kinds: [.app])
            })
        let now = self.now
        return try state.withWorld { world throws(DeviceRequestError) in try world.connectDevice(hello, connectionID: connection, nowMs: now) }
    }

    func disconnect(_ deviceID: String, connection: UInt64) {
        let now = self.now
        state.withWorld { $0.disconnectDevice(deviceID, connectionID: connection, nowMs: now) }
    }

    static func token(in frames: [DeviceFrame]) -> String? {
        frames.compactMap { $0.message["token"]?.stringValue }.first
    }

    func token(of device: String, bundle: String = "com.example.app") -> String? {
        state.withWorld { $0.registry.devices[device]?.apps[bundle]?.tokens[.app] }
    }
}

@Suite("State across restarts (store interface, injected clock)")
struct StatePersistenceTests {
    /// A configured device renamed in the configuration, its pinned token kept: after a
    /// restart the state's device keeps the token, the renamed one is not added (and said), so
    /// no two devices share it. Before, both were, and an uninstall on the old one made the
    /// new one's pushes 410 Unregistered.
    @Test func aConfiguredDeviceWhoseTokenTheStateGaveAnotherIsNotAdded() throws {
        let f = try PersistenceFixture()
        var registry = DeviceRegistry(seed: 7)
        try registry.addDevice(id: "ci-renamed", isVirtual: true, nowMs: f.now)
        _ = try registry.register(
            deviceID: "ci-renamed", bundleID: "com.example.app", environment: .sandbox, fixedToken: PersistenceFixture.pinned, nowMs: f.now)
        let renamed = World(credentials: f.configured.credentials, registry: registry, records: RecordStore(capacity: 100))
        let world = try World.restoring(try f.store.load(), over: renamed, nowMs: f.now) { stored throws(StateStoreError) in
            throw StateStoreError("unknown key \(stored.keyID)")
        }
        #expect(world.registry.devices["ci"] != nil)
        #expect(world.registry.devices["ci-renamed"] == nil)
        #expect(world.registry.token(PersistenceFixture.pinned)?.deviceID == "ci")
        let warnings = world.configuredDevicesKeptDifferently(from: renamed, stateName: "the state directory")
        #expect(
            warnings.contains {
                $0.hasPrefix(
                    "configured device ci-renamed is not added to the state directory: its token \(PersistenceFixture.pinned) is device ci's")
            },
            "\(warnings)")
    }

    @Test func anUninstalledTokenAnswers410WithTheSameTimestampAfterARestart() throws {
        let f = try PersistenceFixture()
        let frames = try f.connect("phone", connection: 10)
        let token = try #require(PersistenceFixture.token(in: frames))
        f.clock.advance(seconds: 5)
        let uninstalledAt = f.now
        _ = try f.state.withWorld { world throws(DeviceRequestError) in
            try world.uninstallApp(deviceID: "phone", bundleID: "com.example.app", nowMs: uninstalledAt)
        }
        try f.restart()
        f.clock.advance(seconds: 3600)
        let answer = try f.push(token)
        #expect(answer.status == 410)
        #expect(answer.timestampMs == uninstalledAt)
    }

    @Test func aReconnectingDeviceGetsItsOldTokenAndRotatedTokensStayInvalid() throws {
        let f = try PersistenceFixture()
        let first = try f.connect("phone", connection: 10)
        let token = try #require(PersistenceFixture.token(in: first))
        let rotatedAt = f.now
        let rotated = try f.state.withWorld { world throws(DeviceRequestError) in
            try world.rotateTokens(deviceID: "phone", bundleID: "com.example.app", nowMs: rotatedAt)
        }
        let current = try #require(rotated.first?.token)
        try f.restart()
        let again = try f.connect("phone", connection: 11)
        #expect(again.compactMap { $0.message["token"]?.stringValue } == [current], "same device id, same (current) token")
        #expect(try f.push(token).status == 410)
        #expect(try f.push(token).timestampMs == rotatedAt)
        #expect(try f.push(current).status == 200)
        #expect(f.state.withWorld { $0.registry.token(token)?.state } == .unregistered(sinceMs: rotatedAt))
    }

    @Test func storedAndInFlightNotificationsAreDeliveredAfterARestart() throws {
        let f = try PersistenceFixture()
        // Offline device: its push waits in the store.
        let a = try f.connect("phone-a", connection: 10)
        let tokenA = try #require(PersistenceFixture.token(in: a))
        f.disconnect("phone-a", connection: 10)
        let stored = try f.push(tokenA)
        #expect(f.record(stored.recordSequence)?.outcome == .stored)
        // Online device that never acks: the push is in flight when the process dies.
        let b = try f.connect("phone-b", connection: 20)
        let tokenB = try #require(PersistenceFixture.token(in: b))
        let inFlight = try f.push(tokenB)
        #expect(f.record(inFlight.recordSequence)?.outcome == .pending)

        try f.restart()
        #expect(f.record(stored.recordSequence)?.outcome == .stored)
        #expect(f.record(inFlight.recordSequence)?.outcome == .stored, "in flight goes back to the store, as on a disconnect")
        for (device, response, connection) in [("phone-a", stored, UInt64(30)), ("phone-b", inFlight, UInt64(31))] {
            let frames = try f.connect(device, connection: connection)
            let sent = frames.map(\.message).filter { $0["type"] == "notification" }
            #expect(sent.count == 1)
            #expect(sent.first?["apnsId"]?.stringValue == response.apnsID)
            #expect(sent.first?["stored"] == true)
            let id = UInt64(try #require(sent.first?["id"]?.intValue))
            let now = f.now
            try f.state.withWorld { world throws(DeviceRequestError) in
                try world.acknowledge(deviceID: device, connectionID: connection, deliveryID: id, nowMs: now)
            }
            #expect(f.record(response.recordSequence)?.outcome == .delivered)
        }
        // Acknowledged: nothing waits any more, also after another restart.
        try f.restart()
        #expect(f.world { $0.delivery.pendingCount } == 0)
    }

    @Test func deferredAndBatchedPushesKeepTheirSlots() throws {
        var options = DeliveryOptions()
        options.backgroundBudgetPerHour = 1
        options.lowPriorityDelayMs = 60_000
        let f = try PersistenceFixture(options: options)
        let frames = try f.connect("phone", connection: 10)
        let token = try #require(PersistenceFixture.token(in: frames))
        let background: [(String, String)] = [("apns-push-type", "background"), ("apns-priority", "10")]
        let wake = try f.push(token, body: #"{"aps":{"content-available":1}}"#, headers: background)
        #expect(wake.deviceFrames.count == 1)
        let held = try f.push(token, body: #"{"aps":{"content-available":1}}"#, headers: background)
        #expect(f.record(held.recordSequence)?.outcome == .deferred)
        let batched = try f.push(token, headers: [("apns-priority", "5")])
        #expect(batched.deviceFrames.isEmpty)

        try f.restart()
        #expect(f.record(held.recordSequence)?.outcome == .deferred)
        let waiting = f.world { $0.delivery.waiting }
        #expect(waiting.contains { $0.notification.sequence == held.recordSequence && $0.slot == .deferred(.budget) })
        #expect(waiting.contains { $0.notification.sequence == batched.recordSequence && $0.slot == .batched(releaseAtMs: f.now + 60_000) })
        // The batch is released on time once the device is back (and acknowledges what it got,
        // or the ack timeout would disconnect it first).
        let resent = try f.connect("phone", connection: 11)
        for message in resent.map(\.message) where message["type"] == "notification" {
            let id = UInt64(try #require(message["id"]?.intValue))
            let now = f.now
            try f.state.withWorld { world throws(DeviceRequestError) in
                _ = try world.acknowledge(deviceID: "phone", connectionID: 11, deliveryID: id, nowMs: now)
            }
        }
        f.clock.advance(seconds: 61)
        let released = f.world { $0.tick(nowMs: f.now) }
        #expect(released.contains { $0.message["apnsId"]?.stringValue == batched.apnsID })
    }

    @Test func runtimeKeysAppsAndFaultRulesComeBackWithTheirCounters() throws {
        let f = try PersistenceFixture()
        let runtime = f.runtimeKey.providerKey()
        f.world { world in
            world.credentials.add(
                ProviderKey(
                    teamID: runtime.teamID, keyID: runtime.keyID, verifier: runtime.verifier,
                    source: "api", pem: "-----BEGIN PUBLIC KEY-----", addedAtRunTime: true))
            world.credentials.addApp(teamID: "TEAMRRRRRR", bundleID: "com.example.runtime")
            world.faults.add(
                FaultInjectionRule(
                    id: "", match: FaultMatch(token: PersistenceFixture.pinned),
                    action: FaultAction(kind: .respond(status: 500, reason: "InternalServerError")), times: 1))
            try! world.registry.addDevice(id: "r", isVirtual: true, nowMs: 0)
        }
        let entry = try f.world { world in
            try world.registry.register(deviceID: "r", bundleID: "com.example.runtime", environment: .sandbox, nowMs: 0)
        }
        #expect(try f.push(PersistenceFixture.pinned).status == 500)
        #expect(try f.push(PersistenceFixture.pinned).status == 200, "times: 1")

        try f.restart()
        #expect(try f.push(entry.token, key: f.runtimeKey, topic: "com.example.runtime").status == 200)
        let rules = f.world { $0.faults.rules }
        #expect(rules.map(\.id) == ["f1"])
        #expect(rules.first?.matched == 2)
        #expect(rules.first?.fired == 1)
        #expect(try f.push(PersistenceFixture.pinned).status == 200, "the spent rule stays spent")
        #expect(f.world { $0.faults.add(FaultInjectionRule(id: "", match: FaultMatch(), action: FaultAction(kind: .none))) } == "f2")
        // A key removed at run time stays removed.
        f.world { _ = $0.credentials.removeKey(id: runtime.keyID) }
        try f.restart()
        #expect(f.world { $0.credentials.keys[runtime.keyID] } == nil)
        #expect(f.world { $0.credentials.keys["KEYAAAAAAA"] } != nil, "configured keys come from the configuration")
    }

    @Test func broadcastChannelsComeBackLiveDeletedAndWithTheirStoredMessage() throws {
        let f = try PersistenceFixture()
        var ids = ["bGl2ZQ==", "ZGVsZXRlZA==", "c3RvcmVk"]
        let made = f.world { world in
            (0..<3).map { index in
                world.channels.create(
                    bundleID: "com.example.app", environment: index == 2 ? .production : .sandbox,
                    policy: index == 2 ? .mostRecentMessageStored : .noMessageStored, nowMs: Int64(index),
                    makeID: { ids.removeFirst() })!
            }
        }
        f.world { world in
            _ = world.channels.delete(id: made[1].id, bundleID: "com.example.app", environment: .sandbox, nowMs: 7)
            for n in 0..<2 {
                world.channels.recordBroadcast(
                    id: made[2].id,
                    message: StoredBroadcast(
                        key: "R\(n)", payload: Array("{}".utf8), priority: 10, receivedAtMs: 10 + Int64(n), expiresAtMs: 28_800_000))
            }
        }
        let before = f.world { $0.channels.all }
        #expect(try f.store.load().channels == before.sorted { $0.id < $1.id })
        try f.restart()
        #expect(f.world { $0.channels.all } == before)
        #expect(f.world { $0.channels.liveCount(bundleID: "com.example.app", environment: .sandbox) } == 1)
        #expect(f.world { $0.channels.live(id: made[1].id, bundleID: "com.example.app", environment: .sandbox) } == nil)
        #expect(f.world { $0.channels.channels[made[2].id]?.storedMessage?.requestID } == "R1")
        // An id issued before the restart is never handed out again.
        var offers = [made[1].id, "ZnJlc2g="]
        let fresh = f.world { world in
            world.channels.create(
                bundleID: "com.example.app", environment: .sandbox, policy: .noMessageStored, nowMs: 20, makeID: { offers.removeFirst() })
        }
        #expect(fresh?.id == "ZnJlc2g=")
        // A reset empties them, in the store too.
        f.state.reset()
        #expect(try f.store.load().channels.isEmpty)
        try f.restart()
        #expect(f.world { $0.channels.all }.isEmpty)
    }

    @Test func aForgottenTombstoneLeavesTheStore() throws {
        var world = World()
        world.startTrackingChanges()
        var next = 0
        func makeID() -> String {
            next += 1
            return "aWQ\(next)"
        }
        let first = world.channels.create(bundleID: "b", environment: .sandbox, policy: .noMessageStored, nowMs: 0, makeID: makeID)!
        world.channels.delete(id: first.id, bundleID: "b", environment: .sandbox, nowMs: 1)
        for index in 0..<ChannelDirectory.maxTombstones {
            let channel = world.channels.create(
                bundleID: "b", environment: .sandbox, policy: .noMessageStored, nowMs: Int64(index + 2), makeID: makeID)!
            world.channels.delete(id: channel.id, bundleID: "b", environment: .sandbox, nowMs: Int64(index + 2))
        }
        let changes = world.takeStateChanges(recordSequences: [])
        #expect(changes.count == ChannelDirectory.maxTombstones + 1)
        #expect(changes.contains { if case .channelRemoved(let id) = $0 { return id == first.id } else { return false } })
        let store = InMemoryStateStore()
        try store.write(changes)
        #expect(try store.load().channels.count == ChannelDirectory.maxTombstones)
    }

    @Test func theJournalKeepsItsBoundAndSequencesContinue() throws {
        let f = try PersistenceFixture(capacity: 3)
        var sequences: [UInt64] = []
        for _ in 0..<5 { sequences.append(try f.push(PersistenceFixture.pinned).recordSequence) }
        #expect(try f.store.load().records.map(\.sequence) == Array(sequences.suffix(3)), "evicted records leave the store too")
        let deleted = f.world { world in world.deleteRecords { $0.sequence == sequences[3] } }
        #expect(deleted == 1)
        try f.restart()
        #expect(f.world { $0.records.newestFirst(limit: 10).map(\.sequence) } == [sequences[4], sequences[2]])
        #expect(f.record(sequences[4])?.outcome == .delivered)
        #expect(try f.push(PersistenceFixture.pinned).recordSequence == sequences[4] + 1)
    }

    @Test func aResetPersistsTheConfiguredStartStateAtomically() throws {
        let f = try PersistenceFixture()
        _ = try f.connect("phone", connection: 10)
        let before = try f.push(PersistenceFixture.pinned).recordSequence
        f.world { $0.credentials.addApp(teamID: "TEAMAAAAAA", bundleID: "com.example.extra") }
        let writes = f.store.writes
        f.state.reset()
        #expect(f.store.writes == writes + 1, "one transaction")
        let persisted = try f.store.load()
        #expect(persisted.devices.map(\.id) == ["ci"])
        #expect(persisted.records.isEmpty)
        #expect(persisted.apps.map(\.bundleID) == ["com.example.app"])
        try f.restart()
        #expect(f.world { $0.registry.devices.keys.sorted() } == ["ci"])
        #expect(try f.push(PersistenceFixture.pinned).recordSequence > before, "sequence numbers never repeat")
    }

    @Test func configuredDevicesAreAddedAndPersistedDevicesWin() throws {
        let f = try PersistenceFixture()
        // A configured device removed at run time comes back at the next start, with its
        // pinned token active again (as after a reset).
        f.world { world in try! world.registry.removeDevice(id: "ci", nowMs: 0) }
        #expect(try f.push(PersistenceFixture.pinned).status == 410)
        try f.restart()
        #expect(try f.push(PersistenceFixture.pinned).status == 200)
        // A configured device changed at run time keeps its changes (the state wins).
        f.world { world in try! world.registry.updateDevice("ci") { $0.lowPowerMode = true } }
        try f.restart()
        #expect(f.world { $0.registry.devices["ci"]?.lowPowerMode } == true)
    }

    @Test func nothingIsCollectedWithoutPersistence() throws {
        var world = World()
        try world.registry.addDevice(id: "d", isVirtual: true, nowMs: 0)
        world.credentials.addApp(teamID: "T", bundleID: "com.x")
        #expect(world.takeStateChanges(recordSequences: []).isEmpty)
        world.startTrackingChanges()
        _ = try world.registry.register(deviceID: "d", bundleID: "com.x", environment: .sandbox, nowMs: 0)
        let changes = world.takeStateChanges(recordSequences: [])
        #expect(changes.count == 2)
        #expect(world.takeStateChanges(recordSequences: []).isEmpty, "drained")
    }
}

@Suite("State codec")
struct StateCodecTests {
    static func fullRecord() -> NotificationRecord {
        var r = NotificationRecord(
            apnsID: "C691CA6D-FFF3-BD4B-3D4B-FBCDB3DCC1CA", token: "4fc1", environment: .production, receivedAtMs: 1_767_225_600_123)
        r.sequence = 42
        r.uniqueID = "66cd1680-de82-4696-8bfc-629c9118d429"
        r.topic = "com.example.app"
        r.pushType = "alert"
        r.pushTypeHeaderPresent = true
        r.priority = 5
        r.expiration = 1_767_225_999
        r.collapseID = "score"
        r.status = 410
        r.reason = "Unregistered"
        r.timestampMs = -7
        r.payload = Array(#"{"aps":{"alert":"ü"}}"#.utf8) + [0, 255]
        r.payloadSize = 9000
        r.explanation = "uninstalled"
        r.connectionID = UInt64.max
        r.streamID = Int32.max
        r.method = "POST"
        r.path = "/3/device/4fc1"
        r.requestHeaders = [HeaderField(":method", "POST"), HeaderField("apns-topic", "com.example.app"), HeaderField("empty", "")]
        r.headersTruncated = true
        r.accountedBytes = 1234
        r.teamID = "TEAM"
        r.keyID = "KEY"
        r.jwtHeader = #"{"alg":"ES256"}"#
        r.jwtClaims = #"{"iss":"TEAM"}"#
        r.jwtVerified = false
        r.deviceID = "phone"
        r.bundleID = "com.example.app"
        r.outcome = .droppedBySystem
        r.callbacks = ["willPresent", "didReceive"]
        r.display = "banner"
        r.deliveredAtMs = 1
        r.wasStored = true
        r.deliveryNote = "note"
        r.respondedAtMs = 2
        r.faultRuleID = "f1"
        r.certificateSubject = "CN=x"
        r.userID = "alice"
        r.addressee = "bob"
        r.crossAccount = true
        r.delivery.awaitingOwner = true
        var reach = BroadcastReach(channelID: "Y2g=")
        reach.add(BroadcastReach.Delivery(deviceID: "d", activityID: "A", outcome: .delivered, explanation: "shown", fromStore: true))
        r.broadcast = reach
        r.transitions = [(5, .storedOffline), (9, .deliveredFromStorage)]
        r.presentation = fullPresentation()
        return r
    }

    static func fullPresentation() -> Presentation {
        var p = Presentation()
        p.title = "T"
        p.subtitle = "S"
        p.body = "B"
        p.category = "MSG"
        p.categoryRegistered = true
        var reply = NotificationAction(identifier: "R", title: "Reply")
        reply.foreground = true
        reply.authenticationRequired = true
        reply.textInput = NotificationAction.TextInput(buttonTitle: "Send", placeholder: "")
        p.actions = [reply, NotificationAction(identifier: "X", title: "Delete")]
        p.threadID = "t1"
        p.requestedLevel = .timeSensitive
        p.level = .active
        p.sound = .silenced
        p.screenLit = true
        p.listed = false
        p.badge = 3
        p.heldUntilMs = 64_800_000
        p.relevanceScore = 0.75
        p.summaryArg = "Alice"
        p.summaryArgCount = 2
        p.sender = "alice"
        p.response = NotificationResponse(actionIdentifier: "R", userText: "ok", atMs: 7)
        return p
    }

    /// Every field of a record goes through the codec. A new field fails this test until the
    /// codec (and this fixture) carry it.
    @Test func recordsRoundTripEveryField() throws {
        let record = Self.fullRecord()
        // 34 fields in the codec besides the delivery part, plus `accountedBytes` and
        // `headerListBytes`, which only the journal's byte count uses (it recomputes it on
        // restore), and `keptEncoded` and `keptDeliveryChanged`, the codec's own bytes while a
        // follower has not decoded the record yet. The delivery part: 14 fields in the codec
        // (the delivery steps are stored as two: the first inline and the rest), plus
        // `heldForOrder`, which only the instance that holds the push reads (never stored).
        #expect(Mirror(reflecting: record).children.count == 38, "NotificationRecord changed: extend StateCodec and this test")
        #expect(Mirror(reflecting: record.delivery).children.count == 16, "RecordDelivery changed: extend StateCodec and this test")
        #expect(Mirror(reflecting: record.presentation!).children.count == 19, "Presentation changed: extend StateCodec and this test")
        var decoded = try StateCodec.decodeRecord(StateCodec.encode(record))
        #expect(decoded.broadcast == record.broadcast && decoded.broadcast != nil)
        #expect(decoded.presentation == record.presentation && decoded.presentation != nil)
        decoded.accountedBytes = record.accountedBytes
        decoded.headerListBytes = record.headerListBytes
        #expect(String(describing: decoded) == String(describing: record))
        let sparse = Self.sparseRecord()
        #expect(String(describing: try StateCodec.decodeRecord(StateCodec.encode(sparse))) == String(describing: sparse))
        // The delivery part alone: as a row of its own, and read out of a whole record.
        let alone = try StateCodec.decodeDelivery(StateCodec.encodeDelivery(sequence: record.sequence, record.delivery))
        #expect(alone.sequence == record.sequence)
        #expect(String(describing: alone.delivery) == String(describing: record.delivery))
        #expect(String(describing: StateCodec.delivery(ofRecord: StateCodec.encode(record))) == String(describing: record.delivery))
        #expect(String(describing: StateCodec.delivery(ofRecord: StateCodec.encode(sparse))) == String(describing: sparse.delivery))
        // What an owner routes a hand-off from: those fields and the delivery part, read out of
        // the whole record in one pass.
        for original in [record, sparse] {
            let handOff = try #require(StateCodec.handOff(ofRecord: StateCodec.encode(original)))
            #expect(handOff.apnsID == original.apnsID && handOff.token == original.token)
            #expect(handOff.pushType == original.pushType && handOff.priority == original.priority)
            #expect(handOff.expiration == original.expiration && handOff.collapseID == original.collapseID)
            #expect(handOff.payload == original.payload && handOff.payloadSize == original.payloadSize)
            #expect(handOff.receivedAtMs == original.receivedAtMs && handOff.hasWholePayload == original.hasWholePayload)
            #expect(handOff.deviceID == original.deviceID && handOff.bundleID == original.bundleID)
            #expect(String(describing: handOff.delivery) == String(describing: original.delivery))
        }
        #expect(StateCodec.handOff(ofRecord: Array(StateCodec.encode(record).dropLast(3))) == nil, "a damaged record")
        // A record that awaits its owner says so, with its device, at its head: kept encoded,
        // it still tells a follower which hand-off it is.
        var awaiting = sparse
        awaiting.deviceID = "phone"
        awaiting.delivery.awaitingOwner = true
        func keptRow(_ record: NotificationRecord) throws -> NotificationRecord? {
            let rows = try StateCodec.decodeChanges(StateCodec.encode(changes: [.recordSaved(record)]), keepingRecordsEncoded: true)
            guard case .recordSaved(let kept) = rows.first else { return nil }
            return kept
        }
        let kept = try #require(try keptRow(awaiting))
        #expect(kept.deviceID == "phone" && kept.delivery.awaitingOwner)
        #expect(try StateCodec.decodeRecord(StateCodec.encode(awaiting)).delivery.awaitingOwner)
        #expect(try keptRow(sparse)?.delivery.awaitingOwner == false)
    }

    /// The stored formats: a change to these bytes makes existing state directories unreadable
    /// (a new layout needs a new format number and a reader for the old one). Records are
    /// written in format 4 (format 1, the account fields, a broadcast's reach, the delivery
    /// transitions) and formats 1 to 3 are still read.
    @Test func storedFormatsStayTheSame() throws {
        func hex(_ bytes: [UInt8]) -> String { bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined() }
        func bytes(_ hex: String) -> [UInt8] {
            let digits = Array(hex.utf8)
            return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)! }
        }
        let formatOneFull =
            "012a2443363931434136442d464646332d424434422d334434422d464243444233444343314341012436366364313638302d646538322d343639362d386266632d3632396339313138643432390434666331010f636f6d2e6578616d706c652e6170700105616c657274010a019eeaad950d010573636f72650a70726f64756374696f6eb406010c556e72656769737465726564010d187b22617073223a7b22616c657274223a22c3bc227d7d00ffd08c01f6a1d5edee660b756e696e7374616c6c6564ffffffffffffffffff01feffffff0f0104504f5354010e2f332f6465766963652f3466633103073a6d6574686f6404504f53540a61706e732d746f7069630f636f6d2e6578616d706c652e61707005656d707479000101045445414d01034b4559010f7b22616c67223a224553323536227d010e7b22697373223a225445414d227d01010570686f6e65010f636f6d2e6578616d706c652e6170701164726f707065642d62792d73797374656d020b77696c6c50726573656e740a64696452656365697665010662616e6e657201020101046e6f74650104010266310104434e3d78"
        let formatOneSparse = "0100014100000000001400000773616e64626f7800000000000000000000000000000000000200000872656a65637465640000000000000000"
        // Format 2 = format 1's fields, then userID "alice", addressee "bob", crossAccount true;
        // format 3 = format 2's, then the broadcast reach (a presence flag first).
        let accountFields = "0105616c6963650103626f6201"
        // present, channel "Y2g=", subscribers 1, reached 1, omitted 0 (integers zigzag), one
        // outcome count (delivered: 1), one delivery (device "d", activity "A", delivered, "shown", from the store)
        let reach =
            "01" + "045932673d" + "020200" + "01" + "0964656c697665726564" + "02" + "01" + "0164" + "010141" + "0964656c697665726564" + "0573686f776e"
            + "01"
        // Format 4 = format 3's, then the transitions: count 2, (5 ms, "stored-offline"),
        // (9 ms, "delivered-from-storage").
        let transitions = "02" + "0a" + "0e" + "73746f7265642d6f66666c696e65" + "12" + "16" + "64656c6976657265642d66726f6d2d73746f72616765"
        // Format 5 = format 4's, then the presentation (a presence flag first): title "T",
        // subtitle "S", body "B", category "MSG", registered, two actions (R "Reply", flags
        // foreground+authenticationRequired, text input "Send" ""; X "Delete"), thread "t1",
        // time-sensitive asked, active used, sound silenced, lit, not listed, badge 3, held until
        // 64,800,000 ms, relevance 0.75, "Alice" ×2, sender "alice", response R "ok" at 7 ms.
        let presentation =
            "01" + "010154" + "010153" + "010142" + "01034d5347" + "01" + "02" + "0152055265706c7905010453656e640100"
            + "01580644656c657465000000" + "01027431" + "010e74696d652d73656e736974697665" + "06616374697665" + "0873696c656e636564"
            + "01" + "00" + "0106" + "018094e63d" + "0180808080808080f43f" + "0105416c696365" + "0104" + "0105616c696365"
            + "010152" + "01026f6b" + "0e"
        // Format 6 = format 5 with, after the sequence (42: "2a"; 0: "00"), whether the record
        // awaits its device's owner and then that device ("phone"), or "00".
        let awaiting = "01" + "0570686f6e65"
        #expect(
            hex(StateCodec.encode(Self.fullRecord()))
                == "06" + "2a" + awaiting + formatOneFull.dropFirst(4) + accountFields + reach + transitions + presentation)
        #expect(hex(StateCodec.encode(Self.sparseRecord())) == "06" + "00" + "00" + formatOneSparse.dropFirst(4) + "000000" + "00" + "00" + "00")
        var formatFive = Self.fullRecord()
        formatFive.delivery.awaitingOwner = false
        var decodedFive = try StateCodec.decodeRecord(bytes("05" + formatOneFull.dropFirst(2) + accountFields + reach + transitions + presentation))
        decodedFive.accountedBytes = formatFive.accountedBytes
        #expect(String(describing: decodedFive) == String(describing: formatFive))
        var formatFour = formatFive
        formatFour.presentation = nil
        var decodedFour = try StateCodec.decodeRecord(bytes("04" + formatOneFull.dropFirst(2) + accountFields + reach + transitions))
        decodedFour.accountedBytes = formatFour.accountedBytes
        #expect(String(describing: decodedFour) == String(describing: formatFour))
        var formatThree = formatFour
        formatThree.transitions = []
        var decodedThree = try StateCodec.decodeRecord(bytes("03" + formatOneFull.dropFirst(2) + accountFields + reach))
        decodedThree.accountedBytes = formatThree.accountedBytes
        #expect(String(describing: decodedThree) == String(describing: formatThree))
        var formatTwo = formatThree
        formatTwo.broadcast = nil
        var decodedTwo = try StateCodec.decodeRecord(bytes("02" + formatOneFull.dropFirst(2) + accountFields))
        decodedTwo.accountedBytes = formatTwo.accountedBytes
        #expect(String(describing: decodedTwo) == String(describing: formatTwo))
        var withoutAccount = formatThree
        withoutAccount.broadcast = nil
        withoutAccount.userID = nil
        withoutAccount.addressee = nil
        withoutAccount.crossAccount = false
        var decoded = try StateCodec.decodeRecord(bytes(formatOneFull))
        decoded.accountedBytes = withoutAccount.accountedBytes
        #expect(String(describing: decoded) == String(describing: withoutAccount))
        #expect(String(describing: try StateCodec.decodeRecord(bytes(formatOneSparse))) == String(describing: Self.sparseRecord()))
        #expect(
            hex(StateCodec.encode(Self.notification()))
                == "01090249440261620a636f6d2e782e766f6970016405636f6d2e7804766f6970140001f6010301020301000101")
        #expect(
            hex(StateCodec.encode(FaultRulesSnapshot(rules: Self.faultRules(), nextNumber: 12)))
                == "01180704736c6f77010261620101740105616c657274010a010a70726f64756374696f6e010603010853687574646f776e010e04140a0108040180808080808080e83f01011606026b30000000000000000000000000000000026b3100000000000001e80701580000000000000000026b32000000000000020e0000000000000000026b33000000000000040000000000000000026b3400000000000005020000000000000000026b35000000000000030000000000000000000000"
        )
    }

    static func sparseRecord() -> NotificationRecord {
        var sparse = NotificationRecord(apnsID: "A", token: "", environment: .sandbox, receivedAtMs: 0)
        sparse.jwtVerified = true
        return sparse
    }

    static func notification() -> PendingNotification {
        PendingNotification(
            sequence: 9, apnsID: "ID", token: "ab", topic: "com.x.voip", deviceID: "d", bundleID: "com.x",
            pushType: .voip, priority: 10, collapseID: nil, storeUntilMs: 123, payload: [1, 2, 3],
            content: PushContent(isVisible: true, contentAvailable: false, mutableContent: true), wasStored: true)
    }

    /// One rule with every field set, then one per action kind.
    static func faultRules() -> [FaultInjectionRule] {
        var rule = FaultInjectionRule(
            id: "slow", match: FaultMatch(token: "ab", topic: "t", pushType: "alert", priority: 5, environment: .production, connectionID: 3),
            action: FaultAction(kind: .goAway(reason: "Shutdown", lastStreamID: 7, errorCode: 2), delayMs: 10, jitterMs: 5),
            times: 4, after: 2, probability: 0.25, seed: UInt64.max)
        rule.restoreCounts(matched: 11, fired: 3)
        let kinds: [FaultAction.Kind] = [
            .none, .respond(status: 500, reason: "X"), .resetStream(errorCode: 7), .closeConnection,
            .maxConcurrentStreams(1), .goAway(reason: nil, lastStreamID: nil, errorCode: 0),
        ]
        return [rule] + kinds.enumerated().map { FaultInjectionRule(id: "k\($0.offset)", match: FaultMatch(), action: FaultAction(kind: $0.element)) }
    }

    @Test func waitingNotificationsAndFaultRulesRoundTrip() throws {
        let n = Self.notification()
        #expect(String(describing: try StateCodec.decodeNotification(StateCodec.encode(n))) == String(describing: n))
        let rules = Self.faultRules()
        let decoded = try StateCodec.decodeFaults(StateCodec.encode(FaultRulesSnapshot(rules: rules, nextNumber: 12)))
        #expect(decoded.nextNumber == 12)
        #expect(decoded.rules.map(\.id) == rules.map(\.id))
        #expect(decoded.rules.map(\.action) == rules.map(\.action))
        #expect(decoded.rules.map(\.match) == rules.map(\.match))
        #expect(decoded.rules[0].matched == 11 && decoded.rules[0].fired == 3 && decoded.rules[0].times == 4)
        #expect(decoded.rules[0].after == 2 && decoded.rules[0].probability == 0.25 && decoded.rules[0].seed == UInt64.max)
    }

    @Test func damagedOrUnknownBytesAreErrorsNotCrashes() {
        let bytes = StateCodec.encode(Self.fullRecord())
        #expect(throws: StateStoreError.self) { try StateCodec.decodeRecord(Array(bytes.prefix(bytes.count / 2))) }
        #expect(throws: StateStoreError.self) { try StateCodec.decodeRecord([99] + bytes.dropFirst()) }
        #expect(throws: StateStoreError.self) { try StateCodec.decodeRecord(bytes + [0]) }
        #expect(throws: StateStoreError.self) { try StateCodec.decodeFaults([1, 2, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]) }
    }
}

extension FaultMatch {
    /// A match on the given fields (the library's initialiser takes none).
    init(
        token: String? = nil, topic: String? = nil, pushType: String? = nil, priority: Int? = nil,
        environment: APNsEnvironment? = nil, connectionID: UInt64? = nil
    ) {
        self.init()
        (self.token, self.topic, self.pushType) = (token, topic, pushType)
        (self.priority, self.environment, self.connectionID) = (priority, environment, connectionID)
    }
}

@Suite("Fault rules that travel")
struct TravellingFaultRuleTests {
    /// A seeded probability draws by the rule's match count, which instances sharing a state
    /// (`--redis`) and a restart (`--state-dir`) keep: the rule decoded afresh before every
    /// request, as another instance reads it, fires on the same requests as one rule kept in
    /// memory (it started again from its seed at every decode, so through a round robin a 50 %
    /// rule fired on every request or on none).
    @Test func aSeededProbabilityFiresOnTheSameRequestsWhereverTheRuleIsRead() throws {
        let rule = FaultInjectionRule(
            id: "p", match: FaultMatch(), action: FaultAction(kind: .respond(status: 503, reason: "ServiceUnavailable")),
            probability: 0.5, seed: 42)
        let facts = FaultFacts(
            token: "ab", topic: "com.example.app", pushType: "alert", priority: 10, environment: .sandbox, connectionID: 1)
        var kept = FaultRules()
        _ = kept.add(rule)
        let inMemory = (0..<40).map { _ in kept.evaluate(facts) != nil }
        var travelling = FaultRules()
        _ = travelling.add(rule)
        var decodedEachTime: [Bool] = []
        for _ in 0..<40 {
            var read = FaultRules(try StateCodec.decodeFaults(StateCodec.encode(travelling.snapshot)))
            decodedEachTime.append(read.evaluate(facts) != nil)
            travelling = read
        }
        #expect(decodedEachTime == inMemory)
        #expect(inMemory.contains(true) && inMemory.contains(false))
        #expect((10...30).contains(inMemory.filter { $0 }.count), "about half of 40")
    }
}
