/// Broadcast channels (docs/apns-behaviour.md, "Broadcast channels"): what the channel
/// management API creates, reads, lists and deletes, and the newest message a
/// Most-Recent-Message-Stored channel keeps. Pure values; the world holds one directory.

/// How a channel keeps messages for subscribers that are not online when it is published to.
public enum ChannelStoragePolicy: Int, Sendable, Equatable {
    /// No Message Stored: only subscribers online now get it; `apns-expiration` must be 0.
    case noMessageStored = 0
    /// Most Recent Message Stored: the newest message is kept (at most 8 hours) for later.
    case mostRecentMessageStored = 1
}

/// One accepted broadcast: what a Most-Recent-Message-Stored channel keeps for subscribers
/// that come later, and what each subscribed activity takes once.
public struct StoredBroadcast: Sendable, Equatable {
    /// The broadcast's identity inside the emulator: its `apns-request-id`, `#`, and its journal
    /// record's sequence. Providers may send one request id twice (a constant from a sample, a
    /// library option); each accepted broadcast is still a new one for the activities, which
    /// take every broadcast once (`LiveActivity.lastBroadcastKey`), and its record is found by
    /// it after a restart and on every instance.
    public var key: String
    public var payload: [UInt8]
    public var priority: Int
    public var receivedAtMs: Int64
    public var expiresAtMs: Int64

    /// The `apns-request-id` it was sent with (a key kept by an older version is the id alone).
    public var requestID: String { Self.requestID(ofKey: key) }

    public static func key(requestID: String, recordSequence: UInt64) -> String { requestID + "#" + String(recordSequence) }

    public static func requestID(ofKey key: String) -> String {
        key.firstIndex(of: "#").map { String(key[..<$0]) } ?? key
    }

    /// The journal record's sequence a key names (nil in a key kept by an older version).
    public static func recordSequence(ofKey key: String) -> UInt64? {
        key.firstIndex(of: "#").flatMap { UInt64(key[key.index(after: $0)...]) }
    }

    public init(key: String, payload: [UInt8], priority: Int, receivedAtMs: Int64, expiresAtMs: Int64) {
        self.key = key
        self.payload = payload
        self.priority = priority
        self.receivedAtMs = receivedAtMs
        self.expiresAtMs = expiresAtMs
    }
}

/// One channel of one app in one environment.
public struct BroadcastChannel: Sendable, Equatable {
    /// Random, standard base64; never reused, even after the channel is deleted.
    public var id: String
    public var bundleID: String
    public var environment: APNsEnvironment
    public var policy: ChannelStoragePolicy
    public var createdAtMs: Int64
    /// Deleted channels are kept (as tombstones) so their ids are never handed out again and
    /// the admin API can still show them.
    public var deletedAtMs: Int64?
    /// Broadcasts accepted on it.
    public var broadcasts: Int = 0
    public var lastBroadcastAtMs: Int64?
    /// Policy 1: the newest message, until it expires.
    public var storedMessage: StoredBroadcast?
    /// When the broadcasts of the last second were accepted (at most the rate limit's count).
    /// Per instance and not persisted: it is not part of equality.
    var recentBroadcastsMs: [Int64] = []

    public var isLive: Bool { deletedAtMs == nil }

    public init(
        id: String, bundleID: String, environment: APNsEnvironment, policy: ChannelStoragePolicy, createdAtMs: Int64,
        deletedAtMs: Int64? = nil, broadcasts: Int = 0, lastBroadcastAtMs: Int64? = nil, storedMessage: StoredBroadcast? = nil
    ) {
        self.id = id
        self.bundleID = bundleID
        self.environment = environment
        self.policy = policy
        self.createdAtMs = createdAtMs
        self.deletedAtMs = deletedAtMs
        self.broadcasts = broadcasts
        self.lastBroadcastAtMs = lastBroadcastAtMs
        self.storedMessage = storedMessage
    }

    public static func == (a: BroadcastChannel, b: BroadcastChannel) -> Bool {
        (a.id, a.bundleID, a.environment, a.policy, a.createdAtMs) == (b.id, b.bundleID, b.environment, b.policy, b.createdAtMs)
            && (a.deletedAtMs, a.broadcasts, a.lastBroadcastAtMs) == (b.deletedAtMs, b.broadcasts, b.lastBroadcastAtMs)
            && a.storedMessage == b.storedMessage
    }
}

/// Every channel the emulator knows, live and deleted.
public struct ChannelDirectory: Sendable {
    /// Apple's limit: 10,000 live channels per app per environment ("CannotCreateChannelConfig").
    public static let defaultMaxLivePerApp = 10_000
    /// A stored message is kept at most this long (Apple: "up to 8 hours").
    public static let maxStorageMs: Int64 = 8 * 3_600_000
    /// Deleted channels kept for their ids and the admin API; the oldest go first past this.
    public static let maxTombstones = 10_000

    public var maxLivePerApp = ChannelDirectory.defaultMaxLivePerApp
    /// Broadcasts a channel takes per second before it answers 429 `TooManyRequests`; 0 = no
    /// limit. Apple publishes none (a forum figure is about one update a second per activity);
    /// the default is ten times that, so a provider Apple would accept is not refused here.
    public var maxBroadcastsPerSecond = ChannelDirectory.defaultMaxBroadcastsPerSecond
    public static let defaultMaxBroadcastsPerSecond = 10
    public private(set) var channels: [String: BroadcastChannel] = [:]
    /// Ids of deleted channels in deletion order, and every id ever issued (never reused).
    private var tombstones: [String] = []
    private var issuedIDs: Set<String> = []
    private var liveCount: [AppEnvironment: Int] = [:]
    /// With persistence on (`--state-dir`, `--redis`): channels saved or forgotten since
    /// `takeChangedIDs`.
    public var tracksChanges = false
    private var changedIDs: Set<String> = []
    /// While someone follows the admin event stream: channels changed since `takeEventIDs`.
    public var tracksEvents = false
    private var eventIDs: Set<String> = []

    struct AppEnvironment: Hashable, Sendable {
        var bundleID: String
        var environment: APNsEnvironment
    }

    public init() {}

    public func liveCount(bundleID: String, environment: APNsEnvironment) -> Int {
        liveCount[AppEnvironment(bundleID: bundleID, environment: environment)] ?? 0
    }

    /// The live channel `id` of that app in that environment (a channel of another app or
    /// environment, or a deleted one, is not registered there).
    public func live(id: String, bundleID: String, environment: APNsEnvironment) -> BroadcastChannel? {
        guard let channel = channels[id], channel.isLive, channel.bundleID == bundleID, channel.environment == environment
        else { return nil }
        return channel
    }

    /// Live channels of an app in an environment, oldest first.
    public func liveChannels(bundleID: String, environment: APNsEnvironment) -> [BroadcastChannel] {
        channels.values.filter { $0.isLive && $0.bundleID == bundleID && $0.environment == environment }
            .sorted { ($0.createdAtMs, $0.id) < ($1.createdAtMs, $1.id) }
    }

    /// Every channel, live and deleted, oldest first (the admin API).
    public var all: [BroadcastChannel] { channels.values.sorted { ($0.createdAtMs, $0.id) < ($1.createdAtMs, $1.id) } }

    /// Makes a channel; nil when the app already has `maxLivePerApp` live ones there.
    /// `makeID` draws a fresh random id; one already issued is drawn again.
    public mutating func create(
        bundleID: String, environment: APNsEnvironment, policy: ChannelStoragePolicy, nowMs: Int64,
        makeID: () -> String
    ) -> BroadcastChannel? {
        let key = AppEnvironment(bundleID: bundleID, environment: environment)
        guard liveCount[key, default: 0] < maxLivePerApp else { return nil }
        var id = makeID()
        while issuedIDs.contains(id) { id = makeID() }
        issuedIDs.insert(id)
        let channel = BroadcastChannel(id: id, bundleID: bundleID, environment: environment, policy: policy, createdAtMs: nowMs)
        channels[id] = channel
        liveCount[key, default: 0] += 1
        noteChange(id)
        return channel
    }

    /// Deletes a live channel. What it already delivered stays delivered; its stored message
    /// is kept for subscribers already waiting for it (Apple: pending messages may still be
    /// delivered), nothing new is accepted.
    @discardableResult
    public mutating func delete(id: String, bundleID: String, environment: APNsEnvironment, nowMs: Int64) -> Bool {
        guard var channel = live(id: id, bundleID: bundleID, environment: environment) else { return false }
        channel.deletedAtMs = nowMs
        channels[id] = channel
        liveCount[AppEnvironment(bundleID: bundleID, environment: environment), default: 1] -= 1
        tombstones.append(id)
        noteChange(id)
        if tombstones.count > Self.maxTombstones {
            // The id stays in `issuedIDs`: it is never handed out again.
            let forgotten = tombstones.removeFirst()
            channels.removeValue(forKey: forgotten)
            noteChange(forgotten)
        }
        return true
    }

    /// Whether channel `id` may take one more broadcast now (the last second's count is under
    /// `maxBroadcastsPerSecond`).
    public func allowsBroadcast(id: String, nowMs: Int64) -> Bool {
        guard maxBroadcastsPerSecond > 0, let channel = channels[id] else { return true }
        return channel.recentBroadcastsMs.count(where: { nowMs - $0 < 1000 }) < maxBroadcastsPerSecond
    }

    /// Records an accepted broadcast; a policy-1 channel keeps it until `expiresAtMs`.
    public mutating func recordBroadcast(id: String, message: StoredBroadcast) {
        guard var channel = channels[id] else { return }
        channel.broadcasts += 1
        channel.lastBroadcastAtMs = message.receivedAtMs
        if maxBroadcastsPerSecond > 0 {
            channel.recentBroadcastsMs.removeAll { message.receivedAtMs - $0 >= 1000 }
            channel.recentBroadcastsMs.append(message.receivedAtMs)
            if channel.recentBroadcastsMs.count > maxBroadcastsPerSecond { channel.recentBroadcastsMs.removeFirst() }
        }
        // The newest message replaces the one kept. One whose apns-expiration has already passed
        // is not kept and replaces nothing, as a device push with apns-expiration 0 leaves the
        // stored one in place.
        if channel.policy == .mostRecentMessageStored, message.expiresAtMs > message.receivedAtMs { channel.storedMessage = message }
        channels[id] = channel
        noteChange(id)
    }

    /// Whether a stored message has expired and is still kept.
    public func hasExpiredStoredMessage(nowMs: Int64) -> Bool {
        channels.values.contains { ($0.storedMessage?.expiresAtMs ?? .max) <= nowMs }
    }

    /// Drops stored messages that have expired; returns them with their channel's id.
    public mutating func expireStoredMessages(nowMs: Int64) -> [(channelID: String, message: StoredBroadcast)] {
        var expired: [(channelID: String, message: StoredBroadcast)] = []
        for (id, channel) in channels {
            guard let message = channel.storedMessage, message.expiresAtMs <= nowMs else { continue }
            channels[id]?.storedMessage = nil
            noteChange(id)
            expired.append((id, message))
        }
        return expired
    }

    /// Everything back to empty (a reset), keeping the limit.
    public mutating func removeAll() {
        let (limit, rate, tracking, issued) = (maxLivePerApp, maxBroadcastsPerSecond, tracksChanges, issuedIDs)
        var changed = changedIDs
        if tracking { changed.formUnion(channels.keys) }
        self = ChannelDirectory()
        (maxLivePerApp, maxBroadcastsPerSecond, tracksChanges, issuedIDs, changedIDs) = (limit, rate, tracking, issued, changed)
    }

    // MARK: Persistence

    /// Keeps every id `other` issued never reused here either (a reset replaces the directory).
    public mutating func continueIssuedIDs(from other: ChannelDirectory) {
        issuedIDs.formUnion(other.issuedIDs)
    }

    private mutating func noteChange(_ id: String) {
        if tracksChanges { changedIDs.insert(id) }
        if tracksEvents { eventIDs.insert(id) }
    }

    /// Ids of the channels changed since the last call, for the event stream.
    public mutating func takeEventIDs() -> [String] { eventIDs.isEmpty ? [] : Array(takeAll(&eventIDs)).sorted() }

    /// Ids of the channels saved or forgotten since the last call (a forgotten one is no
    /// longer in `channels`).
    public mutating func takeChangedIDs() -> Set<String> { takeAll(&changedIDs) }

    /// Replaces every channel by `restored` (a restart, another instance's reset), keeping the
    /// limits: the per-app live counts and the deletion order are worked out again, and every
    /// id issued before stays never reused. Marks nothing.
    public mutating func restore(_ restored: [BroadcastChannel]) {
        let issued = issuedIDs
        var next = ChannelDirectory()
        (next.maxLivePerApp, next.maxBroadcastsPerSecond, next.tracksChanges) = (maxLivePerApp, maxBroadcastsPerSecond, tracksChanges)
        next.changedIDs = changedIDs
        next.issuedIDs = issued
        let ordered = restored.sorted { ($0.deletedAtMs ?? 0, $0.id) < ($1.deletedAtMs ?? 0, $1.id) }
        for channel in ordered { next.save(channel) }
        self = next
    }

    /// Takes a channel as another instance (or the store) has it: replaces the one with its
    /// id, keeping the counts right. The rate window of a channel already here stays this
    /// instance's own. Marks nothing.
    public mutating func save(_ channel: BroadcastChannel) {
        var channel = channel
        if let old = channels[channel.id] {
            channel.recentBroadcastsMs = old.recentBroadcastsMs
            forget(old)
        }
        issuedIDs.insert(channel.id)
        channels[channel.id] = channel
        if channel.isLive {
            liveCount[AppEnvironment(bundleID: channel.bundleID, environment: channel.environment), default: 0] += 1
        } else {
            // In deletion order; a new deletion (or a restore, sorted) goes at the end at once.
            let known = channels
            let order = { (id: String) in known[id].map { ($0.deletedAtMs ?? 0, $0.id) } ?? (0, id) }
            let mine = (channel.deletedAtMs ?? 0, channel.id)
            if let last = tombstones.last, order(last) > mine {
                let at = tombstones.lastIndex { order($0) <= mine }.map { $0 + 1 } ?? 0
                tombstones.insert(channel.id, at: at)
            } else {
                tombstones.append(channel.id)
            }
        }
    }

    /// Drops the channel `id` (its tombstone was forgotten elsewhere); the id stays issued.
    /// Marks nothing.
    public mutating func remove(id: String) {
        guard let old = channels.removeValue(forKey: id) else { return }
        forget(old)
    }

    /// Takes `channel` out of the counts and the tombstones (not out of `channels`).
    private mutating func forget(_ channel: BroadcastChannel) {
        if channel.isLive {
            let key = AppEnvironment(bundleID: channel.bundleID, environment: channel.environment)
            liveCount[key, default: 1] -= 1
            if liveCount[key] == 0 { liveCount.removeValue(forKey: key) }
        } else if let at = tombstones.firstIndex(of: channel.id) {
            tombstones.remove(at: at)
        }
    }

    /// A new channel id: 16 random bytes in standard base64 with padding, as Apple's are.
    public static func randomID(_ random: inout FastRandom) -> String {
        var text = Array(Base64URL.encode(random.bytes(16)).utf8)
        for index in text.indices {
            if text[index] == UInt8(ascii: "-") { text[index] = UInt8(ascii: "+") }
            if text[index] == UInt8(ascii: "_") { text[index] = UInt8(ascii: "/") }
        }
        while text.count % 4 != 0 { text.append(UInt8(ascii: "=")) }
        return String(decoding: text, as: UTF8.self)
    }

    /// Whether `text` can be a channel id: base64 (either alphabet, padding optional) of at
    /// least one byte, at most 256 characters. Apple says not to assume a length.
    public static func isWellFormedID(_ text: String) -> Bool {
        guard !text.isEmpty, text.utf8.count <= 256, let bytes = Base64URL.decode(text.utf8) else { return false }
        return !bytes.isEmpty
    }
}
