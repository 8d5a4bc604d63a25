// LiveActivityPersistenceTests: Live Activities (their tokens, state and channel subscriptions)
// survive kill -9 with --state-dir and are shared by instances on one Redis (--redis), against
// the real binary with our own HTTP/2 client.
import APNsCore
import Foundation
import HTTP2
import ProviderClient
import RedisTestSupport
import Testing
import TestSupport

/// Live Activity steps against one emulator: the admin API and provider pushes.
private struct LiveActivityDriver {
    static let bundle = EmulatorProcess.bundleID
    static let topic = bundle + ".push-type.liveactivity"
    let emulator: EmulatorProcess

    /// A virtual device whose app declares DeliveryAttributes; its push-to-start token.
    func device() throws -> (deviceID: String, startToken: String) {
        let (deviceID, _) = try emulator.createDevice()
        let declared = try emulator.admin(
            "PUT", "/api/v1/devices/\(deviceID)/apps/\(Self.bundle)/live-activities", body: ["types": ["DeliveryAttributes"]])
        #expect(declared.status == 200, "\(declared.raw)")
        return (deviceID, try #require(declared.json["pushToStartTokens"]?["DeliveryAttributes"]?.stringValue))
    }

    func push(_ token: String, _ aps: String, priority: String = "10") throws -> APNsResult {
        var push = try emulator.push(token, payload: #"{"aps":\#(aps)}"#, topic: Self.topic)
        push.pushType = "liveactivity"
        push.priority = priority
        return APNsResult(try emulator.connect().send(push.request))
    }

    func activities(_ deviceID: String) throws -> [JSONObject] {
        try emulator.admin("GET", "/api/v1/devices/\(deviceID)/activities").json["activities"]?.arrayValue?.compactMap(\.objectValue) ?? []
    }

    func activity(_ deviceID: String, _ activityID: String) throws -> JSONObject? {
        try activities(deviceID).first { $0["activityId"]?.stringValue == activityID }
    }

    func eta(_ deviceID: String, _ activityID: String) throws -> Int64? {
        try activity(deviceID, activityID)?["contentState"]?["eta"]?.intValue
    }

    func record(_ id: String?) throws -> JSONObject {
        try emulator.admin("GET", "/api/v1/notifications/\(id ?? "")").json.objectValue ?? JSONObject()
    }

    /// A channel request or broadcast on one of the channel listeners.
    func channelRequest(_ listener: String, _ method: String, _ path: String, headers: [(String, String)], body: String) throws -> HTTP2Response {
        var fields = [HTTP2HeaderField(name: "authorization", value: "bearer \(try emulator.providerToken())")]
        fields += headers.map { HTTP2HeaderField(name: $0.0, value: $0.1) }
        return try emulator.connect(listener).send(ClientRequest(method: method, path: path, headers: fields, body: Array(body.utf8)))
    }

    func channel() throws -> String {
        let created = try channelRequest(
            "channelSandbox", "POST", "/1/apps/\(Self.bundle)/channels", headers: [],
            body: #"{"message-storage-policy": 1, "push-type": "LiveActivity"}"#)
        return try #require(created.headers.first { $0.name == "apns-channel-id" }?.value, "\(created.status ?? 0)")
    }

    func broadcast(_ channel: String, eta: Int, timestamp: Int, expiration: String = "0", requestID: String? = nil) throws -> HTTP2Response {
        try channelRequest(
            "sandbox", "POST", "/4/broadcasts/apps/\(Self.bundle)",
            headers: [("apns-channel-id", channel), ("apns-push-type", "LiveActivity"), ("apns-priority", "5"), ("apns-expiration", expiration)]
                + (requestID.map { [("apns-request-id", $0)] } ?? []),
            body: #"{"aps":{"event":"update","timestamp":\#(timestamp),"content-state":{"eta":\#(eta)}}}"#)
    }

    /// Starts an activity by push to `startToken` (asking for an update token); its id and token.
    func startByPush(_ deviceID: String, _ startToken: String) throws -> (activityID: String, token: String) {
        let started = try push(
            startToken,
            #"{"event":"start","timestamp":1700000000,"attributes-type":"DeliveryAttributes","attributes":{"order":"42"},"content-state":{"eta":30},"alert":{"title":"On its way"},"input-push-token":1}"#
        )
        #expect(started.status == 200)
        let activity = try #require(try activities(deviceID).first { $0["startedBy"]?.stringValue == "push" })
        return (try #require(activity["activityId"]?.stringValue), try #require(activity["pushToken"]?.stringValue))
    }
}

/// Two instances sharing one Redis (and a directory for their certificates).
private struct InstancePair {
    let redis: RedisServerProcess
    let shared: String
    let a: EmulatorProcess
    let b: EmulatorProcess

    init() throws {
        redis = try RedisServerProcess()
        shared = FileManager.default.temporaryDirectory.appendingPathComponent("apns-la-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true)
        a = try EmulatorProcess(["--redis", redis.url], sharedDirectory: shared)
        b = try EmulatorProcess(["--redis", redis.url], sharedDirectory: shared)
    }

    func remove() { try? FileManager.default.removeItem(atPath: shared) }
}

@Suite("Live Activities across restarts (--state-dir) and instances (--redis)")
struct LiveActivityPersistenceTests {
    /// With `--state-dir`, an app's start the device refuses (a type it never declared) is a
    /// 400, and the changes after it are written and answered. It had marked the activity book
    /// changed before refusing, and the refusal left the state writer asleep: every later
    /// change, pushes too, waited for good.
    @Test func aRefusedStartLeavesLaterChangesAnswered() throws {
        let state = try StateDirectory()
        let emulator = try EmulatorProcess(["--state-dir", state.path])
        let la = LiveActivityDriver(emulator: emulator)
        let (deviceID, _) = try la.device()
        let refused = try emulator.admin(
            "POST", "/api/v1/devices/\(deviceID)/apps/\(LiveActivityDriver.bundle)/activities",
            body: ["attributesType": "NeverDeclaredAttributes", "attributes": [:], "contentState": [:]])
        #expect(refused.status == 400, "\(refused.raw)")
        let (_, token) = try emulator.createDevice()
        #expect(APNsResult(try emulator.connect().send(try emulator.push(token).request)).status == 200)
    }

    /// A broadcast a channel kept for an offline device, shown after a restart: its record
    /// says delivered, as without the restart (it read `stored` for good), and a later
    /// broadcast with the same request id (already expired, not kept) is left as it was.
    @Test func aStoredBroadcastShownAfterARestartIsRecordedDelivered() throws {
        let state = try StateDirectory()
        let ports = try EmulatorProcess.restartablePorts()
        let first = try EmulatorProcess(["--state-dir", state.path] + ports)
        var la = LiveActivityDriver(emulator: first)
        let channel = try la.channel()
        let (deviceID, _) = try la.device()
        let subscribed = try first.admin(
            "POST", "/api/v1/devices/\(deviceID)/apps/\(LiveActivityDriver.bundle)/activities",
            body: ["attributesType": "DeliveryAttributes", "attributes": [:], "contentState": ["eta": 30], "channel": .string(channel)])
        let subscriberID = try #require(subscribed.json["activityId"]?.stringValue)
        #expect(try first.admin("PATCH", "/api/v1/devices/\(deviceID)", body: ["online": false]).status == 200)
        let reused = "12121212-3434-5656-7878-909090909090"
        let sent = try la.broadcast(
            channel, eta: 5, timestamp: 1_700_000_100, expiration: "\(Int(Date().timeIntervalSince1970) + 3600)", requestID: reused)
        #expect(try la.record(reused)["outcome"]?.stringValue == "stored")
        let expired = try la.broadcast(channel, eta: 6, timestamp: 1_700_000_200, expiration: "1", requestID: reused)
        #expect(sent.status == 200 && expired.status == 200)
        func records() throws -> [JSONObject] {
            try first.admin("GET", "/api/v1/notifications?apnsId=\(reused)").json["notifications"]?.arrayValue?.compactMap(\.objectValue) ?? []
        }
        let before = try records()
        #expect(before.map { $0["outcome"]?.stringValue } == ["expired", "stored"], "newest first: \(before)")

        first.crash()
        let second = try EmulatorProcess(["--state-dir", state.path] + ports)
        la = LiveActivityDriver(emulator: second)
        #expect(try second.admin("PATCH", "/api/v1/devices/\(deviceID)", body: ["online": true]).status == 200)
        #expect(try la.eta(deviceID, subscriberID) == 5, "shown from the channel's store")
        let after =
            try second.admin("GET", "/api/v1/notifications?apnsId=\(reused)").json["notifications"]?.arrayValue?.compactMap(\.objectValue) ?? []
        #expect(after.map { $0["outcome"]?.stringValue } == ["expired", "delivered"], "\(after)")
        #expect(after.last?["broadcast"]?["outcomes"]?["delivered"]?.intValue == 1)
        #expect(after.first?["broadcast"]?["outcomes"]?["delivered"] == nil, "the expired one was not shown")
    }

    @Test func activitiesTokensAndSubscriptionsSurviveKill9() throws {
        let state = try StateDirectory()
        let ports = try EmulatorProcess.restartablePorts()
        let first = try EmulatorProcess(["--state-dir", state.path] + ports)
        var la = LiveActivityDriver(emulator: first)
        let (deviceID, startToken) = try la.device()
        let channel = try la.channel()
        let (activityID, firstToken) = try la.startByPush(deviceID, startToken)
        #expect(try la.push(firstToken, #"{"event":"update","timestamp":1700000100,"content-state":{"eta":20}}"#).status == 200)
        let rotated = try first.admin("POST", "/api/v1/devices/\(deviceID)/activities/\(activityID)/rotate-token")
        #expect(rotated.status == 200)
        let token = try #require(rotated.json["pushToken"]?.stringValue)
        #expect(token != firstToken)
        let subscribed = try first.admin(
            "POST", "/api/v1/devices/\(deviceID)/apps/\(LiveActivityDriver.bundle)/activities",
            body: ["attributesType": "DeliveryAttributes", "attributes": ["order": "7"], "contentState": ["eta": 60], "channel": .string(channel)])
        #expect(subscribed.status == 201, "\(subscribed.raw)")
        let subscriberID = try #require(subscribed.json["activityId"]?.stringValue)
        let before = try la.activities(deviceID)

        first.crash()
        let second = try EmulatorProcess(["--state-dir", state.path] + ports)
        la = LiveActivityDriver(emulator: second)
        #expect(try la.activities(deviceID) == before, "the same activities, state and tokens after kill -9")
        let app = try second.admin("GET", "/api/v1/devices/\(deviceID)/activities").json["apps"]?.arrayValue?.first
        #expect(app?["pushToStartTokens"]?["DeliveryAttributes"]?.stringValue == startToken)
        let listed = try second.admin("GET", "/api/v1/channels").json["channels"]?.arrayValue ?? []
        #expect(listed.first { $0["id"]?.stringValue == channel }?["subscribers"]?.intValue == 1, "the subscription is counted again")

        // The rotated token still updates the activity; the replaced one is answered 200 and ignored.
        let update = try la.push(token, #"{"event":"update","timestamp":1700000200,"content-state":{"eta":10}}"#)
        #expect(update.status == 200)
        #expect(try la.record(update.apnsID)["outcome"]?.stringValue == "delivered")
        #expect(try la.eta(deviceID, activityID) == 10)
        let old = try la.push(firstToken, #"{"event":"update","timestamp":1700000300,"content-state":{"eta":1}}"#)
        #expect(old.status == 200)
        let ignored = try la.record(old.apnsID)
        #expect(ignored["outcome"]?.stringValue == "ignored" && ignored["explanation"]?.stringValue?.contains("rotated") == true, "\(ignored)")
        // A broadcast still reaches the subscribed activity.
        let sent = try la.broadcast(channel, eta: 5, timestamp: 1_700_000_400)
        #expect(sent.status == 200)
        #expect(try la.eta(deviceID, subscriberID) == 5)
        let reach = try la.record(sent.headers.first { $0.name == "apns-request-id" }?.value)["broadcast"]
        #expect(reach?["reached"]?.intValue == 1, "\(reach ?? .null)")
        // A new activity by the same push-to-start token still starts.
        #expect(
            try la.push(
                startToken,
                #"{"event":"start","timestamp":1700000500,"attributes-type":"DeliveryAttributes","attributes":{},"content-state":{},"alert":"x"}"#
            ).status == 200)
        #expect(try la.activities(deviceID).count == 3)
    }

    @Test(.requires(.redisServer))
    func anActivityStartedOnOneInstanceIsUpdatedThroughAnother() throws {
        let pair = try InstancePair()
        defer { pair.remove() }
        let (a, b) = (pair.a, pair.b)
        let (onA, onB) = (LiveActivityDriver(emulator: a), LiveActivityDriver(emulator: b))

        let (deviceID, startToken) = try onA.device()
        let (activityID, token) = try onA.startByPush(deviceID, startToken)
        try eventually("B lists the activity A started") { try onB.activity(deviceID, activityID)?["pushToken"]?.stringValue == token }
        let update = try onB.push(token, #"{"event":"update","timestamp":1700000100,"content-state":{"eta":12}}"#)
        #expect(update.status == 200)
        #expect(try onB.record(update.apnsID)["outcome"]?.stringValue == "delivered")
        #expect(try onB.eta(deviceID, activityID) == 12)
        try eventually("A has B's update") { try onA.eta(deviceID, activityID) == 12 }
        // A start through B by the push-to-start token A issued.
        let started = try onB.push(
            startToken,
            #"{"event":"start","timestamp":1700000200,"attributes-type":"DeliveryAttributes","attributes":{},"content-state":{},"alert":"x"}"#)
        #expect(started.status == 200)
        try eventually("A lists B's start") { try onA.activities(deviceID).count == 2 }
    }

    /// A channel made on A, an activity subscribed on A, a broadcast through B: the activity
    /// shows it on both, and B's journal record counts the delivery.
    @Test(.requires(.redisServer))
    func aBroadcastThroughOneInstanceReachesAnActivityStartedOnAnother() throws {
        let pair = try InstancePair()
        defer { pair.remove() }
        let (a, b) = (pair.a, pair.b)
        let (onA, onB) = (LiveActivityDriver(emulator: a), LiveActivityDriver(emulator: b))

        let channel = try onA.channel()
        let (deviceID, _) = try onA.device()
        let started = try a.admin(
            "POST", "/api/v1/devices/\(deviceID)/apps/\(LiveActivityDriver.bundle)/activities",
            body: ["attributesType": "DeliveryAttributes", "attributes": [:], "contentState": ["eta": 30], "channel": .string(channel)])
        #expect(started.status == 201, "\(started.raw)")
        let activityID = try #require(started.json["activityId"]?.stringValue)
        try eventually("B knows the subscription") {
            let channels = try b.admin("GET", "/api/v1/channels").json["channels"]?.arrayValue ?? []
            return channels.first { $0["id"]?.stringValue == channel }?["subscribers"]?.intValue == 1
        }
        let sent = try onB.broadcast(channel, eta: 9, timestamp: 1_700_000_100)
        #expect(sent.status == 200)
        let reach = try onB.record(sent.headers.first { $0.name == "apns-request-id" }?.value)["broadcast"]?.objectValue
        #expect(reach?["reached"]?.intValue == 1, "\(reach ?? JSONObject())")
        #expect(try onB.eta(deviceID, activityID) == 9)
        try eventually("A shows the broadcast") { try onA.eta(deviceID, activityID) == 9 }
    }

    /// The state directory's files may not grow (prlimit): Live Activity starts get 503 or no
    /// answer, never a 200 whose activity is not on disk; once the limit is lifted the
    /// emulator serves again, and after kill -9 every start it answered 200 is an activity.
    @Test func everyStartAnswered200ThroughAFailingStoreSurvivesKill9() throws {
        let state = try StateDirectory()
        let flags = ["--state-dir", state.path]
        let ports = try EmulatorProcess.restartablePorts()
        let first = try EmulatorProcess(flags + ports)
        let la = LiveActivityDriver(emulator: first)
        let (deviceID, startToken) = try la.device()
        let pid = String(first.process.processIdentifier)
        let database = state.path + "/state.sqlite"
        let biggest =
            [database, database + "-wal"].compactMap { (try? FileManager.default.attributesOfItem(atPath: $0)[.size] as? Int) ?? nil }
            .max() ?? 0
        // Room for some starts: the device's row, rewritten whole, grows with each activity.
        let limited = try run("/usr/bin/prlimit", ["--pid", pid, "--fsize=\(biggest + 1_048_576):unlimited"])
        try #require(limited.status == 0, "prlimit: \(limited.err)")

        func start(_ n: Int, _ connection: HTTP2ClientConnection) throws -> Int? {
            var push = try first.push(
                startToken,
                payload:
                    #"{"aps":{"event":"start","timestamp":1700000000,"attributes-type":"DeliveryAttributes","attributes":{"n":\#(n)},"content-state":{"eta":1},"alert":"x"}}"#,
                topic: LiveActivityDriver.topic)
            push.pushType = "liveactivity"
            return APNsResult(try connection.send(push.request)).status
        }
        var acknowledged: [Int] = []
        var (unavailable, unanswered, other) = (0, 0, [Int]())
        var connection = try first.connect()
        var n = 0
        let deadline = Date().addingTimeInterval(60)
        while unavailable < 5, Date() < deadline, n < 20_000 {
            n += 1
            do {
                switch try start(n, connection) {
                case 200?: acknowledged.append(n)
                case 503?: unavailable += 1
                case let status: other.append(status ?? 0)
                }
            } catch {
                unanswered += 1  // the connection was closed: the answer was not committed
                connection = try first.connect()
            }
        }
        print("Live Activity starts through a failing store: \(acknowledged.count) answered 200, \(unavailable) 503, \(unanswered) unanswered")
        #expect(unavailable >= 5, "the failing store is noticed")
        #expect(other.isEmpty, "\(other)")
        _ = try run("/usr/bin/prlimit", ["--pid", pid, "--fsize=unlimited:unlimited"])
        #expect(try eventually(15) { try first.metric("apns_emulator_state_up") == 1 }, "serves again by itself")
        n += 1
        #expect(try start(n, try first.connect()) == 200)
        acknowledged.append(n)

        first.crash()
        let second = try EmulatorProcess(flags + ports)
        let kept = Set(try LiveActivityDriver(emulator: second).activities(deviceID).compactMap { $0["attributes"]?["n"]?.intValue })
        let missing = acknowledged.filter { !kept.contains(Int64($0)) }
        #expect(missing.isEmpty, "every 200 is an activity on disk: \(missing.count) of \(acknowledged.count) missing")
    }

    /// Redis restarted without its data under two instances: once the newest copy is written
    /// back, an activity, its update token and its subscription are there on both.
    @Test(.requires(.redisServer))
    func activitiesComeBackWhenRedisRestartsEmpty() throws {
        let cluster = try EmulatorCluster(count: 2, persistent: false)
        let (a, b) = (cluster.instances[0], cluster.instances[1])
        let (onA, onB) = (LiveActivityDriver(emulator: a), LiveActivityDriver(emulator: b))
        let channel = try onA.channel()
        let (deviceID, startToken) = try onA.device()
        let (activityID, token) = try onA.startByPush(deviceID, startToken)
        let subscribed = try a.admin(
            "POST", "/api/v1/devices/\(deviceID)/apps/\(LiveActivityDriver.bundle)/activities",
            body: ["attributesType": "DeliveryAttributes", "attributes": [:], "contentState": ["eta": 30], "channel": .string(channel)])
        let subscriberID = try #require(subscribed.json["activityId"]?.stringValue)
        #expect(try onB.push(token, #"{"event":"update","timestamp":1700000100,"content-state":{"eta":12}}"#).status == 200)
        try eventually("A has B's update") { try onA.eta(deviceID, activityID) == 12 }

        try cluster.redis.restart()
        #expect(try eventually(10) { try a.admin("GET", "/readyz").json["reason"]?.stringValue?.contains("lost") == true })
        #expect(try eventually(20) { try a.admin("GET", "/readyz").status == 200 && b.admin("GET", "/readyz").status == 200 })
        for driver in [onA, onB] {
            #expect(try driver.activity(deviceID, activityID)?["pushToken"]?.stringValue == token, "the activity is back with its token")
            #expect(try driver.eta(deviceID, activityID) == 12)
        }
        #expect(try onA.push(token, #"{"event":"update","timestamp":1700000200,"content-state":{"eta":5}}"#).status == 200)
        try eventually("B has the update after the restart") { try onB.eta(deviceID, activityID) == 5 }
        let sent = try onB.broadcast(channel, eta: 3, timestamp: 1_700_000_300)
        #expect(sent.status == 200)
        try eventually("the subscription came back too") { try onA.eta(deviceID, subscriberID) == 3 }
    }
}
