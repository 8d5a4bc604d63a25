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
        var added: [String] = []
        var entries: [TokenEntry] = []
        added.reserveCapacity(count)
        entries.reserveCapacity(count)
        let outbox = backendOutbox.count
        do throws(RegistryError) {
            for n in 1...count {
                let device = try registry.addDevice(id: idPrefix.map { "\($0)\(n)" }, isVirtual: true, nowMs: nowMs)
                added.append(device.id)
                entries += try installApp(deviceID: device.id, bundleID: app.bundleID, environment: app.environment, kinds: [kind],
                                          settings: app.settings, nowMs: nowMs)
            }
        } catch {
            // Undone device by device: a saved copy of the registry would make this batch
            // copy every existing device first.
            registry.discard(newDevices: added)
            backendOutbox.removeLast(backendOutbox.count - outbox)
            throw error
        }
        return entries
    }
}
