// BackendCallsTests: calls to an app's backend against a real loopback HTTP server
// (BackendTestSupport). Imports BackendCalls, HTTP1Client, Networking, Locking and the test-support targets.
import BackendCalls
import Glibc
import MonotonicClock
import Networking
import Testing

/// A caller with fast retries, as every test wants one.
func makeCaller(
    maxQueued: Int = 10_000, maxQueuedPerBackend: Int? = nil, logCapacity: Int = 10_000,
    maxConcurrentCalls: Int = 32, maxConcurrentCallsPerBackend: Int = 4
) -> BackendCaller {
    BackendCaller(
        now: { Int64(WallClock.nowMs) }, maxQueued: maxQueued, maxQueuedPerBackend: maxQueuedPerBackend,
        logCapacity: logCapacity, retryBaseDelayMs: 10, retryMaxDelayMs: 40, maxConcurrentCalls: maxConcurrentCalls,
        maxConcurrentCallsPerBackend: maxConcurrentCallsPerBackend)
}

func call(
    _ url: String, device: String = "phone-1", app: String = "com.example.app", hook: String = "register",
    method: String = "POST", body: String? = #"{"token":"ab"}"#, timeoutMs: Int = 2000, maxAttempts: Int = 5
) -> BackendRequest {
    BackendRequest(
        deviceID: device, bundleID: app, hook: hook, method: method, url: url,
        headers: [BackendHeader("Content-Type", "application/json")], body: body.map { Array($0.utf8) },
        userID: "user-1", token: "ab", timeoutMs: timeoutMs, maxAttempts: maxAttempts)
}

extension BackendCaller {
    /// Every kept record has ended (done, failed or dropped) and there are `count` of them.
    func allEnded(_ count: Int) -> Bool {
        let records = calls()
        return records.count == count && records.allSatisfy { $0.finishedAtMs != nil }
    }
}

enum WallClock {
    static var nowMs: Int64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Int64(time.tv_sec) * 1000 + Int64(time.tv_nsec) / 1_000_000
    }
}
