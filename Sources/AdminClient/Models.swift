public import JSON
import Foundation

/// Sandbox or production: which APNs a token belongs to.
public enum PushEnvironment: String, Sendable, CaseIterable {
    case sandbox, production
}

/// One push the emulator received, as the inspection API reports it: what the provider sent,
/// what it was answered, and what the device did with it. Field names follow the admin API's
/// JSON (`GET /api/v1/notifications`).
public struct PushRecord: Sendable, CustomStringConvertible {
    public var apnsID: String
    /// `apns-unique-id` (sandbox only).
    public var uniqueID: String?
    public var token: String
    public var topic: String?
    public var pushType: String?
    public var priority: Int
    public var collapseID: String?
    public var environment: PushEnvironment
    /// The HTTP status the provider was answered (0 when a fault reset the stream).
    public var status: Int
    /// Apple's reason string for a rejection (`BadDeviceToken`, `Unregistered`, …).
    public var reason: String?
    /// `rejected`, `pending`, `stored`, `delivered`, `expired`, `coalesced`, `throttled`,
    /// `deferred` or `dropped-by-system`.
    public var outcome: String
    /// The app callbacks that fired on the device (`didReceiveRemoteNotification`, …).
    public var callbacks: [String]
    /// What the user saw: `banner`, `notificationCenter`, `none`, … (nil before delivery).
    public var display: String?
    public var deviceID: String?
    public var bundleID: String?
    /// The account logged in on the device when it was delivered (nil: nobody).
    public var userID: String?
    /// Whom the payload names (the backend's `addresseePointer`), when it names anyone.
    public var addressee: String?
    /// Delivered where another account than the addressee was logged in.
    public var crossAccount: Bool
    /// Why the emulator answered and delivered as it did, in words.
    public var explanation: String
    /// The payload exactly as sent (JSON text when it was JSON).
    public var payload: String
    public var receivedAtMs: Int64
    /// How it was presented (`presentation` of the admin API: the text read, actions,
    /// interruption level, sound, badge, the user's response…); nil until it was shown.
    public var presentation: JSONValue?
    /// The record as the admin API sent it, for fields this type does not name.
    public var json: String

    init(_ value: JSONValue) {
        presentation = value["presentation"].flatMap { $0 == .null ? nil : $0 }
        apnsID = value["apnsId"]?.stringValue ?? ""
        uniqueID = value["uniqueId"]?.stringValue
        token = value["token"]?.stringValue ?? ""
        topic = value["topic"]?.stringValue
        pushType = value["pushType"]?.stringValue
        priority = Int(value["priority"]?.intValue ?? 10)
        collapseID = value["collapseId"]?.stringValue
        environment = PushEnvironment(rawValue: value["environment"]?.stringValue ?? "") ?? .sandbox
        status = Int(value["status"]?.intValue ?? 0)
        reason = value["reason"]?.stringValue
        outcome = value["outcome"]?.stringValue ?? ""
        callbacks = value["callbacks"]?.arrayValue?.compactMap(\.stringValue) ?? []
        display = value["display"]?.stringValue
        deviceID = value["deviceId"]?.stringValue
        bundleID = value["bundleId"]?.stringValue
        userID = value["userId"]?.stringValue
        addressee = value["addressee"]?.stringValue
        crossAccount = value["crossAccount"]?.boolValue ?? false
        explanation = value["explanation"]?.stringValue ?? ""
        let sentPayload = value["payload"] ?? .null
        payload = value["payloadIsJSON"]?.boolValue == true ? sentPayload.serialized() : (sentPayload.stringValue ?? "")
        receivedAtMs = value["receivedAtMs"]?.intValue ?? 0
        json = value.serialized()
    }

    /// The payload decoded as `type` (e.g. a struct mirroring your `aps` dictionary).
    public func payload<T: Decodable>(as type: T.Type) throws -> T {
        try JSONDecoder().decode(type, from: Data(payload.utf8))
    }

    public var description: String {
        "\(status)\(reason.map { " \($0)" } ?? "") \(pushType ?? "-") \(topic ?? "-") → \(token.prefix(12))… [\(outcome)]"
    }
}

/// Which records to look at: every field given must match (the admin API's query filters).
public struct PushFilter: Sendable, Equatable {
    public var token: String?
    public var topic: String?
    public var pushType: String?
    public var status: Int?
    public var reason: String?
    public var environment: PushEnvironment?
    /// See `PushRecord.outcome`; `"delivered"` waits until the device has the notification.
    public var outcome: String?
    public var deviceID: String?
    public var apnsID: String?
    /// Only records received at or after this time (ms since the epoch).
    public var sinceMs: Int64?

    public init(
        token: String? = nil, topic: String? = nil, pushType: String? = nil, status: Int? = nil,
        reason: String? = nil, environment: PushEnvironment? = nil, outcome: String? = nil,
        deviceID: String? = nil, apnsID: String? = nil, sinceMs: Int64? = nil
    ) {
        self.token = token
        self.topic = topic
        self.pushType = pushType
        self.status = status
        self.reason = reason
        self.environment = environment
        self.outcome = outcome
        self.deviceID = deviceID
        self.apnsID = apnsID
        self.sinceMs = sinceMs
    }

    var queryItems: [(String, String)] {
        var items: [(String, String)] = []
        func add(_ name: String, _ value: String?) { if let value { items.append((name, value)) } }
        add("token", token)
        add("topic", topic)
        add("pushType", pushType)
        add("status", status.map(String.init))
        add("reason", reason)
        add("environment", environment?.rawValue)
        add("outcome", outcome)
        add("deviceId", deviceID)
        add("apnsId", apnsID)
        add("since", sinceMs.map(String.init))
        return items
    }
}

/// A device the emulator knows, with its apps and their tokens.
public struct DeviceInfo: Sendable {
    public struct App: Sendable {
        public var bundleID: String
        public var environment: PushEnvironment
        /// The app's token for alert/background pushes (nil once uninstalled).
        public var token: String?
        /// Every token of the app by kind (`app`, `voip`, `complication`, …).
        public var tokens: [String: String]
        /// `authorized`, `denied`, `notDetermined`, `provisional` or `ephemeral`.
        public var authorization: String
        /// `foreground`, `background`, `suspended`, `notRunning` or `forceQuit`.
        public var appState: String
        public var backgroundMode: Bool
        /// The app got its token while nobody was logged in; it uploads it (`register`) at login.
        public var tokenUploadPending: Bool
    }

    public var deviceID: String
    public var isVirtual: Bool
    public var isOnline: Bool
    public var isConnected: Bool
    public var lowPowerMode: Bool
    /// The account logged in on the device (nil: nobody).
    public var userID: String?
    public var apps: [App]

    init(_ value: JSONValue) {
        deviceID = value["deviceId"]?.stringValue ?? ""
        isVirtual = value["virtual"]?.boolValue ?? true
        isOnline = value["online"]?.boolValue ?? false
        isConnected = value["connected"]?.boolValue ?? false
        lowPowerMode = value["lowPowerMode"]?.boolValue ?? false
        userID = value["userId"]?.stringValue
        apps = (value["apps"]?.arrayValue ?? []).map { app in
            var tokens: [String: String] = [:]
            for (kind, token) in app["tokens"]?.objectValue ?? JSONObject() { tokens[kind] = token.stringValue }
            return App(
                bundleID: app["bundleId"]?.stringValue ?? "",
                environment: PushEnvironment(rawValue: app["environment"]?.stringValue ?? "") ?? .sandbox,
                token: app["token"]?.stringValue, tokens: tokens,
                authorization: app["authorization"]?.stringValue ?? "", appState: app["appState"]?.stringValue ?? "",
                backgroundMode: app["backgroundMode"]?.boolValue ?? false,
                tokenUploadPending: app["tokenUploadPending"]?.boolValue ?? false)
        }
    }
}

/// A rule that makes the emulator misbehave on purpose for matching pushes
/// (`POST /api/v1/faults`): answer with an error, reset the stream, send GOAWAY, or close.
public struct FaultRule: Sendable {
    public enum Action: Sendable {
        /// Answer with this status and reason instead of judging the push.
        case respond(status: Int, reason: String)
        /// RST_STREAM with this HTTP/2 error code.
        case resetStream(errorCode: Int)
        /// GOAWAY with this reason in its debug data (e.g. `Shutdown`).
        case goAway(reason: String?)
        /// Close the TCP connection without a word.
        case closeConnection
        /// Judge the push normally, after `delayMs`.
        case delayOnly
    }

    public var token: String?
    public var topic: String?
    public var pushType: String?
    public var environment: PushEnvironment?
    public var action: Action
    /// How many matching pushes it applies to (nil: all of them).
    public var times: Int?
    /// Matching pushes to let through before it applies.
    public var after: Int
    /// Added latency before the answer, in milliseconds.
    public var delayMs: Int

    public init(
        token: String? = nil, topic: String? = nil, pushType: String? = nil, environment: PushEnvironment? = nil,
        action: Action, times: Int? = nil, after: Int = 0, delayMs: Int = 0
    ) {
        self.token = token
        self.topic = topic
        self.pushType = pushType
        self.environment = environment
        self.action = action
        self.times = times
        self.after = after
        self.delayMs = delayMs
    }

    var json: JSONValue {
        var match = JSONObject()
        if let token { match["token"] = .string(token) }
        if let topic { match["topic"] = .string(topic) }
        if let pushType { match["pushType"] = .string(pushType) }
        if let environment { match["environment"] = .string(environment.rawValue) }
        var action = JSONObject()
        switch self.action {
        case .respond(let status, let reason):
            action["status"] = .int(Int64(status))
            action["reason"] = .string(reason)
        case .resetStream(let code): action["rstStream"] = .int(Int64(code))
        case .goAway(let reason): action["goAway"] = reason.map { ["reason": .string($0)] } ?? [:]
        case .closeConnection: action["close"] = true
        case .delayOnly: break
        }
        if delayMs > 0 { action["delayMs"] = .int(Int64(delayMs)) }
        var rule = JSONObject([("match", .object(match)), ("action", .object(action)), ("after", .int(Int64(after)))])
        if let times { rule["times"] = .int(Int64(times)) }
        return .object(rule)
    }
}
