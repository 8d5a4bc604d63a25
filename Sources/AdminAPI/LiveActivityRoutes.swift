import APNsCore
import HTTP1Server

/// Live Activities on a device: which ActivityAttributes types an app declares (each with a
/// push-to-start token), starting one from the app, listing them, the user dismissing one.
struct LiveActivityRoutes: AdminResource {
    unowned let api: AdminService

    func addRoutes(to r: inout AdminRouter) {
        r.add(
            "PUT", "/api/v1/devices/{deviceId}/apps/{bundleId}/live-activities",
            "the app's Live Activity types: {\"types\": [\"DeliveryAttributes\"], \"frequentUpdates\": false, \"frequentUpdatesEnabled\"?: the user's switch}"
        ) { req, p, _ in
            let (deviceID, bundleID) = (try Self.deviceID(p), try Self.bundleID(p))
            let body = try req.jsonObject()
            try body.refuseUnknownFields(["types", "frequentUpdates", "frequentUpdatesEnabled"])
            guard let list = body["types"]?.arrayValue, let types = Optional(list.compactMap(\.stringValue)), types.count == list.count
            else { throw AdminError(400, "\"types\" must be a list of ActivityAttributes type names") }
            let frequent = try Self.bool(body, "frequentUpdates") ?? false
            let enabled = try Self.bool(body, "frequentUpdatesEnabled")
            let frames = try deviceCall { world, now throws(DeviceRequestError) in
                try world.declareLiveActivities(
                    deviceID: deviceID, bundleID: bundleID, types: types, frequentUpdates: frequent, frequentUpdatesEnabled: enabled, nowMs: now)
            }
            host.dispatch(frames)
            return .json(200, state.readWorld { Self.appJSON($0, deviceID: deviceID, bundleID: bundleID) })
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
            try body.refuseUnknownFields(["attributesType", "attributes", "contentState", "pushToken", "channel"])
            guard let type = try Self.string(body, "attributesType") else { throw AdminError(400, "\"attributesType\" is required") }
            let (channel, pushToken) = (try Self.string(body, "channel"), try Self.bool(body, "pushToken"))
            let updates: LiveActivityUpdates
            if let channel {
                guard pushToken == nil else { throw AdminError(400, "give \"pushToken\" or \"channel\", not both") }
                updates = .channel(channel)
            } else {
                updates = pushToken == false ? .none : .token
            }
            let (activity, frames) = try deviceCall { world, now throws(DeviceRequestError) in
                try world.startLiveActivity(
                    deviceID: deviceID, bundleID: bundleID, attributesType: type, attributes: body["attributes"] ?? .object(JSONObject()),
                    contentState: body["contentState"] ?? .object(JSONObject()), updates: updates, nowMs: now)
            }
            host.dispatch(frames)
            return .json(201, activity.json(atMs: self.now))
        }
        r.add(
            "POST", "/api/v1/devices/{deviceId}/activities/{activityId}/end",
            "the app ends a Live Activity: {\"contentState\"?, \"dismissalDate\"?: seconds since 1970 (in the past: removed at once)}"
        ) { req, p, _ in
            let deviceID = try Self.deviceID(p)
            let activityID = p["activityId"] ?? ""
            let body = try req.jsonObject()
            try body.refuseUnknownFields(["contentState", "dismissalDate"])
            var dismissalMs: Int64?
            if let value = body["dismissalDate"], value != .null {
                guard let ms = value.numberValue.flatMap(millisecondsSince1970(seconds:)) else {
                    throw AdminError(400, "\"dismissalDate\" must be seconds since 1970, up to the end of year 9999")
                }
                dismissalMs = ms
            }
            let (receipt, frames) = try deviceCall { world, now throws(DeviceRequestError) in
                try world.endLiveActivity(
                    deviceID: deviceID, activityID: activityID, contentState: body["contentState"], dismissalDateMs: dismissalMs, nowMs: now)
            }
            host.dispatch(frames)
            if let why = receipt.outcome.explanation { throw AdminError(409, why) }
            return .json(200, try Self.activity(deviceID: deviceID, activityID: activityID, state: state, nowMs: self.now))
        }
        r.add(
            "POST", "/api/v1/devices/{deviceId}/activities/{activityId}/rotate-token",
            "the system issues the activity a new update token (the old one ends)"
        ) { req, p, _ in
            try req.refuseBody()
            let deviceID = try Self.deviceID(p)
            let activityID = p["activityId"] ?? ""
            let (_, frames) = try deviceCall { world, now throws(DeviceRequestError) in
                try world.rotateLiveActivityToken(deviceID: deviceID, activityID: activityID, nowMs: now)
            }
            host.dispatch(frames)
            return .json(200, try Self.activity(deviceID: deviceID, activityID: activityID, state: state, nowMs: self.now))
        }
        r.add(
            "POST", "/api/v1/devices/{deviceId}/apps/{bundleId}/live-activities/{attributesType}/rotate-token",
            "the system issues the app a new push-to-start token for the type (the old one ends)"
        ) { req, p, _ in
            try req.refuseBody()
            let (deviceID, bundleID) = (try Self.deviceID(p), try Self.bundleID(p))
            let type = p["attributesType"] ?? ""
            let (_, frames) = try deviceCall { world, now throws(DeviceRequestError) in
                try world.rotateLiveActivityToken(deviceID: deviceID, bundleID: bundleID, attributesType: type, nowMs: now)
            }
            host.dispatch(frames)
            return .json(200, state.readWorld { Self.appJSON($0, deviceID: deviceID, bundleID: bundleID) })
        }
        r.add("DELETE", "/api/v1/devices/{deviceId}/activities/{activityId}", "the user dismisses a Live Activity") { _, p, _ in
            let deviceID = try Self.deviceID(p)
            let activityID = p["activityId"] ?? ""
            let frames = try deviceCall { world, now throws(DeviceRequestError) in
                try world.dismissLiveActivity(deviceID: deviceID, activityID: activityID, nowMs: now)
            }
            host.dispatch(frames)
            return .json(200, ["activityId": .string(activityID), "state": "dismissed"])
        }
    }

    static func appJSON(_ world: World, deviceID: String, bundleID: String) -> JSONValue {
        let app = world.liveActivities.book(deviceID: deviceID)?.apps[bundleID]
        var tokens = JSONObject()
        for type in app?.attributesTypes ?? [] { tokens.members.append((type, app?.pushToStartTokens[type].map(JSONValue.string) ?? .null)) }
        return [
            "bundleId": .string(bundleID), "types": .array((app?.attributesTypes ?? []).map(JSONValue.string)),
            "frequentUpdates": .bool(app?.frequentUpdates ?? false), "frequentUpdatesEnabled": .bool(app?.frequentUpdatesEnabled ?? true),
            "pushToStartTokens": .object(tokens),
        ]
    }

    static func deviceJSON(_ world: World, deviceID: String, nowMs: Int64) -> JSONValue {
        let book = world.liveActivities.book(deviceID: deviceID)
        let apps = (book?.apps.keys.sorted() ?? []).map { appJSON(world, deviceID: deviceID, bundleID: $0) }
        let activities = (book?.activities(includeDismissed: true) ?? []).map { $0.json(atMs: nowMs) }
        return ["deviceId": .string(deviceID), "apps": .array(apps), "activities": .array(activities)]
    }

    static func activity(deviceID: String, activityID: String, state: EmulatorState, nowMs: Int64) throws -> JSONValue {
        guard let activity = state.readWorld({ $0.liveActivities.book(deviceID: deviceID)?.activity(activityID) }) else {
            throw AdminError(404, "no Live Activity with id '\(activityID)' on device \(deviceID)")
        }
        return activity.json(atMs: nowMs)
    }
}
