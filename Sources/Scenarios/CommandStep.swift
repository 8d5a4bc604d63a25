import APNsCore
import Foundation
import Glibc

/// `run`: a provider command (notify.py with aioapns, a team's own script) with the
/// emulator's address, CA and key in its environment, and the exit status it should end with.
extension StepRunner {
    func runCommand() throws(StepFailure) -> String? {
        let argv = (fields["argv"]?.arrayValue ?? []).compactMap { ScenarioParser.scalarText($0) }
        guard !argv.isEmpty else { throw StepFailure("\"argv\" is empty") }
        var environment = ProcessInfo.processInfo.environment
        environment.merge(context.target.providerEnvironment(topic: context.scenario.bundleID)) { _, new in new }
        for (name, value) in fields["env"]?.objectValue ?? JSONObject() {
            if let text = ScenarioParser.scalarText(value) { environment[name] = text }
        }
        let timeoutMs = try fields.int("timeoutMs") ?? 60_000
        let expected = try fields.int("expectExit") ?? 0
        let directory = fields.string("cwd") ?? context.workingDirectory

        let outcome = try ChildProcess.run(argv, environment: environment, directory: directory, timeoutMs: timeoutMs)
        context.lastRun = ["exitStatus": outcome.exitStatus.map(String.init) ?? "", "stdout": outcome.stdout, "stderr": outcome.stderr]
        let shown = [outcome.stdout, outcome.stderr].map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            .filter { !$0.isEmpty }.joined(separator: "\n").tail(lines: 12)
        if outcome.timedOut {
            throw StepFailure("\(argv[0]) did not finish within \(timeoutMs) ms (killed)", expected: "exit \(expected)", seen: shown)
        }
        guard outcome.exitStatus == expected else {
            throw StepFailure(
                "\(argv[0]) " + (outcome.exitStatus.map { "exited with \($0)" } ?? "was killed by a signal"),
                expected: "exit \(expected)", seen: shown.isEmpty ? "no output" : shown)
        }
        if let wanted = fields.string("stdoutContains"), !outcome.stdout.contains(wanted) {
            throw StepFailure("the output lacks the expected text", expected: "stdout containing \"\(wanted)\"", seen: outcome.stdout.tail(lines: 12))
        }
        let firstLine = outcome.stdout.split(separator: "\n").first.map(String.init)
        return "exit \(outcome.exitStatus ?? -1)" + (firstLine.map { ": \($0.prefix(100))" } ?? "")
    }
}

extension String {
    /// The last `lines` lines, for failure reports.
    func tail(lines count: Int) -> String {
        let lines = split(separator: "\n", omittingEmptySubsequences: false)
        let kept = lines.suffix(count).joined(separator: "\n").trimmingCharacters(in: .whitespacesAndNewlines)
        return lines.count > count ? "…\n" + kept : kept
    }
}

/// A child process with captured output and a deadline.
enum ChildProcess {
    struct Outcome {
        var exitStatus: Int?
        var stdout: String
        var stderr: String
        var timedOut: Bool
    }

    /// Runs `argv` (looked up on PATH through /usr/bin/env) and waits at most `timeoutMs`;
    /// a command still running then is killed (SIGKILL: a child may have inherited blocked
    /// SIGTERM from the runner's threads).
    static func run(_ argv: [String], environment: [String: String], directory: String?, timeoutMs: Int) throws(StepFailure) -> Outcome {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = argv
        process.environment = environment
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        do { try process.run() } catch {
            throw StepFailure("cannot start \(argv[0]): \(error.localizedDescription)")
        }
        // Both pipes are drained while the child runs, so a chatty child cannot block on a full pipe.
        let stdout = PipeReader(out.fileHandleForReading)
        let stderr = PipeReader(err.fileHandleForReading)
        let deadline = Date().addingTimeInterval(Double(timeoutMs) / 1000)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        let timedOut = process.isRunning
        if timedOut { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        let exited = process.terminationReason == .exit
        return Outcome(
            exitStatus: exited ? Int(process.terminationStatus) : nil, stdout: stdout.text(), stderr: stderr.text(),
            timedOut: timedOut)
    }
}

/// Reads a pipe to its end on its own thread.
private final class PipeReader: @unchecked Sendable {
    private var data = Data()
    private let done = DispatchSemaphore(value: 0)

    init(_ handle: FileHandle) {
        Thread.detachNewThread { [self] in
            data = handle.readDataToEndOfFile()
            done.signal()
        }
    }

    /// The output; waits at most 2 s for the pipe to close (a grandchild may hold it open).
    func text() -> String {
        guard done.wait(timeout: .now() + 2) == .success else { return "(output still open)" }
        return String(decoding: data, as: UTF8.self)
    }
}
