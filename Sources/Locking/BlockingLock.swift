import Foundation

/// A value behind a lock that may be held while waiting on I/O (the Redis coordinator holds
/// its lock across round trips to Redis), and waited on until it is in a wanted state. A
/// waiter spins only briefly (glibc's adaptive mutex: about a hundred tries, a microsecond or
/// two) and then sleeps in the kernel: `Locked`'s Mutex spins far longer, which on two cores
/// takes the CPU the holder and Redis need. Sleeping at once cost a futex wait and wake (two
/// context switches) each time two threads met here, even for a holder about to let go.
public final class BlockingLock<Value>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let changed = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    /// Only touched under the mutex, which makes its accesses exclusive: no run-time check.
    @exclusivity(unchecked) private var value: Value

    public init(_ value: Value) {
        self.value = value
        var mutexAttributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&mutexAttributes)
        pthread_mutexattr_settype(&mutexAttributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
        pthread_mutex_init(mutex, &mutexAttributes)
        pthread_mutexattr_destroy(&mutexAttributes)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(changed, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(changed)
        pthread_mutex_destroy(mutex)
        changed.deallocate()
        mutex.deallocate()
    }

    /// Runs `body` under the lock; those waiting in `withLock(when:)` look again afterwards.
    public func withLock<T, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
        pthread_mutex_lock(mutex)
        defer { unlockAndWake() }
        return try body(&value)
    }

    /// Runs `body` under the lock once `ready` holds, waiting (without the lock) until it does
    /// or `timeoutMilliseconds` have passed; `body` is told which.
    public func withLock<T, E: Error>(
        when ready: (borrowing Value) -> Bool, timeoutMilliseconds: Int, _ body: (inout Value, _ ready: Bool) throws(E) -> T
    ) throws(E) -> T {
        pthread_mutex_lock(mutex)
        defer { unlockAndWake() }
        var isReady = ready(value)
        if !isReady, timeoutMilliseconds > 0 {
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            let total = Int(now.tv_nsec) + timeoutMilliseconds % 1000 * 1_000_000
            var deadline = timespec(
                tv_sec: now.tv_sec + timeoutMilliseconds / 1000 + total / 1_000_000_000, tv_nsec: total % 1_000_000_000)
            while !isReady {
                let timedOut = pthread_cond_timedwait(changed, mutex, &deadline) == ETIMEDOUT
                isReady = ready(value)
                if timedOut { break }
            }
        }
        return try body(&value, isReady)
    }

    /// Runs `body` if the lock can be had within `microseconds` (it is free, or its holder is
    /// quick); false, and `body` not run, otherwise.
    public func withLockIfFree(within microseconds: Int, _ body: (inout Value) -> Void) -> Bool {
        if pthread_mutex_trylock(mutex) != 0 {
            var deadline = timespec()
            // (`pthread_mutex_timedlock` counts on the real-time clock.)
            clock_gettime(CLOCK_REALTIME, &deadline)
            let total = Int(deadline.tv_nsec) + microseconds * 1_000
            deadline.tv_sec += total / 1_000_000_000
            deadline.tv_nsec = total % 1_000_000_000
            guard pthread_mutex_timedlock(mutex, &deadline) == 0 else { return false }
        }
        defer { unlockAndWake() }
        body(&value)
        return true
    }

    /// Runs `body` only if nobody holds the lock now.
    public func withLockIfFree(_ body: (inout Value) -> Void) {
        guard pthread_mutex_trylock(mutex) == 0 else { return }
        defer { unlockAndWake() }
        body(&value)
    }

    /// Unlocks first, then wakes: a waiter woken while the lock is still held only wakes to
    /// block on the mutex, and the unlock must wake it a second time. (Waking after the unlock
    /// is allowed: a waiter looks at the value again under the lock before it goes on.)
    private func unlockAndWake() {
        pthread_mutex_unlock(mutex)
        pthread_cond_broadcast(changed)
    }
}
