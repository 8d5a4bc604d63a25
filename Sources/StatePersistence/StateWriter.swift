// StatePersistence: the group-commit writer thread between the state lock and a StateStore,
// and the gate that holds answers until their changes are committed. Imports APNsCore,
// Lifecycle (it is a service, given a logger), MonotonicClock and Foundation; no store of
// its own.

public import APNsCore
import Foundation
public import Lifecycle
import Locking
import MonotonicClock
import Synchronization

/// Something that runs a task on the thread that owns a connection (an event loop).
public protocol CommitExecutor: AnyObject, Sendable {
    func execute(_ task: @escaping @Sendable () -> Void)
}

/// Bounds of what waits to be written, and how far answers may run ahead of the disk.
public struct StateWriterLimits: Sendable {
    /// Journal records an answer may be sent ahead of their commit (`--state-journal-lag`).
    /// Beyond it answers wait for the commit of everything before them (back-pressure);
    /// 0 makes every answer wait for its own record.
    public var journalLag = 0
    /// Journal records waiting for the writer; more are dropped and counted.
    public var maxRecords = 100_000
    /// Estimated bytes of those records; more are dropped and counted.
    public var maxRecordBytes = 64 << 20
    /// Attempts at a failing transaction before the store is declared failing.
    public var attempts = 3
    public var retryDelayMilliseconds = 200
    /// While failing, the store is tried again after this long, doubling up to the maximum.
    public var failingRetryMilliseconds = 500
    public var maxFailingRetryMilliseconds = 5_000

    public init() {}

    /// No bound on queued records (re-queueing what was already accepted).
    static var unbounded: StateWriterLimits {
        var limits = StateWriterLimits()
        limits.maxRecords = .max
        limits.maxRecordBytes = .max
        return limits
    }

    /// These limits with `journalLag` changed (`--state-journal-lag`).
    public func with(journalLag: Int) -> StateWriterLimits {
        var limits = self
        limits.journalLag = journalLag
        return limits
    }
}

/// What the emulator does while the store cannot commit (`--state-failure`).
public enum StateFailurePolicy: String, Sendable, CaseIterable {
    /// Refuse work that would change the state (503) until a commit succeeds again; answers
    /// held for a failed commit are not sent. The default: a 200 means it is stored.
    case refuse
    /// Go on serving from memory (logged): answers no longer wait for the disk, and what
    /// could not be written stays queued (within the bounds) until the store works again.
    case memory
}

/// Counters for `/metrics`.
public struct StateWriterStats: Sendable {
    public var changesWritten: UInt64 = 0
    public var transactions: UInt64 = 0
    /// Journal records not written because the queue was full, or because the emulator
    /// stopped while the store was failing.
    public var recordsDropped: UInt64 = 0
    /// Other changes not written because the emulator stopped while the store was failing
    /// (never dropped otherwise).
    public var changesDropped: UInt64 = 0
    public var writeErrors: UInt64 = 0
    public var queuedChanges: Int = 0
    public var queuedRecordBytes: Int = 0
    /// Why the store is not taking writes, while it is not (nil once a commit succeeds again).
    public var failure: String?
    /// Times the store started failing, and times it recovered.
    public var outages: UInt64 = 0
    public var recoveries: UInt64 = 0
}

/// Group commit on a dedicated thread. Request threads hand over changes under the world's
/// lock (`enqueue`, a short critical section, never I/O); the writer takes everything that
/// accumulated and applies it as one transaction, then tells waiters their changes are
/// committed. Answers that promise durability are held until then with `afterCommit`, on the
/// connection's own thread, so no event loop ever waits for the disk:
///
/// - changes to devices, tokens, keys, apps, and notifications left waiting for a device
///   (stored, deferred, batched, in flight) are committed before any answer that follows them
///   (`uncommittedTicket()`);
/// - journal records may run ahead of the disk by up to `journalLag` records; beyond that,
///   answers wait for everything before them, which slows clients to the writer's pace;
/// - admin answers wait for everything (`uncommittedTicket(everything: true)`).
///
/// Bounds: changes other than journal records are coalesced per entity (a later row for the
/// same device, token or notification replaces the earlier one), so they never outnumber the
/// state in memory, and are never dropped. Journal records are bounded by `limits`; beyond
/// that new records are dropped and counted, never waited for.
///
/// When a transaction fails `limits.attempts` times the store is *failing*: its changes go
/// back to the head of the queue and are tried again with backoff until a commit succeeds,
/// so nothing the emulator accepted is dropped while it runs. Under `.refuse` (the default)
/// the answers waiting for that commit are told it failed (their connection is closed
/// unanswered) and `unavailableReason` makes the emulator refuse new work until the store
/// commits again; under `.memory` answers stop waiting for the disk.
public final class StateWriter: StateChangeSink, CommitTracker, @unchecked Sendable {
    private let store: any StateStore
    private let limits: StateWriterLimits
    public let onFailure: StateFailurePolicy
    private let logger: Logger
    private let condition = NSCondition()
    // Guarded by `condition`:
    private var pending = PendingChanges()
    private var waiters = CommitWaiters()
    private var stats = StateWriterStats()
    private var running = false
    private var stopping = false
    private var writerIdle = true
    /// A producer was told to call `wake` and has not yet.
    private var wakePending = false
    /// The last transaction failed every attempt; the queue holds its changes again.
    private var failing = false
    /// Read on every request (`unavailableReason`): set while failing under `.refuse`.
    private let refusing = Atomic<Bool>(false)
    /// The number of the last `enqueue` call, of the last one with a change other than a
    /// journal record, and of the last one committed.
    private let enqueued = Atomic<UInt64>(0)
    private let criticalEnqueued = Atomic<UInt64>(0)
    private let committed = Atomic<UInt64>(0)
    /// Journal records enqueued and not yet committed (queued or in the open transaction).
    private let uncommittedRecords = Atomic<Int>(0)
    private var recordsInTransaction = 0

    /// Built idle: `start` begins the writer thread. Its failures are warnings on `logger`.
    public init(
        store: any StateStore, limits: StateWriterLimits = StateWriterLimits(), onFailure: StateFailurePolicy = .refuse,
        logger: Logger = .silent
    ) {
        self.store = store
        self.limits = limits
        self.onFailure = onFailure
        self.logger = logger
    }

    public var location: String { store.location }

    /// Why changes are refused right now (`.refuse` while the store is failing), else nil.
    public var unavailableReason: String? {
        guard refusing.load(ordering: .acquiring) else { return nil }
        condition.lock()
        defer { condition.unlock() }
        return stats.failure.map { "\($0); retrying" }
    }

    public var serviceName: String { "state directory" }

    public func start() {
        condition.lock()
        running = true
        condition.unlock()
        let thread = Thread(named: "state-writer") { [self] in self.run() }
        thread.start()
    }

    /// Writes what is queued, then stops the thread (graceful shutdown, tests). It waits for
    /// the open transaction however long it takes: changes that were acknowledged are
    /// committed or reported lost, never cut off by a deadline.
    public func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        while running { condition.wait() }
        condition.unlock()
    }

    // MARK: Producer side

    /// Called under the world's lock with the changes of one `withWorld` call. True when
    /// the writer sleeps and `wake` must be called (after the world's lock is released).
    @discardableResult
    public func enqueue(_ changes: [StateChange]) -> Bool {
        condition.lock()
        var critical = false
        for change in changes {
            if !pending.add(change, limits: limits) { stats.recordsDropped += 1 }
            if !critical, Self.answersWaitFor(change) { critical = true }
        }
        uncommittedRecords.store(recordsInTransaction + pending.recordCount, ordering: .releasing)
        // Bumped under the queue lock, so the writer's ticket covers exactly what it took.
        let ticket = enqueued.add(1, ordering: .releasing).newValue
        if critical { criticalEnqueued.store(ticket, ordering: .releasing) }
        let wakeUp = writerIdle && !wakePending
        if wakeUp { wakePending = true }
        condition.unlock()
        return wakeUp
    }

    /// `enqueue` and, when asked for, `wake`: for callers that hold no lock.
    public func submit(_ changes: [StateChange]) {
        if enqueue(changes) { wake() }
    }

    public func wake() {
        condition.lock()
        wakePending = false
        condition.signal()
        condition.unlock()
    }

    /// Whether an answer given after this change must wait for its commit (journal records
    /// and fault-rule counters may run ahead, within `journalLag`).
    static func answersWaitFor(_ change: StateChange) -> Bool {
        switch change {
        case .recordSaved, .recordRemoved, .recordsEvicted, .faultsSaved: return false
        default: return true
        }
    }

    /// The ticket an answer must wait for, or nil when it may go now. `everything` waits for
    /// journal records too, whatever the lag (admin answers). Under `.memory` nothing waits
    /// while the store is failing.
    public func uncommittedTicket(everything: Bool) -> UInt64? {
        if onFailure == .memory, memoryOnly.load(ordering: .acquiring) { return nil }
        let done = committed.load(ordering: .acquiring)
        let ticket =
            everything || uncommittedRecords.load(ordering: .acquiring) > limits.journalLag
            ? enqueued.load(ordering: .acquiring) : criticalEnqueued.load(ordering: .acquiring)
        return ticket > done ? ticket : nil
    }

    /// Runs `task` on `executor` once everything up to `ticket` is committed (`true`), or
    /// once the transaction meant to commit it has failed every attempt (`false`: what the
    /// task would announce is not on disk; under `.memory`, `true` then as well). Answers are
    /// never held longer than one transaction's attempts. The task may capture objects
    /// confined to the executor's thread: it only ever runs there.
    public func afterCommit(_ ticket: UInt64, on executor: any CommitExecutor, _ task: @escaping (_ committed: Bool) -> Void) {
        condition.lock()
        if committed.load(ordering: .acquiring) >= ticket {
            condition.unlock()
            executor.executeConfined(task, committed: true)
            return
        }
        waiters.add(ticket, on: executor, task)
        condition.unlock()
    }

    /// Blocks until everything enqueued so far is committed (tests, shutdown).
    @discardableResult
    public func waitUntilCommitted(timeoutSeconds: Double = 30) -> Bool {
        let target = enqueued.load(ordering: .acquiring)
        let deadline = Date().addingTimeInterval(timeoutSeconds)
        condition.lock()
        defer { condition.unlock() }
        while committed.load(ordering: .acquiring) < target {
            if !condition.wait(until: deadline) { return false }
        }
        return true
    }

    public var statistics: StateWriterStats {
        condition.lock()
        defer { condition.unlock() }
        var s = stats
        s.queuedChanges = pending.count
        s.queuedRecordBytes = pending.recordBytes
        return s
    }

    // MARK: Writer thread

    private func run() {
        var backoff = limits.failingRetryMilliseconds
        condition.lock()
        while true {
            while pending.isEmpty && !stopping {
                writerIdle = true
                condition.wait()
            }
            writerIdle = false
            if pending.isEmpty && stopping { break }
            recordsInTransaction = pending.recordCount
            let batch = pending.take()
            let ticket = enqueued.load(ordering: .acquiring)
            condition.unlock()

            let error = write(batch)

            condition.lock()
            recordsInTransaction = 0
            var released = CommitRelease(waiters: [])
            if let error {
                stats.writeErrors += 1
                // Nothing is lost: the batch goes back before whatever queued meanwhile.
                pending.requeue(batch)
                if !failing {
                    startFailing(error)
                } else {
                    stats.failure = failureText(error)
                    if Self.nowMs() - lastFailureLogMs >= 60_000 {
                        lastFailureLogMs = Self.nowMs()
                        logger.warning("state: \(store.location) still cannot be written (\(error)); \(pending.count) change(s) wait for it")
                    }
                }
                // The answers waiting for this transaction learn it failed (under `.memory`
                // they go as if it had not).
                released = waiters.takeAll()
                uncommittedRecords.store(pending.recordCount, ordering: .releasing)
                if stopping {
                    giveUp()
                    condition.unlock()
                    released.run(committed: onFailure == .memory)
                    condition.lock()
                    break
                }
                condition.unlock()
                released.run(committed: onFailure == .memory)
                condition.lock()
                // Back off (a stop cuts the wait short and makes one last attempt).
                let retryAt = Date().addingTimeInterval(Double(backoff) / 1000)
                while !stopping && Date() < retryAt { _ = condition.wait(until: retryAt) }
                backoff = min(backoff * 2, limits.maxFailingRetryMilliseconds)
                continue
            }
            stats.transactions += 1
            stats.changesWritten += UInt64(batch.count)
            committed.store(ticket, ordering: .releasing)
            if failing {
                stopFailing()
                backoff = limits.failingRetryMilliseconds
            }
            uncommittedRecords.store(pending.recordCount, ordering: .releasing)
            released = waiters.takeReady(committed: ticket)
            condition.broadcast()
            condition.unlock()
            released.run(committed: true)
            condition.lock()
        }
        running = false
        condition.broadcast()
        condition.unlock()
    }

    /// Set when the store is failing under `.memory`: answers stop waiting for it.
    private let memoryOnly = Atomic<Bool>(false)

    private func failureText(_ error: StateStoreError) -> String {
        "the state directory cannot commit: \(error)"
    }

    /// Under the queue lock.
    private var lastFailureLogMs: Int64 = 0

    private static func nowMs() -> Int64 { Monotonic.nowMilliseconds() }

    private func startFailing(_ error: StateStoreError) {
        failing = true
        lastFailureLogMs = Self.nowMs()
        stats.outages += 1
        stats.failure = failureText(error)
        switch onFailure {
        case .refuse:
            refusing.store(true, ordering: .releasing)
            logger.warning(
                "state: writing \(store.location) failed \(limits.attempts) times (\(error)). Providers get 503 and admin changes are refused until it commits again; answers that were waiting for it are not sent (their connections are closed). Retrying with backoff up to \(limits.maxFailingRetryMilliseconds / 1000) s."
            )
        case .memory:
            memoryOnly.store(true, ordering: .releasing)
            logger.warning(
                "state: writing \(store.location) failed \(limits.attempts) times (\(error)). --state-failure memory: going on in memory; answers no longer wait for the disk, and what is not written is lost if the emulator stops before the directory works again. Retrying with backoff up to \(limits.maxFailingRetryMilliseconds / 1000) s."
            )
        }
    }

    /// Under the queue lock, after a commit succeeded again.
    private func stopFailing() {
        failing = false
        stats.recoveries += 1
        stats.failure = nil
        refusing.store(false, ordering: .releasing)
        memoryOnly.store(false, ordering: .releasing)
        logger.warning("state: writing \(store.location) works again; everything queued meanwhile is committed and the emulator serves as before")
    }

    /// Stopping while the store fails: what is queued cannot be kept.
    private func giveUp() {
        let changes = pending.take()
        for change in changes {
            if change.isJournalRecord { stats.recordsDropped += 1 } else { stats.changesDropped += 1 }
        }
        logger.warning(
            "state: stopping while \(store.location) cannot be written; \(changes.count) change(s) made since the last commit are not in the state directory"
        )
    }

    /// One transaction, tried a few times (a busy disk, a transient error).
    private func write(_ batch: [StateChange]) -> StateStoreError? {
        var lastError: StateStoreError?
        for attempt in 1...max(1, limits.attempts) {
            do {
                try store.write(batch)
                return nil
            } catch {
                lastError = error
                if !failing { logger.warning("state: writing \(store.location) failed (attempt \(attempt) of \(limits.attempts)): \(error)") }
                if attempt < limits.attempts { usleep(UInt32(limits.retryDelayMilliseconds * 1000 * attempt)) }
            }
        }
        return lastError
    }
}

/// The changes waiting for the writer, coalesced: a change with the key of an earlier one
/// replaces it in place (same entity, newer row); a reset discards everything before it;
/// evictions collapse into one trailing `recordsEvicted`. So what remains touches every
/// entity once, after at most one leading reset (`--redis`'s writer relies on that).
public struct PendingChanges {
    private var changes: [StateChange?] = []
    private var index: [ChangeKey: Int] = [:]
    private(set) var count = 0
    private(set) var recordCount = 0
    private(set) var recordBytes = 0
    private var evictedBefore: UInt64?

    public init() {}

    public var isEmpty: Bool { count == 0 && evictedBefore == nil }

    /// `changes`, coalesced (no bounds: they were accepted already).
    public static func coalesced(_ changes: [StateChange]) -> [StateChange] {
        if isCoalesced(changes) { return changes }
        var pending = PendingChanges()
        let unbounded = StateWriterLimits.unbounded
        for change in changes { _ = pending.add(change, limits: unbounded) }
        return pending.take()
    }

    /// Journal records alone, each newer than the one before (what a run of pushes makes):
    /// every row is for an entity of its own and already where `take` would put it, so
    /// coalescing would give them back as they are (it cost a push's write 2,100 instructions).
    static func isCoalesced(_ changes: [StateChange]) -> Bool {
        var last: UInt64?
        for change in changes {
            guard let sequence = change.recordSequence, last.map({ $0 < sequence }) ?? true else { return false }
            last = sequence
        }
        return true
    }

    static func estimatedBytes(_ change: StateChange) -> Int {
        guard case .recordSaved(let record) = change else { return 0 }
        return 256 + record.payload.count + record.requestHeaders.count * 48
    }

    /// False when a new journal record is dropped because the bounds are reached.
    mutating func add(_ change: StateChange, limits: StateWriterLimits) -> Bool {
        switch change {
        case .reset:
            self = PendingChanges()
            changes = [change]
            count = 1
            return true
        case .recordsEvicted(let before):
            evictedBefore = max(evictedBefore ?? 0, before)
            return true
        default:
            break
        }
        guard let key = change.key else { return true }
        let bytes = Self.estimatedBytes(change)
        if let position = index[key], let old = changes[position] {
            if old.isJournalRecord {
                recordCount -= 1
                recordBytes -= Self.estimatedBytes(old)
            }
            if change.isJournalRecord {
                recordCount += 1
                recordBytes += bytes
            }
            changes[position] = change
            return true
        }
        if change.isJournalRecord {
            guard recordCount < limits.maxRecords, recordBytes + bytes <= limits.maxRecordBytes else { return false }
            recordCount += 1
            recordBytes += bytes
        }
        index[key] = changes.count
        changes.append(change)
        count += 1
        return true
    }

    /// Puts a batch that failed back in front of what queued after it: later rows for the same
    /// entities still win. Never drops: these changes were accepted within the bounds.
    mutating func requeue(_ batch: [StateChange]) {
        let newer = take()
        var merged = PendingChanges()
        let unbounded = StateWriterLimits.unbounded
        for change in batch { _ = merged.add(change, limits: unbounded) }
        for change in newer { _ = merged.add(change, limits: unbounded) }
        self = merged
    }

    /// Everything, in order, and empties the queue (keeping the index's capacity: it is
    /// filled again under the world's lock, where rehashing as it grows would cost most).
    mutating func take() -> [StateChange] {
        var out = changes.compactMap { $0 }
        if let evictedBefore { out.append(.recordsEvicted(before: evictedBefore)) }
        changes = []
        index.removeAll(keepingCapacity: true)
        count = 0
        recordCount = 0
        recordBytes = 0
        evictedBefore = nil
        return out
    }
}

extension StateWriter: Service {
    public func stop(deadlineMs: Int64) { stop() }
}
