// ChannelTests: the channel management API (its own listeners, and --listen by host name) and
// broadcast sends, against the real binary with our own HTTP/2 client. Imports the harness's
// modules.
import APNsCore
import Foundation
import HTTP2
import ProviderClient
import Testing
import TestSupport

/// A provider of channel requests on one connection.
private struct ChannelClient {
    let emulator: EmulatorProcess
    let connection: HTTP2ClientConnection

    init(emulator: EmulatorProcess, connection: HTTP2ClientConnection) {
        self.emulator = emulator
        self.connection = connection
    }

    init(_ emulator: EmulatorProcess, listener: String = "channelSandbox", serverName: String? = nil) throws {
        self.emulator = emulator
        connection = try emulator.connect(listener, serverName: serverName)
    }

    func send(
        _ method: String, _ path: String, headers: [(String, String)] = [], body: String? = nil, token: String? = nil,
        authority: String? = nil
    ) throws -> HTTP2Response {
        var fields = [HTTP2HeaderField(name: "authorization", value: "bearer \(try token ?? emulator.providerToken())")]
        fields += headers.map { HTTP2HeaderField(name: $0.0, value: $0.1) }
        return try connection.send(
            ClientRequest(method: method, path: path, headers: fields, body: body.map { Array($0.utf8) }, authority: authority))
    }

    func create(policy: String = "1", bundle: String = EmulatorProcess.bundleID) throws -> HTTP2Response {
        try send("POST", "/1/apps/\(bundle)/channels", body: #"{"message-storage-policy": \#(policy), "push-type": "LiveActivity"}"#)
    }
}

extension HTTP2Response {
    fileprivate func header(_ name: String) -> String? { headers.first { $0.name == name }?.value }
    fileprivate var reason: String? {
        (try? JSONValue.parse(body))?.objectValue?["reason"]?.stringValue
    }
}

@Suite("Broadcast channels: the channel management API and broadcast sends")
struct ChannelTests {
    /// A topic-specific key covers an app's channels when it lists the bundle or the app's Live
    /// Activity topic (channels carry nothing else); one listing another topic of it does not.
    @Test func aKeyListingTheLiveActivityTopicCoversTheAppsChannels() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keys-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bundle = EmulatorProcess.bundleID
        let liveActivity = ProviderSigningKey(teamID: EmulatorProcess.teamID, keyID: "LATOPICK01", privateKey: try .generate())
        let voip = ProviderSigningKey(teamID: EmulatorProcess.teamID, keyID: "VOIPTOPK01", privateKey: try .generate())
        try liveActivity.privateKey.pkcs8PEM.write(toFile: directory + "/la.p8", atomically: true, encoding: .utf8)
        try voip.privateKey.pkcs8PEM.write(toFile: directory + "/voip.p8", atomically: true, encoding: .utf8)
        let emulator = try EmulatorProcess([
            "--auth-key", "\(EmulatorProcess.teamID):LATOPICK01:\(directory)/la.p8?topics=\(bundle).push-type.liveactivity",
            "--auth-key", "\(EmulatorProcess.teamID):VOIPTOPK01:\(directory)/voip.p8?topics=\(bundle).voip",
        ])
        let now = Int64(Date().timeIntervalSince1970)
        let covered = try ChannelClient(emulator).send(
            "POST", "/1/apps/\(bundle)/channels", body: #"{"message-storage-policy": 0, "push-type": "LiveActivity"}"#,
            token: try liveActivity.token(issuedAt: now))
        #expect(covered.status == 201, "\(covered.reason ?? "")")
        let other = try ChannelClient(emulator).send("GET", "/1/apps/\(bundle)/all-channels", token: try voip.token(issuedAt: now))
        #expect(other.status == 403 && other.reason == "TopicMismatch")
    }

    @Test func aChannelIsCreatedReadListedAndDeleted() throws {
        let emulator = try EmulatorProcess()
        let client = try ChannelClient(emulator)
        let requestID = "0b7a9c1e-5d3f-4a2b-8c6d-1e2f3a4b5c6d"
        let created = try client.send(
            "POST", "/1/apps/\(EmulatorProcess.bundleID)/channels", headers: [("apns-request-id", requestID)],
            body: #"{"message-storage-policy": 1, "push-type": "LiveActivity"}"#)
        #expect(created.status == 201)
        #expect(created.header("apns-request-id") == requestID)
        #expect(created.body.isEmpty)
        let id = try #require(created.header("apns-channel-id"))
        #expect(ChannelDirectory.isWellFormedID(id) && id.hasSuffix("="), "\(id) is not padded base64")

        let read = try client.send("GET", "/1/apps/\(EmulatorProcess.bundleID)/channels", headers: [("apns-channel-id", id)])
        #expect(read.status == 200)
        let readJSON = try JSONValue.parse(read.body)
        #expect(readJSON.objectValue?["message-storage-policy"]?.intValue == 1)
        #expect(readJSON.objectValue?["push-type"]?.stringValue == "LiveActivity")
        #expect(read.header("content-type") == "application/json")
        // Generated request ids are lower-case UUIDs.
        let generated = try #require(read.header("apns-request-id"))
        #expect(CanonicalUUID.isValid(Substring(generated)) && generated == generated.lowercased())

        let second = try #require(try client.create(policy: "0").header("apns-channel-id"))
        let list = try client.send("GET", "/1/apps/\(EmulatorProcess.bundleID)/all-channels")
        #expect(list.status == 200)
        let ids = try JSONValue.parse(list.body).objectValue?["channels"]?.arrayValue?.compactMap(\.stringValue)
        #expect(Set(ids ?? []) == [id, second])

        let deleted = try client.send("DELETE", "/1/apps/\(EmulatorProcess.bundleID)/channels", headers: [("apns-channel-id", id)])
        #expect(deleted.status == 204)
        #expect(deleted.header("apns-request-id") != nil)
        let gone = try client.send("GET", "/1/apps/\(EmulatorProcess.bundleID)/channels", headers: [("apns-channel-id", id)])
        #expect(gone.status == 400 && gone.reason == "ChannelNotRegistered")
        let after = try client.send("GET", "/1/apps/\(EmulatorProcess.bundleID)/all-channels")
        #expect(try JSONValue.parse(after.body).objectValue?["channels"]?.arrayValue?.compactMap(\.stringValue) == [second])
    }

    /// Every documented management refusal, one request each, with Apple's status and reason.
    @Test func managementRequestsAreRefusedWithApplesReasons() throws {
        let emulator = try EmulatorProcess()
        let client = try ChannelClient(emulator)
        let app = "/1/apps/\(EmulatorProcess.bundleID)"
        let id = try #require(try client.create().header("apns-channel-id"))
        let cases: [(String, String, [(String, String)], String?, Int, String)] = [
            ("GET", "\(app)/channels", [], nil, 400, "MissingChannelId"),
            ("GET", "\(app)/channels", [("apns-channel-id", "not base64!")], nil, 400, "BadChannelId"),
            ("DELETE", "\(app)/channels", [("apns-channel-id", "dW5rbm93bi1jaGFubmVs")], nil, 400, "ChannelNotRegistered"),
            ("POST", "\(app)/channels", [], #"{"message-storage-policy": 1, "push-type": "LiveActivity", "name": "x"}"#, 400, "BadRequestParams"),
            ("POST", "\(app)/channels", [], #"{"message-storage-policy": 1"#, 400, "BadRequestPayload"),
            ("POST", "\(app)/channels", [], nil, 400, "PayloadEmpty"),
            ("POST", "\(app)/channels", [], #"{"message-storage-policy": 1}"#, 400, "MissingPushType"),
            ("POST", "\(app)/channels", [], #"{"message-storage-policy": 1, "push-type": "alert"}"#, 400, "InvalidPushType"),
            ("POST", "\(app)/channels", [], #"{"message-storage-policy": 2, "push-type": "LiveActivity"}"#, 400, "BadRequestParams"),
            // Longer than the emulator reads: too large, not "not JSON" (valid JSON padded).
            (
                "POST", "\(app)/channels", [], #"{"message-storage-policy": 1, "push-type": "LiveActivity"}"# + String(repeating: " ", count: 6000),
                413, "PayloadTooLarge"
            ),
            ("PUT", "\(app)/channels", [], nil, 405, "MethodNotAllowed"),
            ("POST", "\(app)/all-channels", [], nil, 405, "MethodNotAllowed"),
            // A channel id in the path (as one released client sends) is not Apple's API.
            ("GET", "\(app)/channels/\(id)", [], nil, 404, "BadPath"),
            ("POST", "/3/device/\(String(repeating: "ab", count: 32))", [], "{}", 404, "BadPath"),
            ("GET", "/1/apps/com.other.app/all-channels", [], nil, 403, "TopicMismatch"),
            ("GET", "\(app)/channels", [("apns-request-id", "nope")], nil, 400, "BadMessageId"),
        ]
        for (method, path, headers, body, status, reason) in cases {
            let response = try client.send(method, path, headers: headers, body: body)
            #expect(
                response.status == status && response.reason == reason,
                "\(method) \(path) \(headers): \(response.status ?? 0) \(response.reason ?? "-")")
            #expect(response.header("apns-request-id") != nil)
            #expect(response.header("content-type") == "application/json")
        }
        // Without a provider token.
        let anonymous = try client.connection.send(ClientRequest(method: "GET", path: "\(app)/all-channels"))
        #expect(anonymous.status == 403 && anonymous.reason == "MissingProviderToken")
    }

    @Test func sandboxAndProductionChannelsAreSeparateAndTheLimitCountsLiveOnes() throws {
        let emulator = try EmulatorProcess(["--max-channels", "2"])
        let sandbox = try ChannelClient(emulator)
        let production = try ChannelClient(emulator, listener: "channelProduction")
        let id = try #require(try sandbox.create().header("apns-channel-id"))
        let there = try production.send("GET", "/1/apps/\(EmulatorProcess.bundleID)/channels", headers: [("apns-channel-id", id)])
        #expect(there.status == 400 && there.reason == "ChannelNotRegistered")
        #expect(try sandbox.create().status == 201)
        let over = try sandbox.create()
        #expect(over.status == 400 && over.reason == "CannotCreateChannelConfig")
        #expect(try production.create().status == 201, "production counts apart")
        _ = try sandbox.send("DELETE", "/1/apps/\(EmulatorProcess.bundleID)/channels", headers: [("apns-channel-id", id)])
        #expect(try sandbox.create().status == 201, "a deleted channel does not count")
    }

    @Test func anAppWithoutTheBroadcastCapabilityGetsFeatureNotEnabled() throws {
        let emulator = try EmulatorProcess(["--app", "\(EmulatorProcess.teamID):com.example.quiet?broadcast=off"])
        let client = try ChannelClient(emulator)
        let refused = try client.create(bundle: "com.example.quiet")
        #expect(refused.status == 400 && refused.reason == "FeatureNotEnabled")
    }

    /// `--listen` answers channel management for Apple's management host names, and device
    /// pushes and broadcasts for the push host names.
    @Test func listenServesManagementByHostName() throws {
        let emulator = try EmulatorProcess(["--listen", "127.0.0.1:0"])
        let listen = try #require(emulator.ready["listen"]?.arrayValue?.first?.stringValue)
        var options = HTTP2ClientConnection.Options(address: try HostPort(parsing: listen))
        options.caPath = emulator.caPath
        options.serverName = "api-manage-broadcast.sandbox.push.apple.com"
        let management = ChannelClient(emulator: emulator, connection: try HTTP2ClientConnection(options))
        let created = try management.create()
        #expect(created.status == 201)
        options.serverName = "api.sandbox.push.apple.com"
        let push = ChannelClient(emulator: emulator, connection: try HTTP2ClientConnection(options))
        let onPushHost = try push.send("GET", "/1/apps/\(EmulatorProcess.bundleID)/all-channels")
        // The push host has no channel API: the device-push endpoint answers (a GET is not its method).
        #expect(onPushHost.status == 405 && onPushHost.reason == "MethodNotAllowed", "\(onPushHost.status ?? 0) \(onPushHost.reason ?? "-")")
        let id = try #require(created.header("apns-channel-id"))
        let broadcast = try push.send(
            "POST", "/4/broadcasts/apps/\(EmulatorProcess.bundleID)",
            headers: [("apns-channel-id", id), ("apns-push-type", "LiveActivity"), ("apns-priority", "10"), ("apns-expiration", "0")],
            body: #"{"aps":{"event":"update","timestamp":1,"content-state":{}}}"#)
        #expect(broadcast.status == 200, "\(broadcast.reason ?? "")")

        // Apple's broadcast name stands beside the production push host for a device push as
        // for a broadcast: a production token is accepted there, a sandbox one is not.
        options.serverName = "api-broadcast.push.apple.com"
        let production = ChannelClient(emulator: emulator, connection: try HTTP2ClientConnection(options))
        let alert = [("apns-topic", EmulatorProcess.bundleID), ("apns-push-type", "alert")]
        let productionToken = try emulator.createDevice(environment: "production").token
        let accepted = try production.send("POST", "/3/device/\(productionToken)", headers: alert, body: #"{"aps":{"alert":"hi"}}"#)
        #expect(accepted.status == 200, "\(accepted.status ?? 0) \(accepted.reason ?? "")")
        #expect(accepted.header("apns-unique-id") == nil, "production answers carry no apns-unique-id")
        let sandboxToken = try emulator.createDevice().token
        let refused = try production.send("POST", "/3/device/\(sandboxToken)", headers: alert, body: #"{"aps":{"alert":"hi"}}"#)
        #expect(refused.status == 400 && refused.reason == "BadDeviceToken", "\(refused.status ?? 0) \(refused.reason ?? "")")
    }

    @Test func broadcastsAreJudgedAsApplesBroadcastPageSays() throws {
        let emulator = try EmulatorProcess()
        let management = try ChannelClient(emulator)
        let stored = try #require(try management.create(policy: "1").header("apns-channel-id"))
        let noStore = try #require(try management.create(policy: "0").header("apns-channel-id"))
        let push = try ChannelClient(emulator, listener: "sandbox")
        let path = "/4/broadcasts/apps/\(EmulatorProcess.bundleID)"
        let payload = #"{"aps":{"event":"update","timestamp":1700000000,"content-state":{"eta":5}}}"#
        func headers(
            _ channel: String, expiration: String? = "0", priority: String? = "10", type: String? = "LiveActivity"
        )
            -> [(String, String)]
        {
            var list = [("apns-channel-id", channel)]
            if let expiration { list.append(("apns-expiration", expiration)) }
            if let priority { list.append(("apns-priority", priority)) }
            if let type { list.append(("apns-push-type", type)) }
            return list
        }
        let requestID = "3f1e2d3c-4b5a-4968-8776-655443322110"
        let ok = try push.send("POST", path, headers: headers(stored) + [("apns-request-id", requestID)], body: payload)
        #expect(ok.status == 200 && ok.header("apns-request-id") == requestID && ok.body.isEmpty)
        #expect(try push.send("POST", path, headers: headers(stored, expiration: "1900000000", type: "liveactivity"), body: payload).status == 200)
        // node-apn leaves out apns-priority when it is 10 and apns-expiration unless one is set.
        #expect(try push.send("POST", path, headers: headers(stored, expiration: nil, priority: nil), body: payload).status == 200)
        let cases: [([(String, String)], String?, Int, String)] = [
            ([("apns-push-type", "LiveActivity"), ("apns-priority", "10"), ("apns-expiration", "0")], payload, 400, "MissingChannelId"),
            (headers("dW5rbm93bg=="), payload, 400, "ChannelNotRegistered"),
            (headers(stored, type: nil), payload, 400, "MissingPushType"),
            (headers(stored, type: "alert"), payload, 400, "InvalidPushType"),
            (headers(stored, priority: "7"), payload, 400, "BadPriority"),
            (headers(stored, expiration: "soon"), payload, 400, "BadExpirationDate"),
            (headers(noStore, expiration: "1900000000"), payload, 400, "BadExpirationDate"),
            (headers(stored) + [("apns-topic", "\(EmulatorProcess.bundleID).push-type.liveactivity")], payload, 400, "TopicDisallowed"),
            (headers(stored) + [("apns-channel-id", noStore)], payload, 400, "DuplicateHeaders"),
            (headers(stored), nil, 400, "PayloadEmpty"),
            (headers(stored), #"{"aps":"#, 400, "BadRequestPayload"),
            (headers(stored), "{\"aps\":{\"x\":\"" + String(repeating: "a", count: 5200) + "\"}}", 413, "PayloadTooLarge"),
        ]
        for (fields, body, status, reason) in cases {
            let response = try push.send("POST", path, headers: fields, body: body)
            #expect(response.status == status && response.reason == reason, "\(fields): \(response.status ?? 0) \(response.reason ?? "-")")
            #expect(response.header("apns-request-id") != nil)
        }
        #expect(try push.send("GET", path, headers: headers(stored)).reason == "MethodNotAllowed")
        // A HEAD is answered without content: with one, the client would reset the stream.
        let head = try push.send("HEAD", path, headers: headers(stored))
        #expect(head.status == 405 && head.body.isEmpty && head.header("apns-request-id") != nil)
        // The emulator's own channel list shows what was published.
        let channels = try emulator.admin("GET", "/api/v1/channels").json["channels"]?.arrayValue ?? []
        let shown = channels.first { $0.objectValue?["id"]?.stringValue == stored }?.objectValue
        #expect(shown?["broadcasts"]?.intValue == 3)
        #expect(try emulator.metric("apns_emulator_channel_requests_total", labels: #"operation="broadcast",status="200""#) == 3)
        #expect(try emulator.metric("apns_emulator_channel_requests_total", labels: #"operation="broadcast",status="400""#) == 11)
        #expect(shown?["storedMessage"]?.objectValue?["requestId"]?.stringValue != nil)

        // An apns-expiration already past is accepted, and nothing is kept: the record says
        // expired from the start, and the message the channel kept stays (as a device push with
        // apns-expiration 0 leaves the stored one).
        let kept = shown?["storedMessage"]?.objectValue?["requestId"]?.stringValue
        let pastID = "3f1e2d3c-4b5a-4968-8776-655443322111"
        let past = try push.send("POST", path, headers: headers(stored, expiration: "1000000000") + [("apns-request-id", pastID)], body: payload)
        #expect(past.status == 200)
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(pastID)").json["outcome"]?.stringValue == "expired")
        let after = try emulator.admin("GET", "/api/v1/channels").json["channels"]?.arrayValue ?? []
        #expect(after.first { $0.objectValue?["id"]?.stringValue == stored }?.objectValue?["storedMessage"]?["requestId"]?.stringValue == kept)
        // Optional headers sent empty count as absent, as on the device API; a sign is not a number.
        #expect(try push.send("POST", path, headers: headers(stored, expiration: "", priority: ""), body: payload).status == 200)
        #expect(try push.send("POST", path, headers: headers(stored, expiration: "+1900000000"), body: payload).reason == "BadExpirationDate")
    }

    /// The emulator's channel list answers a page at a time, as every list does.
    @Test func theChannelListIsPaged() throws {
        let emulator = try EmulatorProcess()
        let management = try ChannelClient(emulator)
        var made: [String] = []
        for _ in 0..<5 { made.append(try #require(try management.create(policy: "1").header("apns-channel-id"))) }
        var seen: [String] = []
        var cursor: String?
        var pages = 0
        repeat {
            let reply = try emulator.admin("GET", "/api/v1/channels?limit=2" + (cursor.map { "&cursor=\($0)" } ?? ""))
            #expect(reply.status == 200)
            let ids = reply.json["channels"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
            #expect(ids.count <= 2)
            seen += ids
            cursor = reply.json["nextCursor"]?.stringValue
            pages += 1
        } while cursor != nil && pages < 10
        // Oldest first; two made in the same millisecond go by id.
        #expect(seen.count == made.count && Set(seen) == Set(made), "every channel once")
        #expect(pages == 3)
        #expect(try emulator.admin("GET", "/api/v1/channels?limit=0").status == 400)
        #expect(try emulator.admin("GET", "/api/v1/channels?cursor=bm90LWEtY3Vyc29y").status == 400)
    }

    /// A channel over `--channel-broadcast-rate` in one second gets 429 `TooManyRequests`;
    /// another channel is not affected.
    @Test func aChannelBroadcastingTooFastGetsTooManyRequests() throws {
        let emulator = try EmulatorProcess(["--channel-broadcast-rate", "2"])
        let management = try ChannelClient(emulator)
        let busy = try #require(try management.create(policy: "0").header("apns-channel-id"))
        let calm = try #require(try management.create(policy: "0").header("apns-channel-id"))
        let push = try ChannelClient(emulator, listener: "sandbox")
        func broadcast(_ channel: String) throws -> HTTP2Response {
            try push.send(
                "POST", "/4/broadcasts/apps/\(EmulatorProcess.bundleID)",
                headers: [("apns-channel-id", channel), ("apns-push-type", "liveactivity"), ("apns-priority", "10"), ("apns-expiration", "0")],
                body: #"{"aps":{"event":"update","timestamp":1,"content-state":{}}}"#)
        }
        let statuses = try (0..<3).map { _ in try broadcast(busy) }
        #expect(statuses.map(\.status) == [200, 200, 429])
        #expect(statuses[2].reason == "TooManyRequests")
        #expect(try broadcast(calm).status == 200)
    }
}
