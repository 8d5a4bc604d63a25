public import JSON

/// One Live Activity on a device, as `GET /api/v1/devices/{id}/activities` lists it.
public struct ActivityInfo: Sendable, Equatable {
    /// ActivityKit's `Activity.id` (an uppercase UUID).
    public var activityID: String
    public var bundleID: String
    /// The ActivityAttributes type's name (`DeliveryAttributes`).
    public var attributesType: String
    /// The static data, fixed at the start (an object).
    public var attributes: JSONValue
    /// The dynamic data now shown (an object).
    public var contentState: JSONValue
    /// `active`, `stale`, `ended` or `dismissed`, at the emulator's time of the listing.
    public var state: String
    /// The update token (started with token push); nil otherwise, and once it ended.
    public var pushToken: String?
    /// The broadcast channel it subscribes to (started with channel push).
    public var channel: String?
    public var relevanceScore: Double?
    /// RFC 3339 times (nil: none).
    public var staleDate: String?
    public var dismissalDate: String?
    public var startedAt: String?
    public var endedAt: String?
    /// Updates shown since the start.
    public var updates: Int
    /// `app` (`Activity.request`) or `push` (a push to the push-to-start token).
    public var startedBy: String
    /// The whole JSON object, for fields not named here.
    public var json: JSONValue

    public init(_ json: JSONValue) {
        activityID = json["activityId"]?.stringValue ?? ""
        bundleID = json["bundleId"]?.stringValue ?? ""
        attributesType = json["attributesType"]?.stringValue ?? ""
        attributes = json["attributes"] ?? .object(JSONObject())
        contentState = json["contentState"] ?? .object(JSONObject())
        state = json["state"]?.stringValue ?? ""
        pushToken = json["pushToken"]?.stringValue
        channel = json["channel"]?.stringValue
        relevanceScore = json["relevanceScore"]?.numberValue
        staleDate = json["staleDate"]?.stringValue
        dismissalDate = json["dismissalDate"]?.stringValue
        startedAt = json["startedAt"]?.stringValue
        endedAt = json["endedAt"]?.stringValue
        updates = Int(json["updates"]?.intValue ?? 0)
        startedBy = json["startedBy"]?.stringValue ?? ""
        self.json = json
    }
}

/// An app's Live Activity declaration on a device: its ActivityAttributes types, each with
/// the push-to-start token the system issued for it.
public struct LiveActivityApp: Sendable, Equatable {
    public var bundleID: String
    public var types: [String]
    /// NSSupportsLiveActivitiesFrequentUpdates (a larger budget of priority-10 updates).
    public var frequentUpdates: Bool
    /// Type → push-to-start token.
    public var pushToStartTokens: [String: String]

    public init(_ json: JSONValue) {
        bundleID = json["bundleId"]?.stringValue ?? ""
        types = json["types"]?.arrayValue?.compactMap(\.stringValue) ?? []
        frequentUpdates = json["frequentUpdates"]?.boolValue ?? false
        var tokens: [String: String] = [:]
        for (type, token) in json["pushToStartTokens"]?.objectValue ?? JSONObject() { tokens[type] = token.stringValue }
        pushToStartTokens = tokens
    }
}

/// How an activity the app starts takes its updates from a server.
public enum ActivityUpdates: Sendable, Equatable {
    /// By push to an update token the system issues (ActivityKit's `pushType: .token`).
    case token
    /// By broadcast on this channel (`pushType: .channel(id)`).
    case channel(String)
    /// Only from the app itself (`pushType: nil`).
    case none
}

/// Live Activities on virtual devices: what an app declares, what it starts, what the user
/// dismisses, and the activities as the device shows them.
extension EmulatorAdminClient {
    /// Declares the app's ActivityAttributes types on the device (replacing the earlier
    /// declaration); returns the push-to-start token of each type.
    @discardableResult
    public func declareLiveActivities(
        deviceID: String, bundleID: String, types: [String], frequentUpdates: Bool = false
    ) throws(EmulatorAdminError) -> [String: String] {
        let body: JSONValue = ["types": .array(types.map(JSONValue.string)), "frequentUpdates": .bool(frequentUpdates)]
        let reply = try http.json("PUT", appPath(deviceID, bundleID) + "/live-activities", body: body)
        return LiveActivityApp(reply).pushToStartTokens
    }

    /// The device's Live Activities, dismissed ones included, oldest first.
    public func activities(deviceID: String) throws(EmulatorAdminError) -> [ActivityInfo] {
        (try http.json("GET", "/api/v1/devices/\(deviceID.queryEncoded)/activities")["activities"]?.arrayValue ?? []).map(ActivityInfo.init)
    }

    /// One activity of the device; nil when it has none with that id.
    public func activity(deviceID: String, activityID: String) throws(EmulatorAdminError) -> ActivityInfo? {
        try activities(deviceID: deviceID).first { $0.activityID == activityID }
    }

    /// The apps of the device that declare Live Activities, with their push-to-start tokens.
    public func liveActivityApps(deviceID: String) throws(EmulatorAdminError) -> [LiveActivityApp] {
        (try http.json("GET", "/api/v1/devices/\(deviceID.queryEncoded)/activities")["apps"]?.arrayValue ?? []).map(LiveActivityApp.init)
    }

    /// The app starts an activity (`Activity.request`) of a declared type, taking its updates
    /// by token push (the default), on a channel of its app, or from nobody.
    @discardableResult
    public func startActivity(
        deviceID: String, bundleID: String, attributesType: String, attributes: JSONValue = .object(JSONObject()),
        contentState: JSONValue = .object(JSONObject()), updates: ActivityUpdates = .token
    ) throws(EmulatorAdminError) -> ActivityInfo {
        var body = JSONObject([("attributesType", .string(attributesType)), ("attributes", attributes), ("contentState", contentState)])
        switch updates {
        case .token: body["pushToken"] = true
        case .channel(let id): body["channel"] = .string(id)
        case .none: body["pushToken"] = false
        }
        return ActivityInfo(try http.json("POST", appPath(deviceID, bundleID) + "/activities", body: .object(body)))
    }

    /// The app ends the activity (`Activity.end`), with final content when given; it leaves the
    /// Lock Screen at `dismissalDate` (seconds since 1970; in the past: at once), by default up
    /// to four hours on. A 409 says why an activity cannot end (it has already).
    @discardableResult
    public func endActivity(
        deviceID: String, activityID: String, contentState: JSONValue? = nil, dismissalDate: Double? = nil
    ) throws(EmulatorAdminError) -> ActivityInfo {
        var body = JSONObject()
        if let contentState { body["contentState"] = contentState }
        if let dismissalDate { body["dismissalDate"] = .double(dismissalDate) }
        let path = "/api/v1/devices/\(deviceID.queryEncoded)/activities/\(activityID.queryEncoded)/end"
        return ActivityInfo(try http.json("POST", path, body: .object(body)))
    }

    /// The system gives the activity a new update token; the old one leads nowhere from now on.
    @discardableResult
    public func rotateActivityToken(deviceID: String, activityID: String) throws(EmulatorAdminError) -> ActivityInfo {
        let path = "/api/v1/devices/\(deviceID.queryEncoded)/activities/\(activityID.queryEncoded)/rotate-token"
        return ActivityInfo(try http.json("POST", path))
    }

    /// The system gives the app a new push-to-start token for the type; returns the app's tokens.
    @discardableResult
    public func rotatePushToStartToken(
        deviceID: String, bundleID: String, attributesType: String
    ) throws(EmulatorAdminError) -> [String: String] {
        let path = appPath(deviceID, bundleID) + "/live-activities/\(attributesType.queryEncoded)/rotate-token"
        return LiveActivityApp(try http.json("POST", path)).pushToStartTokens
    }

    /// The user removes the activity from the Lock Screen (a running one ends with it).
    public func dismissActivity(deviceID: String, activityID: String) throws(EmulatorAdminError) {
        _ = try http.json("DELETE", "/api/v1/devices/\(deviceID.queryEncoded)/activities/\(activityID.queryEncoded)")
    }

    private func appPath(_ deviceID: String, _ bundleID: String) -> String {
        "/api/v1/devices/\(deviceID.queryEncoded)/apps/\(bundleID.queryEncoded)"
    }
}
