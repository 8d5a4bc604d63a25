// LiveActivityBudget: how many ActivityKit updates and widget reloads the device lets through
// per period, and the numbers chosen for it. Apple publishes no figures, only that priority-10
// Live Activity updates and widget pushes draw on budgets; going over throttles, never errors.

/// The numbers the device's budgets use. Apple publishes none: the defaults are figures
/// commonly quoted by third parties, and each is a parameter.
public struct LiveActivityPolicy: Sendable, Equatable {
    /// Priority-10 updates one activity may show per `updateWindowMs` (priority 5 does not
    /// count). 15 an hour is the figure usually quoted.
    public var updatesPerWindow: Int
    /// The same with NSSupportsLiveActivitiesFrequentUpdates declared and left on by the user.
    /// Apple says only that the budget is higher; 60 is a chosen figure.
    public var updatesPerWindowWithFrequentUpdates: Int
    public var updateWindowMs: Int64
    /// Widget (or control) reloads by push one app may have per `widgetWindowMs`. Apple says
    /// the budget is daily; 40 a day is the commonly quoted timeline reload figure.
    public var widgetPushesPerWindow: Int
    public var widgetWindowMs: Int64
    /// Token length in bytes, as for device tokens.
    public var tokenByteCount: Int
    /// Activities one device holds at once, running or ended and still on its Lock Screen,
    /// across its apps. iOS refuses a start past its own maxima (per app and per device, not
    /// published: ActivityKit's `targetMaximumExceeded`, `globalMaximumExceeded`); this bound
    /// also keeps a device's activities, and what a change to them costs, bounded.
    public var maxHeld: Int
    /// Dismissed activities kept (listed, and named in explanations) before the oldest go.
    public var dismissedKept: Int
    /// Ended tokens remembered so that a push to one says why it went nowhere.
    public var endedTokensKept: Int
    /// Drop attributes or content state holding a `null` or an ISO-8601 date string, as an
    /// app whose fields are not optional (or whose dates are `Date`s) fails to decode them.
    /// Off by default: the emulator does not know the app's types, and for an optional field
    /// (`String?`) or a `String` holding a date the device shows them (`--live-activity-strict-decoding`).
    public var strictDecoding: Bool

    public static let hourMs: Int64 = 3_600_000
    public static let dayMs: Int64 = 86_400_000

    public init(
        updatesPerWindow: Int = 15, updatesPerWindowWithFrequentUpdates: Int = 60, updateWindowMs: Int64 = hourMs,
        widgetPushesPerWindow: Int = 40, widgetWindowMs: Int64 = dayMs, tokenByteCount: Int = DeviceRegistry.defaultTokenByteCount,
        maxHeld: Int = 100, dismissedKept: Int = 100, endedTokensKept: Int = 1000, strictDecoding: Bool = false
    ) {
        self.maxHeld = maxHeld
        self.updatesPerWindow = updatesPerWindow
        self.updatesPerWindowWithFrequentUpdates = updatesPerWindowWithFrequentUpdates
        self.updateWindowMs = updateWindowMs
        self.widgetPushesPerWindow = widgetPushesPerWindow
        self.widgetWindowMs = widgetWindowMs
        self.tokenByteCount = tokenByteCount
        self.dismissedKept = dismissedKept
        self.endedTokensKept = endedTokensKept
        self.strictDecoding = strictDecoding
    }

    /// The hourly update limit for an app, frequent updates on or off.
    public func updateLimit(frequentUpdates: Bool) -> Int {
        frequentUpdates ? updatesPerWindowWithFrequentUpdates : updatesPerWindow
    }
}

/// A rolling-window budget: the times something was let through in the last window. The
/// limit is given at each question rather than kept, since the user can turn frequent updates
/// off while an activity runs. Holds at most the largest limit asked about.
public struct LiveActivityBudget: Sendable, Equatable {
    /// Ascending.
    public private(set) var spentAtMs: [Int64] = []

    public init(spentAtMs: [Int64] = []) { self.spentAtMs = spentAtMs.sorted() }

    /// How many were let through in the window ending now.
    public func used(nowMs: Int64, windowMs: Int64) -> Int {
        spentAtMs.count - (spentAtMs.firstIndex { $0 > nowMs - windowMs } ?? spentAtMs.count)
    }

    public func allows(limit: Int, nowMs: Int64, windowMs: Int64) -> Bool { used(nowMs: nowMs, windowMs: windowMs) < limit }

    /// The soonest time one more is let through: `nowMs` if now, nil if never (limit 0).
    public func nextFreeMs(limit: Int, nowMs: Int64, windowMs: Int64) -> Int64? {
        guard limit > 0 else { return nil }
        let inWindow = spentAtMs.suffix(used(nowMs: nowMs, windowMs: windowMs))
        guard inWindow.count >= limit else { return nowMs }
        // Once all but limit - 1 of those in the window have left it.
        return inWindow[inWindow.startIndex + (inWindow.count - limit)] + windowMs
    }

    /// Counts one at `nowMs`, forgetting those out of the window.
    public mutating func spend(nowMs: Int64, windowMs: Int64) {
        spentAtMs.removeFirst(spentAtMs.count - used(nowMs: nowMs, windowMs: windowMs))
        spentAtMs.append(nowMs)
    }
}

/// What reloads widgets (or controls) by push: WidgetKit's `widgets` push type and the
/// `controls` one, both `{"aps": {"content-changed": true}}`.
public enum WidgetPushKind: String, Sendable, CaseIterable {
    case widgets, controls
}

/// An app's widget (or control) pushes: the budget, and whether a throttled reload waits.
/// A reload carries no data, so waiting reloads are one.
public struct WidgetPushState: Sendable, Equatable {
    public var budget = LiveActivityBudget()
    /// A throttled reload waits for the budget (later throttled pushes join it).
    public var reloadPending = false
    public var reloads = 0

    public init() {}
}
