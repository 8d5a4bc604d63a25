// RedisStore: the turns an instance takes to change the shared state — the lease (one
// instance at a time, for everything but pushes) and the shared turns pushes are made in,
// several instances at once — with the scripts that keep them in Redis.
import APNsCore
import Foundation
import MonotonicClock
import Redis

extension RedisCoordinator {
    /// The mode a change asking for `mode` may be made in at once, with no call to Redis
    /// first (the turn it needs is held for a while yet, and there is nothing to reload); nil
    /// when it would have to wait.
    static func grantedWithoutRedis(_ s: borrowing Shared, mode: ChangeMode) -> ChangeMode? {
        guard s.unavailable == nil, s.redis != nil, !s.needsReload, !s.yielding, s.outbox.count < maxQueuedRows else { return nil }
        let now = Monotonic.nowMilliseconds()
        if s.holding { return s.leaseUntilMs - now > 200 ? .exclusive : nil }
        if mode == .shared, s.sharing, s.ownership?.isMember == true, s.sharingUntilMs - now > 200 { return .shared }
        return nil
    }

    /// Whether a change asking for `mode` may be made now (see `mutate`): under the lease
    /// already, in a shared turn already (a push), or once the writer is idle (to take a turn
    /// anew, or change from a shared turn to the lease).
    static func mayChange(_ s: borrowing Shared, mode: ChangeMode) -> Bool {
        if s.unavailable != nil { return true }
        guard !s.yielding, s.outbox.count < maxQueuedRows else { return false }
        if s.needsReload { return s.writerIdle }
        if s.holding || (mode == .shared && s.sharing && s.ownership?.isMember == true) { return true }
        return s.writerIdle
    }

    /// Takes or keeps what a change asking for `mode` needs, and says what it got: a shared
    /// turn for a push of a member instance (unless it holds the lease anyway), else the lease
    /// (after giving up its shared turn: the writer is idle by then, see `mayChange`).
    func takeTurn(_ s: inout Shared, _ redis: RedisConnection, asking mode: ChangeMode) throws(RedisError) -> ChangeMode {
        if mode == .shared, !s.holding, !s.needsReload, s.ownership?.isMember == true {
            try takeSharedTurn(&s, redis)
            return .shared
        }
        if s.sharing { try releaseSharedTurn(&s, redis) }
        try takeLease(&s, redis)
        if s.needsReload { try reload(&s, redis) }
        return .exclusive
    }

    /// Ensures this instance holds the lease, catching up with the log when it takes it.
    func takeLease(_ s: inout Shared, _ redis: RedisConnection) throws(RedisError) {
        let now = Monotonic.nowMilliseconds()
        if s.holding, s.leaseUntilMs - now > 200 { return }
        // A new turn gets a new token: a batch of the last turn still on its way (fenced by the
        // old one) cannot land in this one.
        if !s.holding { s.token = "\(instance)-\(UInt64.random(in: 1...UInt64.max))" }
        let deadline = now + Self.acquireTimeoutMilliseconds
        var pause: UInt32 = 50
        while true {
            // The lease runs from when Redis set it, which is no earlier than this.
            let asked = Monotonic.nowMilliseconds()
            let reply = try Self.acquireScript.run(
                on: redis, keys: [store.key("lease"), store.key("want"), store.key("version"), store.key("epoch"), store.key("turns")],
                arguments: [.text(s.token), .text(String(Self.leaseMilliseconds))])
            guard let parts = reply.elements, parts.count == 4, let got = parts[0].int, let version = parts[1].int,
                let epoch = parts[2].text, let renewed = parts[3].int
            else {
                throw RedisError(.protocolError, "unexpected reply to the lease script")
            }
            // Another state than the one this copy follows (or none): nothing may be applied
            // or written until that is sorted out.
            if !s.epoch.isEmpty, epoch != s.epoch { throw RedisError(.server, "EPOCH \(epoch)") }
            if got == 1 {
                let wasHolding = s.holding
                if wasHolding, renewed == 0, !s.writerIdle {
                    // It lapsed (this instance was stopped or starved) and was free again: others
                    // may have changed the state, so the rows still to be written were made on a
                    // stale copy. (With nothing in flight, catching up below is enough.)
                    try? release(&s, redis)
                    failPending(&s)
                    s.needsReload = true
                    throw RedisError(.server, "LEASE the lease lapsed before this instance renewed it")
                }
                if !wasHolding {
                    s.holdingSinceMs = Monotonic.nowMilliseconds()
                    ringKeeper()
                }
                s.holding = true
                s.leaseUntilMs = asked + Int64(Self.leaseMilliseconds)
                if !wasHolding || renewed == 0 || UInt64(version) != s.version { try catchUp(&s, redis, to: UInt64(version)) }
                // A change under the lease sees everything: the others' writes left unread too.
                try readUnread(&s, redis)
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

    func release(_ s: inout Shared, _ redis: RedisConnection) throws(RedisError) {
        s.holding = false
        _ = try Self.releaseScript.run(on: redis, keys: [store.key("lease")], arguments: [.text(s.token)])
    }

    /// Ensures this instance holds a shared turn, catching up with the log when it takes one
    /// (every change made under the lease before it is then in this copy).
    func takeSharedTurn(_ s: inout Shared, _ redis: RedisConnection) throws(RedisError) {
        let now = Monotonic.nowMilliseconds()
        if s.sharing, s.sharingUntilMs - now > 200 { return }
        if !s.sharing { s.sharedToken = "\(Self.sharedTokenPrefix)\(instance)-\(UInt64.random(in: 1...UInt64.max))" }
        let deadline = now + Self.acquireTimeoutMilliseconds
        var pause: UInt32 = 50
        while true {
            let asked = Monotonic.nowMilliseconds()
            let reply = try Self.sharedTurnScript.run(
                on: redis,
                keys: [
                    store.key("lease"), store.key("want"), store.key("version"), store.key("epoch"), store.key("turns"),
                    store.key("leaseversion"),
                ],
                arguments: [.text(s.sharedToken), .text(String(Self.leaseMilliseconds))])
            guard let parts = reply.elements, parts.count == 6, let got = parts[0].int, let epoch = parts[2].text,
                let renewed = parts[3].int, let wanted = parts[4].int, let leaseVersion = parts[5].int
            else {
                throw RedisError(.protocolError, "unexpected reply to the shared turn script")
            }
            if !s.epoch.isEmpty, epoch != s.epoch { throw RedisError(.server, "EPOCH \(epoch)") }
            if got == 1 {
                let wasSharing = s.sharing
                if wasSharing, renewed == 0, !s.writerIdle {
                    // It lapsed with writes in flight: they were refused, or will be.
                    try? releaseSharedTurn(&s, redis)
                    failPending(&s)
                    s.needsReload = true
                    throw RedisError(.server, "LEASE the shared turn lapsed before this instance renewed it")
                }
                if !wasSharing {
                    s.holdingSinceMs = Monotonic.nowMilliseconds()
                    ringKeeper()
                }
                s.sharing = true
                s.sharingUntilMs = asked + Int64(Self.leaseMilliseconds)
                if wanted == 1, Monotonic.nowMilliseconds() - s.holdingSinceMs >= Self.minimumHoldMilliseconds { s.yielding = true }
                // What was changed under the lease before this turn must be in this copy; the
                // others' shared turns beside it need not be (the follower applies them).
                if !wasSharing || renewed == 0, UInt64(leaseVersion) > s.version { try catchUp(&s, redis, to: UInt64(leaseVersion)) }
                return
            }
            s.sharing = false
            if Monotonic.nowMilliseconds() > deadline {
                throw RedisError(.timeout, "another instance has held the shared state for over \(Self.acquireTimeoutMilliseconds) ms")
            }
            usleep(pause)
            pause = min(pause * 2, 400)
        }
    }

    func releaseSharedTurn(_ s: inout Shared, _ redis: RedisConnection) throws(RedisError) {
        s.sharing = false
        _ = try redis.command("ZREM", store.key("turns"), .text(s.sharedToken))
    }

    /// Shared turns' tokens start with this (lease tokens with a digit): the append script
    /// tells the two apart by it.
    static let sharedTokenPrefix = "s"

    // MARK: Scripts

    /// KEYS: lease want version epoch turns. ARGV: token ttl. → {1 or 0, version, epoch or '', 1
    /// when it was held already (renewed)}
    ///
    /// `want` names the instance next in line (for 500 ms, renewed while it keeps asking; longer
    /// than a round trip to a slow Redis, or shared turns would slip in between its tries):
    /// a free lease goes to it, not to whoever asks first, so a busy instance that gives the
    /// lease up and asks again at once cannot starve the others. The lease is taken only while
    /// no shared turn is held (their holders see `want` and give them up; lapsed ones are
    /// dropped here).
    static let acquireScript = RedisScript(
        """
        local v = tonumber(redis.call('GET', KEYS[3]) or '0')
        local e = redis.call('GET', KEYS[4]) or ''
        if redis.call('GET', KEYS[1]) == ARGV[1] then
          redis.call('PEXPIRE', KEYS[1], ARGV[2])
          return {1, v, e, 1}
        end
        local w = redis.call('GET', KEYS[2])
        if w and w ~= ARGV[1] then return {0, v, e, 0} end
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', '(' .. now)
        if redis.call('ZCARD', KEYS[5]) > 0 then
          redis.call('SET', KEYS[2], ARGV[1], 'PX', 500)
          return {0, v, e, 0}
        end
        if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
          if w then redis.call('DEL', KEYS[2]) end
          return {1, v, e, 0}
        end
        redis.call('SET', KEYS[2], ARGV[1], 'PX', 500)
        return {0, v, e, 0}
        """)

    /// KEYS: lease want version epoch turns leaseversion. ARGV: token ttl. → {1 or 0, version,
    /// epoch or '', 1 when it was held already (renewed), 1 when an instance waits for the
    /// lease, the version of the last write made under the lease}
    ///
    /// Shared turns are held side by side; none is given while the lease is held or wanted
    /// (so a change that needs the lease waits only for the turns held already to end).
    static let sharedTurnScript = RedisScript(
        """
        local v = tonumber(redis.call('GET', KEYS[3]) or '0')
        local e = redis.call('GET', KEYS[4]) or ''
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local wanted = redis.call('EXISTS', KEYS[2])
        local lv = tonumber(redis.call('GET', KEYS[6]) or '0')
        local expiry = tonumber(redis.call('ZSCORE', KEYS[5], ARGV[1]) or '0')
        if expiry >= now then
          redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), ARGV[1])
          return {1, v, e, 1, wanted, lv}
        end
        if wanted == 1 or redis.call('EXISTS', KEYS[1]) == 1 then return {0, v, e, 0, wanted, lv} end
        redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), ARGV[1])
        return {1, v, e, 0, 0, lv}
        """)

    /// KEYS: lease. ARGV: token.
    static let releaseScript = RedisScript(
        """
        if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
        return 0
        """)
}
