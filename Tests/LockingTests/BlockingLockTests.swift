// LockingTests: `BlockingLock`, the lock the Redis coordinator holds across round trips and
// waits on: it excludes (threads counting under it lose nothing), a waiter is woken by the
// change it waits for rather than by its timeout, a waiter that times out is told so, and
// `withLockIfFree(within:)` gives up on a lock held longer than it may wait. Real threads.
import Foundation
import Locking
import Testing

private func milliseconds(since start: DispatchTime) -> Double {
    Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e6
}

@Suite("BlockingLock")
struct BlockingLockTests {
    @Test func threadsCountingUnderTheLockLoseNothing() {
        let lock = BlockingLock(0)
        let threads = 4
        let each = 20_000
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            for i in 0..<each {
                // Both ways in: the plain lock, and the one that waits at most a while.
                if i % 2 == 0 {
                    lock.withLock { $0 += 1 }
                } else {
                    while !lock.withLockIfFree(within: 10_000, { $0 += 1 }) {}
                }
            }
        }
        #expect(lock.withLock { $0 } == threads * each)
    }

    // Synchronous, with real threads: under the whole suite an async test's `Task.sleep` came
    // back 16 s late (the cooperative pool busy with other tests), after the waiter's timeout.
    @Test func aWaiterIsWokenByTheChangeNotByItsTimeout() {
        let lock = BlockingLock(0)
        let waiter = Thread {
            lock.withLock(when: { $0 >= 1 }, timeoutMilliseconds: 60_000) { (value: inout Int, ready: Bool) in
                value = ready ? 2 : -1
            }
        }
        waiter.start()
        usleep(50_000)
        let changed = DispatchTime.now()
        lock.withLock { $0 = 1 }
        // The waiter answers 2 once woken; only its timeout (a minute) would answer -1.
        let verdict = lock.withLock(when: { $0 != 1 }, timeoutMilliseconds: 60_000) { (value: inout Int, _: Bool) in value }
        #expect(verdict == 2)
        #expect(milliseconds(since: changed) < 10_000)
    }

    @Test func aWaiterThatTimesOutIsToldSo() {
        let lock = BlockingLock(false)
        let start = DispatchTime.now()
        let ready = lock.withLock(when: { $0 }, timeoutMilliseconds: 100) { (_: inout Bool, ready: Bool) in ready }
        #expect(!ready)
        #expect(milliseconds(since: start) >= 95)
    }

    @Test func aLockHeldLongerThanTheWaitIsNotTaken() {
        let lock = BlockingLock(0)
        let held = BlockingLock(false)
        let holder = Thread {
            lock.withLock { (_: inout Int) in
                held.withLock { $0 = true }
                usleep(1_000_000)
            }
        }
        holder.start()
        held.withLock(when: { $0 }, timeoutMilliseconds: 5_000) { (_: inout Bool, _: Bool) in }
        let start = DispatchTime.now()
        #expect(!lock.withLockIfFree(within: 2_000) { $0 += 1 })
        // Gave up after about its 2 ms, not after the holder's second (a loaded machine may
        // add scheduling delays, hence the margin).
        #expect(milliseconds(since: start) < 900)
        // Released, it is taken.
        #expect(lock.withLockIfFree(within: 2_000_000) { $0 += 1 })
        #expect(lock.withLock { $0 } == 1)
    }
}
