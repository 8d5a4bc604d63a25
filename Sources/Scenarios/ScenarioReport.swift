public import APNsCore
import AdminClient

/// How a step went.
public struct StepReport: Sendable {
    public var index: Int
    public var kind: StepKind
    /// The step's `name`, else a line made from its fields as written.
    public var label: String
    public var passed: Bool
    public var durationMs: Int
    /// A short note on what happened (`→ 200, apns-id …`).
    public var note: String?
    /// Why it failed, and for expectations what was expected and what was there.
    public var failure: String?
    public var expected: String?
    public var seen: String?
}

/// The cross-account check after the steps: deliveries the detector flagged on this
/// scenario's devices.
public struct CheckSummary: Sendable {
    public var crossAccount: Int
    /// What the scenario expects (`expectedChecks.crossAccount`, 0 by default).
    public var expected: Int
    /// Whether a count other than `expected` fails the run (`--no-strict` only reports it).
    public var strict: Bool
    /// The detector's messages.
    public var messages: [String]
    /// The check could not be read.
    public var error: String?
    /// Calls of this run's apps to their backends that ended `failed` (after their retries):
    /// not a check, since a scenario may mean them, but a chain that never reached its
    /// backend should not pass unseen.
    public var failedBackendCalls: [String] = []
    /// Calls that never reached their backend and never will in this run: `dropped` (a full
    /// queue), or still `pending`/`retrying` when it ended. Reported the same way.
    public var unfinishedBackendCalls: [String] = []

    public var passed: Bool { error == nil && (!strict || crossAccount == expected) }

    /// The detector's messages for this run's devices.
    static func crossAccount(_ context: RunContext) throws(StepFailure) -> [String] {
        let report = try admin("reading GET /api/v1/checks") { () throws(EmulatorAdminError) in try context.api.checks() }
        let mine = context.deviceIDs
        // Only the cross-account check: what `expectedChecks.crossAccount` counts.
        return report.failures.filter { $0.check == "crossAccount" && mine.contains($0.deviceID) }.map {
            "\($0.check): \($0.message) (apns-id \($0.apnsID))"
        }
    }

    /// This run's backend calls that failed, and those dropped or unfinished, one line each.
    static func unsuccessfulBackendCalls(_ context: RunContext) throws(StepFailure) -> (failed: [String], unfinished: [String]) {
        let calls = try admin("reading GET /api/v1/backend-calls") { () throws(EmulatorAdminError) in try context.api.backendCalls() }
        let mine = context.deviceIDs
        let ours = calls.filter { $0.deviceID.map(mine.contains) == true }
        func line(_ call: BackendCall, _ state: String?) -> String {
            let answer = call.status.map { "answered \($0)" } ?? (call.error ?? "no answer")
            return "#\(call.id) \(call.hook) \(call.method ?? "POST") \(call.url) from \(call.deviceID ?? "-"): "
                + (state.map { "\($0), " } ?? "") + "\(answer) after \(call.attempts) attempt\(call.attempts == 1 ? "" : "s")"
        }
        // A 4xx is the backend's final answer (not retried, the call `done`): it refused the
        // call, which a scenario is told as a failure is.
        let refused = { (call: BackendCall) in call.state == "done" && (400..<500).contains(call.status ?? 0) }
        return (
            ours.filter { $0.state == "failed" || refused($0) }.map { line($0, refused($0) ? "refused" : nil) },
            ours.filter { ["dropped", "pending", "retrying"].contains($0.state) }.map { line($0, $0.state) }
        )
    }
}

/// A whole run: every step that ran, the check, and the verdict.
public struct ScenarioReport: Sendable {
    public var name: String
    public var description: String?
    /// The run could not start (emulator, backends): no step ran.
    public var setupError: String?
    /// The signal that stopped the run (`SIGINT`, `SIGTERM`): the steps are those done by then.
    public var interruptedBy: String?
    public var steps: [StepReport]
    public var totalSteps: Int
    public var checks: CheckSummary?
    public var durationMs: Int

    public var passed: Bool {
        setupError == nil && interruptedBy == nil && steps.count == totalSteps && steps.allSatisfy(\.passed) && checks?.passed == true
    }

    public var failedStep: StepReport? { steps.first { !$0.passed } }

    /// The report of a run whose emulator did not start: no step ran.
    public static func notStarted(_ scenario: Scenario, because why: String) -> ScenarioReport {
        ScenarioReport(
            name: scenario.name, description: scenario.description, setupError: why, steps: [], totalSteps: scenario.steps.count,
            checks: nil, durationMs: 0)
    }

    /// The report of a run a signal stopped: the steps done by then, no checks.
    public static func interrupted(_ scenario: Scenario, by signal: String, steps: [StepReport], durationMs: Int) -> ScenarioReport {
        var report = ScenarioReport(
            name: scenario.name, description: scenario.description, setupError: nil, steps: steps, totalSteps: scenario.steps.count,
            checks: nil, durationMs: durationMs)
        report.interruptedBy = signal
        return report
    }

    public var json: JSONValue {
        func text(_ value: String?) -> JSONValue { value.map(JSONValue.string) ?? .null }
        let steps: [JSONValue] = self.steps.map { step in
            .object(
                JSONObject([
                    ("index", .int(Int64(step.index))), ("do", .string(step.kind.rawValue)), ("label", .string(step.label)),
                    ("passed", .bool(step.passed)), ("durationMs", .int(Int64(step.durationMs))), ("note", text(step.note)),
                    ("failure", text(step.failure)), ("expected", text(step.expected)), ("seen", text(step.seen)),
                ]))
        }
        let checks: JSONValue =
            self.checks.map { c in
                .object(
                    JSONObject([
                        ("passed", .bool(c.passed)), ("crossAccount", .int(Int64(c.crossAccount))), ("expected", .int(Int64(c.expected))),
                        ("strict", .bool(c.strict)), ("messages", .array(c.messages.map(JSONValue.string))), ("error", text(c.error)),
                        ("failedBackendCalls", .array(c.failedBackendCalls.map(JSONValue.string))),
                        ("unfinishedBackendCalls", .array(c.unfinishedBackendCalls.map(JSONValue.string))),
                    ]))
            } ?? .null
        return .object(
            JSONObject([
                ("name", .string(name)), ("passed", .bool(passed)), ("setupError", text(setupError)), ("interrupted", text(interruptedBy)),
                ("steps", .array(steps)), ("stepsRun", .int(Int64(self.steps.count))), ("totalSteps", .int(Int64(totalSteps))),
                ("checks", checks), ("durationMs", .int(Int64(durationMs))),
            ]))
    }
}
