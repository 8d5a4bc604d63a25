import Synchronization
import Locking
import MonotonicClock

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
    /// Broadcast channels, live and deleted (the channel management API).
    public var channels = ChannelDirectory()
    /// Live Activities on the devices, and where their tokens lead.
    public var liveActivities = LiveActivityWorld()
    /// Apps configured without the Broadcast capability (`--app TEAM:BUNDLE?broadcast=off`).
    public var broadcastDisabledApps: Set<String> = []
    /// Hook calls decided under the lock, handed out by `EmulatorState` after it.
    var backendOutbox: [BackendIntent] = []
    /// The newest cross-account deliveries (`GET /api/v1/checks`), at most `crossAccountKeep`.
    public var crossAccountDeliveries: [CrossAccountDelivery] = []
    /// The newest pushes the device ignored (`GET /api/v1/checks`), at most `ignoredPushesKeep`.
    public var ignoredPushes: [IgnoredPush] = []
    /// Widget and control reload budgets on virtual devices (WidgetPushes.swift).
    public var widgetPushes = WidgetPushWorld()
    public var counters = Counters()
    /// Changes collected for persistence (`--state-dir`); off otherwise.
    public var stateTracking = StateTracking()
    /// Several instances (`--redis`): who decides which device's deliveries (nil: this
    /// instance decides all of them). Set by the coordinator as the membership changes.
    public var ownership: DeviceOwnership?
    /// How the change running now is made (`--redis`; see `ChangeMode`).
    public internal(set) var changeMode = ChangeMode.exclusive
    /// How far `POST /api/v1/clock` has moved the emulator's time ahead, as last noted
    /// (`noteClockOffset`), for a state directory to keep: the clock itself is `OffsetClock`.
    public internal(set) var clockOffsetMs: Int64 = 0
    /// A request-path cache, not state (see `TopicVerdict`).
    var lastTopicVerdict = TopicVerdict()

    public init(
        credentials: Credentials = Credentials(), registry: DeviceRegistry = DeviceRegistry(),
        records: RecordStore = RecordStore(capacity: 50_000), deliveryOptions: DeliveryOptions = DeliveryOptions()
    ) {
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
    private let faultsActive: Atomic<Bool>
    /// Called, outside the lock, with the sequence numbers of records added or changed by a
    /// `withWorld` call (for event streams and long polls). Set once, by the event hub, which
    /// needs the state first (`observeRecordChanges`).
    private let recordObserver = SetOnce<@Sendable ([UInt64], _ reset: Bool) -> Void>()
    fileprivate let channelObserver = SetOnce<@Sendable ([(BroadcastChannel, subscribers: Int)]) -> Void>()
    /// Called after the shared copy was replaced here (`--redis`: a reset another instance made,
    /// a reload, a restore), so that the device sockets here are reconciled with it, and
    /// attached again when it says so, as a reset through this instance does.
    private let sharedResetObserver = SetOnce<@Sendable (Bool) -> Void>()
    /// With instances that own devices (`--redis`): the clock for routing, before each change
    /// made under the lease, every push still waiting for its device's owner
    /// (`World.routeEveryWaitingPush`), and where the frames that makes go.
    private let waitingPushRouter = SetOnce<WaitingPushRouter>()
    struct WaitingPushRouter: Sendable {
        let now: @Sendable () -> Int64
        let deliver: @Sendable ([DeviceFrame]) -> Void
    }
    @inline(__always) var onRecordChanges: (@Sendable ([UInt64], _ reset: Bool) -> Void)? { recordObserver.value }
    /// Turned on while someone listens (event streams, long polls), so the request path pays
    /// nothing for change tracking otherwise.
    private let changeTracking = Atomic<Bool>(false)
    /// Where persistent changes go, in order, drained under the lock (`--state-dir`); nil
    /// keeps everything in memory only.
    public let persistence: (any StateChangeSink)?
    /// Called, outside the lock and in order per call, with the backend hook calls a
    /// `withWorld` call decided (login, registration, fetch).
    let onBackendIntents: (@Sendable ([BackendIntent]) -> Void)?
    /// Several instances sharing one world (`--redis`): every change goes through it. The
    /// coordinator applies changes to this state, so it is attached after both exist, once,
    /// before any request; nil for a single instance.
    private let coordinatorSlot = SetOnce<any WorldCoordinator>()
    @inline(__always) public var coordinator: (any WorldCoordinator)? { coordinatorSlot.value }

    public func setChangeTracking(_ on: Bool) { changeTracking.store(on, ordering: .relaxed) }
    /// Someone listens to the journal's changes (event streams, long polls).
    public var tracksChanges: Bool { changeTracking.load(ordering: .relaxed) }

    /// Time spent waiting for and inside the world's lock by changes (`withWorld` and its
    /// kin; reads are not counted), for `/metrics`: the time held per request bounds what more
    /// event loops (`--threads`) can add, since only one of them can be inside at a time.
    private let lockHeldNanoseconds = Atomic<UInt64>(0)
    private let lockWaitedNanoseconds = Atomic<UInt64>(0)
    private let lockAcquisitions = Atomic<UInt64>(0)

    public struct LockTime: Sendable {
        public var heldNanoseconds: UInt64
        public var waitedNanoseconds: UInt64
        public var acquisitions: UInt64
    }

    public var lockTime: LockTime {
        LockTime(
            heldNanoseconds: lockHeldNanoseconds.load(ordering: .relaxed),
            waitedNanoseconds: lockWaitedNanoseconds.load(ordering: .relaxed),
            acquisitions: lockAcquisitions.load(ordering: .relaxed))
    }

    public init(
        start: World, persistence: (any StateChangeSink)? = nil,
        onBackendIntents: (@Sendable ([BackendIntent]) -> Void)? = nil
    ) {
        world = Locked(start)
        startState = Locked(start)
        credentialsGeneration = Atomic(start.credentials.generation)
        // The rules of `--faults` (or of a kept state) hold for the very first push too.
        faultsActive = Atomic(!start.faults.isEmpty)
        self.persistence = persistence
        self.onBackendIntents = onBackendIntents
    }

    /// Links the state to the instances it is shared with (`--redis`). Once, before any request.
    public func attach(coordinator: any WorldCoordinator) { coordinatorSlot.set(coordinator) }

    /// Tells `observer` when the shared copy was replaced here (a reset made by another
    /// instance, a reload), with whether the devices connected here must be attached again
    /// (`reattachConnectedDevices`). Once, at start-up.
    public func observeSharedResets(_ observer: @escaping @Sendable (_ reattach: Bool) -> Void) {
        sharedResetObserver.set(observer)
    }

    /// `--redis`: the others took this instance for stopped (paused) and marked the devices
    /// connected here disconnected; their sockets are still open, so they are attached again,
    /// as after a reset (each gets `welcome`, its tokens, and what was stored meanwhile).
    public func reattachConnectedDevices() { sharedResetObserver.value?(true) }

    /// Before each change made under the lease (`--redis`), routes the pushes answered 200
    /// that still wait for their device's owner, and hands the frames that makes to `deliver`
    /// (they wait in each connection's commit gate). Once, at start-up.
    public func routeWaitingPushesBeforeLeaseChanges(
        now: @escaping @Sendable () -> Int64, deliver: @escaping @Sendable ([DeviceFrame]) -> Void
    ) {
        waitingPushRouter.set(WaitingPushRouter(now: now, deliver: deliver))
    }

    /// Tells `observer` about every record change (the event hub). Once, at start-up.
    public func observeRecordChanges(_ observer: @escaping @Sendable ([UInt64], _ reset: Bool) -> Void) {
        recordObserver.set(observer)
    }

    /// Channels created, deleted or published to, while record changes are tracked (someone
    /// follows the event stream).
    public func observeChannelChanges(_ observer: @escaping @Sendable ([(BroadcastChannel, subscribers: Int)]) -> Void) {
        channelObserver.set(observer)
    }

    public var currentCredentialsGeneration: UInt64 { credentialsGeneration.load(ordering: .acquiring) }
    public var hasFaultRules: Bool { faultsActive.load(ordering: .relaxed) }

    /// Why changes are refused right now, or nil: the shared state (`--redis`) cannot be
    /// reached, or the state directory (`--state-dir`) cannot commit. Then nothing that would
    /// change the state may be promised: providers get 503, admin changes are refused.
    public var unavailableReason: String? { coordinator?.unavailableReason ?? persistence?.unavailableReason }

    /// Runs `body` with exclusive access to the world. Keep it short.
    ///
    /// With a coordinator the change is also shared with the other instances before this
    /// returns. When that is impossible (the shared store is down) the body still runs, on this
    /// instance's copy only, which is then reloaded once the store is back; callers whose
    /// answer promises the change was kept use `withSharedWorld` instead.
    ///
    /// `mode` `.shared`: as in `withSharedWorld`, the body may run in a shared turn.
    public func withWorld<T: Sendable, E: Error>(mode: ChangeMode = .exclusive, _ body: (inout World) throws(E) -> T) throws(E) -> T {
        guard let coordinator else {
            let (result, after) = try locked(body, sharing: false)
            after.announce(self)
            return result
        }
        let (result, shared) = try sharing(body, coordinator, mode: mode)
        if let result {
            if !shared { coordinator.noteUnsharedChange() }
            return result
        }
        // Not run (the store cannot be reached): run on this copy only, reloaded later.
        let (local, after) = try locked(body, sharing: true)
        coordinator.noteUnsharedChange()
        after.announce(self)
        return local
    }

    /// `withWorld` that refuses instead of diverging: nil when the change could not be shared
    /// with the other instances (the store is down, or this instance lost its turn while
    /// writing). Without a coordinator it always runs.
    ///
    /// `mode` `.shared` (pushes): with a coordinator whose instances decide their own devices'
    /// deliveries, the body may run beside other instances' changes (`World.inSharedTurn`)
    /// and must then change only what a push may (DeviceOwnership.swift).
    public func withSharedWorld<T: Sendable, E: Error>(
        mode: ChangeMode = .exclusive, _ body: (inout World) throws(E) -> T
    ) throws(E) -> T? {
        guard let coordinator else { return try withWorld(body) }
        let (result, shared) = try sharing(body, coordinator, mode: mode)
        return shared ? result : nil
    }

    /// What `withSharedWorldIfReady` did.
    public enum SharedAttempt<T: Sendable>: Sendable {
        /// The body ran and its rows are shared (or queued to be, inside `committingLater`).
        case done(T)
        /// The change could not be shared (the store is down, or the turn was lost): refuse.
        case refused
        /// Running it now would mean waiting (`--redis`: for the lease): the body did not run.
        case wouldWait
    }

    /// `withSharedWorld` that never waits for the other instances: an event loop that may not
    /// block hands the work to a thread that may (`ProviderConnection`'s deferred pushes).
    public func withSharedWorldIfReady<T: Sendable>(mode: ChangeMode = .exclusive, _ body: (inout World) -> T) -> SharedAttempt<T> {
        guard let coordinator else { return .done(withWorld(body)) }
        let (result, shared) = sharing(body, coordinator, waiting: false, mode: mode)
        guard let result else { return shared ? .wouldWait : .refused }
        return shared ? .done(result) : .refused
    }

    /// The body's result when it ran (nil when it did not), and whether its rows were shared
    /// (without `waiting`, a body that did not run because it would have waited is `(nil,
    /// true)`). A body that throws after changing something still has its rows shared.
    private func sharing<T: Sendable, E: Error>(
        _ body: (inout World) throws(E) -> T, _ coordinator: any WorldCoordinator, waiting: Bool = true,
        mode: ChangeMode = .exclusive
    )
        throws(E) -> (T?, shared: Bool)
    {
        var after = AfterLock()
        var ran: Result<T, E>?
        // Closures written at each call, not a local function passed on: that kept `after` and
        // `ran` in heap boxes (two allocations a push, and a run-time exclusivity check at each
        // use).
        let mutated =
            waiting
            ? coordinator.mutate(mode: mode) { granted in change(body, granted, after: &after, ran: &ran) }
            : coordinator.mutateIfReady(mode: mode) { granted in change(body, granted, after: &after, ran: &ran) }
        guard let shared = mutated else { return (nil, true) }
        after.announce(self)
        switch ran {
        case .success(let result)?: return (result, shared)
        case .failure(let error)?:
            if !shared { coordinator.noteUnsharedChange() }
            throw error
        case nil: return (nil, false)
        }
    }

    /// `sharing`'s change: runs `body` under the lock in the mode granted, and hands its rows
    /// to the coordinator.
    private func change<T: Sendable, E: Error>(
        _ body: (inout World) throws(E) -> T, _ granted: ChangeMode, after: inout AfterLock, ran: inout Result<T, E>?
    ) -> [StateChange] {
        do throws(E) {
            ran = .success(try locked(body, sharing: true, after: &after, mode: granted))
        } catch {
            ran = .failure(error)
        }
        defer { after.rows = [] }
        return after.rows
    }

    /// Runs `body`, whose changes a coordinator writes after they are made (`--redis`: queued
    /// for its writer, so the event loop does not wait for Redis). What the caller answers for
    /// them must wait for the coordinator's commit (`CommitGate`); elsewhere a change waits for
    /// its write before `withSharedWorld` returns.
    public func committingLater(_ body: () -> Void) {
        guard let coordinator else { return body() }
        coordinator.beginCommittingLater()
        defer { coordinator.endCommittingLater() }
        body()
    }

    /// Reads the world without changing it: no coordination, no change tracking.
    public func readWorld<T>(_ body: (borrowing World) throws -> T) rethrows -> T {
        try world.withLock { (world: inout World) in try body(world) }
    }

    /// `readWorld` for reads that look through the journal (lists, searches, stats): the
    /// records a follower keeps encoded (`--redis`) are decoded first, once, rather than on
    /// every read of them, and outside the lock (50,000 of them take a third of a second, which
    /// pushes must not wait for); what arrives meanwhile is decoded as it is read.
    public func readJournal<T>(_ body: (borrowing World) throws -> T) rethrows -> T {
        prepareJournalRead()
        return try readWorld(body)
    }

    /// What `readJournal` does first: reads in what other instances journaled and this copy
    /// left for later (`--redis-follow lazy`), and decodes the records kept encoded. Bounded:
    /// under a flood from the others, what keeps arriving is decoded as it is read.
    public func prepareJournalRead() {
        if let coordinator {
            coordinator.catchUpJournal()
            // Records read late, in their place whatever path brought them in.
            world.withLock { (world: inout World) in world.records.settleArrivals() }
        }
        var slices = 0
        while slices < 50, decodeKeptRecords(slice: 2_000) { slices += 1 }
    }

    /// What an admin API read does first when instances share the state: waits until this
    /// copy has every change the others had made (`WorldCoordinator.followUpToNow`: a push
    /// answered 200 through any instance before the read began is in the answer), then
    /// `prepareJournalRead`. Blocking: off any event loop.
    public func followOthersForRead() {
        coordinator?.followUpToNow()
        prepareJournalRead()
    }

    /// Decodes up to `slice` of the records a follower keeps encoded, newest first, without
    /// holding the lock while it decodes; true when there may be more.
    @discardableResult
    public func decodeKeptRecords(slice: Int) -> Bool {
        let kept = world.withLock { (world: inout World) in world.records.keptRecords(limit: slice) }
        guard !kept.isEmpty else { return false }
        let decoded = kept.map { (from: $0, to: StateCodec.decodeKept($0)) }
        world.withLock { (world: inout World) in world.records.replaceKept(decoded) }
        return kept.count == slice
    }

    /// Applies what other instances changed (the coordinator, under its own lock). Nothing it
    /// does is a change of this instance's own: marks it leaves behind are dropped.
    public func applyShared<T, E: Error>(_ body: (inout World) throws(E) -> T) throws(E) -> T {
        try world.withLock { (world: inout World) throws(E) -> T in
            defer {
                _ = world.records.takeChanges()
                _ = world.takeStateChanges(recordSequences: [])
                _ = world.takeBackendIntents()
                credentialsGeneration.store(world.credentials.generation, ordering: .releasing)
                faultsActive.store(!world.faults.isEmpty, ordering: .relaxed)
            }
            return try body(&world)
        }
    }

    /// Tells listeners (event streams, long polls) about records another instance changed;
    /// with `devicesReset`, has the device sockets held here attached again.
    public func announceSharedChanges(records: [UInt64], reset: Bool, devicesReset: Bool = false) {
        if reset {
            onRecordChanges?([], true)
        } else if !records.isEmpty, changeTracking.load(ordering: .relaxed) {
            // Only while someone listens, as for this instance's own changes: reading each
            // record back for nobody cost a follower a tenth of its time.
            onRecordChanges?(records, false)
        }
        // Also without a reset: another instance marked the devices connected here
        // disconnected (it took this one for stopped), and their sockets are still open.
        if reset || devicesReset { sharedResetObserver.value?(devicesReset) }
    }

    /// What a `withWorld` call hands on once the lock is released.
    private struct AfterLock {
        var records: [UInt64] = []
        var wake = false
        var intents: [BackendIntent] = []
        /// Channels changed (while someone follows the event stream), with their subscribers.
        var channels: [(BroadcastChannel, subscribers: Int)] = []
        /// The rows for a coordinator (shared mode only).
        var rows: [StateChange] = []
        /// Frames of pushes routed before the change (`routeWaitingPushesBeforeLeaseChanges`).
        var routedFrames: [DeviceFrame] = []

        func announce(_ state: EmulatorState) {
            if wake { state.persistence?.wake() }
            if !routedFrames.isEmpty { state.waitingPushRouter.value?.deliver(routedFrames) }
            if !records.isEmpty { state.onRecordChanges?(records, false) }
            if !intents.isEmpty { state.onBackendIntents?(intents) }
            if !channels.isEmpty { state.channelObserver.value?(channels) }
        }
    }

    /// Runs `body` under the lock. When it throws, what it changed before is announced here
    /// (the state writer woken for its rows) before the error goes on: a refusal that had
    /// changed something left the writer asleep, and every later change waited for it.
    private func locked<T: Sendable, E: Error>(_ body: (inout World) throws(E) -> T, sharing: Bool) throws(E) -> (T, AfterLock) {
        var after = AfterLock()
        do throws(E) {
            return (try locked(body, sharing: sharing, after: &after), after)
        } catch {
            after.announce(self)
            throw error
        }
    }

    private func locked<T: Sendable, E: Error>(
        _ body: (inout World) throws(E) -> T, sharing: Bool, after: inout AfterLock, mode: ChangeMode = .exclusive
    ) throws(E) -> T {
        let tracking = changeTracking.load(ordering: .relaxed) && onRecordChanges != nil
        let persistence = self.persistence
        let collecting = sharing || persistence != nil
        let asked = Monotonic.nowNanoseconds()
        return try world.withLock { (world: inout World) throws(E) -> T in
            let acquired = Monotonic.nowNanoseconds()
            let before = world.credentials.generation
            world.records.trackChanges = tracking || collecting
            world.channels.tracksEvents = tracking
            if mode == .shared { world.changeMode = .shared }
            defer {
                world.changeMode = .exclusive
                if tracking {
                    let ids = world.channels.takeEventIDs()
                    if !ids.isEmpty {
                        after.channels = ids.compactMap { id in
                            world.channels.channels[id].map { ($0, world.liveActivities.subscriberCount(channelID: id)) }
                        }
                    }
                }
                if !world.backendOutbox.isEmpty { after.intents = world.takeBackendIntents() }
                if world.credentials.generation != before {
                    credentialsGeneration.store(world.credentials.generation, ordering: .releasing)
                }
                faultsActive.store(!world.faults.isEmpty, ordering: .relaxed)
                if tracking || collecting {
                    let changed = world.records.takeChanges()
                    if tracking { after.records = changed }
                    if sharing {
                        after.rows = world.takeStateChanges(recordSequences: changed)
                    } else if let persistence {
                        // Under the lock, so the sink sees changes in the order they happened.
                        let rows = world.takeStateChanges(recordSequences: changed)
                        if !rows.isEmpty { after.wake = persistence.enqueue(rows) }
                    }
                }
                lockWaitedNanoseconds.add(acquired &- asked, ordering: .relaxed)
                lockHeldNanoseconds.add(Monotonic.nowNanoseconds() &- acquired, ordering: .relaxed)
                lockAcquisitions.add(1, ordering: .relaxed)
            }
            if sharing, mode == .exclusive, world.hasPushesWaitingForRouting, let router = waitingPushRouter.value {
                after.routedFrames = world.routeEveryWaitingPush(nowMs: router.now())
            }
            return try body(&world)
        }
    }

    /// Back to the configured start state, atomically: one lock, one assignment. Returns the
    /// world it replaced, so that the caller frees it where that costs nobody anything.
    @discardableResult
    public func reset() -> ReplacedWorld {
        let start = startState.withLock { $0 }
        let replaced = withWorld { world -> World in
            let generation = world.credentials.generation
            var old = start
            swap(&world, &old)
            world.registry.continueRandomness(from: old.registry)
            world.credentials.advanceGeneration(beyond: generation)
            world.records.continueNumbering(from: old.records)
            world.records.continueCountingEvictions(from: old.records)
            world.ownership = old.ownership
            world.channels.continueIssuedIDs(from: old.channels)
            if persistence != nil || coordinator != nil {
                // The drain at the end of this call hands the store the whole start state,
                // which it writes as one transaction.
                world.startTrackingChanges()
                world.stateTracking.resetTo = world.persistedState
            }
            return old
        }
        onRecordChanges?([], true)
        return ReplacedWorld(replaced)
    }

    /// Replaces the start state (used once configuration is loaded).
    public func setStartState(_ start: World) {
        startState.withLock { $0 = start }
    }
}

/// Serializes changes to a world that several emulator instances share (`--redis`).
public protocol WorldCoordinator: AnyObject, Sendable {
    /// Runs `change` while this instance alone may change the shared world, after catching up
    /// with every change the others made, then stores the rows it returns where the others
    /// see them (inside `beginCommittingLater`: queues them for that). False when that failed:
    /// `change` did not run (the store cannot be reached), or it ran but its rows could not be
    /// stored (this instance's copy is then reloaded).
    ///
    /// `mode` `.shared` asks for a shared turn instead (beside the other instances' shared
    /// turns; see `ChangeMode`); `change` is told which mode it got (a coordinator may give
    /// `.exclusive` instead, never `.shared` when asked for `.exclusive`).
    func mutate(mode: ChangeMode, _ change: (ChangeMode) -> [StateChange]) -> Bool
    /// `mutate` when it can run without waiting (this instance may change the world now and
    /// nobody else is in the middle of doing so); nil, and `change` not run, when it would
    /// have to wait, for the lease or a catch-up.
    func mutateIfReady(mode: ChangeMode, _ change: (ChangeMode) -> [StateChange]) -> Bool?
    /// A change was made to this instance's copy only (the store was down): reload it from the
    /// store once the store is back.
    func noteUnsharedChange()
    /// Why changes are refused right now, or nil when they are shared normally.
    var unavailableReason: String? { get }
    /// Changes this thread makes until `endCommittingLater` are queued for writing, not
    /// waited for: what promises them waits for the coordinator's commit tickets.
    func beginCommittingLater()
    func endCommittingLater()
    /// Brings what other instances added to the journal into this copy, if it was left for
    /// later (`--redis-follow lazy`): before a read of the journal.
    func catchUpJournal()
    /// Waits (boundedly) until this copy has every change the others had made when it was
    /// called: a read after it shows each of them (an admin API read begins with it).
    func followUpToNow()
}

extension WorldCoordinator {
    public func catchUpJournal() {}
    public func followUpToNow() {}
}

/// A world a reset replaced. Freeing one with 1,000,000 devices takes seconds, which nobody
/// should wait for under the lock or on an event loop: free it on a thread of its own.
public final class ReplacedWorld: @unchecked Sendable {
    private var world: World?
    init(_ world: World) { self.world = world }
    /// Frees up to `count` devices and tokens; false once none are left. A piece at a time,
    /// with pauses between, because freeing a million of them in one go from another thread
    /// starves the event loop whose malloc arena they came from (a push waited 230 ms).
    public func freeSome(_ count: Int) -> Bool {
        world?.registry.discardSome(count) ?? false
    }

    public func free() { world = nil }
}
