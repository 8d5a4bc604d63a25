import APNsCore
import Foundation
import Glibc
import Networking
import OpenSSLCrypto
import Testing
import TestSupport

/// `apns-emulator load`, the real binary against an emulator in the test process.
@Suite("load command")
struct LoadCommandTests {
    func load(_ emulator: EmulatorProcess, _ arguments: [String], key: Bool = true) throws -> CommandResult {
        var all = ["load", "--admin", try emulator.address("admin").description, "--bundle", EmulatorProcess.bundleID]
        if key { all += ["--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(emulator.keyPath)"] }
        return try run(EmulatorProcess.binary, all + arguments, timeout: 30)
    }

    func summary(_ result: CommandResult) throws -> JSONValue {
        #expect(result.status == 0, "\(result.err)")
        return try JSONValue.parse(Array(result.out.utf8))
    }

    /// `apns_emulator_notifications_total` summed over the samples whose labels include `label`.
    func notifications(_ emulator: EmulatorProcess, _ label: String) throws -> Int {
        let text = try emulator.admin("GET", "/metrics").raw
        return text.split(separator: "\n")
            .filter { $0.hasPrefix("apns_emulator_notifications_total{") && $0.contains(label) }
            .reduce(0) { $0 + Int(Double($1.split(separator: " ").last ?? "") ?? 0) }
    }

    @Test func sendsTheRequestedCountInTheExactMixAndReportsOrderedPercentiles() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        // No --key: the emulator lists the harness key, whose .p8 is readable here.
        let json = try summary(
            try load(
                emulator,
                [
                    "--connections", "2", "--streams", "20", "--requests", "2000",
                    "--devices", "10", "--mix", "alert=75,background=25", "--json", "--quiet",
                ],
                key: false))
        #expect(json["requests"]?.intValue == 2000)
        #expect(json["succeeded"]?.intValue == 2000)
        #expect(json["statuses"] == ["200": 2000])
        #expect(json["pushTypes"] == ["alert": 1500, "background": 500])
        #expect(json["tokens"]?.intValue == 10)
        #expect(json["stoppedBy"]?.stringValue == "requests")
        #expect(json["reconnects"]?.intValue == 0 && json["goAways"]?.intValue == 0)
        let latency = try #require(json["latencyMs"])
        let ordered = ["min", "p50", "p90", "p99", "p99.9", "max"].compactMap { latency[$0]?.numberValue }
        #expect(ordered.count == 6 && ordered == ordered.sorted() && ordered[5] > 0, "\(latency)")
        #expect(latency["samples"]?.intValue == 2000)
        #expect((json["throughput"]?.numberValue ?? 0) > 0)

        #expect(try notifications(emulator, #"status="200""#) == 2000)
        #expect(try notifications(emulator, #"push_type="alert""#) == 1500)
        #expect(try notifications(emulator, #"push_type="background""#) == 500)
        // The journal's newest records are in the order the emulator judged them, which with
        // 40 streams in flight is not quite the order sent: 200 of them (from at most the last
        // 240 sent, of which at most 180 are alerts) hold a background push whatever the order.
        let background = try #require(emulator.notifications(limit: 200).first { $0["pushType"]?.stringValue == "background" })
        #expect(background["priority"]?.intValue == 5 || background["priority"]?.stringValue == "5")
    }

    /// A CI job cancelled or timed out stops its commands with SIGTERM: that is never a
    /// status 0 (it was, for every command but `serve` and `scenario`, with no output, so a
    /// cut-short conformance run read as passed). `load` stops as for Ctrl-C and prints its
    /// summary; `conformance` stops at once.
    @Test func aCommandStoppedBySIGTERMDoesNotExitZero() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let token = try emulator.createDevice().token
        let key = "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(emulator.keyPath)"
        let commands: [(name: String, arguments: [String], status: Int32)] = [
            (
                "load",
                [
                    "load", "--admin", try emulator.address("admin").description, "--bundle", EmulatorProcess.bundleID, "--key", key,
                    "--duration", "60", "--rate", "50", "--devices", "2", "--json", "--quiet",
                ], 143
            ),
            (
                "conformance",
                [
                    "conformance", "--target", try emulator.address("sandbox").description, "--ca", emulator.caPath, "--key", key,
                    "--topic", EmulatorProcess.bundleID, "--token", token, "--rate", "1",
                ], 143
            ),
        ]
        for command in commands {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: EmulatorProcess.binary)
            process.arguments = command.arguments
            let out = Pipe()
            process.standardOutput = out
            process.standardError = FileHandle.nullDevice
            let before = try emulator.metric("apns_emulator_streams_total")
            try process.run()
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            // Under way: the emulator has seen its first requests.
            #expect(try eventually(20) { try emulator.metric("apns_emulator_streams_total") > before }, "\(command.name) sent nothing")
            kill(process.processIdentifier, SIGTERM)
            let output = out.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            #expect(process.terminationStatus == command.status, "\(command.name)")
            if command.name == "load" {
                let summary = try JSONValue.parse(Array(output))
                #expect((summary["requests"]?.intValue ?? 0) > 0, "load's summary, printed after SIGTERM")
            }
        }
    }

    /// A key given by a relative path is listed by `/api/v1/keys` with its absolute path, so
    /// `load` run from another directory finds the key to sign with (it found none, exit 2).
    @Test func aKeyGivenByARelativePathIsFoundFromAnotherDirectory() throws {
        let keys = FileManager.default.temporaryDirectory.appendingPathComponent("apns-relative-key-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: keys, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: keys) }
        try ES256PrivateKey.generate().pkcs8PEM.write(to: keys.appendingPathComponent("rel.p8"), atomically: true, encoding: .utf8)
        // The emulator runs in a directory of its own beside `keys`.
        let relative = "../\(keys.lastPathComponent)/rel.p8"
        let emulator = try EmulatorProcess(["--auth-key", "RELTEAM001:RELKEY0001:\(relative)", "--app", "RELTEAM001:com.example.relative"])
        let listed = try emulator.admin("GET", "/api/v1/keys").json["keys"]?.arrayValue ?? []
        let source = listed.first { $0["keyId"] == "RELKEY0001" }?["source"]?.stringValue
        #expect(source?.hasPrefix("/") == true, "\(String(describing: source))")
        let result = try run(
            EmulatorProcess.binary,
            [
                "load", "--admin", try emulator.address("admin").description, "--bundle", "com.example.relative", "--requests", "20",
                "--devices", "2", "--json", "--quiet",
            ], workingDirectory: "/", timeout: 30)
        #expect(result.status == 0, "\(result.err)")
        #expect(try JSONValue.parse(Array(result.out.utf8))["succeeded"]?.intValue == 20)
    }

    @Test func aPacedRunOverH2CEndsAndReportsItsRate() throws {
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"], inProcess: true)
        for _ in 0..<3 { _ = try emulator.createDevice() }
        let json = try summary(
            try load(
                emulator,
                [
                    "--h2c", "--tokens-from-emulator", "--rate", "200", "--requests", "100",
                    "--connections", "2", "--payload-bytes", "600", "--json", "--quiet",
                ]))
        #expect(json["rate"]?.numberValue == 200)
        #expect(json["tls"] == false)
        #expect(json["tokens"]?.intValue == 3 && json["tokenSource"]?.stringValue == "from the emulator")
        #expect(json["succeeded"]?.intValue == 100)
        #expect(json["payloadBytes"]?["alert"]?.intValue == 600)
        // 100 requests at 200/s, of which a tenth of a second's worth may go at once: at least 0.4 s.
        let seconds = json["durationSeconds"]?.numberValue ?? 0
        #expect(seconds >= 0.35 && seconds < 20, "\(seconds)")
    }

    /// The tokens come from every page of the emulator's token list (10,000 a page).
    @Test func tokensFromTheEmulatorAreReadFromEveryPage() throws {
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"], inProcess: true)
        let batch: JSONValue = ["bundleId": .string(EmulatorProcess.bundleID), "environment": "sandbox", "count": 10_050]
        #expect(try emulator.admin("POST", "/api/v1/devices/batch", body: batch, timeoutMilliseconds: 60_000).status == 201)
        let json = try summary(try load(emulator, ["--h2c", "--tokens-from-emulator", "--requests", "20", "--json", "--quiet"]))
        #expect(json["tokens"]?.intValue == 10_050)
        #expect(json["succeeded"]?.intValue == 20)
    }

    @Test func aDurationStopsTheRunAndTheTextSummaryNamesEveryAnswer() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let result = try load(emulator, ["--duration", "0.5", "--rate", "100", "--devices", "2", "--connections", "1"])
        #expect(result.status == 0, "\(result.err)")
        #expect(result.out.contains("target       https://\(try emulator.address("sandbox"))"), "\(result.out)")
        #expect(result.out.contains("(duration reached)"), "\(result.out)")
        // The duration as given: it said "until 1 s".
        #expect(result.out.contains(", until 0.5 s\n"), "\(result.out)")
        #expect(result.out.contains("answers      200: "))
        #expect(result.out.contains("latency ms   p50 "))
        // The devices came from one batch call, not one call each.
        #expect(!result.err.contains("one call each"), "\(result.err)")
        #expect(try emulator.admin("GET", "/api/v1/devices").json["devices"]?.arrayValue?.count == 2)
    }

    /// Requests still queued behind the server's stream limit when their time runs out never
    /// left the client: counted as not sent, not as sent and timed out. What the report calls
    /// sent is what reached the emulator.
    @Test func requestsThatNeverLeftAreNotCountedAsSent() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        // The second push lowers the limit to 1 for the connection; from the third on, answers
        // are held, so what is queued behind the limit stays there.
        let lower: JSONValue = ["id": "lower", "action": ["maxConcurrentStreams": 1], "after": 1, "times": 1]
        let hold: JSONValue = ["id": "hold", "action": ["delayMs": 600_000], "after": 2]
        for rule in [lower, hold] { #expect(try emulator.admin("POST", "/api/v1/faults", body: rule).status == 201) }
        let json = try summary(
            try load(
                emulator,
                [
                    "--connections", "1", "--streams", "10", "--requests", "40", "--devices", "1", "--timeout", "1", "--duration", "3", "--json",
                    "--quiet",
                ]))
        let reached = Int(try emulator.metric("apns_emulator_streams_total"))
        #expect(json["sent"]?.intValue == Int64(reached), "\(json)")
        #expect((json["outcomes"]?["not sent"]?.intValue ?? 0) > 0, "\(json)")
    }

    /// Without `--duration`, a run whose requests time out (some still queued behind the
    /// one-stream start) goes to its count and says so: it said "duration reached".
    @Test func aRunWithoutADurationIsNeverStoppedByOne() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        #expect(try emulator.admin("POST", "/api/v1/faults", body: ["action": ["delayMs": 3000]]).status == 201)
        let json = try summary(
            try load(
                emulator, ["--connections", "1", "--streams", "5", "--requests", "12", "--devices", "1", "--timeout", "1", "--json", "--quiet"]))
        #expect(json["stoppedBy"]?.stringValue == "requests", "\(json)")
        #expect(json["requests"]?.intValue == 12)
        #expect((json["outcomes"]?["not sent"]?.intValue ?? 0) > 0, "\(json)")
    }

    /// Requests that never left: the text summary counts every request made and those sent,
    /// as the JSON does (it said "requests 21 … (all sent)" next to "not sent: 9").
    @Test func theTextSummaryCountsRequestsMadeAndSentAsTheJSONDoes() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        #expect(try emulator.admin("POST", "/api/v1/faults", body: ["action": ["delayMs": 3000]]).status == 201)
        let result = try load(
            emulator, ["--connections", "1", "--streams", "5", "--requests", "12", "--devices", "1", "--timeout", "1", "--quiet"])
        #expect(result.status == 0, "\(result.err)")
        let notSent = result.out.split(separator: "\n").compactMap { line in
            line.range(of: "not sent: ").flatMap { Int(line[$0.upperBound...]) }
        }.first
        guard let notSent, notSent > 0 else {
            Issue.record("no requests were left unsent: \(result.out)")
            return
        }
        #expect(result.out.contains("requests     12, sent \(12 - notSent), in "), "\(result.out)")
        #expect(result.out.contains("(count reached)"), "\(result.out)")
        #expect(!result.out.contains("all sent"), "\(result.out)")
    }

    @Test func aConnectionEndedByGoAwayIsOpenedAgainAndTheRunGoesOn() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let rule: JSONValue = ["action": ["goAway": ["errorCode": 0]], "after": 300, "times": 1]
        #expect(try emulator.admin("POST", "/api/v1/faults", body: rule).status == 201)
        let json = try summary(
            try load(
                emulator,
                [
                    "--connections", "2", "--streams", "10", "--requests", "1000", "--devices", "5",
                    "--json", "--quiet",
                ]))
        #expect(json["requests"]?.intValue == 1000)
        #expect(json["goAways"]?.intValue == 1)
        #expect((json["reconnects"]?.intValue ?? 0) >= 1)
        // Refused and not sent again: the streams in flight above the GOAWAY's last stream id,
        // and those opened before it arrived (it follows the answers it covers).
        #expect((json["succeeded"]?.intValue ?? 0) >= 1000 - 30, "\(json)")
    }

    @Test(arguments: [
        (["--connections", "0"], "--connections must be a whole number from 1 to 1,000"),
        (["--streams", "many"], "--streams must be a whole number"),
        (["--requests", "20000000"], "--requests must be a whole number from 1 to 10,000,000"),
        (["--duration", "7200"], "--duration must be a number above 0 and up to 3,600"),
        (["--mix", "alert=80,voip=20"], "'voip' is not a push type it can send"),
        (["--mix", "alert=x"], "the weight of alert must be a whole number"),
        (["--environment", "staging"], "--environment must be sandbox or production"),
        (["--devices", "5", "--tokens-from-emulator"], "choose one of --devices and --tokens-from-emulator"),
        (["--payload-bytes", "5000"], "--payload-bytes must be a whole number from 0 to 4,096"),
        (["--key", "nonsense"], "is not TEAMID:KEYID:PATH"),
        (["--requestz", "5"], "unknown option --requestz"),
        (["--ca", "/nonexistent/ca.pem"], "--ca /nonexistent/ca.pem: No such file or directory"),
    ])
    func badFlagsExitTwoWithAMessage(_ arguments: [String], _ message: String) throws {
        // Usage is checked before the emulator is asked anything: no emulator is needed.
        let result = try run(EmulatorProcess.binary, ["load", "--admin", "127.0.0.1:1"] + arguments)
        #expect(result.status == 2, "\(result.err)")
        #expect(result.err.contains(message), "\(result.err)")
    }

    /// A --provider of another protocol (--h2c at a TLS listener, an HTTP/1.x server with or
    /// without --h2c): the run does not start, exit 1, and says why, before any device is made.
    /// --h2c at a TLS listener printed "answers connection lost: 10" and exited 0.
    @Test(.requires(.python3)) func aProviderOfAnotherProtocolStopsTheRunAndSaysWhy() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let sandbox = try emulator.address("sandbox")
        let http = try ForeignServer.http()
        let cases: [([String], String)] = [
            (["--provider", sandbox.description, "--h2c"], "\(sandbox) answered with TLS, not cleartext HTTP/2 (a TLS listener): drop --h2c"),
            (
                ["--provider", http.address.description, "--h2c"],
                "\(http.address) does not speak HTTP/2: its first bytes were not an HTTP/2 SETTINGS frame"
            ),
            (["--provider", http.address.description], "\(http.address) does not speak TLS: "),
        ]
        for (arguments, message) in cases {
            let result = try load(emulator, arguments + ["--requests", "10", "--devices", "1"])
            #expect(result.status == 1, "\(arguments): \(result.out)")
            #expect(result.err.contains(message), "\(arguments): \(result.err)")
            #expect(result.out.isEmpty, "no run: \(result.out)")
        }
        #expect(try emulator.admin("GET", "/api/v1/devices").json["devices"]?.arrayValue?.isEmpty == true)
    }

    /// A --provider that accepts and never speaks, or whose TLS fails: said with the address and
    /// what was waited for, as conformance says it. It said only "timed out" after 10 s, and
    /// "TLS handshake failed: …" without the address.
    @Test(.requires(.openssl)) func aProviderThatIsSilentOrFailsTLSIsNamed() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let listener = try Socket.listen(try HostPort(parsing: "127.0.0.1:0"))
        defer { close(listener.fd) }
        let silent = try load(emulator, ["--provider", listener.bound.description, "--requests", "1", "--devices", "1"])
        #expect(silent.status == 1, "\(silent.out)")
        #expect(
            silent.err.contains(
                "the provider listener \(listener.bound) (TLS) did not answer within 10 s (connecting and the TLS handshake)"),
            "\(silent.err)")
        let server = try ForeignServer.tlsNamed("example.invalid")
        let named = try load(
            emulator,
            ["--provider", server.address.description, "--ca", "\(server.directory)/example.invalid.pem", "--requests", "1", "--devices", "1"])
        #expect(named.status == 1, "\(named.out)")
        #expect(named.err.contains("the provider listener \(server.address) (TLS): TLS handshake failed"), "\(named.err)")
        #expect(named.err.contains("does not name the host 127.0.0.1"), "\(named.err)")
        #expect(try emulator.admin("GET", "/api/v1/devices").json["devices"]?.arrayValue?.isEmpty == true)
    }

    /// --admin at a server that is not an emulator's admin listener: said as such, with the
    /// status and a short excerpt, once. It printed the server's whole HTML 404 page, and for a
    /// TLS port "GET /api/v1/apps: GET /api/v1/apps: no complete answer…".
    @Test(.requires(.python3)) func anAdminThatIsNotTheEmulatorIsSaidPlainly() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let sandbox = try emulator.address("sandbox")
        let http = try ForeignServer.http()
        let cases: [(HostPort, String)] = [
            (
                http.address,
                "\(http.address) did not answer as an apns-emulator admin listener: GET /api/v1/apps was answered 404 (a page titled \"Error response\")"
            ),
            (sandbox, "\(sandbox) did not answer as an apns-emulator admin listener: GET /api/v1/apps: no complete answer"),
        ]
        for (admin, message) in cases {
            let result = try run(EmulatorProcess.binary, ["load", "--admin", admin.description, "--requests", "10"], timeout: 30)
            #expect(result.status == 1, "\(admin): \(result.out)")
            #expect(result.err.contains(message), "\(admin): \(result.err)")
            #expect(result.err.contains("--admin is the emulator's admin listener"), "\(result.err)")
            #expect(result.err.components(separatedBy: "GET /api/v1/apps").count == 2, "said once: \(result.err)")
            #expect(result.err.split(separator: "\n").count == 1, "one line, no page: \(result.err)")
        }
    }

    /// An admin API started with --admin-token, reached without the token or with another:
    /// the message names load's own option, not serve's (the server's words).
    @Test func anAdminTokenMissingOrWrongNamesLoadsOwnOption() throws {
        let token = "t-\(UUID().uuidString)"
        let emulator = try EmulatorProcess(environment: ["APNS_EMULATOR_ADMIN_TOKEN": token])
        let admin = try emulator.address("admin").description
        for (given, expected) in [
            (
                [String](),
                "--admin \(admin): GET /api/v1/apps: 401: this admin API needs a token; give --admin-token TOKEN (or APNS_EMULATOR_ADMIN_TOKEN)"
            ),
            (
                ["--admin-token", "wrong"],
                "--admin \(admin): GET /api/v1/apps: 401: wrong admin token; give --admin-token TOKEN (or APNS_EMULATOR_ADMIN_TOKEN)"
            ),
        ] {
            let result = try run(EmulatorProcess.binary, ["load", "--admin", admin, "--requests", "10"] + given, timeout: 30)
            #expect(result.status == 1, "\(given): \(result.out)")
            #expect(result.err.contains(expected), "\(given): \(result.err)")
            #expect(result.err.split(separator: "\n").count == 1, "\(result.err)")
        }
    }

    @Test func noTokensOrNoEmulatorExitsOne() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let none = try load(emulator, ["--tokens-from-emulator"])
        #expect(none.status == 1)
        #expect(none.err.contains("the emulator has no active tokens for \(EmulatorProcess.bundleID) (sandbox)"), "\(none.err)")
        let unreachable = try run(EmulatorProcess.binary, ["load", "--admin", "127.0.0.1:1", "--key", "T:K:\(emulator.keyPath)"])
        #expect(unreachable.status == 1)
        #expect(unreachable.err.contains("cannot reach the admin API at 127.0.0.1:1"), "\(unreachable.err)")
        #expect(try emulator.admin("GET", "/api/v1/devices").json["devices"]?.arrayValue?.isEmpty == true)
    }
}
