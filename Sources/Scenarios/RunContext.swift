import APNsCore
import AdminClient
import Foundation

/// What a run knows between steps: variables, device aliases, named Live Activities and
/// channels, the last push, broadcast, command and HTTP answer, and the emulator time the run
/// started at (waits look at what happened since).
final class RunContext {
    struct DeviceRef {
        var deviceID: String
        var bundleID: String
        var environment: String
    }

    /// A Live Activity a step named: where it is.
    struct ActivityRef {
        var deviceAlias: String
        var deviceID: String
        var activityID: String
    }

    /// A channel a createChannel step made.
    struct ChannelRef {
        var id: String
        var bundleID: String
        var environment: String
    }

    let scenario: Scenario
    let target: EmulatorTarget
    /// The scenario's variables (`--var`, environment, defaults) and the runner's overrides.
    let fixed: [String: String]
    var saved: [String: String] = [:]
    var devices: [String: DeviceRef] = [:]
    var activities: [String: ActivityRef] = [:]
    var channels: [String: ChannelRef] = [:]
    var lastPush: [String: String] = [:]
    var lastBroadcast: [String: String] = [:]
    var lastRun: [String: String] = [:]
    var lastHTTP: (status: Int, body: [UInt8])?
    /// Emulator time (ms) when the run and the current step started.
    var startMs: Int64 = 0
    var stepStartMs: Int64 = 0
    /// Where `run` steps run (nil: the current directory).
    let workingDirectory: String?

    init(scenario: Scenario, target: EmulatorTarget, variables: [String: String], workingDirectory: String?) {
        self.scenario = scenario
        self.target = target
        fixed = scenario.variables.merging(variables) { _, given in given }
        self.workingDirectory = workingDirectory
    }

    var api: EmulatorAdminClient { target.api }

    func emulatorNow() throws(StepFailure) -> Int64 {
        try admin("reading the emulator's clock") { () throws(EmulatorAdminError) in try api.clock().nowMs }
    }

    // MARK: Variables

    func resolve(_ name: String) throws(StepFailure) -> String {
        if let value = saved[name] ?? fixed[name] { return value }
        let runtime: RuntimeName?
        do { runtime = try RuntimeName.parse(name) } catch { throw StepFailure(error.message) }
        guard let runtime else { throw StepFailure("${\(name)} is not set") }
        switch runtime {
        case .device(let alias, let field):
            let ref = try device(alias)
            switch field {
            case "id": return ref.deviceID
            case "bundleId": return ref.bundleID
            case "environment": return ref.environment
            case "userId": return try info(alias).userID ?? ""
            default:
                guard let token = try app(alias)?.token else {
                    throw StepFailure("${\(name)}: \(ref.bundleID) on \(alias) has no token (it is not installed)")
                }
                return token
            }
        case .pushToStart(let alias, let type):
            return try pushToStart(alias, attributesType: type).token
        case .activity(let named, let field):
            let ref = try activity(named)
            switch field {
            case "id": return ref.activityID
            case "deviceId": return ref.deviceID
            default: break
            }
            let info = try activityInfo(named)
            switch field {
            case "pushToken":
                guard let token = info.pushToken else {
                    throw StepFailure("${\(name)}: activity \(named) has no update token (it takes no token pushes, or it has ended)")
                }
                return token
            case "channel":
                guard let channel = info.channel else { throw StepFailure("${\(name)}: activity \(named) subscribes to no channel") }
                return channel
            case "bundleId": return info.bundleID
            default: return info.state
            }
        case .channel(let named, let field):
            let ref = try channel(named)
            return field == "id" ? ref.id : field == "bundleId" ? ref.bundleID : ref.environment
        case .lastBroadcast(let field): return lastBroadcast[field] ?? ""
        case .lastPush(let field): return lastPush[field] ?? ""
        case .lastRun(let field): return lastRun[field] ?? ""
        case .lastHttp(let field):
            guard let lastHTTP else { return "" }
            return field == "status" ? String(lastHTTP.status) : String(decoding: lastHTTP.body, as: UTF8.self)
        case .lastHttpJSON(let pointerText):
            guard let body = lastHTTP?.body, let json = try? JSONValue.parse(body) else {
                throw StepFailure("${\(name)}: the last HTTP answer's body is not JSON")
            }
            guard let pointer = JSONPointer(pointerText), let value = pointer.resolve(in: json) else {
                throw StepFailure("${\(name)}: the last HTTP answer has nothing at \(pointerText)")
            }
            return ScenarioParser.scalarText(value) ?? value.serialized()
        case .clockNow:
            return String(try emulatorNow())
        case .emulator(let field):
            guard let value = target.value(field, topic: scenario.bundleID) else {
                throw StepFailure("${\(name)} is not known for this emulator (start the runner with the matching option)")
            }
            return value
        }
    }

    /// The step's fields with every `${…}` filled in (`save` is filled in after the step).
    func fields(of step: Step) throws(StepFailure) -> StepFields {
        var object = JSONObject()
        var budget = Template.Budget()
        for member in step.fields.members where member.key != "save" {
            let value = try Template.substitute(json: member.value, budget: &budget, tooLong: { StepFailure("field \"\(member.key)\": \($0)") }) {
                (name: String) throws(StepFailure) -> String in try resolve(name)
            }
            object.members.append((member.key, value))
        }
        return StepFields(object: object)
    }

    // MARK: Devices

    func device(_ alias: String) throws(StepFailure) -> DeviceRef {
        guard let ref = devices[alias] else { throw StepFailure("no device \"\(alias)\" yet (its device step did not run)") }
        return ref
    }

    func info(_ alias: String) throws(StepFailure) -> DeviceInfo {
        let ref = try device(alias)
        return try admin("reading device \(alias) (\(ref.deviceID))") { () throws(EmulatorAdminError) in try api.device(ref.deviceID) }
    }

    /// The alias's app (its own, or `bundleID`) as the emulator has it; nil when not installed.
    func app(_ alias: String, bundleID: String? = nil) throws(StepFailure) -> DeviceInfo.App? {
        var bundle = bundleID ?? ""
        if bundleID == nil { bundle = try device(alias).bundleID }
        return try info(alias).apps.first { $0.bundleID == bundle }
    }

    /// Alias → device id, for criteria that name a device.
    func deviceID(_ alias: String?) throws(StepFailure) -> String? {
        guard let alias else { return nil }
        return try device(alias).deviceID
    }

    // MARK: Live Activities and channels

    func activity(_ name: String) throws(StepFailure) -> ActivityRef {
        guard let ref = activities[name] else { throw StepFailure("no activity \"\(name)\" yet (the step that names it did not run)") }
        return ref
    }

    /// The named activity as its device has it now.
    func activityInfo(_ name: String) throws(StepFailure) -> ActivityInfo {
        let ref = try activity(name)
        let found = try admin("reading the activities of \(ref.deviceID)") { () throws(EmulatorAdminError) in
            try api.activity(deviceID: ref.deviceID, activityID: ref.activityID)
        }
        guard let found else { throw StepFailure("activity \(name) (\(ref.activityID)) is no longer on \(ref.deviceAlias)") }
        return found
    }

    /// The push-to-start token of `attributesType` on the device and the app it belongs to: its
    /// own app's, else that of the first other app of the device that declares the type.
    func pushToStart(_ alias: String, attributesType: String) throws(StepFailure) -> (token: String, bundleID: String) {
        let ref = try device(alias)
        let apps = try admin("reading the Live Activity apps of \(ref.deviceID)") { () throws(EmulatorAdminError) in
            try api.liveActivityApps(deviceID: ref.deviceID)
        }
        let declaring = apps.filter { $0.pushToStartTokens[attributesType] != nil }
        guard let app = declaring.first(where: { $0.bundleID == ref.bundleID }) ?? declaring.first,
            let token = app.pushToStartTokens[attributesType]
        else {
            let declared = apps.flatMap { app in app.types.map { "\($0) (\(app.bundleID))" } }
            throw StepFailure(
                "no app on \(alias) declares the Live Activity type \(attributesType) "
                    + (declared.isEmpty ? "(none declares any: a declareActivities step does)" : "(declared: \(declared.joined(separator: ", ")))"))
        }
        return (token, app.bundleID)
    }

    func channel(_ name: String) throws(StepFailure) -> ChannelRef {
        guard let ref = channels[name] else { throw StepFailure("no channel \"\(name)\" yet (its createChannel step did not make one)") }
        return ref
    }

    /// The scenario's device ids (checks look at these only).
    var deviceIDs: Set<String> { Set(devices.values.map(\.deviceID)) }
}
