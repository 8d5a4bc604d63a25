public import HTTP1Server
import Synchronization

/// A counter for `/metrics` that any thread may bump.
final class Counter: Sendable {
    private let atomic = Atomic<Int>(0)
    func add(_ n: Int = 1) { atomic.add(n, ordering: .relaxed) }
    var value: Int { atomic.load(ordering: .relaxed) }
    func reset() { atomic.store(0, ordering: .relaxed) }
}

/// Counters of the admin listener's defences, for `/metrics`. Gauges are read from where
/// they live (connections, event streams, waiters); a reset zeroes the counters here.
public final class AdminMetrics: Sendable {
    static let refusalReasons = ["host", "origin", "token", "content-type"]
    static let timeoutPhases = ["headers", "body", "idle"]

    /// Requests refused by the access rules, by `refusalReasons` index.
    let refused = refusalReasons.map { _ in Counter() }
    /// Connections closed for slowness, by `timeoutPhases` index.
    let timeouts = timeoutPhases.map { _ in Counter() }
    /// Requests that broke HTTP/1.1 framing or syntax (answered 4xx/5xx and closed).
    let malformed = Counter()
    let connectionsRefused = Counter()
    /// Idle connections closed to make room for a new one at the cap.
    let connectionsEvicted = Counter()
    let bodyBudgetRefusals = Counter()
    /// Notification lists answered 503 for the list answers' budget (`listAnswerBudget`).
    let listBudgetRefusals = Counter()
    let streamsDropped = Counter()
    let waitersRefused = Counter()
    /// Waiters compared with a changed record (the index keeps this near the wake-ups).
    let waiterChecks = Counter()
    let waiterWakeups = Counter()

    func refused(_ reason: String) {
        if let i = Self.refusalReasons.firstIndex(of: reason) { refused[i].add() }
    }

    func timedOut(_ phase: String) {
        if let i = Self.timeoutPhases.firstIndex(of: phase) { timeouts[i].add() }
    }

    public init() {}

    /// Counts what the HTTP/1.1 server did.
    func count(_ event: HTTP1ServerEvent) {
        switch event {
        case .connectionRefused: connectionsRefused.add()
        case .connectionEvicted: connectionsEvicted.add()
        case .bodyBudgetRefused: bodyBudgetRefusals.add()
        case .malformed: malformed.add()
        case .timedOut(let phase): timedOut(phase.rawValue)
        }
    }

    public func reset() {
        for counter in refused + timeouts + [
            malformed, connectionsRefused, connectionsEvicted, bodyBudgetRefusals, listBudgetRefusals, streamsDropped, waitersRefused,
            waiterChecks, waiterWakeups,
        ] {
            counter.reset()
        }
    }
}

extension AdminMetrics {
    /// The admin listener's families for `/metrics`: its limits at work (docs/admin-api.md, "Admin API
    /// limits"); `server` is nil until the listener is configured.
    public func appendText(to p: inout PrometheusText, server: HTTP1Server?, events: EventHub) {
        let m = self
        func single(_ name: String, _ type: String, _ help: String, _ value: Int) {
            p.single(name, type, help, Double(value))
        }
        single("apns_emulator_admin_connections", "gauge", "Open admin API connections.", server?.openConnections ?? 0)
        single(
            "apns_emulator_admin_connections_refused_total", "counter",
            "Admin connections answered 503 because --admin-max-connections were open.", m.connectionsRefused.value)
        single(
            "apns_emulator_admin_connections_evicted_total", "counter",
            "Idle admin connections closed to make room for a new one at --admin-max-connections.", m.connectionsEvicted.value)
        p.labelled(
            "apns_emulator_admin_requests_refused_total", "counter",
            "Admin requests refused by the access rules: host (403), origin (403), token (401), content-type (415).",
            by: "reason", zip(AdminMetrics.refusalReasons, m.refused).map { ($0, Double($1.value)) })
        single(
            "apns_emulator_admin_malformed_requests_total", "counter",
            "Admin requests that broke HTTP/1.1 syntax or framing (answered 4xx/5xx, connection closed).", m.malformed.value)
        p.labelled(
            "apns_emulator_admin_timeouts_total", "counter",
            "Admin connections closed for slowness: headers or body (408, --admin-read-timeout), idle (--admin-idle-timeout).",
            by: "phase", zip(AdminMetrics.timeoutPhases, m.timeouts).map { ($0, Double($1.value)) })
        single(
            "apns_emulator_admin_body_bytes_in_flight", "gauge", "Request body bytes being read, out of a budget of 32 MiB.",
            server?.bodyBytesInFlight ?? 0)
        single(
            "apns_emulator_admin_body_budget_refusals_total", "counter",
            "Admin requests answered 503 because the request body budget was spent.", m.bodyBudgetRefusals.value)
        single(
            "apns_emulator_admin_list_budget_refusals_total", "counter",
            "Notification lists answered 503 because 64 MiB of list answers were on their way to clients that had not read them.",
            m.listBudgetRefusals.value)
        single("apns_emulator_admin_event_streams", "gauge", "Open /api/v1/events streams.", events.streamCount)
        single(
            "apns_emulator_admin_event_streams_dropped_total", "counter",
            "Event stream clients disconnected for falling 8 MiB behind.", m.streamsDropped.value)
        single("apns_emulator_admin_waiters", "gauge", "Long polls waiting (/api/v1/notifications/wait).", events.waiterCount)
        single(
            "apns_emulator_admin_waiters_refused_total", "counter",
            "Long polls answered 503 because --admin-max-waiters were waiting.", m.waitersRefused.value)
        single(
            "apns_emulator_admin_waiter_checks_total", "counter",
            "Waiters compared with a changed record (only those filed under a key the record has).", m.waiterChecks.value)
        single("apns_emulator_admin_waiter_wakeups_total", "counter", "Long polls answered with a record.", m.waiterWakeups.value)
    }
}
