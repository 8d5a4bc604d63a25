// BroadcastDeliveryTests: broadcasts reaching the Live Activities subscribed to their channel
// (online, offline, late subscribers, both storage policies), the journal's record of each
// broadcast, and token pushes waiting for an offline device. Against the real binary, with our
// own HTTP/2 client. Imports the harness's modules.
import APNsCore
import Foundation
import HTTP2
import ProviderClient
import Testing
import TestSupport

/// One provider connection to a listener, sending channel requests or broadcasts.
private struct BroadcastProvider {
    let emulator: EmulatorProcess
    let connection: HTTP2ClientConnection

    init(_ emulator: EmulatorProcess, listener: String) throws {
        self.emulator = emulator
        connection = try emulator.connect(listener)
    }

    func send(_ method: String, _ path: String, headers: [(String, String)] = [], body: String? = nil) throws -> HTTP2Response {
        var fields = [HTTP2HeaderField(name: "authorization", value: "bearer \(try emulator.providerToken())")]
        fields += headers.map { HTTP2HeaderField(name: $0.0, value: $0.1) }
        return try connection.send(ClientRequest(method: method, path: path, headers: fields, body: body.map { Array($0.utf8) }))
    }
}

extension HTTP2Response {
    fileprivate func header(_ name: String) -> String? { headers.first { $0.name == name }?.value }
}

@Suite("Broadcasts reach the Live Activities subscribed to their channel")
struct BroadcastDeliveryTests {
    static let bundle = EmulatorProcess.bundleID
    let emulator: EmulatorProcess
    private let management: BroadcastProvider
    private let push: BroadcastProvider

    init() throws {
        emulator = try EmulatorProcess()
        management = try BroadcastProvider(emulator, listener: "channelSandbox")
        push = try BroadcastProvider(emulator, listener: "sandbox")
    }

    func channel(policy: Int) throws -> String {
        let created = try management.send(
            "POST", "/1/apps/\(Self.bundle)/channels", body: #"{"message-storage-policy": \#(policy), "push-type": "LiveActivity"}"#)
        return try #require(created.header("apns-channel-id"), "\(created.status ?? 0)")
    }

    /// A virtual device whose app declares DeliveryAttributes and runs one activity on `channel`.
    func subscriber(_ channel: String) throws -> (deviceID: String, activityID: String) {
        let (deviceID, _) = try emulator.createDevice()
        let declared = try emulator.admin(
            "PUT", "/api/v1/devices/\(deviceID)/apps/\(Self.bundle)/live-activities", body: ["types": ["DeliveryAttributes"]])
        #expect(declared.status == 200)
        let started = try emulator.admin(
            "POST", "/api/v1/devices/\(deviceID)/apps/\(Self.bundle)/activities",
            body: ["attributesType": "DeliveryAttributes", "attributes": ["order": "42"], "contentState": ["eta": 30], "channel": .string(channel)])
        #expect(started.status == 201, "\(started.raw)")
        return (deviceID, try #require(started.json["activityId"]?.stringValue))
    }

    func broadcast(
        _ channel: String, eta: Int, timestamp: Int = 1_700_000_100, expiration: String = "0", requestID: String? = nil
    ) throws -> HTTP2Response {
        try push.send(
            "POST", "/4/broadcasts/apps/\(Self.bundle)",
            headers: [("apns-channel-id", channel), ("apns-push-type", "LiveActivity"), ("apns-priority", "5"), ("apns-expiration", expiration)]
                + (requestID.map { [("apns-request-id", $0)] } ?? []),
            body: #"{"aps":{"event":"update","timestamp":\#(timestamp),"content-state":{"eta":\#(eta)}}}"#)
    }

    func activity(_ deviceID: String, _ activityID: String) throws -> JSONObject? {
        let listed = try emulator.admin("GET", "/api/v1/devices/\(deviceID)/activities").json["activities"]?.arrayValue ?? []
        return listed.compactMap(\.objectValue).first { $0["activityId"]?.stringValue == activityID }
    }

    func eta(_ deviceID: String, _ activityID: String) throws -> Int64? {
        try activity(deviceID, activityID)?["contentState"]?.objectValue?["eta"]?.intValue
    }

    func record(_ requestID: String?) throws -> JSONObject {
        let reply = try emulator.admin("GET", "/api/v1/notifications/\(requestID ?? "")")
        #expect(reply.status == 200, "\(reply.raw)")
        return reply.json.objectValue ?? JSONObject()
    }

    func setOnline(_ deviceID: String, _ online: Bool) throws {
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(deviceID)", body: ["online": .bool(online)]).status == 200)
    }

    @Test func everySubscribedActivityShowsTheBroadcastAndTheRecordCountsItsReach() throws {
        let channel = try channel(policy: 1)
        let other = try self.channel(policy: 1)
        let one = try subscriber(channel)
        let two = try subscriber(channel)
        let elsewhere = try subscriber(other)
        let subscribers = try emulator.admin("GET", "/api/v1/channels").json["channels"]?.arrayValue ?? []
        #expect(subscribers.first { $0.objectValue?["id"]?.stringValue == channel }?.objectValue?["subscribers"]?.intValue == 2)

        let sent = try broadcast(channel, eta: 10)
        #expect(sent.status == 200)
        #expect(try eta(one.deviceID, one.activityID) == 10 && eta(two.deviceID, two.activityID) == 10)
        #expect(try eta(elsewhere.deviceID, elsewhere.activityID) == 30, "a broadcast on another channel is not for it")

        let record = try record(sent.header("apns-request-id"))
        #expect(record["outcome"]?.stringValue == "delivered")
        #expect(record["pushType"]?.stringValue == "LiveActivity" && record["status"]?.intValue == 200)
        // The provider token, as a device push's record keeps it (the web UI shows it).
        let jwt = try #require(record["jwt"]?.objectValue, "\(record)")
        #expect(jwt["verified"] == true && jwt["claims"]?.objectValue?["iss"]?.stringValue == EmulatorProcess.teamID, "\(jwt)")
        let filtered = try emulator.admin("GET", "/api/v1/notifications?pushType=liveactivity").json["notifications"]?.arrayValue ?? []
        #expect(filtered.contains { $0.objectValue?["apnsId"] == record["apnsId"] }, "the pushType filter matches in any case")
        let reach = try #require(record["broadcast"]?.objectValue)
        #expect(reach["channel"]?.stringValue == channel)
        #expect(reach["subscribers"]?.intValue == 2 && reach["reached"]?.intValue == 2)
        #expect(reach["outcomes"]?.objectValue?["delivered"]?.intValue == 2)
        let devices = Set((reach["deliveries"]?.arrayValue ?? []).compactMap { $0.objectValue?["deviceId"]?.stringValue })
        #expect(devices == [one.deviceID, two.deviceID])
        // "What did this device get" includes the broadcasts its activities showed (the
        // record names no device of its own); not those of another channel.
        func journal(of deviceID: String) throws -> [JSONValue] {
            try emulator.admin("GET", "/api/v1/notifications?deviceId=\(deviceID)").json["notifications"]?.arrayValue ?? []
        }
        #expect(try journal(of: one.deviceID).contains { $0.objectValue?["apnsId"] == record["apnsId"] })
        #expect(try !journal(of: elsewhere.deviceID).contains { $0.objectValue?["apnsId"] == record["apnsId"] })
        // Deleting a device's records leaves the broadcast, which the other device got too.
        #expect(try emulator.admin("DELETE", "/api/v1/notifications?deviceId=\(one.deviceID)").status == 200)
        #expect(try journal(of: two.deviceID).contains { $0.objectValue?["apnsId"] == record["apnsId"] })
        #expect(record["explanation"]?.stringValue?.contains("2 of 2") == true, "\(record["explanation"] ?? .null)")
        #expect(try emulator.metric("apns_emulator_broadcast_deliveries_total", labels: #"outcome="delivered""#) == 2)
    }

    /// A priority-10 broadcast over an activity's budget waits; once the budget allows, the
    /// activity shows it and the broadcast's record says so (it read "throttled" for good).
    @Test func aThrottledBroadcastUpdateIsRecordedAsShownOnceTheBudgetAllows() throws {
        let emulator = try EmulatorProcess(["--live-activity-budget-per-hour", "1"])
        let management = try BroadcastProvider(emulator, listener: "channelSandbox")
        let push = try BroadcastProvider(emulator, listener: "sandbox")
        let created = try management.send(
            "POST", "/1/apps/\(Self.bundle)/channels", body: #"{"message-storage-policy": 0, "push-type": "LiveActivity"}"#)
        let channel = try #require(created.header("apns-channel-id"))
        let (deviceID, _) = try emulator.createDevice()
        #expect(
            try emulator.admin(
                "PUT", "/api/v1/devices/\(deviceID)/apps/\(Self.bundle)/live-activities", body: ["types": ["DeliveryAttributes"]]
            ).status == 200)
        let started = try emulator.admin(
            "POST", "/api/v1/devices/\(deviceID)/apps/\(Self.bundle)/activities",
            body: ["attributesType": "DeliveryAttributes", "attributes": [:], "contentState": ["eta": 30], "channel": .string(channel)])
        let activityID = try #require(started.json["activityId"]?.stringValue)
        var timestamp = 1_700_000_000
        func broadcast(eta: Int) throws -> String? {
            timestamp += 1
            let sent = try push.send(
                "POST", "/4/broadcasts/apps/\(Self.bundle)",
                headers: [("apns-channel-id", channel), ("apns-push-type", "LiveActivity"), ("apns-priority", "10"), ("apns-expiration", "0")],
                body: #"{"aps":{"event":"update","timestamp":\#(timestamp),"content-state":{"eta":\#(eta)}}}"#)
            #expect(sent.status == 200)
            return sent.header("apns-request-id")
        }
        func record(_ requestID: String?) throws -> JSONObject {
            try emulator.admin("GET", "/api/v1/notifications/\(requestID ?? "")").json.objectValue ?? JSONObject()
        }
        #expect(try record(broadcast(eta: 20))["outcome"]?.stringValue == "delivered")
        let replaced = try broadcast(eta: 10)
        let waiting = try broadcast(eta: 5)
        #expect(try record(waiting)["outcome"]?.stringValue == "throttled")
        let coalesced = try record(replaced)
        #expect(coalesced["outcome"]?.stringValue == "coalesced", "\(coalesced)")
        #expect(coalesced["broadcast"]?.objectValue?["outcomes"]?.objectValue?["coalesced"]?.intValue == 1)

        #expect(try emulator.admin("POST", "/api/v1/clock", body: ["advanceSeconds": 3_601]).status == 200)
        let shown = try record(waiting)
        #expect(shown["outcome"]?.stringValue == "delivered", "\(shown)")
        let reach = try #require(shown["broadcast"]?.objectValue)
        #expect(reach["reached"]?.intValue == 1 && reach["outcomes"]?.objectValue?["delivered"]?.intValue == 1, "\(reach)")
        let delivery = try #require(reach["deliveries"]?.arrayValue?.first?.objectValue)
        #expect(delivery["activityId"]?.stringValue == activityID)
        #expect(delivery["explanation"]?.stringValue?.contains("when its budget allowed") == true, "\(delivery)")
        let shownETA = try emulator.admin("GET", "/api/v1/devices/\(deviceID)/activities").json["activities"]?.arrayValue?.first?
            .objectValue?["contentState"]?.objectValue?["eta"]?.intValue
        #expect(shownETA == 5)
    }

    @Test func aLateSubscriberGetsTheStoredMessageOnlyFromAMostRecentMessageStoredChannel() throws {
        let stored = try channel(policy: 1)
        let unstored = try channel(policy: 0)
        let first = try broadcast(stored, eta: 12)
        #expect(first.status == 200)
        #expect(try broadcast(unstored, eta: 12).status == 200)
        #expect(try record(first.header("apns-request-id"))["outcome"]?.stringValue == "stored", "nobody subscribed yet")

        let late = try subscriber(stored)
        #expect(try eta(late.deviceID, late.activityID) == 12, "the stored message is shown at once")
        let reach = try #require(try record(first.header("apns-request-id"))["broadcast"]?.objectValue)
        #expect(reach["reached"]?.intValue == 1)
        #expect(reach["deliveries"]?.arrayValue?.first?.objectValue?["fromStore"]?.boolValue == true)

        let missed = try subscriber(unstored)
        #expect(try eta(missed.deviceID, missed.activityID) == 30, "No Message Stored keeps nothing for later")
    }

    /// A stored broadcast that a later subscriber ignores (a broadcast cannot start an
    /// activity) is a finding of the checks, as when it was sent.
    @Test func aStoredBroadcastIgnoredByALaterSubscriberIsAFinding() throws {
        let stored = try channel(policy: 1)
        let sent = try push.send(
            "POST", "/4/broadcasts/apps/\(Self.bundle)",
            headers: [("apns-channel-id", stored), ("apns-push-type", "LiveActivity"), ("apns-priority", "5")],
            body: #"{"aps":{"event":"start","timestamp":1700000100,"content-state":{"eta":12}}}"#)
        #expect(sent.status == 200)
        #expect(try emulator.admin("GET", "/api/v1/checks").json["ignoredPushes"]?.intValue == 0, "nobody subscribed yet")
        let late = try subscriber(stored)
        #expect(try eta(late.deviceID, late.activityID) == 30, "not shown")
        let checks = try emulator.admin("GET", "/api/v1/checks").json
        #expect(checks["ignoredPushes"]?.intValue == 1)
        let finding = try #require(checks["failures"]?.arrayValue?.first?.objectValue)
        #expect(finding["apnsId"]?.stringValue == sent.header("apns-request-id") && finding["deviceId"]?.stringValue == late.deviceID)
        #expect(finding["message"]?.stringValue?.contains("ignored the stored broadcast of channel \(stored)") == true, "\(finding)")
    }

    /// A broadcast that several activities ignore is one finding, naming each of their devices.
    @Test func anIgnoredBroadcastsFindingNamesEveryDevice() throws {
        let live = try channel(policy: 0)
        let one = try subscriber(live)
        let two = try subscriber(live)
        let sent = try push.send(
            "POST", "/4/broadcasts/apps/\(Self.bundle)",
            headers: [("apns-channel-id", live), ("apns-push-type", "LiveActivity"), ("apns-priority", "5")],
            body: #"{"aps":{"event":"start","timestamp":1700000100,"content-state":{"eta":12}}}"#)
        #expect(sent.status == 200)
        let checks = try emulator.admin("GET", "/api/v1/checks").json
        #expect(checks["ignoredPushes"]?.intValue == 1)
        let message = try #require(checks["failures"]?.arrayValue?.first?["message"]?.stringValue)
        #expect(message.contains("2 of 2 subscribed Live Activities ignored the broadcast"), "\(message)")
        #expect(message.contains(one.deviceID) && message.contains(two.deviceID), "\(message)")
    }

    @Test func anOfflineDeviceTakesTheStoredMessageWhenBackAndMissesANoMessageStoredOne() throws {
        let stored = try channel(policy: 1)
        let unstored = try channel(policy: 0)
        let away = try subscriber(stored)
        let awayToo = try subscriber(unstored)
        try setOnline(away.deviceID, false)
        try setOnline(awayToo.deviceID, false)

        let kept = try broadcast(stored, eta: 7)
        let lost = try broadcast(unstored, eta: 7)
        #expect(kept.status == 200 && lost.status == 200)
        #expect(try eta(away.deviceID, away.activityID) == 30)
        let keptRecord = try record(kept.header("apns-request-id"))
        #expect(keptRecord["broadcast"]?.objectValue?["outcomes"]?.objectValue?["stored"]?.intValue == 1)
        let lostRecord = try record(lost.header("apns-request-id"))
        #expect(lostRecord["broadcast"]?.objectValue?["outcomes"]?.objectValue?["expired"]?.intValue == 1)
        #expect(lostRecord["outcome"]?.stringValue == "expired")

        try setOnline(away.deviceID, true)
        try setOnline(awayToo.deviceID, true)
        #expect(try eta(away.deviceID, away.activityID) == 7, "shown from the channel's store once back online")
        #expect(try eta(awayToo.deviceID, awayToo.activityID) == 30)
        let settled = try record(kept.header("apns-request-id"))
        #expect(settled["outcome"]?.stringValue == "delivered")
        let outcomes = settled["broadcast"]?.objectValue?["outcomes"]?.objectValue
        #expect(outcomes?["delivered"]?.intValue == 1 && outcomes?["stored"] == nil, "\(settled["broadcast"] ?? .null)")

        // Coming back again does not show it twice.
        try setOnline(away.deviceID, false)
        try setOnline(away.deviceID, true)
        #expect(try activity(away.deviceID, away.activityID)?["updates"]?.intValue == 1)
    }

    /// An activity that waited, its device offline, for the channel's stored broadcast and is
    /// then dismissed by the user, loses its app or its device: the record no longer says it
    /// waits ("the device is offline") but why it never took it. Before, the entry read
    /// `stored` until the channel's copy expired 8 hours later, then "the device was offline".
    @Test func anActivityThatGoesWhileItWaitsForTheStoredBroadcastStopsWaitingInTheRecord() throws {
        let stored = try channel(policy: 1)
        let dismissed = try subscriber(stored)
        let uninstalled = try subscriber(stored)
        let removed = try subscriber(stored)
        for device in [dismissed, uninstalled, removed] { try setOnline(device.deviceID, false) }
        let sent = try broadcast(stored, eta: 7)
        #expect(sent.status == 200)
        let id = sent.header("apns-request-id")
        #expect(try record(id)["broadcast"]?.objectValue?["outcomes"]?.objectValue?["stored"]?.intValue == 3)

        #expect(try emulator.admin("DELETE", "/api/v1/devices/\(dismissed.deviceID)/activities/\(dismissed.activityID)").status == 200)
        #expect(try emulator.admin("DELETE", "/api/v1/devices/\(uninstalled.deviceID)/apps/\(Self.bundle)").status == 200)
        #expect(try emulator.admin("DELETE", "/api/v1/devices/\(removed.deviceID)").status == 200)
        try setOnline(dismissed.deviceID, true)
        try setOnline(uninstalled.deviceID, true)

        let settled = try record(id)
        let outcomes = settled["broadcast"]?.objectValue?["outcomes"]?.objectValue
        #expect(outcomes?["stored"] == nil && outcomes?["ignored"]?.intValue == 3, "\(settled["broadcast"] ?? .null)")
        let explanations = (settled["broadcast"]?.objectValue?["deliveries"]?.arrayValue ?? []).compactMap {
            $0.objectValue?["explanation"]?.stringValue
        }
        for why in ["the user dismissed the activity", "the app was uninstalled", "the device was removed"] {
            #expect(explanations.contains { $0.hasPrefix(why) }, "\(why): \(explanations)")
        }
    }

    /// Apple documents no de-duplication of `apns-request-id`: a provider that sends one id twice
    /// (a constant copied from a sample) sends two broadcasts, and each reaches the activities,
    /// online at once and from the channel's store once back. The second was answered 200 and
    /// reached nobody.
    @Test func broadcastsThatReuseARequestIDEachReachTheActivities() throws {
        let stored = try channel(policy: 1)
        let online = try subscriber(stored)
        let away = try subscriber(stored)
        let reused = "12121212-3434-5656-7878-909090909090"
        #expect(try broadcast(stored, eta: 1, timestamp: 1_700_000_101, requestID: reused).status == 200)
        #expect(try eta(online.deviceID, online.activityID) == 1)
        try setOnline(away.deviceID, false)
        let again = try broadcast(stored, eta: 2, timestamp: 1_700_000_102, requestID: reused)
        #expect(again.status == 200 && again.header("apns-request-id") == reused)
        #expect(try eta(online.deviceID, online.activityID) == 2, "the second broadcast is a new one")
        let records = try emulator.admin("GET", "/api/v1/notifications?apnsId=\(reused)").json["notifications"]?.arrayValue ?? []
        #expect(records.count == 2)
        let newest = try #require(records.first?.objectValue?["broadcast"]?.objectValue)
        let outcomes = newest["outcomes"]?.objectValue
        #expect(newest["subscribers"]?.intValue == 2 && outcomes?["delivered"]?.intValue == 1 && outcomes?["stored"]?.intValue == 1, "\(newest)")
        try setOnline(away.deviceID, true)
        #expect(try eta(away.deviceID, away.activityID) == 2, "the stored second broadcast reaches the activity that had the first")
    }

    /// A stored broadcast reads `stored` only while its channel keeps it: replaced by a newer
    /// one it is coalesced for the activities that waited, expired once its time is up, and the
    /// channel's list no longer shows it.
    @Test func aStoredBroadcastStopsReadingStoredOnceReplacedOrExpired() throws {
        let stored = try channel(policy: 1)
        let away = try subscriber(stored)
        try setOnline(away.deviceID, false)
        let now = Int(Date().timeIntervalSince1970)
        let first = try broadcast(stored, eta: 1, expiration: "\(now + 600)")
        #expect(try record(first.header("apns-request-id"))["outcome"]?.stringValue == "stored")
        let second = try broadcast(stored, eta: 2, timestamp: 1_700_000_200, expiration: "\(now + 60)")
        #expect(second.status == 200)
        let replaced = try record(first.header("apns-request-id"))
        #expect(replaced["outcome"]?.stringValue == "coalesced", "\(replaced)")
        #expect(replaced["broadcast"]?.objectValue?["outcomes"]?.objectValue?["coalesced"]?.intValue == 1)
        #expect(replaced["explanation"]?.stringValue?.contains("replaced it") == true, "\(replaced["explanation"] ?? .null)")
        #expect(try emulator.metric("apns_emulator_broadcast_deliveries_total", labels: #"outcome="coalesced""#) == 1)
        #expect(try record(second.header("apns-request-id"))["outcome"]?.stringValue == "stored")

        #expect(try emulator.admin("POST", "/api/v1/clock", body: ["advanceSeconds": 120]).status == 200)
        let expired = try record(second.header("apns-request-id"))
        #expect(expired["outcome"]?.stringValue == "expired", "\(expired)")
        #expect(expired["explanation"]?.stringValue?.contains("expired at") == true, "\(expired["explanation"] ?? .null)")
        #expect(try emulator.metric("apns_emulator_broadcast_deliveries_total", labels: #"outcome="expired""#) == 1)
        let channels = try emulator.admin("GET", "/api/v1/channels").json["channels"]?.arrayValue ?? []
        let shown = try #require(channels.first { $0.objectValue?["id"]?.stringValue == stored }?.objectValue)
        #expect(shown["storedMessage"] == nil || shown["storedMessage"] == .null, "\(shown)")
        try setOnline(away.deviceID, true)
        #expect(try eta(away.deviceID, away.activityID) == 30, "neither message reaches it")
    }

    /// A broadcast replacing the stored one changes both records in one step, the older first:
    /// a long poll for the device is answered with the new broadcast, not the one it replaced.
    @Test func aLongPollForTheDeviceGetsTheBroadcastThatReplacedTheStoredOne() throws {
        let stored = try channel(policy: 1)
        let away = try subscriber(stored)
        try setOnline(away.deviceID, false)
        let now = Int(Date().timeIntervalSince1970)
        let first = try broadcast(stored, eta: 1, expiration: "\(now + 600)")
        #expect(try record(first.header("apns-request-id"))["outcome"]?.stringValue == "stored")
        let answer = NSLock()
        nonisolated(unsafe) var reply: EmulatorProcess.AdminReply?
        let emulator = self.emulator
        let thread = Thread {
            let got = try? emulator.admin("GET", "/api/v1/notifications/wait?deviceId=\(away.deviceID)&timeout=20", timeoutMilliseconds: 30_000)
            answer.withLock { reply = got }
        }
        thread.start()
        #expect(try eventually { try emulator.metric("apns_emulator_admin_waiters") == 1 })
        let second = try broadcast(stored, eta: 2, timestamp: 1_700_000_200, expiration: "\(now + 600)")
        #expect(second.status == 200)
        var waited: EmulatorProcess.AdminReply?
        #expect(
            try eventually {
                waited = answer.withLock { reply }
                return waited != nil
            })
        #expect(waited?.status == 200)
        #expect(waited?.json["apnsId"]?.stringValue == second.header("apns-request-id"), "\(waited?.raw ?? "")")
        #expect(waited?.json["outcome"]?.stringValue == "stored")
    }

    /// The largest `apns-expiration` a header can carry overflowed into milliseconds and
    /// stopped the process; it is a time far ahead, so the channel keeps the message 8 hours.
    @Test func theLargestExpirationIsAFarFutureNotACrash() throws {
        let stored = try channel(policy: 1)
        let sent = try broadcast(stored, eta: 3, expiration: String(Int64.max))
        #expect(sent.status == 200)
        #expect(try emulator.admin("GET", "/livez").status == 200)
        let listed = try emulator.admin("GET", "/api/v1/channels").json["channels"]?.arrayValue ?? []
        let shown = listed.first { $0["id"]?.stringValue == stored }
        #expect(shown?["storedMessage"]?["requestId"]?.stringValue == sent.header("apns-request-id"), "\(shown ?? .null)")
    }

    /// A deleted channel takes no new subscribers: its stored broadcast's record stops saying
    /// it waits for them, and still reaches the activity whose device was offline.
    @Test func aDeletedChannelsStoredBroadcastWaitsOnlyForThoseSubscribedBefore() throws {
        let stored = try channel(policy: 1)
        let away = try subscriber(stored)
        try setOnline(away.deviceID, false)
        let sent = try broadcast(stored, eta: 7)
        let requestID = sent.header("apns-request-id")
        #expect(try record(requestID)["explanation"]?.stringValue?.contains("for later subscribers") == true)
        let deleted = try management.send("DELETE", "/1/apps/\(Self.bundle)/channels", headers: [("apns-channel-id", stored)])
        #expect(deleted.status == 204)
        let after = try record(requestID)
        #expect(after["outcome"]?.stringValue == "stored", "\(after)")
        let why = after["explanation"]?.stringValue ?? ""
        #expect(!why.contains("for later subscribers") && why.contains("the channel was deleted"), "\(why)")
        try setOnline(away.deviceID, true)
        #expect(try eta(away.deviceID, away.activityID) == 7, "the activity subscribed before still takes it")
        let shown = try record(requestID)
        #expect(shown["outcome"]?.stringValue == "delivered")
        #expect(shown["explanation"]?.stringValue?.contains("for later subscribers") == false, "\(shown)")
    }

    @Test func anActivityThatSubscribesWhileItsDeviceIsOfflineGetsTheStoredMessageWhenItIsBack() throws {
        let stored = try channel(policy: 1)
        let sent = try broadcast(stored, eta: 4)
        #expect(sent.status == 200)
        let (deviceID, _) = try emulator.createDevice()
        #expect(
            try emulator.admin(
                "PUT", "/api/v1/devices/\(deviceID)/apps/\(Self.bundle)/live-activities", body: ["types": ["DeliveryAttributes"]]
            ).status == 200)
        try setOnline(deviceID, false)
        let started = try emulator.admin(
            "POST", "/api/v1/devices/\(deviceID)/apps/\(Self.bundle)/activities",
            body: ["attributesType": "DeliveryAttributes", "attributes": [:], "contentState": ["eta": 30], "channel": .string(stored)])
        let activityID = try #require(started.json["activityId"]?.stringValue)
        #expect(try eta(deviceID, activityID) == 30, "offline: nothing arrives")
        try setOnline(deviceID, true)
        #expect(try eta(deviceID, activityID) == 4)
        #expect(try record(sent.header("apns-request-id"))["broadcast"]?.objectValue?["reached"]?.intValue == 1)
    }

    @Test func theEventStreamCarriesChannelChangesAndBroadcastRecords() throws {
        let events = try EventStreamReader(emulator)
        // Changes made before the emulator took the stream are not in it.
        #expect(try eventually { try emulator.metric("apns_emulator_admin_event_streams") >= 1 })
        let id = try channel(policy: 1)
        let created = try #require(events.next("channel"), "no channel event for the create")
        #expect(created["id"]?.stringValue == id && created["live"]?.boolValue == true)
        _ = try subscriber(id)
        let sent = try broadcast(id, eta: 3)
        // The record's event comes first (records are announced before channels).
        var record = events.next("notification")
        while let seen = record, seen["broadcast"] == nil { record = events.next("notification") }
        #expect(record?["apnsId"]?.stringValue == sent.header("apns-request-id"))
        let published = try #require(events.next("channel"))
        #expect(published["id"]?.stringValue == id && published["broadcasts"]?.intValue == 1 && published["subscribers"]?.intValue == 1)
        #expect(
            try management.send("DELETE", "/1/apps/\(Self.bundle)/channels", headers: [("apns-channel-id", id)]).status == 204)
        #expect(events.next("channel")?["live"]?.boolValue == false)
    }

    @Test func aRefusedBroadcastIsJournaledWithItsReason() throws {
        let channel = try channel(policy: 0)
        let refused = try push.send(
            "POST", "/4/broadcasts/apps/\(Self.bundle)",
            headers: [("apns-channel-id", channel), ("apns-push-type", "LiveActivity"), ("apns-priority", "10"), ("apns-expiration", "1900000000")],
            body: #"{"aps":{"event":"update","timestamp":1,"content-state":{}}}"#)
        #expect(refused.status == 400)
        let record = try record(refused.header("apns-request-id"))
        #expect(record["reason"]?.stringValue == "BadExpirationDate" && record["outcome"]?.stringValue == "rejected")
        #expect(record["broadcast"]?.objectValue?["channel"]?.stringValue == channel)
        let unauthenticated = try push.connection.send(
            ClientRequest(
                method: "POST", path: "/4/broadcasts/apps/\(Self.bundle)",
                headers: [HTTP2HeaderField(name: "apns-channel-id", value: channel)], body: Array("{}".utf8)))
        #expect(unauthenticated.status == 403)
        #expect(try self.record(unauthenticated.header("apns-request-id"))["reason"]?.stringValue == "MissingProviderToken")
    }

    @Test func aTokenPushToAnOfflineDeviceWaitsAndTheNewestIsAppliedWhenItIsBack() throws {
        let (deviceID, _) = try emulator.createDevice()
        let declared = try emulator.admin(
            "PUT", "/api/v1/devices/\(deviceID)/apps/\(Self.bundle)/live-activities", body: ["types": ["DeliveryAttributes"]])
        #expect(declared.status == 200)
        let started = try emulator.admin(
            "POST", "/api/v1/devices/\(deviceID)/apps/\(Self.bundle)/activities",
            body: ["attributesType": "DeliveryAttributes", "attributes": [:], "contentState": ["eta": 30], "pushToken": true])
        let activityID = try #require(started.json["activityId"]?.stringValue)
        let token = try #require(started.json["pushToken"]?.stringValue)
        try setOnline(deviceID, false)
        let connection = try emulator.connect()
        func update(_ eta: Int, _ timestamp: Int) throws -> APNsResult {
            var request = try emulator.push(
                token, payload: #"{"aps":{"event":"update","timestamp":\#(timestamp),"content-state":{"eta":\#(eta)}}}"#,
                topic: Self.bundle + ".push-type.liveactivity")
            request.pushType = "liveactivity"
            request.priority = "5"
            return APNsResult(try connection.send(request.request))
        }
        let older = try update(20, 1_700_000_100)
        let newer = try update(15, 1_700_000_200)
        #expect(older.status == 200 && newer.status == 200)
        #expect(try record(older.apnsID)["outcome"]?.stringValue == "coalesced")
        #expect(try record(newer.apnsID)["outcome"]?.stringValue == "stored")
        #expect(try eta(deviceID, activityID) == 30)
        try setOnline(deviceID, true)
        #expect(try eta(deviceID, activityID) == 15)
        let applied = try record(newer.apnsID)
        #expect(applied["outcome"]?.stringValue == "delivered" && applied["stored"]?.boolValue == true)
    }
}
