import APNsCore
import Testing

/// `DeviceRegistry.maxAppsPerDevice` in the registry and the world: every way of installing
/// an app stops at it, and a hello or restore that would cross it changes nothing.
@Suite struct AppLimitTests {
    static let limit = DeviceRegistry.maxAppsPerDevice
    static let now: Int64 = 1_767_225_600_000

    static func apps(_ range: ClosedRange<Int>) -> [AppRegistration] {
        range.map { AppRegistration(bundleID: "com.example.app\($0)", environment: .sandbox, settings: AppSettings(), kinds: [.app]) }
    }

    static func hello(_ device: String, _ range: ClosedRange<Int>) -> DeviceHello {
        DeviceHello(deviceID: device, lowPowerMode: false, apps: apps(range))
    }

    @Test func theRegistryRefusesOneAppMoreButReRegistersOnesItHas() throws {
        var registry = DeviceRegistry(seed: 1)
        try registry.addDevice(id: "phone", isVirtual: true, nowMs: Self.now)
        for n in 1...Self.limit {
            _ = try registry.register(deviceID: "phone", bundleID: "com.example.app\(n)", environment: .sandbox, nowMs: Self.now)
        }
        #expect(throws: RegistryError.tooManyApps(deviceID: "phone")) {
            try registry.register(deviceID: "phone", bundleID: "com.example.extra", environment: .sandbox, nowMs: Self.now)
        }
        let again = try registry.register(deviceID: "phone", bundleID: "com.example.app1", environment: .sandbox, kind: .voip, nowMs: Self.now)
        #expect(again.kind == .voip, "another kind of an app it has is not another app")
        #expect(registry.devices["phone"]?.apps.count == Self.limit)
        #expect(
            RegistryError.tooManyApps(deviceID: "phone").description
                == "device 'phone' would have more than 1000 apps, the most a device may have installed (uninstall one first)")
    }

    @Test func aHelloOverTheBoundIsRefusedBeforeAnythingChanges() throws {
        var world = World()
        _ = try world.connectDevice(Self.hello("phone", 1...600), connectionID: 1, nowMs: Self.now)
        let tokens = world.registry.tokens.count
        #expect(throws: DeviceRequestError(DeviceRequestError.tooManyApps, RegistryError.tooManyApps(deviceID: "phone").description)) {
            try world.connectDevice(Self.hello("phone", 501...1001), connectionID: 2, nowMs: Self.now)
        }
        #expect(world.registry.devices["phone"]?.connectionID == 1, "the connection that holds the device keeps it")
        #expect(world.registry.devices["phone"]?.apps.count == 600 && world.registry.tokens.count == tokens)
        #expect(throws: DeviceRequestError.self) {
            try world.connectDevice(Self.hello("fresh", 1...1001), connectionID: 3, nowMs: Self.now)
        }
        #expect(world.registry.devices["fresh"] == nil, "no device was created")
        // Listing apps it has again, up to the bound, is fine.
        let frames = try world.connectDevice(Self.hello("phone", 1...1000), connectionID: 4, nowMs: Self.now)
        #expect(frames.filter { $0.message["type"] == "registered" }.count == 1000)
    }

    @Test func aRestoreOverTheBoundIsRefusedBeforeAnythingChanges() throws {
        var world = World()
        _ = try world.connectDevice(Self.hello("old", 1...600), connectionID: 1, nowMs: Self.now)
        _ = try world.connectDevice(Self.hello("new", 401...1001), connectionID: 2, nowMs: Self.now)
        _ = try world.connectDevice(Self.hello("newer", 590...1000), connectionID: 3, nowMs: Self.now)
        #expect(throws: DeviceRequestError.self) { try world.restoreBackup(from: "old", to: "new", nowMs: Self.now) }
        #expect(world.registry.devices["old"]?.apps.count == 600 && world.registry.devices["new"]?.apps.count == 601)
        // Apps both have count once: 411 + 589 new ones = 1000.
        let restored = try world.restoreBackup(from: "old", to: "newer", nowMs: Self.now)
        #expect(restored.tokens.count == 600 && world.registry.devices["newer"]?.apps.count == 1000)
    }
}

/// `--max-devices` and `--max-tokens`: the registry refuses one more, clearly, and a hello
/// that would cross either changes nothing.
@Suite struct RegistryLimitTests {
    static let now: Int64 = 1_767_225_600_000

    @Test func devicesAndTokensStopAtTheirLimits() throws {
        var registry = DeviceRegistry(limits: DeviceRegistry.Limits(maxDevices: 2, maxTokens: 3), seed: 1)
        try registry.addDevice(id: "a", isVirtual: true, nowMs: Self.now)
        try registry.addDevice(id: "b", isVirtual: true, nowMs: Self.now)
        #expect(throws: RegistryError.tooManyDevices(limit: 2)) { try registry.addDevice(id: "c", isVirtual: true, nowMs: Self.now) }
        let first = try registry.register(deviceID: "a", bundleID: "com.example.one", environment: .sandbox, nowMs: Self.now)
        _ = try registry.register(deviceID: "a", bundleID: "com.example.two", environment: .sandbox, nowMs: Self.now)
        _ = try registry.register(deviceID: "b", bundleID: "com.example.one", environment: .sandbox, nowMs: Self.now)
        #expect(throws: RegistryError.tooManyTokens(limit: 3)) {
            try registry.register(deviceID: "b", bundleID: "com.example.two", environment: .sandbox, nowMs: Self.now)
        }
        // Registering again keeps the token it has: no new one needed.
        #expect(try registry.register(deviceID: "a", bundleID: "com.example.one", environment: .sandbox, nowMs: Self.now).token == first.token)
        // An uninstalled app's token still counts (it answers 410), so a reinstall needs room.
        try registry.removeDevice(id: "b", nowMs: Self.now)
        try registry.addDevice(id: "c", isVirtual: true, nowMs: Self.now)
        #expect(throws: RegistryError.tooManyTokens(limit: 3)) {
            try registry.register(deviceID: "c", bundleID: "com.example.one", environment: .sandbox, nowMs: Self.now)
        }
        #expect(RegistryError.tooManyTokens(limit: 3).description.contains("--max-tokens"))
        #expect(RegistryError.tooManyDevices(limit: 2).description.contains("--max-devices"))
    }

    /// A rotate or a reinstall needs room for the new tokens; refused, it leaves the app and
    /// its tokens as they were (the old ones are not ended).
    @Test func aRotateOrReinstallOverTheTokenLimitChangesNothing() throws {
        var world = World(registry: DeviceRegistry(limits: DeviceRegistry.Limits(maxDevices: 2, maxTokens: 2), seed: 1))
        _ = try world.connectDevice(AppLimitTests.hello("phone", 1...2), connectionID: 1, nowMs: Self.now)
        let token = try #require(world.registry.devices["phone"]?.apps["com.example.app1"]?.tokens[.app])
        #expect(throws: DeviceRequestError.self) { try world.rotateTokens(deviceID: "phone", bundleID: "com.example.app1", nowMs: Self.now) }
        #expect(throws: DeviceRequestError.self) { try world.reinstallApp(deviceID: "phone", bundleID: "com.example.app1", nowMs: Self.now) }
        #expect(world.registry.tokens.count == 2, "no token made")
        #expect(world.registry.token(token)?.state == .active, "the old token was not ended")
        #expect(world.registry.devices["phone"]?.apps["com.example.app1"] != nil, "still installed")
    }

    @Test func aHelloThatWouldCrossALimitChangesNothing() throws {
        var world = World(registry: DeviceRegistry(limits: DeviceRegistry.Limits(maxDevices: 1, maxTokens: 5)))
        _ = try world.connectDevice(AppLimitTests.hello("phone", 1...3), connectionID: 1, nowMs: Self.now)
        #expect(throws: DeviceRequestError.self) {
            try world.connectDevice(AppLimitTests.hello("phone", 1...6), connectionID: 1, nowMs: Self.now)
        }
        #expect(world.registry.devices["phone"]?.apps.count == 3 && world.registry.tokens.count == 3)
        do {
            _ = try world.connectDevice(AppLimitTests.hello("other", 1...1), connectionID: 2, nowMs: Self.now)
            Issue.record("a second device is over --max-devices 1")
        } catch {
            #expect(error.code == DeviceRequestError.registryFull)
        }
        #expect(world.registry.devices["other"] == nil)
    }
}
