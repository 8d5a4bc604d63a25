// RedisStore: following the others' journal lazily. A write of another instance that only
// added to the journal (its pushes' records and what became of them, none handed to this
// instance) is not read when it arrives: this copy notes where its rows are and reads them
// when something needs its journal (an admin API read, a change under the lease, a write that
// must be read at once). Reading every record of every instance as it came was most of what
// a follower spent, so with several instances on shared cores each slowed the others down.
import APNsCore
import Foundation
import MonotonicClock
import Redis
import Synchronization

/// The others' writes this copy has not read yet, oldest first (`RedisCoordinator`'s
/// `Shared.unread`). Bounded: what the journal would have dropped is forgotten.
struct UnreadJournal {
    struct Batch: Equatable {
        let version: UInt64
        let kept: RedisCoordinator.KeptRows
        /// How many journal records its rows save.
        let records: Int
        /// What it counts for against the journal's size: its records, and at least one (a
        /// write of delivery parts alone saves none, yet must not pile up without bound).
        var weight: Int { max(1, records) }
        /// It hands records off to another instance (kept until `handOffsKeptMs` passed).
        let handsOff: Bool
        let notedMs: Int64
        /// The delivery parts it gives this instance's own records were applied when it came
        /// (`JournalOnlyWrite.delivers(toStripe:)`): read later, they are passed over.
        var ownPartsApplied = false
    }

    /// A batch as the follower met it, with what `noteUnread` checks.
    struct Noted {
        let batch: Batch
        let topSequence: UInt64
        let handOffDevices: [Substring]
    }

    private(set) var batches: [Batch] = []
    private var head = 0
    /// The batches' weights together (about the records they save).
    private(set) var records = 0
    var isEmpty: Bool { head == batches.count }
    var count: Int { batches.count - head }
    var pending: ArraySlice<Batch> { batches[head...] }

    /// A hand-off's owner routes it within milliseconds, and when an owner stops, the members
    /// change within seconds, which makes every copy read what it left unread first. A batch
    /// of hand-offs older than this was routed by its owner: it may go like any other.
    static let handOffsKeptMs: Int64 = 60_000

    mutating func add(_ batch: Batch) {
        batches.append(batch)
        records += batch.weight
    }

    /// Forgets the oldest batches while the newer ones hold as many records as the journal
    /// keeps (`capacity`): read, they would fall off its end at once. Hand-offs stay until
    /// they are old.
    mutating func trim(toRecords capacity: Int, nowMs: Int64) {
        while head < batches.count, records - batches[head].weight >= capacity {
            let oldest = batches[head]
            if oldest.handsOff, nowMs - oldest.notedMs < Self.handOffsKeptMs { break }
            records -= oldest.weight
            head += 1
        }
        if head > 1024, head * 2 > batches.count {
            batches.removeFirst(head)
            head = 0
        }
    }

    var oldest: Batch? { isEmpty ? nil : batches[head] }

    mutating func removeOldest() {
        guard !isEmpty else { return }
        records -= batches[head].weight
        head += 1
        if isEmpty { removeAll() }
    }

    mutating func removeAll() {
        batches = []
        head = 0
        records = 0
    }
}

/// A decimal number in Redis's replies and log fields, read from its bytes (made into text
/// first, each cost an allocation and a validation).
enum DecimalText {
    /// Digits only (nil otherwise, or for more than fit).
    static func value(of digits: ArraySlice<UInt8>) -> UInt64? {
        guard !digits.isEmpty, digits.count <= 19 else { return nil }
        var value: UInt64 = 0
        for byte in digits {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + UInt64(byte - UInt8(ascii: "0"))
        }
        return value
    }
}

/// A log entry's `j` (`RedisStateStore.Writes.journalOnlyField`): `<highest record sequence>/<records>`,
/// then `:` and the devices whose records it hands off, then `|` and the journal stripes of
/// the instances whose records it gives a delivery part (`,` between, in both lists).
struct JournalOnlyWrite {
    let topSequence: UInt64
    let records: Int
    let handOffDevices: [Substring]
    let deliveredStripes: [UInt64]

    init?(_ text: String) { self.init(Array(text.utf8)) }

    init?(_ bytes: [UInt8]) {
        // The usual form (a push's write), `<top>/<records>` alone, read from the bytes; the
        // lists after it from the text's parts.
        if let slash = bytes.firstIndex(of: UInt8(ascii: "/")),
            let top = DecimalText.value(of: bytes[..<slash]), let records = DecimalText.value(of: bytes[(slash + 1)...])
        {
            topSequence = top
            self.records = Int(clamping: records)
            handOffDevices = []
            deliveredStripes = []
            return
        }
        let text = String(decoding: bytes, as: UTF8.self)
        let sections = text.split(separator: "|", maxSplits: 1, omittingEmptySubsequences: false)
        let parts = sections[0].split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        let numbers = parts[0].split(separator: "/")
        guard numbers.count == 2, let top = UInt64(numbers[0]), let records = Int(numbers[1]) else { return nil }
        topSequence = top
        self.records = records
        handOffDevices = parts.count == 2 ? parts[1].split(separator: ",") : []
        let stripes = sections.count == 2 ? sections[1].split(separator: ",").map { UInt64($0) } : []
        guard !stripes.contains(nil) else { return nil }
        deliveredStripes = stripes.compactMap { $0 }
    }

    /// The instance that numbers its records in `stripe` reads this write at once: it gives
    /// delivery parts to records it handed off, which its copy keeps waiting until then.
    func delivers(toStripe stripe: UInt64) -> Bool { deliveredStripes.contains(stripe) }
}

extension RedisCoordinator {
    /// Which of `entries` (one read of the log, in order) this copy may leave unread: the
    /// others' journal-only writes that hand nothing to a device this instance owns, while
    /// nobody here listens to the journal's changes (event streams, long polls). If one entry
    /// must be read, all are (in order, after what was left unread before them).
    ///
    /// `ownParts`: entries left unread that give delivery parts to records this instance took
    /// (an owner routing what this instance handed off): their rows are read now, and those
    /// parts applied at once — they touch only records this copy made, so they need nothing
    /// left unread before them — while the rest of the write stays unread. Left for later, its
    /// copy of each hand-off it made would wait, and pile up.
    func unreadable(_ entries: [LogEntry]) -> (leave: [Bool], ownParts: [Bool]) {
        let none = [Bool](repeating: false, count: entries.count)
        guard followsJournalLazily, !state.tracksChanges else { return (none, none) }
        var (leave, ownParts) = (none, none)
        let devices = Set(entries.flatMap { $0.writer != instance ? $0.journal?.handOffDevices ?? [] : [] })
        let owned = devices.isEmpty ? [] : state.readWorld { world in devices.filter { world.owns(String($0)) } }
        let stripe = ownStripe
        for (index, entry) in entries.enumerated() where entry.writer != instance {
            guard let journal = entry.journal, !journal.handOffDevices.contains(where: owned.contains) else { return (none, none) }
            leave[index] = true
            ownParts[index] = journal.delivers(toStripe: stripe)
        }
        return (leave, ownParts)
    }

    /// The journal stripe this instance numbers its records in (`SequenceStripes`).
    var ownStripe: UInt64 { UInt64(instance) % SequenceStripes.count }

    /// Whether `row` is a delivery part of one of this instance's own records.
    func isOwnDeliveryPart(_ row: ReplicatedRow) -> Bool {
        guard case .change(.recordDelivered(let sequence, _)) = row else { return false }
        return isOwnRecord(sequence)
    }

    /// Whether the journal record numbered `sequence` is one this instance took.
    func isOwnRecord(_ sequence: UInt64) -> Bool { sequence % SequenceStripes.count == ownStripe }

    /// Notes the others' writes `apply` left unread, in order, and moves this copy's journal
    /// numbers past theirs. Should one hand a record to a device this instance owns by now (it
    /// became the owner between `unreadable` and here: ownership changes under this lock), or
    /// someone have started listening to the journal meanwhile, they are read at once.
    func noteUnread(_ noted: [UnreadJournal.Noted], _ s: inout Shared) {
        guard let top = noted.map(\.topSequence).max() else { return }
        for entry in noted { s.unread.add(entry.batch) }
        s.unread.trim(toRecords: configured.records.capacity, nowMs: Monotonic.nowMilliseconds())
        unreadWrites.store(s.unread.count, ordering: .relaxed)
        let devices = noted.flatMap(\.handOffDevices)
        let ownsOne = state.applyShared { (world: inout World) -> Bool in
            world.records.continueSequence(from: top + 1)
            return devices.contains { world.owns(String($0)) }
        }
        guard ownsOne || state.tracksChanges, let redis = s.redis else { return }
        do { try readUnread(&s, redis) } catch {
            failed(&s, error)
            s.needsReload = true
        }
    }

    /// Reads and applies, in order, the others' writes this copy left unread (under this
    /// coordinator's lock, on its connection).
    func readUnread(_ s: inout Shared, _ redis: RedisConnection) throws(RedisError) {
        let pending = Array(s.unread.pending)
        var start = 0
        while start < pending.count, !s.needsReload {
            let chunk = pending[start..<min(start + 256, pending.count)]
            start = chunk.endIndex
            applyUnread(try fetchUnread(chunk, on: redis), &s)
        }
        if s.needsReload { forgetUnread(&s) }
        settleArrivals()
    }

    /// Puts the records read late among this instance's own newer ones, in the order of their
    /// numbers (`RecordStore.settleArrivals`): once, after a catch-up of many writes.
    func settleArrivals() {
        state.applyShared { (world: inout World) in world.records.settleArrivals() }
    }

    /// The rows of `batches`, decoded (by an admin read outside any lock, or under this
    /// coordinator's); nil for a batch gone from Redis: it fell below the journal's bound
    /// meanwhile, its records are gone everywhere.
    func fetchUnread(_ batches: ArraySlice<UnreadJournal.Batch>, on redis: RedisConnection) throws(RedisError) -> [FetchedUnread] {
        let replies = try redis.pipeline(batches.map { fetchRows(ofVersion: $0.version, keptAs: $0.kept) })
        return zip(batches, replies).map { batch, reply in
            guard let bytes = reply.bytes else { return FetchedUnread(version: batch.version, rows: .success(nil)) }
            // Its parts for this instance's own records went in when it came (`ownPartsApplied`);
            // later ones may have come since, which these must not undo.
            let applied: ((UInt64) -> Bool)? = batch.ownPartsApplied ? { self.isOwnRecord($0) } : nil
            let rows = Result { () throws(StateStoreError) -> [ReplicatedRow] in
                try StateCodec.decodeRows(bytes, skippingDeliveryOf: applied)
            }
            return FetchedUnread(version: batch.version, rows: rows.map { $0 })
        }
    }

    struct FetchedUnread: @unchecked Sendable {
        let version: UInt64
        let rows: Result<[ReplicatedRow]?, StateStoreError>
    }

    /// Applies fetched batches that are still the oldest left unread, in order (one read by
    /// someone else meanwhile is passed over), and forgets them.
    func applyUnread(_ fetched: [FetchedUnread], _ s: inout Shared) {
        for batch in fetched where !s.needsReload {
            guard s.unread.oldest?.version == batch.version else { continue }
            switch batch.rows {
            case .success(let rows):
                if let rows, !applyRows(rows, version: batch.version, settling: false) { s.needsReload = true }
            case .failure(let error):
                logger.warning("cannot read shared change \(batch.version): \(error); reloading the shared state")
                s.needsReload = true
            }
            s.unread.removeOldest()
        }
        unreadWrites.store(s.unread.count, ordering: .relaxed)
    }

    /// A reload reads everything: nothing is left unread.
    func forgetUnread(_ s: inout Shared) {
        s.unread.removeAll()
        unreadWrites.store(0, ordering: .relaxed)
    }

    /// After another instance restored a lost state from its copy (under the lease, this copy
    /// reloaded from it): the journal records this copy had (`kept`, newest first) that the
    /// restored one lacks are written back, so the journal keeps every push answered 200 that
    /// some copy held. (Following lazily, the restorer had left the others' recent pushes
    /// unread, and their rows went with the lost state.)
    func restoreRecordsLeftOut(_ kept: [NotificationRecord], _ s: inout Shared, _ redis: RedisConnection) throws(RedisError) {
        // Each as it should now be: one that still waited for something here goes back to its
        // device's owner (`World.recordToWriteBack`).
        let missing = state.readWorld { world in
            kept.compactMap { world.records.record(sequence: $0.sequence) == nil ? world.recordToWriteBack($0) : nil }
        }
        guard !missing.isEmpty else { return }
        let rows = missing.reversed().map { StateChange.recordSaved($0) }
        var start = 0
        while start < rows.count {
            let chunk = Array(rows[start..<min(start + Self.maxRowsPerWrite, rows.count)])
            start += chunk.count
            try takeLease(&s, redis)  // renewed as it runs out: many chunks outlast one lease
            let written = try store.append(chunk, instance: instance, fence: s.token, epoch: .expect(s.epoch), on: redis)
            guard applyRows(chunk.map(ReplicatedRow.change), version: written.version) else {
                s.needsReload = true
                return
            }
            s.version = written.version
            s.lastID = written.id
        }
        logger.warning("shared state: wrote back \(missing.count) journal record(s) this instance had and the restored state lacked")
    }

    /// The others' writes left unread now (`/metrics`).
    public var unreadJournalWrites: Int { unreadWrites.load(ordering: .relaxed) }

    /// Brings the others' journal records this copy left unread into it, before a read of the
    /// journal (admin API reads); at once when there are none.
    ///
    /// Fetched and decoded on a connection of its own, outside this coordinator's lock, and
    /// applied a few writes at a time: this instance's pushes need not wait for a read of
    /// many. Should the fetch fail, they are read under the lock instead.
    public func catchUpJournal() {
        guard unreadWrites.load(ordering: .relaxed) > 0 else { return }
        _ = catchUpUnread(atMost: .max)
    }

    /// Waits until this copy has followed the log as far as it went when called: every write
    /// in it applied, or noted as left unread (which `catchUpJournal` then reads). The follower
    /// is usually there within a millisecond; at most `followUpWaitMs`, then the read goes on
    /// with what this copy has, as it does at once while Redis is unavailable, for a second
    /// after Redis failed to say within 300 ms or the follower to get there in time, and when
    /// this instance is the only member (nobody else writes).
    public func followUpToNow() {
        // Read without the coordinator's lock, which a slow Redis can keep held for a while.
        guard othersAreMembers.load(ordering: .relaxed), unavailableReason == nil,
            Monotonic.nowMilliseconds() >= followUpPausedUntilMs.load(ordering: .relaxed)
        else { return }
        let newest = logEndReader.withLock { (connection: inout RedisConnection?) -> UInt64? in
            do {
                if connection == nil || connection!.isBroken { connection = try store.connect(commandTimeoutMs: 300) }
                let reply = try connection!.command("XREVRANGE", store.key("log"), "+", "-", "COUNT", "1")
                guard let entry = reply.elements?.first else { return nil }
                return try LogEntry(entry).version
            } catch {
                connection = nil
                if (error as? RedisError)?.movedSlot == true { store.slotMoved() }
                followUpPausedUntilMs.store(Monotonic.nowMilliseconds() + 1_000, ordering: .relaxed)
                return nil
            }
        }
        guard let newest else { return }
        let deadline = Monotonic.nowMilliseconds() + Self.followUpWaitMs
        while Monotonic.nowMilliseconds() < deadline {
            var behind = true
            let looked = shared.withLockIfFree(within: 1_000) { s in behind = s.version < newest && s.unavailable == nil && !s.needsReload }
            if looked && !behind { return }
            usleep(200)
        }
        // The follower is that far behind (a flood of writes): the reads queued behind this one
        // answer from the copy for a second rather than each wait as long.
        followUpPausedUntilMs.store(Monotonic.nowMilliseconds() + 1_000, ordering: .relaxed)
    }

    static let followUpWaitMs: Int64 = 1_000

    /// `catchUpJournal` for the oldest `limit` writes left unread; true when more are left.
    func catchUpUnread(atMost limit: Int) -> Bool {
        let more = unreadReader.withLock { (connection: inout RedisConnection?) -> Bool in
            let (pending, more) = shared.withLock { (s: inout Shared) -> ([UnreadJournal.Batch], Bool) in
                guard s.unavailable == nil, !s.needsReload else { return ([], false) }
                return (Array(s.unread.pending.prefix(limit)), s.unread.count > limit)
            }
            var start = 0
            do {
                while start < pending.count {
                    if connection == nil || connection!.isBroken { connection = try store.connect() }
                    let chunk = pending[start..<min(start + 256, pending.count)]
                    let fetched = try fetchUnread(chunk, on: connection!)
                    var slice = 0
                    while slice < fetched.count {
                        let end = min(slice + 8, fetched.count)
                        shared.withLock { (s: inout Shared) in applyUnread(Array(fetched[slice..<end]), &s) }
                        slice = end
                    }
                    start = chunk.endIndex
                }
            } catch {
                connection = nil
                shared.withLock { (s: inout Shared) in
                    guard s.unavailable == nil, !s.needsReload, let redis = s.redis else { return }
                    do { try readUnread(&s, redis) } catch { failed(&s, error) }
                }
                return false
            }
            return more
        }
        // Settled once all are in: the background reads a few writes at a time, and each
        // settle sorts the journal's end they reach into (reads catch up to the end first).
        if !more { settleArrivals() }
        flushAnnouncements()
        return more
    }
}
