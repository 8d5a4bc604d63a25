// SharedStateJoin: an instance joining a shared state that others made (`--redis`) adds what its
// own configuration has and the state lacks, as a start over a state directory does
// (`World.restoring`): a key, an app or a device added to the configuration before every
// instance was restarted is there afterwards. Where the two differ, the shared state wins (the
// other instances use it), and the caller is told in words.

extension World {
    /// Adds the configured keys, apps and devices that the world (a shared state just loaded)
    /// lacks; returns a warning for each configured one the state holds differently.
    /// Change tracking carries the additions to the other instances.
    public mutating func addConfigured(from configured: World, stateName: String) -> [String] {
        var warnings: [String] = []
        for key in configured.credentials.keys.values.sorted(by: { $0.keyID < $1.keyID }) {
            guard let kept = credentials.keys[key.keyID] else {
                credentials.add(key)
                continue
            }
            if kept.teamID != key.teamID || (key.pem != nil && kept.pem != nil && kept.pem != key.pem) {
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
        for device in configured.registry.devices.values.sorted(by: { $0.id < $1.id }) where registry.devices[device.id] == nil {
            let pinned = device.apps.values.flatMap { $0.tokens.values }
            if let taken = pinned.first(where: { registry.tokens[$0] != nil }) {
                warnings.append(
                    "configured device \(device.id) is not added to \(stateName): its token \(taken) is another device's there")
                continue
            }
            registry.adopt(device: device, from: configured.registry)
        }
        return warnings
    }
}
