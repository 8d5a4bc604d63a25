// RedisStore: `--redis`, the state in Redis shared by several instances: the lease that
// orders changes, the change log, the relay of device frames. Imports APNsCore, Redis,
// Locking, Lifecycle (it is a service, given a logger), MonotonicClock and Foundation.

public import APNsCore
import Foundation
public import Lifecycle
public import Locking
import MonotonicClock
import Redis

/// Several emulator instances as one APNs (`--redis`): each keeps a whole copy of the world,
/// and every change goes through Redis in one order.
///
/// An instance changes the world only while it holds the lease (a Redis key with a TTL). On
/// taking it, the instance first applies every change the others logged since it last looked
/// (so its copy is current), then runs the change on its copy and appends the rows it made
/// (the same rows `--state-dir` persists) to the log and the state keys — one script, fenced
/// by the lease token, before the caller answers anyone. The others apply those rows as they
/// arrive (a thread blocked on the log) or when they next take the lease. So changes are
/// linearizable; reads are served from the local copy, current to within the log's delivery
/// delay (milliseconds).
///
/// The lease is kept while changes keep coming and given up when the instance is idle for a
/// moment or another instance asks for it (`want`), so a busy instance does not pay a round
/// trip per change for the lease, only for the append.
public final class RedisCoordinator: WorldCoordinator, @unchecked Sendable {
    /// How long a lease lasts without an append (an instance that stops, e.g. SIGSTOP, loses it).
    public static let leaseMilliseconds = 2_000
    /// Given up after this long without a change.
    static let idleReleaseMilliseconds: Int64 = 2
    /// Kept at least this long once taken, even when another instance asks for it: the
    /// changes of a busy instance go out in slices rather than one hand-over per change.
    static let minimumHoldMilliseconds: Int64 = 5
    /// Waiting longer than this for the lease counts as the store being unavailable.
    static let acquireTimeoutMilliseconds: Int64 = 3_000
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
    private let shared: BlockingLock<Shared>
    private struct Shared: @unchecked Sendable {
        var redis: RedisConnection?
        var token = ""
        var holding = false
        var holdingSinceMs: Int64 = 0
        var leaseUntilMs: Int64 = 0
        var lastChangeMs: Int64 = 0
        /// The last log entry applied to (or written from) this copy.
        var version: UInt64 = 0
        var lastID = "0-0"
        /// Why changes are refused (nil: they are not).
        var unavailable: String?
        /// This copy may differ from the store: reload it when the lease is next held.
        var needsReload = false
        /// Applied changes still to be announced to event streams (after the lock).
        var announcements: [(records: [UInt64], reset: Bool)] = []
        /// Rows of batched changes (`beginBatch`) made on this copy but not written yet, in
        /// order. Whoever writes next writes them first, so the log keeps this copy's order.
        var pendingRows: [StateChange] = []
        /// Batched changes are numbered; a batch remembers its first and last number, and
        /// the ranges whose write failed tell it whether all of it was kept.
        var lastTicket: UInt64 = 0
        var writtenTicket: UInt64 = 0
        var lostTickets: [ClosedRange<UInt64>] = []
        /// Open batches by thread: (first, last) ticket, nil while nothing was changed.
        var batches: [UInt: (first: UInt64, last: UInt64)?] = [:]
        /// The epoch of the shared state this copy follows ("" until it has joined one).
        var epoch = ""
        /// Set while the shared state is lost and being restored (`recoverLostState`).
        var recovery: Recovery?
    }

    /// A lost shared state being restored: the instances that follow it say how current their
    /// copies are, and after a short window the newest copy is written back as the state.
    struct Recovery {
        let lostEpoch: String
        let detectedMs: Int64
        var lastCandidacyMs: Int64 = 0
    }
    /// How long instances have, after noticing the state is gone, to offer their copies.
    static let recoveryWindowMilliseconds: Int64 = 2_000
    /// A candidate that has not restored the state this long after its turn came is passed over.
    static let recoveryTurnMilliseconds: Int64 = 3_000
    private let reason = Locked<String?>(nil)
    /// `Shared.epoch`, readable without the busy lock (the keeper compares it every second).
    private let followedEpoch = Locked("")
    private let running = Locked(true)
    private var threads: [Thread] = []
    let publisher = Locked<RedisConnection?>(nil)

    public init(
        store: RedisStateStore, state: EmulatorState, configured: World, clock: any EmulatorClock,
        loadKey: @escaping @Sendable (StoredKey) throws(StateStoreError) -> ProviderKey, logger: Logger = .silent
    ) {
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
        while true {
            do {
                let redis = try RedisConnection(url: store.url)
                guard let number = try redis.command("INCR", store.key("instances")).int else {
                    throw RedisError(.protocolError, "INCR did not answer a number")
                }
                instance = Int(number)
                try shared.withLock { (s: inout Shared) throws(RedisError) in
                    s.redis = redis
                    s.token = "\(number)-\(UInt64.random(in: 1...UInt64.max))"
                    try takeLease(&s, redis)
                    let version = try redis.command("GET", store.key("version")).int ?? 0
                    if version == 0 {
                        if try redis.command("EXISTS", store.key("recovering")).int == 1 {
                            // Running instances are restoring a lost state: join it once restored.
                            try? release(&s, redis)
                            throw RedisError(.timeout, "the instances sharing this Redis are restoring its lost state")
                        }
                        // The first instance: the store starts as this instance's world.
                        let start = state.readWorld { $0.persistedState }
                        let epoch = RedisStateStore.newEpoch()
                        let written = try store.append([.reset(start)], instance: instance, fence: s.token, epoch: .seed(epoch), on: redis)
                        s.epoch = epoch
                        followedEpoch.withLock { $0 = epoch }
                        s.version = written.version
                        s.lastID = written.id
                        if written.released { s.holding = false }
                    } else {
                        try reload(&s, redis)
                    }
                    try heartbeat(redis)
                }
                break
            } catch {
                lastError = "\(error)"
                if Monotonic.nowMilliseconds() > deadline {
                    throw StateStoreError("cannot use Redis at \(store.url.redacted): \(lastError)")
                }
                usleep(200_000)
            }
        }
        flushAnnouncements()
        startThread("apns-redis-log") { [weak self] in self?.followLog() }
        startThread("apns-redis-keeper") { [weak self] in self?.keep() }
        startThread("apns-redis-frames") { [weak self] in self?.receiveFrames() }
    }

    public func stop() {
        running.withLock { $0 = false }
        shared.withLock { (s: inout Shared) in
            if s.holding, let redis = s.redis { try? release(&s, redis) }
            if let redis = s.redis { _ = try? redis.command("DEL", store.key("alive:\(instance)")) }
        }
    }

    var isRunning: Bool { running.withLock { $0 } }

    private func startThread(_ name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread(block: body)
        thread.name = name
        thread.start()
        threads.append(thread)
    }

    // MARK: Changes

    public func mutate(_ change: () -> [StateChange]) -> Bool {
        // Checked before the lock: while Redis is away the keeper may hold it for a reconnect
        // attempt, and a provider should get its 503 at once, not after that.
        if unavailableReason != nil { return false }
        let thread = Self.currentThread
        let ok = shared.withLock { (s: inout Shared) -> Bool in
            guard s.unavailable == nil, let redis = s.redis else { return false }
            do {
                try takeLease(&s, redis)
                if s.needsReload {
                    dropPending(&s)
                    try reload(&s, redis)
                }
            } catch {
                failed(&s, error)
                return false
            }
            let rows = change()
            s.lastChangeMs = Monotonic.nowMilliseconds()
            guard !rows.isEmpty else { return true }
            if let open = s.batches[thread] {
                s.lastTicket += 1
                s.batches[thread] = (open?.first ?? s.lastTicket, s.lastTicket)
                s.pendingRows += rows
                return true
            }
            return write(rows, &s, redis)
        }
        flushAnnouncements()
        return ok
    }

    public func beginBatch() {
        let thread = Self.currentThread
        shared.withLock { (s: inout Shared) in s.batches[thread] = .some(nil) }
    }

    public func endBatch() -> Bool {
        let thread = Self.currentThread
        let ok = shared.withLock { (s: inout Shared) -> Bool in
            guard let open = s.batches.removeValue(forKey: thread), let (first, last) = open else { return true }
            if !s.pendingRows.isEmpty {
                if let redis = s.redis { _ = write([], &s, redis) } else { dropPending(&s) }
            }
            let kept = !s.lostTickets.contains { $0.overlaps(first...last) }
            // Ranges no open batch can still ask about are forgotten.
            let oldest = s.batches.values.compactMap { $0?.first }.min() ?? s.lastTicket + 1
            s.lostTickets.removeAll { $0.upperBound < oldest }
            return kept
        }
        flushAnnouncements()
        return ok
    }

    /// Writes the pending batched rows and then `rows`, as one step. On failure the pending
    /// tickets are lost and this copy is reloaded.
    private func write(_ rows: [StateChange], _ s: inout Shared, _ redis: RedisConnection) -> Bool {
        let all = s.pendingRows.isEmpty ? rows : s.pendingRows + rows
        do {
            let mayRelease = Monotonic.nowMilliseconds() - s.holdingSinceMs >= Self.minimumHoldMilliseconds
            let written = try store.append(
                all, instance: instance, fence: s.token, epoch: .expect(s.epoch), mayRelease: mayRelease,
                on: redis)
            if written.version != s.version + 1 { s.needsReload = true }  // cannot happen under the lease
            s.version = written.version
            s.lastID = written.id
            s.pendingRows = []
            s.writtenTicket = s.lastTicket
            if written.released { s.holding = false }
            return true
        } catch {
            // Not stored, or not known to be: this copy is ahead of the store.
            dropPending(&s)
            s.needsReload = true
            failed(&s, error)
            return false
        }
    }

    /// The pending batched changes will never be written: their batches are told so.
    private func dropPending(_ s: inout Shared) {
        guard !s.pendingRows.isEmpty, s.lastTicket > s.writtenTicket else { return }
        s.lostTickets.append((s.writtenTicket + 1)...s.lastTicket)
        s.writtenTicket = s.lastTicket
        s.pendingRows = []
    }

    /// The calling thread, as the key of its open batch.
    private static var currentThread: UInt { UInt(pthread_self()) }

    public func noteUnsharedChange() {
        shared.withLock { $0.needsReload = true }
    }

    /// Ensures this instance holds the lease, catching up with the log when it takes it.
    private func takeLease(_ s: inout Shared, _ redis: RedisConnection) throws(RedisError) {
        let now = Monotonic.nowMilliseconds()
        if s.holding, s.leaseUntilMs - now > 200 { return }
        let deadline = now + Self.acquireTimeoutMilliseconds
        var pause: UInt32 = 50
        while true {
            let reply = try Self.acquireScript.run(
                on: redis, keys: [store.key("lease"), store.key("want"), store.key("version"), store.key("epoch")],
                arguments: [.text(s.token), .text(String(Self.leaseMilliseconds))])
            guard let parts = reply.elements, parts.count == 3, let got = parts[0].int, let version = parts[1].int,
                let epoch = parts[2].text
            else {
                throw RedisError(.protocolError, "unexpected reply to the lease script")
            }
            // Another state than the one this copy follows (or none): nothing may be applied
            // or written until that is sorted out.
            if !s.epoch.isEmpty, epoch != s.epoch { throw RedisError(.server, "EPOCH \(epoch)") }
            if got == 1 {
                let wasHolding = s.holding
                if !wasHolding { s.holdingSinceMs = Monotonic.nowMilliseconds() }
                s.holding = true
                s.leaseUntilMs = Monotonic.nowMilliseconds() + Int64(Self.leaseMilliseconds)
                if !wasHolding || UInt64(version) != s.version { try catchUp(&s, redis, to: UInt64(version)) }
                return
            }
            s.holding = false
            if Monotonic.nowMilliseconds() > deadline {
                throw RedisError(.timeout, "another instance has held the shared state for over \(Self.acquireTimeoutMilliseconds) ms")
            }
            usleep(pause)
            pause = min(pause * 2, 400)
        }
    }

    private func release(_ s: inout Shared, _ redis: RedisConnection) throws(RedisError) {
        s.holding = false
        _ = try Self.releaseScript.run(on: redis, keys: [store.key("lease")], arguments: [.text(s.token)])
    }

    /// Applies the log from where this copy is up to `version` (under the lease: nothing newer
    /// can appear meanwhile). A gap (the log was trimmed past this copy) means a reload.
    private func catchUp(_ s: inout Shared, _ redis: RedisConnection, to version: UInt64) throws(RedisError) {
        while s.version < version && !s.needsReload {
            let reply = try redis.command("XRANGE", store.key("log"), .text("(" + s.lastID), "+", "COUNT", "1000")
            let entries = reply.elements ?? []
            if entries.isEmpty { s.needsReload = true; break }
            try apply(entries, &s)
        }
        if s.needsReload { try reload(&s, redis) }
    }

    /// Applies log entries (XRANGE / XREAD shape) newer than this copy, in order.
    private func apply(_ entries: [RedisReply], _ s: inout Shared) throws(RedisError) {
        for entry in entries {
            guard let parts = entry.elements, parts.count == 2, let id = parts[0].text, let fields = parts[1].elements else {
                throw RedisError(.protocolError, "unexpected log entry")
            }
            var version: UInt64 = 0
            var rows: [UInt8]?
            var i = 0
            while i + 1 < fields.count {
                switch fields[i].text {
                case "v": version = fields[i + 1].text.flatMap { UInt64($0) } ?? 0
                case "r": rows = fields[i + 1].bytes
                default: break
                }
                i += 2
            }
            if version <= s.version { continue }
            guard version == s.version + 1, let rows else {
                s.needsReload = true
                return
            }
            do {
                let changes = try StateCodec.decodeChanges(rows)
                let now = clock.nowMilliseconds()
                let applied = try state.applyShared { (world: inout World) throws(StateStoreError) in
                    try world.applyReplicated(changes, nowMs: now, configured: configured, loadKey: loadKey)
                }
                s.announcements.append((applied.recordSequences, applied.reset))
            } catch {
                logger.warning("cannot apply shared change \(version): \(error); reloading the shared state")
                s.needsReload = true
                return
            }
            s.version = version
            s.lastID = id
        }
    }

    /// Replaces this copy with the store's state (under the lease).
    private func reload(_ s: inout Shared, _ redis: RedisConnection) throws(RedisError) {
        var (persisted, version, lastID, epoch) = try store.load(on: redis)
        if epoch == nil {
            // Nothing there (lost), or a state written before epochs existed (adopt it).
            guard version > 0 else { throw RedisError(.server, "EPOCH ") }
            _ = try redis.command("SET", store.key("epoch"), .text(RedisStateStore.newEpoch()), "NX")
            epoch = try store.epoch(on: redis)
        }
        if let epoch, epoch != s.epoch {
            if !s.epoch.isEmpty { logger.warning("shared state: following a new shared state in Redis (epoch \(s.epoch) → \(epoch))") }
            s.epoch = epoch
            followedEpoch.withLock { $0 = epoch }
        }
        let now = clock.nowMilliseconds()
        do {
            _ = try state.applyShared { (world: inout World) throws(StateStoreError) in
                try world.applyReplicated([.reset(persisted)], nowMs: now, configured: configured, loadKey: loadKey)
            }
        } catch {
            throw RedisError(.protocolError, "the shared state cannot be loaded: \(error)")
        }
        s.version = version
        s.lastID = lastID
        s.needsReload = false
        s.announcements.append(([], true))
    }

    private func failed(_ s: inout Shared, _ any: any Error) {
        let error = any as? RedisError ?? RedisError(.protocolError, "\(any)")
        if let redis = s.redis, redis.isBroken || error.kind == .connection {
            s.redis = nil
            s.holding = false
            let text = "Redis at \(store.url.redacted) cannot be reached: \(error)"
            s.unavailable = text
            reason.withLock { $0 = text }
            logger.warning("shared state unavailable: \(error); providers get 503 until Redis is back")
        } else if error.kind == .timeout {
            logger.warning("shared state: \(error)")
        } else if error.kind == .server, error.description.hasPrefix("EPOCH") {
            let current = error.description.dropFirst("EPOCH".count).trimmingCharacters(in: .whitespaces)
            epochChanged(&s, current: current.isEmpty ? nil : current)
        } else if error.description.hasPrefix("LEASE") {
            s.holding = false
            logger.warning("shared state: the lease expired before a change was stored; reloading")
        } else {
            logger.warning("shared state: \(error)")
        }
    }

    /// The state in Redis is not the one this copy follows. Gone (`current` nil: Redis lost its
    /// data): every instance refuses changes until the state is restored from the newest copy
    /// among them (`recoverLostState`). Another one (seeded anew while this instance was away):
    /// it is the shared state now, so this copy is reloaded from it.
    private func epochChanged(_ s: inout Shared, current: String?) {
        dropPending(&s)
        s.holding = false
        guard let current else {
            guard s.recovery == nil, !s.epoch.isEmpty else { return }
            s.recovery = Recovery(lostEpoch: s.epoch, detectedMs: Monotonic.nowMilliseconds())
            let text =
                "the shared state in Redis was lost (Redis restarted without its data, or was flushed); the instances restore it from the newest copy among them"
            s.unavailable = text
            reason.withLock { $0 = text }
            logger.warning(
                "shared state lost: Redis no longer holds the state this instance follows (epoch \(s.epoch)); providers get 503 until it is restored from the newest copy among the instances"
            )
            return
        }
        guard current != s.epoch else { return }
        logger.warning(
            "shared state: Redis holds another shared state (epoch \(s.epoch) → \(current)), seeded while this instance was away; reloading this copy from it"
        )
        s.epoch = current
        followedEpoch.withLock { $0 = current }
        s.needsReload = true
    }

    private func flushAnnouncements() {
        let pending = shared.withLock { (s: inout Shared) -> [(records: [UInt64], reset: Bool)] in
            defer { s.announcements = [] }
            return s.announcements
        }
        for item in pending { state.announceSharedChanges(records: item.records, reset: item.reset) }
    }

    // MARK: Threads

    /// Applies what the others log, as it arrives (a connection of its own, blocked on XREAD).
    private func followLog() {
        var redis: RedisConnection?
        while isRunning {
            let from = shared.withLock { $0.unavailable == nil ? $0.lastID : nil }
            guard let from else {
                usleep(200_000)
                continue
            }
            do {
                if redis == nil || redis!.isBroken {
                    redis = try RedisConnection(url: store.url, commandTimeoutMs: 3_000)
                }
                let reply = try redis!.command("XREAD", "COUNT", "1000", "BLOCK", "1000", "STREAMS", store.key("log"), .text(from))
                guard let streams = reply.elements, let entries = streams.first?.elements?.last?.elements else { continue }
                if entries.allSatisfy({ Self.instance(ofEntry: $0) == instance }) {
                    // Only this instance's own changes: it holds the lease, so nobody else can be
                    // writing. Skip them without the lock, and look again a little later rather
                    // than waking for every change this instance makes (the next read starts
                    // after them: `lastID` moves with every append).
                    usleep(2_000)
                    continue
                }
                shared.withLock { (s: inout Shared) in
                    // A copy waiting for its reload is not patched further (the keeper reloads it).
                    guard !s.needsReload else { return }
                    do { try apply(entries, &s) } catch { s.needsReload = true }
                }
                flushAnnouncements()
            } catch {
                redis = nil
                usleep(200_000)
            }
        }
    }

    /// Gives up an idle lease, beats the heart, reloads when needed, reconnects after an
    /// outage, and disconnects the devices of instances that stopped beating.
    private func keep() {
        var nextHeartbeat: Int64 = 0
        var nextSweep: Int64 = 0
        var nextReloadAttempt: Int64 = 0
        while isRunning {
            usleep(1_000)
            let now = Monotonic.nowMilliseconds()
            if unavailableReason != nil {
                if shared.withLock({ $0.recovery != nil }) { recoverLostState() } else { reconnect() }
                continue
            }
            // Busy means changes are being made: nothing to give up or reload now, and a
            // keeper waiting for the lock would only delay them.
            var reloaded = false
            shared.withLockIfFree { (s: inout Shared) in
                guard let redis = s.redis else { return }
                do {
                    if s.needsReload, now >= nextReloadAttempt {
                        do {
                            dropPending(&s)
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
                    if s.holding, s.pendingRows.isEmpty, now - s.lastChangeMs >= Self.idleReleaseMilliseconds {
                        try release(&s, redis)
                    }
                } catch {
                    failed(&s, error)
                }
            }
            if reloaded { flushAnnouncements() }
            if now >= nextHeartbeat {
                // On the publishing connection, not under the busy lock: an instance serving a
                // steady load must not look stopped to the others.
                nextHeartbeat = now + Self.heartbeatMilliseconds
                let epoch = try? publisher.withLock { (connection: inout RedisConnection?) throws(RedisError) -> String? in
                    let redis = try publishingConnection(&connection)
                    try heartbeat(redis)
                    return try store.epoch(on: redis)
                }
                // A flushed Redis, or one seeded anew, shows here within a heartbeat even when
                // no change comes along to find out.
                if let epoch, epoch != followedEpoch.withLock({ $0 }) {
                    shared.withLock { (s: inout Shared) in
                        if s.recovery == nil, s.unavailable == nil, epoch != s.epoch { epochChanged(&s, current: epoch) }
                    }
                }
            }
            if now >= nextSweep {
                nextSweep = now + 2 * Self.heartbeatMilliseconds
                sweepStoppedInstances()
            }
        }
    }

    private var lastReconnectAttemptMs: Int64 = 0

    /// After an outage: a new connection (made without the lock, so changes keep getting
    /// their quick refusal meanwhile), then this copy reloaded from the store, since whatever
    /// happened meanwhile (others' changes, a trimmed log) is not in it.
    private func reconnect() {
        let now = Monotonic.nowMilliseconds()
        guard now - lastReconnectAttemptMs >= 500 else { return }
        lastReconnectAttemptMs = now
        guard let redis = try? RedisConnection(url: store.url), (try? redis.command("PING")) != nil else { return }
        let back = shared.withLock { (s: inout Shared) -> Bool in
            do {
                s.redis = redis
                dropPending(&s)
                // Redis may have come back without its data, or with another state.
                let current = try store.epoch(on: redis)
                if current != s.epoch {
                    epochChanged(&s, current: current)
                    if s.recovery != nil { return false }
                }
                try takeLease(&s, redis)
                try reload(&s, redis)
                try heartbeat(redis)
                s.unavailable = nil
                return true
            } catch {
                s.redis = nil
                s.holding = false
                return false
            }
        }
        guard back else { return }
        reason.withLock { $0 = nil }
        flushAnnouncements()
        logger.warning("shared state available again (Redis at \(store.url.redacted))")
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
                guard let fresh = try? RedisConnection(url: store.url) else { return }
                s.redis = fresh
            }
            guard let redis = s.redis else { return }
            do {
                if let current = try store.epoch(on: redis), current != recovery.lostEpoch {
                    // Restored by another instance (or seeded by a new one): follow it.
                    s.recovery = nil
                    s.epoch = current
                    followedEpoch.withLock { $0 = current }
                    try takeLease(&s, redis)
                    try reload(&s, redis)
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
                let written: (version: UInt64, id: String, released: Bool)
                do {
                    written = try store.append([.reset(copy)], instance: instance, fence: nil, epoch: .seed(epoch), on: redis)
                } catch let error as RedisError where error.kind == .server && error.description.hasPrefix("EPOCH") {
                    return  // another candidate was first: follow it on the next pass
                }
                _ = try? redis.command("DEL", store.key("recovering"))
                logger.warning(
                    "shared state restored into Redis from this instance's copy (version \(s.version) of the lost state: \(copy.devices.count) device(s), \(copy.tokens.count) token(s), \(copy.waiting.count) waiting notification(s), \(copy.records.count) record(s)); the other instances reload it"
                )
                s.recovery = nil
                s.epoch = epoch
                followedEpoch.withLock { $0 = epoch }
                s.version = written.version
                s.lastID = written.id
                s.needsReload = false
                s.holding = false
                try heartbeat(redis)
                s.unavailable = nil
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

    /// The instance that wrote a log entry (its `i` field), 0 when it has none.
    static func instance(ofEntry entry: RedisReply) -> Int {
        guard let fields = entry.elements?.last?.elements else { return 0 }
        var i = 0
        while i + 1 < fields.count {
            if fields[i].text == "i" { return fields[i + 1].text.flatMap { Int($0) } ?? 0 }
            i += 2
        }
        return 0
    }

    // MARK: Scripts

    /// KEYS: lease want version epoch. ARGV: token ttl. → {1 or 0, version, epoch or ''}
    ///
    /// `want` names the instance next in line (for 100 ms, renewed while it keeps asking):
    /// a free lease goes to it, not to whoever asks first, so a busy instance that gives the
    /// lease up and asks again at once cannot starve the others.
    static let acquireScript = RedisScript(
        """
        local v = tonumber(redis.call('GET', KEYS[3]) or '0')
        local e = redis.call('GET', KEYS[4]) or ''
        if redis.call('GET', KEYS[1]) == ARGV[1] then
          redis.call('PEXPIRE', KEYS[1], ARGV[2])
          return {1, v, e}
        end
        local w = redis.call('GET', KEYS[2])
        if w and w ~= ARGV[1] then return {0, v, e} end
        if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
          if w then redis.call('DEL', KEYS[2]) end
          return {1, v, e}
        end
        redis.call('SET', KEYS[2], ARGV[1], 'PX', 100)
        return {0, v, e}
        """)

    /// KEYS: lease. ARGV: token.
    static let releaseScript = RedisScript(
        """
        if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
        return 0
        """)
}

extension RedisCoordinator: Service {
    public var serviceName: String { "shared state (--redis)" }
    public func start() throws { try start(waitMilliseconds: 10_000) }
    public func stop(deadlineMs: Int64) { stop() }
}
