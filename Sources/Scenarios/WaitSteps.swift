import APNsCore
import AdminClient
import Foundation

/// `waitFor` and `expectNone`: polling the admin API (records, backend calls) every 50 ms
/// until enough match or the time is up. Polling rather than the notifications long poll,
/// because most criteria (callback, display, crossAccount, userId, any backend-call field)
/// are not server-side filters, and one loop serves both kinds of thing.
extension StepRunner {
    static let pollInterval = 0.05

    func waitFor() throws(StepFailure) -> String? {
        let wanted = try fields.int("count") ?? 1
        let timeoutMs = try fields.int("timeoutMs") ?? 10_000
        let since = try since()
        let deadline = Date().addingTimeInterval(Double(timeoutMs) / 1000)
        let watch = try Watch(fields, context: context, since: since)
        while true {
            let found = try watch.matches()
            if found.count >= wanted { return "\(found.count) found: \(found.first ?? "")" }
            if Date() >= deadline {
                throw StepFailure(
                    "none arrived within \(timeoutMs) ms" + (found.isEmpty ? "" : " (only \(found.count))"),
                    expected: (wanted > 1 ? "\(wanted) × " : "") + watch.description,
                    seen: try watch.seen())
            }
            Thread.sleep(forTimeInterval: Self.pollInterval)
        }
    }

    /// Nothing matching for `withinMs`; one already there (since `since`) fails at once.
    func expectNone() throws(StepFailure) -> String? {
        let windowMs = try fields.int("withinMs") ?? 1_000
        let watch = try Watch(fields, context: context, since: try since())
        let deadline = Date().addingTimeInterval(Double(windowMs) / 1000)
        while true {
            let found = try watch.matches()
            if let first = found.first {
                throw StepFailure("one arrived", expected: "no " + watch.description + " within \(windowMs) ms", seen: first)
            }
            if Date() >= deadline { return "none within \(windowMs) ms" }
            Thread.sleep(forTimeInterval: Self.pollInterval)
        }
    }
}

/// What a wait looks at: notification records or backend calls matching criteria, since a time.
struct Watch: CustomStringConvertible {
    /// The most records one listing asks for (so the most a count can reach).
    static let listLimit = 1000

    enum Subject {
        case delivery(DeliveryCriteria)
        case backendCall(CallCriteria)
    }

    let subject: Subject
    let since: Int64
    let context: RunContext

    /// From a step's `delivery`/`deliveries` or `backendCall`/`backendCalls` object.
    init(_ fields: StepFields, context: RunContext, since: Int64) throws(StepFailure) {
        self.context = context
        self.since = since
        if let criteria = fields.nested("delivery") ?? fields.nested("deliveries") {
            subject = .delivery(try DeliveryCriteria(criteria, context: context))
        } else if let criteria = fields.nested("backendCall") ?? fields.nested("backendCalls") {
            subject = .backendCall(try CallCriteria(criteria, context: context))
        } else {
            throw StepFailure("the step says neither delivery nor backendCall")
        }
    }

    var description: String {
        switch subject {
        case .delivery(let criteria): return criteria.description
        case .backendCall(let criteria): return criteria.description
        }
    }

    /// The matching ones, described (records newest first, calls oldest first).
    func matches() throws(StepFailure) -> [String] {
        switch subject {
        case .delivery(let criteria):
            return try records(criteria.filter(sinceMs: since)).filter(criteria.matches).map(DeliveryCriteria.describe)
        case .backendCall(let criteria):
            return try calls(criteria).filter { criteria.matches($0, sinceMs: since) }.map(\.description)
        }
    }

    /// What there was instead, for the report: the device's (or app's) recent ones.
    func seen() throws(StepFailure) -> String {
        let lines: [String]
        switch subject {
        case .delivery(let criteria):
            let near = PushFilter(token: criteria.token, deviceID: criteria.deviceID, sinceMs: since)
            lines = try records(near).prefix(6).map(DeliveryCriteria.describe)
        case .backendCall(let criteria):
            var near = criteria
            (near.token, near.userID, near.status, near.state, near.url) = (nil, nil, nil, nil, nil)
            lines = try calls(near).filter { near.matches($0, sinceMs: since) }.suffix(6).map(\.description)
        }
        return lines.isEmpty ? "nothing" : lines.joined(separator: "\n")
    }

    private func records(_ filter: PushFilter) throws(StepFailure) -> [PushRecord] {
        try admin("listing notification records") { () throws(EmulatorAdminError) in try context.api.notifications(filter, limit: Self.listLimit) }
    }

    private func calls(_ criteria: CallCriteria) throws(StepFailure) -> [BackendCall] {
        try admin("listing backend calls") { () throws(EmulatorAdminError) in
            try context.api.backendCalls(deviceID: criteria.deviceID, hook: criteria.hook, bundleID: criteria.bundleID)
        }
    }
}
