import Locking

/// A token bucket shared by every connection's thread: `perSecond` requests a second on
/// average, at most `burst` at once after a pause. `reserve` hands out the next slot and says
/// when it is due, so a thread waits for its slot outside the lock and slots alternate over
/// the threads as they ask (the generic cell rate algorithm, in nanoseconds).
public final class RequestPacer: Sendable {
    public let perSecond: Double
    private let interval: UInt64
    /// How far ahead of schedule a slot may be: the burst after a pause.
    private let tolerance: UInt64
    /// When the next slot is due if nobody is ahead of schedule.
    private let theoreticalArrival: Locked<UInt64>

    public init(perSecond: Double, burst: Int) {
        precondition(perSecond > 0 && burst >= 1)
        self.perSecond = perSecond
        // At most one a century: a tiny rate must not overflow the conversion.
        interval = max(1, UInt64(min((1e9 / perSecond).rounded(), 3.2e18)))
        tolerance = interval * UInt64(burst - 1)
        theoreticalArrival = Locked(0)
    }

    /// Reserves one slot; returns when it is due (monotonic nanoseconds, `now` or later).
    public func reserve(now: UInt64) -> UInt64 {
        theoreticalArrival.withLock { arrival in
            let base = max(arrival, now)  // idle time does not pile up beyond the burst
            arrival = base + interval
            return max(now, base > tolerance ? base - tolerance : 0)
        }
    }
}
