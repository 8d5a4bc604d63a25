@testable import APNsCore
import Testing

/// The registry's tables keep rows in slots, found by id; a token keeps its device's slot
/// beside it as a link, checked before it is followed.
@Suite("Registry tables")
struct RegistryTableTests {
    func device(_ id: String, at ms: Int64) -> Device {
        Device(id: id, isVirtual: true, apps: [:], createdAtMs: ms)
    }

    @Test func rowsAreFoundByIdAndListedInKeyOrderAcrossRemovalsAndReuse() {
        var table = OrderedTable<Device>()
        for (n, id) in ["a", "b", "c"].enumerated() { table[id] = device(id, at: Int64(n)) }
        let slotOfB = table.slot(of: "b")!
        #expect(table.removeValue(forKey: "b")?.id == "b")
        #expect(table["b"] == nil && table.slot(of: "b") == nil && !table.slot(slotOfB, holds: "b"))
        table["d"] = device("d", at: 3)
        #expect(table.slot(of: "d") == slotOfB, "the slot a removed row left is given to the next one")
        #expect(table.slot(slotOfB, holds: "d") && !table.slot(slotOfB, holds: "b"))
        #expect(table.row(inSlot: slotOfB).id == "d")
        #expect(table.count == 3 && table.keys.sorted() == ["a", "c", "d"])
        #expect(table.values.map(\.id).sorted() == ["a", "c", "d"])
        #expect(table.page(after: nil, limit: 10).rows.map(\.id) == ["a", "c", "d"])
        #expect(!table.slot(-1, holds: "a") && !table.slot(99, holds: "a"))
    }

    @Test func aRowChangedInPlaceMovesInTheListAndSettingNilRemovesIt() {
        var table = OrderedTable<Device>()
        for (n, id) in ["a", "b", "c"].enumerated() { table[id] = device(id, at: Int64(n)) }
        table["a"]?.createdAtMs = 10
        table["b"]?.lowPowerMode = true
        #expect(table.page(after: nil, limit: 10).rows.map(\.id) == ["b", "c", "a"])
        #expect(table["b"]?.lowPowerMode == true)
        let slotOfC = table.slot(of: "c")!
        table["c"] = nil
        #expect(table["c"] == nil && table.count == 2 && !table.slot(slotOfC, holds: "c"))
        #expect(table.page(after: nil, limit: 10).rows.map(\.id) == ["b", "a"])
        table["e"] = device("e", at: 5)
        #expect(table.slot(of: "e") == slotOfC)
        #expect(table.page(after: nil, limit: 10).rows.map(\.id) == ["b", "e", "a"])
        table.discardSome(2)
        #expect(table.count == 1)
        table.discardSome(2)
        #expect(table.isEmpty && table.values.map(\.id).isEmpty)
    }

    /// A token's link leads to its device while that device holds the slot; once the device is
    /// gone and another takes the slot, or the device comes back elsewhere, it is found by id.
    @Test func aTokensDeviceSlotIsCheckedBeforeItIsFollowed() throws {
        var registry = DeviceRegistry(seed: 1)
        try registry.addDevice(id: "phone", isVirtual: true, nowMs: 0)
        let entry = try registry.register(deviceID: "phone", bundleID: "com.example.app", environment: .sandbox, nowMs: 0)
        let tokenSlot = try #require(registry.tokens.slot(of: entry.token))
        let first = registry.deviceSlot(ofTokenIn: tokenSlot, deviceID: "phone")
        #expect(registry.devices.row(inSlot: first).id == "phone")
        #expect(registry.tokens.link(ofSlot: tokenSlot) == first)
        #expect(registry.deviceSlot("phone", hint: first) == first)

        try registry.removeDevice(id: "phone", nowMs: 1)
        #expect(registry.deviceSlot(ofTokenIn: tokenSlot, deviceID: "phone") == -1)
        try registry.addDevice(id: "tablet", isVirtual: true, nowMs: 2)
        #expect(registry.devices.slot(of: "tablet") == first, "the slot is reused")
        #expect(registry.deviceSlot(ofTokenIn: tokenSlot, deviceID: "phone") == -1, "not the device now in the slot")
        #expect(registry.deviceSlot("phone", hint: first) == -1)

        try registry.addDevice(id: "phone", isVirtual: true, nowMs: 3)
        let again = registry.deviceSlot(ofTokenIn: tokenSlot, deviceID: "phone")
        #expect(again != first && registry.devices.row(inSlot: again).id == "phone")
        #expect(registry.tokens.link(ofSlot: tokenSlot) == again)
        #expect(registry.deviceSlot("tablet", hint: again) == first, "a wrong hint falls back to the id")
    }

    @Test func anAppIsFoundOnADeviceWithOneAppOrMany() throws {
        var registry = DeviceRegistry(seed: 1)
        try registry.addDevice(id: "phone", isVirtual: true, nowMs: 0)
        _ = try registry.register(deviceID: "phone", bundleID: "com.example.one", environment: .sandbox, nowMs: 0)
        var phone = try #require(registry.devices["phone"])
        #expect(phone.appIndex("com.example.one").map { phone.apps.values[$0].bundleID } == "com.example.one")
        #expect(phone.appIndex("com.example.two") == nil)
        for n in 2...5 { _ = try registry.register(deviceID: "phone", bundleID: "com.example.app\(n)", environment: .sandbox, nowMs: 0) }
        phone = try #require(registry.devices["phone"])
        for bundle in ["com.example.one", "com.example.app3", "com.example.app5"] {
            #expect(phone.appIndex(bundle).map { phone.apps.values[$0].bundleID } == bundle)
        }
        #expect(phone.appIndex("com.example.two") == nil)
        #expect(Device(id: "empty", isVirtual: true, apps: [:], createdAtMs: 0).appIndex("com.example.one") == nil)
    }
}

/// A pinned token (admin API, config file) is at most as long as `--token-bytes` allows: a far
/// longer one is refused, since no push to it could be sent (its path is over HTTP/2's header
/// limits, and every push to it was reset).
@Suite("Pinned tokens")
struct PinnedTokenTests {
    @Test func aPinnedTokenLongerThanTheLongestAnAppGetsIsRefused() throws {
        var registry = DeviceRegistry(seed: 1)
        try registry.addDevice(id: "pin", isVirtual: true, nowMs: 0)
        let longest = String(repeating: "ab", count: DeviceRegistry.maxPinnedTokenBytes)
        let entry = try registry.register(deviceID: "pin", bundleID: "com.example.app", environment: .sandbox, fixedToken: longest, nowMs: 0)
        #expect(entry.token == longest)
        try registry.addDevice(id: "pin-2", isVirtual: true, nowMs: 0)
        let error = #expect(throws: RegistryError.self) {
            try registry.register(deviceID: "pin-2", bundleID: "com.example.app", environment: .sandbox, fixedToken: longest + "cd", nowMs: 0)
        }
        #expect(
            error?.description.hasPrefix("a token of 256 bytes is longer than any an app gets (at most 255") == true, "\(String(describing: error))")
    }
}
