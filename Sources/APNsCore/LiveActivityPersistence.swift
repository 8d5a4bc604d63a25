// LiveActivityPersistence: one device's Live Activity state as a store keeps it (`--state-dir`)
// and instances share it (`--redis`): a row per device, written whole whenever a Live Activity
// path changes it. The world's indexes (tokens, channel subscribers) are rebuilt from the rows.

/// A device's Live Activities, their tokens and the token pushes waiting for the device, and
/// its widget reload budgets. The parts a row does not carry are rebuilt (which tokens are
/// current, who subscribes to which channel) or stay per instance (the books' randomness, the
/// journal record of each broadcast for its stored message reaching activities later).
public struct LiveActivityRow: Sendable {
    public var deviceID: String
    /// Apps, activities, ended tokens (nil: none).
    public var book: LiveActivityBook?
    /// The device's widget and control reload budgets (`World.widgetPushes`; nil: none).
    public var widgets: LiveActivityBook?
    /// Every token that leads to the device, current and ended, in the order issued.
    public var tokens: [(token: String, owner: LiveActivityWorld.TokenOwner)]
    /// Token pushes waiting for the device to come online.
    public var waiting: [WaitingLiveActivityPush]

    public init(
        deviceID: String, book: LiveActivityBook?, widgets: LiveActivityBook? = nil,
        tokens: [(token: String, owner: LiveActivityWorld.TokenOwner)] = [], waiting: [WaitingLiveActivityPush] = []
    ) {
        self.deviceID = deviceID
        self.book = book
        self.widgets = widgets
        self.tokens = tokens
        self.waiting = waiting
    }

    /// Nothing left to keep: the row is removed instead.
    public var isEmpty: Bool { book == nil && widgets == nil && tokens.isEmpty && waiting.isEmpty }
}

extension LiveActivityBook {
    /// Whether the token is current here (a push-to-start or update token in use, not ended).
    func isCurrent(_ token: String) -> Bool { pushToStartOwners[token] != nil || updateTokenOwners[token] != nil }

    /// Works out which token leads where from the apps and activities (after a decode).
    mutating func rebuildTokenOwners() {
        pushToStartOwners = [:]
        updateTokenOwners = [:]
        for app in apps.values {
            for (type, token) in app.pushToStartTokens { pushToStartOwners[token] = (app.bundleID, type) }
        }
        for activity in activitiesByID.values {
            if let token = activity.pushToken { updateTokenOwners[token] = activity.activityID }
        }
    }
}

extension LiveActivityWorld {
    /// The device's part of this world, for its row.
    func rowParts(deviceID: String) -> (tokens: [(token: String, owner: TokenOwner)], waiting: [WaitingLiveActivityPush]) {
        guard let owned = tokensOfDevice[deviceID] else { return ([], []) }
        var tokenRows: [(token: String, owner: TokenOwner)] = []
        tokenRows.reserveCapacity(owned.count)
        var waiting: [WaitingLiveActivityPush] = []
        for token in owned {
            if let owner = tokens[token] { tokenRows.append((token, owner)) }
            if let push = waitingPushes[token] { waiting.append(push) }
        }
        return (tokenRows, waiting.sorted { $0.sequence < $1.sequence })
    }

    /// Every device with something to keep.
    var deviceIDs: Set<String> { Set(books.keys).union(tokensOfDevice.keys) }

    /// Replaces the device's state by the row's (a restart, another instance's change): its
    /// book, tokens and waiting pushes, and the channels it subscribes to. The books take this
    /// world's policy (the configured one). Marks nothing.
    mutating func restore(_ row: LiveActivityRow) {
        let id = row.deviceID
        let hadEnded = (tokensOfDevice[id] ?? []).contains { books[id]?.isCurrent($0) != true }
        if let owned = tokensOfDevice.removeValue(forKey: id) {
            for token in owned {
                tokens[token] = nil
                waitingPushes[token] = nil
            }
            if hadEnded { endedTokens.removeAll { tokens[$0] == nil } }
        }
        if var book = row.book {
            book.policy = policy
            books[id] = book
        } else {
            books[id] = nil
        }
        var owned: [String] = []
        owned.reserveCapacity(row.tokens.count)
        for (token, owner) in row.tokens {
            var owner = owner
            owner.deviceID = id
            guard tokens.updateValue(owner, forKey: token) == nil else { continue }
            owned.append(token)
            if books[id]?.isCurrent(token) != true { endedTokens.append(token) }
        }
        if !owned.isEmpty { tokensOfDevice[id] = owned }
        for push in row.waiting where tokens[push.token] != nil {
            var push = push
            push.deviceID = id
            waitingPushes[push.token] = push
        }
        let tracking = tracksChanges
        tracksChanges = false
        while endedTokens.count > Self.maxEndedTokens { forgetEndedToken(endedTokens.removeFirst()) }
        tracksChanges = tracking
        resubscribe(id)
    }

    /// Replaces everything by `rows` (another instance's reset), keeping the policy, the
    /// tracking and the marks. Marks nothing.
    mutating func restoreAll(_ rows: [LiveActivityRow]) {
        var next = LiveActivityWorld()
        next.policy = policy
        next.tracksChanges = tracksChanges
        next.changedDevices = changedDevices
        for row in rows { next.restore(row) }
        self = next
    }
}

extension WidgetPushWorld {
    /// The device's widget budgets as a row has them (nil: none). Marks nothing.
    mutating func restore(deviceID: String, book: LiveActivityBook?, policy: LiveActivityPolicy) {
        guard var book else {
            books[deviceID] = nil
            return
        }
        book.policy = policy
        books[deviceID] = book
    }

    /// Replaces every budget by the rows' (another instance's reset). Marks nothing.
    mutating func restoreAll(_ rows: [LiveActivityRow], policy: LiveActivityPolicy) {
        books = [:]
        for row in rows { restore(deviceID: row.deviceID, book: row.widgets, policy: policy) }
    }
}

extension World {
    /// The device's Live Activity row as it is now; nil when it has nothing to keep.
    func liveActivityRow(deviceID: String) -> LiveActivityRow? {
        let (tokens, waiting) = liveActivities.rowParts(deviceID: deviceID)
        let row = LiveActivityRow(
            deviceID: deviceID, book: liveActivities.books[deviceID], widgets: widgetPushes.books[deviceID], tokens: tokens,
            waiting: waiting)
        return row.isEmpty ? nil : row
    }

    /// The row to write for a device whose Live Activity state changed.
    func liveActivityChange(deviceID: String) -> StateChange {
        liveActivityRow(deviceID: deviceID).map(StateChange.liveActivitiesSaved) ?? .liveActivitiesRemoved(deviceID: deviceID)
    }

    /// Every device's row, by device id.
    var liveActivityRows: [LiveActivityRow] {
        liveActivities.deviceIDs.union(widgetPushes.books.keys).sorted().compactMap { liveActivityRow(deviceID: $0) }
    }

    /// Takes a row another instance (or the store) has. Marks nothing.
    mutating func restoreLiveActivities(_ row: LiveActivityRow) {
        liveActivities.restore(row)
        widgetPushes.restore(deviceID: row.deviceID, book: row.widgets, policy: liveActivities.policy)
    }
}

extension StateCodec {
    // MARK: Live Activities

    /// Everything in the row but the books' policy (the configured one applies) and
    /// randomness (new after a load). Maps are written sorted, so equal rows have equal bytes.
    public static func encode(_ row: LiveActivityRow) -> [UInt8] {
        var w = ByteWriter(capacity: 512)
        w.u8(liveActivityFormat)
        w.put(row.deviceID)
        write(row.book, to: &w)
        write(row.widgets, to: &w)
        w.u64(UInt64(row.tokens.count))
        for (token, owner) in row.tokens {
            w.put(token)
            w.put(owner.bundleID)
            w.put(owner.environment)
            w.put(owner.kind)
        }
        w.u64(UInt64(row.waiting.count))
        for push in row.waiting {
            w.put(push.token)
            w.blob(push.payload)
            w.put(push.priority)
            w.put(push.sequence)
            w.put(push.storeUntilMs)
        }
        return w.bytes
    }

    public static func decodeLiveActivities(_ bytes: [UInt8]) throws(StateStoreError) -> LiveActivityRow {
        var r = ByteReader(bytes, what: "Live Activity row")
        try r.expectFormat(liveActivityFormat)
        let deviceID: String = try r.take()
        var row = LiveActivityRow(deviceID: deviceID, book: try readBook(from: &r), widgets: try readBook(from: &r))
        for _ in 0..<(try r.count()) {
            let token: String = try r.take()
            let owner = LiveActivityWorld.TokenOwner(deviceID: deviceID, bundleID: try r.take(), environment: try r.take(), kind: try r.take())
            row.tokens.append((token, owner))
        }
        for _ in 0..<(try r.count()) {
            row.waiting.append(
                WaitingLiveActivityPush(
                    token: try r.take(), deviceID: deviceID, payload: try r.bytes(), priority: try r.take(), sequence: try r.take(),
                    storeUntilMs: try r.take()))
        }
        try r.expectEnd()
        return row
    }

    private static func write(_ book: LiveActivityBook?, to w: inout ByteWriter) {
        guard let book else { return w.u8(0) }
        w.u8(1)
        w.u64(UInt64(book.apps.count))
        for app in book.apps.values.sorted(by: { $0.bundleID < $1.bundleID }) {
            w.put(app.bundleID)
            w.put(app.attributesTypes)
            w.put(app.frequentUpdates)
            w.put(app.frequentUpdatesEnabled)
            let tokens = app.pushToStartTokens.sorted { $0.key < $1.key }
            w.u64(UInt64(tokens.count))
            for (type, token) in tokens {
                w.put(type)
                w.put(token)
            }
        }
        w.u64(UInt64(book.activitiesByID.count))
        for activity in book.activitiesByID.values.sorted(by: { $0.activityID < $1.activityID }) { write(activity, to: &w) }
        w.u64(UInt64(book.endedTokenOrder.count))
        for token in book.endedTokenOrder {
            w.put(token)
            w.put(book.endedTokens[token]?.explanation ?? "")
        }
        w.u64(UInt64(book.widgetPushes.count))
        for (key, state) in book.widgetPushes.sorted(by: { $0.key < $1.key }) {
            w.put(key)
            w.put(state.budget.spentAtMs)
            w.put(state.reloadPending)
            w.put(state.reloads)
        }
    }

    private static func readBook(from r: inout ByteReader) throws(StateStoreError) -> LiveActivityBook? {
        guard try r.u8() != 0 else { return nil }
        var book = LiveActivityBook()
        for _ in 0..<(try r.count()) {
            var app = LiveActivityApp(
                bundleID: try r.take(), attributesTypes: try r.take(), frequentUpdates: try r.take(), frequentUpdatesEnabled: try r.take())
            for _ in 0..<(try r.count()) {
                let type: String = try r.take()
                let token: String = try r.take()
                app.pushToStartTokens[type] = token
            }
            book.apps[app.bundleID] = app
        }
        for _ in 0..<(try r.count()) {
            let activity = try readActivity(from: &r)
            book.activitiesByID[activity.activityID] = activity
        }
        for _ in 0..<(try r.count()) {
            let token: String = try r.take()
            let explanation: String = try r.take()
            if book.endedTokens.updateValue(EndedToken(explanation: explanation), forKey: token) == nil { book.endedTokenOrder.append(token) }
        }
        for _ in 0..<(try r.count()) {
            let key: String = try r.take()
            guard LiveActivityBook.splitWidgetKey(key) != nil else { throw r.damaged("widget push key \(key)") }
            var state = WidgetPushState()
            state.budget = LiveActivityBudget(spentAtMs: try r.take())
            state.reloadPending = try r.take()
            state.reloads = try r.take()
            book.widgetPushes[key] = state
        }
        book.rebuildTokenOwners()
        return book
    }

    private static func write(_ a: LiveActivity, to w: inout ByteWriter) {
        w.put(a.activityID)
        w.put(a.bundleID)
        w.put(a.attributesType)
        write(a.attributes, to: &w)
        write(a.contentState, to: &w)
        w.put(a.state)
        w.put(a.pushToken)
        w.put(a.channelID)
        w.put(a.relevanceScore)
        w.put(a.staleDateMs)
        w.put(a.dismissalDateMs)
        w.put(a.startedAtMs)
        w.put(a.endedAtMs)
        w.put(a.endedBy)
        w.put(a.dismissedAtMs)
        w.put(a.dismissedBy)
        w.put(a.newestTimestamp)
        w.put(a.updates)
        w.put(a.startedBy)
        w.put(a.budget.spentAtMs)
        if let deferred = a.deferred {
            // 2: with the record it answers for (1, without, is still read).
            w.u8(deferred.origin == nil ? 1 : 2)
            write(deferred.payload, to: &w)
            w.put(deferred.receivedAtMs)
            switch deferred.origin {
            case .push(let sequence)?:
                w.u8(0)
                w.u64(sequence)
            case .broadcast(let key)?:
                w.u8(1)
                w.string(key)
            case nil:
                break
            }
        } else {
            w.u8(0)
        }
        w.put(a.lastBroadcastKey)
    }

    private static func readActivity(from r: inout ByteReader) throws(StateStoreError) -> LiveActivity {
        var a = LiveActivity(
            activityID: try r.take(), bundleID: try r.take(), attributesType: try r.take(), attributes: try readStoredJSON(from: &r),
            contentState: try readStoredJSON(from: &r), startedAtMs: 0, startedBy: .app)
        a.state = try r.take()
        a.pushToken = try r.take()
        a.channelID = try r.take()
        a.relevanceScore = try r.take()
        a.staleDateMs = try r.take()
        a.dismissalDateMs = try r.take()
        a.startedAtMs = try r.take()
        a.endedAtMs = try r.take()
        a.endedBy = try r.take()
        a.dismissedAtMs = try r.take()
        a.dismissedBy = try r.take()
        a.newestTimestamp = try r.take()
        a.updates = try r.take()
        a.startedBy = try r.take()
        a.budget = LiveActivityBudget(spentAtMs: try r.take())
        let deferredForm = try r.u8()
        if deferredForm != 0 {
            var deferred = LiveActivityDeferredUpdate(payload: try readPayload(from: &r), receivedAtMs: try r.take())
            if deferredForm == 2 { deferred.origin = try r.u8() == 0 ? .push(sequence: try r.u64()) : .broadcast(key: try r.string()) }
            a.deferred = deferred
        }
        a.lastBroadcastKey = try r.take()
        return a
    }

    private static func write(_ p: LiveActivityPayload, to w: inout ByteWriter) {
        w.put(p.event)
        w.put(p.timestamp)
        write(optional: p.contentState, to: &w)
        w.put(p.staleDateMs)
        w.put(p.dismissalDateMs)
        w.put(p.relevanceScore)
        write(optional: p.alert, to: &w)
        w.put(p.attributesType)
        write(optional: p.attributes, to: &w)
        w.put(p.inputPushToken)
        w.put(p.inputPushChannel)
    }

    private static func readPayload(from r: inout ByteReader) throws(StateStoreError) -> LiveActivityPayload {
        LiveActivityPayload(
            event: try r.take(), timestamp: try r.take(), contentState: try readOptionalJSON(from: &r), staleDateMs: try r.take(),
            dismissalDateMs: try r.take(), relevanceScore: try r.take(), alert: try readOptionalJSON(from: &r),
            attributesType: try r.take(), attributes: try readOptionalJSON(from: &r), inputPushToken: try r.take(),
            inputPushChannel: try r.take())
    }

    private static func write(optional value: JSONValue?, to w: inout ByteWriter) {
        guard let value else { return w.u8(0) }
        w.u8(1)
        write(value, to: &w)
    }

    private static func readOptionalJSON(from r: inout ByteReader) throws(StateStoreError) -> JSONValue? {
        // (Not a `? nil :` expression: JSONValue takes `nil` as its literal for null.)
        guard try r.u8() != 0 else { return Optional<JSONValue>.none }
        return try readStoredJSON(from: &r)
    }

    /// Activity data comes from the admin API as well as from payloads, so it may nest as deep
    /// as the JSON parser allows (128), deeper than a device frame.
    private static func readStoredJSON(from r: inout ByteReader) throws(StateStoreError) -> JSONValue {
        try readJSON(from: &r, depth: 0, maxDepth: maxStoredJSONDepth)
    }
}

extension LiveActivityState: StateCodable {}
extension LiveActivityEnding: StateCodable {}
extension LiveActivityRemoval: StateCodable {}
extension LiveActivityStarter: StateCodable {}
extension LiveActivityTokenKind: StateCodable {}
extension LiveActivityPushEvent: StateCodable {}
