// Notifications between acceptance and the device: where each one waits, and the options
// that decide how long.

/// How accepted notifications travel to devices (docs/device-model.md).
public struct DeliveryOptions: Sendable {
    /// Delivery ids are the notifications' journal sequence numbers (several instances
    /// sharing the state, where every instance must find the delivery an ack names).
    public var deliveryIDsAreSequences = false
    /// Background wakes per (device, app) per hour. Apple: "two or three an hour".
    public var backgroundBudgetPerHour = 3
    /// How long APNs keeps a notification for an offline device when `apns-expiration` is absent.
    public var defaultStorageMs: Int64 = 30 * 86_400_000
    /// Priority 5 and 1 are batched for power: delivered this long after acceptance. 0 = at once.
    public var lowPriorityDelayMs: Int64 = 0
    /// After an uninstall, how long APNs keeps answering 200 before 410 starts (0 = at once).
    public var unregisteredDelayMs: Int64 = 0
    /// After an uninstall with a delay, start 410 after this many pushes even if the delay is
    /// not over (nil = time only).
    public var unregisteredAfterPushes: Int?
    /// 429 `TooManyRequests` when one token gets more than `count` pushes within `windowMs`
    /// (nil = off: Apple publishes no number, and load tests hit single tokens hard).
    public var tooManyRequests: (count: Int, windowMs: Int64)?
    /// Deliveries a connected device may have unacknowledged. Beyond it the device is treated
    /// as unreachable: APNs keeps the newest notification per app and the older ones are
    /// coalesced, so a device that falls behind (or never reads) costs bounded memory.
    public var deviceWindow = 1000
    /// A device whose oldest unacknowledged delivery is this old is disconnected; what it
    /// had not acknowledged goes back to the store.
    public var deviceAckTimeoutMs: Int64 = 60_000
    /// Which notification an offline device's slot keeps when several arrive: the newest, or
    /// one chosen at random (Apple: "in a non-deterministic way").
    public var storedSurvivor: StoredSurvivor = .newest

    public init() {}
}

/// APNs keeps one notification per app for an offline device, and Apple's sending page says it
/// picks the one "in a non-deterministic way" (a 2025 DTS answer says the same). `newest` is
/// what providers tend to assume; `random` keeps each of the notifications that arrived for the
/// slot with equal chance, reproducibly for one seed, so a provider that relies on newest-wins
/// sees it fail.
public enum StoredSurvivor: Sendable, Equatable {
    case newest
    case random(seed: UInt64)

    /// Whether the newcomer, the `arrivals`-th notification for a slot since it filled, takes
    /// it from the one kept so far: with chance 1/arrivals, which leaves each arrival an equal
    /// chance of being kept (reservoir sampling). Depends only on the seed, the slot and the
    /// count, so the same pushes with the same seed keep the same one.
    public func newcomerWins(deviceID: String, bundleID: String, arrivals: Int) -> Bool {
        guard case .random(let seed) = self, arrivals > 1 else { return true }
        var mixed = seed ^ Self.fnv1a(deviceID) ^ (Self.fnv1a(bundleID) &* 0x1000_0000_01B3) ^ (UInt64(arrivals) &* 0x9E37_79B9_7F4A_7C15)
        // SplitMix64's finaliser: every input bit reaches every output bit.
        mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
        mixed ^= mixed >> 31
        return mixed % UInt64(arrivals) == 0
    }

    /// FNV-1a: a hash that is the same in every process (Swift's Hasher is seeded per process).
    static func fnv1a(_ text: String) -> UInt64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        // Over the string's own bytes where it has them (a native string always does): the
        // UTF-8 view's iterator cost 30 instructions a byte.
        let done = text.utf8.withContiguousStorageIfAvailable { bytes in
            for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        }
        if done == nil {
            for byte in text.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        }
        return hash
    }
}

/// A message for one device connection, produced inside the lock and written after it.
public struct DeviceFrame: Sendable {
    public init(deviceID: String, connectionID: UInt64, message: JSONValue, closeAfter: Bool = false) {
        self.deviceID = deviceID
        self.connectionID = connectionID
        self.message = message
        self.closeAfter = closeAfter
    }

    public var deviceID: String
    public var connectionID: UInt64
    public var message: JSONValue
    /// Close the connection after writing (a replaced connection).
    public var closeAfter: Bool = false
}

extension PendingNotification {
    /// Until when APNs keeps it for an offline device: `apns-expiration` (seconds; 0: not at
    /// all, nil here; a time already past stays as it is, so that why it is not stored can be
    /// told), else the default storage time from acceptance.
    /// APNs keeps a notification "for up to 30 days or until apns-expiration, whichever comes
    /// first": an expiration further ahead is cut to the 30 days; 0 is never stored.
    /// When a notification kept until `storeUntilMs` expired, found expired at `nowMs`: logged at
    /// its own time, not when a tick or a clock move noticed it.
    static func expiredAtMs(storeUntilMs: Int64?, nowMs: Int64) -> Int64 { min(nowMs, storeUntilMs ?? nowMs) }

    static func storeUntil(expiration: Int64?, receivedAtMs now: Int64, defaultStorageMs: Int64) -> Int64? {
        switch expiration {
        case nil: return now + defaultStorageMs
        case 0?: return nil
        case let seconds?: return min(millisecondsSince1970(wholeSeconds: seconds), now + defaultStorageMs)
        }
    }
}

/// A notification on its way to a device.
public struct PendingNotification: Sendable {
    public var sequence: UInt64
    /// The push's `apns-id` (`apnsID` is its text, formatted on each read for a drawn one).
    public var apnsPushID: PushID
    public var token: String
    public var topic: String
    public var deviceID: String
    public var bundleID: String
    public var pushType: PushType
    public var priority: Int
    public var collapseID: String?
    /// Keep it for an offline device until then (ms); nil = do not store (`apns-expiration: 0`
    /// or a time already past).
    public var storeUntilMs: Int64?
    public var payload: [UInt8]
    public var content: PushContent
    public var wasStored = false
    /// When the provider got its 200 (monotonic ns; 0: not known, e.g. restored from disk),
    /// for the delivery latency histogram.
    public var acceptedAtNanos: UInt64 = 0

    public init(
        sequence: UInt64, apnsID: String, token: String, topic: String, deviceID: String, bundleID: String,
        pushType: PushType, priority: Int, collapseID: String?, storeUntilMs: Int64?, payload: [UInt8],
        content: PushContent, wasStored: Bool = false
    ) {
        self.sequence = sequence
        self.apnsPushID = PushID(apnsID)
        self.token = token
        self.topic = topic
        self.deviceID = deviceID
        self.bundleID = bundleID
        self.pushType = pushType
        self.priority = priority
        self.collapseID = collapseID
        self.storeUntilMs = storeUntilMs
        self.payload = payload
        self.content = content
        self.wasStored = wasStored
    }

    public var apnsID: String {
        get { apnsPushID.text }
        set { apnsPushID = PushID(newValue) }
    }
}

struct AppKey: Hashable, Sendable {
    var deviceID: String
    var bundleID: String
}

struct InFlight: Sendable {
    var connectionID: UInt64
    var notification: PendingNotification
    var verdict: DeliveryVerdict
    var sentAtMs: Int64
}

/// Everything between acceptance and the device: the offline store (one per device and app),
/// held background pushes, deliveries awaiting an ack, budgets and what is on screen.
public struct DeliveryState: Sendable {
    var stored: [AppKey: PendingNotification] = [:]
    /// `--stored-survivor random`: notifications that arrived for each filled slot (memory
    /// only: after a restart, or on another instance, a slot counts afresh).
    var storeArrivals: [AppKey: Int] = [:]
    var deferred: [AppKey: (notification: PendingNotification, reason: DeferReason)] = [:]
    var batched: [(releaseAtMs: Int64, notification: PendingNotification)] = []
    var inflight: [UInt64: InFlight] = [:]
    /// Unacknowledged deliveries per device (the window, `DeliveryOptions.deviceWindow`).
    var inflightPerDevice: [String: Int] = [:]
    /// Devices whose window filled up: their stored notifications go out as acks free it.
    var windowFull: Set<String> = []
    var budgets: [AppKey: BackgroundBudget] = [:]
    /// Per app, the notification on screen for each `apns-collapse-id` (its record). Only
    /// pushes with a collapse id touch it; taps find their notification in the journal.
    var collapsed: [AppKey: [String: UInt64]] = [:]
    var recentPushes: [String: (windowStartMs: Int64, count: Int)] = [:]
    var nextDeliveryID: UInt64 = 1
    /// Multi-instance mode: notifications another instance sent and is waiting to have
    /// acknowledged, by sequence. That instance owns them (delivery id, verdict, ack timer);
    /// this copy only mirrors them until its rows say where they went. Always empty otherwise.
    var mirroredInflight: [UInt64: PendingNotification] = [:]
    /// Multi-instance mode: notifications accepted for devices another instance owns, until
    /// their owner routes them (DeviceOwnership.swift). Always empty otherwise.
    var handedOff = HandOffs()
    /// Multi-instance mode: notifications this instance took for a device it owns, held until
    /// its copy has read every write before its own (then they join `handedOff`, in log order).
    var heldForOrder: [UInt64: HandOffs.Entry] = [:]
    /// With persistence on: notifications entering or leaving a waiting slot, in order.
    /// Budgets, collapse state and flood windows are not kept (they refill or start afresh).
    public var tracksChanges = false
    private var waitingChanges: [StateChange] = []

    public init() {}

    mutating func noteWaiting(_ slot: WaitingSlot, _ notification: PendingNotification, flight: FlightRow? = nil) {
        if tracksChanges {
            waitingChanges.append(.notificationWaiting(WaitingNotification(slot: slot, notification: notification, flight: flight)))
        }
    }

    /// Budgets change only here, so that with change tracking on they are shared.
    mutating func setBudget(_ key: AppKey, _ budget: BackgroundBudget) {
        guard budgets[key] != budget else { return }
        budgets[key] = budget
        if tracksChanges { waitingChanges.append(.budgetSaved(deviceID: key.deviceID, bundleID: key.bundleID, budget: budget)) }
    }

    mutating func noteDone(_ sequence: UInt64) {
        if tracksChanges { waitingChanges.append(.notificationDone(sequence: sequence)) }
    }

    public mutating func takeWaitingChanges() -> [StateChange] { takeAll(&waitingChanges) }

    /// Every waiting notification with its slot, oldest first (a reset's snapshot).
    public var waiting: [WaitingNotification] {
        var all = stored.values.map { WaitingNotification(slot: .stored, notification: $0) }
        all += deferred.values.map { WaitingNotification(slot: .deferred($0.reason), notification: $0.notification) }
        all += batched.map { WaitingNotification(slot: .batched(releaseAtMs: $0.releaseAtMs), notification: $0.notification) }
        all += inflight.map { id, f in
            WaitingNotification(
                slot: .inFlight, notification: f.notification,
                flight: FlightRow(deliveryID: id, connectionID: f.connectionID, sentAtMs: f.sentAtMs, verdict: f.verdict))
        }
        all += mirroredInflight.values.map { WaitingNotification(slot: .inFlight, notification: $0) }
        // (Hand-offs that are journal records are not waiting rows: a reset keeps the records.)
        all += handedOff.notificationsWithRows.map { WaitingNotification(slot: .handedOff, notification: $0) }
        return all.sorted { $0.notification.sequence < $1.notification.sequence }
    }

    /// Notifications accepted and not yet settled, for accounting.
    public var pendingCount: Int {
        stored.count + deferred.count + batched.count + inflight.count + mirroredInflight.count + handedOff.count
    }
}
