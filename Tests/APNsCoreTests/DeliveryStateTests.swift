import APNsCore
import Testing

/// Store-and-forward, expiry, collapse, budgets and accounting, with an injected clock and a
/// device attached to the world as a socket connection would be.
final class DeviceFixture: @unchecked Sendable {
    let base: Fixture
    var connectionID: UInt64 = 100
    private(set) var token = ""
    /// More apps of team A on the device, beside com.example.app.
    let extraBundles: [String]
    /// Every app's token, by bundle id.
    private(set) var tokens: [String: String] = [:]

    init(
        options: DeliveryOptions = DeliveryOptions(), settings: AppSettings = AppSettings(), extraBundles: [String] = [],
        onBackendIntents: (@Sendable ([BackendIntent]) -> Void)? = nil
    ) throws {
        base = try Fixture(onBackendIntents: onBackendIntents)
        self.extraBundles = extraBundles
        base.state.withWorld { world in
            world.deliveryOptions = options
            for bundle in extraBundles { world.addApp(teamID: "TEAMAAAAAA", bundleID: bundle) }
        }
        let frames = try connect(settings: settings)
        for message in frames.map(\.message) {
            if let bundle = message["bundleId"]?.stringValue, let token = message["token"]?.stringValue { tokens[bundle] = token }
        }
        token = tokens["com.example.app"] ?? ""
    }

    var clock: ManualClock { base.clock }
    var now: Int64 { clock.nowMilliseconds() }

    @discardableResult
    func connect(settings: AppSettings = AppSettings()) throws -> [DeviceFrame] {
        connectionID += 1
        let hello = DeviceHello(
            deviceID: "phone", lowPowerMode: false,
            apps: (["com.example.app"] + extraBundles).map {
                AppRegistration(bundleID: $0, environment: .sandbox, settings: settings, kinds: [.app])
            })
        let id = connectionID
        let now = self.now
        return try base.state.withWorld { world throws(DeviceRequestError) in
            try world.connectDevice(hello, connectionID: id, nowMs: now)
        }
    }

    func disconnect() {
        let id = connectionID
        let now = self.now
        base.state.withWorld { $0.disconnectDevice("phone", connectionID: id, nowMs: now) }
    }

    /// Sends a push; returns the response (with the device frames it produced).
    func push(
        _ body: String = #"{"aps":{"alert":"hi"}}"#, headers: [(String, String)] = [], bundle: String = "com.example.app"
    ) throws
        -> PushResponse
    {
        let request = try base.request(token: tokens[bundle] ?? token, topic: bundle, extra: headers, body: body)
        var connection = base.connection()
        return base.endpoint.handle(request, connection: &connection)
    }

    func notifications(in frames: [DeviceFrame]) -> [JSONValue] {
        frames.map(\.message).filter { $0["type"] == "notification" }
    }

    /// Acks every notification in `frames`; returns the frames the acks released.
    @discardableResult
    func ack(_ frames: [DeviceFrame]) throws -> [DeviceFrame] {
        var released: [DeviceFrame] = []
        for message in notifications(in: frames) {
            let id = UInt64(message["id"]!.intValue!)
            let connection = connectionID
            let now = self.now
            released += try base.state.withWorld { world throws(DeviceRequestError) in
                try world.acknowledge(deviceID: "phone", connectionID: connection, deliveryID: id, nowMs: now)
            }
        }
        return released
    }

    func record(_ response: PushResponse) -> NotificationRecord? {
        base.state.withWorld { $0.records.record(sequence: response.recordSequence) }
    }

    /// Sets com.example.app's run state on the device; returns the frames that released.
    func setAppState(_ appState: AppState) throws -> [DeviceFrame] {
        let now = self.now
        return try base.state.withWorld { world throws(DeviceRequestError) in
            try world.updateApp(
                deviceID: "phone", bundleID: "com.example.app", appState: appState, authorization: nil, backgroundMode: nil, nowMs: now)
        }.1
    }

    func tick() -> [DeviceFrame] {
        let now = self.now
        return base.state.withWorld { $0.tick(nowMs: now) }
    }
}

@Suite("Store and forward, expiry, collapse, budgets")
struct DeliveryStateTests {
    @Test func onlineDeliveryIsPendingUntilAcked() throws {
        let f = try DeviceFixture()
        let response = try f.push()
        #expect(response.status == 200)
        let sent = f.notifications(in: response.deviceFrames)
        #expect(sent.count == 1)
        #expect(sent.first?["apnsId"]?.stringValue == response.apnsID)
        #expect(f.record(response)?.outcome == .pending)
        try f.ack(response.deviceFrames)
        #expect(f.record(response)?.outcome == .delivered)
        #expect(f.record(response)?.display == "banner")
    }

    @Test func offlineKeepsTheNewestUntilReconnect() throws {
        let f = try DeviceFixture()
        f.disconnect()
        let first = try f.push(#"{"aps":{"alert":"one"}}"#)
        let second = try f.push(#"{"aps":{"alert":"two"}}"#)
        #expect(first.deviceFrames.isEmpty && second.deviceFrames.isEmpty)
        #expect(f.record(first)?.outcome == .coalesced)
        #expect(f.record(second)?.outcome == .stored)
        let frames = try f.connect()
        let delivered = f.notifications(in: frames)
        #expect(delivered.count == 1)
        #expect(delivered.first?["payload"] == .raw(Array(#"{"aps":{"alert":"two"}}"#.utf8)), "the provider's bytes")
        #expect(delivered.first?["stored"] == true)
        try f.ack(frames)
        #expect(f.record(second)?.outcome == .delivered)
        #expect(f.record(second)?.wasStored == true)
    }

    @Test func expirationZeroIsNeverStored() throws {
        let f = try DeviceFixture()
        f.disconnect()
        let response = try f.push(headers: [("apns-expiration", "0")])
        #expect(response.status == 200)
        #expect(f.record(response)?.outcome == .expired)
        #expect(f.notifications(in: try f.connect()).isEmpty)
    }

    @Test func storedNotificationsExpire() throws {
        let f = try DeviceFixture()
        f.disconnect()
        let expiry = f.now / 1000 + 60
        let response = try f.push(headers: [("apns-expiration", String(expiry))])
        #expect(f.record(response)?.outcome == .stored)
        f.clock.advance(seconds: 59)
        _ = f.tick()
        #expect(f.record(response)?.outcome == .stored)
        // A day's move: the log says when it expired, not when the move was noticed.
        f.clock.advance(seconds: 86_400)
        _ = f.tick()
        #expect(f.record(response)?.outcome == .expired)
        #expect(f.record(response)?.transitions.last?.atMs == expiry * 1000)
        #expect(f.notifications(in: try f.connect()).isEmpty)
    }

    /// "Up to 30 days or until apns-expiration, whichever comes first": without the header, and
    /// with an expiration 40 days or a century ahead, a push is kept 30 days.
    @Test(arguments: [nil, Int64(40 * 86_400), Int64(100 * 365 * 86_400)])
    func aPushIsKeptThirtyDaysAtMost(ahead: Int64?) throws {
        let f = try DeviceFixture()
        f.disconnect()
        let response = try f.push(headers: ahead.map { [("apns-expiration", String(f.now / 1000 + $0))] } ?? [])
        #expect(f.record(response)?.outcome == .stored)
        f.clock.advance(seconds: 30 * 86_400 - 1)
        _ = f.tick()
        #expect(f.record(response)?.outcome == .stored)
        f.clock.advance(seconds: 2)
        _ = f.tick()
        #expect(f.record(response)?.outcome == .expired)
        #expect(f.notifications(in: try f.connect()).isEmpty)
    }

    @Test func unackedDeliveriesGoBackToTheStoreWhenTheDeviceDrops() throws {
        let f = try DeviceFixture()
        let response = try f.push()
        #expect(f.record(response)?.outcome == .pending)
        f.disconnect()
        #expect(f.record(response)?.outcome == .stored)
        let frames = try f.connect()
        #expect(f.notifications(in: frames).first?["apnsId"]?.stringValue == response.apnsID)
        try f.ack(frames)
        #expect(f.record(response)?.outcome == .delivered)
    }

    @Test func newestConnectionWinsAndTheOldOneIsReplaced() throws {
        let f = try DeviceFixture()
        let old = f.connectionID
        let pending = try f.push()
        let frames = try f.connect()
        let replaced = frames.first { $0.connectionID == old }
        #expect(replaced?.message["type"] == "replaced")
        #expect(replaced?.closeAfter == true)
        #expect(frames.contains { $0.message["token"]?.stringValue == f.token })
        // The unacked delivery moves to the new connection once the old one is closed (acks it
        // still had unread would have counted first).
        let now = f.now
        let moved = f.base.state.withWorld { $0.disconnectDevice("phone", connectionID: old, nowMs: now) }
        #expect(f.notifications(in: moved).first?["apnsId"]?.stringValue == pending.apnsID)
        #expect(moved.allSatisfy { $0.connectionID == f.connectionID })
    }

    @Test func collapseIDReplacesTheOlderNotification() throws {
        let f = try DeviceFixture()
        let first = try f.push(headers: [("apns-collapse-id", "score")])
        try f.ack(first.deviceFrames)
        let second = try f.push(headers: [("apns-collapse-id", "score")])
        try f.ack(second.deviceFrames)
        #expect(f.record(first)?.outcome == .coalesced)
        #expect(f.record(second)?.outcome == .delivered)
        let other = try f.push(headers: [("apns-collapse-id", "other")])
        try f.ack(other.deviceFrames)
        #expect(f.record(second)?.outcome == .delivered)
    }

    /// A notification the user tapped or dismissed has left the screen and Notification
    /// Center: a later one with its collapse id replaces nothing, and it stays `delivered`.
    /// Before, it turned `coalesced` ("Discarded: replaced by a newer notification").
    @Test(arguments: ["default", "dismiss"]) func aCollapseIDDoesNotReplaceANotificationTheUserAnswered(action: String) throws {
        let f = try DeviceFixture()
        let first = try f.push(headers: [("apns-collapse-id", "score")])
        try f.ack(first.deviceFrames)
        _ = try f.base.state.withWorld { world in
            try world.respond(deviceID: "phone", apnsID: first.apnsID ?? "", action: action, text: nil, nowMs: f.now)
        }
        let second = try f.push(headers: [("apns-collapse-id", "score")])
        try f.ack(second.deviceFrames)
        #expect(f.record(first)?.outcome == .delivered, "\(f.record(first)?.explanation ?? "-")")
        #expect(f.record(first)?.transitions.contains { $0.step == .replaced } == false)
        #expect(f.record(second)?.outcome == .delivered)
        // The newer one, still on screen, is replaced by the next as before.
        let third = try f.push(headers: [("apns-collapse-id", "score")])
        try f.ack(third.deviceFrames)
        #expect(f.record(second)?.outcome == .coalesced)
    }

    /// A badge or sound iOS cannot read, all the payload would show: the record says why
    /// nothing was shown (before, "dropped by the system" and no reason).
    @Test(arguments: [#"{"aps":{"badge":"3"}}"#, #"{"aps":{"badge":2.5}}"#, #"{"aps":{"sound":5}}"#])
    func anUnreadableBadgeOrSoundIsExplainedOnTheRecord(payload: String) throws {
        let f = try DeviceFixture()
        let response = try f.push(payload)
        try f.ack(response.deviceFrames)
        let record = f.record(response)
        #expect(record?.outcome == .droppedBySystem, "\(String(describing: record?.outcome))")
        #expect(record?.deliveryNote?.contains("so iOS") == true, "\(record?.deliveryNote ?? "no note")")
    }

    /// A device whose apps' background budget is `perHour` wakes, the pure background push and
    /// its headers.
    static func budgeted(_ perHour: Int) throws -> (DeviceFixture, silent: String, headers: [(String, String)]) {
        var options = DeliveryOptions()
        options.backgroundBudgetPerHour = perHour
        return (try DeviceFixture(options: options), #"{"aps":{"content-available":1}}"#, [("apns-push-type", "background"), ("apns-priority", "5")])
    }

    @Test func backgroundBudgetDefersThenDeliversTheNewest() throws {
        let (f, silent, headers) = try Self.budgeted(2)
        let a = try f.push(silent, headers: headers)
        let b = try f.push(silent, headers: headers)
        try f.ack(a.deviceFrames + b.deviceFrames)
        #expect(f.record(a)?.outcome == .delivered)
        #expect(f.record(a)?.callbacks == ["didReceiveRemoteNotification"])
        let c = try f.push(silent, headers: headers)
        let d = try f.push(silent, headers: headers)
        // Over budget: accepted, never sent; only the newest is kept.
        #expect(c.status == 200 && d.status == 200)
        #expect(c.deviceFrames.isEmpty && d.deviceFrames.isEmpty)
        #expect(f.record(c)?.outcome == .throttled)
        #expect(f.record(d)?.outcome == .deferred)
        // Half an hour later one wake is back: the deferred push goes out.
        f.clock.advance(seconds: 1800)
        let released = f.tick()
        #expect(f.notifications(in: released).first?["apnsId"]?.stringValue == d.apnsID)
        try f.ack(released)
        #expect(f.record(d)?.outcome == .delivered)
    }

    /// A background push the device never acknowledged (it disconnected first), or one stored
    /// while it was offline, has not woken the app: delivered from the store later, it costs
    /// one wake of the budget, not two.
    @Test func aBackgroundPushCostsOneWakeWhenItFinallyArrives() throws {
        let (f, silent, headers) = try Self.budgeted(3)
        func wakesLeft() -> Int {
            let now = f.now
            return f.base.state.withWorld { $0.backgroundWakesLeft(deviceID: "phone", bundleID: "com.example.app", nowMs: now) }
        }
        #expect(wakesLeft() == 3)
        let unacknowledged = try f.push(silent, headers: headers)
        #expect(f.notifications(in: unacknowledged.deviceFrames).count == 1)
        #expect(wakesLeft() == 2)
        f.disconnect()
        #expect(f.record(unacknowledged)?.outcome == .stored)
        #expect(wakesLeft() == 3)
        try f.ack(try f.connect())
        #expect(f.record(unacknowledged)?.outcome == .delivered)
        f.disconnect()
        let whileOffline = try f.push(silent, headers: headers)
        #expect(f.record(whileOffline)?.outcome == .stored)
        try f.ack(try f.connect())
        #expect(f.record(whileOffline)?.outcome == .delivered)
        // Two wakes used of three: one more goes out, the next is held.
        let third = try f.push(silent, headers: headers)
        try f.ack(third.deviceFrames)
        #expect(f.record(third)?.outcome == .delivered)
        #expect(wakesLeft() == 0)
        let fourth = try f.push(silent, headers: headers)
        #expect(f.record(fourth)?.outcome == .deferred)
        // Refilled continuously: one wake every 20 minutes.
        f.clock.advance(seconds: 1199)
        #expect(wakesLeft() == 0)
        f.clock.advance(seconds: 1)
        #expect(wakesLeft() == 1)
    }

    /// A device that reconnects while its old connection still has acks unread: the old
    /// connection's deliveries stay in flight until it closes, so an ack read there counts
    /// (it was recorded coalesced before), and what it did not ack goes out on the new one.
    @Test func aReplacedConnectionsLastAcksCountAndTheRestGoOutOnTheNewOne() throws {
        let f = try DeviceFixture()
        let acked = try f.push()
        let unacked = try f.push()
        let old = f.connectionID
        let deliveries = f.notifications(in: acked.deviceFrames + unacked.deviceFrames).map { UInt64($0["id"]!.intValue!) }
        try #require(deliveries.count == 2)
        let reconnect = try f.connect()
        #expect(f.notifications(in: reconnect).isEmpty, "nothing is sent again while the old connection may still ack it")
        #expect(reconnect.contains { $0.connectionID == old && $0.message["type"] == "replaced" })
        let now = f.now
        _ = try f.base.state.withWorld { world throws(DeviceRequestError) in
            try world.acknowledge(deviceID: "phone", connectionID: old, deliveryID: deliveries[0], nowMs: now)
        }
        #expect(f.record(acked)?.outcome == .delivered)
        let resent = f.base.state.withWorld { $0.disconnectDevice("phone", connectionID: old, nowMs: now) }
        let again = f.notifications(in: resent)
        #expect(again.map { $0["apnsId"]?.stringValue } == [unacked.apnsID], "\(resent)")
        #expect(resent.allSatisfy { $0.connectionID == f.connectionID })
        try f.ack(resent)
        #expect(f.record(unacked)?.outcome == .delivered)
    }

    /// After Redis lost its state, an instance writes back the records the restored copy
    /// lacked. One that waited here for its device's ack is in no one's delivery state then:
    /// it goes to the device's owner as a hand-off (it stayed `pending` and never arrived); one
    /// the delivery state still holds, or one settled, is written back as it is.
    @Test func aWrittenBackRecordThatWaitsForNothingGoesBackToItsOwner() throws {
        var options = DeliveryOptions()
        options.deliveryIDsAreSequences = true  // as with --redis
        let f = try DeviceFixture(options: options)
        let sent = try f.push()
        let record = try #require(f.record(sent))
        #expect(record.outcome == .pending && !f.notifications(in: sent.deviceFrames).isEmpty)
        let here = f.base.state.readWorld { $0.recordToWriteBack(record) }
        #expect(!here.delivery.awaitingOwner && here.outcome == .pending, "in flight here: as it is")
        let restored = try DeviceFixture(options: options)  // the same device, nothing waiting
        let handed = restored.base.state.readWorld { $0.recordToWriteBack(record) }
        #expect(handed.delivery.awaitingOwner && handed.outcome == .pending)
        #expect(handed.explanation.contains("routed again by the device's owner"), "\(handed.explanation)")
        _ = try f.ack(sent.deviceFrames)
        let delivered = try #require(f.record(sent))
        #expect(delivered.outcome == .delivered)
        #expect(!restored.base.state.readWorld { $0.recordToWriteBack(delivered) }.delivery.awaitingOwner, "settled: as it is")
    }

    /// `--redis`: the shared state took back what a connection had in flight (the socket moved
    /// to another instance, a reload after a Redis fault) before the device's acks for it
    /// counted. A late ack on the old connection still counts: the one coalesced in the store
    /// and the one kept there read `delivered`, and the kept one is not sent again.
    @Test func aLateAckForADeliveryTakenBackCountsAndIsNotSentAgain() throws {
        var options = DeliveryOptions()
        options.deliveryIDsAreSequences = true  // as with --redis
        let f = try DeviceFixture(options: options)
        let first = try f.push(#"{"aps":{"alert":"one"}}"#)
        let second = try f.push(#"{"aps":{"alert":"two"}}"#)
        let sent = f.notifications(in: first.deviceFrames + second.deviceFrames)
        #expect(sent.count == 2)
        let old = f.connectionID
        f.disconnect()
        #expect(f.record(first)?.outcome == .coalesced && f.record(second)?.outcome == .stored)
        let now = f.now
        for message in sent {
            let id = UInt64(message["id"]!.intValue!)
            _ = try f.base.state.withWorld { world throws(DeviceRequestError) in
                try world.acknowledge(deviceID: "phone", connectionID: old, deliveryID: id, nowMs: now)
            }
        }
        #expect(f.record(first)?.outcome == .delivered && f.record(second)?.outcome == .delivered)
        #expect(f.notifications(in: try f.connect()).isEmpty, "acked: not in the store any more")
        // Acked twice: harmless. An id no delivery to this device had: refused as before.
        let again = UInt64(sent[0]["id"]!.intValue!)
        _ = try f.base.state.withWorld { world throws(DeviceRequestError) in
            try world.acknowledge(deviceID: "phone", connectionID: old, deliveryID: again, nowMs: now)
        }
        #expect(f.record(first)?.outcome == .delivered)
        #expect(throws: DeviceRequestError.self) {
            try f.base.state.withWorld { world throws(DeviceRequestError) in
                try world.acknowledge(deviceID: "tablet", connectionID: old, deliveryID: again, nowMs: now)
            }
        }
    }

    /// `--redis`: acks the device sent that never reached the shared state (Redis failed, the
    /// connection was closed before they were read) come again in its next hello (`acked`):
    /// what was coalesced or stored meanwhile reads `delivered`, and is not sent again; a wrong
    /// apns-id changes nothing.
    /// With `--redis` (ids are sequences) and without (matched by apns-id: ids begin again after
    /// a restart with `--state-dir`).
    @Test(arguments: [true, false])
    func aHelloListingAckedDeliveriesSettlesThemBeforeTheStoreIsSent(idsAreSequences: Bool) throws {
        var options = DeliveryOptions()
        options.deliveryIDsAreSequences = idsAreSequences
        let f = try DeviceFixture(options: options)
        // apns-ids of their own: the fixture's generated ones repeat from connection to connection.
        let first = try f.push(#"{"aps":{"alert":"one"}}"#, headers: [("apns-id", "11111111-1111-1111-1111-111111111111")])
        let second = try f.push(#"{"aps":{"alert":"two"}}"#, headers: [("apns-id", "22222222-2222-2222-2222-222222222222")])
        let third = try f.push(#"{"aps":{"alert":"three"}}"#, headers: [("apns-id", "33333333-3333-3333-3333-333333333333")])
        let sent = f.notifications(in: first.deviceFrames + second.deviceFrames + third.deviceFrames)
        f.disconnect()
        #expect(f.record(third)?.outcome == .stored)
        f.connectionID += 1
        let id = f.connectionID
        let now = f.now
        let acked = [
            AckedDelivery(id: UInt64(sent[0]["id"]!.intValue!), apnsID: first.apnsID),
            AckedDelivery(id: UInt64(sent[1]["id"]!.intValue!), apnsID: "00000000-0000-0000-0000-000000000000"),
            AckedDelivery(id: UInt64(sent[2]["id"]!.intValue!), apnsID: third.apnsID.lowercased()),
        ]
        let hello = DeviceHello(
            deviceID: "phone", lowPowerMode: false,
            apps: [AppRegistration(bundleID: "com.example.app", environment: .sandbox, settings: AppSettings(), kinds: [.app])],
            acked: acked)
        let frames = try f.base.state.withWorld { world throws(DeviceRequestError) in
            try world.connectDevice(hello, connectionID: id, nowMs: now)
        }
        #expect(f.notifications(in: frames).isEmpty, "\(frames)")
        #expect(f.record(first)?.outcome == .delivered)
        #expect(f.record(second)?.outcome == .coalesced, "another apns-id: not this delivery")
        #expect(f.record(third)?.outcome == .delivered)
    }

    /// `--redis`: a reload of the shared copy can undo a connection's close (Redis lost its
    /// state; another instance's copy, which had not heard of the close, was restored). Such a
    /// connection reads no ack: a hello on a new one takes what it had in flight at once, and
    /// the sweep after a reload disconnects a device left on it (pushes stayed in flight for
    /// good, or went to the closed connection, until the device came back).
    @Test func aConnectionClosedUnbeknownToTheCopyGivesBackItsDeliveries() throws {
        let f = try DeviceFixture()
        let sent = try f.push()
        let closed = f.connectionID
        f.connectionID += 1
        let id = f.connectionID
        let now = f.now
        let hello = DeviceHello(
            deviceID: "phone", lowPowerMode: false,
            apps: [AppRegistration(bundleID: "com.example.app", environment: .sandbox, settings: AppSettings(), kinds: [.app])])
        let frames = try f.base.state.withWorld { world throws(DeviceRequestError) in
            try world.connectDevice(hello, connectionID: id, nowMs: now, isOpenHere: { $0 != closed })
        }
        let again = f.notifications(in: frames)
        #expect(again.map { $0["apnsId"]?.stringValue } == [sent.apnsID], "\(frames)")
        #expect(frames.filter { f.notifications(in: [$0]).count == 1 }.allSatisfy { $0.connectionID == id })

        let g = try DeviceFixture()
        let stuck = try g.push()
        let open = g.base.state.withWorld { $0.detachClosedConnections(isOpenHere: { _ in true }, nowMs: now) }
        #expect(open.isEmpty && g.record(stuck)?.outcome == .pending, "an open connection is left alone")
        _ = g.base.state.withWorld { $0.detachClosedConnections(isOpenHere: { _ in false }, nowMs: now) }
        #expect(g.record(stuck)?.outcome == .stored, "back in the store for the device's next connection")
        #expect(g.base.state.readWorld { $0.registry.devices["phone"]?.connectionID } == nil)
    }

    /// After a reload of the shared copy, what is in flight on the device's open connection is
    /// sent again (its frame may never have gone out) with the same delivery id, changing
    /// nothing; the ack settles it, also on another of the device's connections.
    @Test func whatIsInFlightOnAnOpenConnectionIsSentAgainAfterAReload() throws {
        let f = try DeviceFixture()
        let sent = try f.push()
        let first = f.notifications(in: sent.deviceFrames)
        let later = f.now + 1
        let again = f.base.state.readWorld { $0.inFlightFramesToResend(beforeMs: later, isOpenHere: { _ in true }) }
        #expect(f.notifications(in: again).map { $0["id"] } == first.map { $0["id"] }, "\(again)")
        #expect(again.allSatisfy { $0.connectionID == f.connectionID })
        #expect(f.base.state.readWorld { $0.inFlightFramesToResend(beforeMs: later, isOpenHere: { _ in false }) }.isEmpty, "not on a closed one")
        #expect(
            f.base.state.readWorld { $0.inFlightFramesToResend(beforeMs: f.now, isOpenHere: { _ in true }) }.isEmpty,
            "not one sent since the reload")
        // The device acks from a new connection: its ack still counts.
        let id = UInt64(try #require(first.first?["id"]?.intValue))
        let old = f.connectionID
        try f.connect()
        let now = f.now
        let newConnection = f.connectionID
        _ = try f.base.state.withWorld { world throws(DeviceRequestError) in
            try world.acknowledge(deviceID: "phone", connectionID: newConnection, deliveryID: id, nowMs: now)
        }
        #expect(f.record(sent)?.outcome == .delivered)
        #expect(old != newConnection)
    }

    @Test func terminatedAppGetsItsBackgroundPushWhenLaunched() throws {
        let f = try DeviceFixture(settings: AppSettings(appState: .terminated))
        let push = try f.push(#"{"aps":{"content-available":1}}"#, headers: [("apns-push-type", "background"), ("apns-priority", "5")])
        #expect(push.deviceFrames.isEmpty)
        #expect(f.record(push)?.outcome == .deferred)
        let setState = f.setAppState
        // Leaving force-quit for not running or suspended is not a launch: it stays held.
        #expect(try setState(.notRunning).isEmpty)
        #expect(try setState(.suspended).isEmpty)
        #expect(f.record(push)?.outcome == .deferred)
        _ = try setState(.notRunning)
        let frames = try setState(.foreground)
        #expect(f.notifications(in: frames).first?["callbacks"] == ["didReceiveRemoteNotification"])
    }

    /// A force-quit app's held background push is superseded by a newer one that reaches the
    /// app (iOS keeps the newest), not delivered after it when the app is launched.
    @Test func aHeldBackgroundPushIsNotDeliveredAfterANewerOne() throws {
        let f = try DeviceFixture(settings: AppSettings(appState: .terminated))
        let background = [("apns-push-type", "background"), ("apns-priority", "5")]
        let older = try f.push(#"{"aps":{"content-available":1},"i":1}"#, headers: background)
        #expect(f.record(older)?.outcome == .deferred)
        let setState = f.setAppState
        #expect(try setState(.suspended).isEmpty)
        let newer = try f.push(#"{"aps":{"content-available":1},"i":2}"#, headers: background)
        #expect(f.notifications(in: newer.deviceFrames).first?["callbacks"] == ["didReceiveRemoteNotification"])
        #expect(f.record(older)?.outcome == .throttled)
        #expect(try setState(.background).isEmpty, "nothing is left to release")
    }

    /// Stored notifications of several apps reach the device in the order they were answered,
    /// not in the order of their bundle ids.
    @Test func storedNotificationsOfSeveralAppsArriveInTheOrderAnswered() throws {
        let f = try DeviceFixture(extraBundles: ["com.example.two", "com.example.a0"])
        f.disconnect()
        let order = ["com.example.two", "com.example.app", "com.example.a0"]
        for bundle in order { #expect(try f.push(bundle: bundle).status == 200) }
        let frames = try f.connect()
        #expect(f.notifications(in: frames).compactMap { $0["bundleId"]?.stringValue } == order)
    }

    @Test func deniedAlertArrivesAndIsDroppedBySystem() throws {
        let f = try DeviceFixture(settings: AppSettings(authorization: .denied))
        let push = try f.push()
        let sent = f.notifications(in: push.deviceFrames)
        #expect(sent.first?["display"] == "none")
        #expect(sent.first?["callbacks"] == [])
        #expect(sent.first?["reason"]?.stringValue != nil)
        try f.ack(push.deviceFrames)
        #expect(f.record(push)?.outcome == .droppedBySystem)
    }

    @Test func uninstallGives410AndReinstallANewToken() throws {
        let f = try DeviceFixture()
        let now = f.now
        let oldToken = f.token
        _ = try f.base.state.withWorld { world throws(DeviceRequestError) in
            try world.uninstallApp(deviceID: "phone", bundleID: "com.example.app", nowMs: now)
        }
        let gone = try f.push()
        #expect(gone.status == 410)
        #expect(gone.timestampMs == now)
        let frames = try f.connect()
        let newToken = frames.compactMap { $0.message["token"]?.stringValue }.first
        #expect(newToken != nil && newToken != oldToken)
    }

    /// Not stored for an offline device: `apns-expiration` 0, or a time already past, each
    /// said as what it is.
    @Test func aPastExpirationIsNotStoredAndSaysSo() throws {
        let f = try DeviceFixture()
        f.disconnect()
        let past = try f.push(headers: [("apns-expiration", String(f.now / 1000 - 60))])
        #expect(past.status == 200)
        #expect(f.record(past)?.outcome == .expired)
        #expect(f.record(past)?.explanation.contains("has passed") == true, "\(f.record(past)?.explanation ?? "-")")
        let zero = try f.push(headers: [("apns-expiration", "0")])
        #expect(f.record(zero)?.explanation.contains("apns-expiration 0 means it is never stored") == true)
    }

    /// `apns-expiration` takes any 64-bit number; the largest one (9.2e18 seconds) overflowed
    /// into milliseconds and one push stopped the process. It is a time far ahead: stored.
    @Test func theLargestExpirationIsAcceptedAndStored() throws {
        let f = try DeviceFixture()
        let online = try f.push(headers: [("apns-expiration", String(Int64.max))])
        #expect(online.status == 200)
        #expect(f.record(online)?.expiration == Int64.max)
        f.disconnect()
        let offline = try f.push(headers: [("apns-expiration", String(Int64.max))])
        #expect(offline.status == 200)
        #expect(f.record(offline)?.outcome == .stored)
        #expect(millisecondsSince1970(wholeSeconds: .max) == .max && millisecondsSince1970(wholeSeconds: 2) == 2_000)
    }

    /// A provisional app's notification goes to the device with what the rules took away (the
    /// sound), as its record has it; a plain alert under the defaults carries none.
    @Test func aProvisionalAppsDeliveryCarriesItsPresentation() throws {
        let body = #"{"aps":{"alert":"x","sound":"default"}}"#
        let quiet = try DeviceFixture(settings: AppSettings(authorization: .provisional))
        let frame = try #require(quiet.notifications(in: try quiet.push(body).deviceFrames).first)
        #expect(frame["presentation"]?["sound"]?.stringValue == "silenced", "\(frame)")
        let plain = try DeviceFixture()
        let ordinary = try #require(plain.notifications(in: try plain.push(body).deviceFrames).first)
        #expect(ordinary["presentation"] == nil)
    }

    @Test func delayed410AndAfterNPushes() throws {
        var options = DeliveryOptions()
        options.unregisteredDelayMs = 60_000
        options.unregisteredAfterPushes = 2
        let f = try DeviceFixture(options: options)
        let now = f.now
        _ = try f.base.state.withWorld { world throws(DeviceRequestError) in
            try world.uninstallApp(deviceID: "phone", bundleID: "com.example.app", nowMs: now)
        }
        // Two pushes are still answered 200 (the device discards them); the third is the first 410.
        for _ in 0..<2 {
            let accepted = try f.push()
            #expect(accepted.status == 200)
            #expect(f.record(accepted)?.outcome == .droppedBySystem)
        }
        let third = try f.push()
        #expect(third.status == 410)
        #expect(third.timestampMs == f.now)
    }

    @Test func rotationAndEraseInvalidateOldTokensButPermissionChangesDoNot() throws {
        let f = try DeviceFixture()
        let now = f.now
        let original = f.token
        _ = try f.base.state.withWorld { world throws(DeviceRequestError) in
            try world.updateApp(
                deviceID: "phone", bundleID: "com.example.app", appState: nil, authorization: .denied,
                backgroundMode: nil, nowMs: now)
        }
        #expect(f.base.state.withWorld { $0.registry.devices["phone"]?.apps["com.example.app"]?.tokens[.app] } == original)
        let rotated = try f.base.state.withWorld { world throws(DeviceRequestError) in
            try world.rotateTokens(deviceID: "phone", bundleID: "com.example.app", nowMs: now)
        }
        #expect(rotated.first?.token != original)
        #expect(try f.push().status == 410)
        _ = try f.base.state.withWorld { world throws(DeviceRequestError) in try world.eraseDevice("phone", nowMs: now) }
        #expect(f.base.state.withWorld { $0.registry.token(rotated.first!.token)?.state } == .unregistered(sinceMs: now))
    }

    @Test func restoreOntoAnotherDeviceGivesNewTokens() throws {
        let f = try DeviceFixture()
        let now = f.now
        let sourceConnection = f.base.state.readWorld { $0.registry.devices["phone"]?.connectionID }
        let (entries, messages) = try f.base.state.withWorld { world throws(DeviceRequestError) in
            _ = try world.connectDevice(DeviceHello(deviceID: "new-phone", lowPowerMode: false, apps: []), connectionID: 999, nowMs: now)
            return try world.restoreBackup(from: "phone", to: "new-phone", nowMs: now)
        }
        // The old phone, connected, hears that its app went (its next hello does not bring it back).
        let told = messages.source.map { ($0.deviceID, $0.connectionID, $0.message["type"]?.stringValue, $0.message["bundleId"]?.stringValue) }
        #expect(sourceConnection != nil)
        #expect(told.map(\.0) == ["phone"] && told.first?.1 == sourceConnection)
        #expect(told.first?.2 == "uninstalled" && told.first?.3 == "com.example.app")
        #expect(messages.target.isEmpty, "the new phone had no copy of its own")
        #expect(entries.count == 1)
        #expect(entries.first?.deviceID == "new-phone")
        #expect(entries.first?.token != f.token)
        #expect(try f.push().status == 410)
    }

    @Test func tapRunsDidReceive() throws {
        let f = try DeviceFixture(settings: AppSettings(appState: .notRunning))
        let push = try f.push()
        try f.ack(push.deviceFrames)
        let now = f.now
        let tapped = try f.base.state.withWorld { world throws(DeviceRequestError) in
            try world.tap(deviceID: "phone", apnsID: push.apnsID, nowMs: now)
        }
        #expect(tapped.callbacks == ["didReceive"])
        #expect(tapped.launched)
        #expect(f.record(push)?.callbacks == ["didReceive"])
    }

    /// Tapping a notification launches a force-quit app, so a background push held until its
    /// launch is delivered then.
    /// A background push that wakes an app that is not running launches it into the
    /// background (Apple's didReceiveRemoteNotification page): the device hears its new state,
    /// and a later tap is not a cold launch.
    @Test func aBackgroundWakeLaunchesAnAppThatWasNotRunning() throws {
        let f = try DeviceFixture(settings: AppSettings(appState: .notRunning))
        let wake = try f.push(#"{"aps":{"content-available":1}}"#, headers: [("apns-push-type", "background"), ("apns-priority", "5")])
        let afterAck = try f.ack(wake.deviceFrames)
        #expect(f.record(wake)?.outcome == .delivered)
        let updated = afterAck.map(\.message).first { $0["type"] == "appUpdated" }
        #expect(updated?["appState"] == "background" && updated?["launchedBy"]?.stringValue == wake.apnsID, "\(afterAck)")
        #expect(f.base.state.withWorld { $0.registry.devices["phone"]?.apps["com.example.app"]?.settings.appState } == .background)
        let alert = try f.push()
        try f.ack(alert.deviceFrames)
        let now = f.now
        let tapped = try f.base.state.withWorld { world throws(DeviceRequestError) in
            try world.tap(deviceID: "phone", apnsID: alert.apnsID, nowMs: now)
        }
        #expect(!tapped.launched)
        // An alert alone wakes nothing: the app stays where it was.
        let g = try DeviceFixture(settings: AppSettings(appState: .notRunning))
        try g.ack(try g.push().deviceFrames)
        #expect(g.base.state.withWorld { $0.registry.devices["phone"]?.apps["com.example.app"]?.settings.appState } == .notRunning)
    }

    @Test func tappingLaunchesAForceQuitAppAndReleasesItsHeldBackgroundPush() throws {
        let f = try DeviceFixture(settings: AppSettings(appState: .terminated))
        let alert = try f.push()
        try f.ack(alert.deviceFrames)
        let held = try f.push(#"{"aps":{"content-available":1}}"#, headers: [("apns-push-type", "background"), ("apns-priority", "5")])
        #expect(f.record(held)?.outcome == .deferred)
        let now = f.now
        let tapped = try f.base.state.withWorld { world throws(DeviceRequestError) in
            try world.tap(deviceID: "phone", apnsID: alert.apnsID, nowMs: now)
        }
        #expect(tapped.launched)
        let released = f.notifications(in: tapped.frames)
        #expect(released.count == 1)
        #expect(released.first?["apnsId"]?.stringValue == held.apnsID)
        #expect(released.first?["callbacks"] == ["didReceiveRemoteNotification"])
    }

    @Test func lowPriorityBatchingIsOffByDefaultAndObservableWhenOn() throws {
        let f = try DeviceFixture()
        #expect(f.notifications(in: try f.push(headers: [("apns-priority", "5")]).deviceFrames).count == 1)
        var options = DeliveryOptions()
        options.lowPriorityDelayMs = 5000
        let g = try DeviceFixture(options: options)
        let batched = try g.push(headers: [("apns-priority", "5")])
        #expect(batched.deviceFrames.isEmpty)
        #expect(g.record(batched)?.outcome == .pending)
        g.clock.advance(seconds: 5)
        #expect(g.notifications(in: g.tick()).count == 1)
    }

    @Test func tooManyRequestsIsOffByDefaultAndConfigurable() throws {
        let f = try DeviceFixture()
        for _ in 0..<50 { #expect(try f.push().status == 200) }
        var options = DeliveryOptions()
        options.tooManyRequests = (3, 1000)
        let g = try DeviceFixture(options: options)
        for _ in 0..<3 { #expect(try g.push().status == 200) }
        let flooded = try g.push()
        #expect(flooded.status == 429)
        #expect(flooded.reasonText == "TooManyRequests")
        g.clock.advance(seconds: 1)
        #expect(try g.push().status == 200)
    }

    /// Every accepted push ends in exactly one state or is still pending, whatever happens.
    @Test func accountingAddsUp() throws {
        var options = DeliveryOptions()
        options.backgroundBudgetPerHour = 1
        let f = try DeviceFixture(options: options)
        var responses: [PushResponse] = []
        for i in 0..<30 {
            let background = i % 3 == 0
            let body = background ? #"{"aps":{"content-available":1}}"# : #"{"aps":{"alert":"n\#(i)"}}"#
            var headers: [(String, String)] = background ? [("apns-push-type", "background"), ("apns-priority", "5")] : []
            if i % 5 == 0 { headers.append(("apns-collapse-id", "c")) }
            if i % 7 == 0 { headers.append(("apns-expiration", "0")) }
            let response = try f.push(body, headers: headers)
            responses.append(response)
            if i % 4 == 0 { try f.ack(response.deviceFrames) }
            if i == 10 { f.disconnect() }
            if i == 20 { try f.ack(try f.connect()) }
            f.clock.advance(seconds: 60)
            _ = f.tick()
        }
        let records = responses.compactMap(f.record)
        #expect(records.count == 30)
        let waiting = f.base.state.withWorld { $0.delivery.pendingCount }
        let unsettled = records.filter { [.pending, .stored, .deferred].contains($0.outcome) }.count
        #expect(unsettled == waiting, "each unsettled record is waiting somewhere exactly once")
        #expect(records.allSatisfy { $0.outcome != .rejected })
    }
}

@Suite("The device window")
struct DeviceWindowTests {
    static func options(window: Int, ackTimeoutMs: Int64 = 60_000) -> DeliveryOptions {
        var options = DeliveryOptions()
        options.deviceWindow = window
        options.deviceAckTimeoutMs = ackTimeoutMs
        return options
    }

    /// `count` alerts n0, n1, … to the device, each answered 200: the answers and the frames sent.
    static func pushNumbered(_ f: DeviceFixture, _ count: Int) throws -> (responses: [PushResponse], sent: [DeviceFrame]) {
        var sent: [DeviceFrame] = []
        var responses: [PushResponse] = []
        for i in 0..<count {
            let response = try f.push(#"{"aps":{"alert":"n\#(i)"}}"#)
            #expect(response.status == 200)
            responses.append(response)
            sent += response.deviceFrames
        }
        return (responses, sent)
    }

    /// A device that does not ack holds at most `deviceWindow` deliveries; beyond it, the
    /// newest notification per app waits in the store and older ones are coalesced.
    @Test func aFullWindowKeepsTheNewestPerAppAndReleasesItAsAcksArrive() throws {
        let f = try DeviceFixture(options: Self.options(window: 4))
        let (responses, sent) = try Self.pushNumbered(f, 7)
        #expect(f.notifications(in: sent).count == 4, "only the window goes out")
        #expect(f.record(responses[4])?.outcome == .coalesced)
        #expect(f.record(responses[5])?.outcome == .coalesced)
        #expect(f.record(responses[6])?.outcome == .stored)
        #expect(f.record(responses[6])?.explanation.contains("window is full") == true)
        #expect(f.base.state.withWorld { $0.delivery.pendingCount } == 5, "4 in flight + 1 stored")

        // Draining to half the window releases the stored one.
        #expect(try f.ack(Array(sent.prefix(1))).isEmpty, "3 still waiting: more than half")
        let released = try f.ack(Array(sent.dropFirst(1).prefix(1)))
        let out = f.notifications(in: released)
        #expect(out.map { $0["apnsId"]?.stringValue } == [responses[6].apnsID])
        #expect(out.first?["stored"] == true)
        try f.ack(Array(sent.dropFirst(2)) + released)
        #expect(f.base.state.withWorld { $0.delivery.pendingCount } == 0)
        for response in responses.prefix(4) + [responses[6]] { #expect(f.record(response)?.outcome == .delivered) }
    }

    /// A notification stored because the window is full has not reached the device: nothing of
    /// it is presented yet (no display, no presentation, its badge not on the icon), as for a
    /// device that was offline when it came; the rules run when it leaves the store. Before, it
    /// was recorded as a banner and its badge set even when a newer one replaced it unseen.
    @Test func aNotificationStoredBehindAFullWindowIsNotPresentedUntilItLeavesTheStore() throws {
        let f = try DeviceFixture(options: Self.options(window: 2))
        let (_, sent) = try Self.pushNumbered(f, 2)
        let badge = try f.push(#"{"aps":{"alert":"x","badge":42}}"#)
        func icon() -> Int? { f.base.state.withWorld { $0.registry.devices["phone"]?.apps["com.example.app"]?.badge } }
        let stored = f.record(badge)
        #expect(stored?.outcome == .stored)
        #expect(stored?.display == nil && stored?.presentation == nil, "\(String(describing: stored?.display))")
        #expect(icon() != 42, "the badge of a notification the device has not received")

        let newer = try f.push(#"{"aps":{"alert":"y"}}"#)
        let replaced = f.record(badge)
        #expect(replaced?.outcome == .coalesced)
        #expect(replaced?.display == nil && replaced?.presentation == nil)
        #expect(icon() != 42, "replaced in the store, never received")

        let released = try f.ack(sent)
        #expect(f.notifications(in: released).map { $0["apnsId"]?.stringValue } == [newer.apnsID])
        #expect(f.record(newer)?.display == "banner", "presented as it leaves the store")
    }

    /// What a device had not acknowledged when it went goes back to the store, but never over
    /// a newer notification of the app that already waits there: that one came later.
    @Test func anUnacknowledgedDeliveryDoesNotReplaceANewerStoredOne() throws {
        let f = try DeviceFixture(options: Self.options(window: 2))
        let (responses, sent) = try Self.pushNumbered(f, 4)
        #expect(f.notifications(in: sent).count == 2)
        #expect(f.record(responses[3])?.outcome == .stored)
        f.disconnect()
        #expect(f.record(responses[3])?.outcome == .stored, "the newest stays")
        for old in responses.prefix(2) {
            let record = f.record(old)
            #expect(record?.outcome == .coalesced)
            #expect(record?.explanation.contains("a newer notification of the app already waits") == true, "\(record?.explanation ?? "-")")
        }
        let back = f.notifications(in: try f.connect())
        #expect(back.map { $0["apnsId"]?.stringValue } == [responses[3].apnsID])
    }

    /// The ack timeout is a transport timer: moving the emulator's clock ahead
    /// (`POST /api/v1/clock`) does not make a delivery sent a moment ago overdue.
    @Test func movingTheClockDoesNotTimeOutAnAck() throws {
        let f = try DeviceFixture(options: Self.options(window: 100, ackTimeoutMs: 60_000))
        let first = try f.push()
        #expect(f.notifications(in: first.deviceFrames).count == 1)
        f.base.state.withWorld { $0.clockMoving(byMs: 3_600_000) }
        f.clock.advance(seconds: 3_600)
        #expect(f.tick().isEmpty, "no ack_timeout")
        #expect(f.base.state.withWorld { $0.registry.devices["phone"]?.connectionID } != nil)
        f.clock.advance(seconds: 60)
        #expect(f.tick().first?.message["code"] == "ack_timeout", "60 s later it is overdue")
    }

    /// With several instances, only the one holding the socket times out its deliveries: the
    /// others' clocks may be far ahead (`POST /api/v1/clock` moves one instance's).
    @Test func onlyTheInstanceHoldingTheSocketTimesOutItsDeliveries() throws {
        let f = try DeviceFixture(options: Self.options(window: 100, ackTimeoutMs: 60_000))
        let first = try f.push()
        #expect(f.notifications(in: first.deviceFrames).count == 1)
        let holder = DeviceOwnership.instance(ofConnection: f.connectionID)
        f.base.state.withWorld { $0.ownership = DeviceOwnership(members: [holder, holder + 1], me: holder + 1) }
        f.clock.advance(seconds: 3_600)
        #expect(f.tick().isEmpty, "another instance leaves the socket's deliveries alone")
        f.base.state.withWorld { $0.ownership = DeviceOwnership(members: [holder, holder + 1], me: holder) }
        #expect(f.tick().first?.message["code"] == "ack_timeout", "the holder times it out")
    }

    /// A device that never acks is disconnected after the timeout; what it held is stored
    /// and delivered when it comes back.
    @Test func aDeviceThatNeverAcksIsDisconnected() throws {
        let f = try DeviceFixture(options: Self.options(window: 100, ackTimeoutMs: 60_000))
        let first = try f.push()
        #expect(f.notifications(in: first.deviceFrames).count == 1)
        f.clock.advance(seconds: 59)
        #expect(f.tick().isEmpty)
        f.clock.advance(seconds: 1)
        let frames = f.tick()
        #expect(frames.count == 1)
        #expect(frames.first?.message["code"] == "ack_timeout")
        #expect(frames.first?.message["fatal"] == true)
        #expect(frames.first?.closeAfter == true)
        #expect(f.record(first)?.outcome == .stored)
        #expect(f.base.state.withWorld { $0.registry.devices["phone"]?.connectionID } == nil)
        // Pushes meanwhile are stored, and everything arrives on reconnect.
        let second = try f.push()
        #expect(second.deviceFrames.isEmpty)
        #expect(f.record(first)?.outcome == .coalesced)
        let back = try f.connect()
        #expect(f.notifications(in: back).map { $0["apnsId"]?.stringValue } == [second.apnsID])
    }
}
