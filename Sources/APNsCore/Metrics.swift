/// Counters kept with the state (so a reset clears them) for `/metrics`.
public struct Counters: Sendable {
    public struct NotificationKey: Hashable, Sendable {
        public var status: Int
        public var reason: String
        public var pushType: String
        public var environment: APNsEnvironment
    }

    public private(set) var notifications: [NotificationKey: UInt64] = [:]
    /// Entries into each delivery state.
    public private(set) var outcomes: [DeliveryOutcome: UInt64] = [:]
    /// Provider-token verifications (ES256 runs), by result: `valid` or the reason.
    public private(set) var jwtVerifications: [String: UInt64] = [:]
    public private(set) var faultsFired: [String: UInt64] = [:]

    public init() {}

    mutating func countNotification(_ r: NotificationRecord) {
        let key = NotificationKey(status: r.status, reason: r.reason ?? "", pushType: r.pushType ?? "", environment: r.environment)
        notifications[key, default: 0] += 1
    }

    mutating func countOutcome(_ outcome: DeliveryOutcome) { outcomes[outcome, default: 0] += 1 }
    public mutating func countVerification(_ result: String) { jwtVerifications[result, default: 0] += 1 }
    public mutating func countFault(_ rule: String) { faultsFired[rule, default: 0] += 1 }
}
