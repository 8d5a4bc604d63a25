import Dispatch
import Foundation
import Glibc
import CLinux
import MonotonicClock
import Testing
@testable import Networking

@Suite struct ThreadTests {
    @Test func tasksFromOtherThreadsRunOnTheLoopInOrderPerThread() throws {
        try withRunningLoop { loop in
            let threads = 4
            let perThread = 500
            let seen = Box<[[Int]]>(Array(repeating: [], count: threads))
            let offLoop = Box(0)
            DispatchQueue.concurrentPerform(iterations: threads) { thread in
                for i in 0..<perThread {
                    loop.execute {
                        if !loop.inEventLoop { offLoop.value += 1 }
                        seen.value[thread].append(i)
                    }
                }
            }
            try loop.wait { seen.value.allSatisfy { $0.count == perThread } }
            let (off, inOrder) = try loop.sync { (offLoop.value, seen.value.allSatisfy { $0 == Array(0..<perThread) }) }
            #expect(off == 0)
            #expect(inOrder)
        }
    }

    /// An idle loop (no timers: epoll_wait without timeout) wakes for a task at once.
    @Test func executeWakesAnIdleLoop() throws {
        try withRunningLoop { loop in
            _ = try loop.sync {}
            usleep(50_000)
            let ran = DispatchSemaphore(value: 0)
            let started = Monotonic.nowMilliseconds()
            loop.execute { ran.signal() }
            #expect(ran.wait(timeout: .now() + .seconds(2)) == .success)
            #expect(Monotonic.nowMilliseconds() - started < 1000)
        }
    }

    @Test func executeOnTheLoopRunsLaterNotInline() throws {
        try withRunningLoop { loop in
            let order = Box<[String]>([])
            try loop.sync {
                loop.execute { order.value.append("task") }
                order.value.append("caller")
            }
            try loop.wait { order.value.count == 2 }
            #expect(try loop.sync { order.value } == ["caller", "task"])
        }
    }

    @Test func confinementFollowsTheLoopThread() throws {
        let loop = try EventLoop(name: "confinement")
        // Before start, whoever set the loop up may use it.
        #expect(loop.isConfinedToCaller)
        #expect(!loop.inEventLoop)
        let early = Box(false)
        loop.schedule(afterMilliseconds: 0) { early.value = true }

        loop.start()
        #expect(!loop.isConfinedToCaller)
        #expect(!loop.inEventLoop)
        let (confined, inLoop) = try loop.sync { (loop.isConfinedToCaller, loop.inEventLoop) }
        #expect(confined)
        #expect(inLoop)
        try loop.wait { early.value }

        // Once the loop has ended, it may be taken apart from any thread.
        loop.stop()
        let deadline = Monotonic.nowMilliseconds() + 5000
        while !loop.isConfinedToCaller && Monotonic.nowMilliseconds() < deadline { usleep(1000) }
        #expect(loop.isConfinedToCaller)
        #expect(!loop.inEventLoop)
    }

    #if DEBUG
    /// Debug builds crash on loop-confined calls from another thread (release builds do not
    /// check).
    @Test func schedulingFromAnotherThreadCrashesADebugBuild() async {
        await #expect(processExitsWith: .failure) {
            let loop = try runningLoop()
            loop.schedule(afterMilliseconds: 0) {}
        }
    }

    @Test func registeringFromAnotherThreadCrashesADebugBuild() async {
        await #expect(processExitsWith: .failure) {
            let loop = try runningLoop()
            let fd = eventfd(0, 0)
            try loop.register(fd: fd, events: .read, handler: Recorder())
        }
    }
    #endif
}

/// A loop started on its own thread, once it is known to run.
private func runningLoop() throws -> EventLoop {
    let loop = try EventLoop(name: "misused")
    loop.start()
    let running = DispatchSemaphore(value: 0)
    loop.execute { running.signal() }
    running.wait()
    return loop
}
