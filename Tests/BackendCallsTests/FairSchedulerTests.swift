@testable import BackendCalls
import Testing

/// The scheduling rules on their own: no threads, no sockets.
@Suite struct FairSchedulerTests {
    typealias Scheduler = FairScheduler<String, String>

    /// Takes every line that can go now.
    static func drain(_ scheduler: inout Scheduler) -> [String] {
        var taken: [String] = []
        while let next = scheduler.takeNext() { taken.append(next.line) }
        return taken
    }

    @Test func aBackendNeverHasMoreThanItsLimitInFlight() {
        var scheduler = Scheduler(perPartitionLimit: 2)
        for n in 1...10 { scheduler.makeReady("dead-\(n)", in: "dead") }
        #expect(scheduler.startable == 2)
        #expect(Self.drain(&scheduler) == ["dead-1", "dead-2"])
        #expect(scheduler.inFlight == 2 && scheduler.startable == 0)

        scheduler.finished(in: "dead")
        #expect(scheduler.startable == 1)
        #expect(Self.drain(&scheduler) == ["dead-3"], "one ended, one more may go")
        #expect(scheduler.inFlight(in: "dead") == 2)
    }

    @Test func aBackendWithManyWaitingLinesGetsOneTurnPerRound() {
        var scheduler = Scheduler(perPartitionLimit: 100)
        for n in 1...200 { scheduler.makeReady("dead-\(n)", in: "dead") }
        scheduler.makeReady("healthy-1", in: "healthy")
        scheduler.makeReady("other-1", in: "other")
        scheduler.makeReady("healthy-2", in: "healthy")
        let first = (0..<6).compactMap { _ in scheduler.takeNext()?.line }
        #expect(first == ["dead-1", "healthy-1", "other-1", "dead-2", "healthy-2", "dead-3"])
    }

    @Test func aLineMadeReadyBehindAFullBackendGoesFirstWhenItsTurnComes() {
        var scheduler = Scheduler(perPartitionLimit: 1)
        scheduler.makeReady("dead-1", in: "dead")
        scheduler.makeReady("dead-2", in: "dead")
        #expect(Self.drain(&scheduler) == ["dead-1"])
        scheduler.makeReady("healthy-1", in: "healthy")
        #expect(Self.drain(&scheduler) == ["healthy-1"], "the dead backend is at its limit; the healthy one is not held up")
        scheduler.finished(in: "healthy")
        scheduler.finished(in: "dead")
        #expect(Self.drain(&scheduler) == ["dead-2"])
    }

    /// Two stuck backends hold both workers of a pool of two; when one attempt ends, the
    /// worker it frees goes to the backend that waited, not back to the stuck one.
    @Test func whenEveryWorkerIsTakenTheBackendThatWaitedHasTheNextTurn() {
        var scheduler = Scheduler(perPartitionLimit: 1)
        for backend in ["dead-a", "dead-b"] {
            scheduler.makeReady("\(backend)-1", in: backend)
            scheduler.makeReady("\(backend)-2", in: backend)
        }
        #expect(scheduler.takeNext()?.line == "dead-a-1")
        #expect(scheduler.takeNext()?.line == "dead-b-1")
        scheduler.makeReady("healthy-1", in: "healthy")
        scheduler.finished(in: "dead-a")
        #expect(scheduler.takeNext()?.line == "healthy-1")
        #expect(scheduler.takeNext()?.line == "dead-a-2")
    }

    @Test func startableCountsReadyLinesUpToEachBackendsRoom() {
        var scheduler = Scheduler(perPartitionLimit: 3)
        for n in 1...5 { scheduler.makeReady("a-\(n)", in: "a") }
        scheduler.makeReady("b-1", in: "b")
        #expect(scheduler.startable == 4)
        _ = scheduler.takeNext()
        #expect(scheduler.startable == 3)
        #expect(Self.drain(&scheduler).count == 3)
        #expect(scheduler.startable == 0 && scheduler.inFlight == 4)
    }

    @Test func removingTheReadyLinesKeepsAttemptsInFlightCounted() {
        var scheduler = Scheduler(perPartitionLimit: 2)
        for n in 1...4 { scheduler.makeReady("a-\(n)", in: "a") }
        _ = scheduler.takeNext()
        scheduler.removeAllReady()
        #expect(scheduler.startable == 0 && scheduler.takeNext() == nil)
        #expect(scheduler.inFlight == 1, "the attempt on the wire still holds its worker")
        scheduler.makeReady("a-5", in: "a")
        #expect(Self.drain(&scheduler) == ["a-5"], "one place left beside the attempt still in flight")
        scheduler.finished(in: "a")
        scheduler.finished(in: "a")
        scheduler.finished(in: "a")
        #expect(scheduler.inFlight == 0, "an end reported twice does not go below zero")
    }
}
