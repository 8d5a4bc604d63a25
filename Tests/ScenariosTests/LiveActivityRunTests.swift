import APNsCore
import Foundation
import Scenarios
import Testing

/// Live Activity and channel steps run against an in-process emulator: declared types,
/// activities started by the app and by push, token pushes, the clock making them stale and
/// taking them off the screen, channels made over the channel management API, broadcasts.
@Suite("Scenarios: Live Activities and broadcast channels")
struct LiveActivityRunTests {
    /// Runs `steps` after a device step on `target` (started here unless given).
    func run(_ steps: String, on target: EmulatorTarget? = nil) throws -> ScenarioReport {
        let text =
            #"{"name": "live", "steps": [{"do": "device", "alias": "phone"}, {"do": "declareActivities", "types": ["DeliveryAttributes"]}, \#(steps)]}"#
        let scenario = try ScenarioParser.parse(Array(text.utf8), variables: [:])
        guard let target else { return ScenarioRunner.run(scenario) }
        return ScenarioRunner.run(scenario, on: target)
    }

    func text(_ report: ScenarioReport) -> String {
        let printer = ReportPrinter(ascii: true)
        return (report.steps.map(printer.step) + [printer.footer(report)]).joined(separator: "\n")
    }

    static let update = #"{"aps": {"event": "update", "timestamp": 2, "content-state": {"eta": 20}}}"#

    @Test func anActivityTheAppStartsIsUpdatedByTokenGoesStaleEndsAndLeaves() throws {
        let report = try run(
            #"""
            {"do": "startActivity", "activity": "order", "attributesType": "DeliveryAttributes", "attributes": {"orderId": "42"},
             "contentState": {"eta": 30, "status": "preparing"}},
            {"do": "expect", "activity": {"name": "order", "state": "active", "startedBy": "app", "updates": 0, "contentState": {"eta": 30}}},
            {"do": "push", "token": "${activity.order.pushToken}", "pushType": "liveactivity", "staleIn": 30, "payload": \#(Self.update)},
            {"do": "waitFor", "delivery": {"apnsId": "${lastPush.apnsId}", "pushType": "liveactivity"}, "timeoutMs": 5000},
            {"do": "expect", "activity": {"name": "order", "state": "active", "updates": 1, "contentState": {"eta": 20.0}}},
            {"do": "advanceClock", "seconds": 31},
            {"do": "waitFor", "activity": {"name": "order", "state": "stale"}, "timeoutMs": 2000},
            {"do": "push", "activity": "order", "dismissIn": 60, "payload": {"aps": {"event": "end", "timestamp": 3}}},
            {"do": "expect", "activity": {"name": "order", "state": "ended", "contentState": {"eta": 20}}},
            {"do": "advanceClock", "seconds": 61},
            {"do": "expect", "activity": {"name": "order", "state": "dismissed"}}
            """#)
        #expect(report.passed, "\(text(report))")
        #expect(report.steps.count == 13)
        // The token push went to the app's liveactivity topic (the default with that push type).
        #expect(report.steps[5].note?.contains("1 found") == true, "\(text(report))")
    }

    @Test func aPushToStartNamesTheActivityItStarts() throws {
        let target = try EmulatorTarget.inProcess(bundleIDs: ["com.example.app"])
        defer { target.stop() }
        let report = try run(
            #"""
            {"do": "push", "pushToStart": "DeliveryAttributes", "startsActivity": "order",
             "payload": {"aps": {"event": "start", "timestamp": 1, "attributes-type": "DeliveryAttributes", "attributes": {"orderId": "7"},
                                 "content-state": {"eta": 9}, "alert": "Order 7", "input-push-token": 1}}},
            {"do": "expect", "activity": {"name": "order", "startedBy": "push", "contentState": {"eta": 9}}},
            {"do": "push", "activity": "order", "priority": 5, "payload": \#(Self.update)},
            {"do": "waitFor", "activity": {"name": "order", "contentState": {"eta": 20}, "updates": 1}, "timeoutMs": 2000},
            {"do": "dismissActivity", "activity": "order"},
            {"do": "expect", "activity": {"name": "order", "state": "dismissed"}}
            """#, on: target)
        #expect(report.passed, "\(text(report))")
        #expect(report.steps[2].note?.hasPrefix("→ 200, started activity order (") == true, "\(report.steps[2].note ?? "")")
        let activities = try target.api.activities(deviceID: "phone")
        #expect(activities.count == 1 && activities.first?.state == "dismissed" && activities.first?.attributes["orderId"] == "7")
    }

    @Test func aStartTheDeviceDropsFailsTheStepWithTheRecordsExplanation() throws {
        let report = try run(
            #"""
            {"do": "push", "pushToStart": "DeliveryAttributes", "startsActivity": "order",
             "payload": {"aps": {"event": "start", "timestamp": 1, "attributes-type": "DeliveryAttributes", "attributes": {},
                                 "content-state": "eta 9", "alert": "x"}}}
            """#)
        let failed = try #require(report.failedStep)
        #expect(failed.index == 3)
        #expect(failed.failure == "the push started no DeliveryAttributes activity on phone")
        #expect(failed.seen?.hasPrefix("outcome ignored: ") == true && failed.seen?.contains("content-state") == true, "\(failed.seen ?? "")")
    }

    @Test func anActivityNotAsExpectedSaysWhatItIs() throws {
        let report = try run(
            #"""
            {"do": "startActivity", "activity": "order", "attributesType": "DeliveryAttributes", "contentState": {"eta": 30}},
            {"do": "waitFor", "activity": {"name": "order", "contentState": {"eta": 5}}, "timeoutMs": 200},
            {"do": "expect", "activity": {"name": "order", "state": "ended"}}
            """#)
        let failed = try #require(report.failedStep)
        #expect(failed.index == 4)
        #expect(failed.failure == "activity order was not as described within 200 ms")
        #expect(failed.expected == #"activity order with contentState {"eta":5} (at least)"#)
        #expect(
            failed.seen?.contains(#"DeliveryAttributes "#) == true && failed.seen?.contains(#"active, contentState {"eta":30}, updates 0"#) == true)

        let expectReport = try run(
            #"""
            {"do": "startActivity", "activity": "order", "attributesType": "DeliveryAttributes", "contentState": {"eta": 30}},
            {"do": "expect", "activity": {"name": "order", "state": "ended", "updates": 2, "contentState": {"eta": 30}}}
            """#)
        let wrong = try #require(expectReport.failedStep)
        #expect(wrong.failure == "activity order is not as expected")
        #expect(wrong.expected == "state ended, updates 2")
    }

    @Test func theAppEndsItsActivityWithFinalContentAndADismissalDate() throws {
        let report = try run(
            #"""
            {"do": "startActivity", "activity": "order", "attributesType": "DeliveryAttributes", "contentState": {"eta": 30}},
            {"do": "endActivity", "activity": "order", "contentState": {"eta": 0}, "dismissIn": 60},
            {"do": "expect", "activity": {"name": "order", "state": "ended", "contentState": {"eta": 0}}},
            {"do": "advanceClock", "seconds": 61},
            {"do": "expect", "activity": {"name": "order", "state": "dismissed"}},
            {"do": "endActivity", "activity": "order"}
            """#)
        let failed = try #require(report.failedStep, "\(text(report))")
        #expect(failed.index == 8, "\(text(report))")
        #expect(failed.failure?.hasPrefix("ending activity order on phone: the emulator answered 409") == true, "\(failed.failure ?? "")")
    }

    @Test func theAppRefusingAStartFailsTheStepWithTheEmulatorsWords() throws {
        let report = try run(#"{"do": "startActivity", "activity": "order", "attributesType": "PizzaAttributes"}"#)
        let failed = try #require(report.failedStep)
        #expect(failed.failure?.hasPrefix("starting a PizzaAttributes activity of com.example.app on phone: the emulator answered 400") == true)
        #expect(failed.failure?.contains("PizzaAttributes") == true)
    }

    @Test func aChannelIsMadeOverTheManagementAPIAndTakesBroadcasts() throws {
        let target = try EmulatorTarget.inProcess(bundleIDs: ["com.example.app"])
        defer { target.stop() }
        let report = try run(
            #"""
            {"do": "createChannel", "channel": "run7", "messageStoragePolicy": 0},
            {"do": "startActivity", "activity": "map", "attributesType": "DeliveryAttributes", "channel": "run7", "contentState": {"stops": 3}},
            {"do": "expect", "activity": {"name": "map", "state": "active"}},
            {"do": "broadcast", "channel": "run7", "payload": {"aps": {"event": "update", "timestamp": 5, "content-state": {"stops": 1}}},
             "save": {"request": "${lastBroadcast.requestId}"}},
            {"do": "broadcast", "channelId": "bm90LWEtY2hhbm5lbA==", "payload": {"aps": {"event": "update", "timestamp": 6}},
             "expect": {"status": 400, "reason": "ChannelNotRegistered"}},
            {"do": "createChannel", "channel": "refused", "messageStoragePolicy": 7, "expect": {"status": 400}}
            """#, on: target)
        #expect(report.passed, "\(text(report))")
        let channels = try target.api.channels(bundleID: "com.example.app")
        #expect(channels.count == 1 && channels.first?.messageStoragePolicy == 0 && channels.first?.broadcasts == 1)
        let activity = try #require(try target.api.activities(deviceID: "phone").first)
        #expect(activity.channel == channels.first?.id && activity.pushToken == nil)
        #expect(report.steps[6].note?.hasPrefix("→ 400 ChannelNotRegistered, apns-request-id ") == true, "\(report.steps[6].note ?? "")")
    }

    /// A broadcast reaches the activities subscribed to its channel: their content becomes the
    /// broadcast's content-state.
    @Test func aBroadcastUpdatesTheSubscribedActivity() throws {
        let report = try run(
            #"""
            {"do": "createChannel", "channel": "run7"},
            {"do": "push", "pushToStart": "DeliveryAttributes", "startsActivity": "run",
             "payload": {"aps": {"event": "start", "timestamp": 1, "attributes-type": "DeliveryAttributes", "attributes": {},
                                 "content-state": {"stops": 3}, "alert": "x", "input-push-channel": "${channel.run7.id}"}}},
            {"do": "broadcast", "channel": "run7", "payload": {"aps": {"event": "update", "timestamp": 5, "content-state": {"stops": 1}}}},
            {"do": "waitFor", "activity": {"name": "run", "state": "active", "contentState": {"stops": 1}, "updates": 1}, "timeoutMs": 3000}
            """#)
        #expect(report.passed, "\(text(report))")
    }
}
