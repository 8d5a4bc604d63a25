import APNsCore
import Foundation
import ProviderClient
import Testing
import TestSupport

@Suite("Load-test support: batch devices, run summary, latency histograms")
struct LoadTests {
    @Test func aBatchCreatesManyDevicesAtOnceAllOrNothing() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let reply = try emulator.admin(
            "POST", "/api/v1/devices/batch",
            body: ["bundleId": .string(EmulatorProcess.bundleID), "environment": "sandbox", "count": 2000, "idPrefix": "load-"])
        #expect(reply.status == 201)
        let devices = try #require(reply.json["devices"]?.arrayValue)
        #expect(devices.count == 2000)
        #expect(devices.first?["deviceId"] == "load-1" && devices.last?["deviceId"] == "load-2000")
        let tokens = Set(devices.compactMap { $0["token"]?.stringValue })
        #expect(tokens.count == 2000, "every device has its own token")
        // Each token works.
        let last = try #require(devices.last?["token"]?.stringValue)
        #expect(APNsResult(try emulator.connect().send(try emulator.push(last).request)).status == 200)
        #expect(try emulator.admin("GET", "/api/v1/devices/load-1500").json["apps"]?.arrayValue?.first?["token"] != nil)
        // A clash with an existing id leaves nothing half made.
        let clash = try emulator.admin(
            "POST", "/api/v1/devices/batch",
            body: ["bundleId": .string(EmulatorProcess.bundleID), "environment": "sandbox", "count": 3000, "idPrefix": "load-"])
        #expect(clash.status == 409)
        #expect(try emulator.admin("GET", "/api/v1/devices/load-2001").status == 404)
        for bad: JSONValue in [
            ["bundleId": "com.example.app", "environment": "sandbox", "count": 0],
            ["bundleId": "com.example.app", "environment": "sandbox", "count": 100_001],
            ["bundleId": "com.example.app", "environment": "sandbox", "count": 5, "token": "ab"],
            ["bundleId": "com.example.app", "environment": "sandbox", "count": 5, "idPrefix": "bad prefix"],
            ["bundleId": "com.example.app", "count": 5],
        ] {
            #expect(try emulator.admin("POST", "/api/v1/devices/batch", body: bad).status == 400, "\(bad)")
        }
    }

    @Test func theRunSummaryAndTheHistogramsCountWhatHappened() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try DeviceProcess(emulator, deviceID: "phone")
        let token = try device.registeredToken()
        let since = Int64(Date().timeIntervalSince1970 * 1000) - 1
        let connection = try emulator.connect()
        var pushes = (0..<20).map { _ in try! emulator.push(token).request }
        pushes.append(try emulator.push("00ff").request)  // BadDeviceToken
        let answers = try connection.send(pushes).map(APNsResult.init)
        #expect(answers.filter { $0.status == 200 }.count == 20)
        for _ in 0..<20 { #expect(device.next("notification") != nil) }
        #expect(
            try eventually { try emulator.metric("apns_emulator_delivery_latency_seconds_count") == 20 },
            "each ack is one delivery-latency sample")
        let stats = try emulator.admin("GET", "/api/v1/stats?since=\(since)")
        #expect(stats.status == 200)
        #expect(stats.json["requests"] == 21)
        #expect(stats.json["byStatus"]?["200"] == 20 && stats.json["byStatus"]?["400"] == 1)
        #expect(stats.json["byReason"]?["BadDeviceToken"] == 1)
        #expect(try eventually { try emulator.admin("GET", "/api/v1/stats?since=\(since)").json["deliveryLatencyMs"]?["count"] == 20 })
        #expect(stats.json["providerConnections"]?.intValue ?? 0 >= 1)
        #expect(stats.json["deviceConnections"] == 1)
        #expect(try emulator.admin("GET", "/api/v1/stats?since=\(Int64(Date().timeIntervalSince1970 * 1000) + 60_000)").json["requests"] == 0)
        #expect(try emulator.admin("GET", "/api/v1/stats?since=yesterday").status == 400)
        // The histograms are well formed: cumulative buckets ending at the count.
        let text = try emulator.admin("GET", "/metrics").raw
        for name in ["apns_emulator_request_duration_seconds", "apns_emulator_delivery_latency_seconds", "apns_emulator_payload_bytes"] {
            let buckets = text.split(separator: "\n").filter { $0.hasPrefix(name + "_bucket{") }.compactMap {
                Double($0.split(separator: " ").last ?? "")
            }
            #expect(!buckets.isEmpty && buckets == buckets.sorted(), "\(name) buckets are cumulative")
            #expect(buckets.last == (try emulator.metric(name + "_count")), "\(name): +Inf bucket equals the count")
        }
        #expect(try emulator.metric("apns_emulator_payload_bytes_count") == 21)
        #expect(try emulator.metric("apns_emulator_requests_by_topic_total", labels: #"topic="com.example.app""#) == 21)
    }

    @Test func aConfigFileCanStartWithAPopulation() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apns-population-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("config.json").path
        let config: JSONValue = [
            "devices": [["count": 500, "idPrefix": "cfg-", "bundleId": .string(EmulatorProcess.bundleID), "environment": "sandbox"]]
        ]
        try Data(config.serialized().utf8).write(to: URL(fileURLWithPath: path))
        let emulator = try EmulatorProcess(["--config", path], inProcess: true)
        #expect(try emulator.admin("GET", "/api/v1/devices/cfg-500").status == 200)
        #expect(try emulator.admin("GET", "/api/v1/devices/cfg-501").status == 404)
        #expect(try emulator.admin("GET", "/api/v1/info").json["counts"]?["devices"]?.intValue ?? 0 >= 500)
    }
}
