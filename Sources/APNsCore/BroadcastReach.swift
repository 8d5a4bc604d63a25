/// What one broadcast did on the devices: the activities subscribed to its channel, how many
/// showed it, and each delivery (the first `maxDeliveries`; the rest are only counted). The
/// journal record of the broadcast holds it; a channel's stored message reaching an activity
/// later (it subscribed, or its device came back online) adds to it.
public struct BroadcastReach: Sendable, Equatable {
    public struct Delivery: Sendable, Equatable {
        public var deviceID: String
        public var activityID: String?
        public var outcome: DeliveryOutcome
        public var explanation: String
        /// From the channel's store, after the broadcast itself (a late subscriber, a device
        /// back online).
        public var fromStore: Bool

        public init(deviceID: String, activityID: String?, outcome: DeliveryOutcome, explanation: String, fromStore: Bool = false) {
            self.deviceID = deviceID
            self.activityID = activityID
            self.outcome = outcome
            self.explanation = explanation
            self.fromStore = fromStore
        }
    }

    /// Deliveries kept one by one in the record; a broadcast to 10,000 activities keeps counts.
    public static let maxDeliveries = 100

    public var channelID: String
    /// Subscribed activities the broadcast was for (each counted once in `outcomes`).
    public var subscribers = 0
    /// Of those, the ones that showed it.
    public var reached = 0
    public var outcomes: [DeliveryOutcome: Int] = [:]
    public var deliveries: [Delivery] = []
    /// Deliveries counted but not kept in `deliveries`.
    public var omitted = 0

    public init(channelID: String) { self.channelID = channelID }

    public mutating func add(_ delivery: Delivery) {
        subscribers += 1
        if delivery.outcome == .delivered { reached += 1 }
        outcomes[delivery.outcome, default: 0] += 1
        if deliveries.count < Self.maxDeliveries { deliveries.append(delivery) } else { omitted += 1 }
    }

    /// Counts `delivery` and puts it where the entry at `index` was.
    private mutating func add(_ delivery: Delivery, at index: Int) {
        subscribers += 1
        if delivery.outcome == .delivered { reached += 1 }
        outcomes[delivery.outcome, default: 0] += 1
        deliveries[index] = delivery
    }

    /// A delivery whose outcome changed later (an activity offline at the broadcast, counted
    /// as `previously`, took the stored message when its device came back).
    public mutating func settle(_ delivery: Delivery, previously: DeliveryOutcome) {
        // The earlier delivery is forgotten only when it was counted: in the list, or (the
        // list being full) among the omitted ones.
        let index = deliveries.firstIndex { $0.deviceID == delivery.deviceID && $0.activityID == delivery.activityID }
        if let count = outcomes[previously], index != nil || omitted > 0 {
            outcomes[previously] = count > 1 ? count - 1 : nil
            subscribers -= 1
            if previously == .delivered { reached -= 1 }
            if let index {
                // In place of the earlier entry, so the list keeps the broadcast's order.
                add(delivery, at: index)
                return
            }
            omitted -= 1
        }
        add(delivery)
    }

    /// The channel stopped keeping the message (it expired, or a newer broadcast replaced it):
    /// the activities waiting for it (their devices offline) will not get it.
    /// Returns how many activities were waiting for it.
    @discardableResult
    public mutating func leaveStore(as outcome: DeliveryOutcome, explanation: String) -> Int {
        guard let waiting = outcomes.removeValue(forKey: .stored) else { return 0 }
        outcomes[outcome, default: 0] += waiting
        for index in deliveries.indices where deliveries[index].outcome == .stored {
            deliveries[index].outcome = outcome
            deliveries[index].explanation = explanation
        }
        return Int(waiting)
    }

    /// How the record's outcome reads: delivered when one activity showed it; stored while
    /// it waits for subscribers (`keptForLater`: a Most-Recent-Message-Stored channel);
    /// coalesced when a newer update replaced it everywhere (in the channel's store, or while
    /// throttled); `otherwise` when no activity took it at all (expired).
    public func summaryOutcome(keptForLater: Bool, otherwise: DeliveryOutcome = .expired) -> DeliveryOutcome {
        if reached > 0 { return .delivered }
        if outcomes[.stored] != nil || keptForLater { return .stored }
        if outcomes[.throttled] != nil { return .throttled }
        if outcomes[.ignored] != nil { return .ignored }
        if outcomes[.coalesced] != nil { return .coalesced }
        return otherwise
    }
}

/// The journal holds reaches boxed, so a device push's record stays one pointer larger.
public final class BroadcastReachBox: Sendable {
    public let reach: BroadcastReach
    public init(_ reach: BroadcastReach) { self.reach = reach }
}

extension NotificationRecord {
    /// What a broadcast reached (broadcast records only).
    public var broadcast: BroadcastReach? {
        get { delivery.broadcast }
        set { delivery.broadcast = newValue }
    }
}

extension RecordDelivery {
    public var broadcast: BroadcastReach? {
        get { broadcastBox?.reach }
        set { broadcastBox = newValue.map(BroadcastReachBox.init) }
    }
}
