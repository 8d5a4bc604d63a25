import HTTP1Client

/// Everything `BackendCaller` keeps behind its lock.
///
/// Each app on a device with calls has a line: its first call is the one being sent (or
/// waiting for its retry), the others wait behind it, so one app's calls on one device reach
/// its backend in order. A line is in exactly one of three places: ready in the scheduler
/// (its first call can be sent once its backend's turn comes), held by a worker (being
/// sent), or waiting for a retry timer.
struct CallQueues {
    /// One app on one device. Apps are separate programs on iOS too: one app's calls never
    /// wait behind another's, whose backend may be down.
    struct LineKey: Hashable, Sendable {
        var deviceID: String
        var bundleID: String

        init(_ request: BackendRequest) {
            deviceID = request.deviceID
            bundleID = request.bundleID
        }
    }

    struct QueuedCall {
        var record: BackendCallRecord
        /// `BackendRequest.backend` of the call, worked out once.
        let backend: String
    }

    struct Line {
        var calls = FIFO<QueuedCall>()
        var waitingForRetry = false
    }

    var lines: [LineKey: Line] = [:]
    /// Partitioned by backend (host and port).
    var scheduler: FairScheduler<String, LineKey>
    /// Calls queued or in flight per backend, for its share of the queue.
    var queuedPerBackend: [String: Int] = [:]
    var log: RecordLog
    var counts = BackendCallCounts()
    var nextID: UInt64 = 1
    /// Bumped by reset and shutdown: work begun before it is not applied after it.
    var generation: UInt64 = 0
    var stopped = false
    /// Worker threads alive: each is sending an attempt or about to take one.
    var runningWorkers = 0
    var onChange: (@Sendable (BackendCallRecord) -> Void)?

    init(logCapacity: Int, perBackendConcurrency: Int) {
        log = RecordLog(capacity: logCapacity)
        scheduler = FairScheduler(perPartitionLimit: perBackendConcurrency)
    }

    /// Puts a new call at the end of its line; the reason it is not queued otherwise.
    mutating func add(_ record: BackendCallRecord, maxQueued: Int, maxQueuedPerBackend: Int) -> String? {
        if stopped { return "not sent: backend calls have stopped" }
        if counts.queued >= maxQueued { return "queue full (\(maxQueued) calls)" }
        let backend = record.request.backend
        if queuedPerBackend[backend, default: 0] >= maxQueuedPerBackend {
            return "queue full (\(maxQueuedPerBackend) calls for \(backend), the most one backend may have queued)"
        }
        counts.queued += 1
        queuedPerBackend[backend, default: 0] += 1
        let key = LineKey(record.request)
        let isNewLine = lines[key] == nil
        lines[key, default: Line()].calls.append(QueuedCall(record: record, backend: backend))
        if isNewLine { makeReady(key) }
        return nil
    }

    /// The line's first call may be sent when its backend's turn comes.
    mutating func makeReady(_ key: LineKey) {
        guard let first = lines[key]?.calls.first else { return }
        scheduler.makeReady(key, in: first.backend)
    }

    /// The first call of the line whose turn it is, and its backend; nil when none can go now.
    mutating func takeNext() -> (record: BackendCallRecord, backend: String)? {
        while let (key, backend) = scheduler.takeNext() {
            guard let first = lines[key]?.calls.first else {
                scheduler.finished(in: backend)
                continue
            }
            return (first.record, backend)
        }
        return nil
    }

    /// How many more workers to start so that, up to `poolSize` in all, every attempt that
    /// can begin now has one. Workers started but not yet sending count as taken.
    mutating func workersToStart(poolSize: Int) -> Int {
        let waitingToTake = max(0, runningWorkers - scheduler.inFlight)
        let extra = max(0, min(poolSize - runningWorkers, scheduler.startable - waitingToTake))
        runningWorkers += extra
        return extra
    }

    /// Replaces a line's first call with its newer copy, in the line and in the log.
    mutating func updateFirst(_ record: BackendCallRecord) {
        let key = LineKey(record.request)
        if lines[key]?.calls.first?.record.id == record.id { lines[key]?.calls[0].record = record }
        log.update(record)
    }

    /// Takes a line's first call off once it has ended; the line is ready again when it has more.
    mutating func finishFirst(of key: LineKey) {
        guard let finished = lines[key]?.calls.popFirst() else { return }
        counts.queued -= 1
        let left = queuedPerBackend[finished.backend, default: 1] - 1
        queuedPerBackend[finished.backend] = left > 0 ? left : nil
        if lines[key]?.calls.isEmpty == true {
            lines[key] = nil
        } else {
            makeReady(key)
        }
    }

    /// Forgets every queued call (reset and shutdown); workers still sending finish unheard.
    mutating func clearQueues() {
        generation += 1
        lines = [:]
        scheduler.removeAllReady()
        queuedPerBackend = [:]
        counts.queued = 0
    }
}

extension BackendRequest {
    /// The backend a call is for, `host:port` of its URL: what calls are scheduled by. A URL
    /// that cannot be parsed is its own text (its call fails at once without sending).
    var backend: String {
        guard let url = try? HTTPURL(string: url) else { return url }
        let host = url.host.lowercased()
        return host.contains(":") ? "[\(host)]:\(url.port)" : "\(host):\(url.port)"
    }
}
