@testable import BackendCalls
import BackendTestSupport
import MonotonicClock
import Networking
import Testing
import TestSupport

/// One app's dead or slow backend against another app's healthy one, both real HTTP servers
/// on loopback, through the caller as the emulator configures it (32 workers, 4 per backend,
/// 5 s per attempt).
@Suite struct BackendFairnessTests {
    enum Dead: String, CaseIterable, Sendable {
        /// Accepts, reads the request, never answers.
        case silent
        /// Answers one byte per second.
        case trickling

        var answer: TestBackend.Answer { self == .silent ? .hold(then: 200) : .trickle(200, everyMs: 1000) }
    }

    static let cases: [(Dead, Int)] = Dead.allCases.flatMap { dead in [20, 200].map { (dead, $0) } }

    @Test(arguments: cases)
    func aDeadBackendDoesNotDelayAnotherAppsCall(dead: Dead, waiting: Int) throws {
        let deadBackend = try TestBackend { _, _ in dead.answer }
        defer { deadBackend.stop() }
        let healthy = try TestBackend()
        defer { healthy.stop() }
        let caller = makeCaller()
        defer { caller.shutdown() }

        caller.enqueue((1...waiting).map { call(deadBackend.url("/register"), device: "dead-\($0)", app: "com.dead.app", timeoutMs: 5000) })
        try eventually("the dead backend has its share on the wire") { deadBackend.requests.count == 4 }
        let queuedAt = Monotonic.nowMilliseconds()
        caller.enqueue([call(healthy.url("/register"), device: "healthy-1", app: "com.healthy.app", timeoutMs: 5000)])
        try eventually("the healthy backend got its call", seconds: 4) { healthy.requests.count == 1 }
        let waitedMs = healthy.requests[0].receivedAtMs - queuedAt
        #expect(waitedMs < 1000, "the healthy app's call waited \(waitedMs) ms behind \(waiting) calls to a \(dead) backend")
        try eventually("its call is recorded done") { caller.calls(deviceID: "healthy-1").first?.state == .done }
        #expect(deadBackend.requests.count == 4, "never more than 4 attempts on the wire to one backend")
    }

    @Test func twoAppsOnOneDeviceDoNotWaitForEachOther() throws {
        let dead = try TestBackend { _, _ in .hold(then: 200) }
        defer { dead.stop() }
        let healthy = try TestBackend()
        defer { healthy.stop() }
        let caller = makeCaller()
        defer { caller.shutdown() }
        caller.enqueue([
            call(dead.url("/register"), device: "phone", app: "com.dead.app"),
            call(dead.url("/bind"), device: "phone", app: "com.dead.app", hook: "bind"),
            call(healthy.url("/register"), device: "phone", app: "com.healthy.app"),
        ])
        try eventually("the healthy app's call went through") { caller.calls(deviceID: "phone").last?.state == .done }
        try eventually("the dead app's first call is on the wire") { dead.requests.count == 1 }
        #expect(dead.targets == ["/register"], "the dead app's own calls still go one at a time, in order")
        #expect(caller.calls(deviceID: "phone").map(\.attempts) == [1, 0, 1])
    }

    @Test func oneBackendHasAtMostItsShareOfTheQueue() throws {
        let dead = try TestBackend { _, _ in .hold(then: 200) }
        defer { dead.stop() }
        let healthy = try TestBackend()
        defer { healthy.stop() }
        let caller = makeCaller(maxQueued: 10)
        defer { caller.shutdown() }
        caller.enqueue((1...8).map { call(dead.url("/register"), device: "dead-\($0)", app: "com.dead.app") })
        let records = caller.calls()
        #expect(records.map(\.state) == Array(repeating: .pending, count: 5) + Array(repeating: .dropped, count: 3))
        #expect(records[5].error == "queue full (5 calls for \(dead.address), the most one backend may have queued)")

        caller.enqueue((1...5).map { call(healthy.url("/register"), device: "healthy-\($0)", app: "com.healthy.app") })
        try eventually("the healthy app's calls went through") { healthy.requests.count == 5 }
        #expect(caller.counts.dropped == 3)
    }

    @Test func atMostMaxConcurrentCallsPerBackendAreOnTheWireToOne() throws {
        let backend = try TestBackend { _, _ in .hold(then: 200) }
        defer { backend.stop() }
        let caller = makeCaller(maxConcurrentCalls: 32, maxConcurrentCallsPerBackend: 3)
        defer { caller.shutdown() }
        caller.enqueue((1...10).map { call(backend.url("/\($0)"), device: "phone-\($0)") })
        try eventually("three calls are on the wire") { backend.requests.count == 3 }
        #expect(caller.workersRunning == 3, "no worker waits for a backend that is at its limit")
        backend.release()
        try eventually("all ended") { caller.allEnded(10) }
        #expect(Set(backend.targets) == Set((1...10).map { "/\($0)" }))
    }
}
