/// What the journal says about the requests since a moment: the summary of a load run
/// (`GET /api/v1/stats`). Built from the kept records, so it covers at most the journal.
public struct RunSummary: Sendable {
    public var sinceMs: Int64
    public private(set) var requests = 0
    public private(set) var firstMs: Int64?
    public private(set) var lastMs: Int64?
    public private(set) var byStatus: [Int: Int] = [:]
    public private(set) var byReason: [String: Int] = [:]
    public private(set) var byPushType: [String: Int] = [:]
    public private(set) var byOutcome: [String: Int] = [:]
    /// Provider's answer → delivery (ms), for delivered notifications.
    private var deliveryMs: [Int64] = []
    /// Records older than `sinceMs` may have been dropped from the journal already.
    public var journalMayBeIncomplete = false

    public init(sinceMs: Int64) { self.sinceMs = sinceMs }

    mutating func add(_ r: NotificationRecord) {
        requests += 1
        firstMs = min(firstMs ?? r.receivedAtMs, r.receivedAtMs)
        lastMs = max(lastMs ?? r.receivedAtMs, r.receivedAtMs)
        byStatus[r.status, default: 0] += 1
        if let reason = r.reason { byReason[reason, default: 0] += 1 }
        if let type = r.pushType { byPushType[type, default: 0] += 1 }
        byOutcome[r.outcome.rawValue, default: 0] += 1
        if r.outcome == .delivered, let delivered = r.deliveredAtMs, let answered = r.respondedAtMs {
            deliveryMs.append(max(0, delivered - answered))
        }
    }

    public var json: JSONValue {
        func counts<K>(_ d: [K: Int], _ key: (K) -> String) -> JSONValue {
            .object(JSONObject(d.map { (key($0.key), JSONValue.int(Int64($0.value))) }.sorted { $0.0 < $1.0 }))
        }
        let span = (firstMs != nil && lastMs != nil) ? max(1, lastMs! - firstMs!) : 0
        let sorted = deliveryMs.sorted()
        func percentile(_ p: Double) -> JSONValue {
            guard !sorted.isEmpty else { return .null }
            let index = min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)
            return .int(sorted[max(0, index)])
        }
        return .object(
            JSONObject([
                ("since", .string(RFC3339.format(milliseconds: sinceMs))), ("sinceMs", .int(sinceMs)),
                ("requests", .int(Int64(requests))),
                ("firstAt", firstMs.map { .string(RFC3339.format(milliseconds: $0)) } ?? .null),
                ("lastAt", lastMs.map { .string(RFC3339.format(milliseconds: $0)) } ?? .null),
                ("durationMs", .int(span)),
                ("requestsPerSecond", span > 0 ? .double((Double(requests) / (Double(span) / 1000) * 10).rounded() / 10) : .null),
                ("byStatus", counts(byStatus) { String($0) }), ("byReason", counts(byReason) { $0 }),
                ("byPushType", counts(byPushType) { $0 }), ("byOutcome", counts(byOutcome) { $0 }),
                (
                    "deliveryLatencyMs",
                    .object(
                        JSONObject([
                            ("count", .int(Int64(sorted.count))), ("p50", percentile(0.5)), ("p90", percentile(0.9)),
                            ("p99", percentile(0.99)), ("max", sorted.last.map(JSONValue.int) ?? .null),
                        ]))
                ),
                ("journalMayBeIncomplete", .bool(journalMayBeIncomplete)),
            ]))
    }
}

extension RecordStore {
    /// The requests received at or after `sinceMs`, from the kept records (newest first until
    /// an older one, since records are in arrival order).
    public func summary(sinceMs: Int64) -> RunSummary {
        var summary = RunSummary(sinceMs: sinceMs)
        let n = count
        var i = 0
        var reachedOlder = false
        while i < n {
            let stop = withRecord(newestFirstIndex: i) { record -> Bool in
                guard record.receivedAtMs >= sinceMs else { return true }
                summary.add(record)
                return false
            }
            if stop {
                reachedOlder = true
                break
            }
            i += 1
        }
        // Dropped by this journal (since the last reset or reload: what went before is not in
        // the window), or (a journal loaded full at a restart or a join: this instance cannot
        // tell what went before) full.
        summary.journalMayBeIncomplete = !reachedOlder && (evictedHere > 0 || count >= capacity)
        return summary
    }
}
