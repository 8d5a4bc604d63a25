import Foundation

/// The report as text: one line per step (number, ✓/✗, label, duration, note), what was
/// expected and seen under a failed one, the check, and a summary line that starts with PASS
/// or FAIL. `ascii` swaps the symbols for plain words (for logs and pipes).
public struct ReportPrinter: Sendable {
    public var ascii: Bool
    /// Only failures, the check and the summary.
    public var quiet: Bool

    public init(ascii: Bool, quiet: Bool = false) {
        self.ascii = ascii
        self.quiet = quiet
    }

    public func header(_ scenario: Scenario) -> String {
        plain("scenario \(scenario.name)" + (scenario.description.map { ": \($0)" } ?? ""))
    }

    /// A step's lines (empty in quiet mode unless it failed).
    public func step(_ step: StepReport) -> String {
        if quiet && step.passed { return "" }
        let number = String(step.index).leftPadded(3)
        var label = step.label
        if label.count > 70 { label = String(label.prefix(69)) + "…" }
        var line = "\(number) \(step.passed ? "✓" : "✗") \(label.padded(70)) \(String(step.durationMs).leftPadded(6)) ms"
        if let note = step.note { line += "  \(note)" }
        var lines = [line]
        if let failure = step.failure { lines.append(indent("failed: " + failure)) }
        if let expected = step.expected { lines.append(indent("expected: " + expected)) }
        if let seen = step.seen { lines.append(indent("seen:     " + seen, continuation: "          ")) }
        return plain(lines.joined(separator: "\n"))
    }

    /// After the steps: steps not run, the check, the verdict.
    public func footer(_ report: ScenarioReport) -> String {
        var lines: [String] = []
        if let setup = report.setupError { lines.append("setup failed: \(setup)") }
        let notRun = report.totalSteps - report.steps.count
        if notRun > 0 && report.setupError == nil { lines.append("    (\(notRun) more step\(notRun == 1 ? "" : "s") not run)") }
        if let checks = report.checks {
            var line = "checks: crossAccount \(checks.crossAccount)"
            if let error = checks.error {
                line = "checks: could not be read: \(error)"
            } else if checks.expected > 0 || checks.crossAccount > 0 {
                line += " (expected \(checks.expected))"
            }
            if !checks.strict && checks.crossAccount != checks.expected {
                line += " (not strict: reported, not failed)"
            } else {
                line += checks.passed ? " ✓" : " ✗"
            }
            lines.append(line)
            for message in checks.messages { lines.append("  " + message) }
            let failed = checks.failedBackendCalls
            if !failed.isEmpty {
                lines.append(
                    "backend calls failed: \(failed.count) (reported, not checked: the app's backend refused them or could not be reached)")
                for call in failed.prefix(5) { lines.append("  " + call) }
                if failed.count > 5 { lines.append("  … and \(failed.count - 5) more (GET /api/v1/backend-calls)") }
            }
            let unfinished = checks.unfinishedBackendCalls
            if !unfinished.isEmpty {
                lines.append(
                    "backend calls not done: \(unfinished.count) (reported, not checked: dropped by a full queue, or still being tried when the run ended)"
                )
                for call in unfinished.prefix(5) { lines.append("  " + call) }
                if unfinished.count > 5 { lines.append("  … and \(unfinished.count - 5) more (GET /api/v1/backend-calls)") }
            }
        }
        lines.append(summary(report))
        return plain(lines.joined(separator: "\n"))
    }

    public func summary(_ report: ScenarioReport) -> String {
        let seconds = String(format1(Double(report.durationMs) / 1000))
        let passedSteps = report.steps.filter(\.passed).count
        if report.passed {
            return "PASS \(report.name): \(passedSteps) step\(passedSteps == 1 ? "" : "s") in \(seconds) s, \(Self.checkWords(report.checks))"
        }
        var why: [String] = []
        if report.setupError != nil { why.append("setup failed") }
        if let signal = report.interruptedBy { why.append("interrupted (\(signal)) after \(report.steps.count) of \(report.totalSteps) steps") }
        if let step = report.failedStep { why.append("step \(step.index) of \(report.totalSteps) failed (\(step.kind.rawValue))") }
        if let checks = report.checks, !checks.passed {
            why.append(checks.error != nil ? "checks unreadable" : "crossAccount \(checks.crossAccount), expected \(checks.expected)")
        }
        let calls = report.checks.map { "; " + Self.callWords($0) } ?? ""
        return "FAIL \(report.name): \(why.joined(separator: "; "))\(calls == "; " ? "" : calls) (\(seconds) s)"
    }

    /// What a passing run's check found, in words.
    static func checkWords(_ checks: CheckSummary?) -> String {
        guard let checks else { return "no check" }
        var words: String
        if checks.crossAccount == 0 && checks.expected == 0 {
            words = "cross-account check clean"
        } else if checks.crossAccount == checks.expected {
            words = "cross-account deliveries as expected (\(checks.crossAccount))"
        } else {
            words = "cross-account deliveries \(checks.crossAccount), expected \(checks.expected) (not strict: reported only)"
        }
        let calls = callWords(checks)
        if !calls.isEmpty { words += ", " + calls }
        return words
    }

    /// "1 backend call failed, 2 not done"; empty when every call succeeded.
    static func callWords(_ checks: CheckSummary) -> String {
        let (failed, unfinished) = (checks.failedBackendCalls.count, checks.unfinishedBackendCalls.count)
        var parts: [String] = []
        if failed > 0 { parts.append("\(failed) backend call\(failed == 1 ? "" : "s") failed") }
        if unfinished > 0 { parts.append(failed > 0 ? "\(unfinished) not done" : "\(unfinished) backend call\(unfinished == 1 ? "" : "s") not done") }
        return parts.joined(separator: ", ")
    }

    private func indent(_ text: String, continuation: String = "") -> String {
        text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
            .map { "      " + ($0.offset == 0 ? "" : continuation) + $0.element }.joined(separator: "\n")
    }

    /// The text in plain ASCII when asked.
    func plain(_ text: String) -> String {
        guard ascii else { return text }
        let swaps: [(String, String)] = [
            ("✓", "ok"), ("✗", "FAIL"), ("…", "..."), ("≠", "!="), ("→", "->"), ("×", "x"), ("≥", ">="),
            ("—", "-"), ("–", "-"), ("’", "'"), ("“", "\""), ("”", "\""),
        ]
        var out = text
        for (symbol, word) in swaps { out = out.replacingOccurrences(of: symbol, with: word) }
        return String(String.UnicodeScalarView(out.unicodeScalars.map { $0.isASCII ? $0 : "?" }))
    }

    private func format1(_ value: Double) -> String {
        let tenths = Int((value * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }
}

extension String {
    func padded(_ width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
    func leftPadded(_ width: Int) -> String { count >= width ? self : String(repeating: " ", count: width - count) + self }
}
