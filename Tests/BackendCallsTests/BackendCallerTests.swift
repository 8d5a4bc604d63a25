@testable import BackendCalls
import HTTP1Client
import Locking
import MonotonicClock
import Networking
import BackendTestSupport
import Testing
import TestSupport

@Suite struct BackendCallerTests {
    @Test func aDevicesCallsStayInOrderAcrossRetries() throws {
        let backend = try TestBackend { request, seen in
            request.target == "/register" && seen < 2 ? .status(503, body: "busy") : .status(200, body: "ok")
        }
        defer { backend.stop() }
        let caller = makeCaller()
        defer { caller.shutdown() }
        caller.enqueue([call(backend.url("/register")), call(backend.url("/bind"), hook: "bind")])
        try eventually("both calls ended") { caller.allEnded(2) }

        #expect(backend.targets == ["/register", "/register", "/register", "/bind"])
        let records = caller.calls()
        #expect(records.map(\.state) == [.done, .done])
        #expect(records.map(\.attempts) == [3, 1])
        #expect(records[0].status == 200 && records[0].responseBody == "ok" && records[0].error == nil)
        #expect(caller.counts == BackendCallCounts(sent: 2, failed: 0, dropped: 0, attempts: 4, queued: 0))
    }

    @Test func callsQueuedWhileTheBackendIsDownGoThroughInOrderOnceItIsUp() throws {
        let down = try TestBackend()
        let port = down.address.port
        down.stop()
        let caller = makeCaller()
        defer { caller.shutdown() }
        let url = { (path: String) in "http://127.0.0.1:\(port)\(path)" }
        caller.enqueue([
            call(url("/unbind"), hook: "unbind", maxAttempts: 1000), call(url("/bind"), hook: "bind"),
            call(url("/register"), device: "phone-1"),
        ])
        try eventually("the first call was retried") {
            let first = caller.calls().first
            return first?.state == .retrying && (first?.attempts ?? 0) >= 2
        }
        let first = try #require(caller.calls().first)
        #expect(first.error?.contains("Connection refused") == true, "\(first.error ?? "")")
        #expect(caller.calls().dropFirst().allSatisfy { $0.state == .pending && $0.attempts == 0 }, "they wait behind it")

        let up = try TestBackend(port: port)
        defer { up.stop() }
        try eventually("all three ended") { caller.allEnded(3) }
        #expect(up.targets == ["/unbind", "/bind", "/register"])
        #expect(caller.calls().map(\.state) == [.done, .done, .done])
        #expect(caller.calls()[0].error == nil, "the last attempt succeeded")
    }

    @Test func anUnansweredAttemptEndsAtItsTimeout() throws {
        let backend = try TestBackend { _, _ in .hold(then: 200) }
        defer { backend.stop() }
        let caller = makeCaller()
        defer { caller.shutdown() }
        caller.enqueue([call(backend.url("/slow"), timeoutMs: 250, maxAttempts: 2)])
        try eventually("the call failed") { caller.allEnded(1) }
        let record = try #require(caller.calls().first)
        #expect(record.state == .failed && record.attempts == 2 && record.status == nil)
        #expect(record.error == "no answer from \(backend.address) within 250 ms")
        let duration = try #require(record.finishedAtMs) - record.atMs
        #expect(duration >= 500 && duration < 3000, "two attempts of 250 ms and a short backoff took \(duration) ms")
    }

    @Test func clientErrorsEndTheCallButTooManyRequestsIsRetried() throws {
        let backend = try TestBackend { request, seen in
            switch request.target {
            case "/gone": .status(404, body: "no such user")
            case "/moved": .status(301)
            default: seen == 0 ? .status(429) : .status(204)
            }
        }
        defer { backend.stop() }
        let caller = makeCaller()
        defer { caller.shutdown() }
        caller.enqueue([
            call(backend.url("/gone")), call(backend.url("/moved"), device: "phone-2"),
            call(backend.url("/busy"), device: "phone-3"),
        ])
        try eventually("all ended") { caller.allEnded(3) }
        let records = caller.calls()
        #expect(records.map(\.state) == [.done, .done, .done])
        #expect(records.map(\.status) == [404, 301, 204])
        #expect(records.map(\.attempts) == [1, 1, 2])
        #expect(records[0].responseBody == "no such user")
    }

    @Test func callsOverTheQueueLimitAreDroppedAndCounted() throws {
        let backend = try TestBackend { _, _ in .hold(then: 200) }
        defer { backend.stop() }
        let caller = makeCaller(maxQueued: 3, maxQueuedPerBackend: 3)
        defer { caller.shutdown() }
        caller.enqueue((1...5).map { call(backend.url("/\($0)")) })
        let records = caller.calls()
        #expect(records.map(\.state) == [.pending, .pending, .pending, .dropped, .dropped])
        #expect(records[3].error == "queue full (3 calls)" && records[3].finishedAtMs != nil)
        #expect(caller.counts.dropped == 2 && caller.counts.queued == 3)

        backend.release()
        try eventually("the queued calls went out") { caller.counts.sent == 3 }
        #expect(backend.targets == ["/1", "/2", "/3"])
        caller.enqueue([call(backend.url("/6"))])
        try eventually("room again") { caller.counts.sent == 4 }
    }

    @Test func theLogKeepsTheNewestRecords() throws {
        let backend = try TestBackend()
        defer { backend.stop() }
        let caller = makeCaller(logCapacity: 3)
        defer { caller.shutdown() }
        caller.enqueue((1...5).map { call(backend.url("/\($0)")) })
        try eventually("all sent") { caller.counts.sent == 5 }
        try eventually("the kept records ended") { caller.allEnded(3) }
        #expect(caller.calls().map(\.id) == [3, 4, 5])
        #expect(caller.calls().map(\.request.url) == (3...5).map { backend.url("/\($0)") })
    }

    @Test func answersAreRecordedAsTextCutAt4KiB() throws {
        let euros = String(repeating: "€", count: 2000)  // 3 bytes each: 4 KiB falls inside one
        let backend = try TestBackend { request, _ in
            switch request.target {
            case "/chunked": .status(200, body: #"{"ok":true}"#, chunked: true)
            case "/long": .status(200, body: euros)
            default: .status(200, body: "plain")
            }
        }
        defer { backend.stop() }
        let caller = makeCaller()
        defer { caller.shutdown() }
        caller.enqueue([call(backend.url("/chunked")), call(backend.url("/plain")), call(backend.url("/long"))])
        try eventually("all ended") { caller.allEnded(3) }
        let bodies = caller.calls().map(\.responseBody)
        #expect(bodies[0] == #"{"ok":true}"# && bodies[1] == "plain")
        #expect(bodies[2] == String(repeating: "€", count: 1365))
    }

    @Test func httpsAndMalformedURLsFailAtOnce() throws {
        let caller = makeCaller()
        defer { caller.shutdown() }
        caller.enqueue([call("https://api.example.com/register"), call("http://api.example.com/a b", device: "phone-2")])
        try eventually("both ended") { caller.allEnded(2) }
        let records = caller.calls()
        #expect(records.map(\.state) == [.failed, .failed])
        #expect(records.map(\.attempts) == [1, 1])
        #expect(records[0].error == "https backends are not supported; use http://")
        #expect(records[1].error?.contains("is not a usable URL") == true)
        #expect(caller.counts.failed == 2)
    }

    @Test func aSlowDeviceDoesNotHoldUpAnother() throws {
        let backend = try TestBackend { request, _ in request.target == "/fast" ? .status(200) : .hold(then: 200) }
        defer { backend.stop() }
        let caller = makeCaller()
        defer { caller.shutdown() }
        caller.enqueue([
            call(backend.url("/slow"), device: "A"), call(backend.url("/after-slow"), device: "A"),
            call(backend.url("/fast"), device: "B"),
        ])
        try eventually("B's call went through") { caller.calls(deviceID: "B").first?.state == .done }
        #expect(caller.calls(deviceID: "A").map(\.attempts) == [1, 0], "A's first call is still on the wire")
        backend.release()
        try eventually("A's calls ended") { caller.allEnded(3) }
        #expect(backend.targets.filter { $0 != "/fast" } == ["/slow", "/after-slow"])
    }

    @Test func atMostMaxConcurrentCallsAreOnTheWire() throws {
        let backend = try TestBackend { _, _ in .hold(then: 200) }
        defer { backend.stop() }
        let caller = makeCaller(maxConcurrentCalls: 2)
        defer { caller.shutdown() }
        caller.enqueue(["A", "B", "C", "D"].map { call(backend.url("/\($0)"), device: $0) })
        try eventually("two calls are on the wire") { backend.requests.count == 2 }
        #expect(caller.workersRunning == 2)
        #expect(caller.calls().map(\.attempts).reduce(0, +) == 2)
        backend.release()
        try eventually("all ended") { caller.allEnded(4) }
        #expect(Set(backend.targets) == ["/A", "/B", "/C", "/D"])
    }

    @Test func aDeviceWaitingForItsRetryHoldsNoWorker() throws {
        let down = try TestBackend()
        let downURL = down.url("/register")
        down.stop()
        let up = try TestBackend()
        defer { up.stop() }
        // One worker and a long backoff: B gets through only if A's wait holds no thread.
        let caller = BackendCaller(now: { WallClock.nowMs }, retryBaseDelayMs: 60_000, retryMaxDelayMs: 60_000, maxConcurrentCalls: 1)
        defer { caller.shutdown() }
        caller.enqueue([call(downURL, device: "A")])
        try eventually("A waits for its retry") { caller.calls(deviceID: "A").first?.state == .retrying }
        caller.enqueue([call(up.url("/register"), device: "B")])
        try eventually("B's call went through") { caller.calls(deviceID: "B").first?.state == .done }
        #expect(caller.calls(deviceID: "A").first?.attempts == 1)
    }

    @Test func resetForgetsQueuedCallsAndTheLog() throws {
        let backend = try TestBackend { request, _ in request.target == "/held" ? .hold(then: 200) : .status(200) }
        defer { backend.stop() }
        let caller = makeCaller()
        defer { caller.shutdown() }
        caller.enqueue([call(backend.url("/held")), call(backend.url("/queued"))])
        try eventually("the first call is on the wire") { backend.targets == ["/held"] }
        caller.reset()
        #expect(caller.calls().isEmpty)
        #expect(caller.counts == BackendCallCounts())

        caller.enqueue([call(backend.url("/new"))])
        try eventually("the new call went through") { caller.allEnded(1) }
        #expect(caller.calls().map(\.id) == [3], "ids keep counting")
        backend.release()
        try eventually("the attempt from before the reset ended") { caller.workersRunning == 0 }
        #expect(caller.calls().count == 1, "the attempt from before the reset is not recorded")
        #expect(!backend.targets.contains("/queued"))
    }

    @Test func everyChangeIsReportedInOrder() throws {
        let backend = try TestBackend { _, seen in seen == 0 ? .status(500) : .status(200) }
        defer { backend.stop() }
        let caller = makeCaller()
        defer { caller.shutdown() }
        let seen = Locked<[(BackendCallState, Int)]>([])
        caller.onChange = { record in seen.withLock { $0.append((record.state, record.attempts)) } }
        caller.enqueue([call(backend.url("/flaky"))])
        try eventually("four changes") { seen.withLock { $0.count } == 4 }
        let changes = seen.withLock { $0 }
        #expect(changes.map(\.0) == [.pending, .retrying, .pending, .done])
        #expect(changes.map(\.1) == [0, 1, 2, 2])
    }

    @Test func shutdownReturnsAtOnceAndStopsSending() throws {
        let backend = try TestBackend { _, _ in .hold(then: 200) }
        defer { backend.stop() }
        let caller = makeCaller()
        caller.enqueue([call(backend.url("/held")), call(backend.url("/queued"))])
        try eventually("the first call is on the wire") { backend.targets == ["/held"] }
        let started = Monotonic.nowMilliseconds()
        caller.shutdown()
        #expect(Monotonic.nowMilliseconds() - started < 500)
        caller.enqueue([call(backend.url("/late"))])
        #expect(caller.calls().last?.state == .dropped)
        backend.release()
        try eventually("the attempt on the wire ended") { caller.workersRunning == 0 }
        #expect(backend.targets == ["/held"], "no attempt began after the shutdown")
    }
}
