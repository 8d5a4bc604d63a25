import APNsCore
import AdminClient
import CommandLineOptions
import Foundation
import Glibc
import Networking
import ProviderClient
import Synchronization

/// `apns-emulator load`: a provider-side load generator against an emulator (or any APNs-like
/// HTTP/2 endpoint given with --provider). Exit status: 0 when the run completed, whatever
/// the answers; 1 when it could not run (no emulator, no connection, no tokens) or the target
/// went away; 2 for usage.
let loadCommand = LoadCLI.command

/// Ctrl-C (or SIGTERM) count: the first stops sending and prints the summary, the second
/// exits at once. `stopSignal`: the first one, for the exit status (128 + its number).
private let interrupts = Atomic<Int>(0)
private let stopSignal = Atomic<Int32>(0)

private enum LoadCLI {
    static let maxRequests = 10_000_000
    static let maxDuration = 3600.0
    static let defaultRequests = 100_000

    static let specs = [
        OptionSpec(
            "admin", "HOST:PORT", default: "127.0.0.1:8197", "the emulator's admin listener: provider listeners, CA, key and tokens come from it"),
        OptionSpec("admin-token", "TOKEN", "the emulator's --admin-token, if it has one (default: $APNS_EMULATOR_ADMIN_TOKEN)"),
        OptionSpec("provider", "HOST:PORT", "the provider listener to load (default: the environment's listener from the emulator's /api/v1/info)"),
        OptionSpec("h2c", nil, "cleartext HTTP/2 (the emulator's --h2c-*-listen listener, or --provider speaks h2c)"),
        OptionSpec("ca", "PATH", "CA to trust (default: the emulator's caFile, else certs/ca.pem if present)"),
        OptionSpec(
            "key", "TEAMID:KEYID:PATH",
            "provider signing key (.p8) (default: a key the emulator lists for the bundle's team whose .p8 is readable here, e.g. the demo key)"),
        OptionSpec("bundle", "BUNDLEID", default: "com.example.app", "app bundle id (apns-topic)"),
        OptionSpec("environment", "sandbox|production", default: "sandbox", "environment of the tokens and of :authority"),
        OptionSpec("connections", "N", default: "4", "HTTP/2 connections, one thread each (1-1000)"),
        OptionSpec("streams", "M", default: "100", "requests in flight per connection (1-1000)"),
        OptionSpec("requests", "TOTAL", "requests to send, whatever their answers (up to 10000000; default 100000 unless --duration is given)"),
        OptionSpec("duration", "SECONDS", "stop sending after this long (up to 3600); with --requests, whichever comes first"),
        OptionSpec("rate", "PER_SECOND", default: "0", "requests a second over all connections (a token bucket; 0 = as fast as answers come)"),
        OptionSpec(
            "mix", "TYPE=WEIGHT,…", default: "alert",
            "push types and weights, e.g. alert=80,background=20 (alert: priority 10; background: content-available, priority 5); sent in a fixed interleaved order, so the counts are exact"
        ),
        OptionSpec("payload-bytes", "N", default: "0", "pad each payload to about N bytes (up to 4096; 0 = as small as it comes)"),
        OptionSpec("devices", "N", "create N virtual devices with the app and push to their tokens in turn (1-100000; default 100)"),
        OptionSpec("tokens-from-emulator", nil, "instead, push to the active tokens the emulator already has for the bundle and environment"),
        OptionSpec("timeout", "SECONDS", default: "30", "cancel a request unanswered this long (counted as timed out)"),
        OptionSpec("json", nil, "print the summary as one JSON object (stdout); no header"),
        OptionSpec("quiet", nil, "no progress lines on standard error"),
    ]

    static let summary = """
        Sends pushes like a provider under load: --connections HTTP/2 \
        connections (one thread each), each keeping --streams requests in flight, until --requests were \
        sent or --duration passed; then prints throughput, answers by status and reason, push types and \
        latency percentiles (submit to complete answer). A connection the server ends (GOAWAY, close) is \
        opened again and counted. One provider token per connection, signed again after 40 minutes.
        Exit status: 0 when the run completed (whatever the answers), 130 when Ctrl-C stopped it (143 for SIGTERM), 1 when it could not run or the target could no longer be reached, 2 for usage errors.
        """

    static let command = Subcommand(
        name: "load", listing: "load an emulator like providers do: N connections × M streams, then throughput and latency",
        summary: summary, specs: specs, errorPrefix: "apns-emulator load", run: { _, args in run(args) })

    static func fail(_ message: String, code: Int32 = 2) -> Never { command.fail(message, code: code) }

    static func note(_ message: String) { FileHandle.standardError.write(Data("apns-emulator load: note: \(message)\n".utf8)) }

    static func run(_ args: [String]) -> Never {
        let (options, positional) = command.parse(args)
        guard positional.isEmpty else { fail("unexpected argument '\(positional[0])'; see --help") }

        // Usage first: nothing is asked of the emulator for a bad command line.
        let settings: Settings
        do { settings = try Settings(options) } catch { fail(error.description) }
        if !settings.h2c { checkTLSFiles(command, options) }

        var setup = LoadSetup(
            admin: settings.admin, token: options.string("admin-token") ?? ProcessInfo.processInfo.environment["APNS_EMULATOR_ADMIN_TOKEN"],
            bundleID: settings.bundleID,
            environment: settings.environment)
        let prepared: Prepared
        do { prepared = try prepare(settings, &setup) } catch {
            fail(error.description, code: error.isUsage ? 2 : 1)
        }
        for message in setup.notes { note(message) }

        var plan = LoadPlan(
            connection: prepared.connection, signingKey: prepared.key, topic: settings.bundleID,
            authority: setup.authority, deviceTokens: prepared.tokens, mix: settings.mix)
        plan.payloadBytes = settings.payloadBytes
        plan.connections = settings.connections
        plan.streamsPerConnection = settings.streams
        plan.maxRequests = settings.requests ?? (settings.duration == nil ? defaultRequests : maxRequests)
        plan.maxDuration = settings.duration ?? maxDuration
        plan.ratePerSecond = settings.rate
        plan.requestTimeout = settings.timeout
        let description = LoadDescription(
            target: prepared.connection.address.description, tls: prepared.connection.tls, environment: settings.environment.rawValue,
            tokens: prepared.tokens.count, tokenSource: settings.devices == nil ? "from the emulator" : "created", keySpec: prepared.keySpec,
            plan: plan, requests: settings.requests ?? (settings.duration == nil ? defaultRequests : nil), duration: settings.duration)

        if !settings.json { emit(description.header) }
        // A CI job's timeout sends SIGTERM: stopped as by Ctrl-C, never a status 0.
        for number in [SIGINT, SIGTERM] {
            signal(number) { received in
                if interrupts.wrappingAdd(1, ordering: .relaxed).oldValue > 0 { _exit(128 + received) }
                stopSignal.store(received, ordering: .relaxed)
            }
        }
        let generator = LoadGenerator(plan: plan)
        var last = LoadGenerator.Progress(elapsedSeconds: 0, completed: 0, failed: 0)
        var stopping = false
        let report: LoadGenerator.Report
        do {
            report = try generator.run { progress in
                if interrupts.load(ordering: .relaxed) > 0, !stopping {
                    stopping = true
                    generator.stop()
                    // The answers in flight are waited for (up to --timeout): said, since
                    // nothing else shows meanwhile.
                    FileHandle.standardError.write(
                        Data(
                            "stopping: no more requests; waiting up to \(Int(settings.timeout)) s for the answers in flight, then the summary (Ctrl-C again: quit at once, without it)\n"
                                .utf8))
                }
                guard !settings.quiet, progress.elapsedSeconds - last.elapsedSeconds >= 1 else { return }
                FileHandle.standardError.write(Data((LoadDescription.progress(progress, since: last) + "\n").utf8))
                last = progress
            }
        } catch {
            fail("\(error)", code: 1)
        }
        emit(settings.json ? description.json(report).serialized() : description.summary(report))
        if interrupts.load(ordering: .relaxed) > 0 { exit(128 + max(stopSignal.load(ordering: .relaxed), SIGINT)) }
        // The target went away and did not come back: a CI gate on the exit status must not pass.
        exit(report.stoppedBy == "unreachable" ? 1 : 0)
    }

    static func emit(_ text: String) {
        print(text)
        fflush(nil)
    }

    /// The command line, checked.
    struct Settings {
        var admin: HostPort
        var provider: HostPort?
        var h2c: Bool
        var caPath: String?
        var keySpec: String?
        var bundleID: String
        var environment: PushEnvironment
        var connections: Int
        var streams: Int
        var requests: Int?
        var duration: Double?
        var rate: Double
        var mix: PushMix
        var payloadBytes: Int
        /// nil: tokens from the emulator.
        var devices: Int?
        var timeout: Double
        var json: Bool
        var quiet: Bool

        init(_ options: ResolvedOptions) throws(UsageError) {
            func address(_ name: String) throws(UsageError) -> HostPort? {
                guard let text = options.string(name) else { return nil }
                do { return try HostPort(parsing: text) } catch { throw UsageError("--\(name): \(error.description)") }
            }
            func integer(_ name: String, _ range: ClosedRange<Int>) throws(UsageError) -> Int? {
                guard let text = options.string(name) else { return nil }
                guard let value = Int(text), range.contains(value) else {
                    throw UsageError(
                        "--\(name) must be a whole number from \(grouped(range.lowerBound)) to \(grouped(range.upperBound)), not '\(text)'")
                }
                return value
            }
            /// `above` excludes the lower bound itself (a duration of 0 is no run).
            func number(_ name: String, _ range: ClosedRange<Double>, above: Bool = false) throws(UsageError) -> Double? {
                guard let text = options.string(name) else { return nil }
                guard let value = Double(text), value.isFinite, range.contains(value), !(above && value == range.lowerBound) else {
                    let (low, high) = (grouped(range.lowerBound), grouped(range.upperBound))
                    let bounds = above ? "above \(low) and up to \(high)" : "from \(low) to \(high)"
                    throw UsageError("--\(name) must be a number \(bounds), not '\(text)'")
                }
                return value
            }
            admin = try address("admin")!
            provider = try address("provider")
            h2c = options.isSet("h2c")
            caPath = options.string("ca")
            keySpec = options.string("key")
            bundleID = options.string("bundle")!
            guard !bundleID.isEmpty else { throw UsageError("--bundle must not be empty") }
            guard let environment = PushEnvironment(rawValue: options.string("environment")!) else {
                throw UsageError("--environment must be sandbox or production, not '\(options.string("environment")!)'")
            }
            self.environment = environment
            connections = try integer("connections", 1...1000)!
            streams = try integer("streams", 1...1000)!
            requests = try integer("requests", 1...LoadCLI.maxRequests)
            duration = try number("duration", 0...LoadCLI.maxDuration, above: true)
            rate = try number("rate", 0...10_000_000)!
            guard rate == 0 || rate >= 0.001 else { throw UsageError("--rate must be 0 (no cap) or from 0.001 to 10000000, not \(rate)") }
            do { mix = try PushMix(parsing: options.string("mix")!) } catch { throw UsageError(error.description) }
            payloadBytes = try integer("payload-bytes", 0...4096)!
            if options.isSet("tokens-from-emulator") {
                guard !options.isSet("devices") else { throw UsageError("choose one of --devices and --tokens-from-emulator") }
                devices = nil
            } else {
                devices = try integer("devices", 1...100_000) ?? 100
            }
            timeout = try number("timeout", 0...3600, above: true)!
            json = options.isSet("json")
            quiet = options.isSet("quiet")
        }
    }

    /// Everything the run needs from outside the command line.
    struct Prepared {
        var connection: HTTP2ClientConnection.Options
        var key: ProviderSigningKey
        var keySpec: String
        var tokens: [String]
    }

    static func prepare(_ settings: Settings, _ setup: inout LoadSetup) throws(LoadSetupError) -> Prepared {
        // The key first: a bad --key is a usage error, found before anything else is asked.
        let key: ProviderSigningKey
        let keySpec: String
        if let spec = settings.keySpec {
            do { key = try ProviderSigningKey(spec: spec) } catch { throw LoadSetupError("\(error)", usage: true) }
            keySpec = spec
        } else {
            (key, keySpec) = try setup.discoverKey()
        }
        var addresses: JSONValue = .null
        if settings.provider == nil || settings.caPath == nil { addresses = try setup.info() }
        let address: HostPort
        if let provider = settings.provider {
            address = provider
        } else {
            address = try setup.providerAddress(from: addresses, h2c: settings.h2c)
        }
        var connection = HTTP2ClientConnection.Options(address: address)
        connection.tls = !settings.h2c
        connection.caPath =
            settings.caPath ?? addresses["caFile"]?.stringValue.flatMap { FileManager.default.isReadableFile(atPath: $0) ? $0 : nil }
            ?? (FileManager.default.isReadableFile(atPath: "certs/ca.pem") ? "certs/ca.pem" : nil)

        // Reachable, and an HTTP/2 server of the kind asked for (a TLS port given --h2c answers
        // no request, and says nothing), before devices are made for it: a failed run leaves
        // the emulator as it was.
        do {
            let probe = try HTTP2ClientConnection(connection)
            defer { probe.close() }
            try probe.confirmHTTP2()
        } catch {
            throw LoadSetupError(providerProblem(error, address: address, options: connection))
        }

        let tokens: [String]
        if let count = settings.devices {
            tokens = try setup.createDevices(count)
            guard !tokens.isEmpty else { throw LoadSetupError("the emulator created no devices for \(settings.bundleID)") }
        } else {
            tokens = try setup.existingTokens()
            guard !tokens.isEmpty else {
                throw LoadSetupError(
                    "the emulator has no active tokens for \(settings.bundleID) (\(settings.environment.rawValue)); create devices first, or use --devices N"
                )
            }
        }
        return Prepared(connection: connection, key: key, keySpec: keySpec, tokens: tokens)
    }

    /// Why the provider listener cannot be used, naming it and what was waited for, as
    /// `conformance` does: a bare "timed out" says neither which port nor which step.
    static func providerProblem(_ error: ClientError, address: HostPort, options: HTTP2ClientConnection.Options) -> String {
        if error.mismatch != nil { return protocolMismatchAdvice(error) }
        let kind = options.tls ? "TLS" : "cleartext (h2c)"
        let seconds = options.timeoutMilliseconds / 1000
        // "timed out" alone is the connect or the TLS handshake; "timed out after N ms" the wait for SETTINGS.
        if error.description == "timed out" {
            let step = options.tls ? "connecting and the TLS handshake" : "connecting"
            return "the provider listener \(address) (\(kind)) did not answer within \(seconds) s (\(step)): "
                + "a port that accepts and stays silent, or drops packets, is not an APNs provider listener"
        }
        if error.description.hasPrefix("timed out") {
            return "the provider listener \(address) (\(kind)) sent no HTTP/2 SETTINGS within \(seconds) s after "
                + "\(options.tls ? "the TLS handshake" : "connecting") (\(error.description)): not an HTTP/2 (APNs) provider listener?"
        }
        let text = certificateAdvice(error, address: address)
        return text.contains(address.description) ? text : "the provider listener \(address) (\(kind)): \(text)"
    }
}
