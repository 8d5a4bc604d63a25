import Synchronization

/// All mutable emulator state that a reset puts back: credentials, devices and tokens, and the
/// notification journal. A value, so the configured start state is simply a kept copy.
public struct World: Sendable {
    public var credentials: Credentials
    public var registry: DeviceRegistry
    public var records: RecordStore
    /// Notifications between acceptance and the device.
    public var delivery = DeliveryState()
    public var deliveryOptions: DeliveryOptions

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
    private let world: Mutex<World>
    private let startState: Mutex<World>
    /// Mirrors `world.credentials.generation` so connections can check a cached token verdict
    /// without taking the lock.
    private let credentialsGeneration: Atomic<UInt64>

    public init(start: World) {
        world = Mutex(start)
        startState = Mutex(start)
        credentialsGeneration = Atomic(start.credentials.generation)
    }

    public var currentCredentialsGeneration: UInt64 { credentialsGeneration.load(ordering: .acquiring) }

    /// Runs `body` with exclusive access to the world. Keep it short.
    public func withWorld<T: Sendable, E: Error>(_ body: (inout World) throws(E) -> T) throws(E) -> T {
        try world.withLock { (world: inout World) throws(E) -> T in
            let before = world.credentials.generation
            defer {
                if world.credentials.generation != before {
                    credentialsGeneration.store(world.credentials.generation, ordering: .releasing)
                }
            }
            return try body(&world)
        }
    }

    /// Back to the configured start state, atomically: one lock, one assignment.
    public func reset() {
        let start = startState.withLock { $0 }
        withWorld { world in
            let generation = world.credentials.generation
            let nextSequence = world.records.nextSequence
            world = start
            world.credentials.advanceGeneration(beyond: generation)
            world.records.continueSequence(from: nextSequence)
        }
    }

    /// Replaces the start state (used once configuration is loaded).
    public func setStartState(_ start: World) {
        startState.withLock { $0 = start }
    }
}
