@testable import AdminAPI
import APNsCore
import HTTP1Server
import Testing

@Suite("Admin access rules")
struct AdminAccessTests {
    static func head(
        _ method: String = "GET", host: String? = "127.0.0.1:8197", _ fields: [(String, String)] = [],
        target: String = "/api/v1/info"
    ) -> HTTP1RequestHead {
        var all = fields
        if let host { all.insert(("host", host), at: 0) }
        return HTTP1RequestHead(method: method, target: target, minorVersion: 1, fields: all, framing: .none)
    }

    static func status(
        _ policy: AdminAccessPolicy, _ head: HTTP1RequestHead, open: Bool = false, queryToken: String? = nil,
        events: Bool = false
    ) -> Int {
        policy.check(head, open: open, queryToken: queryToken, acceptsQueryToken: events)?.status ?? 200
    }

    @Test(arguments: [
        ("127.0.0.1:8197", 200), ("localhost", 200), ("LOCALHOST.:8197", 200), ("ui.localhost:8197", 200),
        ("[::1]:8197", 200), ("127.1.2.3", 200), ("192.168.1.20:8197", 200), ("[fe80::1]", 200),
        ("evil.example", 403), ("evil.example:8197", 403), ("localhost.evil.example", 403), ("apns-emulator:8197", 403),
        ("127.0.0.1.nip.io", 403), ("bad host", 400), ("x:99999", 400),
    ])
    func hostNamesThisMachineOrAnIPAddress(host: String, status: Int) {
        #expect(Self.status(AdminAccessPolicy(), Self.head(host: host)) == status, "\(host)")
    }

    @Test func configuredAndBoundNamesAreAllowed() {
        let policy = AdminAccessPolicy(allowedHosts: ["apns-emulator"], boundHost: "admin.internal")
        #expect(Self.status(policy, Self.head(host: "apns-emulator:8197")) == 200)
        #expect(Self.status(policy, Self.head(host: "APNS-EMULATOR")) == 200)
        #expect(Self.status(policy, Self.head(host: "admin.internal:8197")) == 200)
        #expect(Self.status(policy, Self.head(host: "other")) == 403)
        let denial = AdminAccessPolicy().check(Self.head(host: "apns-emulator:8197"), open: true, queryToken: nil, acceptsQueryToken: false)
        #expect(denial?.message.contains("--admin-allowed-host apns-emulator") == true, "health checks need the Host too")
    }

    @Test func stateChangingRequestsComeFromNoPageOrTheUIItself() {
        let policy = AdminAccessPolicy()
        #expect(Self.status(policy, Self.head("POST")) == 200)
        #expect(Self.status(policy, Self.head("POST", [("origin", "http://127.0.0.1:8197")])) == 200)
        #expect(Self.status(policy, Self.head("DELETE", host: "localhost:8197", [("origin", "http://localhost:8197")])) == 200)
        #expect(Self.status(policy, Self.head("POST", [("origin", "http://evil.example")])) == 403)
        #expect(Self.status(policy, Self.head("POST", [("origin", "null")])) == 403)
        // Another port on the same machine is another origin (another local web app).
        #expect(Self.status(policy, Self.head("PUT", [("origin", "http://127.0.0.1:3000")])) == 403)
        #expect(Self.status(policy, Self.head("PATCH", [("origin", "http://localhost:8197")])) == 403)
        // Reading is left to the browser's same-origin policy (no CORS headers are sent).
        #expect(Self.status(policy, Self.head("GET", [("origin", "http://evil.example")])) == 200)
    }

    @Test(
        arguments: [
            (nil, 200), ("application/json", 200), ("Application/JSON; charset=utf-8", 200),
            ("text/plain", 415), ("text/plain;charset=UTF-8", 415), ("application/x-www-form-urlencoded", 415),
            ("multipart/form-data; boundary=x", 415), ("application/jsonp", 415),
        ] as [(String?, Int)])
    func bodiesAreJSONOrUntyped(type: String?, status: Int) {
        let fields = type.map { [("content-type", $0)] } ?? []
        #expect(Self.status(AdminAccessPolicy(), Self.head("POST", fields)) == status)
        #expect(Self.status(AdminAccessPolicy(), Self.head("GET", fields)) == 200)
    }

    @Test func theTokenIsNeededEverywhereButOpenRoutes() {
        let policy = AdminAccessPolicy(token: "s3cret-token")
        #expect(Self.status(policy, Self.head()) == 401)
        #expect(policy.check(Self.head(), open: false, queryToken: nil, acceptsQueryToken: false)?.headers.first?.0 == "WWW-Authenticate")
        #expect(Self.status(policy, Self.head("GET", [("authorization", "Bearer s3cret-token")])) == 200)
        #expect(Self.status(policy, Self.head("GET", [("authorization", "bearer s3cret-token")])) == 200)
        #expect(Self.status(policy, Self.head("GET", [("authorization", "Bearer s3cret-tokem")])) == 401)
        #expect(Self.status(policy, Self.head("GET", [("authorization", "Basic czNjcmV0")])) == 401)
        #expect(Self.status(policy, Self.head(), open: true) == 200)
        #expect(Self.status(policy, Self.head(), queryToken: "s3cret-token") == 401, "the query token is for the event stream only")
        #expect(Self.status(policy, Self.head(), queryToken: "s3cret-token", events: true) == 200)
        #expect(Self.status(policy, Self.head(), queryToken: "wrong", events: true) == 401)
    }

    @Test func constantTimeComparison() {
        #expect(AdminAccessPolicy.constantTimeEqual("abc", "abc"))
        #expect(!AdminAccessPolicy.constantTimeEqual("abc", "abd"))
        #expect(!AdminAccessPolicy.constantTimeEqual("abc", "abcd"))
        #expect(!AdminAccessPolicy.constantTimeEqual("", "a"))
    }
}

@Suite("Long-poll waiter index")
struct WaiterIndexTests {
    static func record(
        token: String, apnsID: String = "A-1", topic: String? = "com.example.app", deviceID: String? = nil
    )
        -> NotificationRecord
    {
        var record = NotificationRecord(apnsID: apnsID, token: token, environment: .sandbox, receivedAtMs: 1000)
        record.topic = topic
        record.deviceID = deviceID
        record.status = 200
        return record
    }

    @Test func aRecordIsComparedOnlyWithWaitersFiledUnderItsKeys() {
        var index = WaiterIndex<Int>()
        for i in 0..<100 {
            var query = NotificationQuery()
            query.token = "aa\(i)"
            index.insert(UInt64(i), query: query, value: i)
        }
        var byStatus = NotificationQuery()
        byStatus.status = 410
        index.insert(1000, query: byStatus, value: 1000)
        var byApnsID = NotificationQuery()
        byApnsID.apnsID = "b-2"
        byApnsID.token = "aa5"
        index.insert(1001, query: byApnsID, value: 1001)
        #expect(index.count == 102)

        let (none, examinedNone) = index.takeMatches(for: Self.record(token: "ff"))
        #expect(none.isEmpty)
        #expect(examinedNone == 1, "only the unindexed status waiter is compared")

        let (matches, examined) = index.takeMatches(for: Self.record(token: "AA7"))
        #expect(matches == [7])
        #expect(examined == 2)
        #expect(index.count == 101, "a matched waiter is answered once")
        #expect(index.takeMatches(for: Self.record(token: "aa7")).matches.isEmpty)

        #expect(index.takeMatches(for: Self.record(token: "aa5", apnsID: "B-2")).matches.sorted() == [5, 1001])
        #expect(index.remove(42) == 42)
        #expect(index.remove(42) == nil)
        #expect(index.count == 98)
    }

    @Test func aBroadcastAnswersTheWaitersOfTheDevicesItReached() {
        var index = WaiterIndex<Int>()
        for (i, device) in ["d1", "d2", "d3"].enumerated() {
            var query = NotificationQuery()
            query.deviceID = device
            index.insert(UInt64(i), query: query, value: i)
        }
        var broadcast = Self.record(token: "", apnsID: "R-1", topic: nil)
        var reach = BroadcastReach(channelID: "c")
        for device in ["d2", "d1", "d2"] {
            reach.add(.init(deviceID: device, activityID: "a-\(device)", outcome: .delivered, explanation: "shown"))
        }
        broadcast.broadcast = reach
        #expect(index.takeMatches(for: broadcast).matches.sorted() == [0, 1], "d3 was not reached")
        #expect(index.count == 1)
    }

    @Test func theMostSelectiveFilterChoosesTheBucket() {
        var q = NotificationQuery()
        q.topic = "t"
        #expect(WaiterIndex<Int>.key(for: q) == .topic("t"))
        q.deviceID = "d"
        #expect(WaiterIndex<Int>.key(for: q) == .deviceID("d"))
        q.token = "AB"
        #expect(WaiterIndex<Int>.key(for: q) == .token("ab"))
        q.uniqueID = "U"
        #expect(WaiterIndex<Int>.key(for: q) == .uniqueID("u"))
        q.apnsID = "X"
        #expect(WaiterIndex<Int>.key(for: q) == .apnsID("x"))
        #expect(WaiterIndex<Int>.key(for: NotificationQuery()) == .any)
    }
}
