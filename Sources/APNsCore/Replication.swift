// Multi-instance mode, the I/O-free part: every instance keeps a full `World` replica. The
// rows one instance's world produces (`takeStateChanges`) go to a shared log; the others
// apply them with `applyReplicated`. Rows are whole entities (or removals), so applying
// them in log order makes the replica's `persistedState` equal the producer's.
//
// What rows do not carry stays per instance (see `applyReplicated`): counters, the backend
// outbox and hook settings, cross-account checks, background budgets, flood windows,
// token and fault randomness, the delivery bookkeeping of this instance's own sockets, and
// which journal record each broadcast has (its stored message reaching activities later is
// added to the record only by the instance that took the broadcast).

extension ChangeKey {
    /// The row's field in a hash of rows ("d:<device id>", "t:<token>", "k:<key id>",
    /// "a:<bundle id>", "f", "w:<sequence>", "r:<sequence>"). Ids never contain ':' at the
    /// start, and the text after the first ':' is taken whole, so every id maps back.
    public var storageField: String {
        switch self {
        case .device(let id): return "d:" + id
        case .token(let token): return "t:" + token
        case .key(let id): return "k:" + id
        case .app(let bundle): return "a:" + bundle
        case .faults: return "f"
        case .clockOffset: return "o"
        case .channel(let id): return "c:" + id
        case .liveActivities(let id): return "l:" + id
        case .waiting(let sequence): return "w:" + String(sequence)
        case .record(let sequence): return "r:" + String(sequence)
        case .recordDelivery(let sequence): return "rd:" + String(sequence)
        // A device id cannot contain a newline (DeviceRegistry.isValidDeviceID).
        case .budget(let device, let bundle): return "b:" + device + "\n" + bundle
        }
    }

    public init?(storageField field: String) {
        if field == "f" || field == "o" {
            self = field == "f" ? .faults : .clockOffset
            return
        }
        guard let colon = field.firstIndex(of: ":") else { return nil }
        let id = String(field[field.index(after: colon)...])
        switch field[..<colon] {
        case "d": self = .device(id)
        case "t": self = .token(id)
        case "k": self = .key(id)
        case "a": self = .app(id)
        case "c": self = .channel(id)
        case "l": self = .liveActivities(id)
        case "w":
            guard let sequence = UInt64(id) else { return nil }
            self = .waiting(sequence)
        case "r":
            guard let sequence = UInt64(id) else { return nil }
            self = .record(sequence)
        case "rd":
            guard let sequence = UInt64(id) else { return nil }
            self = .recordDelivery(sequence)
        case "b":
            guard let newline = id.firstIndex(of: "\n") else { return nil }
            self = .budget(deviceID: String(id[..<newline]), bundleID: String(id[id.index(after: newline)...]))
        default: return nil
        }
    }
}

extension StateChange {
    /// The row's key is to be deleted (rather than saved). `recordsEvicted` and `reset` have
    /// no single key and are neither.
    public var isRemoval: Bool {
        switch self {
        case .deviceRemoved, .keyRemoved, .appRemoved, .notificationDone, .recordRemoved, .channelRemoved, .liveActivitiesRemoved:
            return true
        case .deviceSaved, .tokenSaved, .keySaved, .appSaved, .faultsSaved, .notificationWaiting, .recordSaved, .recordDelivered, .budgetSaved,
            .channelSaved, .liveActivitiesSaved, .recordsEvicted, .reset, .clockOffsetSaved:
            return false
        }
    }
}

/// A device's socket connection, by its (cluster-wide) id.
public struct DeviceConnectionID: Sendable, Hashable {
    public var deviceID: String
    public var connectionID: UInt64

    public init(deviceID: String, connectionID: UInt64) {
        self.deviceID = deviceID
        self.connectionID = connectionID
    }
}

/// What applying another instance's rows changed, for the applying instance to act on
/// outside the lock.
/// A row as a follower applies it: a change, or a journal record kept as it arrived.
public enum ReplicatedRow: Sendable {
    case change(StateChange)
    case keptRecord(KeptRecord)
}

/// Another instance's journal record in its stored form, with what the journal needs before
/// anyone reads it (`RecordStore.upsertKept`).
public struct KeptRecord: Sendable {
    public let sequence: UInt64
    let bytes: [UInt8]
    let accountedBytes: Int
    let headerListBytes: Int
    /// The device whose owner it awaits (a hand-off), if it does.
    let awaitingOwnerDevice: String?
}

public struct ReplicationApplied: Sendable {
    /// Journal records added or changed, in order (for event streams and long polls, as
    /// `EmulatorState.onRecordChanges`). After a reset only the ones since it.
    public var recordSequences: [UInt64] = []
    /// A reset replaced the world (listeners start over, as after `EmulatorState.reset`).
    public var reset = false
    /// Devices whose row was saved or removed (after a reset: every device before or after it).
    public var deviceIDs: Set<String> = []
    /// Devices that got a notification into the store, the held or the batched slot. If this
    /// instance holds the device's socket and the device is online, `deliverWaiting` sends it.
    public var waitingDeviceIDs: Set<String> = []
    /// Devices with a notification handed off to their owner (`World.routeHandOffs`).
    public var handedOffDeviceIDs: Set<String> = []
    /// Connections a device row no longer names (replaced, disconnected, device removed).
    /// Deliveries this instance sent on one of them will never be acknowledged:
    /// `disconnectDevice(deviceID, connectionID:)` puts them back in the store.
    public var leftConnections: [DeviceConnectionID] = []
    /// Devices whose socket this instance holds that another instance marked disconnected
    /// (it took this one for stopped while it was cut off from Redis): the sockets are still
    /// open, so they must be attached again, or pushes for them would wait in the store.
    public var detachedHere: Set<String> = []

    public init() {}
}

extension World {
    /// Applies rows another instance's world produced, in order, so that afterwards this
    /// world's `persistedState` equals the producer's (given both were equal before).
    ///
    /// - Devices are taken as they are, connection id included (the socket may live on
    ///   another instance); tokens likewise.
    /// - Keys are loaded with `loadKey` (a configured key identical to the row is reused);
    ///   all keys are loaded before anything changes, so a key that fails to load leaves
    ///   the world untouched.
    /// - Waiting notifications move between slots; one in flight on another instance is
    ///   only mirrored (that instance owns its delivery id, verdict and ack timer, and its
    ///   rows say where it goes next). Own in-flight deliveries are never moved by rows,
    ///   except by a reset.
    /// - Records are upserted by sequence; the journal's next sequence moves past every
    ///   applied record or notification, so a local append never reuses a number.
    /// - A reset: see `applyReplicatedReset`.
    ///
    /// Nothing applied is marked for `takeStateChanges` or `records.takeChanges()` (the rows
    /// are in the shared log already); marks made before the call are kept.
    public mutating func applyReplicated(
        _ changes: [StateChange], nowMs: Int64, configured: World,
        loadKey: (StoredKey) throws(StateStoreError) -> ProviderKey
    )
        throws(StateStoreError) -> ReplicationApplied
    {
        try applyReplicated(rows: changes.map(ReplicatedRow.change), nowMs: nowMs, configured: configured, loadKey: loadKey)
    }

    /// `applyReplicated` of a follower's rows (`StateCodec.decodeRows`). The journal records
    /// that arrived after newer ones are put in their place (`RecordStore.settleArrivals`)
    /// unless `settling` is false: a catch-up of many writes settles once, at its end.
    public mutating func applyReplicated(
        rows changes: [ReplicatedRow], nowMs: Int64, configured: World, settling: Bool = true,
        loadKey: (StoredKey) throws(StateStoreError) -> ProviderKey
    )
        throws(StateStoreError) -> ReplicationApplied
    {
        // The only step that can fail, done first.
        var keys: [Int: [ProviderKey]] = [:]
        for (index, row) in changes.enumerated() {
            guard case .change(let change) = row else { continue }
            switch change {
            case .keySaved(let stored):
                keys[index] = [try Self.providerKey(stored, configured: configured, loadKey: loadKey)]
            case .reset(let state):
                var loaded: [ProviderKey] = []
                for stored in state.keys { loaded.append(try Self.providerKey(stored, configured: configured, loadKey: loadKey)) }
                keys[index] = loaded
            default: continue
            }
        }

        let tracking = (
            registry.tracksChanges, credentials.tracksChanges, faults.tracksChanges, delivery.tracksChanges,
            records.trackChanges, channels.tracksChanges, liveActivities.tracksChanges, widgetPushes.tracksChanges
        )
        let evictedBefore = records.evicted
        registry.tracksChanges = false
        credentials.tracksChanges = false
        faults.tracksChanges = false
        delivery.tracksChanges = false
        records.trackChanges = false
        channels.tracksChanges = false
        liveActivities.tracksChanges = false
        widgetPushes.tracksChanges = false
        defer {
            (
                registry.tracksChanges, credentials.tracksChanges, faults.tracksChanges, delivery.tracksChanges,
                records.trackChanges, channels.tracksChanges, liveActivities.tracksChanges, widgetPushes.tracksChanges
            ) = tracking
            // Evictions the rows caused are the producer's, already in the log; a difference
            // left from before (a local eviction not drained yet) stays.
            stateTracking.evictedSeen = stateTracking.evictedSeen &+ (records.evicted &- evictedBefore)
        }

        var applied = ReplicationApplied()
        var index = 0
        while index < changes.count {
            defer { index += 1 }
            let change: StateChange
            switch changes[index] {
            case .keptRecord(let kept):
                records.upsertKept(kept)
                if let deviceID = kept.awaitingOwnerDevice {
                    delivery.handedOff.add(kept.sequence, HandOffs.Entry(deviceID: deviceID, notification: nil, hasRow: false))
                    applied.handedOffDeviceIDs.insert(deviceID)
                }
                if applied.recordSequences.last != kept.sequence { applied.recordSequences.append(kept.sequence) }
                continue
            case .change(let row): change = row
            }
            switch change {
            case .deviceSaved(let device):
                if let old = registry.devices[device.id] {
                    if let connection = old.connectionID, connection != device.connectionID {
                        applied.leftConnections.append(DeviceConnectionID(deviceID: device.id, connectionID: connection))
                        if device.connectionID == nil, let me = ownership?.me, DeviceOwnership.instance(ofConnection: connection) == me {
                            applied.detachedHere.insert(device.id)
                        }
                    }
                    // An uninstall forgets what was on screen for the app (as `dropWaiting`).
                    for bundleID in old.apps.keys where device.apps[bundleID] == nil {
                        delivery.collapsed.removeValue(forKey: AppKey(deviceID: device.id, bundleID: bundleID))
                    }
                }
                registry.saveReplicated(device)
                applied.deviceIDs.insert(device.id)
            case .deviceRemoved(let id):
                if let connection = registry.devices[id]?.connectionID {
                    applied.leftConnections.append(DeviceConnectionID(deviceID: id, connectionID: connection))
                }
                registry.removeReplicated(deviceID: id)
                applied.deviceIDs.insert(id)
            case .tokenSaved(let entry):
                registry.saveReplicated(entry)
            case .keySaved:
                if let key = keys[index]?.first { credentials.add(key) }
            case .keyRemoved(let id):
                credentials.removeKey(id: id)
            case .appSaved(let bundleID, let teamID):
                credentials.addApp(teamID: teamID, bundleID: bundleID)
            case .appRemoved(let bundleID):
                credentials.removeApp(bundleID: bundleID)
            case .faultsSaved(let snapshot):
                faults = FaultRules(snapshot)
            case .notificationWaiting(let waiting):
                placeReplicated(waiting)
                records.continueSequence(from: waiting.notification.sequence + 1)
                switch waiting.slot {
                case .inFlight: break
                case .handedOff: applied.handedOffDeviceIDs.insert(waiting.notification.deviceID)
                default: applied.waitingDeviceIDs.insert(waiting.notification.deviceID)
                }
            case .notificationDone(let sequence):
                let key = records.record(sequence: sequence).flatMap { r in
                    r.deviceID.flatMap { d in r.bundleID.map { AppKey(deviceID: d, bundleID: $0) } }
                }
                removeReplicatedWaiting(sequence, key: key, includingOwn: true)
                records.continueSequence(from: sequence + 1)
            case .recordSaved(let record):
                records.upsert(record)
                noteOnScreen(record)
                if record.delivery.awaitingOwner, let deviceID = record.deviceID {
                    noteHandOff(record: record)
                    applied.handedOffDeviceIDs.insert(deviceID)
                }
                if applied.recordSequences.last != record.sequence { applied.recordSequences.append(record.sequence) }
            case .recordDelivered(let sequence, let part):
                // (A record kept encoded has no collapse id: those are decoded on arrival.)
                if let record = records.applyDelivery(sequence: sequence, part) { noteOnScreen(record) }
                // Its owner routed it.
                if !part.awaitingOwner, !delivery.handedOff.isEmpty { delivery.handedOff.remove(sequence) }
                if applied.recordSequences.last != sequence { applied.recordSequences.append(sequence) }
            case .recordRemoved:
                // An admin delete is one row per record: remove a run of them in one pass.
                var removed: Set<UInt64> = []
                while index < changes.count, case .change(.recordRemoved(let sequence)) = changes[index] {
                    removed.insert(sequence)
                    index += 1
                }
                index -= 1
                _ = records.removeAll { removed.contains($0.sequence) }
                records.continueSequence(from: (removed.max() ?? 0) + 1)
            case .recordsEvicted(let before):
                records.evict(before: before)
            case .budgetSaved(let device, let bundle, let budget):
                delivery.budgets[AppKey(deviceID: device, bundleID: bundle)] = budget
            case .channelSaved(let channel):
                channels.save(channel)
            case .channelRemoved(let id):
                channels.remove(id: id)
            case .liveActivitiesSaved(let row):
                restoreLiveActivities(row)
            case .liveActivitiesRemoved(let id):
                liveActivities.removeDevice(id)
                widgetPushes.removeDevice(id)
            case .clockOffsetSaved:
                break  // each instance keeps its own clock
            case .reset(let state):
                applied.deviceIDs.formUnion(registry.devices.keys)
                // Sockets held here that the loaded state no longer names (another instance took
                // this one for stopped while it was cut off, then this copy reloaded).
                let heldHere: [String] =
                    ownership.map { mine in
                        registry.devices.values.filter { device in
                            device.connectionID.map { DeviceOwnership.instance(ofConnection: $0) == mine.me } ?? false
                        }.map(\.id)
                    } ?? []
                applyReplicatedReset(state, configured: configured, keys: keys[index] ?? [])
                for id in heldHere where registry.devices[id].map({ $0.connectionID == nil }) ?? false {
                    applied.detachedHere.insert(id)
                }
                applied.deviceIDs.formUnion(state.devices.map(\.id))
                applied.reset = true
                applied.recordSequences = []
                applied.waitingDeviceIDs = Set(
                    state.waiting.filter { $0.slot != .inFlight && $0.slot != .handedOff }.map(\.notification.deviceID))
                applied.handedOffDeviceIDs = Set(state.waiting.filter { $0.slot == .handedOff }.map(\.notification.deviceID))
                applied.handedOffDeviceIDs.formUnion(state.records.filter(\.delivery.awaitingOwner).compactMap(\.deviceID))
                // Connections of the world before do not matter: the reset dropped own deliveries.
                applied.leftConnections = []
            }
        }
        keepEvictedHandOffs()
        if settling { records.settleArrivals() }
        return applied
    }

    /// Sends what waits for an online device: its stored notification and held pushes whose
    /// reason has passed (as on a reconnect). For devices in `waitingDeviceIDs` whose socket
    /// this instance holds.
    public mutating func deliverWaiting(deviceID: String, nowMs: Int64) -> [DeviceFrame] {
        flushWaiting(deviceID: deviceID, nowMs: nowMs)
    }

    private static func providerKey(
        _ stored: StoredKey, configured: World,
        loadKey: (StoredKey) throws(StateStoreError) -> ProviderKey
    ) throws(StateStoreError) -> ProviderKey {
        if let key = configured.credentials.keys[stored.keyID], StoredKey(key) == stored { return key }
        return try loadKey(stored)
    }

    /// Puts a notification in the slot a row names, taking it out of any slot it was in.
    private mutating func placeReplicated(_ waiting: WaitingNotification) {
        let n = waiting.notification
        let key = AppKey(deviceID: n.deviceID, bundleID: n.bundleID)
        // In-flight deliveries are found at once when their ids are their sequence numbers
        // (shared state); otherwise own ones are left alone (scanning them for every row
        // would cost too much).
        removeReplicatedWaiting(n.sequence, key: key, includingOwn: false)
        switch waiting.slot {
        case .stored:
            delivery.stored[key] = n
        case .deferred(let reason):
            delivery.deferred[key] = (n, reason)
        case .batched(let releaseAt):
            // In release order (the producer appends as it accepts, so this is the end).
            let at =
                delivery.batched.lastIndex {
                    ($0.releaseAtMs, $0.notification.sequence) <= (releaseAt, n.sequence)
                }.map { $0 + 1 } ?? 0
            delivery.batched.insert((releaseAt, n), at: at)
        case .handedOff:
            delivery.handedOff.add(n)
        case .inFlight:
            guard let flight = waiting.flight else {
                delivery.mirroredInflight[n.sequence] = n
                return
            }
            // The whole delivery: any instance may take the device's ack, or find it stuck.
            delivery.inflight[flight.deliveryID] = InFlight(
                connectionID: flight.connectionID, notification: n,
                verdict: flight.verdict, sentAtMs: flight.sentAtMs)
            delivery.inflightPerDevice[n.deviceID, default: 0] += 1
            delivery.nextDeliveryID = max(delivery.nextDeliveryID, flight.deliveryID + 1)
        }
    }

    /// Takes the notification out of whichever slot holds it. `key` (its device and app)
    /// finds the keyed slots at once; without it they are searched.
    @discardableResult
    private mutating func removeReplicatedWaiting(_ sequence: UInt64, key: AppKey?, includingOwn: Bool) -> Bool {
        if delivery.mirroredInflight.removeValue(forKey: sequence) != nil { return true }
        if !delivery.handedOff.isEmpty, delivery.handedOff.remove(sequence) != nil { return true }
        if deliveryOptions.deliveryIDsAreSequences, let flight = delivery.inflight[sequence], flight.notification.sequence == sequence {
            delivery.inflight.removeValue(forKey: sequence)
            releaseWindowSlot(flight.notification.deviceID)
            return true
        }
        if let key {
            if delivery.stored[key]?.sequence == sequence {
                delivery.stored.removeValue(forKey: key)
                return true
            }
            if delivery.deferred[key]?.notification.sequence == sequence {
                delivery.deferred.removeValue(forKey: key)
                return true
            }
        } else {
            if let found = delivery.stored.first(where: { $0.value.sequence == sequence }) {
                delivery.stored.removeValue(forKey: found.key)
                return true
            }
            if let found = delivery.deferred.first(where: { $0.value.notification.sequence == sequence }) {
                delivery.deferred.removeValue(forKey: found.key)
                return true
            }
        }
        if let at = delivery.batched.firstIndex(where: { $0.notification.sequence == sequence }) {
            delivery.batched.remove(at: at)
            return true
        }
        if includingOwn, let (id, flight) = delivery.inflight.first(where: { $0.value.notification.sequence == sequence }) {
            delivery.inflight.removeValue(forKey: id)
            releaseWindowSlot(flight.notification.deviceID)
            return true
        }
        return false
    }

    /// Keeps "what is on screen per collapse id" in step with deliveries settled elsewhere,
    /// so a later push with the same collapse id coalesces it here too (as `settle` does).
    private mutating func noteOnScreen(_ record: NotificationRecord) {
        guard record.outcome == .delivered, let display = record.display, display != Display.none.rawValue,
            let collapse = record.collapseID, let deviceID = record.deviceID, let bundleID = record.bundleID
        else { return }
        let key = AppKey(deviceID: deviceID, bundleID: bundleID)
        if delivery.collapsed[key]?[collapse].map({ $0 < record.sequence }) ?? true {
            delivery.collapsed[key, default: [:]][collapse] = record.sequence
        }
    }

    /// Another instance reset its world (`POST /reset`): this one becomes the configured
    /// start state with the reset's rows laid over, as the producer did — but it is a live
    /// replica, not a restart, so unlike `restoring`:
    /// - devices keep the connection ids the rows name (sockets elsewhere stay attached);
    /// - notifications in flight stay in flight (mirrored; the producer's rows move them);
    /// - the state is taken exactly (no merge with configured devices, keys or faults: the
    ///   producer already did that), except keys without a PEM, which no row can carry.
    /// As in `EmulatorState.reset`, token randomness, the credentials generation and the
    /// journal's sequence numbers continue; counters, budgets, own in-flight deliveries and
    /// backends go back to the configured ones. Delivery ids continue (an ack for a delivery
    /// from before the reset must not match a new one). Tracking stays as it was.
    private mutating func applyReplicatedReset(_ state: PersistedState, configured: World, keys: [ProviderKey]) {
        var next = configured
        next.registry = configured.registry.emptyLikeThis()
        next.registry.continueRandomness(from: registry)
        for device in state.devices { next.registry.saveReplicated(device) }
        for entry in state.tokens { next.registry.saveReplicated(entry) }

        let listed = Set(state.keys.map(\.keyID))
        for key in configured.credentials.keys.values.sorted(by: { $0.keyID < $1.keyID })
        where key.pem != nil && !listed.contains(key.keyID) {
            next.credentials.removeKey(id: key.keyID)
        }
        for key in keys { next.credentials.add(key) }
        let apps = Set(state.apps.map(\.bundleID))
        for bundleID in configured.credentials.apps.keys.sorted() where !apps.contains(bundleID) {
            next.credentials.removeApp(bundleID: bundleID)
        }
        for app in state.apps { next.credentials.addApp(teamID: app.teamID, bundleID: app.bundleID) }
        next.credentials.advanceGeneration(beyond: credentials.generation)

        if let snapshot = state.faults { next.faults = FaultRules(snapshot) }
        next.channels.continueIssuedIDs(from: channels)
        next.channels.restore(state.channels)
        next.liveActivities.restoreAll(state.liveActivities)
        next.widgetPushes.restoreAll(state.liveActivities, policy: next.liveActivities.policy)

        var journal = RecordStore(capacity: configured.records.capacity, byteBudget: configured.records.byteBudget)
        journal.continueNumbering(from: records)
        journal.continueCountingEvictions(from: records)
        for record in state.records { journal.upsert(record) }
        // (A consistent state's next sequence is past its waiting ones already; as a store's
        // `load`, never trust that alone.)
        let newestWaiting = state.waiting.map(\.notification.sequence).max().map { $0 + 1 } ?? 0
        journal.continueSequence(from: max(state.nextRecordSequence, records.nextSequence, newestWaiting))
        next.records = journal

        next.delivery.nextDeliveryID = max(next.delivery.nextDeliveryID, delivery.nextDeliveryID)
        next.stateTracking = stateTracking
        next.backendOutbox = backendOutbox
        next.ownership = ownership
        next.changeMode = changeMode
        self = next
        for waiting in state.waiting { placeReplicated(waiting) }
        for record in state.records {
            noteOnScreen(record)
            noteHandOff(record: record)
        }
        for entry in state.budgets { delivery.budgets[AppKey(deviceID: entry.deviceID, bundleID: entry.bundleID)] = entry.budget }
    }
}
