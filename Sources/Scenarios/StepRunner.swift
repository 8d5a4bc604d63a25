import APNsCore
import AdminClient

/// Runs one step against the emulator. Each kind lives in its own file (DeviceSteps,
/// PushStep, LiveActivitySteps, ChannelSteps, CommandStep, HTTPStep, WaitSteps, ExpectStep);
/// this only dispatches. A step
/// returns a short note for the report, or throws `StepFailure`.
struct StepRunner {
    let context: RunContext
    let step: Step
    let fields: StepFields

    var api: EmulatorAdminClient { context.api }

    func run() throws(StepFailure) -> String? {
        try checkValues()
        switch step.kind {
        case .device: return try createDevice()
        case .install: return try install()
        case .uninstall: return try uninstall()
        case .reinstall: return try reinstall()
        case .restore: return try restore()
        case .rotate: return try rotate()
        case .permit: return try setAuthorization(fields.string("authorization") ?? "authorized")
        case .deny: return try setAuthorization("denied")
        case .launch, .foreground: return try setAppState("foreground")
        case .background: return try setAppState("background")
        case .suspend: return try setAppState("suspended")
        case .terminate: return try setAppState("terminated")
        case .appState: return try setAppState(try fields.requiredString("state"))
        case .online: return try setOnline(true)
        case .offline: return try setOnline(false)
        case .login: return try login()
        case .logout: return try logout()
        case .switchAccount: return try switchAccount()
        case .tap: return try tap()
        case .respond: return try respond()
        case .notificationSettings: return try setNotificationSettings()
        case .focus: return try setFocus()
        case .scheduledSummary: return try setScheduledSummary()
        case .deviceSwitches: return try setSwitches()
        case .advanceClock: return try advanceClock()
        case .sleep: return try sleep()
        case .push: return try push()
        case .run: return try runCommand()
        case .http: return try httpRequest()
        case .declareActivities: return try declareActivities()
        case .startActivity: return try startActivity()
        case .endActivity: return try endActivity()
        case .dismissActivity: return try dismissActivity()
        case .createChannel: return try createChannel()
        case .broadcast: return try broadcast()
        case .waitFor: return try fields["activity"] != nil ? waitForActivity() : waitFor()
        case .expectNone: return try expectNone()
        case .expect: return try fields["activity"] != nil ? expectActivity() : expect()
        case .save: return nil
        }
    }

    /// The catalog's value rules on the fields as filled in: a `${…}` that became what the
    /// file check would have refused fails the step in the file check's words.
    func checkValues() throws(StepFailure) {
        if let (field, problem) = step.kind.valueProblem(in: fields.object) { throw StepFailure("\"\(field)\" \(problem)") }
    }

    /// The step's device alias (resolved when the file was read).
    var alias: String {
        get throws(StepFailure) {
            guard let alias = step.deviceAlias else { throw StepFailure("the step names no device") }
            return alias
        }
    }

    /// The app the step acts on: its `bundleId`, else the device's own app.
    func bundleID() throws(StepFailure) -> String {
        if let bundle = fields.string("bundleId") { return bundle }
        return try context.device(alias).bundleID
    }

    /// Emulator time as the step's `since` says: the run's start, the step's start, or a time.
    func since() throws(StepFailure) -> Int64 {
        guard let value = fields["since"] else { return context.startMs }
        if let ms = value.intValue { return ms }
        switch value.stringValue {
        case "start": return context.startMs
        case "step": return context.stepStartMs
        case let text?: if let ms = Int64(text) { return ms }
        default: break
        }
        throw StepFailure("\"since\" must be \"start\", \"step\" or a time in ms, not \(value.serialized())")
    }
}
