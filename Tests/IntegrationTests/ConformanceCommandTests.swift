import Foundation
import Glibc
import HTTP2
import JSON
import Networking
import OpenSSLCrypto
import ProviderClient
import Testing
import TestSupport

/// An emulator with everything the catalogue's cases need: a device token, an uninstalled one,
/// a VoIP token, a second key of the team, a key restricted to production, a provider
/// certificate, an app without the Broadcast capability and one at its channel limit (2).
final class ConformanceFixture {
    static let appWithoutBroadcast = "com.example.quiet"
    static let appAtChannelLimit = "com.example.full"
    let emulator: EmulatorProcess
    let keys: String
    let token: String
    let uninstalledToken: String
    let voipToken: String

    init(_ extraArguments: [String] = []) throws {
        keys = FileManager.default.temporaryDirectory.appendingPathComponent("conformance-keys-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: keys, withIntermediateDirectories: true)
        for name in ["second", "production"] {
            try ES256PrivateKey.generate().pkcs8PEM.write(toFile: "\(keys)/\(name).p8", atomically: true, encoding: .utf8)
        }
        emulator = try EmulatorProcess(
            [
                "--auth-key", "\(EmulatorProcess.teamID):KEY2222222:\(keys)/second.p8",
                "--auth-key", "\(EmulatorProcess.teamID):KEY3333333:\(keys)/production.p8?environment=production",
                "--app", "\(EmulatorProcess.teamID):\(Self.appWithoutBroadcast)?broadcast=off",
                "--app", "\(EmulatorProcess.teamID):\(Self.appAtChannelLimit)", "--max-channels", "2",
            ] + extraArguments)
        token = try emulator.createDevice().token
        voipToken = try emulator.createDevice(kind: "voip").token
        let channels = try emulator.connect("channelSandbox")
        defer { channels.close() }
        for _ in 0..<2 {
            let created = try channels.send(
                ClientRequest(
                    method: "POST", path: "/1/apps/\(Self.appAtChannelLimit)/channels",
                    headers: [HTTP2HeaderField(name: "authorization", value: "bearer \(try emulator.providerToken())")],
                    body: Array(#"{"message-storage-policy": 0, "push-type": "LiveActivity"}"#.utf8)))
            guard created.status == 201 else { throw HarnessError("channel of \(Self.appAtChannelLimit): \(created.status ?? 0)") }
        }
        let uninstalled = try emulator.createDevice()
        let reply = try emulator.admin("DELETE", "/api/v1/devices/\(uninstalled.deviceID)/apps/\(EmulatorProcess.bundleID)")
        guard reply.status == 200 else { throw HarnessError("uninstall: \(reply.status) \(reply.raw)") }
        uninstalledToken = uninstalled.token
        let certs = try run(
            EmulatorProcess.binary,
            ["certs", "--dir", emulator.certsDirectory, "--provider", EmulatorProcess.bundleID, "--environment", "sandbox"])
        guard certs.status == 0 else { throw HarnessError("certs: \(certs.err)") }
    }

    deinit { try? FileManager.default.removeItem(atPath: keys) }

    /// Every option a case can need, for the sandbox listener.
    var allNeeds: [String] {
        let certificate = "\(emulator.certsDirectory)/provider-\(EmulatorProcess.bundleID)-sandbox"
        return [
            "--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(emulator.keyPath)", "--topic", EmulatorProcess.bundleID,
            "--token", token, "--uninstalled-token", uninstalledToken,
            "--second-key", "\(EmulatorProcess.teamID):KEY2222222:\(keys)/second.p8",
            "--other-environment-key", "\(EmulatorProcess.teamID):KEY3333333:\(keys)/production.p8",
            "--certificate", certificate + ".pem", "--certificate-key", certificate + "-key.pem", "--allow-token-update",
            "--ca", emulator.caPath, "--rate", "20", "--voip-token", voipToken,
            "--channel-target", (try? emulator.address("channelSandbox").description) ?? "",
            "--topic-without-broadcast", Self.appWithoutBroadcast, "--topic-at-channel-limit", Self.appAtChannelLimit,
        ]
    }

    func conformance(_ arguments: [String], listener: String = "sandbox") throws -> CommandResult {
        try run(
            EmulatorProcess.binary, ["conformance", "--target", try emulator.address(listener).description] + arguments, timeout: 120)
    }

    /// The run's JSON report: each case's verdict by id.
    static func verdicts(_ result: CommandResult) throws -> [String: String] {
        let report = try JSONValue.parse(Array(result.stdout))
        var verdicts: [String: String] = [:]
        for item in report["cases"]?.arrayValue ?? [] {
            verdicts[item["id"]?.stringValue ?? ""] = item["verdict"]?.stringValue
        }
        return verdicts
    }
}

@Suite(.serialized) struct ConformanceCommandTests {
    /// The whole catalogue, every need given, against the emulator: every case runs and passes,
    /// and its requests really reached the emulator (the journal has one record per request).
    /// Run twice: the channels a run creates are deleted at its end, so the second run (at the
    /// emulator's limit of 2 live channels an app) passes too, and none is left.
    @Test func theCatalogueAgreesWithTheEmulator() throws {
        let fixture = try ConformanceFixture()
        let catalogue = try ConformanceCatalogueFile.cases()
        for run in 1...2 {
            let before = try fixture.emulator.notifications(limit: 10_000).count
            let result = try fixture.conformance(fixture.allNeeds + ["--json"])
            #expect(result.status == 0, "run \(run): \(result.err)\n\(result.out.prefix(3000))")
            let verdicts = try ConformanceFixture.verdicts(result)
            #expect(verdicts.count == catalogue.count, "every case ran")
            #expect(verdicts.filter { $0.value != "pass" }.isEmpty, "run \(run): \(verdicts.filter { $0.value != "pass" })")
            // One record per request to the push host (channel management is not journaled): the
            // cases, plus the one token-update-within-20-minutes sends first.
            let sent = try fixture.emulator.notifications(limit: 10_000).count - before
            #expect(sent == catalogue.filter { !$0.channelManagement }.count + 1, "run \(run)")
            let live = try fixture.emulator.admin("GET", "/api/v1/channels?bundleId=\(EmulatorProcess.bundleID)").json["channels"]?.arrayValue ?? []
            let left = live.filter { $0["live"]?.boolValue == true }.count
            #expect(left == 0, "run \(run) left channels: \(live)")
        }
    }

    /// The channel-management target pairs with --target as the emulator's ports and Apple's host
    /// names do; with no pairing known, the channel cases say what they need.
    @Test func theChannelTargetPairsWithTheTarget() throws {
        let key = try ConformanceCatalogueFile.throwawayKey()
        let cases = ["--case", "channel-read", "--case", "broadcast-accepted", "--dry-run"]
        for (target, channels) in [
            ("127.0.0.1:2197", "127.0.0.1:2195"), ("127.0.0.1:2198", "127.0.0.1:2196"),
            ("api.sandbox.push.apple.com:443", "api-manage-broadcast.sandbox.push.apple.com:2195"),
        ] {
            let result = try run(EmulatorProcess.binary, ["conformance", "--target", target] + key + cases)
            #expect(result.status == 0, "\(target): \(result.err)")
            #expect(result.out.contains("# first: the run's channel, deleted at the end (\(channels))"), "\(target): \(result.out)")
            #expect(result.out.contains("#   to \(channels) on the run's connection (channel management), sandbox"), "\(result.out)")
            #expect(result.out.contains(":authority: api-manage-broadcast.sandbox.push.apple.com"))
            #expect(result.out.contains("apns-channel-id: <the run's channel>"))
        }
        let production = try run(EmulatorProcess.binary, ["conformance", "--target", "api.push.apple.com:443", "--production"] + key + cases)
        #expect(production.out.contains("(api-manage-broadcast.push.apple.com:2196)"), "\(production.out)")
        let unpaired = try run(EmulatorProcess.binary, ["conformance", "--target", "127.0.0.1:9999"] + key + cases)
        #expect(unpaired.status == 2)
        #expect(unpaired.err.contains("every case chosen would be skipped: needs channel-management (--channel-target)"), "\(unpaired.err)")
    }

    /// A --channel-target that does not answer: its cases are skipped naming it, and the push
    /// host's cases all run (its silence counted against --target, and the run gave up on a
    /// target that answered every push).
    @Test func aChannelTargetThatDoesNotAnswerSkipsOnlyItsCases() throws {
        let fixture = try ConformanceFixture()
        let (fd, address) = try Socket.listen(HostPort(host: "127.0.0.1", port: 0))
        close(fd)  // nothing listens there now
        var arguments = fixture.allNeeds
        if let at = arguments.firstIndex(of: "--channel-target") { arguments[at + 1] = address.description }
        let result = try fixture.conformance(arguments + ["--json"])
        #expect(result.status == 0, "\(result.err)\n\(result.out.prefix(2000))")
        let report = try JSONValue.parse(Array(result.stdout))
        let cases = report["cases"]?.arrayValue ?? []
        let catalogue = try ConformanceCatalogueFile.cases()
        let channelCases = Set(catalogue.filter(\.channelManagement).map(\.id))
        for item in cases where channelCases.contains(item["id"]?.stringValue ?? "") {
            #expect(item["verdict"] == "skipped", "\(item)")
        }
        let why = cases.first { channelCases.contains($0["id"]?.stringValue ?? "") }?["why"]?.stringValue ?? ""
        #expect(why.contains("the channel-management target \(address) did not answer"), "\(why)")
        #expect(cases.filter { $0["verdict"] == "pass" }.count >= catalogue.count - channelCases.count - 12, "\(result.out.prefix(2000))")
        #expect(!result.err.contains("stopped answering"), "\(result.err)")
    }

    /// The mirror mistake: the device-push port as --channel-target stops the run at its first
    /// channel request, naming it (15 channel cases "differed").
    @Test func thePushPortAsChannelTargetIsASetupError() throws {
        let fixture = try ConformanceFixture()
        var arguments = fixture.allNeeds
        if let at = arguments.firstIndex(of: "--channel-target") { arguments[at + 1] = try fixture.emulator.address("sandbox").description }
        let result = try fixture.conformance(arguments)
        #expect(result.status == 2, "\(result.out.prefix(2000))")
        #expect(result.err.contains("--channel-target is not a channel-management endpoint. The device-push port?"), "\(result.err)")
        let live = try fixture.emulator.admin("GET", "/api/v1/channels?bundleId=\(EmulatorProcess.bundleID)").json["channels"]?.arrayValue ?? []
        let left = live.filter { $0["live"]?.boolValue == true }.count
        #expect(left == 0, "\(live)")
    }

    /// --target at the emulator's channel-management port: the baseline case's 404 BadPath
    /// stops the run and names the likely mistake (it ran every case, 45 of them "differ").
    @Test func aChannelManagementPortAsTargetIsASetupError() throws {
        let fixture = try ConformanceFixture()
        let result = try fixture.conformance(fixture.allNeeds + ["--json"], listener: "channelSandbox")
        #expect(result.status == 2, "\(result.out.prefix(2000))")
        #expect(result.err.contains("--target is not a device-push endpoint. A channel-management port?"), "\(result.err)")
        #expect(result.err.contains("was answered 404 BadPath"), "\(result.err)")
        #expect(try JSONValue.parse(Array(result.stdout))["exitCode"]?.intValue == 2, "only the error object: \(result.out)")
    }

    /// A certificate trusted (--ca) but not naming the host: the hint says so, not "trust the CA".
    @Test(.requires(.openssl)) func aCertificateThatDoesNotNameTheHostIsSaidSo() throws {
        let server = try ForeignServer.tlsNamed("example.invalid")
        let key = try ConformanceCatalogueFile.throwawayKey()
        let result = try run(
            EmulatorProcess.binary,
            ["conformance", "--target", server.address.description, "--ca", "\(server.directory)/example.invalid.pem", "--case", "method-get"]
                + key, timeout: 60)
        #expect(result.status == 2, "\(result.out)")
        #expect(result.out.contains("IP address mismatch"), "\(result.out)")
        #expect(
            result.out.contains("the server's certificate does not name the host 127.0.0.1: connect with a host name it carries"),
            "\(result.out)")
        #expect(!result.out.contains("trust the emulator's CA"), "\(result.out)")
        let send = try run(
            EmulatorProcess.binary,
            [
                "send", "--host", server.address.description, "--ca", "\(server.directory)/example.invalid.pem", "--topic", "com.example.app",
                "--token", "00", "{}",
            ], timeout: 60)
        #expect(send.err.contains("does not name the host 127.0.0.1"), "\(send.err)")
    }

    /// A recording path that cannot be written is refused before any request goes out; one
    /// that fails while written still leaves the report, then says why.
    @Test func aRecordPathThatCannotBeWrittenIsRefusedBeforeSending() throws {
        let fixture = try ConformanceFixture()
        let before = try fixture.emulator.notifications(limit: 10_000).count
        let arguments = fixture.allNeeds + ["--case", "accepted", "--case", "bad-topic"]
        let missing = try fixture.conformance(arguments + ["--record", "/nonexistent/dir/x.json"])
        #expect(missing.status == 2)
        #expect(
            missing.err == "apns-emulator: --record /nonexistent/dir/x.json: cannot be created: No such file or directory (in /nonexistent/dir)\n")
        #expect(missing.out.isEmpty)
        let directory = try fixture.conformance(arguments + ["--record", fixture.emulator.directory])
        #expect(directory.status == 2)
        #expect(directory.err == "apns-emulator: --record \(fixture.emulator.directory): is a directory\n")
        #expect(try fixture.emulator.notifications(limit: 10_000).count == before, "nothing was sent")

        let full = try fixture.conformance(arguments + ["--record", "/dev/full"])
        #expect(full.status == 1)
        #expect(full.out.contains("2 cases: 2 pass"), "\(full.out)")
        #expect(
            full.err
                == "apns-emulator: --record /dev/full: cannot write the recording: No space left on device (the report above is all there is of this run)\n"
        )
    }

    /// In production the same cases pass too: the answers carry no apns-unique-id there, and a
    /// sandbox token is the other environment's.
    @Test func theCatalogueAgreesInProduction() throws {
        let fixture = try ConformanceFixture()
        let production = try fixture.emulator.createDevice(environment: "production").token
        var arguments = [
            "--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(fixture.emulator.keyPath)", "--topic", EmulatorProcess.bundleID,
            "--token", production, "--ca", fixture.emulator.caPath, "--rate", "20", "--production", "--json",
        ]
        arguments += ["--case", "accepted", "--case", "device-token-other-environment", "--case", "bad-topic"]
        // The channel cases with production's management host name, on its channel listener.
        arguments += ["--channel-target", try fixture.emulator.address("channelProduction").description]
        arguments += ["--case", "channel-read", "--case", "broadcast-accepted", "--case", "channel-delete"]
        let result = try fixture.conformance(arguments, listener: "production")
        #expect(result.status == 0, "\(result.out.prefix(2000))")
        #expect(
            try ConformanceFixture.verdicts(result) == [
                "accepted": "pass", "device-token-other-environment": "pass", "bad-topic": "pass", "channel-read": "pass",
                "broadcast-accepted": "pass", "channel-delete": "pass",
            ])
        let channels = try fixture.emulator.admin("GET", "/api/v1/channels?environment=production").json["channels"]?.arrayValue ?? []
        #expect(channels.count == 1 && channels.first?["live"]?.boolValue == false, "the run's channel, deleted: \(channels)")
    }

    /// An emulator started with the other choice where Apple is unconfirmed: the suite reports
    /// exactly the cases that choice changes.
    @Test func anotherChoiceFlagShowsExactlyTheCasesItChanges() throws {
        let fixture = try ConformanceFixture(["--invalid-payload", "accept", "--bad-environment-reason", "BadEnvironmentKeyInToken"])
        let result = try fixture.conformance(fixture.allNeeds + ["--json"])
        #expect(result.status == 1)
        let differing = try ConformanceFixture.verdicts(result).filter { $0.value != "pass" }
        #expect(differing == ["payload-not-json": "differs", "payload-json-array": "differs", "key-for-the-other-environment": "differs"])
        let report = try JSONValue.parse(Array(result.stdout))
        let environmentCase = report["cases"]?.arrayValue?.first { $0["id"]?.stringValue == "key-for-the-other-environment" }
        #expect(environmentCase?["seen"]?["reason"]?.stringValue == "BadEnvironmentKeyInToken")
        #expect(environmentCase?["unconfirmed"]?.boolValue == true)
        #expect(report["summary"]?["differsUnconfirmed"]?.intValue == 3)
    }

    /// A recording, one answer changed by hand, replayed: that case and no other is reported.
    @Test func aReplayReportsTheOneAnswerThatChanged() throws {
        let fixture = try ConformanceFixture()
        let recordingPath = fixture.emulator.directory + "/recording.json"
        let recorded = try fixture.conformance(fixture.allNeeds + ["--record", recordingPath])
        #expect(recorded.status == 0, "\(recorded.out.suffix(2000))")
        var recording = try JSONValue.parse(Array(try Data(contentsOf: URL(fileURLWithPath: recordingPath))))
        guard case .object(var root) = recording, case .array(var answers) = root["answers"] else {
            throw HarnessError("the recording has no answers")
        }
        #expect(answers.count >= 50)
        let index = try #require(answers.firstIndex { $0["id"]?.stringValue == "missing-topic" })
        guard case .object(var changed) = answers[index] else { throw HarnessError("answer is not an object") }
        changed["reason"] = "BadTopic"
        answers[index] = .object(changed)
        root["answers"] = .array(answers)
        recording = .object(root)
        try Data(recording.serialized().utf8).write(to: URL(fileURLWithPath: recordingPath))

        let replay = try fixture.conformance(fixture.allNeeds + ["--replay", recordingPath, "--json"])
        #expect(replay.status == 1)
        let verdicts = try ConformanceFixture.verdicts(replay)
        #expect(verdicts.count == answers.count)
        #expect(verdicts.filter { $0.value != "pass" } == ["missing-topic": "differs"])
        let text = try fixture.conformance(fixture.allNeeds + ["--replay", recordingPath])
        #expect(text.out.contains("missing-topic (differs): recorded 400 BadTopic, answered 400 MissingTopic"))
    }

    /// Cases whose needs are not given are skipped, each saying which option it needs; the dry
    /// run prints every request and sends none.
    @Test func missingNeedsSkipAndADryRunSendsNothing() throws {
        let fixture = try ConformanceFixture()
        let key = ["--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(fixture.emulator.keyPath)", "--topic", EmulatorProcess.bundleID]
        let result = try fixture.conformance(key + ["--ca", fixture.emulator.caPath, "--rate", "20", "--json"])
        #expect(result.status == 0, "\(result.out.prefix(2000))")
        let report = try JSONValue.parse(Array(result.stdout))
        let accepted = report["cases"]?.arrayValue?.first { $0["id"]?.stringValue == "accepted" }
        #expect(accepted?["verdict"]?.stringValue == "skipped")
        #expect(accepted?["why"]?.stringValue == "needs device-token (--token)")
        #expect((report["summary"]?["pass"]?.intValue ?? 0) >= 25)

        let before = try fixture.emulator.notifications(limit: 10_000).count
        let dry = try fixture.conformance(fixture.allNeeds + ["--dry-run"])
        #expect(dry.status == 0)
        #expect(dry.out.contains("# bad-priority: apns-priority 7 (expects 400 BadPriority)"))
        #expect(dry.out.contains("apns-priority: 7"))
        #expect(dry.out.contains("authorization: <iat two hours ago>"))
        #expect(!dry.out.contains("bearer ey"), "a dry run prints no provider token")
        #expect(try fixture.emulator.notifications(limit: 10_000).count == before)

        // Against Apple's sandbox, a production case goes to Apple's production host, on a
        // connection of that environment: the dry run says so (it connects nowhere).
        let apple = try run(
            EmulatorProcess.binary,
            ["conformance", "--target", "api.sandbox.push.apple.com:443"] + key + ["--token", fixture.token, "--dry-run"], timeout: 60)
        #expect(apple.status == 0, "\(apple.err)")
        #expect(apple.out.contains("#   to api.push.apple.com:443 on the run's production connection, production"), "\(apple.out.prefix(3000))")
        #expect(apple.out.contains("#   to api.sandbox.push.apple.com:443 on the run's connection, sandbox"))
    }

    @Test func usageErrorsExitTwoAndSaySo() throws {
        let fixture = try ConformanceFixture()
        let key = ["--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(fixture.emulator.keyPath)"]
        let cases: [([String], String)] = [
            (key, "needs --topic"),
            (["--topic", "com.example.app"], "needs --key"),
            (key + ["--topic", "com.example.app", "--case", "no-such-case"], "--case no-such-case: no such case"),
            (key + ["--topic", "com.example.app", "--token", "xyz"], "is not a device token"),
            (key + ["--topic", "com.example.app", "--rate", "500"], "--rate"),
            (key + ["--topic", "com.example.app", "--replay", "/nonexistent.json"], "--replay /nonexistent.json"),
            (key + ["--topic", "com.example.app", "--certificate", "c.pem"], "--certificate and --certificate-key go together"),
            (["--list", "--json"], "--json is the report of a run"),
            (key + ["--topic", "com.example.app", "--case", "accepted"], "every case chosen would be skipped: needs device-token (--token)"),
            (
                ["--key", "TEAM12345:\(EmulatorProcess.keyID):\(fixture.emulator.keyPath)", "--topic", "com.example.app"],
                "--key: the team id TEAM12345 has 9 characters; Apple's team and key ids have 10"
            ),
            (
                key + ["--topic", "com.example.app", "--second-key", "\(EmulatorProcess.teamID):KEY22:\(fixture.keys)/second.p8"],
                "--second-key: the key id KEY22 has 5 characters"
            ),
            (key + ["--topic", "com.example.app", "--h2c", "--certificate", "c.pem", "--certificate-key", "k.pem"], "--h2c has no TLS"),
        ]
        for (arguments, message) in cases {
            let result = try fixture.conformance(arguments)
            #expect(result.status == 2, "\(arguments)")
            #expect(result.err.contains(message), "\(arguments): \(result.err)")
        }
        let unreachable = try run(
            EmulatorProcess.binary, ["conformance", "--target", "127.0.0.1:9"] + key + ["--topic", "com.example.app", "--case", "bad-topic"])
        #expect(unreachable.status == 2, "\(unreachable.out)")
        #expect(unreachable.out.contains("cannot connect"))
    }

    /// A target whose certificate cannot be verified (no --ca, no certs/ca.pem where the run
    /// is): the case's no-answer text says to trust the emulator's CA with --ca or give --insecure.
    @Test func anUnverifiedCertificateSaysToTrustTheEmulatorsCA() throws {
        let fixture = try ConformanceFixture()
        let elsewhere = FileManager.default.temporaryDirectory.appendingPathComponent("no-ca-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: elsewhere) }
        let key = ["--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(fixture.emulator.keyPath)", "--topic", EmulatorProcess.bundleID]
        let result = try run(
            EmulatorProcess.binary,
            ["conformance", "--target", try fixture.emulator.address("sandbox").description, "--token", fixture.token, "--case", "bad-topic"]
                + key, workingDirectory: elsewhere, timeout: 60)
        #expect(result.status == 2, "\(result.out) \(result.err)")
        #expect(result.out.contains("(certificate verification: "), "\(result.out)")
        #expect(result.out.contains("trust the emulator's CA with --ca PATH"), "\(result.out)")
        #expect(result.out.contains("or skip the check with --insecure"), "\(result.out)")
    }

    /// A target that answers in HTTP/1.1 (here the emulator's own admin listener, with --h2c)
    /// stops the run at its first case and says so, rather than eight cases "without an answer"
    /// quoting the HTTP/2 library's error.
    @Test func aTargetThatDoesNotSpeakHTTP2StopsTheRunAndSaysSo() throws {
        let fixture = try ConformanceFixture()
        let admin = try fixture.emulator.address("admin")
        let key = ["--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(fixture.emulator.keyPath)", "--topic", "com.example.app"]
        let result = try run(EmulatorProcess.binary, ["conformance", "--h2c", "--target", admin.description, "--token", fixture.token] + key)
        #expect(result.status == 2, "\(result.out)")
        #expect(result.err.contains("\(admin) does not speak HTTP/2: its first bytes were not an HTTP/2 SETTINGS frame"), "\(result.err)")
        #expect(result.out.isEmpty, "no report of a run that tested nothing: \(result.out)")
    }

    /// --h2c pointed at a TLS listener (which closes a cleartext connection without a byte):
    /// the run stops at its first case, exit 2, no report, and says it is TLS. It tried three
    /// cases, then printed the whole table with "the server closed the connection without an
    /// answer"; with one case, a plain report and exit 1.
    @Test func h2cAgainstATLSListenerStopsTheRunAndSaysItIsTLS() throws {
        let fixture = try ConformanceFixture()
        let sandbox = try fixture.emulator.address("sandbox")
        let key = ["--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(fixture.emulator.keyPath)", "--topic", "com.example.app"]
        for only in [[], ["--case", "accepted"]] {
            let result = try fixture.conformance(key + ["--token", fixture.token, "--h2c"] + only)
            #expect(result.status == 2, "\(only): \(result.out)")
            #expect(result.err.contains("\(sandbox) answered with TLS, not cleartext HTTP/2 (a TLS listener): drop --h2c"), "\(result.err)")
            #expect(result.out.isEmpty, "no report of a run that tested nothing: \(result.out)")
        }
    }

    /// A target that is no TLS server (an HTTP/1.x one), or a TLS one without HTTP/2 in ALPN:
    /// the run stops at its first case, exit 2, no report, naming the cause. Both tried three
    /// cases, then printed the whole table with OpenSSL's "wrong version number" or "did not
    /// negotiate ALPN h2".
    @Test(.requires(.python3, .openssl)) func aTargetWithoutTLSOrWithoutHTTP2InALPNStopsTheRun() throws {
        let fixture = try ConformanceFixture()
        let http = try ForeignServer.http()
        let tls = try ForeignServer.tlsWithoutHTTP2()
        let key = ["--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(fixture.emulator.keyPath)", "--topic", "com.example.app"]
        let targets: [([String], [String])] = [
            (
                ["--target", http.address.description],
                ["\(http.address) does not speak TLS: ", "(an HTTP/1.1 or cleartext server?); a cleartext HTTP/2 listener takes --h2c"]
            ),
            (["--target", tls.address.description, "--insecure"], ["\(tls.address) did not offer HTTP/2 in ALPN (it chose nothing)"]),
        ]
        for (target, messages) in targets {
            let result = try run(EmulatorProcess.binary, ["conformance", "--token", fixture.token] + key + target, timeout: 60)
            #expect(result.status == 2, "\(target): \(result.out)")
            for message in messages { #expect(result.err.contains(message), "\(target): \(result.err)") }
            #expect(result.out.isEmpty, "no report of a run that tested nothing: \(result.out)")
        }
    }

    /// A target that takes connections and never answers: three cases wait their timeout, the
    /// rest are not run (it took every case's 10 s, five minutes for the catalogue).
    @Test func aTargetThatNeverAnswersIsGivenUpOnAfterThreeCases() throws {
        let fixture = try ConformanceFixture()
        let listener = try Socket.listen(try HostPort(parsing: "127.0.0.1:0"))
        defer { close(listener.fd) }
        let key = ["--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(fixture.emulator.keyPath)", "--topic", "com.example.app"]
        let cases = ["method-get", "path-not-device", "path-extra-segment", "path-query", "duplicate-header"].flatMap { ["--case", $0] }
        let started = Date()
        let result = try run(
            EmulatorProcess.binary, ["conformance", "--target", listener.bound.description, "--rate", "20"] + key + cases, timeout: 120)
        #expect(result.status == 2, "\(result.out)")
        #expect(result.err.contains("answered none of the first 3 cases"), "\(result.err)")
        #expect(result.out.components(separatedBy: "not run: the target answered none").count - 1 == 2, "\(result.out)")
        #expect(Date().timeIntervalSince(started) < 60)
    }

    /// Ctrl-C after the run's channel exists: the run stops after the case in flight, deletes
    /// the channel (a run stopped there left it live, and the app nearer its channel limit) and
    /// prints the report of what ran, the rest marked not run (exit 130).
    @Test func anInterruptedRunDeletesItsChannelAndReports() throws {
        let fixture = try ConformanceFixture()
        let cases = [
            "channel-read", "channel-list", "broadcast-accepted", "channel-bad-path", "channel-method-put", "channel-duplicate-header", "accepted",
        ]
        let key = ["--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(fixture.emulator.keyPath)"]
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("conformance-\(UUID().uuidString).json")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: output) }
        let runner = Process()
        runner.executableURL = URL(fileURLWithPath: EmulatorProcess.binary)
        runner.arguments =
            [
                "conformance", "--json", "--target", try fixture.emulator.address("sandbox").description, "--rate", "1", "--ca",
                fixture.emulator.caPath, "--topic", EmulatorProcess.bundleID, "--token", fixture.token, "--channel-target",
                try fixture.emulator.address("channelSandbox").description,
            ] + key + cases.flatMap { ["--case", $0] }
        runner.standardOutput = try FileHandle(forWritingTo: output)
        runner.standardError = FileHandle.nullDevice
        try runner.run()
        defer { if runner.isRunning { kill(runner.processIdentifier, SIGKILL) } }
        func liveChannels() throws -> Int {
            let channels = try fixture.emulator.admin("GET", "/api/v1/channels?bundleId=\(EmulatorProcess.bundleID)").json["channels"]
            return (channels?.arrayValue ?? []).filter { $0["live"]?.boolValue == true }.count
        }
        #expect(try eventually(30) { try liveChannels() == 1 }, "the run made its channel")
        kill(runner.processIdentifier, SIGINT)
        runner.waitUntilExit()
        #expect(runner.terminationStatus == 130)
        #expect(try liveChannels() == 0, "the run's channel was deleted")
        let report = try JSONValue.parse(Array(try Data(contentsOf: output)))
        #expect(report["interrupted"]?.stringValue == "SIGINT", "\(report)")
        let reported = report["cases"]?.arrayValue ?? []
        #expect(reported.count == cases.count, "every case is in the report")
        let notRun = reported.filter { $0["why"]?.stringValue == "not run: the run was stopped (SIGINT)" }
        #expect(!notRun.isEmpty && notRun.count < cases.count, "\(reported.map { $0["why"] ?? .null })")
    }

    /// The run's own key, topic or token refused by its first request (the baseline case):
    /// the run stops there with exit 2 and says which, sends nothing more and records nothing.
    @Test func aRunWhoseOwnSetupIsRefusedStopsAtTheFirstRequest() throws {
        let fixture = try ConformanceFixture()
        let production = try fixture.emulator.createDevice(environment: "production").token
        let recordPath = fixture.emulator.directory + "/refused.json"
        func key(_ keyID: String) -> [String] { ["--key", "\(EmulatorProcess.teamID):\(keyID):\(fixture.emulator.keyPath)"] }
        let common = ["--ca", fixture.emulator.caPath, "--rate", "20", "--record", recordPath]
        let setups: [([String], String)] = [
            (
                key("KEYUNKNOWN") + ["--topic", EmulatorProcess.bundleID, "--token", fixture.token],
                "the run's own provider token was refused: accepted was answered 403 InvalidProviderToken"
            ),
            (
                key(EmulatorProcess.keyID) + ["--topic", "com.example.nobodys", "--token", fixture.token],
                "the run's own --topic com.example.nobodys was refused: accepted was answered 400 TopicDisallowed"
            ),
            (
                key(EmulatorProcess.keyID) + ["--topic", EmulatorProcess.bundleID, "--token", production],
                "the run's own --token was refused: accepted was answered 400 BadDeviceToken. Is it a sandbox token"
            ),
            (
                key(EmulatorProcess.keyID) + ["--topic", EmulatorProcess.bundleID, "--token", fixture.uninstalledToken],
                "the run's own --token is no longer active (410: the app was uninstalled, or the token replaced): accepted was answered 410 Unregistered"
            ),
        ]
        for (arguments, message) in setups {
            let before = try fixture.emulator.notifications(limit: 10_000).count
            let result = try fixture.conformance(arguments + common)
            #expect(result.status == 2, "\(arguments): \(result.out.prefix(1000))")
            #expect(result.err.contains(message), "\(result.err)")
            #expect(try fixture.emulator.notifications(limit: 10_000).count == before + 1, "one request, then nothing")
            #expect(!FileManager.default.fileExists(atPath: recordPath), "no recording of a run that tested nothing")
        }
        // Asked for JSON, the refusal is an object on standard output too.
        let json = try fixture.conformance(setups[0].0 + common + ["--json"])
        #expect(json.status == 2)
        let object = try JSONValue.parse(Array(json.out.utf8))
        #expect(object["error"]?.stringValue?.contains("the run's own provider token was refused") == true, "\(json.out)")
        #expect(object["exitCode"]?.intValue == 2)
    }

    /// --ca, --certificate and --certificate-key that cannot be used are refused before the run,
    /// naming the file: not reported as a target that answered nothing.
    @Test func localTLSFilesAreCheckedBeforeSending() throws {
        let fixture = try ConformanceFixture()
        let certificate = "\(fixture.emulator.certsDirectory)/provider-\(EmulatorProcess.bundleID)-sandbox"
        let base = [
            "--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(fixture.emulator.keyPath)", "--topic", EmulatorProcess.bundleID,
            "--case", "bad-topic",
        ]
        let before = try fixture.emulator.notifications(limit: 10_000).count
        let cases: [([String], String)] = [
            (["--ca", "/nonexistent.pem"], "--ca /nonexistent.pem: No such file or directory"),
            (["--ca", fixture.emulator.keyPath], "--ca \(fixture.emulator.keyPath): not a PEM CA certificate"),
            (
                ["--ca", fixture.emulator.caPath, "--certificate", "/nonexistent.pem", "--certificate-key", certificate + "-key.pem"],
                "--certificate /nonexistent.pem: No such file or directory"
            ),
            (
                ["--ca", fixture.emulator.caPath, "--certificate", certificate + ".pem", "--certificate-key", "\(fixture.keys)/second.p8"],
                "does not match certificate \(certificate).pem"
            ),
        ]
        for (arguments, message) in cases {
            let result = try fixture.conformance(base + arguments)
            #expect(result.status == 2, "\(arguments): \(result.out)")
            #expect(result.err.contains(message), "\(arguments): \(result.err)")
            #expect(result.out.isEmpty)
        }
        #expect(try fixture.emulator.notifications(limit: 10_000).count == before, "nothing was sent")
    }

    /// A case ended by the server's GOAWAY says so, with the code and the debug data; the
    /// summary counts "1 case".
    @Test func aNoAnswerSaysWhatHappened() throws {
        let fixture = try ConformanceFixture()
        let rule: JSONValue = ["match": [:], "action": ["goAway": ["reason": "Shutdown"]], "times": 1]
        #expect(try fixture.emulator.admin("POST", "/api/v1/faults", body: rule).status == 201)
        let result = try fixture.conformance(fixture.allNeeds + ["--case", "bad-topic"])
        #expect(result.status == 1)
        #expect(
            result.out.contains(#"bad-topic (no-answer): the server ended the connection: GOAWAY NO_ERROR (0), last stream "#), "\(result.out)")
        #expect(result.out.contains(#"debug data {"reason":"Shutdown"} (the stream reset: REFUSED_STREAM)"#), "\(result.out)")
        #expect(result.out.contains("1 case: 0 pass"), "\(result.out)")
    }

    /// A target that answers, then goes silent, is given up on after three silent cases in a
    /// row (rather than 10 s for each of the rest), with exit 2 and what happened.
    @Test func aTargetThatStopsAnsweringIsGivenUpOn() throws {
        let fixture = try ConformanceFixture()
        let rule: JSONValue = ["match": [:], "action": ["delayMs": 30_000], "after": 2]
        #expect(try fixture.emulator.admin("POST", "/api/v1/faults", body: rule).status == 201)
        // Pushes all (fault rules act on pushes only): two answered, then silence.
        let cases = ["duplicate-header", "bad-apns-id", "bad-priority", "bad-expiration", "bad-collapse-id", "bad-push-type", "missing-topic"]
        let started = Date()
        let result = try fixture.conformance(fixture.allNeeds + cases.flatMap { ["--case", $0] })
        #expect(result.status == 2, "\(result.out)")
        #expect(result.err.contains("stopped answering: 3 cases in a row got no answer (the last: no answer within 10 s"), "\(result.err)")
        #expect(result.out.contains("7 cases: 2 pass, 0 differ, 3 without an answer, 2 skipped"), "\(result.out)")
        #expect(Date().timeIntervalSince(started) < 60)
    }

    /// --list honours --case; --h2c runs against a cleartext listener.
    @Test func listHonoursCaseAndH2CReachesACleartextListener() throws {
        let list = try run(EmulatorProcess.binary, ["conformance", "--list", "--case", "accepted", "--case", "bad-topic"])
        #expect(list.status == 0)
        #expect(list.out.split(separator: "\n").map { $0.split(separator: " ").first.map(String.init) ?? "" } == ["accepted", "bad-topic"])
        let fixture = try ConformanceFixture(["--h2c-sandbox-listen", "127.0.0.1:0"])
        let result = try fixture.conformance(
            [
                "--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(fixture.emulator.keyPath)", "--topic", EmulatorProcess.bundleID,
                "--token", fixture.token, "--h2c", "--case", "accepted", "--case", "bad-topic", "--rate", "20",
            ], listener: "h2cSandbox")
        #expect(result.status == 0, "\(result.out) \(result.err)")
        #expect(result.out.contains("2 cases: 2 pass"), "\(result.out)")
    }
}

/// The built-in catalogue's cases, read as the test needs them.
enum ConformanceCatalogueFile {
    struct Case {
        var id: String
        /// Sent to the channel-management target (not journaled as a notification).
        var channelManagement: Bool
    }

    /// `--key` and `--topic` of a key made for the test (for runs that send nothing, or fail first).
    static func throwawayKey() throws -> [String] {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("conformance-key-\(UUID().uuidString).p8").path
        try ES256PrivateKey.generate().pkcs8PEM.write(toFile: path, atomically: true, encoding: .utf8)
        return ["--key", "TEAM123456:KEY7654321:\(path)", "--topic", "com.example.app"]
    }

    static func cases() throws -> [Case] {
        let root = try JSONValue.parse(Array(try Data(contentsOf: URL(fileURLWithPath: PackageRoot.path + "/conformance/catalogue.json"))))
        var channelEndpoints = Set<String>()
        for (name, value) in root["endpoints"]?.objectValue ?? JSONObject() where value["host"]?.stringValue == "channel-management" {
            channelEndpoints.insert(name)
        }
        let all = (root["cases"]?.arrayValue ?? []) + (root["connectionCases"]?.arrayValue ?? [])
        return all.map { item in
            Case(
                id: item["id"]?.stringValue ?? "",
                channelManagement: item["request"]?["endpoint"]?.stringValue.map(channelEndpoints.contains) ?? false)
        }
    }
}
