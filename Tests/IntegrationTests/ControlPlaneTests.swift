import APNsCore
import Foundation
import Glibc
import HTTP2
import Networking
import ProviderClient
import Testing
import TestSupport

/// Reads a server-sent event stream from the admin API on a raw socket.
final class EventStreamReader {
    let fd: Int32
    private var buffer = ""

    init(_ emulator: EmulatorProcess, query: String = "") throws {
        let address = try emulator.address("admin")
        fd = try Socket.connect(to: address)
        Socket.setTimeouts(fd, milliseconds: 200)
        let request = "GET /api/v1/events\(query) HTTP/1.1\r\nHost: \(address)\r\n\r\n"
        _ = request.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
    }

    deinit { close(fd) }

    /// The data of the next event of `type`, within the timeout.
    func next(_ type: String, timeout: TimeInterval = 5) -> JSONValue? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            while let range = buffer.range(of: "\n\n") {
                let block = String(buffer[..<range.lowerBound])
                buffer.removeSubrange(..<range.upperBound)
                let lines = block.split(separator: "\n")
                guard lines.contains("event: \(type)") else { continue }
                if let data = lines.first(where: { $0.hasPrefix("data: ") }) {
                    return (try? JSONValue.parse(String(data.dropFirst(6)))) ?? .null
                }
            }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = recv(fd, &chunk, chunk.count, 0)
            if n > 0 { buffer += String(decoding: chunk[0..<n], as: UTF8.self) }
        }
        return nil
    }
}

@Suite("Control plane: inspection API")
struct ControlPlaneTests {
    /// Under load on two event loops a record changes from two threads (deferred, then
    /// throttled by the budget); the last event a stream carries for each record is its state
    /// in the journal, never an older one.
    @Test func aRecordsLastEventIsItsStateInTheJournal() throws {
        let emulator = try EmulatorProcess(["--threads", "2", "--h2c-sandbox-listen", "127.0.0.1:0"])
        let events = try EventStreamReader(emulator)
        let load = try run(
            EmulatorProcess.binary,
            [
                "load", "--admin", try emulator.address("admin").description, "--bundle", EmulatorProcess.bundleID,
                "--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(emulator.keyPath)", "--h2c", "--requests", "1000",
                "--devices", "10", "--connections", "2", "--mix", "alert=50,background=50",
            ], timeout: 60)
        #expect(load.status == 0, "\(load.err)")
        var last: [Int64: String] = [:]
        while let event = events.next("notification", timeout: 1.5) {
            if let sequence = event["sequence"]?.intValue, let outcome = event["outcome"]?.stringValue { last[sequence] = outcome }
        }
        var journal: [Int64: String] = [:]
        var cursor: String?
        repeat {
            let page = try emulator.admin("GET", "/api/v1/notifications?limit=500" + (cursor.map { "&cursor=\($0)" } ?? "")).json
            for record in page["notifications"]?.arrayValue ?? [] {
                if let sequence = record["sequence"]?.intValue, let outcome = record["outcome"]?.stringValue { journal[sequence] = outcome }
            }
            cursor = page["nextCursor"]?.stringValue
        } while cursor != nil
        #expect(journal.count >= 1000)
        let stale = journal.filter { last[$0.key] != nil && last[$0.key] != $0.value }
        #expect(
            stale.isEmpty,
            "\(stale.count) records whose last event is not their state, e.g. \(stale.prefix(3).map { "\($0.key): event \(last[$0.key]!), journal \($0.value)" })"
        )
        #expect(last.count >= 1000, "every record had an event (\(last.count))")
    }

    @Test func infoTellsVersionUptimeAddressesAndCounts() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        _ = try emulator.createDevice()
        let info = try emulator.admin("GET", "/api/v1/info")
        #expect(info.status == 200)
        #expect(info.json["version"]?.stringValue?.isEmpty == false)
        #expect(info.json["uptimeSeconds"]?.intValue != nil)
        // Uptime is real time: moving the emulator's clock an hour does not add to it.
        #expect(try emulator.admin("POST", "/api/v1/clock", body: ["advanceSeconds": 3600]).status == 200)
        let moved = try emulator.admin("GET", "/api/v1/info").json["uptimeSeconds"]?.intValue ?? -1
        #expect((0..<600).contains(moved), "\(moved)")
        #expect(info.json["addresses"]?["sandbox"]?.stringValue == emulator.ready["sandbox"]?.stringValue)
        #expect(info.json["counts"]?["devices"]?.intValue == 1)
        let openapi = try emulator.admin("GET", "/api/v1/openapi.json")
        #expect(openapi.json["openapi"]?.stringValue == "3.0.3")
        #expect(openapi.json["paths"]?["/api/v1/notifications/wait"] != nil)
    }

    @Test func filtersLatestLookupAndDelete() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        var ok = try emulator.push(device.token)
        ok.pushType = "alert"
        let first = APNsResult(try connection.send(ok.request))
        var background = try emulator.push(device.token, payload: #"{"aps":{"content-available":1}}"#)
        background.pushType = "background"
        background.priority = "5"
        let second = APNsResult(try connection.send(background.request))
        // `since` is inclusive and in milliseconds: it starts just after the earlier pushes'
        // millisecond, and the next push is sent once the clock is past that millisecond.
        let secondAt = try #require(try emulator.admin("GET", "/api/v1/notifications/\(second.apnsID!)").json["receivedAtMs"]?.intValue)
        let before = secondAt + 1
        #expect(try eventually { Int64(Date().timeIntervalSince1970 * 1000) >= before })
        let bad = APNsResult(try connection.send(try emulator.push("00ff").request))
        #expect(bad.reason == "BadDeviceToken")

        #expect(try emulator.admin("GET", "/api/v1/notifications?status=400").json["notifications"]?.arrayValue?.count == 1)
        #expect(try emulator.admin("GET", "/api/v1/notifications?reason=BadDeviceToken").json["notifications"]?.arrayValue?.count == 1)
        #expect(try emulator.admin("GET", "/api/v1/notifications?pushType=background").json["notifications"]?.arrayValue?.count == 1)
        #expect(try emulator.admin("GET", "/api/v1/notifications?outcome=rejected").json["notifications"]?.arrayValue?.count == 1)
        #expect(try emulator.admin("GET", "/api/v1/notifications?environment=production").json["notifications"]?.arrayValue?.count == 0)
        #expect(try emulator.admin("GET", "/api/v1/notifications?since=\(before)").json["notifications"]?.arrayValue?.count == 1)
        let iso = RFC3339.format(milliseconds: before)
        #expect(try emulator.admin("GET", "/api/v1/notifications?since=\(iso)").json["notifications"]?.arrayValue?.count == 1)
        #expect(try emulator.admin("GET", "/api/v1/notifications?outcome=nonsense").status == 400)
        // A misspelt filter is refused, never ignored (it would match every record), naming
        // what the endpoint takes; each endpoint's own parameters are allowed on it alone.
        for (path, own) in [
            ("/api/v1/notifications", ", limit, cursor"), ("/api/v1/notifications/latest", ""),
            ("/api/v1/notifications/wait", ", timeout"), ("/api/v1/events", ", access_token"),
        ] {
            for query in ["push_type=alert", "PushType=alert", "bundleId=com.example.app"] {
                let reply = try emulator.admin("GET", "\(path)?token=\(device.token)&\(query)")
                let message = reply.json["error"]?.stringValue ?? ""
                #expect(reply.status == 400, "\(path)?\(query): \(reply.status)")
                #expect(message.hasPrefix("unknown query parameter \"\(query.prefix { $0 != "=" })\""), "\(message)")
                #expect(message.hasSuffix("deviceId\(own)"), "\(message)")
            }
        }
        #expect(
            try emulator.admin("GET", "/api/v1/notifications?PushType=alert").json["error"]?.stringValue?.contains("did you mean \"pushType\"")
                == true)
        #expect(try emulator.admin("GET", "/api/v1/notifications/latest?timeout=1").status == 400, "wait's parameter")
        #expect(try emulator.admin("DELETE", "/api/v1/notifications?stauts=400").status == 400)
        #expect(try emulator.notifications().count == 3, "a refused delete deletes nothing")
        #expect(try emulator.admin("GET", "/api/v1/notifications?push-type=background").json["notifications"]?.arrayValue?.count == 1)

        let latest = try emulator.admin("GET", "/api/v1/notifications/latest?token=\(device.token)")
        #expect(latest.json["pushType"]?.stringValue == "background")
        #expect(try emulator.admin("GET", "/api/v1/notifications/latest?topic=none").status == 404)
        let byID = try emulator.admin("GET", "/api/v1/notifications/\(first.apnsID!)")
        #expect(byID.json["apnsId"]?.stringValue == first.apnsID)
        #expect(byID.json["response"]?["status"]?.intValue == 200)
        #expect(byID.json["jwt"]?["verified"] == true)
        let byUnique = try emulator.admin("GET", "/api/v1/notifications/\(first.uniqueID!)")
        #expect(byUnique.json["apnsId"]?.stringValue == first.apnsID)
        #expect(try emulator.admin("GET", "/api/v1/notifications/NOPE").status == 404)

        let deleted = try emulator.admin("DELETE", "/api/v1/notifications?status=400")
        #expect(deleted.json["deleted"]?.intValue == 1)
        #expect(try emulator.notifications().count == 2)
    }

    @Test func waitReturnsTheNextMatchOrAnEarlierOneWithSinceOr408() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        // The waiting request runs on another thread; its answer comes back through a lock.
        let answer = NSLock()
        nonisolated(unsafe) var reply: EmulatorProcess.AdminReply?
        let thread = Thread {
            let got = try? emulator.admin("GET", "/api/v1/notifications/wait?token=\(device.token)&timeout=30")
            answer.withLock { reply = got }
        }
        thread.start()
        // Push once the emulator holds the long poll (its waiter gauge), so the push is the
        // next match and not an earlier one.
        #expect(try eventually { try emulator.metric("apns_emulator_admin_waiters") == 1 })
        #expect(answer.withLock { reply } == nil, "nothing matched yet, so the long poll is still open")
        let pushed = APNsResult(try connection.send(try emulator.push(device.token).request))
        var waited: EmulatorProcess.AdminReply?
        // A 200 is the push waking the poll (its own timeout would answer 408).
        #expect(
            try eventually {
                waited = answer.withLock { reply }; return waited != nil
            })
        #expect(waited?.status == 200)
        #expect(waited?.json["apnsId"]?.stringValue == pushed.apnsID)
        #expect(try emulator.metric("apns_emulator_admin_waiter_wakeups_total") == 1)
        #expect(try emulator.metric("apns_emulator_admin_waiters") == 0)

        // With since, an earlier record counts.
        let since = try emulator.admin("GET", "/api/v1/notifications/wait?token=\(device.token)&timeout=1&since=0")
        #expect(since.status == 200)
        #expect(since.json["apnsId"]?.stringValue == pushed.apnsID)
        // Nothing matches: the timeout answers, with 408.
        let none = try emulator.admin("GET", "/api/v1/notifications/wait?token=abcd&timeout=0.5")
        #expect(none.status == 408)
        #expect(none.json["error"]?.stringValue?.contains("no notification matched within 0.5 seconds") == true, "\(none.raw)")
        #expect(try emulator.metric("apns_emulator_admin_waiter_wakeups_total") == 1, "the timeout is no wake-up")
    }

    @Test func eventsStreamEveryRecordAsItHappens() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let stream = try EventStreamReader(emulator)
        // The push goes out once the emulator has the stream registered (its stream gauge).
        #expect(try eventually { try emulator.metric("apns_emulator_admin_event_streams") == 1 })
        let pushed = APNsResult(try emulator.connect().send(try emulator.push(device.token).request))
        let event = try #require(stream.next("notification"))
        #expect(event["apnsId"]?.stringValue == pushed.apnsID)
        #expect(event["token"]?.stringValue == device.token)
        // A clock moved ahead is heard by every stream, with the new time (the web UI's Lock
        // Screens follow it without polling).
        let moved = try emulator.admin("POST", "/api/v1/clock", body: ["advanceSeconds": 3600])
        let clock = try #require(stream.next("clock"))
        #expect(clock["offsetMs"]?.intValue == 3_600_000)
        #expect(clock["nowMs"]?.intValue == moved.json["nowMs"]?.intValue)
        #expect(try emulator.admin("POST", "/api/v1/reset").status == 200)
        #expect(stream.next("reset") != nil)
    }

    /// Installing the other environment's build is a reinstall: what waited in the store for
    /// the old install is discarded, not delivered to the new one under the old token.
    @Test func theOtherEnvironmentsBuildDiscardsWhatWaitedForTheOldOne() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(device.deviceID)", body: ["online": false]).status == 200)
        let stored = APNsResult(try emulator.connect().send(try emulator.push(device.token).request))
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(stored.apnsID!)").json["outcome"] == "stored")
        let production = try emulator.admin(
            "POST", "/api/v1/devices/\(device.deviceID)/apps", body: ["bundleId": .string(EmulatorProcess.bundleID), "environment": "production"])
        #expect(production.status == 201, "\(production.raw)")
        let record = try emulator.admin("GET", "/api/v1/notifications/\(stored.apnsID!)").json
        #expect(record["outcome"] == "dropped-by-system", "\(record)")
        #expect(record["explanation"]?.stringValue?.contains("replaced by its production build") == true, "\(record)")
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(device.deviceID)", body: ["online": true]).status == 200)
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(stored.apnsID!)").json["outcome"] == "dropped-by-system")
    }

    @Test func devicesGoOfflineAndOnlineAndTokensCanBeSetDirectly() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(device.deviceID)", body: ["online": false]).json["online"] == false)
        let stored = APNsResult(try connection.send(try emulator.push(device.token).request))
        #expect(stored.status == 200)
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(stored.apnsID!)").json["outcome"] == "stored")
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(device.deviceID)", body: ["online": true]).json["online"] == true)
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(stored.apnsID!)").json["outcome"] == "delivered")

        // App settings decide what a virtual device does.
        let patched = try emulator.admin(
            "PATCH", "/api/v1/devices/\(device.deviceID)/apps/\(EmulatorProcess.bundleID)",
            body: ["authorization": "denied", "appState": "foreground"])
        #expect(patched.json["authorization"] == "denied")
        let denied = APNsResult(try connection.send(try emulator.push(device.token).request))
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(denied.apnsID!)").json["outcome"] == "dropped-by-system")
        #expect(
            try emulator.admin(
                "PATCH", "/api/v1/devices/\(device.deviceID)/apps/\(EmulatorProcess.bundleID)",
                body: ["appState": "sleeping"]
            ).status == 400)

        // Token states set directly.
        let since: Int64 = 1_700_000_000_123
        #expect(
            try emulator.admin("PUT", "/api/v1/tokens/\(device.token)/state", body: ["state": "unregistered", "since": .int(since)]).status == 200)
        let gone = APNsResult(try connection.send(try emulator.push(device.token).request))
        #expect(gone.status == 410)
        #expect(gone.timestampMs == since)
        let goneRecord = try emulator.admin("GET", "/api/v1/notifications/\(gone.apnsID!)").json
        #expect(
            goneRecord["explanation"]?.stringValue?.hasSuffix("it was set unregistered through the admin API (the app still has it)") == true,
            "\(goneRecord)")
        // Seconds where milliseconds are asked are refused, naming the value meant (a 410 timestamp
        // in January 1970 otherwise); the journal's `since` too.
        let seconds = try emulator.admin("PUT", "/api/v1/tokens/\(device.token)/state", body: ["state": "unregistered", "since": 1_796_631_914])
        #expect(
            seconds.status == 400 && seconds.raw.contains("looks like seconds since 1970") && seconds.raw.contains("1796631914000"), "\(seconds.raw)")
        let listed = try emulator.admin("GET", "/api/v1/notifications?since=1796631914")
        #expect(listed.status == 400 && listed.raw.contains("looks like seconds since 1970"), "\(listed.raw)")
        _ = try emulator.admin("PUT", "/api/v1/tokens/\(device.token)/state", body: ["state": "expired"])
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).reason == "ExpiredToken")
        _ = try emulator.admin("PUT", "/api/v1/tokens/\(device.token)/state", body: ["state": "rate-limited"])
        let limited = APNsResult(try connection.send(try emulator.push(device.token).request))
        #expect(limited.status == 429)
        #expect(limited.reason == "TooManyRequests")
        _ = try emulator.admin("PUT", "/api/v1/tokens/\(device.token)/state", body: ["state": "active"])
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
        #expect(try emulator.admin("PUT", "/api/v1/tokens/\(device.token)/state", body: ["state": "asleep"]).status == 400)
        #expect(try emulator.admin("PUT", "/api/v1/tokens/00aa/state", body: ["state": "expired"]).status == 404)

        // An uninstall wins over a state set here: the token answers 410 Unregistered (a
        // rate-limited one went on answering 429), and cannot be made to answer again.
        _ = try emulator.admin("PUT", "/api/v1/tokens/\(device.token)/state", body: ["state": "rate-limited"])
        let uninstalled = try emulator.admin("DELETE", "/api/v1/devices/\(device.deviceID)/apps/\(EmulatorProcess.bundleID)")
        #expect(uninstalled.status == 200)
        let after = APNsResult(try connection.send(try emulator.push(device.token).request))
        #expect(after.status == 410 && after.reason == "Unregistered", "\(after.status) \(after.reason ?? "")")
        #expect(try emulator.admin("GET", "/api/v1/tokens/\(device.token)").json["state"] == "unregistered")
        let revived = try emulator.admin("PUT", "/api/v1/tokens/\(device.token)/state", body: ["state": "active"])
        #expect(revived.status == 409 && revived.raw.contains("no longer its app's"), "\(revived.raw)")
        #expect(try emulator.admin("PUT", "/api/v1/tokens/\(device.token)/state", body: ["state": "unregistered", "since": 5]).status == 200)
    }

    @Test func reinstallRotateEraseAndRestoreGiveNewTokens() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        let reinstalled = try emulator.admin("POST", "/api/v1/devices/\(device.deviceID)/apps/\(EmulatorProcess.bundleID)/reinstall")
        let second = try #require(reinstalled.json["tokens"]?.arrayValue?.first?["token"]?.stringValue)
        #expect(second != device.token)
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 410)
        #expect(APNsResult(try connection.send(try emulator.push(second).request)).status == 200)
        let rotated = try emulator.admin("POST", "/api/v1/devices/\(device.deviceID)/apps/\(EmulatorProcess.bundleID)/rotate")
        let third = try #require(rotated.json["tokens"]?.arrayValue?.first?["token"]?.stringValue)
        #expect(APNsResult(try connection.send(try emulator.push(second).request)).status == 410)
        let other = try emulator.createDevice()
        let restored = try emulator.admin("POST", "/api/v1/devices/\(other.deviceID)/restore", body: ["fromDeviceId": .string(device.deviceID)])
        #expect(restored.status == 200)
        let fourth = try #require(restored.json["tokens"]?.arrayValue?.first?["token"]?.stringValue)
        #expect(APNsResult(try connection.send(try emulator.push(third).request)).status == 410)
        #expect(APNsResult(try connection.send(try emulator.push(fourth).request)).status == 200)
        let erased = try emulator.admin("POST", "/api/v1/devices/\(other.deviceID)/erase")
        #expect(erased.json["apps"]?.arrayValue?.isEmpty == true)
        #expect(APNsResult(try connection.send(try emulator.push(fourth).request)).status == 410)
        #expect(try emulator.admin("POST", "/api/v1/devices/nobody/erase").status == 404)
    }

    @Test func keysAndAppsAtRunTime() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice(bundleID: "com.runtime.app")
        let key = ProviderSigningKey(teamID: "RUNTIME001", keyID: "RUNKEY0001", privateKey: try .generate())
        var push = try emulator.push(device.token, topic: "com.runtime.app")
        push.providerToken = try key.token(issuedAt: Int64(Date().timeIntervalSince1970))
        #expect(APNsResult(try emulator.connect().send(push.request)).reason == "InvalidProviderToken")
        let added = try emulator.admin(
            "POST", "/api/v1/keys",
            body: [
                "teamId": "RUNTIME001", "keyId": "RUNKEY0001",
                "pem": .string(key.privateKey.publicKey.pem),
            ])
        #expect(added.status == 201)
        #expect(added.json["kind"] == "team-scoped")
        #expect(APNsResult(try emulator.connect().send(push.request)).reason == "TopicDisallowed")
        #expect(try emulator.admin("POST", "/api/v1/apps", body: ["teamId": "RUNTIME001", "bundleId": "com.runtime.app"]).status == 201)
        let connection = try emulator.connect()
        #expect(APNsResult(try connection.send(push.request)).status == 200)
        #expect(try emulator.admin("GET", "/api/v1/keys").json["keys"]?.arrayValue?.count == 2)
        #expect(try emulator.admin("GET", "/api/v1/apps").json["apps"]?.arrayValue?.count == 2)
        #expect(try emulator.admin("DELETE", "/api/v1/keys/RUNKEY0001").status == 200)
        // The connection's cached verdict is dropped with the key.
        #expect(APNsResult(try connection.send(push.request)).reason == "InvalidProviderToken")
        #expect(try emulator.admin("DELETE", "/api/v1/apps/com.runtime.app").status == 200)
        #expect(try emulator.admin("DELETE", "/api/v1/apps/com.runtime.app").status == 404)
        #expect(try emulator.admin("POST", "/api/v1/keys", body: ["teamId": "X", "keyId": "Y", "pem": "garbage"]).status == 400)
    }

    @Test func keyRefusalsNameTheFieldAndNeverEchoTheKey() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let pem = try String(contentsOfFile: emulator.keyPath, encoding: .utf8)
        let body = pem.split(separator: "\n").dropFirst().first.map(String.init) ?? pem
        let base: JSONObject = JSONObject([("teamId", "TEAM000001"), ("keyId", "KEY0000009"), ("pem", .string(pem))])
        let cases: [(field: String, value: JSONValue, says: String)] = [
            ("environment", "staging", "\"environment\" must be \"sandbox\" or \"production\""),
            ("topics", "com.example.app", "\"topics\" must be a non-empty list of bundle ids"),
            ("teamId", "TEAM 1", "\"teamId\" (the team id) is required: 1 to 64 letters and digits"),
            ("relatedKeyId", 7, "\"relatedKeyId\" must be a key id"),
        ]
        for (field, value, says) in cases {
            var request = base
            request[field] = value
            let reply = try emulator.admin("POST", "/api/v1/keys", body: .object(request))
            #expect(reply.status == 400, "\(field)")
            let message = reply.json["error"]?.stringValue ?? ""
            #expect(message.contains(says), "\(field): \(message)")
            #expect(!reply.raw.contains(body) && !reply.raw.contains("PRIVATE KEY") && !reply.raw.contains("\"path\""), "\(reply.raw)")
        }
        var both = base
        both["path"] = .string(emulator.keyPath)
        #expect(try emulator.admin("POST", "/api/v1/keys", body: .object(both)).json["error"] == "give the key as \"pem\" or as \"path\", not both")
    }

    @Test func keysAndAppsAreNotRedefinedUnasked() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let pem = try String(contentsOfFile: emulator.keyPath, encoding: .utf8)
        let other = try ES256PrivateKey.generate().publicKey.pem
        let keyID = JSONValue.string(EmulatorProcess.keyID)
        let cases: [(JSONValue, String)] = [
            (["teamId": "OTHERTEAM1", "keyId": keyID, "pem": .string(pem)], "with another teamId;"),
            (["teamId": .string(EmulatorProcess.teamID), "keyId": keyID, "pem": .string(other)], "with another key material;"),
            (
                ["teamId": .string(EmulatorProcess.teamID), "keyId": keyID, "pem": .string(pem), "environment": "production"],
                "with another environment;"
            ),
        ]
        for (body, says) in cases {
            let reply = try emulator.admin("POST", "/api/v1/keys", body: body)
            #expect(reply.status == 409, "\(reply.raw)")
            let message = reply.json["error"]?.stringValue ?? ""
            #expect(message.contains(says) && message.hasSuffix("DELETE /api/v1/keys/\(EmulatorProcess.keyID) first"), "\(message)")
        }
        let movedApp = try emulator.admin("POST", "/api/v1/apps", body: ["teamId": "OTHERTEAM1", "bundleId": .string(EmulatorProcess.bundleID)])
        #expect(movedApp.status == 409)
        // An empty field is named as the field, not in the command line's TEAMID:BUNDLEID form.
        let emptyTeam = try emulator.admin("POST", "/api/v1/apps", body: ["teamId": "", "bundleId": "com.example.zzz"])
        #expect(emptyTeam.status == 400 && emptyTeam.json["error"]?.stringValue?.hasPrefix("\"teamId\" is empty") == true, "\(emptyTeam.raw)")
        #expect(
            movedApp.json["error"]
                == .string(
                    "app \(EmulatorProcess.bundleID) belongs to team \(EmulatorProcess.teamID) already; to give it to team OTHERTEAM1, DELETE /api/v1/apps/\(EmulatorProcess.bundleID) first"
                ))
        // The same definition again is a success that changes nothing (the public half of the key is the key too).
        let publicHalf = try ES256PrivateKey(pem: pem).publicKey.pem
        let same = try emulator.admin(
            "POST", "/api/v1/keys", body: ["teamId": .string(EmulatorProcess.teamID), "keyId": keyID, "pem": .string(publicHalf)])
        #expect(same.status == 201)
        #expect(same.json["teamId"] == .string(EmulatorProcess.teamID))
        let sameApp = try emulator.admin(
            "POST", "/api/v1/apps", body: ["teamId": .string(EmulatorProcess.teamID), "bundleId": .string(EmulatorProcess.bundleID)])
        #expect(sameApp.status == 201)
        // The configured key and app still sign and own.
        #expect(APNsResult(try emulator.connect().send(try emulator.push(device.token).request)).status == 200)
    }

    /// Inputs found from outside to crash the process, or to be taken silently: each is a 400
    /// now, and the emulator goes on serving.
    @Test func outOfRangeNumbersAndStrayInputsAreRefusedNotFatal() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        for value in ["1e16", "-1e16", "1e300"] {
            let reply = try emulator.admin(
                "POST", "/api/v1/devices/nosuch/activities/nosuch/end", body: ["dismissalDate": try JSONValue.parse(value)])
            #expect(reply.status == 400, "dismissalDate \(value): \(reply.raw)")
            #expect(reply.json["error"]?.stringValue?.contains("year 9999") == true, "\(reply.raw)")
        }
        #expect(try emulator.admin("GET", "/api/v1/stats?since=-9223372036854775807").status == 200)
        #expect(try emulator.admin("GET", "/api/v1/stats?since=9223372036854775807").status == 200)
        #expect(try emulator.admin("GET", "/livez").status == 200, "still serving")

        for (query, status) in [("strict=yes", 400), ("strict=TRUE", 400), ("strict=false", 200), ("strict=0", 200), ("scrict=1", 400)] {
            #expect(try emulator.admin("GET", "/api/v1/checks?\(query)").status == status, "\(query)")
        }
        #expect(try emulator.admin("GET", "/api/v1/channels?bundleid=com.example.app").status == 400)
        #expect(try emulator.admin("GET", "/api/v1/channels?bundleId=com.example.app").status == 200)

        let device = try emulator.createDevice()
        #expect(try emulator.admin("PUT", "/api/v1/tokens/\(device.token)/state", body: ["state": "unregistered", "since": -5]).status == 400)
        #expect(try emulator.admin("POST", "/api/v1/reset", body: .raw(Array("garbage".utf8))).status == 400)
        #expect(try emulator.admin("POST", "/api/v1/reset", body: ["confirm": true]).status == 400)
        #expect(try emulator.admin("POST", "/api/v1/devices/\(device.deviceID)/erase", body: ["x": 1]).status == 400)
        #expect(try emulator.admin("POST", "/api/v1/reset", body: [:]).status == 200)
        #expect(try emulator.admin("POST", "/api/v1/reset").status == 200)
    }

    @Test func metricsCountWhatHappened() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        for _ in 0..<3 { _ = try connection.send(try emulator.push(device.token).request) }
        _ = try connection.send(try emulator.push("00ff").request)
        let reply = try emulator.admin("GET", "/metrics")
        #expect(reply.status == 200)
        let text = reply.raw
        #expect(text.contains(#"apns_emulator_notifications_total{status="200",reason="",push_type="alert",environment="sandbox"} 3"#))
        #expect(text.contains(#"apns_emulator_notifications_total{status="400",reason="BadDeviceToken""#))
        // A push refused before its token is looked at is counted under the push type it names.
        var unsigned = try emulator.push(device.token)
        unsigned.providerToken = nil
        unsigned.pushType = "background"
        _ = try connection.send(unsigned.request)
        let refused = try emulator.admin("GET", "/metrics").raw
        #expect(refused.contains(#"{status="403",reason="MissingProviderToken",push_type="background",environment="sandbox"} 1"#), "\(refused)")
        #expect(text.contains(#"apns_emulator_delivery_outcomes_total{outcome="delivered"} 3"#))
        #expect(text.contains(#"apns_emulator_jwt_verifications_total{result="valid"} 1"#))
        #expect(text.contains("apns_emulator_provider_connections 1"))
        #expect(text.contains("apns_emulator_streams_total 4"))
        #expect(text.contains("apns_emulator_request_duration_seconds_count 4"))
        #expect(text.contains(#"apns_emulator_request_duration_seconds_bucket{le="+Inf"} 4"#))
        #expect(text.contains("# TYPE apns_emulator_device_connections gauge"))
        // Each of the four requests took the state lock (as did the device's creation), for some time.
        let acquisitions = try emulator.metric("apns_emulator_state_lock_acquisitions_total")
        #expect(acquisitions >= 5)
        #expect(try emulator.metric("apns_emulator_state_lock_held_seconds_total") > 0)
        _ = try connection.send(try emulator.push(device.token).request)
        #expect(try emulator.metric("apns_emulator_state_lock_acquisitions_total") >= acquisitions + 1)
        // A reset zeroes counters but keeps the connection.
        _ = try emulator.admin("POST", "/api/v1/reset")
        let after = try emulator.admin("GET", "/metrics").raw
        #expect(!after.contains("apns_emulator_notifications_total{"))
        #expect(after.contains("apns_emulator_streams_total 0"))
        #expect(after.contains("apns_emulator_provider_connections 1"))
    }

    /// Every counter a reset is said to zero goes to zero (those of connections ended for
    /// errors too), and uptime is real time, not the emulated clock's.
    @Test func aResetZeroesConnectionCountersAndUptimeIgnoresTheClock() throws {
        let emulator = try EmulatorProcess(["--error-disconnect", "5/60"], inProcess: true)
        // BadDeviceToken costs 5 points: the connection is ended with GOAWAY.
        _ = try? emulator.connect().send(try emulator.push("00ff").request)
        var ended = 0.0
        for _ in 0..<50 where ended == 0 {
            ended = try emulator.metric("apns_emulator_connections_ended_for_errors_total")
            if ended == 0 { Thread.sleep(forTimeInterval: 0.05) }
        }
        #expect(ended == 1)
        #expect(try emulator.admin("POST", "/api/v1/clock", body: ["advanceSeconds": 86_400]).status == 200)
        #expect(try emulator.metric("apns_emulator_uptime_seconds") < 3600)
        _ = try emulator.admin("POST", "/api/v1/reset")
        #expect(try emulator.metric("apns_emulator_connections_ended_for_errors_total") == 0)
    }
}

@Suite("Control plane: remaining endpoints")
struct RemainingEndpointTests {
    @Test func devicesAppsTapTokensAndFaultByID() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        #expect(try emulator.admin("GET", "/api/v1/devices").json["devices"]?.arrayValue?.count == 1)
        // Install a second app on the same device.
        _ = try emulator.admin("POST", "/api/v1/apps", body: ["teamId": .string(EmulatorProcess.teamID), "bundleId": "com.example.second"])
        let second = try emulator.admin(
            "POST", "/api/v1/devices/\(device.deviceID)/apps",
            body: ["bundleId": "com.example.second", "environment": "sandbox", "appState": "notRunning"])
        #expect(second.status == 201)
        let secondToken = try #require(second.json["token"]?.stringValue)
        #expect(try emulator.admin("GET", "/api/v1/devices/\(device.deviceID)").json["apps"]?.arrayValue?.count == 2)
        #expect(try emulator.admin("POST", "/api/v1/devices/nobody/apps", body: ["bundleId": "com.x.y", "environment": "sandbox"]).status == 404)

        // Tap a delivered notification on the virtual device.
        let pushed = APNsResult(try emulator.connect().send(try emulator.push(secondToken, topic: "com.example.second").request))
        let tapped = try emulator.admin("POST", "/api/v1/devices/\(device.deviceID)/tap", body: ["apnsId": .string(pushed.apnsID!)])
        #expect(tapped.status == 200)
        #expect(tapped.json["callbacks"] == ["didReceive"])
        #expect(tapped.json["launched"] == true)
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(pushed.apnsID!)").json["callbacks"]?.arrayValue?.contains("didReceive") == true)
        #expect(
            try emulator.admin("POST", "/api/v1/devices/\(device.deviceID)/tap", body: ["apnsId": .string(pushed.apnsID!)]).status == 400,
            "a tapped notification is no longer on screen")

        // Tokens.
        let tokens = try emulator.admin("GET", "/api/v1/tokens").json["tokens"]?.arrayValue ?? []
        #expect(tokens.count == 2)
        let one = try emulator.admin("GET", "/api/v1/tokens/\(device.token.uppercased())")
        #expect(one.json["state"] == "active")
        #expect(one.json["deviceId"]?.stringValue == device.deviceID)
        #expect(try emulator.admin("GET", "/api/v1/tokens/abcd").status == 404)

        // Fault rule by id.
        let rule = try emulator.admin("POST", "/api/v1/faults", body: ["match": ["topic": "com.example.second"], "action": ["status": 500]])
        let id = try #require(rule.json["id"]?.stringValue)
        let fetched = try emulator.admin("GET", "/api/v1/faults/\(id)")
        #expect(fetched.json["action"]?["reason"] == "InternalServerError")
        #expect(try emulator.admin("GET", "/api/v1/faults/nope").status == 404)
        let badID: JSONValue = ["id": "a\nb", "match": ["topic": "com.example.second"], "action": ["status": 500]]
        #expect(try emulator.admin("POST", "/api/v1/faults", body: badID).status == 400, "an id with a line break")

        // Removing the device invalidates its tokens.
        #expect(try emulator.admin("DELETE", "/api/v1/devices/\(device.deviceID)").status == 200)
        #expect(APNsResult(try emulator.connect().send(try emulator.push(device.token).request)).status == 410)
        #expect(try emulator.admin("DELETE", "/api/v1/devices/\(device.deviceID)").status == 404)
    }

    @Test func uiAndAssetsAreServed() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let page = try emulator.admin("GET", "/")
        #expect(page.status == 200)
        #expect(page.raw.contains("<html"))
        #expect(try emulator.admin("GET", "/ui/app.js").status == 200)
        #expect(try emulator.admin("GET", "/ui/style.css").status == 200)
        #expect(try emulator.admin("GET", "/ui/nope.js").status == 404)
    }

    /// The topic metric's slots go to topics of apps: junk topics are counted, as `other`.
    @Test func refusedTopicsTakeNoSlotOfTheTopicMetric() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
        for n in 0..<3 {
            let refused = APNsResult(try connection.send(try emulator.push(device.token, topic: "junk.topic.\(n)").request))
            #expect(refused.status == 400, "\(refused.reason ?? "")")
        }
        let text = try emulator.admin("GET", "/metrics").raw
        #expect(!text.contains("junk.topic"), "a refused topic has no label of its own")
        #expect(try emulator.metric("apns_emulator_requests_by_topic_total", labels: #"topic="other""#) == 3)
        #expect(try emulator.metric("apns_emulator_requests_by_topic_total", labels: #"topic="\#(EmulatorProcess.bundleID)""#) == 1)
    }

    /// What a request does not say is not guessed: a DELETE with a query or a body meant to
    /// narrow it (one fault rule) removes nothing, rather than everything.
    @Test func aDeleteTakesNeitherQueryNorBodyAndRemovesNothingThen() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        for id in ["x1", "x2"] {
            let rule: JSONValue = ["id": .string(id), "match": ["topic": "none.example"], "action": ["status": 500]]
            #expect(try emulator.admin("POST", "/api/v1/faults", body: rule).status == 201)
        }
        let byQuery = try emulator.admin("DELETE", "/api/v1/faults?id=x1")
        #expect(byQuery.status == 400)
        #expect(byQuery.json["error"]?.stringValue?.contains("\"id\"") == true, "\(byQuery.raw)")
        let byBody = try emulator.admin("DELETE", "/api/v1/faults", body: ["id": "x1"])
        #expect(byBody.status == 400, "\(byBody.raw)")
        #expect(try emulator.admin("GET", "/api/v1/faults").json["faults"]?.arrayValue?.count == 2, "nothing removed")
        #expect(try emulator.admin("DELETE", "/api/v1/faults/x1").status == 200)
        #expect(try emulator.admin("DELETE", "/api/v1/faults", body: [:]).status == 200, "an empty object is no field")
        #expect(try emulator.admin("GET", "/api/v1/faults").json["faults"]?.arrayValue?.isEmpty == true)

        let device = try emulator.createDevice()
        #expect(try emulator.admin("DELETE", "/api/v1/devices/\(device.deviceID)?force=1").status == 400)
        #expect(try emulator.admin("GET", "/api/v1/devices/\(device.deviceID)").status == 200, "the device is still there")
        // The journal's DELETE reads its filters: they narrow it, as before.
        _ = APNsResult(try emulator.connect().send(try emulator.push(device.token).request))
        #expect(try emulator.admin("DELETE", "/api/v1/notifications?topic=none.example").status == 200)
        #expect(try emulator.notifications().count == 1)
        // A page of none still says where the next starts.
        let empty = try emulator.admin("GET", "/api/v1/notifications?limit=0")
        #expect(empty.json["notifications"]?.arrayValue?.isEmpty == true)
        let cursor = try #require(empty.json["nextCursor"]?.stringValue, "\(empty.raw)")
        #expect(try emulator.admin("GET", "/api/v1/notifications?cursor=\(cursor)").json["notifications"]?.arrayValue?.count == 1)
    }

    @Test func refusalsNameWhatIsWrongInFewWords() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        // A fault's reason goes into answers, logs and /metrics labels.
        let nul: JSONValue = ["match": ["topic": "none.example"], "action": ["status": 400, "reason": "Bad\u{0}Reason"]]
        #expect(try emulator.admin("POST", "/api/v1/faults", body: nul).status == 400)
        // Ids of dots alone cannot be named in a path (clients remove `..` segments).
        func device(_ id: String) throws -> EmulatorProcess.AdminReply {
            try emulator.admin(
                "POST", "/api/v1/devices", body: ["deviceId": .string(id), "bundleId": .string(EmulatorProcess.bundleID), "environment": "sandbox"])
        }
        for id in [".", ".."] {
            let made = try device(id)
            #expect(made.status == 400, "\(id): \(made.raw)")
            #expect(made.json["error"]?.stringValue?.contains("not dots alone") == true, "\(made.raw)")
        }
        #expect(try device("..a").status == 201)
        // A device that does not exist is named as such by the Live Activity routes.
        for path in [
            "/api/v1/devices/ghost/activities/a1/rotate-token", "/api/v1/devices/ghost/activities/a1/end",
            "/api/v1/devices/ghost/apps/com.example.app/live-activities/T/rotate-token",
        ] {
            let answer = try emulator.admin("POST", path)
            #expect(answer.status == 404)
            #expect(answer.json["error"]?.stringValue == "no device with id 'ghost'", "\(path): \(answer.raw)")
        }
        let dismissed = try emulator.admin("DELETE", "/api/v1/devices/ghost/activities/a1")
        #expect(dismissed.json["error"]?.stringValue == "no device with id 'ghost'", "\(dismissed.raw)")
        // A refused value of a megabyte is not sent back whole; the field and the rule are.
        let huge = String(repeating: "x", count: 1 << 20)
        let answer = try emulator.admin("POST", "/api/v1/apps", body: ["teamId": .string(EmulatorProcess.teamID), "bundleId": .string(huge)])
        #expect(answer.status == 400)
        let message = try #require(answer.json["error"]?.stringValue)
        #expect(message.utf8.count < 4096, "\(message.utf8.count) bytes")
        #expect(message.contains("bytes left out"))
    }
}
