// IgnoredPushes: pushes APNs answered 200 that the device then ignored (a Live Activity start
// of an undeclared type, an update to an ended activity, a widgets push without
// content-changed…). Apple tells the provider nothing of them, so `GET /api/v1/checks` lists
// them as findings, and `/metrics` counts Live Activity pushes by what the device did.

/// One push the device ignored, and why in its own words.
public struct IgnoredPush: Sendable, Equatable {
    public var sequence: UInt64
    public var apnsID: String
    public var deviceID: String
    public var bundleID: String
    public var pushType: String
    public var explanation: String
    public var atMs: Int64

    public init(
        sequence: UInt64, apnsID: String, deviceID: String, bundleID: String, pushType: String, explanation: String, atMs: Int64
    ) {
        self.sequence = sequence
        self.apnsID = apnsID
        self.deviceID = deviceID
        self.bundleID = bundleID
        self.pushType = pushType
        self.explanation = explanation
        self.atMs = atMs
    }
}

extension World {
    /// At most this many ignored pushes are kept for `GET /api/v1/checks` (the counter keeps
    /// counting).
    public static let ignoredPushesKeep = 1_000

    /// Counts an ignored push and keeps it (the newest `ignoredPushesKeep`) for the checks.
    public mutating func noteIgnoredPush(_ push: IgnoredPush) {
        counters.ignoredPushes += 1
        if ignoredPushes.count >= Self.ignoredPushesKeep { ignoredPushes.removeFirst(ignoredPushes.count - Self.ignoredPushesKeep + 1) }
        ignoredPushes.append(push)
    }

    /// What became of one Live Activity push (or of one activity a broadcast reached): counted
    /// by outcome; an ignored one is a finding, described by `finding` only then.
    public mutating func noteLiveActivityOutcome(_ outcome: DeliveryOutcome, finding: () -> IgnoredPush) {
        guard outcome != .pending, outcome != .rejected else { return }
        counters.countLiveActivityPush(outcome)
        if outcome == .ignored { noteIgnoredPush(finding()) }
    }
}

extension World {
    /// After a restart (`--state-dir`): what `GET /api/v1/checks` reports, rebuilt from the
    /// journal kept (`records`, oldest first), whose records say which pushes were ignored and
    /// which deliveries crossed accounts: a check that failed before the restart still fails.
    /// A broadcast's ignored deliveries are not among them (its record holds only counts).
    mutating func restoreChecks(from records: [NotificationRecord]) {
        // Counted in full, but only the newest of each kept: a journal of a million ignored
        // pushes would otherwise shift the kept list a million times at start-up.
        let ignored = records.filter { $0.outcome == .ignored && $0.delivery.broadcastBox == nil && $0.deviceID != nil }
        let crossed = records.filter { $0.crossAccount && $0.addressee != nil && $0.deviceID != nil }
        for record in ignored.suffix(Self.ignoredPushesKeep) {
            noteIgnoredPush(
                IgnoredPush(
                    sequence: record.sequence, apnsID: record.apnsID, deviceID: record.deviceID ?? "", bundleID: record.bundleID ?? "",
                    pushType: record.pushType ?? "", explanation: record.explanation, atMs: Self.settledAtMs(record)))
        }
        for record in crossed.suffix(Self.crossAccountKeep) {
            noteCrossAccountDelivery(
                CrossAccountDelivery(
                    sequence: record.sequence, apnsID: record.apnsID, deviceID: record.deviceID ?? "", bundleID: record.bundleID ?? "",
                    userID: record.userID, addressee: record.addressee ?? "", atMs: record.deliveredAtMs ?? Self.settledAtMs(record)))
        }
        counters.ignoredPushes += UInt64(ignored.count - min(ignored.count, Self.ignoredPushesKeep))
        counters.crossAccountDeliveries += UInt64(crossed.count - min(crossed.count, Self.crossAccountKeep))
    }

    /// When a record's delivery last changed.
    private static func settledAtMs(_ record: NotificationRecord) -> Int64 { record.transitions.last?.atMs ?? record.receivedAtMs }
}
