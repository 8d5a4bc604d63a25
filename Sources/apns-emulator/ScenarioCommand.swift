import AdminClient
import CommandLineOptions
import Foundation
import Glibc
import Networking
import Scenarios
import Synchronization

/// `apns-emulator scenario FILE`: runs a scenario file (docs/scenarios.md) against an emulator
/// it starts in this process, or against a running one (`--admin`). Exit status: 0 when every
/// step passed and the checks are clean, 1 when not, 2 for a bad file or bad options.
let scenarioCommand = ScenarioCLI.command

/// Everything of the `scenario` command, so no name clashes with main.swift's globals.
private enum ScenarioCLI {
    static let specs = [
        OptionSpec("var", "NAME=VALUE", repeatable: true, "set ${NAME} (over the environment and the scenario's variables)"),
        OptionSpec("admin", "HOST:PORT", "drive this running emulator (its admin listener) instead of starting one"),
        OptionSpec("admin-token", "TOKEN", "with --admin: the emulator's --admin-token (default: $APNS_EMULATOR_ADMIN_TOKEN)"),
        OptionSpec("key", "TEAMID:KEYID:PATH", "with --admin: the provider key (.p8) push steps and run steps sign with"),
        OptionSpec("sandbox", "HOST:PORT", "with --admin: the sandbox provider endpoint (default: from the emulator's /api/v1/info)"),
        OptionSpec("production", "HOST:PORT", "with --admin: the production provider endpoint (default: from /api/v1/info)"),
        OptionSpec(
            "channel-sandbox", "HOST:PORT", "with --admin: the sandbox channel management endpoint (default: channelSandbox from /api/v1/info)"),
        OptionSpec("channel-production", "HOST:PORT", "with --admin: the production channel management endpoint (default: from /api/v1/info)"),
        OptionSpec("ca", "PATH", "with --admin: the CA the endpoints' certificate chains to (default: the emulator's caFile)"),
        OptionSpec("reset", nil, "with --admin: POST /api/v1/reset first (a clean slate; it drops every device and record)"),
        OptionSpec("strict", nil, "a cross-account delivery the scenario does not expect fails the run (the default)"),
        OptionSpec("no-strict", nil, "report cross-account deliveries without failing the run"),
        OptionSpec("check", nil, "only check the file (exit 0 or 2); run nothing"),
        OptionSpec("json", nil, "print the report as one JSON object at the end instead of text"),
        OptionSpec("quiet", nil, "print only failures, the check and the summary line"),
        OptionSpec("ascii", nil, "plain ASCII (ok/FAIL instead of ✓/✗; the default when stdout is not a terminal)"),
    ]

    static let summary = """
        apns-emulator scenario FILE [options]: runs the scenario FILE (JSON; docs/scenarios.md): virtual \
        devices, accounts, pushes, provider commands, waits and expectations, then the cross-account \
        check. Without --admin it starts its own emulator in this process on free loopback ports, so \
        nothing else is needed.
        Exit status: 0 when every step passed and the checks are clean, 1 otherwise, 2 for a bad file or options, 130 or 143 when Ctrl-C or SIGTERM stopped it (after the report of the steps done).
        """

    static let command = Subcommand(
        name: "scenario", listing: "run a scenario file: devices, accounts, pushes, waits and checks (docs/scenarios.md)",
        summary: summary, specs: specs, errorPrefix: "apns-emulator scenario", run: { _, args in run(args) })

    static func fail(_ message: String, code: Int32 = 2) -> Never { command.fail(message, code: code) }

    static func run(_ args: [String]) -> Never {
        // Interrupted is not passed: main.swift's handlers exit 0, fine for serve, wrong here.
        signal(SIGINT) { _ in _exit(130) }
        signal(SIGTERM) { _ in _exit(143) }
        let (options, positional) = command.parse(args)
        guard positional.count == 1, let path = positional.first else {
            fail("give one scenario FILE (got \(positional.count)); see --help")
        }
        if options.isSet("strict") && options.isSet("no-strict") { fail("choose one of --strict and --no-strict") }
        let remote = options.string("admin")
        for flag in ["admin-token", "key", "sandbox", "production", "channel-sandbox", "channel-production", "ca", "reset"]
        where remote == nil && options.isSet(flag) {
            fail("--\(flag) goes with --admin (without it the runner starts its own emulator)")
        }

        var variables = ProcessInfo.processInfo.environment
        for assignment in options.strings("var") {
            guard let equals = assignment.firstIndex(of: "="), equals != assignment.startIndex else {
                fail("--var '\(assignment)' is not NAME=VALUE")
            }
            variables[String(assignment[..<equals])] = String(assignment[assignment.index(after: equals)...])
        }
        let scenario: Scenario
        do { scenario = try ScenarioParser.parse(file: path, variables: variables) } catch { fail(error.description) }
        if remote != nil && options.string("key") == nil { checkWithoutKey(scenario) }
        if options.isSet("check") {
            print("\(path): ok (\(scenario.steps.count) steps)")
            exit(0)
        }

        let target: EmulatorTarget
        if let remote {
            if !scenario.emulatorArguments.isEmpty {
                FileHandle.standardError.write(
                    Data(
                        "apns-emulator scenario: note: \"emulator.arguments\" only apply to an emulator the runner starts; ignored with --admin\n"
                            .utf8))
            }
            target = connect(remote, options, scenario)
        } else {
            do { target = try EmulatorTarget.inProcess(bundleIDs: scenario.bundleIDs, arguments: scenario.emulatorArguments) } catch {
                // With --json the report says it too (`setupError`), so a CI job reading it has one.
                if options.isSet("json") { emit(ScenarioReport.notStarted(scenario, because: error.description).json.serialized(pretty: true)) }
                fail(error.description, code: 1)  // "the emulator did not start: …" already
            }
        }

        let json = options.isSet("json")
        let printer = ReportPrinter(ascii: options.isSet("ascii") || isatty(STDOUT_FILENO) == 0, quiet: options.isSet("quiet"))
        // The steps done so far, for the report an interrupt still prints.
        let done = Mutex<[StepReport]>([])
        let started = Date()
        stopOnInterrupt(target) { signal in
            let steps = done.withLock { $0 }
            let report = ScenarioReport.interrupted(
                scenario, by: signal, steps: steps, durationMs: Int(Date().timeIntervalSince(started) * 1000))
            return json ? report.json.serialized(pretty: true) : printer.footer(report)
        }
        if !json && !printer.quiet { emit(printer.header(scenario)) }
        let progress: @Sendable (StepReport) -> Void = { step in
            // A step an interrupt ended (its command killed) is not one the run did.
            guard !interrupted.load(ordering: .acquiring) else { return }
            done.withLock { $0.append(step) }
            if !json { emit(printer.step(step)) }
        }
        let runOptions = ScenarioRunner.Options(
            strict: !options.isSet("no-strict"),
            onStep: progress)
        let report = ScenarioRunner.run(scenario, on: target, options: runOptions)
        // Interrupted: the handler stops the commands (which ends the step the run was in)
        // and exits 130 or 143; this thread must not exit first with the run's own status.
        while interrupted.load(ordering: .acquiring) { sleep(1) }
        // What `run` steps left in the background (a service for later steps) ends with the run.
        RunningCommands.stopAll()
        target.stop()
        if json { emit(report.json.serialized(pretty: true)) } else { emit(printer.footer(report)) }
        // _exit after flushing: the in-process emulator's threads may still be winding down.
        fflush(nil)
        _exit(report.passed ? 0 : 1)
    }

    /// Ctrl-C or a CI timeout's SIGTERM stops the emulator the runner started and removes its
    /// folder (its key and certificates), as the end of a run does, and prints `report` (the
    /// steps done so far, given the signal's name) before exiting 130 or 143. With `--admin`
    /// the emulator is not the runner's: only the commands of its run steps are stopped.
    static func stopOnInterrupt(_ target: EmulatorTarget, report: @escaping @Sendable (String) -> String) {
        for (number, code, name) in [(SIGINT, Int32(130), "SIGINT"), (SIGTERM, Int32(143), "SIGTERM")] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                interrupted.store(true, ordering: .releasing)
                let what =
                    target.isInProcess
                    ? "the emulator it started and the commands of its run steps"
                    : "the commands of its run steps (the emulator at --admin keeps running)"
                FileHandle.standardError.write(Data("apns-emulator scenario: interrupted; stopping \(what)\n".utf8))
                let text = report(name)  // before stopping ends the running step
                RunningCommands.stopAll()
                target.stop()
                emit(text)
                fflush(nil)
                _exit(code)
            }
            source.resume()
            interruptSources.append(source)
        }
    }

    /// Set by the interrupt handler before it stops anything.
    static let interrupted = Atomic<Bool>(false)

    /// Kept for the life of the run (a released source stops watching); set once, on the main
    /// thread, before the run.
    nonisolated(unsafe) static var interruptSources: [any DispatchSourceSignal] = []

    /// With `--admin` and no `--key` (checked with `--check` too): push steps cannot sign, and
    /// a provider command of a run step would fail later, for no reason it could name.
    static func checkWithoutKey(_ scenario: Scenario) {
        if let push = scenario.steps.first(where: { [.push, .createChannel, .broadcast].contains($0.kind) }) {
            fail("\(push.location) signs with the provider key: --key TEAMID:KEYID:PATH")
        }
        if let run = scenario.steps.first(where: { $0.kind == .run }) {
            FileHandle.standardError.write(
                Data(
                    "apns-emulator scenario: warning: without --key, \(run.location) and every run step get APNS_KEY_PATH, APNS_KEY_ID and APNS_TEAM_ID empty\n"
                        .utf8))
        }
    }

    /// An emulator already running: its admin API must answer.
    static func connect(_ admin: String, _ options: ResolvedOptions, _ scenario: Scenario) -> EmulatorTarget {
        let addressText = admin.hasPrefix("http://") ? String(admin.dropFirst("http://".count).prefix { $0 != "/" }) : admin
        func address(_ text: String, _ flag: String) -> HostPort {
            do { return try HostPort(parsing: text) } catch { fail("--\(flag): \(error.description)") }
        }
        var access = EmulatorTarget.ProviderAccess()
        access.sandbox = options.string("sandbox").map { address($0, "sandbox") }
        access.production = options.string("production").map { address($0, "production") }
        access.channelSandbox = options.string("channel-sandbox").map { address($0, "channel-sandbox") }
        access.channelProduction = options.string("channel-production").map { address($0, "channel-production") }
        access.caPath = options.string("ca")
        if let key = options.string("key") {
            let parts = key.split(separator: ":", maxSplits: 2).map(String.init)
            guard parts.count == 3 else { fail("--key '\(key)' is not TEAMID:KEYID:PATH") }
            guard FileManager.default.isReadableFile(atPath: parts[2]) else { fail("--key: cannot read \(parts[2])") }
            (access.teamID, access.keyID, access.keyPath) = (parts[0], parts[1], parts[2])
        }
        let target: EmulatorTarget
        let adminAddress = address(addressText, "admin")
        var request = "GET /api/v1/info"
        do {
            let token = options.string("admin-token") ?? ProcessInfo.processInfo.environment["APNS_EMULATOR_ADMIN_TOKEN"]
            target = try EmulatorTarget.remote(admin: adminAddress, token: token, overrides: access)
            request = "POST /api/v1/reset"
            if options.isSet("reset") { try target.api.reset() }
        } catch {
            fail(AdminListenerAnswer.problem(adminAddress, request: request, error))
        }
        return target
    }

    static func emit(_ text: String) {
        guard !text.isEmpty else { return }
        print(text)
        fflush(nil)
    }
}
