import Foundation

/// A value behind a lock that may be held while waiting on I/O (the Redis coordinator holds
/// its lock across round trips to Redis). A waiter sleeps in the kernel at once: `Locked`'s
/// Mutex spins first, which on two cores takes the CPU the holder and Redis need.
public final class BlockingLock<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    public init(_ value: Value) { self.value = value }

    public func withLock<T, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }

    /// Runs `body` only if nobody holds the lock now.
    public func withLockIfFree(_ body: (inout Value) -> Void) {
        guard lock.try() else { return }
        defer { lock.unlock() }
        body(&value)
    }
}
