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
            entries.append(
                Entry(
                    atMs: transition.atMs, state: transition.outcome.rawValue,
                    console: consoleName(transition.outcome, afterStorage: wasStored, explanation: record.explanation),
                    note: last ? record.explanation : nil))
            if transition.outcome == .stored { wasStored = true }
        }
        return entries
    }

    /// The console's categories, by Apple's names ("stored because the device was offline",
    /// "delivered from storage", "discarded because unregistered"…).
    static func consoleName(_ outcome: DeliveryOutcome, afterStorage: Bool, explanation: String) -> String {
        switch outcome {
        case .rejected: "Discarded"
        case .pending: "Stored for power"
        case .stored: "Stored: device offline"
        case .delivered: afterStorage ? "Delivered from storage" : "Delivered"
        case .expired: "Discarded: expired"
        case .coalesced: "Discarded: replaced by a newer notification"
        case .throttled: "Discarded: throttled"
        case .deferred: "Stored for power"
        case .droppedBySystem:
            explanation.contains("uninstalled") || explanation.contains("no longer installed")
                ? "Discarded: unregistered" : "Discarded: disabled"
        case .ignored: "Discarded: not used by the device"
        }
    }
}
