// LiveActivityConfigTests: the Live Activity and widget budgets as flags, variables and config
// keys; Live Activity declarations in the config file; pushes the device ignored in
// GET /api/v1/checks; the Live Activity and widget families of /metrics; widgets and controls
// pushes to virtual devices. Against the real binary. Imports the harness's modules.
import APNsCore
import Foundation
import ProviderClient
import Testing
import TestSupport

@Suite("Live Activities: budgets, config-file declarations, checks and metrics; widget pushes")
struct LiveActivityConfigTests {
    private static let bundleID = EmulatorProcess.bundleID
    private static let startAPS =
        #"{"event":"start","timestamp":1700000000,"attributes-type":"DeliveryAttributes","attributes":{"order":"42"},"content-state":{"eta":15},"alert":{"title":"On its way"},"input-push-token":1}"#

    private func push(
        _ emulator: EmulatorProcess, token: String, aps: String, type: String = "liveactivity", priority: String = "10"
    ) throws -> APNsPush {
        var push = try emulator.push(token, payload: #"{"aps":\#(aps)}"#, topic: "\(Self.bundleID).push-type.\(type)")
        push.pushType = type
        push.priority = priority
        return push
    }

    private func record(_ emulator: EmulatorProcess, _ result: APNsResult) throws -> JSONObject {
        #expect(result.status == 200)
        return try #require(try emulator.admin("GET", "/api/v1/notifications/\(result.apnsID ?? "")").json.objectValue)
    }

    /// A declared app and one activity started by the app with an update token; returns the token.
    private func startActivity(_ emulator: EmulatorProcess, frequentUpdates: Bool = false) throws -> (deviceID: String, updateToken: String) {
        let (deviceID, _) = try emulator.createDevice()
        let declared = try emulator.admin(
            "PUT", "/api/v1/devices/\(deviceID)/apps/\(Self.bundleID)/live-activities",
            body: ["types": ["DeliveryAttributes"], "frequentUpdates": .bool(frequentUpdates)])
        #expect(declared.status == 200, "\(declared.raw)")
        let started = try emulator.admin(
            "POST", "/api/v1/devices/\(deviceID)/apps/\(Self.bundleID)/activities",
            body: ["attributesType": "DeliveryAttributes", "attributes": ["order": "1"], "contentState": ["eta": 10], "pushToken": true])
        #expect(started.status == 201, "\(started.raw)")
        let listed = try emulator.admin("GET", "/api/v1/devices/\(deviceID)/activities").json
        let token = try #require(listed["activities"]?.arrayValue?.first?["pushToken"]?.stringValue)
        return (deviceID, token)
    }

    private func update(_ n: Int) -> String { #"{"event":"update","timestamp":\#(1_700_000_000 + n),"content-state":{"eta":\#(n)}}"# }

    private func writeConfig(_ text: String) throws -> (path: String, cleanup: () -> Void) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("la-cfg-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/config.json"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return (path, { try? FileManager.default.removeItem(atPath: directory) })
    }

    // MARK: - Budgets

    @Test func theUpdateBudgetFlagThrottlesTheUpdateOverItAndMetricsCountEachOutcome() throws {
        let emulator = try EmulatorProcess(["--live-activity-budget-per-hour", "2"])
        let (_, token) = try startActivity(emulator)
        let connection = try emulator.connect()
        for n in 1...2 {
            let shown = try record(emulator, APNsResult(try connection.send(try push(emulator, token: token, aps: update(n)).request)))
            #expect(shown["outcome"]?.stringValue == "delivered", "\(shown["explanation"] ?? .null)")
        }
        let third = try record(emulator, APNsResult(try connection.send(try push(emulator, token: token, aps: update(3)).request)))
        #expect(third["outcome"]?.stringValue == "throttled")
        let why = third["explanation"]?.stringValue ?? ""
        #expect(why.contains("its 2 priority-10 updates in the last hour"), "\(why)")
        // Priority 5 does not draw on the budget.
        let quiet = try record(
            emulator, APNsResult(try connection.send(try push(emulator, token: token, aps: update(4), priority: "5").request)))
        #expect(quiet["outcome"]?.stringValue == "delivered", "\(quiet["explanation"] ?? .null)")

        #expect(try emulator.metric("apns_emulator_live_activity_pushes_total", labels: #"outcome="delivered""#) == 3)
        #expect(try emulator.metric("apns_emulator_live_activity_pushes_total", labels: #"outcome="throttled""#) == 1)
        #expect(try emulator.metric("apns_emulator_live_activity_pushes_total", labels: #"outcome="ignored""#) == 0)
        #expect(try emulator.metric("apns_emulator_live_activities", labels: #"state="active""#) == 1)
        // A throttled update is not a finding: the device shows it later.
        #expect(try emulator.admin("GET", "/api/v1/checks").json["ok"]?.boolValue == true)
    }

    @Test func theFrequentBudgetComesFromTheEnvironmentAndAppliesOnlyToAppsThatDeclareIt() throws {
        let emulator = try EmulatorProcess(
            [], environment: ["APNS_EMULATOR_LIVE_ACTIVITY_BUDGET_PER_HOUR": "1", "APNS_EMULATOR_LIVE_ACTIVITY_FREQUENT_BUDGET_PER_HOUR": "3"])
        let (_, frequent) = try startActivity(emulator, frequentUpdates: true)
        let connection = try emulator.connect()
        for n in 1...3 {
            let shown = try record(emulator, APNsResult(try connection.send(try push(emulator, token: frequent, aps: update(n)).request)))
            #expect(shown["outcome"]?.stringValue == "delivered", "\(shown["explanation"] ?? .null)")
        }
        let over = try record(emulator, APNsResult(try connection.send(try push(emulator, token: frequent, aps: update(4)).request)))
        #expect(over["outcome"]?.stringValue == "throttled")
        #expect(over["explanation"]?.stringValue?.contains("its 3 priority-10 updates in the last hour (frequent updates on)") == true)

        let (_, ordinary) = try startActivity(emulator, frequentUpdates: false)
        #expect(
            try record(emulator, APNsResult(try connection.send(try push(emulator, token: ordinary, aps: update(1)).request)))["outcome"]?.stringValue
                == "delivered")
        let second = try record(emulator, APNsResult(try connection.send(try push(emulator, token: ordinary, aps: update(2)).request)))
        #expect(second["outcome"]?.stringValue == "throttled")
        #expect(second["explanation"]?.stringValue?.contains("its 1 priority-10 updates") == true, "\(second["explanation"] ?? .null)")
    }

    @Test func aBudgetOfZeroThrottlesEveryPriority10Update() throws {
        let emulator = try EmulatorProcess(["--live-activity-budget-per-hour", "0", "--live-activity-frequent-budget-per-hour", "0"])
        let (_, token) = try startActivity(emulator)
        let connection = try emulator.connect()
        let throttled = try record(emulator, APNsResult(try connection.send(try push(emulator, token: token, aps: update(1)).request)))
        #expect(throttled["outcome"]?.stringValue == "throttled")
        let why = throttled["explanation"]?.stringValue ?? ""
        #expect(why.contains("a budget of 0 an hour") && why.contains("never shown"), "\(why)")
        let quiet = try record(
            emulator, APNsResult(try connection.send(try push(emulator, token: token, aps: update(2), priority: "5").request)))
        #expect(quiet["outcome"]?.stringValue == "delivered")
    }

    @Test(arguments: [
        (["--live-activity-budget-per-hour", "-1"], "--live-activity-budget-per-hour: '-1' is not a whole number from 0 to 100000"),
        (["--live-activity-budget-per-hour", "many"], "'many' is not a whole number"),
        (["--widget-push-budget-per-day", "100001"], "--widget-push-budget-per-day: '100001' is not a whole number from 0 to 100000"),
        (
            ["--live-activity-budget-per-hour", "30", "--live-activity-frequent-budget-per-hour", "20"],
            "--live-activity-frequent-budget-per-hour: 20 is below the budget without frequent updates (30"
        ),
    ])
    func badBudgetsStopTheStartWithAClearMessage(arguments: [String], expected: String) throws {
        let result = try run(EmulatorProcess.binary, ["serve", "--quiet", "--admin-listen", "off"] + arguments)
        #expect(result.status != 0)
        #expect(result.err.contains(expected), "\(result.err)")
    }

    // MARK: - Config file

    @Test func configFileDevicesDeclareLiveActivitiesWithPushToStartTokensThatSurviveAReset() throws {
        let (path, cleanup) = try writeConfig(
            #"""
            {"liveActivityBudgetPerHour": 1,
             "devices": [{"deviceId": "la-phone", "apps": [
               {"bundleId": "com.example.app", "environment": "sandbox", "liveActivityTypes": ["DeliveryAttributes", "GameAttributes"], "frequentUpdates": true},
               {"bundleId": "com.example.app", "environment": "sandbox", "kind": "widgets"}]}]}
            """#)
        defer { cleanup() }
        let emulator = try EmulatorProcess(["--config", path])
        func declaration() throws -> JSONValue {
            let listed = try emulator.admin("GET", "/api/v1/devices/la-phone/activities")
            #expect(listed.status == 200, "\(listed.raw)")
            return try #require(listed.json["apps"]?.arrayValue?.first)
        }
        let app = try declaration()
        #expect(app["bundleId"]?.stringValue == Self.bundleID)
        #expect(app["frequentUpdates"]?.boolValue == true)
        #expect(app["types"]?.arrayValue?.compactMap(\.stringValue) == ["DeliveryAttributes", "GameAttributes"])
        let startToken = try #require(app["pushToStartTokens"]?["DeliveryAttributes"]?.stringValue)
        #expect(app["pushToStartTokens"]?["GameAttributes"]?.stringValue != nil)

        let started = try record(emulator, APNsResult(try emulator.connect().send(try push(emulator, token: startToken, aps: Self.startAPS).request)))
        #expect(started["outcome"]?.stringValue == "delivered", "\(started["explanation"] ?? .null)")
        #expect(started["deviceId"]?.stringValue == "la-phone")
        #expect(try emulator.admin("GET", "/api/v1/devices/la-phone/activities").json["activities"]?.arrayValue?.count == 1)

        // The declarations are part of the start state: a reset brings them back, activities gone.
        #expect(try emulator.admin("POST", "/api/v1/reset").status == 200)
        #expect(try declaration()["pushToStartTokens"]?["DeliveryAttributes"]?.stringValue == startToken)
        #expect(try emulator.admin("GET", "/api/v1/devices/la-phone/activities").json["activities"]?.arrayValue?.isEmpty == true)
    }

    @Test(arguments: [
        (
            #"{"bundleId": "com.example.app", "environment": "sandbox", "liveActivityTypes": "DeliveryAttributes"}"#,
            "apps[0].liveActivityTypes: must be a list"
        ),
        (
            #"{"bundleId": "com.example.app", "environment": "sandbox", "liveActivityTypes": []}"#,
            "apps[0].liveActivityTypes: must be a list of 1 to 100"
        ),
        (
            #"{"bundleId": "com.example.app", "environment": "sandbox", "liveActivityTypes": ["Delivery Attributes"]}"#,
            "apps[0].liveActivityTypes: 'Delivery Attributes' is not an ActivityAttributes type name"
        ),
        (
            #"{"bundleId": "com.example.app", "environment": "sandbox", "liveActivityTypes": ["A", 7]}"#,
            "apps[0].liveActivityTypes[1]: 7 is not a type name"
        ),
        (
            #"{"bundleId": "com.example.app", "environment": "sandbox", "liveActivityTypes": ["A"], "frequentUpdates": "yes"}"#,
            "apps[0].frequentUpdates: must be true or false"
        ),
        (
            #"{"bundleId": "com.example.app", "environment": "sandbox", "frequentUpdates": true}"#,
            "apps[0].frequentUpdates: needs \"liveActivityTypes\""
        ),
        (#"{"bundleId": "com.example.app", "environment": "sandbox", "liveActivityType": ["A"]}"#, "apps[0]: unknown key \"liveActivityType\""),
    ])
    func badLiveActivityKeysInTheConfigFileNameWhereTheyAre(app: String, expected: String) throws {
        let (path, cleanup) = try writeConfig(#"{"devices": [{"deviceId": "la-phone", "apps": [\#(app)]}]}"#)
        defer { cleanup() }
        let result = try run(EmulatorProcess.binary, ["serve", "--quiet", "--admin-listen", "off", "--config", path])
        #expect(result.status != 0)
        #expect(result.err.contains("device la-phone in \(path): \(expected)"), "\(result.err)")
    }

    // MARK: - Checks

    @Test func aStartTheDeviceIgnoredIsAFindingAndFailsStrictChecks() throws {
        let emulator = try EmulatorProcess()
        let (deviceID, _) = try emulator.createDevice()
        let declared = try emulator.admin(
            "PUT", "/api/v1/devices/\(deviceID)/apps/\(Self.bundleID)/live-activities", body: ["types": ["DeliveryAttributes"]])
        let startToken = try #require(declared.json["pushToStartTokens"]?["DeliveryAttributes"]?.stringValue)
        #expect(try emulator.admin("GET", "/api/v1/checks?strict=true").status == 200, "nothing ignored yet")

        let undeclared = Self.startAPS.replacingOccurrences(
            of: #""attributes-type":"DeliveryAttributes""#, with: #""attributes-type":"PizzaAttributes""#)
        let ignored = try record(emulator, APNsResult(try emulator.connect().send(try push(emulator, token: startToken, aps: undeclared).request)))
        #expect(ignored["outcome"]?.stringValue == "ignored")

        let checks = try emulator.admin("GET", "/api/v1/checks")
        #expect(checks.status == 200)
        #expect(checks.json["ok"]?.boolValue == false)
        #expect(checks.json["ignoredPushes"]?.intValue == 1)
        #expect(checks.json["crossAccountDeliveries"]?.intValue == 0)
        let finding = try #require(checks.json["failures"]?.arrayValue?.first)
        #expect(finding["check"]?.stringValue == "ignoredPush")
        #expect(finding["apnsId"]?.stringValue == ignored["apnsId"]?.stringValue)
        #expect(finding["sequence"]?.intValue == ignored["sequence"]?.intValue)
        #expect(finding["deviceId"]?.stringValue == deviceID)
        #expect(finding["pushType"]?.stringValue == "liveactivity")
        #expect(finding["message"]?.stringValue?.contains("PizzaAttributes is not declared") == true, "\(finding["message"] ?? .null)")
        #expect(try emulator.admin("GET", "/api/v1/checks?strict=true").status == 409)
        #expect(try emulator.metric("apns_emulator_live_activity_pushes_total", labels: #"outcome="ignored""#) == 1)

        // A reset clears the findings.
        #expect(try emulator.admin("POST", "/api/v1/reset").status == 200)
        #expect(try emulator.admin("GET", "/api/v1/checks?strict=true").json["ignoredPushes"]?.intValue == 0)
    }

    @Test func strictChecksFromTheFlagAnswer409ForAnIgnoredUpdate() throws {
        let emulator = try EmulatorProcess(["--strict-checks"])
        let (deviceID, token) = try startActivity(emulator)
        let connection = try emulator.connect()
        #expect(
            try record(emulator, APNsResult(try connection.send(try push(emulator, token: token, aps: update(5)).request)))["outcome"]?.stringValue
                == "delivered")
        let older = try record(emulator, APNsResult(try connection.send(try push(emulator, token: token, aps: update(1)).request)))
        #expect(older["outcome"]?.stringValue == "ignored")
        let checks = try emulator.admin("GET", "/api/v1/checks")
        #expect(checks.status == 409)
        #expect(checks.json["strict"]?.boolValue == true)
        #expect(checks.json["failures"]?.arrayValue?.first?["message"]?.stringValue?.contains("older") == true)

        // The activities gauge follows the states.
        let activityID = try #require(
            try emulator.admin("GET", "/api/v1/devices/\(deviceID)/activities").json["activities"]?.arrayValue?.first?["activityId"]?.stringValue)
        #expect(try emulator.admin("DELETE", "/api/v1/devices/\(deviceID)/activities/\(activityID)").status == 200)
        #expect(try emulator.metric("apns_emulator_live_activities", labels: #"state="active""#) == 0)
        #expect(try emulator.metric("apns_emulator_live_activities", labels: #"state="dismissed""#) == 1)
    }

    // MARK: - Widgets and controls

    @Test(arguments: ["widgets", "controls"])
    func aWidgetPushReloadsWithinTheDailyBudgetAndOneWithoutContentChangedIsIgnored(kind: String) throws {
        let (path, cleanup) = try writeConfig(#"{"widgetPushBudgetPerDay": 1}"#)
        defer { cleanup() }
        let emulator = try EmulatorProcess(["--config", path])
        let (_, token) = try emulator.createDevice(kind: kind)
        let connection = try emulator.connect()
        let reload = #"{"content-changed":true}"#

        let first = try record(emulator, APNsResult(try connection.send(try push(emulator, token: token, aps: reload, type: kind).request)))
        #expect(first["outcome"]?.stringValue == "delivered", "\(first["explanation"] ?? .null)")
        #expect(first["explanation"]?.stringValue?.contains("timelines reload") == true, "\(first["explanation"] ?? .null)")
        let second = try record(emulator, APNsResult(try connection.send(try push(emulator, token: token, aps: reload, type: kind).request)))
        #expect(second["outcome"]?.stringValue == "throttled")
        #expect(
            second["explanation"]?.stringValue?.contains("has had its 1 \(kind) pushes in the last day") == true, "\(second["explanation"] ?? .null)")
        let empty = try record(emulator, APNsResult(try connection.send(try push(emulator, token: token, aps: "{}", type: kind).request)))
        #expect(empty["outcome"]?.stringValue == "ignored")
        #expect(empty["explanation"]?.stringValue?.contains(#"without "content-changed": true"#) == true, "\(empty["explanation"] ?? .null)")

        let checks = try emulator.admin("GET", "/api/v1/checks").json
        #expect(checks["ignoredPushes"]?.intValue == 1)
        #expect(checks["failures"]?.arrayValue?.first?["pushType"]?.stringValue == kind)
        for (outcome, count) in [("delivered", 1.0), ("throttled", 1), ("ignored", 1)] {
            #expect(try emulator.metric("apns_emulator_widget_pushes_total", labels: #"kind="\#(kind)",outcome="\#(outcome)""#) == count)
        }
        #expect(try emulator.metric("apns_emulator_live_activity_pushes_total") == 0, "widget pushes are not Live Activity pushes")

        // A day later the budget allows the reload that waited: the throttled push says so.
        #expect(try emulator.admin("POST", "/api/v1/clock", body: ["advanceSeconds": 86_460]).status == 200)
        let reloaded = try eventually(5) {
            try emulator.admin("GET", "/api/v1/notifications/\(second["apnsId"]!.stringValue!)").json["outcome"]?.stringValue == "delivered"
        }
        let after = try emulator.admin("GET", "/api/v1/notifications/\(second["apnsId"]!.stringValue!)").json
        #expect(reloaded, "\(after)")
        #expect(after["explanation"]?.stringValue?.contains("when the budget allowed (it was throttled)") == true, "\(after)")
        #expect(try emulator.metric("apns_emulator_widget_pushes_total", labels: #"kind="\#(kind)",outcome="delivered""#) == 2)
    }
}
