@testable import APNsCore
import Testing

/// An instance joining a shared state adds what its configuration has and the state lacks.
@Suite("Joining a shared state")
struct SharedStateJoinTests {
    @Test func theConfigurationAddsWhatTheSharedStateLacksAndTheStateWinsWhereTheyDiffer() throws {
        let now: Int64 = 1_767_225_600_000
        let key = try SigningKey(team: "TEAMAAAAAA", key: "KEYAAAAAAA")
        var configured = World()
        configured.credentials.add(key.providerKey())
        configured.credentials.addApp(teamID: "TEAMAAAAAA", bundleID: "com.example.new")
        configured.credentials.addApp(teamID: "TEAMAAAAAA", bundleID: "com.example.taken")
        try configured.registry.addDevice(id: "pinned", isVirtual: true, nowMs: now)
        let pinned = String(repeating: "ab", count: 32)
        _ = try configured.registry.register(
            deviceID: "pinned", bundleID: "com.example.new", environment: .sandbox, fixedToken: pinned, nowMs: now)
        try configured.registry.addDevice(id: "clash", isVirtual: true, nowMs: now)
        let clashing = String(repeating: "cd", count: 32)
        _ = try configured.registry.register(
            deviceID: "clash", bundleID: "com.example.new", environment: .sandbox, fixedToken: clashing, nowMs: now)

        // The shared state: another team owns one of the apps, another device has one token.
        var shared = World()
        shared.credentials.addApp(teamID: "TEAMBBBBBB", bundleID: "com.example.taken")
        try shared.registry.addDevice(id: "someone", isVirtual: true, nowMs: now)
        _ = try shared.registry.register(
            deviceID: "someone", bundleID: "com.example.taken", environment: .sandbox, fixedToken: clashing, nowMs: now)
        shared.startTrackingChanges()

        let warnings = shared.addConfigured(from: configured, stateName: "the shared state")
        #expect(shared.credentials.keys["KEYAAAAAAA"] != nil)
        #expect(shared.credentials.apps["com.example.new"]?.teamID == "TEAMAAAAAA")
        #expect(shared.credentials.apps["com.example.taken"]?.teamID == "TEAMBBBBBB")
        #expect(shared.registry.devices["pinned"] != nil)
        #expect(shared.registry.token(pinned)?.deviceID == "pinned")
        #expect(shared.registry.devices["clash"] == nil)
        #expect(shared.registry.token(clashing)?.deviceID == "someone")
        #expect(warnings.count == 2, "\(warnings)")
        #expect(warnings.contains { $0.hasPrefix("app com.example.taken belongs to team TEAMBBBBBB in the shared state") })
        let clash = "configured device clash is not added to the shared state: its token \(clashing) is device someone's"
        #expect(warnings.contains { $0.hasPrefix(clash) })
        // What was added goes to the other instances as changes.
        let changes = shared.takeStateChanges(recordSequences: [])
        #expect(changes.contains { if case .appSaved(let bundle, _) = $0 { bundle == "com.example.new" } else { false } })
        #expect(changes.contains { if case .deviceSaved(let device) = $0 { device.id == "pinned" } else { false } })
        // Joined again with the same configuration: nothing more to add or say.
        #expect(shared.addConfigured(from: configured, stateName: "the shared state").count == 2)
        #expect(shared.takeStateChanges(recordSequences: []).isEmpty)

        // Deleted at run time (its token then answers 410): the next join brings it back, its
        // pinned token active again, as a start over a state directory does.
        try shared.registry.removeDevice(id: "pinned", nowMs: now)
        #expect(shared.registry.token(pinned)?.state != .active)
        _ = shared.addConfigured(from: configured, stateName: "the shared state")
        #expect(shared.registry.devices["pinned"] != nil)
        #expect(shared.registry.token(pinned)?.state == .active)
    }

    /// A configured device the state holds with other apps (changed through the admin API, or
    /// the configuration changed): the state's stays, and the difference is said.
    @Test func aConfiguredDeviceKeptWithOtherAppsIsSaid() throws {
        let now: Int64 = 1_767_225_600_000
        var configured = World()
        try configured.registry.addDevice(id: "phone", isVirtual: true, nowMs: now)
        _ = try configured.registry.register(deviceID: "phone", bundleID: "com.example.a", environment: .sandbox, nowMs: now)
        _ = try configured.registry.register(deviceID: "phone", bundleID: "com.example.b", environment: .production, nowMs: now)
        var kept = World()
        try kept.registry.addDevice(id: "phone", isVirtual: true, nowMs: now)
        _ = try kept.registry.register(deviceID: "phone", bundleID: "com.example.a", environment: .sandbox, nowMs: now)
        #expect(
            kept.configuredDevicesKeptDifferently(from: configured, stateName: "/var/state")
                == [
                    "configured device phone is kept as /var/state has it, with com.example.a (sandbox), not with com.example.a (sandbox), com.example.b (production) as configured; to take the configured one, DELETE /api/v1/devices/phone and restart"
                ])
        // The same apps (their tokens may differ): nothing to say.
        _ = try kept.registry.register(deviceID: "phone", bundleID: "com.example.b", environment: .production, nowMs: now)
        #expect(kept.configuredDevicesKeptDifferently(from: configured, stateName: "/var/state").isEmpty)
    }
}

/// Each instance's keys from its own files, compared with another's.
@Suite("Key prints between instances")
struct SharedKeyPrintsTests {
    @Test func differencesAreSaidKeyByKey() throws {
        struct Printed: SignatureVerifier {
            let publicKeyPEM: String?
            func verify(signature: [UInt8], message: [UInt8]) -> Bool { false }
        }
        func key(_ team: String, _ id: String, _ pem: String) -> ProviderKey {
            ProviderKey(teamID: team, keyID: id, verifier: Printed(publicKeyPEM: pem))
        }
        var mine = Credentials()
        mine.add(key("TEAMAAAAAA", "KEYAAAAAAA", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"))
        mine.add(key("TEAMCCCCCC", "KEYCCCCCCC", "-----BEGIN PUBLIC KEY-----\nCCCC\n-----END PUBLIC KEY-----"))
        var theirs = Credentials()
        // The same id, another key.
        theirs.add(key("TEAMAAAAAA", "KEYAAAAAAA", "-----BEGIN PUBLIC KEY-----\nBBBB\n-----END PUBLIC KEY-----"))
        let lines = SharedKeyPrints.lines(of: mine)
        #expect(lines.count == 2 && lines[0].hasPrefix("KEYAAAAAAA TEAMAAAAAA "), "\(lines)")
        #expect(SharedKeyPrints.differences(mine: lines, theirs: lines, instance: 2).isEmpty)
        let said = SharedKeyPrints.differences(mine: lines, theirs: SharedKeyPrints.lines(of: theirs), instance: 2)
        #expect(said.count == 2, "\(said)")
        #expect(said[0].hasPrefix("key KEYAAAAAAA is not the same key here and on instance 2 (another key file)"), "\(said)")
        #expect(said[1].hasPrefix("this instance has key KEYCCCCCCC (team TEAMCCCCCC) from its configuration and instance 2 does not"), "\(said)")
        let reverse = SharedKeyPrints.differences(mine: SharedKeyPrints.lines(of: theirs), theirs: lines, instance: 1)
        #expect(reverse.contains { $0.hasPrefix("instance 1 has key KEYCCCCCCC (team TEAMCCCCCC) from its configuration and this one does not") })
    }
}
