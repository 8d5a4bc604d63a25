// WidgetPushes: `widgets` and `controls` pushes as a virtual device takes them: WidgetKit
// reloads the app's timelines when the payload says `content-changed`, within the app's daily
// budget (LiveActivityBook.receiveWidgetPush has the rule), and the record says what came of it.

/// Every virtual device's widget and control reload budgets, one book per device that has had
/// such a push. Kept by `--state-dir` and shared with `--redis` in the device's Live Activity
/// row (`LiveActivityRow.widgets`).
public struct WidgetPushWorld: Sendable {
    /// By device id. Only the widget part of each book is used here.
    public internal(set) var books: [String: LiveActivityBook] = [:]
    /// With persistence on: devices whose budgets changed since `takeChangedDevices`.
    public var tracksChanges = false
    var changedDevices: Set<String> = []

    public init() {}

    /// The state of an app's widget (or control) reloads on a device (nil: no such push yet).
    public func state(deviceID: String, bundleID: String, kind: WidgetPushKind) -> WidgetPushState? {
        books[deviceID]?.widgetPushState(kind: kind, bundleID: bundleID)
    }

    /// A push reaches the device: a reload, a throttled one waiting, or nothing.
    mutating func receive(
        kind: WidgetPushKind, deviceID: String, bundleID: String, payload: JSONValue, priority: Int, nowMs: Int64,
        policy: LiveActivityPolicy
    ) -> LiveActivityReceipt {
        var book = books[deviceID] ?? LiveActivityBook(policy: policy)
        let receipt = book.receiveWidgetPush(kind: kind, bundleID: bundleID, payload: payload, priority: priority, nowMs: nowMs)
        books[deviceID] = book
        if tracksChanges { changedDevices.insert(deviceID) }
        return receipt
    }

    /// Time passes: a reload that waited goes through once the budget allows.
    mutating func tick(nowMs: Int64) {
        for deviceID in Array(books.keys) {
            guard var book = books[deviceID], let next = book.nextDeadlineMs(nowMs: nowMs), next <= nowMs else { continue }
            _ = book.tick(nowMs: nowMs)
            books[deviceID] = book
            if tracksChanges { changedDevices.insert(deviceID) }
        }
    }

    /// A device is gone: so are its budgets.
    mutating func removeDevice(_ deviceID: String) {
        guard books.removeValue(forKey: deviceID) != nil else { return }
        if tracksChanges { changedDevices.insert(deviceID) }
    }

    /// Devices whose budgets changed since the last call.
    public mutating func takeChangedDevices() -> Set<String> { takeAll(&changedDevices) }
}

extension WidgetPushKind {
    /// The kind a push type reloads (nil: it is not a widget or control push).
    public init?(_ pushType: PushType) {
        switch pushType {
        case .widgets: self = .widgets
        case .controls: self = .controls
        default: return nil
        }
    }
}

extension World {
    /// A `widgets` or `controls` push a virtual device takes: the app's timelines reload, or
    /// the record says why not (no `content-changed`, over the budget). APNs answered 200
    /// whatever the device does.
    mutating func applyWidgetPush(_ notification: PendingNotification, kind: WidgetPushKind, nowMs: Int64) {
        // Validated as a JSON object on acceptance.
        let json = (try? JSONValue.parse(notification.payload)) ?? .null
        let receipt = widgetPushes.receive(
            kind: kind, deviceID: notification.deviceID, bundleID: notification.bundleID, payload: json,
            priority: notification.priority, nowMs: nowMs, policy: liveActivities.policy)
        let outcome: DeliveryOutcome
        let explanation: String
        switch receipt.outcome {
        case .applied:
            outcome = .delivered
            explanation = "delivered: \(notification.bundleID)'s \(kind == .widgets ? "widget" : "control") timelines reload"
        case .throttled(let why):
            outcome = .throttled
            explanation = why
        case .ignored(let why), .refused(let why):
            outcome = .ignored
            explanation = why
        }
        counters.countOutcome(outcome)
        counters.countWidgetPush(kind: kind, outcome: outcome)
        records.update(sequence: notification.sequence) {
            $0.outcome = outcome
            $0.explanation = explanation
            $0.callbacks = []
            $0.display = Display.none.rawValue
            $0.noteTransition(DeliveryLog.Step(outcome, afterStorage: false), atMs: nowMs)
            if outcome == .delivered { $0.deliveredAtMs = nowMs }
        }
        if outcome == .ignored {
            noteIgnoredPush(
                IgnoredPush(
                    sequence: notification.sequence, apnsID: notification.apnsID, deviceID: notification.deviceID,
                    bundleID: notification.bundleID, pushType: notification.pushType.rawValue, explanation: explanation, atMs: nowMs))
        }
    }
}
