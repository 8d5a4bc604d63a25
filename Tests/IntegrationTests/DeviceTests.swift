import APNsCore
import Foundation
import DeviceClient
import Glibc
import Locking
import Networking
import ProviderClient
import Synchronization
import Testing
import TestSupport

/// Collects JSON lines from a pipe (chunks may split lines).
final class LineCollector: Sendable {
    private struct State {
        var partial = ""
        var lines: [JSONValue] = []
    }
    private let state = Locked(State())

    func feed(_ data: Data) {
        state.withLock { s in
            s.partial += String(decoding: data, as: UTF8.self)
            while let newline = s.partial.firstIndex(of: "\n") {
                let line = String(s.partial[..<newline])
                s.partial.removeSubrange(...newline)
                if let value = try? JSONValue.parse(line) { s.lines.append(value) }
            }
        }
    }

    func withLines<T>(_ body: ([JSONValue]) -> T) -> T { state.withLock { body($0.lines) } }
}

/// A real `apns-emulator device` process: JSON lines from stdout, commands on stdin.
final class DeviceProcess: @unchecked Sendable {
    let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private let lines = LineCollector()
    private var consumed = 0

    /// - Parameter address: where to connect instead of the emulator's device listener (a
    ///   load balancer in front of several instances).
    init(
        _ emulator: EmulatorProcess, deviceID: String, environment: String = "sandbox", extra: [String] = [],
        address: HostPort? = nil
    ) throws {
        process.executableURL = URL(fileURLWithPath: EmulatorProcess.binary)
        process.arguments =
            [
                "device", "--connect", try (address ?? emulator.address("device")).description, "--device-id", deviceID,
                "--bundle", EmulatorProcess.bundleID, "--environment", environment,
            ] + extra
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        let collector = lines
        output.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil } else { collector.feed(data) }
        }
        try process.run()
    }

    deinit {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
    }

    /// Sends one stdin command.
    func command(_ text: String) {
        input.fileHandleForWriting.write(Data((text + "\n").utf8))
    }

    /// Writes bytes to stdin as they are (no newline added).
    func write(_ text: String) {
        input.fileHandleForWriting.write(Data(text.utf8))
    }

    func closeStdin() {
        input.fileHandleForWriting.closeFile()
    }

    /// The next event of `name` (events before it are consumed), within the timeout.
    func next(_ name: String, timeout: TimeInterval = 5) -> JSONValue? {
        var found: JSONValue?
        _ = try? eventually(timeout) {
            let store = lines.withLines { $0 }
            while found == nil && consumed < store.count {
                if store[consumed]["event"]?.stringValue == name { found = store[consumed] }
                consumed += 1
            }
            return found != nil
        }
        return found
    }

    /// Whether no event of `name` comes before the answer to a `ping` sent now (the events up
    /// to the `pong` are consumed). A barrier, not a pause: the emulator handles a device's
    /// frames in order and writes everything for a connection in order on that connection, so
    /// whatever it had sent the device before it read the ping (a delivery routed when a
    /// provider got its answer, what a reconnect's hello brought) is printed before the pong.
    func noneBeforePong(_ name: String) -> Bool {
        let start = consumed
        command("ping")
        guard next("pong") != nil else { return false }
        return lines.withLines { store in !store[start..<consumed].contains { $0["event"]?.stringValue == name } }
    }

    /// Every event of `name` printed so far (none consumed).
    func events(_ name: String) -> [JSONValue] {
        lines.withLines { $0.filter { $0["event"]?.stringValue == name } }
    }

    func registeredToken() throws -> String {
        let event = try #require(next("registered"), "the device printed no registered event")
        return try #require(event["token"]?.stringValue)
    }

    func exitStatus(timeout: TimeInterval = 5) -> Int32? {
        _ = try? eventually(timeout) { !process.isRunning }
        return process.isRunning ? nil : process.terminationStatus
    }
}

@Suite("Simulated devices end to end (device CLI processes, real HTTP/2 provider)")
struct DeviceTests {
    @Test func onlineDeliveryWithCallbacksAndDisplay() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "phone-1", extra: ["--app-state", "foreground"])
        let token = try device.registeredToken()
        let result = APNsResult(
            try emulator.connect().send(
                try emulator.push(token, payload: #"{"aps":{"alert":{"title":"Hi","body":"there"},"mutable-content":1}}"#).request))
        #expect(result.status == 200)
        let event = try #require(device.next("notification"))
        #expect(event["apnsId"]?.stringValue == result.apnsID)
        #expect(event["pushType"] == "alert")
        #expect(event["payload"]?["aps"]?["alert"]?["title"] == "Hi")
        #expect(event["callbacks"] == ["serviceExtension", "willPresent"])
        #expect(event["display"] == "banner")
        // Acked: the record says delivered.
        #expect(try eventually { try emulator.admin("GET", "/api/v1/notifications/\(result.apnsID!)").json["outcome"] == "delivered" })
        // A tap runs didReceive.
        device.command("tap \(result.apnsID!)")
        #expect(device.next("tapped")?["callbacks"] == ["didReceive"])
    }

    @Test func offlineStoreAndForwardDeliversTheNewestOnReconnect() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "phone-2")
        let token = try device.registeredToken()
        device.command("offline")
        #expect(device.next("offline") != nil)
        let connection = try emulator.connect()
        let first = APNsResult(try connection.send(try emulator.push(token, payload: #"{"aps":{"alert":"one"}}"#).request))
        let second = APNsResult(try connection.send(try emulator.push(token, payload: #"{"aps":{"alert":"two"}}"#).request))
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(second.apnsID!)").json["outcome"] == "stored")
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(first.apnsID!)").json["outcome"] == "coalesced")
        device.command("online")
        let event = try #require(device.next("notification"))
        #expect(event["apnsId"]?.stringValue == second.apnsID)
        #expect(event["stored"] == true)
        #expect(device.noneBeforePong("notification"))
    }

    /// Low Power Mode turned off through the admin API reaches the device command, so a
    /// reconnect (whose hello says the device's Low Power Mode) does not turn it on again.
    @Test func aLowPowerModeChangedThroughTheAdminAPISurvivesAReconnect() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "phone-lpm", extra: ["--low-power"])
        _ = try device.registeredToken()
        func lowPower() throws -> Bool? { try emulator.admin("GET", "/api/v1/devices/phone-lpm").json["lowPowerMode"]?.boolValue }
        #expect(try lowPower() == true)
        #expect(try emulator.admin("PATCH", "/api/v1/devices/phone-lpm", body: ["lowPowerMode": false]).status == 200)
        #expect(device.next("deviceUpdated")?["lowPowerMode"] == false)
        device.command("offline")
        #expect(device.next("offline") != nil)
        device.command("online")
        #expect(device.next("online") != nil)
        #expect(try eventually(5) { try lowPower() == false }, "the reconnect's hello kept the admin API's change")
        #expect(try lowPower() == false)
    }

    /// A tap through the admin API reaches the device command (`tapped`, then the app's new
    /// state in `appUpdated`), so a reconnect's hello does not put the app back as it was.
    @Test func anAppLaunchedByATapThroughTheAdminAPISurvivesAReconnect() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "phone-tap", extra: ["--app-state", "notRunning"])
        let token = try device.registeredToken()
        let result = APNsResult(try emulator.connect().send(try emulator.push(token).request))
        #expect(result.status == 200)
        #expect(device.next("notification") != nil)
        let empty = try emulator.admin("POST", "/api/v1/devices/phone-tap/tap", body: ["apnsId": ""])
        #expect(empty.status == 400 && empty.json["error"]?.stringValue?.hasPrefix("\"apnsId\" is required") == true, "\(empty.raw)")
        let tapped = try emulator.admin("POST", "/api/v1/devices/phone-tap/tap", body: ["apnsId": .string(try #require(result.apnsID))])
        #expect(tapped.status == 200 && tapped.json["launched"] == true)
        #expect(device.next("tapped")?["launched"] == true)
        #expect(device.next("appUpdated")?["appState"] == "foreground")
        func appState() throws -> JSONValue? {
            try emulator.admin("GET", "/api/v1/devices/phone-tap").json["apps"]?.arrayValue?.first?["appState"]
        }
        #expect(try appState() == "foreground")
        device.command("offline")
        #expect(device.next("offline") != nil)
        device.command("online")
        #expect(device.next("online") != nil)
        // The hello went before the ping: once the pong is back, the hello has been handled.
        #expect(device.noneBeforePong("error"))
        #expect(try appState() == "foreground", "the reconnect's hello kept the tap's launch")
    }

    /// What the admin API does to a socket device's apps reaches the device process (so its
    /// next hello does not undo it); what a hello would undo unseen is refused while it is away.
    @Test func adminChangesReachAConnectedDeviceAndAreRefusedWhileItIsAway() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "phone-admin")
        let token = try device.registeredToken()
        let rotated = try emulator.admin("POST", "/api/v1/devices/phone-admin/apps/com.example.app/rotate")
        #expect(rotated.status == 200)
        let newToken = try #require(rotated.json["tokens"]?.arrayValue?.first?["token"]?.stringValue)
        #expect(newToken != token)
        #expect(device.next("registered")?["token"]?.stringValue == newToken)

        device.command("offline")
        #expect(device.next("offline") != nil)
        let denied = try emulator.admin("PATCH", "/api/v1/devices/phone-admin/apps/com.example.app", body: ["authorization": "denied"])
        #expect(denied.status == 409, "\(denied.json)")
        #expect(denied.json["error"]?.stringValue?.contains("next hello") == true, "\(denied.json)")
        #expect(try emulator.admin("PATCH", "/api/v1/devices/phone-admin", body: ["lowPowerMode": true]).status == 409)
        #expect(try emulator.admin("PATCH", "/api/v1/devices/phone-admin", body: ["muted": true]).status == 200, "not part of a hello")
        #expect(try emulator.admin("PATCH", "/api/v1/devices/phone-admin/apps/com.example.app", body: ["badge": 3]).status == 200)
        #expect(try emulator.admin("DELETE", "/api/v1/devices/phone-admin/apps/com.example.app").status == 409)
        #expect(try emulator.admin("POST", "/api/v1/devices/phone-admin/erase").status == 409)
        device.command("online")
        #expect(device.next("online") != nil)
        #expect(device.noneBeforePong("error"))
        #expect(try emulator.admin("PATCH", "/api/v1/devices/phone-admin/apps/com.example.app", body: ["authorization": "denied"]).status == 200)
        #expect(device.next("appUpdated")?["authorization"] == "denied")

        // An app the admin API installs keeps its settings across the device's reconnects.
        let other: JSONValue = ["bundleId": "com.example.other", "environment": "sandbox", "authorization": "denied", "appState": "terminated"]
        #expect(try emulator.admin("POST", "/api/v1/devices/phone-admin/apps", body: other).status == 201)
        #expect(device.next("registered")?["bundleId"] == "com.example.other")
        device.command("offline")
        #expect(device.next("offline") != nil)
        device.command("online")
        #expect(device.next("online") != nil)
        #expect(device.noneBeforePong("error"))
        let apps = try emulator.admin("GET", "/api/v1/devices/phone-admin").json["apps"]?.arrayValue ?? []
        let kept = try #require(apps.first { $0["bundleId"] == "com.example.other" })
        #expect(kept["authorization"] == "denied" && kept["appState"] == "terminated", "\(kept)")

        // The device's own app switched to production through the admin API stays so across a
        // reconnect, with its token: the hello said sandbox, as the command line had it, and
        // installed the development build again, replacing every token (the provider's got 410).
        let switched = try emulator.admin(
            "POST", "/api/v1/devices/phone-admin/apps", body: ["bundleId": "com.example.app", "environment": "production"])
        #expect(switched.status == 201, "\(switched.json)")
        let production = try #require(switched.json["token"]?.stringValue)
        #expect(device.next("registered")?["environment"] == "production")
        device.command("offline")
        #expect(device.next("offline") != nil)
        device.command("online")
        #expect(device.next("online") != nil)
        let again = device.next("registered")
        #expect(again?["environment"] == "production" && again?["token"]?.stringValue == production, "\(String(describing: again))")
        let after = try emulator.admin("GET", "/api/v1/devices/phone-admin").json["apps"]?.arrayValue ?? []
        let app = try #require(after.first { $0["bundleId"] == "com.example.app" })
        #expect(app["environment"] == "production", "\(app)")
        let push = APNsResult(try emulator.connect("production").send(try emulator.push(production).request))
        #expect(push.status == 200, "the production token still valid: \(push.status) \(push.reason ?? "")")

        let uninstalled = try emulator.admin("DELETE", "/api/v1/devices/phone-admin/apps/com.example.app")
        #expect(uninstalled.status == 200)
        #expect(device.next("uninstalled")?["bundleId"] == "com.example.app")
        device.command("offline")
        #expect(device.next("offline") != nil)
        device.command("online")
        #expect(device.next("online") != nil)
        #expect(device.noneBeforePong("registered"), "the reconnect's hello does not install the app again")
        let left = try emulator.admin("GET", "/api/v1/devices/phone-admin").json["apps"]?.arrayValue ?? []
        #expect(left.compactMap { $0["bundleId"]?.stringValue } == ["com.example.other"])
    }

    @Test func expirationZeroIsNotStoredForAnOfflineDevice() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "phone-3")
        let token = try device.registeredToken()
        device.command("offline")
        #expect(device.next("offline") != nil)
        var push = try emulator.push(token)
        push.expiration = "0"
        let result = APNsResult(try emulator.connect().send(push.request))
        #expect(result.status == 200)
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(result.apnsID!)").json["outcome"] == "expired")
        device.command("online")
        #expect(device.next("online") != nil)
        #expect(device.noneBeforePong("notification"))
    }

    @Test func collapseIDReplacesTheShownNotification() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "phone-4")
        let token = try device.registeredToken()
        let connection = try emulator.connect()
        var first = try emulator.push(token, payload: #"{"aps":{"alert":"1-0"}}"#)
        first.collapseID = "score"
        let a = APNsResult(try connection.send(first.request))
        #expect(device.next("notification") != nil)
        var second = try emulator.push(token, payload: #"{"aps":{"alert":"2-0"}}"#)
        second.collapseID = "score"
        let b = APNsResult(try connection.send(second.request))
        #expect(device.next("notification")?["collapseId"] == "score")
        #expect(try eventually { try emulator.admin("GET", "/api/v1/notifications/\(a.apnsID!)").json["outcome"] == "coalesced" })
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(b.apnsID!)").json["outcome"] == "delivered")
    }

    /// A device that acks and reconnects at once (its old connection replaced while that ack
    /// may still be unread there): the ack counts, so the push is delivered, not stored again.
    @Test func anAckSentJustBeforeAReconnectCounts() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let app = DeviceApp(bundleID: EmulatorProcess.bundleID, environment: .sandbox)
        let connection = try emulator.connect()
        for round in 0..<25 {
            let first = SimulatedDevice(address: try emulator.address("device"), deviceID: "quick", apps: [app])
            first.autoAck = false
            try first.connect()
            let token = try #require(first.token(for: EmulatorProcess.bundleID))
            let sent = APNsResult(try connection.send(try emulator.push(token).request))
            try #require(sent.status == 200)
            let delivered = try #require(try first.nextNotification(timeoutMilliseconds: 3000))
            try first.ack(delivered.id)
            let second = SimulatedDevice(address: try emulator.address("device"), deviceID: "quick", apps: [app])
            second.autoAck = false
            try second.connect()
            first.disconnect()
            let counted = try eventually(3) {
                try emulator.admin("GET", "/api/v1/notifications/\(sent.apnsID!)").json["outcome"] == "delivered"
            }
            let explanation = try emulator.admin("GET", "/api/v1/notifications/\(sent.apnsID!)").json["explanation"] ?? .null
            #expect(counted, "round \(round): \(explanation)")
            second.disconnect()
        }
    }

    @Test func backgroundBudgetThrottlesWithoutALine() throws {
        let emulator = try EmulatorProcess(["--background-budget-per-hour", "2"], inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "phone-5")
        let token = try device.registeredToken()
        let connection = try emulator.connect()
        var results: [APNsResult] = []
        for _ in 0..<4 {
            var push = try emulator.push(token, payload: #"{"aps":{"content-available":1}}"#)
            push.pushType = "background"
            push.priority = "5"
            results.append(APNsResult(try connection.send(push.request)))
        }
        #expect(results.allSatisfy { $0.status == 200 })
        #expect(device.next("notification")?["callbacks"] == ["didReceiveRemoteNotification"])
        #expect(device.next("notification") != nil)
        #expect(device.noneBeforePong("notification"), "over-budget pushes print no line")
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(results[2].apnsID!)").json["outcome"] == "throttled")
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(results[3].apnsID!)").json["outcome"] == "deferred")
        // What is left of the budget can be read off the device.
        let app = try emulator.admin("GET", "/api/v1/devices/phone-5").json["apps"]?.arrayValue?.first
        #expect(app?["backgroundWakesLeft"] == 0, "\(app ?? .null)")
    }

    @Test func permissionDeniedAlertArrivesAndIsDropped() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "phone-6", extra: ["--authorization", "denied"])
        let token = try device.registeredToken()
        let result = APNsResult(try emulator.connect().send(try emulator.push(token).request))
        #expect(result.status == 200)
        let event = try #require(device.next("notification"))
        #expect(event["callbacks"] == [])
        #expect(event["display"] == "none")
        #expect(event["reason"]?.stringValue?.contains("denied") == true)
        #expect(try eventually { try emulator.admin("GET", "/api/v1/notifications/\(result.apnsID!)").json["outcome"] == "dropped-by-system" })
        // Changing permission does not change the token.
        device.command("permission authorized")
        #expect(device.next("appUpdated")?["authorization"] == "authorized")
        #expect(APNsResult(try emulator.connect().send(try emulator.push(token).request)).status == 200)
        #expect(device.next("notification")?["display"] == "banner")
    }

    @Test func terminatedAppGetsItsBackgroundPushOnlyWhenLaunched() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "phone-7", extra: ["--app-state", "terminated"])
        let token = try device.registeredToken()
        var push = try emulator.push(token, payload: #"{"aps":{"content-available":1}}"#)
        push.pushType = "background"
        push.priority = "5"
        let result = APNsResult(try emulator.connect().send(push.request))
        #expect(result.status == 200)
        #expect(device.noneBeforePong("notification"))
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(result.apnsID!)").json["outcome"] == "deferred")
        device.command("foreground")
        let event = try #require(device.next("notification"))
        #expect(event["apnsId"]?.stringValue == result.apnsID)
        #expect(event["callbacks"] == ["didReceiveRemoteNotification"])
    }

    @Test func uninstallThen410AndReinstallGivesANewToken() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "phone-8")
        let token = try device.registeredToken()
        device.command("uninstall")
        let uninstalled = try #require(device.next("uninstalled"))
        let at = try #require(uninstalled["unregisteredAt"]?.intValue)
        let gone = APNsResult(try emulator.connect().send(try emulator.push(token).request))
        #expect(gone.status == 410)
        #expect(gone.reason == "Unregistered")
        #expect(gone.timestampMs == at)
        device.command("reinstall")
        let fresh = try device.registeredToken()
        #expect(fresh != token)
        #expect(APNsResult(try emulator.connect().send(try emulator.push(fresh).request)).status == 200)
    }

    @Test func newestConnectionWinsAndTheOldCLIExits() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let first = try DeviceProcess(emulator, deviceID: "phone-9")
        let token = try first.registeredToken()
        let second = try DeviceProcess(emulator, deviceID: "phone-9")
        #expect(try second.registeredToken() == token, "the same device id keeps its token")
        #expect(first.next("replaced") != nil)
        #expect(first.exitStatus() == 0)
        let result = APNsResult(try emulator.connect().send(try emulator.push(token).request))
        #expect(second.next("notification")?["apnsId"]?.stringValue == result.apnsID)
    }

    /// Deleting a connected device tells it (`removed`) and closes its connection: the command
    /// prints the event and exits 0, rather than holding a socket for a device that is gone.
    @Test func deletingAConnectedDeviceEndsItsCommand() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "phone-12")
        _ = try device.registeredToken()
        #expect(try emulator.metric("apns_emulator_device_connections") == 1)
        #expect(try emulator.admin("DELETE", "/api/v1/devices/phone-12").status == 200)
        #expect(device.next("removed")?["deviceId"]?.stringValue == "phone-12")
        #expect(device.exitStatus() == 0)
        #expect(try eventually { try emulator.metric("apns_emulator_device_connections") == 0 })
        #expect(try emulator.admin("GET", "/api/v1/devices/phone-12").status == 404, "not created anew by a reconnect")
    }

    @Test func abruptDisconnectLosesNothing() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        var device: DeviceProcess? = try DeviceProcess(emulator, deviceID: "phone-10")
        let token = try device!.registeredToken()
        // Kill the process outright: no goodbye.
        kill(device!.process.processIdentifier, SIGKILL)
        _ = device!.exitStatus()
        device = nil
        let result = APNsResult(try emulator.connect().send(try emulator.push(token).request))
        #expect(result.status == 200)
        #expect(try eventually { try emulator.admin("GET", "/api/v1/notifications/\(result.apnsID!)").json["outcome"] == "stored" })
        let again = try DeviceProcess(emulator, deviceID: "phone-10")
        #expect(try again.registeredToken() == token)
        #expect(again.next("notification")?["apnsId"]?.stringValue == result.apnsID)
        #expect(try eventually { try emulator.admin("GET", "/api/v1/notifications/\(result.apnsID!)").json["outcome"] == "delivered" })
    }

    @Test func endOfStdinIsNotAQuit() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "phone-11")
        let token = try device.registeredToken()
        // A last line without a newline runs at the end of input: its pong shows the device
        // has read the end of stdin, and answered after it.
        device.write("ping")
        device.closeStdin()
        #expect(device.next("pong") != nil)
        #expect(device.process.isRunning)
        let result = APNsResult(try emulator.connect().send(try emulator.push(token).request))
        #expect(device.next("notification")?["apnsId"]?.stringValue == result.apnsID)
    }
}

@Suite("Devices: TLS socket and reset")
struct DeviceSocketTests {
    @Test func deviceOverTLS() throws {
        let emulator = try EmulatorProcess(["--device-tls"], inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "tls-phone", extra: ["--tls", "--ca", emulator.caPath])
        let token = try device.registeredToken()
        let result = APNsResult(try emulator.connect().send(try emulator.push(token).request))
        #expect(device.next("notification")?["apnsId"]?.stringValue == result.apnsID)
    }

    @Test func resetKeepsDeviceConnectionsAndReattachesThem() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "reset-phone")
        let before = try device.registeredToken()
        #expect(try emulator.admin("POST", "/api/v1/reset").status == 200)
        let after = try device.registeredToken()
        #expect(device.process.isRunning)
        #expect(try emulator.admin("GET", "/api/v1/devices/reset-phone").json["connected"] == true)
        // The token is usable again (a reset forgets issued tokens, so the device has a new one).
        let result = APNsResult(try emulator.connect().send(try emulator.push(after).request))
        #expect(result.status == 200)
        #expect(device.next("notification")?["apnsId"]?.stringValue == result.apnsID)
        // The token issued before the reset is forgotten with everything else.
        #expect(after != before)
        #expect(APNsResult(try emulator.connect().send(try emulator.push(before).request)).reason == "BadDeviceToken")
    }
}

@Suite("The device command's first connection with --no-retry")
struct DeviceNoRetryTests {
    /// Something listening on 127.0.0.1 that is not the emulator; `closes`: it accepts each
    /// connection and closes it at once, else the kernel accepts and nothing ever answers.
    final class Peer: @unchecked Sendable {
        let fd: Int32
        let port: UInt16
        private let closes: Bool
        private let stopped = Atomic<Bool>(false)

        init(closes: Bool) throws {
            let (fd, bound) = try Socket.listen(HostPort(host: "127.0.0.1", port: 0))
            (self.fd, port, self.closes) = (fd, bound.port, closes)
            guard closes else { return }
            Thread { [self] in
                while !stopped.load(ordering: .relaxed) {
                    let client = accept(fd, nil, nil)
                    if client >= 0 { close(client) } else { usleep(5_000) }
                }
            }.start()
        }

        deinit {
            stopped.store(true, ordering: .relaxed)
            close(fd)
        }
    }

    func device(_ port: UInt16) throws -> CommandResult {
        try run(
            EmulatorProcess.binary,
            [
                "device", "--connect", "127.0.0.1:\(port)", "--device-id", "w5", "--bundle", "com.example.app", "--environment", "sandbox",
                "--no-retry",
            ],
            timeout: 30)
    }

    @Test func aPeerThatClosesTheConnectionBeforeWelcomeEndsIt() throws {
        let peer = try Peer(closes: true)
        let result = try device(peer.port)
        #expect(result.status == 1, "\(result.out) \(result.err)")
        #expect(result.out.contains(#""event":"disconnected""#))
    }

    @Test func aPeerThatNeverSaysWelcomeEndsItAfterTenSeconds() throws {
        let peer = try Peer(closes: false)
        let started = Date()
        let result = try device(peer.port)
        #expect(result.status == 1, "\(result.out) \(result.err)")
        #expect(result.err.contains("no welcome"), "\(result.err)")
        #expect(Date().timeIntervalSince(started) >= 9)
    }
}
