// LiveActivityDeviceTests: the whole life of Live Activities on a device that holds a socket
// (a real `apns-emulator device` process, and the DeviceClient library): push-to-start,
// update by token and by broadcast, stale, end, dismissal; pushes while it is offline.
// Against the real binary with our own HTTP/2 client. Imports the harness's modules.
import APNsCore
import DeviceClient
import Foundation
import HTTP2
import ProviderClient
import Testing
import TestSupport

extension DeviceProcess {
    /// The next `activity` event with this change (others before it are consumed).
    func nextActivity(_ change: String, timeout: TimeInterval = 5) -> JSONValue? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            guard let event = next("activity", timeout: deadline.timeIntervalSinceNow) else { return nil }
            if event["change"]?.stringValue == change { return event }
        }
        return nil
    }
}

@Suite("Live Activities on devices with a socket: device processes print each change")
struct LiveActivityDeviceTests {
    static let bundle = EmulatorProcess.bundleID
    static let topic = bundle + ".push-type.liveactivity"

    func liveActivityPush(_ emulator: EmulatorProcess, _ connection: HTTP2ClientConnection, token: String, _ aps: String) throws -> APNsResult {
        var push = try emulator.push(token, payload: #"{"aps":\#(aps)}"#, topic: Self.topic)
        push.pushType = "liveactivity"
        push.priority = "10"
        return APNsResult(try connection.send(push.request))
    }

    @Test func aDeviceProcessShowsTheWholeLifeOfItsActivities() throws {
        let emulator = try EmulatorProcess()
        let device = try DeviceProcess(emulator, deviceID: "la-phone", extra: ["--live-activity-types", "DeliveryAttributes"])
        let tokenEvent = try #require(device.nextActivity("token"), "the device printed no push-to-start token")
        #expect(tokenEvent["kind"]?.stringValue == "pushToStart" && tokenEvent["attributesType"]?.stringValue == "DeliveryAttributes")
        let startToken = try #require(tokenEvent["token"]?.stringValue)
        let connection = try emulator.connect()
        let now = Int(Date().timeIntervalSince1970)

        // Started by push, with token updates.
        let start = try liveActivityPush(
            emulator, connection, token: startToken,
            #"{"event":"start","timestamp":\#(now),"attributes-type":"DeliveryAttributes","attributes":{"order":"42"},"content-state":{"eta":15},"alert":{"title":"On its way"},"input-push-token":1}"#
        )
        #expect(start.status == 200)
        let started = try #require(device.nextActivity("started"))
        #expect(started["startedBy"]?.stringValue == "push" && started["alert"]?["title"]?.stringValue == "On its way")
        let activityID = try #require(started["activityId"]?.stringValue)
        // Its alert shows the activity; it is not a notification: not listed in Notification
        // Center, and no tap on it reaches `didReceive` (it was both, with a banner's callbacks).
        let center = try emulator.admin("GET", "/api/v1/devices/la-phone/notification-center").json
        #expect(center["groups"]?.arrayValue?.isEmpty == true, "\(center)")
        let startRecord = try emulator.admin("GET", "/api/v1/notifications/\(try #require(start.apnsID))").json
        #expect(startRecord["presentation"]?["listed"] == false, "the record says what Notification Center shows: \(startRecord)")
        let tap = try emulator.admin(
            "POST", "/api/v1/devices/la-phone/notifications/\(try #require(start.apnsID))/respond", body: ["action": "default"])
        #expect(tap.status == 400 && tap.json["error"]?.stringValue?.contains("Live Activity") == true, "\(tap.json)")
        let updateEvent = try #require(device.nextActivity("token"))
        #expect(updateEvent["kind"]?.stringValue == "update" && updateEvent["activityId"]?.stringValue == activityID)
        let updateToken = try #require(updateEvent["token"]?.stringValue)

        // Updated by token, with a stale date a moment away.
        let update = try liveActivityPush(
            emulator, connection, token: updateToken,
            #"{"event":"update","timestamp":\#(now + 1),"content-state":{"eta":5},"stale-date":\#(now + 2)}"#)
        #expect(update.status == 200)
        let updated = try #require(device.nextActivity("updated"))
        #expect(updated["activity"]?["contentState"]?["eta"]?.intValue == 5)
        let stale = try #require(device.nextActivity("stale", timeout: 6), "the activity did not go stale after its stale-date")
        #expect(stale["activity"]?["state"]?.stringValue == "stale")

        // A second activity on a channel, started by push, updated by a broadcast.
        let channelResponse = try emulator.connect("channelSandbox").send(
            ClientRequest(
                method: "POST", path: "/1/apps/\(Self.bundle)/channels",
                headers: [HTTP2HeaderField(name: "authorization", value: "bearer \(try emulator.providerToken())")],
                body: Array(#"{"message-storage-policy": 1, "push-type": "LiveActivity"}"#.utf8)))
        let channel = try #require(channelResponse.headers.first { $0.name == "apns-channel-id" }?.value)
        _ = try liveActivityPush(
            emulator, connection, token: startToken,
            #"{"event":"start","timestamp":\#(now),"attributes-type":"DeliveryAttributes","attributes":{"order":"43"},"content-state":{"eta":40},"alert":"Second","input-push-channel":"\#(channel)"}"#
        )
        let second = try #require(device.nextActivity("started"))
        let secondID = try #require(second["activityId"]?.stringValue)
        #expect(second["activity"]?["channel"]?.stringValue == channel)
        let broadcast = try connection.send(
            ClientRequest(
                method: "POST", path: "/4/broadcasts/apps/\(Self.bundle)",
                headers: [
                    HTTP2HeaderField(name: "authorization", value: "bearer \(try emulator.providerToken())"),
                    HTTP2HeaderField(name: "apns-channel-id", value: channel), HTTP2HeaderField(name: "apns-push-type", value: "LiveActivity"),
                    HTTP2HeaderField(name: "apns-priority", value: "5"), HTTP2HeaderField(name: "apns-expiration", value: "0"),
                ],
                body: Array(#"{"aps":{"event":"update","timestamp":\#(now + 5),"content-state":{"eta":35}}}"#.utf8)))
        #expect(broadcast.status == 200)
        let byBroadcast = try #require(device.nextActivity("updated"))
        #expect(byBroadcast["activityId"]?.stringValue == secondID && byBroadcast["activity"]?["contentState"]?["eta"]?.intValue == 35)

        // Ended by push (it stays on the Lock Screen until its dismissal date), then swiped away.
        let end = try liveActivityPush(
            emulator, connection, token: updateToken,
            #"{"event":"end","timestamp":\#(now + 10),"content-state":{"eta":0},"dismissal-date":\#(now + 3600)}"#)
        #expect(end.status == 200)
        let ended = try #require(device.nextActivity("ended"))
        #expect(ended["endedBy"]?.stringValue == "push" && ended["activity"]?["state"]?.stringValue == "ended")
        device.command("dismiss-activity \(activityID)")
        let dismissed = try #require(device.nextActivity("dismissed"))
        #expect(dismissed["dismissedBy"]?.stringValue == "user" && dismissed["activityId"]?.stringValue == activityID)
        #expect(device.next("activityDismissed") != nil)

        // A push after the end: APNs says 200, the journal says why the device ignored it.
        let late = try liveActivityPush(
            emulator, connection, token: updateToken, #"{"event":"update","timestamp":\#(now + 20),"content-state":{"eta":1}}"#)
        #expect(late.status == 200)
        let record = try emulator.admin("GET", "/api/v1/notifications/\(late.apnsID ?? "")").json
        #expect(record["outcome"]?.stringValue == "ignored")
        #expect(record["explanation"]?.stringValue?.contains("dismissed by the user") == true, "\(record["explanation"] ?? .null)")
    }

    /// A reinstall through the admin API (the web UI's button) is the device's own: the app
    /// keeps the Live Activity types it declares (they are the app's, not the install's); the
    /// device hears `uninstalled`, its push-to-start token ended, `registered` and a new one.
    @Test func aReinstallThroughTheAdminAPIKeepsTheAppsLiveActivityTypes() throws {
        let emulator = try EmulatorProcess()
        let device = try DeviceProcess(emulator, deviceID: "la-reinstall", extra: ["--live-activity-types", "DeliveryAttributes"])
        let old = try #require(device.nextActivity("token")?["token"]?.stringValue)
        let reinstalled = try emulator.admin("POST", "/api/v1/devices/la-reinstall/apps/\(Self.bundle)/reinstall")
        #expect(reinstalled.status == 200)
        #expect(device.next("uninstalled")?["bundleId"]?.stringValue == Self.bundle)
        let ended = try #require(device.nextActivity("tokenEnded"))
        #expect(ended["kind"]?.stringValue == "pushToStart" && ended["token"]?.stringValue == old, "\(ended)")
        #expect(device.next("registered")?["bundleId"]?.stringValue == Self.bundle)
        let fresh = try #require(device.nextActivity("token"))
        #expect(fresh["kind"]?.stringValue == "pushToStart" && fresh["attributesType"]?.stringValue == "DeliveryAttributes")
        #expect(fresh["token"]?.stringValue != old)
        let listed = try emulator.admin("GET", "/api/v1/devices/la-reinstall/activities").json
        #expect(listed["apps"]?.arrayValue?.first?["types"] == ["DeliveryAttributes"], "\(listed)")
        // The user's switch for frequent updates is a setting: kept as well.
        let off = try emulator.admin(
            "PUT", "/api/v1/devices/la-reinstall/apps/\(Self.bundle)/live-activities",
            body: ["types": ["DeliveryAttributes"], "frequentUpdates": true, "frequentUpdatesEnabled": false])
        #expect(off.status == 200, "\(off.raw)")
        #expect(try emulator.admin("POST", "/api/v1/devices/la-reinstall/apps/\(Self.bundle)/reinstall").status == 200)
        let kept = try emulator.admin("GET", "/api/v1/devices/la-reinstall/activities").json
        #expect(kept["apps"]?.arrayValue?.first?["frequentUpdatesEnabled"] == false, "\(kept)")
    }

    @Test func theDeviceClientStartsActivitiesAndTakesPushesSentWhileItWasOffline() throws {
        let emulator = try EmulatorProcess()
        let app = DeviceApp(bundleID: Self.bundle, environment: .sandbox, liveActivityTypes: ["DeliveryAttributes"])
        let device = SimulatedDevice(address: try emulator.address("device"), deviceID: "client-phone", apps: [app])
        try device.connect()
        defer { device.disconnect() }
        #expect(
            try eventually {
                _ = try device.poll(timeoutMilliseconds: 50); return device.pushToStartTokens[Self.bundle]?["DeliveryAttributes"] != nil
            })

        let activity = try device.startActivity(
            Self.bundle, attributesType: "DeliveryAttributes", attributes: ["order": "7"], contentState: ["eta": 30])
        let activityID = try #require(activity["activityId"]?.stringValue)
        let token = try #require(activity["pushToken"]?.stringValue)
        #expect(activity["startedBy"]?.stringValue == "app")
        #expect(throws: DeviceClientError.self) { try device.startActivity(Self.bundle, attributesType: "Undeclared") }

        // Offline: the update waits, and is shown once the device is back.
        device.disconnect()
        let now = Int(Date().timeIntervalSince1970)
        let connection = try emulator.connect()
        let update = try liveActivityPush(
            emulator, connection, token: token, #"{"event":"update","timestamp":\#(now),"content-state":{"eta":12}}"#)
        #expect(update.status == 200)
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(update.apnsID ?? "")").json["outcome"]?.stringValue == "stored")
        try device.connect()
        var change = try device.nextActivityChange(timeoutMilliseconds: 3000)
        var heardUpdateToken = false
        while let seen = change, seen["change"]?.stringValue != "updated" {
            // As a relaunched app finds its running activities' tokens again.
            if seen["change"] == "token", seen["kind"] == "update", seen["token"]?.stringValue == token,
                seen["activityId"]?.stringValue == activityID
            {
                heardUpdateToken = true
            }
            change = try device.nextActivityChange(timeoutMilliseconds: 3000)
        }
        #expect(heardUpdateToken, "the reconnected device is told its running activity's update token")
        #expect(change?["activityId"]?.stringValue == activityID, "the device heard of the update once back online")
        #expect(device.activities[activityID]?["contentState"]?.objectValue?["eta"]?.intValue == 12)
        let record = try emulator.admin("GET", "/api/v1/notifications/\(update.apnsID ?? "")").json
        #expect(record["outcome"]?.stringValue == "delivered" && record["stored"]?.boolValue == true)

        try device.endActivity(activityID, contentState: ["eta": 0], dismissalDate: 0)
        #expect(device.activities[activityID]?["state"]?.stringValue == "dismissed", "a dismissal date in the past removes it at once")
    }
}

@Suite("Live Activity tokens reach the app's backend")
struct LiveActivityBackendTests {
    @Test func newLiveActivityTokensCallRegisterWithTheirKind() throws {
        let emulator = try EmulatorProcess()
        let bundle = EmulatorProcess.bundleID
        // Nobody listens on the port: the calls fail, but each is recorded as rendered.
        let hooks: JSONValue = [
            "register": [
                "url": "http://127.0.0.1:9/tokens",
                "body": ["token": "{{token}}", "kind": "{{tokenKind}}", "activity": "{{activityId}}", "type": "{{attributesType}}"],
            ], "maxAttempts": 1,
        ]
        let set = try emulator.admin("PUT", "/api/v1/apps/\(bundle)/backend", body: hooks)
        #expect(set.status == 200, "\(set.raw)")
        let (deviceID, _) = try emulator.createDevice()
        let declared = try emulator.admin(
            "PUT", "/api/v1/devices/\(deviceID)/apps/\(bundle)/live-activities", body: ["types": ["DeliveryAttributes"]])
        let startToken = try #require(declared.json["pushToStartTokens"]?["DeliveryAttributes"]?.stringValue)
        let started = try emulator.admin(
            "POST", "/api/v1/devices/\(deviceID)/apps/\(bundle)/activities",
            body: ["attributesType": "DeliveryAttributes", "attributes": [:], "contentState": [:], "pushToken": true])
        let activityID = try #require(started.json["activityId"]?.stringValue)
        let updateToken = try #require(started.json["pushToken"]?.stringValue)
        func bodies() throws -> [JSONValue] {
            let calls = try emulator.admin("GET", "/api/v1/devices/\(deviceID)/backend-calls?hook=register").json["calls"]?.arrayValue ?? []
            return calls.compactMap { $0["body"] }.filter { $0["kind"]?.stringValue != "app" }
        }
        #expect(try eventually { try bodies().count == 2 })
        let sent = try bodies()
        #expect(sent.contains { $0["token"]?.stringValue == startToken && $0["kind"] == "pushToStart" && $0["type"] == "DeliveryAttributes" })
        #expect(
            sent.contains {
                $0["token"]?.stringValue == updateToken && $0["kind"] == "update" && $0["activity"]?.stringValue == activityID
            })
    }
}

@Suite("Widget and control pushes on a device with a socket")
struct WidgetSocketTests {
    @Test func aWidgetsPushWithoutContentChangedReachesTheDeviceAndDoesNothing() throws {
        let emulator = try EmulatorProcess()
        let device = try DeviceProcess(emulator, deviceID: "widget-phone", extra: ["--kinds", "widgets"])
        let token = try device.registeredToken()
        let connection = try emulator.connect()
        func widgetPush(_ aps: String) throws -> APNsResult {
            var push = try emulator.push(token, payload: #"{"aps":\#(aps)}"#, topic: EmulatorProcess.bundleID + ".push-type.widgets")
            push.pushType = "widgets"
            return APNsResult(try connection.send(push.request))
        }
        let idle = try widgetPush(#"{"alert":"x"}"#)
        #expect(idle.status == 200)
        #expect(device.next("notification")?["apnsId"]?.stringValue == idle.apnsID)
        #expect(
            try eventually {
                try emulator.admin("GET", "/api/v1/notifications/\(idle.apnsID ?? "")").json["outcome"]?.stringValue == "ignored"
            })
        let why = try emulator.admin("GET", "/api/v1/notifications/\(idle.apnsID ?? "")").json["explanation"]?.stringValue ?? ""
        #expect(why.contains("content-changed"), "\(why)")
        let reload = try widgetPush(#"{"content-changed":true}"#)
        #expect(device.next("notification")?["apnsId"]?.stringValue == reload.apnsID)
        #expect(
            try eventually {
                try emulator.admin("GET", "/api/v1/notifications/\(reload.apnsID ?? "")").json["outcome"]?.stringValue == "delivered"
            })
    }
}
