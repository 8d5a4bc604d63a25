// Locking: how threads share values in this package, one story. Imports Synchronization
// (and Foundation for the blocking and sanitizer locks) only.
//
// - `Locked<Value>`, the default: a value behind a lock held for a few steps (a look-up, a
//   counter, a table entry). Never held across I/O or a wait.
// - `BlockingLock<Value>`: a lock held across I/O (a Redis round trip), on which waiters sleep
//   in the kernel instead of spinning.
// - A thread that sleeps until work is handed to it waits on an `NSCondition` (the state
//   writer), the condition-variable form of a blocking lock.
// - `SetOnce<Value>`: not a lock but a link made once after construction, where two parts
//   need each other (an atomic reference: setting it twice traps).
// Sources use no other lock (no bare Mutex or NSLock), so a ThreadSanitizer build sees them all.

public import Synchronization
#if SANITIZE_THREAD
public import Foundation
#endif

/// A value that threads share behind a lock held briefly (the default lock of the package).
///
/// Normally a `Synchronization.Mutex`. Built with `-D SANITIZE_THREAD` (scripts/test-sanitizers
/// does) it is a pthread mutex instead: Mutex locks with futexes, which ThreadSanitizer cannot
/// see, so every access under it would be reported as a race.
///
/// `@inlinable` so callers in other modules get it specialised: an unspecialised generic call
/// looks up type metadata at run time, on every request.
public final class Locked<Value: ~Copyable>: Sendable {
    #if SANITIZE_THREAD
    @usableFromInline let lock = NSLock()
    @usableFromInline nonisolated(unsafe) var value: Value

    @inlinable
    public init(_ value: consuming sending Value) { self.value = value }

    @inlinable
    public func withLock<T, E: Error>(_ body: (inout sending Value) throws(E) -> sending T) throws(E) -> sending T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
    #else
    @usableFromInline let mutex: Mutex<Value>

    @inlinable
    public init(_ value: consuming sending Value) { mutex = Mutex(value) }

    @inlinable
    public func withLock<T, E: Error>(_ body: (inout sending Value) throws(E) -> sending T) throws(E) -> sending T {
        try mutex.withLock(body)
    }
    #endif
}
