// LiveActivityTests: Live Activities on a virtual device, started and updated by provider
// pushes to their tokens over HTTP/2, against the real binary. Imports the harness's modules.
import APNsCore
import Foundation
import ProviderClient
import Testing
import TestSupport

@Suite("Live Activities: push-to-start and update tokens on a virtual device")
struct LiveActivityTests {
    private static let topic = EmulatorProcess.bundleID + ".push-type.liveactivity"

    private func liveActivityPush(_ emulator: EmulatorProcess, token: String, _ aps: String, priority: String = "10") throws -> APNsPush {
        var push = try emulator.push(token, payload: #"{"aps":\#(aps)}"#, topic: Self.topic)
        push.pushType = "liveactivity"
        push.priority = priority
        return push
    }

    private func record(_ emulator: EmulatorProcess, _ apnsID: String?) throws -> JSONObject? {
        try emulator.admin("GET", "/api/v1/notifications/\(apnsID ?? "")").json.objectValue
    }

    @Test func anActivityStartedByPushIsUpdatedThroughItsTokenAndDismissed() throws {
        let emulator = try EmulatorProcess()
        let (deviceID, _) = try emulator.createDevice()
        let declared = try emulator.admin(
            "PUT", "/api/v1/devices/\(deviceID)/apps/\(EmulatorProcess.bundleID)/live-activities",
            body: ["types": ["DeliveryAttributes"], "frequentUpdates": false])
        #expect(declared.status == 200)
        let startToken = try #require(declared.json["pushToStartTokens"]?.objectValue?["DeliveryAttributes"]?.stringValue)
        let connection = try emulator.connect()

        let start = APNsResult(
            try connection.send(
                try liveActivityPush(
                    emulator, token: startToken,
                    #"{"event":"start","timestamp":1700000000,"attributes-type":"DeliveryAttributes","attributes":{"order":"42"},"content-state":{"eta":15},"alert":{"title":"On its way"},"input-push-token":1}"#
                ).request))
        #expect(start.status == 200)
        #expect(try record(emulator, start.apnsID)?["outcome"]?.stringValue == "delivered")

        var listed = try emulator.admin("GET", "/api/v1/devices/\(deviceID)/activities").json
        var activity = try #require(listed["activities"]?.arrayValue?.first?.objectValue)
        #expect(activity["state"]?.stringValue == "active")
        #expect(activity["startedBy"]?.stringValue == "push")
        #expect(activity["contentState"]?.objectValue?["eta"]?.intValue == 15)
        let updateToken = try #require(activity["pushToken"]?.stringValue)
        let activityID = try #require(activity["activityId"]?.stringValue)

        let update = APNsResult(
            try connection.send(
                try liveActivityPush(emulator, token: updateToken, #"{"event":"update","timestamp":1700000100,"content-state":{"eta":5}}"#)
                    .request))
        #expect(update.status == 200)
        listed = try emulator.admin("GET", "/api/v1/devices/\(deviceID)/activities").json
        activity = try #require(listed["activities"]?.arrayValue?.first?.objectValue)
        #expect(activity["contentState"]?.objectValue?["eta"]?.intValue == 5)
        #expect(activity["updates"]?.intValue == 1)

        // An older update is answered 200 by APNs; the device ignores it, and the record says why.
        let stale = APNsResult(
            try connection.send(
                try liveActivityPush(emulator, token: updateToken, #"{"event":"update","timestamp":1700000050,"content-state":{"eta":9}}"#)
                    .request))
        #expect(stale.status == 200)
        let ignored = try record(emulator, stale.apnsID)
        #expect(ignored?["outcome"]?.stringValue == "ignored")
        #expect(ignored?["explanation"]?.stringValue?.contains("older") == true, "\(ignored?["explanation"] ?? .null)")

        #expect(try emulator.admin("DELETE", "/api/v1/devices/\(deviceID)/activities/\(activityID)").status == 200)
        listed = try emulator.admin("GET", "/api/v1/devices/\(deviceID)/activities").json
        #expect(listed["activities"]?.arrayValue?.first?.objectValue?["state"]?.stringValue == "dismissed")
    }

    /// What Apple will not tell the provider: 200, and the device drops it, with the reason.
    @Test(arguments: [
        (#"{"event":"start","timestamp":1,"attributes-type":"DeliveryAttrs","attributes":{},"content-state":{},"alert":"x"}"#, "not declared"),
        (
            #"{"event":"start","timestamp":1,"attributes-type":"DeliveryAttributes","attributes":{},"content-state":"eta","alert":"x"}"#,
            "content-state"
        ),
        (#"{"event":"start","timestamp":1,"attributes-type":"DeliveryAttributes","attributes":{"eta":null},"content-state":{},"alert":"x"}"#, "null"),
    ])
    func aStartTheDeviceCannotUseIsAnswered200AndJournaledAsIgnored(aps: String, why: String) throws {
        // A null drops it only when the app's fields are taken as not optional.
        let emulator = try EmulatorProcess(["--live-activity-strict-decoding"])
        let (deviceID, _) = try emulator.createDevice()
        let declared = try emulator.admin(
            "PUT", "/api/v1/devices/\(deviceID)/apps/\(EmulatorProcess.bundleID)/live-activities", body: ["types": ["DeliveryAttributes"]])
        let startToken = try #require(declared.json["pushToStartTokens"]?.objectValue?["DeliveryAttributes"]?.stringValue)
        let result = APNsResult(try emulator.connect().send(try liveActivityPush(emulator, token: startToken, aps).request))
        #expect(result.status == 200)
        let record = try record(emulator, result.apnsID)
        #expect(record?["outcome"]?.stringValue == "ignored")
        #expect(record?["explanation"]?.stringValue?.contains(why) == true, "\(record?["explanation"] ?? .null)")
        #expect(try emulator.admin("GET", "/api/v1/devices/\(deviceID)/activities").json["activities"]?.arrayValue?.isEmpty == true)
    }

    @Test func aLiveActivityTokenKeepsItsEnvironmentAndApp() throws {
        let emulator = try EmulatorProcess(["--app", "\(EmulatorProcess.teamID):com.example.other"])
        let (deviceID, _) = try emulator.createDevice()
        let declared = try emulator.admin(
            "PUT", "/api/v1/devices/\(deviceID)/apps/\(EmulatorProcess.bundleID)/live-activities", body: ["types": ["DeliveryAttributes"]])
        let startToken = try #require(declared.json["pushToStartTokens"]?.objectValue?["DeliveryAttributes"]?.stringValue)
        let aps = #"{"event":"start","timestamp":1,"attributes-type":"DeliveryAttributes","attributes":{},"content-state":{},"alert":"x"}"#
        let production = APNsResult(try emulator.connect("production").send(try liveActivityPush(emulator, token: startToken, aps).request))
        #expect(production.status == 400 && production.reason == "BadDeviceToken")
        var otherTopic = try liveActivityPush(emulator, token: startToken, aps)
        otherTopic.topic = "com.example.other.push-type.liveactivity"
        let mismatch = APNsResult(try emulator.connect().send(otherTopic.request))
        #expect(mismatch.status == 400 && mismatch.reason == "DeviceTokenNotForTopic", "\(mismatch.status) \(mismatch.reason ?? "")")
        #expect(try emulator.admin("PUT", "/api/v1/devices/nope/apps/\(EmulatorProcess.bundleID)/live-activities", body: ["types": []]).status == 404)
    }

    /// `apns-emulator scenario --admin` drives a running binary's Live Activities and channels:
    /// the channel listener is found in its /api/v1/info, pushes and broadcasts signed with
    /// the key given; a file that signs without `--key` is refused before anything runs.
    @Test func aScenarioDrivesLiveActivitiesAndChannelsOnARunningEmulator() throws {
        let emulator = try EmulatorProcess()
        let path = emulator.directory + "/live.json"
        let start =
            #"{"event": "start", "timestamp": 1, "attributes-type": "DeliveryAttributes", "attributes": {"orderId": "42"}, "#
            + #""content-state": {"eta": 15}, "alert": "Order 42", "input-push-token": 1}"#
        let scenario = #"""
            {"name": "live", "steps": [
              {"do": "device", "alias": "phone"},
              {"do": "declareActivities", "types": ["DeliveryAttributes"]},
              {"do": "createChannel", "channel": "run7"},
              {"do": "startActivity", "activity": "map", "attributesType": "DeliveryAttributes", "channel": "run7"},
              {"do": "push", "pushToStart": "DeliveryAttributes", "startsActivity": "order", "payload": {"aps": \#(start)}},
              {"do": "push", "activity": "order", "staleIn": 60,
               "payload": {"aps": {"event": "update", "timestamp": 2, "content-state": {"eta": 5}}}},
              {"do": "expect", "activity": {"name": "order", "state": "active", "contentState": {"eta": 5}, "updates": 1}},
              {"do": "advanceClock", "seconds": 61},
              {"do": "expect", "activity": {"name": "order", "state": "stale"}},
              {"do": "broadcast", "channel": "run7", "payload": {"aps": {"event": "update", "timestamp": 3, "content-state": {}}}},
              {"do": "dismissActivity", "activity": "order"},
              {"do": "expect", "activity": {"name": "order", "state": "dismissed"}}
            ]}
            """#
        try scenario.write(toFile: path, atomically: true, encoding: .utf8)
        let admin = try emulator.address("admin").description
        let key = "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(emulator.keyPath)"
        let result = try run(EmulatorProcess.binary, ["scenario", "--ascii", "--admin", admin, "--key", key, path], timeout: 60)
        #expect(result.status == 0, "\(result.out)\(result.err)")
        #expect(result.out.contains("PASS live: 12 steps"), "\(result.out)")

        let channels = try emulator.admin("GET", "/api/v1/channels").json["channels"]?.arrayValue ?? []
        #expect(channels.count == 1 && channels.first?["broadcasts"]?.intValue == 1)
        let activities = try emulator.admin("GET", "/api/v1/devices/phone/activities").json["activities"]?.arrayValue ?? []
        #expect(activities.compactMap { $0["state"]?.stringValue }.sorted() == ["active", "dismissed"])

        let unsigned = try run(EmulatorProcess.binary, ["scenario", "--admin", admin, path])
        #expect(unsigned.status == 2)
        #expect(unsigned.err.contains("step 3 (createChannel) signs with the provider key: --key TEAMID:KEYID:PATH"), "\(unsigned.err)")
    }

    /// Frequent updates raise the hourly budget of priority-10 updates; the user's switch in
    /// Settings takes it back to the ordinary one.
    @Test func theFrequentUpdatesSwitchChangesTheBudget() throws {
        let emulator = try EmulatorProcess(["--live-activity-budget-per-hour", "1", "--live-activity-frequent-budget-per-hour", "3"])
        let (deviceID, _) = try emulator.createDevice()
        let path = "/api/v1/devices/\(deviceID)/apps/\(EmulatorProcess.bundleID)/live-activities"
        #expect(try emulator.admin("PUT", path, body: ["types": ["DeliveryAttributes"], "frequentUpdates": true]).status == 200)
        let started = try emulator.admin(
            "POST", "/api/v1/devices/\(deviceID)/apps/\(EmulatorProcess.bundleID)/activities",
            body: ["attributesType": "DeliveryAttributes", "attributes": [:], "contentState": [:], "pushToken": true])
        let token = try #require(started.json["pushToken"]?.stringValue)
        let connection = try emulator.connect()
        var timestamp = 1_700_000_000
        func update() throws -> String? {
            timestamp += 1
            let sent = APNsResult(
                try connection.send(
                    try liveActivityPush(emulator, token: token, #"{"event":"update","timestamp":\#(timestamp),"content-state":{"n":\#(timestamp)}}"#)
                        .request))
            return try record(emulator, sent.apnsID)?["outcome"]?.stringValue
        }
        #expect(try (0..<3).map { _ in try update() } == ["delivered", "delivered", "delivered"])
        #expect(try update() == "throttled", "the frequent budget is 3 an hour")
        let off = try emulator.admin(
            "PUT", path, body: ["types": ["DeliveryAttributes"], "frequentUpdates": true, "frequentUpdatesEnabled": false])
        #expect(off.json["frequentUpdatesEnabled"]?.boolValue == false)
        #expect(try update() == "throttled", "with the switch off the budget is 1 an hour, long used up")
        #expect(try emulator.admin("PUT", path, body: ["types": ["DeliveryAttributes"], "frequentUpdatesEnabled": "no"]).status == 400)
    }
}
