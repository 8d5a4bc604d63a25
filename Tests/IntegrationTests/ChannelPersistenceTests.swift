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
        let first = try EmulatorProcess(["--state-dir", state.path])
        let management = try ChannelClient(first)
        let kept = try management.create(policy: "1")
        let deleted = try management.create(policy: "0")
        #expect(try management.delete(deleted).status == 204)
        let requestID = "5a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
        let sent = try broadcast(try ChannelClient(first, listener: "sandbox"), to: kept, requestID: requestID)
        #expect(sent.status == 200, "\(sent.reason ?? "-")")

        let ports = try first.samePorts()
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
        let ports2 = try second.samePorts()
        second.crash()
        let third = try EmulatorProcess(["--state-dir", state.path] + ports2)
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
}
