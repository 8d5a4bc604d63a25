import APNsCore
import AdminClient
import Foundation

/// Runs a checked scenario: backends first, then the steps in order (stopping at the first
/// that fails: later steps build on it), then the cross-account check.
public enum ScenarioRunner {
    public struct Options: Sendable {
        /// Values over the scenario's own `variables` (which already hold what the parser was
        /// given).
        public var variables: [String: String]
        /// A cross-account count other than the expected one fails the run.
        public var strict: Bool
        /// Where `run` steps run (nil: the current directory).
        public var workingDirectory: String?
        /// Called as each step ends (live progress).
        public var onStep: (@Sendable (StepReport) -> Void)?

        public init(
            variables: [String: String] = [:], strict: Bool = true, workingDirectory: String? = nil,
            onStep: (@Sendable (StepReport) -> Void)? = nil
        ) {
            self.variables = variables
            self.strict = strict
            self.workingDirectory = workingDirectory
            self.onStep = onStep
        }
    }

    /// Starts an emulator in this process for the scenario (its apps, its `emulator.arguments`),
    /// runs it there and stops it.
    public static func run(_ scenario: Scenario, options: Options = Options()) -> ScenarioReport {
        let target: EmulatorTarget
        do { target = try EmulatorTarget.inProcess(bundleIDs: scenario.bundleIDs, arguments: scenario.emulatorArguments) } catch {
            return ScenarioReport.notStarted(scenario, because: error.description)
        }
        defer { target.stop() }
        return run(scenario, on: target, options: options)
    }

    public static func run(_ scenario: Scenario, on target: EmulatorTarget, options: Options = Options()) -> ScenarioReport {
        let started = Date()
        let context = RunContext(
            scenario: scenario, target: target, variables: options.variables,
            workingDirectory: options.workingDirectory)
        var report = ScenarioReport(
            name: scenario.name, description: scenario.description, setupError: nil, steps: [],
            totalSteps: scenario.steps.count, checks: nil, durationMs: 0)
        do {
            context.startMs = try context.emulatorNow()
            try setBackends(scenario, context)
        } catch {
            report.setupError = error.message
            report.durationMs = milliseconds(since: started)
            return report
        }
        for step in scenario.steps {
            let result = run(step, context)
            report.steps.append(result)
            options.onStep?(result)
            if !result.passed { break }
        }
        report.checks = checks(scenario, context, strict: options.strict)
        report.durationMs = milliseconds(since: started)
        return report
    }

    /// `PUT /api/v1/apps/{bundleId}/backend` for each backend, variables filled in.
    private static func setBackends(_ scenario: Scenario, _ context: RunContext) throws(StepFailure) {
        for (bundle, backend) in scenario.backends {
            var budget = Template.Budget()
            let body = try Template.substitute(json: backend, budget: &budget, tooLong: { StepFailure("backends.\(bundle): \($0)") }) {
                (name: String) throws(StepFailure) -> String in try context.resolve(name)
            }
            try admin("setting the backend of \(bundle)") { () throws(EmulatorAdminError) in
                try context.api.setBackend(bundleID: bundle, body)
            }
        }
    }

    private static func run(_ step: Step, _ context: RunContext) -> StepReport {
        let started = Date()
        var report = StepReport(index: step.index, kind: step.kind, label: step.label, passed: true, durationMs: 0)
        do {
            context.stepStartMs = try context.emulatorNow()
            let fields = try context.fields(of: step)
            report.note = try StepRunner(context: context, step: step, fields: fields).run()
            var budget = Template.Budget()
            for (name, template) in step.save {
                context.saved[name] = try Template.substitute(template, budget: &budget, tooLong: { StepFailure("field \"save.\(name)\": \($0)") }) {
                    (name: String) throws(StepFailure) -> String in try context.resolve(name)
                }
            }
        } catch {
            report.passed = false
            report.failure = error.message
            report.expected = error.expected
            report.seen = error.seen
        }
        report.durationMs = milliseconds(since: started)
        return report
    }

    private static func checks(_ scenario: Scenario, _ context: RunContext, strict: Bool) -> CheckSummary {
        var summary = CheckSummary(crossAccount: 0, expected: scenario.expectedCrossAccount, strict: strict, messages: [], error: nil)
        do {
            summary.messages = try CheckSummary.crossAccount(context)
            summary.crossAccount = summary.messages.count
        } catch {
            summary.error = error.message
        }
        if let calls = try? CheckSummary.unsuccessfulBackendCalls(context) {
            summary.failedBackendCalls = calls.failed
            summary.unfinishedBackendCalls = calls.unfinished
        }
        return summary
    }

    static func milliseconds(since start: Date) -> Int { Int((Date().timeIntervalSince(start) * 1000).rounded()) }
}
