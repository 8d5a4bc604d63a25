// Several instances sharing one state (`--redis`) decide each device's deliveries in one place:
// the device's owner. A push accepted by another instance is journaled there and handed off
// (its journal record says it awaits its owner; a waiting row of its own when the record cannot
// carry it); the owner routes it when the hand-off reaches its copy. So what is decided per
// device (one stored notification per app, collapse, budgets, the in-flight window) has one
// order without a lease every instance waits for.

/// Which instance decides a device's deliveries: the instance holding the device's socket when
/// that instance is a member of the shared state (its acks and its pushes then need no other
/// instance), else a hash of the device id over the members, in order. The same on every
/// instance that has applied the same changes (membership travels in the change log, and a
/// socket's attachment is changed only under the lease), so every instance agrees who owns what.
public struct DeviceOwnership: Sendable, Equatable {
    /// Instance numbers, ascending, without repeats.
    public let members: [Int]
    /// This instance's number.
    public let me: Int

    /// The explanation of a push this instance hands to each other member, made once (made
    /// for every handed-off push, the text cost 1,800 instructions).
    private let handOffTexts: [Int: String]

    public init(members: [Int], me: Int) {
        self.members = Array(Set(members)).sorted()
        self.me = me
        handOffTexts = Dictionary(uniqueKeysWithValues: self.members.map { ($0, Self.handOffText(me: me, owner: $0)) })
    }

    /// What the record of a push this instance took and handed to `owner` says until the owner
    /// has routed it.
    public func handOffExplanation(to owner: Int) -> String { handOffTexts[owner] ?? Self.handOffText(me: me, owner: owner) }

    static func handOffText(me: Int, owner: Int) -> String {
        "accepted by instance \(me); instance \(owner), which decides deliveries to this device, routes it"
    }

    /// Whether this instance is one of the members (else it owns nothing, and changes must
    /// take the lease as before).
    public var isMember: Bool { members.contains(me) }

    /// The instance the hash gives `deviceID` to, whatever socket it holds (0 when there are no
    /// members): its owner while no member holds its socket.
    public func hashOwner(of deviceID: String) -> Int {
        guard members.count > 1 else { return members.first ?? 0 }
        return members[Int(StoredSurvivor.fnv1a(deviceID) % UInt64(members.count))]
    }

    /// The instance that owns `deviceID` with its socket on `connectionID` (nil: none): the
    /// socket's instance when it is a member, else the hash's.
    public func owner(of deviceID: String, connectionID: UInt64?) -> Int {
        if let connectionID, case let holder = Self.instance(ofConnection: connectionID), members.contains(holder) { return holder }
        return hashOwner(of: deviceID)
    }

    /// Connection ids carry the instance that made them in their high bits (`--redis`).
    public static let instanceShift: UInt64 = 40

    public static func instance(ofConnection id: UInt64) -> Int { Int(id >> instanceShift) }
}

/// Hand-offs waiting for their owner, by sequence, and per device in the order they arrived.
/// Removing one (its owner routed it: a row from the log) only forgets it by sequence; the
/// device's list drops what is gone when it is taken, or when none is left.
struct HandOffs: Sendable {
    /// One hand-off: the notification, for a hand-off with a waiting row of its own (its record
    /// lacks part of the payload: the instance that took the push, or the row, carries it),
    /// else only its device (the journal record is the hand-off:
    /// `RecordDelivery.awaitingOwner`, rebuilt by the owner when it routes it).
    struct Entry: Sendable {
        var deviceID: String
        var notification: PendingNotification?
        /// It has a waiting row of its own (`WaitingSlot.handedOff`), to be marked done.
        var hasRow: Bool
        /// This instance took it for its own device and held it for order (not a hand-off from
        /// another instance: not counted as one).
        var ownTake = false
    }

    /// By sequence, the device and whether it has a row: small, since a follower adds one for
    /// every hand-off it reads. The notification, which only a few carry (a row of their own,
    /// or attached when their record went), is kept beside it: held inline, every insert, resize
    /// and take of this table copied a whole notification's worth of bytes.
    private var bySequence: [UInt64: Slot] = [:]
    private var notifications: [UInt64: PendingNotification] = [:]
    private struct Slot {
        var deviceID: String
        var hasRow: Bool
        var ownTake = false
    }
    private var byDevice: [String: DeviceList] = [:]
    /// A device's sequences in arrival order; those before `head` were taken, and some after
    /// it may be gone (removed by sequence). `live` counts those still in `bySequence`.
    private struct DeviceList {
        var sequences: [UInt64] = []
        var head = 0
        var live = 0

        mutating func append(_ sequence: UInt64) {
            sequences.append(sequence)
            live += 1
        }
    }

    var isEmpty: Bool { bySequence.isEmpty }
    var count: Int { bySequence.count }
    func contains(_ sequence: UInt64) -> Bool { bySequence[sequence] != nil }

    /// A hand-off with a row of its own (`WaitingSlot.handedOff`).
    mutating func add(_ notification: PendingNotification) {
        add(notification.sequence, Entry(deviceID: notification.deviceID, notification: notification, hasRow: true))
    }

    mutating func add(_ sequence: UInt64, _ entry: Entry) {
        let known = bySequence.updateValue(Slot(deviceID: entry.deviceID, hasRow: entry.hasRow, ownTake: entry.ownTake), forKey: sequence) != nil
        if entry.notification != nil || !notifications.isEmpty { notifications[sequence] = entry.notification }
        guard !known else { return }
        // One lookup by the device's id, changed in place.
        byDevice[entry.deviceID, default: DeviceList()].append(sequence)
    }

    @discardableResult
    mutating func remove(_ sequence: UInt64) -> Entry? {
        guard let slot = bySequence.removeValue(forKey: sequence) else { return nil }
        let entry = Entry(deviceID: slot.deviceID, notification: takeNotification(sequence), hasRow: slot.hasRow, ownTake: slot.ownTake)
        // One lookup by the device's id; its list is changed in place through the index.
        if let index = byDevice.index(forKey: entry.deviceID) {
            if byDevice.values[index].live <= 1 {
                byDevice.remove(at: index)
            } else {
                byDevice.values[index].live -= 1
                // A device that never runs dry (a steady stream) sheds what is gone now and then.
                let list = byDevice.values[index]
                if list.sequences.count - list.head > 2 * list.live + 64 {
                    byDevice.values[index].sequences = list.sequences[list.head...].filter { bySequence[$0] != nil }
                    byDevice.values[index].head = 0
                }
            }
        }
        return entry
    }

    /// The device's hand-offs, oldest first, taken out (at most `limit`). Only what it takes is
    /// visited: with a backlog of thousands for one device, taken `limit` at a time, looking
    /// over the rest on every take cost more than routing them.
    mutating func take(deviceID: String, limit: Int = .max) -> [(sequence: UInt64, entry: Entry)] {
        guard var list = byDevice.removeValue(forKey: deviceID) else { return [] }
        var taken: [(sequence: UInt64, entry: Entry)] = []
        var index = list.head
        while index < list.sequences.endIndex, taken.count < limit {
            let sequence = list.sequences[index]
            if let slot = bySequence.removeValue(forKey: sequence) {
                taken.append(
                    (sequence, Entry(deviceID: slot.deviceID, notification: takeNotification(sequence), hasRow: slot.hasRow, ownTake: slot.ownTake)))
            }
            index += 1
        }
        list.live -= taken.count
        // Nothing after it: the list goes (whatever its count says).
        guard index < list.sequences.endIndex else { return taken }
        list.head = index
        if list.live <= 0 {
            // Its count says none is left; keep what is, should a sequence have come back under
            // another device and put the count off.
            let rest = list.sequences[index...].filter { bySequence[$0] != nil }
            guard !rest.isEmpty else { return taken }
            list = DeviceList(sequences: rest, head: 0, live: rest.count)
        }
        // Dropped from the front once half is taken: each sequence is moved at most once more.
        if list.head > list.sequences.count / 2 {
            list.sequences.removeFirst(list.head)
            list.head = 0
        }
        byDevice[deviceID] = list
        return taken
    }

    func has(deviceID: String) -> Bool { byDevice[deviceID] != nil }

    /// Gives a record-borne hand-off its notification (its record is gone).
    mutating func attach(_ notification: PendingNotification, to sequence: UInt64) {
        guard bySequence[sequence] != nil else { return }
        notifications[sequence] = notification
    }

    /// The hand-off with this sequence, if it waits.
    func entry(_ sequence: UInt64) -> Entry? {
        bySequence[sequence].map { Entry(deviceID: $0.deviceID, notification: notifications[sequence], hasRow: $0.hasRow, ownTake: $0.ownTake) }
    }

    /// The notifications of the hand-offs with a waiting row of their own.
    var notificationsWithRows: [PendingNotification] {
        notifications.compactMap { bySequence[$0.key]?.hasRow == true ? $0.value : nil }
    }

    private mutating func takeNotification(_ sequence: UInt64) -> PendingNotification? {
        notifications.isEmpty ? nil : notifications.removeValue(forKey: sequence)
    }

    /// The devices with hand-offs.
    var deviceIDs: some Collection<String> { byDevice.keys }

}

extension World {
    /// Whether the change running now is made in a shared turn (`--redis`): several instances
    /// change the state at once, each only what it owns, so a push for another instance's
    /// device is handed off instead of routed here.
    public var inSharedTurn: Bool { changeMode == .shared }

    /// An accepted notification, routed here when this instance may decide the device's
    /// deliveries (no other instances, the device is its own, or no shared turn is running:
    /// under the lease every copy is current), else handed off to the device's owner. The
    /// device's hand-offs that arrived earlier go first, so its notifications keep their order.
    /// `deviceSlot`: where the device is in the registry, when known (`DeviceRegistry.deviceSlot`).
    mutating func routeOrHandOff(_ notification: PendingNotification, nowMs: Int64, deviceSlot: Int = -1) -> [DeviceFrame] {
        if inSharedTurn, let ownership, let owner = owner(of: notification.deviceID) {
            if owner != ownership.me {
                handOff(notification, to: owner, nowMs: nowMs)
                return []
            }
            if ownership.members.count > 1 {
                holdForOrder(notification, nowMs: nowMs)
                return []
            }
        }
        if !delivery.heldForOrder.isEmpty { releaseHeldForOrder(deviceID: notification.deviceID) }
        // No hand-offs (the usual case): the route's frames as they are, not appended to an
        // empty array (`append(contentsOf:)`, about 150 instructions).
        guard !delivery.handedOff.isEmpty else { return route(notification, nowMs: nowMs, deviceSlot: deviceSlot) }
        var frames = routeHandOffs(deviceID: notification.deviceID, nowMs: nowMs)
        frames += route(notification, nowMs: nowMs, deviceSlot: deviceSlot)
        return frames
    }

    /// A push this instance took in a shared turn for a device it owns, while other instances
    /// take pushes too: one they answered before this one reached it may not have been read
    /// here yet, and routing this one now would put it ahead. So it waits as a hand-off to this
    /// instance would (its record awaits the owner, which every copy knows), apart, until the
    /// copy has followed the log to this push's own write (`releaseHeldForOrder`): it then
    /// joins the device's hand-offs behind every earlier one, in the log's order.
    private mutating func holdForOrder(_ notification: PendingNotification, nowMs: Int64) {
        let sequence = notification.sequence
        setOutcome(sequence, .pending, Self.heldExplanation, atMs: nowMs, logged: false)
        let whole = records.hasWholePayload(sequence: sequence)
        records.update(sequence: sequence) { record in
            record.heldForOrder = true
            if whole { record.awaitingOwner = true }
        }
        delivery.heldForOrder[sequence] = HandOffs.Entry(
            deviceID: notification.deviceID, notification: notification, hasRow: !whole, ownTake: true)
        if !whole { delivery.noteWaiting(.handedOff, notification) }
    }

    static let heldExplanation =
        "accepted by the instance that decides deliveries to this device; routed once it has read what other instances accepted before it"

    /// The held pushes with these sequences (written, and the copy has followed the log that
    /// far) join their devices' hand-offs, behind those read before; returns their devices.
    public mutating func releaseHeldForOrder(_ sequences: [UInt64]) -> [String] {
        var devices: [String] = []
        for sequence in sequences {
            guard let entry = delivery.heldForOrder.removeValue(forKey: sequence) else { continue }
            delivery.handedOff.add(sequence, entry)
            if !devices.contains(entry.deviceID) { devices.append(entry.deviceID) }
        }
        return devices
    }

    /// Under the lease (every write read): the device's held pushes join its hand-offs now,
    /// so a push routed at once comes after them.
    private mutating func releaseHeldForOrder(deviceID: String) {
        let held = delivery.heldForOrder.filter { $0.value.deviceID == deviceID }.keys.sorted()
        _ = releaseHeldForOrder(held)
    }

    /// The journal record just written is the hand-off when it holds the whole payload (it
    /// then says it awaits its owner, who rebuilds the notification from it); otherwise the
    /// notification gets a waiting row of its own.
    private mutating func handOff(_ notification: PendingNotification, to owner: Int, nowMs: Int64) {
        counters.pushesHandedOff += 1
        let sequence = notification.sequence
        let explanation = ownership?.handOffExplanation(to: owner) ?? DeviceOwnership.handOffText(me: 0, owner: owner)
        setOutcome(sequence, .pending, explanation, atMs: nowMs, logged: false)
        if records.hasWholePayload(sequence: sequence) {
            records.update(sequence: sequence) { $0.awaitingOwner = true }
            // Without the notification: should this instance become the device's owner, it is
            // rebuilt from the record, as on every other copy (keeping it cost the taker a copy
            // of every handed-off notification, and releasing it again when the owner routed it).
            delivery.handedOff.add(sequence, HandOffs.Entry(deviceID: notification.deviceID, notification: nil, hasRow: false))
        } else {
            delivery.handedOff.add(notification)
            delivery.noteWaiting(.handedOff, notification)
        }
    }

    /// A journal record this instance writes back after Redis lost its state and another
    /// instance's copy was restored without it (`restoreRecordsLeftOut`). What it waited for
    /// here (the device's ack, the offline store, a held wake) is not in the restored delivery
    /// state either, so as it was it would wait for nothing and never arrive: it goes to the
    /// device's owner as a hand-off instead, which routes it again from the record (a device
    /// that had its frame already may see it twice, as after a move).
    public func recordToWriteBack(_ record: NotificationRecord) -> NotificationRecord {
        guard record.status == 200, record.broadcastBox == nil, let deviceID = record.deviceID, let bundleID = record.bundleID,
            !record.delivery.awaitingOwner, record.hasWholePayload,
            record.outcome == .pending || record.outcome == .stored || record.outcome == .deferred,
            !holdsWaiting(record.sequence, AppKey(deviceID: deviceID, bundleID: bundleID))
        else { return record }
        var record = record
        let before = record.explanation
        record.delivery.awaitingOwner = true
        record.delivery.heldForOrder = false
        record.delivery.outcome = .pending
        record.delivery.explanation =
            "restored after Redis lost its state, from this instance's copy, and routed again by the device's owner (it read here: \(before))"
        return record
    }

    /// Whether the delivery state holds this notification anywhere: stored, held, batched,
    /// in flight, or waiting for its owner.
    func holdsWaiting(_ sequence: UInt64, _ key: AppKey) -> Bool {
        if delivery.stored[key]?.sequence == sequence || delivery.deferred[key]?.notification.sequence == sequence { return true }
        if delivery.batched.contains(where: { $0.notification.sequence == sequence }) { return true }
        if delivery.handedOff.contains(sequence) || delivery.heldForOrder[sequence] != nil { return true }
        // Shared state: a delivery's id is its notification's sequence.
        return delivery.mirroredInflight[sequence] != nil || delivery.inflight[sequence]?.notification.sequence == sequence
    }

    /// Replication: a record arrived that awaits its owner (a hand-off without a row).
    mutating func noteHandOff(record: NotificationRecord) {
        guard record.delivery.awaitingOwner, let deviceID = record.deviceID else { return }
        delivery.handedOff.add(record.sequence, HandOffs.Entry(deviceID: deviceID, notification: nil, hasRow: false))
    }

    /// Hand-offs whose journal record fell off the end before the owner routed them (a journal
    /// of a few records, an owner far behind): the owner keeps the notification, built from the
    /// record, and routes it as any other; the other instances forget them. Without this the
    /// owner found no record to route from, and a push answered 200 was never delivered.
    mutating func keepEvictedHandOffs() {
        guard !records.evictedHandOffs.isEmpty else { return }
        let (kept, dropped) = records.takeEvictedHandOffs()
        counters.handOffsLost += UInt64(dropped)
        for evicted in kept {
            guard let entry = delivery.handedOff.entry(evicted.sequence), entry.notification == nil else { continue }
            let owned = owns(entry.deviceID)
            let record = evicted.keptEncoded.flatMap(StateCodec.handOff(ofRecord:)) ?? evicted
            if owned, let notification = handedOffNotification(sequence: evicted.sequence, record: record) {
                delivery.handedOff.attach(notification, to: evicted.sequence)
            } else {
                if owned { counters.handOffsLost += 1 }
                delivery.handedOff.remove(evicted.sequence)
            }
        }
    }

    /// Routes the hand-offs waiting for `deviceID`, oldest first (at most `limit`).
    mutating func routeHandOffs(deviceID: String, nowMs: Int64, limit: Int = .max) -> [DeviceFrame] {
        keepEvictedHandOffs()
        var frames: [DeviceFrame] = []
        for (sequence, entry) in delivery.handedOff.take(deviceID: deviceID, limit: limit) {
            if entry.hasRow { delivery.noteDone(sequence) }
            let notification: PendingNotification?
            if let built = entry.notification {
                records.update(sequence: sequence) { record in
                    record.awaitingOwner = false
                    record.heldForOrder = false
                }
                notification = built
            } else {
                notification = records.takeForRouting(sequence: sequence).flatMap { handedOffNotification(sequence: sequence, record: $0) }
            }
            guard let notification else { continue }
            if !entry.ownTake, !takenByOwner(sequence, deviceID: entry.deviceID) { counters.handOffsRouted += 1 }
            frames += route(notification, nowMs: nowMs)
        }
        return frames
    }

    /// Whether the push numbered `sequence` was taken by the instance that owns its device
    /// (a journal number carries its taker's stripe, `SequenceStripes`): held there for order,
    /// not handed off, whichever instance routes it (under the lease any may). Counting those
    /// as hand-offs routed put `handoffs_routed` above `pushes_handed_off`.
    private func takenByOwner(_ sequence: UInt64, deviceID: String) -> Bool {
        guard let owner = owner(of: deviceID) else { return false }
        return UInt64(owner) % SequenceStripes.count == sequence % SequenceStripes.count
    }

    /// The notification a journal record that awaits its owner stands for, as the instance
    /// that took the push built it (`ProviderEndpoint`), from the record's fields
    /// (`RecordStore.takeForRouting`): nil when its payload was cut or its token is gone (the
    /// device removed).
    func handedOffNotification(sequence: UInt64, record: NotificationRecord) -> PendingNotification? {
        guard record.hasWholePayload, let deviceID = record.deviceID,
            let bundleID = record.bundleID, let pushType = record.pushType.flatMap(PushType.init(rawValue:)),
            let entry = Hex.hasUppercase(Substring(record.token))
                ? registry.token(Hex.lowercased(Substring(record.token))) : registry.token(record.token)
        else { return nil }
        var notification = PendingNotification(
            sequence: sequence, apnsID: record.apnsID, token: entry.token, topic: entry.topic, deviceID: deviceID,
            bundleID: bundleID, pushType: pushType, priority: record.priority, collapseID: record.collapseID,
            storeUntilMs: PendingNotification.storeUntil(
                expiration: record.expiration, receivedAtMs: record.receivedAtMs, defaultStorageMs: deliveryOptions.defaultStorageMs),
            payload: record.payload, content: PushContent.read(record.payload))
        notification.acceptedAtNanos = 0
        return notification
    }

    /// The instance that decides `deviceID`'s deliveries (`DeviceOwnership`); nil when the
    /// state is not shared by instances that own devices.
    public func owner(of deviceID: String) -> Int? {
        ownership.map { $0.owner(of: deviceID, connectionID: registry.devices[deviceID]?.connectionID) }
    }

    /// Pushes handed off to their device's owner that this copy knows of and has not seen
    /// routed yet (`/metrics`).
    public var handOffsWaiting: Int { delivery.handedOff.count }

    /// Whether this instance decides `deviceID`'s deliveries (always, when no instances own
    /// devices).
    public func owns(_ deviceID: String) -> Bool {
        guard let ownership else { return true }
        return owner(of: deviceID) == ownership.me
    }

    /// The hand-offs this instance owns, by device (the owner routes them).
    public var handOffsToRoute: [String] {
        guard ownership != nil, !delivery.handedOff.isEmpty else { return [] }
        return delivery.handedOff.deviceIDs.filter { owns($0) }
    }

    /// Whether pushes answered 200 wait to be routed by their device's owner (held here for
    /// order, or handed off): `routeEveryWaitingPush` has work.
    public var hasPushesWaitingForRouting: Bool {
        ownership != nil && !(delivery.handedOff.isEmpty && delivery.heldForOrder.isEmpty)
    }

    /// Under the lease, where every copy is current and this instance may decide every
    /// device: routes every push answered 200 that still waits for its device's owner, oldest
    /// first per device. `EmulatorState` does this before each change made under the lease,
    /// so the change finds every device as if its pushes had been routed when answered: a
    /// device set online, or connecting (which also moves its owner), after pushes were
    /// answered gets the newest of them, which replaced the one its store held before, not
    /// both; otherwise the owner's routing thread would route them after the change.
    public mutating func routeEveryWaitingPush(nowMs: Int64) -> [DeviceFrame] {
        guard hasPushesWaitingForRouting, !inSharedTurn else { return [] }
        if !delivery.heldForOrder.isEmpty { _ = releaseHeldForOrder(delivery.heldForOrder.keys.sorted()) }
        var frames: [DeviceFrame] = []
        for deviceID in Array(delivery.handedOff.deviceIDs) {
            frames += routeHandOffs(deviceID: deviceID, nowMs: nowMs)
        }
        return frames
    }

    /// Routes the hand-offs waiting for these devices, where this instance owns them (an owner
    /// that changed meanwhile leaves them to the new one), at most `limit` in all; also says
    /// which devices have some left.
    public mutating func routeHandOffs(deviceIDs: [String], nowMs: Int64, limit: Int) -> (frames: [DeviceFrame], left: [String]) {
        var frames: [DeviceFrame] = []
        var budget = limit
        var left: [String] = []
        for deviceID in deviceIDs where owns(deviceID) {
            guard budget > 0 else {
                left.append(deviceID)
                continue
            }
            let before = delivery.handedOff.count
            frames += routeHandOffs(deviceID: deviceID, nowMs: nowMs, limit: budget)
            budget -= before - delivery.handedOff.count
            if delivery.handedOff.has(deviceID: deviceID) { left.append(deviceID) }
        }
        return (frames, left)
    }
}

/// How a change is made when several instances share the state (`--redis`).
public enum ChangeMode: Sendable {
    /// Alone: this instance holds the lease, every other instance waits, and its copy is
    /// current. Every change may be made so (and every change was, before hand-offs).
    case exclusive
    /// Beside the others: what a push changes (its record, the deliveries of devices this
    /// instance owns, hand-offs for the others).
    case shared
}
