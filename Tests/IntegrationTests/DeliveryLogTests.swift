import DeviceClient
import Foundation
import JSON
import ProviderClient
import Testing
import TestSupport

/// `GET /api/v1/notifications/{id}/log`: the states a push went through, with when, under the
/// names of Apple's Push Notifications Console.
@Suite struct DeliveryLogTests {
    static func log(_ emulator: EmulatorProcess, _ id: String) throws -> [JSONValue] {
        let reply = try emulator.admin("GET", "/api/v1/notifications/\(id)/log")
        #expect(reply.status == 200, "\(reply.raw)")
        return reply.json["log"]?.arrayValue ?? []
    }

    static func consoleNames(_ log: [JSONValue]) -> [String] { log.compactMap { $0["console"]?.stringValue } }

    @Test func aPushStoredForAnOfflineDeviceShowsEveryStateWithItsTime() throws {
        let emulator = try EmulatorProcess()
        let device = try emulator.createDevice()
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(device.deviceID)", body: ["online": false]).status == 200)
        let connection = try emulator.connect()
        let result = APNsResult(try connection.send(try emulator.push(device.token).request))
        #expect(result.status == 200)
        let uniqueID = try #require(result.uniqueID)
        #expect(Self.consoleNames(try Self.log(emulator, uniqueID)) == ["Received", "Accepted", "Stored: device offline"])
        Thread.sleep(forTimeInterval: 0.05)
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(device.deviceID)", body: ["online": true]).status == 200)
        var log: [JSONValue] = []
        _ = try eventually {
            log = try Self.log(emulator, uniqueID)
            return log.count == 4
        }
        #expect(Self.consoleNames(log) == ["Received", "Accepted", "Stored: device offline", "Delivered from storage"])
        let times = log.compactMap { $0["atMs"]?.intValue }
        #expect(times == times.sorted() && times.count == 4)
        #expect(times[3] - times[2] >= 50, "delivered when the device came back, not when stored: \(times)")
        #expect(log[3]["state"]?.stringValue == "delivered-from-storage" && log[3]["note"]?.stringValue?.isEmpty == false)
        // The same log by apns-id; the record keeps it across a look-up of the record itself.
        #expect(Self.consoleNames(try Self.log(emulator, try #require(result.apnsID))).count == 4)
        // /metrics counts the same states under the console's names.
        func console(_ state: String) throws -> Double {
            try emulator.metric("apns_emulator_console_states_total", labels: "state=\"\(state)\"")
        }
        #expect(try console("Received") == 1 && console("Accepted") == 1)
        #expect(try console("Stored: device offline") == 1 && console("Delivered from storage") == 1)
        #expect(try console("Delivered") == 0 && console("Discarded: unregistered") == 0)
    }

    /// A device holding a socket: the send is the delivery, its ack a step of its own.
    @Test func aSocketDevicesAckIsAStepOfItsOwn() throws {
        let emulator = try EmulatorProcess()
        let device = SimulatedDevice(
            address: try emulator.address("device"), deviceID: "log-phone",
            apps: [DeviceApp(bundleID: EmulatorProcess.bundleID, environment: .sandbox)])
        device.autoAck = false
        try device.connect()
        defer { device.disconnect() }
        let token = try #require(
            try eventually {
                _ = try device.poll(timeoutMilliseconds: 50); return device.token(for: EmulatorProcess.bundleID) != nil
            }
                ? device.token(for: EmulatorProcess.bundleID) : nil)
        let result = APNsResult(try emulator.connect().send(try emulator.push(token).request))
        let id = try #require(result.apnsID)
        let delivered = try #require(try device.nextNotification(timeoutMilliseconds: 5000))
        #expect(Self.consoleNames(try Self.log(emulator, id)) == ["Received", "Accepted", "Delivered"])
        #expect(try Self.log(emulator, id).last?["state"]?.stringValue == "delivered")
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(id)").json["outcome"]?.stringValue == "pending")
        try device.ack(delivered.id)
        var log: [JSONValue] = []
        _ = try eventually {
            log = try Self.log(emulator, id)
            return log.count == 4
        }
        #expect(Self.consoleNames(log) == ["Received", "Accepted", "Delivered", "Acknowledged by the device"])
        #expect(log.last?["state"]?.stringValue == "acknowledged")
    }

    /// The log is part of the record: killed (SIGKILL) and started again on the same
    /// `--state-dir`, the emulator shows the same states with the same times.
    @Test func theLogSurvivesACrashWithAStateDirectory() throws {
        let state = try StateDirectory()
        let ports = try EmulatorProcess.restartablePorts()
        let first = try EmulatorProcess(["--state-dir", state.path] + ports)
        let device = try first.createDevice()
        #expect(try first.admin("PATCH", "/api/v1/devices/\(device.deviceID)", body: ["online": false]).status == 200)
        let result = APNsResult(try first.connect().send(try first.push(device.token).request))
        #expect(result.status == 200)
        #expect(try first.admin("PATCH", "/api/v1/devices/\(device.deviceID)", body: ["online": true]).status == 200)
        let id = try #require(result.apnsID)
        var before: [JSONValue] = []
        _ = try eventually {
            before = try Self.log(first, id)
            return before.count == 4
        }
        first.crash()
        let second = try EmulatorProcess(["--state-dir", state.path] + ports)
        let after = try Self.log(second, id)
        #expect(Self.consoleNames(after) == ["Received", "Accepted", "Stored: device offline", "Delivered from storage"])
        #expect(after.map { $0["atMs"] } == before.map { $0["atMs"] })
    }

    @Test func refusedAndDiscardedPushesSayWhy() throws {
        let emulator = try EmulatorProcess()
        let connection = try emulator.connect()
        let refused = APNsResult(try connection.send(try emulator.push(String(repeating: "ab", count: 32)).request))
        #expect(Self.consoleNames(try Self.log(emulator, try #require(refused.apnsID))) == ["Received", "Discarded: BadDeviceToken"])

        // Stored for an offline device, then the app is uninstalled: discarded as unregistered.
        let device = try emulator.createDevice()
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(device.deviceID)", body: ["online": false]).status == 200)
        let stored = APNsResult(try connection.send(try emulator.push(device.token).request))
        #expect(try emulator.admin("DELETE", "/api/v1/devices/\(device.deviceID)/apps/\(EmulatorProcess.bundleID)").status == 200)
        let log = try Self.log(emulator, try #require(stored.apnsID))
        #expect(Self.consoleNames(log) == ["Received", "Accepted", "Stored: device offline", "Discarded: unregistered"])
        #expect(try emulator.metric("apns_emulator_console_states_total", labels: "state=\"Discarded: unregistered\"") == 1)
        #expect(try emulator.admin("GET", "/api/v1/notifications/not-an-id/log").status == 404)
    }
}
