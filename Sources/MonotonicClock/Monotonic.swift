// MonotonicClock: the package's one monotonic clock, for durations, deadlines and timers
// (the wall clock, which a test or `POST /api/v1/clock` may move, is APNsCore's
// `EmulatorClock`). Imports Glibc only.
public import Glibc

/// CLOCK_MONOTONIC: never jumps, not even when the system time is set. `@inlinable` because
/// the request path reads it per request, from other modules.
public enum Monotonic {
    @inlinable
    public static func nowNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    @inlinable
    public static func nowMilliseconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}
