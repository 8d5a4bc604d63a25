// BackendCalls: the simulated apps' calls to their own backends (hooks): queued per device and
// app, scheduled fairly per backend, retried with backoff, recorded in a bounded log. Imports
// APNsCore (the hook intents), HTTP1Client, Locking, Dispatch and Foundation.
// BackendCaller: apps' calls to their own backends, queued, sent, retried and recorded.
// Imports Dispatch, Foundation, HTTP1Client (the wire) and Locking.
import Dispatch
import Foundation
import HTTP1Client
import Locking

/// Sends apps' calls to their own backends (the register, bind, unbind and fetch hooks) and
/// keeps a record of each for the inspection API.
///
/// - One app's calls on one device reach its backend one after another, in the order they
///   were queued: a call waits behind the one before it, retries included, so an unbind is
///   never overtaken by the bind that follows it. Different apps, and different devices,
///   are independent.
/// - No backend delays another's calls: calls are scheduled by backend (host and port of the
///   URL). At most `maxConcurrentCallsPerBackend` attempts are on the wire to one backend,
///   and backends with calls ready take turns for the workers (`FairScheduler`), so a
///   backend that never answers ties up at most its own share, however many calls wait
///   for it. Workers are threads started on demand, at most `maxConcurrentCalls`; waiting
///   for a retry holds none. Only when more backends than `maxConcurrentCalls /
///   maxConcurrentCallsPerBackend` are stuck at once are all workers taken; another
///   backend's call then has the next turn, when any attempt ends.
/// - An attempt with no answer (refused, timed out, cut short), a 5xx or a 429 is tried again
///   after a backoff until the request's `maxAttempts`; any other answer ends the call
///   (redirects are not followed). https URLs fail at once (`HTTP1ClientError.httpsMessage`).
///   `timeoutMs` bounds a whole attempt (connect, send, answer), so an answer trickling in a
///   byte at a time ends at it too.
/// - Bounded: at most `maxQueued` calls queued or in flight, of which at most
///   `maxQueuedPerBackend` for one backend (more are recorded as dropped), and the newest
///   `logCapacity` records are kept.
public final class BackendCaller: Sendable {
    private let state: Locked<CallQueues>
    private let now: @Sendable () -> Int64
    private let maxQueued: Int
    private let maxQueuedPerBackend: Int
    private let poolSize: Int
    private let backoff: RetryBackoff
    /// Delivers `onChange` in the order the changes happened, outside the lock.
    private let changes = DispatchQueue(label: "backend-calls.changes")

    /// Calls queued, and records kept, unless told otherwise (`--max-backend-calls`).
    public static let defaultCapacity = 10_000

    /// - Parameters:
    ///   - now: the time for records, in ms since the epoch (the emulator's clock).
    ///   - maxQueued: calls queued or in flight at most, over all devices.
    ///   - maxQueuedPerBackend: … of which for one backend at most (nil: half of `maxQueued`,
    ///     so that a backend that does not answer leaves the other half to the others).
    ///   - logCapacity: records kept; the oldest go first.
    ///   - retryBaseDelayMs: the wait after a first failed attempt; it doubles with each further one …
    ///   - retryMaxDelayMs: … up to this.
    ///   - maxConcurrentCalls: attempts on the wire at once (worker threads), over all backends.
    ///   - maxConcurrentCallsPerBackend: attempts on the wire at once to one backend.
    public init(
        now: @escaping @Sendable () -> Int64, maxQueued: Int = defaultCapacity, maxQueuedPerBackend: Int? = nil,
        logCapacity: Int = defaultCapacity, retryBaseDelayMs: Int = 200, retryMaxDelayMs: Int = 5_000,
        maxConcurrentCalls: Int = 32, maxConcurrentCallsPerBackend: Int = 4
    ) {
        self.now = now
        self.maxQueued = max(0, maxQueued)
        self.maxQueuedPerBackend = max(1, maxQueuedPerBackend ?? self.maxQueued / 2)
        self.poolSize = max(1, maxConcurrentCalls)
        self.backoff = RetryBackoff(baseMs: retryBaseDelayMs, maxMs: retryMaxDelayMs)
        self.state = Locked(CallQueues(logCapacity: logCapacity, perBackendConcurrency: max(1, maxConcurrentCallsPerBackend)))
    }

    /// Told about every record added or changed (queued, retrying, sent again, ended), in
    /// order, on a queue of its own. Set it once at start-up, before the first `enqueue`.
    public var onChange: (@Sendable (BackendCallRecord) -> Void)? {
        get { state.withLock { $0.onChange } }
        set { state.withLock { $0.onChange = newValue } }
    }

    /// Queues calls behind the earlier ones of the same app on the same device and returns at once.
    public func enqueue(_ requests: [BackendRequest]) {
        guard !requests.isEmpty else { return }
        let atMs = now()
        let start = state.withLock { queues -> Int in
            for request in requests {
                var record = BackendCallRecord(id: queues.nextID, request: request, atMs: atMs)
                queues.nextID += 1
                if let refused = queues.add(record, maxQueued: maxQueued, maxQueuedPerBackend: maxQueuedPerBackend) {
                    record.state = .dropped
                    record.error = refused
                    record.finishedAtMs = atMs
                    queues.counts.dropped += 1
                }
                queues.log.append(record)
                publish(record, queues)
            }
            return queues.workersToStart(poolSize: poolSize)
        }
        startWorkers(start)
    }

    /// The kept records, oldest first, of one device and/or one hook when given.
    public func calls(deviceID: String? = nil, hook: String? = nil) -> [BackendCallRecord] {
        state.withLock { $0.log.matching(deviceID: deviceID, hook: hook) }
    }

    /// A page of the kept records, oldest first: ids above `after`, of one device, hook and/or
    /// bundle when given, at most `limit`, and whether more follow.
    public func calls(
        after: UInt64?, limit: Int, deviceID: String?, hook: String?, bundleID: String?
    )
        -> (records: [BackendCallRecord], more: Bool)
    {
        state.withLock { queues in
            queues.log.page(after: after, limit: limit) { record in
                (deviceID == nil || record.request.deviceID == deviceID) && (hook == nil || record.request.hook == hook)
                    && (bundleID == nil || record.request.bundleID == bundleID)
            }
        }
    }

    public var counts: BackendCallCounts { state.withLock { $0.counts } }

    /// Workers sending now or about to (for tests: 0 means nothing is on the wire).
    var workersRunning: Int { state.withLock { $0.runningWorkers } }

    /// Back to the start: queued calls are forgotten (not sent), the log and the counts are
    /// cleared. An attempt on the wire finishes, but its result is not recorded and the call
    /// is not retried. Ids keep counting up, so an old id never names a new call.
    public func reset() {
        state.withLock { queues in
            queues.clearQueues()
            queues.log.removeAll()
            queues.counts = BackendCallCounts()
        }
    }

    /// Stops for good and returns at once: queued calls are not sent, calls enqueued later
    /// are recorded as dropped, no further attempt begins. An attempt already on the wire
    /// ends by its own timeout, unrecorded. The log stays readable.
    public func shutdown() {
        state.withLock { queues in
            queues.stopped = true
            queues.clearQueues()
        }
    }

    // MARK: Workers

    /// One attempt taken off a line, its backend, and the queues' generation when it was taken.
    private struct Attempt: Sendable {
        var record: BackendCallRecord
        var backend: String
        var generation: UInt64
    }

    /// Workers are threads of their own rather than Dispatch work items: they block in socket
    /// calls, and blocked items would starve Dispatch's pool (about one thread per core),
    /// which runs the retry timers.
    private func startWorkers(_ count: Int) {
        for _ in 0..<count {
            let thread = Thread(named: "backend-call") { self.work() }
            thread.start()
        }
    }

    /// Sends the calls the scheduler hands out until none can go now. Recording an attempt's
    /// result and taking the next share one lock; when the result made more calls ready than
    /// this worker can take, more workers start.
    private func work() {
        var finished: (attempt: Attempt, result: AttemptResult, endedAtMs: Int64)?
        while true {
            let (next, start) = state.withLock { queues -> (Attempt?, Int) in
                if let finished { recordResult(finished.result, of: finished.attempt, endedAtMs: finished.endedAtMs, in: &queues) }
                let next = takeNext(&queues)
                return (next, queues.workersToStart(poolSize: poolSize))
            }
            startWorkers(start)
            guard let next else { return }
            let result = Self.send(next.record.request)
            finished = (next, result, now())
        }
    }

    private func takeNext(_ queues: inout CallQueues) -> Attempt? {
        guard !queues.stopped, let (first, backend) = queues.takeNext() else {
            queues.runningWorkers -= 1
            return nil
        }
        var record = first
        let wasRetrying = record.state == .retrying
        record.attempts += 1
        record.state = .pending
        queues.counts.attempts += 1
        queues.updateFirst(record)
        if wasRetrying { publish(record, queues) }
        return Attempt(record: record, backend: backend, generation: queues.generation)
    }

    private func recordResult(_ result: AttemptResult, of attempt: Attempt, endedAtMs: Int64, in queues: inout CallQueues) {
        // The worker is free for another backend's turn whatever became of the call.
        queues.scheduler.finished(in: attempt.backend)
        let key = CallQueues.LineKey(attempt.record.request)
        // A reset or shutdown since the attempt began: the call is no longer ours to record.
        guard attempt.generation == queues.generation, var record = queues.lines[key]?.calls.first?.record,
            record.id == attempt.record.id
        else { return }
        record.note(result)
        switch AttemptVerdict(result) {
        case .retryable where record.attempts < max(1, record.request.maxAttempts):
            record.state = .retrying
            queues.lines[key]?.waitingForRetry = true
            queues.updateFirst(record)
            scheduleRetry(of: record, generation: queues.generation)
        case .done:
            record.state = .done
            record.finishedAtMs = endedAtMs
            queues.counts.sent += 1
            queues.updateFirst(record)
            queues.finishFirst(of: key)
        case .failed, .retryable:
            record.state = .failed
            record.finishedAtMs = endedAtMs
            queues.counts.failed += 1
            queues.updateFirst(record)
            queues.finishFirst(of: key)
        }
        publish(record, queues)
    }

    /// A timer, not a sleeping worker: the line becomes ready again when it fires.
    private func scheduleRetry(of record: BackendCallRecord, generation: UInt64) {
        let delayMs = backoff.delayMs(afterFailedAttempts: record.attempts)
        let key = CallQueues.LineKey(record.request)
        let id = record.id
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(delayMs)) { [weak self] in
            self?.retryDue(key, callID: id, generation: generation)
        }
    }

    private func retryDue(_ key: CallQueues.LineKey, callID: UInt64, generation: UInt64) {
        let start = state.withLock { queues -> Int in
            guard !queues.stopped, queues.generation == generation, let line = queues.lines[key],
                line.waitingForRetry, line.calls.first?.record.id == callID
            else { return 0 }
            queues.lines[key]?.waitingForRetry = false
            queues.makeReady(key)
            return queues.workersToStart(poolSize: poolSize)
        }
        startWorkers(start)
    }

    private func publish(_ record: BackendCallRecord, _ queues: borrowing CallQueues) {
        guard let onChange = queues.onChange else { return }
        changes.async { onChange(record) }
    }

    private static func send(_ request: BackendRequest) -> AttemptResult {
        do {
            return .success(
                try HTTP1Client.exchange(
                    url: request.url, method: request.method, headers: request.headers.map { HTTP1Header($0.name, $0.value) },
                    body: request.body, timeoutMs: max(1, request.timeoutMs), whenLarger: .cut))
        } catch {
            return .failure(error)
        }
    }
}
