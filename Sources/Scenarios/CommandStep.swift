import APNsCore
import CLinux
import Foundation
import Glibc
import MonotonicClock
import Synchronization

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
        // Trailing line breaks go, as in the shell's `$(…)`: `echo 5` gives "5".
        func trimmed(_ text: String) -> String {
            String(text[..<(text.lastIndex { $0 != "\n" && $0 != "\r\n" && $0 != "\r" }.map(text.index(after:)) ?? text.startIndex)])
        }
        context.lastRun = [
            "exitStatus": outcome.exitStatus.map(String.init) ?? "", "stdout": trimmed(outcome.stdout), "stderr": trimmed(outcome.stderr),
        ]
        var shown = [outcome.stdout, outcome.stderr].map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            .filter { !$0.isEmpty }.joined(separator: "\n").tail(lines: 12)
        if let cut = outcome.cutNote { shown += (shown.isEmpty ? "" : "\n") + cut }
        if outcome.timedOut {
            throw StepFailure(
                "\(argv[0]) did not finish within \(timeoutMs) ms (killed, with the processes it started)", expected: "exit \(expected)",
                seen: shown.isEmpty ? "no output" : shown)
        }
        guard outcome.exitStatus == expected else {
            throw StepFailure(
                "\(argv[0]) " + (outcome.exitStatus.map { "exited with \($0)" } ?? "was killed by signal \(outcome.signal ?? 0)"),
                expected: "exit \(expected)", seen: shown.isEmpty ? "no output" : shown)
        }
        if let wanted = fields.string("stdoutContains"), !outcome.stdout.contains(wanted) {
            let kept = outcome.stdoutBytes > ChildProcess.keptBytes ? " (in the first \(ChildProcess.keptBytes) bytes kept)" : ""
            throw StepFailure(
                "the output lacks the expected text\(kept)", expected: "stdout containing \"\(wanted)\"",
                seen: outcome.stdout.tail(lines: 12))
        }
        let firstLine = outcome.stdout.split(separator: "\n").first.map(String.init)
        return "exit \(outcome.exitStatus ?? -1)" + (firstLine.map { ": \($0.prefix(100))" } ?? "")
            + (outcome.cutNote.map { " (\($0))" } ?? "")
    }
}

extension String {
    /// The last `lines` lines, for failure reports (at most 4000 characters of them).
    func tail(lines count: Int) -> String {
        let lines = split(separator: "\n", omittingEmptySubsequences: false)
        var kept = lines.suffix(count).joined(separator: "\n").trimmingCharacters(in: .whitespacesAndNewlines)
        let long = kept.count > 4000
        if long { kept = String(kept.suffix(4000)) }
        return lines.count > count || long ? "…\n" + kept : kept
    }
}

/// Stops the `run` steps' commands still running, with everything they started (each has a
/// process group of its own, so a Ctrl-C at the terminal does not reach it): called when the
/// runner is interrupted, which otherwise left them running, and when the run ends.
public enum RunningCommands {
    /// The process groups of every `run` step of the run, running or ended: what a command
    /// leaves in the background (a service for later steps) is stopped with the run.
    private static let groups = Mutex<Set<pid_t>>([])

    /// Spawns with the set locked and adds the child: an interrupt's `stopAll` (which takes
    /// the lock) never runs between a child's start and its registration, when the child
    /// could already have started others and would be left running.
    static func start<Failure: Error>(_ spawn: () -> Result<pid_t, Failure>) -> Result<pid_t, Failure> {
        groups.withLock { running in
            let spawned = spawn()
            if case .success(let pid) = spawned { running.insert(pid) }
            return spawned
        }
    }

    public static func stopAll() {
        for pid in groups.withLock({ $0 }) { _ = kill(-pid, SIGKILL) }
    }

    /// A step's command ended: its group is forgotten unless something it started runs on (a
    /// group's id is not reused while a member lives).
    static func ended(_ pid: pid_t) {
        if kill(-pid, 0) != 0 { groups.withLock { _ = $0.remove(pid) } }
    }
}

/// A child process with bounded captured output and a deadline.
///
/// The command runs in a process group of its own. Its output is read as it comes (so it never
/// blocks on a full pipe), keeping the first `keptBytes` of each stream and counting the rest;
/// the reads never hold up the deadline. When the command exits, output from processes it left
/// in the background is read for at most `graceMs` more, and then the whole group is killed;
/// when it is still running at its deadline, the whole group is killed at once.
enum ChildProcess {
    /// Each of stdout and stderr keeps this much (1 MiB); the rest is read and counted.
    static let keptBytes = 1 << 20
    /// How long after the command exited its output is still read (background processes may
    /// hold the pipes open).
    static let graceMs: Int64 = 500

    struct Outcome {
        /// nil: killed by a signal (or by the deadline).
        var exitStatus: Int?
        var signal: Int32?
        var stdout: String
        var stderr: String
        /// All the bytes each stream carried, kept or not.
        var stdoutBytes: Int
        var stderrBytes: Int
        var timedOut: Bool

        /// What of the output was not kept, in words; nil when all of it was.
        var cutNote: String? {
            let cut = [("stdout", stdoutBytes), ("stderr", stderrBytes)].filter { $0.1 > ChildProcess.keptBytes }
            guard !cut.isEmpty else { return nil }
            return cut.map { "\($0.0): \($0.1) bytes, the first \(ChildProcess.keptBytes) kept" }.joined(separator: "; ")
        }
    }

    /// One output stream: the first `keptBytes` and a count of all of it.
    private struct Capture {
        var fd: Int32
        var kept: [UInt8] = []
        var total = 0

        /// Reads what is there; closes the pipe at its end (or on an error).
        mutating func read(_ buffer: inout [UInt8]) {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 && (errno == EINTR || errno == EAGAIN) { return }
            guard count > 0 else {
                close()
                return
            }
            total += count
            let room = ChildProcess.keptBytes - kept.count
            if room > 0 { kept += buffer[..<min(room, count)] }
        }

        mutating func close() {
            if fd >= 0 { _ = Glibc.close(fd) }
            fd = -1
        }
    }

    /// Runs `argv` (looked up on PATH through /usr/bin/env) in `directory` and waits at most
    /// `timeoutMs` for it.
    static func run(_ argv: [String], environment: [String: String], directory: String?, timeoutMs: Int) throws(StepFailure) -> Outcome {
        if let directory {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw StepFailure("cannot start \(argv[0]): the directory \(directory) (\"cwd\") does not exist")
            }
        }
        var outPipe: [Int32] = [-1, -1]
        var errPipe: [Int32] = [-1, -1]
        guard pipe2(&outPipe, O_CLOEXEC) == 0 else { throw StepFailure("cannot start \(argv[0]): \(String(cString: strerror(errno)))") }
        guard pipe2(&errPipe, O_CLOEXEC) == 0 else {
            let why = String(cString: strerror(errno))
            outPipe.forEach { _ = close($0) }
            throw StepFailure("cannot start \(argv[0]): \(why)")
        }
        let spawned = RunningCommands.start {
            spawn(["/usr/bin/env"] + argv, environment: environment, directory: directory, stdout: outPipe[1], stderr: errPipe[1])
        }
        _ = close(outPipe[1])
        _ = close(errPipe[1])
        var out = Capture(fd: outPipe[0])
        var err = Capture(fd: errPipe[0])
        let pid: pid_t
        switch spawned {
        case .success(let child):
            pid = child
        case .failure(let error):
            out.close()
            err.close()
            throw StepFailure("cannot start \(argv[0]): \(String(cString: strerror(error.code)))")
        }
        defer {
            out.close()
            err.close()
        }

        let deadline = Monotonic.nowMilliseconds() + Int64(timeoutMs)
        var exitedAt: Int64?
        var timedOut = false
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let now = Monotonic.nowMilliseconds()
            if exitedAt == nil, hasExited(pid) { exitedAt = now }
            if let exitedAt {
                if (out.fd < 0 && err.fd < 0) || now >= exitedAt + graceMs { break }
            } else if now >= deadline {
                timedOut = true
                break
            }
            let until = exitedAt.map { $0 + graceMs } ?? deadline
            // Short waits: the command's exit shows in no pipe while a background process holds them.
            let waitMs = Int32(max(0, min(until - now, 20)))
            var polled = [out.fd, err.fd].filter { $0 >= 0 }.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            let ready = poll(&polled, nfds_t(polled.count), waitMs)
            guard ready > 0 else { continue }
            for entry in polled where entry.revents != 0 {
                if entry.fd == out.fd { out.read(&buffer) } else if entry.fd == err.fd { err.read(&buffer) }
            }
        }
        // At the deadline, the whole group, while its leader is not yet reaped (so its id cannot
        // name another group). A command that exited may have started a service for the steps
        // after it: what it left in the background keeps running, unread.
        if timedOut { _ = kill(-pid, SIGKILL) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        RunningCommands.ended(pid)
        let signal = status & 0x7F
        return Outcome(
            exitStatus: timedOut || signal != 0 ? nil : Int((status >> 8) & 0xFF), signal: timedOut || signal == 0 ? nil : signal,
            stdout: String(decoding: out.kept, as: UTF8.self), stderr: String(decoding: err.kept, as: UTF8.self),
            stdoutBytes: out.total, stderrBytes: err.total, timedOut: timedOut)
    }

    /// Whether the child has exited, without reaping it.
    private static func hasExited(_ pid: pid_t) -> Bool {
        var info = siginfo_t()
        guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 else { return errno != EINTR }
        return info.si_signo == SIGCHLD
    }

    /// posix_spawn in a new process group, with no signal blocked or ignored (the runner's
    /// threads may block some), stdin from /dev/null. The error is an errno.
    private static func spawn(
        _ argv: [String], environment: [String: String], directory: String?, stdout: Int32, stderr: Int32
    ) -> Result<pid_t, SpawnError> {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, stdout, 1)
        posix_spawn_file_actions_adddup2(&actions, stderr, 2)
        // Nothing else: a descriptor the runner inherited without close-on-exec (its caller's
        // pipes) would keep the caller waiting for as long as a background child of the command
        // lives.
        posix_spawn_file_actions_addclosefrom_np(&actions, 3)
        if let directory { posix_spawn_file_actions_addchdir_np(&actions, directory) }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setpgroup(&attributes, 0)
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD, SIGTSTP, SIGTTIN, SIGTTOU, SIGXFSZ] {
            sigaddset(&defaults, signal)
        }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let arguments = argv.map { strdup($0) } + [nil]
        let variables = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            arguments.forEach { free($0) }
            variables.forEach { free($0) }
        }
        var pid: pid_t = 0
        let code = posix_spawn(&pid, argv[0], &actions, &attributes, arguments, variables)
        return code == 0 ? .success(pid) : .failure(SpawnError(code: code))
    }

    private struct SpawnError: Error {
        let code: Int32
    }
}
