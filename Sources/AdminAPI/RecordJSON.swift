import APNsCore

/// JSON shapes of the admin API. Field names here are a public contract (docs/admin-api.md).
enum AdminJSON {
    static func record(_ r: NotificationRecord) -> JSONValue {
        var o = JSONObject()
        o.append("sequence", .int(Int64(r.sequence)))
        o.append("apnsId", .string(r.apnsID))
        o.append("uniqueId", r.uniqueID.map(JSONValue.string) ?? .null)
        o.append("token", .string(r.token))
        o.append("topic", r.topic.map(JSONValue.string) ?? .null)
        o.append("pushType", r.pushType.map(JSONValue.string) ?? .null)
        o.append("priority", .int(Int64(r.priority)))
        o.append("expiration", r.expiration.map(JSONValue.int) ?? .null)
        o.append("collapseId", r.collapseID.map(JSONValue.string) ?? .null)
        o.append("environment", .string(r.environment.rawValue))
        o.append("status", .int(Int64(r.status)))
        o.append("reason", r.reason.map(JSONValue.string) ?? .null)
        if let timestamp = r.timestampMs { o.append("timestamp", .int(timestamp)) }
        let payload = payload(r.payload, size: r.payloadSize)
        o.append("payload", payload.value)
        o.append("payloadIsJSON", .bool(payload.isJSON))
        o.append("payloadSize", .int(Int64(r.payloadSize)))
        o.append("payloadTruncated", .bool(r.payloadSize > r.payload.count))
        o.append("receivedAt", .string(RFC3339.format(milliseconds: r.receivedAtMs)))
        o.append("receivedAtMs", .int(r.receivedAtMs))
        o.append("outcome", .string(r.outcome.rawValue))
        o.append("callbacks", .array(r.callbacks.map(JSONValue.string)))
        o.append("display", r.display.map(JSONValue.string) ?? .null)
        o.append("stored", .bool(r.wasStored))
        o.append("deliveredAt", r.deliveredAtMs.map { .string(RFC3339.format(milliseconds: $0)) } ?? .null)
        o.append("explanation", .string(r.fullExplanation))
        o.append("deviceId", r.deviceID.map(JSONValue.string) ?? .null)
        o.append("bundleId", r.bundleID.map(JSONValue.string) ?? .null)
        o.append("userId", r.userID.map(JSONValue.string) ?? .null)
        o.append("addressee", r.addressee.map(JSONValue.string) ?? .null)
        o.append("crossAccount", .bool(r.crossAccount))
        o.append("connectionId", .int(Int64(r.connectionID)))
        o.append("streamId", .int(Int64(r.streamID)))
        o.append("certificate", r.certificateSubject.map(JSONValue.string) ?? .null)
        o.append("teamId", r.teamID.map(JSONValue.string) ?? .null)
        o.append("keyId", r.keyID.map(JSONValue.string) ?? .null)
        o.append(
            "jwt",
            r.jwtVerified == nil && r.jwtHeader == nil
                ? .null
                : [
                    "header": r.jwtHeader.map(parsedOrText) ?? .null,
                    "claims": r.jwtClaims.map(parsedOrText) ?? .null,
                    "verified": r.jwtVerified.map(JSONValue.bool) ?? .bool(false),
                ])
        o.append("headers", .array(r.requestHeaders.map { ["name": .string($0.name), "value": .string($0.value)] }))
        o.append("headersTruncated", .bool(r.headersTruncated))
        o.append("respondedAt", r.respondedAtMs.map { .string(RFC3339.format(milliseconds: $0)) } ?? .null)
        o.append("response", response(r))
        o.append("fault", r.faultRuleID.map(JSONValue.string) ?? .null)
        if let reach = r.broadcast { o.append("broadcast", broadcast(reach)) }
        o.append("presentation", (r.presentation ?? Presentation.plain(r))?.json ?? .null)
        return .object(o)
    }

    static func notificationCenter(_ view: NotificationCenterView) -> JSONValue {
        func listed(_ item: ListedNotification) -> JSONValue {
            let r = item.record
            return [
                "apnsId": .string(r.apnsID), "bundleId": r.bundleID.map(JSONValue.string) ?? .null,
                "deliveredAt": r.deliveredAtMs.map { .string(RFC3339.format(milliseconds: $0)) } ?? .null,
                "display": r.display.map(JSONValue.string) ?? .null, "presentation": item.presentation.json,
            ]
        }
        return [
            "deviceId": .string(view.deviceID),
            "focus": view.attention.json["focus"] ?? .null,
            "scheduledSummary": view.attention.json["scheduledSummary"] ?? .null,
            "muted": .bool(view.attention.muted), "locked": .bool(view.attention.locked),
            "badges": .object(JSONObject(view.badges.map { ($0.bundleID, JSONValue.int(Int64($0.badge))) })),
            "groups": .array(
                view.groups.map { group in
                    [
                        "bundleId": .string(group.bundleID), "threadId": group.threadID.map(JSONValue.string) ?? .null,
                        "count": .int(Int64(group.notifications.count)), "summary": group.summary.map(JSONValue.string) ?? .null,
                        "notifications": .array(group.notifications.map(listed)),
                    ]
                }),
            "nextSummaryAt": view.nextSummaryMs.map { .string(RFC3339.format(milliseconds: $0)) } ?? .null,
            "waitingForSummary": .array(view.waitingForSummary.map(listed)),
            "summarized": .array(view.summarized.map(listed)),
        ]
    }

    /// A broadcast's reach: `reached` activities showed it, `outcomes` counts every subscribed
    /// activity by outcome, `deliveries` lists the first of them.
    static func broadcast(_ reach: BroadcastReach) -> JSONValue {
        var outcomes = JSONObject()
        for (outcome, count) in reach.outcomes.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            outcomes[outcome.rawValue] = .int(Int64(count))
        }
        let deliveries: [JSONValue] = reach.deliveries.map {
            [
                "deviceId": .string($0.deviceID), "activityId": $0.activityID.map(JSONValue.string) ?? .null,
                "outcome": .string($0.outcome.rawValue), "explanation": .string($0.explanation), "fromStore": .bool($0.fromStore),
            ]
        }
        return [
            "channel": .string(reach.channelID), "subscribers": .int(Int64(reach.subscribers)), "reached": .int(Int64(reach.reached)),
            "outcomes": .object(outcomes), "deliveries": .array(deliveries), "deliveriesOmitted": .int(Int64(reach.omitted)),
        ]
    }

    /// The answer as it went on the wire (status 0: the stream was reset or the connection
    /// ended by a fault rule).
    static func response(_ r: NotificationRecord) -> JSONValue {
        var headers: [JSONValue] = [
            ["name": ":status", "value": .string(String(r.status))],
            ["name": r.broadcast == nil ? "apns-id" : "apns-request-id", "value": .string(r.apnsID)],
        ]
        if let unique = r.uniqueID { headers.append(["name": "apns-unique-id", "value": .string(unique)]) }
        var body: JSONValue = .null
        if let reason = r.reason {
            headers.append(["name": "content-type", "value": "application/json"])
            var object: JSONObject = JSONObject([("reason", .string(reason))])
            if let timestamp = r.timestampMs { object["timestamp"] = .int(timestamp) }
            body = .object(object)
        }
        return [
            "status": .int(Int64(r.status)), "reason": r.reason.map(JSONValue.string) ?? .null,
            "headers": .array(headers), "body": body,
        ]
    }

    /// The payload as JSON when it parses; otherwise as text, so a broken payload can still
    /// be read (`payloadIsJSON` tells the two apart).
    static func payload(_ bytes: [UInt8], size: Int) -> (value: JSONValue, isJSON: Bool) {
        // Valid JSON is shown as sent (not parsed and rewritten), so big numbers and odd
        // escapes look exactly as the provider wrote them.
        if bytes.count == size, !bytes.isEmpty, JSONValidator.check(bytes).isValid { return (.raw(bytes), true) }
        return (.string(String(decoding: bytes, as: UTF8.self)), false)
    }

    static func parsedOrText(_ text: String) -> JSONValue {
        (try? JSONValue.parse(text)) ?? .string(text)
    }

    static func device(_ d: Device) -> JSONValue {
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
                "tokenUploadPending": .bool(app.uploadPending),
                "badge": .int(Int64(app.badge)),
                "notificationSettings": .object(app.settings.notifications.json),
                "installedAt": .string(RFC3339.format(milliseconds: app.installedAtMs)),
            ])
        }
        return [
            "deviceId": .string(d.id),
            "virtual": .bool(d.isVirtual),
            "online": .bool(d.isOnline),
            "connected": .bool(d.connectionID != nil),
            "lowPowerMode": .bool(d.lowPowerMode),
            "userId": d.userID.map(JSONValue.string) ?? .null,
            "focus": d.attention.json["focus"] ?? .null,
            "scheduledSummary": d.attention.json["scheduledSummary"] ?? .null,
            "muted": .bool(d.attention.muted),
            "locked": .bool(d.attention.locked),
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
        case .rateLimited: o["state"] = "rate-limited"
        }
        return .object(o)
    }

    static func key(_ k: ProviderKey) -> JSONValue {
        [
            "teamId": .string(k.teamID), "keyId": .string(k.keyID),
            "environment": k.environment.map { .string($0.rawValue) } ?? .null,
            "topics": k.topics.map { .array($0.sorted().map(JSONValue.string)) } ?? .null,
            "relatedKeyId": k.relatedKeyID.map(JSONValue.string) ?? .null,
            "kind": .string(k.isTopicSpecific ? "topic-specific" : "team-scoped"),
            "source": .string(k.source),
        ]
    }
}
