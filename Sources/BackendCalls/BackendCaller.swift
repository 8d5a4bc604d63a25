import Dispatch
import Foundation
import HTTP1Client
import Locking

/// Sends apps' calls to their own backends (the register, bind, unbind and fetch hooks) and
/// keeps a record of each for the inspection API.
///
/// - One device's calls reach the backend one after another, in the order they were queued:
///   a call waits behind the one before it, retries included, so an unbind is never overtaken
///   by the bind that follows it.
/// - Different devices are served concurrently by at most `maxConcurrentCalls` workers. A
///   worker is busy only while an attempt is on the wire: waiting for a retry holds no thread,
///   so a dead backend ties up one worker per attempt in progress, not one per device.
/// - An attempt with no answer (refused, timed out, cut short), a 5xx or a 429 is tried again
///   after a backoff until the request's `maxAttempts`; any other answer ends the call
///   (redirects are not followed). https URLs fail at once (`HTTP1ClientError.httpsMessage`).
/// - Bounded: at most `maxQueued` calls queued or in flight (more are recorded as dropped),
///   and the newest `logCapacity` records are kept.
public final class BackendCaller: Sendable {
    private let state: Locked<CallQueues>
    private let now: @Sendable () -> Int64
    private let maxQueued: Int
    private let poolSize: Int
    private let backoff: RetryBackoff
    /// Delivers `onChange` in the order the changes happened, outside the lock.
    private let changes = DispatchQueue(label: "backend-calls.changes")

    /// - Parameters:
    ///   - now: the time for records, in ms since the epoch (the emulator's clock).
    ///   - maxQueued: calls queued or in flight at most, over all devices.
    ///   - logCapacity: records kept; the oldest go first.
    ///   - retryBaseDelayMs: the wait after a first failed attempt; it doubles with each further one …
    ///   - retryMaxDelayMs: … up to this.
    ///   - maxConcurrentCalls: attempts on the wire at once, over all devices.
    public init(now: @escaping @Sendable () -> Int64, maxQueued: Int = 10_000, logCapacity: Int = 10_000,
                retryBaseDelayMs: Int = 200, retryMaxDelayMs: Int = 5_000, maxConcurrentCalls: Int = 4)
    {
        self.now = now
        self.maxQueued = max(0, maxQueued)
        self.poolSize = max(1, maxConcurrentCalls)
        self.backoff = RetryBackoff(baseMs: retryBaseDelayMs, maxMs: retryMaxDelayMs)
        self.state = Locked(CallQueues(logCapacity: logCapacity))
    }

    /// Told about every record added or changed (queued, retrying, sent again, ended), in
    /// order, on a queue of its own. Set it once at start-up, before the first `enqueue`.
    public var onChange: (@Sendable (BackendCallRecord) -> Void)? {
        get { state.withLock { $0.onChange } }
        set { state.withLock { $0.onChange = newValue } }
    }

    /// Queues calls behind each device's earlier ones and returns at once.
    public func enqueue(_ requests: [BackendRequest]) {
        guard !requests.isEmpty else { return }
        let atMs = now()
        let start = state.withLock { queues -> Int in
            for request in requests {
                var record = BackendCallRecord(id: queues.nextID, request: request, atMs: atMs)
                queues.nextID += 1
                if queues.stopped || queues.counts.queued >= maxQueued {
                    record.state = .dropped
                    record.error = queues.stopped ? "not sent: backend calls have stopped" : "queue full (\(maxQueued) calls)"
                    record.finishedAtMs = atMs
                    queues.counts.dropped += 1
                } else {
                    queues.counts.queued += 1
                    if queues.lines[request.deviceID] == nil { queues.ready.append(request.deviceID) }
                    queues.lines[request.deviceID, default: CallQueues.DeviceLine()].calls.append(record)
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
    public func calls(after: UInt64?, limit: Int, deviceID: String?, hook: String?, bundleID: String?)
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

    /// One attempt taken off a device line, and the queues' generation when it was taken.
    private struct Attempt: Sendable {
        var record: BackendCallRecord
        var generation: UInt64
    }

    /// Workers are threads of their own rather than Dispatch work items: they block in socket
    /// calls, and blocked items would starve Dispatch's pool (about one thread per core),
    /// which runs the retry timers.
    private func startWorkers(_ count: Int) {
        for _ in 0..<count {
            let thread = Thread { self.work() }
            thread.name = "backend-call"
            thread.start()
        }
    }

    /// Sends first calls of ready devices until none is left. Recording an attempt's result
    /// and taking the next share one lock.
    private func work() {
        var finished: (attempt: Attempt, result: AttemptResult, endedAtMs: Int64)?
        while true {
            let next = state.withLock { queues -> Attempt? in
                if let finished { recordResult(finished.result, of: finished.attempt, endedAtMs: finished.endedAtMs, in: &queues) }
                return takeNext(&queues)
            }
            guard let next else { return }
            let result = Self.send(next.record.request)
            finished = (next, result, now())
        }
    }

    private func takeNext(_ queues: inout CallQueues) -> Attempt? {
        while !queues.stopped, let device = queues.ready.popFirst() {
            guard var record = queues.lines[device]?.calls.first else { continue }
            let wasRetrying = record.state == .retrying
            record.attempts += 1
            record.state = .pending
            queues.counts.attempts += 1
            queues.updateFirst(record)
            if wasRetrying { publish(record, queues) }
            return Attempt(record: record, generation: queues.generation)
        }
        queues.runningWorkers -= 1
        return nil
    }

    private func recordResult(_ result: AttemptResult, of attempt: Attempt, endedAtMs: Int64, in queues: inout CallQueues) {
        let device = attempt.record.request.deviceID
        // A reset or shutdown since the attempt began: the call is no longer ours to record.
        guard attempt.generation == queues.generation, var record = queues.lines[device]?.calls.first,
              record.id == attempt.record.id else { return }
        record.note(result)
        switch AttemptVerdict(result) {
        case .retryable where record.attempts < max(1, record.request.maxAttempts):
            record.state = .retrying
            queues.lines[device]?.waitingForRetry = true
            queues.updateFirst(record)
            scheduleRetry(of: record, generation: queues.generation)
        case .done:
            record.state = .done
            record.finishedAtMs = endedAtMs
            queues.counts.sent += 1
            queues.updateFirst(record)
            queues.finishFirst(of: device)
        case .failed, .retryable:
            record.state = .failed
            record.finishedAtMs = endedAtMs
            queues.counts.failed += 1
            queues.updateFirst(record)
            queues.finishFirst(of: device)
        }
        publish(record, queues)
    }

    /// A timer, not a sleeping worker: the device becomes ready again when it fires.
    private func scheduleRetry(of record: BackendCallRecord, generation: UInt64) {
        let delayMs = backoff.delayMs(afterFailedAttempts: record.attempts)
        let device = record.request.deviceID
        let id = record.id
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(delayMs)) { [weak self] in
            self?.retryDue(device: device, callID: id, generation: generation)
        }
    }

    private func retryDue(device: String, callID: UInt64, generation: UInt64) {
        let start = state.withLock { queues -> Int in
            guard !queues.stopped, queues.generation == generation, var line = queues.lines[device],
                  line.waitingForRetry, line.calls.first?.id == callID else { return 0 }
            line.waitingForRetry = false
            queues.lines[device] = line
            queues.ready.append(device)
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
            return .success(try HTTP1Client.exchange(
                url: request.url, method: request.method, headers: request.headers.map { HTTP1Header($0.name, $0.value) },
                body: request.body, timeoutMs: max(1, request.timeoutMs)))
        } catch {
            return .failure(error)
        }
    }
}
