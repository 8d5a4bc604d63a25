/// Filters for the journal (admin API `GET/DELETE /api/v1/notifications`, `wait`, events).
/// Every field given must match.
public struct NotificationQuery: Sendable, Equatable {
    public var token: String?
    public var topic: String?
    public var pushType: String?
    public var status: Int?
    public var reason: String?
    public var environment: APNsEnvironment?
    public var outcome: DeliveryOutcome?
    /// Received at or after this time (ms since the epoch).
    public var sinceMs: Int64?
    public var apnsID: String?
    public var uniqueID: String?
    public var deviceID: String?
    /// `deviceID` also matches a broadcast's record that reached the device (reads); off for a
    /// delete, which must not remove a broadcast other devices got too.
    public var deviceIDMatchesBroadcasts = true

    public init() {}

    public var isEmpty: Bool { self == NotificationQuery() }

    public func matches(_ r: NotificationRecord) -> Bool {
        if let token, !Hex.equalIgnoringCase(r.token, token) { return false }
        if let topic, r.topic != topic { return false }
        // In any case: a broadcast's record keeps `apns-push-type` as sent (Apple writes
        // `LiveActivity` there), and `pushType=liveactivity` must still find it.
        if let pushType, r.pushType?.lowercased() != pushType.lowercased() { return false }
        if let status, r.status != status { return false }
        if let reason, r.reason != reason { return false }
        if let environment, r.environment != environment { return false }
        if let outcome, r.outcome != outcome { return false }
        if let sinceMs, r.receivedAtMs < sinceMs { return false }
        // Compared without formatting a drawn id (`PushID`): a filter looks at every record.
        if let apnsID, !r.apnsPushID.lowercasedText(is: apnsID.lowercased()) { return false }
        if let uniqueID, !r.uniquePushID.lowercasedText(is: uniqueID.lowercased()) { return false }
        if let deviceID, r.deviceID != deviceID, !(deviceIDMatchesBroadcasts && Self.broadcast(r, reached: deviceID)) { return false }
        return true
    }

    /// A broadcast's record names no device of its own: it matches a device among those its
    /// deliveries list (the first `BroadcastReach.maxDeliveries`), so "what did this device
    /// get" includes the channel updates its activities got.
    static func broadcast(_ r: NotificationRecord, reached deviceID: String) -> Bool {
        guard r.deviceID == nil, let reach = r.broadcast else { return false }
        return reach.deliveries.contains { $0.deviceID == deviceID }
    }

    /// The query parameters `parse` reads (`push-type` is `pushType`'s older spelling).
    public static let parameterNames = [
        "token", "topic", "pushType", "push-type", "status", "reason", "environment", "outcome", "since", "apnsId", "uniqueId",
        "deviceId",
    ]

    /// Parses query parameters (`token`, `topic`, `pushType`, `status`, `reason`,
    /// `environment`, `outcome`, `since`, `apnsId`, `uniqueId`, `deviceId`). `since` is
    /// milliseconds since the epoch or an RFC 3339 time.
    public static func parse(_ parameters: [String: String]) throws(QueryError) -> NotificationQuery {
        var q = NotificationQuery()
        q.token = parameters["token"]
        q.topic = parameters["topic"]
        q.pushType = parameters["pushType"] ?? parameters["push-type"]
        if let text = parameters["status"] {
            guard let value = Int(text) else { throw QueryError("status must be a number such as 200 or 410, not '\(text)'") }
            q.status = value
        }
        q.reason = parameters["reason"]
        if let text = parameters["environment"] {
            guard let value = APNsEnvironment(rawValue: text) else {
                throw QueryError("environment must be sandbox or production, not '\(text)'")
            }
            q.environment = value
        }
        if let text = parameters["outcome"] {
            guard let value = DeliveryOutcome(rawValue: text) else {
                throw QueryError(
                    "outcome must be one of \(DeliveryOutcome.allCases.map(\.rawValue).joined(separator: ", ")), not '\(text)'")
            }
            q.outcome = value
        }
        if let text = parameters["since"] {
            guard let value = Int64(text) ?? RFC3339.parse(text) else {
                throw QueryError("since must be milliseconds since the epoch or an RFC 3339 time, not '\(text)'")
            }
            if Int64(text) != nil, looksLikeSeconds(milliseconds: value) { throw QueryError(secondsGivenForMilliseconds("since", value)) }
            q.sinceMs = value
        }
        q.apnsID = parameters["apnsId"]
        q.uniqueID = parameters["uniqueId"]
        q.deviceID = parameters["deviceId"]
        return q
    }
}

public struct QueryError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
