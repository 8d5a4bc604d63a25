import APNsCore
import Foundation
import Redis
@testable import RedisStore
import RedisTestSupport
import Testing
import TestSupport

/// The Redis backend of the store interface (`--redis`) against a real redis-server, held to
/// the same reference as the SQLite one (InMemoryStateStore).
@Suite("Redis state store", .serialized, .requires(.redisServer))
struct RedisStateStoreTests {
    @Test func everyEntityRoundTripsAsTheReferenceStoreKeepsIt() throws {
        let redis = try RedisServerProcess()
        let reference = InMemoryStateStore()
        // Redis forgets a waiting notification once its expiry (plus a grace period) is past,
        // which for these 1970 timestamps is long ago: give them a future one here.
        let future = Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000
        let changes = everyKindOfChange().map { change -> StateChange in
            guard case .notificationWaiting(var waiting) = change, waiting.notification.storeUntilMs != nil else { return change }
            waiting.notification.storeUntilMs = future
            return .notificationWaiting(waiting)
        }
        try reference.write(changes)
        let store = RedisStateStore(url: try RedisURL(parsing: redis.url))
        #expect(try store.load().initialized == false, "an empty Redis holds nothing")
        try store.write(Array(changes.prefix(10)))
        try store.write(Array(changes.dropFirst(10)))

        let loaded = try RedisStateStore(url: try RedisURL(parsing: redis.url)).load()
        let kept = try reference.load()
        var comparable = loaded
        comparable.nextRecordSequence = kept.nextRecordSequence  // checked on its own below
        let expected = canonical(kept)
        let actual = canonical(comparable)
        #expect(actual == expected, "\(zip(actual.split(separator: "\n"), expected.split(separator: "\n")).filter { $0 != $1 }.prefix(3))")
        #expect(loaded.records.map(\.sequence) == [2, 3, 5, 6])
        #expect(loaded.waiting.map(\.slot) == [.stored, .deferred(.lowPower), .batched(releaseAtMs: 99), .inFlight])
        // Past every sequence number ever written, the finished notification 20 included (the
        // reference and SQLite look only at what they still hold, 13).
        #expect(loaded.nextRecordSequence == 21)
        #expect(loaded.channels.map(\.id) == ["ZGVsZXRlZA==", "bGl2ZQ==", "c3RvcmVk"])
        #expect(loaded.channels.last?.storedMessage?.requestID == "later")
    }

    @Test func aResetReplacesEverythingAndAnotherPrefixIsAnotherStore() throws {
        let redis = try RedisServerProcess()
        let url = try RedisURL(parsing: redis.url)
        let store = RedisStateStore(url: url)
        try store.write(everyKindOfChange())
        var fresh = PersistedState()
        fresh.initialized = true
        fresh.devices = [Device(id: "only", isVirtual: true, apps: [:], createdAtMs: 7)]
        fresh.nextRecordSequence = 40
        try store.write([.reset(fresh)])
        let loaded = try store.load()
        #expect(loaded.devices.map(\.id) == ["only"])
        #expect(loaded.tokens.isEmpty && loaded.records.isEmpty && loaded.waiting.isEmpty && loaded.keys.isEmpty)
        #expect(loaded.channels.isEmpty, "a reset empties the channels")
        #expect(loaded.nextRecordSequence == 40)
        #expect(try RedisStateStore(url: url, prefix: "other:").load().initialized == false)
    }

    /// Journal records live in the rows of the write that made them (one key per write, not a
    /// field per record): a record's newest row wins, a removal is kept, eviction drops a
    /// write's key once all its records are older than the bound and the newest numbers have
    /// moved on by `rowsKeptBehind` (an instance a little behind still reads it), and what a
    /// kept write still holds below the bound is not loaded.
    @Test func recordsKeptPerWriteLoadNewestAndEvictByTheBound() throws {
        let redis = try RedisServerProcess()
        let url = try RedisURL(parsing: redis.url)
        let store = RedisStateStore(url: url)
        try store.write([record(1), record(2), record(3)])
        var updated = NotificationRecord(apnsID: "A2", token: "t", environment: .sandbox, receivedAtMs: 0)
        updated.sequence = 2
        updated.outcome = .delivered
        try store.write([.recordSaved(updated), record(4), .recordRemoved(sequence: 3)])
        var loaded = try store.load()
        #expect(loaded.records.map(\.sequence) == [1, 2, 4])
        #expect(loaded.records.first { $0.sequence == 2 }?.outcome == .delivered, "the newer row of record 2")

        // Records 1–3 evicted, the newest number still 4: the first write's rows stay for whoever
        // has not read them yet, and are not loaded.
        let redisConnection = try RedisConnection(url: url)
        try store.write([.recordsEvicted(before: 4)])
        #expect(try redisConnection.command("EXISTS", "apns-emulator:rb:1").int == 1, "kept for an instance behind")
        #expect(try store.load().records.map(\.sequence) == [4])

        // Newer numbers far on: the first write's key is dropped; the second is kept (record 4)
        // but its row of record 2 is below the bound.
        let far = 5 + RedisStateStore.rowsKeptBehind
        try store.write([record(far), .recordsEvicted(before: 4)])
        loaded = try store.load()
        #expect(loaded.records.map(\.sequence) == [4, far])
        let keys = try redisConnection.command("KEYS", "apns-emulator:*").elements?.compactMap(\.text) ?? []
        #expect(
            keys.filter { $0.hasPrefix("apns-emulator:rb:") }.sorted() == ["apns-emulator:rb:2", "apns-emulator:rb:4"],
            "\(keys)")
        #expect(!keys.contains { $0.contains("pending:") }, "the rows sent ahead were renamed: \(keys)")
        #expect(try redisConnection.command("TTL", "apns-emulator:rb:4").int == -1, "a batch's rows do not expire")
        let fields = try redisConnection.command("HKEYS", "apns-emulator:state").elements?.compactMap(\.text) ?? []
        #expect(!fields.contains { $0.hasPrefix("r:") || $0.hasPrefix("rb:") }, "no field per record or write: \(fields)")
    }

    /// A state written by an earlier version keeps a write's rows in a `state` field
    /// (`rb:<version>`): they are still loaded, newest row winning across both kinds, and
    /// evicted by the same bound.
    @Test func batchRowsInStateFieldsOfEarlierVersionsAreLoadedAndEvicted() throws {
        let redis = try RedisServerProcess()
        let url = try RedisURL(parsing: redis.url)
        let store = RedisStateStore(url: url)
        try store.write([record(1)])  // version 1, in a key
        let redisConnection = try RedisConnection(url: url)
        // Version 2 as an earlier emulator wrote it: records 2 and 3 in a field.
        let rows = StateCodec.encode(changes: [record(2), record(3)])
        _ = try redisConnection.pipeline([
            ["HSET", "apns-emulator:state", "rb:2", .bytes(rows)], ["ZADD", "apns-emulator:batches", "3", "rb:2"],
            ["SET", "apns-emulator:version", "2"], ["SET", "apns-emulator:maxseq", "3"],
        ])
        var updated = NotificationRecord(apnsID: "A3", token: "t", environment: .sandbox, receivedAtMs: 0)
        updated.sequence = 3
        updated.outcome = .delivered
        try store.write([.recordSaved(updated), record(4)])  // version 3, in a key
        var loaded = try store.load()
        #expect(loaded.records.map(\.sequence) == [1, 2, 3, 4])
        #expect(loaded.records.first { $0.sequence == 3 }?.outcome == .delivered, "the key's newer row of record 3 wins")
        #expect(loaded.nextRecordSequence == 5)

        let far = 5 + RedisStateStore.rowsKeptBehind
        try store.write([record(far), .recordsEvicted(before: 4)])
        loaded = try store.load()
        #expect(loaded.records.map(\.sequence) == [4, far])
        let fields = try redisConnection.command("HKEYS", "apns-emulator:state").elements?.compactMap(\.text) ?? []
        #expect(!fields.contains("rb:2"), "the old field is evicted with its records: \(fields)")
        #expect(try redisConnection.command("EXISTS", "apns-emulator:rb:1").int == 0)
    }

    /// A write refused (another instance holds the lease) leaves nothing behind: neither its
    /// rows sent ahead of the script nor a batch.
    @Test func aRefusedWriteLeavesNoRowsBehind() throws {
        let redis = try RedisServerProcess()
        let url = try RedisURL(parsing: redis.url)
        let store = RedisStateStore(url: url)
        let redisConnection = try RedisConnection(url: url)
        _ = try redisConnection.command("SET", "apns-emulator:lease", "someone-else")
        #expect(throws: RedisError.self) {
            _ = try store.append([record(1)], instance: 1, fence: "mine", on: redisConnection)
        }
        let keys = try redisConnection.command("KEYS", "apns-emulator:*").elements?.compactMap(\.text) ?? []
        #expect(keys == ["apns-emulator:lease"], "\(keys)")
        _ = try redisConnection.command("SET", "apns-emulator:lease", "mine")
        _ = try store.append([record(1)], instance: 1, fence: "mine", on: redisConnection)
        #expect(try store.load().records.map(\.sequence) == [1])
    }

    /// Notifications waiting for a device carry a TTL at their expiry (plus a grace period),
    /// so a Redis nobody runs against forgets them; in-flight ones have none.
    @Test func waitingNotificationsExpireThroughRedisTTLs() throws {
        let redis = try RedisServerProcess()
        let url = try RedisURL(parsing: redis.url)
        let store = RedisStateStore(url: url)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        func waiting(_ sequence: UInt64, _ slot: WaitingSlot, until: Int64?) -> StateChange {
            .notificationWaiting(
                WaitingNotification(
                    slot: slot,
                    notification: PendingNotification(
                        sequence: sequence, apnsID: "N\(sequence)", token: "aa", topic: "t", deviceID: "d", bundleID: "b", pushType: .alert,
                        priority: 10, collapseID: nil, storeUntilMs: until, payload: [], content: PushContent())))
        }
        // Expired long enough ago that the grace period is over too; one still valid; one in flight.
        try store.write([
            waiting(1, .stored, until: now - RedisStateStore.waitingGraceMs - 10_000),
            waiting(2, .stored, until: now + 3_600_000), waiting(3, .inFlight, until: nil),
        ])
        let connection = try RedisConnection(url: url)
        #expect(try connection.command("PTTL", "apns-emulator:w:2").int.map { $0 > 3_600_000 } == true)
        #expect(try connection.command("PTTL", "apns-emulator:w:3").int == -1)
        #expect(try store.load().waiting.map(\.notification.sequence) == [2, 3])
    }
}

/// How the `--redis` writer splits a long queue: whole changes per write, never a change cut
/// in two (its answer waits for all of its rows), and at least one change however large.
@Suite("Redis writer: the queue cut into writes")
struct RedisWriterQueueTests {
    @Test func aLongQueueIsCutAtTheLastWholeChangeWithinTheLimit() {
        var queued = RedisCoordinator.QueuedTickets()
        queued.append(1, end: 3)
        queued.append(2, end: 7)
        queued.append(3, end: 12)
        #expect(queued.cut(limit: 20, rows: 12, lastTicket: 3) == (12, 3), "everything, when it fits")
        #expect(queued.cut(limit: 10, rows: 12, lastTicket: 3) == (7, 2), "changes 1 and 2 fit, 3 would not")
        #expect(queued.cut(limit: 2, rows: 12, lastTicket: 3) == (3, 1), "the first change whole, though over the limit")
        queued.drop(rows: 7)
        queued.append(4, end: 9)
        #expect(queued.cut(limit: 6, rows: 9, lastTicket: 4) == (5, 3), "what is left starts at row 0")
    }
}
