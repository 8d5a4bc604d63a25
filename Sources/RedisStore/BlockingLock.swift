import Foundation

/// The coordinator's lock: held across Redis round trips, so a waiter sleeps in the kernel
/// instead of spinning (Synchronization's Mutex spins first, which on two cores takes the CPU
/// the holder and Redis need).
final class BlockingLock<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<T, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }

    /// Runs `body` only if nobody holds the lock now.
    func withLockIfFree(_ body: (inout Value) -> Void) {
        guard lock.try() else { return }
        defer { lock.unlock() }
        body(&value)
    }
}
