/// What the world collects for persistence between two drains (`takeStateChanges`). The
/// parts of the world mark what they change (ids, in sets, so repeated changes cost nothing);
/// the drain turns the marks into whole rows.
public struct StateTracking: Sendable {
    public internal(set) var isOn = false
    /// `records.evicted` at the last drain: more means records fell off the end.
    var evictedSeen: UInt64 = 0
    var removedRecords: [UInt64] = []
    /// Set by a reset: the drain starts with `.reset(state)` and nothing before it counts.
    var resetTo: PersistedState?
    /// Rows the drain must write besides the marked ones (start-up merge).
    var extra: [StateChange] = []

    public init() {}
}

/// A receiver of the changes drained from the world, called under the world's lock so that
/// changes arrive in the order they happened. It must not block for long.
public protocol StateChangeSink: AnyObject, Sendable {
    /// Takes the changes of one `withWorld` call (under the world's lock). Returns true when
    /// the sink wants `wake()` called once the lock is released.
    func enqueue(_ changes: [StateChange]) -> Bool
    /// Called outside the lock after an `enqueue` that asked for it (a thread wake-up is a
    /// system call; it has no business inside the critical section).
    func wake()
    /// Why changes are refused right now (the store cannot commit), or nil. Read on every
    /// request: must be cheap when nil.
    var unavailableReason: String? { get }
}

extension StateChangeSink {
    public var unavailableReason: String? { nil }
}

extension World {
    /// From now on every persistent change is collected for `takeStateChanges`.
    public mutating func startTrackingChanges() {
        stateTracking.isOn = true
        stateTracking.evictedSeen = records.evicted
        registry.tracksChanges = true
        credentials.tracksChanges = true
        faults.tracksChanges = true
        delivery.tracksChanges = true
        channels.tracksChanges = true
        liveActivities.tracksChanges = true
        widgetPushes.tracksChanges = true
    }

    /// The changes since the last call, as rows. `recordSequences` are the journal records
    /// appended or updated meanwhile (from `records.takeChanges()`).
    /// `ids` sorted, without sorting (an array made) when there are none or one: a push
    /// changes one device, and no key, app or channel.
    private static func forEachInOrder(_ ids: Set<String>, _ body: (String) -> Void) {
        if ids.isEmpty { return }
        if ids.count == 1, let only = ids.first { return body(only) }
        for id in ids.sorted() { body(id) }
    }

    public mutating func takeStateChanges(recordSequences: [UInt64]) -> [StateChange] {
        guard stateTracking.isOn else { return [] }
        var out: [StateChange] = []
        if let reset = stateTracking.resetTo {
            // Whatever was marked belongs to the world the reset replaced.
            stateTracking.resetTo = nil
            out.append(.reset(reset))
        }
        if !stateTracking.extra.isEmpty {
            out += stateTracking.extra
            stateTracking.extra = []
        }
        let (devices, tokens) = registry.takeChangedIDs()
        Self.forEachInOrder(devices) { id in
            if let device = registry.devices[id] { out.append(.deviceSaved(device)) } else { out.append(.deviceRemoved(id: id)) }
        }
        Self.forEachInOrder(tokens) { token in
            if let entry = registry.token(token) { out.append(.tokenSaved(entry)) }
        }
        let (keys, apps) = credentials.takeChangedIDs()
        Self.forEachInOrder(keys) { id in
            if let key = credentials.keys[id] {
                if let stored = StoredKey(key) { out.append(.keySaved(stored)) }
            } else {
                out.append(.keyRemoved(keyID: id))
            }
        }
        Self.forEachInOrder(apps) { bundle in
            if let owner = credentials.apps[bundle] {
                out.append(.appSaved(bundleID: bundle, teamID: owner.teamID))
            } else {
                out.append(.appRemoved(bundleID: bundle))
            }
        }
        if faults.takeChanged() { out.append(.faultsSaved(faults.snapshot)) }
        Self.forEachInOrder(channels.takeChangedIDs()) { id in
            if let channel = channels.channels[id] { out.append(.channelSaved(channel)) } else { out.append(.channelRemoved(id: id)) }
        }
        if !liveActivities.changedDevices.isEmpty || !widgetPushes.changedDevices.isEmpty {
            for id in liveActivities.takeChangedDevices().union(widgetPushes.takeChangedDevices()).sorted() {
                out.append(liveActivityChange(deviceID: id))
            }
        }
        out += delivery.takeWaitingChanges()
        // Sharing a state, a record only updated goes as its delivery part (it is all an
        // update changes), not whole again.
        let updatedOnly = records.tracksUpdatesApart ? records.takeUpdatedOnly() : []
        // Records this change made or updated that its own later pushes evicted already (a
        // journal of a few records): written all the same (`RecordStore.evictedUnwritten`).
        let evictedUnwritten = records.tracksUpdatesApart ? records.takeEvictedUnwritten() : [:]
        for sequence in recordSequences {
            if updatedOnly.contains(sequence),
                let delivery = records.delivery(sequence: sequence) ?? evictedUnwritten[sequence].map(RecordStore.deliveryPart(of:))
                    ?? records.takeEvictedDelivery(sequence: sequence)
            {
                out.append(.recordDelivered(sequence: sequence, delivery: delivery))
            } else if let record = records.record(sequence: sequence) {
                // Moved into the change, not copied (again) field by field.
                out.append(.recordSaved(consume record))
            } else if let record = evictedUnwritten[sequence] {
                out.append(.recordSaved(record))
            }
        }
        if !stateTracking.removedRecords.isEmpty {
            out += stateTracking.removedRecords.map { .recordRemoved(sequence: $0) }
            stateTracking.removedRecords = []
        }
        if records.evicted != stateTracking.evictedSeen {
            stateTracking.evictedSeen = records.evicted
            out.append(.recordsEvicted(before: records.oldestSequence ?? records.nextSequence))
        }
        return out
    }

    /// Deletes the journal records that match (admin API); returns how many.
    public mutating func deleteRecords(where matches: (NotificationRecord) -> Bool) -> Int {
        let removed = records.removeAll(where: matches)
        if stateTracking.isOn { stateTracking.removedRecords += removed }
        return removed.count
    }

    /// Everything a store keeps, as it is now (a fresh directory, a reset).
    public var persistedState: PersistedState {
        var state = PersistedState()
        state.initialized = true
        state.devices = registry.devices.values.sorted { $0.id < $1.id }
        state.tokens = registry.tokens.values.sorted { $0.token < $1.token }
        state.keys = credentials.keys.values.sorted { $0.keyID < $1.keyID }.compactMap(StoredKey.init)
        state.apps = credentials.apps.sorted { $0.key < $1.key }.map { ($0.key, $0.value.teamID) }
        state.faults = faults.snapshot
        state.waiting = delivery.waiting
        state.records = records.newestFirst(limit: records.count).reversed()
        state.nextRecordSequence = records.nextSequence
        state.budgets = delivery.budgets.sorted { ($0.key.deviceID, $0.key.bundleID) < ($1.key.deviceID, $1.key.bundleID) }
            .map { ($0.key.deviceID, $0.key.bundleID, $0.value) }
        state.channels = channels.channels.values.sorted { $0.id < $1.id }
        state.liveActivities = liveActivityRows
        state.clockOffsetMs = clockOffsetMs
        return state
    }

    /// The clock was moved ahead: `offsetMs` in all, kept by a state directory so that after a
    /// restart the emulator's time goes on from where it was (an uninstall an hour ahead stays
    /// in the past, the journal's times do not go back).
    public mutating func noteClockOffset(_ offsetMs: Int64) {
        clockOffsetMs = offsetMs
        if stateTracking.isOn { stateTracking.extra.append(.clockOffsetSaved(milliseconds: offsetMs)) }
    }

    /// The world after a restart: `persisted` laid over the `configured` start state.
    ///
    /// - Devices and tokens: the persisted ones; configured devices the state lacks are added
    ///   as configured (their pinned tokens active again, as after a reset).
    /// - Keys: configured keys from their files; keys added at run time from the state (the
    ///   state wins for a key id in both). Team ownership: the union, the state winning.
    /// - Fault rules: the persisted list when one was saved, else the configured one.
    /// - Broadcast channels: the persisted ones, live and deleted, under the configured limits.
    /// - Live Activities (and widget budgets): a device's persisted row replaces what the
    ///   configuration declares for it (the same tokens as before the restart); configured
    ///   declarations for a device without a row stay. The configured budgets apply.
    /// - Waiting notifications: back in their slots; in-flight ones go back to the store, as
    ///   on a disconnect. Journal: the persisted records within the configured bound.
    ///
    /// Change tracking is on in the result; its pending changes are what the merge altered,
    /// for the caller to write before serving.
    public static func restoring(
        _ persisted: PersistedState, over configured: World, nowMs: Int64,
        loadKey: (StoredKey) throws(StateStoreError) -> ProviderKey
    ) throws(StateStoreError) -> World {
        var world = configured
        var registry = configured.registry.emptyLikeThis()
        registry.continueRandomness(from: configured.registry)
        registry.restore(devices: persisted.devices, tokens: persisted.tokens)
        world.registry = registry
        var records = RecordStore(capacity: configured.records.capacity, byteBudget: configured.records.byteBudget)
        for record in persisted.records { records.restore(record) }
        records.continueSequence(from: persisted.nextRecordSequence)
        world.records = records
        if let faults = persisted.faults { world.faults = FaultRules(faults) }
        // The limits stay the configured ones.
        world.channels.restore(persisted.channels)
        world.clockOffsetMs = persisted.clockOffsetMs
        world.restoreChecks(from: persisted.records)
        var gone: [String] = []
        for row in persisted.liveActivities {
            // (A row's device is in the state unless the state is inconsistent.)
            guard world.registry.devices[row.deviceID] != nil else {
                gone.append(row.deviceID)
                continue
            }
            world.restoreLiveActivities(row)
        }
        world.startTrackingChanges()
        world.stateTracking.extra += gone.map { .liveActivitiesRemoved(deviceID: $0) }
        let rowDevices = Set(persisted.liveActivities.map(\.deviceID))
        for id in configured.liveActivities.deviceIDs.union(configured.widgetPushes.books.keys).sorted() where !rowDevices.contains(id) {
            if let row = world.liveActivityRow(deviceID: id) { world.stateTracking.extra.append(.liveActivitiesSaved(row)) }
        }
        // Restored records that no longer fit (a smaller --max-records) are trimmed in the store too.
        if world.records.evicted > 0 { world.stateTracking.evictedSeen = 0 }

        world.adoptConfiguredDevices(from: configured)
        for stored in persisted.keys where stored.addedAtRunTime {
            world.credentials.add(try loadKey(stored))
        }
        for app in persisted.apps { world.credentials.addApp(teamID: app.teamID, bundleID: app.bundleID) }
        // The store mirrors the world: configured keys and apps as read now, keys gone from
        // the configuration removed.
        for key in world.credentials.keys.values.sorted(by: { $0.keyID < $1.keyID }) {
            if let stored = StoredKey(key) { world.stateTracking.extra.append(.keySaved(stored)) }
        }
        for stored in persisted.keys where world.credentials.keys[stored.keyID] == nil {
            world.stateTracking.extra.append(.keyRemoved(keyID: stored.keyID))
        }
        for (bundle, owner) in world.credentials.apps.sorted(by: { $0.key < $1.key }) {
            world.stateTracking.extra.append(.appSaved(bundleID: bundle, teamID: owner.teamID))
        }
        if persisted.faults == nil { world.stateTracking.extra.append(.faultsSaved(world.faults.snapshot)) }

        world.records.trackChanges = true
        for waiting in persisted.waiting.sorted(by: { $0.notification.sequence < $1.notification.sequence }) {
            let n = waiting.notification
            let key = AppKey(deviceID: n.deviceID, bundleID: n.bundleID)
            switch waiting.slot {
            case .stored:
                if let older = world.delivery.stored[key] {
                    world.setOutcome(
                        older.sequence, .coalesced, "replaced in the store by a newer notification (APNs keeps one per app)", atMs: nowMs)
                    world.delivery.noteDone(older.sequence)
                }
                world.delivery.stored[key] = n
            case .inFlight:
                world.delivery.noteDone(n.sequence)
                world.store(n, nowMs: nowMs, why: "the emulator restarted before the device acknowledged it")
            case .handedOff:
                // Only instances sharing a state hand off; one restarting alone routes it.
                world.delivery.noteDone(n.sequence)
                // (Device sockets all reconnect after a restart: no frame can go out yet.)
                _ = world.route(n, nowMs: nowMs)
            case .deferred(let reason):
                world.delivery.deferred[key] = (n, reason)
            case .batched(let releaseAt):
                world.delivery.batched.append((releaseAt, n))
            }
        }
        return world
    }
}

/// Hands out the changes marked since the last call and leaves `marks` empty (an empty
/// `marks` is left alone).
@inline(__always)
func takeAll<Marks: Collection & ExpressibleByArrayLiteral>(_ marks: inout Marks) -> Marks {
    if marks.isEmpty { return [] }
    defer { marks = [] }
    return marks
}
