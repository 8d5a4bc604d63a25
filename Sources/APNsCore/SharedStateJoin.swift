// SharedStateJoin: an instance joining a shared state that others made (`--redis`) adds what its
// own configuration has and the state lacks, as a start over a state directory does
// (`World.restoring`): an app or a device added to the configuration before every instance was
// restarted is there afterwards. Where the two differ, the shared state wins (the other
// instances use it), and the caller is told in words. Keys read from files stay each
// instance's own; `SharedKeyPrints` lets instances compare them.

extension World {
    /// Adds the configured apps and devices (and keys kept with their PEM) that the world (a
    /// shared state just loaded) lacks; returns a warning for each configured one the state
    /// holds differently.
    /// Change tracking carries the additions to the other instances.
    public mutating func addConfigured(from configured: World, stateName: String) -> [String] {
        var warnings: [String] = []
        // Keys read from files stay this instance's own (their private key is not put in the
        // shared state, `SharedKeyPrints` compares them between instances); one the shared
        // state holds under the same id (added through the admin API) is used instead.
        for key in configured.credentials.keys.values.sorted(by: { $0.keyID < $1.keyID }) {
            guard let kept = credentials.keys[key.keyID] else {
                credentials.add(key)
                continue
            }
            if kept !== key {
                warnings.append(
                    "key \(key.keyID) in \(stateName) (team \(kept.teamID), \(kept.source)) is used instead of the configured one (team \(key.teamID), \(key.source)); to use the configured key, DELETE /api/v1/keys/\(key.keyID) and restart this instance"
                )
            }
        }
        for (bundle, owner) in configured.credentials.apps.sorted(by: { $0.key < $1.key }) {
            guard let kept = credentials.apps[bundle]?.teamID else {
                credentials.addApp(teamID: owner.teamID, bundleID: bundle)
                continue
            }
            if kept != owner.teamID {
                warnings.append(
                    "app \(bundle) belongs to team \(kept) in \(stateName), not to team \(owner.teamID) as configured; the shared owner stays, so pushes to it signed by team \(owner.teamID)'s keys get 400 TopicDisallowed. To give it to team \(owner.teamID): DELETE /api/v1/apps/\(bundle) and restart this instance"
                )
            }
        }
        warnings += configuredDevicesKeptDifferently(from: configured, stateName: stateName)
        adoptConfiguredDevices(from: configured)
        return warnings
    }
}

extension World {
    /// Adds each configured device the state (a state directory, the shared state) lacks, its
    /// pinned tokens active again as after a reset (one it had before it was deleted too); not
    /// one whose token another device there holds: two devices would share it, and an
    /// uninstall on one would make the other's pushes 410 (`configuredDevicesKeptDifferently`
    /// says so).
    mutating func adoptConfiguredDevices(from configured: World) {
        for device in configured.registry.devices.values.sorted(by: { $0.id < $1.id })
        where registry.devices[device.id] == nil && tokenHeldByAnother(device) == nil {
            registry.adopt(device: device, from: configured.registry)
        }
    }

    /// A token of `device` (a configured one) that another device of this world holds, and that
    /// device's id.
    private func tokenHeldByAnother(_ device: Device) -> (token: String, holder: String)? {
        for token in device.apps.values.flatMap({ $0.tokens.values }) {
            guard let holder = registry.tokens[token]?.deviceID, holder != device.id, registry.devices[holder] != nil else { continue }
            return (token, holder)
        }
        return nil
    }

    /// Configured devices the state (a state directory, the shared state) holds with other apps
    /// than the configuration gives them: the state's stay (they may have been changed through
    /// the admin API on purpose), and each is said, with how to take the configured one. Also
    /// those not added because another device there holds their token.
    public func configuredDevicesKeptDifferently(from configured: World, stateName: String) -> [String] {
        func apps(_ device: Device) -> String {
            device.apps.values.map { "\($0.bundleID) (\($0.environment.rawValue))" }.sorted().joined(separator: ", ")
        }
        return configured.registry.devices.values.sorted(by: { $0.id < $1.id }).compactMap { device in
            guard let kept = registry.devices[device.id] else {
                return tokenHeldByAnother(device).map { taken in
                    "configured device \(device.id) is not added to \(stateName): its token \(taken.token) is device \(taken.holder)'s there; to add it, DELETE /api/v1/devices/\(taken.holder) and restart"
                }
            }
            guard apps(kept) != apps(device) else { return nil }
            let keptApps = apps(kept)
            return
                "configured device \(device.id) is kept as \(stateName) has it, with \(keptApps.isEmpty ? "no app" : keptApps), not with \(apps(device)) as configured; to take the configured one, DELETE /api/v1/devices/\(device.id) and restart"
        }
    }
}

/// The provider keys an instance read from its own files, by key id: its team and a print of
/// its public key. Each instance puts its own in the shared store, so that one whose keys differ
/// from another's says so at start (behind a balancer, a push signed with a key one instance
/// lacks is refused there and accepted elsewhere).
public enum SharedKeyPrints {
    /// `keyID team print` lines, sorted.
    public static func lines(of credentials: Credentials) -> [String] {
        credentials.keys.values.filter { !$0.addedAtRunTime }.sorted { $0.keyID < $1.keyID }.map { key in
            // The PEM's text without its line breaks, which another platform's file may change.
            "\(key.keyID) \(key.teamID) \(key.verifier.publicKeyPEM.map { String(StoredSurvivor.fnv1a(String($0.filter { !$0.isWhitespace })), radix: 16) } ?? "-")"
        }
    }

    /// What differs between this instance's lines and another's, in words.
    public static func differences(mine: [String], theirs: [String], instance: Int) -> [String] {
        func byID(_ lines: [String]) -> [String: (team: String, print: String)] {
            var out: [String: (team: String, print: String)] = [:]
            for line in lines {
                let parts = line.split(separator: " ", maxSplits: 2).map(String.init)
                if parts.count == 3 { out[parts[0]] = (parts[1], parts[2]) }
            }
            return out
        }
        let (own, other) = (byID(mine), byID(theirs))
        var said: [String] = []
        for id in Set(own.keys).union(other.keys).sorted() {
            switch (own[id], other[id]) {
            case (nil, let theirs?):
                said.append(
                    "instance \(instance) has key \(id) (team \(theirs.team)) from its configuration and this one does not: pushes signed with it are refused here (403 InvalidProviderToken) and taken there; give every instance the same keys (--auth-key, the config file, --demo)"
                )
            case (let mine?, nil):
                said.append(
                    "this instance has key \(id) (team \(mine.team)) from its configuration and instance \(instance) does not: pushes signed with it are refused there (403 InvalidProviderToken); give every instance the same keys (--auth-key, the config file, --demo)"
                )
            case (let mine?, let theirs?) where mine.team != theirs.team || mine.print != theirs.print:
                said.append(
                    "key \(id) is not the same key here and on instance \(instance) (\(mine.team != theirs.team ? "team \(mine.team) here, \(theirs.team) there" : "another key file")): a push signed with one is refused by the other instance; give every instance the same key files"
                )
            default:
                continue
            }
        }
        return said
    }
}
