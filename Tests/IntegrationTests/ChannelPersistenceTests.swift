// ChannelPersistenceTests: broadcast channels survive kill -9 with --state-dir and are shared
// by instances on one Redis (--redis), against the real binary with our own HTTP/2 client.
import APNsCore
import Foundation
import HTTP2
import ProviderClient
import RedisTestSupport
import Testing
import TestSupport

/// A provider of channel requests on one connection (as in ChannelTests).
private struct ChannelClient {
    let emulator: EmulatorProcess
    let connection: HTTP2ClientConnection

    init(_ emulator: EmulatorProcess, listener: String = "channelSandbox") throws {
        self.emulator = emulator
        connection = try emulator.connect(listener)
    }

    func send(_ method: String, _ path: String, headers: [(String, String)] = [], body: String? = nil) throws -> HTTP2Response {
        var fields = [HTTP2HeaderField(name: "authorization", value: "bearer \(try emulator.providerToken())")]
        fields += headers.map { HTTP2HeaderField(name: $0.0, value: $0.1) }
        return try connection.send(ClientRequest(method: method, path: path, headers: fields, body: body.map { Array($0.utf8) }))
    }

    func create(policy: String) throws -> String {
        let created = try send(
            "POST", "/1/apps/\(EmulatorProcess.bundleID)/channels",
            body: #"{"message-storage-policy": \#(policy), "push-type": "LiveActivity"}"#)
        guard created.status == 201, let id = created.header("apns-channel-id") else {
            throw HarnessError("channel not created: \(created.status ?? 0) \(created.reason ?? "-")")
        }
        return id
    }

    func read(_ id: String) throws -> HTTP2Response {
        try send("GET", "/1/apps/\(EmulatorProcess.bundleID)/channels", headers: [("apns-channel-id", id)])
    }

    func list() throws -> [String] {
        let reply = try send("GET", "/1/apps/\(EmulatorProcess.bundleID)/all-channels")
        return try JSONValue.parse(reply.body).objectValue?["channels"]?.arrayValue?.compactMap(\.stringValue) ?? []
    }

    func delete(_ id: String) throws -> HTTP2Response {
        try send("DELETE", "/1/apps/\(EmulatorProcess.bundleID)/channels", headers: [("apns-channel-id", id)])
    }
}

/// A broadcast on a push listener ("sandbox"), policy 1 (stored, expiring in an hour).
private func broadcast(_ client: ChannelClient, to id: String, requestID: String) throws -> HTTP2Response {
    let expiration = String(Int(Date().timeIntervalSince1970) + 3600)
    return try client.send(
        "POST", "/4/broadcasts/apps/\(EmulatorProcess.bundleID)",
        headers: [
            ("apns-channel-id", id), ("apns-push-type", "LiveActivity"), ("apns-priority", "10"),
            ("apns-expiration", expiration), ("apns-request-id", requestID),
        ],
        body: #"{"aps":{"event":"update","timestamp":1700000000,"content-state":{"eta":5}}}"#)
}

extension HTTP2Response {
    fileprivate func header(_ name: String) -> String? { headers.first { $0.name == name }?.value }
    fileprivate var reason: String? {
        (try? JSONValue.parse(body))?.objectValue?["reason"]?.stringValue
    }
}

/// The admin API's channel with this id (`GET /api/v1/channels`).
private func adminChannel(_ emulator: EmulatorProcess, _ id: String) throws -> JSONValue? {
    try emulator.admin("GET", "/api/v1/channels").json["channels"]?.arrayValue?.first { $0["id"]?.stringValue == id }
}

@Suite("Broadcast channels across restarts (--state-dir) and instances (--redis)")
struct ChannelPersistenceTests {
    @Test func channelsAndTheStoredMessageSurviveKill9() throws {
        let state = try StateDirectory()
        let ports = try EmulatorProcess.restartablePorts()
        let first = try EmulatorProcess(["--state-dir", state.path] + ports)
        let management = try ChannelClient(first)
        let kept = try management.create(policy: "1")
        let deleted = try management.create(policy: "0")
        #expect(try management.delete(deleted).status == 204)
        let requestID = "5a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
        let sent = try broadcast(try ChannelClient(first, listener: "sandbox"), to: kept, requestID: requestID)
        #expect(sent.status == 200, "\(sent.reason ?? "-")")

        first.crash()
        let second = try EmulatorProcess(["--state-dir", state.path] + ports)
        let after = try ChannelClient(second)
        #expect(try after.list() == [kept])
        let read = try after.read(kept)
        #expect(read.status == 200)
        #expect(try JSONValue.parse(read.body).objectValue?["message-storage-policy"]?.intValue == 1)
        let gone = try after.read(deleted)
        #expect(gone.status == 400 && gone.reason == "ChannelNotRegistered")

        let shown = try #require(try adminChannel(second, kept))
        #expect(shown["broadcasts"]?.intValue == 1)
        #expect(shown["storedMessage"]?["requestId"]?.stringValue == requestID)
        #expect(shown["storedMessage"]?["payload"]?["aps"]?["event"]?.stringValue == "update")
        #expect(try adminChannel(second, deleted)?["live"]?.boolValue == false, "the deleted channel is kept as a tombstone")
        // A broadcast after the restart carries on counting.
        #expect(try broadcast(try ChannelClient(second, listener: "sandbox"), to: kept, requestID: UUID().uuidString.lowercased()).status == 200)
        #expect(try adminChannel(second, kept)?["broadcasts"]?.intValue == 2)

        // A reset empties them, and they stay empty after the next restart.
        #expect(try second.admin("POST", "/api/v1/reset").status == 200)
        second.crash()
        let third = try EmulatorProcess(["--state-dir", state.path] + ports)
        #expect(try ChannelClient(third).list().isEmpty)
        #expect(try third.admin("GET", "/api/v1/channels").json["channels"]?.arrayValue?.isEmpty == true)
    }

    @Test(.requires(.redisServer))
    func aChannelMadeOnOneInstanceIsUsedOnAnother() throws {
        let redis = try RedisServerProcess()
        let shared = FileManager.default.temporaryDirectory.appendingPathComponent("apns-channels-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: shared) }
        let a = try EmulatorProcess(["--redis", redis.url], sharedDirectory: shared)
        let b = try EmulatorProcess(["--redis", redis.url], sharedDirectory: shared)

        let onA = try ChannelClient(a)
        let id = try onA.create(policy: "1")
        let onB = try ChannelClient(b)
        #expect(try onB.read(id).status == 200)
        #expect(try onB.list() == [id])
        let requestID = "7c6b5a49-3827-4165-9c4d-3e2f1a0b9c8d"
        let sent = try broadcast(try ChannelClient(b, listener: "sandbox"), to: id, requestID: requestID)
        #expect(sent.status == 200, "\(sent.reason ?? "-")")
        // A's copy follows: the broadcast B took is counted there, its message stored.
        try eventually("A sees B's broadcast") {
            try adminChannel(a, id)?["storedMessage"]?["requestId"]?.stringValue == requestID
        }
        // Deleted on B: gone on A too.
        #expect(try onB.delete(id).status == 204)
        let gone = try onA.read(id)
        #expect(gone.status == 400 && gone.reason == "ChannelNotRegistered")
    }

    /// The state directory's files may not grow (prlimit, as for device pushes): channel
    /// requests get 503 or no answer, never a 201 that is not on disk; once the limit is lifted
    /// the emulator serves again, and after kill -9 every channel it answered 201 is there.
    @Test func everyChannelAnswered201ThroughAFailingStoreSurvivesKill9() throws {
        let state = try StateDirectory()
        let flags = ["--state-dir", state.path]
        let ports = try EmulatorProcess.restartablePorts()
        let first = try EmulatorProcess(flags + ports)
        let pid = String(first.process.processIdentifier)
        let database = state.path + "/state.sqlite"
        let biggest =
            [database, database + "-wal"].compactMap { (try? FileManager.default.attributesOfItem(atPath: $0)[.size] as? Int) ?? nil }
            .max() ?? 0
        let limited = try run("/usr/bin/prlimit", ["--pid", pid, "--fsize=\(biggest + 65_536):unlimited"])
        try #require(limited.status == 0, "prlimit: \(limited.err)")

        var created: [String] = []
        var (unavailable, unanswered, other) = (0, 0, [Int]())
        var client = try ChannelClient(first)
        let deadline = Date().addingTimeInterval(60)
        while unavailable < 5, Date() < deadline {
            do {
                let reply = try client.send(
                    "POST", "/1/apps/\(EmulatorProcess.bundleID)/channels", body: #"{"message-storage-policy": 1, "push-type": "LiveActivity"}"#)
                switch reply.status {
                case 201?: created.append(reply.header("apns-channel-id") ?? "")
                case 503?: unavailable += 1
                default: other.append(reply.status ?? 0)
                }
            } catch {
                unanswered += 1  // the connection was closed: the answer was not committed
                client = try ChannelClient(first)
            }
        }
        print("channels through a failing store: \(created.count) answered 201, \(unavailable) 503, \(unanswered) unanswered")
        #expect(unavailable >= 5, "the failing store is noticed")
        #expect(other.isEmpty, "\(other)")
        _ = try run("/usr/bin/prlimit", ["--pid", pid, "--fsize=unlimited:unlimited"])
        #expect(try eventually(15) { try first.metric("apns_emulator_state_up") == 1 }, "serves again by itself")
        created.append(try ChannelClient(first).create(policy: "0"))

        first.crash()
        let second = try EmulatorProcess(flags + ports)
        let kept = Set(try ChannelClient(second).list())
        let missing = created.filter { !kept.contains($0) }
        #expect(missing.isEmpty, "every 201 is on disk: \(missing.count) of \(created.count) missing")
    }

    /// Redis restarted without its data under two instances: once the newest copy is written
    /// back, the channels (and a policy-1 channel's stored message) are there on both.
    @Test(.requires(.redisServer))
    func channelsComeBackWhenRedisRestartsEmpty() throws {
        let cluster = try EmulatorCluster(count: 2, persistent: false)
        let (a, b) = (cluster.instances[0], cluster.instances[1])
        let id = try ChannelClient(a).create(policy: "1")
        let requestID = "5d4c3b2a-1908-4766-9544-332211009988"
        #expect(try broadcast(try ChannelClient(b, listener: "sandbox"), to: id, requestID: requestID).status == 200)
        try eventually("A has B's broadcast") { try adminChannel(a, id)?["storedMessage"]?["requestId"]?.stringValue == requestID }

        try cluster.redis.restart()
        #expect(try eventually(10) { try a.admin("GET", "/readyz").json["reason"]?.stringValue?.contains("lost") == true })
        #expect(try eventually(20) { try a.admin("GET", "/readyz").status == 200 && b.admin("GET", "/readyz").status == 200 })
        for emulator in [a, b] {
            #expect(try ChannelClient(emulator).read(id).status == 200, "the channel is back")
            #expect(try adminChannel(emulator, id)?["storedMessage"]?["requestId"]?.stringValue == requestID, "with its stored message")
        }
    }
}
