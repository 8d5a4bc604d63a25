import APNsCore
import Foundation
import ProviderClient
import Testing
import TestSupport

@Suite("Command line, third-party HTTP/2 clients and admin API")
struct CommandLineTests {
    @Test(.requires(.curl)) func curlHTTP2GetsApplesAnswers() throws {
        let curl = try #require(ExternalTool.curl.path)
        let emulator = try EmulatorProcess()
        let device = try emulator.createDevice()
        let url = "https://\(try emulator.address("sandbox"))/3/device/\(device.token)"
        let ok = try run(
            curl,
            [
                "-sS", "--http2", "--cacert", emulator.caPath, "-D", "-", "-o", "/dev/null",
                "-w", "version=%{http_version}",
                "-H", "authorization: bearer \(try emulator.providerToken())",
                "-H", "apns-topic: \(EmulatorProcess.bundleID)", "-H", "apns-push-type: alert",
                "-d", #"{"aps":{"alert":"from curl"}}"#, url,
            ])
        #expect(ok.status == 0, "\(ok.err)")
        #expect(ok.out.hasPrefix("HTTP/2 200"))
        #expect(ok.out.lowercased().contains("apns-id: "))
        #expect(ok.out.lowercased().contains("apns-unique-id: "))
        #expect(ok.out.contains("version=2"))

        let bad = try run(
            curl,
            [
                "-sS", "--http2", "--cacert", emulator.caPath, "-D", "/dev/stderr",
                "-H", "authorization: bearer \(try emulator.providerToken())",
                "-H", "apns-topic: \(EmulatorProcess.bundleID)", "-H", "apns-priority: 2",
                "-d", #"{"aps":{}}"#, url,
            ])
        #expect(bad.err.hasPrefix("HTTP/2 400"))
        #expect(bad.out == #"{"reason":"BadPriority"}"#)

        // curl's own JSON example from the banner shape: missing token header.
        let missing = try run(
            curl,
            [
                "-sS", "--http2", "--cacert", emulator.caPath,
                "-H", "apns-topic: \(EmulatorProcess.bundleID)", "-d", "{}", url,
            ])
        #expect(missing.out == #"{"reason":"MissingProviderToken"}"#)
        let records = try emulator.notifications(token: device.token)
        #expect(records.first?["payload"]?["aps"]?.objectValue?.isEmpty == true || records.count >= 2)
    }

    @Test(.requires(.nghttp)) func nghttpSeesApplesFramesAndSettings() throws {
        let nghttp = try #require(ExternalTool.nghttp.path)
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"])
        let device = try emulator.createDevice()
        let payload = emulator.directory + "/payload.json"
        try #"{"aps":{"alert":"from nghttp"}}"#.write(toFile: payload, atomically: true, encoding: .utf8)
        for url in ["https://\(try emulator.address("sandbox"))", "http://\(try emulator.address("h2cSandbox"))"] {
            let result = try run(
                nghttp,
                [
                    "-v", "-y", "-d", payload,
                    "-H", "authorization: bearer \(try emulator.providerToken())",
                    "-H", "apns-topic: \(EmulatorProcess.bundleID)",
                    "\(url)/3/device/\(device.token)",
                ])
            #expect(result.status == 0, "\(result.err)")
            #expect(result.out.contains("SETTINGS_MAX_CONCURRENT_STREAMS(0x03):1]"), "\(result.out)")
            #expect(result.out.contains("SETTINGS_MAX_CONCURRENT_STREAMS(0x03):1000]"))
            #expect(result.out.contains("SETTINGS_HEADER_TABLE_SIZE(0x01):4096"))
            #expect(result.out.contains("SETTINGS_MAX_HEADER_LIST_SIZE(0x06):8000"))
            #expect(result.out.contains(":status: 200"))
            #expect(result.out.contains("apns-id: "))
            // A success is HEADERS with END_STREAM and no DATA frame.
            #expect(!result.out.contains("recv DATA frame"))
        }
        let rejected = try run(
            nghttp,
            [
                "-v", "-y", "-d", payload, "-H", "apns-topic: \(EmulatorProcess.bundleID)",
                "https://\(try emulator.address("sandbox"))/3/device/\(device.token)",
            ])
        #expect(rejected.out.contains(":status: 403"))
        // An error is HEADERS, then exactly one DATA frame, which ends the stream.
        #expect(rejected.out.components(separatedBy: "recv DATA frame").count - 1 == 1, "\(rejected.out)")
        #expect(rejected.out.contains("recv DATA frame <length=33, flags=0x01"))
        #expect(rejected.out.contains(#"{"reason":"MissingProviderToken"}"#))
    }

    @Test func sendCommandPrintsStatusReasonAndApnsID() throws {
        let emulator = try EmulatorProcess()
        let device = try emulator.createDevice()
        let host = try emulator.address("sandbox").description
        let key = "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(emulator.keyPath)"
        let ok = try run(
            EmulatorProcess.binary,
            [
                "send", "--host", host, "--ca", emulator.caPath, "--key", key,
                "--topic", EmulatorProcess.bundleID, "--token", device.token,
                "--push-type", "alert", "--priority", "10",
                #"{"aps":{"alert":"from send"}}"#,
            ])
        #expect(ok.status == 0, "\(ok.err)")
        #expect(ok.out.contains("status: 200"))
        #expect(ok.out.contains("apns-id: "))
        #expect(ok.out.contains("apns-unique-id: "))

        let bad = try run(
            EmulatorProcess.binary,
            [
                "send", "--host", host, "--ca", emulator.caPath, "--key", key,
                "--topic", EmulatorProcess.bundleID, "--token", "00ff", "--json", "{}",
            ])
        #expect(bad.status == 1)
        let json = try JSONValue.parse(bad.out.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(json["status"]?.intValue == 400)
        #expect(json["reason"]?.stringValue == "BadDeviceToken")

        let usage = try run(EmulatorProcess.binary, ["send", "--token", "00"])
        #expect(usage.status == 2)
        #expect(usage.err.contains("--topic"))
    }

    /// The ports newcomers mix up say what to change: `send` at a channel-management port (a
    /// bare 404 BadPath, and nothing in the journal), `send` at an h2c listener without --h2c,
    /// `device` at a provider port, and `device --tls` at a cleartext device listener.
    @Test func portMixUpsSayWhatToChange() throws {
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"])
        let key = ["--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(emulator.keyPath)", "--ca", emulator.caPath]
        let push = ["send", "--topic", EmulatorProcess.bundleID, "--token", "00ff"] + key
        let channelPort = try run(EmulatorProcess.binary, push + ["--host", try emulator.address("channelSandbox").description])
        #expect(channelPort.status == 1 && channelPort.out.contains("reason: BadPath"), "\(channelPort.out)")
        #expect(channelPort.err.contains("hint: a channel-management port"), "\(channelPort.err)")
        #expect(channelPort.err.contains("go to --sandbox-listen / --production-listen (default 127.0.0.1:2197 / 127.0.0.1:2198)"))
        let h2c = try run(EmulatorProcess.binary, push + ["--host", try emulator.address("h2cSandbox").description])
        #expect(h2c.status == 2, "\(h2c.out)")
        #expect(
            h2c.err.contains("does not speak TLS: it answered with an HTTP/2 SETTINGS frame in cleartext (an h2c listener)"), "\(h2c.err)")
        #expect(h2c.err.contains("a cleartext HTTP/2 listener takes --h2c"), "\(h2c.err)")
        let device = ["device", "--device-id", "mixed-up", "--bundle", EmulatorProcess.bundleID, "--environment", "sandbox", "--no-retry"]
        let atProviderPort = try run(EmulatorProcess.binary, device + ["--connect", try emulator.address("sandbox").description], timeout: 30)
        #expect(atProviderPort.status != 0)
        #expect(atProviderPort.err.contains("is it the emulator's device listener, serve's --device-listen"), "\(atProviderPort.err)")
        let tlsAtCleartext = try run(
            EmulatorProcess.binary, device + ["--tls", "--insecure", "--connect", try emulator.address("device").description], timeout: 30)
        #expect(tlsAtCleartext.status != 0)
        #expect(tlsAtCleartext.err.contains("the server does not speak TLS"), "\(tlsAtCleartext.err)")
    }

    /// A server certificate that cannot be verified (run where no certs/ca.pem is, without
    /// --ca) says what to give: the emulator's CA with --ca, or --insecure. Only then: a TLS
    /// failure of another kind keeps its own words.
    @Test func anUnverifiedCertificateSaysToTrustTheEmulatorsCA() throws {
        let emulator = try EmulatorProcess()
        let elsewhere = FileManager.default.temporaryDirectory.appendingPathComponent("no-ca-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: elsewhere) }
        let key = "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(emulator.keyPath)"
        let hint =
            "; trust the emulator's CA with --ca PATH (its certs/ca.pem, the \"trust this CA\" line serve prints) or skip the check with --insecure"
        for arguments in [
            ["send", "--host", try emulator.address("sandbox").description, "--topic", EmulatorProcess.bundleID, "--token", "00ff", "{}"],
            ["channels", "list", "--host", try emulator.address("channelSandbox").description, "--bundle", EmulatorProcess.bundleID],
        ] {
            let result = try run(EmulatorProcess.binary, arguments + ["--key", key], workingDirectory: elsewhere)
            #expect(result.status == 2, "\(arguments): \(result.out) \(result.err)")
            #expect(result.err.contains("(certificate verification: "), "\(arguments): \(result.err)")
            #expect(result.err.contains(hint), "\(arguments): \(result.err)")
            #expect(result.err.split(separator: "\n").count == 1, "\(arguments): \(result.err)")
        }
        // A cleartext server is not a certificate to trust.
        let cleartext = try run(
            EmulatorProcess.binary,
            ["send", "--host", try emulator.address("admin").description, "--topic", EmulatorProcess.bundleID, "--token", "00ff", "{}"],
            workingDirectory: elsewhere)
        #expect(cleartext.status == 2 && cleartext.err.contains("does not speak TLS"), "\(cleartext.err)")
        #expect(!cleartext.err.contains("--insecure"), "\(cleartext.err)")
    }

    /// A stray word (a misplaced value, a subcommand typed twice) is a usage error, not ignored.
    @Test func strayArgumentsAreUsageErrors() throws {
        for arguments in [["readyz", "127.0.0.1:8197"], ["certs", "out"], ["serve", "extra"], ["jwt", "x"]] {
            let result = try run(EmulatorProcess.binary, arguments)
            #expect(result.status == 2, "\(arguments)")
            #expect(result.err.contains("unexpected argument '\(arguments[1])'"), "\(arguments): \(result.err)")
        }
    }

    @Test(arguments: [
        (["--sandbox-listen", "nonsense"], "--sandbox-listen"),
        (["--admin-listen", "127.0.0.1:99999"], "port"),
        (["--invalid-payload", "maybe"], "reject, accept"),
        (["--auth-key", "onlyonepart"], "TEAMID:KEYID:PATH"),
        (["--app", "TEAM:not a bundle"], "TEAMID:BUNDLEID"),
        (["--threads", "zero"], "--threads"),
        (["--no-such-flag"], "unknown option --no-such-flag"),
        (["--auth-key", "TEAM123456:KEY7654321:/does/not/exist.p8"], "cannot read"),
        (["--tls-cert", "/nope.pem"], "--tls-key"),
    ])
    func badFlagValuesFailAtStartWithAClearMessage(arguments: [String], expected: String) throws {
        let result = try run(EmulatorProcess.binary, ["serve", "--quiet"] + arguments)
        #expect(result.status != 0)
        #expect(result.err.contains(expected), "\(result.err)")
        #expect(result.err.hasPrefix("apns-emulator: "))
    }

    @Test func flagBeatsEnvironmentBeatsConfigFileBeatsDefault() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cfg-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = directory + "/config.json"
        // The file asks for records capped at 2 and a pinned device; the environment turns the
        // h2c sandbox listener on; the flag overrides the file's token length.
        try #"""
        {"maxRecords": 2, "tokenBytes": 8,
         "devices": [{"deviceId": "pinned", "apps": [{"bundleId": "com.example.app", "environment": "sandbox", "token": "00112233445566778899aabbccddeeff"}]}]}
        """#.write(toFile: config, atomically: true, encoding: .utf8)
        let emulator = try EmulatorProcess(
            ["--config", config, "--token-bytes", "16"],
            environment: [
                "APNS_EMULATOR_H2C_SANDBOX_LISTEN": "127.0.0.1:0",
                "APNS_EMULATOR_TOKEN_BYTES": "40",
            ])
        #expect(emulator.ready["h2cSandbox"]?.stringValue != nil)
        let created = try emulator.createDevice()
        #expect(created.token.count == 32, "flag --token-bytes 16 wins over env (40) and file (8)")
        let pinned = "00112233445566778899aabbccddeeff"
        let connection = try emulator.connect()
        for _ in 0..<3 { #expect(APNsResult(try connection.send(try emulator.push(pinned).request)).status == 200) }
        #expect(try emulator.notifications().count == 2, "maxRecords from the file applies")
    }

    /// Settings that would be dropped without a word stop the start instead, saying why: a
    /// config file naming another one, a ready file that cannot be written, a key id or a
    /// bundle id given twice differently.
    @Test func settingsThatWouldBeSilentlyDroppedStopTheStart() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cfg-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let nested = directory + "/nested.json"
        try #"{"config": "other.json"}"#.write(toFile: nested, atomically: true, encoding: .utf8)
        let off = ["--admin-listen", "off", "--sandbox-listen", "127.0.0.1:0", "--production-listen", "off", "--device-listen", "off"]
        let cases: [([String], String)] = [
            (["--config", nested], "\"config\" cannot be given in a config file"),
            (
                ["--ready-file", directory + "/missing/ready.json"],
                "--ready-file \(directory)/missing/ready.json: cannot write in \(directory)/missing"
            ),
            (["--ready-file", directory], "--ready-file \(directory) is a directory"),
            (["--app", "ABCDE12345:com.example.x", "--app", "FFFFF12345:com.example.x"], "com.example.x is given for two teams"),
            (
                ["--auth-key", "ABCDE12345:KEY1234567:\(directory)/a.p8", "--auth-key", "FFFFF12345:KEY1234567:\(directory)/b.p8"],
                "key id KEY1234567 is given twice"
            ),
        ]
        for (flags, expected) in cases {
            let result = try run(EmulatorProcess.binary, ["serve", "--quiet"] + off + flags)
            #expect(result.status != 0, "\(flags)")
            #expect(result.err.contains(expected), "\(flags): \(result.err)")
        }
    }

    @Test func certificatesAreGeneratedWhenMissingAndDemoModeWorks() throws {
        let emulator = try EmulatorProcess(["--demo", "on"], withKey: false)
        #expect(FileManager.default.fileExists(atPath: emulator.caPath))
        // The banner names the CA, the listeners and a working example.
        try #require(try eventually { emulator.stdout.contains("Send a push with curl") })
        let banner = emulator.stdout
        #expect(banner.contains(emulator.caPath))
        #expect(banner.contains(try emulator.address("sandbox").description))
        // The demo device's token from the banner accepts a push signed with the demo key.
        let devices = try emulator.admin("GET", "/api/v1/devices/demo-iphone")
        let token = try #require(devices.json["apps"]?.arrayValue?.first?["token"]?.stringValue)
        #expect(banner.contains(token))
        #expect(banner.contains("device demo-iphone (sandbox token \(token))"), "the banner labels the demo device's token")
        // The CA path is absolute wherever it is read (the banner, the ready file, the curl export).
        #expect(try emulator.admin("GET", "/api/v1/info").json["addresses"]?["caFile"]?.stringValue?.hasPrefix("/") == true)
        let keyPath = emulator.directory + "/certs/demo-AuthKey_DEMOKEY000.p8"
        let send = try run(
            EmulatorProcess.binary,
            [
                "send", "--host", try emulator.address("sandbox").description,
                "--ca", emulator.caPath, "--key", "DEMOTEAM00:DEMOKEY000:\(keyPath)",
                "--topic", "com.example.app", "--token", token,
            ])
        #expect(send.status == 0, "\(send.out) \(send.err)")
    }

    /// A key that can sign but whose team owns no app: the banner names the missing `--app`,
    /// not a missing private key.
    @Test func theBannerNamesAnAppMissingForTheKey() throws {
        let keyPath = FileManager.default.temporaryDirectory.appendingPathComponent("AuthKey-\(UUID().uuidString).p8").path
        defer { try? FileManager.default.removeItem(atPath: keyPath) }
        try ES256PrivateKey.generate().pkcs8PEM.write(toFile: keyPath, atomically: true, encoding: .utf8)
        let emulator = try EmulatorProcess(["--auth-key", "ABCDE12345:KEY1234567:\(keyPath)", "--demo", "off"], withKey: false)
        try #require(try eventually { emulator.stdout.contains("Send a push with curl") })
        #expect(emulator.stdout.contains("Key KEY1234567 can sign, but its team ABCDE12345 owns no app"), "\(emulator.stdout)")
        #expect(emulator.stdout.contains("--app ABCDE12345:BUNDLEID"))
        #expect(!emulator.stdout.contains("a .p8 private key is needed"))
    }

    /// A key the state directory keeps (added at run time) in place of a configured one with
    /// the same id: the banner's example does not sign with the configured file, whose pushes
    /// the kept key refuses (it printed a `jwt --key` of the replaced key).
    @Test func theBannerLeavesOutAConfiguredKeyTheStateReplaced() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("banner-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let keyPath = directory + "-AuthKey.p8"
        defer { try? FileManager.default.removeItem(atPath: keyPath) }
        let pem = try ES256PrivateKey.generate().pkcs8PEM
        try pem.write(toFile: keyPath, atomically: true, encoding: .utf8)
        var first: EmulatorProcess? = try EmulatorProcess(["--state-dir", directory, "--demo", "off"], withKey: false)
        let added = try first?.admin("POST", "/api/v1/keys", body: ["teamId": "TEAM000002", "keyId": "KEYBBBBBB2", "pem": .string(pem)])
        #expect(added?.status == 201, "\(added?.raw ?? "")")
        first = nil
        let again = try EmulatorProcess(
            ["--state-dir", directory, "--demo", "off", "--auth-key", "TEAM000009:KEYBBBBBB2:\(keyPath)", "--app", "TEAM000009:com.example.nine"],
            withKey: false)
        try #require(try eventually { again.stdout.contains("Send a push with curl") })
        #expect(again.stderr.contains("key KEYBBBBBB2 added at run time"), "\(again.stderr)")
        #expect(!again.stdout.contains("TEAM000009:KEYBBBBBB2"), "\(again.stdout)")
        #expect(again.stdout.contains("No configured key can sign a push"), "\(again.stdout)")
    }

    /// SIGINT while the start waits for a Redis that is not there (up to 10 s) ends it at once,
    /// not when the wait is over.
    @Test func aSignalWhileStartingStopsTheStartAtOnce() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("start-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: EmulatorProcess.binary)
        process.arguments = [
            "serve", "--certs-dir", directory + "/certs", "--sandbox-listen", "127.0.0.1:0", "--production-listen", "off",
            "--channel-sandbox-listen", "off", "--channel-production-listen", "off", "--admin-listen", "127.0.0.1:0",
            "--device-listen", "127.0.0.1:0", "--redis", "redis://127.0.0.1:\(try freePort())", "--quiet",
        ]
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        Thread.sleep(forTimeInterval: 1.5)
        let sent = Date()
        kill(process.processIdentifier, SIGINT)
        process.waitUntilExit()
        #expect(Date().timeIntervalSince(sent) < 2, "it waited for the Redis retries to end")
        #expect(process.terminationStatus == 0)
        let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(text.contains("SIGINT while starting"), "\(text)")
    }

    /// `--demo on` while the configuration gives com.example.app to another team: the banner
    /// says the demo key is refused for it, and its example push uses the team that owns it
    /// (before, it printed the demo key's push, which got TopicDisallowed).
    @Test func theBannerSaysWhenTheDemoAppBelongsToAnotherTeam() throws {
        let emulator = try EmulatorProcess(["--demo", "on"])
        try #require(try eventually { emulator.stdout.contains("see what arrived:") })
        let banner = emulator.stdout
        #expect(
            banner.contains("but com.example.app belongs to team \(EmulatorProcess.teamID) (configured), so the demo key is refused"),
            "\(banner)")
        #expect(banner.contains("--key \(EmulatorProcess.teamID):\(EmulatorProcess.keyID):"), "\(banner)")
        #expect(!banner.contains("jwt --key DEMOTEAM00"), "\(banner)")
    }

    /// With the user's own key and app, the banner's commands run as printed: create a
    /// device, push with curl and with `send`, list what arrived. Also through `--listen`,
    /// where curl reaches Apple's host name with --resolve.
    @Test(.requires(.curl), arguments: [[String](), ["--listen", "127.0.0.1:0", "--sandbox-listen", "off", "--production-listen", "off"]])
    func bannerCommandsRunAsPrinted(extra: [String]) throws {
        let emulator = try EmulatorProcess(extra)
        try #require(try eventually { emulator.stdout.contains("see what arrived:") })
        let banner = emulator.stdout
        #expect(!banner.contains("TEAMID:KEYID"), "no placeholders when a key is configured:\n\(banner)")
        #expect(banner.contains("\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(emulator.keyPath)"))
        let commands = banner.components(separatedBy: "\n").drop { !$0.hasPrefix("Create a device") }
            .filter { !$0.hasSuffix(":") }.joined(separator: "\n")
        try #require(commands.contains("TOKEN=$(curl"), "the banner says how to create a device:\n\(banner)")
        let script = emulator.directory + "/banner.sh"
        try ("set -e\n" + commands + "\n").write(toFile: script, atomically: true, encoding: .utf8)
        let result = try run("/bin/bash", [script])
        #expect(result.status == 0, "\(commands)\n\(result.out)\(result.err)")
        #expect(result.out.contains("HTTP/2 200"), "curl: \(result.out)")
        #expect(result.out.contains("status: 200"), "send: \(result.out)")
        let records = try emulator.notifications()
        #expect(records.filter { $0["status"]?.intValue == 200 }.count == 2, "\(result.out)")
    }

    /// `--help` lists every command, its name apart from its summary and the summaries in one column.
    @Test func topLevelHelpListsEachCommandInColumns() throws {
        let help = try run(EmulatorProcess.binary, ["--help"])
        #expect(help.status == 0)
        let lines = help.out.split(separator: "\n", omittingEmptySubsequences: false)
        let start = try #require(lines.firstIndex(of: "commands:"))
        let commands = lines[(start + 1)...].prefix { !$0.isEmpty }
        let names = commands.map { $0.dropFirst(2).prefix { $0 != " " } }
        #expect(names.contains("conformance") && names.contains("scenario") && names.contains("version"), "\(help.out)")
        let column = try #require(commands.first.map { $0.count - $0.dropFirst(2).drop { $0 != " " }.drop { $0 == " " }.count })
        for line in commands {
            #expect(line.hasPrefix("  ") && line.count > column, "\(line)")
            let name = line.dropFirst(2).prefix { $0 != " " }
            #expect(2 + name.count + 2 <= column, "\(line)")
            #expect(line.dropFirst(column).first != " " && line.prefix(column).hasSuffix("  "), "\(line)")
        }
        #expect(help.out.contains("  conformance  run the catalogue of APNs cases"))
    }

    @Test func readyzSubcommand() throws {
        let emulator = try EmulatorProcess()
        let ok = try run(EmulatorProcess.binary, ["readyz", "--admin", try emulator.address("admin").description])
        #expect(ok.status == 0)
        let down = try run(EmulatorProcess.binary, ["readyz", "--admin", "127.0.0.1:1"])
        #expect(down.status == 1)
    }
}

@Suite("Documentation")
struct DocumentationTests {
    /// The option table of docs/configuration.md is the one `serve --help-markdown` prints from
    /// the option specs, so every flag, environment variable and config key is documented; the
    /// admin API's page names its main paths.
    @Test func configurationPageDocumentsEveryServeOption() throws {
        let table = try run(EmulatorProcess.binary, ["serve", "--help-markdown"])
        #expect(table.status == 0)
        let root = URL(fileURLWithPath: PackageRoot.path)
        let configuration = try String(contentsOf: root.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        #expect(
            configuration.contains(table.out.trimmingCharacters(in: .whitespacesAndNewlines)),
            "docs/configuration.md is out of date: paste the output of `apns-emulator serve --help-markdown`")
        let adminAPI = try String(contentsOf: root.appendingPathComponent("docs/admin-api.md"), encoding: .utf8)
        for path in ["/livez", "/readyz", "/api/v1/devices", "/api/v1/notifications", "/api/v1/reset"] {
            #expect(adminAPI.contains(path))
        }
    }
}
