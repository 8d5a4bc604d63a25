import Networking
import Synchronization

/// What every admin connection shares: the API, the access rules, the limits and the counters.
final class AdminServer: Sendable {
    /// All request bodies being read at once, over every admin connection.
    static let bodyBudgetBytes = 32 << 20
    /// After a final response the connection reads (and drops) what the client still sends
    /// this long before closing, so the client sees the response rather than a reset.
    static let lingerMs: Int64 = 2000

    let api: AdminAPI
    let options: AdminOptions
    let policy: AdminAccessPolicy
    let metrics: AdminMetrics
    let limits = HTTP1RequestParser.Limits()
    private let bodyBytesReserved = Atomic<Int>(0)
    let slots: AdminSlots

    init(api: AdminAPI, options: AdminOptions, policy: AdminAccessPolicy, metrics: AdminMetrics) {
        self.api = api
        self.options = options
        self.policy = policy
        self.metrics = metrics
        slots = AdminSlots(maxConnections: options.maxConnections, metrics: metrics)
    }

    /// The access rules for a request head, judged before its body is read: nil to go on.
    func admit(_ head: HTTP1RequestHead, path: String, query: [String: String]) -> AdminAccessPolicy.Denial? {
        var open = false
        var isEventStream = false
        if case .found(let route, _) = api.router.match(method: head.method, path: path) {
            open = route.open
            isEventStream = route.pattern == "/api/v1/events"
        }
        return policy.check(head, open: open, queryToken: query["access_token"], acceptsQueryToken: isEventStream)
    }

    /// Takes `count` bytes from the body budget; false (and nothing taken) when it is spent.
    func reserveBody(_ count: Int) -> Bool {
        let total = bodyBytesReserved.add(count, ordering: .relaxed).newValue
        guard total <= Self.bodyBudgetBytes else {
            bodyBytesReserved.subtract(count, ordering: .relaxed)
            metrics.bodyBudgetRefusals.add()
            return false
        }
        return true
    }

    func releaseBody(_ count: Int) {
        if count > 0 { bodyBytesReserved.subtract(count, ordering: .relaxed) }
    }

    var bodyBytesInFlight: Int { bodyBytesReserved.load(ordering: .relaxed) }

    /// The connections admitted, and whom to close when they are too many (AdminSlots.swift).
    var openConnections: Int { slots.open }

    /// Paths a health-check reserve connection may ask for.
    static func isHealthCheck(_ path: String) -> Bool { path == "/livez" || path == "/readyz" || path == "/metrics" }
}

/// A counter for `/metrics` that any thread may bump.
final class Counter: Sendable {
    private let atomic = Atomic<Int>(0)
    func add(_ n: Int = 1) { atomic.add(n, ordering: .relaxed) }
    var value: Int { atomic.load(ordering: .relaxed) }
    func reset() { atomic.store(0, ordering: .relaxed) }
}

/// Counters of the admin listener's defences, for `/metrics`. Gauges are read from where
/// they live (connections, event streams, waiters); a reset zeroes the counters here.
final class AdminMetrics: Sendable {
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

    func reset() {
        for counter in refused + timeouts + [malformed, connectionsRefused, connectionsEvicted, bodyBudgetRefusals, streamsDropped, waitersRefused,
                                             waiterChecks, waiterWakeups]
        {
            counter.reset()
        }
    }
}
