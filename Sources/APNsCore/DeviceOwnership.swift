// Several instances sharing one state (`--redis`) decide each device's deliveries in one place:
// the device's owner. A push accepted by another instance is journaled there and handed off
// (a waiting slot of its own, shared like the others); the owner routes it when the hand-off
// reaches its copy. So what is decided per device (one stored notification per app, collapse,
// budgets, the in-flight window) has one order without a lease every instance waits for.

/// Which instance decides a device's deliveries: the members of the shared state, in order,
/// and a hash of the device id over them. The same on every instance that has applied the same
/// membership (it travels in the change log), so every instance agrees who owns what.
public struct DeviceOwnership: Sendable, Equatable {
    /// Instance numbers, ascending, without repeats.
    public let members: [Int]
    /// This instance's number.
    public let me: Int

    public init(members: [Int], me: Int) {
        self.members = Array(Set(members)).sorted()
        self.me = me
    }

    /// Whether this instance is one of the members (else it owns nothing, and changes must
    /// take the lease as before).
    public var isMember: Bool { members.contains(me) }

    /// The instance that owns `deviceID` (0 when there are no members).
    public func owner(of deviceID: String) -> Int {
        guard !members.isEmpty else { return 0 }
        return members[Int(StoredSurvivor.fnv1a(deviceID) % UInt64(members.count))]
    }

    public func owns(_ deviceID: String) -> Bool { owner(of: deviceID) == me }
}

/// Hand-offs waiting for their owner, by sequence, and per device in the order they arrived.
/// Removing one (its owner routed it: a row from the log) only forgets it by sequence; the
/// device's list drops what is gone when it is taken, or when none is left.
struct HandOffs: Sendable {
    private(set) var bySequence: [UInt64: PendingNotification] = [:]
    private var byDevice: [String: (sequences: [UInt64], live: Int)] = [:]

    var isEmpty: Bool { bySequence.isEmpty }
    var count: Int { bySequence.count }

    mutating func add(_ notification: PendingNotification) {
        guard bySequence.updateValue(notification, forKey: notification.sequence) == nil else { return }
        byDevice[notification.deviceID, default: ([], 0)].sequences.append(notification.sequence)
        byDevice[notification.deviceID]!.live += 1
    }

    @discardableResult
    mutating func remove(_ sequence: UInt64) -> PendingNotification? {
        guard let notification = bySequence.removeValue(forKey: sequence) else { return nil }
        let device = notification.deviceID
        if let entry = byDevice[device] {
            if entry.live <= 1 {
                byDevice[device] = nil
            } else {
                byDevice[device]!.live -= 1
                // A device that never runs dry (a steady stream) sheds what is gone now and then.
                if entry.sequences.count > 2 * entry.live + 64 {
                    byDevice[device]!.sequences.removeAll { bySequence[$0] == nil }
                }
            }
        }
        return notification
    }

    /// The device's hand-offs, oldest first, taken out (at most `limit`).
    mutating func take(deviceID: String, limit: Int = .max) -> [PendingNotification] {
        guard let entry = byDevice.removeValue(forKey: deviceID) else { return [] }
        var taken: [PendingNotification] = []
        var index = entry.sequences.startIndex
        while index < entry.sequences.endIndex, taken.count < limit {
            if let notification = bySequence.removeValue(forKey: entry.sequences[index]) { taken.append(notification) }
            index += 1
        }
        let rest = entry.sequences[index...].filter { bySequence[$0] != nil }
        if !rest.isEmpty { byDevice[deviceID] = (Array(rest), rest.count) }
        return taken
    }

    func has(deviceID: String) -> Bool { byDevice[deviceID] != nil }

    /// The devices with hand-offs.
    var deviceIDs: Dictionary<String, (sequences: [UInt64], live: Int)>.Keys { byDevice.keys }
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
    mutating func routeOrHandOff(_ notification: PendingNotification, nowMs: Int64) -> [DeviceFrame] {
        if inSharedTurn, let ownership, !ownership.owns(notification.deviceID) {
            handOff(notification, to: ownership.owner(of: notification.deviceID), nowMs: nowMs)
            return []
        }
        var frames = delivery.handedOff.isEmpty ? [] : routeHandOffs(deviceID: notification.deviceID, nowMs: nowMs)
        frames += route(notification, nowMs: nowMs)
        return frames
    }

    private mutating func handOff(_ notification: PendingNotification, to owner: Int, nowMs: Int64) {
        delivery.handedOff.add(notification)
        delivery.noteWaiting(.handedOff, notification)
        counters.pushesHandedOff += 1
        setOutcome(
            notification.sequence, .pending,
            "accepted by instance \(ownership?.me ?? 0); instance \(owner), which decides deliveries to this device, routes it",
            atMs: nowMs)
    }

    /// Routes the hand-offs waiting for `deviceID`, oldest first (at most `limit`).
    mutating func routeHandOffs(deviceID: String, nowMs: Int64, limit: Int = .max) -> [DeviceFrame] {
        var frames: [DeviceFrame] = []
        for notification in delivery.handedOff.take(deviceID: deviceID, limit: limit) {
            delivery.noteDone(notification.sequence)
            counters.handOffsRouted += 1
            frames += route(notification, nowMs: nowMs)
        }
        return frames
    }

    /// The hand-offs this instance owns, by device (the owner routes them).
    public var handOffsToRoute: [String] {
        guard let ownership, !delivery.handedOff.isEmpty else { return [] }
        return delivery.handedOff.deviceIDs.filter { ownership.owns($0) }
    }

    /// Routes the hand-offs waiting for these devices, where this instance owns them (an owner
    /// that changed meanwhile leaves them to the new one), at most `limit` in all; also says
    /// which devices have some left.
    public mutating func routeHandOffs(deviceIDs: [String], nowMs: Int64, limit: Int) -> (frames: [DeviceFrame], left: [String]) {
        var frames: [DeviceFrame] = []
        var budget = limit
        var left: [String] = []
        for deviceID in deviceIDs where ownership?.owns(deviceID) ?? true {
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
