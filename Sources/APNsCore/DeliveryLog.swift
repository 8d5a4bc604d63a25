/// A notification's life as Apple's Push Notifications Console shows it for a development push
/// looked up by its `apns-unique-id`: received, answered, and each delivery state it went
/// through with when, under the console's names.
public enum DeliveryLog {
    public struct Entry: Sendable, Equatable {
        public var atMs: Int64
        /// The emulator's word: `received`, `accepted`, `refused`, or a delivery outcome.
        public var state: String
        /// What the console calls it.
        public var console: String
        public var note: String?
    }

    /// The console's categories of delivery states, by its names (also `/metrics` labels).
    public enum Category: String, Sendable, CaseIterable {
        case storedOffline = "Stored: device offline"
        case storedForPower = "Stored for power"
        case delivered = "Delivered"
        case deliveredFromStorage = "Delivered from storage"
        case expired = "Discarded: expired"
        case replaced = "Discarded: replaced by a newer notification"
        case throttled = "Discarded: throttled"
        case unregistered = "Discarded: unregistered"
        case disabled = "Discarded: disabled"
        case notUsed = "Discarded: not used by the device"
        case refused = "Discarded"

        /// The category of entering `outcome`; `afterStorage`: the notification was stored first.
        /// A discard by the system is "unregistered" when the app was gone, else "disabled"
        /// (permission, settings): only the explanation tells which.
        public init(_ outcome: DeliveryOutcome, afterStorage: Bool, explanation: String) {
            switch outcome {
            case .rejected: self = .refused
            case .pending, .deferred: self = .storedForPower
            case .stored: self = .storedOffline
            case .delivered: self = afterStorage ? .deliveredFromStorage : .delivered
            case .expired: self = .expired
            case .coalesced: self = .replaced
            case .throttled: self = .throttled
            case .droppedBySystem:
                self = explanation.contains("uninstalled") || explanation.contains("no longer installed") ? .unregistered : .disabled
            case .ignored: self = .notUsed
            }
        }

        var ordinal: Int { Self.allCases.firstIndex(of: self) ?? 0 }
    }

    public static func entries(for record: NotificationRecord) -> [Entry] {
        var entries = [Entry(atMs: record.receivedAtMs, state: "received", console: "Received", note: nil)]
        let answeredAt = record.respondedAtMs ?? record.receivedAtMs
        if record.status == 200 {
            entries.append(Entry(atMs: answeredAt, state: "accepted", console: "Accepted", note: "200"))
        } else {
            let answer = record.reason.map { "\(record.status) \($0)" } ?? "\(record.status)"
            entries.append(Entry(atMs: answeredAt, state: "refused", console: "Discarded: \(record.reason ?? "refused")", note: answer))
        }
        var wasStored = false
        for (index, transition) in record.transitions.enumerated() {
            let last = index == record.transitions.count - 1
            let category = Category(transition.outcome, afterStorage: wasStored, explanation: record.explanation)
            entries.append(
                Entry(atMs: transition.atMs, state: transition.outcome.rawValue, console: category.rawValue, note: last ? record.explanation : nil))
            if transition.outcome == .stored { wasStored = true }
        }
        return entries
    }
}
