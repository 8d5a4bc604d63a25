import APNsCore
import HTTP1Server

/// Live Activities on a device: which ActivityAttributes types an app declares (each with a
/// push-to-start token), starting one from the app, listing them, the user dismissing one.
struct LiveActivityRoutes: AdminResource {
    unowned let api: AdminService

    func addRoutes(to r: inout AdminRouter) {
        r.add(
            "PUT", "/api/v1/devices/{deviceId}/apps/{bundleId}/live-activities",
            "the app's Live Activity types: {\"types\": [\"DeliveryAttributes\"], \"frequentUpdates\": false}"
        ) { req, p, _ in
            let (deviceID, bundleID) = (try Self.deviceID(p), try Self.bundleID(p))
            let body = try req.jsonObject()
            guard let list = body["types"]?.arrayValue, let types = Optional(list.compactMap(\.stringValue)), types.count == list.count
            else { throw AdminError(400, "\"types\" must be a list of ActivityAttributes type names") }
            let frequent = body["frequentUpdates"]?.boolValue ?? false
            let outcome = state.withWorld { world -> Result<JSONValue, AdminError> in
                guard let app = world.registry.devices[deviceID]?.apps[bundleID] else {
                    return .failure(AdminError(404, "no app \(bundleID) on device \(deviceID)"))
                }
                do {
                    try world.liveActivities.declare(
                        deviceID: deviceID, bundleID: bundleID, environment: app.environment, types: types, frequentUpdates: frequent)
                } catch {
                    return .failure(AdminError(400, "\(error)"))
                }
                return .success(Self.appJSON(world, deviceID: deviceID, bundleID: bundleID))
            }
            return .json(200, try outcome.get())
        }
        r.add("GET", "/api/v1/devices/{deviceId}/activities", "the device's Live Activities and push-to-start tokens") { _, p, _ in
            let deviceID = try Self.deviceID(p)
            let now = self.now
            let json = state.readWorld { world -> JSONValue? in
                guard world.registry.devices[deviceID] != nil else { return nil }
                return Self.deviceJSON(world, deviceID: deviceID, nowMs: now)
            }
            guard let json else { throw AdminError(404, "no device with id '\(deviceID)'") }
            return .json(200, json)
        }
        r.add(
            "POST", "/api/v1/devices/{deviceId}/apps/{bundleId}/activities",
            "the app starts a Live Activity: {\"attributesType\", \"attributes\", \"contentState\", \"pushToken\": true | \"channel\": ID}"
        ) { req, p, _ in
            let (deviceID, bundleID) = (try Self.deviceID(p), try Self.bundleID(p))
            let body = try req.jsonObject()
            guard let type = body["attributesType"]?.stringValue else { throw AdminError(400, "\"attributesType\" is required") }
            let updates: LiveActivityUpdates
            if let channel = body["channel"]?.stringValue {
                updates = .channel(channel)
            } else {
                updates = body["pushToken"]?.boolValue == false ? .none : .token
            }
            let now = self.now
            let outcome = state.withWorld { world -> Result<JSONValue, AdminError> in
                guard let app = world.registry.devices[deviceID]?.apps[bundleID] else {
                    return .failure(AdminError(404, "no app \(bundleID) on device \(deviceID)"))
                }
                let live = Set(world.channels.liveChannels(bundleID: bundleID, environment: app.environment).map(\.id))
                do {
                    let receipt = try world.liveActivities.startByApp(
                        deviceID: deviceID, bundleID: bundleID, environment: app.environment, attributesType: type,
                        attributes: body["attributes"] ?? .object(JSONObject()), contentState: body["contentState"] ?? .object(JSONObject()),
                        updates: updates, nowMs: now, channelExists: { live.contains($0) })
                    guard let id = receipt.activityID, let activity = world.liveActivities.book(deviceID: deviceID)?.activity(id) else {
                        return .failure(AdminError(500, "the activity was not kept"))
                    }
                    return .success(Self.json(activity, nowMs: now))
                } catch {
                    return .failure(AdminError(400, "\(error)"))
                }
            }
            return .json(201, try outcome.get())
        }
        r.add("DELETE", "/api/v1/devices/{deviceId}/activities/{activityId}", "the user dismisses a Live Activity") { _, p, _ in
            let deviceID = try Self.deviceID(p)
            let activityID = p["activityId"] ?? ""
            let now = self.now
            let outcome = state.withWorld { world -> Result<Void, AdminError> in
                do {
                    _ = try world.liveActivities.dismiss(deviceID: deviceID, activityID: activityID, nowMs: now)
                    return .success(())
                } catch {
                    return .failure(AdminError(404, "\(error)"))
                }
            }
            try outcome.get()
            return .json(200, ["activityId": .string(activityID), "state": "dismissed"])
        }
    }

    static func appJSON(_ world: World, deviceID: String, bundleID: String) -> JSONValue {
        let app = world.liveActivities.book(deviceID: deviceID)?.apps[bundleID]
        var tokens = JSONObject()
        for type in app?.attributesTypes ?? [] { tokens.members.append((type, app?.pushToStartTokens[type].map(JSONValue.string) ?? .null)) }
        return [
            "bundleId": .string(bundleID), "types": .array((app?.attributesTypes ?? []).map(JSONValue.string)),
            "frequentUpdates": .bool(app?.frequentUpdates ?? false), "pushToStartTokens": .object(tokens),
        ]
    }

    static func deviceJSON(_ world: World, deviceID: String, nowMs: Int64) -> JSONValue {
        let book = world.liveActivities.book(deviceID: deviceID)
        let apps = (book?.apps.keys.sorted() ?? []).map { appJSON(world, deviceID: deviceID, bundleID: $0) }
        let activities = (book?.activities(includeDismissed: true) ?? []).map { json($0, nowMs: nowMs) }
        return ["deviceId": .string(deviceID), "apps": .array(apps), "activities": .array(activities)]
    }

    static func json(_ activity: LiveActivity, nowMs: Int64) -> JSONValue {
        func time(_ ms: Int64?) -> JSONValue { ms.map { .string(RFC3339.format(milliseconds: $0)) } ?? .null }
        return [
            "activityId": .string(activity.activityID), "bundleId": .string(activity.bundleID),
            "attributesType": .string(activity.attributesType), "attributes": activity.attributes,
            "contentState": activity.contentState, "state": .string(activity.state(atMs: nowMs).rawValue),
            "pushToken": activity.pushToken.map(JSONValue.string) ?? .null, "channel": activity.channelID.map(JSONValue.string) ?? .null,
            "relevanceScore": activity.relevanceScore.map(JSONValue.double) ?? .null, "staleDate": time(activity.staleDateMs),
            "dismissalDate": time(activity.dismissalDateMs), "startedAt": time(activity.startedAtMs), "endedAt": time(activity.endedAtMs),
            "updates": .int(Int64(activity.updates)), "startedBy": .string(activity.startedBy.rawValue),
        ]
    }
}
