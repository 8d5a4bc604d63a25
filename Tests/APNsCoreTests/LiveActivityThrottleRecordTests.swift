// LiveActivityThrottleRecordTests: a throttled Live Activity update's journal record says
// what became of it once it stops waiting: shown when the budget allows (delivered), replaced
// by a newer update (coalesced), or never shown because its activity ended first (ignored);
// the link survives a restart. (A broadcast's record, per activity: BroadcastDeliveryTests.)
import APNsCore
import JSON
import Testing

@Suite("Throttled Live Activity updates in the journal")
struct LiveActivityThrottleRecordTests {
    static let bundle = "com.example.app"
    static let topic = bundle + ".push-type.liveactivity"

    /// The push-to-start token of the type Delivery, declared on the virtual device "ci".
    func pushToStartToken(_ f: PersistenceFixture) throws -> String {
        let now = f.now
        try f.state.withWorld { world throws(DeviceRequestError) in
            _ = try world.declareLiveActivities(deviceID: "ci", bundleID: Self.bundle, types: ["Delivery"], frequentUpdates: false, nowMs: now)
        }
        return try #require(
            f.state.readWorld { $0.liveActivities.book(deviceID: "ci")?.pushToStartToken(bundleID: Self.bundle, type: "Delivery") })
    }

    /// A started activity on the virtual device "ci" and its update token.
    func startedActivity(_ f: PersistenceFixture) throws -> (activityID: String, token: String) {
        let start = try push(
            f, try pushToStartToken(f),
            #"{"event":"start","timestamp":1,"attributes-type":"Delivery","attributes":{},"content-state":{"n":0},"alert":"x","input-push-token":1}"#)
        #expect(f.record(start.recordSequence)?.outcome == .delivered)
        #expect(f.record(start.recordSequence)?.display == "banner", "a start carries an alert: the screen lights up")
        let activity = try #require(f.state.readWorld { $0.liveActivities.book(deviceID: "ci")?.activities().first })
        return (activity.activityID, try #require(activity.pushToken))
    }

    /// An activity's alert keeps to the device's switches as a notification's does: on silent
    /// its sound is silenced, under a Focus that does not allow the app the screen stays dark
    /// (it played and lit the screen on a muted phone in Do Not Disturb).
    @Test func anActivitysAlertKeepsToTheRingSwitchAndFocus() throws {
        let f = try PersistenceFixture()
        let token = try pushToStartToken(f)
        func start(_ n: Int) throws -> NotificationRecord? {
            let answer = try push(
                f, token,
                #"{"event":"start","timestamp":\#(n),"attributes-type":"Delivery","attributes":{},"content-state":{"n":0},"alert":{"title":"On its way","body":"b","sound":"default"},"input-push-token":1}"#
            )
            return f.record(answer.recordSequence)
        }
        try f.state.withWorld { world throws(DeviceRequestError) in
            _ = try world.changeAttention(deviceID: "ci", JSONObject([("muted", .bool(true))]))
        }
        let muted = try #require(try start(1))
        #expect(muted.outcome == .delivered && muted.presentation?.sound == .silenced, "\(muted.explanation)")
        #expect(muted.presentation?.screenLit == true)
        #expect(muted.explanation.contains("the ring switch is on silent"))
        try f.state.withWorld { world throws(DeviceRequestError) in
            _ = try world.changeAttention(
                deviceID: "ci", JSONObject([("muted", .bool(false)), ("focus", .object(JSONObject([("name", .string("Do Not Disturb"))])))]))
        }
        let focused = try #require(try start(2))
        #expect(focused.presentation?.screenLit == false && focused.presentation?.sound == .silenced, "\(focused.explanation)")
        #expect(focused.explanation.contains("silenced by Focus"))
        // Neither: the alert's own sound plays (it is inside the alert, as Apple's example has it).
        try f.state.withWorld { world throws(DeviceRequestError) in
            _ = try world.changeAttention(deviceID: "ci", JSONObject([("focus", .null)]))
        }
        let heard = try #require(try start(3))
        #expect(heard.presentation?.sound == .played && heard.presentation?.screenLit == true, "\(heard.explanation)")
    }

    func push(_ f: PersistenceFixture, _ token: String, _ aps: String, priority: String = "10") throws -> PushResponse {
        let answer = try f.push(
            token, topic: Self.topic, body: #"{"aps":\#(aps)}"#, headers: [("apns-push-type", "liveactivity"), ("apns-priority", priority)])
        #expect(answer.status == 200)
        return answer
    }

    func update(_ f: PersistenceFixture, _ token: String, _ n: Int, priority: String = "10") throws -> UInt64 {
        try push(f, token, #"{"event":"update","timestamp":\#(n + 1),"content-state":{"n":\#(n)}}"#, priority: priority).recordSequence
    }

    func contentState(_ f: PersistenceFixture, _ activityID: String) -> JSONValue? {
        f.state.readWorld { $0.liveActivities.book(deviceID: "ci")?.activity(activityID)?.contentState }
    }

    func tick(_ f: PersistenceFixture) {
        let now = f.now
        _ = f.state.withWorld { $0.tick(nowMs: now) }
    }

    /// An uninstall (or an erase) takes the app's activities and tokens with it, and says so
    /// to the device: an `activity` frame for each (dismissed by the system, every token ended).
    @Test(arguments: [false, true])
    func anUninstallTellsTheDeviceItsActivitiesWent(erase: Bool) throws {
        let f = try PersistenceFixture()
        let (activityID, updateToken) = try startedActivity(f)
        let pushToStart = try pushToStartToken(f)
        let now = f.now
        let messages = try f.state.withWorld { world throws(DeviceRequestError) in
            erase
                ? try world.eraseDevice("ci", nowMs: now)
                : try world.uninstallApp(deviceID: "ci", bundleID: Self.bundle, nowMs: now).activityMessages
        }
        let frames = messages.compactMap(\.objectValue)
        #expect(frames.allSatisfy { $0["type"] == "activity" })
        let dismissed = try #require(frames.first { $0["change"] == "dismissed" })
        #expect(dismissed["activityId"]?.stringValue == activityID && dismissed["dismissedBy"] == "system")
        let ended = Set(frames.filter { $0["change"] == "tokenEnded" }.compactMap { $0["token"]?.stringValue })
        #expect(ended == [updateToken, pushToStart], "\(frames)")
    }

    /// An applied push's alert is read with the app's strings, the nested form Apple's Live
    /// Activity examples use included; a key the app lacks is shown as itself and said so.
    @Test func anAppliedUpdateIsLocalizedWithTheAppsStrings() throws {
        let f = try PersistenceFixture()
        let (_, token) = try startedActivity(f)
        _ = try f.state.withWorld { world throws(DeviceRequestError) in
            try world.changeNotifications(
                deviceID: "ci", bundleID: Self.bundle,
                JSONObject([("localizedStrings", ["NEAR": "%@ is near", "BODY": "Order %1$@ in %2$@ min"])]))
        }
        let aps = #"""
            {"event":"update","timestamp":50,"content-state":{"n":50},
             "alert":{"title":{"loc-key":"NEAR","loc-args":["Panda"]},"body":{"loc-key":"BODY","loc-args":["42",7]},"subtitle":{"loc-key":"GONE"}}}
            """#
        let record = try #require(f.record(try push(f, token, aps, priority: "5").recordSequence))
        #expect(record.display == "banner")
        let shown = try #require(record.presentation ?? Presentation.plain(record))
        #expect(shown.title == "Panda is near" && shown.body == "Order 42 in 7 min" && shown.subtitle == "GONE")
        #expect(record.explanation.contains(#"the app has no string for subtitle.loc-key "GONE""#), "\(record.explanation)")
    }

    /// What an applied update shows: a banner for something to see or hear, nothing for an
    /// alert without text; `"alert": null` is no alert, and the update still applies.
    @Test func anAppliedUpdateShowsABannerOnlyForSomethingToSeeOrHear() throws {
        let f = try PersistenceFixture()
        let (activityID, token) = try startedActivity(f)
        let cases: [(String, String)] = [
            (#""alert":null"#, "none"), (#""alert":{}"#, "none"), (#""alert":{"title":null,"body":""}"#, "none"),
            (#""sound":"default""#, "banner"), (#""alert":{"body":"on its way"}"#, "banner"), (#""alert":"hi""#, "banner"),
            (#""alert":{"title":{"loc-key":"%@ is near","loc-args":["Panda"]},"body":{"loc-key":"K"}}"#, "banner"),
        ]
        for (n, (extra, display)) in cases.enumerated() {
            let aps = #"{"event":"update","timestamp":\#(n + 10),"content-state":{"n":\#(n + 10)},\#(extra)}"#
            let record = f.record(try push(f, token, aps, priority: "5").recordSequence)
            #expect(record?.outcome == .delivered, "\(extra): \(record?.explanation ?? "-")")
            #expect(record?.display == display, "\(extra)")
            #expect(contentState(f, activityID) == ["n": .int(Int64(n + 10))])
        }
    }

    /// A device that is offline when the budget frees shows nothing: the throttled update waits
    /// for it, and is shown (and its record delivered) once the device is back.
    @Test func aThrottledUpdateWaitsForItsDeviceToBeOnline() throws {
        let f = try PersistenceFixture()
        let (activityID, token) = try startedActivity(f)
        for n in 1...15 { _ = try update(f, token, n) }
        let waiting = try update(f, token, 16)
        #expect(f.record(waiting)?.outcome == .throttled)
        let now = f.now
        _ = try f.state.withWorld { world throws(DeviceRequestError) in
            try world.setPresence(deviceID: "ci", lowPowerMode: nil, online: false, nowMs: now)
        }
        f.clock.advance(seconds: 3_601)
        tick(f)
        #expect(f.record(waiting)?.outcome == .throttled, "\(f.record(waiting)?.explanation ?? "-")")
        #expect(contentState(f, activityID) == ["n": 15], "not shown while the device is offline")
        let later = f.now
        _ = try f.state.withWorld { world throws(DeviceRequestError) in
            try world.setPresence(deviceID: "ci", lowPowerMode: nil, online: true, nowMs: later)
        }
        // At once, not at the next tick: an update sent right after could otherwise go first.
        #expect(contentState(f, activityID) == ["n": 16])
        #expect(f.record(waiting)?.outcome == .delivered, "\(f.record(waiting)?.explanation ?? "-")")
    }

    @Test func aThrottledUpdateIsDeliveredWhenShownAndCoalescedWhenReplaced() throws {
        let f = try PersistenceFixture()
        let (activityID, token) = try startedActivity(f)
        for n in 1...15 { #expect(f.record(try update(f, token, n))?.outcome == .delivered) }
        #expect(f.record(try update(f, token, 15, priority: "5"))?.display == "none", "an update without an alert shows no banner")
        let replaced = try update(f, token, 16)
        #expect(f.record(replaced)?.outcome == .throttled)
        let shownLater = try update(f, token, 17)
        #expect(f.record(shownLater)?.outcome == .throttled)
        #expect(f.record(replaced)?.outcome == .coalesced, "the newer throttled update took its place")
        #expect(f.record(replaced)?.explanation.contains("replaced by a newer throttled update") == true)

        // The link from the waiting update to its record survives a restart.
        try f.restart()
        f.clock.advance(seconds: 3_601)
        tick(f)
        #expect(contentState(f, activityID) == ["n": 17])
        let record = try #require(f.record(shownLater))
        #expect(record.outcome == .delivered, "\(record.explanation)")
        #expect(record.explanation.contains("when its budget allowed"), "\(record.explanation)")
        #expect(record.deliveredAtMs != nil)
        #expect(f.record(replaced)?.outcome == .coalesced)

        // A newer priority-5 update shown while a throttled one waits makes the waiting one moot.
        for n in 18...32 { _ = try update(f, token, n) }
        let moot = try update(f, token, 33)
        #expect(f.record(moot)?.outcome == .throttled)
        #expect(f.record(try update(f, token, 34, priority: "5"))?.outcome == .delivered)
        #expect(f.record(moot)?.outcome == .coalesced, "\(f.record(moot)?.explanation ?? "-")")
    }

    @Test func aThrottledUpdateWhoseActivityEndsFirstIsIgnoredAndAFinding() throws {
        let f = try PersistenceFixture()
        let (_, token) = try startedActivity(f)
        for n in 1...15 { _ = try update(f, token, n) }
        let throttled = try update(f, token, 16)
        #expect(f.record(throttled)?.outcome == .throttled)
        _ = try push(f, token, #"{"event":"end","timestamp":100,"content-state":{"n":99}}"#)
        let record = try #require(f.record(throttled))
        #expect(record.outcome == .ignored)
        #expect(record.explanation.contains("ended before the budget allowed this update"), "\(record.explanation)")
        #expect(f.state.readWorld { $0.ignoredPushes.map(\.sequence) }.contains(throttled), "an ignored push is a finding of the checks")
        // Time passing changes nothing more.
        f.clock.advance(seconds: 3_601)
        tick(f)
        #expect(f.record(throttled)?.outcome == .ignored)
    }

    /// A start whose timestamp reads as milliseconds is applied, and its record says what that
    /// does to the updates after it.
    @Test func aMillisecondTimestampIsNamedInTheStartsRecord() throws {
        let f = try PersistenceFixture()
        let start = try push(
            f, try pushToStartToken(f),
            #"{"event":"start","timestamp":1767225600000,"attributes-type":"Delivery","attributes":{},"content-state":{},"alert":"x","input-push-token":1}"#
        )
        let record = try #require(f.record(start.recordSequence))
        #expect(record.outcome == .delivered)
        #expect(record.explanation.contains("is read as seconds (after year 5000)"), "\(record.explanation)")
        let token = try #require(f.state.readWorld { $0.liveActivities.book(deviceID: "ci")?.activities().first?.pushToken })
        let update = try push(f, token, #"{"event":"update","timestamp":1767225700,"content-state":{}}"#)
        #expect(f.record(update.recordSequence)?.outcome == .ignored)
        #expect(f.record(update.recordSequence)?.explanation.contains("read as seconds") == false, "said once, on the start")
    }
}
