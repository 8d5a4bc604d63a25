import APNsCore
import JSON
import Testing

/// `activity` frames are not acknowledged: one sent to a socket that was already gone (an
/// instance killed before the others knew) is lost. A hello that says which activities the
/// device heard of gets those that changed since, as they are now (`change: "current"`).
@Suite("Live Activities a device missed")
struct ActivityCatchUpTests {
    static let bundle = "com.example.app"

    /// The fixture's device "ci" with one activity of its app, updated by token.
    static func deviceWithAnActivity() throws -> (PersistenceFixture, LiveActivity, String) {
        let f = try PersistenceFixture()
        let now = f.now
        try f.state.withWorld { world throws(DeviceRequestError) in
            _ = try world.declareLiveActivities(deviceID: "ci", bundleID: bundle, types: ["Delivery"], frequentUpdates: false, nowMs: now)
        }
        let activity = try f.state.withWorld { world throws(DeviceRequestError) in
            try world.startLiveActivity(
                deviceID: "ci", bundleID: bundle, attributesType: "Delivery", attributes: [:], contentState: ["eta": 15],
                updates: .token, nowMs: now
            ).activity
        }
        return (f, activity, try #require(activity.pushToken))
    }

    @Test func aHelloGetsTheActivitiesThatChangedSinceTheDeviceLastHeard() throws {
        let (f, activity, token) = try Self.deviceWithAnActivity()
        let now = f.now
        let heardAtStart = ActivitySeen(updates: 0, state: "active", pushToken: token)
        let update = try f.push(
            token, topic: Self.bundle + ".push-type.liveactivity", body: #"{"aps":{"event":"update","timestamp":200,"content-state":{"eta":10}}}"#,
            headers: [("apns-push-type", "liveactivity"), ("apns-priority", "5")])
        #expect(update.status == 200)

        func hello(_ seen: [String: ActivitySeen]?, connection: UInt64) throws -> [JSONValue] {
            let hello = DeviceHello(deviceID: "ci", lowPowerMode: false, apps: [], activitiesSeen: seen)
            return try f.state.withWorld { world throws(DeviceRequestError) in
                try world.connectDevice(hello, connectionID: connection, nowMs: now)
            }.map(\.message).filter { $0["type"] == "activity" && $0["change"] == "current" }
        }
        // It heard of the start only: the update comes, as the activity is now.
        let missed = try hello([activity.activityID: heardAtStart], connection: 11)
        #expect(missed.count == 1)
        #expect(missed.first?["activityId"]?.stringValue == activity.activityID)
        #expect(missed.first?["activity"]?["contentState"] == ["eta": 10])
        #expect(missed.first?["activity"]?["updates"] == 1)
        // Up to date: nothing.
        #expect(try hello([activity.activityID: ActivitySeen(updates: 1, state: "active", pushToken: token)], connection: 12).isEmpty)
        // Never heard of it (started while its frames were lost): it comes.
        #expect(try hello([:], connection: 13).count == 1)
        // A hello that does not say: nothing (a client of its own that keeps no table).
        #expect(try hello(nil, connection: 14).isEmpty)

        // Ended while cut off: the state says so.
        try f.state.withWorld { world throws(DeviceRequestError) in
            _ = try world.endLiveActivity(deviceID: "ci", activityID: activity.activityID, contentState: ["eta": 0], dismissalDateMs: nil, nowMs: now)
        }
        let ended = try hello([activity.activityID: ActivitySeen(updates: 1, state: "active", pushToken: token)], connection: 15)
        #expect(ended.first?["activity"]?["state"] == "ended")
        // Dismissed and never heard of: left out; dismissed after it was heard of: it comes.
        try f.state.withWorld { world throws(DeviceRequestError) in
            _ = try world.dismissLiveActivity(deviceID: "ci", activityID: activity.activityID, nowMs: now)
        }
        #expect(try hello([:], connection: 16).isEmpty)
        #expect(try hello([activity.activityID: ActivitySeen(updates: 1, state: "ended", pushToken: nil)], connection: 17).count == 1)
    }

    /// A change that waited for the device while it was offline comes as itself when it is
    /// back, not a second time as `current`.
    @Test func aChangeThatWaitedForTheDeviceComesOnce() throws {
        let (f, activity, token) = try Self.deviceWithAnActivity()
        let now = f.now
        func hello(_ seen: [String: ActivitySeen]?, connection: UInt64) throws -> [JSONValue] {
            let hello = DeviceHello(deviceID: "ci", lowPowerMode: false, apps: [], activitiesSeen: seen)
            return try f.state.withWorld { world throws(DeviceRequestError) in
                try world.connectDevice(hello, connectionID: connection, nowMs: now)
            }.map(\.message).filter { $0["type"] == "activity" }
        }
        _ = try hello(nil, connection: 21)
        _ = f.state.withWorld { $0.disconnectDevice("ci", connectionID: 21, nowMs: now) }
        let update = try f.push(
            token, topic: Self.bundle + ".push-type.liveactivity", body: #"{"aps":{"event":"update","timestamp":200,"content-state":{"eta":10}}}"#,
            headers: [("apns-push-type", "liveactivity"), ("apns-priority", "5"), ("apns-expiration", String(now / 1000 + 3600))])
        #expect(update.status == 200)
        let back = try hello([activity.activityID: ActivitySeen(updates: 0, state: "active", pushToken: token)], connection: 22)
        #expect(back.map { $0["change"]?.stringValue ?? "" } == ["updated"], "\(back)")
        #expect(back.first?["activity"]?["contentState"] == ["eta": 10])
    }
}
