import Foundation
import Synchronization
#if canImport(Locking)  // absent when scripts/fuzz compiles Core and Locking as one module
import Locking
#endif

/// Wall-clock time in milliseconds since the epoch. Injected everywhere a rule depends on time
/// (JWT age, the 20-minute token rule, expirations, budgets) so tests need not wait.
public protocol EmulatorClock: Sendable {
    func nowMilliseconds() -> Int64
}

extension EmulatorClock {
    public func nowSeconds() -> Int64 { nowMilliseconds() / 1000 }
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
