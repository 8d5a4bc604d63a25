@testable import APNsCore
import Synchronization
import Testing

/// A coordinator that grants every change the mode it asks for and keeps the rows, as the
/// shared log would receive them (the Redis coordinator's turns are tested against Redis in
/// the integration tests; here only what a shared turn changes in the world).
private final class GrantingCoordinator: WorldCoordinator, @unchecked Sendable {
    private let rows = Mutex<[StateChange]>([])
    func mutate(mode: ChangeMode, _ change: (ChangeMode) -> [StateChange]) -> Bool {
        let made = change(mode)
        rows.withLock { $0 += made }
        return true
    }
    func mutateIfReady(mode: ChangeMode, _ change: (ChangeMode) -> [StateChange]) -> Bool? { mutate(mode: mode, change) }
    func noteUnsharedChange() {}
    var unavailableReason: String? { nil }
    func beginCommittingLater() {}
    func endCommittingLater() {}
    func take() -> [StateChange] {
        rows.withLock { rows in
            defer { rows = [] }
            return rows
        }
    }
}

/// Two instances of one shared state as a hand-off sees them: `pair` takes the pushes (its state
/// attached to a coordinator that grants every shared turn and keeps the rows), and
/// `ownerWorld` is the copy of the instance that owns the device "ci".
private struct TakerAndOwner {
    let pair: ReplicaPair
    let coordinator = GrantingCoordinator()
    let owner: Int
    var ownerWorld: World

    init(_ pair: ReplicaPair) {
        self.pair = pair
        owner = DeviceOwnership(members: [1, 2], me: 0).hashOwner(of: "ci")
        let taker = owner == 1 ? 2 : 1
        pair.state.attach(coordinator: coordinator)
        pair.world {
            $0.ownership = DeviceOwnership(members: [1, 2], me: taker)
            $0.records.numberInStripes(UInt64(taker))
            $0.records.tracksUpdatesApart = true
        }
        ownerWorld = pair.configured
        ownerWorld.startTrackingChanges()
        ownerWorld.ownership = DeviceOwnership(members: [1, 2], me: owner)
        ownerWorld.records.numberInStripes(UInt64(owner))
        ownerWorld.records.tracksUpdatesApart = true
        ownerWorld.records.trackChanges = true  // (an EmulatorState turns it on for each change)
    }

    /// The owner applies what the taker wrote, as a follower does (through the codec).
    mutating func ownerApplies(_ rows: [StateChange]) throws -> ReplicationApplied {
        try ownerWorld.applyReplicated(
            rows: try StateCodec.decodeRows(StateCodec.encode(changes: rows)), nowMs: pair.now, configured: pair.configured,
            loadKey: pair.loadKey)
    }

    /// The taker applies what the owner wrote.
    func takerApplies(_ rows: [StateChange]) throws {
        let (now, configured, loadKey) = (pair.now, pair.configured, pair.loadKey)
        _ = try pair.state.applyShared { (world: inout World) throws(StateStoreError) in
            try world.applyReplicated(
                rows: try StateCodec.decodeRows(StateCodec.encode(changes: rows)), nowMs: now, configured: configured, loadKey: loadKey)
        }
    }
}

@Suite("Device owners and hand-offs (several instances)")
struct DeviceOwnershipTests {
    @Test func everyInstanceAgreesWhoOwnsADevice() {
        let one = DeviceOwnership(members: [3, 1, 2, 3], me: 1)
        let two = DeviceOwnership(members: [2, 3, 1], me: 2)
        #expect(one.members == [1, 2, 3])
        for id in ["a", "phone", "ci", "device-42", "😀"] {
            #expect(one.hashOwner(of: id) == two.hashOwner(of: id), "\(id)")
            #expect([1, 2, 3].contains(one.hashOwner(of: id)))
            #expect(one.owner(of: id, connectionID: nil) == one.hashOwner(of: id))
        }
        #expect(DeviceOwnership(members: [], me: 1).hashOwner(of: "a") == 0)
        #expect(!DeviceOwnership(members: [2, 3], me: 1).isMember)
        // Spread over the members, not all on one.
        let owners = Set((0..<64).map { one.hashOwner(of: "device-\($0)") })
        #expect(owners == [1, 2, 3])
        #expect(DeviceOwnership(members: [7], me: 7).hashOwner(of: "anything") == 7)
    }

    /// Instances of different runs must agree, so the hash is FNV-1a over the id's UTF-8 bytes,
    /// not Swift's per-process seeded `Hasher`: pinned to the published FNV-1a values.
    @Test func theOwnersHashIsFNV1aOfTheUTF8Bytes() {
        #expect(StoredSurvivor.fnv1a("") == 0xCBF2_9CE4_8422_2325)
        #expect(StoredSurvivor.fnv1a("a") == 0xAF63_DC4C_8601_EC8C)
        #expect(StoredSurvivor.fnv1a("foobar") == 0x8594_4171_F739_67E8)
        // A bridged or otherwise non-native string hashes the same bytes.
        let native = "device-😀-1234567890"
        let substringBacked = String(Substring("x" + native).dropFirst())
        #expect(StoredSurvivor.fnv1a(native) == StoredSurvivor.fnv1a(substringBacked))
    }

    /// One instance takes a push for a device another instance owns, in a shared turn: it is
    /// answered 200, journaled as awaiting its owner, and the record is the hand-off. The owner
    /// applies the rows, routes it, and writes only the record's delivery part, which tells the
    /// taker it was delivered and is no longer waiting. With a payload the record cannot hold
    /// whole, the hand-off is a waiting row of its own instead, marked done by the owner.
    @Test(arguments: [false, true])
    func aHandOffIsRoutedByTheOwnerAndTheTakerLearnsTheOutcome(payloadCut: Bool) throws {
        var two = try TakerAndOwner(ReplicaPair())
        let (pair, owner) = (two.pair, two.owner)
        var options = EndpointOptions()
        if payloadCut { options.recordedPayloadLimit = 8 }
        let endpoint = ProviderEndpoint(state: pair.state, clock: pair.clock, options: options)

        var connection: UInt64 = 1
        let answer = try providerPush(
            endpoint, token: ReplicaPair.pinned, key: pair.keyA, issuedAt: pair.clock.nowSeconds(), connectionID: &connection,
            topic: "com.example.app", body: #"{"aps":{"alert":"for the owner"}}"#, headers: [])
        #expect(answer.status == 200)
        let taken = try #require(pair.world { $0.records.newestFirst(limit: 1).first })
        #expect(taken.outcome == .pending)
        #expect(taken.explanation.contains("instance \(owner), which decides deliveries to this device"))
        #expect(taken.delivery.awaitingOwner == !payloadCut)
        #expect(pair.world { $0.delivery.pendingCount } == 1)
        #expect(pair.world { $0.counters.pushesHandedOff } == 1)

        // The owner applies the taker's rows as a follower does.
        let rows = two.coordinator.take()
        #expect(rows.contains { if case .notificationWaiting(let w) = $0 { w.slot == .handedOff } else { false } } == payloadCut)
        let applied = try two.ownerApplies(rows)
        #expect(applied.handedOffDeviceIDs == ["ci"])
        #expect(two.ownerWorld.handOffsToRoute == ["ci"])
        let routed = two.ownerWorld.routeHandOffs(deviceIDs: ["ci"], nowMs: pair.now, limit: 10)
        #expect(routed.left.isEmpty)
        #expect(two.ownerWorld.handOffsToRoute.isEmpty)
        #expect(two.ownerWorld.records.record(sequence: taken.sequence)?.outcome == .delivered)
        #expect(two.ownerWorld.counters.handOffsRouted == 1)
        let back = two.ownerWorld.takeStateChanges(recordSequences: two.ownerWorld.records.takeChanges())
        // The record is not written again: only what became of it.
        #expect(!back.contains { if case .recordSaved = $0 { true } else { false } })
        let part = try #require(
            back.lazy.compactMap { change -> RecordDelivery? in
                if case .recordDelivered(let sequence, let delivery) = change, sequence == taken.sequence { return delivery }
                return nil
            }.first)
        #expect(part.outcome == .delivered && !part.awaitingOwner)
        #expect(back.contains { if case .notificationDone(let sequence) = $0 { sequence == taken.sequence } else { false } } == payloadCut)

        // The taker learns it.
        try two.takerApplies(back)
        #expect(pair.world { $0.records.record(sequence: taken.sequence)?.outcome } == .delivered)
        #expect(pair.world { $0.delivery.pendingCount } == 0)
    }

    /// Under the lease (no shared turn), an instance routes a push for another's device itself,
    /// after the hand-offs that device has waiting: its notifications keep their order.
    @Test func underTheLeaseADevicesHandOffsAreRoutedFirst() throws {
        let pair = try ReplicaPair()
        let owner = DeviceOwnership(members: [1, 2], me: 0).hashOwner(of: "ci")
        pair.world { $0.ownership = DeviceOwnership(members: [1, 2], me: owner == 1 ? 2 : 1) }
        let first = try pair.push(ReplicaPair.pinned)  // no coordinator: routed here
        // A hand-off that arrived from a third instance before the next push.
        let sequence = try #require(pair.world { $0.records.newestFirst(limit: 1).first?.sequence })
        pair.world {
            $0.records.update(sequence: sequence) { $0.awaitingOwner = true }
            $0.delivery.handedOff.add(sequence, HandOffs.Entry(deviceID: "ci", notification: nil, hasRow: false))
        }
        let second = try pair.push(ReplicaPair.pinned)
        #expect(first.status == 200 && second.status == 200)
        #expect(pair.world { $0.delivery.handedOff.isEmpty })
        #expect(pair.world { $0.records.record(sequence: sequence)?.delivery.awaitingOwner } == false)
        #expect(pair.world { $0.counters.handOffsRouted } == 1)
    }
    /// The instance holding a device's socket owns it while it is a member (else the hash
    /// decides). A change under the lease first routes what was handed to the owner and not yet
    /// routed (`EmulatorState` does, with a coordinator), so a device process whose socket
    /// attaches gets the notification the store kept for it; the socket leaving gives the
    /// device back to the hash.
    @Test func theInstanceHoldingADevicesSocketOwnsIt() throws {
        let ownership = DeviceOwnership(members: [1, 2], me: 1)
        let onTwo = UInt64(2) << DeviceOwnership.instanceShift | 7
        let onFive = UInt64(5) << DeviceOwnership.instanceShift | 7
        #expect(DeviceOwnership.instance(ofConnection: onTwo) == 2)
        for id in ["a", "ci", "phone", "device-42"] {
            #expect(ownership.owner(of: id, connectionID: onTwo) == 2, "\(id)")
            #expect(ownership.owner(of: id, connectionID: onFive) == ownership.hashOwner(of: id), "not a member: the hash")
            #expect(ownership.owner(of: id, connectionID: nil) == ownership.hashOwner(of: id))
        }

        let pair = try ReplicaPair()
        let hashOwner = DeviceOwnership(members: [1, 2], me: 0).hashOwner(of: "ci")
        let me = hashOwner == 1 ? 2 : 1
        pair.world { $0.ownership = DeviceOwnership(members: [1, 2], me: me) }
        #expect(pair.world { $0.owner(of: "ci") } == hashOwner)
        #expect(!pair.world { $0.owns("ci") })
        // A hand-off for the device waits for its owner (made as in the test above).
        #expect(try pair.push(ReplicaPair.pinned).status == 200)
        let sequence = try #require(pair.world { $0.records.newestFirst(limit: 1).first?.sequence })
        pair.world {
            $0.records.update(sequence: sequence) { $0.awaitingOwner = true }
            $0.delivery.handedOff.add(sequence, HandOffs.Entry(deviceID: "ci", notification: nil, hasRow: false))
            // A device process's, offline until its socket attaches.
            try? $0.registry.updateDevice("ci") { $0.isVirtual = false }
        }
        #expect(pair.world { $0.hasPushesWaitingForRouting })

        let socket = UInt64(me) << DeviceOwnership.instanceShift | 1
        let now = pair.now
        let frames = try pair.world { world in
            var frames = world.routeEveryWaitingPush(nowMs: now)
            #expect(frames.isEmpty, "offline: stored")
            frames += try world.connectDevice(DeviceHello(deviceID: "ci", lowPowerMode: false, apps: []), connectionID: socket, nowMs: now)
            return frames
        }
        #expect(pair.world { $0.owner(of: "ci") } == me)
        #expect(pair.world { $0.owns("ci") })
        #expect(pair.world { $0.delivery.handedOff.isEmpty && !$0.hasPushesWaitingForRouting })
        #expect(pair.world { $0.counters.handOffsRouted } == 1)
        #expect(frames.contains { $0.connectionID == socket && $0.message["type"]?.stringValue == "notification" })

        pair.world { $0.disconnectDevice("ci", connectionID: socket, nowMs: now) }
        #expect(pair.world { $0.owner(of: "ci") } == hashOwner)
        #expect(!pair.world { $0.owns("ci") })
    }
    /// A change whose own later pushes evict its first records from a journal of two (a journal
    /// of a few records under load) still writes every record it made, the hand-off among them
    /// as it was handed off, and nothing of it is left over for the next change.
    @Test func recordsEvictedBeforeTheirChangeIsWrittenAreWrittenAllTheSame() throws {
        var world = try ReplicaPair(capacity: 2).configured
        world.startTrackingChanges()
        world.records.numberInStripes(1)
        world.records.tracksUpdatesApart = true
        world.records.trackChanges = true
        var sequences: [UInt64] = []
        for index in 0..<3 {
            var record = NotificationRecord(apnsID: "A\(index)", token: "t", environment: .sandbox, receivedAtMs: 0)
            record.deviceID = "d"
            sequences.append(world.records.append(moving: &record))
            if index == 0 { world.records.update(sequence: sequences[0]) { $0.awaitingOwner = true } }
        }
        #expect(world.records.count == 2, "the first fell off the journal")
        let rows = world.takeStateChanges(recordSequences: world.records.takeChanges())
        let saved = rows.compactMap { row -> NotificationRecord? in if case .recordSaved(let record) = row { record } else { nil } }
        #expect(saved.map(\.sequence) == sequences, "all three written")
        #expect(saved.first?.apnsID == "A0")
        #expect(saved.first?.delivery.awaitingOwner == true, "the hand-off goes as it was handed off")

        var next = NotificationRecord(apnsID: "A3", token: "t", environment: .sandbox, receivedAtMs: 0)
        let fourth = world.records.append(moving: &next)
        let later = world.takeStateChanges(recordSequences: world.records.takeChanges())
        let savedLater = later.compactMap { row -> UInt64? in if case .recordSaved(let record) = row { record.sequence } else { nil } }
        #expect(savedLater == [fourth], "the next change writes its own record only (the one it evicted was written before)")
    }

    /// A journal of two records and three hand-offs for the owner's device: the first record
    /// falls off the owner's journal before it routes, yet all three are routed (the owner keeps
    /// the notification, built from the record, as it goes). The taker, whose own journal also
    /// evicted it, forgets that hand-off rather than keeping it forever.
    @Test func aHandOffOutlivesItsJournalRecord() throws {
        var two = try TakerAndOwner(ReplicaPair(capacity: 2))
        let pair = two.pair

        var apnsIDs: [String] = []
        for index in 0..<3 {
            let answer = try pair.push(ReplicaPair.pinned, body: #"{"aps":{"alert":"hand-off \#(index)"}}"#)
            #expect(answer.status == 200)
            apnsIDs.append(answer.apnsID)
        }
        #expect(pair.world { $0.counters.pushesHandedOff } == 3)
        _ = try two.ownerApplies(two.coordinator.take())
        #expect(two.ownerWorld.records.count == 2, "the first record fell off the owner's journal")
        let routed = two.ownerWorld.routeHandOffs(deviceIDs: ["ci"], nowMs: pair.now, limit: 10)
        #expect(routed.left.isEmpty)
        #expect(two.ownerWorld.counters.handOffsRouted == 3, "every hand-off routed, the evicted one too")
        #expect(two.ownerWorld.counters.handOffsLost == 0)
        #expect(two.ownerWorld.delivery.handedOff.isEmpty)
        #expect(two.ownerWorld.counters.outcomes[.delivered] == 3, "all three delivered to the (virtual) device")
        let kept = two.ownerWorld.records.newestFirst(limit: 2).map(\.apnsID)
        #expect(kept == apnsIDs.suffix(2).reversed(), "the two records still kept")

        // The owner writes what became of all three, the one its journal no longer holds too
        // (other journals may still hold it); the taker, whose journal evicted it as well,
        // applies that and forgets the hand-off rather than keeping it forever.
        let back = two.ownerWorld.takeStateChanges(recordSequences: two.ownerWorld.records.takeChanges())
        let parts = back.compactMap { row -> (UInt64, RecordDelivery)? in
            if case .recordDelivered(let sequence, let part) = row { (sequence, part) } else { nil }
        }
        #expect(parts.count == 3, "a delivery part for each, the evicted one's too")
        #expect(parts.allSatisfy { $0.1.outcome == .delivered && !$0.1.awaitingOwner })
        try two.takerApplies(back)
        #expect(pair.world { $0.delivery.handedOff.isEmpty })
    }
}

/// The table of hand-offs waiting for their owner: taken a slice at a time (as the owner routes
/// a backlog), with some removed by sequence meanwhile (routed elsewhere) and more arriving.
@Suite("Hand-offs waiting for their owner")
struct HandOffsTests {
    @Test func aBacklogTakenInSlicesComesOutInOrderWithoutWhatWasRemoved() {
        var table = HandOffs()
        // What the table must hold, per device, in arrival order.
        var model: [String: [UInt64]] = [:]
        func add(_ sequence: UInt64, _ device: String) {
            table.add(sequence, HandOffs.Entry(deviceID: device, notification: nil, hasRow: false))
            model[device, default: []].append(sequence)
        }
        func remove(_ sequence: UInt64) {
            table.remove(sequence)
            for device in model.keys { model[device]!.removeAll { $0 == sequence } }
        }
        for sequence in UInt64(1)...3_000 { add(sequence, sequence % 10 == 0 ? "other" : "ci") }
        // Removed by sequence before being taken (routed elsewhere): every seventh.
        for sequence in stride(from: UInt64(7), through: 3_000, by: 7) { remove(sequence) }
        var next: UInt64 = 3_001
        var slices = 0
        while table.has(deviceID: "ci") {
            let slice = table.take(deviceID: "ci", limit: 128).map(\.sequence)
            let expected = Array(model["ci", default: []].prefix(128))
            #expect(slice == expected)
            model["ci"]!.removeFirst(expected.count)
            slices += 1
            // More arriving meanwhile, and one not yet taken removed.
            if next < 3_400 {
                add(next, "ci")
                next += 1
            }
            if let later = model["ci"]?.dropFirst(5).first { remove(later) }
        }
        #expect(slices > 10)
        #expect(model["ci", default: []].isEmpty)
        #expect(table.count == model["other"]!.count)
        #expect(table.take(deviceID: "other").map(\.sequence) == model["other"]!)
        #expect(table.isEmpty)
    }

    @Test func aListWhoseCountIsOffStillEmpties() {
        var table = HandOffs()
        // Sequence 5 comes back under another device and goes: device "a" still lists it, and
        // its count says one is left.
        table.add(5, HandOffs.Entry(deviceID: "a", notification: nil, hasRow: false))
        table.add(5, HandOffs.Entry(deviceID: "b", notification: nil, hasRow: false))
        table.remove(5)
        #expect(table.isEmpty)
        #expect(table.take(deviceID: "a", limit: 128).isEmpty)
        #expect(!table.has(deviceID: "a"), "a device with nothing left is not asked about again")
        // And a list whose count says none is left while some are.
        table.add(7, HandOffs.Entry(deviceID: "c", notification: nil, hasRow: false))
        table.add(8, HandOffs.Entry(deviceID: "c", notification: nil, hasRow: false))
        table.add(7, HandOffs.Entry(deviceID: "d", notification: nil, hasRow: false))
        table.remove(7)  // counted against "d", which has no list
        table.add(9, HandOffs.Entry(deviceID: "c", notification: nil, hasRow: false))
        var taken: [UInt64] = []
        for _ in 0..<10 where table.has(deviceID: "c") { taken += table.take(deviceID: "c", limit: 1).map(\.sequence) }
        #expect(taken == [8, 9])
        #expect(!table.has(deviceID: "c"))
        #expect(table.isEmpty)
    }

    @Test func theFewHandOffsThatCarryTheirNotificationKeepIt() {
        func notification(_ sequence: UInt64) -> PendingNotification {
            PendingNotification(
                sequence: sequence, apnsID: "id-\(sequence)", token: "ab", topic: "com.x", deviceID: "ci", bundleID: "com.x",
                pushType: .alert, priority: 10, collapseID: nil, storeUntilMs: nil, payload: [1, 2, 3],
                content: PushContent(isVisible: true, contentAvailable: false, mutableContent: false))
        }
        var table = HandOffs()
        table.add(notification(1))  // a row of its own
        table.add(2, HandOffs.Entry(deviceID: "ci", notification: nil, hasRow: false))  // its record is the hand-off
        table.add(3, HandOffs.Entry(deviceID: "ci", notification: nil, hasRow: false))
        table.attach(notification(3), to: 3)  // its record went
        table.attach(notification(4), to: 4)  // not a hand-off: nothing to attach to
        #expect(table.entry(1)?.notification?.apnsID == "id-1")
        #expect(table.entry(2)?.notification == nil)
        #expect(table.entry(3)?.notification?.apnsID == "id-3")
        #expect(table.entry(4) == nil)
        #expect(table.notificationsWithRows.map(\.apnsID) == ["id-1"])
        #expect(table.remove(1)?.notification?.apnsID == "id-1")
        let taken = table.take(deviceID: "ci")
        #expect(taken.map(\.sequence) == [2, 3])
        #expect(taken.map { $0.entry.notification?.apnsID } == [nil, "id-3"])
        #expect(table.isEmpty)
        #expect(table.notificationsWithRows.isEmpty)
        // Added again after it went: no notification left over from before.
        table.add(3, HandOffs.Entry(deviceID: "ci", notification: nil, hasRow: false))
        #expect(table.entry(3)?.notification == nil)
    }

    @Test func aDeviceWhoseLastHandOffIsRemovedHasNoneLeft() {
        var table = HandOffs()
        for sequence in UInt64(1)...200 { table.add(sequence, HandOffs.Entry(deviceID: "ci", notification: nil, hasRow: false)) }
        #expect(table.take(deviceID: "ci", limit: 150).count == 150)
        for sequence in UInt64(151)...200 { table.remove(sequence) }
        #expect(!table.has(deviceID: "ci"))
        #expect(table.take(deviceID: "ci").isEmpty)
        table.add(201, HandOffs.Entry(deviceID: "ci", notification: nil, hasRow: false))
        #expect(table.take(deviceID: "ci").map(\.sequence) == [201])
    }
}
