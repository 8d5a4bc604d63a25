// LiveActivityBook: a device's Live Activities (what each app declares, its push-to-start
// tokens, its activities and their update tokens), and what each push does to them, said in
// plain words when the device drops it. Also the widgets and controls push rule. Pure: times
// are ms since 1970 passed in, tokens and ids come from a seeded generator.

/// An app's Live Activity declarations on the device.
public struct LiveActivityApp: Sendable, Equatable {
    public var bundleID: String
    /// The ActivityAttributes type names it supports, in declared order.
    public var attributesTypes: [String]
    /// NSSupportsLiveActivitiesFrequentUpdates in its Info.plist.
    public var frequentUpdates: Bool
    /// The user's switch for frequent updates (Settings; on by default).
    public var frequentUpdatesEnabled: Bool
    /// The current push-to-start token of each declared type.
    public var pushToStartTokens: [String: String]

    public init(bundleID: String, attributesTypes: [String], frequentUpdates: Bool, frequentUpdatesEnabled: Bool = true) {
        self.bundleID = bundleID
        self.attributesTypes = attributesTypes
        self.frequentUpdates = frequentUpdates
        self.frequentUpdatesEnabled = frequentUpdatesEnabled
        self.pushToStartTokens = [:]
    }

    /// Whether the raised update budget applies.
    public var usesFrequentUpdates: Bool { frequentUpdates && frequentUpdatesEnabled }
}

/// A call to the book that names something it does not have, or is malformed. (What pushes
/// do is never an error: it is an outcome.)
public enum LiveActivityBookError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidBundleID(String)
    case invalidAttributesType(String)
    case unknownApp(String)
    case undeclaredType(bundleID: String, attributesType: String)
    case unknownActivity(String)
    /// The activity has no update token (it takes no token pushes, or it is over).
    case noUpdateToken(activityID: String)

    /// It names an app, type or activity the device does not have (the admin API's 404).
    public var isNotFound: Bool {
        switch self {
        case .unknownApp, .unknownActivity, .undeclaredType: return true
        case .invalidBundleID, .invalidAttributesType, .noUpdateToken: return false
        }
    }

    public var description: String {
        switch self {
        case .invalidBundleID(let id): return "'\(id)' is not a valid bundle id (letters, digits, '-' and '.', e.g. com.example.app)"
        case .invalidAttributesType(let name):
            return "'\(name)' is not an ActivityAttributes type name (1 to 200 characters, no spaces or control characters)"
        case .unknownApp(let id): return "app '\(id)' declares no Live Activities on this device"
        case .undeclaredType(let id, let type): return "app '\(id)' does not declare the ActivityAttributes type \(type)"
        case .unknownActivity(let id): return "no Live Activity with id '\(id)' on this device"
        case .noUpdateToken(let id): return "Live Activity '\(id)' has no update token (it was not started with token push, or it is over)"
        }
    }
}

/// A token that no longer leads anywhere, and the sentence a push to it gets.
struct EndedToken: Sendable {
    var explanation: String
}

/// The Live Activities of one device. A value, like the rest of the world's state; every
/// change returns what an observer saw (`LiveActivityChange`), in order.
public struct LiveActivityBook: Sendable {
    public var policy: LiveActivityPolicy
    /// By bundle id.
    // Internal rather than private for the state codec (`StateCodec.encode(LiveActivityRow)`),
    // which writes and reads a book's fields as they are.
    public internal(set) var apps: [String: LiveActivityApp] = [:]
    var activitiesByID: [String: LiveActivity] = [:]
    /// Current push-to-start tokens: the app and type each starts (derived from `apps`).
    var pushToStartOwners: [String: (bundleID: String, attributesType: String)] = [:]
    /// Current update tokens: the activity each updates (derived from the activities).
    var updateTokenOwners: [String: String] = [:]
    /// Tokens that ended, oldest first, so that a push to one says why (at most
    /// `policy.endedTokensKept`).
    var endedTokens: [String: EndedToken] = [:]
    var endedTokenOrder: [String] = []
    /// By `widgetKey`.
    var widgetPushes: [String: WidgetPushState] = [:]
    /// Throttled updates that stopped waiting since `takeSettledUpdates`, for their records.
    var settledUpdates: [LiveActivitySettledUpdate] = []
    private var random: FastRandom

    public init(policy: LiveActivityPolicy = LiveActivityPolicy(), seed: UInt64? = nil) {
        self.policy = policy
        self.random = seed.map(FastRandom.init(seed:)) ?? FastRandom()
    }

    // MARK: - Reading

    public func activity(_ activityID: String) -> LiveActivity? { activitiesByID[activityID] }

    /// In start order (then id); dismissed ones only when asked (the newest
    /// `policy.dismissedKept` are kept).
    public func activities(bundleID: String? = nil, includeDismissed: Bool = false) -> [LiveActivity] {
        activitiesByID.values
            .filter { (bundleID == nil || $0.bundleID == bundleID) && (includeDismissed || $0.state != .dismissed) }
            .sorted { ($0.startedAtMs, $0.activityID) < ($1.startedAtMs, $1.activityID) }
    }

    public func pushToStartToken(bundleID: String, type: String) -> String? { apps[bundleID]?.pushToStartTokens[type] }

    /// Why a push to `token` (lower-case hex) goes nowhere: it ended (the sentence such a push
    /// is recorded with); nil while it is current, or when the device never had it.
    public func endedExplanation(ofToken token: String) -> String? {
        // An activity that ended keeps its update token while on the Lock Screen; pushes to
        // it are ignored all the same.
        if let activityID = updateTokenOwners[token] {
            guard let activity = activitiesByID[activityID], !activity.isRunning else { return nil }
            return activity.endedExplanation
        }
        guard pushToStartOwners[token] == nil else { return nil }
        return endedTokens[token]?.explanation
    }

    /// The state of an app's widget (`.widgets`) or control (`.controls`) pushes.
    public func widgetPushState(kind: WidgetPushKind, bundleID: String) -> WidgetPushState? {
        widgetPushes[Self.widgetKey(kind, bundleID)]
    }

    /// The soonest time after `nowMs` at which `tick` has something to do (an activity going
    /// stale, ending, leaving the Lock Screen, or a throttled update or reload the budget lets
    /// through); nil when nothing waits.
    public func nextDeadlineMs(nowMs: Int64) -> Int64? {
        var soonest: Int64?
        func consider(_ ms: Int64?) {
            guard let ms else { return }
            soonest = min(soonest ?? ms, max(ms, nowMs))
        }
        for activity in activitiesByID.values {
            switch activity.state {
            case .active, .stale:
                consider(activity.lifetimeEndMs)
                if activity.state == .active { consider(activity.staleDateMs) }
                if activity.deferred != nil {
                    consider(activity.budget.nextFreeMs(limit: updateLimit(activity.bundleID), nowMs: nowMs, windowMs: policy.updateWindowMs))
                }
            case .ended: consider(activity.dismissalDateMs)
            case .dismissed: break
            }
        }
        for state in widgetPushes.values where state.reloadPending {
            consider(state.budget.nextFreeMs(limit: policy.widgetPushesPerWindow, nowMs: nowMs, windowMs: policy.widgetWindowMs))
        }
        return soonest
    }

    // MARK: - Apps and tokens

    /// The app's ActivityAttributes types (and whether it declares frequent updates). Each
    /// new type gets a push-to-start token; a type no longer declared loses its token.
    @discardableResult
    public mutating func declare(
        bundleID: String, types: [String], frequentUpdates: Bool
    ) throws(LiveActivityBookError)
        -> [LiveActivityChange]
    {
        guard DeviceRegistry.isValidBundleID(bundleID) else { throw .invalidBundleID(bundleID) }
        var unique: [String] = []
        for type in types where !unique.contains(type) {
            guard Self.isValidTypeName(type) else { throw .invalidAttributesType(type) }
            unique.append(type)
        }
        var app = apps[bundleID] ?? LiveActivityApp(bundleID: bundleID, attributesTypes: [], frequentUpdates: frequentUpdates)
        app.frequentUpdates = frequentUpdates
        var changes: [LiveActivityChange] = []
        for type in app.attributesTypes where !unique.contains(type) {
            if let token = app.pushToStartTokens.removeValue(forKey: type) {
                changes += endPushToStartToken(token, why: "\(bundleID) no longer declares \(type)")
            }
        }
        for type in unique where app.pushToStartTokens[type] == nil {
            let token = newToken()
            app.pushToStartTokens[type] = token
            pushToStartOwners[token] = (bundleID, type)
            changes.append(.tokenIssued(kind: .pushToStart, token: token, bundleID: bundleID, attributesType: type, activityID: nil))
        }
        app.attributesTypes = unique
        apps[bundleID] = app
        return changes
    }

    /// The user turns frequent updates on or off for the app (Settings).
    public mutating func setFrequentUpdatesEnabled(_ enabled: Bool, bundleID: String) throws(LiveActivityBookError) {
        guard apps[bundleID] != nil else { throw .unknownApp(bundleID) }
        apps[bundleID]?.frequentUpdatesEnabled = enabled
    }

    /// The app is gone (uninstalled): its activities are removed and its tokens end.
    @discardableResult
    public mutating func removeApp(bundleID: String, nowMs: Int64) -> [LiveActivityChange] {
        var changes: [LiveActivityChange] = []
        for activity in activities(bundleID: bundleID) {
            var removed = activity
            changes += removed.remove(by: .system, atMs: nowMs)
            activitiesByID[activity.activityID] = removed
            changes += settle(activity.activityID, nowMs: nowMs, why: "\(bundleID) was removed")
        }
        for (_, token) in apps[bundleID]?.pushToStartTokens.sorted(by: { $0.key < $1.key }) ?? [] {
            changes += endPushToStartToken(token, why: "\(bundleID) was removed")
        }
        apps[bundleID] = nil
        for kind in WidgetPushKind.allCases { widgetPushes[Self.widgetKey(kind, bundleID)] = nil }
        return changes
    }

    /// The system issues a new push-to-start token for the app's type; the old one ends.
    public mutating func rotatePushToStartToken(
        bundleID: String, type: String, nowMs: Int64
    ) throws(LiveActivityBookError)
        -> (token: String, changes: [LiveActivityChange])
    {
        guard let app = apps[bundleID] else { throw .unknownApp(bundleID) }
        guard let old = app.pushToStartTokens[type] else { throw .undeclaredType(bundleID: bundleID, attributesType: type) }
        var changes = endPushToStartToken(old, why: "it was replaced by a newer one at \(LiveActivityTime.time(nowMs)) (rotated)")
        let token = newToken()
        apps[bundleID]?.pushToStartTokens[type] = token
        pushToStartOwners[token] = (bundleID, type)
        changes.append(.tokenIssued(kind: .pushToStart, token: token, bundleID: bundleID, attributesType: type, activityID: nil))
        return (token, changes)
    }

    /// The system issues a new update token for the activity; the old one ends.
    public mutating func rotateUpdateToken(
        activityID: String, nowMs: Int64
    ) throws(LiveActivityBookError)
        -> (token: String, changes: [LiveActivityChange])
    {
        guard var activity = activitiesByID[activityID] else { throw .unknownActivity(activityID) }
        // An activity that is over takes no updates: a new token would lead nowhere.
        guard let old = activity.pushToken, activity.isRunning else { throw .noUpdateToken(activityID: activityID) }
        var changes = endUpdateToken(
            old, activityID: activityID,
            explanation: "ignored: update token \(old) was replaced by a newer one at \(LiveActivityTime.time(nowMs)) (rotated); "
                + "activity \(activityID) now takes updates at its new token")
        let token = newToken()
        activity.pushToken = token
        activitiesByID[activityID] = activity
        updateTokenOwners[token] = activityID
        changes.append(
            .tokenIssued(kind: .update, token: token, bundleID: activity.bundleID, attributesType: activity.attributesType, activityID: activityID))
        return (token, changes)
    }

    // MARK: - The app's own calls

    /// `Activity.request` in the app: throws as it does (an undeclared type, data the widget
    /// could not decode or larger than 4 KB, an unknown channel).
    public mutating func startByApp(
        bundleID: String, attributesType: String, attributes: JSONValue, contentState: JSONValue, updates: LiveActivityUpdates,
        staleDateMs: Int64? = nil, relevanceScore: Double? = nil, nowMs: Int64, channelExists: (String) -> Bool = { _ in true }
    ) throws(LiveActivityRefusal) -> LiveActivityReceipt {
        let attributes = LiveActivityJSON.parsedIfRaw(attributes)
        let contentState = LiveActivityJSON.parsedIfRaw(contentState)
        guard let app = apps[bundleID] else { throw LiveActivityRefusal(.start, "\(bundleID) declares no Live Activities") }
        guard app.attributesTypes.contains(attributesType) else {
            throw LiveActivityRefusal(.start, "attributes-type \(attributesType) is not declared by \(bundleID)")
        }
        guard attributes.objectValue != nil else { throw LiveActivityRefusal(.start, "attributes is not an object") }
        guard contentState.objectValue != nil else { throw LiveActivityRefusal(.start, "content-state is not an object") }
        if policy.strictDecoding {
            try LiveActivityJSON.checkDecodable(attributes, field: "attributes", event: .start)
            try LiveActivityJSON.checkDecodable(contentState, field: "content-state", event: .start)
        }
        if let tooLarge = Self.sizeProblem(attributes: attributes, contentState: contentState) { throw LiveActivityRefusal(.start, tooLarge) }
        if case .channel(let id) = updates, !channelExists(id) {
            throw LiveActivityRefusal(.start, "channel \(id) is not a live channel of \(bundleID) \(Self.channelScope)")
        }
        guard let room = makeRoom(nowMs: nowMs) else { throw LiveActivityRefusal(.start, fullExplanation) }
        let (id, changes) = create(
            bundleID: bundleID, type: attributesType, attributes: attributes, contentState: contentState, updates: updates,
            starter: .app, staleDateMs: staleDateMs, relevanceScore: relevanceScore, newestTimestamp: nil, alert: nil, nowMs: nowMs)
        return LiveActivityReceipt(outcome: .applied, activityID: id, changes: room + changes)
    }

    /// `Activity.end` in the app, with optional final content; `dismissalDateMs` nil is the
    /// default policy (up to four hours), at or before `nowMs` removes it at once.
    public mutating func endByApp(
        activityID: String, contentState: JSONValue? = nil, dismissalDateMs: Int64? = nil, nowMs: Int64
    )
        throws(LiveActivityBookError) -> LiveActivityReceipt
    {
        guard activitiesByID[activityID] != nil else { throw .unknownActivity(activityID) }
        var changes = advance(activityID, nowMs: nowMs)
        guard var activity = activitiesByID[activityID], activity.isRunning else {
            // The app's call, not a push: said as such.
            let explanation = activitiesByID[activityID].map { "already over: \($0.howItEnded)" } ?? "activity \(activityID) is gone"
            return LiveActivityReceipt(outcome: .ignored(explanation), activityID: activityID, changes: changes)
        }
        if let state = contentState.map(LiveActivityJSON.parsedIfRaw) {
            guard state.objectValue != nil else {
                return LiveActivityReceipt(
                    outcome: .refused("would not end: content-state is not an object"), activityID: activityID, changes: changes)
            }
            do throws(LiveActivityRefusal) {
                if policy.strictDecoding { try LiveActivityJSON.checkDecodable(state, field: "content-state", event: .end) }
            } catch {
                return LiveActivityReceipt(outcome: .refused(error.description), activityID: activityID, changes: changes)
            }
            if let tooLarge = Self.sizeProblem(attributes: activity.attributes, contentState: state) {
                return LiveActivityReceipt(
                    outcome: .refused(LiveActivityRefusal(.end, tooLarge).description), activityID: activityID, changes: changes)
            }
            // The final content (`ActivityContent`), whole: no stale date or relevance given.
            activity.contentState = state
            activity.staleDateMs = nil
            activity.relevanceScore = nil
        }
        changes += activity.end(by: .app, atMs: nowMs, alert: nil, dismissalDateMs: dismissalDateMs)
        activitiesByID[activityID] = activity
        changes += settle(activityID, nowMs: nowMs)
        return LiveActivityReceipt(outcome: .applied, activityID: activityID, changes: changes)
    }

    /// A person removes the activity (whether it still ran or had ended). Already gone:
    /// nothing happens.
    @discardableResult
    public mutating func dismiss(activityID: String, nowMs: Int64) throws(LiveActivityBookError) -> [LiveActivityChange] {
        guard activitiesByID[activityID] != nil else { throw .unknownActivity(activityID) }
        var changes = advance(activityID, nowMs: nowMs)
        guard var activity = activitiesByID[activityID], activity.state != .dismissed else { return changes }
        changes += activity.remove(by: .user, atMs: nowMs)
        activitiesByID[activityID] = activity
        changes += settle(activityID, nowMs: nowMs)
        return changes
    }

    // MARK: - Pushes

    /// A `liveactivity` push to a push-to-start token. `priority` is not budgeted for starts;
    /// `channelExists` says whether an `input-push-channel` is one of the app's channels.
    public mutating func receiveStart(
        pushToStartToken: String, payload: JSONValue, priority: Int, nowMs: Int64, channelExists: (String) -> Bool = { _ in true }
    ) -> LiveActivityReceipt {
        let token = pushToStartToken.lowercased()
        guard let owner = pushToStartOwners[token] else {
            return LiveActivityReceipt(
                outcome: .ignored(endedTokens[token]?.explanation ?? "ignored: no app on this device has push-to-start token \(token)"))
        }
        let parsed: LiveActivityPayload
        switch Self.parse(payload, strictDecoding: policy.strictDecoding) {
        case .failure(let refusal): return LiveActivityReceipt(outcome: .refused(refusal.description))
        case .success(let payload): parsed = payload
        }
        guard parsed.event == .start else {
            return LiveActivityReceipt(
                outcome: .ignored(
                    "ignored: an \(parsed.event.rawValue) event sent to a push-to-start token; updates and ends go to the activity's update token or its channel"
                ))
        }
        let bundleID = owner.bundleID
        let type = parsed.attributesType ?? ""
        let attributes = parsed.attributes ?? .object(JSONObject())
        let contentState = parsed.contentState ?? .object(JSONObject())
        func refuse(_ detail: String) -> LiveActivityReceipt {
            LiveActivityReceipt(outcome: .refused(LiveActivityRefusal(.start, detail).description))
        }
        guard apps[bundleID]?.attributesTypes.contains(type) == true else {
            return refuse("attributes-type \(type) is not declared by \(bundleID)")
        }
        guard type == owner.attributesType else {
            return refuse("attributes-type \(type) is not the type of this push-to-start token (\(owner.attributesType))")
        }
        if let tooLarge = Self.sizeProblem(attributes: attributes, contentState: contentState) { return refuse(tooLarge) }
        if let channel = parsed.inputPushChannel, !channelExists(channel) {
            return refuse("input-push-channel \(channel) is not a live channel of \(bundleID) \(Self.channelScope)")
        }
        let updates: LiveActivityUpdates = parsed.inputPushToken ? .token : parsed.inputPushChannel.map { .channel($0) } ?? .none
        guard let room = makeRoom(nowMs: nowMs) else { return refuse(fullExplanation) }
        let (id, changes) = create(
            bundleID: bundleID, type: type, attributes: attributes, contentState: contentState, updates: updates, starter: .push,
            staleDateMs: parsed.staleDateMs, relevanceScore: parsed.relevanceScore, newestTimestamp: parsed.timestamp, alert: parsed.alert,
            nowMs: nowMs)
        return LiveActivityReceipt(outcome: .applied, activityID: id, changes: room + changes)
    }

    /// A `liveactivity` push to an activity's update token (`priority` 10 counts against the
    /// activity's budget, 5 does not).
    public mutating func receiveUpdate(
        updateToken: String, payload: JSONValue, priority: Int, nowMs: Int64, origin: LiveActivityUpdateOrigin? = nil
    ) -> LiveActivityReceipt {
        let token = updateToken.lowercased()
        guard let activityID = updateTokenOwners[token] else {
            return LiveActivityReceipt(
                outcome: .ignored(endedTokens[token]?.explanation ?? "ignored: no Live Activity on this device has update token \(token)"))
        }
        var changes = advance(activityID, nowMs: nowMs)
        guard let activity = activitiesByID[activityID], activity.state != .dismissed, activity.pushToken == token else {
            // The activity just went away (`advance` ended its token).
            return LiveActivityReceipt(
                outcome: .ignored(endedTokens[token]?.explanation ?? "ignored: activity \(activityID) is gone"), activityID: activityID,
                changes: changes)
        }
        switch Self.parse(payload, strictDecoding: policy.strictDecoding) {
        case .failure(let refusal): return LiveActivityReceipt(outcome: .refused(refusal.description), activityID: activityID, changes: changes)
        case .success(let parsed):
            guard parsed.event != .start else {
                return LiveActivityReceipt(
                    outcome: .ignored("ignored: a start event sent to an update token; starts go to the app's push-to-start token"),
                    activityID: activityID, changes: changes)
            }
            let receipt = apply(parsed, to: activityID, priority: priority, nowMs: nowMs, origin: origin)
            changes += receipt.changes
            return LiveActivityReceipt(outcome: receipt.outcome, activityID: activityID, changes: changes)
        }
    }

    /// A broadcast on `channelID`: one receipt per activity on the device that subscribes to
    /// it (none: the broadcast is not for this device), or only for `activityID` (a channel's
    /// stored message for an activity that just subscribed or came back online). An activity
    /// that already took the broadcast `key` (`StoredBroadcast.key`) gets no receipt. A
    /// broadcast never starts an activity.
    public mutating func receiveBroadcast(
        channelID: String, key: String, payload: JSONValue, priority: Int, nowMs: Int64, only activityID: String? = nil
    ) -> [LiveActivityReceipt] {
        receiveBroadcast(
            channelID: channelID, key: key, update: Self.readBroadcast(payload, strictDecoding: policy.strictDecoding),
            priority: priority, nowMs: nowMs,
            only: activityID)
    }

    /// A broadcast's payload as every subscribed device reads it: read once, shown to many.
    public struct BroadcastUpdate: Sendable {
        fileprivate var isStart: Bool
        fileprivate var parsed: Result<LiveActivityPayload, LiveActivityRefusal>
    }

    public static func readBroadcast(_ payload: JSONValue, strictDecoding: Bool = false) -> BroadcastUpdate {
        BroadcastUpdate(
            isStart: LiveActivityPayload.aps(of: payload)?["event"]?.stringValue == LiveActivityPushEvent.start.rawValue,
            parsed: parse(payload, strictDecoding: strictDecoding))
    }

    public mutating func receiveBroadcast(
        channelID: String, key: String, update: BroadcastUpdate, priority: Int, nowMs: Int64, only activityID: String? = nil
    ) -> [LiveActivityReceipt] {
        let subscribers = activities().filter {
            $0.channelID == channelID && $0.lastBroadcastKey != key && (activityID == nil || $0.activityID == activityID)
        }.map(\.activityID)
        guard !subscribers.isEmpty else { return [] }
        // Whatever else it holds: a start has nothing to apply to.
        if update.isStart {
            return subscribers.map { id in
                activitiesByID[id]?.lastBroadcastKey = key
                return LiveActivityReceipt(
                    outcome: .ignored(
                        "ignored: a broadcast cannot start a Live Activity (channel \(channelID)); starts go to the app's push-to-start token"
                    ), activityID: id)
            }
        }
        let parsed = update.parsed
        var receipts: [LiveActivityReceipt] = []
        for activityID in subscribers {
            var changes = advance(activityID, nowMs: nowMs)
            guard let activity = activitiesByID[activityID], activity.state != .dismissed else {
                // It left the Lock Screen just now.
                let gone = "ignored: activity \(activityID) left the Lock Screen before the broadcast came"
                receipts.append(LiveActivityReceipt(outcome: .ignored(gone), activityID: activityID, changes: changes))
                continue
            }
            activitiesByID[activityID]?.lastBroadcastKey = key
            switch parsed {
            case .failure(let refusal):
                receipts.append(LiveActivityReceipt(outcome: .refused(refusal.description), activityID: activityID, changes: changes))
            case .success(let payload):
                let receipt = apply(payload, to: activityID, priority: priority, nowMs: nowMs, origin: .broadcast(key: key))
                changes += receipt.changes
                receipts.append(LiveActivityReceipt(outcome: receipt.outcome, activityID: activityID, changes: changes))
            }
        }
        return receipts
    }

    /// A `widgets` or `controls` push: reloads the app's timelines when `aps.content-changed`
    /// is true, within the app's daily budget (over it, one reload waits for the budget).
    /// Every priority counts.
    public mutating func receiveWidgetPush(
        kind: WidgetPushKind, bundleID: String, payload: JSONValue, priority: Int, nowMs: Int64
    )
        -> LiveActivityReceipt
    {
        guard LiveActivityPayload.aps(of: payload)?["content-changed"]?.boolValue == true else {
            return LiveActivityReceipt(outcome: .ignored("ignored: a \(kind.rawValue) push does nothing without \"content-changed\": true in aps"))
        }
        let key = Self.widgetKey(kind, bundleID)
        var state = widgetPushes[key] ?? WidgetPushState()
        defer { widgetPushes[key] = state }
        let limit = policy.widgetPushesPerWindow
        let window = policy.widgetWindowMs
        guard state.budget.allows(limit: limit, nowMs: nowMs, windowMs: window) else {
            let alreadyWaiting = state.reloadPending
            state.reloadPending = true
            let when =
                state.budget.nextFreeMs(limit: limit, nowMs: nowMs, windowMs: window).map { "until \(LiveActivityTime.time($0))" }
                ?? "for good (the budget is 0)"
            return LiveActivityReceipt(
                outcome: .throttled(
                    "throttled: \(bundleID) has had its \(limit) \(kind.rawValue) pushes in the last \(Self.describe(window)); the reload waits \(when)"
                        + (alreadyWaiting ? ", together with the one already waiting" : "")))
        }
        state.budget.spend(nowMs: nowMs, windowMs: window)
        state.reloadPending = false
        state.reloads += 1
        return LiveActivityReceipt(outcome: .applied, changes: [.reloaded(kind: kind, bundleID: bundleID)])
    }

    // MARK: - Time

    /// Brings everything up to `nowMs`: activities go stale, end after eight hours, leave the
    /// Lock Screen; throttled updates and reloads the budget now allows are shown.
    /// `online`: whether the device can show anything now; a throttled update waits for it
    /// (an offline device shows nothing, and its app would never see the update).
    public mutating func tick(nowMs: Int64, online: Bool = true) -> [LiveActivityChange] {
        var changes: [LiveActivityChange] = []
        for activityID in activities().map(\.activityID) {
            changes += advance(activityID, nowMs: nowMs)
            guard online, var activity = activitiesByID[activityID], activity.isRunning, let waiting = activity.deferred else { continue }
            let limit = updateLimit(activity.bundleID)
            guard activity.budget.allows(limit: limit, nowMs: nowMs, windowMs: policy.updateWindowMs) else { continue }
            activity.deferred = nil
            if waiting.payload.timestamp >= (activity.newestTimestamp ?? waiting.payload.timestamp) {
                activity.budget.spend(nowMs: nowMs, windowMs: policy.updateWindowMs)
                activity.show(waiting.payload)
                changes.append(.updated(activityID: activityID, alert: waiting.payload.alert))
                changes += activity.advance(to: nowMs)
                settle(
                    waiting, of: activityID, .delivered,
                    "applied to Live Activity \(activityID) at \(LiveActivityTime.time(nowMs)), when its budget allowed (it was throttled)")
            } else {
                settle(
                    waiting, of: activityID, .ignored,
                    "ignored: by the time the budget allowed it, activity \(activityID) had shown a newer update (timestamp \(LiveActivityTime.seconds(activity.newestTimestamp ?? 0)))"
                )
            }
            activitiesByID[activityID] = activity
        }
        for key in widgetPushes.keys.sorted() {
            guard var state = widgetPushes[key], state.reloadPending,
                state.budget.allows(limit: policy.widgetPushesPerWindow, nowMs: nowMs, windowMs: policy.widgetWindowMs),
                let (kind, bundleID) = Self.splitWidgetKey(key)
            else { continue }
            state.budget.spend(nowMs: nowMs, windowMs: policy.widgetWindowMs)
            state.reloadPending = false
            state.reloads += 1
            widgetPushes[key] = state
            changes.append(.reloaded(kind: kind, bundleID: bundleID))
        }
        return changes
    }

    /// Why a channel id that exists may still not do: the device's environment, or deleted.
    public static let channelScope = "in the device's environment (sandbox and production channels are apart, and a deleted one takes no subscribers)"

    /// Throttled updates that stopped waiting since the last call.
    mutating func takeSettledUpdates() -> [LiveActivitySettledUpdate] { takeAll(&settledUpdates) }

    /// Every throttled update waiting now, by activity.
    func deferredUpdates() -> [(activityID: String, update: LiveActivityDeferredUpdate)] {
        activitiesByID.values.compactMap { activity in activity.deferred.map { (activity.activityID, $0) } }
    }

    private mutating func settle(
        _ waiting: LiveActivityDeferredUpdate, of activityID: String, _ outcome: DeliveryOutcome, _ explanation: String
    ) {
        guard let origin = waiting.origin else { return }
        settledUpdates.append(LiveActivitySettledUpdate(activityID: activityID, origin: origin, outcome: outcome, explanation: explanation))
    }

    // MARK: - Inside

    /// An update or end to a running (or just ended) activity.
    private mutating func apply(
        _ payload: LiveActivityPayload, to activityID: String, priority: Int, nowMs: Int64, origin: LiveActivityUpdateOrigin?
    ) -> LiveActivityReceipt {
        guard var activity = activitiesByID[activityID] else {
            return LiveActivityReceipt(outcome: .ignored("ignored: activity \(activityID) is gone"), activityID: activityID)
        }
        func receipt(_ outcome: LiveActivityOutcome, _ changes: [LiveActivityChange] = []) -> LiveActivityReceipt {
            LiveActivityReceipt(outcome: outcome, activityID: activityID, changes: changes)
        }
        guard activity.isRunning else { return receipt(.ignored(activity.endedExplanation)) }
        if let newest = activity.newestTimestamp, payload.timestamp < newest {
            return receipt(
                .ignored(
                    "ignored: timestamp \(LiveActivityTime.seconds(payload.timestamp)) is older than the activity's newest (\(LiveActivityTime.seconds(newest)))"
                ))
        }
        if let state = payload.contentState, let tooLarge = Self.sizeProblem(attributes: activity.attributes, contentState: state) {
            return receipt(.refused(LiveActivityRefusal(payload.event, tooLarge).description))
        }
        var changes: [LiveActivityChange] = []
        if payload.event == .end {
            // Never throttled: an end must get through.
            // With a content-state the end brings the final content, whose stale date and
            // relevance are its own, none when absent (as an update's); without one, the last
            // content stays and only what the end gives changes.
            if let state = payload.contentState {
                activity.contentState = state
                activity.staleDateMs = payload.staleDateMs
                activity.relevanceScore = payload.relevanceScore
            } else {
                if let score = payload.relevanceScore { activity.relevanceScore = score }
                if let stale = payload.staleDateMs { activity.staleDateMs = stale }
            }
            activity.newestTimestamp = max(activity.newestTimestamp ?? payload.timestamp, payload.timestamp)
            changes += activity.end(by: .push, atMs: nowMs, alert: payload.alert, dismissalDateMs: payload.dismissalDateMs)
            activitiesByID[activityID] = activity
            changes += settle(activityID, nowMs: nowMs)
            return receipt(.applied, changes)
        }
        if priority >= 10 {
            let limit = updateLimit(activity.bundleID)
            let window = policy.updateWindowMs
            guard activity.budget.allows(limit: limit, nowMs: nowMs, windowMs: window) else {
                if let waiting = activity.deferred, payload.timestamp < waiting.payload.timestamp {
                    return receipt(
                        .ignored(
                            "ignored: timestamp \(LiveActivityTime.seconds(payload.timestamp)) is older than the throttled update already waiting (\(LiveActivityTime.seconds(waiting.payload.timestamp)))"
                        ))
                }
                let replaces = activity.deferred != nil
                if let waiting = activity.deferred {
                    settle(
                        waiting, of: activityID, .coalesced,
                        "replaced by a newer throttled update (timestamp \(LiveActivityTime.seconds(payload.timestamp))) before the budget allowed it"
                    )
                }
                activity.deferred = LiveActivityDeferredUpdate(payload: payload, receivedAtMs: nowMs, origin: origin)
                activitiesByID[activityID] = activity
                let frequent = apps[activity.bundleID]?.usesFrequentUpdates == true ? " (frequent updates on)" : ""
                let replacing = replaces ? "; it replaces the throttled update that was waiting" : ""
                guard let next = activity.budget.nextFreeMs(limit: limit, nowMs: nowMs, windowMs: window) else {
                    return receipt(
                        .throttled(
                            "throttled: activity \(activityID) may show no priority-10 updates (a budget of 0 an hour\(frequent)); "
                                + "this one is never shown, and waits only to be replaced by a newer one" + replacing))
                }
                return receipt(
                    .throttled(
                        "throttled: activity \(activityID) has shown its \(limit) priority-10 updates in the last \(Self.describe(window))\(frequent); "
                            + "this update is shown at \(LiveActivityTime.time(next)) unless a newer one replaces it" + replacing))
            }
            activity.budget.spend(nowMs: nowMs, windowMs: window)
        }
        activity.show(payload)
        if let waiting = activity.deferred, waiting.payload.timestamp <= payload.timestamp {
            settle(
                waiting, of: activityID, .coalesced,
                "replaced: a newer update (timestamp \(LiveActivityTime.seconds(payload.timestamp))) was shown before the budget allowed this one")
            activity.deferred = nil
        }
        changes.append(.updated(activityID: activityID, alert: payload.alert))
        changes += activity.advance(to: nowMs)
        activitiesByID[activityID] = activity
        return receipt(.applied, changes)
    }

    /// The aps of a payload read, or the outcome of a payload the device drops.
    private static func parse(_ payload: JSONValue, strictDecoding: Bool) -> Result<LiveActivityPayload, LiveActivityRefusal> {
        guard let aps = LiveActivityPayload.aps(of: payload) else { return .failure(LiveActivityRefusal(nil, "the payload has no aps object")) }
        return LiveActivityPayload.parse(aps: aps, strictDecoding: strictDecoding)
    }

    private mutating func create(
        bundleID: String, type: String, attributes: JSONValue, contentState: JSONValue, updates: LiveActivityUpdates, starter: LiveActivityStarter,
        staleDateMs: Int64?, relevanceScore: Double?, newestTimestamp: Double?, alert: JSONValue?, nowMs: Int64
    ) -> (String, [LiveActivityChange]) {
        var id = random.uniqueID().uppercased()
        while activitiesByID[id] != nil { id = random.uniqueID().uppercased() }
        var channelID: String?
        if case .channel(let channel) = updates { channelID = channel }
        let token = updates == .token ? newToken() : nil
        var activity = LiveActivity(
            activityID: id, bundleID: bundleID, attributesType: type, attributes: attributes, contentState: contentState, startedAtMs: nowMs,
            startedBy: starter, pushToken: token, channelID: channelID, relevanceScore: relevanceScore, staleDateMs: staleDateMs,
            newestTimestamp: newestTimestamp)
        var changes: [LiveActivityChange] = [.started(activityID: id, bundleID: bundleID, attributesType: type, by: starter, alert: alert)]
        if let token {
            updateTokenOwners[token] = id
            changes.append(.tokenIssued(kind: .update, token: token, bundleID: bundleID, attributesType: type, activityID: id))
        }
        changes += activity.advance(to: nowMs)
        activitiesByID[id] = activity
        return (id, changes)
    }

    /// Brings one activity up to `nowMs`, ending its token if that made it over.
    private mutating func advance(_ activityID: String, nowMs: Int64) -> [LiveActivityChange] {
        guard var activity = activitiesByID[activityID] else { return [] }
        let changes = activity.advance(to: nowMs)
        guard !changes.isEmpty else { return [] }
        activitiesByID[activityID] = activity
        return changes + settle(activityID, nowMs: nowMs)
    }

    /// After a change: an activity that is gone, or whose eight hours are up, loses its
    /// update token; dismissed activities beyond those kept are forgotten.
    private mutating func settle(_ activityID: String, nowMs: Int64, why: String? = nil) -> [LiveActivityChange] {
        guard var activity = activitiesByID[activityID], let token = activity.pushToken else {
            if activitiesByID[activityID]?.state == .dismissed { forgetOldDismissed() }
            return []
        }
        let explanation: String
        switch (activity.state, activity.endedBy, activity.dismissedBy) {
        case (.dismissed, _, .user?):
            explanation =
                "ignored: activity \(activityID) was dismissed by the user at \(LiveActivityTime.time(activity.dismissedAtMs ?? nowMs)); its update token ended with it"
        case (.dismissed, _, _):
            explanation =
                "ignored: activity \(activityID) left the Lock Screen at \(LiveActivityTime.time(activity.dismissedAtMs ?? nowMs))"
                + (why.map { " (\($0))" } ?? "") + "; its update token ended with it"
        case (.ended, .lifetime?, _):
            explanation =
                "ignored: activity \(activityID) ended at \(LiveActivityTime.time(activity.endedAtMs ?? nowMs)) (its 8 hours were up); its update token ended with it"
        default:
            return []
        }
        activity.pushToken = nil
        activitiesByID[activityID] = activity
        let changes = endUpdateToken(token, activityID: activityID, explanation: explanation)
        if activity.state == .dismissed { forgetOldDismissed() }
        return changes
    }

    private mutating func endUpdateToken(_ token: String, activityID: String, explanation: String) -> [LiveActivityChange] {
        updateTokenOwners[token] = nil
        rememberEnded(token, explanation)
        return [.tokenEnded(kind: .update, token: token, activityID: activityID)]
    }

    private mutating func endPushToStartToken(_ token: String, why: String) -> [LiveActivityChange] {
        pushToStartOwners[token] = nil
        rememberEnded(token, "ignored: push-to-start token \(token) ended: \(why)")
        return [.tokenEnded(kind: .pushToStart, token: token, activityID: nil)]
    }

    private mutating func rememberEnded(_ token: String, _ explanation: String) {
        if endedTokens.updateValue(EndedToken(explanation: explanation), forKey: token) == nil { endedTokenOrder.append(token) }
        if endedTokenOrder.count > policy.endedTokensKept {
            let excess = endedTokenOrder.count - policy.endedTokensKept
            for old in endedTokenOrder.prefix(excess) { endedTokens[old] = nil }
            endedTokenOrder.removeFirst(excess)
        }
    }

    /// Room for one more activity under `policy.maxHeld`: when the device holds that many, the
    /// ended one that ended first leaves the Lock Screen for it (the system's removal); nil
    /// when every one it holds still runs, and the start is refused.
    private mutating func makeRoom(nowMs: Int64) -> [LiveActivityChange]? {
        let held = activitiesByID.values.filter { $0.state != .dismissed }
        guard held.count >= policy.maxHeld else { return [] }
        // Usually one; more when the bound was lowered since (a restart with a smaller flag).
        let needed = held.count - policy.maxHeld + 1
        let ended = held.filter { $0.state == .ended }.sorted { ($0.endedAtMs ?? 0, $0.activityID) < ($1.endedAtMs ?? 0, $1.activityID) }
        guard ended.count >= needed else { return nil }
        var changes: [LiveActivityChange] = []
        for var leaving in ended.prefix(needed) {
            changes += leaving.remove(by: .system, atMs: nowMs)
            activitiesByID[leaving.activityID] = leaving
            changes += settle(leaving.activityID, nowMs: nowMs, why: "it made room for a new one: the device holds \(policy.maxHeld) at most")
        }
        return changes
    }

    /// Why a start found no room.
    private var fullExplanation: String {
        "the device holds \(policy.maxHeld) running Live Activities, as many as it takes (--max-live-activities; iOS: ActivityKit's globalMaximumExceeded)"
    }

    private mutating func forgetOldDismissed() {
        let dismissed = activitiesByID.values.filter { $0.state == .dismissed }
        guard dismissed.count > policy.dismissedKept else { return }
        let oldest = dismissed.sorted { ($0.dismissedAtMs ?? 0, $0.activityID) < ($1.dismissedAtMs ?? 0, $1.activityID) }
        for activity in oldest.prefix(dismissed.count - policy.dismissedKept) { activitiesByID[activity.activityID] = nil }
    }

    private func updateLimit(_ bundleID: String) -> Int {
        policy.updateLimit(frequentUpdates: apps[bundleID]?.usesFrequentUpdates == true)
    }

    private mutating func newToken() -> String {
        while true {
            let token = Hex.encode(random.bytes(policy.tokenByteCount))
            if pushToStartOwners[token] == nil && updateTokenOwners[token] == nil && endedTokens[token] == nil { return token }
        }
    }

    /// Why attributes and content state are too large for a Live Activity (nil: they fit).
    static func sizeProblem(attributes: JSONValue, contentState: JSONValue) -> String? {
        let bytes = LiveActivityJSON.byteCount(attributes) + LiveActivityJSON.byteCount(contentState)
        guard bytes > LiveActivityLimits.maxDataBytes else { return nil }
        return "attributes and content-state come to \(bytes) bytes, more than the \(LiveActivityLimits.maxDataBytes) a Live Activity may hold"
    }

    /// Swift type names as an app declares them; whatever else they hold is the app's business.
    static func isValidTypeName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 200 && !name.unicodeScalars.contains { $0.properties.isWhitespace || $0.value < 0x20 || $0.value == 0x7F }
    }

    static func describe(_ windowMs: Int64) -> String {
        switch windowMs {
        case LiveActivityPolicy.hourMs: return "hour"
        case LiveActivityPolicy.dayMs: return "day"
        case let ms where ms % 60_000 == 0: return "\(ms / 60_000) minutes"
        default: return "\(windowMs) ms"
        }
    }

    static func widgetKey(_ kind: WidgetPushKind, _ bundleID: String) -> String { "\(kind.rawValue) \(bundleID)" }

    static func splitWidgetKey(_ key: String) -> (WidgetPushKind, String)? {
        let parts = key.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, let kind = WidgetPushKind(rawValue: String(parts[0])) else { return nil }
        return (kind, String(parts[1]))
    }
}
