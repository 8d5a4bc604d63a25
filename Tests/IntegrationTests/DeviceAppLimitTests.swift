import APNsCore
import Foundation
import Glibc
import Networking
import Testing
import TestSupport

/// `DeviceRegistry.maxAppsPerDevice` from outside: raw device sockets, the admin API and the
/// config file of the emulator binary.
@Suite("At most 1000 apps per device")
struct DeviceAppLimitTests {
    static let limit = 1000

    /// A hello listing `count` apps com.example.app1 … com.example.appN.
    static func hello(_ fd: Int32, deviceID: String, apps count: Int) {
        let apps = (1...count).map { #"{"bundleId":"com.example.app\#($0)","environment":"sandbox"}"# }.joined(separator: ",")
        send(fd, #"{"type":"hello","version":1,"deviceId":"\#(deviceID)","apps":[\#(apps)]}"#)
    }

    static func send(_ fd: Int32, _ line: String) {
        let bytes = Array(line.utf8) + [0x0A]
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { return }
            offset += sent
        }
    }

    static func connect(_ emulator: EmulatorProcess) throws -> Int32 {
        let fd = try Socket.connect(to: try emulator.address("device"))
        Socket.setTimeouts(fd, milliseconds: 10_000)
        return fd
    }

    @Test(arguments: [limit + 1, 16_000])
    func aHelloListingMoreAppsIsRefusedAndClosed(apps: Int) throws {
        let emulator = try EmulatorProcess()
        let fd = try Self.connect(emulator)
        defer { close(fd) }
        Self.hello(fd, deviceID: "crowded", apps: apps)
        let (lines, closed) = SlowDeviceTests.readLines(fd) { _ in false }
        #expect(closed, "a fatal error closes the connection")
        #expect(lines.count == 1 && lines.first?["type"] == "error", "\(lines.prefix(3))")
        #expect(lines.first?["code"] == "too_many_apps" && lines.first?["fatal"] == true)
        #expect(lines.first?["message"] == .string("the hello lists \(apps) apps; a device has at most 1000 installed"))
        #expect(try emulator.admin("GET", "/api/v1/devices/crowded").status == 404, "nothing of it was kept")
    }

    /// A hello's `acked` entries that can be no delivery (id 0, negative, fractional, past any
    /// id; an apns-id longer than any) match nothing: ignored, the hello taken. A malformed
    /// list is refused.
    @Test func ackedEntriesThatMatchNothingAreIgnored() throws {
        let emulator = try EmulatorProcess()
        let fd = try Self.connect(emulator)
        defer { close(fd) }
        let odd =
            #"[{"id":0,"apnsId":"a"},{"id":-1,"apnsId":"b"},{"id":1.5,"apnsId":"c"},{"id":1e30,"apnsId":"d"},{"id":7,"apnsId":"\#(String(repeating: "e", count: 65))"}]"#
        Self.send(
            fd, #"{"type":"hello","version":1,"deviceId":"odd","apps":[{"bundleId":"com.example.app","environment":"sandbox"}],"acked":\#(odd)}"#)
        let (lines, _) = SlowDeviceTests.readLines(fd) { $0.contains { $0["type"] == "welcome" || $0["type"] == "error" } }
        #expect(lines.contains { $0["type"] == "welcome" }, "\(lines)")
        let other = try Self.connect(emulator)
        defer { close(other) }
        Self.send(
            other,
            #"{"type":"hello","version":1,"deviceId":"bad","apps":[{"bundleId":"com.example.app","environment":"sandbox"}],"acked":[{"id":"x"}]}"#)
        let (refused, _) = SlowDeviceTests.readLines(other) { $0.count == 1 }
        #expect(refused.first?["code"] == "bad_request", "\(refused)")
    }

    /// A hello naming one bundle twice (sandbox and production) would register a token the
    /// second entry ends at once: refused, nothing kept, and a corrected hello is taken.
    @Test func aHelloListingAnAppTwiceIsRefused() throws {
        let emulator = try EmulatorProcess()
        let fd = try Self.connect(emulator)
        defer { close(fd) }
        let twice = #"[{"bundleId":"com.example.app","environment":"sandbox"},{"bundleId":"com.example.app","environment":"production"}]"#
        Self.send(fd, #"{"type":"hello","version":1,"deviceId":"twice","apps":\#(twice)}"#)
        let (lines, _) = SlowDeviceTests.readLines(fd) { $0.count == 1 }
        #expect(lines.first?["code"] == "bad_request" && lines.first?["fatal"] == false, "\(lines)")
        #expect(lines.first?["message"]?.stringValue?.contains("lists com.example.app twice") == true)
        #expect(try emulator.admin("GET", "/api/v1/devices/twice").status == 404, "nothing of it was kept")
        Self.send(fd, #"{"type":"hello","version":1,"deviceId":"twice","apps":[{"bundleId":"com.example.app","environment":"production"}]}"#)
        let (again, _) = SlowDeviceTests.readLines(fd) { $0.contains { $0["type"] == "registered" } }
        #expect(again.first?["type"] == "welcome", "\(again)")
        #expect(again.filter { $0["type"] == "registered" }.map { $0["environment"] } == ["production"])
    }

    /// A hello's `activities` (what the device heard of its Live Activities) is checked item by
    /// item: each bad one is a non-fatal `bad_request` naming the field, and a corrected hello
    /// is taken.
    @Test func aHellosActivitiesAreCheckedFieldByField() throws {
        let emulator = try EmulatorProcess()
        let fd = try Self.connect(emulator)
        defer { close(fd) }
        let cases: [(String, String)] = [
            (#""activities":{"a":1}"#, "must be a list of at most 1000"),
            (#""activities":[5]"#, "is an object with an \"activityId\" string"),
            (#""activities":[{"activityId":"A","updates":1e30,"state":"active"}]"#, "\"updates\" of activity A must be a whole number"),
            (#""activities":[{"activityId":"A","updates":-1,"state":"active"}]"#, "\"updates\" of activity A must be a whole number"),
            (#""activities":[{"activityId":"A","updates":1,"state":"weird"}]"#, "\"state\" of activity A must be one of active, stale"),
            (#""activities":[{"activityId":"A","updates":1,"state":"ended","pushToken":5}]"#, "\"pushToken\" of activity A must be a string or null"),
        ]
        for (field, said) in cases {
            Self.send(fd, #"{"type":"hello","version":1,"deviceId":"heard",\#(field)}"#)
            let (lines, closed) = SlowDeviceTests.readLines(fd) { $0.count == 1 }
            #expect(!closed && lines.first?["code"] == "bad_request" && lines.first?["fatal"] == false, "\(field): \(lines)")
            #expect(lines.first?["message"]?.stringValue?.contains(said) == true, "\(field): \(lines)")
        }
        let heard = #"[{"activityId":"A","updates":0,"state":"active","pushToken":null}]"#
        Self.send(fd, #"{"type":"hello","version":1,"deviceId":"heard","activities":\#(heard)}"#)
        let (again, _) = SlowDeviceTests.readLines(fd) { $0.count == 1 }
        #expect(again.first?["type"] == "welcome", "\(again)")
    }

    /// A fatal error (a line over 1 MiB) is written, then the write side ends (FIN): the device
    /// reads the error before EOF, and is taken for disconnected at once, not after the drain.
    @Test func aFatalErrorReachesTheDeviceAndDetachesItAtOnce() throws {
        let emulator = try EmulatorProcess()
        let fd = try Self.connect(emulator)
        defer { close(fd) }
        Self.send(fd, #"{"type":"hello","version":1,"deviceId":"loud","apps":[{"bundleId":"com.example.app","environment":"sandbox"}]}"#)
        let (hello, _) = SlowDeviceTests.readLines(fd) { $0.contains { $0["type"] == "registered" } }
        #expect(hello.contains { $0["type"] == "registered" })
        let long = [UInt8](repeating: 0x61, count: (1 << 20) + 100)
        var offset = 0
        while offset < long.count {
            let sent = long[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { break }
            offset += sent
        }
        // The socket stays open on this side: the emulator must not wait for it to go.
        let (lines, closed) = SlowDeviceTests.readLines(fd) { _ in false }
        #expect(lines.last?["code"] == "line_too_long" && lines.last?["fatal"] == true, "\(lines.suffix(2))")
        #expect(closed, "EOF after the error frame")
        #expect(try eventually(1) { try emulator.admin("GET", "/api/v1/devices/loud").json["connected"] == false })
    }

    /// `--max-devices` and `--max-tokens` from outside: the admin API answers 507 naming the
    /// flag, a device's hello gets the fatal error `registry_full`, and nothing is created.
    @Test func devicesAndTokensBeyondTheirLimitsAreRefused() throws {
        let emulator = try EmulatorProcess(["--demo", "off", "--max-devices", "2", "--max-tokens", "3"])
        for id in ["a", "b"] {
            #expect(
                try emulator.admin(
                    "POST", "/api/v1/devices", body: ["deviceId": .string(id), "bundleId": "com.example.app", "environment": "sandbox"]
                ).status == 201)
        }
        let third = try emulator.admin("POST", "/api/v1/devices", body: ["deviceId": "c", "bundleId": "com.example.app", "environment": "sandbox"])
        #expect(third.status == 507 && third.json["error"]?.stringValue?.contains("--max-devices") == true, "\(third.raw)")
        #expect(try emulator.admin("GET", "/api/v1/devices/c").status == 404, "nothing of it was kept")
        // A batch over the limit says what the batch would do, not what the emulator holds.
        _ = try emulator.admin("DELETE", "/api/v1/devices/b")
        let batch = try emulator.admin("POST", "/api/v1/devices/batch", body: ["count": 2, "bundleId": "com.example.app", "environment": "sandbox"])
        #expect(batch.status == 507, "\(batch.raw)")
        #expect(
            batch.json["error"]?.stringValue?.hasPrefix("a batch of 2 devices would take the emulator from 1 to 3 devices, over the 2") == true
                && batch.json["error"]?.stringValue?.contains("ask for at most 1") == true, "\(batch.raw)")
        #expect(try emulator.admin("GET", "/api/v1/devices").json["devices"]?.arrayValue?.count == 1, "none of the batch was kept")
        // (b's token still counts against --max-tokens: it answers 410.)
        #expect(try emulator.admin("POST", "/api/v1/devices/a/apps", body: ["bundleId": "com.example.two", "environment": "sandbox"]).status == 201)
        let fourth = try emulator.admin("POST", "/api/v1/devices/a/apps", body: ["bundleId": "com.example.three", "environment": "sandbox"])
        #expect(fourth.status == 507 && fourth.json["error"]?.stringValue?.contains("--max-tokens") == true, "\(fourth.raw)")
        #expect(try emulator.admin("GET", "/api/v1/devices/a").json["apps"]?.arrayValue?.count == 2)

        let fd = try Self.connect(emulator)
        defer { close(fd) }
        Self.hello(fd, deviceID: "socket", apps: 1)
        let (lines, closed) = SlowDeviceTests.readLines(fd) { _ in false }
        #expect(closed && lines.first?["code"] == "registry_full" && lines.first?["fatal"] == true, "\(lines)")
        #expect(try emulator.admin("GET", "/api/v1/devices/socket").status == 404)
    }

    /// A restore or an install of several token kinds that `--max-tokens` cannot take is
    /// refused whole: a restore took the apps off both devices before it failed, and an
    /// install kept the kinds it had room for.
    @Test func restoresAndInstallsOverTheTokenLimitChangeNothing() throws {
        let emulator = try EmulatorProcess(["--demo", "off", "--max-tokens", "3"])
        for id in ["src", "dst"] {
            #expect(
                try emulator.admin(
                    "POST", "/api/v1/devices", body: ["deviceId": .string(id), "bundleId": "com.example.app", "environment": "sandbox"]
                ).status == 201)
        }
        func apps(_ id: String) throws -> [String] {
            try emulator.admin("GET", "/api/v1/devices/\(id)").json["apps"]?.arrayValue?.compactMap { $0["bundleId"]?.stringValue } ?? []
        }
        let fd = try Self.connect(emulator)
        defer { close(fd) }
        Self.send(fd, #"{"type":"hello","version":1,"deviceId":"socket","apps":[]}"#)
        Self.send(fd, #"{"type":"install","bundleId":"com.example.two","environment":"sandbox","kinds":["app","voip"]}"#)
        let (lines, _) = SlowDeviceTests.readLines(fd) { $0.contains { $0["type"] == "error" } }
        #expect(lines.last?["code"] == "registry_full", "\(lines)")
        #expect(try apps("socket").isEmpty, "no kind of it was kept")
        #expect(
            try emulator.admin("POST", "/api/v1/devices", body: ["deviceId": "third", "bundleId": "com.example.app", "environment": "sandbox"]).status
                == 201)
        let restore = try emulator.admin("POST", "/api/v1/devices/dst/restore", body: ["fromDeviceId": "src"])
        #expect(restore.status == 507, "\(restore.raw)")
        #expect(try apps("src") == ["com.example.app"] && apps("dst") == ["com.example.app"], "both devices as they were")
        let tokens = try emulator.admin("GET", "/api/v1/tokens").json["tokens"]?.arrayValue ?? []
        #expect(tokens.allSatisfy { $0["state"]?.stringValue == "active" }, "\(tokens)")
    }

    @Test func aDeviceWithAsManyAppsAsAllowedTakesNoMore() throws {
        let emulator = try EmulatorProcess()
        let fd = try Self.connect(emulator)
        defer { close(fd) }
        Self.hello(fd, deviceID: "full", apps: Self.limit)
        let connected = SlowDeviceTests.readLines(fd) { $0.filter { $0["type"] == "registered" }.count == Self.limit }
        #expect(connected.lines.filter { $0["type"] == "registered" }.count == Self.limit)

        // An install over the bound is refused; the connection stays.
        Self.send(fd, #"{"type":"install","bundleId":"com.example.extra","environment":"sandbox"}"#)
        Self.send(fd, #"{"type":"ping"}"#)
        let refused = SlowDeviceTests.readLines(fd) { $0.contains { $0["type"] == "pong" } }
        let error = try #require(refused.lines.first { $0["type"] == "error" })
        #expect(error["code"] == "too_many_apps" && error["fatal"] == false)
        #expect(error["message"] == "device 'full' would have more than 1000 apps, the most a device may have installed (uninstall one first)")
        // Re-registering an app it has is not a new one.
        Self.send(fd, #"{"type":"install","bundleId":"com.example.app7","environment":"sandbox"}"#)
        #expect(SlowDeviceTests.readLines(fd) { $0.contains { $0["type"] == "registered" } }.lines.last?["bundleId"] == "com.example.app7")

        let admin = try emulator.admin("POST", "/api/v1/devices/full/apps", body: ["bundleId": "com.example.extra", "environment": "sandbox"])
        #expect(admin.status == 409)
        #expect(admin.json["error"]?.stringValue?.contains("more than 1000 apps") == true, "\(admin.json)")

        // A second connection whose hello would add one more is refused before it takes the
        // device over: the first connection keeps it.
        let second = try Self.connect(emulator)
        defer { close(second) }
        Self.send(second, #"{"type":"hello","deviceId":"full","apps":[{"bundleId":"com.example.new","environment":"sandbox"}]}"#)
        let (lines, closed) = SlowDeviceTests.readLines(second) { _ in false }
        #expect(closed && lines.first?["code"] == "too_many_apps" && lines.first?["fatal"] == true, "\(lines)")
        Self.send(fd, #"{"type":"ping"}"#)
        let still = SlowDeviceTests.readLines(fd) { $0.contains { $0["type"] == "pong" } }
        #expect(!still.lines.contains { $0["type"] == "replaced" } && still.lines.contains { $0["type"] == "pong" })
        let apps = try emulator.admin("GET", "/api/v1/devices/full").json["apps"]?.arrayValue?.count
        #expect(apps == Self.limit)
    }

    /// More config-file devices than `--max-devices`: the start stops saying so, the demo
    /// device counted (not "delete some", which nothing running could do).
    @Test func moreConfigFileDevicesThanTheLimitStopTheStart() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cfg-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let devices = (1...3).map { #"{"deviceId":"cfg\#($0)","apps":[{"bundleId":"com.example.app","environment":"sandbox"}]}"# }
        try #"{"devices":[\#(devices.joined(separator: ","))]}"#.write(toFile: directory + "/config.json", atomically: true, encoding: .utf8)
        let result = try run(
            EmulatorProcess.binary,
            [
                "serve", "--channel-sandbox-listen", "off", "--channel-production-listen", "off", "--quiet", "--config", directory + "/config.json",
                "--demo", "on", "--max-devices", "3", "--certs-dir", directory + "/certs",
                "--sandbox-listen", "127.0.0.1:0", "--production-listen", "off", "--admin-listen", "127.0.0.1:0",
                "--device-listen", "127.0.0.1:0",
            ])
        #expect(result.status != 0)
        #expect(
            result.err.contains(
                "config device cfg3: the configuration asks for 4 devices, the demo device included (--demo off leaves it out), more than --max-devices 3 allows"
            ), "\(result.err)")
    }

    @Test func aConfigFileDeviceWithMoreAppsStopsTheStart() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cfg-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let apps = (1...(Self.limit + 1)).map { #"{"bundleId":"com.example.app\#($0)","environment":"sandbox"}"# }
        try #"{"devices":[{"deviceId":"crowded","apps":[\#(apps.joined(separator: ","))]}]}"#
            .write(toFile: directory + "/config.json", atomically: true, encoding: .utf8)
        let result = try run(
            EmulatorProcess.binary,
            [
                "serve", "--channel-sandbox-listen", "off", "--channel-production-listen", "off", "--quiet", "--config", directory + "/config.json",
                "--demo", "off", "--certs-dir", directory + "/certs",
                "--sandbox-listen", "127.0.0.1:0", "--production-listen", "off", "--admin-listen", "127.0.0.1:0",
                "--device-listen", "127.0.0.1:0",
            ])
        #expect(result.status != 0)
        #expect(result.err.contains("config device crowded: device 'crowded' would have more than 1000 apps"), "\(result.err)")
    }
}
