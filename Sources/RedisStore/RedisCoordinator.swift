// RedisStore: `--redis`, the state in Redis shared by several instances: the change log and
// its pipelined writer, following the others, keeping and restoring the shared state, the
// relay of device frames. The turns changes are made in are in RedisTurns.swift, who owns
// which device and the hand-offs in RedisMembership.swift, the others' writes left unread in
// RedisUnreadJournal.swift.
// Imports APNsCore, Redis, Locking, Lifecycle (it is a service, given a logger),
// MonotonicClock, StatePersistence (the commit tickets answers wait for), Synchronization and
// Foundation.

public import APNsCore
import Foundation
public import Lifecycle
public import Locking
import MonotonicClock
import Redis
public import StatePersistence
import Synchronization

/// Several emulator instances as one APNs (`--redis`): each keeps a whole copy of the world,
/// and every change goes through Redis's log.
///
/// Pushes are made in *shared turns*, held by every instance at once: each judges and
/// journals its pushes on its copy, routes those for devices it owns, and hands the others'
/// to their owners (`DeviceOwnership`: the members, in the log, and a hash of the device id).
/// Every other change takes the *lease*: the shared turns end first (`want`), the instance
/// applies everything the others logged (so its copy is current), then runs the change. Either
/// way the change runs on this copy and its rows (the same rows `--state-dir` persists) are
/// queued; a writer thread appends everything queued to the log and the state keys in one
/// script, fenced by the turn's token, while the next changes queue up; the answers that
/// promise those changes (a 200, a frame to a device) wait for that append, as with
/// `--state-dir` they wait for the group commit, so no event loop waits for Redis. The others
/// apply the rows as they arrive (a thread blocked on the log). So what is decided for one
/// device has one order (its owner's), changes under the lease are linearizable with
/// everything, and reads are served from the local copy, current to within the log's
/// delivery delay (milliseconds).
///
/// The lease is kept while changes that need it keep coming and handed over when none came
/// for a moment or another instance asks for it (`want`, seen in the append's reply): then
/// new changes wait until what is queued is written and the lease released.
public final class RedisCoordinator: WorldCoordinator, CommitTracker, @unchecked Sendable {
    /// How long a lease lasts without an append (an instance that stops, e.g. SIGSTOP, loses it).
    public static let leaseMilliseconds = 2_000
    /// Given up after this long without a change.
    static let idleReleaseMilliseconds: Int64 = 2
    /// A shared turn is kept longer: it keeps nobody else from pushing, only a change that
    /// needs the lease waits for it (at most this long, when it is idle), and taking it anew
    /// costs a round trip and a catch-up (with every Redis answer 500 ms late, providers that
    /// pushed again a few ms after each answer found it given up every time).
    static let sharedIdleReleaseMilliseconds: Int64 = 20
    /// Kept at least this long once taken, even when another instance asks for it: the
    /// changes of a busy instance go out in slices rather than one hand-over per change. Each
    /// hand-over costs round trips and the catch-up; 20 ms gave two and three busy instances
    /// 0.65× and 0.51× one instance's pushes where 5 ms gave 0.61× and 0.43× (scripts/bench-cluster,
    /// 2 cores), for up to that long a wait for a push that arrives at an instance without it.
    static let minimumHoldMilliseconds: Int64 = 20
    /// Waiting longer than this for the lease counts as the store being unavailable.
    static let acquireTimeoutMilliseconds: Int64 = 3_000
    /// Rows queued for the writer at most: beyond, changes wait for it (and after the acquire
    /// timeout are refused, 503), so a stalled Redis holds back providers instead of memory.
    static let maxQueuedRows = 20_000
    /// Rows one append script takes at most (Redis runs nothing else meanwhile).
    static let maxRowsPerWrite = 5_000
    static let heartbeatMilliseconds: Int64 = 1_000
    static let instanceTTLMilliseconds = 3_000

    public let store: RedisStateStore
    /// This instance's number (from Redis, 1…); the high bits of its connection ids.
    public private(set) var instance = 0
    let state: EmulatorState
    let configured: World
    let clock: any EmulatorClock
    let loadKey: @Sendable (StoredKey) throws(StateStoreError) -> ProviderKey
    let logger: Logger
    /// Frames for device sockets on this instance, relayed by another one. Set once by the
    /// device gateway, which relays through this coordinator and so is built after it.
    public let deliverFrames = SetOnce<@Sendable ([DeviceFrame]) -> Void>()

    /// Everything below changes under this lock, which is held across Redis calls: it orders
    /// this instance's changes, and it is always taken before the world's lock.
    let shared: BlockingLock<Shared>
    struct Shared: @unchecked Sendable {
        var redis: RedisConnection? { didSet { redisGeneration &+= 1 } }
        /// Changes with every new (or lost) connection: the writer's own connection is made
        /// anew too, since one that sat through an outage may be dead without knowing it.
        var redisGeneration = 0
        var token = ""
        var holding = false
        var holdingSinceMs: Int64 = 0
        var leaseUntilMs: Int64 = 0
        var lastChangeMs: Int64 = 0
        /// When the writer's last append was acknowledged: a shared turn is idle only once its
        /// writes are in too (with a slow Redis the last change is as old as the write).
        var lastWrittenMs: Int64 = 0
        /// A failure that repeats with every write (Redis out of memory) is logged now and then.
        var warnings = RepeatedWarnings()
        /// The last eviction risk logged (`RedisStateStore.evictionRisk`), so a reconnection
        /// to the same Redis does not log it again.
        var evictionRisk: String?
        /// This instance's shared turn (`ChangeMode.shared`: pushes, beside the other
        /// instances' shared turns), never held together with the lease.
        var sharing = false
        var sharedToken = ""
        var sharingUntilMs: Int64 = 0
        /// The last change that asked for the lease: once none has come for a moment the lease
        /// is given up even while pushes keep coming, so they go on in shared turns.
        var lastExclusiveChangeMs: Int64 = 0
        /// Which instance owns which device, as this copy applied it (nil: not known yet).
        var ownership: DeviceOwnership?
        /// The last log entry applied to (or written from) this copy.
        var version: UInt64 = 0
        var lastID = "0-0"
        /// Why changes are refused (nil: they are not).
        var unavailable: String?
        /// This copy may differ from the store: reload it when the lease is next held.
        var needsReload = false
        /// Rows made on this copy and not yet handed to the writer, in order, and where each
        /// change's rows end among them.
        var outbox: [StateChange] = []
        var queued = QueuedTickets()
        /// The writer has a batch out to Redis.
        var writing = false
        /// The highest version of this instance's own writes the writer has had answered (in
        /// the epoch followed: a new one starts again at 0).
        var lastOwnWrittenVersion: UInt64 = 0
        /// The newest version this copy knows Redis stored: applied, or written by this instance.
        var knownVersion: UInt64 { max(version, lastOwnWrittenVersion) }
        /// Pushes held for order (`World.holdForOrder`) by the version of the write that holds
        /// them: released once the follower passes it, in the log's order.
        var heldByVersion: [UInt64: [UInt64]] = [:]
        /// Another instance asked for the lease: no change is made until it is handed over.
        var yielding = false
        var writerIdle: Bool { outbox.isEmpty && !writing }
        /// The epoch of the shared state this copy follows ("" until it has joined one).
        var epoch = ""
        /// Epochs this copy followed before (the newest few): one back in Redis is an older
        /// state come back (a snapshot from before a restore), not a new one to follow.
        var formerEpochs: [String] = []
        /// Other states found in Redis that no running instance followed (`refuseForeignState`),
        /// the newest few: never followed, and removed again where found.
        var refusedEpochs: [String] = []
        /// Set while the shared state is lost and being restored (`recoverLostState`).
        var recovery: Recovery?
        /// The others' journal-only writes applied to this copy's version but not read yet
        /// (RedisUnreadJournal.swift).
        var unread = UnreadJournal()
    }
    /// `Shared.unread`'s count, readable without the lock (a journal read checks it).
    let unreadWrites = Atomic<Int>(0)
    /// The connection the admin API's reads fetch unread writes on, one read at a time.
    let unreadReader = Locked<RedisConnection?>(nil)
    /// Where an admin API read asks how far the log goes (`followUpToNow`), with a short
    /// timeout: a Redis that stops answering must not hold reads of this copy for long.
    let logEndReader = Locked<RedisConnection?>(nil)
    /// Whether other instances are members (`setOwnership`), readable without the lock: an
    /// instance alone has nobody to follow before a read.
    let othersAreMembers = Atomic<Bool>(true)
    /// Until when (monotonic ms) reads do not ask Redis where the log ends: it failed to say
    /// in time, and reads then answer from this copy rather than each wait for it.
    let followUpPausedUntilMs = Atomic<Int64>(0)
    /// Leaves the others' journal-only writes unread until something reads the journal
    /// (`--redis-follow`); else reads every write as it comes.
    let followsJournalLazily: Bool

    /// What event loops ask about commits, behind a lock of its own: `shared` is held across
    /// Redis round trips (the lease, a catch-up, a reload), and an event loop holding an answer
    /// or starting a read must not wait for those. Taken inside `shared`, never around it.
    let tickets = BlockingLock(Tickets())
    /// `Tickets.announcements` may have some (set after they are added).
    let announcementsPending = Atomic<Bool>(false)
    struct Tickets {
        /// Changes with rows are numbered (tickets), under `shared`. Everything up to
        /// `resolvedTicket` was written, or failed: those in `failedTickets` (the newest few).
        var lastTicket: UInt64 = 0
        var resolvedTicket: UInt64 = 0
        var failedTickets: [ClosedRange<UInt64>] = []
        var waiters = CommitWaiters()
        /// The last ticket of each thread's changes: what that thread's next answer waits for.
        /// (A few threads, looked up three times a push: a list, not a dictionary, whose
        /// hashing of the thread cost more than searching a handful.)
        var threadTickets: [ThreadTicket] = []
        /// Threads whose changes are written after they return (`beginCommittingLater`).
        var laterThreads: [UInt] = []
        /// Applied changes still to be announced to event streams (after the locks).
        /// `devicesReset`: another instance's reset (its devices connected here attach again);
        /// a reload of the whole state is a reset for the event streams only.
        var announcements: [(records: [UInt64], reset: Bool, devicesReset: Bool)] = []

        func failed(_ ticket: UInt64) -> Bool { failedTickets.contains { $0.contains(ticket) } }

        /// Numbers a change with rows made by `thread`; says whether that thread commits later.
        mutating func number(_ thread: UInt, hasRows: Bool) -> (ticket: UInt64, later: Bool) {
            let later = laterThreads.contains(thread)
            guard hasRows else { return (0, later) }
            lastTicket += 1
            if let i = threadTickets.firstIndex(where: { $0.thread == thread }) {
                threadTickets[i].ticket = lastTicket
            } else {
                threadTickets.append(ThreadTicket(thread: thread, ticket: lastTicket))
            }
            return (lastTicket, later)
        }

        /// `thread`'s last change, when it failed (then forgotten: told once).
        mutating func takeFailedTicket(of thread: UInt) -> UInt64? {
            guard !failedTickets.isEmpty, let i = threadTickets.firstIndex(where: { $0.thread == thread }),
                failed(threadTickets[i].ticket)
            else { return nil }
            return threadTickets.remove(at: i).ticket
        }
    }

    struct ThreadTicket {
        let thread: UInt
        var ticket: UInt64
    }

    /// A lost shared state being restored: the instances that follow it say how current their
    /// copies are, and after a short window the newest copy is written back as the state.
    struct Recovery {
        let lostEpoch: String
        let detectedMs: Int64
        var lastCandidacyMs: Int64 = 0
        /// The journal this copy held when it came to follow the restored state (newest
        /// first), kept until what the restored state lacks of it is written back: a try that
        /// fails half-way may have reloaded the copy already.
        var keptRecords: [NotificationRecord]?
    }
    /// Why an instance that starts waits (and tries again): a restore is under way.
    static let restoring = RedisError(.timeout, "the instances sharing this Redis are restoring its lost state")
    /// How long instances have, after noticing the state is gone, to offer their copies.
    static let recoveryWindowMilliseconds: Int64 = 2_000
    /// A candidate that has not restored the state this long after its turn came is passed over.
    static let recoveryTurnMilliseconds: Int64 = 3_000
    let reason = Locked<String?>(nil)
    /// `Shared.epoch`, readable without the busy lock (the keeper compares it every second).
    let followedEpoch = Locked("")
    /// A state this instance is writing into Redis as a new one (a first start, a restore):
    /// its heartbeat names it from before the state exists until it follows it
    /// (`announceSeeding`).
    let seedingEpoch = Locked<String?>(nil)
    let running = Locked(true)
    private var threads: [Thread] = []
    let publisher = Locked<RedisConnection?>(nil)
    /// The heartbeat's connection (`beatLoop`).
    let beatConnection = Locked<RedisConnection?>(nil)
    /// Whether this instance's heartbeats reach Redis steadily (`beatLoop`): only then does it
    /// judge the others' (`mayJudgeHeartbeats`).
    let contact = Locked(SteadyContact())

    public init(
        store: RedisStateStore, state: EmulatorState, configured: World, clock: any EmulatorClock,
        loadKey: @escaping @Sendable (StoredKey) throws(StateStoreError) -> ProviderKey, logger: Logger = .silent,
        followsJournalLazily: Bool = true
    ) {
        self.followsJournalLazily = followsJournalLazily
        self.store = store
        self.state = state
        self.configured = configured
        self.clock = clock
        self.loadKey = loadKey
        self.logger = logger
        shared = BlockingLock(Shared())
    }

    public var unavailableReason: String? { reason.withLock { $0 } }

    // MARK: Start and stop

    /// Joins the shared state: takes an instance number, then either loads the state others
    /// made or (for the first instance of an empty store) writes this one's. Retries for up to
    /// `waitMilliseconds` while Redis cannot be reached.
    public func start(waitMilliseconds: Int64) throws(StateStoreError) {
        let deadline = Monotonic.nowMilliseconds() + waitMilliseconds
        var lastError = ""
        var joinedOthers = false
        while true {
            do {
                let redis = try store.connect()
                // Once: a start that waits (for Redis, or for a restore) keeps its number. Not
                // while running instances restore a lost state: Redis may have restarted with
                // another counter, and their heartbeats, which the claim passes over, may not be
                // back yet (an instance started then took a running one's number).
                if instance == 0 {
                    if try redis.command("EXISTS", store.key("recovering")).int == 1 { throw Self.restoring }
                    instance = try claimNumber(redis)
                }
                let number = instance
                // Numbered in stripes before anything is loaded: the journal in Redis comes in
                // the order it was written, several writers' numbers interleaved, and only a
                // striped journal takes records out of order in constant time (a dense one
                // rebuilt itself for each: 138 s to start on 12,000 records).
                let stripe = UInt64(instance) % SequenceStripes.count
                _ = state.applyShared { (world: inout World) in world.records.numberInStripes(stripe) }
                try shared.withLock { (s: inout Shared) throws(RedisError) in
                    s.redis = redis
                    s.token = "\(number)-\(UInt64.random(in: 1...UInt64.max))"
                    // A copy that has read nothing loads the state others made, rather than
                    // replay the log from its start: the journal's bound has taken the rows of
                    // its oldest changes (the lease's catch-up took that for falling behind,
                    // said so, and loaded the state twice).
                    let found = try redis.pipeline([["EXISTS", store.key("recovering")], ["GET", store.key("version")]])
                    // Running instances are restoring a lost state (gone, or one they would not
                    // follow, left in place): join it once restored, rather than seed this
                    // configuration or take up what is there (`reload` checks again).
                    if found[0].int == 1 { throw Self.restoring }
                    if found[1].int ?? 0 > 0 { s.needsReload = true }
                    try takeLease(&s, redis)
                    let version = try redis.command("GET", store.key("version")).int ?? 0
                    if version == 0 {
                        // The first instance: the store starts as this instance's world. Its
                        // heartbeat names the new state before it exists (`announceSeeding`), in
                        // the round trip that asks again whether a restore began meanwhile.
                        let start = state.readWorld { $0.persistedState }
                        let epoch = RedisStateStore.newEpoch()
                        seedingEpoch.withLock { $0 = epoch }
                        defer { seedingEpoch.withLock { $0 = nil } }
                        if try redis.pipeline([["EXISTS", store.key("recovering")], heartbeatCommand()])[0].int == 1 {
                            try? release(&s, redis)
                            throw Self.restoring
                        }
                        let written = try store.append([.reset(start)], instance: instance, fence: s.token, epoch: .seed(epoch), on: redis)
                        follow(epoch, &s)
                        s.version = written.version
                        s.lastID = written.id
                    } else {
                        // (The lease's catch-up loaded it, unless the store began meanwhile.)
                        if s.version != UInt64(version) || s.needsReload { try reload(&s, redis) }
                        joinedOthers = true
                    }
                    try heartbeat(redis)
                    warnOfEviction(&s, redis)
                }
                break
            } catch {
                if lastError.isEmpty {
                    logger.warning(
                        "Redis at \(store.url.redacted) cannot be used yet (\(error)); trying again for up to \(waitMilliseconds / 1000) s")
                }
                lastError = "\(error)"
                if Monotonic.nowMilliseconds() > deadline {
                    throw StateStoreError("cannot use Redis at \(store.url.redacted) (tried for \(waitMilliseconds / 1000) s): \(lastError)")
                }
                usleep(200_000)
            }
        }
        flushAnnouncements()
        _ = state.applyShared { (world: inout World) in
            // What a change does to a record after it is saved goes out as its delivery part.
            world.records.tracksUpdatesApart = true
        }
        join()
        let (version, members) = shared.withLock { ($0.version, $0.ownership?.members ?? []) }
        logger.info(
            "shared state: instance \(instance) on \(store.placeDescription), at change \(version); members \(members.sorted().map(String.init).joined(separator: ", "))"
        )
        startThread("redis-handoffs") { [weak self] in self?.routeHandOffsLoop() }
        startThread("redis-writer") { [weak self] in self?.writeLoop() }
        startThread("redis-log") { [weak self] in self?.followLog() }
        startThread("redis-keeper") { [weak self] in self?.keep() }
        startThread("redis-heartbeat") { [weak self] in self?.beatLoop() }
        startThread("redis-frames") { [weak self] in self?.receiveFrames() }
        addConfiguration(joinedOthers: joinedOthers)
    }

    /// Joined a state others made: this instance's configuration adds what the state lacks
    /// (apps, devices, keys with their PEM), written as any change, as a start over
    /// `--state-dir` adds it; where the state holds one differently, it wins and the log says
    /// so. Either way its key files are compared with the other members'.
    private func addConfiguration(joinedOthers: Bool) {
        let configured = self.configured
        let name = "the shared state (\(store.placeDescription))"
        var warnings = joinedOthers ? state.withWorld { world in world.addConfigured(from: configured, stateName: name) } : []
        warnings += compareKeyPrints(SharedKeyPrints.lines(of: configured.credentials))
        for warning in warnings { logger.warning("shared state: \(warning)") }
    }

    /// Puts this instance's configured keys (`SharedKeyPrints`) where the others see them, and
    /// says how the live members' differ. Nothing said when Redis does not answer: this is a
    /// diagnosis, not a rule.
    private func compareKeyPrints(_ mine: [String]) -> [String] {
        let members = shared.withLock { $0.ownership?.members ?? [] }.filter { $0 != instance }
        let theirs = try? withPublisher { (redis: RedisConnection) throws(RedisError) -> [(Int, [String])] in
            _ = try redis.command("SET", store.key("keyprints:\(instance)"), .text(mine.joined(separator: "\n")))
            var out: [(Int, [String])] = []
            for member in members {
                guard let text = try redis.command("GET", store.key("keyprints:\(member)")).text else { continue }
                out.append((member, text.isEmpty ? [] : text.split(separator: "\n").map(String.init)))
            }
            return out
        }
        return (theirs ?? []).flatMap { SharedKeyPrints.differences(mine: mine, theirs: $0.1, instance: $0.0) }
    }

    public func stop() {
        // What was acknowledged, or waits for its acknowledgement, is written first.
        shared.withLock(when: { $0.writerIdle || $0.unavailable != nil }, timeoutMilliseconds: 5_000) { (_: inout Shared, _: Bool) in }
        // Its devices go to the others (what was handed to it stays, for its next owner). The
        // lease for that would read what this copy left unread, which nobody reads any more.
        shared.withLock { (s: inout Shared) in forgetUnread(&s) }
        _ = changeMembership { $0.filter { $0 != self.instance } }
        running.withLock { $0 = false }
        ringKeeper()
        handOffQueue.withLock { $0.running = false }
        shared.withLock { (s: inout Shared) in
            if s.sharing, let redis = s.redis { try? releaseSharedTurn(&s, redis) }
            if s.holding, let redis = s.redis { try? release(&s, redis) }
            if let redis = s.redis { _ = try? redis.command("DEL", store.key("keyprints:\(instance)")) }
        }
        // Under the lock the heartbeat thread beats under: no beat lands after it.
        _ = try? withConnection(beatConnection) { (redis: RedisConnection) throws(RedisError) in
            _ = try redis.command("DEL", store.key("alive:\(instance)"))
        }
    }

    var isRunning: Bool { running.withLock { $0 } }

    /// Devices with hand-offs this instance owns, waiting to be routed.
    let handOffQueue = BlockingLock(HandOffQueue())
    struct HandOffQueue {
        var devices: Set<String> = []
        var running = true
    }

    private func startThread(_ name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread(named: name, block: body)
        thread.start()
        threads.append(thread)
    }

    // MARK: Changes

    /// Runs `change` on this copy while this instance holds the lease, and queues its rows for
    /// the writer thread. On a thread inside `beginCommittingLater` it returns at once (what
    /// answers promise waits for `afterCommit`); elsewhere (the admin API's change queue,
    /// the keeper) it waits until the rows are in Redis and says whether they are.
    public func mutate(mode: ChangeMode, _ change: (ChangeMode) -> [StateChange]) -> Bool {
        // Checked before the lock: while Redis is away the keeper may hold it for a reconnect
        // attempt, and a provider should get its 503 at once, not after that.
        if unavailableReason != nil { return false }
        let thread = Self.currentThread
        var queued: (ticket: UInt64, later: Bool)?
        // A change waits while a turn is being handed over, and (to catch up or reload)
        // until the writer is idle when this instance must take a turn anew.
        shared.withLock(when: { Self.mayChange($0, mode: mode) }, timeoutMilliseconds: Int(Self.acquireTimeoutMilliseconds)) {
            (s: inout Shared, ready: Bool) in
            guard ready, s.unavailable == nil, let redis = s.redis else { return }
            let granted: ChangeMode
            do {
                granted = try takeTurn(&s, redis, asking: mode)
            } catch {
                failed(&s, error)
                return
            }
            queued = runAndQueue(change, granted: granted, asked: mode, &s, thread: thread)
        }
        guard let queued else {
            flushAnnouncements()
            return false
        }
        return finish(queued)
    }

    /// Runs `change` on this copy (the caller may change the world now) and queues its rows for
    /// the writer, numbered with a ticket (0 when it made none).
    func runAndQueue(
        _ change: (ChangeMode) -> [StateChange], granted: ChangeMode, asked: ChangeMode, _ s: inout Shared, thread: UInt
    ) -> (ticket: UInt64, later: Bool) {
        let rows = change(granted)
        s.lastChangeMs = Monotonic.nowMilliseconds()
        if asked == .exclusive { s.lastExclusiveChangeMs = s.lastChangeMs }
        let queued = tickets.withLock { $0.number(thread, hasRows: !rows.isEmpty) }
        if !rows.isEmpty {
            s.outbox += rows
            s.queued.append(queued.ticket, end: s.outbox.count)
        }
        return queued
    }

    /// After a change ran: announces what was applied meanwhile and, outside
    /// `beginCommittingLater`, waits until its rows are in Redis (whether they are).
    func finish(_ queued: (ticket: UInt64, later: Bool)) -> Bool {
        flushAnnouncements()
        guard queued.ticket > 0, !queued.later else { return true }
        return waitForCommit(queued.ticket)
    }

    /// `mutate` on an event loop that must not wait: runs `change` only when this instance
    /// holds the lease for a while yet and this coordinator's lock is free within 0.1 ms (it is
    /// held across Redis round trips: taking the lease, catching up, reloading); nil otherwise, and
    /// `change` did not run. An event loop that waited here for the lease stopped reading its
    /// connections meanwhile, and under load from several instances spent most of its time so.
    public func mutateIfReady(mode: ChangeMode, _ change: (ChangeMode) -> [StateChange]) -> Bool? {
        if unavailableReason != nil { return false }
        let thread = Self.currentThread
        var queued: (ticket: UInt64, later: Bool)?
        // Within half a millisecond: the writer, the follower and the routing of hand-offs
        // hold the lock for microseconds to a few hundred, a holder waiting for a Redis answer
        // for longer. (A push that cannot wait goes to a thread, and its connection's later
        // pushes follow it there, in order, until none is left: with 100 µs a third of all
        // pushes went that way.)
        _ = shared.withLockIfFree(within: 500) { (s: inout Shared) in
            guard let granted = Self.grantedWithoutRedis(s, mode: mode) else { return }
            queued = runAndQueue(change, granted: granted, asked: mode, &s, thread: thread)
        }
        return queued.map(finish)
    }

    /// Blocks until `ticket` is written (true) or failed (false).
    private func waitForCommit(_ ticket: UInt64) -> Bool {
        tickets.withLock(when: { $0.resolvedTicket >= ticket }, timeoutMilliseconds: 30_000) { (t: inout Tickets, ready: Bool) in
            ready && !t.failed(ticket)
        }
    }

    public func beginCommittingLater() {
        let thread = Self.currentThread
        tickets.withLock { (t: inout Tickets) in if !t.laterThreads.contains(thread) { t.laterThreads.append(thread) } }
    }

    public func endCommittingLater() {
        let thread = Self.currentThread
        tickets.withLock { (t: inout Tickets) in t.laterThreads.removeAll { $0 == thread } }
    }

    // MARK: Commits (CommitTracker)

    /// What an answer given now waits for: everything queued so far (as with `--state-dir`: a
    /// frame may announce another thread's change), or, when this thread's own last change
    /// failed, that change (so the answer learns it was not kept, even when everything queued
    /// after it was written).
    public func uncommittedTicket(everything: Bool) -> UInt64? {
        let thread = Self.currentThread
        return tickets.withLock { (t: inout Tickets) -> UInt64? in
            // Told once: later answers of this thread do not promise that change.
            if let own = t.takeFailedTicket(of: thread) { return own }
            return t.lastTicket > t.resolvedTicket ? t.lastTicket : nil
        }
    }

    public func afterCommit(_ ticket: UInt64, on executor: any CommitExecutor, _ task: @escaping (_ committed: Bool) -> Void) {
        let now = tickets.withLock { (t: inout Tickets) -> Bool? in
            if t.failed(ticket) { return false }
            if t.resolvedTicket >= ticket { return true }
            t.waiters.add(ticket, on: executor, task)
            return nil
        }
        guard let now else { return }
        executor.executeConfined(task, committed: now)
    }

    /// The writer thread: takes every row queued so far (from all connections) and writes it
    /// in one script, fenced by the lease, while the next rows queue up; then releases the
    /// answers that waited for them. A failed write fails everything not yet written (this
    /// copy is reloaded before the next change).
    private func writeLoop() {
        var connection: RedisConnection?
        var generation = 0
        while true {
            let stop = !isRunning
            let batch = shared.withLock(when: { !$0.outbox.isEmpty }, timeoutMilliseconds: stop ? 0 : 100) {
                (s: inout Shared, _: Bool) -> Batch? in
                guard !s.outbox.isEmpty else { return nil }
                // Everything queued, or (when that is a lot) the rows of its first changes.
                let (taken, last) = s.queued.cut(limit: Self.maxRowsPerWrite, rows: s.outbox.count, lastTicket: tickets.withLock { $0.lastTicket })
                // Everything is taken by moving the array out (pushes wait for this lock).
                var rows: [StateChange] = []
                if taken == s.outbox.count {
                    // The outbox left behind has room for as many (grown from nothing, it was
                    // copied at each doubling, by the event loops queueing pushes).
                    rows.reserveCapacity(taken)
                    swap(&rows, &s.outbox)
                } else {
                    rows = Array(s.outbox[..<taken])
                    s.outbox.removeFirst(taken)
                }
                let batch = Batch(
                    rows: rows, last: last, fence: s.holding ? s.token : s.sharedToken, exclusive: s.holding,
                    epoch: s.epoch, knownVersion: s.knownVersion, sentMs: Monotonic.nowMilliseconds(), generation: s.redisGeneration)
                s.queued.drop(rows: taken)
                s.writing = true
                return batch
            }
            guard let batch else {
                if stop { return }
                continue
            }
            let result: Result<(version: UInt64, id: String, wanted: Bool, held: [UInt64]), RedisError>
            do {
                if connection == nil || connection!.isBroken || generation != batch.generation {
                    connection = try store.connect()
                    generation = batch.generation
                }
                result = .success(
                    try store.appendSayingHeld(batch.rows, instance: instance, fence: batch.fence, epoch: .expect(batch.epoch), on: connection!))
            } catch {
                if connection?.isBroken ?? false { connection = nil }
                result = .failure(error)
            }
            var wentBack: UInt64?
            if case .success(let written) = result, written.version <= batch.knownVersion { wentBack = written.version }
            let (answers, committed) = shared.withLock { (s: inout Shared) -> (CommitRelease, Bool) in
                s.writing = false
                if let wentBack {
                    // Stored, but into a state that lacks changes already answered: the batch's
                    // answers are not sent (their fate is the restored state's).
                    failPending(&s)
                    stateWentBack(&s, connection, epochInRedis: batch.epoch, found: wentBack, known: batch.knownVersion)
                    return (tickets.withLock { $0.waiters.takeAll() }, false)
                }
                switch result {
                case .success(let written):
                    let answers = tickets.withLock { (t: inout Tickets) -> CommitRelease in
                        t.resolvedTicket = max(t.resolvedTicket, batch.last)
                        return t.waiters.takeReady(committed: t.resolvedTicket)
                    }
                    s.lastOwnWrittenVersion = max(s.lastOwnWrittenVersion, written.version)
                    if batch.exclusive {
                        // Under the lease nobody else writes: this copy is current up to it.
                        if written.version > s.version {
                            s.version = written.version
                            s.lastID = written.id
                        }
                        s.leaseUntilMs = batch.sentMs + Int64(Self.leaseMilliseconds)
                    } else {
                        // Others write beside it: the follower applies the log in order, this
                        // write (skipped as its own) among the others'. Right after what this
                        // copy has applied, nobody wrote between: this copy is current up to it,
                        // and the follower need not pass over it (alone, it then reads nothing).
                        s.sharingUntilMs = batch.sentMs + Int64(Self.leaseMilliseconds)
                        if written.version == s.version + 1 {
                            s.version = written.version
                            s.lastID = written.id
                        }
                    }
                    s.lastWrittenMs = Monotonic.nowMilliseconds()
                    if !written.held.isEmpty {
                        // Held for order: released when the follower passes this write, or now
                        // when this copy has followed the log that far already.
                        if written.version <= s.version { releaseHeld(written.held) } else { s.heldByVersion[written.version] = written.held }
                    }
                    if written.wanted, Monotonic.nowMilliseconds() - s.holdingSinceMs >= Self.minimumHoldMilliseconds {
                        s.yielding = true
                    }
                    if s.yielding, s.outbox.isEmpty, let redis = s.redis {
                        // Handed over between slices of changes, never under a batch in flight.
                        // A lease held only for pushes goes straight to a shared turn, so they
                        // go on at once rather than wait for one on a thread of their own.
                        let toSharedTurn = s.holding && !written.wanted && s.ownership?.isMember == true
                        if s.holding { try? release(&s, redis) }
                        if s.sharing { try? releaseSharedTurn(&s, redis) }
                        s.yielding = false
                        if toSharedTurn { try? takeSharedTurn(&s, redis) }
                    }
                    return (answers, true)
                case .failure(let error):
                    // Not stored, or not known to be: this copy is ahead of the store.
                    failPending(&s)
                    s.needsReload = true
                    failed(&s, error)
                    return (tickets.withLock { $0.waiters.takeAll() }, false)
                }
            }
            flushAnnouncements()
            answers.run(committed: committed)
        }
    }

    /// Where each queued change's rows end in the outbox, oldest first: a write that takes only
    /// the first rows takes whole changes, and settles their tickets.
    struct QueuedTickets {
        private var ends: [(ticket: UInt64, end: Int)] = []

        mutating func append(_ ticket: UInt64, end: Int) { ends.append((ticket, end)) }

        mutating func removeAll() { ends.removeAll() }

        /// The rows to take (all of them when they are at most `limit`; else whole changes, at
        /// least one) and the last ticket among them.
        func cut(limit: Int, rows: Int, lastTicket: UInt64) -> (rows: Int, last: UInt64) {
            guard rows > limit, let first = ends.first else { return (rows, lastTicket) }
            let fitting = ends.last { $0.end <= limit } ?? first
            return (fitting.end, fitting.ticket)
        }

        mutating func drop(rows: Int) {
            let gone = ends.firstIndex { $0.end > rows } ?? ends.count
            ends.removeFirst(gone)
            for i in ends.indices { ends[i].end -= rows }
        }
    }

    private struct Batch: @unchecked Sendable {
        let rows: [StateChange]
        let last: UInt64
        let fence: String
        /// Written under the lease (else in a shared turn).
        let exclusive: Bool
        let epoch: String
        /// The newest version this copy knew to be in Redis when the batch was taken: the
        /// batch's own version is higher unless Redis went back (`stateWentBack`).
        let knownVersion: UInt64
        let sentMs: Int64
        let generation: Int
    }

    /// Everything not written yet never will be: its tickets fail (with those of the batch in
    /// flight, if any: its fate is unknown) and the answers waiting for them are told.
    func failPending(_ s: inout Shared) {
        s.outbox = []
        s.queued.removeAll()
        s.yielding = false
        let waiting = tickets.withLock { (t: inout Tickets) -> CommitRelease? in
            guard t.lastTicket > t.resolvedTicket else { return nil }
            t.failedTickets.append((t.resolvedTicket + 1)...t.lastTicket)
            if t.failedTickets.count > 64 { t.failedTickets.removeFirst(t.failedTickets.count - 64) }
            t.resolvedTicket = t.lastTicket
            return t.waiters.takeAll()
        }
        guard let waiting else { return }
        // Run by whoever holds no lock: the tasks go to their executors, so running them here
        // only queues them.
        waiting.run(committed: false)
    }

    /// The calling thread, as the key of its open batch.
    static var currentThread: UInt { UInt(pthread_self()) }

    public func noteUnsharedChange() {
        shared.withLock { $0.needsReload = true }
    }

    /// Applies the log from where this copy is up to `version` (under the lease: nothing newer
    /// can appear meanwhile). A gap (the log was trimmed past this copy) means a reload.
    func catchUp(_ s: inout Shared, _ redis: RedisConnection, to version: UInt64) throws(RedisError) {
        // What was left unread comes before the entries that follow it.
        try readUnread(&s, redis)
        while s.version < version && !s.needsReload {
            let reply = try redis.command("XRANGE", store.key("log"), .text("(" + s.lastID), "+", "COUNT", "1000")
            let entries = try (reply.elements ?? []).map { (entry) throws(RedisError) in try LogEntry(entry, reader: instance) }
            if entries.isEmpty { s.needsReload = true; break }
            // (The writer is idle here, so no own write waits for its answer; should one, the
            // copy is reloaded rather than waited for under this lock.)
            guard apply(prepare(entries, rows: try rowsKeptApart(entries, on: redis))[...], &s) else {
                s.needsReload = true
                break
            }
        }
        settleArrivals()
        if s.needsReload { try reload(&s, redis) }
    }

    /// Applies log entries (XRANGE / XREAD shape) newer than this copy, in order.
    /// The rows of the entries (by version) that keep them in `rb:<version>` rather than in
    /// the log, fetched in one round trip. This instance's own are not needed, nor those left
    /// unread (`unread`, by index).
    func rowsKeptApart(
        _ entries: [LogEntry], leaving unread: [Bool] = [], ownParts: [Bool] = [], on redis: RedisConnection
    ) throws(RedisError) -> [UInt64: [UInt8]] {
        let wanted = entries.enumerated()
            .filter {
                $0.element.writer != instance && $0.element.rows == nil && $0.element.keptRows != nil
                    && (!(unread.indices.contains($0.offset) && unread[$0.offset])
                        || (ownParts.indices.contains($0.offset) && ownParts[$0.offset]))
            }
            .map(\.element)
        guard !wanted.isEmpty else { return [:] }
        let replies = try redis.pipeline(wanted.map { fetchRows(ofVersion: $0.version, keptAs: $0.keptRows ?? .key) })
        var rows: [UInt64: [UInt8]] = [:]
        for (entry, reply) in zip(wanted, replies) { if let bytes = reply.bytes { rows[entry.version] = bytes } }
        return rows
    }

    /// The command that fetches the rows of the write `version` kept apart from the log.
    func fetchRows(ofVersion version: UInt64, keptAs kept: KeptRows) -> [RedisArgument] {
        kept == .key ? ["GET", store.key("rb:\(version)")] : ["HGET", store.key("state"), .text("rb:\(version)")]
    }

    /// Where a log entry's rows are, when not in the entry itself (`b`).
    enum KeptRows: Equatable, Sendable {
        /// `rb:<version>`, a key of its own (`k`).
        case key
        /// The state's `rb:<version>` field (`1`, written by earlier versions).
        case field
    }

    /// A log entry (XRANGE / XREAD shape), read once: its id, and its fields `v` version, `i`
    /// the instance that wrote it, its rows either in `r` or (`b`) in `rb:<version>`, `m` the
    /// members it set, `j` when its rows only add to the journal.
    struct LogEntry {
        let id: String
        var version: UInt64 = 0
        var writer = 0
        var rows: [UInt8]?
        var keptRows: KeptRows?
        var members: [Int]?
        var journal: JournalOnlyWrite?

        init(_ entry: RedisReply) throws(RedisError) { try self.init(entry, reader: 0) }

        /// `reader`: the instance reading it; its own entries' `j` is not read (nothing needs it).
        init(_ entry: RedisReply, reader: Int) throws(RedisError) {
            guard let parts = entry.elements, parts.count == 2, let id = parts[0].text, let fields = parts[1].elements else {
                throw RedisError(.protocolError, "unexpected log entry")
            }
            self.id = id
            var journalField: [UInt8]?
            var i = 0
            while i + 1 < fields.count {
                // Every field name is one letter: compared as a byte, not made into text.
                switch fields[i].bytes.flatMap({ $0.count == 1 ? $0[0] : nil }) {
                case UInt8(ascii: "v"): version = Self.decimal(fields[i + 1]) ?? 0
                case UInt8(ascii: "i"): writer = Self.decimal(fields[i + 1]).map { Int(clamping: $0) } ?? 0
                case UInt8(ascii: "r"): rows = fields[i + 1].bytes
                case UInt8(ascii: "b"): keptRows = fields[i + 1].text == "k" ? .key : .field
                case UInt8(ascii: "m"): members = RedisStateStore.members(parsing: fields[i + 1].text)
                case UInt8(ascii: "j"): journalField = fields[i + 1].bytes
                default: break
                }
                i += 2
            }
            if let journalField, writer != reader { journal = JournalOnlyWrite(journalField) }
        }

        /// A decimal number in a string reply.
        static func decimal(_ reply: RedisReply) -> UInt64? {
            guard case .string(let bytes) = reply else { return nil }
            return DecimalText.value(of: bytes[...])
        }
    }

    /// A log entry read and its rows decoded, ready to apply: decoding needs no lock, so the
    /// follower does it before taking the coordinator's (which pushes need).
    struct PreparedEntry {
        let id: String
        let version: UInt64
        let writer: Int
        let members: [Int]?
        /// nil: the rows are gone (evicted) or could not be read: this copy must reload.
        let changes: [ReplicatedRow]?
        let problem: String?
        /// Left unread (`unreadable`): where its rows are, and its highest record sequence.
        var unread: UnreadJournal.Noted? = nil
    }

    func prepare(
        _ entries: [LogEntry], rows kept: [UInt64: [UInt8]], leaving unread: [Bool] = [], ownParts: [Bool] = []
    ) -> [PreparedEntry] {
        var prepared: [PreparedEntry] = []
        prepared.reserveCapacity(entries.count)
        for entry in entries {
            let (id, version, writer, inline, keptRows, members, journal) = (
                entry.id, entry.version, entry.writer, entry.rows, entry.keptRows, entry.members, entry.journal
            )
            guard writer != instance else {
                prepared.append(PreparedEntry(id: id, version: version, writer: writer, members: members, changes: [], problem: nil))
                continue
            }
            let index = prepared.count
            if unread.indices.contains(index), unread[index], let keptRows, let journal {
                var batch = UnreadJournal.Batch(
                    version: version, kept: keptRows, records: journal.records, handsOff: !journal.handOffDevices.isEmpty,
                    notedMs: Monotonic.nowMilliseconds())
                // Its parts for this instance's own records, applied now (`unreadable`).
                var parts: [ReplicatedRow] = []
                if ownParts.indices.contains(index), ownParts[index], let rows = kept[version],
                    let own = (try? StateCodec.deliveryParts(in: rows, where: isOwnRecord))
                        ?? (try? StateCodec.decodeRows(rows))?.filter(isOwnDeliveryPart)
                {
                    parts = own
                    batch.ownPartsApplied = true
                }
                prepared.append(
                    PreparedEntry(
                        id: id, version: version, writer: writer, members: members, changes: parts, problem: nil,
                        unread: UnreadJournal.Noted(batch: batch, topSequence: journal.topSequence, handOffDevices: journal.handOffDevices)))
                continue
            }
            // Rows kept apart from the log that are gone (evicted) mean this copy is too far behind.
            guard let rows = inline ?? (keptRows != nil ? kept[version] : nil) else {
                prepared.append(PreparedEntry(id: id, version: version, writer: writer, members: members, changes: nil, problem: nil))
                continue
            }
            do {
                let changes = try StateCodec.decodeRows(rows)
                prepared.append(PreparedEntry(id: id, version: version, writer: writer, members: members, changes: changes, problem: nil))
            } catch {
                prepared.append(PreparedEntry(id: id, version: version, writer: writer, members: members, changes: nil, problem: "\(error)"))
            }
        }
        return prepared
    }

    /// Applies the entries in order; false when it stopped at one of this instance's own writes
    /// whose answer the writer has not had yet (what that write holds for order is released as
    /// the follower passes it): the caller reads from there again a moment later.
    @discardableResult
    func apply(_ entries: ArraySlice<PreparedEntry>, _ s: inout Shared) -> Bool {
        var unread: [UnreadJournal.Noted] = []
        defer { noteUnread(unread, &s) }
        for entry in entries {
            let (id, version, writer, members) = (entry.id, entry.version, entry.writer, entry.members)
            if version <= s.version { continue }
            if writer == instance {
                // This copy made it (applied before it was written); the writer's answer may
                // simply not be in yet: then wait for it, unless no write is out (a write whose
                // answer failed, or an earlier run's).
                if version > s.lastOwnWrittenVersion, s.writing { return false }
                s.version = version
                s.lastID = id
                if let members { setOwnership(&s, members) }
                if !s.heldByVersion.isEmpty, let held = s.heldByVersion.removeValue(forKey: version) { releaseHeld(held) }
                continue
            }
            if let left = entry.unread, version == s.version + 1 {
                if let parts = entry.changes, !parts.isEmpty, !applyRows(parts, version: version) {
                    s.needsReload = true
                    return true
                }
                unread.append(left)
                s.version = version
                s.lastID = id
                continue
            }
            guard version == s.version + 1, let changes = entry.changes else {
                if let problem = entry.problem {
                    logger.warning("cannot read shared change \(version): \(problem); reloading the shared state")
                } else if entry.changes == nil {
                    warn(
                        &s,
                        "shared state: Redis no longer has the rows of changes this instance has not read (it fell further behind than Redis keeps them, about \(RedisStateStore.rowsKeptBehindRecords) journal records of each instance, or Redis lost them); reloading the shared state (answers waiting here for their own writes are not sent)"
                    )
                }
                s.needsReload = true
                return true
            }
            // Settled by the caller, once for all the entries it read.
            guard applyRows(changes, version: version, settling: false) else {
                s.needsReload = true
                return true
            }
            s.version = version
            s.lastID = id
            if let members { setOwnership(&s, members) }
        }
        return true
    }

    /// Pushes held for order whose write this copy has followed the log to: they join their
    /// devices' hand-offs, and the routing thread routes them (under this coordinator's lock).
    func releaseHeld(_ sequences: [UInt64]) {
        let devices = state.applyShared { (world: inout World) -> [String] in world.releaseHeldForOrder(sequences) }
        if !devices.isEmpty { queueHandOffs(devices) }
    }

    /// Applies another instance's rows to this copy (under this coordinator's lock), routes the
    /// hand-offs they give this instance and notes what to announce; false when they cannot be
    /// applied (this copy must reload). `settling`: see `World.applyReplicated`.
    func applyRows(_ changes: [ReplicatedRow], version: UInt64, settling: Bool = true) -> Bool {
        do {
            let now = clock.nowMilliseconds()
            let (applied, handOffs) = try state.applyShared {
                (world: inout World) throws(StateStoreError) -> (ReplicationApplied, [String]) in
                let applied = try world.applyReplicated(
                    rows: changes, nowMs: now, configured: configured, settling: settling, loadKey: loadKey)
                guard !applied.handedOffDeviceIDs.isEmpty else { return (applied, []) }
                // After a reset the list names every device with a hand-off: route those this
                // instance owns.
                return (applied, applied.handedOffDeviceIDs.filter { world.ownership != nil && world.owns($0) })
            }
            // Another instance took this one for stopped and marked the devices connected here
            // disconnected (a race with its coming back, which may then never see itself
            // removed): attach them again, as after a reset.
            let reattach = applied.reset || !applied.detachedHere.isEmpty
            if !applied.detachedHere.isEmpty {
                logger.warning(
                    "shared state: another instance marked \(applied.detachedHere.count) device(s) connected here disconnected; attaching them again")
            }
            announce(records: applied.recordSequences, reset: applied.reset, devicesReset: reattach)
            if !handOffs.isEmpty { queueHandOffs(handOffs) }
            return true
        } catch {
            logger.warning("cannot apply shared change \(version): \(error); reloading the shared state")
            return false
        }
    }

    /// Replaces this copy with the store's state (under the lease).
    func reload(_ s: inout Shared, _ redis: RedisConnection) throws(RedisError) {
        var (persisted, version, lastID, epoch) = try store.load(on: redis, keepingRecordsEncoded: true)
        if epoch == nil {
            // Nothing there, or a state whose epoch was removed (`forgetState`): the state this
            // copy follows is lost. Only an instance that starts takes up a state written before
            // epochs existed, and not while the running ones restore theirs (`recovering`): it
            // would become the restored state.
            guard version > 0, s.epoch.isEmpty, try redis.command("EXISTS", store.key("recovering")).int != 1 else {
                throw RedisError(.server, "EPOCH ")
            }
            let adopted = RedisStateStore.newEpoch()
            try announceSeeding(adopted, redis)
            defer { seedingEpoch.withLock { $0 = nil } }
            _ = try redis.command("SET", store.key("epoch"), .text(adopted), "NX")
            epoch = try store.epoch(on: redis)
        }
        if let epoch, epoch != s.epoch {
            // Another state than the one this copy follows: whether to follow it is decided
            // once, for every way of finding it (`epochChanged`).
            guard s.epoch.isEmpty else { throw RedisError(.server, "EPOCH \(epoch)") }
            follow(epoch, &s)
        }
        let now = clock.nowMilliseconds()
        let applied: ReplicationApplied
        do {
            applied = try state.applyShared { (world: inout World) throws(StateStoreError) in
                try world.applyReplicated([.reset(persisted)], nowMs: now, configured: configured, loadKey: loadKey)
            }
        } catch {
            throw RedisError(.protocolError, "the shared state cannot be loaded: \(error)")
        }
        s.version = version
        s.lastID = lastID
        s.needsReload = false
        // Pushes held for order went with the copy they were held in: their records, awaiting
        // their owner, are hand-offs of the loaded state.
        s.heldByVersion = [:]
        // The load had everything, the writes left unread included.
        forgetUnread(&s)
        // Another instance took this one for stopped while it was cut off and marked the
        // devices connected here disconnected; their sockets are still open.
        if !applied.detachedHere.isEmpty {
            logger.warning(
                "shared state: the reloaded state has \(applied.detachedHere.count) device(s) connected here marked disconnected; attaching them again"
            )
        }
        announce(records: [], reset: true, devicesReset: !applied.detachedHere.isEmpty)
        setOwnership(&s, try store.members(on: redis))
    }

    func failed(_ s: inout Shared, _ any: any Error) {
        let error = any as? RedisError ?? RedisError(.protocolError, "\(any)")
        // A cluster moved the keys' slot to another node: connect anew, to it.
        let moved = error.movedSlot
        if moved { store.slotMoved() }
        if let redis = s.redis, redis.isBroken || error.kind == .connection || moved {
            s.redis = nil
            s.holding = false
            s.sharing = false
            let text =
                moved
                ? "the shared state's keys moved to another node of the Redis Cluster (a failover or a resharding: \(error)); connecting to it"
                : "Redis at \(store.url.redacted) cannot be reached: \(error)"
            s.unavailable = text
            reason.withLock { $0 = text }
            ringKeeper()  // to reconnect
            logger.warning(
                moved
                    ? "shared state unavailable for a moment: \(text); providers get 503 until it is reached"
                    : "shared state unavailable: \(error); providers get 503 until Redis is back")
        } else if error.kind == .timeout {
            warn(&s, "shared state: \(error)")
        } else if error.kind == .server, error.description.hasPrefix("OOM") {
            warn(
                &s,
                "shared state: Redis at \(store.url.redacted) is out of memory (its maxmemory) and refuses writes: providers get 503, and the answers of changes it refused are not sent, until it has room again (\(error))"
            )
        } else if error.kind == .server, error.description.hasPrefix("EPOCH") {
            let current = error.description.dropFirst("EPOCH".count).trimmingCharacters(in: .whitespaces)
            epochChanged(&s, current: current.isEmpty ? nil : current, on: s.redis)
        } else if error.description.hasPrefix("LEASE") {
            s.holding = false
            s.sharing = false
            logger.warning("shared state: the lease expired before a change was stored; reloading")
        } else {
            warn(&s, "shared state: \(error)")
        }
    }

    private func warn(_ s: inout Shared, _ text: String) {
        if let line = s.warnings.line(for: text, nowMs: Monotonic.nowMilliseconds()) { logger.warning(line) }
    }

    /// Says once per Redis set up to evict keys (see `RedisStateStore.evictionRisk`) that it may
    /// lose what was acknowledged.
    private func warnOfEviction(_ s: inout Shared, _ redis: RedisConnection) {
        guard let risk = try? store.evictionRisk(on: redis), risk != s.evictionRisk else { return }
        s.evictionRisk = risk
        logger.warning(
            "Redis at \(store.url.redacted) may evict keys when it is full (\(risk)): pushes answered 200 and notifications stored for offline devices could then be lost. Set maxmemory-policy noeviction (a full Redis then refuses writes, and providers get 503) or maxmemory 0"
        )
    }

    /// The state in Redis is not the one this copy follows. Gone (`current` nil: Redis lost its
    /// data): every instance refuses changes until the state is restored from the newest copy
    /// among them (`recoverLostState`). Another one: followed when a running instance follows
    /// it (`adoptForeignState`), else taken for lost too (`refuseForeignState`). `redis` is
    /// where to ask.
    private func epochChanged(_ s: inout Shared, current: String?, on redis: RedisConnection?) {
        failPending(&s)
        s.holding = false
        s.sharing = false
        // What was left unread belongs to the state that went: its version numbers name other
        // writes (or none) in whatever Redis holds now.
        forgetUnread(&s)
        guard let current else {
            guard s.recovery == nil, !s.epoch.isEmpty else { return }
            s.recovery = Recovery(lostEpoch: s.epoch, detectedMs: Monotonic.nowMilliseconds())
            let text =
                "the shared state in Redis was lost (Redis restarted without its data, or was flushed); the instances restore it from the newest copy among them"
            s.unavailable = text
            reason.withLock { $0 = text }
            ringKeeper()  // to recover
            logger.warning(
                "shared state lost: Redis no longer holds the state this instance follows (epoch \(s.epoch)); providers get 503 until it is restored from the newest copy among the instances"
            )
            return
        }
        guard current != s.epoch else { return }
        if s.formerEpochs.contains(current) {
            // A state this copy followed before, come back (Redis restarted from a snapshot
            // taken before a restore): what was answered since is missing from it.
            stateWentBack(&s, redis, epochInRedis: current, found: nil, known: s.knownVersion)
            return
        }
        if s.refusedEpochs.contains(current) {
            refuseForeignState(&s, current, on: redis)
            return
        }
        guard let redis, !redis.isBroken else {
            // Not known now: looked at again when the keeper next reloads (it finds the epoch).
            s.needsReload = true
            return
        }
        let follower: Int?
        do {
            follower = try liveFollowers(of: current, on: redis)
        } catch {
            // Not known now: looked at again when the keeper next reloads (it finds the epoch).
            failed(&s, error)
            s.needsReload = true
            return
        }
        if let follower { adoptForeignState(&s, current, follower: follower, on: redis) } else { refuseForeignState(&s, current, on: redis) }
    }

    /// Another state in Redis that a running instance follows (`follower`'s heartbeat names
    /// it): seeded anew, or restored, while this instance was away (cut off, paused). It is the
    /// shared state now: this copy is reloaded from it. Its instance counter may be below this
    /// instance's number (a Redis that lost its data forgot it), and is raised to it, so that
    /// no instance started later takes that number.
    private func adoptForeignState(_ s: inout Shared, _ current: String, follower: Int, on redis: RedisConnection) {
        logger.warning(
            "shared state: Redis holds another shared state (epoch \(s.epoch) → \(current)), which instance \(follower) follows: seeded or restored while this instance was away; reloading this copy from it"
        )
        _ = try? Self.raiseCounterScript.run(on: redis, keys: [store.key("instances")], arguments: [.text(String(highestKnownNumber(s)))])
        follow(current, &s)
        s.needsReload = true
    }

    /// Another state in Redis that no running instance follows: not one seeded or restored
    /// while this instance was away (its seeder beats naming it before it writes it), but
    /// data put in place from elsewhere (another Redis's data directory, an old backup) or
    /// left by something else. Taking it up would drop everything answered 200 here, devices
    /// and tokens too, as a state that went back would (`stateWentBack`): it is taken for
    /// lost, its epoch removed while it is still there, and the newest copy among the
    /// instances is restored in its place.
    private func refuseForeignState(_ s: inout Shared, _ current: String, on redis: RedisConnection?) {
        logger.warning(
            "shared state: Redis holds another shared state (epoch \(current), not \(s.epoch)) that no running instance follows (another Redis's data put in its place, or an old copy): taking it up would drop what was answered 200 here, so the instances restore the newest copy among them"
        )
        if !s.refusedEpochs.contains(current) {
            s.refusedEpochs.append(current)
            if s.refusedEpochs.count > 8 { s.refusedEpochs.removeFirst() }
        }
        takeForLost(
            current, &s, on: redis,
            because:
                "Redis holds another shared state that no running instance follows (another Redis's data put in its place, or an old copy); the instances restore the newest copy among them"
        )
    }

    /// The state `epoch` names is taken for lost (it went back, or nobody follows it): removed
    /// from Redis with this copy offered for the restore (`forgetState`), and providers get
    /// 503 `because` until the newest copy among the instances is restored.
    private func takeForLost(_ epoch: String, _ s: inout Shared, on redis: RedisConnection?, because text: String) {
        forgetState(epoch, &s, on: redis)
        epochChanged(&s, current: nil, on: redis)
        s.unavailable = text
        reason.withLock { $0 = text }
    }

    /// Removes the state `epoch` names from Redis, unless another one is there by now, and
    /// offers this copy for the restore in the same step (`recovering`: an instance starting
    /// meanwhile waits for the restore, rather than take up what is left). The bound below
    /// which records are gone (`evicted`) goes too, since it is that state's, and the instance
    /// counter is raised to this instance's number. Not done when Redis does not answer: the
    /// recovery tries again (`recoverLostState`).
    func forgetState(_ epoch: String, _ s: inout Shared, on redis: RedisConnection?) {
        guard let redis, !redis.isBroken else { return }
        _ = try? Self.forgetStateScript.run(
            on: redis, keys: [store.key("epoch"), store.key("instances"), store.key("evicted"), store.key("recovering")],
            arguments: [.text(epoch), .text(Self.candidateName(instance)), .text(String(s.version)), "30000", .text(String(highestKnownNumber(s)))])
    }

    /// The highest instance number this copy knows to be taken: its own and the members'. A
    /// counter that went back with Redis's data is raised to it, so that an instance started
    /// while another member is still reconnecting (its heartbeat not back in Redis, so the
    /// claim cannot pass over it) does not take that member's number.
    private func highestKnownNumber(_ s: Shared) -> Int {
        max(instance, s.ownership?.members.max() ?? 0)
    }

    /// What Redis holds after it was out of reach: another state (`epochChanged`: gone, or
    /// another to reload) or this one older than this copy knew it (`stateWentBack`); false
    /// when it is the state this copy follows, as current as it knew it.
    private func checkWhatCameBack(_ s: inout Shared, _ redis: RedisConnection) throws(RedisError) -> Bool {
        let current = try store.epoch(on: redis)
        if current != s.epoch {
            epochChanged(&s, current: current, on: redis)
            return true
        }
        guard !s.epoch.isEmpty else { return false }
        let stored = UInt64(clamping: try redis.command("GET", store.key("version")).int ?? 0)
        guard stored < s.knownVersion else { return false }
        stateWentBack(&s, redis, epochInRedis: s.epoch, found: stored, known: s.knownVersion)
        return true
    }

    /// Follows `epoch` from now on (the versions of another state mean nothing in it).
    private func follow(_ epoch: String, _ s: inout Shared) {
        if !s.epoch.isEmpty, s.epoch != epoch {
            s.formerEpochs.append(s.epoch)
            if s.formerEpochs.count > 8 { s.formerEpochs.removeFirst() }
        }
        s.epoch = epoch
        s.lastOwnWrittenVersion = 0
        followedEpoch.withLock { $0 = epoch }
    }

    /// Redis holds the state this copy follows at version `found`, older than `known`, which
    /// it had stored: it restarted from an older snapshot (an RDB file, an append-only file
    /// synced every second) or a replica that lacked the newest writes took over. Changes
    /// answered 200 are missing from it, and going on from it would give their version numbers
    /// to other changes, so it is taken for lost: its epoch is removed (unless another state
    /// is there by now), which every instance notices, and the state is restored from the
    /// newest copy among them, as when Redis comes back empty.
    private func stateWentBack(_ s: inout Shared, _ redis: RedisConnection?, epochInRedis: String, found: UInt64?, known: UInt64) {
        let held =
            found.map { "version \($0) of the shared state, which had reached version \(known)" }
            ?? "a shared state this instance followed before (epoch \(epochInRedis)), not the newer one it follows now (\(s.epoch))"
        logger.warning(
            "shared state went back: Redis holds \(held) (Redis restarted from an older snapshot, or a replica without the newest writes took over): changes answered 200 are missing from it, so the instances restore it from the newest copy among them"
        )
        takeForLost(
            epochInRedis, &s, on: redis,
            because:
                "the shared state in Redis went back to an older version (Redis restarted from an older snapshot, or a replica without the newest writes took over); the instances restore it from the newest copy among them"
        )
    }

    /// KEYS: epoch instances evicted recovering. ARGV: epoch candidate version ttl highest.
    /// `forgetState`: when the epoch is still ARGV[1], removes it and the eviction bound, then
    /// offers the candidate as `candidacyScript` does (the candidate's name is its number), and
    /// raises the instance counter to the highest number taken (ARGV[5]).
    static let forgetStateScript = RedisScript(
        """
        if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
        redis.call('DEL', KEYS[1], KEYS[3])
        redis.call('ZADD', KEYS[4], ARGV[3], ARGV[2])
        redis.call('PEXPIRE', KEYS[4], ARGV[4])
        local top = tonumber(ARGV[5] or ARGV[2])
        if tonumber(redis.call('GET', KEYS[2]) or '0') < top then redis.call('SET', KEYS[2], top) end
        return 1
        """)

    /// KEYS: instances. ARGV: an instance's number. Raises the counter to it.
    static let raiseCounterScript = RedisScript(
        """
        if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
        return 1
        """)

    /// Notes changes applied from the others (or a reload) for the event streams: told by the
    /// next `flushAnnouncements`, after the locks.
    func announce(records: [UInt64], reset: Bool, devicesReset: Bool) {
        tickets.withLock { $0.announcements.append((records, reset, devicesReset)) }
        announcementsPending.store(true, ordering: .releasing)
    }

    func flushAnnouncements() {
        // Most changes (pushes) have none: their flush takes no lock. (One noted just after
        // this look is told by its own thread's flush, which follows it.)
        guard announcementsPending.load(ordering: .acquiring) else { return }
        let pending = tickets.withLock { (t: inout Tickets) -> [(records: [UInt64], reset: Bool, devicesReset: Bool)] in
            announcementsPending.store(false, ordering: .relaxed)
            defer { t.announcements = [] }
            return t.announcements
        }
        for item in pending { state.announceSharedChanges(records: item.records, reset: item.reset, devicesReset: item.devicesReset) }
    }

    // MARK: Threads

    /// Applies what the others log, as it arrives (a connection of its own, blocked on XREAD).
    private func followLog() {
        var redis: RedisConnection?
        /// Records kept encoded are being decoded while the log is quiet: look again sooner.
        var decodingKept = false
        while isRunning {
            let from = shared.withLock { $0.unavailable == nil ? $0.lastID : nil }
            guard let from else {
                usleep(200_000)
                continue
            }
            do {
                if redis == nil || redis!.isBroken {
                    redis = try store.connect(commandTimeoutMs: 3_000)
                }
                let reply = try redis!.command(
                    "XREAD", "COUNT", "1000", "BLOCK", decodingKept ? "10" : "1000", "STREAMS", store.key("log"), .text(from))
                guard let streams = reply.elements, let replies = streams.first?.elements?.last?.elements else {
                    // The log is quiet: decode a slice of the others' records kept encoded (outside
                    // the state's lock), so that a journal read later finds them ready.
                    // A slice of 500 (a few ms): a write that arrives meanwhile (a hand-off for
                    // this instance to route) waits for one slice at most; 2,000 held the first
                    // hand-off after a burst back by up to 160 ms. Writes left unread are read
                    // first, the same way (32 writes, about a thousand records under load): a
                    // journal read after a burst then finds them there, as when following eagerly.
                    if unreadWrites.load(ordering: .relaxed) > 0 {
                        _ = catchUpUnread(atMost: 32)
                        decodingKept = true
                    } else {
                        decodingKept = state.decodeKeptRecords(slice: 500)
                    }
                    continue
                }
                let entries = try replies.map { (entry) throws(RedisError) in try LogEntry(entry, reader: instance) }
                if entries.allSatisfy({ $0.writer == instance }) {
                    // Only this instance's own changes: under the lease `lastID` moved past them
                    // with every append already; in a shared turn they are passed over here, in
                    // order (the others may write between them). Either way look again a little
                    // later rather than waking for every change this instance makes.
                    let prepared = prepare(entries, rows: [:])
                    let passed = shared.withLock { (s: inout Shared) in s.needsReload || apply(prepared[...], &s) }
                    // Stopped at a write whose answer is on its way: look again at once.
                    usleep(passed ? 2_000 : 100)
                    waitWhileWritingAlone()
                    continue
                }
                // The others' writes that only add to the journal may stay unread for now; one
                // that must be read comes after what was left unread before it.
                let (leaving, ownParts) = unreadable(entries)
                if unreadWrites.load(ordering: .relaxed) > 0, zip(entries, leaving).contains(where: { $0.0.writer != instance && !$0.1 }) {
                    shared.withLock { (s: inout Shared) in
                        guard !s.needsReload, let main = s.redis else { return }
                        do { try readUnread(&s, main) } catch {
                            // Applying what follows before it would break the log's order.
                            failed(&s, error)
                            s.needsReload = true
                        }
                    }
                }
                // Fetched and decoded before the lock, and applied a few entries at a time: the
                // changes of this instance (pushes) need not wait for it.
                let prepared = prepare(
                    entries, rows: try rowsKeptApart(entries, leaving: leaving, ownParts: ownParts, on: redis!), leaving: leaving,
                    ownParts: ownParts)
                // Entries left unread (or this instance's own) apply few rows or none: all in one go.
                let slice = prepared.allSatisfy { $0.unread != nil || $0.writer == instance } ? prepared.count : 8
                var start = prepared.startIndex
                while start < prepared.endIndex {
                    let end = min(start + slice, prepared.endIndex)
                    let more = shared.withLock { (s: inout Shared) -> Bool in
                        // A copy waiting for its reload is not patched further (the keeper reloads it),
                        // nor one stopped at its own write until the writer has its answer (read
                        // again from there, a moment later).
                        guard !s.needsReload else { return false }
                        return apply(prepared[start..<end], &s)
                    }
                    if !more {
                        usleep(100)
                        break
                    }
                    start = end
                }
                // The others' records that arrived after this instance's newer ones, put in
                // their place once per read of the log rather than once per write.
                settleArrivals()
                flushAnnouncements()
            } catch {
                redis = nil
                usleep(200_000)
            }
        }
    }

    /// While this instance is the only member and holds a shared turn, nothing but its own
    /// writes can reach the log (a change under the lease waits for the turn to end, and no
    /// other instance takes shared turns), and the writer moves this copy past those: the
    /// follower looks every 2 ms whether that is still so, rather than read the log again
    /// (each read of this instance's own writes cost Redis an XREAD and this thread its reply,
    /// for nothing).
    private func waitWhileWritingAlone() {
        while isRunning, !othersAreMembers.load(ordering: .relaxed),
            shared.withLock({ (s: inout Shared) in s.sharing && s.unavailable == nil && !s.needsReload })
        {
            usleep(2_000)
        }
    }

    /// Gives up an idle lease, beats the heart, reloads when needed, reconnects after an
    /// outage, and disconnects the devices of instances that stopped beating.
    private func keep() {
        var nextLook: Int64 = 0
        var nextSweep: Int64 = 0
        var nextReloadAttempt: Int64 = 0
        var restMs: Int64 = 1
        while isRunning {
            keeperBell.withLock(when: { $0 }, timeoutMilliseconds: Int(restMs)) { (rung: inout Bool, _: Bool) in rung = false }
            let now = Monotonic.nowMilliseconds()
            if unavailableReason != nil {
                // Reconnecting is paced at 500 ms, a recovery's turns are seconds apart.
                restMs = 10
                if shared.withLock({ $0.recovery != nil }) { recoverLostState() } else { reconnect() }
                continue
            }
            // Busy means changes are being made: nothing to give up or reload now, and a
            // keeper waiting for the lock would only delay them.
            var reloaded = false
            restMs = 1
            shared.withLockIfFree { (s: inout Shared) in
                defer { restMs = Self.keeperRest(s, now: Monotonic.nowMilliseconds()) }
                guard let redis = s.redis else { return }
                do {
                    if s.needsReload, now >= nextReloadAttempt {
                        do {
                            failPending(&s)
                            try takeLease(&s, redis)
                            try reload(&s, redis)
                            reloaded = true
                        } catch {
                            // Not in a tight loop, and not holding the lease meanwhile.
                            nextReloadAttempt = now + 1_000
                            if s.holding { try? release(&s, redis) }
                            throw error
                        }
                    }
                    // The lease goes when no change asked for it for a moment, even while pushes
                    // come (they go on in shared turns); a shared turn when no change came.
                    let lastNeedingLease = s.ownership?.isMember == true ? s.lastExclusiveChangeMs : s.lastChangeMs
                    if s.holding, now - lastNeedingLease >= Self.idleReleaseMilliseconds {
                        // Under steady pushes the writer is never idle: stop taking changes until
                        // what is queued is written, then hand the lease back (the writer does).
                        if s.writerIdle { try release(&s, redis) } else { s.yielding = true }
                    }
                    if s.sharing, s.writerIdle, now - max(s.lastChangeMs, s.lastWrittenMs) >= Self.sharedIdleReleaseMilliseconds {
                        try releaseSharedTurn(&s, redis)
                    }
                } catch {
                    failed(&s, error)
                }
            }
            if reloaded { flushAnnouncements() }
            if now >= nextLook {
                // On the publishing connection, not under the busy lock. (The heartbeat has a
                // thread and a connection of its own, `beatLoop`: this look must find a
                // connection broken by a restart, not one the heartbeat already made anew.)
                nextLook = now + Self.heartbeatMilliseconds
                // (Not `try?`: it would flatten "no epoch" into "no answer".)
                let epoch: Result<String?, RedisError> = Result { () throws(RedisError) -> String? in
                    try withPublisher { (redis: RedisConnection) throws(RedisError) -> String? in try store.epoch(on: redis) }
                }
                // A flushed Redis, or one seeded anew, shows here within a heartbeat even when
                // no change comes along to find out.
                if case .success(let current) = epoch, current != followedEpoch.withLock({ $0 }) {
                    shared.withLock { (s: inout Shared) in
                        if s.recovery == nil, s.unavailable == nil, !s.epoch.isEmpty, current != s.epoch {
                            epochChanged(&s, current: current, on: s.redis)
                        }
                    }
                }
                // Redis gone, or restarted (which an idle instance only learns here): one look on
                // a fresh connection says which. Gone: taken as a lost connection, so /readyz
                // says so at once. Back: what came back is checked (another or an older state).
                // (Taken for gone at once, a publishing connection made before a restart that
                // failed after the reconnect cost a second outage of about 2 s.)
                if case .failure(let error) = epoch, error.kind == .connection {
                    shared.withLock { (s: inout Shared) in
                        guard s.recovery == nil, s.unavailable == nil, s.redis != nil, !s.epoch.isEmpty else { return }
                        do {
                            _ = try checkWhatCameBack(&s, try store.connect())
                        } catch {
                            failed(&s, error)
                        }
                    }
                }
            }
            if now >= nextSweep {
                nextSweep = now + 2 * Self.heartbeatMilliseconds
                sweepStoppedInstances()
                sweepMembers()
            }
            restMs = max(1, min(restMs, nextLook - now, nextSweep - now))
        }
    }

    /// Rung when this instance takes the lease or a shared turn (and when it stops), so that
    /// a keeper resting between heartbeats wakes to give it back once it goes idle.
    private let keeperBell = BlockingLock(false)

    func ringKeeper() { keeperBell.withLock { $0 = true } }

    /// How long the keeper may rest before it looks again. A lease given back 2 ms after its
    /// last change needs a look every millisecond; a shared turn only when it may go (20 ms
    /// after the last change or write); nothing held, only the heartbeat. (It looked every
    /// millisecond whatever it held: an idle instance woke 2,000 times a second, the keeper
    /// and the writer it woke through the lock, about 3 % of a core.)
    static func keeperRest(_ s: Shared, now: Int64) -> Int64 {
        if s.holding || s.needsReload || s.yielding { return 1 }
        if s.sharing { return min(max(1, max(s.lastChangeMs, s.lastWrittenMs) + sharedIdleReleaseMilliseconds - now), sharedIdleReleaseMilliseconds) }
        return 100
    }

    private var lastReconnectAttemptMs: Int64 = 0

    /// After an outage: a new connection (made without the lock, so changes keep getting
    /// their quick refusal meanwhile), then this copy reloaded from the store, since whatever
    /// happened meanwhile (others' changes, a trimmed log) is not in it.
    private func reconnect() {
        let now = Monotonic.nowMilliseconds()
        guard now - lastReconnectAttemptMs >= 500 else { return }
        lastReconnectAttemptMs = now
        guard let redis = try? store.connect(), (try? redis.command("PING")) != nil else { return }
        let back = shared.withLock { (s: inout Shared) -> Bool in
            do {
                s.redis = redis
                failPending(&s)
                // Redis may have come back without its data, with another state, or older.
                if try checkWhatCameBack(&s, redis), s.recovery != nil { return false }
                try takeLease(&s, redis)
                try reload(&s, redis)
                try heartbeat(redis)
                s.unavailable = nil
                warnOfEviction(&s, redis)
                return true
            } catch {
                // The node answered but no longer serves the keys (a failover made it a
                // replica): ask the cluster where they are before the next try, rather than
                // dialling the same node every half second for ever.
                if (error as? RedisError)?.movedSlot == true { store.slotMoved() }
                s.redis = nil
                s.holding = false
                return false
            }
        }
        guard back else { return }
        reason.withLock { $0 = nil }
        flushAnnouncements()
        // The node it is on now (after a failover, not the one --redis names).
        logger.warning("shared state available again (Redis at \(redis.url.redacted))")
    }

    /// While the shared state is lost: every instance that followed it offers its copy (the
    /// version it had applied) in `recovering`; once the window has passed, the instance with
    /// the newest copy writes it back under a new epoch, and the others, seeing the epoch
    /// appear, reload it. A write that seeds only where no epoch exists makes exactly one of
    /// them win; a candidate whose turn passes without a restore (it stopped) is passed over.
    private func recoverLostState() {
        let now = Monotonic.nowMilliseconds()
        var restored = false
        var rejoined = false
        shared.withLock { (s: inout Shared) in
            guard var recovery = s.recovery else { return }
            if s.redis == nil || s.redis!.isBroken {
                guard let fresh = try? store.connect() else { return }
                s.redis = fresh
            }
            guard let redis = s.redis else { return }
            do {
                var current = try store.epoch(on: redis)
                if let found = current, found == recovery.lostEpoch || s.formerEpochs.contains(found) || s.refusedEpochs.contains(found) {
                    // The state went back (`stateWentBack`), or another that nobody followed is
                    // there (`refuseForeignState`), and the instance that found it could not
                    // remove its epoch, or such a state came back meanwhile: a restore seeds
                    // only where there is none.
                    forgetState(found, &s, on: redis)
                    current = nil
                }
                if let current, current != recovery.lostEpoch {
                    // Restored by another instance (or seeded by a new one): follow it. The
                    // journal this copy holds is taken first: taking the lease may already
                    // reload the copy (a reload was due when the state went), and what the
                    // restored state lacks is known only against this copy.
                    let kept = recovery.keptRecords ?? state.readWorld { $0.records.newestFirst(limit: $0.records.count) }
                    recovery.keptRecords = kept
                    s.recovery = recovery
                    follow(current, &s)
                    try takeLease(&s, redis)
                    try reload(&s, redis)
                    // A large state takes longer to reload than the lease lasts: renewed (or
                    // taken again, catching up) before the write-back, which is fenced by it.
                    try takeLease(&s, redis)
                    try restoreRecordsLeftOut(kept, &s, redis)
                    s.recovery = nil
                    try heartbeat(redis)
                    s.unavailable = nil
                    rejoined = true
                    return
                }
                if now - recovery.lastCandidacyMs >= 500 {
                    recovery.lastCandidacyMs = now
                    s.recovery = recovery
                    _ = try Self.candidacyScript.run(
                        on: redis, keys: [store.key("recovering"), store.key("instances")],
                        arguments: [.text(Self.candidateName(instance)), .text(String(s.version)), "30000"])
                    try heartbeat(redis)
                }
                let waited = now - recovery.detectedMs
                guard waited >= Self.recoveryWindowMilliseconds else { return }
                let ranking = try redis.command("ZREVRANGE", store.key("recovering"), "0", "-1").elements?.compactMap(\.text) ?? []
                let rank = Int64(ranking.firstIndex(of: Self.candidateName(instance)) ?? ranking.count)
                guard waited >= Self.recoveryWindowMilliseconds + rank * Self.recoveryTurnMilliseconds else { return }
                let copy = state.readWorld { $0.persistedState }
                let epoch = RedisStateStore.newEpoch()
                try announceSeeding(epoch, redis)
                defer { seedingEpoch.withLock { $0 = nil } }
                let written: (version: UInt64, id: String, wanted: Bool)
                do {
                    // This instance alone is a member: the members Redis holds are those of the
                    // state that went (nobody's, in another state put in its place), and the
                    // others join as they reload it.
                    written = try store.append(
                        [.reset(copy)], instance: instance, fence: nil, epoch: .seed(epoch), members: [instance], on: redis)
                } catch let error as RedisError where error.kind == .server && error.description.hasPrefix("EPOCH") {
                    return  // another candidate was first: follow it on the next pass
                }
                _ = try? redis.command("DEL", store.key("recovering"))
                logger.warning(
                    "shared state restored into Redis from this instance's copy (version \(s.version) of the lost state: \(copy.devices.count) device(s), \(copy.tokens.count) token(s), \(copy.waiting.count) waiting notification(s), \(copy.records.count) record(s)); the other instances reload it"
                )
                s.recovery = nil
                follow(epoch, &s)
                s.version = written.version
                s.lastID = written.id
                setOwnership(&s, [instance])
                s.needsReload = false
                s.holding = false
                try heartbeat(redis)
                s.unavailable = nil
                // The copy written back may hold deliveries whose frames never went out (their
                // writes failed at the loss): the device sockets here are reconciled with it, as
                // after a reload (`EmulatorState.observeSharedResets`).
                announce(records: [], reset: true, devicesReset: false)
                restored = true
            } catch {
                if redis.isBroken { s.redis = nil }
            }
        }
        guard restored || rejoined else { return }
        reason.withLock { $0 = nil }
        flushAnnouncements()
        if rejoined { logger.warning("shared state available again: restored by another instance, reloaded from Redis") }
    }

    /// Members of `recovering`, ranked by score (the version of the copy) and, for equal ones,
    /// by name: zero-padded so the order is numeric.
    static func candidateName(_ instance: Int) -> String {
        let digits = String(instance)
        return String(repeating: "0", count: max(0, 10 - digits.count)) + digits
    }

    /// KEYS: recovering instances. ARGV: candidate version ttl.
    ///
    /// Also raises the instance counter to this instance's number: a Redis that lost its data
    /// forgot it, and a new instance must not take the number of one still running.
    static let candidacyScript = RedisScript(
        """
        redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
        redis.call('PEXPIRE', KEYS[1], ARGV[3])
        if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[1]) then redis.call('SET', KEYS[2], tonumber(ARGV[1])) end
        return 1
        """)

    // MARK: Scripts

}

extension RedisCoordinator: Service {
    public var serviceName: String { "shared state (--redis)" }
    public func start() throws { try start(waitMilliseconds: 10_000) }
    public func stop(deadlineMs: Int64) { stop() }
}

extension RedisError {
    /// A Redis Cluster answered that the keys' slot is served by another node (`MOVED`, `ASK`).
    var movedSlot: Bool { kind == .server && (description.hasPrefix("MOVED") || description.hasPrefix("ASK")) }
}
