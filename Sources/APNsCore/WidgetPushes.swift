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
    /// The records of the throttled pushes a waiting reload stands for, by device, kind and
    /// app, so that they say so when it runs. Memory only (after a restart, or on another
    /// instance, the reload still runs; its records keep saying it waits). At most
    /// `maxWaitingRecords` per reload: the newest.
    var waitingRecords: [WaitingReload: [UInt64]] = [:]
    static let maxWaitingRecords = 100

    struct WaitingReload: Hashable {
        let deviceID: String
        let kind: WidgetPushKind
        let bundleID: String
    }

    public init() {}

    /// The state of an app's widget (or control) reloads on a device (nil: no such push yet).
    public func state(deviceID: String, bundleID: String, kind: WidgetPushKind) -> WidgetPushState? {
        books[deviceID]?.widgetPushState(kind: kind, bundleID: bundleID)
    }

    /// A push reaches the device: a reload, a throttled one waiting, or nothing. `sequence`:
    /// the push's record, which a throttled reload names when it runs.
    mutating func receive(
        kind: WidgetPushKind, deviceID: String, bundleID: String, payload: JSONValue, priority: Int, nowMs: Int64,
        policy: LiveActivityPolicy, sequence: UInt64
    ) -> LiveActivityReceipt {
        var book = books[deviceID] ?? LiveActivityBook(policy: policy)
        let receipt = book.receiveWidgetPush(kind: kind, bundleID: bundleID, payload: payload, priority: priority, nowMs: nowMs)
        books[deviceID] = book
        if tracksChanges { changedDevices.insert(deviceID) }
        if case .throttled = receipt.outcome {
            let key = WaitingReload(deviceID: deviceID, kind: kind, bundleID: bundleID)
            waitingRecords[key, default: []].append(sequence)
            if waitingRecords[key]!.count > Self.maxWaitingRecords { waitingRecords[key]!.removeFirst() }
        }
        return receipt
    }

    /// Time passes: a reload that waited goes through once the budget allows. Returns the
    /// records of the pushes each reload that ran stood for.
    mutating func tick(nowMs: Int64) -> [(reload: WaitingReload, records: [UInt64])] {
        var ran: [(reload: WaitingReload, records: [UInt64])] = []
        for deviceID in Array(books.keys) {
            guard var book = books[deviceID], let next = book.nextDeadlineMs(nowMs: nowMs), next <= nowMs else { continue }
            for change in book.tick(nowMs: nowMs) {
                guard case .reloaded(let kind, let bundleID) = change else { continue }
                let key = WaitingReload(deviceID: deviceID, kind: kind, bundleID: bundleID)
                ran.append((key, waitingRecords.removeValue(forKey: key) ?? []))
            }
            books[deviceID] = book
            if tracksChanges { changedDevices.insert(deviceID) }
        }
        return ran
    }

    /// A device is gone: so are its budgets.
    mutating func removeDevice(_ deviceID: String) {
        waitingRecords = waitingRecords.filter { $0.key.deviceID != deviceID }
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
            priority: notification.priority, nowMs: nowMs, policy: liveActivities.policy, sequence: notification.sequence)
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

    /// Widget reloads that waited for their budget and ran now: the throttled pushes they
    /// stood for are delivered.
    mutating func runWaitingWidgetReloads(nowMs: Int64) {
        for (reload, sequences) in widgetPushes.tick(nowMs: nowMs) {
            let what = reload.kind == .widgets ? "widget" : "control"
            for sequence in sequences {
                counters.countOutcome(.delivered)
                counters.countWidgetPush(kind: reload.kind, outcome: .delivered)
                records.update(sequence: sequence) {
                    $0.outcome = .delivered
                    $0.explanation =
                        "delivered: \(reload.bundleID)'s \(what) timelines reloaded at \(LiveActivityTime.time(nowMs)), when the budget allowed (it was throttled)"
                        + (sequences.count > 1 ? "; one reload for the \(sequences.count) pushes that waited" : "")
                    $0.noteTransition(DeliveryLog.Step(.delivered, afterStorage: false), atMs: nowMs)
                    $0.deliveredAtMs = nowMs
                }
            }
        }
    }
}
