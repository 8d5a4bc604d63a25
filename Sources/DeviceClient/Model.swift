public import JSON

/// One app on a simulated device, with the settings the device announces for it.
public struct DeviceApp: Sendable, Equatable {
    public var bundleID: String
    public var environment: APNsEnvironment
    public var authorization: Authorization
    public var appState: AppState
    /// The app has the *Remote notifications* background mode.
    public var backgroundMode: Bool
    /// Token kinds the app registers for.
    public var kinds: [TokenKind]
    /// The ActivityAttributes types it supports (nil: it declares none here).
    public var liveActivityTypes: [String]?
    /// NSSupportsLiveActivitiesFrequentUpdates.
    public var frequentUpdates: Bool
    /// Its notification setup (categories, `foregroundPresentation`, entitlements…), as the
    /// protocol spells it; nil: the emulator's defaults.
    public var notificationSettings: JSONObject?

    public init(
        bundleID: String, environment: APNsEnvironment, authorization: Authorization = .authorized,
        appState: AppState = .background, backgroundMode: Bool = true, kinds: [TokenKind] = [.app],
        liveActivityTypes: [String]? = nil, frequentUpdates: Bool = false, notificationSettings: JSONObject? = nil
    ) {
        self.notificationSettings = notificationSettings
        self.bundleID = bundleID
        self.environment = environment
        self.authorization = authorization
        self.appState = appState
        self.backgroundMode = backgroundMode
        self.kinds = kinds
        self.liveActivityTypes = liveActivityTypes
        self.frequentUpdates = frequentUpdates
    }

    /// The app as it appears in `hello` and `install` (every setting spelled out).
    public var protocolFields: JSONObject {
        var object = JSONObject()
        object["bundleId"] = .string(bundleID)
        object["environment"] = .string(environment.rawValue)
        object["authorization"] = .string(authorization.rawValue)
        object["appState"] = .string(appState.rawValue)
        object["backgroundMode"] = .bool(backgroundMode)
        object["kinds"] = .array(kinds.map { .string($0.rawValue) })
        if let liveActivityTypes {
            object["liveActivityTypes"] = .array(liveActivityTypes.map(JSONValue.string))
            object["frequentUpdates"] = .bool(frequentUpdates)
        }
        for member in notificationSettings?.members ?? [] where object[member.key] == nil { object[member.key] = member.value }
        return object
    }
}

/// A `notification` frame, decoded. `raw` keeps the whole frame (including fields a later
/// protocol version adds).
public struct DeliveredNotification: Sendable {
    public var id: Int64
    public var apnsID: String
    public var bundleID: String
    public var token: String
    public var topic: String
    public var pushType: String
    public var priority: Int
    public var collapseID: String?
    public var payload: JSONValue
    /// App callbacks iOS runs (`willPresent`, `didReceiveRemoteNotification`, …); empty when dropped.
    public var callbacks: [String]
    /// `banner`, `notificationCenter` or `none`.
    public var display: String
    /// Why the system dropped it (nil when it was handed to the app).
    public var reason: String?
    /// It waited in the emulator's store while the device was offline.
    public var stored: Bool
    public var raw: JSONObject

    /// Decodes a `notification` frame. Only `id` is required (without it the delivery cannot
    /// be acked); other missing fields get empty values.
    public init(frame: JSONObject) throws(DeviceClientError) {
        // One pass over the members (a lookup per field would compare keys a hundred times,
        // for every notification).
        var type: String?
        var id: Int64?
        var (apnsID, bundleID, token, topic, pushType, display) = ("", "", "", "", "", "none")
        var priority = 10
        var collapseID: String?
        var reason: String?
        var payload: JSONValue = .null
        var callbacks: [String] = []
        var stored = false
        for (key, value) in frame.members {
            switch key {
            case "type": type = value.stringValue
            case "id": id = value.intValue
            case "apnsId": apnsID = value.stringValue ?? ""
            case "bundleId": bundleID = value.stringValue ?? ""
            case "token": token = value.stringValue ?? ""
            case "topic": topic = value.stringValue ?? ""
            case "pushType": pushType = value.stringValue ?? ""
            case "priority": priority = value.intValue.map { Int($0) } ?? 10
            case "collapseId": collapseID = value.stringValue
            case "payload": payload = value
            case "callbacks": callbacks = (value.arrayValue ?? []).compactMap(\.stringValue)
            case "display": display = value.stringValue ?? "none"
            case "reason": reason = value.stringValue
            case "stored": stored = value.boolValue ?? false
            default: break
            }
        }
        guard type == "notification" else {
            throw DeviceClientError(.badFrame, "not a notification frame: \(JSONValue.object(frame).serialized())")
        }
        guard let id else {
            throw DeviceClientError(.badFrame, "notification frame without a numeric \"id\": \(JSONValue.object(frame).serialized())")
        }
        self.id = id
        self.apnsID = apnsID
        self.bundleID = bundleID
        self.token = token
        self.topic = topic
        self.pushType = pushType
        self.priority = priority
        self.collapseID = collapseID
        self.payload = payload
        self.callbacks = callbacks
        self.display = display
        self.reason = reason
        self.stored = stored
        raw = frame
    }

    /// The user saw it (banner or Notification Center), so it can be tapped.
    public var isDisplayed: Bool { display != "none" }
}

/// Everything that can go wrong talking to the emulator's device listener.
public struct DeviceClientError: Error, CustomStringConvertible, Sendable {
    public enum Kind: String, Sendable {
        /// TCP connect or TLS setup/handshake failed.
        case connectFailed
        /// The emulator sent an `error` frame (see `code`, `fatal`, `frame`).
        case server
        /// No answer within the timeout.
        case timeout
        /// The connection is closed (by the peer, after an I/O error, or never opened).
        case notConnected
        /// A newer connection with the same device id took over (`replaced`).
        case replaced
        /// The emulator sent a line that is not a JSON object with a "type".
        case badFrame
        /// The emulator sent a line longer than 1 MiB; the connection was closed.
        case lineTooLong
        /// The call itself was wrong (e.g. connect while connected, an unknown app).
        case usage
    }

    public let kind: Kind
    public let message: String
    /// The server's error code (`bad_request`, `unknown_type`, …) for `.server`.
    public let code: String?
    /// The server said it closes the connection after this error.
    public let fatal: Bool
    /// The server's `error` frame, for `.server`.
    public let frame: JSONObject?

    public init(_ kind: Kind, _ message: String, code: String? = nil, fatal: Bool = false, frame: JSONObject? = nil) {
        self.kind = kind
        self.message = message
        self.code = code
        self.fatal = fatal
        self.frame = frame
    }

    /// Builds the error for a server `error` frame.
    public init(serverFrame frame: JSONObject) {
        let code = frame["code"]?.stringValue ?? "unknown"
        self.init(
            .server, frame["message"]?.stringValue ?? "", code: code, fatal: frame["fatal"]?.boolValue ?? false,
            frame: frame)
    }

    public var description: String {
        switch kind {
        case .server:
            return "emulator error \(code ?? "unknown")\(fatal ? " (fatal)" : ""): \(message)"
        default:
            return message
        }
    }
}

/// A device → emulator frame (besides `hello`, which `SimulatedDevice` builds itself).
public enum DeviceRequest: Sendable {
    case app(bundleID: String, appState: AppState? = nil, authorization: Authorization? = nil, backgroundMode: Bool? = nil)
    case device(lowPowerMode: Bool)
    case install(DeviceApp)
    case uninstall(bundleID: String)
    case rotate(bundleID: String)
    case erase
    case restore(fromDeviceID: String)
    case tap(apnsID: String)
    /// The user acts on a notification: `default`, `dismiss` or an action identifier, with
    /// the typed text of a text-input action.
    case respond(apnsID: String, action: String, text: String? = nil)
    /// The device's switches: `focus`, `scheduledSummary`, `muted`, `locked` (answer: `deviceUpdated`).
    case switches(JSONObject)
    /// The app's notification setup fields and `badge` (answer: `appUpdated`).
    case notificationSettings(bundleID: String, JSONObject)
    /// An account logs in on the device (the emulator calls the apps' `bind` hooks).
    case login(userID: String)
    case logout
    case ping
    case ack(id: Int64)
    /// The app declares its Live Activity types (push-to-start tokens come as `activity` frames).
    case liveActivities(bundleID: String, types: [String], frequentUpdates: Bool = false)
    /// `Activity.request`: with token push (`channel` nil, `pushToken` true), on a channel,
    /// or local only.
    case startActivity(
        bundleID: String, attributesType: String, attributes: JSONValue, contentState: JSONValue, channel: String? = nil,
        pushToken: Bool = true)
    /// `Activity.end`, with optional final content and a dismissal date (seconds since 1970).
    case endActivity(activityID: String, contentState: JSONValue? = nil, dismissalDate: Double? = nil)
    /// The user removes it from the Lock Screen.
    case dismissActivity(activityID: String)
    /// Asks for the device's activities (answer: `activities`).
    case activities

    /// The frame's `type`.
    var type: String {
        switch self {
        case .app: "app"
        case .device: "device"
        case .install: "install"
        case .uninstall: "uninstall"
        case .rotate: "rotate"
        case .erase: "erase"
        case .restore: "restore"
        case .tap: "tap"
        case .respond: "respond"
        case .switches: "device"
        case .notificationSettings: "app"
        case .login: "login"
        case .logout: "logout"
        case .ping: "ping"
        case .ack: "ack"
        case .liveActivities: "liveActivities"
        case .startActivity: "startActivity"
        case .endActivity: "endActivity"
        case .dismissActivity: "dismissActivity"
        case .activities: "activities"
        }
    }

    /// The frame as sent on the wire (without the line end): `type` first, then the fields.
    public var frame: JSONValue {
        var object = JSONObject()
        object["type"] = .string(type)
        switch self {
        case .app(let bundleID, let appState, let authorization, let backgroundMode):
            object["bundleId"] = .string(bundleID)
            if let appState { object["appState"] = .string(appState.rawValue) }
            if let authorization { object["authorization"] = .string(authorization.rawValue) }
            if let backgroundMode { object["backgroundMode"] = .bool(backgroundMode) }
        case .device(let lowPowerMode): object["lowPowerMode"] = .bool(lowPowerMode)
        case .install(let app): object.members.append(contentsOf: app.protocolFields.members)
        case .uninstall(let bundleID), .rotate(let bundleID): object["bundleId"] = .string(bundleID)
        case .restore(let fromDeviceID): object["fromDeviceId"] = .string(fromDeviceID)
        case .tap(let apnsID): object["apnsId"] = .string(apnsID)
        case .respond(let apnsID, let action, let text):
            object["apnsId"] = .string(apnsID)
            object["action"] = .string(action)
            if let text { object["text"] = .string(text) }
        case .switches(let fields): object.members.append(contentsOf: fields.members.filter { $0.key != "type" })
        case .notificationSettings(let bundleID, let fields):
            object["bundleId"] = .string(bundleID)
            object.members.append(contentsOf: fields.members.filter { $0.key != "type" && $0.key != "bundleId" })
        case .ack(let id): object["id"] = .int(id)
        case .login(let userID): object["userId"] = .string(userID)
        case .erase, .ping, .logout, .activities: break
        case .liveActivities(let bundleID, let types, let frequentUpdates):
            object["bundleId"] = .string(bundleID)
            object["liveActivityTypes"] = .array(types.map(JSONValue.string))
            object["frequentUpdates"] = .bool(frequentUpdates)
        case .startActivity(let bundleID, let attributesType, let attributes, let contentState, let channel, let pushToken):
            object["bundleId"] = .string(bundleID)
            object["attributesType"] = .string(attributesType)
            object["attributes"] = attributes
            object["contentState"] = contentState
            if let channel { object["channel"] = .string(channel) } else { object["pushToken"] = .bool(pushToken) }
        case .endActivity(let activityID, let contentState, let dismissalDate):
            object["activityId"] = .string(activityID)
            if let contentState { object["contentState"] = contentState }
            if let dismissalDate { object["dismissalDate"] = .double(dismissalDate) }
        case .dismissActivity(let activityID): object["activityId"] = .string(activityID)
        }
        return .object(object)
    }
}
