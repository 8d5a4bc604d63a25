/// Live Activities of every device in the world (one `LiveActivityBook` each), which device
/// and app each of their tokens leads to (the provider endpoint looks a `liveactivity` push's
/// token up here when the device registry does not know it), and which devices have an
/// activity subscribed to each broadcast channel.
public struct LiveActivityWorld: Sendable {
    /// Where a push-to-start or update token leads.
    public struct TokenOwner: Sendable, Equatable {
        public var deviceID: String
        public var bundleID: String
        public var environment: APNsEnvironment
        public var kind: LiveActivityTokenKind

        public init(deviceID: String, bundleID: String, environment: APNsEnvironment, kind: LiveActivityTokenKind) {
            self.deviceID = deviceID
            self.bundleID = bundleID
            self.environment = environment
            self.kind = kind
        }
    }

    /// Tokens that no longer lead to an activity stay known this long (in number), so a push
    /// to one is answered 200 and journaled with why the device ignored it.
    public static let maxEndedTokens = 10_000
    /// Token pushes waiting for offline devices, over all devices; beyond it one more expires.
    public static let maxWaitingPushes = 100_000

    public internal(set) var books: [String: LiveActivityBook] = [:]
    public internal(set) var tokens: [String: TokenOwner] = [:]
    /// Every token in `tokens` by its device, in the order issued (a device's row names them;
    /// a device that goes takes them along without a scan of all tokens).
    var tokensOfDevice: [String: [String]] = [:]
    var endedTokens: [String] = []
    public var policy = LiveActivityPolicy()
    /// Channel id → device id → activities on it subscribed to the channel (not dismissed).
    public internal(set) var subscribers: [String: [String: Int]] = [:]
    var channelsOfDevice: [String: [String: Int]] = [:]
    /// Token pushes to a device that is offline, by token: the newest waits (as APNs stores
    /// one notification per app), older ones are coalesced. Changed through `hold` and
    /// `takeWaiting`, which mark the device for persistence.
    public internal(set) var waitingPushes: [String: WaitingLiveActivityPush] = [:]
    /// With persistence on (`--state-dir`, `--redis`): devices whose Live Activity state
    /// changed since `takeChangedDevices`. Only Live Activity paths mark; device pushes never
    /// come here.
    public var tracksChanges = false
    var changedDevices: Set<String> = []
    /// Throttled updates that stopped waiting (shown, replaced, or their activity over), by
    /// device, until the world settles their records (`takeSettledUpdates`).
    var settledUpdates: [(deviceID: String, update: LiveActivitySettledUpdate)] = []

    public init() {}

    public func book(deviceID: String) -> LiveActivityBook? { books[deviceID] }

    /// Activities subscribed to the channel, over all devices.
    public func subscriberCount(channelID: String) -> Int { subscribers[channelID]?.values.reduce(0, +) ?? 0 }

    /// The app's ActivityAttributes types on a device; each type gets a push-to-start token in
    /// the app's environment.
    @discardableResult
    public mutating func declare(
        deviceID: String, bundleID: String, environment: APNsEnvironment, types: [String], frequentUpdates: Bool
    ) throws(LiveActivityBookError) -> [LiveActivityChange] {
        if books[deviceID] == nil { books[deviceID] = LiveActivityBook(policy: policy) }
        let changes =
            try changeBook(deviceID) { (book) throws(LiveActivityBookError) in
                try book.declare(bundleID: bundleID, types: types, frequentUpdates: frequentUpdates)
            } ?? []
        track(changes, deviceID: deviceID, environment: environment)
        return changes
    }

    /// The user's Settings switch for the app's frequent updates.
    public mutating func setFrequentUpdatesEnabled(_ enabled: Bool, deviceID: String, bundleID: String) throws(LiveActivityBookError) {
        guard
            (try changeBook(deviceID, { (book) throws(LiveActivityBookError) in try book.setFrequentUpdatesEnabled(enabled, bundleID: bundleID) }))
                != nil
        else { throw .unknownApp(bundleID) }
    }

    /// `Activity.request` in the app.
    public mutating func startByApp(
        deviceID: String, bundleID: String, environment: APNsEnvironment, attributesType: String, attributes: JSONValue,
        contentState: JSONValue, updates: LiveActivityUpdates, nowMs: Int64, channelExists: (String) -> Bool
    ) throws(LiveActivityRefusal) -> LiveActivityReceipt {
        let started = try changeBook(deviceID) { (book) throws(LiveActivityRefusal) in
            try book.startByApp(
                bundleID: bundleID, attributesType: attributesType, attributes: attributes, contentState: contentState, updates: updates,
                nowMs: nowMs, channelExists: channelExists)
        }
        guard let receipt = started else {
            throw LiveActivityRefusal(.start, "\(bundleID) declares no Live Activities on \(deviceID)")
        }
        track(receipt.changes, deviceID: deviceID, environment: environment)
        return receipt
    }

    /// `Activity.end` in the app.
    public mutating func endByApp(
        deviceID: String, activityID: String, contentState: JSONValue?, dismissalDateMs: Int64?, nowMs: Int64
    ) throws(LiveActivityBookError) -> LiveActivityReceipt {
        let ended = try changeBook(deviceID) { (book) throws(LiveActivityBookError) in
            try book.endByApp(activityID: activityID, contentState: contentState, dismissalDateMs: dismissalDateMs, nowMs: nowMs)
        }
        guard let receipt = ended else { throw .unknownActivity(activityID) }
        track(receipt.changes, deviceID: deviceID, environment: nil)
        return receipt
    }

    /// A new push-to-start token for the app's type, or a new update token for the activity.
    public mutating func rotate(
        deviceID: String, bundleID: String?, attributesType: String?, activityID: String?, nowMs: Int64
    ) throws(LiveActivityBookError) -> (token: String, changes: [LiveActivityChange]) {
        let done = try changeBook(deviceID) { (book) throws(LiveActivityBookError) -> (token: String, changes: [LiveActivityChange]) in
            if let activityID { return try book.rotateUpdateToken(activityID: activityID, nowMs: nowMs) }
            return try book.rotatePushToStartToken(bundleID: bundleID ?? "", type: attributesType ?? "", nowMs: nowMs)
        }
        guard let rotated = done else {
            if let activityID { throw .unknownActivity(activityID) }
            throw .unknownApp(bundleID ?? "")
        }
        track(rotated.changes, deviceID: deviceID, environment: nil)
        return rotated
    }

    /// The app is uninstalled: its activities go, its tokens end.
    public mutating func removeApp(deviceID: String, bundleID: String, nowMs: Int64) -> [LiveActivityChange] {
        guard books[deviceID]?.apps[bundleID] != nil else { return [] }
        let changes = changeBook(deviceID) { $0.removeApp(bundleID: bundleID, nowMs: nowMs) } ?? []
        track(changes, deviceID: deviceID, environment: nil)
        return changes
    }

    /// The user removes an activity from the Lock Screen.
    public mutating func dismiss(deviceID: String, activityID: String, nowMs: Int64) throws(LiveActivityBookError) -> [LiveActivityChange] {
        let dismissed = try changeBook(deviceID) { (book) throws(LiveActivityBookError) in try book.dismiss(activityID: activityID, nowMs: nowMs) }
        guard let changes = dismissed else { throw .unknownActivity(activityID) }
        track(changes, deviceID: deviceID, environment: nil)
        return changes
    }

    /// A `liveactivity` push to one of these tokens, as the device takes it; nil when the token
    /// is not a Live Activity token.
    public mutating func receive(
        token: String, payload: JSONValue, priority: Int, nowMs: Int64, channelExists: (String) -> Bool,
        origin: LiveActivityUpdateOrigin? = nil
    ) -> (owner: TokenOwner, receipt: LiveActivityReceipt)? {
        guard let owner = tokens[token],
            let receipt = changeBook(
                owner.deviceID,
                { book in
                    switch owner.kind {
                    case .pushToStart:
                        return book.receiveStart(
                            pushToStartToken: token, payload: payload, priority: priority, nowMs: nowMs, channelExists: channelExists)
                    case .update:
                        return book.receiveUpdate(updateToken: token, payload: payload, priority: priority, nowMs: nowMs, origin: origin)
                    }
                })
        else { return nil }
        track(receipt.changes, deviceID: owner.deviceID, environment: owner.environment)
        return (owner, receipt)
    }

    /// A broadcast on `channelID` as each subscribed device takes it: the activities of
    /// online devices show it (or say why not); those of offline devices wait for the
    /// channel's stored message (`stored`) or miss it (`expired`, No Message Stored).
    public mutating func receiveBroadcast(
        channelID: String, message: StoredBroadcast, policy storage: ChannelStoragePolicy, nowMs: Int64, isOnline: (String) -> Bool
    ) -> (reach: BroadcastReach, changes: [(deviceID: String, changes: [LiveActivityChange])]) {
        var reach = BroadcastReach(channelID: channelID)
        var changed: [(String, [LiveActivityChange])] = []
        guard let devices = subscribers[channelID] else { return (reach, changed) }
        let update = LiveActivityBook.readBroadcast((try? JSONValue.parse(message.payload)) ?? .null, strictDecoding: policy.strictDecoding)
        for deviceID in devices.keys.sorted() {
            guard books[deviceID] != nil else { continue }
            guard isOnline(deviceID) else {
                for activity in books[deviceID]?.activities() ?? [] where activity.channelID == channelID {
                    reach.add(
                        Self.offlineDelivery(deviceID: deviceID, activityID: activity.activityID, storage: storage, message: message, nowMs: nowMs))
                }
                continue
            }
            let receipts =
                changeBook(deviceID) {
                    $0.receiveBroadcast(
                        channelID: channelID, key: message.key, update: update, priority: message.priority, nowMs: nowMs)
                } ?? []
            var changes: [LiveActivityChange] = []
            for receipt in receipts {
                reach.add(Self.delivery(receipt, deviceID: deviceID, fromStore: false))
                changes += receipt.changes
            }
            track(changes, deviceID: deviceID, environment: nil)
            if !changes.isEmpty { changed.append((deviceID, changes)) }
        }
        return (reach, changed)
    }

    /// A channel's stored message for the activities of one device that have not taken it
    /// (`activityID`: only that one, which just subscribed).
    public mutating func receiveStoredBroadcast(
        channelID: String, message: StoredBroadcast, deviceID: String, activityID: String?, nowMs: Int64
    ) -> (deliveries: [BroadcastReach.Delivery], changes: [LiveActivityChange]) {
        // Most flushes find every activity has it already: then nothing is parsed.
        guard message.expiresAtMs > nowMs,
            books[deviceID]?.activities().contains(where: {
                $0.channelID == channelID && $0.lastBroadcastKey != message.key && (activityID == nil || $0.activityID == activityID)
            }) == true
        else { return ([], []) }
        let payload = (try? JSONValue.parse(message.payload)) ?? .null
        let receipts =
            changeBook(deviceID) {
                $0.receiveBroadcast(
                    channelID: channelID, key: message.key, payload: payload, priority: message.priority, nowMs: nowMs,
                    only: activityID)
            } ?? []
        guard !receipts.isEmpty else { return ([], []) }
        let changes = receipts.flatMap(\.changes)
        track(changes, deviceID: deviceID, environment: nil)
        return (receipts.map { Self.delivery($0, deviceID: deviceID, fromStore: true) }, changes)
    }

    /// The channels a device's activities subscribe to.
    public func channels(ofDevice deviceID: String) -> [String] { channelsOfDevice[deviceID].map { Array($0.keys).sorted() } ?? [] }

    static func delivery(_ receipt: LiveActivityReceipt, deviceID: String, fromStore: Bool) -> BroadcastReach.Delivery {
        let outcome: DeliveryOutcome
        let explanation: String
        switch receipt.outcome {
        case .applied:
            outcome = .delivered
            explanation = fromStore ? "shown from the channel's stored message" : "shown"
        case .ignored(let why), .refused(let why):
            outcome = .ignored
            explanation = why
        case .throttled(let why):
            outcome = .throttled
            explanation = why
        }
        return BroadcastReach.Delivery(
            deviceID: deviceID, activityID: receipt.activityID, outcome: outcome, explanation: explanation, fromStore: fromStore)
    }

    static func offlineDelivery(
        deviceID: String, activityID: String, storage: ChannelStoragePolicy, message: StoredBroadcast, nowMs: Int64
    ) -> BroadcastReach.Delivery {
        switch storage {
        case .mostRecentMessageStored where message.expiresAtMs <= nowMs:
            return BroadcastReach.Delivery(
                deviceID: deviceID, activityID: activityID, outcome: .expired,
                explanation:
                    "missed: the device was offline, and the broadcast's apns-expiration (\(RFC3339.format(milliseconds: message.expiresAtMs))) had passed"
            )
        case .mostRecentMessageStored:
            return BroadcastReach.Delivery(
                deviceID: deviceID, activityID: activityID, outcome: .stored,
                explanation: "the device is offline; the channel keeps its newest message (at most 8 hours) for when it is back")
        case .noMessageStored:
            return BroadcastReach.Delivery(
                deviceID: deviceID, activityID: activityID, outcome: .expired,
                explanation: "missed: the device was offline, and a No Message Stored channel reaches only devices online now")
        }
    }

    /// Time passes: activities go stale, end after 8 hours, leave the Lock Screen; deferred
    /// updates go out once their budget allows and their device is online.
    public mutating func tick(
        nowMs: Int64, isOnline: (String) -> Bool = { _ in true }
    ) -> [(deviceID: String, changes: [LiveActivityChange])] {
        var changed: [(String, [LiveActivityChange])] = []
        for deviceID in Array(books.keys) {
            guard let next = books[deviceID]?.nextDeadlineMs(nowMs: nowMs), next <= nowMs else { continue }
            let online = isOnline(deviceID)
            let changes = changeBook(deviceID) { $0.tick(nowMs: nowMs, online: online) } ?? []
            track(changes, deviceID: deviceID, environment: nil)
            if !changes.isEmpty { changed.append((deviceID, changes)) }
        }
        return changed
    }

    /// `tick` for one device that is online: what time has made due on it happens now (a
    /// device back online shows the throttled update its budget already allows at once).
    public mutating func tick(deviceID: String, nowMs: Int64) -> [LiveActivityChange] {
        guard let next = books[deviceID]?.nextDeadlineMs(nowMs: nowMs), next <= nowMs else { return [] }
        let changes = changeBook(deviceID) { $0.tick(nowMs: nowMs, online: true) } ?? []
        track(changes, deviceID: deviceID, environment: nil)
        return changes
    }

    /// A device is gone: so are its activities and tokens. `settling`: its throttled updates
    /// are settled as never shown (not when a copy follows another's change).
    public mutating func removeDevice(_ deviceID: String, settling: Bool = false) {
        guard let book = books.removeValue(forKey: deviceID) else { return }
        if settling {
            for (activityID, waiting) in book.deferredUpdates() {
                guard let origin = waiting.origin else { continue }
                settledUpdates.append(
                    (
                        deviceID,
                        LiveActivitySettledUpdate(
                            activityID: activityID, origin: origin, outcome: .ignored,
                            explanation: "ignored: device \(deviceID) was removed before the budget allowed this update")
                    ))
            }
        }
        noteChange(deviceID)
        forgetTokens(ofDevice: deviceID)
        resubscribe(deviceID)
    }

    /// Drops the device's tokens and the pushes waiting on them.
    mutating func forgetTokens(ofDevice deviceID: String) {
        guard let owned = tokensOfDevice.removeValue(forKey: deviceID) else { return }
        for token in owned {
            tokens[token] = nil
            waitingPushes[token] = nil
        }
        endedTokens.removeAll { tokens[$0] == nil }
    }

    /// A push waits for the offline device (replacing one waiting on the same token).
    mutating func hold(_ push: WaitingLiveActivityPush) {
        waitingPushes[push.token] = push
        noteChange(push.deviceID)
    }

    /// Takes the push waiting on `token` out (the device took it, or it expired).
    @discardableResult
    mutating func takeWaiting(token: String) -> WaitingLiveActivityPush? {
        guard let push = waitingPushes.removeValue(forKey: token) else { return nil }
        noteChange(push.deviceID)
        return push
    }

    @inline(__always)
    mutating func noteChange(_ deviceID: String) { if tracksChanges { changedDevices.insert(deviceID) } }

    /// Devices whose Live Activity state changed since the last call.
    public mutating func takeChangedDevices() -> Set<String> { takeAll(&changedDevices) }

    /// An ended token falls off the end of those remembered: a push to it is no longer
    /// answered 200.
    mutating func forgetEndedToken(_ token: String) {
        guard let owner = tokens.removeValue(forKey: token) else { return }
        waitingPushes[token] = nil
        tokensOfDevice[owner.deviceID]?.removeAll { $0 == token }
        if tokensOfDevice[owner.deviceID]?.isEmpty == true { tokensOfDevice[owner.deviceID] = nil }
        noteChange(owner.deviceID)
    }

    /// Changes one device's book in place: taken out of the dictionary meanwhile, so that the
    /// change copies none of it. Nil when the device has no book.
    private mutating func changeBook<T, E: Error>(_ deviceID: String, _ body: (inout LiveActivityBook) throws(E) -> T) throws(E) -> T? {
        guard var book = books.removeValue(forKey: deviceID) else { return nil }
        let waitingBefore = book.deferredUpdates()
        defer {
            settleDeferredUpdates(of: deviceID, &book, waitingBefore: waitingBefore)
            books[deviceID] = book
            noteChange(deviceID)
        }
        return try body(&book)
    }

    /// Collects what became of the throttled updates a change to the book touched: those it
    /// showed or replaced say so; those that left with their activity (ended, dismissed, the
    /// app removed) were never shown.
    private mutating func settleDeferredUpdates(
        of deviceID: String, _ book: inout LiveActivityBook, waitingBefore: [(activityID: String, update: LiveActivityDeferredUpdate)]
    ) {
        let told = book.takeSettledUpdates()
        guard !waitingBefore.isEmpty || !told.isEmpty else { return }
        let waitingAfter = book.deferredUpdates().compactMap(\.update.origin)
        for settled in told { settledUpdates.append((deviceID, settled)) }
        for (activityID, waiting) in waitingBefore {
            guard let origin = waiting.origin, !waitingAfter.contains(origin), !told.contains(where: { $0.origin == origin }) else { continue }
            let over =
                switch book.activity(activityID)?.state {
                case .ended?: "ended"
                case .dismissed?: "left the Lock Screen"
                case nil: "went with its app"
                default: "stopped waiting"
                }
            settledUpdates.append(
                (
                    deviceID,
                    LiveActivitySettledUpdate(
                        activityID: activityID, origin: origin, outcome: .ignored,
                        explanation: "ignored: activity \(activityID) \(over) before the budget allowed this update")
                ))
        }
    }

    /// Throttled updates that stopped waiting since the last call.
    mutating func takeSettledUpdates() -> [(deviceID: String, update: LiveActivitySettledUpdate)] { takeAll(&settledUpdates) }

    /// Keeps `subscribers` in step with the device's activities.
    mutating func resubscribe(_ deviceID: String) {
        var now: [String: Int] = [:]
        for activity in books[deviceID]?.activities() ?? [] {
            if let channel = activity.channelID { now[channel, default: 0] += 1 }
        }
        let before = channelsOfDevice[deviceID] ?? [:]
        guard now != before else { return }
        for channel in before.keys where now[channel] == nil {
            subscribers[channel]?[deviceID] = nil
            if subscribers[channel]?.isEmpty == true { subscribers[channel] = nil }
        }
        for (channel, count) in now { subscribers[channel, default: [:]][deviceID] = count }
        channelsOfDevice[deviceID] = now.isEmpty ? nil : now
    }

    /// New tokens lead to their device; ended ones stay known for a while (see above).
    private mutating func track(_ changes: [LiveActivityChange], deviceID: String, environment: APNsEnvironment?) {
        var subscriptionsMayDiffer = false
        defer { if subscriptionsMayDiffer { resubscribe(deviceID) } }
        for change in changes {
            switch change {
            case .started, .dismissed:
                subscriptionsMayDiffer = true
            case .tokenIssued(let kind, let token, let app, _, _):
                // Looked up only when the caller does not know the environment (the scan is long).
                let known =
                    environment ?? tokens.values.first { $0.deviceID == deviceID && $0.bundleID == app }?.environment ?? .sandbox
                if tokens.updateValue(TokenOwner(deviceID: deviceID, bundleID: app, environment: known, kind: kind), forKey: token) == nil {
                    tokensOfDevice[deviceID, default: []].append(token)
                }
            case .tokenEnded(_, let token, _):
                guard tokens[token] != nil else { continue }
                endedTokens.append(token)
                if endedTokens.count > Self.maxEndedTokens { forgetEndedToken(endedTokens.removeFirst()) }
            default:
                continue
            }
        }
    }
}
