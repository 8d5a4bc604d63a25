import APNsCore
import Foundation
import Glibc
import HTTP2
import Locking
import OpenSSLCrypto
import ProviderClient
import Synchronization
import Testing
import TestSupport

/// A state directory outside any one emulator's temporary directory, so it outlives them.
final class StateDirectory {
    let path: String
    init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("apns-emulator-state-\(UUID().uuidString)").path
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

extension EmulatorProcess {
    /// Listen flags for an emulator that a test kills and starts again in place: ports outside
    /// the kernel's ephemeral range (`freePortOutsideEphemeralRange`), so that no other suite's
    /// `127.0.0.1:0` takes one between the kill and the restart. Pass the same flags to both.
    static func restartablePorts() throws -> [String] {
        var flags: [String] = []
        var taken: Set<Int> = []
        for flag in ["--sandbox-listen", "--production-listen", "--admin-listen", "--device-listen"] {
            var port = try freePortOutsideEphemeralRange()
            while taken.contains(port) { port = try freePortOutsideEphemeralRange() }
            taken.insert(port)
            flags += [flag, "127.0.0.1:\(port)"]
        }
        return flags
    }

    /// kill -9: no shutdown, no flush.
    func crash() {
        // Clients still writing to the dead emulator must not raise SIGPIPE in the test process.
        signal(SIGPIPE, SIG_IGN)
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    func record(_ apnsID: String) throws -> JSONValue? {
        let reply = try admin("GET", "/api/v1/notifications/\(apnsID)")
        return reply.status == 200 ? reply.json : nil
    }
}

final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    func add() { value.add(1, ordering: .relaxed) }
    var count: Int { value.load(ordering: .relaxed) }
}

/// Pushes `total` notifications over one connection with up to `window` in flight until the
/// connection dies; returns the apns-ids answered 200, counting each answer in `answered`.
func pushUntilCut(
    _ emulator: EmulatorProcess, push: APNsPush, total: Int, window: Int = 100, answered: Counter,
    started: Counter
) -> [String] {
    var ok: [String] = []
    guard let connection = try? emulator.connect() else {
        started.add()
        return ok
    }
    // One stream until the provider token is accepted (as Apple does), then the window.
    guard let first = try? connection.send(push.request), APNsResult(first).status == 200 else {
        started.add()
        return ok
    }
    ok.append(APNsResult(first).apnsID ?? "")
    answered.add()
    started.add()
    var inFlight = Set<Int32>()
    var sent = 1
    while sent < total || !inFlight.isEmpty {
        while inFlight.count < window && sent < total, let id = try? connection.submit(push.request) {
            inFlight.insert(id)
            sent += 1
        }
        do {
            try connection.pump(timeoutMilliseconds: 5000) {
                var progress = false
                for id in inFlight {
                    guard let response = connection.response(for: id) else { continue }
                    inFlight.remove(id)
                    progress = true
                    let result = APNsResult(response)
                    if result.status == 200, let apnsID = result.apnsID {
                        ok.append(apnsID)
                        answered.add()
                    }
                }
                return progress
            }
        } catch {
            break
        }
        if connection.isClosed { break }
    }
    return ok
}

@Suite("State across restarts (--state-dir, kill -9, the real binary)")
struct StateDirTests {
    @Test func devicesTokensStoredNotificationsKeysAndTheJournalSurviveKill9() throws {
        let state = try StateDirectory()
        let ports = try EmulatorProcess.restartablePorts()
        let first = try EmulatorProcess(["--state-dir", state.path] + ports)

        // A device process that stays connected through the crash, with a delivered push.
        let steady = try DeviceProcess(first, deviceID: "steady-phone")
        let steadyToken = try steady.registeredToken()
        let connection = try first.connect()
        let delivered = APNsResult(try connection.send(try first.push(steadyToken, payload: #"{"aps":{"alert":"before"}}"#).request))
        #expect(delivered.status == 200)
        #expect(steady.next("notification")?["apnsId"]?.stringValue == delivered.apnsID)
        #expect(try eventually { try first.record(delivered.apnsID!)?["outcome"] == "delivered" })

        // A device process that goes offline: its push is stored.
        let away = try DeviceProcess(first, deviceID: "away-phone")
        let awayToken = try away.registeredToken()
        away.command("offline")
        #expect(away.next("offline") != nil)
        let stored = APNsResult(try connection.send(try first.push(awayToken, payload: #"{"aps":{"alert":"stored"}}"#).request))
        #expect(stored.status == 200)
        #expect(try first.record(stored.apnsID!)?["outcome"] == "stored")

        // An uninstalled app: 410 with the uninstall time from now on.
        let (gone, goneToken) = try first.createDevice()
        let uninstall = try first.admin("DELETE", "/api/v1/devices/\(gone)/apps/\(EmulatorProcess.bundleID)")
        let unregisteredAt = try #require(uninstall.json["unregisteredAt"]?.intValue)

        // A key and an app added at run time, with a device for the app.
        let runtimeKey = try ES256PrivateKey.generate()
        let addKey = try first.admin(
            "POST", "/api/v1/keys",
            body: [
                "teamId": "RUNTEAM001", "keyId": "RUNKEY0001", "pem": .string(runtimeKey.pkcs8PEM),
            ])
        #expect(addKey.status == 201)
        #expect(try first.admin("POST", "/api/v1/apps", body: ["teamId": "RUNTEAM001", "bundleId": "com.example.runtime"]).status == 201)
        let (_, runtimeToken) = try first.createDevice(bundleID: "com.example.runtime")

        first.crash()
        let second = try EmulatorProcess(["--state-dir", state.path] + ports)

        // The connected device comes back by itself, with the same token.
        #expect(steady.next("disconnected", timeout: 10) != nil)
        #expect(try steady.registeredToken() == steadyToken)
        // The offline one, once online: same token, and the stored notification.
        away.command("online")
        #expect(try away.registeredToken() == awayToken)
        let event = try #require(away.next("notification", timeout: 10))
        #expect(event["apnsId"]?.stringValue == stored.apnsID)
        #expect(event["stored"] == true)
        #expect(try eventually { try second.record(stored.apnsID!)?["outcome"] == "delivered" })

        // The uninstalled token: 410 with the original timestamp.
        let again = try second.connect()
        let unregistered = APNsResult(try again.send(try second.push(goneToken).request))
        #expect(unregistered.status == 410)
        #expect(unregistered.timestampMs == unregisteredAt)

        // The runtime key still signs for the runtime app.
        let signer = ProviderSigningKey(teamID: "RUNTEAM001", keyID: "RUNKEY0001", privateKey: runtimeKey)
        let runtimePush = APNsPush(
            token: runtimeToken, topic: "com.example.runtime", payload: Array(#"{"aps":{"alert":"rt"}}"#.utf8),
            providerToken: try signer.token(issuedAt: Int64(Date().timeIntervalSince1970)))
        #expect(APNsResult(try second.connect().send(runtimePush.request)).status == 200)

        // The journal from before the crash.
        #expect(try second.record(delivered.apnsID!)?["outcome"] == "delivered")
        #expect(try second.record(delivered.apnsID!)?["payload"]?["aps"]?["alert"] == "before")
        // Pushes after the restart carry on the sequence.
        let sequences = try second.notifications(limit: 100).compactMap { $0["sequence"]?.intValue }
        #expect(Set(sequences).count == sequences.count, "no sequence number twice")
    }

    /// The clock moved ahead stays ahead after a crash (an uninstall made an hour ahead stays
    /// in the past: 410, not 200, and the journal's times do not go back), and the checks that
    /// failed still fail: an ignored push is in the journal kept.
    @Test func theMovedClockAndFailedChecksSurviveACrash() throws {
        let state = try StateDirectory()
        let ports = try EmulatorProcess.restartablePorts()
        let first = try EmulatorProcess(["--state-dir", state.path] + ports)
        let hour: Int64 = 3_600_000
        #expect(try first.admin("POST", "/api/v1/clock", body: ["advanceSeconds": 3600]).json["offsetMs"]?.intValue == hour)
        let (gone, goneToken) = try first.createDevice()
        let unregisteredAt = try #require(
            try first.admin("DELETE", "/api/v1/devices/\(gone)/apps/\(EmulatorProcess.bundleID)").json["unregisteredAt"]?.intValue)
        let before = APNsResult(try first.connect().send(try first.push(goneToken).request))
        #expect(before.status == 410 && before.timestampMs == unregisteredAt)

        // A Live Activity start for a type the app does not declare: answered 200, ignored.
        let (deviceID, _) = try first.createDevice()
        let declared = try first.admin(
            "PUT", "/api/v1/devices/\(deviceID)/apps/\(EmulatorProcess.bundleID)/live-activities", body: ["types": ["DeliveryAttributes"]])
        let startToken = try #require(declared.json["pushToStartTokens"]?["DeliveryAttributes"]?.stringValue)
        let aps =
            #"{"event":"start","timestamp":1700000000,"attributes-type":"PizzaAttributes","attributes":{},"content-state":{},"alert":{"title":"t"}}"#
        var start = try first.push(startToken, payload: #"{"aps":\#(aps)}"#, topic: "\(EmulatorProcess.bundleID).push-type.liveactivity")
        start.pushType = "liveactivity"
        let ignored = APNsResult(try first.connect().send(start.request))
        #expect(ignored.status == 200)
        #expect(try first.record(ignored.apnsID!)?["outcome"] == "ignored")
        #expect(try first.admin("GET", "/api/v1/checks?strict=true").status == 409)
        let lastBefore = try #require(try first.record(ignored.apnsID!)?["receivedAtMs"]?.intValue)

        first.crash()
        let second = try EmulatorProcess(["--state-dir", state.path] + ports)
        #expect(try second.admin("GET", "/api/v1/clock").json["offsetMs"]?.intValue == hour)
        let after = APNsResult(try second.connect().send(try second.push(goneToken).request))
        #expect(after.status == 410, "\(after.status) \(after.reason ?? "")")
        #expect(after.timestampMs == unregisteredAt)
        let firstAfter = try #require(try second.record(after.apnsID!)?["receivedAtMs"]?.intValue)
        #expect(firstAfter >= lastBefore, "the journal's times go on, not back")

        let checks = try second.admin("GET", "/api/v1/checks?strict=true")
        #expect(checks.status == 409)
        #expect(checks.json["ignoredPushes"]?.intValue == 1)
        let finding = try #require(checks.json["failures"]?.arrayValue?.first)
        #expect(finding["apnsId"]?.stringValue == ignored.apnsID)
        #expect(finding["message"]?.stringValue?.contains("PizzaAttributes") == true, "\(finding)")

        // A reset puts the clock back, also for the next start.
        #expect(try second.admin("POST", "/api/v1/reset").status == 200)
        second.crash()
        let third = try EmulatorProcess(["--state-dir", state.path] + ports)
        #expect(try third.admin("GET", "/api/v1/clock").json["offsetMs"]?.intValue == 0)
        #expect(try third.admin("GET", "/api/v1/checks?strict=true").status == 200)
    }

    @Test func aResetAlsoResetsTheStateDirectory() throws {
        let state = try StateDirectory()
        let ports = try EmulatorProcess.restartablePorts()
        let first = try EmulatorProcess(["--state-dir", state.path] + ports)
        let (device, token) = try first.createDevice()
        #expect(APNsResult(try first.connect().send(try first.push(token).request)).status == 200)
        #expect(try first.admin("POST", "/api/v1/reset").status == 200)
        first.crash()
        let second = try EmulatorProcess(["--state-dir", state.path] + ports)
        #expect(try second.admin("GET", "/api/v1/devices/\(device)").status == 404)
        #expect(try second.notifications().isEmpty)
        #expect(try second.admin("GET", "/api/v1/tokens/\(token)").status == 404)
    }

    /// A bundle the state gives to another team than the configuration does stays with the
    /// state's team (docs/state.md), and the start says so: the configured team's pushes to it
    /// are refused.
    @Test func aConfiguredAppKeptByAnotherTeamIsSaidAtStart() throws {
        let state = try StateDirectory()
        let ports = try EmulatorProcess.restartablePorts()
        let first = try EmulatorProcess(["--state-dir", state.path] + ports)
        #expect(try first.admin("DELETE", "/api/v1/apps/\(EmulatorProcess.bundleID)").status == 200)
        let moved = try first.admin("POST", "/api/v1/apps", body: ["teamId": "OTHERTEAM1", "bundleId": .string(EmulatorProcess.bundleID)])
        #expect(moved.status == 201, "\(moved.raw)")
        first.crash()
        let second = try EmulatorProcess(["--state-dir", state.path] + ports)
        #expect(
            second.stderr.contains(
                "app \(EmulatorProcess.bundleID) belongs to team OTHERTEAM1 in \(state.path), not to team \(EmulatorProcess.teamID) as configured"),
            "\(second.stderr)")
        let (_, token) = try second.createDevice()
        #expect(APNsResult(try second.connect().send(try second.push(token).request)).reason == "TopicDisallowed")
    }

    /// A token pinned in the config file and changed there: the kept device keeps the state's
    /// token (docs/state.md), and the start says so, since a push to the newly pinned one gets
    /// 400 BadDeviceToken. Before, nothing was logged.
    @Test func aPinnedTokenChangedInTheConfigFileIsSaidAtStart() throws {
        let state = try StateDirectory()
        let ports = try EmulatorProcess.restartablePorts()
        let config = state.path + "-config.json"
        defer { try? FileManager.default.removeItem(atPath: config) }
        func pin(_ token: String) throws {
            try
                #"{"devices": [{"deviceId": "pinned-phone", "apps": [{"bundleId": "\#(EmulatorProcess.bundleID)", "environment": "sandbox", "token": "\#(token)"}]}]}"#
                .write(toFile: config, atomically: true, encoding: .utf8)
        }
        let (first, second) = (String(repeating: "a1", count: 32), String(repeating: "b2", count: 32))
        try pin(first)
        let before = try EmulatorProcess(["--state-dir", state.path, "--config", config] + ports)
        #expect(APNsResult(try before.connect().send(try before.push(first).request)).status == 200)
        before.crash()
        try pin(second)
        let after = try EmulatorProcess(["--state-dir", state.path, "--config", config] + ports)
        #expect(
            after.stderr.contains(
                "configured device pinned-phone keeps token \(first) for \(EmulatorProcess.bundleID) as \(state.path) has it, not the pinned \(second)"
            ),
            "\(after.stderr)")
        #expect(APNsResult(try after.connect().send(try after.push(second).request)).reason == "BadDeviceToken")
    }

    /// Settings a kept state outweighs are said at start: fault rules from `--faults`, a journal
    /// over `--max-records`, devices over `--max-devices`.
    @Test func whatTheKeptStateOutweighsIsSaidAtStart() throws {
        let state = try StateDirectory()
        let ports = try EmulatorProcess.restartablePorts()
        let first = try EmulatorProcess(["--state-dir", state.path] + ports)
        var tokens: [String] = []
        for _ in 0..<3 { tokens.append(try first.createDevice().token) }
        let connection = try first.connect()
        for token in tokens { #expect(APNsResult(try connection.send(try first.push(token).request)).status == 200) }
        first.crash()
        let faults = state.path + "-faults.json"
        defer { try? FileManager.default.removeItem(atPath: faults) }
        try #"[{"id":"f1","match":{"topic":"none.example"},"action":{"status":500}}]"#.write(toFile: faults, atomically: true, encoding: .utf8)
        let second = try EmulatorProcess(
            ["--state-dir", state.path, "--max-records", "2", "--max-devices", "1", "--faults", faults] + ports)
        let log = second.stderr
        #expect(log.contains("the 0 fault rule(s) kept in \(state.path) are used, not the 1 configured (--faults)"), "\(log)")
        #expect(log.contains("the journal keeps the newest 2 of the 3 records kept in \(state.path)"), "\(log)")
        #expect(log.contains("holds 3 device(s)"), "\(log)")
        #expect(try second.admin("GET", "/api/v1/faults").json["faults"]?.arrayValue?.isEmpty == true)
    }

    @Test func anUnusableStateDirectoryIsAClearStartupError() throws {
        let state = try StateDirectory()
        _ = FileManager.default.createFile(atPath: state.path, contents: Data("not a directory".utf8))
        let error = #expect(throws: HarnessError.self) { try EmulatorProcess(["--state-dir", state.path]) }
        #expect(error?.description.contains("exists and is not a directory") == true)
        // Below a file: which part of the path is not a directory.
        let below = #expect(throws: HarnessError.self) { try EmulatorProcess(["--state-dir", state.path + "/inner/state"]) }
        #expect(
            below?.description.contains("cannot create the directory: \(state.path) is a file, not a directory") == true,
            "\(below?.description ?? "")")

        let corrupt = try StateDirectory()
        try FileManager.default.createDirectory(atPath: corrupt.path, withIntermediateDirectories: true)
        try Data(repeating: 0x42, count: 4096).write(to: URL(fileURLWithPath: corrupt.path + "/state.sqlite"))
        let corruptError = #expect(throws: HarnessError.self) { try EmulatorProcess(["--state-dir", corrupt.path]) }
        #expect(corruptError?.description.contains("is not an apns-emulator state database or is damaged") == true)
    }

    /// Full-rate pushes, kill -9 in the middle, restart: with `--state-journal-lag 0` every
    /// push answered 200 is in the journal; with a lag of N at most N are missing. Pushes to
    /// an offline device are all accounted for (stored, or coalesced by a newer one).
    @Test(arguments: [0, 300])
    func pushesAnswered200SurviveACrashUnderLoad(lag: Int) throws {
        let state = try StateDirectory()
        let flags = ["--state-dir", state.path, "--state-journal-lag", String(lag), "--max-records", "50000", "--quiet"]
        let ports = try EmulatorProcess.restartablePorts()
        let first = try EmulatorProcess(flags + ports)
        let (_, onlineToken) = try first.createDevice()
        let (offline, offlineToken) = try first.createDevice()
        #expect(try first.admin("PATCH", "/api/v1/devices/\(offline)", body: ["online": false]).status == 200)

        let answered = Counter()
        // Made here: the harness's provider token is not built for concurrent first use.
        let pushes = [try first.push(onlineToken), try first.push(offlineToken)]
        let results = Locked<[(offline: Bool, ids: [String])]>([])
        let started = Counter()
        let finished = Counter()
        // Threads of their own: blocking workers on the shared pool would start one by one.
        for worker in 0..<4 {
            let thread = Thread {
                let offline = worker == 3
                let ids = pushUntilCut(first, push: pushes[offline ? 1 : 0], total: 5000, answered: answered, started: started)
                results.withLock { $0.append((offline, ids)) }
                finished.add()
            }
            thread.start()
        }
        // Crash once every worker runs and a good part has been answered, pushes in flight.
        #expect(try eventually(60) { started.count == 4 && answered.count >= 6000 })
        first.crash()
        #expect(try eventually(30) { finished.count == 4 })

        let second = try EmulatorProcess(flags + ports)
        // 50,000 records, read from disk first: more than the usual 15 s on a busy machine.
        let journal =
            try second.admin("GET", "/api/v1/notifications?status=200&limit=50000", timeoutMilliseconds: 120_000)
            .json["notifications"]?.arrayValue ?? []
        var outcomes: [String: String] = [:]
        for record in journal {
            if let id = record["apnsId"]?.stringValue { outcomes[id] = record["outcome"]?.stringValue ?? "" }
        }
        let all = results.withLock { $0 }
        let answeredIDs = all.flatMap(\.ids)
        let missing = answeredIDs.filter { outcomes[$0] == nil }
        print("per worker: \(all.map { "\($0.offline ? "offline" : "online") \($0.ids.count)" })")
        print(
            "crash under load (lag \(lag)): \(answeredIDs.count) answered 200, \(journal.count) records after the restart, \(missing.count) missing")
        #expect(answeredIDs.count >= 6000)
        if lag == 0 {
            #expect(missing.isEmpty, "every 200 is in the journal")
        } else {
            #expect(missing.count <= lag, "at most --state-journal-lag records missing")
        }
        // Stored notifications are never among the missing: each push to the offline device
        // answered 200 is stored or was replaced in the store by a newer one.
        let offlineIDs = all.filter(\.offline).flatMap(\.ids)
        #expect(!offlineIDs.isEmpty)
        for id in offlineIDs {
            #expect(["stored", "coalesced"].contains(outcomes[id] ?? "missing"), "\(id): \(outcomes[id] ?? "missing")")
        }
        #expect(offlineIDs.filter { outcomes[$0] == "stored" }.count <= 1)
    }
}
