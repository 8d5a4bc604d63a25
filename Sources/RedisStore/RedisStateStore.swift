// RedisStateStore: the StateStore that keeps the emulator's state in Redis (`--redis`).
// Imports APNsCore (the rows), Redis (the hiredis wrapper) and StatePersistence (how rows
// coalesce).
public import APNsCore
public import Redis
import Locking
import StatePersistence
import Synchronization

/// The emulator's state in Redis (`--redis`): the second backend of `StateStore`, and the
/// shared log several instances replicate from.
///
/// Keys (all under `prefix`, default `apns-emulator:`):
/// - `state`      hash, one field per row (`ChangeKey.storageField`) holding the encoded row:
///                devices, tokens, keys, apps, fault rules, broadcast channels (`c:<id>`),
///                each device's Live Activities (`l:<device id>`); journal records written
///                by a reset, one field each (`r:<sequence>`);
/// - `rb:<version>`  the rows of a write that saved journal records (the log entry points
///                here): a record's newest row wins. Sent ahead of the write's script as
///                `pending:<instance>:…` (with a TTL, in case the script never runs) and renamed
///                by it, so the rows never become a script argument: Redis hashes every byte of
///                those. (Earlier versions kept these rows in `state` fields of the same name;
///                such fields are still read, and evicted.)
/// - `records`, `batches`  sorted sets of the `r:` sequences and of the `rb:` names (scored
///                by their highest record sequence), for eviction by range; `evicted` the
///                bound below which records are gone;
/// - `w:<seq>`    one key per notification waiting for its device, with a TTL at its
///                expiry (plus a grace period) so a store nobody runs against still forgets
///                expired notifications; `waiting` is the set of their sequence numbers;
/// - `version`    how many changes were ever written; `log` a stream with one entry per
///                write (`v` version, `i` instance, `r` the rows, or `b` when they are in
///                `rb:<version>` already: `k` the key, `1` a `state` field of earlier versions;
///                `j` when the rows only add to the journal: what a follower needs to leave
///                them unread, `Writes.journalOnlyField`), trimmed to about
///                `logLength` entries — an instance that falls further behind reloads;
/// - `maxseq`     the highest journal sequence number ever used (numbers never repeat);
/// - `lease`, `want`  whose turn it is to change the state (see `RedisCoordinator`);
/// - `epoch`      a random id written with the state when it is seeded: instances remember the
///                one they follow, so a Redis that lost its data (restarted without an
///                append-only file, `FLUSHALL`) or was seeded anew is noticed, never followed
///                as if it were the same state; `recovering` the instances restoring a lost
///                state (see `RedisCoordinator`);
/// - `turns`      the shared turns held now (sorted set: token → expiry, ms since 1970);
///                `members` the instances that own devices ("1,2,3", also in the log entry
///                that changed it, field `m`; see `DeviceOwnership`).
///
/// On a Redis Cluster (`cluster_enabled:1`) every key carries the prefix as its hash tag
/// (`{apns-emulator:}state`), so all of them, the ones the scripts compute included, are in one
/// slot: connections go to the node that owns it (`CLUSTER SLOTS`), found again after a move.
public final class RedisStateStore: StateStore, @unchecked Sendable {
    /// Where to start: the one Redis, or any node of a cluster.
    public let url: RedisURL
    /// As configured (`--redis-prefix`).
    public let configuredPrefix: String
    /// The keys' prefix: the configured one, as a hash tag on a cluster. Set before use.
    public var prefix: String { layout.withLock { $0.prefix } }
    private let layout: Locked<Layout>
    private struct Layout {
        var prefix: String
        /// Found out on the first connection.
        var prepared = false
        var cluster = false
        /// The node that owns the keys' slot (the one Redis: `url`).
        var node: RedisURL
        /// Every node of the cluster its last `CLUSTER SLOTS` named (masters and replicas):
        /// where to ask when the node `--redis` names is gone (a failover that it lost).
        var knownNodes: [RedisURL] = []
    }
    /// Entries the log keeps (approximately).
    public let logLength: Int
    /// How long a waiting notification's key outlives its expiry, so the emulator's own expiry
    /// (which records the outcome) normally comes first.
    public static let waitingGraceMs: Int64 = 60_000
    /// For `StateStore` use; the coordinator passes its own connection.
    private var connection: RedisConnection?
    /// Names each write's `pending:` key apart from every other process's and write's.
    private let pendingNonce = String(UInt64.random(in: 0...UInt64.max), radix: 36)
    private let pendingWrites = Atomic<UInt64>(0)

    /// The keys' prefix unless one is chosen (`--redis-prefix`).
    public static let defaultPrefix = "apns-emulator:"

    public init(url: RedisURL, prefix: String = defaultPrefix, logLength: Int = 100_000) {
        self.url = url
        configuredPrefix = prefix
        layout = Locked(Layout(prefix: prefix, node: url))
        self.logLength = logLength
    }

    public var location: String { url.redacted }

    func key(_ name: String) -> RedisArgument { .text(prefix + name) }

    /// Whether the keys are on a Redis Cluster (known after the first connection).
    public var isCluster: Bool { layout.withLock { $0.cluster } }

    /// Where the keys are, for the log: the Redis, or the cluster node that owns their slot.
    public var placeDescription: String {
        layout.withLock {
            $0.cluster ? "Redis Cluster node \($0.node.host):\($0.node.port) (their slot's owner), prefix \($0.prefix)" : "Redis at \(url.redacted)"
        }
    }

    // MARK: Connections

    /// A connection to where the keys are: the one Redis, or the cluster node that owns their
    /// slot. The first call finds out which (and on a cluster sets the hash-tagged prefix).
    public func connect(commandTimeoutMs: Int = 2000) throws(RedisError) -> RedisConnection {
        let (prepared, node) = layout.withLock { ($0.prepared, $0.node) }
        if !prepared { return try locate(commandTimeoutMs: commandTimeoutMs) }
        do {
            return try RedisConnection(url: node, commandTimeoutMs: commandTimeoutMs)
        } catch {
            // The owner may have gone (a failover): ask the cluster again, from the start node.
            guard isCluster else { throw error }
            return try locate(commandTimeoutMs: commandTimeoutMs)
        }
    }

    /// A command was answered MOVED: the slot has another owner; the next `connect` asks.
    public func slotMoved() {
        layout.withLock { if $0.cluster { $0.prepared = false } }
    }

    /// Connects to `url`, finds out whether it is a cluster node and, if so, which node owns
    /// the keys' slot, and returns a connection there.
    private func locate(commandTimeoutMs: Int) throws(RedisError) -> RedisConnection {
        let start: RedisConnection
        do {
            start = try RedisConnection(url: url, commandTimeoutMs: commandTimeoutMs)
        } catch {
            // The node named is gone (killed, its replica promoted): another node of the
            // cluster answers as well. (It stayed 503 until that very node came back.)
            let others = layout.withLock { $0.knownNodes }.filter { $0.host != url.host || $0.port != url.port }
            guard let other = others.lazy.compactMap({ try? RedisConnection(url: $0, commandTimeoutMs: commandTimeoutMs) }).first else {
                throw error
            }
            start = other
        }
        let info = try start.command("INFO", "cluster").text ?? ""
        guard info.contains("cluster_enabled:1") else {
            layout.withLock {
                $0.prepared = true
                $0.cluster = false
                $0.node = url
                $0.prefix = configuredPrefix
            }
            return start
        }
        let tagged = Self.hashTagged(configuredPrefix)
        guard let slot = try start.command("CLUSTER", "KEYSLOT", .text(tagged + "state")).int else {
            throw RedisError(.protocolError, "CLUSTER KEYSLOT did not answer a number")
        }
        let slots = try start.command("CLUSTER", "SLOTS")
        guard let owner = Self.owner(ofSlot: Int(slot), in: slots) else {
            throw RedisError(.server, "no node of the cluster at \(url.redacted) serves slot \(slot) (is every slot assigned?)")
        }
        func at(_ address: (host: String, port: Int)) -> RedisURL {
            var node = url
            node.host = address.host
            node.port = address.port
            node.database = 0
            return node
        }
        let node = at(owner)
        let known = Self.nodes(in: slots).map(at)
        layout.withLock {
            $0.prepared = true
            $0.cluster = true
            $0.node = node
            $0.prefix = tagged
            if !known.isEmpty { $0.knownNodes = known }
        }
        if node.host == start.url.host, node.port == start.url.port { return start }
        return try RedisConnection(url: node, commandTimeoutMs: commandTimeoutMs)
    }

    /// The prefix as a hash tag (`{prefix}`), unless it has one already.
    static func hashTagged(_ prefix: String) -> String {
        if let open = prefix.firstIndex(of: "{"), let close = prefix[open...].firstIndex(of: "}"),
            prefix.index(after: open) < close
        {
            return prefix
        }
        return "{" + prefix + "}"
    }

    /// The master serving `slot`, from a `CLUSTER SLOTS` reply: [[start, end, [host, port, id], …], …].
    static func owner(ofSlot slot: Int, in reply: RedisReply) -> (host: String, port: Int)? {
        for range in reply.elements ?? [] {
            guard let parts = range.elements, parts.count >= 3, let first = parts[0].int, let last = parts[1].int,
                (Int(first)...Int(last)).contains(slot), let master = parts[2].elements, master.count >= 2,
                let host = master[0].text, let port = master[1].int
            else { continue }
            return (host.isEmpty ? "127.0.0.1" : host, Int(port))
        }
        return nil
    }

    /// Every node a `CLUSTER SLOTS` reply names (each range's master and replicas), once each.
    static func nodes(in reply: RedisReply) -> [(host: String, port: Int)] {
        var seen: [(host: String, port: Int)] = []
        for range in reply.elements ?? [] {
            for node in (range.elements ?? []).dropFirst(2) {
                guard let parts = node.elements, parts.count >= 2, let host = parts[0].text, let port = parts[1].int else { continue }
                let address = (host: host.isEmpty ? "127.0.0.1" : host, port: Int(port))
                if !seen.contains(where: { $0.host == address.host && $0.port == address.port }) { seen.append(address) }
            }
        }
        return seen
    }

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
        let fresh = try connect()
        connection = fresh
        return fresh
    }

    // MARK: Reading

    /// Everything the store holds, with the version it was read at. Consistent only while
    /// nobody writes (the coordinator holds the lease while it loads). With
    /// `keepingRecordsEncoded` the journal records come kept in their stored form, for a copy
    /// that decodes them when read (a copy loading 50,000 of them decoded each under the lock
    /// before it could serve).
    func load(
        on redis: RedisConnection, keepingRecordsEncoded: Bool = false
    ) throws(RedisError)
        -> (state: PersistedState, version: UInt64, lastLogID: String, epoch: String?)
    {
        var state = PersistedState()
        let epoch = try redis.command("GET", key("epoch")).text
        let version = try redis.command("GET", key("version")).text.flatMap { UInt64($0) }
        state.initialized = version != nil
        var cursor = "0"
        // A record's newest row wins: rows of a batch (`rb:<version>`) by version, rows of
        // their own (`r:<sequence>`, written by a reset) before any batch.
        var records: [UInt64: (version: UInt64, record: NotificationRecord?)] = [:]
        func keep(_ sequence: UInt64, _ version: UInt64, _ record: NotificationRecord?) {
            if let kept = records[sequence], kept.version > version { return }
            records[sequence] = (version, record)
        }
        // A record's newest delivery part, laid over the record when it is at least as new
        // (rows of one batch are in order: a delivery part after its record).
        var deliveries: [UInt64: (version: UInt64, delivery: RecordDelivery)] = [:]
        func keep(_ sequence: UInt64, _ version: UInt64, delivery: RecordDelivery) {
            if let kept = deliveries[sequence], kept.version > version { return }
            deliveries[sequence] = (version, delivery)
        }
        func keep(batch: UInt64, _ bytes: [UInt8]?) throws(RedisError) {
            for change in try decodeBatch(bytes, keepingRecordsEncoded: keepingRecordsEncoded) {
                switch change {
                case .recordSaved(let record):
                    keep(record.sequence, batch, record)
                    // A whole record supersedes a delivery part from before it.
                    if let earlier = deliveries[record.sequence], earlier.version < batch {
                        deliveries[record.sequence] = nil
                    }
                case .recordDelivered(let sequence, let delivery): keep(sequence, batch, delivery: delivery)
                case .recordRemoved(let sequence): keep(sequence, batch, nil)
                default: break
                }
            }
        }
        repeat {
            let reply = try redis.command("HSCAN", key("state"), .text(cursor), "COUNT", "1000")
            guard let parts = reply.elements, parts.count == 2, let next = parts[0].text, let fields = parts[1].elements else {
                throw RedisError(.protocolError, "unexpected HSCAN reply")
            }
            cursor = next
            var i = 1
            while i < fields.count {
                if let name = fields[i - 1].text, name.hasPrefix("rb:"), let batch = UInt64(name.dropFirst(3)) {
                    try keep(batch: batch, fields[i].bytes)  // (written by earlier versions)
                    i += 2
                    continue
                }
                let change = try decode(fields[i].bytes)
                switch change {
                case .deviceSaved(let device): state.devices.append(device)
                case .tokenSaved(let entry): state.tokens.append(entry)
                case .keySaved(let key): state.keys.append(key)
                case .appSaved(let bundle, let team): state.apps.append((bundle, team))
                case .faultsSaved(let faults): state.faults = faults
                case .recordSaved(let record): keep(record.sequence, 0, record)
                case .recordDelivered(let sequence, let delivery): keep(sequence, 0, delivery: delivery)
                case .budgetSaved(let device, let bundle, let budget): state.budgets.append((device, bundle, budget))
                case .channelSaved(let channel): state.channels.append(channel)
                case .liveActivitiesSaved(let row): state.liveActivities.append(row)
                default: break
                }
                i += 2
            }
        } while cursor != "0"
        // The batches' rows in keys of their own; a name without a key is a field read above.
        let batches = try redis.command("ZRANGE", key("batches"), "0", "-1").elements?.compactMap(\.text) ?? []
        for chunk in stride(from: 0, to: batches.count, by: 100) {
            let names = batches[chunk..<min(chunk + 100, batches.count)]
            let values = try redis.command([.text("MGET")] + names.map { key($0) }).elements ?? []
            for (name, value) in zip(names, values) {
                guard value.bytes != nil, name.hasPrefix("rb:"), let batch = UInt64(name.dropFirst(3)) else { continue }
                try keep(batch: batch, value.bytes)
            }
        }
        state.devices.sort { $0.id < $1.id }
        state.tokens.sort { $0.token < $1.token }
        state.keys.sort { $0.keyID < $1.keyID }
        state.apps.sort { $0.bundleID < $1.bundleID }
        for (sequence, delivery) in deliveries {
            guard let kept = records[sequence], let record = kept.record, delivery.version >= kept.version else { continue }
            records[sequence] = (kept.version, record.applying(delivery.delivery))
        }
        let evicted = try redis.command("GET", key("evicted")).text.flatMap { UInt64($0) } ?? 0
        state.records = records.values.compactMap(\.record).filter { $0.sequence >= evicted }.sorted { $0.sequence < $1.sequence }
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

    /// The instances that own devices now (`members`), ascending.
    func members(on redis: RedisConnection) throws(RedisError) -> [Int] {
        Self.members(parsing: try redis.command("GET", key("members")).text)
    }

    static func members(parsing text: String?) -> [Int] {
        (text ?? "").split(separator: ",").compactMap { Int($0) }.sorted()
    }

    /// The epoch of the state in Redis (nil: none, the state is gone or was never seeded).
    func epoch(on redis: RedisConnection) throws(RedisError) -> String? {
        try redis.command("GET", key("epoch")).text
    }

    /// A new random epoch.
    static func newEpoch() -> String {
        (0..<2).map { _ in String(UInt64.random(in: 0...UInt64.max), radix: 16) }.joined(separator: "-")
    }

    private func decodeBatch(_ bytes: [UInt8]?, keepingRecordsEncoded: Bool) throws(RedisError) -> [StateChange] {
        guard let bytes else { throw RedisError(.protocolError, "a batch of state rows is not a string") }
        do {
            return try StateCodec.decodeChanges(bytes, keepingRecordsEncoded: keepingRecordsEncoded)
        } catch {
            throw RedisError(.protocolError, "a batch of state rows cannot be read: \(error)")
        }
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
    ///
    /// The rows are coalesced first (`PendingChanges`: each entity once, with its newest row,
    /// after at most one leading reset, evictions last), so the script writes like with like
    /// in a few variadic commands instead of a few commands per row; the log entry holds the
    /// coalesced rows, which leave a copy in the same state as the rows themselves.
    ///
    /// A fence is a lease token, or a shared turn's (`RedisCoordinator.sharedTokenPrefix`):
    /// then the write lands only while that turn is held (else "LEASE" too). `members`, when
    /// given, become the instances that own devices (`members`, and the log entry's `m`).
    func append(
        _ uncoalesced: [StateChange], instance: Int, fence: String?, epoch: EpochCondition = .any, members: [Int]? = nil,
        on redis: RedisConnection
    ) throws(RedisError) -> (version: UInt64, id: String, wanted: Bool) {
        let written = try appendSayingHeld(uncoalesced, instance: instance, fence: fence, epoch: epoch, members: members, on: redis)
        return (written.version, written.id, written.wanted)
    }

    /// `append`, also saying which of the batch's records were held for order by this instance
    /// (`RecordDelivery.heldForOrder`): the writer releases them once its copy has followed the
    /// log to this write.
    func appendSayingHeld(
        _ uncoalesced: [StateChange], instance: Int, fence: String?, epoch: EpochCondition = .any, members: [Int]? = nil,
        on redis: RedisConnection
    ) throws(RedisError) -> (version: UInt64, id: String, wanted: Bool, held: [UInt64]) {
        let changes = PendingChanges.coalesced(uncoalesced)
        let (expected, seeded): (String, String)
        switch epoch {
        case .any: (expected, seeded) = ("", "")
        case .expect(let current): (expected, seeded) = (current, "")
        case .seed(let new): (expected, seeded) = ("", new)
        }
        let hasReset = if case .reset = changes.first { true } else { false }
        // Journal records are kept in the log entry's rows, stored once more as the batch's
        // key, rather than one field each: the script then handles no argument per record.
        // (A reset writes a field per record, as the whole state is written anew.)
        var writes = Writes(recordsInBatch: !hasReset)
        // Rows that stay as the batch's `rb:` key go ahead of the script, into a key it renames.
        let keyPrefix = prefix
        let pending: RedisArgument = .text(keyPrefix + "pending:\(instance):\(pendingNonce):\(pendingWrites.add(1, ordering: .relaxed).newValue)")
        var prelude = RedisCommands()
        var rowsArgument: RedisArgument = ""
        if hasReset {
            if case .reset(let state) = changes[0] { writes.add(state) }
            for change in changes.dropFirst() { writes.add(change, encoded: StateCodec.encode(change)) }
            rowsArgument = .bytes(StateCodec.encode(changes: changes))
        } else {
            // Encoded where the command that sends them is built (`SET pending <rows> PX …`).
            prelude = RedisCommands(
                bulkAfter: ["SET", pending], capacity: changes.count * rowBytesPerChange.load(ordering: .relaxed) + Self.scriptCommandBytes)
            let bytes = prelude.writeBulk { rows in
                let before = rows.count
                StateCodec.beginRows(count: changes.count, in: &rows)
                for change in changes {
                    let start = rows.count
                    if let record = StateCodec.appendRow(change, to: &rows) {
                        writes.noteSaved(record)
                    } else {
                        writes.add(change, encoded: StateCodec.standaloneRow(rows[start...]))
                    }
                }
                return rows.count - before
            }
            noteRowBytes(bytes, changes: changes.count)
            // (Exactly when the script is told the batch's highest record sequence, ARGV 11.)
            if writes.batchMaxRecordSequence != nil {
                prelude.endBulk(tail: ["PX", .text(String(Self.pendingRowsMs))])
            } else {
                rowsArgument = .bytes(prelude.takeBulk())
            }
        }
        var arguments: [RedisArgument] = [
            .text(fence ?? ""), .text(String(RedisCoordinator.leaseMilliseconds)), .text(String(instance)),
            .text(String(logLength)), rowsArgument, .text(keyPrefix + "w:"), .text(String(writes.maxSequence)),
            hasReset ? "1" : "0", .text(expected), .text(seeded),
            .text(writes.batchMaxRecordSequence.map(String.init) ?? ""),
        ]
        writes.append(to: &arguments)
        arguments.append(.text(members.map { $0.map(String.init).joined(separator: ",") } ?? "-"))
        arguments.append(.text(members == nil ? writes.journalOnlyField(writer: instance) ?? "" : ""))
        let reply = try Self.appendScript.run(
            on: redis, keys: appendKeys(prefix: keyPrefix) + [pending], arguments: arguments, after: consume prelude)
        guard let parts = reply.elements, parts.count == 3, let version = parts[0].int, let id = parts[1].text else {
            throw RedisError(.protocolError, "unexpected reply to the append script")
        }
        return (UInt64(version), id, parts[2].int == 1, writes.heldForOrder)
    }

    /// What a change's row took in the last batch (about; a little more), to size the next
    /// batch's buffer: its rows are written into one, which should not grow (each growth
    /// copies every row so far). Reading each record's size first copied the record.
    private let rowBytesPerChange = Atomic<Int>(1024)
    /// Room in a batch's buffer for what follows the rows: the script's command.
    static let scriptCommandBytes = 2048

    private func noteRowBytes(_ bytes: Int, changes: Int) {
        guard changes > 0 else { return }
        let perChange = bytes / changes
        rowBytesPerChange.store(max(256, perChange + perChange / 8 + 16), ordering: .relaxed)
    }

    /// A batch's writes, like with like (see `appendScript`).
    struct Writes {
        /// Journal records stay in the batch's rows (`rb:<version>`), not in fields of their own.
        let recordsInBatch: Bool
        /// The highest sequence of a record in the batch's rows (nil: none there).
        var batchMaxRecordSequence: UInt64?
        var hashSets: [RedisArgument] = []
        var hashDeletes: [RedisArgument] = []
        var recordsAdded: [RedisArgument] = []
        var recordsRemoved: [RedisArgument] = []
        /// Triples: sequence, row, expiry (ms since 1970, 0 for none).
        var waiting: [RedisArgument] = []
        var done: [RedisArgument] = []
        var evictedBefore: UInt64?
        var maxSequence: UInt64 = 0
        /// Every row so far is the journal's (records saved, delivery parts that do not hand a
        /// record off again, evictions): an instance that owns none of `handOffDevices` may
        /// leave such a write unread until something reads its journal (the log entry's `j`).
        var journalOnly = true
        /// The devices whose records in the batch await their owner (hand-offs), at most
        /// `maxHandOffDevices`; more make the batch one every instance reads.
        var handOffDevices: [String] = []
        static let maxHandOffDevices = 32
        /// Journal records the batch saves.
        var recordCount = 0
        /// Records held for order by the writing instance (`RecordDelivery.heldForOrder`).
        var heldForOrder: [UInt64] = []
        /// The journal stripes (`SequenceStripes`: which instance numbered the record, the one
        /// that took the push) of the records whose delivery part the batch writes: an owner
        /// routing hand-offs. The instance that handed them off reads such a write at once, as
        /// its copy of each hand-off waits for it.
        var deliveredStripes: Set<UInt64> = []

        /// The log entry's `j`: the batch's highest record sequence and its record count
        /// (`<top>/<count>`), then `:` and the hand-offs' devices (`,` between; device ids have
        /// none of `:`, `,` or `|`), then `|` and the stripes of the instances whose records it
        /// gives a delivery part (`,` between), the writer's own left out. Nil when every
        /// instance must read the batch as it comes.
        func journalOnlyField(writer: Int) -> String? {
            guard journalOnly, let top = batchMaxRecordSequence else { return nil }
            var field = "\(top)/\(recordCount)"
            if !handOffDevices.isEmpty { field += ":" + handOffDevices.joined(separator: ",") }
            let takers = deliveredStripes.subtracting([UInt64(writer) % SequenceStripes.count]).sorted()
            if !takers.isEmpty { field += "|" + takers.map(String.init).joined(separator: ",") }
            return field
        }

        mutating func addSaved(_ record: NotificationRecord, encoded: [UInt8]) {
            noteSaved(
                StateCodec.SavedRecordFacts(
                    sequence: record.sequence, heldForOrder: record.delivery.heldForOrder, awaitingOwner: record.delivery.awaitingOwner,
                    deviceID: record.deviceID))
            if !recordsInBatch {
                hashSets += [.text("r:\(record.sequence)"), .bytes(encoded)]
                recordsAdded.append(.text(String(record.sequence)))
            }
        }

        /// A journal record the batch saves (in its rows, or with a field of its own).
        mutating func noteSaved(_ record: StateCodec.SavedRecordFacts) {
            recordCount += 1
            if record.heldForOrder { heldForOrder.append(record.sequence) }
            if record.awaitingOwner {
                if let device = record.deviceID, handOffDevices.count < Self.maxHandOffDevices {
                    if !handOffDevices.contains(device) { handOffDevices.append(device) }
                } else {
                    journalOnly = false
                }
            }
            maxSequence = max(maxSequence, record.sequence)
            if recordsInBatch { batchMaxRecordSequence = max(batchMaxRecordSequence ?? 0, record.sequence) }
        }

        mutating func add(_ change: StateChange, encoded: [UInt8]) {
            switch change {
            case .recordSaved(let record):
                addSaved(record, encoded: encoded)
                return
            case .recordDelivered(let sequence, let part):
                if part.awaitingOwner { journalOnly = false }
                deliveredStripes.insert(sequence % SequenceStripes.count)
            case .recordsEvicted: break
            default: journalOnly = false
            }
            switch change {
            case .deviceSaved, .tokenSaved, .keySaved, .appSaved, .faultsSaved, .budgetSaved, .channelSaved, .liveActivitiesSaved:
                hashSets += [.text(change.key!.storageField), .bytes(encoded)]
            case .deviceRemoved, .keyRemoved, .appRemoved, .channelRemoved, .liveActivitiesRemoved:
                hashDeletes.append(.text(change.key!.storageField))
            case .recordSaved:
                break  // above
            case .recordDelivered(let sequence, _):
                maxSequence = max(maxSequence, sequence)
                if recordsInBatch {
                    batchMaxRecordSequence = max(batchMaxRecordSequence ?? 0, sequence)
                } else {
                    // (After a reset, beside the record's field; gone with it.)
                    hashSets += [.text(change.key!.storageField), .bytes(encoded)]
                }
            case .recordRemoved(let sequence):
                maxSequence = max(maxSequence, sequence)
                // The batch's rows say it is gone (newer than any row of it); a field of its own
                // from a reset goes too.
                if recordsInBatch { batchMaxRecordSequence = max(batchMaxRecordSequence ?? 0, sequence) }
                hashDeletes += [.text("r:\(sequence)"), .text("rd:\(sequence)")]
                recordsRemoved.append(.text(String(sequence)))
            case .recordsEvicted(let before):
                evictedBefore = max(evictedBefore ?? 0, before)
            case .notificationWaiting(let entry):
                let n = entry.notification
                maxSequence = max(maxSequence, n.sequence)
                // In flight: the device has it; its fate is decided by the ack, not by time.
                let expiry: Int64
                if case .inFlight = entry.slot { expiry = 0 } else { expiry = n.storeUntilMs.map { $0 + waitingGraceMs } ?? 0 }
                waiting += [.text(String(n.sequence)), .bytes(encoded), .text(String(expiry))]
            case .notificationDone(let sequence):
                // Coalescing may have dropped its waiting row: the number was used all the same.
                maxSequence = max(maxSequence, sequence)
                done.append(.text(String(sequence)))
            case .reset(let state):
                add(state)
            case .clockOffsetSaved:
                break  // each instance keeps its own clock (a state directory keeps it)
            }
        }

        private mutating func add(encoding change: StateChange) { add(change, encoded: StateCodec.encode(change)) }

        /// The rows of a whole state (a reset: the script clears everything first).
        mutating func add(_ state: PersistedState) {
            maxSequence = max(maxSequence, state.nextRecordSequence > 0 ? state.nextRecordSequence - 1 : 0)
            for device in state.devices { add(encoding: .deviceSaved(device)) }
            for token in state.tokens { add(encoding: .tokenSaved(token)) }
            for key in state.keys { add(encoding: .keySaved(key)) }
            for app in state.apps { add(encoding: .appSaved(bundleID: app.bundleID, teamID: app.teamID)) }
            if let faults = state.faults { add(encoding: .faultsSaved(faults)) }
            for waiting in state.waiting { add(encoding: .notificationWaiting(waiting)) }
            for record in state.records { add(encoding: .recordSaved(record)) }
            for entry in state.budgets {
                add(encoding: .budgetSaved(deviceID: entry.deviceID, bundleID: entry.bundleID, budget: entry.budget))
            }
            for channel in state.channels { add(encoding: .channelSaved(channel)) }
            for row in state.liveActivities { add(encoding: .liveActivitiesSaved(row)) }
        }

        func append(to arguments: inout [RedisArgument]) {
            arguments.append(.text(evictedBefore.map(String.init) ?? ""))
            for list in [hashSets, hashDeletes, recordsAdded, recordsRemoved, waiting, done] {
                arguments.append(.text(String(list.count)))
            }
            arguments += hashSets
            arguments += hashDeletes
            arguments += recordsAdded
            arguments += recordsRemoved
            arguments += waiting
            arguments += done
        }
    }

    /// The append script's keys but the last (`pending`), made once per prefix (the prefix
    /// changes only when a Redis Cluster is found): fourteen strings a write.
    private func appendKeys(prefix: String) -> [RedisArgument] {
        appendKeysMade.withLock { made in
            if let made = made, made.prefix == prefix { return made.keys }
            let names = [
                "lease", "want", "version", "log", "state", "records", "waiting", "maxseq", "epoch", "batches", "evicted", "turns", "members",
                "leaseversion",
            ]
            let keys = names.map { RedisArgument.text(prefix + $0) }
            made = (prefix, keys)
            return keys
        }
    }
    private let appendKeysMade = Locked<(prefix: String, keys: [RedisArgument])?>(nil)

    /// How long a write's rows sent ahead of its script (`pending:`) last if the script never runs.
    static let pendingRowsMs = 60_000

    /// The rows of the newest this many journal records of each instance (about: the newest
    /// record numbers) stay in Redis even below the journal's bound, so an instance that falls
    /// that far behind catches up instead of reloading. With a small `--max-records` the rows
    /// were gone within milliseconds under load: followers reloaded over and over, and answers
    /// in flight were dropped each time.
    static let rowsKeptBehindRecords: UInt64 = 20_000
    static let rowsKeptBehind = rowsKeptBehindRecords << SequenceStripes.bits

    /// KEYS: lease want version log state records waiting maxseq epoch batches evicted turns
    /// members leaseversion pending. ARGV: 1 fence (a lease token, or a shared turn's: `s…`), 2 ttl, 3 instance, 4 loglength, 5 rows (the log entry;
    /// '' when they were sent ahead into `pending`, as they are whenever 11 is set), 6 waiting key
    /// prefix (the keys' prefix and `w:`), 7 max sequence, 8 reset ('1': clear everything first), 9 expected epoch, 10 seed
    /// epoch, 11 the highest record sequence in the rows ('' none: the rows are not kept as
    /// `rb:<version>`), 12 evict records before ('' none), 13–18 the lengths of the lists that
    /// follow: hash field/value pairs to set, hash fields to delete, record sequences added
    /// (fields of their own), removed, waiting notifications (sequence, row, expiry or 0),
    /// notifications done; then the lists; then the new members ('-' unchanged); last the log
    /// entry's `j` ('' none: `Writes.journalOnlyField`).
    ///
    /// `batches` scores each `rb:` name by its highest record sequence, so eviction drops a
    /// batch once all its records are older than the bound; `evicted` is that bound, below
    /// which records left in a kept batch are not loaded. A batch is a key of its own
    /// (renamed from `pending`), or a `state` field written by earlier versions: both go.
    ///
    /// The lists touch each entity once, so their order does not matter: each becomes one
    /// variadic command per chunk (a command per row cost more in the script than the writes).
    static let appendScript = RedisScript(
        """
        local shared = string.sub(ARGV[1], 1, 1) == 's'
        -- Rows kept as the batch's `rb:` key come ahead of the script, in KEYS[15].
        local ahead = ARGV[11] ~= ''
        local function refuse(text)
          if ahead then redis.call('DEL', KEYS[15]) end
          return redis.error_reply(text)
        end
        local now
        if shared then
          local t = redis.call('TIME')
          now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
          local expiry = tonumber(redis.call('ZSCORE', KEYS[12], ARGV[1]) or '0')
          if expiry < now then
            return refuse('LEASE this instance no longer holds its shared turn')
          end
        elseif ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then
          return refuse('LEASE this instance no longer holds the lease')
        end
        local e = redis.call('GET', KEYS[9])
        if ARGV[9] ~= '' and e ~= ARGV[9] then
          return refuse('EPOCH ' .. (e or ''))
        end
        if ARGV[10] ~= '' then
          if e then return refuse('EPOCH ' .. e) end
          redis.call('SET', KEYS[9], ARGV[10])
        end
        if ahead and redis.call('EXISTS', KEYS[15]) == 0 then
          return redis.error_reply('ROWS the rows sent ahead of this write are gone')
        end
        local v = redis.call('INCR', KEYS[3])
        -- A write not in a shared turn (under the lease, a seed, a restore): a shared turn
        -- taken later catches up to here first.
        if not shared then redis.call('SET', KEYS[14], v) end
        local wp = ARGV[6]
        local p = string.sub(wp, 1, -3)
        -- Deletes the batches named (`rb:<version>`): keys, or fields of earlier versions.
        local function dropBatches(names)
          for j = 1, #names, 1000 do
            local fields, keys = {}, {}
            for k = j, math.min(j + 999, #names) do
              fields[#fields + 1] = names[k]
              keys[#keys + 1] = p .. names[k]
            end
            redis.call('HDEL', KEYS[5], unpack(fields))
            redis.call('DEL', unpack(keys))
          end
        end
        if ARGV[8] == '1' then
          dropBatches(redis.call('ZRANGE', KEYS[10], 0, -1))
          redis.call('DEL', KEYS[5], KEYS[6], KEYS[10])
          for _, s in ipairs(redis.call('SMEMBERS', KEYS[7])) do redis.call('DEL', wp .. s) end
          redis.call('DEL', KEYS[7])
        end
        local id
        local m = ARGV[#ARGV - 1]
        local extra = {}
        if m ~= '-' then
          redis.call('SET', KEYS[13], m)
          extra = {'m', m}
        end
        if ARGV[#ARGV] ~= '' then
          extra[#extra + 1] = 'j'
          extra[#extra + 1] = ARGV[#ARGV]
        end
        if ahead then
          -- The rows once, in a key of their own; the log entry says where they are. (The
          -- version made text once: each `..` of a number is a sprintf.)
          local rb = 'rb:' .. v
          redis.call('RENAME', KEYS[15], p .. rb)
          redis.call('PERSIST', p .. rb)
          redis.call('ZADD', KEYS[10], ARGV[11], rb)
          id = redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[4], '*', 'v', string.sub(rb, 4), 'i', ARGV[3], 'b', 'k', unpack(extra))
        else
          id = redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[4], '*', 'v', v, 'i', ARGV[3], 'r', ARGV[5], unpack(extra))
        end
        -- After a reset nothing before it is worth reading (a copy behind it reloads), and an
        -- entry can be large (a batch of devices): the log keeps the reset alone.
        if ARGV[8] == '1' then redis.call('XTRIM', KEYS[4], 'MAXLEN', 1) end
        local i = 19
        -- Runs cmd key (prefixed) items for the n items from ARGV[i], at most 1000 at a time
        -- (Lua's stack bounds unpack).
        local function each(n, width, run)
          local last = i + n - 1
          while i <= last do
            local upto = math.min(i + 1000 * width - 1, last)
            run(i, upto)
            i = upto + 1
          end
        end
        -- (An empty list is passed over without making its function: a write of pushes has
        -- none of these.)
        if ARGV[13] ~= '0' then
          each(tonumber(ARGV[13]), 2, function(a, b) redis.call('HSET', KEYS[5], unpack(ARGV, a, b)) end)
        end
        if ARGV[14] ~= '0' then
          each(tonumber(ARGV[14]), 1, function(a, b) redis.call('HDEL', KEYS[5], unpack(ARGV, a, b)) end)
        end
        if ARGV[15] ~= '0' then
          each(tonumber(ARGV[15]), 1, function(a, b)
            local pairs = {}
            for j = a, b do pairs[#pairs + 1] = ARGV[j]; pairs[#pairs + 1] = ARGV[j] end
            redis.call('ZADD', KEYS[6], unpack(pairs))
          end)
        end
        if ARGV[16] ~= '0' then
          each(tonumber(ARGV[16]), 1, function(a, b) redis.call('ZREM', KEYS[6], unpack(ARGV, a, b)) end)
        end
        if ARGV[17] ~= '0' then
          each(tonumber(ARGV[17]), 3, function(a, b)
            local members = {}
            for j = a, b, 3 do
              if ARGV[j+2] ~= '0' then
                redis.call('SET', wp .. ARGV[j], ARGV[j+1], 'PXAT', ARGV[j+2])
              else
                redis.call('SET', wp .. ARGV[j], ARGV[j+1])
              end
              members[#members + 1] = ARGV[j]
            end
            redis.call('SADD', KEYS[7], unpack(members))
          end)
        end
        if ARGV[18] ~= '0' then
          each(tonumber(ARGV[18]), 1, function(a, b)
            local keys = {}
            for j = a, b do keys[#keys + 1] = wp .. ARGV[j] end
            redis.call('DEL', unpack(keys))
            redis.call('SREM', KEYS[7], unpack(ARGV, a, b))
          end)
        end
        if ARGV[12] ~= '' then
          local before = '(' .. ARGV[12]
          local old = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', before)
          for j = 1, #old, 1000 do
            local fields = {}
            for k = j, math.min(j + 999, #old) do
              fields[#fields + 1] = 'r:' .. old[k]
              fields[#fields + 1] = 'rd:' .. old[k]
            end
            redis.call('HDEL', KEYS[5], unpack(fields))
          end
          redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', before)
          -- A batch's rows outlive the bound by the newest numbers' worth (rowsKeptBehind): an
          -- instance a little behind still finds the rows of the writes it has not read, rather
          -- than reloading, however small the journal. (Loading skips what is below the bound.)
          local top = math.max(tonumber(redis.call('GET', KEYS[8]) or '0'), tonumber(ARGV[7]))
          local rowsBefore = '(' .. string.format('%.0f', math.min(tonumber(ARGV[12]), top - \(rowsKeptBehind)))
          dropBatches(redis.call('ZRANGEBYSCORE', KEYS[10], '-inf', rowsBefore))
          redis.call('ZREMRANGEBYSCORE', KEYS[10], '-inf', rowsBefore)
          if tonumber(ARGV[12]) > tonumber(redis.call('GET', KEYS[11]) or '0') then redis.call('SET', KEYS[11], ARGV[12]) end
        end
        if tonumber(ARGV[7]) > tonumber(redis.call('GET', KEYS[8]) or '0') then redis.call('SET', KEYS[8], ARGV[7]) end
        local wanted = 0
        if shared then
          redis.call('ZADD', KEYS[12], 'XX', now + tonumber(ARGV[2]), ARGV[1])
          wanted = redis.call('EXISTS', KEYS[2])
        elseif ARGV[1] ~= '' then
          redis.call('PEXPIRE', KEYS[1], ARGV[2])
          wanted = redis.call('EXISTS', KEYS[2])
        end
        return {v, id, wanted}
        """)
}
