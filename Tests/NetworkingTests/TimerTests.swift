import Glibc
import MonotonicClock
import Testing
@testable import Networking

@Suite struct TimerTests {
    @Test func timersRunInDeadlineOrderAndNotEarly() throws {
        try withRunningLoop { loop in
            let fired = Box<[(String, Int64)]>([])
            try loop.sync {
                let start = Monotonic.nowMilliseconds()
                for (name, delay) in [("30", 30), ("10", 10), ("0a", 0), ("20", 20), ("0b", 0)] as [(String, Int64)] {
                    loop.schedule(afterMilliseconds: delay) { fired.value.append((name, Monotonic.nowMilliseconds() - start)) }
                }
            }
            try loop.wait { fired.value.count == 5 }
            let order = try loop.sync { fired.value }
            #expect(order.map(\.0) == ["0a", "0b", "10", "20", "30"])
            for (name, elapsed) in order {
                #expect(elapsed >= Int64(name.prefix(while: \.isNumber))!, "timer \(name) ran after \(elapsed) ms")
            }
        }
    }

    @Test func aCancelledTimerDoesNotRun() throws {
        try withRunningLoop { loop in
            let fired = Box<[String]>([])
            try loop.sync {
                let doomed = loop.schedule(afterMilliseconds: 5) { fired.value.append("cancelled") }
                loop.schedule(afterMilliseconds: 20) { fired.value.append("kept") }
                loop.cancel(doomed)
            }
            try loop.wait { fired.value.count == 1 }
            usleep(30_000)
            #expect(try loop.sync { fired.value } == ["kept"])
        }
    }

    /// Connections cancel their timers on close whether or not they already ran; the ids of
    /// ones that ran must not pile up.
    @Test func cancellingTimersThatAlreadyRanKeepsNothing() throws {
        try withRunningLoop { loop in
            let ran = Box(0)
            let ids = try loop.sync { (0..<5000).map { _ in loop.schedule(afterMilliseconds: 0) { ran.value += 1 } } }
            try loop.wait { ran.value == 5000 }
            let remembered = try loop.sync { () -> Int in
                for id in ids { loop.cancel(id) }
                return loop.cancelledTimerCount
            }
            #expect(remembered <= 64)
        }
    }

    /// A timer that schedules itself again with no delay (as a connection does to come back
    /// for data TLS has decrypted already) waits for the next turn of the loop, after I/O.
    @Test func aTimerScheduledByATimerWaitsForTheNextTurn() throws {
        try withRunningLoop { loop in
            let fd = try makeEventFD(1)
            defer { close(fd) }
            // Never drained: level-triggered, so readable once per turn of the loop.
            let turns = Recorder()
            let seen = Box<[Int]>([])
            func again() {
                seen.value.append(turns.reads)
                if seen.value.count < 200 { loop.schedule(afterMilliseconds: 0, again) }
            }
            try loop.sync {
                try loop.register(fd: fd, events: .read, handler: turns)
                loop.schedule(afterMilliseconds: 0, again)
            }
            try loop.wait { seen.value.count == 200 }
            let observed = try loop.sync {
                try loop.unregister(fd: fd)
                return seen.value
            }
            #expect(zip(observed, observed.dropFirst()).allSatisfy { $0 < $1 }, "several timer runs within one turn")
        }
    }
}
