// RedisStateStore: the StateStore that keeps the emulator's state in Redis (`--redis`).
// Imports APNsCore (the rows) and Redis (the hiredis wrapper).
public import APNsCore
public import Redis

/// The emulator's state in Redis (`--redis`): the second backend of `StateStore`, and the
/// shared log several instances replicate from.
///
/// Keys (all under `prefix`, default `apns-emulator:`):
/// - `state`      hash, one field per row (`ChangeKey.storageField`) holding the encoded row:
///                devices, tokens, keys, apps, fault rules, broadcast channels (`c:<id>`),
///                each device's Live Activities (`l:<device id>`), journal records;
/// - `records`    sorted set of journal sequence numbers (eviction by range);
/// - `w:<seq>`    one key per notification waiting for its device, with a TTL at its
///                expiry (plus a grace period) so a store nobody runs against still forgets
///                expired notifications; `waiting` is the set of their sequence numbers;
/// - `version`    how many changes were ever written; `log` a stream with one entry per
///                write (`v` version, `i` instance, `r` the rows), trimmed to about
///                `logLength` entries — an instance that falls further behind reloads;
/// - `maxseq`     the highest journal sequence number ever used (numbers never repeat);
/// - `lease`, `want`  whose turn it is to change the state (see `RedisCoordinator`);
/// - `epoch`      a random id written with the state when it is seeded: instances remember the
///                one they follow, so a Redis that lost its data (restarted without an
///                append-only file, `FLUSHALL`) or was seeded anew is noticed, never followed
///                as if it were the same state; `recovering` the instances restoring a lost
///                state (see `RedisCoordinator`).
///
/// Not for Redis Cluster: the scripts touch keys they compute (one `w:<seq>` per notification).
public final class RedisStateStore: StateStore, @unchecked Sendable {
    public let url: RedisURL
    public let prefix: String
    /// Entries the log keeps (approximately).
    public let logLength: Int
    /// How long a waiting notification's key outlives its expiry, so the emulator's own expiry
    /// (which records the outcome) normally comes first.
    public static let waitingGraceMs: Int64 = 60_000
    /// For `StateStore` use; the coordinator passes its own connection.
    private var connection: RedisConnection?

    /// The keys' prefix unless one is chosen (`--redis-prefix`).
    public static let defaultPrefix = "apns-emulator:"

    public init(url: RedisURL, prefix: String = defaultPrefix, logLength: Int = 100_000) {
        self.url = url
        self.prefix = prefix
        self.logLength = logLength
    }

    public var location: String { url.redacted }

    func key(_ name: String) -> RedisArgument { .text(prefix + name) }

    // MARK: StateStore

    public func load() throws(StateStoreError) -> PersistedState {
        do {
            return try load(on: try ownConnection()).state
        } catch {
            connection = nil
            throw StateStoreError("Redis \(url.redacted): \(error)")
        }
    }

    public func write(_ changes: [StateChange]) throws(StateStoreError) {
        do {
            _ = try append(changes, instance: 0, fence: nil, on: try ownConnection())
        } catch {
            connection = nil
            throw StateStoreError("Redis \(url.redacted): \(error)")
        }
    }

    private func ownConnection() throws(RedisError) -> RedisConnection {
        if let connection, !connection.isBroken { return connection }
        let fresh = try RedisConnection(url: url)
        connection = fresh
        return fresh
    }

    // MARK: Reading

    /// Everything the store holds, with the version it was read at. Consistent only while
    /// nobody writes (the coordinator holds the lease while it loads).
    func load(
        on redis: RedisConnection
    ) throws(RedisError)
        -> (state: PersistedState, version: UInt64, lastLogID: String, epoch: String?)
    {
        var state = PersistedState()
        let epoch = try redis.command("GET", key("epoch")).text
        let version = try redis.command("GET", key("version")).text.flatMap { UInt64($0) }
        state.initialized = version != nil
        var cursor = "0"
        var records: [NotificationRecord] = []
        repeat {
            let reply = try redis.command("HSCAN", key("state"), .text(cursor), "COUNT", "1000")
            guard let parts = reply.elements, parts.count == 2, let next = parts[0].text, let fields = parts[1].elements else {
                throw RedisError(.protocolError, "unexpected HSCAN reply")
            }
            cursor = next
            var i = 1
            while i < fields.count {
                let change = try decode(fields[i].bytes)
                switch change {
                case .deviceSaved(let device): state.devices.append(device)
                case .tokenSaved(let entry): state.tokens.append(entry)
                case .keySaved(let key): state.keys.append(key)
                case .appSaved(let bundle, let team): state.apps.append((bundle, team))
                case .faultsSaved(let faults): state.faults = faults
                case .recordSaved(let record): records.append(record)
                case .budgetSaved(let device, let bundle, let budget): state.budgets.append((device, bundle, budget))
                case .channelSaved(let channel): state.channels.append(channel)
                case .liveActivitiesSaved(let row): state.liveActivities.append(row)
                default: break
                }
                i += 2
            }
        } while cursor != "0"
        state.devices.sort { $0.id < $1.id }
        state.tokens.sort { $0.token < $1.token }
        state.keys.sort { $0.keyID < $1.keyID }
        state.apps.sort { $0.bundleID < $1.bundleID }
        state.records = records.sorted { $0.sequence < $1.sequence }
        state.channels.sort { $0.id < $1.id }
        state.liveActivities.sort { $0.deviceID < $1.deviceID }

        let members = try redis.command("SMEMBERS", key("waiting")).elements ?? []
        let sequences = members.compactMap { $0.text.flatMap { UInt64($0) } }.sorted()
        var gone: [RedisArgument] = []
        for chunk in stride(from: 0, to: sequences.count, by: 500) {
            let slice = sequences[chunk..<min(chunk + 500, sequences.count)]
            let values = try redis.command([.text("MGET")] + slice.map { key("w:\($0)") }).elements ?? []
            for (sequence, value) in zip(slice, values) {
                guard let bytes = value.bytes else {
                    gone.append(.text(String(sequence)))  // expired by its TTL
                    continue
                }
                if case .notificationWaiting(let waiting) = try decode(bytes) { state.waiting.append(waiting) }
            }
        }
        if !gone.isEmpty { _ = try redis.command([.text("SREM"), key("waiting")] + gone) }

        let maxSequence = try redis.command("GET", key("maxseq")).text.flatMap { UInt64($0) } ?? 0
        state.nextRecordSequence = max(
            maxSequence + 1, (state.records.last?.sequence ?? 0) + 1,
            (state.waiting.last?.notification.sequence ?? 0) + 1)
        let last = try redis.command("XREVRANGE", key("log"), "+", "-", "COUNT", "1").elements?.first?.elements?.first?.text
        return (state, version ?? 0, last ?? "0-0", epoch)
    }

    /// The epoch of the state in Redis (nil: none, the state is gone or was never seeded).
    func epoch(on redis: RedisConnection) throws(RedisError) -> String? {
        try redis.command("GET", key("epoch")).text
    }

    /// A new random epoch.
    static func newEpoch() -> String {
        (0..<2).map { _ in String(UInt64.random(in: 0...UInt64.max), radix: 16) }.joined(separator: "-")
    }

    private func decode(_ bytes: [UInt8]?) throws(RedisError) -> StateChange {
        guard let bytes else { throw RedisError(.protocolError, "a state row is not a string") }
        do {
            return try StateCodec.decodeChange(bytes)
        } catch {
            throw RedisError(.protocolError, "a state row cannot be read: \(error)")
        }
    }

    // MARK: Writing

    /// Which state a write is meant for.
    enum EpochCondition {
        /// Any (`StateStore.write`, tests).
        case any
        /// The state this instance follows; another one (or none) fails with "EPOCH".
        case expect(String)
        /// A new state, seeded with this epoch, only where there is none (else "EPOCH").
        case seed(String)
    }

    /// Writes `changes` as one atomic step: the rows into the state keys, one entry into the
    /// log. With `fence`, only while the lease holds that token (else `.server` "LEASE"); only
    /// into the state `epoch` names (else `.server` "EPOCH"). Returns the new version, the log
    /// entry's id, and whether another instance asks for the lease.
    func append(
        _ changes: [StateChange], instance: Int, fence: String?, epoch: EpochCondition = .any, on redis: RedisConnection
    ) throws(RedisError) -> (version: UInt64, id: String, wanted: Bool) {
        let (expected, seeded): (String, String)
        switch epoch {
        case .any: (expected, seeded) = ("", "")
        case .expect(let current): (expected, seeded) = (current, "")
        case .seed(let new): (expected, seeded) = ("", new)
        }
        var arguments: [RedisArgument] = [
            .text(fence ?? ""), .text(String(RedisCoordinator.leaseMilliseconds)), .text(String(instance)),
            .text(String(logLength)), .bytes(StateCodec.encode(changes: changes)), .text(prefix + "w:"),
        ]
        var maxSequence: UInt64 = 0
        var operations: [RedisArgument] = []
        for change in changes { Self.operations(for: change, into: &operations, maxSequence: &maxSequence) }
        arguments.append(.text(String(maxSequence)))
        arguments.append("")
        arguments.append(.text(expected))
        arguments.append(.text(seeded))
        arguments += operations
        let reply = try Self.appendScript.run(
            on: redis,
            keys: [
                key("lease"), key("want"), key("version"), key("log"), key("state"), key("records"), key("waiting"), key("maxseq"),
                key("epoch"),
            ],
            arguments: arguments)
        guard let parts = reply.elements, parts.count == 3, let version = parts[0].int, let id = parts[1].text else {
            throw RedisError(.protocolError, "unexpected reply to the append script")
        }
        return (UInt64(version), id, parts[2].int == 1)
    }

    /// The script's operations for one row (see `appendScript`).
    static func operations(for change: StateChange, into out: inout [RedisArgument], maxSequence: inout UInt64) {
        switch change {
        case .deviceSaved, .tokenSaved, .keySaved, .appSaved, .faultsSaved, .budgetSaved, .channelSaved, .liveActivitiesSaved:
            out += ["S", .text(change.key!.storageField), .bytes(StateCodec.encode(change))]
        case .deviceRemoved, .keyRemoved, .appRemoved, .channelRemoved, .liveActivitiesRemoved:
            out += ["D", .text(change.key!.storageField)]
        case .recordSaved(let record):
            maxSequence = max(maxSequence, record.sequence)
            out += ["R", .text(String(record.sequence)), .bytes(StateCodec.encode(change))]
        case .recordRemoved(let sequence):
            out += ["X", .text(String(sequence))]
        case .recordsEvicted(let before):
            out += ["E", .text(String(before))]
        case .notificationWaiting(let waiting):
            let n = waiting.notification
            maxSequence = max(maxSequence, n.sequence)
            // In flight: the device has it; its fate is decided by the ack, not by time.
            let expiry: Int64
            if case .inFlight = waiting.slot { expiry = 0 } else { expiry = n.storeUntilMs.map { $0 + waitingGraceMs } ?? 0 }
            out += ["W", .text(String(n.sequence)), .bytes(StateCodec.encode(change)), .text(String(expiry))]
        case .notificationDone(let sequence):
            out += ["V", .text(String(sequence))]
        case .reset(let state):
            out.append("Z")
            maxSequence = max(maxSequence, state.nextRecordSequence > 0 ? state.nextRecordSequence - 1 : 0)
            for device in state.devices { operations(for: .deviceSaved(device), into: &out, maxSequence: &maxSequence) }
            for token in state.tokens { operations(for: .tokenSaved(token), into: &out, maxSequence: &maxSequence) }
            for key in state.keys { operations(for: .keySaved(key), into: &out, maxSequence: &maxSequence) }
            for app in state.apps {
                operations(for: .appSaved(bundleID: app.bundleID, teamID: app.teamID), into: &out, maxSequence: &maxSequence)
            }
            if let faults = state.faults { operations(for: .faultsSaved(faults), into: &out, maxSequence: &maxSequence) }
            for waiting in state.waiting {
                operations(for: .notificationWaiting(waiting), into: &out, maxSequence: &maxSequence)
            }
            for record in state.records { operations(for: .recordSaved(record), into: &out, maxSequence: &maxSequence) }
            for entry in state.budgets {
                operations(
                    for: .budgetSaved(deviceID: entry.deviceID, bundleID: entry.bundleID, budget: entry.budget),
                    into: &out, maxSequence: &maxSequence)
            }
            for channel in state.channels { operations(for: .channelSaved(channel), into: &out, maxSequence: &maxSequence) }
            for row in state.liveActivities { operations(for: .liveActivitiesSaved(row), into: &out, maxSequence: &maxSequence) }
        }
    }

    /// KEYS: lease want version log state records waiting maxseq epoch.
    /// ARGV: fence ttl instance loglength rows waitingprefix maxsequence (unused) expectedepoch
    /// seedepoch, then operations:
    /// S field value | D field | R seq value | X seq | E before | W seq value expireAtMs | V seq | Z.
    static let appendScript = RedisScript(
        """
        if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then
          return redis.error_reply('LEASE this instance no longer holds the lease')
        end
        local e = redis.call('GET', KEYS[9])
        if ARGV[9] ~= '' and e ~= ARGV[9] then
          return redis.error_reply('EPOCH ' .. (e or ''))
        end
        if ARGV[10] ~= '' then
          if e then return redis.error_reply('EPOCH ' .. e) end
          redis.call('SET', KEYS[9], ARGV[10])
        end
        local v = redis.call('INCR', KEYS[3])
        local id = redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[4], '*', 'v', v, 'i', ARGV[3], 'r', ARGV[5])
        local wp = ARGV[6]
        local i = 11
        while i <= #ARGV do
          local op = ARGV[i]
          if op == 'S' then
            redis.call('HSET', KEYS[5], ARGV[i+1], ARGV[i+2]); i = i + 3
          elseif op == 'D' then
            redis.call('HDEL', KEYS[5], ARGV[i+1]); i = i + 2
          elseif op == 'R' then
            redis.call('HSET', KEYS[5], 'r:' .. ARGV[i+1], ARGV[i+2])
            redis.call('ZADD', KEYS[6], ARGV[i+1], ARGV[i+1]); i = i + 3
          elseif op == 'X' then
            redis.call('HDEL', KEYS[5], 'r:' .. ARGV[i+1])
            redis.call('ZREM', KEYS[6], ARGV[i+1]); i = i + 2
          elseif op == 'E' then
            local old = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', '(' .. ARGV[i+1])
            for _, s in ipairs(old) do redis.call('HDEL', KEYS[5], 'r:' .. s) end
            redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', '(' .. ARGV[i+1]); i = i + 2
          elseif op == 'W' then
            if ARGV[i+3] ~= '0' then
              redis.call('SET', wp .. ARGV[i+1], ARGV[i+2], 'PXAT', ARGV[i+3])
            else
              redis.call('SET', wp .. ARGV[i+1], ARGV[i+2])
            end
            redis.call('SADD', KEYS[7], ARGV[i+1]); i = i + 4
          elseif op == 'V' then
            redis.call('DEL', wp .. ARGV[i+1])
            redis.call('SREM', KEYS[7], ARGV[i+1]); i = i + 2
          elseif op == 'Z' then
            redis.call('DEL', KEYS[5], KEYS[6])
            for _, s in ipairs(redis.call('SMEMBERS', KEYS[7])) do redis.call('DEL', wp .. s) end
            redis.call('DEL', KEYS[7]); i = i + 1
          else
            return redis.error_reply('ERR unknown operation ' .. op)
          end
        end
        if tonumber(ARGV[7]) > tonumber(redis.call('GET', KEYS[8]) or '0') then redis.call('SET', KEYS[8], ARGV[7]) end
        local wanted = 0
        if ARGV[1] ~= '' then
          redis.call('PEXPIRE', KEYS[1], ARGV[2])
          wanted = redis.call('EXISTS', KEYS[2])
        end
        return {v, id, wanted}
        """)
}
