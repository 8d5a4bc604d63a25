import APNsCore

/// JSON shapes of the admin API. Field names here are a public contract (README, "Admin API").
enum AdminJSON {
    static func record(_ r: NotificationRecord) -> JSONValue {
        var o = JSONObject()
        o["sequence"] = .int(Int64(r.sequence))
        o["apnsId"] = .string(r.apnsID)
        o["uniqueId"] = r.uniqueID.map(JSONValue.string) ?? .null
        o["token"] = .string(r.token)
        o["topic"] = r.topic.map(JSONValue.string) ?? .null
        o["pushType"] = r.pushType.map(JSONValue.string) ?? .null
        o["priority"] = .int(Int64(r.priority))
        o["expiration"] = r.expiration.map(JSONValue.int) ?? .null
        o["collapseId"] = r.collapseID.map(JSONValue.string) ?? .null
        o["environment"] = .string(r.environment.rawValue)
        o["status"] = .int(Int64(r.status))
        o["reason"] = r.reason.map(JSONValue.string) ?? .null
        if let timestamp = r.timestampMs { o["timestamp"] = .int(timestamp) }
        o["payload"] = payload(r.payload, size: r.payloadSize)
        o["payloadSize"] = .int(Int64(r.payloadSize))
        o["receivedAt"] = .string(RFC3339.format(milliseconds: r.receivedAtMs))
        o["receivedAtMs"] = .int(r.receivedAtMs)
        o["outcome"] = .string(r.outcome.rawValue)
        o["callbacks"] = .array(r.callbacks.map(JSONValue.string))
        o["display"] = r.display.map(JSONValue.string) ?? .null
        o["stored"] = .bool(r.wasStored)
        o["deliveredAt"] = r.deliveredAtMs.map { .string(RFC3339.format(milliseconds: $0)) } ?? .null
        o["explanation"] = .string(r.fullExplanation)
        o["deviceId"] = r.deviceID.map(JSONValue.string) ?? .null
        o["bundleId"] = r.bundleID.map(JSONValue.string) ?? .null
        o["connectionId"] = .int(Int64(r.connectionID))
        o["streamId"] = .int(Int64(r.streamID))
        o["teamId"] = r.teamID.map(JSONValue.string) ?? .null
        o["keyId"] = r.keyID.map(JSONValue.string) ?? .null
        o["jwt"] = r.jwtVerified == nil && r.jwtHeader == nil ? .null : [
            "header": r.jwtHeader.map(parsedOrText) ?? .null,
            "claims": r.jwtClaims.map(parsedOrText) ?? .null,
            "verified": r.jwtVerified.map(JSONValue.bool) ?? .bool(false),
        ]
        o["headers"] = .array(r.requestHeaders.map { ["name": .string($0.name), "value": .string($0.value)] })
        return .object(o)
    }

    /// The payload as JSON when it parses; otherwise as text, so a broken payload can still
    /// be read.
    static func payload(_ bytes: [UInt8], size: Int) -> JSONValue {
        if bytes.count == size, let value = try? JSONValue.parse(bytes) { return value }
        return .string(String(decoding: bytes, as: UTF8.self))
    }

    static func parsedOrText(_ text: String) -> JSONValue {
        (try? JSONValue.parse(text)) ?? .string(text)
    }

    static func device(_ d: Device, registry: DeviceRegistry) -> JSONValue {
        var apps: [JSONValue] = []
        for app in d.apps.values.sorted(by: { $0.bundleID < $1.bundleID }) {
            var tokens = JSONObject()
            for (kind, token) in app.tokens.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                tokens[kind.rawValue] = .string(token)
            }
            apps.append([
                "bundleId": .string(app.bundleID),
                "environment": .string(app.environment.rawValue),
                "token": app.tokens[.app].map(JSONValue.string) ?? .null,
                "tokens": .object(tokens),
                "authorization": .string(app.settings.authorization.rawValue),
                "appState": .string(app.settings.appState.rawValue),
                "backgroundMode": .bool(app.settings.backgroundMode),
                "installedAt": .string(RFC3339.format(milliseconds: app.installedAtMs)),
            ])
        }
        return [
            "deviceId": .string(d.id),
            "virtual": .bool(d.isVirtual),
            "online": .bool(d.isOnline),
            "lowPowerMode": .bool(d.lowPowerMode),
            "createdAt": .string(RFC3339.format(milliseconds: d.createdAtMs)),
            "apps": .array(apps),
        ]
    }

    static func token(_ t: TokenEntry) -> JSONValue {
        var o: JSONObject = JSONObject([
            ("token", .string(t.token)), ("deviceId", .string(t.deviceID)), ("bundleId", .string(t.bundleID)),
            ("environment", .string(t.environment.rawValue)), ("kind", .string(t.kind.rawValue)),
            ("topic", .string(t.topic)),
        ])
        switch t.state {
        case .active: o["state"] = "active"
        case .unregistered(let since):
            o["state"] = "unregistered"
            o["unregisteredAt"] = .int(since)
        case .expired: o["state"] = "expired"
        }
        return .object(o)
    }
}
