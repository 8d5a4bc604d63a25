import APNsCore
import Redis
@testable import RedisStore
import RedisTestSupport
import Testing
import TestSupport

/// What lets a follower leave another instance's write unread (`--redis-follow lazy`): the log
/// entry's `j`, and the bounded list of writes left unread.
@Suite("Journal writes left unread")
struct RedisUnreadJournalTests {
    @Test func aLogEntrySaysItOnlyAddsToTheJournalAndWhoseDevicesItHandsOff() {
        let plain = JournalOnlyWrite("3077/40")
        #expect(plain?.topSequence == 3077 && plain?.records == 40 && plain?.handOffDevices.isEmpty == true)
        let handing = JournalOnlyWrite("9/2:phone-1,tab_2.b")
        #expect(handing?.handOffDevices == ["phone-1", "tab_2.b"])
        let routing = JournalOnlyWrite("9/0|1,3")
        #expect(routing?.deliveredStripes == [1, 3] && routing?.delivers(toStripe: 3) == true && routing?.delivers(toStripe: 2) == false)
        #expect(JournalOnlyWrite("9/2:phone|2")?.handOffDevices == ["phone"])
        #expect(JournalOnlyWrite("9/0|x") == nil)
        #expect(JournalOnlyWrite("12") == nil, "without a record count")
        #expect(JournalOnlyWrite("x/1") == nil)
        #expect(JournalOnlyWrite("") == nil)
    }

    @Test func onlyRecordsAndWhatBecameOfThemMakeAWriteOneToLeaveUnread() {
        var writes = RedisStateStore.Writes(recordsInBatch: true)
        writes.add(saved(7), encoded: [])
        writes.add(saved(8, handedTo: "phone"), encoded: [])
        writes.add(saved(9, handedTo: "phone"), encoded: [])
        writes.add(.recordDelivered(sequence: 3, delivery: RecordDelivery()), encoded: [])
        writes.add(.recordsEvicted(before: 2), encoded: [])
        #expect(writes.journalOnlyField(writer: 3) == "9/3:phone", "the delivery part is of a record the writer numbered itself")
        writes.add(.recordDelivered(sequence: 2 * 1024 + 5, delivery: RecordDelivery()), encoded: [])
        #expect(writes.journalOnlyField(writer: 3) == "2053/3:phone|5", "a hand-off of instance 5, routed: instance 5 reads it at once")

        var device = RedisStateStore.Writes(recordsInBatch: true)
        device.add(saved(7), encoded: [])
        device.add(.deviceSaved(Device(id: "d", isVirtual: true, apps: [:], createdAtMs: 0)), encoded: [])
        #expect(device.journalOnlyField(writer: 1) == nil, "a device's row is read by every instance at once")

        var handedBack = RedisStateStore.Writes(recordsInBatch: true)
        var part = RecordDelivery()
        part.awaitingOwner = true
        handedBack.add(.recordDelivered(sequence: 4, delivery: part), encoded: [])
        #expect(handedBack.journalOnlyField(writer: 1) == nil, "a delivery part that hands the record off names no device")

        var many = RedisStateStore.Writes(recordsInBatch: true)
        for i in 0...RedisStateStore.Writes.maxHandOffDevices { many.add(saved(UInt64(i + 1), handedTo: "d\(i)"), encoded: []) }
        #expect(many.journalOnlyField(writer: 1) == nil, "hand-offs to more devices than the entry names")

        var evictionsOnly = RedisStateStore.Writes(recordsInBatch: true)
        evictionsOnly.add(.recordsEvicted(before: 2), encoded: [])
        #expect(evictionsOnly.journalOnlyField(writer: 1) == nil, "no record: nothing for the entry to point at")
    }

    @Test func writesLeftUnreadAreForgottenWhereTheJournalWouldDropThemButHandOffsWaitAWhile() {
        var unread = UnreadJournal()
        unread.add(batch(1, records: 40))
        unread.add(batch(2, records: 40, handsOff: true, at: 1_000))
        unread.add(batch(3, records: 40))
        unread.trim(toRecords: 80, nowMs: 2_000)
        #expect(unread.pending.map(\.version) == [2, 3], "the oldest went: read, it would fall off the journal's end")
        unread.add(batch(4, records: 40))
        unread.trim(toRecords: 80, nowMs: 2_000)
        #expect(unread.pending.map(\.version) == [2, 3, 4], "a young batch of hand-offs stays, and what follows it")
        #expect(unread.records == 120)
        unread.trim(toRecords: 80, nowMs: 1_000 + UnreadJournal.handOffsKeptMs)
        #expect(unread.pending.map(\.version) == [3, 4], "once old, its owner has routed it")
        unread.add(batch(5, records: 200))
        unread.trim(toRecords: 80, nowMs: 1_000 + UnreadJournal.handOffsKeptMs)
        #expect(unread.pending.map(\.version) == [5], "a batch larger than the journal stays: its newest records are kept")
        for version in 6...300 { unread.add(batch(UInt64(version), records: 0)) }
        unread.trim(toRecords: 80, nowMs: 1_000 + UnreadJournal.handOffsKeptMs)
        #expect(unread.count == 80, "writes of delivery parts alone count as one each: they do not pile up")
        unread.removeAll()
        #expect(unread.isEmpty && unread.records == 0)
    }

    @Test(.requires(.redisServer)) func theLogEntryOfAWriteOfRecordsCarriesItsJournalField() throws {
        let redis = try RedisServerProcess()
        let store = RedisStateStore(url: try RedisURL(parsing: redis.url))
        let connection = try store.connect()
        _ = try store.append([saved(1025), saved(2049, handedTo: "phone")], instance: 1, fence: nil, on: connection)
        _ = try store.append(
            [.deviceSaved(Device(id: "d", isVirtual: true, apps: [:], createdAtMs: 0)), saved(3073)], instance: 1, fence: nil,
            on: connection)
        let entries = try connection.command("XRANGE", store.key("log"), "-", "+").elements ?? []
        let fields = try entries.map(RedisCoordinator.LogEntry.init)
        #expect(fields.count == 2)
        #expect(fields.first?.journal?.topSequence == 2049 && fields.first?.journal?.records == 2)
        #expect(fields.first?.journal?.handOffDevices == ["phone"])
        #expect(fields.first?.keptRows == .key)
        #expect(fields.last.map { $0.journal == nil } == true)
        // The instance that wrote them passes over its own entries: their `j` is not read.
        let own = try entries.map { (entry) throws(RedisError) in try RedisCoordinator.LogEntry(entry, reader: 1) }
        #expect(own.first?.journal == nil && own.first?.version == fields.first?.version && own.first?.writer == 1)
        let others = try entries.map { (entry) throws(RedisError) in try RedisCoordinator.LogEntry(entry, reader: 2) }
        #expect(others.first?.journal?.topSequence == 2049)
    }

    private func saved(_ sequence: UInt64, handedTo device: String? = nil) -> StateChange {
        var r = NotificationRecord(apnsID: "A\(sequence)", token: "t", environment: .sandbox, receivedAtMs: 0)
        r.sequence = sequence
        if let device {
            r.deviceID = device
            r.delivery.awaitingOwner = true
        }
        return .recordSaved(r)
    }

    private func batch(_ version: UInt64, records: Int, handsOff: Bool = false, at ms: Int64 = 0) -> UnreadJournal.Batch {
        UnreadJournal.Batch(version: version, kept: .key, records: records, handsOff: handsOff, notedMs: ms)
    }
}
