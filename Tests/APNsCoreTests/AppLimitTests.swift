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
        #expect(restored.count == 600 && world.registry.devices["newer"]?.apps.count == 1000)
    }
}
