import APNsCore
import AdminClient
import Foundation

/// What a run knows between steps: variables, device aliases, the last push, command and
/// HTTP answer, and the emulator time the run started at (waits look at what happened since).
final class RunContext {
    struct DeviceRef {
        var deviceID: String
        var bundleID: String
        var environment: String
    }

    let scenario: Scenario
    let target: EmulatorTarget
    /// The scenario's variables (`--var`, environment, defaults) and the runner's overrides.
    let fixed: [String: String]
    var saved: [String: String] = [:]
    var devices: [String: DeviceRef] = [:]
    var lastPush: [String: String] = [:]
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
        for member in step.fields.members where member.key != "save" {
            let value = try Template.substitute(json: member.value) { (name: String) throws(StepFailure) -> String in try resolve(name) }
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

    /// The scenario's device ids (checks look at these only).
    var deviceIDs: Set<String> { Set(devices.values.map(\.deviceID)) }
}
