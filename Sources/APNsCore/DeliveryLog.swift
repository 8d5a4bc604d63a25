/// A notification's life as Apple's Push Notifications Console shows it for a development push
/// looked up by its `apns-unique-id`: received, answered, and each delivery step it went
/// through with when, under the console's names.
public enum DeliveryLog {
    public struct Entry: Sendable, Equatable {
        public var atMs: Int64
        /// The emulator's word: `received`, `accepted`, `refused`, or the step's `code`.
        public var state: String
        /// What the console calls it.
        public var console: String
        public var note: String?
    }

    /// A delivery step, as the console names it (also the `/metrics` labels). The record's
    /// outcome says where a notification is; the step says how it got there: a notification
    /// `pending` was batched for power or is on its way to a device's socket, one
    /// `dropped-by-system` was for an uninstalled app or a disabled one.
    public enum Step: String, Sendable, CaseIterable {
        case storedOffline = "Stored: device offline"
        case storedForPower = "Stored for power"
        case deferred = "Deferred"
        case delivered = "Delivered"
        case deliveredFromStorage = "Delivered from storage"
        case acknowledged = "Acknowledged by the device"
        case expired = "Discarded: expired"
        case replaced = "Discarded: replaced by a newer notification"
        case throttled = "Discarded: throttled"
        case unregistered = "Discarded: unregistered"
        case disabled = "Discarded: disabled"
        case notUsed = "Discarded: not used by the device"
        case refused = "Discarded"

        /// The step of entering `outcome` when nothing says more; `afterStorage`: the
        /// notification was stored first.
        public init(_ outcome: DeliveryOutcome, afterStorage: Bool) {
            switch outcome {
            case .rejected: self = .refused
            case .pending: self = .storedForPower
            case .deferred: self = .deferred
            case .stored: self = .storedOffline
            case .delivered: self = afterStorage ? .deliveredFromStorage : .delivered
            case .expired: self = .expired
            case .coalesced: self = .replaced
            case .throttled: self = .throttled
            case .droppedBySystem: self = .disabled
            case .ignored: self = .notUsed
            }
        }

        /// How records store it and the log names it: fixed words, whatever the console's
        /// wording becomes.
        public var code: String {
            switch self {
            case .storedOffline: "stored-offline"
            case .storedForPower: "stored-for-power"
            case .deferred: "deferred"
            case .delivered: "delivered"
            case .deliveredFromStorage: "delivered-from-storage"
            case .acknowledged: "acknowledged"
            case .expired: "expired"
            case .replaced: "replaced"
            case .throttled: "throttled"
            case .unregistered: "unregistered"
            case .disabled: "disabled"
            case .notUsed: "not-used"
            case .refused: "refused"
            }
        }

        public init?(code: String) {
            guard let step = Self.allCases.first(where: { $0.code == code }) else { return nil }
            self = step
        }

        /// Position in `allCases` (the order of the cases above), without searching it.
        var ordinal: Int {
            switch self {
            case .storedOffline: 0
            case .storedForPower: 1
            case .deferred: 2
            case .delivered: 3
            case .deliveredFromStorage: 4
            case .acknowledged: 5
            case .expired: 6
            case .replaced: 7
            case .throttled: 8
            case .unregistered: 9
            case .disabled: 10
            case .notUsed: 11
            case .refused: 12
            }
        }
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
        let transitions = record.transitions
        for (index, transition) in transitions.enumerated() {
            let last = index == transitions.count - 1
            entries.append(
                Entry(
                    atMs: transition.atMs, state: transition.step.code, console: transition.step.rawValue,
                    note: last ? record.fullExplanation : nil))
        }
        // A record without delivery steps (refused, or not routed yet) ends with its answer,
        // which then says why as well.
        if transitions.isEmpty, !record.explanation.isEmpty, var answer = entries.popLast() {
            answer.note = (answer.note.map { $0 + ": " } ?? "") + record.fullExplanation
            entries.append(answer)
        }
        return entries
    }
}
