import Synchronization
#if SANITIZE_THREAD
import Foundation
#endif

/// A value that threads share behind a lock: the one lock type of the package.
///
/// Normally a `Synchronization.Mutex`. Built with `-D SANITIZE_THREAD` (scripts/test-sanitizers
/// does) it is a pthread mutex instead: Mutex locks with futexes, which ThreadSanitizer cannot
/// see, so every access under it would be reported as a race.
public final class Locked<Value: ~Copyable>: Sendable {
    #if SANITIZE_THREAD
    private let lock = NSLock()
    nonisolated(unsafe) private var value: Value

    public init(_ value: consuming sending Value) { self.value = value }

    public func withLock<T, E: Error>(_ body: (inout sending Value) throws(E) -> sending T) throws(E) -> sending T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
    #else
    private let mutex: Mutex<Value>

    public init(_ value: consuming sending Value) { mutex = Mutex(value) }

    @inline(__always)
    public func withLock<T, E: Error>(_ body: (inout sending Value) throws(E) -> sending T) throws(E) -> sending T {
        try mutex.withLock(body)
    }
    #endif
}
