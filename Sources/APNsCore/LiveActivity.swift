// LiveActivity: one Live Activity on a simulated device (its data, tokens, life cycle and
// update budget), the limits Apple documents for it, and the words a book of them answers in
// (outcomes, and the changes an observer sees). Pure: times are ms since 1970 passed in.

/// Apple's documented limits on a Live Activity.
public enum LiveActivityLimits {
    /// ActivityKit: "A Live Activity can be active for up to eight hours unless its app or a
    /// person ends it before this limit. After the eight-hour limit, the system automatically
    /// ends it."
    public static let maxActiveMs: Int64 = 8 * 3_600_000
    /// ActivityKit: once ended, "the Live Activity remains on the Lock Screen until a person
    /// removes it or for up to four additional hours before the system removes it, whichever
    /// comes first" (twelve hours on the Lock Screen in all). Also the latest `dismissal-date`
    /// honoured.
    public static let maxEndedVisibleMs: Int64 = 4 * 3_600_000
    /// ActivityKit: the static and dynamic data (attributes and content state, encoded) can't
    /// exceed 4 KB; the device refuses larger.
    public static let maxDataBytes = 4096
}

/// ActivityKit's `ActivityState`, without `pending` (scheduled starts are not modelled).
public enum LiveActivityState: String, Sendable, CaseIterable {
    /// Visible, and takes updates.
    case active
    /// Visible and takes updates, but past its stale date: shown as out of date.
    case stale
    /// Still on the Lock Screen, no longer updated.
    case ended
    /// Gone: a person or the system removed it.
    case dismissed
}

/// Who started an activity.
public enum LiveActivityStarter: String, Sendable {
    /// `Activity.request` in the app.
    case app
    /// A push to the app's push-to-start token.
    case push
}

/// Why an activity ended.
public enum LiveActivityEnding: String, Sendable {
    /// An `end` event (token or broadcast).
    case push
    /// `Activity.end` in the app.
    case app
    /// Its eight hours were up.
    case lifetime
    /// A person removed it while it ran.
    case user
    /// The system took it away while it ran (its app was removed).
    case system
}

/// Who removed an activity from the screen.
public enum LiveActivityRemoval: String, Sendable {
    /// A person swiped it away.
    case user
    /// Its dismissal date (or the four hours after the end) came.
    case system
}

/// The two kinds of ActivityKit token.
public enum LiveActivityTokenKind: String, Sendable {
    /// One per app and attributes type (`Activity<T>.pushToStartToken`).
    case pushToStart
    /// One per activity started with token push (`Activity.pushToken`).
    case update
}

/// How an activity takes its updates from a server.
public enum LiveActivityUpdates: Sendable, Equatable {
    /// Only from the app itself.
    case none
    /// By push to an update token the system issues (`pushType: .token`).
    case token
    /// By broadcast on a channel (`pushType: .channel(id)`).
    case channel(String)
}

/// What a push (or the app's call) came to. APNs answered 200 whatever it is.
public enum LiveActivityOutcome: Sendable, Equatable {
    /// Shown.
    case applied
    /// Dropped as not for anything current (unknown token, ended activity, older timestamp…).
    case ignored(String)
    /// Over the budget: not shown now; kept to show when the budget allows.
    case throttled(String)
    /// Dropped as undecodable or not allowed (bad payload, too large, undeclared type…).
    case refused(String)

    /// The plain-words reason (nil when applied).
    public var explanation: String? {
        switch self {
        case .applied: return nil
        case .ignored(let text), .throttled(let text), .refused(let text): return text
        }
    }
}

/// What an observer of the device sees, in order: what a later step turns into device frames
/// and calls to the app's backend.
public enum LiveActivityChange: Sendable, Equatable {
    case started(activityID: String, bundleID: String, attributesType: String, by: LiveActivityStarter, alert: JSONValue?)
    /// New content shown (`alert`: the push lit the screen with it).
    case updated(activityID: String, alert: JSONValue?)
    case stale(activityID: String)
    case ended(activityID: String, by: LiveActivityEnding, atMs: Int64, alert: JSONValue?)
    case dismissed(activityID: String, by: LiveActivityRemoval, atMs: Int64)
    /// A new token (first issue or rotation); the app would send it to its server.
    case tokenIssued(kind: LiveActivityTokenKind, token: String, bundleID: String, attributesType: String, activityID: String?)
    /// A token that no longer leads anywhere (replaced, or its activity is over).
    case tokenEnded(kind: LiveActivityTokenKind, token: String, activityID: String?)
    /// A widgets or controls push reloaded the app's timelines.
    case reloaded(kind: WidgetPushKind, bundleID: String)
}

/// One push's (or call's) result: what came of it, for which activity, and what changed.
public struct LiveActivityReceipt: Sendable, Equatable {
    public var outcome: LiveActivityOutcome
    /// The activity concerned (nil: none was found, or it was not about one).
    public var activityID: String?
    public var changes: [LiveActivityChange]

    public init(outcome: LiveActivityOutcome, activityID: String? = nil, changes: [LiveActivityChange] = []) {
        self.outcome = outcome
        self.activityID = activityID
        self.changes = changes
    }
}

/// A priority-10 update over the budget, waiting to be shown.
public struct LiveActivityDeferredUpdate: Sendable, Equatable {
    public var payload: LiveActivityPayload
    public var receivedAtMs: Int64
    /// The journal record that says it waits (nil for a state kept before records were linked).
    public var origin: LiveActivityUpdateOrigin?

    public init(payload: LiveActivityPayload, receivedAtMs: Int64, origin: LiveActivityUpdateOrigin? = nil) {
        self.payload = payload
        self.receivedAtMs = receivedAtMs
        self.origin = origin
    }
}

/// Where an update came from: a push to the activity's token (its record's sequence) or a
/// broadcast on its channel (the broadcast's `StoredBroadcast.key`; its record lists every activity).
public enum LiveActivityUpdateOrigin: Sendable, Equatable {
    case push(sequence: UInt64)
    case broadcast(key: String)
}

/// A throttled update that stopped waiting, and what became of it: shown (`delivered`),
/// replaced by a newer one (`coalesced`), or never shown (`ignored`).
public struct LiveActivitySettledUpdate: Sendable, Equatable {
    public var activityID: String
    public var origin: LiveActivityUpdateOrigin
    public var outcome: DeliveryOutcome
    public var explanation: String
}

/// One Live Activity of one app on one device. A value: the book keeps the current one.
public struct LiveActivity: Sendable, Equatable {
    /// ActivityKit's `Activity.id`: an uppercase UUID.
    public var activityID: String
    public var bundleID: String
    public var attributesType: String
    /// The static data (an object), fixed at the start.
    public var attributes: JSONValue
    /// The dynamic data (an object), the newest shown.
    public var contentState: JSONValue
    /// As of the last time the book looked (`advance`); `state(atMs:)` says for any time.
    public var state: LiveActivityState
    /// The current update token (token push only).
    public var pushToken: String?
    /// The broadcast channel it subscribes to (channel push only).
    public var channelID: String?
    public var relevanceScore: Double?
    public var staleDateMs: Int64?
    /// Once ended: when it leaves the Lock Screen.
    public var dismissalDateMs: Int64?
    public var startedAtMs: Int64
    public var endedAtMs: Int64?
    public var endedBy: LiveActivityEnding?
    public var dismissedAtMs: Int64?
    public var dismissedBy: LiveActivityRemoval?
    /// The newest `timestamp` shown, seconds since 1970 (nil: none yet, as after the app's
    /// own start).
    public var newestTimestamp: Double?
    /// Updates shown since the start (the end's content not counted).
    public var updates: Int
    public var startedBy: LiveActivityStarter
    /// Priority-10 updates shown in the budget's window.
    public var budget: LiveActivityBudget
    /// The newest throttled update, waiting for the budget.
    public var deferred: LiveActivityDeferredUpdate?
    /// The key (`StoredBroadcast.key`) of the last broadcast it took (so a channel's stored
    /// message is not shown twice, for example when the device comes back online).
    public var lastBroadcastKey: String?

    public init(
        activityID: String, bundleID: String, attributesType: String, attributes: JSONValue, contentState: JSONValue,
        startedAtMs: Int64, startedBy: LiveActivityStarter, pushToken: String? = nil, channelID: String? = nil,
        relevanceScore: Double? = nil, staleDateMs: Int64? = nil, newestTimestamp: Double? = nil
    ) {
        self.activityID = activityID
        self.bundleID = bundleID
        self.attributesType = attributesType
        self.attributes = attributes
        self.contentState = contentState
        self.state = .active
        self.pushToken = pushToken
        self.channelID = channelID
        self.relevanceScore = relevanceScore
        self.staleDateMs = staleDateMs
        self.startedAtMs = startedAtMs
        self.startedBy = startedBy
        self.newestTimestamp = newestTimestamp
        self.updates = 0
        self.budget = LiveActivityBudget()
    }

    /// When the system ends it if nobody does: eight hours after the start.
    public var lifetimeEndMs: Int64 { startedAtMs + LiveActivityLimits.maxActiveMs }

    /// Whether it still takes updates (active or stale).
    public var isRunning: Bool { state == .active || state == .stale }

    /// Its state at `nowMs`, from its dates (what `advance` would make it).
    public func state(atMs nowMs: Int64) -> LiveActivityState {
        switch state {
        case .dismissed: return .dismissed
        case .ended: return nowMs >= (dismissalDateMs ?? .max) ? .dismissed : .ended
        case .active, .stale:
            if nowMs >= lifetimeEndMs {
                return nowMs >= lifetimeEndMs + LiveActivityLimits.maxEndedVisibleMs ? .dismissed : .ended
            }
            return nowMs >= (staleDateMs ?? .max) ? .stale : .active
        }
    }

    /// Brings the state up to `nowMs`: stale past the stale date, ended after eight hours,
    /// removed once the time on the Lock Screen is over. Returns what an observer saw.
    mutating func advance(to nowMs: Int64) -> [LiveActivityChange] {
        var changes: [LiveActivityChange] = []
        if isRunning, nowMs >= lifetimeEndMs {
            changes += end(by: .lifetime, atMs: lifetimeEndMs, alert: nil, dismissalDateMs: nil)
        }
        if state == .ended, let removal = dismissalDateMs, nowMs >= removal {
            changes += remove(by: .system, atMs: removal)
        }
        if isRunning {
            let now = state(atMs: nowMs)
            if now != state {
                state = now
                if now == .stale { changes.append(.stale(activityID: activityID)) }
            }
        }
        return changes
    }

    /// Ends it at `atMs`; it stays on the Lock Screen until `dismissalDateMs`, at most four
    /// hours on (a date at or before `atMs` removes it at once).
    mutating func end(
        by ending: LiveActivityEnding, atMs: Int64, alert: JSONValue?, dismissalDateMs requested: Int64?
    )
        -> [LiveActivityChange]
    {
        state = .ended
        endedAtMs = atMs
        endedBy = ending
        deferred = nil
        let latest = atMs + LiveActivityLimits.maxEndedVisibleMs
        dismissalDateMs = min(requested ?? latest, latest)
        var changes: [LiveActivityChange] = [.ended(activityID: activityID, by: ending, atMs: atMs, alert: alert)]
        if let removal = dismissalDateMs, removal <= atMs { changes += remove(by: .system, atMs: atMs) }
        return changes
    }

    /// Takes it off the screen for good.
    mutating func remove(by removal: LiveActivityRemoval, atMs: Int64) -> [LiveActivityChange] {
        if isRunning {
            endedAtMs = atMs
            endedBy = removal == .user ? .user : .system
        }
        state = .dismissed
        dismissedAtMs = atMs
        dismissedBy = removal
        deferred = nil
        return [.dismissed(activityID: activityID, by: removal, atMs: atMs)]
    }

    /// Shows an update's content (`advance` then says whether it is already stale).
    mutating func show(_ payload: LiveActivityPayload) {
        if let state = payload.contentState { contentState = state }
        // Each update brings its own stale date and relevance (ActivityContent), none when absent.
        staleDateMs = payload.staleDateMs
        relevanceScore = payload.relevanceScore
        newestTimestamp = max(newestTimestamp ?? payload.timestamp, payload.timestamp)
        updates += 1
        state = .active
    }

    /// The sentence for a push that came after the end.
    var endedExplanation: String {
        switch endedBy {
        case .lifetime?, nil, .push?, .app?: return "ignored: \(howItEnded); pushes after the end are ignored"
        case .user?, .system?: return "ignored: \(howItEnded)"
        }
    }

    /// How it ended, for the app's own call to end it again.
    var howItEnded: String {
        let when = LiveActivityTime.time(endedAtMs ?? startedAtMs)
        switch endedBy {
        case .lifetime?: return "the activity ended at \(when) (its 8 hours were up)"
        case .user?: return "the activity was dismissed by the user at \(when)"
        case .system?: return "the activity was removed at \(when)"
        default: return "the activity ended at \(when)"
        }
    }
}
