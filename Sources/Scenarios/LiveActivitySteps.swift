import APNsCore
import AdminClient
import Foundation

/// Live Activity steps on a virtual device: the app declares its ActivityAttributes types
/// (each gets a push-to-start token), starts and ends an activity itself, the user dismisses
/// one; and the activity expectations (`expect` now, `waitFor` until it holds).
extension StepRunner {
    func declareActivities() throws(StepFailure) -> String? {
        let (ref, bundle) = (try context.device(alias), try bundleID())
        let types = (fields["types"]?.arrayValue ?? []).compactMap { ScenarioParser.scalarText($0) }
        let frequent = try fields.bool("frequentUpdates") ?? false
        let tokens = try admin("declaring the Live Activities of \(bundle) on \(ref.deviceID)") { () throws(EmulatorAdminError) in
            try api.declareLiveActivities(deviceID: ref.deviceID, bundleID: bundle, types: types, frequentUpdates: frequent)
        }
        return types.isEmpty ? "no types" : types.map { "\($0) push-to-start \(short(tokens[$0]))" }.joined(separator: ", ")
    }

    /// `Activity.request` in the app: token push by default, a channel when one is named.
    func startActivity() throws(StepFailure) -> String? {
        let (alias, bundle) = (try alias, try bundleID())
        let ref = try context.device(alias)
        let name = try fields.requiredString("activity")
        let type = try fields.requiredString("attributesType")
        let updates: ActivityUpdates
        if let channel = fields.string("channel") {
            updates = .channel(try context.channel(channel).id)
        } else if let id = fields.string("channelId") {
            updates = .channel(id)
        } else {
            updates = try fields.bool("pushToken") == false ? .none : .token
        }
        let attributes = fields["attributes"] ?? .object(JSONObject())
        let contentState = fields["contentState"] ?? .object(JSONObject())
        let started = try admin("starting a \(type) activity of \(bundle) on \(ref.deviceID)") { () throws(EmulatorAdminError) in
            try api.startActivity(
                deviceID: ref.deviceID, bundleID: bundle, attributesType: type, attributes: attributes, contentState: contentState,
                updates: updates)
        }
        context.activities[name] = RunContext.ActivityRef(deviceAlias: alias, deviceID: ref.deviceID, activityID: started.activityID)
        let how = started.channel.map { "on channel \(short($0))" } ?? started.pushToken.map { "update token \(short($0))" } ?? "no server updates"
        return "\(name) is \(short(started.activityID)), \(how)"
    }

    /// `Activity.end` in the app: final content, and when it leaves the Lock Screen.
    func endActivity() throws(StepFailure) -> String? {
        let name = try fields.requiredString("activity")
        let ref = try context.activity(name)
        var dismissal: Double?
        if let seconds = try fields.int("dismissIn") { dismissal = Double(try context.emulatorNow() / 1000 + Int64(seconds)) }
        let contentState = fields["contentState"]
        let ended = try admin("ending activity \(name) on \(ref.deviceID)") { () throws(EmulatorAdminError) in
            try api.endActivity(deviceID: ref.deviceID, activityID: ref.activityID, contentState: contentState, dismissalDate: dismissal)
        }
        return ActivityCriteria.describe(ended)
    }

    /// The user swipes the activity away.
    func dismissActivity() throws(StepFailure) -> String? {
        let name = try fields.requiredString("activity")
        let ref = try context.activity(name)
        try admin("dismissing activity \(name) on \(ref.deviceID)") { () throws(EmulatorAdminError) in
            try api.dismissActivity(deviceID: ref.deviceID, activityID: ref.activityID)
        }
        return nil
    }

    /// `expect` with `activity`: as described now.
    func expectActivity() throws(StepFailure) -> String? {
        guard let criteria = fields.nested("activity") else { throw StepFailure("\"activity\" is required") }
        let wanted = try ActivityCriteria(criteria)
        let info = try context.activityInfo(wanted.name)
        let wrong = wanted.mismatches(info)
        guard wrong.isEmpty else {
            throw StepFailure(
                "activity \(wanted.name) is not as expected", expected: wrong.map(\.expected).joined(separator: ", "),
                seen: ActivityCriteria.describe(info))
        }
        return ActivityCriteria.describe(info)
    }

    /// `waitFor` with `activity`: polls until it is as described, or the time is up.
    func waitForActivity() throws(StepFailure) -> String? {
        guard let criteria = fields.nested("activity") else { throw StepFailure("\"activity\" is required") }
        let wanted = try ActivityCriteria(criteria)
        let timeoutMs = try fields.int("timeoutMs") ?? 10_000
        let deadline = Date().addingTimeInterval(Double(timeoutMs) / 1000)
        while true {
            let info = try context.activityInfo(wanted.name)
            let wrong = wanted.mismatches(info)
            if wrong.isEmpty { return ActivityCriteria.describe(info) }
            if Date() >= deadline {
                throw StepFailure(
                    "activity \(wanted.name) was not as described within \(timeoutMs) ms", expected: wanted.description,
                    seen: ActivityCriteria.describe(info))
            }
            Thread.sleep(forTimeInterval: Self.pollInterval)
        }
    }
}

/// What an `activity` object says a named Live Activity is like. `contentState` lists values
/// its content state must have (other keys may be there too).
struct ActivityCriteria: CustomStringConvertible {
    var name: String
    var state: String?
    var contentState: JSONObject?
    var updates: Int?
    var attributesType: String?
    var startedBy: String?

    init(_ fields: StepFields) throws(StepFailure) {
        name = try fields.requiredString("name")
        state = fields.string("state")
        if let value = fields["contentState"] {
            guard let object = value.objectValue else { throw StepFailure("\"activity.contentState\" must be an object") }
            contentState = object
        }
        updates = try fields.int("updates")
        attributesType = fields.string("attributesType")
        startedBy = fields.string("startedBy")
        if let state, !StepParser.activityStates.contains(state) {
            throw StepFailure("\"activity.state\" \"\(state)\" is not one of \(StepParser.activityStates.joined(separator: ", "))")
        }
    }

    /// What does not hold, each with its expected words (empty: it matches).
    func mismatches(_ info: ActivityInfo) -> [(field: String, expected: String)] {
        var wrong: [(String, String)] = []
        if let state, info.state != state { wrong.append(("state", "state \(state)")) }
        if let updates, info.updates != updates { wrong.append(("updates", "updates \(updates)")) }
        if let attributesType, info.attributesType != attributesType { wrong.append(("attributesType", "attributesType \(attributesType)")) }
        if let startedBy, info.startedBy != startedBy { wrong.append(("startedBy", "startedBy \(startedBy)")) }
        if let contentState {
            let have = info.contentState.objectValue ?? JSONObject()
            for member in contentState.members where !Self.same(have[member.key], member.value) {
                wrong.append(("contentState", "contentState.\(member.key) \(member.value.serialized())"))
            }
        }
        return wrong
    }

    /// JSON equality with numbers compared by value (5 and 5.0 are the same), and a value
    /// `${…}` made a string equal to the number or boolean it spells.
    static func same(_ have: JSONValue?, _ want: JSONValue) -> Bool {
        guard let have else { return false }
        if let a = have.numberValue, let b = want.numberValue ?? want.stringValue.flatMap(Double.init) { return a == b }
        if let a = have.boolValue, let text = want.stringValue { return text == (a ? "true" : "false") }
        switch (have, want) {
        case (.object(let a), .object(let b)):
            return a.members.count == b.members.count && b.members.allSatisfy { same(a[$0.key], $0.value) }
        case (.array(let a), .array(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { same($0, $1) }
        default:
            return have == want
        }
    }

    var description: String {
        var parts: [String] = []
        if let state { parts.append("state \(state)") }
        if let contentState { parts.append("contentState \(JSONValue.object(contentState).serialized()) (at least)") }
        if let updates { parts.append("updates \(updates)") }
        if let attributesType { parts.append("attributesType \(attributesType)") }
        if let startedBy { parts.append("startedBy \(startedBy)") }
        return "activity \(name)" + (parts.isEmpty ? "" : " with " + parts.joined(separator: ", "))
    }

    static func describe(_ info: ActivityInfo) -> String {
        var text =
            "\(info.attributesType) \(short(info.activityID)) \(info.state), contentState \(info.contentState.serialized()), updates \(info.updates)"
        if let stale = info.staleDate { text += ", stale at \(stale)" }
        if let dismissal = info.dismissalDate, info.state == "ended" { text += ", dismissed at \(dismissal)" }
        return text
    }
}
