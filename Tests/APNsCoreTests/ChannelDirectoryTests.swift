// ChannelDirectoryTests: the broadcast channel directory (ids, the live limit per app and
// environment, deletion) and the channel endpoint's path table, as pure values.
import APNsCore
import Testing

@Suite("Broadcast channels: the directory and the paths")
struct ChannelDirectoryTests {
    @Test func idsArePaddedBase64AndNeverReused() {
        var random = FastRandom(seed: 1)
        var directory = ChannelDirectory()
        var seen = Set<String>()
        for _ in 0..<50 {
            let channel = directory.create(
                bundleID: "com.example.app", environment: .sandbox, policy: .noMessageStored, nowMs: 1,
                makeID: { ChannelDirectory.randomID(&random) })
            let id = try! #require(channel?.id)
            #expect(id.utf8.count == 24 && id.hasSuffix("==") && ChannelDirectory.isWellFormedID(id))
            #expect(seen.insert(id).inserted)
            directory.delete(id: id, bundleID: "com.example.app", environment: .sandbox, nowMs: 2)
        }
        // A generator that keeps offering a deleted channel's id gets a fresh one in the end.
        var offers = [seen.first!, seen.first!, "ZnJlc2g="]
        let fresh = directory.create(
            bundleID: "com.example.app", environment: .sandbox, policy: .noMessageStored, nowMs: 3,
            makeID: { offers.removeFirst() })
        #expect(fresh?.id == "ZnJlc2g=")
    }

    @Test func theLimitCountsLiveChannelsPerAppAndEnvironment() {
        var directory = ChannelDirectory()
        directory.maxLivePerApp = 2
        var next = 0
        func make(_ bundle: String, _ environment: APNsEnvironment) -> BroadcastChannel? {
            next += 1
            return directory.create(
                bundleID: bundle, environment: environment, policy: .mostRecentMessageStored, nowMs: Int64(next),
                makeID: { "aWQ\(next)" })
        }
        let first = make("a", .sandbox)
        let second = make("a", .sandbox)
        let third = make("a", .sandbox)
        let production = make("a", .production)
        let otherApp = make("b", .sandbox)
        #expect(first != nil && second != nil)
        #expect(third == nil, "a third live sandbox channel of a")
        #expect(production != nil && otherApp != nil)
        let deleted = directory.delete(id: first!.id, bundleID: "a", environment: .sandbox, nowMs: 10)
        let again = directory.delete(id: first!.id, bundleID: "a", environment: .sandbox, nowMs: 11)
        #expect(deleted && !again, "deleted once")
        let replacement = make("a", .sandbox)
        #expect(replacement != nil)
        #expect(directory.live(id: first!.id, bundleID: "a", environment: .sandbox) == nil)
        #expect(directory.channels[first!.id]?.deletedAtMs == 10)
    }

    @Test func onlyAMostRecentMessageStoredChannelKeepsItsNewestMessage() {
        var directory = ChannelDirectory()
        let stored = directory.create(bundleID: "a", environment: .sandbox, policy: .mostRecentMessageStored, nowMs: 0, makeID: { "c3Q=" })!
        let none = directory.create(bundleID: "a", environment: .sandbox, policy: .noMessageStored, nowMs: 0, makeID: { "bm8=" })!
        for (index, id) in [stored.id, none.id].enumerated() {
            for n in 1...2 {
                directory.recordBroadcast(
                    id: id,
                    message: StoredBroadcast(key: "r\(index)\(n)", payload: [], priority: 10, receivedAtMs: Int64(n), expiresAtMs: 100))
            }
        }
        #expect(directory.channels[stored.id]?.storedMessage?.requestID == "r02")
        #expect(directory.channels[none.id]?.storedMessage == nil)
        #expect(directory.channels[none.id]?.broadcasts == 2)
        #expect(directory.hasExpiredStoredMessage(nowMs: 99) == false)
        #expect(directory.expireStoredMessages(nowMs: 99).isEmpty)
        #expect(directory.hasExpiredStoredMessage(nowMs: 100))
        let expired = directory.expireStoredMessages(nowMs: 100)
        #expect(expired.map(\.channelID) == [stored.id] && expired.map(\.message.requestID) == ["r02"])
        #expect(directory.channels[stored.id]?.storedMessage == nil)
        #expect(directory.hasExpiredStoredMessage(nowMs: 100) == false)
    }

    @Test(arguments: [
        ("POST", "/1/apps/com.a/channels", "create"), ("GET", "/1/apps/com.a/channels", "read"),
        ("DELETE", "/1/apps/com.a/channels", "delete"), ("GET", "/1/apps/com.a/all-channels", "list"),
        ("POST", "/4/broadcasts/apps/com.a", "broadcast"), ("PUT", "/1/apps/com.a/channels", "MethodNotAllowed"),
        ("DELETE", "/1/apps/com.a/all-channels", "MethodNotAllowed"), ("GET", "/4/broadcasts/apps/com.a", "MethodNotAllowed"),
        ("GET", "/1/apps/com.a/channels/aWQ=", "BadPath"), ("GET", "/1/apps//channels", "BadPath"),
        ("POST", "/4/broadcasts/apps/com.a/extra", "BadPath"), ("POST", "/2/apps/com.a/channels", "BadPath"),
    ])
    func pathsAndMethods(method: String, path: String, expected: String) {
        switch ChannelEndpoint.operation(method: method, path: path) {
        case .success(let operation):
            #expect(operation.name == expected && operation.bundleID == "com.a")
        case .failure(let reason):
            #expect(reason.rawValue == expected)
        }
    }

    @Test func channelIDsAreBase64OfAnyLength() {
        #expect(ChannelDirectory.isWellFormedID("dHN0LXNyY2gtY2hhbm5lbA=="))
        #expect(ChannelDirectory.isWellFormedID("dHN0LXNyY2gtY2hhbm5lbA"), "padding is optional")
        #expect(!ChannelDirectory.isWellFormedID(""))
        #expect(!ChannelDirectory.isWellFormedID("not base64!"))
        #expect(!ChannelDirectory.isWellFormedID(String(repeating: "A", count: 257)))
    }
}
