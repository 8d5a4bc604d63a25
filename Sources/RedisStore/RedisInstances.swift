public import APNsCore
import Foundation
import Locking
import MonotonicClock
import Redis

// The instances as a group: heartbeats and the devices of stopped instances, and frames for
// device sockets another instance holds (relayed over pub/sub).
extension RedisCoordinator {
    /// Says this instance runs, and which shared state it follows (or is seeding): a state in
    /// Redis that no running instance names is not the live one (`liveFollowers`), whatever
    /// heartbeats of other states' instances landed there.
    func heartbeat(_ redis: RedisConnection) throws(RedisError) {
        _ = try redis.command(heartbeatCommand())
    }

    func heartbeatCommand() -> [RedisArgument] {
        let epoch = seedingEpoch.withLock { $0 } ?? followedEpoch.withLock { $0 }
        return ["SET", store.key("alive:\(instance)"), .text(epoch), "PX", .text(String(Self.instanceTTLMilliseconds))]
    }

    /// Names `epoch` in this instance's heartbeat before the state it seeds exists, and until
    /// the caller clears `seedingEpoch`: an instance that finds the new state a moment later
    /// finds it followed, not a state nobody follows (`refuseForeignState`).
    func announceSeeding(_ epoch: String, _ redis: RedisConnection) throws(RedisError) {
        seedingEpoch.withLock { $0 = epoch }
        try heartbeat(redis)
    }

    /// Beats the heartbeat every second on a thread of its own, whatever the other threads
    /// wait for (a reload of a large state after an outage took 3–8 s, and the others took
    /// the instance for stopped meanwhile), and notes whether Redis took each beat in time
    /// (`SteadyContact`). A beat that fails is tried again after 200 ms.
    func beatLoop() {
        while isRunning {
            let sent = Monotonic.nowMilliseconds()
            let beaten =
                (try? withConnection(beatConnection) { (redis: RedisConnection) throws(RedisError) -> Bool in
                    // `stop` deletes the key under this lock: no beat may land after it.
                    if isRunning { try heartbeat(redis) }
                    return true
                }) ?? false
            let answered = Monotonic.nowMilliseconds()
            contact.withLock { $0.beat(succeeded: beaten, answeredMs: answered) }
            let rest = beaten ? Self.heartbeatMilliseconds - (answered - sent) : 200
            var slept: Int64 = 0
            while slept < rest, isRunning {
                usleep(UInt32(min(100, rest - slept) * 1_000))
                slept += 100
            }
        }
    }

    /// Whether this instance may take another for stopped because its heartbeat lapsed: only
    /// when its own heartbeats have reached Redis steadily for a whole heartbeat lifetime.
    /// After an outage or a stall of Redis every heartbeat lapsed for that reason alone, and
    /// the first instance back marked the others' devices disconnected: pushes for devices
    /// whose sockets never dropped were stored and coalesced.
    func mayJudgeHeartbeats() -> Bool {
        contact.withLock { $0.steady(nowMs: Monotonic.nowMilliseconds(), for: Int64(Self.instanceTTLMilliseconds)) }
    }

    /// The instances among `instances` whose heartbeat lapsed; none when this instance may not
    /// judge now (`mayJudgeHeartbeats`), or Redis did not say at once (an answer that took
    /// long may come from a Redis that stalled meanwhile, when every heartbeat lapsed).
    func stoppedInstances(among instances: [Int]) -> Set<Int> {
        guard !instances.isEmpty, mayJudgeHeartbeats() else { return [] }
        let asked = Monotonic.nowMilliseconds()
        guard let alive = try? heartbeatsAlive(instances), Monotonic.nowMilliseconds() - asked < Self.heartbeatMilliseconds,
            mayJudgeHeartbeats()
        else { return [] }
        return Set(zip(instances, alive).filter { !$0.1 }.map(\.0))
    }

    /// The instances whose heartbeat names `epoch`: those following that state now. Looked up
    /// by number, up to the state's instance counter (every follower's number is at most it:
    /// `start`, the candidacy and `adoptForeignState` raise it), a thousand at a time, and
    /// only until one is found.
    func liveFollowers(of epoch: String, on redis: RedisConnection) throws(RedisError) -> Int? {
        let count = Int(try redis.command("GET", store.key("instances")).int ?? 0)
        var first = 1
        while first <= count {
            let numbers = first...min(count, first + 999)
            let values = try redis.command(["MGET"] + numbers.map { store.key("alive:\($0)") }).elements ?? []
            if let index = values.firstIndex(where: { $0.text == epoch }) { return numbers.lowerBound + index }
            first = numbers.upperBound + 1
        }
        return nil
    }

    /// A number no running instance holds: the counter's next one, passed over while a
    /// heartbeat of that number is alive (one round trip). The counter is part of the state in
    /// Redis: one put in place from elsewhere (or restored from a snapshot) may be behind the
    /// numbers the running instances hold, and two instances with one number take each
    /// other's devices and journal stripe.
    func claimNumber(_ redis: RedisConnection) throws(RedisError) -> Int {
        let reply = try Self.claimNumberScript.run(
            on: redis, keys: [store.key("instances")], arguments: [.text(store.prefix + "alive:"), .text(String(Self.instanceTTLMilliseconds))])
        guard let parts = reply.elements, parts.count == 2, let number = parts[0].int, let passed = parts[1].int else {
            throw RedisError(.protocolError, "unexpected reply to the instance number script")
        }
        if passed > 0 {
            logger.warning(
                "shared state: the instance counter in Redis gave \(passed) number(s) running instances hold (it went back with Redis's data); this one is \(number)"
            )
        }
        return Int(number)
    }

    /// KEYS: instances. ARGV: the heartbeat keys' prefix, ttl. → {number, how many were passed
    /// over}. The key claimed holds no epoch until the first beat.
    static let claimNumberScript = RedisScript(
        """
        for passed = 0, 999 do
          local n = redis.call('INCR', KEYS[1])
          if redis.call('SET', ARGV[1] .. n, '', 'NX', 'PX', ARGV[2]) then return {n, passed} end
        end
        return redis.error_reply('no free instance number among the next 1000 the counter gave')
        """)

    /// Devices whose socket was on an instance that stopped (killed, or cut off from Redis for
    /// longer than its heartbeat lasts) are disconnected, so their in-flight notifications go
    /// back to the store for when they reconnect to another instance.
    func sweepStoppedInstances() {
        guard unavailableReason == nil else { return }
        let others = state.readWorld { world -> [(device: String, connection: UInt64)] in
            world.registry.devices.values.compactMap { device in
                guard let id = device.connectionID, DeviceOwnership.instance(ofConnection: id) != instance else { return nil }
                return (device.id, id)
            }
        }
        guard !others.isEmpty else { return }
        let instances = Array(Set(others.map { DeviceOwnership.instance(ofConnection: $0.connection) })).sorted()
        let stopped = stoppedInstances(among: instances)
        guard !stopped.isEmpty else { return }
        let now = clock.nowMilliseconds()
        let gone = others.filter { stopped.contains(DeviceOwnership.instance(ofConnection: $0.connection)) }
        _ = state.withSharedWorld { world in
            for (device, connection) in gone { world.disconnectDevice(device, connectionID: connection, nowMs: now) }
        }
        logger.info("instance(s) \(stopped.sorted().map(String.init).joined(separator: ", ")) stopped: \(gone.count) device(s) marked disconnected")
    }

    // MARK: Frames for devices on other instances

    /// The first connection id this instance hands out.
    public var firstConnectionID: UInt64 { UInt64(instance) << DeviceOwnership.instanceShift | 1 }

    /// Sends frames for sockets held by other instances to those instances (pub/sub). A frame
    /// lost on the way is like a dropped connection: the notification stays in flight until
    /// the device reconnects, then it is delivered again.
    public func relay(_ frames: [DeviceFrame]) {
        var byInstance: [Int: [DeviceFrame]] = [:]
        for frame in frames {
            let owner = DeviceOwnership.instance(ofConnection: frame.connectionID)
            if owner != instance, owner != 0 { byInstance[owner, default: []].append(frame) }
        }
        guard !byInstance.isEmpty else { return }
        do {
            try withPublisher { (redis: RedisConnection) throws(RedisError) in
                _ = try redis.pipeline(
                    byInstance.map { owner, frames in
                        ["PUBLISH", store.key("frames:\(owner)"), .bytes(StateCodec.encode(frames: frames))]
                    })
            }
        } catch {
            logger.warning("cannot relay \(frames.count) frame(s) to another instance: \(error)")
        }
    }

    func publishingConnection(_ connection: inout RedisConnection?) throws(RedisError) -> RedisConnection {
        if let existing = connection, !existing.isBroken { return existing }
        let fresh = try store.connect()
        connection = fresh
        return fresh
    }

    /// Runs `body` on the publishing connection (liveness checks, the keeper's look at the
    /// epoch, relayed frames).
    func withPublisher<T>(_ body: (RedisConnection) throws(RedisError) -> T) throws(RedisError) -> T {
        try withConnection(publisher, body)
    }

    /// Runs `body` on `slot`'s connection, made anew when it is broken. An answer that the
    /// keys' slot moved (a Redis Cluster resharded) drops the connection, and the next one
    /// asks the cluster where the keys are now: kept, it sent every heartbeat to the old owner
    /// for good, and the other instances took this one for stopped.
    func withConnection<T>(
        _ slot: Locked<RedisConnection?>, _ body: (RedisConnection) throws(RedisError) -> T
    ) throws(RedisError) -> T {
        try slot.withLock { (connection: inout RedisConnection?) throws(RedisError) -> T in
            let redis = try publishingConnection(&connection)
            do throws(RedisError) {
                return try body(redis)
            } catch {
                if error.movedSlot {
                    store.slotMoved()
                    connection?.close()
                    connection = nil
                }
                throw error
            }
        }
    }

    /// Whether each instance's heartbeat key exists. An error reply (the slot moved, a node
    /// loading) is an error, not "stopped": it once marked live instances' devices disconnected.
    func heartbeatsAlive(_ instances: [Int]) throws(RedisError) -> [Bool] {
        try withPublisher { (redis: RedisConnection) throws(RedisError) -> [Bool] in
            try redis.pipeline(instances.map { ["EXISTS", store.key("alive:\($0)")] }).map { (reply: RedisReply) throws(RedisError) -> Bool in
                if case .error(let text) = reply { throw RedisError(.server, text) }
                return reply.int == 1
            }
        }
    }

    func receiveFrames() {
        var subscriber: RedisSubscriber?
        while isRunning {
            do {
                if subscriber == nil {
                    subscriber = try RedisSubscriber(url: store.url, channels: [prefixed("frames:\(instance)")])
                }
                guard let (_, message) = try subscriber!.next(timeoutMs: 1_000) else { continue }
                let frames = try StateCodec.decodeFrames(message)
                deliverFrames.value?(frames)
            } catch {
                subscriber?.close()
                subscriber = nil
                usleep(200_000)
            }
        }
        subscriber?.close()
    }

    private func prefixed(_ name: String) -> String { store.prefix + name }
}

/// Whether an instance's heartbeats have been reaching Redis steadily: each answered within
/// `maximumGapMilliseconds` of the one before, the first of the run long enough ago. Only then
/// did Redis run, reachable, for that long, so the others, which beat every second, had their
/// chance to renew their heartbeats too: one that lapsed now is theirs, not Redis's.
struct SteadyContact: Sendable {
    /// The first beat of the current run (nil: the last one failed, or none was made yet).
    private(set) var sinceMs: Int64?
    private(set) var lastAnsweredMs: Int64 = 0
    /// A beat is due every second; one answered later than this after the last (Redis or
    /// this instance stalled) starts the run anew. Another instance's heartbeat lapses after
    /// three seconds without a beat, so a stall of two (a beat due meanwhile plus its wait)
    /// is enough for that.
    static let maximumGapMilliseconds: Int64 = 1_500

    mutating func beat(succeeded: Bool, answeredMs: Int64) {
        guard succeeded else {
            sinceMs = nil
            return
        }
        if sinceMs == nil || answeredMs - lastAnsweredMs > Self.maximumGapMilliseconds { sinceMs = answeredMs }
        lastAnsweredMs = answeredMs
    }

    /// Steady for `duration` until now, and no beat overdue.
    func steady(nowMs: Int64, for duration: Int64) -> Bool {
        guard let sinceMs else { return false }
        return nowMs - sinceMs >= duration && nowMs - lastAnsweredMs <= Self.maximumGapMilliseconds
    }
}
