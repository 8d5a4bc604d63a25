import APNsCore
import Testing

/// Live Activities across restarts (the store interface, as StatePersistenceTests), across
/// instances (replicated rows), and their stored byte form.
@Suite("Live Activities across restarts and instances")
struct LiveActivityPersistenceTests {
    static let bundle = "com.example.app"
    static let topic = bundle + ".push-type.liveactivity"

    func liveActivityPush(_ f: PersistenceFixture, _ token: String, _ aps: String, priority: String = "10") throws -> PushResponse {
        try f.push(token, topic: Self.topic, body: #"{"aps":\#(aps)}"#, headers: [("apns-push-type", "liveactivity"), ("apns-priority", priority)])
    }

    func book(_ f: PersistenceFixture) -> LiveActivityBook? { f.state.readWorld { $0.liveActivities.book(deviceID: "ci") } }

    /// The rows as the world would write them, as bytes (equal bytes: equal state).
    func rows(_ f: PersistenceFixture) -> [[UInt8]] { f.state.readWorld { $0.persistedState.liveActivities.map(StateCodec.encode) } }

    @Test func activitiesTokensAndSubscriptionsComeBackAfterARestart() throws {
        let f = try PersistenceFixture()
        let now = f.now
        try f.state.withWorld { world throws(DeviceRequestError) in
            _ = try world.declareLiveActivities(deviceID: "ci", bundleID: Self.bundle, types: ["Delivery"], frequentUpdates: false, nowMs: now)
        }
        let startToken = try #require(book(f)?.pushToStartToken(bundleID: Self.bundle, type: "Delivery"))
        let started = try liveActivityPush(
            f, startToken,
            #"{"event":"start","timestamp":100,"attributes-type":"Delivery","attributes":{"order":"42"},"content-state":{"eta":15},"alert":"x","input-push-token":1}"#
        )
        #expect(started.status == 200)
        let activity = try #require(book(f)?.activities().first)
        let firstToken = try #require(activity.pushToken)
        #expect(try liveActivityPush(f, firstToken, #"{"event":"update","timestamp":200,"content-state":{"eta":10}}"#).status == 200)
        let rotated = try f.state.withWorld { world throws(DeviceRequestError) in
            try world.rotateLiveActivityToken(deviceID: "ci", activityID: activity.activityID, nowMs: now).token
        }
        let channel = try #require(
            f.world { world in
                world.channels.create(bundleID: Self.bundle, environment: .sandbox, policy: .mostRecentMessageStored, nowMs: now) { "Y2hhbm5lbA==" }
            })
        let subscribed = try f.state.withWorld { world throws(DeviceRequestError) in
            try world.startLiveActivity(
                deviceID: "ci", bundleID: Self.bundle, attributesType: "Delivery", attributes: [:], contentState: ["eta": 1],
                updates: .channel(channel.id), nowMs: now
            ).activity.activityID
        }
        let before = rows(f)
        #expect(try f.store.load().liveActivities.map(StateCodec.encode) == before, "the store holds what the world has")

        try f.restart()
        #expect(rows(f) == before, "the same activities, tokens and ended tokens")
        let restored = try #require(book(f)?.activity(activity.activityID))
        #expect(restored.pushToken == rotated && restored.contentState == ["eta": 10] && restored.updates == 1)
        #expect(book(f)?.pushToStartToken(bundleID: Self.bundle, type: "Delivery") == startToken)
        #expect(f.state.readWorld { $0.liveActivities.subscriberCount(channelID: channel.id) } == 1, "the channel's subscribers are rebuilt")
        #expect(f.state.readWorld { $0.liveActivities.channels(ofDevice: "ci") } == [channel.id])
        #expect(book(f)?.activity(subscribed)?.channelID == channel.id)

        // The rotated token updates it; the replaced one is still answered 200 and ignored, with why.
        let update = try liveActivityPush(f, rotated, #"{"event":"update","timestamp":300,"content-state":{"eta":5}}"#)
        #expect(update.status == 200)
        #expect(f.record(update.recordSequence)?.outcome == .delivered)
        #expect(book(f)?.activity(activity.activityID)?.contentState == ["eta": 5])
        let old = try liveActivityPush(f, firstToken, #"{"event":"update","timestamp":400,"content-state":{"eta":1}}"#)
        #expect(old.status == 200)
        #expect(f.record(old.recordSequence)?.outcome == .ignored)
        #expect(f.record(old.recordSequence)?.explanation.contains("rotated") == true, "\(f.record(old.recordSequence)?.explanation ?? "-")")

        // A reset takes them away, in the store too.
        f.state.reset()
        #expect(try f.store.load().liveActivities.isEmpty)
        try f.restart()
        #expect(book(f) == nil)
    }

    @Test func aPushWaitingForAnOfflineDeviceAndWidgetBudgetsComeBack() throws {
        let f = try PersistenceFixture()
        let now = f.now
        try f.state.withWorld { world throws(DeviceRequestError) in
            _ = try world.declareLiveActivities(deviceID: "ci", bundleID: Self.bundle, types: ["Delivery"], frequentUpdates: false, nowMs: now)
            _ = try world.startLiveActivity(
                deviceID: "ci", bundleID: Self.bundle, attributesType: "Delivery", attributes: [:], contentState: ["eta": 30], updates: .token,
                nowMs: now)
        }
        let widgetToken = try f.state.withWorld { world throws(RegistryError) in
            try world.registry.register(deviceID: "ci", bundleID: Self.bundle, environment: .sandbox, kind: .widgets, nowMs: now).token
        }
        let widget = try f.push(
            widgetToken, topic: Self.bundle + ".push-type.widgets", body: #"{"aps":{"content-changed":true}}"#,
            headers: [("apns-push-type", "widgets"), ("apns-priority", "5")])
        #expect(widget.status == 200)
        #expect(f.state.readWorld { $0.widgetPushes.state(deviceID: "ci", bundleID: Self.bundle, kind: .widgets)?.reloads } == 1)
        let token = try #require(book(f)?.activities().first?.pushToken)
        try f.state.withWorld { world throws(DeviceRequestError) in
            _ = try world.setForcedOffline(deviceID: "ci", true, nowMs: now)
        }
        let waiting = try liveActivityPush(f, token, #"{"event":"update","timestamp":500,"content-state":{"eta":3}}"#, priority: "5")
        #expect(f.record(waiting.recordSequence)?.outcome == .stored)

        try f.restart()
        #expect(f.state.readWorld { $0.liveActivities.waitingPushes[token]?.sequence } == waiting.recordSequence)
        #expect(f.state.readWorld { $0.widgetPushes.state(deviceID: "ci", bundleID: Self.bundle, kind: .widgets)?.reloads } == 1)
        try f.state.withWorld { world throws(DeviceRequestError) in
            _ = try world.setForcedOffline(deviceID: "ci", false, nowMs: now)
        }
        #expect(book(f)?.activities().first?.contentState == ["eta": 3], "the waiting push is taken once the device is back")
        #expect(f.record(waiting.recordSequence)?.outcome == .delivered)
        #expect(try f.store.load().liveActivities.first?.waiting.isEmpty == true, "and leaves the store")
    }

    @Test func anotherInstanceTakesTheRowsAndServesTheTokens() throws {
        let f = try PersistenceFixture()
        let now = f.now
        var replica = f.configured
        replica.startTrackingChanges()
        let row = try f.state.withWorld { world throws(DeviceRequestError) -> LiveActivityRow? in
            _ = try world.declareLiveActivities(deviceID: "ci", bundleID: Self.bundle, types: ["Delivery"], frequentUpdates: true, nowMs: now)
            _ = try world.startLiveActivity(
                deviceID: "ci", bundleID: Self.bundle, attributesType: "Delivery", attributes: ["n": 1.5], contentState: [:], updates: .token,
                nowMs: now)
            return world.persistedState.liveActivities.first
        }
        // What the coordinator would append to the shared log, through its byte form, as
        // another process reads it.
        let changes: [StateChange] = [.liveActivitiesSaved(try #require(row))]
        let decoded = try StateCodec.decodeChanges(StateCodec.encode(changes: changes))
        _ = try replica.applyReplicated(decoded, nowMs: now, configured: f.configured) { _ throws(StateStoreError) in
            throw StateStoreError("no keys expected")
        }
        #expect(replica.liveActivities.tokens == f.state.readWorld { $0.liveActivities.tokens })
        #expect(replica.persistedState.liveActivities.map(StateCodec.encode) == rows(f))
        #expect(replica.takeStateChanges(recordSequences: []).isEmpty, "applied rows are not this instance's own changes")

        _ = try replica.applyReplicated([.liveActivitiesRemoved(deviceID: "ci")], nowMs: now, configured: f.configured) { _ throws(StateStoreError) in
            throw StateStoreError("no keys expected")
        }
        #expect(replica.liveActivities.tokens.isEmpty && replica.liveActivities.book(deviceID: "ci") == nil)
    }

    /// A row with every field set, from a seeded book: its bytes are the stored format (a
    /// change makes existing state unreadable; a new layout needs a new format number).
    static func fullRow(deferredFrom origin: LiveActivityUpdateOrigin? = nil) throws -> LiveActivityRow {
        var book = LiveActivityBook(policy: LiveActivityPolicy(updatesPerWindow: 1, tokenByteCount: 2), seed: 3)
        try book.declare(bundleID: "a.b", types: ["T"], frequentUpdates: false)
        let start = book.receiveStart(
            pushToStartToken: book.pushToStartToken(bundleID: "a.b", type: "T")!,
            payload: [
                "aps": [
                    "event": "start", "timestamp": 1, "attributes-type": "T", "attributes": ["k": [true, "x", 7]], "content-state": ["e": 2.5],
                    "alert": "hi", "input-push-token": 1,
                ]
            ], priority: 10, nowMs: 1000)
        let id = try #require(start.activityID)
        let token = try #require(book.activity(id)?.pushToken)
        _ = book.receiveUpdate(
            updateToken: token,
            payload: ["aps": ["event": "update", "timestamp": 2, "content-state": ["e": 3], "stale-date": 9, "relevance-score": 0.5]], priority: 10,
            nowMs: 2000)
        // Over the budget of 1: deferred.
        _ = book.receiveUpdate(
            updateToken: token, payload: ["aps": ["event": "update", "timestamp": 3, "content-state": ["e": 4]]], priority: 10, nowMs: 3000,
            origin: origin)
        _ = try book.rotatePushToStartToken(bundleID: "a.b", type: "T", nowMs: 4000)
        _ = book.receiveWidgetPush(kind: .controls, bundleID: "a.b", payload: ["aps": ["content-changed": true]], priority: 5, nowMs: 5000)
        let owner = LiveActivityWorld.TokenOwner(deviceID: "d", bundleID: "a.b", environment: .production, kind: .update)
        let push = WaitingLiveActivityPush(token: token, deviceID: "d", payload: [7], priority: 5, sequence: 8, storeUntilMs: nil)
        return LiveActivityRow(deviceID: "d", book: book, widgets: nil, tokens: [(token, owner)], waiting: [push])
    }

    /// The structs' field counts: a new field fails here until the row codec carries it.
    @Test func everyFieldIsCovered() throws {
        let row = try Self.fullRow()
        let book = try #require(row.book)
        let activity = try #require(book.activities().first)
        #expect(Mirror(reflecting: row).children.count == 5, "LiveActivityRow changed")
        // 6 encoded or derived, plus the policy (configured), randomness (new after a load) and
        // the settled updates (taken by the world at once).
        #expect(Mirror(reflecting: book).children.count == 10, "LiveActivityBook changed")
        #expect(Mirror(reflecting: try #require(book.apps["a.b"])).children.count == 5, "LiveActivityApp changed")
        #expect(Mirror(reflecting: activity).children.count == 22, "LiveActivity changed")
        #expect(Mirror(reflecting: try #require(activity.deferred)).children.count == 3, "LiveActivityDeferredUpdate changed")
        #expect(Mirror(reflecting: try #require(activity.deferred?.payload)).children.count == 11, "LiveActivityPayload changed")
        #expect(Mirror(reflecting: WidgetPushState()).children.count == 3, "WidgetPushState changed")
        #expect(Mirror(reflecting: try #require(row.waiting.first)).children.count == 6, "WaitingLiveActivityPush changed")
    }

    /// A throttled update keeps the record it answers for (a push's sequence, a broadcast's
    /// request id); one kept without (the pinned row below) still reads.
    @Test func aThrottledUpdateKeepsItsRecordAcrossARestart() throws {
        for origin: LiveActivityUpdateOrigin in [.push(sequence: 300), .broadcast(key: "6F1B2C3D-0000-4000-8000-000000000001")] {
            let bytes = StateCodec.encode(try Self.fullRow(deferredFrom: origin))
            let decoded = try StateCodec.decodeLiveActivities(bytes)
            #expect(decoded.book?.activities().first?.deferred?.origin == origin)
            #expect(StateCodec.encode(decoded) == bytes)
        }
    }

    @Test func theStoredFormatStaysTheSame() throws {
        func hex(_ bytes: [UInt8]) -> String { bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined() }
        let bytes = StateCodec.encode(try Self.fullRow())
        let decoded = try StateCodec.decodeLiveActivities(bytes)
        #expect(StateCodec.encode(decoded) == bytes, "decoded and encoded again, the same bytes")
        let activity = try #require(decoded.book?.activities().first)
        #expect(activity.deferred?.payload.contentState == ["e": 4] && activity.contentState == ["e": 3])
        #expect(activity.attributes == ["k": [true, "x", 7]] && activity.relevanceScore == 0.5 && activity.staleDateMs == 9000)
        #expect(decoded.book?.widgetPushState(kind: .controls, bundleID: "a.b")?.reloads == 1)
        #expect(decoded.waiting.first?.deviceID == "d" && decoded.tokens.first?.owner.environment == .production)
        #expect(hex(bytes) == Self.pinnedRow, "\(hex(bytes))")
        #expect(throws: StateStoreError.self) { try StateCodec.decodeLiveActivities(Array(bytes.prefix(bytes.count / 2))) }
        #expect(throws: StateStoreError.self) { try StateCodec.decodeLiveActivities([9] + bytes.dropFirst()) }
        #expect(throws: StateStoreError.self) { try StateCodec.decodeLiveActivities(bytes + [0]) }
    }

    static let pinnedRow =
        "010164010103612e6201015400010101540430613938012441334644314445412d354531382d343445452d423745302d3041"
        + "4642333232394644353103612e6201540701016b060302050178030e07010165030606616374697665010465613362000180"
        + "808080808080f03f01d08c0100d00f000000000180808080808080804002047075736801a01f010675706461746580808080"
        + "8080808440010701016503080000000000000000f02e000104633038636d69676e6f7265643a20707573682d746f2d737461"
        + "727420746f6b656e206330386320656e6465643a20697420776173207265706c616365642062792061206e65776572206f6e"
        + "6520617420313937302d30312d30315430303a30303a30342e3030305a2028726f746174656429010c636f6e74726f6c7320"
        + "612e6201904e00020001046561336203612e620a70726f64756374696f6e0675706461746501046561336201070a0800"
}
