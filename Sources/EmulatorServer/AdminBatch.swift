import APNsCore

/// `POST /api/v1/devices/batch`: many virtual devices in one call (load tests).
extension AdminAPI {
    func addBatchRoutes(_ r: inout AdminRouter) {
        r.add("POST", "/api/v1/devices/batch", "create many virtual devices with the same app") { [unowned self] req, _, _ in
            try createDevices(req)
        }
    }

    private func createDevices(_ request: AdminRequest) throws -> AdminResponse {
        let body = try request.jsonObject()
        guard let count = body["count"]?.intValue, (1...Int64(World.maxBatchDevices)).contains(count) else {
            throw AdminError(400, "\"count\" must be a whole number from 1 to \(World.maxBatchDevices) (call again for more)")
        }
        if body["token"] != nil { throw AdminError(400, "\"token\" cannot be pinned for a batch") }
        if body["deviceId"] != nil { throw AdminError(400, "a batch takes \"idPrefix\" (ids PREFIX1…PREFIXN), not \"deviceId\"") }
        var prefix: String?
        if let value = body["idPrefix"] {
            guard let text = value.stringValue, DeviceRegistry.isValidDeviceID(text + String(count)) else {
                throw AdminError(400, "\"idPrefix\": with the number after it, \(DeviceRegistry.deviceIDRule)")
            }
            prefix = text
        }
        let app = try appRequest(body)
        let registration = AppRegistration(bundleID: app.bundleID, environment: app.environment, settings: app.settings, kinds: [app.kind])
        let now = self.now
        let entries: [TokenEntry]
        do {
            entries = try state.withWorld { world throws(RegistryError) in
                try world.addVirtualDevices(count: Int(count), app: registration, kind: app.kind, idPrefix: prefix, nowMs: now)
            }
        } catch {
            throw AdminError(Self.status(for: error), error.description)
        }
        emulator.log("admin: \(entries.count) virtual devices with \(app.bundleID) (\(app.environment.rawValue))")
        // Built as bytes directly: 100,000 devices are about 11 MB of JSON.
        var out: [UInt8] = []
        out.reserveCapacity(entries.count * (entries.first.map { $0.token.utf8.count + $0.deviceID.utf8.count + 30 } ?? 0) + 64)
        out.append(contentsOf: #"{"bundleId":"#.utf8)
        JSONValue.string(app.bundleID).append(to: &out)
        out.append(contentsOf: #","environment":"#.utf8)
        JSONValue.string(app.environment.rawValue).append(to: &out)
        out.append(contentsOf: #","devices":["#.utf8)
        for (index, entry) in entries.enumerated() {
            if index > 0 { out.append(0x2C) }
            out.append(contentsOf: #"{"deviceId":"#.utf8)
            JSONValue.string(entry.deviceID).append(to: &out)
            out.append(contentsOf: #","token":""#.utf8)
            out.append(contentsOf: entry.token.utf8)
            out.append(contentsOf: #""}"#.utf8)
        }
        out.append(contentsOf: "]}".utf8)
        out.append(0x0A)
        return AdminResponse(status: 201, headers: [("Content-Type", "application/json")], body: out)
    }
}
