/// A provider signing key as APNs knows it (docs/apns-behaviour.md, "Provider tokens").
///
/// - A key with no `topics` is *team-scoped*: it may push to any bundle its team owns.
/// - A key with `topics` is *topic-specific*: only those bundle ids (or full topics).
/// - `environment` restricts a key to sandbox or production (Apple's 2025 keys); nil means both,
///   like the older team keys.
/// - `relatedKeyID` names the one key a topic-specific key may share a connection with.
///
/// An immutable class: requests pass keys around constantly, and one reference is far
/// cheaper to copy than a struct of strings and an existential.
public final class ProviderKey: Sendable {
    public let teamID: String
    public let keyID: String
    public let environment: APNsEnvironment?
    public let topics: Set<String>?
    public let relatedKeyID: String?
    public let verifier: any SignatureVerifier
    /// Where the key came from (a path, "config", "api"), for display.
    public let source: String
    /// The PEM the key was loaded from, kept so `--state-dir` can load it again.
    public let pem: String?
    /// Added through the admin API (configured keys are read from their files at each start).
    public let addedAtRunTime: Bool

    public init(
        teamID: String, keyID: String, environment: APNsEnvironment? = nil, topics: Set<String>? = nil,
        relatedKeyID: String? = nil, verifier: any SignatureVerifier, source: String = "", pem: String? = nil,
        addedAtRunTime: Bool = false
    ) {
        self.pem = pem
        self.addedAtRunTime = addedAtRunTime
        self.teamID = teamID
        self.keyID = keyID
        self.environment = environment
        self.topics = topics
        self.relatedKeyID = relatedKeyID
        self.verifier = verifier
        self.source = source
    }

    public var isTopicSpecific: Bool { topics != nil }

    public func covers(bundleID: String, topic: String) -> Bool {
        guard let topics else { return true }
        return topics.contains(bundleID) || topics.contains(topic)
    }

    /// The fields (as the admin API names them) in which `other`, a key with the same id,
    /// defines another key; empty when it is this one again. Key material not known on either
    /// side counts as different.
    public func differences(from other: ProviderKey) -> [String] {
        var fields: [String] = []
        if teamID != other.teamID { fields.append("teamId") }
        if verifier.publicKeyPEM == nil || verifier.publicKeyPEM != other.verifier.publicKeyPEM { fields.append("key material") }
        if environment != other.environment { fields.append("environment") }
        if topics != other.topics { fields.append("topics") }
        if relatedKeyID != other.relatedKeyID { fields.append("relatedKeyId") }
        return fields
    }

    func isRelated(to other: ProviderKey) -> Bool {
        keyID == other.keyID || relatedKeyID == other.keyID || other.relatedKeyID == keyID
    }
}

/// Keys and app ownership. A value type: the configured start state is kept as a copy and a
/// reset puts it back.
public struct Credentials: Sendable {
    public private(set) var keys: [String: ProviderKey] = [:]
    /// bundle id → owning team and the generation at which the ownership appeared.
    public private(set) var apps: [String: AppOwnership] = [:]
    /// Bumped on every change, so connections can tell when a cached verdict is stale.
    public private(set) var generation: UInt64 = 1
    /// With persistence on: key ids and bundle ids changed since `takeChangedIDs`.
    public var tracksChanges = false
    private var changedKeys: Set<String> = []
    private var changedApps: Set<String> = []

    public struct AppOwnership: Sendable, Equatable {
        public var teamID: String
        public var addedAtGeneration: UInt64
    }

    public init() {}

    public mutating func takeChangedIDs() -> (keys: Set<String>, apps: Set<String>) {
        (takeAll(&changedKeys), takeAll(&changedApps))
    }

    public mutating func add(_ key: ProviderKey) {
        generation += 1
        keys[key.keyID] = key
        if tracksChanges { changedKeys.insert(key.keyID) }
    }

    @discardableResult
    public mutating func removeKey(id: String) -> ProviderKey? {
        generation += 1
        if tracksChanges { changedKeys.insert(id) }
        return keys.removeValue(forKey: id)
    }

    public mutating func addApp(teamID: String, bundleID: String) {
        generation += 1
        if apps[bundleID]?.teamID != teamID {
            apps[bundleID] = AppOwnership(teamID: teamID, addedAtGeneration: generation)
            if tracksChanges { changedApps.insert(bundleID) }
        }
    }

    @discardableResult
    public mutating func removeApp(bundleID: String) -> AppOwnership? {
        generation += 1
        if tracksChanges { changedApps.insert(bundleID) }
        return apps.removeValue(forKey: bundleID)
    }

    /// Keeps generations monotonic across a reset, so connections never mistake restored
    /// state for state they have already seen.
    public mutating func advanceGeneration(beyond other: UInt64) {
        generation = max(generation, other) + 1
    }

    /// The team that owns a bundle: an explicit app entry, or a topic-specific key that lists it
    /// or one of its topics (one can only make such a key for one's own apps).
    public func owner(ofBundle bundleID: String) -> AppOwnership? {
        if let app = apps[bundleID] { return app }
        for key in keys.values where key.topics?.contains(where: { Self.bundleID(listedAs: $0) == bundleID }) == true {
            return AppOwnership(teamID: key.teamID, addedAtGeneration: 0)
        }
        return nil
    }

    /// The bundle a topic-specific key's entry names: the entry itself, or, for a full topic
    /// (`com.example.app.voip`), the bundle without its push-type suffix. So listing a VoIP topic
    /// makes `com.example.app` the team's, not an app called `com.example.app.voip` (which would
    /// take the suffix's meaning away from every push to that topic); such an app is registered
    /// with `--app`.
    static func bundleID(listedAs entry: String) -> String {
        PushType.implied(byTopic: Substring(entry)).map { TopicRules.bundleID(ofTopic: entry, pushType: $0) } ?? entry
    }
}

/// Keys and apps changed at run time (the admin API).
extension World {
    public mutating func addKey(_ key: ProviderKey) { credentials.add(key) }

    /// The key removed, nil when there was none with that id.
    public mutating func removeKey(id: String) -> ProviderKey? { credentials.removeKey(id: id) }

    public mutating func addApp(teamID: String, bundleID: String) { credentials.addApp(teamID: teamID, bundleID: bundleID) }

    /// Who owned the app, nil when nobody did.
    public mutating func removeApp(bundleID: String) -> Credentials.AppOwnership? { credentials.removeApp(bundleID: bundleID) }
}
