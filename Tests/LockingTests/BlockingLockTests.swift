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

    @Test func aWaiterIsWokenByTheChangeNotByItsTimeout() async {
        let lock = BlockingLock(0)
        let start = DispatchTime.now()
        let waiter = Thread {
            lock.withLock(when: { $0 >= 1 }, timeoutMilliseconds: 10_000) { (value: inout Int, ready: Bool) in
                value = ready ? 2 : -1
            }
        }
        waiter.start()
        try? await Task.sleep(for: .milliseconds(50))
        lock.withLock { $0 = 1 }
        // The waiter sets 2 once woken; its timeout (10 s) would set -1.
        while lock.withLock({ $0 }) == 1, milliseconds(since: start) < 9_000 { try? await Task.sleep(for: .milliseconds(1)) }
        #expect(lock.withLock { $0 } == 2)
        #expect(milliseconds(since: start) < 5_000)
    }

    @Test func aWaiterThatTimesOutIsToldSo() {
        let lock = BlockingLock(false)
        let start = DispatchTime.now()
        let ready = lock.withLock(when: { $0 }, timeoutMilliseconds: 100) { (_: inout Bool, ready: Bool) in ready }
        #expect(!ready)
        #expect(milliseconds(since: start) >= 95)
    }

    @Test func aLockHeldLongerThanTheWaitIsNotTaken() async {
        let lock = BlockingLock(0)
        let held = BlockingLock(false)
        let holder = Thread {
            lock.withLock { (_: inout Int) in
                held.withLock { $0 = true }
                usleep(300_000)
            }
        }
        holder.start()
        held.withLock(when: { $0 }, timeoutMilliseconds: 5_000) { (_: inout Bool, _: Bool) in }
        let start = DispatchTime.now()
        #expect(!lock.withLockIfFree(within: 2_000) { $0 += 1 })
        // Gave up after about its 2 ms, not after the holder's 300 ms.
        #expect(milliseconds(since: start) < 250)
        // Released, it is taken.
        #expect(lock.withLockIfFree(within: 2_000_000) { $0 += 1 })
        #expect(lock.withLock { $0 } == 1)
    }
}
