import BackendTestSupport
import DeviceClient
import Foundation
import JSON
import ProviderClient
import Testing
import TestSupport

/// The notification as the user meets it (docs/device-model.md, "Presentation" and "Responding"),
/// from outside: the real binary, real pushes over HTTP/2, virtual devices through the admin API
/// and a socket device through DeviceClient.
@Suite struct PresentationTests {
    static let chat: JSONValue = [
        "categories": [
            [
                "identifier": "MESSAGE", "options": ["customDismissAction"], "summaryFormat": "%u more messages from %@",
                "actions": [
                    ["identifier": "REPLY", "title": "Reply", "textInput": ["buttonTitle": "Send", "placeholder": "Message"]],
                    ["identifier": "DELETE", "title": "Delete", "options": ["destructive", "authenticationRequired"]],
                    ["identifier": "OPEN", "title": "Open", "options": ["foreground"]],
                ],
            ]
        ]
    ]

    /// A virtual device with the app installed (`setup` merged into the creation body).
    static func device(_ emulator: EmulatorProcess, _ setup: JSONValue = [:]) throws -> (id: String, token: String) {
        var body = JSONObject([("bundleId", .string(EmulatorProcess.bundleID)), ("environment", "sandbox")])
        for member in setup.objectValue?.members ?? [] { body[member.key] = member.value }
        let created = try emulator.admin("POST", "/api/v1/devices", body: .object(body))
        #expect(created.status == 201, "\(created.raw)")
        return (created.json["deviceId"]?.stringValue ?? "", created.json["token"]?.stringValue ?? "")
    }

    /// Sends `payload` and returns its record once the device has it.
    static func deliver(_ emulator: EmulatorProcess, _ token: String, _ payload: String) throws -> JSONValue {
        let connection = try emulator.connect()
        let result = APNsResult(try connection.send(try emulator.push(token, payload: payload).request))
        #expect(result.status == 200)
        let id = try #require(result.apnsID)
        return try Self.waitFor {
            try emulator.notifications(token: token).first {
                $0["apnsId"]?.stringValue?.lowercased() == id.lowercased() && $0["outcome"] != "pending"
            }
        }
    }

    /// `find`'s value once it has one (a failure after 20 s).
    static func waitFor<T>(_ find: () throws -> T?) throws -> T {
        var found: T?
        _ = try eventually {
            found = try find()
            return found != nil
        }
        return try #require(found)
    }

    @Test func aRegisteredCategoryShowsItsActionsAndAnUnknownOneNone() throws {
        let emulator = try EmulatorProcess()
        let phone = try Self.device(emulator, Self.chat)
        let known = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":{"title":"Alice","body":"Lunch?"},"category":"MESSAGE"}}"#)
        #expect(known["display"] == "banner")
        #expect(known["presentation"]?["categoryRegistered"] == true)
        #expect(known["presentation"]?["actions"]?.arrayValue?.compactMap { $0["identifier"]?.stringValue } == ["REPLY", "DELETE", "OPEN"])
        #expect(known["presentation"]?["title"] == "Alice" && known["presentation"]?["body"] == "Lunch?")
        let unknown = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"hi","category":"INVITE"}}"#)
        #expect(unknown["presentation"]?["categoryRegistered"] == false)
        #expect(unknown["presentation"]?["actions"] == [])
        #expect(unknown["explanation"]?.stringValue?.contains("registered no category \"INVITE\"") == true, "\(unknown)")
    }

    /// A reply typed into a notification reaches the app (didReceive with the text) and its
    /// backend (the `action` hook, with the action and the text filled in).
    @Test func aReplyActionReachesTheAppAndItsBackend() throws {
        let backend = try TestBackend()
        defer { backend.stop() }
        let emulator = try EmulatorProcess()
        let hooks: JSONValue = [
            "action": [
                "url": .string(backend.url("/replies")), "method": "POST",
                "body": [
                    "apnsId": "{{apnsId}}", "action": "{{actionIdentifier}}", "text": "{{userText}}", "conversation": "{{payload:/conversation}}",
                ],
            ]
        ]
        #expect(try emulator.admin("PUT", "/api/v1/apps/\(EmulatorProcess.bundleID)/backend", body: hooks).status == 200)
        let phone = try Self.device(emulator, Self.chat)
        let record = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"Lunch?","category":"MESSAGE"},"conversation":"c42"}"#)
        let id = try #require(record["apnsId"]?.stringValue)
        let path = "/api/v1/devices/\(phone.id)/notifications/\(id)/respond"
        // Text is required by a text-input action and refused by the others.
        #expect(try emulator.admin("POST", path, body: ["action": "REPLY"]).status == 400)
        #expect(try emulator.admin("POST", path, body: ["action": "OPEN", "text": "x"]).status == 400)
        let unknown = try emulator.admin("POST", path, body: ["action": "ARCHIVE"])
        #expect(unknown.status == 400 && unknown.json["error"]?.stringValue?.contains("\"REPLY\"") == true, "\(unknown.raw)")
        let replied = try emulator.admin("POST", path, body: ["action": "REPLY", "text": "Yes, 12:30"])
        #expect(replied.status == 200, "\(replied.raw)")
        #expect(replied.json["callbacks"] == ["didReceive"] && replied.json["userText"] == "Yes, 12:30")
        #expect(replied.json["runsInBackground"] == true && replied.json["opensApp"] == false)
        let call = try Self.waitFor { backend.requests.first { $0.target == "/replies" } }
        let sent = try JSONValue.parse(call.body)
        #expect(sent["action"] == "REPLY" && sent["text"] == "Yes, 12:30" && sent["conversation"] == "c42")
        #expect(sent["apnsId"]?.stringValue?.lowercased() == id.lowercased())
        // Answered once: it has left Notification Center.
        #expect(try emulator.admin("POST", path, body: ["action": "default"]).status == 400)
        let after = try #require(try emulator.notifications(token: phone.token).first { $0["apnsId"]?.stringValue == id })
        #expect(after["presentation"]?["userResponse"]?["actionIdentifier"] == "REPLY")
        #expect(after["callbacks"]?.arrayValue?.contains("didReceive") == true)
    }

    @Test func dismissalsReachTheAppOnlyWithCustomDismissActionAndLockedDevicesRefuseAuthenticatedActions() throws {
        let emulator = try EmulatorProcess()
        let phone = try Self.device(emulator, Self.chat)
        let plain = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"no category"}}"#)
        let dismissedPlain = try emulator.admin(
            "POST", "/api/v1/devices/\(phone.id)/notifications/\(plain["apnsId"]!.stringValue!)/respond", body: ["action": "dismiss"])
        #expect(dismissedPlain.status == 200 && dismissedPlain.json["callbacks"] == [])
        let message = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"m","category":"MESSAGE"}}"#)
        let path = "/api/v1/devices/\(phone.id)/notifications/\(message["apnsId"]!.stringValue!)/respond"
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(phone.id)", body: ["locked": true]).status == 200)
        let locked = try emulator.admin("POST", path, body: ["action": "DELETE"])
        #expect(locked.status == 400 && locked.raw.contains("locked"), "\(locked.raw)")
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(phone.id)", body: ["locked": false]).status == 200)
        let deleted = try emulator.admin("POST", path, body: ["action": "DELETE"])
        #expect(deleted.status == 200 && deleted.json["callbacks"] == ["didReceive"])
        let second = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"m2","category":"MESSAGE"}}"#)
        let heard = try emulator.admin(
            "POST", "/api/v1/devices/\(phone.id)/notifications/\(second["apnsId"]!.stringValue!)/respond", body: ["action": "dismiss"])
        #expect(heard.json["callbacks"] == ["didReceive"] && heard.json["actionIdentifier"] == "com.apple.UNNotificationDismissActionIdentifier")
    }

    @Test func willPresentDecidesWhatAForegroundAppShows() throws {
        let emulator = try EmulatorProcess()
        let phone = try Self.device(emulator, ["appState": "foreground", "foregroundPresentation": []])
        let nothing = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"in app","sound":"default","badge":4}}"#)
        #expect(nothing["outcome"] == "delivered" && nothing["display"] == "none")
        #expect(nothing["callbacks"] == ["willPresent"])
        #expect(nothing["presentation"] == .null || nothing["presentation"]?["sound"] == "silenced")
        #expect(nothing["explanation"]?.stringValue?.contains("willPresent returned no options") == true, "\(nothing)")
        let app = "/api/v1/devices/\(phone.id)/apps/\(EmulatorProcess.bundleID)"
        #expect(try emulator.admin("PATCH", app, body: ["foregroundPresentation": ["list", "badge"]]).status == 200)
        let listed = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"in app","badge":4}}"#)
        #expect(listed["display"] == "notificationCenter")
        let device = try emulator.admin("GET", "/api/v1/devices/\(phone.id)")
        #expect(device.json["apps"]?.arrayValue?.first?["badge"] == 4, "the badge option lets the badge through: \(device.raw)")
        #expect(try emulator.admin("PATCH", app, body: ["foregroundPresentation": ["sideways"]]).status == 400)
        // A banner without `list` is not kept in Notification Center, but can be tapped while shown.
        #expect(try emulator.admin("PATCH", app, body: ["foregroundPresentation": ["banner"]]).status == 200)
        let banner = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"passing by"}}"#)
        #expect(banner["display"] == "banner" && banner["presentation"]?["listed"] == false)
        let center = try emulator.admin("GET", "/api/v1/devices/\(phone.id)/notification-center").json
        let listedIDs = center["groups"]?.arrayValue?.flatMap { $0["notifications"]?.arrayValue ?? [] }.compactMap { $0["apnsId"]?.stringValue } ?? []
        #expect(!listedIDs.contains(banner["apnsId"]?.stringValue ?? ""), "\(center)")
        #expect(listedIDs.contains(listed["apnsId"]?.stringValue ?? ""))
        let tapped = try emulator.admin(
            "POST", "/api/v1/devices/\(phone.id)/notifications/\(banner["apnsId"]!.stringValue!)/respond", body: ["action": "default"])
        #expect(tapped.status == 200)
    }

    @Test func badgesFollowThePayloadAndZeroClearsThem() throws {
        let emulator = try EmulatorProcess()
        let phone = try Self.device(emulator)
        func badge() throws -> JSONValue? { try emulator.admin("GET", "/api/v1/devices/\(phone.id)").json["apps"]?.arrayValue?.first?["badge"] }
        let badgeOnly = try Self.deliver(emulator, phone.token, #"{"aps":{"badge":7}}"#)
        #expect(badgeOnly["outcome"] == "delivered" && badgeOnly["display"] == "none", "a badge alone shows no banner")
        #expect(try badge() == 7)
        #expect(try emulator.admin("GET", "/api/v1/devices/\(phone.id)/notification-center").json["badges"] == ["com.example.app": 7])
        _ = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"cleared","badge":0}}"#)
        #expect(try badge() == 0)
        // A plain alert with a badge and a thread (read from the payload when the record is read).
        let plain = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":{"title":"Sale","body":"-20%"},"badge":9,"thread-id":"deals"}}"#)
        #expect(try badge() == 9)
        #expect(plain["presentation"]?["badge"] == 9 && plain["presentation"]?["threadId"] == "deals" && plain["presentation"]?["title"] == "Sale")
        let center = try emulator.admin("GET", "/api/v1/devices/\(phone.id)/notification-center").json
        #expect(center["groups"]?.arrayValue?.contains { $0["threadId"] == "deals" } == true)
        #expect(
            try emulator.admin("PATCH", "/api/v1/devices/\(phone.id)/apps/\(EmulatorProcess.bundleID)", body: ["badgesEnabled": false]).status == 200)
        _ = try Self.deliver(emulator, phone.token, #"{"aps":{"badge":3}}"#)
        #expect(try badge() == 9, "the user turned Badges off: the icon keeps its number")
    }

    /// A reinstalled app starts with an empty Notification Center: the old install's
    /// notifications do not come back with it, and cannot be answered (the new install was
    /// told of taps on notifications it never received).
    @Test func aReinstallLeavesTheOldInstallsNotificationsBehind() throws {
        let emulator = try EmulatorProcess()
        let phone = try Self.device(emulator)
        let old = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"before the reinstall"}}"#)
        let oldID = try #require(old["apnsId"]?.stringValue)
        Thread.sleep(forTimeInterval: 0.01)  // the reinstall comes in a later millisecond
        let reinstalled = try emulator.admin("POST", "/api/v1/devices/\(phone.id)/apps/\(EmulatorProcess.bundleID)/reinstall")
        #expect(reinstalled.status == 200)
        let newToken = try #require(reinstalled.json["tokens"]?.arrayValue?.first?["token"]?.stringValue)
        let fresh = try Self.deliver(emulator, newToken, #"{"aps":{"alert":"after"}}"#)
        let center = try emulator.admin("GET", "/api/v1/devices/\(phone.id)/notification-center").json
        let listed = center["groups"]?.arrayValue?.flatMap { $0["notifications"]?.arrayValue ?? [] }.compactMap { $0["apnsId"]?.stringValue } ?? []
        #expect(listed == [fresh["apnsId"]?.stringValue ?? "-"], "\(center)")
        let answer = try emulator.admin("POST", "/api/v1/devices/\(phone.id)/notifications/\(oldID)/respond", body: ["action": "default"])
        #expect(answer.status == 400, "\(answer.raw)")
        // A tap naming the new one in lower case is answered with its own apns-id, as respond is.
        let freshID = try #require(fresh["apnsId"]?.stringValue)
        let tapped = try emulator.admin("POST", "/api/v1/devices/\(phone.id)/tap", body: ["apnsId": .string(freshID.lowercased())])
        #expect(tapped.status == 200 && tapped.json["apnsId"]?.stringValue == freshID, "\(tapped.raw)")
    }

    @Test func notificationsGroupByThreadWithTheCategorysSummary() throws {
        let emulator = try EmulatorProcess()
        let phone = try Self.device(emulator, Self.chat)
        for (sender, thread) in [("Alice", "chat-1"), ("Bob", "chat-1"), ("Carol", "chat-2"), ("Alice", "chat-1")] {
            _ = try Self.deliver(
                emulator, phone.token,
                #"{"aps":{"alert":{"title":"\#(sender)","body":"hi"},"thread-id":"\#(thread)","category":"MESSAGE","summary-arg":"\#(sender)"}}"#)
        }
        _ = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"no thread"}}"#)
        for _ in 0..<2 { _ = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"update","thread-id":"news"}}"#) }
        let center = try emulator.admin("GET", "/api/v1/devices/\(phone.id)/notification-center")
        let groups = try #require(center.json["groups"]?.arrayValue)
        let chat1 = try #require(groups.first { $0["threadId"] == "chat-1" })
        #expect(chat1["count"] == 3)
        #expect(chat1["summary"] == "2 more messages from Bob and Alice", "\(chat1)")
        #expect(groups.first { $0["threadId"] == "chat-2" }?["summary"] == .null)
        #expect(groups.contains { $0["threadId"] == .null && $0["count"] == 1 })
        #expect(groups.first { $0["threadId"] == "news" }?["summary"] == "1 more notification", "iOS's own wording, in the singular")
        #expect(groups.count == 4)
    }

    /// Focus silences what it does not allow; time-sensitive breaks through only with the
    /// entitlement; critical plays through the ring switch with the entitlement and permission.
    @Test func interruptionLevelsFocusAndTheRingSwitch() throws {
        let emulator = try EmulatorProcess()
        let phone = try Self.device(emulator)
        let app = "/api/v1/devices/\(phone.id)/apps/\(EmulatorProcess.bundleID)"
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(phone.id)", body: ["focus": ["name": "Work"], "muted": true]).status == 200)
        let silenced = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"urgent","interruption-level":"time-sensitive","sound":"default"}}"#)
        #expect(silenced["display"] == "notificationCenter" && silenced["presentation"]?["sound"] == "silenced")
        #expect(silenced["presentation"]?["effectiveInterruptionLevel"] == "active")
        #expect(silenced["explanation"]?.stringValue?.contains("silenced by Focus \u{201C}Work\u{201D}") == true, "\(silenced)")
        #expect(silenced["explanation"]?.stringValue?.contains("lacks") == true)
        #expect(try emulator.admin("PATCH", app, body: ["timeSensitiveEntitlement": true, "criticalAlertEntitlement": true]).status == 200)
        let through = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"urgent","interruption-level":"time-sensitive","sound":"default"}}"#)
        #expect(through["display"] == "banner" && through["presentation"]?["effectiveInterruptionLevel"] == "time-sensitive")
        #expect(through["presentation"]?["sound"] == "silenced", "muted: only critical alerts make a sound")
        let notAllowed = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"fire","interruption-level":"critical","sound":"default"}}"#)
        #expect(notAllowed["presentation"]?["effectiveInterruptionLevel"] == "active", "the user has not allowed critical alerts")
        #expect(try emulator.admin("PATCH", app, body: ["criticalAlertsAllowed": true]).status == 200)
        let critical = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"fire","sound":{"critical":1,"name":"alarm.caf","volume":1.0}}}"#)
        #expect(critical["display"] == "banner" && critical["presentation"]?["sound"] == "critical")
        let passive = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"fyi","interruption-level":"passive"}}"#)
        #expect(passive["display"] == "notificationCenter" && passive["presentation"]?["screenLit"] == false)
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(phone.id)", body: ["focus": ["allowedApps": "not a list"]]).status == 400)
    }

    @Test func theScheduledSummaryHoldsWhatIsNotTimeSensitive() throws {
        let emulator = try EmulatorProcess()
        let phone = try Self.device(emulator, ["timeSensitiveEntitlement": true])
        // A summary one minute from the emulator's now, whatever the time of day.
        let clock = try emulator.admin("GET", "/api/v1/clock").json
        let nowMs = try #require(clock["nowMs"]?.intValue)
        let minutes = Int((nowMs / 60_000 + 2) % 1_440)
        let time = String(format: "%02d:%02d", minutes / 60, minutes % 60)
        let set = try emulator.admin(
            "PATCH", "/api/v1/devices/\(phone.id)", body: ["scheduledSummary": ["times": .array([.string(time)]), "apps": ["com.example.app"]]])
        #expect(set.status == 200, "\(set.raw)")
        let held = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"newsletter","relevance-score":0.2}}"#)
        #expect(held["display"] == "scheduledSummary", "\(held)")
        #expect(held["explanation"]?.stringValue?.contains("held for the \(time) summary") == true, "\(held)")
        _ = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"top story","relevance-score":0.9}}"#)
        let urgent = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":"your ride is here","interruption-level":"time-sensitive"}}"#)
        #expect(urgent["display"] == "banner", "time-sensitive breaks through the summary")
        var center = try emulator.admin("GET", "/api/v1/devices/\(phone.id)/notification-center").json
        #expect(center["waitingForSummary"]?.arrayValue?.compactMap { $0["presentation"]?["body"]?.stringValue } == ["top story", "newsletter"])
        // Not answerable before its time, and the refusal says why (not "not on screen").
        let heldID = try #require(held["apnsId"]?.stringValue)
        let respond = "/api/v1/devices/\(phone.id)/notifications/\(heldID)/respond"
        let early = try emulator.admin("POST", respond, body: ["action": "default"])
        #expect(early.status == 400 && early.raw.contains("is held for the scheduled summary until"), "\(early.raw)")
        // The emulator's clock moves past the summary time: the held ones are in Notification Center.
        #expect(try emulator.admin("POST", "/api/v1/clock", body: ["advanceSeconds": 180]).status == 200)
        center = try emulator.admin("GET", "/api/v1/devices/\(phone.id)/notification-center").json
        #expect(center["waitingForSummary"] == [])
        #expect(try emulator.admin("POST", respond, body: ["action": "default"]).status == 200)
        #expect(center["summarized"]?.arrayValue?.compactMap { $0["presentation"]?["body"]?.stringValue } == ["top story", "newsletter"])
    }

    @Test func whatTheUserReadsAfterLocalization() throws {
        let emulator = try EmulatorProcess()
        let phone = try Self.device(emulator, ["localizedStrings": ["GAME_INVITE": "%@ invites you to play %@", "TITLE": "Invitation"]])
        let localized = try Self.deliver(
            emulator, phone.token, #"{"aps":{"alert":{"title-loc-key":"TITLE","loc-key":"GAME_INVITE","loc-args":["Jenna","chess"]}}}"#)
        #expect(localized["presentation"]?["title"] == "Invitation" && localized["presentation"]?["body"] == "Jenna invites you to play chess")
        let missing = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":{"loc-key":"MISSING_KEY"}}}"#)
        #expect(missing["presentation"]?["body"] == "MISSING_KEY")
        #expect(missing["explanation"]?.stringValue?.contains("no string for loc-key") == true)
        let empty = try Self.deliver(emulator, phone.token, #"{"aps":{"alert":{"title":"","body":null},"sound":"default"}}"#)
        #expect(empty["display"] == "none" && empty["outcome"] == "delivered", "the sound still plays: \(empty)")
        #expect(empty["explanation"]?.stringValue?.contains("no title, subtitle or body") == true)
    }

    /// A socket device declares its categories in hello, hears how a notification was presented,
    /// responds from the device, and its switches persist across a restart with --state-dir.
    @Test func aSocketDeviceRespondsAndItsSettingsSurviveARestart() throws {
        let state = try StateDirectory()
        var emulator: EmulatorProcess? = try EmulatorProcess(["--state-dir", state.path])
        let app = DeviceApp(bundleID: EmulatorProcess.bundleID, environment: .sandbox, notificationSettings: Self.chat.objectValue)
        let device = SimulatedDevice(address: try emulator!.address("device"), deviceID: "chat-phone", apps: [app])
        try device.connect()
        let token = try #require(
            try eventually {
                _ = try device.poll(timeoutMilliseconds: 50)
                return device.token(for: EmulatorProcess.bundleID) != nil
            } ? device.token(for: EmulatorProcess.bundleID) : nil)
        let sleep: JSONValue = ["focus": ["name": "Sleep", "allowedPeople": ["Mum"]]]
        try device.setSwitches(sleep.objectValue!)
        let connection = try emulator!.connect()
        #expect(
            APNsResult(try connection.send(try emulator!.push(token, payload: #"{"aps":{"alert":"Lunch?","category":"MESSAGE"}}"#).request)).status
                == 200)
        let delivered = try #require(try device.nextNotification(timeoutMilliseconds: 10_000))
        let presentation = try #require(delivered.raw["presentation"])
        #expect(presentation["actions"]?.arrayValue?.count == 3)
        #expect(delivered.display == "notificationCenter", "silenced by the Sleep Focus")
        let answer = try device.respond(apnsID: delivered.apnsID, action: "REPLY", text: "on my way")
        #expect(answer["callbacks"] == ["didReceive"] && answer["userText"] == "on my way")
        device.disconnect()
        emulator = nil
        let again = try EmulatorProcess(["--state-dir", state.path])
        let stored = try again.admin("GET", "/api/v1/devices/chat-phone").json
        #expect(stored["focus"]?["name"] == "Sleep")
        #expect(stored["apps"]?.arrayValue?.first?["notificationSettings"]?["categories"]?.arrayValue?.first?["identifier"] == "MESSAGE")
        let record = try #require(try again.notifications(token: token).first)
        #expect(record["presentation"]?["userResponse"]?["userText"] == "on my way")
    }

    /// A configured device starts with its apps' notification setup and its switches; a bad
    /// setting stops the start with a message that says where.
    @Test func theConfigFileSetsAnAppsSetupAndTheDevicesSwitches() throws {
        let directory = try StateDirectory()
        try FileManager.default.createDirectory(atPath: directory.path, withIntermediateDirectories: true)
        let device: JSONValue = [
            "deviceId": "config-phone", "focus": ["name": "Sleep"], "muted": true,
            "apps": [
                [
                    "bundleId": .string(EmulatorProcess.bundleID), "environment": "sandbox", "token": "c0ffee01",
                    "notificationSettings": Self.chat,
                ]
            ],
        ]
        let path = directory.path + "/config.json"
        try Data(JSONValue.object(JSONObject([("devices", [device])])).serialized().utf8).write(to: URL(fileURLWithPath: path))
        let emulator = try EmulatorProcess(["--config", path])
        let stored = try emulator.admin("GET", "/api/v1/devices/config-phone").json
        #expect(stored["focus"]?["name"] == "Sleep" && stored["muted"] == true)
        let record = try Self.deliver(emulator, "c0ffee01", #"{"aps":{"alert":"hi","category":"MESSAGE","sound":"default"}}"#)
        #expect(record["presentation"]?["actions"]?.arrayValue?.count == 3)
        #expect(record["display"] == "notificationCenter" && record["presentation"]?["sound"] == "silenced")

        let bad: JSONValue = [
            "devices": [
                [
                    "deviceId": "bad-phone",
                    "apps": [
                        [
                            "bundleId": "com.example.app", "environment": "sandbox",
                            "notificationSettings": ["foregroundPresentation": ["loud"]],
                        ]
                    ],
                ]
            ]
        ]
        let badPath = directory.path + "/bad.json"
        try Data(bad.serialized().utf8).write(to: URL(fileURLWithPath: badPath))
        let refused = try run(EmulatorProcess.binary, ["serve", "--config", badPath])
        #expect(refused.status == 2, "\(refused.err)")
        #expect(refused.err.contains("apps[0].notificationSettings") && refused.err.contains("foregroundPresentation"), "\(refused.err)")
    }

    /// The `device` command: its app's categories from --notification-settings, the
    /// presentation printed with the notification, a reply typed on stdin reaching the backend,
    /// and the Focus switched from stdin.
    @Test func theDeviceCommandDeclaresCategoriesAndRepliesFromStdin() throws {
        let backend = try TestBackend()
        defer { backend.stop() }
        let emulator = try EmulatorProcess()
        let hooks: JSONValue = [
            "action": ["url": .string(backend.url("/replies")), "body": ["text": "{{userText}}", "action": "{{actionIdentifier}}"]]
        ]
        #expect(try emulator.admin("PUT", "/api/v1/apps/\(EmulatorProcess.bundleID)/backend", body: hooks).status == 200)
        let device = try DeviceProcess(emulator, deviceID: "cli-chat", extra: ["--notification-settings", Self.chat.serialized()])
        let token = try device.registeredToken()
        device.command("focus on")
        let focused = try #require(device.next("deviceUpdated"))
        #expect(focused["focus"]?["name"] == "Do Not Disturb")
        let sent = APNsResult(
            try emulator.connect().send(try emulator.push(token, payload: #"{"aps":{"alert":"Lunch?","category":"MESSAGE"}}"#).request))
        #expect(sent.status == 200)
        let shown = try #require(device.next("notification"))
        #expect(shown["display"] == "notificationCenter", "silenced by Do Not Disturb")
        #expect(shown["presentation"]?["actions"]?.arrayValue?.first?["identifier"] == "REPLY")
        device.command("respond REPLY on my   way")
        let answer = try #require(device.next("responded"))
        #expect(answer["userText"] == "on my way" && answer["callbacks"] == ["didReceive"])
        let call = try Self.waitFor { backend.requests.first { $0.target == "/replies" } }
        #expect(try JSONValue.parse(call.body)["text"] == "on my way")
        device.command("respond")
        #expect(device.next("error")?["code"] == "bad_command")
    }

    /// The same rules reach a device process: what willPresent allows in the foreground, a
    /// passive level, a badge, and the scheduled summary's hold, as printed by `device`.
    @Test func aDeviceProcessSeesEachPresentationDecision() throws {
        let emulator = try EmulatorProcess()
        let settings: JSONValue = ["foregroundPresentation": ["list"], "timeSensitiveEntitlement": true]
        let device = try DeviceProcess(
            emulator, deviceID: "cli-rules", extra: ["--app-state", "foreground", "--notification-settings", settings.serialized()])
        let token = try device.registeredToken()
        let connection = try emulator.connect()
        func push(_ payload: String) throws -> JSONValue {
            #expect(APNsResult(try connection.send(try emulator.push(token, payload: payload).request)).status == 200)
            return try #require(device.next("notification"))
        }
        let listed = try push(#"{"aps":{"alert":"in the app","sound":"default","badge":2}}"#)
        #expect(listed["display"] == "notificationCenter" && listed["callbacks"] == ["willPresent"])
        #expect(listed["presentation"]?["sound"] == "silenced" && listed["presentation"]?["badge"] == .null)
        device.command("background")
        _ = device.next("appUpdated")
        let passive = try push(#"{"aps":{"alert":"fyi","interruption-level":"passive","badge":5}}"#)
        #expect(passive["display"] == "notificationCenter" && passive["presentation"]?["screenLit"] == false)
        #expect(passive["presentation"]?["badge"] == 5)
        let summary: JSONValue = [
            "type": "device", "scheduledSummary": ["times": ["00:00", "12:00"], "apps": .array([.string(EmulatorProcess.bundleID)])],
        ]
        device.command(summary.serialized())
        _ = device.next("deviceUpdated")
        let held = try push(#"{"aps":{"alert":"digest"}}"#)
        #expect(held["display"] == "scheduledSummary" && held["presentation"]?["heldUntil"] != .null)
        let urgent = try push(#"{"aps":{"alert":"now","interruption-level":"time-sensitive"}}"#)
        #expect(urgent["display"] == "banner" && urgent["presentation"]?["effectiveInterruptionLevel"] == "time-sensitive")
        #expect(try emulator.admin("GET", "/api/v1/devices/cli-rules").json["apps"]?.arrayValue?.first?["badge"] == 5)
    }
}
