import APNsCore
import BackendTestSupport
import Foundation
import MonotonicClock
import Networking
import Testing
import TestSupport

/// The emulator binary with two apps whose backends are real HTTP servers on loopback: one
/// never answers (or answers a byte a second), the other answers at once. However many of
/// the dead app's calls pile up, the healthy app's call goes out at once.
@Suite("App backends do not hold each other up (the binary, real HTTP backends)")
struct BackendIsolationTests {
    static let deadApp = "com.dead.app"
    static let healthyApp = "com.healthy.app"

    enum Dead: String, CaseIterable, Sendable {
        case silent, trickling
        var answer: TestBackend.Answer { self == .silent ? .hold(then: 200) : .trickle(200, everyMs: 1000) }
    }

    static let cases: [(Dead, Int)] = Dead.allCases.flatMap { dead in [20, 200].map { (dead, $0) } }

    /// A `register` hook for `bundle` pointed at `url`.
    static func setBackend(_ emulator: EmulatorProcess, _ bundle: String, _ url: String, timeoutMs: Int = 5000) throws {
        let reply = try emulator.admin(
            "PUT", "/api/v1/apps/\(bundle)/backend",
            body: [
                "register": ["url": .string(url), "body": ["token": "{{token}}"]], "timeoutMs": .int(Int64(timeoutMs)),
            ])
        #expect(reply.status == 200, "\(reply.json)")
    }

    /// `count` virtual devices with `bundle`, each logged in: a login uploads the token
    /// (`register`) the app got while nobody was logged in.
    static func devicesRegistering(_ emulator: EmulatorProcess, _ bundle: String, prefix: String, count: Int) throws {
        let created = try emulator.admin(
            "POST", "/api/v1/devices/batch",
            body: [
                "count": .int(Int64(count)), "idPrefix": .string(prefix), "bundleId": .string(bundle), "environment": "sandbox",
            ])
        #expect(created.status == 201, "\(created.json)")
        for n in 1...count {
            let login = try emulator.admin("POST", "/api/v1/devices/\(prefix)\(n)/login", body: ["userId": .string("user-\(n)")])
            #expect(login.status == 200, "\(login.json)")
        }
    }

    @Test(arguments: cases)
    func aDeadBackendDoesNotDelayAnotherAppsCall(dead: Dead, waiting: Int) throws {
        let deadBackend = try TestBackend { _, _ in dead.answer }
        defer { deadBackend.stop() }
        let healthy = try TestBackend()
        defer { healthy.stop() }
        let emulator = try EmulatorProcess([
            "--app", "\(EmulatorProcess.teamID):\(Self.deadApp)",
            "--app", "\(EmulatorProcess.teamID):\(Self.healthyApp)",
        ])
        // Longer than the default 5 s, so the dead backend's first attempts stay on the wire
        // for the whole test and its request count shows how many were sent at once.
        try Self.setBackend(emulator, Self.deadApp, deadBackend.url("/register"), timeoutMs: 30_000)
        try Self.setBackend(emulator, Self.healthyApp, healthy.url("/register"))

        try Self.devicesRegistering(emulator, Self.deadApp, prefix: "dead-", count: waiting)
        #expect(try eventually { deadBackend.requests.count == 4 }, "the dead backend has its 4 attempts on the wire")
        let startedAt = Monotonic.nowMilliseconds()
        try Self.devicesRegistering(emulator, Self.healthyApp, prefix: "healthy-", count: 1)
        #expect(try eventually(4) { healthy.requests.count == 1 })
        let waitedMs = try #require(healthy.requests.first).receivedAtMs - startedAt
        #expect(
            waitedMs < 1000, "the healthy app's call reached its backend \(waitedMs) ms after the login, behind \(waiting) calls to a \(dead) backend"
        )
        #expect(
            try eventually {
                try emulator.admin("GET", "/api/v1/devices/healthy-1/backend-calls").json["calls"]?.arrayValue?.first?["state"] == "done"
            })
        #expect(deadBackend.requests.count == 4, "never more than 4 attempts on the wire to one backend")
        let deadCalls = try emulator.admin("GET", "/api/v1/devices/dead-\(waiting)/backend-calls").json["calls"]?.arrayValue ?? []
        #expect(
            deadCalls.first?["state"] == "pending" && deadCalls.first?["attempts"] == 0,
            "the dead app's last device still waits its turn: \(deadCalls)")
    }
}
