import APNsCore
import CommandLineOptions
import Conformance
import EmulatorServer
import Foundation
import Glibc
import JSON
import MonotonicClock
import Networking
import OpenSSLCrypto
import ProviderClient
import Synchronization

/// `apns-emulator conformance`: the catalogue of APNs cases against any APNs-compatible server
/// (the emulator, another mock, Apple's sandbox with a real key and token), or a recording of
/// one run replayed against another. docs/conformance.md is its manual.
let conformanceCommand = Subcommand(
    name: "conformance", listing: "run the catalogue of APNs cases against a server (or Apple) and compare",
    summary: """
        Sends each case of the conformance catalogue (one per APNs rule a provider can see: device pushes, Live
        Activity and VoIP topics and limits, broadcasts, and channel management on --channel-target) to --target and
        compares the answer with the one docs/apns-behaviour.md gives, with its evidence. Cases whose needs are
        not given (--token, --second-key, …) are skipped and say why. The broadcast and channel cases create one
        channel (No Message Stored) and delete it at the end. Safe to point at Apple: one provider token
        per connection, at most --rate requests a second, a bounded number of requests, nothing repeated.
        --record FILE writes what was seen; --replay FILE compares a target's answers with a recording instead.
        Exit status: 0 when every case that ran answered as expected, 1 when one differs or got no answer,
        2 for a usage problem, a target that cannot be reached or stops answering, or a run whose own key, topic or
        token the target refuses at its first request, or that answers it 404 (not a device-push endpoint: a
        channel-management port?); nothing more is sent then; 130 or 143 when Ctrl-C or SIGTERM stopped it (after the case in
        flight: the channels it created are deleted and the cases run are reported; a second Ctrl-C quits at once).
        """,
    specs: [
        OptionSpec("target", "HOST:PORT", "the server to test (Apple: api.sandbox.push.apple.com:443)"),
        OptionSpec("sandbox", nil, "judge in the sandbox (the default; :authority api.sandbox.push.apple.com)"),
        OptionSpec("production", nil, "judge in production (:authority api.push.apple.com; an Apple --target: its production host)"),
        OptionSpec("key", "TEAMID:KEYID:PATH", "the provider signing key (.p8) the run's token is signed with"),
        OptionSpec("topic", "BUNDLEID", "the app's bundle id (apns-topic), owned by the key's team"),
        OptionSpec("token", "HEX", "a valid device token of --topic in this environment (a development token for the sandbox)"),
        OptionSpec("uninstalled-token", "HEX", "a token of --topic whose app was uninstalled (for 410 Unregistered)"),
        OptionSpec("second-key", "TEAMID:KEYID:PATH", "a second key of the same team"),
        OptionSpec("other-environment-key", "TEAMID:KEYID:PATH", "a key restricted to the other environment"),
        OptionSpec("certificate", "PATH", "a provider certificate (PEM) for --topic, for the certificate cases"),
        OptionSpec("certificate-key", "PATH", "the certificate's private key (PEM)"),
        OptionSpec("allow-token-update", nil, "run the case that signs a second token within 20 minutes on one connection"),
        OptionSpec(
            "channel-target", "HOST:PORT",
            "where channel management is served (default: paired with --target: Apple's api-manage-broadcast host, the emulator's 2195/2196 for 2197/2198)"
        ),
        OptionSpec("voip-token", "HEX", "a VoIP (PushKit) token of --topic in this environment (for the 5,120-byte VoIP limit)"),
        OptionSpec("topic-without-broadcast", "BUNDLEID", "an app of the key's team without the Broadcast capability (FeatureNotEnabled)"),
        OptionSpec(
            "topic-at-channel-limit", "BUNDLEID", "an app of the key's team with as many live channels as it may have (CannotCreateChannelConfig)"),
        OptionSpec("case", "ID", repeatable: true, "run only this case"),
        OptionSpec("catalogue", "FILE", "another catalogue file (default: the one built in)"),
        OptionSpec("rate", "N", default: "5", "at most N requests a second (1–20)"),
        OptionSpec("ca", "PATH", "CA certificate to trust (default: the system store for Apple's hosts; else certs/ca.pem if present)"),
        OptionSpec("insecure", nil, "do not verify the server certificate"),
        OptionSpec("h2c", nil, "cleartext HTTP/2 with prior knowledge (the emulator's --h2c-*-listen listeners)"),
        OptionSpec("json", nil, "print the report as one JSON object"),
        OptionSpec("record", "FILE", "write what was seen to FILE, for --replay"),
        OptionSpec("replay", "FILE", "compare the target's answers with this recording instead of the catalogue"),
        OptionSpec("dry-run", nil, "print every request the run would send, and send nothing"),
        OptionSpec("list", nil, "print the catalogue's cases and exit"),
    ],
    run: runConformance
)

private func runConformance(_ command: Subcommand, _ args: [String]) -> Never {
    var command = command
    let (options, positional) = command.parse(args)
    if options.isSet("json"), let listing = ["list", "dry-run"].first(where: { options.isSet($0) }) {
        command.fail("--json is the report of a run; --\(listing) prints text")
    }
    // A run asked for JSON that cannot run (or stops at its own setup) still prints an object.
    command.failsInJSON = options.isSet("json")
    guard positional.isEmpty else { command.fail("conformance takes no arguments; got \(positional.joined(separator: " "))") }
    let catalogue = loadCatalogue(command, options)
    if options.isSet("list") {
        for item in chooseCases(command, catalogue, only: options.strings("case"), recording: nil) {
            let needs = item.needs.isEmpty ? "" : "  [needs \(item.needs.sorted().map(\.rawValue).joined(separator: ", "))]"
            print("\(item.id)  \(item.expectedSummary)  \(item.evidence)\(item.unconfirmed ? " (unconfirmed)" : "")  \(item.title)\(needs)")
        }
        exit(0)
    }
    let recording = options.string("replay").map { path in readRecording(command, path) }
    if options.isSet("sandbox") && options.isSet("production") { command.fail("choose one of --sandbox and --production") }
    let environment: APNsEnvironment =
        options.isSet("production") ? .production : options.isSet("sandbox") ? .sandbox : recording?.environment ?? .sandbox
    guard let targetText = options.string("target") else { command.fail("conformance needs --target HOST:PORT") }
    let target: HostPort
    do { target = try HostPort(parsing: targetText) } catch { command.fail("--target: \(error.description)") }
    guard let topic = options.string("topic") else { command.fail("conformance needs --topic BUNDLEID") }
    let rate: Int
    do { rate = try options.integer(command.spec("rate"), in: 1...20) ?? 5 } catch { command.fail(error.description) }
    if options.isSet("certificate") != options.isSet("certificate-key") { command.fail("--certificate and --certificate-key go together") }
    if options.isSet("record") && recording != nil { command.fail("--record and --replay do not go together") }
    if options.isSet("h2c") {
        if APNsEnvironment.forAppleHost(Substring(target.host)) != nil { command.fail("--h2c: Apple's hosts speak HTTP/2 over TLS only") }
        if options.isSet("certificate") { command.fail("--h2c has no TLS, so no client certificate: drop --certificate or --h2c") }
    }

    var inputs = RunInputs(
        topic: topic, environment: environment, key: signingKey(command, options, "key", required: true)!,
        unknownToken: randomToken(), now: Int64(Date().timeIntervalSince1970))
    for (name, token) in [
        ("token", options.string("token")), ("uninstalled-token", options.string("uninstalled-token")),
        ("voip-token", options.string("voip-token")),
    ] {
        if let token, token.isEmpty || token.count % 2 != 0 || !token.allSatisfy(\.isHexDigit) {
            command.fail("--\(name) \(token) is not a device token (an even number of hex digits)")
        }
    }
    inputs.deviceToken = options.string("token")
    inputs.uninstalledToken = options.string("uninstalled-token")
    inputs.secondKey = signingKey(command, options, "second-key")
    inputs.otherEnvironmentKey = signingKey(command, options, "other-environment-key")
    inputs.hasCertificate = options.isSet("certificate")
    inputs.allowTokenUpdate = options.isSet("allow-token-update")
    inputs.voipToken = options.string("voip-token")
    inputs.topicWithoutBroadcast = options.string("topic-without-broadcast")
    inputs.topicAtChannelLimit = options.string("topic-at-channel-limit")
    inputs.unknownChannelID = randomChannelID()
    var channelTarget: HostPort?
    if let text = options.string("channel-target") {
        do { channelTarget = try HostPort(parsing: text) } catch { command.fail("--channel-target: \(error.description)") }
    } else {
        channelTarget = ConformanceConnections.pairedChannelTarget(target, environment: environment)
    }
    inputs.hasChannelManagement = channelTarget != nil

    var planner: CasePlanner
    do { planner = try CasePlanner(catalogue: catalogue, inputs: inputs) } catch { command.fail("--key: cannot sign a token: \(error)") }
    let chosen = chooseCases(command, catalogue, only: options.strings("case"), recording: recording)
    // A run that can check nothing is a usage error, not a pass: name what the cases need.
    if !chosen.isEmpty, chosen.allSatisfy({ inputs.whySkipped($0) != nil }) {
        let needs = Set(chosen.compactMap { inputs.whySkipped($0) }).sorted().joined(separator: "; ")
        command.fail("every case chosen would be skipped: \(needs)")
    }

    if options.isSet("dry-run") {
        if let channelTarget, chosen.contains(where: { $0.usesRunChannel && inputs.whySkipped($0) == nil }) {
            print("# first: the run's channel, deleted at the end (\(channelTarget))")
            print(DryRun.describeRequest(planner.createChannelRequest(), target: channelTarget.description) + "\n")
            planner.inputs.channelID = "<the run's channel>"
        }
        for item in chosen {
            if let why = inputs.whySkipped(item) {
                print("# \(item.id): skipped, \(why)\n")
                continue
            }
            do {
                let planned = try planner.plan(item)
                let address =
                    planned.host == .channelManagement
                    ? channelTarget ?? target
                    : ConformanceConnections.address(for: planned.connection.environment, target: target, runEnvironment: environment)
                print(DryRun.describe(planned, target: address.description, runEnvironment: environment) + "\n")
            } catch {
                command.fail("case \(item.id): \(error)")
            }
        }
        exit(0)
    }

    // Before anything is sent: a run against Apple is not one to repeat for a typo in a path,
    // and a file of ours that cannot be used is not the target's fault.
    if let path = options.string("record"), let why = RecordFile.problem(path) { command.fail("--record \(path): \(why)") }
    if !options.isSet("h2c") { checkTLSFiles(command, options, certificate: "certificate", key: "certificate-key") }

    var connections = ConformanceConnections(
        command: command, options: options, target: target, channelTarget: channelTarget, environment: environment)
    let pacer = RequestPacer(perSecond: Double(rate), burst: 1)
    var results: [CaseResult] = []
    // A target that answers none of the first cases, or stops answering (a port that accepts
    // and stays silent, a host that drops packets), would otherwise cost every case its timeout.
    let silentLimit = 3
    var silent = 0
    var answered = false
    var lastUnanswered = ""
    var gaveUp = false
    // The run's channel: nil until a case needs it; then its id, or why it could not be made.
    var channelFailure: String?
    var channelTried = false
    // The channel-management target did not answer: its cases are skipped saying so, and its
    // silence does not count against --target (the push host may answer every case).
    var channelHostDown: String?
    func silentChannelHost(_ seen: Observation) -> String {
        "the channel-management target \(channelTarget?.description ?? "") did not answer (\(seen.unanswered ?? "no answer"))"
    }
    // Channels the run made (its own, and any a case created): deleted before it ends.
    var createdChannels: [String] = []
    func deleteCreatedChannels() {
        for id in createdChannels {
            let (seen, _) = connections.send(planner.deleteChannelRequest(id).request, host: .channelManagement, pacer: pacer)
            if seen.status != 204 {
                FileHandle.standardError.write(
                    Data("apns-emulator conformance: the channel \(id) the run created could not be deleted: \(seen.summary)\n".utf8))
            }
        }
        createdChannels = []
    }
    stopOnInterrupt()
    for item in chosen {
        let expected = recording?.answers.first { $0.id == item.id }
        let expectedText = expected.map(\.summary) ?? item.expectedSummary
        if let name = interruptName() {
            results.append(.skipped(item, expected: expectedText, why: "not run: the run was stopped (\(name))"))
            continue
        }
        if silent >= silentLimit {
            gaveUp = true
            let why =
                answered
                ? "the target stopped answering (\(silentLimit) cases in a row)"
                : "the target answered none of the first \(silentLimit) cases"
            results.append(.skipped(item, expected: expectedText, why: "not run: \(why)"))
            continue
        }
        if let why = inputs.whySkipped(item) {
            results.append(.skipped(item, expected: expectedText, why: why))
            continue
        }
        if item.usesRunChannel && !channelTried {
            channelTried = true
            let (seen, response) = connections.send(planner.createChannelRequest().request, host: .channelManagement, pacer: pacer)
            if seen.status == 201, let id = response?.headers.first(where: { $0.name == "apns-channel-id" })?.value {
                planner.inputs.channelID = id
                createdChannels.append(id)
            } else if seen.status == nil {
                channelHostDown = silentChannelHost(seen)
                channelFailure = channelHostDown
            } else {
                channelFailure = "the run's channel could not be created: answered \(seen.summary)"
            }
        }
        if item.usesRunChannel, let channelFailure {
            results.append(.skipped(item, expected: expectedText, why: channelFailure))
            continue
        }
        let planned: PlannedCase
        do { planned = try planner.plan(item) } catch {
            results.append(.skipped(item, expected: expectedText, why: "\(error)"))
            continue
        }
        if planned.host == .channelManagement, let channelHostDown {
            results.append(.skipped(item, expected: expectedText, why: channelHostDown))
            continue
        }
        let seen: Observation
        switch connections.run(planned, pacer: pacer) {
        case .setupFailed(let why):
            results.append(.skipped(item, expected: expectedText, why: why))
            continue
        case .wrongProtocol(let why):
            // An HTTP/1.1 server, a TLS or h2c mix-up, no HTTP/2 in ALPN: a setup mistake, not
            // a case without an answer, said once at the first case.
            deleteCreatedChannels()
            connections.closeAll()
            command.fail("\(why); nothing more was sent")
        case .seen(let observation): seen = observation
        }
        // A channel a case made (or one a differing server made anyway) is deleted at the end;
        // one a case deleted is not deleted again.
        if planned.host == .channelManagement {
            if seen.status == 201, let id = connections.lastChannelID { createdChannels.append(id) }
            if planned.main.request.method == "DELETE", seen.status == 204,
                let id = planned.main.request.headers.first(where: { $0.name == "apns-channel-id" })?.value
            {
                createdChannels.removeAll { $0 == id }
            }
        }
        // Refused credentials, topic or token of the run's own: no recording, nothing more sent.
        if let why = SetupCheck.refusal(planned, seen: seen, inputs: inputs) {
            deleteCreatedChannels()
            connections.closeAll()
            command.fail(why)
        }
        if let expected {
            results.append(Replay.compare(expected, planned, seen: seen))
        } else {
            results.append(Judge.judge(planned, seen: seen))
        }
        // Silence is what costs a timeout; a GOAWAY or a reset is an answer of a kind, and quick.
        if planned.host == .channelManagement, seen.status == nil {
            let why = silentChannelHost(seen)
            channelHostDown = why
            results[results.count - 1] = .skipped(item, expected: expectedText, why: why)
        } else if results.last?.verdict == .noAnswer, connections.lastWasSilent {
            silent += 1
            lastUnanswered = seen.unanswered ?? "no answer"
        } else {
            if results.last?.verdict != .noAnswer { answered = true }
            silent = 0
        }
    }
    deleteCreatedChannels()
    connections.closeAll()
    if gaveUp {
        let what =
            answered
            ? "stopped answering: \(silentLimit) cases in a row got no answer" : "answered none of the first \(silentLimit) cases"
        FileHandle.standardError.write(
            Data(
                "apns-emulator conformance: \(target) \(what) (the last: \(lastUnanswered)); the rest were not run (see the report)\n".utf8))
    }

    let report = ConformanceReport(
        target: target.description, environment: environment, comparedWith: options.string("replay").map { "recording \($0)" } ?? "catalogue",
        results: results, interrupted: interruptName())
    print(options.isSet("json") ? report.json.serialized() : report.text)
    if interruptName() != nil {
        if let path = options.string("record") {
            FileHandle.standardError.write(Data("apns-emulator conformance: --record \(path) not written: the run was stopped\n".utf8))
        }
        fflush(nil)
        exit(128 + conformanceStopSignal.load(ordering: .relaxed))
    }
    if let path = options.string("record") {
        let recordingOut = Recording(
            target: target.description, environment: environment, recordedAt: ISO8601DateFormatter().string(from: Date()),
            tool: "apns-emulator \(Emulator.version)", results: results)
        if let why = RecordFile.write(Array(recordingOut.json.serialized(pretty: true).utf8), to: path) {
            command.failsInJSON = false  // the report printed is the object
            command.fail("--record \(path): cannot write the recording: \(why) (the report above is all there is of this run)", code: 1)
        }
    }
    if gaveUp || (connections.neverConnected && results.contains(where: { $0.verdict == .noAnswer })) { exit(2) }
    exit(report.summary.agrees ? 0 : 1)
}

/// Ctrl-C (or SIGTERM) count: the first stops the run after the case in flight, deletes the
/// channels it created and prints the report of the cases run; the second exits at once.
/// `conformanceStopSignal`: the first one, for the exit status (128 + its number).
private let conformanceInterrupts = Atomic<Int>(0)
private let conformanceStopSignal = Atomic<Int32>(0)

private func stopOnInterrupt() {
    for number in [SIGINT, SIGTERM] {
        signal(number) { received in
            if conformanceInterrupts.wrappingAdd(1, ordering: .relaxed).oldValue > 0 { _exit(128 + received) }
            conformanceStopSignal.store(received, ordering: .relaxed)
            // Only async-signal-safe calls here (no allocation): the loop notices the count
            // between cases.
            _ = write(STDERR_FILENO, stoppingNote.utf8Start, stoppingNote.utf8CodeUnitCount)
        }
    }
}

private let stoppingNote: StaticString =
    "\napns-emulator conformance: stopping after the case in flight (up to 10 s), then deleting the channels the run created and printing the report (again: quit at once)\n"

/// The signal that stopped the run, if one did.
private func interruptName() -> String? {
    guard conformanceInterrupts.load(ordering: .relaxed) > 0 else { return nil }
    return conformanceStopSignal.load(ordering: .relaxed) == SIGTERM ? "SIGTERM" : "SIGINT"
}

private func loadCatalogue(_ command: Subcommand, _ options: ResolvedOptions) -> ConformanceCatalogue {
    do {
        guard let path = options.string("catalogue") else { return try ConformanceCatalogue.builtIn() }
        return try ConformanceCatalogue.parse(try InputFile.read(path))
    } catch {
        command.fail("catalogue: \(error)")
    }
}

private func readRecording(_ command: Subcommand, _ path: String) -> Recording {
    do { return try Recording.parse(try InputFile.read(path)) } catch { command.fail("--replay \(path): \(error)") }
}

/// The cases to run: `--case` ones (each must exist), those of a recording, or all.
private func chooseCases(
    _ command: Subcommand, _ catalogue: ConformanceCatalogue, only: [String], recording: Recording?
)
    -> [ConformanceCase]
{
    for id in only where catalogue.case(id) == nil { command.fail("--case \(id): no such case (see --list)") }
    var cases = only.isEmpty ? catalogue.cases : catalogue.cases.filter { only.contains($0.id) }
    if let recording {
        let recorded = Set(recording.answers.map(\.id))
        if let unknown = recording.answers.first(where: { catalogue.case($0.id) == nil }) {
            command.fail("--replay: the recording has case \(unknown.id), which this catalogue does not (recorded with another version?)")
        }
        if let missing = only.first(where: { !recorded.contains($0) }) {
            command.fail("--case \(missing): the recording has no answer for it (--replay compares only the cases it recorded)")
        }
        cases = cases.filter { recorded.contains($0.id) }
    }
    return cases
}

private func signingKey(_ command: Subcommand, _ options: ResolvedOptions, _ name: String, required: Bool = false) -> ProviderSigningKey? {
    guard let spec = options.string(name) else {
        if required { command.fail("conformance needs --\(name) TEAMID:KEYID:PATH") }
        return nil
    }
    let key: ProviderSigningKey
    do { key = try ProviderSigningKey(spec: spec) } catch {
        command.fail(error.description.replacingOccurrences(of: "--key", with: "--\(name)"))
    }
    // Apple's team and key ids are 10 characters: another length is a typo that would make every
    // case "differ" (and send Apple a run of refused tokens).
    for (what, id) in [("team id", key.teamID), ("key id", key.keyID)] where id.count != 10 {
        command.fail("--\(name): the \(what) \(id) has \(id.count) characters; Apple's team and key ids have 10")
    }
    return key
}

/// 16 random bytes in padded base64, as Apple's channel ids are.
private func randomChannelID() -> String {
    var generator = SystemRandomNumberGenerator()
    return Data((0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }).base64EncodedString()
}

private func randomToken() -> String {
    var generator = SystemRandomNumberGenerator()
    return (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
}

/// The run's connections: one shared per environment for the run's token, and one of its own for
/// each case with other credentials (closed right after, so nothing else rides on it).
struct ConformanceConnections {
    enum Outcome {
        case seen(Observation)
        /// The request sent first did not get its 200: the case cannot say anything.
        case setupFailed(String)
        /// The target does not speak what the run asked for (TLS, cleartext HTTP/2, HTTP/2).
        case wrongProtocol(String)
    }

    let command: Subcommand
    let options: ResolvedOptions
    let target: HostPort
    let channelTarget: HostPort?
    let environment: APNsEnvironment
    private var shared: [String: HTTP2ClientConnection] = [:]
    private(set) var neverConnected = true
    /// The last request got no answer and no word: no connection, a timeout, a silent close.
    private(set) var lastWasSilent = false
    /// The `apns-channel-id` of the last answer (a channel created).
    private(set) var lastChannelID: String?

    init(command: Subcommand, options: ResolvedOptions, target: HostPort, channelTarget: HostPort?, environment: APNsEnvironment) {
        self.command = command
        self.options = options
        self.target = target
        self.channelTarget = channelTarget
        self.environment = environment
    }

    /// Where channel management is served when --channel-target is not given: the management
    /// host of Apple's environment, or the emulator's channel port beside its push port (2195
    /// beside 2197, 2196 beside 2198). nil: no pairing is known.
    static func pairedChannelTarget(_ target: HostPort, environment: APNsEnvironment) -> HostPort? {
        if APNsEnvironment.forAppleHost(Substring(target.host)) != nil {
            return environment == .production
                ? try? HostPort(parsing: "\(ChannelManagementRequest.productionHost):\(ChannelManagementRequest.productionPort)")
                : try? HostPort(parsing: "\(ChannelManagementRequest.sandboxHost):\(ChannelManagementRequest.sandboxPort)")
        }
        let port: Int? = target.port == 2197 ? 2195 : target.port == 2198 ? 2196 : nil
        return port.flatMap { try? HostPort(parsing: "\(target.host):\($0)") }
    }

    /// The shared connection of a host and environment (made when there is none), for a
    /// request of the run's own: the run's channel, made and deleted.
    mutating func send(_ request: ClientRequest, host: TargetHost, pacer: RequestPacer) -> (Observation, HTTP2Response?) {
        let kind = ConnectionKind.shared(environment)
        let connection: HTTP2ClientConnection
        do { connection = try sharedConnection(kind, host: host) } catch {
            return (Observation(status: nil, unanswered: certificateAdvice(error, address: address(for: kind.environment, host: host))), nil)
        }
        Self.waitForSlot(pacer)
        return send(request, on: connection)
    }

    private mutating func sharedConnection(_ kind: ConnectionKind, host: TargetHost) throws(ClientError) -> HTTP2ClientConnection {
        let key = "\(host.rawValue) \(kind.environment.rawValue)"
        if case .shared = kind, let open = shared[key], !open.isClosed, open.session.goAway == nil { return open }
        let connection = try connect(kind, host: host)
        if case .shared = kind { shared[key] = connection }
        return connection
    }

    mutating func run(_ planned: PlannedCase, pacer: RequestPacer) -> Outcome {
        let kind = planned.connection
        let connection: HTTP2ClientConnection
        lastWasSilent = false
        do { connection = try sharedConnection(kind, host: planned.host) } catch {
            if error.mismatch != nil { return .wrongProtocol(protocolMismatchAdvice(error)) }
            lastWasSilent = true
            return .seen(
                Observation(status: nil, unanswered: certificateAdvice(error, address: address(for: kind.environment, host: planned.host))))
        }
        defer { if case .shared = kind {} else { connection.close() } }
        if let before = planned.before {
            Self.waitForSlot(pacer)
            let (observation, _) = send(before.request, on: connection)
            guard observation.status == 200 else {
                return .setupFailed("the request sent first (\(before.credentials)) was answered \(observation.summary), not 200")
            }
        }
        guard planned.item.settings != nil else {
            Self.waitForSlot(pacer)
            return .seen(send(planned.main.request, on: connection).0)
        }
        // A connection case: the server's first SETTINGS before any request, then what is in
        // force once the first request with the run's token was answered.
        func frames() -> [[(id: Int32, value: UInt32)]] {
            connection.session.receivedSettings.filter { !$0.isAck }.map { $0.entries.map { (id: $0.id, value: $0.value) } }
        }
        try? connection.pump(timeoutMilliseconds: 3000) { !frames().isEmpty }
        let before = frames().count
        Self.waitForSlot(pacer)
        var (observation, _) = send(planned.main.request, on: connection)
        // A raised limit comes right after the answer, as its own SETTINGS frame.
        try? connection.pump(timeoutMilliseconds: 300) { frames().count > before }
        if before > 0 { observation.settings = ObservedSettings(frames: frames(), firstCount: before) }
        return .seen(observation)
    }

    /// At most `--rate` requests a second, across every connection of the run.
    private static func waitForSlot(_ pacer: RequestPacer) {
        let now = Monotonic.nowNanoseconds()
        let due = pacer.reserve(now: now)
        if due > now { usleep(useconds_t((due - now) / 1000)) }
    }

    private mutating func send(_ request: ClientRequest, on connection: HTTP2ClientConnection) -> (Observation, HTTP2Response?) {
        lastChannelID = nil
        do {
            let response = try connection.send(request)
            lastChannelID = response.headers.first { $0.name == "apns-channel-id" }?.value
            return (Observation(APNsResult(response), unanswered: unansweredReason(connection, response)), response)
        } catch {
            // The stream never finished: say whether the server ended the connection (its
            // GOAWAY), closed it without a word, or let the time run out.
            let goAway = connection.session.goAway
            lastWasSilent = goAway == nil
            let why = NoAnswer.describe(goAway: goAway, closed: connection.isClosed, error: error.description)
            return (Observation(status: nil, unanswered: why), nil)
        }
    }

    private mutating func connect(_ kind: ConnectionKind, host: TargetHost) throws(ClientError) -> HTTP2ClientConnection {
        var connectionOptions = providerConnectionOptions(command, options, address: address(for: kind.environment, host: host))
        // Apple's hosts are trusted through the system store, whatever certs/ca.pem is nearby.
        if connectionOptions.address.host.hasSuffix(".push.apple.com"), !options.isSet("ca") { connectionOptions.caPath = nil }
        connectionOptions.clientCertificatePath = nil
        connectionOptions.clientKeyPath = nil
        if case .certificate = kind {
            connectionOptions.clientCertificatePath = options.string("certificate")
            connectionOptions.clientKeyPath = options.string("certificate-key")
        }
        let connection = try HTTP2ClientConnection(connectionOptions)
        neverConnected = false
        // Its first SETTINGS show an HTTP/2 server before a case is spent on finding out.
        do { try connection.confirmHTTP2() } catch {
            connection.close()
            throw error
        }
        return connection
    }

    /// Apple's other environment is another host; any other target serves both, picked by
    /// `:authority`.
    private func address(for environment: APNsEnvironment, host: TargetHost = .push) -> HostPort {
        if host == .channelManagement, let channelTarget { return channelTarget }
        return Self.address(for: environment, target: target, runEnvironment: self.environment)
    }

    static func address(for environment: APNsEnvironment, target: HostPort, runEnvironment: APNsEnvironment) -> HostPort {
        // An Apple host serves one environment: a case of the other goes to the other's host
        // (also when --production or --sandbox names the run's environment against it).
        guard let hostEnvironment = APNsEnvironment.forAppleHost(Substring(target.host)), hostEnvironment != environment else {
            return target
        }
        return (try? HostPort(parsing: "\(environment.appleHost):\(target.port)")) ?? target
    }

    mutating func closeAll() {
        for connection in shared.values { connection.close() }
        shared = [:]
    }
}

/// The `--record` file: whether it can be written, asked before the run, and the writing.
enum RecordFile {
    /// Why `path` cannot be written, nil when it can: an existing file is opened for writing
    /// (not truncated), a new one is made and removed again.
    static func problem(_ path: String) -> String? {
        var status = stat()
        if stat(path, &status) == 0 {
            if status.st_mode & S_IFMT == S_IFDIR { return "is a directory" }
            let fd = open(path, O_WRONLY | O_CLOEXEC)
            guard fd >= 0 else { return "cannot be written: \(String(cString: strerror(errno)))" }
            close(fd)
            return nil
        }
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            let directory = (path as NSString).deletingLastPathComponent
            return "cannot be created: \(String(cString: strerror(errno)))" + (directory.isEmpty ? "" : " (in \(directory))")
        }
        close(fd)
        unlink(path)
        return nil
    }

    /// Writes `bytes` to `path` (replacing what was there); why not, nil when written.
    static func write(_ bytes: [UInt8], to path: String) -> String? {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return String(cString: strerror(errno)) }
        defer { close(fd) }
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return String(cString: strerror(errno)) }
            offset += written
        }
        return fsync(fd) == 0 ? nil : String(cString: strerror(errno))
    }
}
