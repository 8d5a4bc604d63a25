import APNsCore
import Foundation
import StatePersistence
import Synchronization
import Lifecycle
import Testing
import TestSupport
import Locking

/// A store whose writes can be held at a gate, made to fail, and inspected.
final class GatedStore: StateStore, @unchecked Sendable {
    private let condition = NSCondition()
    private var open = true
    private var entered = 0
    private(set) var batches: [[StateChange]] = []
    var failing = false

    var location: String { "gated" }
    func load() throws(StateStoreError) -> PersistedState { PersistedState() }

    func write(_ changes: [StateChange]) throws(StateStoreError) {
        condition.lock()
        entered += 1
        condition.broadcast()
        while !open { condition.wait() }
        let fail = failing
        if !fail { batches.append(changes) }
        condition.unlock()
        if fail { throw StateStoreError("disk full") }
    }

    func close() { condition.lock(); open = false; condition.unlock() }
    func release() { condition.lock(); open = true; condition.broadcast(); condition.unlock() }

    /// Waits until the writer is inside `write` (holding a batch).
    func waitForWriter(_ count: Int = 1) {
        condition.lock()
        while entered < count { condition.wait() }
        condition.unlock()
    }

    var allChanges: [StateChange] { condition.lock(); defer { condition.unlock() }; return batches.flatMap { $0 } }
    var batchCount: Int { condition.lock(); defer { condition.unlock() }; return batches.count }
}

/// Runs tasks when asked, like an event loop that has not got round to them yet.
final class QueueExecutor: CommitExecutor, @unchecked Sendable {
    private let condition = NSCondition()
    private var tasks: [@Sendable () -> Void] = []

    func execute(_ task: @escaping @Sendable () -> Void) {
        condition.lock()
        tasks.append(task)
        condition.broadcast()
        condition.unlock()
    }

    /// Runs what has been handed over so far; returns how many tasks that was.
    func runAll() -> Int {
        condition.lock()
        let list = tasks
        tasks.removeAll()
        condition.unlock()
        list.forEach { $0() }
        return list.count
    }

    /// Waits until a task has been handed over (the writer thread hands tasks over after it
    /// has announced the commit), then runs what is there; 0 if none came within the time.
    func runAllWhenHandedOver(timeoutSeconds: Double = 30) -> Int {
        condition.lock()
        let deadline = Date().addingTimeInterval(timeoutSeconds)
        while tasks.isEmpty && condition.wait(until: deadline) {}
        condition.unlock()
        return runAll()
    }
}

func token(_ name: String, state: TokenState = .active) -> StateChange {
    .tokenSaved(TokenEntry(token: name, deviceID: "d", bundleID: "com.x", environment: .sandbox, kind: .app, state: state, issuedAtMs: 0))
}

func record(_ sequence: UInt64, payload: Int = 10) -> StateChange {
    var r = NotificationRecord(apnsID: "A\(sequence)", token: "t", environment: .sandbox, receivedAtMs: 0)
    r.sequence = sequence
    r.payload = [UInt8](repeating: 1, count: payload)
    return .recordSaved(r)
}

extension GatedStore {
    /// Closes the gate and lets the writer start a transaction with `changes` (the
    /// `transactions`-th since the store was made), which then waits at the gate: whatever is
    /// submitted next queues up behind it.
    func holdWriter(_ writer: StateWriter, with changes: [StateChange], transactions: Int = 1) {
        close()
        writer.submit(changes)
        waitForWriter(transactions)
    }
}

@Suite("State writer: group commit, bounds, failure")
struct StateWriterTests {
    @Test func changesThatQueueUpDuringACommitGoInOneTransaction() throws {
        let store = GatedStore()
        let writer = StateWriter(store: store)
        writer.start()
        defer { writer.stop() }
        store.holdWriter(writer, with: [token("first")])
        for i in 0..<500 { writer.submit([token("t\(i)"), record(UInt64(i))]) }
        store.release()
        #expect(writer.waitUntilCommitted())
        #expect(store.batchCount == 2, "the first change, then everything that queued behind it")
        #expect(store.allChanges.count == 1001)
        let stats = writer.statistics
        #expect(stats.transactions == 2 && stats.changesWritten == 1001 && stats.recordsDropped == 0)
    }

    @Test func laterRowsForTheSameEntityReplaceEarlierOnesAndAResetDropsWhatCameBefore() throws {
        let store = GatedStore()
        let writer = StateWriter(store: store)
        writer.start()
        defer { writer.stop() }
        store.holdWriter(writer, with: [token("gate")])
        writer.submit([token("a"), token("b"), record(1), .recordsEvicted(before: 1)])
        writer.submit([token("a", state: .expired), .recordRemoved(sequence: 1), .recordsEvicted(before: 5)])
        store.release()
        #expect(writer.waitUntilCommitted())
        let second = store.batches[1]
        #expect(second.count == 4)
        if case .tokenSaved(let entry) = second[0] { #expect(entry.token == "a" && entry.state == .expired) } else { Issue.record("\(second[0])") }
        if case .recordRemoved(let sequence) = second[2] { #expect(sequence == 1) } else { Issue.record("\(second[2])") }
        if case .recordsEvicted(let before) = second[3] { #expect(before == 5) } else { Issue.record("\(second[3])") }

        store.holdWriter(writer, with: [token("gate2")], transactions: 3)
        writer.submit([token("lost"), record(7)])
        writer.submit([.reset(PersistedState()), token("after")])
        store.release()
        #expect(writer.waitUntilCommitted())
        let last = store.batches[3]
        #expect(last.count == 2)
        if case .reset = last[0] {} else { Issue.record("a reset comes first: \(last)") }
    }

    @Test func aRunOfNewRecordsComesBackAsItIsAndRepeatsAreStillCoalesced() {
        // What a run of pushes makes: each row for a record of its own, in order.
        let run = (1...5).map { record(UInt64($0)) }
        #expect(PendingChanges.coalesced(run).map(\.recordSequence) == [1, 2, 3, 4, 5])
        // The same record again: one row, its newer one, where the first stood.
        let again = PendingChanges.coalesced(run + [record(3, payload: 99)])
        #expect(again.map(\.recordSequence) == [1, 2, 3, 4, 5])
        if case .recordSaved(let r) = again[2] { #expect(r.payload.count == 99) } else { Issue.record("\(again[2])") }
        // Out of order: nothing repeats, so nothing moves.
        #expect(PendingChanges.coalesced([record(4), record(2), record(9)]).map(\.recordSequence) == [4, 2, 9])
        // Other rows are coalesced as before: a token saved twice once, evictions last.
        let mixed = PendingChanges.coalesced([record(1), .recordsEvicted(before: 1), token("a"), record(2), token("a", state: .expired)])
        #expect(mixed.count == 4)
        if case .tokenSaved(let entry) = mixed[1] { #expect(entry.state == .expired) } else { Issue.record("\(mixed[1])") }
        if case .recordsEvicted(let before) = mixed[3] { #expect(before == 1) } else { Issue.record("\(mixed[3])") }
    }

    @Test func journalRecordsBeyondTheBoundAreDroppedAndCountedButStateChangesNever() throws {
        let store = GatedStore()
        let writer = StateWriter(
            store: store,
            limits: limits {
                $0.maxRecords = 10; $0.maxRecordBytes = 1 << 20
            })
        writer.start()
        defer { writer.stop() }
        store.holdWriter(writer, with: [token("gate")])
        for i in 0..<50 { writer.submit([record(UInt64(i)), token("t\(i)")]) }
        writer.submit([record(3, payload: 20)])  // an update of a queued record is never dropped
        #expect(writer.statistics.recordsDropped == 40)
        #expect(writer.statistics.queuedChanges == 60)
        store.release()
        #expect(writer.waitUntilCommitted())
        #expect(store.allChanges.filter { $0.isJournalRecord }.count == 10)
        #expect(store.allChanges.filter { if case .tokenSaved = $0 { return true } else { return false } }.count == 51)
        // A byte bound as well.
        let small = StateWriter(
            store: GatedStore(),
            limits: limits {
                $0.maxRecords = 1000; $0.maxRecordBytes = 1000
            })
        small.submit([record(1, payload: 600), record(2, payload: 600)])
        #expect(small.statistics.recordsDropped == 1)
    }

    @Test func answersWaitForTheirCommitOnTheirOwnExecutor() throws {
        let store = GatedStore()
        let writer = StateWriter(store: store)
        let loop = QueueExecutor()
        #expect(writer.uncommittedTicket() == nil)
        writer.start()
        defer { writer.stop() }
        store.close()
        writer.submit([token("a")])
        let ticket = try #require(writer.uncommittedTicket())
        let answered = Locked(false)
        writer.afterCommit(ticket, on: loop) { committed in answered.withLock { $0 = committed } }
        store.waitForWriter()
        #expect(loop.runAll() == 0, "not before the commit")
        store.release()
        #expect(writer.waitUntilCommitted())
        // The writer hands the answer to its executor; it runs there.
        #expect(loop.runAllWhenHandedOver() == 1)
        #expect(answered.withLock { $0 })
        #expect(writer.uncommittedTicket() == nil)
    }

    /// Journal records may run ahead of the disk by the lag; lifecycle changes never; beyond
    /// the lag every answer waits (back-pressure); admin answers always wait.
    @Test func answersWaitForLifecycleChangesAndForRecordsBeyondTheLag() throws {
        let store = GatedStore()
        let writer = StateWriter(store: store, limits: StateWriterLimits().with(journalLag: 2))
        writer.start()
        defer { writer.stop() }
        store.holdWriter(writer, with: [record(1)])
        #expect(writer.uncommittedTicket() == nil, "one record in the open transaction: within the lag")
        #expect(writer.uncommittedTicket(everything: true) != nil)
        writer.submit([record(2)])
        #expect(writer.uncommittedTicket() == nil)
        writer.submit([record(3)])
        let behind = try #require(writer.uncommittedTicket(), "three uncommitted records: over the lag")
        #expect(behind == 3)
        store.release()
        #expect(writer.waitUntilCommitted())
        #expect(writer.uncommittedTicket() == nil)
        store.holdWriter(writer, with: [token("gate")], transactions: 3)
        writer.submit([record(4), .recordsEvicted(before: 2)])
        #expect(writer.uncommittedTicket() != nil, "the token before it is not committed")
        store.release()
        #expect(writer.waitUntilCommitted())
        #expect(writer.uncommittedTicket() == nil)
    }

    /// A store that fails every attempt: the answers waiting for it are told so (never sent
    /// as if committed), the writer refuses work meanwhile, and once the store works again
    /// everything accepted before is committed: nothing is dropped.
    @Test func aFailingStoreRefusesWorkUntilItCommitsAgainAndLosesNothing() throws {
        let store = GatedStore()
        store.failing = true
        let messages = Locked<[String]>([])
        let writer = StateWriter(store: store, limits: quickRetries, logger: Logger(stamp: { "" }) { line in messages.withLock { $0.append(line) } })
        let loop = QueueExecutor()
        writer.start()
        defer { writer.stop() }
        #expect(writer.unavailableReason == nil)
        writer.submit([token("a"), record(1)])
        let ticket = try #require(writer.uncommittedTicket())
        let outcome = Locked<Bool?>(nil)
        writer.afterCommit(ticket, on: loop) { committed in outcome.withLock { $0 = committed } }
        #expect(loop.runAllWhenHandedOver() == 1, "the held answer is released")
        #expect(outcome.withLock { $0 } == false, "and told its commit failed")
        let reason = try #require(writer.unavailableReason)
        #expect(reason.contains("disk full"))
        #expect(writer.statistics.failure != nil && writer.statistics.outages == 1)
        #expect(messages.withLock { $0.contains { $0.contains("Providers get 503") } })
        // Changes made meanwhile (a device's ack, say) queue behind the failed ones.
        writer.submit([token("b")])
        #expect(writer.uncommittedTicket() != nil)

        store.failing = false
        #expect(writer.waitUntilCommitted())
        #expect(writer.unavailableReason == nil)
        let stats = writer.statistics
        #expect(stats.failure == nil && stats.recoveries == 1)
        #expect(stats.changesDropped == 0 && stats.recordsDropped == 0)
        let names = store.allChanges.compactMap { change -> String? in
            if case .tokenSaved(let entry) = change { return entry.token }
            if case .recordSaved(let record) = change { return "record \(record.sequence)" }
            return nil
        }
        #expect(names == ["a", "record 1", "b"], "the failed batch first, then what queued behind it")
        #expect(messages.withLock { $0.contains { $0.contains("works again") } })
        // Serving as before: a new answer waits for its commit and is told it succeeded.
        writer.submit([token("c")])
        if let next = writer.uncommittedTicket() {
            writer.afterCommit(next, on: loop) { committed in outcome.withLock { $0 = committed } }
            #expect(loop.runAllWhenHandedOver() == 1)
            #expect(outcome.withLock { $0 } == true)
        }
    }

    /// `--state-failure memory`: answers stop waiting for a failing store and nothing is
    /// refused; what queued is written once the store works again.
    @Test func underTheMemoryPolicyAnswersGoOnAndTheQueueIsWrittenLater() throws {
        let store = GatedStore()
        store.failing = true
        let writer = StateWriter(store: store, limits: quickRetries, onFailure: .memory)
        let loop = QueueExecutor()
        writer.start()
        defer { writer.stop() }
        writer.submit([token("a")])
        let ticket = try #require(writer.uncommittedTicket())
        let outcome = Locked<Bool?>(nil)
        writer.afterCommit(ticket, on: loop) { committed in outcome.withLock { $0 = committed } }
        #expect(loop.runAllWhenHandedOver() == 1)
        #expect(outcome.withLock { $0 } == true, "released as the policy asks")
        #expect(writer.unavailableReason == nil, "nothing is refused")
        writer.submit([token("b")])
        #expect(writer.uncommittedTicket() == nil, "answers do not wait while the store fails")
        #expect(writer.statistics.failure != nil)
        store.failing = false
        #expect(writer.waitUntilCommitted())
        #expect(store.allChanges.count == 2 && writer.statistics.failure == nil)
    }

    /// Stopping while the store fails cannot keep what is queued: it is counted and logged.
    @Test func stoppingWhileTheStoreFailsCountsWhatIsLost() throws {
        let store = GatedStore()
        store.failing = true
        let messages = Locked<[String]>([])
        let writer = StateWriter(store: store, limits: quickRetries, logger: Logger(stamp: { "" }) { line in messages.withLock { $0.append(line) } })
        writer.start()
        writer.submit([token("a"), record(1)])
        #expect(try eventually(10, pollingEvery: 0.002) { writer.unavailableReason != nil })
        writer.stop()
        let stats = writer.statistics
        #expect(stats.changesDropped == 1 && stats.recordsDropped == 1)
        #expect(messages.withLock { $0.contains { $0.contains("not in the state directory") } })
    }
}

/// Retries in milliseconds rather than seconds.
private let quickRetries = limits {
    $0.attempts = 2
    $0.retryDelayMilliseconds = 1
    $0.failingRetryMilliseconds = 5
    $0.maxFailingRetryMilliseconds = 20
}

@Suite("Commit gate: answers held per connection")
struct CommitGateTests {
    /// Items leave in order once their commit is done; one that arrives when everything is
    /// committed still queues behind earlier ones, and the gate settles (no re-arming loop).
    @Test func heldItemsLeaveInOrderAndTheGateSettles() throws {
        let store = GatedStore()
        let writer = StateWriter(store: store)
        let loop = QueueExecutor()
        let released = Locked<[String]>([])
        let gate = CommitGate<String>(durability: writer, executor: loop) { items, committed in
            #expect(committed)
            released.withLock { $0 += items }
        }
        writer.start()
        defer { writer.stop() }
        #expect(!gate.hold("now"), "nothing uncommitted: send at once")
        store.holdWriter(writer, with: [token("1")])
        #expect(gate.hold("a"))
        writer.submit([token("2")])
        #expect(gate.hold("b"))
        store.release()
        #expect(writer.waitUntilCommitted())
        // Everything is committed, but "a"'s release has not run yet: "c" waits behind it.
        #expect(gate.hold("c"))
        while released.withLock({ $0.count }) < 3 && loop.runAllWhenHandedOver() > 0 {}
        #expect(released.withLock { $0 } == ["a", "b", "c"])
        // Everything is committed, so a gate that re-armed would have asked for a commit that
        // is done, and that request is handed to the executor at once: no need to wait.
        #expect(loop.runAll() == 0, "nothing re-arms once all is released")
        #expect(!gate.hold("d"))
    }
}

/// Default writer limits with some changed.
private func limits(_ change: (inout StateWriterLimits) -> Void) -> StateWriterLimits {
    var limits = StateWriterLimits()
    change(&limits)
    return limits
}
