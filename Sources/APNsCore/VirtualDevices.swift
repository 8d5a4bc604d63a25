/// Virtual devices made from outside, all or nothing: one (`POST /api/v1/devices`) or many at
/// once (`POST /api/v1/devices/batch`, load tests).
extension World {
    /// The most devices one batch may create (a load test calls again for more).
    public static let maxBatchDevices = 100_000

    /// Creates a virtual device (with `id`, or a generated one) with `app` installed, its
    /// token pinned to `fixedToken` when given. A failed install leaves no device behind.
    public mutating func createVirtualDevice(
        id: String?, app: AppRegistration, fixedToken: String?, nowMs: Int64
    )
        throws(RegistryError) -> TokenEntry
    {
        try addVirtualDevices(ids: CollectionOfOne(id), app: app, fixedToken: fixedToken, nowMs: nowMs)[0]
    }

    /// Creates `count` virtual devices with the same app, all or nothing (`idPrefix` + 1…count,
    /// or generated ids). Returns each device's token entry, in order.
    public mutating func addVirtualDevices(
        count: Int, app: AppRegistration, kind: TokenKind, idPrefix: String?, nowMs: Int64
    )
        throws(RegistryError) -> [TokenEntry]
    {
        precondition(count > 0, "a batch creates at least one device")
        var one = app
        one.kinds = [kind]
        return try addVirtualDevices(
            ids: (1...count).lazy.map { n in idPrefix.map { "\($0)\(n)" } }, app: one, fixedToken: nil,
            nowMs: nowMs)
    }

    /// A device per id (nil: a generated one), each with `app` installed.
    private mutating func addVirtualDevices(
        ids: some Collection<String?>, app: AppRegistration, fixedToken: String?, nowMs: Int64
    )
        throws(RegistryError) -> [TokenEntry]
    {
        var added: [String] = []
        var entries: [TokenEntry] = []
        added.reserveCapacity(ids.count)
        entries.reserveCapacity(ids.count)
        let outbox = backendOutbox.count
        do throws(RegistryError) {
            for id in ids {
                let device = try registry.addDevice(id: id, isVirtual: true, nowMs: nowMs)
                added.append(device.id)
                entries += try installApp(
                    deviceID: device.id, bundleID: app.bundleID, environment: app.environment, kinds: app.kinds,
                    fixedToken: fixedToken, settings: app.settings, nowMs: nowMs)
            }
        } catch {
            // Undone device by device: a saved copy of the registry would make this batch
            // copy every existing device first.
            registry.discard(newDevices: added)
            backendOutbox.removeLast(backendOutbox.count - outbox)
            // Said of the batch: after the undo the emulator holds fewer than the limit.
            if case .tooManyDevices(let limit, nil) = error, ids.count > 1 {
                throw .tooManyDevices(limit: limit, batch: RegistryError.Batch(holding: registry.devices.count, asked: ids.count))
            }
            throw error
        }
        return entries
    }
}
