import Dispatch
import Foundation
import Locking
import MonotonicClock
import Networking
import Synchronization

/// A provider-side load run: `plan.connections` HTTP/2 connections, each on its own thread
/// keeping up to `plan.streamsPerConnection` requests in flight, until `plan.maxRequests`
/// were sent or `plan.maxDuration` passed. Every connection is opened before the clock
/// starts, so a target that cannot be reached fails `start` instead of running empty.
public final class LoadGenerator: Sendable {
    public let plan: LoadPlan
    /// What the threads share: the request numbers, the pacer, the stop flag, progress.
    let shared: LoadRunState

    public init(plan: LoadPlan) {
        precondition(!plan.deviceTokens.isEmpty && plan.connections > 0 && plan.streamsPerConnection > 0)
        self.plan = plan
        shared = LoadRunState(plan: plan)
    }

    /// Progress while running: cheap counters the threads add to as answers arrive.
    public struct Progress: Sendable {
        public var elapsedSeconds: Double
        /// Requests finished (answered or not).
        public var completed: Int
        /// Finished without a 200.
        public var failed: Int
        /// Connections that could not be opened again (the server gone, or refusing churn).
        public var connectFailures: Int

        public init(elapsedSeconds: Double, completed: Int, failed: Int, connectFailures: Int = 0) {
            self.elapsedSeconds = elapsedSeconds
            self.completed = completed
            self.failed = failed
            self.connectFailures = connectFailures
        }
    }

    public struct Report: Sendable {
        public var stats: LoadStats
        /// From the start of sending to the last answer.
        public var durationSeconds: Double
        /// Finished requests a second.
        /// Requests sent a second (one that never left is no load on the server).
        public var throughput: Double { durationSeconds > 0 ? Double(stats.sent) / durationSeconds : 0 }
        /// Why it stopped: "requests" (all sent), "duration", "interrupt" (`stop()`), or
        /// "unreachable" (no connection could be opened again for `plan.reconnectGiveUp`).
        public var stoppedBy: String
    }

    /// Opens every connection, then runs the threads, calling `onTick` about every `tick`
    /// seconds on this thread until they finish. Throws when a connection cannot be opened.
    public func run(tick: Double = 0.1, onTick: (Progress) -> Void = { _ in }) throws(ClientError) -> Report {
        var workers: [LoadWorker] = []
        for index in 0..<plan.connections {
            let worker = LoadWorker(number: index, shared: shared)
            do {
                try worker.connect()
            } catch {
                throw ClientError("connection \(index + 1) of \(plan.connections): \(error.description)")
            }
            workers.append(worker)
        }
        let group = DispatchGroup()
        shared.begin()
        for worker in workers {
            group.enter()
            let thread = Thread(named: "load-\(worker.number)") {
                worker.run()
                group.leave()
            }
            thread.start()
        }
        while group.wait(timeout: .now() + tick) == .timedOut { onTick(progress) }
        let finishedAt = Monotonic.nowNanoseconds()
        var stats = LoadStats()
        for worker in workers { stats.merge(worker.stats) }
        // "duration" when the deadline came with requests claimed but still waiting for their
        // --rate slot. Those that never left for another reason (queued behind the server's
        // stream limit at their timeout) are in the outcomes as "not sent"; the run itself
        // went to its count.
        var stoppedBy = workers.allSatisfy(\.gaveUp) ? "unreachable" : shared.stopReason
        if stoppedBy == "requests", stats.sent < plan.maxRequests, Monotonic.nowNanoseconds() >= shared.deadline {
            stoppedBy = "duration"
        }
        // The whole run (a server refusing connections meanwhile is part of it: a --duration
        // run of 10 s that got answers for 6 reported 6 s and a rate 1.6 times too high), but
        // up to the last answer when every connection gave up: the time spent retrying a server
        // that is gone is not the run's.
        let lastAnswer = workers.map(\.lastFinished).max().flatMap { $0 > 0 ? $0 : nil } ?? finishedAt
        let end = stoppedBy == "unreachable" ? lastAnswer : finishedAt
        return Report(stats: stats, durationSeconds: Double(end - shared.startNanoseconds) / 1e9, stoppedBy: stoppedBy)
    }

    /// Stops sending; requests in flight are still waited for (up to `plan.drainTimeout`).
    public func stop() { shared.requestStop() }

    public var progress: Progress {
        Progress(
            elapsedSeconds: Double(Monotonic.nowNanoseconds() - shared.startNanoseconds) / 1e9,
            completed: shared.completed.load(ordering: .relaxed), failed: shared.failed.load(ordering: .relaxed),
            connectFailures: shared.connectFailures.load(ordering: .relaxed))
    }
}

/// The state every connection's thread shares. Request numbers come from one counter, so the
/// request count and the push-type mix hold exactly whatever the threads' timing.
final class LoadRunState: Sendable {
    let plan: LoadPlan
    /// `/3/device/TOKEN` for each token, made once.
    let paths: [String]
    let pacer: RequestPacer?
    private let nextRequest = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)
    private let start = Atomic<UInt64>(0)
    let completed = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    let connectFailures = Atomic<Int>(0)

    init(plan: LoadPlan) {
        self.plan = plan
        paths = plan.deviceTokens.map { "/3/device/\($0)" }
        // A tenth of a second's worth of requests may go at once after a pause.
        pacer = plan.ratePerSecond > 0 ? RequestPacer(perSecond: plan.ratePerSecond, burst: max(1, Int(plan.ratePerSecond / 10))) : nil
    }

    func begin() { start.store(Monotonic.nowNanoseconds(), ordering: .releasing) }
    var startNanoseconds: UInt64 { start.load(ordering: .acquiring) }
    var deadline: UInt64 { startNanoseconds + UInt64(plan.maxDuration * 1e9) }

    /// The next request number, or nil when the run has sent all it should.
    func claimRequest() -> Int? {
        guard !stopped.load(ordering: .relaxed) else { return nil }
        let number = nextRequest.wrappingAdd(1, ordering: .relaxed).oldValue
        return number < plan.maxRequests ? number : nil
    }

    func requestStop() { stopped.store(true, ordering: .relaxed) }
    var isStopped: Bool { stopped.load(ordering: .relaxed) }

    var stopReason: String {
        if isStopped { return "interrupt" }
        return nextRequest.load(ordering: .relaxed) >= plan.maxRequests ? "requests" : "duration"
    }

    func addProgress(completed count: Int, failed failures: Int) {
        if count > 0 { completed.wrappingAdd(count, ordering: .relaxed) }
        if failures > 0 { failed.wrappingAdd(failures, ordering: .relaxed) }
    }
}
