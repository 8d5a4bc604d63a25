import Synchronization
#if canImport(Locking)  // absent when scripts/fuzz compiles Core and Locking as one module
import Locking
#endif

/// All mutable emulator state that a reset puts back: credentials, devices and tokens, and the
/// notification journal. A value, so the configured start state is simply a kept copy.
public struct World: Sendable {
    public var credentials: Credentials
    public var registry: DeviceRegistry
    public var records: RecordStore
    /// Notifications between acceptance and the device.
    public var delivery = DeliveryState()
    public var deliveryOptions: DeliveryOptions
    public var faults = FaultRules()
    /// Apps' own backends by bundle id (the hooks the simulated apps call).
    public var backends: [String: AppBackend] = [:]
    /// Hook calls decided under the lock, handed out by `EmulatorState` after it.
    var backendOutbox: [BackendIntent] = []
    /// The newest cross-account deliveries (`GET /api/v1/checks`), at most `crossAccountKeep`.
    public var crossAccountDeliveries: [CrossAccountDelivery] = []
    public var counters = Counters()
    /// Changes collected for persistence (`--state-dir`); off otherwise.
    public var stateTracking = StateTracking()

    public init(credentials: Credentials = Credentials(), registry: DeviceRegistry = DeviceRegistry(),
                records: RecordStore = RecordStore(capacity: 50_000), deliveryOptions: DeliveryOptions = DeliveryOptions())
    {
        self.credentials = credentials
        self.registry = registry
        self.records = records
        self.deliveryOptions = deliveryOptions
    }
}

/// The shared state, behind one lock. A request takes the lock once for its stateful checks
/// and its record (plus once more on a provider-token cache miss); nothing slow (ES256, JSON
/// parsing, I/O) runs inside it.
public final class EmulatorState: Sendable {
    private let world: Locked<World>
    private let startState: Locked<World>
    /// Mirrors `world.credentials.generation` so connections can check a cached token verdict
    /// without taking the lock.
    private let credentialsGeneration: Atomic<UInt64>
    /// Whether any fault rule exists: requests skip fault matching without the lock when not.
    private let faultsActive = Atomic<Bool>(false)
    /// Called, outside the lock, with the sequence numbers of records added or changed by a
    /// `withWorld` call (for event streams and long polls). Set once at start-up.
    @exclusivity(unchecked) nonisolated(unsafe) public var onRecordChanges: (@Sendable ([UInt64], _ reset: Bool) -> Void)?
    /// Turned on while someone listens (event streams, long polls), so the request path pays
    /// nothing for change tracking otherwise.
    private let changeTracking = Atomic<Bool>(false)
    /// Where persistent changes go, in order, drained under the lock (`--state-dir`). Set
    /// once at start-up, before any request; nil keeps everything in memory only.
    @exclusivity(unchecked) nonisolated(unsafe) public var persistence: (any StateChangeSink)?
    /// Called, outside the lock and in order per call, with the backend hook calls a
    /// `withWorld` call decided (login, registration, fetch). Set once at start-up.
    @exclusivity(unchecked) nonisolated(unsafe) public var onBackendIntents: (@Sendable ([BackendIntent]) -> Void)?

    public func setChangeTracking(_ on: Bool) { changeTracking.store(on, ordering: .relaxed) }

    public init(start: World) {
        world = Locked(start)
        startState = Locked(start)
        credentialsGeneration = Atomic(start.credentials.generation)
    }

    public var currentCredentialsGeneration: UInt64 { credentialsGeneration.load(ordering: .acquiring) }
    public var hasFaultRules: Bool { faultsActive.load(ordering: .relaxed) }

    /// Runs `body` with exclusive access to the world. Keep it short.
    public func withWorld<T: Sendable, E: Error>(_ body: (inout World) throws(E) -> T) throws(E) -> T {
        let tracking = onRecordChanges != nil && changeTracking.load(ordering: .relaxed)
        let persistence = self.persistence
        var changes: [UInt64] = []
        var wake = false
        var intents: [BackendIntent] = []
        let result = try world.withLock { (world: inout World) throws(E) -> T in
            let before = world.credentials.generation
            world.records.trackChanges = tracking || persistence != nil
            defer {
                if !world.backendOutbox.isEmpty { intents = world.takeBackendIntents() }
                if world.credentials.generation != before {
                    credentialsGeneration.store(world.credentials.generation, ordering: .releasing)
                }
                faultsActive.store(!world.faults.isEmpty, ordering: .relaxed)
                if tracking || persistence != nil {
                    let changed = world.records.takeChanges()
                    if tracking { changes = changed }
                    if let persistence {
                        // Under the lock, so the sink sees changes in the order they happened.
                        let rows = world.takeStateChanges(recordSequences: changed)
                        if !rows.isEmpty { wake = persistence.enqueue(rows) }
                    }
                }
            }
            return try body(&world)
        }
        if wake { persistence?.wake() }
        if !changes.isEmpty { onRecordChanges?(changes, false) }
        if !intents.isEmpty { onBackendIntents?(intents) }
        return result
    }

    /// Back to the configured start state, atomically: one lock, one assignment.
    public func reset() {
        let start = startState.withLock { $0 }
        withWorld { world in
            let generation = world.credentials.generation
            let nextSequence = world.records.nextSequence
            let registry = world.registry
            world = start
            world.registry.continueRandomness(from: registry)
            world.credentials.advanceGeneration(beyond: generation)
            world.records.continueSequence(from: nextSequence)
            if persistence != nil {
                // The drain at the end of this call hands the store the whole start state,
                // which it writes as one transaction.
                world.startTrackingChanges()
                world.stateTracking.resetTo = world.persistedState
            }
        }
        onRecordChanges?([], true)
    }

    /// Replaces the start state (used once configuration is loaded).
    public func setStartState(_ start: World) {
        startState.withLock { $0 = start }
    }
}
