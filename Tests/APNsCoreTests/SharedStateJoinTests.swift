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
        #expect(warnings.contains { $0.hasPrefix("configured device clash is not added") })
        // What was added goes to the other instances as changes.
        let changes = shared.takeStateChanges(recordSequences: [])
        #expect(changes.contains { if case .appSaved(let bundle, _) = $0 { bundle == "com.example.new" } else { false } })
        #expect(changes.contains { if case .deviceSaved(let device) = $0 { device.id == "pinned" } else { false } })
        // Joined again with the same configuration: nothing more to add or say.
        #expect(shared.addConfigured(from: configured, stateName: "the shared state").count == 2)
        #expect(shared.takeStateChanges(recordSequences: []).isEmpty)
    }
}
