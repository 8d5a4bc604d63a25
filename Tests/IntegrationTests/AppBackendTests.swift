import APNsCore
import BackendTestSupport
import Foundation
import Glibc
import ProviderClient
import Testing
import TestSupport

/// examples/backend/backend.py as a real process on loopback: the app backend the simulated
/// apps call through their hooks.
final class ExampleBackend: @unchecked Sendable {
    let process = Process()
    let url: String
    private let output = Pipe()

    static var root: URL { URL(fileURLWithPath: PackageRoot.path) }

    init(buggy: Bool = false, port: Int = 0) throws {
        process.executableURL = URL(fileURLWithPath: try #require(ExternalTool.python3.path))
        process.arguments =
            [Self.root.appendingPathComponent("examples/backend/backend.py").path, "--port", String(port)]
            + (buggy ? ["--buggy"] : [])
        process.standardOutput = output
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        // The one stdout line: "listening on http://127.0.0.1:PORT".
        var line = Data()
        while !line.contains(0x0A) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line.append(chunk)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard let range = text.range(of: "http://") else { throw HarnessError("backend.py did not start: \(text)") }
        url = String(text[range.lowerBound...].prefix { !$0.isWhitespace })
    }

    deinit {
        // SIGKILL: children of the test process inherit its blocked SIGTERM, so Python would
        // never see a terminate().
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// The hooks of examples/backend/hooks.json pointed at this backend.
    func hooks(maxAttempts: Int? = nil) throws -> JSONValue {
        try Self.hooks(base: url, maxAttempts: maxAttempts)
    }

    static func hooks(base: String, maxAttempts: Int? = nil) throws -> JSONValue {
        let text = try String(contentsOf: root.appendingPathComponent("examples/backend/hooks.json"), encoding: .utf8)
        var hooks = try JSONValue.parse(text.replacingOccurrences(of: "${BACKEND}", with: base))
        if let maxAttempts, case .object(var object) = hooks {
            object["maxAttempts"] = .int(Int64(maxAttempts))
            hooks = .object(object)
        }
        return hooks
    }

    func request(_ method: String, _ path: String, body: JSONValue? = nil) throws -> JSONValue {
        var arguments = ["-s", "-X", method, url + path]
        if let body { arguments += ["-H", "Content-Type: application/json", "--data-binary", body.serialized()] }
        let result = try run(try #require(ExternalTool.curl.path), arguments)
        return try JSONValue.parse(result.out)
    }

    func tokens(of user: String) throws -> [String] {
        try request("GET", "/users/\(user)/tokens")["tokens"]?.arrayValue?.compactMap { $0["token"]?.stringValue } ?? []
    }
}

@Suite("The app's backend: hooks, accounts and the cross-account check (device processes, a real HTTP backend)")
struct AppBackendTests {
    static let bundle = EmulatorProcess.bundleID

    func setUp(_ emulator: EmulatorProcess, _ hooks: JSONValue) throws {
        let reply = try emulator.admin("PUT", "/api/v1/apps/\(Self.bundle)/backend", body: hooks)
        #expect(reply.status == 200, "\(reply.raw)")
    }

    func calls(_ emulator: EmulatorProcess, _ device: String, hook: String? = nil) throws -> [JSONValue] {
        let query = hook.map { "?hook=\($0)" } ?? ""
        return try emulator.admin("GET", "/api/v1/devices/\(device)/backend-calls\(query)").json["calls"]?.arrayValue ?? []
    }

    /// Whether the calls of `device` reached a final state, the newest `count` of them done.
    func settled(_ emulator: EmulatorProcess, _ device: String, count: Int) throws -> Bool {
        let all = try calls(emulator, device)
        return all.count >= count && all.allSatisfy { ["done", "failed", "dropped"].contains($0["state"]?.stringValue ?? "") }
    }

    @Test(.requires(.python3, .curl)) func loginUploadsTheTokenAndBindsIt() throws {
        let backend = try ExampleBackend()
        let emulator = try EmulatorProcess(inProcess: true)
        try setUp(emulator, try backend.hooks())
        let device = try DeviceProcess(emulator, deviceID: "phone")
        let token = try device.registeredToken()
        #expect(try backend.tokens(of: "alice").isEmpty)
        device.command("login alice")
        #expect(device.next("loggedIn")?["userId"] == "alice")
        #expect(try eventually { try backend.tokens(of: "alice") == [token] })
        // The calls, in order, with what was sent and what came back.
        #expect(try eventually { try settled(emulator, "phone", count: 2) })
        let made = try calls(emulator, "phone")
        #expect(made.map { $0["hook"]?.stringValue ?? "" } == ["register", "bind"])
        #expect(made[0]["url"]?.stringValue == backend.url + "/devices/register")
        #expect(made[0]["method"] == "POST")
        #expect(made[0]["body"]?["token"]?.stringValue == token)
        #expect(made[0]["body"]?["userId"] == "alice")
        #expect(made[1]["status"] == .int(200))
        #expect(made[1]["at"]?.stringValue?.hasSuffix("Z") == true)
        #expect(try emulator.admin("GET", "/api/v1/devices/phone").json["userId"] == "alice")
    }

    @Test(.requires(.python3, .curl)) func aReinstallUploadsTheNewToken() throws {
        let backend = try ExampleBackend()
        let emulator = try EmulatorProcess(inProcess: true)
        try setUp(emulator, try backend.hooks())
        let device = try DeviceProcess(emulator, deviceID: "phone")
        let old = try device.registeredToken()
        device.command("login alice")
        #expect(try eventually { try backend.tokens(of: "alice") == [old] })
        device.command("reinstall")
        let new = try device.registeredToken()
        #expect(new != old)
        #expect(try eventually { try backend.tokens(of: "alice") == [new] }, "the new token replaced the old one in the backend")
        #expect(try calls(emulator, "phone", hook: "register").last?["token"]?.stringValue == new)
    }

    @Test(.requires(.python3, .curl)) func deniedPermissionStillRegistersAndUploads() throws {
        let backend = try ExampleBackend()
        let emulator = try EmulatorProcess(inProcess: true)
        try setUp(emulator, try backend.hooks())
        let device = try DeviceProcess(emulator, deviceID: "phone", extra: ["--authorization", "denied"])
        let token = try device.registeredToken()
        device.command("login alice")
        #expect(try eventually { try backend.tokens(of: "alice") == [token] })
    }

    /// A logs out, B logs in on the same phone; the provider pushes to A's tokens. The correct
    /// backend has none left; the buggy one still has the phone's, and the detector says so.
    @Test(.requires(.python3, .curl), arguments: [false, true]) func switchingAccountsAndAPushForTheFirst(buggy: Bool) throws {
        let backend = try ExampleBackend(buggy: buggy)
        let emulator = try EmulatorProcess(inProcess: true)
        try setUp(emulator, try backend.hooks())
        let device = try DeviceProcess(emulator, deviceID: "phone", extra: ["--app-state", "foreground"])
        let token = try device.registeredToken()
        device.command("login alice")
        #expect(device.next("loggedIn") != nil)
        device.command("logout")
        #expect(device.next("loggedOut") != nil)
        device.command("login bob")
        #expect(device.next("loggedIn")?["userId"] == "bob")
        #expect(try eventually { try settled(emulator, "phone", count: 4) })
        #expect(try calls(emulator, "phone").map { $0["hook"]?.stringValue ?? "" } == ["register", "bind", "unbind", "bind"])
        // The provider: whatever the backend says alice's tokens are, each gets alice's push.
        let aliceTokens = try backend.tokens(of: "alice")
        #expect(aliceTokens == (buggy ? [token] : []))
        let connection = try emulator.connect()
        for target in aliceTokens {
            let result = APNsResult(try connection.send(try emulator.push(target, payload: #"{"aps":{"alert":"for alice"},"uid":"alice"}"#).request))
            #expect(result.status == 200)
        }
        if buggy {
            let shown = try #require(device.next("notification"))
            #expect(shown["payload"]?["uid"] == "alice")
            // The device acks after printing; the record is settled (and checked) on the ack.
            var checks = try emulator.admin("GET", "/api/v1/checks?strict=true")
            #expect(
                try eventually {
                    checks = try emulator.admin("GET", "/api/v1/checks?strict=true")
                    return checks.status == 409
                })
            #expect(checks.json["failures"]?.arrayValue?.first?["addressee"] == "alice")
            #expect(checks.json["failures"]?.arrayValue?.first?["userId"] == "bob")
            let record = try #require(try emulator.notifications(token: token).first)
            #expect(record["crossAccount"] == true && record["userId"] == "bob" && record["addressee"] == "alice")
            #expect(try emulator.metric("apns_emulator_cross_account_deliveries_total") == 1)
        } else {
            #expect(device.noneBeforePong("notification"))
            let checks = try emulator.admin("GET", "/api/v1/checks?strict=true")
            #expect(checks.status == 200 && checks.json["ok"] == true)
        }
    }

    /// Rotation, a launch, a tap and a restore, each through the device process: the backend
    /// sees the new token at once, a launch registers again, a tap fetches as the logged-in
    /// account, and a restored phone uploads its own token.
    @Test(.requires(.python3, .curl)) func rotationLaunchTapAndRestoreReachTheBackend() throws {
        let backend = try ExampleBackend()
        let emulator = try EmulatorProcess(inProcess: true)
        try setUp(emulator, try backend.hooks())
        let device = try DeviceProcess(emulator, deviceID: "phone", extra: ["--app-state", "foreground"])
        let first = try device.registeredToken()
        device.command("login alice")
        #expect(try eventually { try backend.tokens(of: "alice") == [first] })

        device.command("rotate")
        let rotated = try device.registeredToken()
        #expect(rotated != first)
        #expect(try eventually { try backend.tokens(of: "alice") == [rotated] }, "a changed token is uploaded at once")

        let registersBefore = try calls(emulator, "phone", hook: "register").count
        device.command("terminated")
        #expect(device.next("appUpdated") != nil)
        device.command("foreground")
        #expect(device.next("appUpdated") != nil)
        #expect(
            try eventually { try calls(emulator, "phone", hook: "register").count == registersBefore + 1 },
            "a launch registers again")

        let message = try backend.request("POST", "/messages", body: ["userId": "alice", "body": "hello"])
        let id = try #require(message["id"].map { HookTemplate.text($0) })
        let result = APNsResult(
            try emulator.connect().send(
                try emulator.push(rotated, payload: #"{"aps":{"alert":"new message"},"messageId":"\#(id)","uid":"alice"}"#).request))
        #expect(device.next("notification") != nil)
        device.command("tap \(result.apnsID!)")
        #expect(device.next("tapped") != nil)
        #expect(
            try eventually {
                (try backend.request("GET", "/state")["fetched"]?.arrayValue ?? []).contains {
                    $0["id"].map { HookTemplate.text($0) } == id && $0["byUser"] == "alice"
                }
            }, "the tap fetched the message as alice")

        // The backup goes onto a new phone: the old token dies, the new phone uploads its own.
        let newPhone = try DeviceProcess(emulator, deviceID: "new-phone", extra: ["--app-state", "foreground"])
        _ = try newPhone.registeredToken()
        newPhone.command("login alice")
        #expect(newPhone.next("loggedIn") != nil)
        newPhone.command("restore phone")
        #expect(newPhone.next("restored") != nil)
        let restoredToken = try #require(
            try emulator.admin("GET", "/api/v1/devices/new-phone").json["apps"]?.arrayValue?.first?["token"]?.stringValue)
        #expect(try eventually { try backend.tokens(of: "alice").contains(restoredToken) })
        #expect(try calls(emulator, "new-phone", hook: "register").last?["token"]?.stringValue == restoredToken)
    }

    @Test(.requires(.python3, .curl)) func backgroundPushesFetchUntilTheBudgetIsUsedUp() throws {
        let backend = try ExampleBackend()
        let emulator = try EmulatorProcess(inProcess: true)
        try setUp(emulator, try backend.hooks())
        let device = try DeviceProcess(emulator, deviceID: "phone")
        let token = try device.registeredToken()
        device.command("login alice")
        var ids: [String] = []
        for n in 1...4 {
            let created = try backend.request("POST", "/messages", body: ["userId": "alice", "body": .string("message \(n)")])
            ids.append(try #require(created["id"].map { HookTemplate.text($0) }))
        }
        let connection = try emulator.connect()
        var results: [APNsResult] = []
        for id in ids {
            var push = try emulator.push(token, payload: #"{"aps":{"content-available":1},"messageId":"\#(id)","uid":"alice"}"#)
            push.pushType = "background"
            push.priority = "5"
            results.append(APNsResult(try connection.send(push.request)))
        }
        #expect(results.allSatisfy { $0.status == 200 })
        for _ in 1...3 { #expect(device.next("notification") != nil) }
        let fetched: () throws -> [String] = {
            (try backend.request("GET", "/state")["fetched"]?.arrayValue ?? []).compactMap { $0["id"].map { HookTemplate.text($0) } }
        }
        #expect(try eventually { try fetched().count == 3 })
        #expect(try fetched() == Array(ids.prefix(3)), "each delivered background push fetched what it points to")
        let fourth = try emulator.admin("GET", "/api/v1/notifications/\(results[3].apnsID!)").json
        #expect(fourth["outcome"] == "deferred")
        #expect(device.noneBeforePong("notification"))
        #expect(try calls(emulator, "phone", hook: "fetch").count == 3, "a throttled push never fetches")
    }

    @Test(.requires(.python3, .curl)) func callsWaitForABackendThatIsDownAndArriveInOrder() throws {
        // The backend starts on this port later: below the ephemeral range, so that no other
        // suite's listener takes it meanwhile.
        let port = try freePortOutsideEphemeralRange()
        let emulator = try EmulatorProcess(inProcess: true)
        try setUp(emulator, try ExampleBackend.hooks(base: "http://127.0.0.1:\(port)", maxAttempts: 20))
        let device = try DeviceProcess(emulator, deviceID: "phone")
        let token = try device.registeredToken()
        device.command("login alice")
        device.command("logout")
        device.command("login bob")
        #expect(
            try eventually {
                try calls(emulator, "phone").first.map { ($0["attempts"]?.intValue ?? 0) >= 2 && $0["state"] == "retrying" } ?? false
            }, "the first call is retried while the backend is down")
        let backend = try ExampleBackend(port: port)
        #expect(try eventually(30) { try settled(emulator, "phone", count: 4) })
        #expect(
            try calls(emulator, "phone").map { "\($0["hook"]?.stringValue ?? "") \($0["state"]?.stringValue ?? "")" }
                == ["register done", "bind done", "unbind done", "bind done"])
        #expect(try backend.tokens(of: "bob") == [token])
        #expect(try backend.tokens(of: "alice").isEmpty, "unbind arrived before bob's bind")
    }

    @Test func accountsChangedThroughTheAdminAPIReachTheDeviceAndSurviveARestart() throws {
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("apns-accounts-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: state) }
        do {
            let emulator = try EmulatorProcess(["--state-dir", state], inProcess: true)
            let device = try DeviceProcess(emulator, deviceID: "phone")
            _ = try device.registeredToken()
            let login = try emulator.admin("POST", "/api/v1/devices/phone/login", body: ["userId": "carol"])
            #expect(login.status == 200 && login.json["previousUserId"] == .null)
            #expect(device.next("loggedIn")?["userId"] == "carol")
            #expect(try emulator.admin("POST", "/api/v1/devices/phone/login", body: ["userId": ""]).status == 400)
            #expect(try emulator.admin("POST", "/api/v1/devices/nope/login", body: ["userId": "x"]).status == 404)
        }
        let emulator = try EmulatorProcess(["--state-dir", state], inProcess: true)
        #expect(try emulator.admin("GET", "/api/v1/devices/phone").json["userId"] == "carol")
        let logout = try emulator.admin("POST", "/api/v1/devices/phone/logout")
        #expect(logout.json["previousUserId"] == "carol")
    }

    @Test func aBackendFromTheConfigFileAndBadBackendsRefused() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apns-backend-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // `--app` flags would replace the file's apps, so this emulator gets its apps from the file only.
        let config: JSONValue = [
            "app": [
                .string("\(EmulatorProcess.teamID):\(Self.bundle)"),
                [
                    "teamId": .string(EmulatorProcess.teamID), "bundleId": "com.example.other",
                    "backend": ["bind": ["url": "http://127.0.0.1:9/bind"], "addresseePointer": "/uid"],
                ],
            ]
        ]
        let path = directory.appendingPathComponent("config.json").path
        try Data(config.serialized().utf8).write(to: URL(fileURLWithPath: path))
        let emulator = try EmulatorProcess(["--config", path], withKey: false)
        let backend = try emulator.admin("GET", "/api/v1/apps/com.example.other/backend")
        #expect(backend.status == 200)
        #expect(backend.json["bind"]?["url"] == "http://127.0.0.1:9/bind")
        #expect(backend.json["addresseePointer"] == "/uid")
        #expect(try emulator.admin("GET", "/api/v1/apps/\(Self.bundle)/backend").status == 404)
        let bad = try emulator.admin("PUT", "/api/v1/apps/\(Self.bundle)/backend", body: ["register": ["url": "http://h/{{nope}}"]])
        #expect(bad.status == 400)
        #expect(bad.json["error"]?.stringValue?.contains("{{nope}}") == true)
        // A reset keeps what the configuration said and drops what was set at run time.
        try setUp(emulator, ["addresseePointer": "/uid"])
        #expect(try emulator.admin("POST", "/api/v1/reset").status == 200)
        #expect(try emulator.admin("GET", "/api/v1/apps/\(Self.bundle)/backend").status == 404)
        #expect(try emulator.admin("GET", "/api/v1/apps/com.example.other/backend").status == 200)
    }

    /// Devices of the config file and the demo device are installed and launched like one made
    /// through the API: with nobody logged in their token waits, and the first login uploads it
    /// (register, then bind), after a reset too.
    @Test func configuredAndDemoDevicesUploadTheirTokenAtTheFirstLogin() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apns-configured-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let backend = try TestBackend()
        defer { backend.stop() }
        let hooks: JSONValue = [
            "register": ["url": .string(backend.url("/register/{{deviceId}}"))], "bind": ["url": .string(backend.url("/bind/{{deviceId}}"))],
        ]
        let config: JSONValue = [
            "app": [["teamId": .string(EmulatorProcess.teamID), "bundleId": .string(Self.bundle), "backend": hooks]],
            "devices": [["deviceId": "pinned", "apps": [["bundleId": .string(Self.bundle), "environment": "sandbox"]]]],
        ]
        let path = directory.appendingPathComponent("config.json").path
        try Data(config.serialized().utf8).write(to: URL(fileURLWithPath: path))
        let emulator = try EmulatorProcess(["--config", path, "--demo", "on"], withKey: false)
        for round in ["after the start", "after a reset"] {
            for device in ["pinned", "demo-iphone"] {
                let app = try emulator.admin("GET", "/api/v1/devices/\(device)").json["apps"]?.arrayValue?.first {
                    $0["bundleId"]?.stringValue == Self.bundle
                }
                #expect(app?["tokenUploadPending"] == true, "\(device) \(round)")
                #expect(try emulator.admin("POST", "/api/v1/devices/\(device)/login", body: ["userId": "alice"]).status == 200)
                try eventually("the calls of \(device) \(round)") { try settled(emulator, device, count: 2) }
                #expect(try calls(emulator, device).map { $0["hook"]?.stringValue ?? "" } == ["register", "bind"], "\(device) \(round)")
            }
            #expect(try emulator.admin("POST", "/api/v1/reset").status == 200)
        }
        #expect(backend.targets.filter { $0.hasPrefix("/register/") }.count == 4)
    }

    /// A hook no call could ever use is refused when it is set, naming the hook and the field,
    /// through the admin API and in the config file alike.
    @Test func hooksThatCanNeverWorkAreRefusedWhenSet() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let refused: [(JSONValue, String)] = [
            (
                ["register": ["url": "http://127.0.0.1:9/x", "headers": ["X": "a\r\nB: c"]]],
                #""register": header "X" must have a valid name and a single-line string value (no control characters)"#
            ),
            (
                ["register": ["url": "http://127.0.0.1:99999/x"]],
                #""register": "url" 'http://127.0.0.1:99999/x' is not a usable URL: port '99999' is not a number from 1 to 65535 (expected http://host[:port]/path)"#
            ),
            (
                ["bind": ["url": "http://[::1/x"]],
                #""bind": "url" 'http://[::1/x' is not a usable URL: an IPv6 address without its closing ] (expected http://host[:port]/path)"#
            ),
            (
                ["fetch": ["url": "http://:80/{{token}}"]],
                #""fetch": "url" 'http://:80/{{token}}' is not a usable URL: no host (expected http://host[:port]/path)"#
            ),
        ]
        for (hooks, message) in refused {
            let reply = try emulator.admin("PUT", "/api/v1/apps/\(Self.bundle)/backend", body: hooks)
            #expect(reply.status == 400, "\(hooks.serialized())")
            #expect(reply.json["error"]?.stringValue == message)
        }
        #expect(try emulator.admin("GET", "/api/v1/apps/\(Self.bundle)/backend").status == 404, "nothing was set")
        // Placeholders may stand in the host and the port.
        try setUp(emulator, ["register": ["url": "http://{{payload:/host}}:{{payload:/port}}/devices/{{token}}"]])

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apns-bad-hook-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let config: JSONValue = [
            "app": [["teamId": "ABCDE12345", "bundleId": .string(Self.bundle), "backend": ["register": ["url": "http://127.0.0.1:99999/x"]]]]
        ]
        let path = directory.appendingPathComponent("config.json").path
        try Data(config.serialized().utf8).write(to: URL(fileURLWithPath: path))
        let result = try run(EmulatorProcess.binary, ["serve", "--config", path, "--admin-listen", "127.0.0.1:0"])
        #expect(result.status == 2)
        #expect(
            result.err.contains(
                #"app \#(Self.bundle): "backend": "register": "url" 'http://127.0.0.1:99999/x' is not a usable URL: port '99999'"#),
            "\(result.err)")
    }

    /// A string body under a content type other than JSON goes out as the string itself, its
    /// placeholders filled in; the call's record shows what went out, byte for byte.
    @Test func aStringBodyOfAnotherTypeIsSentAsItIs() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let backend = try TestBackend()
        defer { backend.stop() }
        try setUp(
            emulator,
            [
                "register": ["url": .string(backend.url("/text")), "headers": ["Content-Type": "text/plain"], "body": "hello {{userId}}"],
                "bind": ["url": .string(backend.url("/json")), "body": "hello {{userId}}"],
                "unbind": ["url": .string(backend.url("/csv")), "headers": ["content-type": "text/csv"], "body": ["{{userId}}"]],
            ])
        let (device, _) = try emulator.createDevice()
        #expect(try emulator.admin("POST", "/api/v1/devices/\(device)/login", body: ["userId": "zed"]).status == 200)
        #expect(try emulator.admin("POST", "/api/v1/devices/\(device)/logout").status == 200)
        try eventually("the three calls") { try settled(emulator, device, count: 3) }
        let text = try #require(backend.requests.first { $0.target == "/text" })
        #expect(text.text == "hello zed")
        #expect(text.headers["content-type"] == "text/plain")
        let json = try #require(backend.requests.first { $0.target == "/json" })
        #expect(json.text == #""hello zed""#)
        #expect(json.headers["content-type"] == "application/json")
        let recorded = try calls(emulator, device)
        #expect(recorded.first { $0["hook"] == "register" }?["body"] == "hello zed")
        // A JSON body is shown as the JSON value it is: here the string.
        #expect(recorded.first { $0["hook"] == "bind" }?["body"] == "hello zed")
        // A body that is not a string goes out as its JSON text, and under another type than
        // JSON the record shows that text, not the JSON value.
        #expect(backend.requests.first { $0.target == "/csv" }?.text == #"["zed"]"#)
        #expect(recorded.first { $0["hook"] == "unbind" }?["body"] == #"["zed"]"#)
    }

    /// An answer over 1 MiB is cut: the call keeps its status and the first 4 KiB, and is
    /// judged by the status (done on a 200, retried on a 503).
    @Test func anAnswerOverOneMebibyteKeepsItsStatus() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let big = String(repeating: "x", count: 2 << 20)
        let backend = try TestBackend { request, _ in .status(request.target == "/busy" ? 503 : 200, body: big) }
        defer { backend.stop() }
        try setUp(
            emulator, ["register": ["url": .string(backend.url("/ok"))], "bind": ["url": .string(backend.url("/busy"))], "maxAttempts": 2])
        let (device, _) = try emulator.createDevice()
        #expect(try emulator.admin("POST", "/api/v1/devices/\(device)/login", body: ["userId": "zed"]).status == 200)
        try eventually("both calls") { try settled(emulator, device, count: 2) }
        let recorded = try calls(emulator, device)
        let register = try #require(recorded.first { $0["hook"] == "register" })
        #expect(register["state"] == "done")
        #expect(register["status"] == 200)
        #expect(register["attempts"] == 1)
        #expect(register["response"]?.stringValue == String(repeating: "x", count: 4096))
        #expect(register["error"] == .null)
        let bind = try #require(recorded.first { $0["hook"] == "bind" })
        #expect(bind["state"] == "failed")
        #expect(bind["status"] == 503)
        #expect(bind["attempts"] == 2)
    }

    /// The call lists take their documented filters (`hook`, `bundleId`) and paging; any other
    /// query parameter is a 400 naming the allowed ones, not a filter silently ignored.
    @Test func backendCallListsRefuseUnknownQueryParameters() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let backend = try TestBackend()
        defer { backend.stop() }
        try setUp(emulator, ["register": ["url": .string(backend.url("/r"))], "bind": ["url": .string(backend.url("/b"))]])
        let (device, _) = try emulator.createDevice()
        #expect(try emulator.admin("POST", "/api/v1/devices/\(device)/login", body: ["userId": "zed"]).status == 200)
        try eventually("both calls") { try settled(emulator, device, count: 2) }

        func hooks(_ path: String) throws -> [String] {
            let reply = try emulator.admin("GET", path)
            #expect(reply.status == 200, "\(path): \(reply.raw)")
            return reply.json["calls"]?.arrayValue?.map { $0["hook"]?.stringValue ?? "" } ?? []
        }
        for list in ["/api/v1/backend-calls", "/api/v1/devices/\(device)/backend-calls"] {
            #expect(try hooks(list) == ["register", "bind"])
            #expect(try hooks(list + "?hook=bind") == ["bind"])
            #expect(try hooks(list + "?bundleId=\(Self.bundle)&limit=1") == ["register"])
            #expect(try hooks(list + "?bundleId=com.example.other").isEmpty)
            for query in ["deviceId=nonexistent", "state=failed", "foo=bar", "Hook=bind"] {
                let reply = try emulator.admin("GET", list + "?" + query)
                #expect(reply.status == 400, "\(list)?\(query)")
                let message = reply.json["error"]?.stringValue ?? ""
                let name = String(query.prefix { $0 != "=" })
                #expect(message.hasPrefix("unknown query parameter \"\(name)\""), "\(message)")
                #expect(message.contains("allowed: hook, bundleId, limit, cursor"), "\(message)")
            }
        }
        let hinted = try emulator.admin("GET", "/api/v1/backend-calls?deviceId=\(device)").json["error"]?.stringValue ?? ""
        #expect(hinted.hasSuffix("(one device's calls: GET /api/v1/devices/{deviceId}/backend-calls)"), "\(hinted)")
        let near = try emulator.admin("GET", "/api/v1/backend-calls?Hook=bind").json["error"]?.stringValue ?? ""
        #expect(near.contains("(did you mean \"hook\"?)"), "\(near)")
    }

    @Test func theClockMovesAheadForBudgetsButNotForProviderTokens() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let (_, token) = try emulator.createDevice()
        let moved = try emulator.admin("POST", "/api/v1/clock", body: ["advanceSeconds": 7200])
        #expect(moved.status == 200)
        #expect(moved.json["offsetMs"] == .int(7_200_000))
        // A provider token signed now is still fresh: providers sign with the real time.
        let result = APNsResult(try emulator.connect().send(try emulator.push(token).request))
        #expect(result.status == 200)
        #expect(try emulator.admin("POST", "/api/v1/clock", body: ["advanceSeconds": -1]).status == 400)
        #expect(try emulator.admin("POST", "/api/v1/clock", body: [:]).status == 400)
        #expect(try emulator.admin("POST", "/api/v1/reset").status == 200)
        #expect(try emulator.admin("GET", "/api/v1/clock").json["offsetMs"] == .int(0))
    }
}
