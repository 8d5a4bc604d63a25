import APNsCore
import DeviceClient
import Foundation
import Glibc
import MonotonicClock
import Networking
import Testing
import TestSupport

/// `apns-emulator device` as a child process: JSON events on stdout, commands on stdin.
final class DeviceProcess {
    let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private let errors = Pipe()
    private var buffer: [UInt8] = []
    private var stdinClosed = false
    /// Every event read so far, for failure messages.
    private(set) var events: [JSONObject] = []

    init(_ arguments: [String], environment extra: [String: String] = [:]) throws {
        // Writing to the stdin of a child that already exited must not kill the test process.
        signal(SIGPIPE, SIG_IGN)
        process.executableURL = URL(fileURLWithPath: EmulatorBinary.path)
        process.arguments = ["device"] + arguments
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("APNS_EMULATOR_") }
        environment.merge(extra) { $1 }
        process.environment = environment
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
    }

    deinit {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
    }

    /// The next stdout line, parsed.
    func nextEvent(timeoutMilliseconds: Int = 5000) throws -> JSONObject {
        let fd = output.fileHandleForReading.fileDescriptor
        let deadline = Monotonic.nowMilliseconds() + Int64(timeoutMilliseconds)
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(buffer[..<newline])
                buffer.removeFirst(newline + 1)
                guard let object = try? JSONValue.parse(line).objectValue else {
                    throw PeerError("stdout line is not a JSON object: \(String(decoding: line, as: UTF8.self))")
                }
                events.append(object)
                return object
            }
            let remaining = deadline - Monotonic.nowMilliseconds()
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard remaining > 0, poll(&pfd, 1, Int32(remaining)) > 0 else {
                throw PeerError("no event on stdout within \(timeoutMilliseconds) ms (after \(events.map { JSONValue.object($0).serialized() }))")
            }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = read(fd, &chunk, chunk.count)
            guard n > 0 else { throw PeerError("stdout closed; stderr: \(stderrText())") }
            buffer.append(contentsOf: chunk[0..<n])
        }
    }

    /// The next event, which must be `name`.
    @discardableResult
    func expect(_ name: String, timeoutMilliseconds: Int = 5000) throws -> JSONObject {
        let event = try nextEvent(timeoutMilliseconds: timeoutMilliseconds)
        guard event["event"]?.stringValue == name else {
            throw PeerError("expected a \(name) event, got \(JSONValue.object(event).serialized())")
        }
        return event
    }

    /// Writes one command line to stdin.
    func send(_ line: String) throws {
        try write(line + "\n")
    }

    /// Writes bytes to stdin as they are (no newline added).
    func write(_ text: String) throws {
        let bytes = Array(text.utf8)
        let fd = input.fileHandleForWriting.fileDescriptor
        let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        guard n == bytes.count else { throw PeerError("cannot write to the device's stdin") }
    }

    func closeStdin() {
        guard !stdinClosed else { return }
        stdinClosed = true
        try? input.fileHandleForWriting.close()
    }

    /// The exit status, or nil if still running after the time.
    func waitForExit(timeoutMilliseconds: Int = 5000) -> Int32? {
        guard (try? eventually(Double(timeoutMilliseconds) / 1000, { !process.isRunning })) == true else { return nil }
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// What is left on stdout (after exit).
    func stdoutText() -> String {
        let rest = buffer + Array(output.fileHandleForReading.readDataToEndOfFile())
        buffer = []
        return String(decoding: rest, as: UTF8.self)
    }

    func stderrText() -> String {
        if process.isRunning { return "(still running)" }
        return String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    }
}

/// Runs the binary to completion (for flag errors and --help).
private func runToExit(_ arguments: [String], environment: [String: String] = [:]) throws -> (status: Int32, out: String, err: String) {
    let child = try DeviceProcess(arguments, environment: environment)
    child.closeStdin()
    guard let status = child.waitForExit(timeoutMilliseconds: 10_000) else { throw PeerError("device did not exit") }
    return (status, child.stdoutText(), child.stderrText())
}

private let app = "com.example.app"

@Suite("apns-emulator device (the binary against a scripted peer)")
struct DeviceCommandTests {
    @Test("registered, notification (acked after printing), a stdin command, EOF on stdin is not a quit, replaced exits 0")
    func endToEnd() throws {
        let exited = DispatchSemaphore(value: 0)
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            let hello = try connection.handshake()
            guard hello["deviceId"] == "cli-phone", hello["lowPowerMode"] == true,
                hello["apps"] == [
                    [
                        "bundleId": "com.example.app", "environment": "production", "authorization": "denied",
                        "appState": "foreground", "backgroundMode": false, "kinds": ["app", "voip"],
                    ]
                ]
            else { throw PeerError("hello \(hello)") }
            try connection.send(FakePeer.notification(id: 1, apnsID: "N-1", payload: ["aps": ["alert": "Hi"]]))
            guard try connection.expect("ack")["id"] == 1 else { throw PeerError("ack") }
            guard
                JSONValue.object(try connection.expect("app")) == [
                    "type": "app", "bundleId": "com.example.app",
                    "appState": "background",
                ]
            else { throw PeerError("app") }
            try connection.send([
                "type": "appUpdated", "bundleId": "com.example.app", "authorization": "denied",
                "appState": "background", "backgroundMode": false,
            ])
            guard try connection.expect("tap")["apnsId"] == "N-1" else { throw PeerError("tap") }
            try connection.send([
                "type": "tapped", "apnsId": "N-1", "bundleId": "com.example.app",
                "callbacks": ["didReceive"], "launched": false,
            ])
            // After the device's stdin is closed it must keep serving the socket. The ping is the
            // last line of its stdin, without a newline: the device sends it once it has read
            // the end of stdin.
            try connection.expect("ping")
            try connection.send(["type": "pong"])
            try connection.send(
                FakePeer.notification(
                    id: 2, apnsID: "N-2", pushType: "background", priority: 5,
                    payload: ["aps": ["content-available": 1]], callbacks: [],
                    display: "none", reason: "no background mode", stored: true))
            guard try connection.expect("ack")["id"] == 2 else { throw PeerError("ack 2") }
            try connection.send(["type": "replaced"])
            connection.close()
            // Replaced means: do not reconnect. The device has exited by now, so a reconnect
            // it made would be waiting to be accepted.
            guard exited.wait(timeout: .now() + 10) == .success else { throw PeerError("the device did not exit") }
            try peer.expectNoPendingConnection()
        }
        try peer.run {
            let device = try DeviceProcess([
                "--connect", peer.address.description, "--device-id", "cli-phone", "--bundle", app,
                "--environment", "production", "--authorization", "denied", "--app-state", "foreground",
                "--no-background-mode", "--kinds", "app,voip", "--low-power",
            ])
            let first = try device.expect("registered")
            #expect(
                JSONValue.object(first) == [
                    "event": "registered", "token": .string(FakePeer.token("com.example.app/app")),
                    "bundleId": "com.example.app", "environment": "production", "kind": "app",
                    "topic": "com.example.app",
                ])
            let voip = try device.expect("registered")
            #expect(voip["kind"] == "voip")
            #expect(voip["token"] == .string(FakePeer.token("com.example.app/voip")))

            let n = try device.expect("notification")
            #expect(n["apnsId"] == "N-1")
            #expect(n["pushType"] == "alert")
            #expect(n["payload"] == ["aps": ["alert": "Hi"]])
            #expect(n["callbacks"] == ["willPresent"])
            #expect(n["display"] == "banner")
            #expect(n["reason"] == nil)
            #expect(n["id"] == 1)
            #expect(n["bundleId"] == "com.example.app")
            #expect(n["priority"] == 10)
            #expect(n["collapseId"] == .null)
            #expect(n["stored"] == false)

            try device.send("background")
            let updated = try device.expect("appUpdated")
            #expect(updated["appState"] == "background")
            #expect(updated["bundleId"] == "com.example.app")
            try device.send("tap")
            let tapped = try device.expect("tapped")
            #expect(tapped["callbacks"] == ["didReceive"])
            #expect(tapped["launched"] == false)

            try device.write("ping")
            device.closeStdin()
            try device.expect("pong")
            let dropped = try device.expect("notification")
            #expect(dropped["reason"] == "no background mode")
            #expect(dropped["display"] == "none")
            #expect(dropped["callbacks"] == [])
            #expect(dropped["stored"] == true)
            #expect(dropped["priority"] == 5)
            #expect(JSONValue.object(try device.expect("replaced")) == ["event": "replaced"])
            #expect(device.waitForExit() == 0)
            exited.signal()
        }
    }

    @Test("a delivery sent again (same id, apns-id and token) is acked again, not shown twice; a new apns-id or token under an old id is shown")
    func aDeliverySentAgainIsShownOnce() throws {
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            _ = try connection.handshake()
            // As after a reload or a re-attachment: the frame may not have left, so it goes again.
            // The last: after a reset (ids start over, a new token), a provider's fixed apns-id.
            let token = FakePeer.token("com.example.app/app")
            let afterReset = String(repeating: "5e", count: 32)
            for (id, apnsID, token) in [(Int64(7), "N-7", token), (7, "N-7", token), (8, "N-8", token), (7, "N-9", token), (7, "N-9", afterReset)] {
                try connection.send(FakePeer.notification(id: id, apnsID: apnsID, token: token, payload: ["aps": ["alert": .string(apnsID)]]))
                guard try connection.expect("ack")["id"] == .int(id) else { throw PeerError("ack \(id) \(apnsID)") }
            }
            try connection.expect("ping")
            try connection.send(["type": "pong"])
            _ = try? connection.readLine(timeoutMilliseconds: 2000)
        }
        try peer.run {
            let device = try DeviceProcess([
                "--connect", peer.address.description, "--device-id", "again-phone", "--bundle", app, "--environment", "sandbox", "--app-state",
                "foreground",
            ])
            _ = try device.expect("registered")
            var shown: [String] = []
            for _ in 0..<4 { shown.append(try device.expect("notification")["apnsId"]?.stringValue ?? "?") }
            #expect(shown == ["N-7", "N-8", "N-9", "N-9"])
            // The next event after them is the pong: no repeat of N-7 was printed.
            try device.send("ping")
            _ = try device.expect("pong")
        }
    }

    @Test("malformed commands print bad_command and change nothing; raw frames go out as typed; quit exits 0")
    func badCommandsAndRawFrames() throws {
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.handshake()
            let raw = try connection.readLine()
            guard String(decoding: raw, as: UTF8.self) == #"{"type":"ping","note":"raw"}"# else {
                throw PeerError("raw frame \(String(decoding: raw, as: UTF8.self))")
            }
            try connection.send(["type": "pong"])
            try connection.expect("ping")
            try connection.send(["type": "pong"])
            try connection.expectEOF()
        }
        try peer.run {
            let device = try DeviceProcess([
                "--connect", peer.address.description, "--device-id", "cli-2", "--bundle", app,
                "--environment", "sandbox",
            ])
            try device.expect("registered")
            let bad = [
                "dance", "state flying", "permission", "permission maybe", "background-mode maybe", "low-power",
                "tap", "ping extra", "Foreground", "restore", "{not json", "uninstall now",
            ]
            for line in bad {
                try device.send(line)
                let event = try device.expect("error")
                #expect(event["code"] == "bad_command", "\(line)")
                #expect(event["message"]?.stringValue?.isEmpty == false, "\(line)")
            }
            try device.send("")  // blank lines are ignored
            try device.send(#"  {"type":"ping","note":"raw"}  "#)
            try device.expect("pong")
            try device.send("ping")
            try device.expect("pong")
            try device.send("quit")
            #expect(device.waitForExit() == 0)
        }
    }

    @Test("erase reinstalls, reinstall uninstalls then installs, rotate, restore, low-power: each answer is an event")
    func flows() throws {
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.handshake()
            try connection.expect("erase")
            try connection.send(["type": "erased"])
            let install = try connection.expect("install")
            guard
                JSONValue.object(install) == [
                    "type": "install", "bundleId": "com.example.app", "environment": "sandbox",
                    "authorization": "provisional", "appState": "background",
                    "backgroundMode": true, "kinds": ["app"],
                ]
            else { throw PeerError("install \(install)") }
            try connection.send(FakePeer.registered(bundleID: app, token: "e1"))
            guard try connection.expect("uninstall")["bundleId"] == "com.example.app" else { throw PeerError("uninstall") }
            try connection.send(["type": "uninstalled", "bundleId": "com.example.app", "unregisteredAt": 5, "tokens": ["e1"]])
            try connection.expect("install")
            try connection.send(FakePeer.registered(bundleID: app, token: "e2"))
            guard try connection.expect("rotate")["bundleId"] == "com.example.app" else { throw PeerError("rotate") }
            try connection.send(FakePeer.registered(bundleID: app, token: "e3"))
            guard try connection.expect("restore")["fromDeviceId"] == "old-phone" else { throw PeerError("restore") }
            try connection.send(FakePeer.registered(bundleID: "com.example.old", token: "f1"))
            try connection.send(["type": "restored", "fromDeviceId": "old-phone", "bundleIds": ["com.example.old"]])
            guard try connection.expect("device")["lowPowerMode"] == true else { throw PeerError("device") }
            try connection.send(["type": "deviceUpdated", "lowPowerMode": true])
            guard try connection.expect("app")["authorization"] == "ephemeral" else { throw PeerError("permission") }
            try connection.send(["type": "error", "code": "bad_request", "message": "nope", "fatal": false])
            try connection.expectEOF()
        }
        try peer.run {
            let device = try DeviceProcess([
                "--connect", peer.address.description, "--device-id", "cli-3", "--bundle", app,
                "--environment", "sandbox", "--authorization", "provisional",
            ])
            try device.expect("registered")
            try device.send("erase")
            try device.expect("erased")
            #expect(try device.expect("registered")["token"] == "e1")
            try device.send("reinstall")
            #expect(try device.expect("uninstalled")["tokens"] == ["e1"])
            #expect(try device.expect("registered")["token"] == "e2")
            try device.send("rotate")
            #expect(try device.expect("registered")["token"] == "e3")
            try device.send("restore old-phone")
            #expect(try device.expect("registered")["bundleId"] == "com.example.old")
            #expect(try device.expect("restored")["bundleIds"] == ["com.example.old"])
            try device.send("low-power on")
            #expect(try device.expect("deviceUpdated")["lowPowerMode"] == true)
            try device.send("permission ephemeral")
            let error = try device.expect("error")
            #expect(JSONValue.object(error) == ["event": "error", "code": "bad_request", "message": "nope", "fatal": false])
            try device.send("quit")
            #expect(device.waitForExit() == 0)
        }
    }

    @Test("a dropped connection prints disconnected and reconnects; offline stays offline until online")
    func reconnectOfflineOnline() throws {
        let settledOffline = DispatchSemaphore(value: 0)
        let readyForOnline = DispatchSemaphore(value: 0)
        let peer = try FakePeer { peer in
            let first = try peer.accept()
            try first.handshake()
            first.close()
            let second = try peer.accept()
            let hello = try second.handshake()
            guard hello["deviceId"] == "cli-4" else { throw PeerError("hello \(hello)") }
            try second.expectEOF()  // offline
            // The device has since answered commands as an offline device; it has not
            // connected again meanwhile (such a connection would be waiting to be accepted).
            guard settledOffline.wait(timeout: .now() + 10) == .success else { throw PeerError("device never settled offline") }
            try peer.expectNoPendingConnection()
            readyForOnline.signal()
            let third = try peer.accept()
            try third.handshake()
            try third.expectEOF()
        }
        try peer.run {
            let device = try DeviceProcess([
                "--connect", peer.address.description, "--device-id", "cli-4", "--bundle", app,
                "--environment", "sandbox",
            ])
            let token = try device.expect("registered")["token"]
            let dropped = try device.expect("disconnected")
            #expect(dropped["reason"]?.stringValue?.isEmpty == false)
            #expect(try device.expect("registered")["token"] == token)
            try device.send("offline")
            try device.expect("offline")
            try device.send("ping")
            #expect(try device.expect("error")["code"] == "not_connected")
            try device.send("foreground")  // kept for the next hello
            let pending = try device.expect("appUpdated")
            #expect(pending["offline"] == true)
            #expect(pending["appState"] == "foreground")
            settledOffline.signal()
            guard readyForOnline.wait(timeout: .now() + 10) == .success else { throw PeerError("peer never ready") }
            try device.send("online")
            #expect(try device.expect("online")["deviceId"] == "cli-4")
            try device.expect("registered")
            try device.send("online")
            #expect(try device.expect("error")["code"] == "bad_command")
            try device.send("quit")
            #expect(device.waitForExit() == 0)
        }
    }

    @Test("started before the emulator: one disconnected event, retries print nothing, then it connects")
    func startBeforeEmulator() throws {
        let (fd, bound) = try Socket.listen(HostPort(host: "127.0.0.1", port: 0))
        close(fd)
        let device = try DeviceProcess([
            "--connect", bound.description, "--device-id", "early", "--bundle", app,
            "--environment", "sandbox",
        ])
        let down = try device.expect("disconnected")
        #expect(down["reason"]?.stringValue?.contains("\(bound.port)") == true)
        let peer = try FakePeer(port: bound.port) { peer in
            // Several retries fail (closed before welcome), and none prints anything: the next
            // event the device prints is registered, not another disconnected.
            for _ in 0..<3 { try peer.accept().close() }
            let connection = try peer.accept()
            try connection.handshake()
            try connection.expectEOF()
        }
        try peer.run {
            try device.expect("registered")  // not another disconnected
            try device.send("quit")
            #expect(device.waitForExit() == 0)
        }
    }

    @Test("--no-retry exits 1 when the emulator is not there; a rejected hello exits 1")
    func exitsOne() throws {
        let (fd, bound) = try Socket.listen(HostPort(host: "127.0.0.1", port: 0))
        close(fd)
        let result = try runToExit([
            "--connect", bound.description, "--device-id", "x", "--bundle", app,
            "--environment", "sandbox", "--no-retry",
        ])
        #expect(result.status == 1)
        #expect(result.err.contains("apns-emulator: cannot connect"))

        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.expect("hello")
            try connection.send(["type": "error", "code": "bad_request", "message": "invalid bundle id", "fatal": false])
            try connection.expectEOF()
        }
        try peer.run {
            let device = try DeviceProcess([
                "--connect", peer.address.description, "--device-id", "x", "--bundle", "bad bundle",
                "--environment", "sandbox",
            ])
            #expect(try device.expect("error")["message"] == "invalid bundle id")
            #expect(device.waitForExit() == 1)
            #expect(device.stderrText().contains("rejected"))
        }
    }

    @Test("bad flags exit 2 naming what is allowed; --help prints usage")
    func flags() throws {
        let base = ["--connect", "127.0.0.1:1", "--device-id", "d", "--bundle", app, "--environment", "sandbox"]
        let cases: [(arguments: [String], environment: [String: String], mentions: [String])] = [
            (base.dropLast(2) + ["--environment", "staging"], [:], ["staging", "sandbox, production"]),
            (base + ["--authorization", "maybe"], [:], ["maybe", "notDetermined, denied, authorized, provisional, ephemeral"]),
            (base + ["--app-state", "asleep"], [:], ["foreground, background, suspended, notRunning, terminated"]),
            (base + ["--kinds", "app,bogus"], [:], ["bogus", "voip"]),
            (base + ["--bogus"], [:], ["unknown option --bogus"]),
            (base + ["--insecure"], [:], ["--tls"]),
            (base + ["extra"], [:], ["no arguments"]),
            (["--bundle", app, "--environment", "sandbox"], [:], ["--device-id"]),
            (["--device-id", "d", "--environment", "sandbox"], [:], ["--bundle"]),
            (["--device-id", "d", "--bundle", app], [:], ["--environment"]),
            (["--device-id", "bad id!", "--bundle", app, "--environment", "sandbox"], [:], ["letters, digits"]),
            (["--connect", "nowhere", "--device-id", "d", "--bundle", app, "--environment", "sandbox"], [:], ["HOST:PORT"]),
            (base, ["APNS_EMULATOR_AUTHORIZATION": "maybe"], ["APNS_EMULATOR_AUTHORIZATION"]),
        ]
        for (arguments, environment, mentions) in cases {
            let result = try runToExit(arguments, environment: environment)
            #expect(result.status == 2, "\(arguments): \(result.err)")
            #expect(result.err.hasPrefix("apns-emulator: "), "\(arguments)")
            for text in mentions { #expect(result.err.contains(text), "\(arguments): \(result.err)") }
            #expect(result.out.isEmpty, "\(arguments)")
        }
        let help = try runToExit(["--help"])
        #expect(help.status == 0)
        #expect(help.out.contains("usage: apns-emulator device [options]"))
        #expect(help.out.contains("--device-id ID"))
        #expect(help.out.contains("APNS_EMULATOR_DEVICE_ID"))
        #expect(help.out.contains("background-mode on|off"))
    }
}
