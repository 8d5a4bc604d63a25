import Foundation
import JSON
import ProviderClient
import Testing
import TestSupport

/// `--stored-survivor`: which of the notifications sent to an offline device's app is the one
/// kept (Apple: "in a non-deterministic way"; by default the newest).
@Suite struct StoredSurvivorTests {
    /// Six pushes to an offline virtual device, then it comes back: the index (0–5) of the one
    /// delivered, after checking that the other five were coalesced.
    static func survivor(_ arguments: [String]) throws -> Int {
        let emulator = try EmulatorProcess(arguments)
        // A fixed device id: the choice depends on the seed, the device, the app and the count.
        let created = try emulator.admin(
            "POST", "/api/v1/devices", body: ["bundleId": "com.example.app", "environment": "sandbox", "deviceId": "survivor-phone"])
        let device = (deviceID: "survivor-phone", token: created.json["token"]?.stringValue ?? "")
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(device.deviceID)", body: ["online": false]).status == 200)
        let connection = try emulator.connect()
        var ids: [String] = []
        for index in 0..<6 {
            var push = try emulator.push(device.token, payload: #"{"aps":{"alert":"number \#(index)"}}"#)
            push.apnsID = UUID().uuidString
            ids.append(push.apnsID!)
            #expect(APNsResult(try connection.send(push.request)).status == 200)
        }
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(device.deviceID)", body: ["online": true]).status == 200)
        var outcomes: [String: String] = [:]
        _ = try eventually {
            outcomes = [:]
            for record in try emulator.notifications(token: device.token) {
                outcomes[record["apnsId"]?.stringValue ?? ""] = record["outcome"]?.stringValue
            }
            return outcomes.values.filter { $0 == "coalesced" }.count == 5 && outcomes.count == 6
                && !outcomes.values.contains("stored")
        }
        let kept = ids.indices.filter { outcomes[ids[$0]] != "coalesced" }
        #expect(kept.count == 1, "\(outcomes)")
        return kept.first ?? -1
    }

    @Test func byDefaultTheNewestIsKept() throws {
        #expect(try Self.survivor([]) == 5)
    }

    /// One seed keeps the same notification every time; some seeds keep an older one, which a
    /// provider that counts on newest-wins would not expect.
    @Test func aSeededRandomChoiceIsRepeatableAndNotAlwaysTheNewest() throws {
        let first = try Self.survivor(["--stored-survivor", "random:11"])
        #expect(try Self.survivor(["--stored-survivor", "random:11"]) == first)
        var kept: Set<Int> = [first]
        for seed in 1...5 { kept.insert(try Self.survivor(["--stored-survivor", "random:\(seed)"])) }
        #expect(kept.contains { $0 != 5 }, "every seed kept the newest: \(kept)")
    }

    @Test func aBadValueIsAUsageError() throws {
        for value in ["oldest", "random:x", "random:-1"] {
            let result = try run(EmulatorProcess.binary, ["serve", "--stored-survivor", value])
            #expect(result.status == 2, "\(value)")
            #expect(result.err.contains("--stored-survivor"), "\(value): \(result.err)")
        }
    }
}
