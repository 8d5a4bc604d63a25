import Foundation
import Glibc
import Testing
import TestSupport

/// `apns-emulator scenario` through the real binary: what `run` steps capture and when they
/// end, the bounds on values, and what `--check` refuses.
@Suite("Scenario command: run steps, value bounds, --check")
struct ScenarioCommandTests {
    let directory: String

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("scenario-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    func write(_ name: String, _ text: String) throws -> String {
        let path = "\(directory)/\(name)"
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// The scenario command under a 600 MB address-space limit: output kept without bound
    /// would end it long before its steps do.
    func scenario(_ arguments: [String], timeout: TimeInterval = 30) throws -> CommandResult {
        let quoted = ([EmulatorProcess.binary, "scenario", "--ascii"] + arguments).map { "'\($0)'" }.joined(separator: " ")
        return try run("/bin/sh", ["-c", "ulimit -v 600000 && exec \(quoted)"], timeout: timeout)
    }

    /// A process that is gone (or a zombie nobody reaped: it runs no more).
    static func isGone(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return true }
        return stat.split(separator: ")").last?.split(separator: " ").first == "Z"
    }

    @Test func aCommandWritingWithoutPauseIsKilledAtItsTimeoutWithItsOutputBounded() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = try write(
            "yes.json",
            #"""
            {"name": "chatty", "steps": [
              {"do": "run", "argv": ["head", "-c", "200000000", "/dev/zero"], "timeoutMs": 20000},
              {"do": "run", "argv": ["yes"], "timeoutMs": 1500}
            ]}
            """#)
        let started = Date()
        let result = try scenario([path])
        let elapsed = Date().timeIntervalSince(started)
        #expect(result.status == 1, "\(result.err.suffix(2000))")
        #expect(elapsed < 15, "took \(elapsed) s")
        #expect(result.out.contains("1 ok run head -c 200000000 /dev/zero"), "\(result.out.suffix(2000))")
        #expect(result.out.contains("(stdout: 200000000 bytes, the first 1048576 kept)"))
        #expect(result.out.contains("failed: yes did not finish within 1500 ms (killed, with the processes it started)"))
        #expect(result.out.contains("stdout: ") && result.out.contains(" bytes, the first 1048576 kept\n"))
    }

    /// A command that exits is done though it left a child (a service it started keeps
    /// running for the later steps, and ends with the run); one that overruns is killed with
    /// everything it started.
    @Test func aCommandThatExitsIsDoneThoughItLeftAChildAndOneThatOverrunsIsKilledWithIt() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let exited = "\(directory)/exited.pid"
        let overran = "\(directory)/overran.pid"
        let path = try write(
            "background.json",
            #"""
            {"name": "background", "steps": [
              {"do": "run", "argv": ["sh", "-c", "sleep 30 & echo $! > \#(exited); echo started"], "timeoutMs": 5000,
               "stdoutContains": "started"},
              {"do": "run", "argv": ["sh", "-c", "kill -0 $(cat \#(exited)) && echo still-running"], "stdoutContains": "still-running"},
              {"do": "run", "argv": ["sh", "-c", "sleep 30 & echo $! > \#(overran); sleep 30"], "timeoutMs": 1000}
            ]}
            """#)
        let started = Date()
        let result = try scenario([path])
        #expect(Date().timeIntervalSince(started) < 10)
        #expect(result.status == 1)
        #expect(result.out.contains("  1 ok run sh -c sleep 30 &"), "\(result.out)")
        #expect(result.out.contains("exit 0: started"))
        #expect(result.out.contains("failed: sh did not finish within 1000 ms (killed, with the processes it started)"))
        func pid(_ file: String) throws -> Int32 {
            try #require(Int32(try String(contentsOfFile: file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
        }
        #expect(result.out.contains("  2 ok run sh -c kill -0"), "what a command that exited started runs on: \(result.out)")
        // Looked at at once: a pid that is gone may soon be another process's on a busy machine.
        let (service, background) = (try pid(exited), try pid(overran))
        defer { kill(service, SIGKILL) }
        #expect(Self.isGone(background), "the background sleep of a command that overran still runs")
        #expect(try eventually(5) { Self.isGone(service) }, "what a command started outlived the run")
    }

    /// Interrupted (Ctrl-C, a CI job's SIGTERM), the runner stops the command a `run` step is
    /// running, with what it started: in a process group of its own, a terminal's Ctrl-C does
    /// not reach it, and it was left running.
    @Test func anInterruptedRunStopsTheCommandItIsRunning() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let started = "\(directory)/started.pid"
        let path = try write(
            "long.json",
            #"""
            {"name": "long", "steps": [
              {"do": "run", "argv": ["sh", "-c", "sleep 300 & echo $! > \#(started); wait"], "timeoutMs": 3600000}
            ]}
            """#)
        let runner = Process()
        runner.executableURL = URL(fileURLWithPath: EmulatorProcess.binary)
        runner.arguments = ["scenario", "--ascii", path]
        runner.standardOutput = FileHandle.nullDevice
        runner.standardError = FileHandle.nullDevice
        try runner.run()
        defer { if runner.isRunning { kill(runner.processIdentifier, SIGKILL) } }
        // The shell creates the file before `echo` writes the pid into it.
        func startedPID() -> Int32? {
            (try? String(contentsOfFile: started, encoding: .utf8)).flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        }
        #expect(try eventually(30) { startedPID() != nil }, "the step's command started")
        let child = try #require(startedPID())
        kill(runner.processIdentifier, SIGTERM)
        runner.waitUntilExit()
        #expect(runner.terminationStatus == 143)
        #expect(try eventually(5) { Self.isGone(child) }, "the command's background sleep still runs")
        kill(child, SIGKILL)
    }

    /// An interrupted run still reports the steps it did (a CI job's timeout left no report):
    /// in --json, one object saying which signal stopped it.
    @Test func anInterruptedRunReportsTheStepsDone() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let started = "\(directory)/started"
        let path = try write(
            "long.json",
            #"""
            {"name": "long", "steps": [
              {"do": "sleep", "ms": 1},
              {"do": "run", "argv": ["sh", "-c", "touch \#(started); exec sleep 300"], "timeoutMs": 3600000},
              {"do": "sleep", "ms": 1}
            ]}
            """#)
        let output = "\(directory)/report.json"
        FileManager.default.createFile(atPath: output, contents: nil)
        let runner = Process()
        runner.executableURL = URL(fileURLWithPath: EmulatorProcess.binary)
        runner.arguments = ["scenario", "--json", path]
        runner.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
        runner.standardError = FileHandle.nullDevice
        try runner.run()
        defer { if runner.isRunning { kill(runner.processIdentifier, SIGKILL) } }
        #expect(try eventually(30) { FileManager.default.fileExists(atPath: started) }, "the run step started")
        kill(runner.processIdentifier, SIGINT)
        runner.waitUntilExit()
        #expect(runner.terminationStatus == 130)
        let report = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: output))) as? [String: Any]
        #expect(report?["interrupted"] as? String == "SIGINT", "\(String(describing: report))")
        #expect(report?["passed"] as? Bool == false)
        #expect(report?["stepsRun"] as? Int == 1 && report?["totalSteps"] as? Int == 3, "\(String(describing: report))")
    }

    @Test func aValueBuiltBySaveStopsAtItsBoundNamingTheStep() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let doublings = Array(repeating: #"{"do": "save", "save": {"x": "${x}${x}"}}"#, count: 40).joined(separator: ",\n")
        let path = try write(
            "doubling.json", #"{"name": "doubling", "steps": [{"do": "save", "save": {"x": "0123456789abcdef"}},\#n\#(doublings)]}"#)
        let result = try scenario(["--quiet", path])
        #expect(result.status == 1, "\(result.err.suffix(2000))")
        // 16 bytes doubled 16 times is 1 MiB; the 17th doubling (step 18) would be 2 MiB.
        #expect(
            result.out.contains(
                #"failed: field "save.x": with ${...} filled in it would be over 1048576 bytes (1 MiB), the most a value may have"#),
            "\(result.out.prefix(2000))")
        #expect(result.out.contains(" 18 FAIL save"))
        #expect(result.out.contains("FAIL doubling: step 18 of 41 failed (save)"))

        // What the file alone fills in is refused by --check, in the same words.
        let big = String(repeating: "x", count: 600_000)
        let known = try write(
            "known.json",
            #"{"name": "t", "variables": {"BIG": "\#(big)"}, "steps": [{"do": "http", "url": "http://127.0.0.1:9/", "body": {"a": "${BIG}${BIG}"}}]}"#
        )
        let check = try scenario(["--check", known])
        #expect(check.status == 2)
        #expect(
            check.err
                == "apns-emulator scenario: \(known), step 1 (http), field \"body\": with ${…} filled in it would be over 1048576 bytes (1 MiB), "
                + "the most a value may have (1200000 bytes at least)\n")
    }

    /// `expected` follows "FILE, ". A run refuses the file in the same words, before starting.
    @Test(arguments: [
        (
            #""backends": {"com.example.app": {"regster": {"url": "http://127.0.0.1:9/x"}}}, "steps": [{"do": "sleep", "ms": 1}]"#,
            #"backends.com.example.app: unknown field "regster" (expected action, addresseePointer, bind, fetch, maxAttempts, register, timeoutMs, unbind)"#
        ),
        (
            #""backends": {"com.example.app": {"register": {"url": "https://127.0.0.1:9/x"}}}, "steps": [{"do": "sleep", "ms": 1}]"#,
            #"backends.com.example.app: "register": https backends are not supported; use http:// (the emulator calls backends on a local network)"#
        ),
        (
            // A URL (or method) only the run knows stands for one that works; the other hook is still checked.
            #""backends": {"com.example.app": {"bind": {"url": "${emulator.adminUrl}/b", "method": "${emulator.keyId}"}, "fetch": {"url": "http://h:99999/f"}}}, "steps": [{"do": "sleep", "ms": 1}]"#,
            #"backends.com.example.app: "fetch": "url" 'http://h:99999/f' is not a usable URL: port '99999' is not a number from 1 to 65535 (expected http://host[:port]/path)"#
        ),
        (
            #""steps": [{"do": "http", "url": "file:///etc/passwd"}]"#,
            #"step 1 (http), field "url": 'file:///etc/passwd' is not a usable URL: only http:// is supported (expected http://host[:port]/path)"#
        ),
        (
            #""steps": [{"do": "http", "url": "https://127.0.0.1/x"}]"#,
            #"step 1 (http), field "url": 'https://127.0.0.1/x' is https: only http:// is supported"#
        ),
        (
            #""steps": [{"do": "device", "alias": "p"}, {"do": "scheduledSummary", "times": ["25:00"]}]"#,
            #"step 2 (scheduledSummary): scheduledSummary.times: "25:00" is not a time of day such as "08:00""#
        ),
        (
            #""steps": [{"do": "device", "alias": "p"}, {"do": "scheduledSummary", "times": ["08:00"], "utcOffsetMinutes": 99999}]"#,
            #"step 2 (scheduledSummary): scheduledSummary.utcOffsetMinutes must be from -840 to 840"#
        ),
        (
            // A value from the file's variables is judged too; one only the run knows stands in.
            #""variables": {"T": "25:00"}, "steps": [{"do": "device", "alias": "p"}, {"do": "scheduledSummary", "times": ["${T}"]}]"#,
            #"step 2 (scheduledSummary): scheduledSummary.times: "25:00" is not a time of day such as "08:00""#
        ),
        (
            #""steps": [{"do": "device", "alias": "p"}, {"do": "scheduledSummary", "times": ["${device.p.token}"], "utcOffsetMinutes": 100000}]"#,
            #"step 2 (scheduledSummary): scheduledSummary.utcOffsetMinutes must be from -840 to 840"#
        ),
        (
            #""steps": [{"do": "device", "alias": "phone"}, {"do": "device", "alias": "phone", "deviceId": "other"}]"#,
            #"step 2 (device), field "alias": a device "phone" exists already (give this one another alias)"#
        ),
        (
            #""emulator": {"arguments": ["--no-such-flag"]}, "steps": [{"do": "sleep", "ms": 1}]"#,
            #"emulator, field "arguments": unknown option --no-such-flag. See --help."#
        ),
        (
            #""emulator": {"arguments": ["--device-listen", "off"]}, "steps": [{"do": "sleep", "ms": 1}]"#,
            #"emulator, field "arguments": --device-listen off: an in-process emulator needs them"#
        ),
    ])
    func checkRefusesWhatARunWouldRefuse(body: String, expected: String) throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = try write("bad.json", #"{"name": "bad", \#(body)}"#)
        let check = try scenario(["--check", path])
        #expect(check.status == 2)
        #expect(check.err == "apns-emulator scenario: \(path), \(expected)\n")
        let run = try scenario([path])
        #expect(run.status == 2)
        #expect(run.err == check.err)
        #expect(run.out.isEmpty, "nothing ran: \(run.out)")
    }

    /// --admin at a server that is not an emulator's admin listener: said as such, with the
    /// status and a short excerpt (it printed the server's whole HTML 404 page).
    @Test(.requires(.python3)) func anAdminThatIsNotTheEmulatorIsSaidPlainly() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let http = try ForeignServer.http()
        let path = try write("plain.json", #"{"name": "t", "steps": [{"do": "sleep", "ms": 1}]}"#)
        let result = try scenario(["--admin", http.address.description, path])
        #expect(result.status == 2, "\(result.out)")
        #expect(
            result.err.contains(
                "\(http.address) did not answer as an apns-emulator admin listener: GET /api/v1/info was answered 404 (a page titled \"Error response\")"
            ),
            "\(result.err)")
        #expect(result.err.split(separator: "\n").count == 1, "one line, no page: \(result.err)")
    }

    /// What a `run` step leaves in the background (a service for later steps) is killed when
    /// the run ends: it outlived the runner.
    @Test func whatARunStepLeftRunningEndsWithTheRun() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let started = "\(directory)/background.pid"
        let path = try write(
            "service.json",
            #"""
            {"name": "service", "steps": [
              {"do": "run", "argv": ["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $! > \#(started)"]},
              {"do": "sleep", "ms": 1}
            ]}
            """#)
        let result = try scenario(["--ascii", path])
        #expect(result.status == 0, "\(result.out)\(result.err)")
        let pid = try #require(
            (try? String(contentsOfFile: started, encoding: .utf8)).flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
        defer { kill(pid, SIGKILL) }
        #expect(try eventually(5) { Self.isGone(pid) }, "the background sleep outlived the run")
    }

    /// --admin at a server that answers 200 with JSON to everything: not taken for an emulator
    /// (the run "passed" against it, every check reading as clean).
    @Test(.requires(.python3)) func anAdminThatAnswersJSONToEverythingIsNoEmulator() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let http = try ForeignServer.jsonToEverything()
        let path = try write(
            "stub.json",
            #"{"name": "t", "steps": [{"do": "device", "alias": "phone"}, {"do": "expect", "checks": {"crossAccount": 0}}]}"#)
        let result = try scenario(["--admin", http.address.description, "--key", "TEAM123456:KEY1234567:\(path)", path])
        #expect(result.status == 2, "\(result.out)")
        #expect(
            result.err.contains(
                "\(http.address) did not answer as an apns-emulator admin listener: GET /api/v1/info was answered 200 with JSON without the \"version\""
            ), "\(result.err)")
        #expect(!result.out.contains("PASS"), "\(result.out)")
    }

    /// An admin API started with --admin-token, driven without it: the message names the
    /// scenario command's own option, not serve's.
    @Test func anAdminTokenMissingNamesTheCommandsOwnOption() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let emulator = try EmulatorProcess(environment: ["APNS_EMULATOR_ADMIN_TOKEN": "t-\(UUID().uuidString)"])
        let admin = try emulator.address("admin").description
        let path = try write("plain.json", #"{"name": "t", "steps": [{"do": "sleep", "ms": 1}]}"#)
        let result = try scenario(["--admin", admin, path])
        #expect(result.status == 2, "\(result.out)")
        #expect(
            result.err.contains(
                "--admin \(admin): GET /api/v1/info: 401: this admin API needs a token; give --admin-token TOKEN (or APNS_EMULATOR_ADMIN_TOKEN)"),
            "\(result.err)")
        #expect(result.err.split(separator: "\n").count == 1, "\(result.err)")
    }

    /// With --admin-token, `run` and `http` steps can reach a protected admin API themselves:
    /// the token is in a run step's environment and in `${emulator.adminToken}`.
    @Test func stepsCanUseTheRunnersAdminToken() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let token = "t-\(UUID().uuidString)"
        let emulator = try EmulatorProcess(environment: ["APNS_EMULATOR_ADMIN_TOKEN": token])
        let admin = try emulator.address("admin").description
        let path = try write(
            "token.json",
            #"""
            {"name": "t", "steps": [
              {"do": "run", "argv": ["sh", "-c", "test \"$APNS_ADMIN_TOKEN\" = \#(token)"]},
              {"do": "http", "url": "${emulator.adminUrl}/api/v1/devices",
               "headers": {"authorization": "Bearer ${emulator.adminToken}"}, "expect": {"status": 200}}
            ]}
            """#)
        let result = try scenario(["--admin", admin, "--admin-token", token, path])
        #expect(result.status == 0, "\(result.out)\(result.err)")
        // Without the token, the http step's request is refused: the step is what reached it.
        let refused = try write("refused.json", #"{"name": "t", "steps": [{"do": "http", "url": "${emulator.adminUrl}/api/v1/devices"}]}"#)
        let withoutHeader = try scenario(["--admin", admin, "--admin-token", token, refused])
        #expect(withoutHeader.status == 1 && withoutHeader.out.contains("401"), "\(withoutHeader.out)")
    }

    @Test func anEmulatorThatDoesNotStartIsSaidOnce() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = try write(
            "tls.json",
            #"{"name": "t", "emulator": {"arguments": ["--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"]}, "steps": [{"do": "sleep", "ms": 1}]}"#
        )
        let result = try scenario([path])
        #expect(result.status == 1)
        #expect(result.err.hasPrefix("apns-emulator scenario: the emulator did not start: --tls-cert /nonexistent/c.pem"), "\(result.err)")
        #expect(result.err.components(separatedBy: "did not start").count == 2, "\(result.err)")
    }
}
