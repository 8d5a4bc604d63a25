import MonotonicClock
import Synchronization

/// How many connections of one kind may be open at once (`--max-connections`).
final class ConnectionBudget: Sendable {
    let kind: String
    let limit: Int
    private let open = Atomic<Int>(0)
    /// Connections closed at once because the budget was spent (metrics).
    let refused = Atomic<Int>(0)
    /// When a refusal was last reported (monotonic ms; 0 = never).
    private let lastReport = Atomic<Int64>(0)

    init(kind: String, limit: Int) {
        self.kind = kind
        self.limit = limit
    }

    func take() -> Bool {
        if open.add(1, ordering: .relaxed).newValue <= limit { return true }
        open.subtract(1, ordering: .relaxed)
        refused.add(1, ordering: .relaxed)
        return false
    }

    func release() { open.subtract(1, ordering: .relaxed) }

    /// At most one log line every 10 seconds while connections are being refused.
    func shouldReportRefusal() -> Bool {
        let now = Monotonic.nowMilliseconds()
        let last = lastReport.load(ordering: .relaxed)
        guard last == 0 || now - last >= 10_000 else { return false }
        return lastReport.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged
    }
}
