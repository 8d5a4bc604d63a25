import Synchronization
import Locking

// The persistence interface (`--state-dir`). The world changes under its lock; every change
// that must survive a restart is described as a `StateChange` — a whole row to save, or a key
// to remove — and handed to a `StateStore` in order. Rows instead of fine-grained events keep
// the changes idempotent: a later change to the same entity (`ChangeKey`) supersedes an
// earlier one, so a writer may coalesce them before they reach the store.

/// Where an accepted notification waits for its device.
public enum WaitingSlot: Sendable, Equatable {
    /// The store-and-forward slot (one per device and app).
    case stored
    /// A background push held back (budget, Low Power Mode, force-quit app).
    case deferred(DeferReason)
    /// A low-priority push batched until this time (ms).
    case batched(releaseAtMs: Int64)
    /// Sent to a device, not yet acknowledged. After a restart it goes back to the store, as
    /// on a disconnect.
    case inFlight
    /// Accepted by an instance that does not decide the device's deliveries; its owner routes
    /// it (several instances, `--redis`: DeviceOwnership.swift).
    case handedOff
}

public struct WaitingNotification: Sendable {
    public var slot: WaitingSlot
    public var notification: PendingNotification
    /// For `.inFlight`: the delivery as sent, so that another instance sharing the state
    /// (`--redis`) can take the device's ack. Not kept by `--state-dir` (after a restart an
    /// in-flight notification goes back to the store anyway).
    public var flight: FlightRow?

    public init(slot: WaitingSlot, notification: PendingNotification, flight: FlightRow? = nil) {
        self.slot = slot
        self.notification = notification
        self.flight = flight
    }
}

/// A delivery waiting for the device's ack, as sent.
public struct FlightRow: Sendable, Equatable {
    public var deliveryID: UInt64
    public var connectionID: UInt64
    public var sentAtMs: Int64
    public var verdict: DeliveryVerdict

    public init(deliveryID: UInt64, connectionID: UInt64, sentAtMs: Int64, verdict: DeliveryVerdict) {
        self.deliveryID = deliveryID
        self.connectionID = connectionID
        self.sentAtMs = sentAtMs
        self.verdict = verdict
    }
}

/// A provider key as stored: the PEM it was loaded from, so it can be loaded again.
public struct StoredKey: Sendable, Equatable {
    public var teamID: String
    public var keyID: String
    public var environment: APNsEnvironment?
    public var topics: [String]?
    public var relatedKeyID: String?
    public var pem: String
    public var source: String
    /// Added through the admin API. Keys from the configuration are read from their files
    /// at every start instead (so a replaced .p8 takes effect).
    public var addedAtRunTime: Bool

    public init(
        teamID: String, keyID: String, environment: APNsEnvironment?, topics: [String]?, relatedKeyID: String?,
        pem: String, source: String, addedAtRunTime: Bool
    ) {
        self.teamID = teamID
        self.keyID = keyID
        self.environment = environment
        self.topics = topics
        self.relatedKeyID = relatedKeyID
        self.pem = pem
        self.source = source
        self.addedAtRunTime = addedAtRunTime
    }

    /// nil for a key without its PEM (made in code, e.g. by tests): it cannot be reloaded.
    public init?(_ key: ProviderKey) {
        guard let pem = key.pem else { return nil }
        self.init(
            teamID: key.teamID, keyID: key.keyID, environment: key.environment, topics: key.topics.map { $0.sorted() },
            relatedKeyID: key.relatedKeyID, pem: pem, source: key.source, addedAtRunTime: key.addedAtRunTime)
    }
}

/// The fault rules in order, with their counters and the number the next unnamed rule gets.
public struct FaultRulesSnapshot: Sendable {
    public var rules: [FaultInjectionRule]
    public var nextNumber: Int

    public init(rules: [FaultInjectionRule], nextNumber: Int) {
        self.rules = rules
        self.nextNumber = nextNumber
    }
}

/// One change to persist. A store applies a list of them as one atomic unit, in order.
/// Indirect: a change is copied several times on its way to the store, and a boxed record
/// copies as one reference instead of some forty fields.
public indirect enum StateChange: Sendable {
    /// A device with its apps (added, changed, apps installed or uninstalled).
    case deviceSaved(Device)
    case deviceRemoved(id: String)
    /// A token issued or changed state (tokens are never forgotten, only invalidated).
    case tokenSaved(TokenEntry)
    case keySaved(StoredKey)
    case keyRemoved(keyID: String)
    /// Team ownership of a bundle.
    case appSaved(bundleID: String, teamID: String)
    case appRemoved(bundleID: String)
    /// The whole ordered rule list (rare, small; counters included).
    case faultsSaved(FaultRulesSnapshot)
    /// An accepted notification waiting for its device (stored, deferred, batched, in flight).
    case notificationWaiting(WaitingNotification)
    /// It left its slot: delivered, expired, coalesced or dropped (the record says which).
    case notificationDone(sequence: UInt64)
    /// A journal record appended or updated.
    case recordSaved(NotificationRecord)
    /// What became of a record since it was saved: its delivery part, the only part a later
    /// change touches (instances sharing a state, `--redis`; a state directory gets whole
    /// records).
    case recordDelivered(sequence: UInt64, delivery: RecordDelivery)
    /// Deleted through the admin API.
    case recordRemoved(sequence: UInt64)
    /// Records older than this fell off the journal's end (`--max-records`).
    case recordsEvicted(before: UInt64)
    /// Everything replaced by this state (start-up of a fresh directory, `POST /reset`).
    case reset(PersistedState)
    /// An app's background budget after a background push used it. Shared by instances on one
    /// Redis; `--state-dir` does not keep budgets (they refill, as after a reboot).
    case budgetSaved(deviceID: String, bundleID: String, budget: BackgroundBudget)
    /// A broadcast channel created, deleted (kept as a tombstone) or broadcast to (its counter
    /// and, for Most Recent Message Stored, its message).
    case channelSaved(BroadcastChannel)
    /// A deleted channel's tombstone forgotten (past `ChannelDirectory.maxTombstones`).
    case channelRemoved(id: String)
    /// A device's Live Activities, their tokens and waiting token pushes, and its widget
    /// budgets, whole (any Live Activity change on the device).
    case liveActivitiesSaved(LiveActivityRow)
    /// The device has none left (it was removed).
    case liveActivitiesRemoved(deviceID: String)
    /// How far `POST /api/v1/clock` has moved the emulator's time ahead (a state directory
    /// keeps it; instances sharing Redis each keep their own clock).
    case clockOffsetSaved(milliseconds: Int64)

    /// Changes with the same key supersede each other; nil for changes that never do.
    public var key: ChangeKey? {
        switch self {
        case .deviceSaved(let device): return .device(device.id)
        case .deviceRemoved(let id): return .device(id)
        case .tokenSaved(let entry): return .token(entry.token)
        case .keySaved(let key): return .key(key.keyID)
        case .keyRemoved(let id): return .key(id)
        case .appSaved(let bundle, _): return .app(bundle)
        case .appRemoved(let bundle): return .app(bundle)
        case .faultsSaved: return .faults
        case .notificationWaiting(let waiting): return .waiting(waiting.notification.sequence)
        case .notificationDone(let sequence): return .waiting(sequence)
        case .recordSaved(let record): return .record(record.sequence)
        case .recordRemoved(let sequence): return .record(sequence)
        case .recordDelivered(let sequence, _): return .recordDelivery(sequence)
        case .recordsEvicted, .reset: return nil
        case .budgetSaved(let device, let bundle, _): return .budget(deviceID: device, bundleID: bundle)
        case .channelSaved(let channel): return .channel(channel.id)
        case .channelRemoved(let id): return .channel(id)
        case .liveActivitiesSaved(let row): return .liveActivities(row.deviceID)
        case .liveActivitiesRemoved(let id): return .liveActivities(id)
        case .clockOffsetSaved: return .clockOffset
        }
    }

    public var isJournalRecord: Bool {
        if case .recordSaved = self { return true }
        return false
    }

    /// The sequence of a journal record this change saves; nil for any other change.
    public var recordSequence: UInt64? {
        if case .recordSaved(let record) = self { return record.sequence }
        return nil
    }
}

public enum ChangeKey: Hashable, Sendable {
    case device(String), token(String), key(String), app(String), faults, waiting(UInt64), record(UInt64)
    /// A record's delivery part (`StateChange.recordDelivered`), apart from the record: both
    /// are kept when one batch has them (the record first).
    case recordDelivery(UInt64)
    case budget(deviceID: String, bundleID: String)
    case channel(String)
    /// A device's Live Activity row, by device id.
    case liveActivities(String)
    case clockOffset
}

/// Everything a store holds, as read at start-up.
public struct PersistedState: Sendable {
    /// False for a new, empty store (nothing was ever written).
    public var initialized = false
    public var devices: [Device] = []
    public var tokens: [TokenEntry] = []
    public var keys: [StoredKey] = []
    public var apps: [(bundleID: String, teamID: String)] = []
    /// nil when never saved.
    public var faults: FaultRulesSnapshot?
    public var waiting: [WaitingNotification] = []
    /// Oldest first.
    public var records: [NotificationRecord] = []
    /// The journal's next sequence number (kept across a reset, so numbers never repeat).
    public var nextRecordSequence: UInt64 = 1
    /// Background budgets in use (shared state only; `--state-dir` lets them refill).
    public var budgets: [(deviceID: String, bundleID: String, budget: BackgroundBudget)] = []
    /// Broadcast channels, live and deleted, by id.
    public var channels: [BroadcastChannel] = []
    /// Devices' Live Activities (and widget budgets), by device id.
    public var liveActivities: [LiveActivityRow] = []
    /// How far the emulator's clock was moved ahead (`POST /api/v1/clock`).
    public var clockOffsetMs: Int64 = 0

    public init() {}
}

public struct StateStoreError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A persistence backend. `write` runs on one writer thread at a time; `load` once at start.
/// Implementations must apply a `write` atomically (all or nothing) and in order.
public protocol StateStore: AnyObject, Sendable {
    /// Human-readable location, for messages ("/var/lib/apns/state.sqlite").
    var location: String { get }
    func load() throws(StateStoreError) -> PersistedState
    func write(_ changes: [StateChange]) throws(StateStoreError)
}

/// A store in memory: the reference semantics of a backend, and a test double. (Without
/// `--state-dir` the emulator uses no store at all and tracks no changes.)
public final class InMemoryStateStore: StateStore {
    private struct Model {
        var initialized = false
        var devices: [String: Device] = [:]
        var tokens: [String: TokenEntry] = [:]
        var keys: [String: StoredKey] = [:]
        var apps: [String: String] = [:]
        var faults: FaultRulesSnapshot?
        var waiting: [UInt64: WaitingNotification] = [:]
        var records: [UInt64: NotificationRecord] = [:]
        var nextSequence: UInt64 = 1
        var channels: [String: BroadcastChannel] = [:]
        var liveActivities: [String: LiveActivityRow] = [:]
        var clockOffsetMs: Int64 = 0
    }

    private let model = Locked(Model())
    private let writeCount = Locked(0)

    /// Successful `write` calls (each one a transaction).
    public var writes: Int { writeCount.withLock { $0 } }

    public init() {}

    public var location: String { "memory" }

    public func load() throws(StateStoreError) -> PersistedState {
        model.withLock { m in
            var state = PersistedState()
            state.initialized = m.initialized
            state.devices = m.devices.values.sorted { $0.id < $1.id }
            state.tokens = m.tokens.values.sorted { $0.token < $1.token }
            state.keys = m.keys.values.sorted { $0.keyID < $1.keyID }
            state.apps = m.apps.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
            state.faults = m.faults
            state.waiting = m.waiting.values.sorted { $0.notification.sequence < $1.notification.sequence }
            state.records = m.records.values.sorted { $0.sequence < $1.sequence }
            state.channels = m.channels.values.sorted { $0.id < $1.id }
            state.liveActivities = m.liveActivities.values.sorted { $0.deviceID < $1.deviceID }
            state.clockOffsetMs = m.clockOffsetMs
            state.nextRecordSequence = max(
                m.nextSequence, (state.records.last?.sequence ?? 0) + 1,
                (state.waiting.last?.notification.sequence ?? 0) + 1)
            return state
        }
    }

    public func write(_ changes: [StateChange]) throws(StateStoreError) {
        model.withLock { m in
            m.initialized = true
            for change in changes { Self.apply(change, to: &m) }
        }
        writeCount.withLock { $0 += 1 }
    }

    private static func apply(_ change: StateChange, to m: inout Model) {
        switch change {
        case .deviceSaved(let device): m.devices[device.id] = device
        case .deviceRemoved(let id): m.devices.removeValue(forKey: id)
        case .tokenSaved(let entry): m.tokens[entry.token] = entry
        case .keySaved(let key): m.keys[key.keyID] = key
        case .keyRemoved(let id): m.keys.removeValue(forKey: id)
        case .appSaved(let bundle, let team): m.apps[bundle] = team
        case .appRemoved(let bundle): m.apps.removeValue(forKey: bundle)
        case .faultsSaved(let faults): m.faults = faults
        case .notificationWaiting(let waiting): m.waiting[waiting.notification.sequence] = waiting
        case .notificationDone(let sequence): m.waiting.removeValue(forKey: sequence)
        case .recordSaved(let record):
            m.records[record.sequence] = record
            m.nextSequence = max(m.nextSequence, record.sequence + 1)
        case .recordRemoved(let sequence): m.records.removeValue(forKey: sequence)
        case .recordDelivered(let sequence, let delivery): m.records[sequence]?.delivery = delivery
        case .recordsEvicted(let before): m.records = m.records.filter { $0.key >= before }
        case .budgetSaved: break  // budgets refill after a restart
        case .channelSaved(let channel): m.channels[channel.id] = channel
        case .channelRemoved(let id): m.channels.removeValue(forKey: id)
        case .liveActivitiesSaved(let row): m.liveActivities[row.deviceID] = row
        case .liveActivitiesRemoved(let id): m.liveActivities.removeValue(forKey: id)
        case .clockOffsetSaved(let offset): m.clockOffsetMs = offset
        case .reset(let state):
            m = Model()
            m.initialized = true
            for device in state.devices { m.devices[device.id] = device }
            for entry in state.tokens { m.tokens[entry.token] = entry }
            for key in state.keys { m.keys[key.keyID] = key }
            for app in state.apps { m.apps[app.bundleID] = app.teamID }
            m.faults = state.faults
            for waiting in state.waiting { m.waiting[waiting.notification.sequence] = waiting }
            for record in state.records { m.records[record.sequence] = record }
            m.nextSequence = state.nextRecordSequence
            for channel in state.channels { m.channels[channel.id] = channel }
            for row in state.liveActivities { m.liveActivities[row.deviceID] = row }
            m.clockOffsetMs = state.clockOffsetMs
        }
    }
}
