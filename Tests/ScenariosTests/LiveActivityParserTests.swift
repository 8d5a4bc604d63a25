import APNsCore
import Foundation
import Scenarios
import Testing

/// The file check of the Live Activity and channel steps: names made before they are used,
/// one way to take updates, dates that need a payload to go into, clear words for each.
@Suite("Scenario files: Live Activity and channel steps")
struct LiveActivityParserTests {
    func parse(_ steps: String) throws(ScenarioFileError) -> Scenario {
        try ScenarioParser.parse(Array(#"{"name": "t", "steps": [{"do": "device", "alias": "phone"}, \#(steps)]}"#.utf8), variables: [:])
    }

    /// The error for `steps` (after a device step), or a test failure when they parse.
    func error(_ steps: String) -> ScenarioFileError? {
        do {
            _ = try parse(steps)
            Issue.record("expected an error for \(steps)")
            return nil
        } catch {
            return error
        }
    }

    static let start =
        #"{"event": "start", "timestamp": 1, "attributes-type": "DeliveryAttributes", "attributes": {}, "content-state": {}, "alert": "x"}"#

    @Test func theWholeLifeOfAnActivityParses() throws {
        let scenario = try parse(
            #"""
            {"do": "declareActivities", "types": ["DeliveryAttributes"], "frequentUpdates": true},
            {"do": "createChannel", "channel": "run7", "messageStoragePolicy": 0},
            {"do": "push", "pushToStart": "DeliveryAttributes", "startsActivity": "order", "payload": {"aps": \#(Self.start)}},
            {"do": "startActivity", "activity": "map", "attributesType": "DeliveryAttributes", "channel": "run7",
             "contentState": {"eta": 5}},
            {"do": "push", "activity": "order", "staleIn": 60, "payload": {"aps": {"event": "update", "timestamp": 2, "content-state": {"eta": 3}}},
             "save": {"t": "${activity.order.pushToken}", "c": "${channel.run7.id}", "p": "${device.phone.pushToStart.DeliveryAttributes}"}},
            {"do": "push", "token": "${t}", "pushType": "liveactivity", "dismissIn": 0, "payload": {"aps": {"event": "end", "timestamp": 3}}},
            {"do": "broadcast", "channel": "run7", "payload": {"aps": {"event": "update", "timestamp": 4, "content-state": {"eta": 1}}},
             "save": {"r": "${lastBroadcast.requestId}"}},
            {"do": "waitFor", "activity": {"name": "map", "state": "active", "contentState": {"eta": 1}, "updates": 1}, "timeoutMs": 100},
            {"do": "expect", "activity": {"name": "order", "state": "dismissed", "startedBy": "push", "attributesType": "DeliveryAttributes"}},
            {"do": "dismissActivity", "activity": "map"}
            """#)
        #expect(
            scenario.steps.map(\.kind) == [
                .device, .declareActivities, .createChannel, .push, .startActivity, .push, .push, .broadcast, .waitFor, .expect,
                .dismissActivity,
            ])
        // Steps on the one device act on it; the pushes to an activity or a token need no device.
        #expect(scenario.steps[1].deviceAlias == "phone" && scenario.steps[3].deviceAlias == "phone")
        #expect(scenario.steps[5].deviceAlias == nil && scenario.steps[6].deviceAlias == nil)
        #expect(scenario.steps[1].label == "declareActivities DeliveryAttributes on phone")
        #expect(scenario.steps[3].label == "push liveactivity start to phone's push-to-start token (DeliveryAttributes)")
        #expect(scenario.steps[4].label == "startActivity map (DeliveryAttributes) on channel run7 on phone")
        #expect(scenario.steps[5].label == "push liveactivity update to activity order")
        #expect(scenario.steps[7].label == "broadcast update on run7")
        #expect(scenario.steps[8].label == "waitFor activity map {state active, contentState {\"eta\":1}, updates 1}")
    }

    @Test(arguments: [
        (#"{"do": "push", "activity": "order"}"#, "activity", "no activity \"order\" exists at this point"),
        (#"{"do": "dismissActivity", "activity": "order"}"#, "activity", "no activity \"order\" exists at this point"),
        (#"{"do": "endActivity", "activity": "order", "dismissIn": 5}"#, "activity", "no activity \"order\" exists at this point"),
        (#"{"do": "expect", "activity": {"name": "order", "state": "active"}}"#, "activity.name", "no activity \"order\""),
        (#"{"do": "expect", "activity": {"state": "active"}}"#, "activity.name", "is required"),
        (#"{"do": "broadcast", "channel": "run7", "payload": {"aps": {}}}"#, "channel", "no channel \"run7\" exists at this point"),
        (#"{"do": "startActivity", "activity": "a", "attributesType": "T", "channel": "run7"}"#, "channel", "no channel \"run7\""),
        (#"{"do": "push", "payload": {"aps": {}}, "save": {"x": "${activity.order.pushToken}"}}"#, "save.x", "no activity \"order\""),
        (#"{"do": "push", "token": "${channel.run7.id}"}"#, "token", "no channel \"run7\" exists at this point"),
        (#"{"do": "push", "token": "${device.phone.pushToStart}"}"#, "token", "a device has token, id"),
        (#"{"do": "push", "token": "${activity.order.tokn}"}"#, "token", "FIELD: id, pushToken, channel, state"),
        (#"{"do": "push", "token": "${lastBroadcast.requestId}"}"#, "token", "no broadcast step comes before this one"),
    ])
    func aNameUsedBeforeItIsMadeIsAFileError(step: String, field: String, message: String) {
        let found = error(step)
        #expect(found?.field == field, "\(found?.description ?? "parsed")")
        #expect(found?.message.contains(message) == true, "\(found?.description ?? "parsed")")
    }

    @Test(arguments: [
        (#"{"do": "push", "startsActivity": "a", "payload": {"aps": {}}}"#, "startsActivity", "goes with pushToStart"),
        (#"{"do": "push", "token": "ab", "pushToStart": "T"}"#, "pushToStart", "goes with device"),
        (#"{"do": "push", "token": "ab", "device": "phone"}"#, "token", "give one of device, token and activity"),
        (#"{"do": "push", "staleIn": 60}"#, "staleIn", "give a \"payload\" object with an \"aps\" object"),
        (#"{"do": "push", "dismissIn": 60, "payload": "{\"aps\":{}}"}"#, "dismissIn", "\"payload\" object"),
        (#"{"do": "push", "staleIn": 1e12, "payload": {"aps": {}}}"#, "staleIn", "up to 400 days"),
        (#"{"do": "declareActivities"}"#, "types", "is required"),
        (#"{"do": "declareActivities", "types": ["A", 3]}"#, "types", "an array of ActivityAttributes type names"),
        (#"{"do": "startActivity", "activity": "a"}"#, "attributesType", "is required"),
        (#"{"do": "startActivity", "activity": "a.b", "attributesType": "T"}"#, "activity", "a name is a plain name"),
        (
            #"{"do": "startActivity", "activity": "a", "attributesType": "T", "pushToken": true, "channelId": "x"}"#, "channelId",
            "give one of pushToken, channel and channelId"
        ),
        (#"{"do": "createChannel", "channel": "c", "messageStoragePolicy": 12}"#, "messageStoragePolicy", "from 0 to 9"),
        (#"{"do": "createChannel", "channel": "c", "environment": "staging"}"#, "environment", "is not one of sandbox, production"),
        (#"{"do": "broadcast", "payload": {"aps": {}}}"#, nil, "give exactly one of \"channel\""),
        (#"{"do": "broadcast", "channelId": "x"}"#, "payload", "is required"),
        (#"{"do": "waitFor", "activity": {"name": "a"}, "delivery": {}}"#, nil, "give exactly one of"),
        (#"{"do": "expectNone", "activity": {"name": "a"}}"#, "activity", "is not a field of this step"),
    ])
    func aStepThatCannotWorkSaysWhy(step: String, field: String?, message: String) {
        let found = error(step)
        #expect(found?.field == field, "\(found?.description ?? "parsed")")
        #expect(found?.message.contains(message) == true, "\(found?.description ?? "parsed")")
    }

    @Test func namedThingsAreCheckedAgainstWhatTheyMean() {
        let made = #"{"do": "startActivity", "activity": "a", "attributesType": "T"},"#
        var found = error(made + #"{"do": "expect", "activity": {"name": "a", "state": "gone"}}"#)
        #expect(found?.field == "activity.state")
        #expect(found?.message == "\"gone\" is not one of active, stale, ended, dismissed")
        found = error(made + #"{"do": "expect", "activity": {"name": "a", "startedBy": "user"}}"#)
        #expect(found?.message == "\"user\" is not one of app, push")
        found = error(made + #"{"do": "waitFor", "activity": {"name": "a"}, "count": 2}"#)
        #expect(found?.field == "count" && found?.message.contains("goes with delivery or backendCall") == true)
        found = error(made + #"{"do": "expect", "activity": {"name": "a"}, "device": "phone"}"#)
        #expect(found?.field == "device" && found?.message.contains("does not go with \"activity\"") == true)
        found = error(made + #"{"do": "expect", "activity": {"name": "a", "contentState": 5}}"#)
        #expect(found?.field == "activity.contentState" && found?.message == "must be an object")
        found = error(made + #"{"do": "startActivity", "activity": "a", "attributesType": "T"}"#)
        #expect(found?.location == "step 3 (startActivity)" && found?.message == "an activity \"a\" exists already (give this one another name)")
        found = error(#"{"do": "createChannel", "channel": "c"}, {"do": "createChannel", "channel": "c"}"#)
        #expect(found?.message == "a channel \"c\" exists already (give this one another name)")
    }
}

/// `state` is a word of each criteria kind: an app's run state, a backend call's, an activity's.
@Suite("Scenario files: enumerated fields in criteria")
struct CriteriaChoiceTests {
    @Test func aBackendCallsStateIsOneOfItsOwn() throws {
        let good = #"{"name": "t", "steps": [{"do": "waitFor", "backendCall": {"hook": "bind", "state": "done"}}]}"#
        #expect(try ScenarioParser.parse(Array(good.utf8), variables: [:]).steps.count == 1)
        let bad = #"{"name": "t", "steps": [{"do": "waitFor", "backendCall": {"hook": "bind", "state": "active"}}]}"#
        #expect {
            try ScenarioParser.parse(Array(bad.utf8), variables: [:])
        } throws: { error in
            (error as? ScenarioFileError)?.description
                == #"step 1 (waitFor), field "backendCall.state": "active" is not one of pending, retrying, done, failed, dropped"#
        }
    }
}
