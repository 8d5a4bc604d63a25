/// Everything `BackendCaller` keeps behind its lock.
///
/// Each device with calls has a line: its first call is the one being sent (or waiting for
/// its retry), the others wait behind it, so one device's calls reach the backend in order.
/// A device is in exactly one of three places: in `ready` (its first call can be sent now),
/// held by a worker (being sent), or waiting for a retry timer.
struct CallQueues {
    struct DeviceLine {
        var calls = FIFO<BackendCallRecord>()
        var waitingForRetry = false
    }

    var lines: [String: DeviceLine] = [:]
    var ready = FIFO<String>()
    var log: RecordLog
    var counts = BackendCallCounts()
    var nextID: UInt64 = 1
    /// Bumped by reset and shutdown: work begun before it is not applied after it.
    var generation: UInt64 = 0
    var stopped = false
    var runningWorkers = 0
    var onChange: (@Sendable (BackendCallRecord) -> Void)?

    init(logCapacity: Int) { log = RecordLog(capacity: logCapacity) }

    /// How many more workers to start so that up to `poolSize` work on the ready devices.
    mutating func workersToStart(poolSize: Int) -> Int {
        let wanted = min(poolSize, runningWorkers + ready.count)
        let extra = max(0, wanted - runningWorkers)
        runningWorkers += extra
        return extra
    }

    /// Replaces a device's first call with its newer copy, in the line and in the log.
    mutating func updateFirst(_ record: BackendCallRecord) {
        let device = record.request.deviceID
        if lines[device]?.calls.first?.id == record.id { lines[device]?.calls[0] = record }
        log.update(record)
    }

    /// Takes a device's first call off its line once it has ended; the device is ready again
    /// when it has more.
    mutating func finishFirst(of device: String) {
        guard var line = lines[device] else { return }
        line.calls.popFirst()
        counts.queued -= 1
        if line.calls.isEmpty {
            lines[device] = nil
        } else {
            lines[device] = line
            ready.append(device)
        }
    }

    /// Forgets every queued call (reset and shutdown); workers still sending finish unheard.
    mutating func clearQueues() {
        generation += 1
        lines = [:]
        ready.removeAll()
        counts.queued = 0
    }
}
