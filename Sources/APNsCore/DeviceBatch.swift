/// Many virtual devices at once, for load tests (`POST /api/v1/devices/batch`, config populations).
extension World {
    /// The most devices one batch may create (a load test calls again for more).
    public static let maxBatchDevices = 100_000

    /// Creates `count` virtual devices with the same app, all or nothing (`idPrefix` + 1…count,
    /// or generated ids). Returns each device's token entry, in order.
    public mutating func addVirtualDevices(count: Int, app: AppRegistration, kind: TokenKind, idPrefix: String?, nowMs: Int64)
        throws(RegistryError) -> [TokenEntry]
    {
        precondition(count > 0, "a batch creates at least one device")
        let saved = registry
        var entries: [TokenEntry] = []
        entries.reserveCapacity(count)
        do throws(RegistryError) {
            for n in 1...count {
                let device = try registry.addDevice(id: idPrefix.map { "\($0)\(n)" }, isVirtual: true, nowMs: nowMs)
                entries += try installApp(deviceID: device.id, bundleID: app.bundleID, environment: app.environment, kinds: [kind],
                                          settings: app.settings, nowMs: nowMs)
            }
        } catch {
            registry = saved
            backendOutbox.removeAll()
            throw error
        }
        return entries
    }
}
