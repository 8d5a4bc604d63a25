import Foundation
import Synchronization
import Locking

/// Wall-clock time in milliseconds since the epoch. Injected everywhere a rule depends on time
/// (JWT age, the 20-minute token rule, expirations, budgets) so tests need not wait.
public protocol EmulatorClock: Sendable {
    func nowMilliseconds() -> Int64
    /// How far the clock has been moved ahead of the time it follows (`OffsetClock`).
    var offsetMilliseconds: Int64 { get }
}

extension EmulatorClock {
    public func nowSeconds() -> Int64 { nowMilliseconds() / 1000 }
    public var offsetMilliseconds: Int64 { 0 }
}

/// Another clock plus an offset that only grows: `POST /api/v1/clock` moves the emulator's
/// time ahead (expiries, budgets, the 410 delay) without waiting. Provider tokens are judged
/// on the time without the offset, since providers sign them with the real time.
public final class OffsetClock: EmulatorClock {
    public let base: any EmulatorClock
    private let offset = Atomic<Int64>(0)

    /// The most one move may add: 400 days, far past every APNs rule that waits (a token's
    /// hour, a 30-day expiration), and far from overflowing milliseconds.
    public static let maxAdvanceMilliseconds: Int64 = 400 * 86_400_000

    public init(base: any EmulatorClock) { self.base = base }

    public func nowMilliseconds() -> Int64 { base.nowMilliseconds() + offset.load(ordering: .relaxed) }
    public var offsetMilliseconds: Int64 { offset.load(ordering: .relaxed) + base.offsetMilliseconds }

    /// How far ahead of the followed time all moves together may take it: 100 years, so that
    /// times stay four-digit years (RFC 3339) and far from overflowing milliseconds.
    public static let maxOffsetMilliseconds: Int64 = 36_525 * 86_400_000

    /// Moves the clock ahead; false (and no move) when that would take it more than
    /// `maxOffsetMilliseconds` ahead.
    @discardableResult
    public func advance(milliseconds: Int64) -> Bool {
        precondition(milliseconds >= 0, "the emulator's clock only moves forward")
        var current = offset.load(ordering: .relaxed)
        while true {
            guard current <= Self.maxOffsetMilliseconds - milliseconds else { return false }
            let (exchanged, original) = offset.compareExchange(
                expected: current, desired: current + milliseconds, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
    }

    /// Back to the followed time (a reset).
    public func resetOffset() { offset.store(0, ordering: .relaxed) }
}

public struct SystemClock: EmulatorClock {
    public init() {}
    public func nowMilliseconds() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }
}

/// A clock tests move by hand.
public final class ManualClock: EmulatorClock {
    private let now: Locked<Int64>
    public init(milliseconds: Int64 = 1_767_225_600_000) { now = Locked(milliseconds) }
    public func nowMilliseconds() -> Int64 { now.withLock { $0 } }
    public func advance(seconds: Int64) { now.withLock { $0 += seconds * 1000 } }
    public func advance(milliseconds: Int64) { now.withLock { $0 += milliseconds } }
    public func set(milliseconds: Int64) { now.withLock { $0 = milliseconds } }
}
