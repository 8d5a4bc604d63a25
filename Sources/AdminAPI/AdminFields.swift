import APNsCore
import HTTP1Server

/// Fields of the admin API's paths and bodies, checked the same way by every resource.
extension AdminResource {
    /// The `{bundleId}` of a path, refused (400) unless it is a valid bundle id.
    static func bundleID(_ parameters: [String: String]) throws -> String {
        let bundle = parameters["bundleId"] ?? ""
        guard DeviceRegistry.isValidBundleID(bundle) else { throw AdminError(400, RegistryError.invalidBundleID(bundle).description) }
        return bundle
    }

    /// The `{deviceId}` of a path, refused (400) unless it is a valid id.
    static func deviceID(_ parameters: [String: String]) throws -> String {
        let id = parameters["deviceId"] ?? ""
        guard DeviceRegistry.isValidDeviceID(id) else { throw AdminError(400, "the device id in the path: \(DeviceRegistry.deviceIDRule)") }
        return id
    }

    /// The notification filters of a query string; `also` are the endpoint's other parameters.
    /// Any other parameter is 400: a misspelt filter (`push_type`) would match everything.
    static func query(_ request: HTTP1Request, also: [String] = []) throws -> NotificationQuery {
        try request.refuseUnknownQueryParameters(NotificationQuery.parameterNames + also)
        do { return try NotificationQuery.parse(request.query) } catch { throw AdminError(400, error.description) }
    }

    /// A string field, nil when absent or null; another type is 400, never taken as absent.
    static func string(_ body: JSONObject, _ key: String) throws -> String? {
        guard let value = body[key], value != .null else { return nil }
        guard let text = value.stringValue else { throw AdminError(400, "\"\(key)\" must be a string, not \(value.serialized())") }
        return text
    }

    static func bool(_ body: JSONObject, _ key: String) throws -> Bool? {
        guard let value = body[key], value != .null else { return nil }
        guard let bool = value.boolValue else { throw AdminError(400, "\"\(key)\" must be true or false, not \(value.serialized())") }
        return bool
    }

    static func choice<T: RawRepresentable & CaseIterable>(_ body: JSONObject, _ key: String, _: T.Type) throws -> T?
    where T.RawValue == String {
        guard let value = body[key], value != .null else { return nil }
        guard let text = value.stringValue, let parsed = T(rawValue: text) else {
            throw AdminError(400, "\"\(key)\" must be one of \(T.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return parsed
    }

    /// The fields shared by device creation and app installation; `also` are the caller's own.
    static func appRequest(_ body: JSONObject, also: [String]) throws -> AppRequest {
        try body.refuseUnknownFields(also + AppRequest.fields)
        guard let bundle = try string(body, "bundleId") else {
            throw AdminError(400, "\"bundleId\" is required, e.g. {\"bundleId\":\"com.example.app\",\"environment\":\"sandbox\"}")
        }
        guard DeviceRegistry.isValidBundleID(bundle) else { throw AdminError(400, RegistryError.invalidBundleID(bundle).description) }
        guard let envText = try string(body, "environment") else {
            throw AdminError(400, "\"environment\" is required: \"sandbox\" or \"production\"")
        }
        guard let environment = APNsEnvironment(rawValue: envText) else {
            throw AdminError(400, "\"environment\" must be \"sandbox\" or \"production\", not \"\(envText)\"")
        }
        let kind = try choice(body, "kind", TokenKind.self) ?? .app
        var token: String?
        if let value = body["token"] {
            guard let text = value.stringValue, Hex.isEvenLengthHex(Substring(text)) else {
                throw AdminError(400, "\"token\" must be an even-length hex string")
            }
            token = text
        }
        var settings = AppSettings()
        if let value = try choice(body, "authorization", Authorization.self) { settings.authorization = value }
        if let value = try choice(body, "appState", AppState.self) { settings.appState = value }
        if let value = try bool(body, "backgroundMode") { settings.backgroundMode = value }
        do throws(NotificationSettingsError) { try settings.notifications.apply(body) } catch {
            throw AdminError(400, error.description)
        }
        return AppRequest(bundleID: bundle, environment: environment, kind: kind, token: token, settings: settings)
    }

    /// The answer to a device creation or an install.
    static func created(_ entry: TokenEntry) -> JSONValue {
        [
            "deviceId": .string(entry.deviceID), "token": .string(entry.token), "bundleId": .string(entry.bundleID),
            "environment": .string(entry.environment.rawValue), "kind": .string(entry.kind.rawValue),
            "topic": .string(entry.topic),
        ]
    }

    static func status(for error: RegistryError) -> Int {
        if error.isNotFound { return 404 }
        switch error {
        case .deviceExists, .tokenInUse, .tooManyApps: return 409
        case .tooManyDevices, .tooManyTokens: return 507
        default: return 400
        }
    }
}

/// An app to install: one token kind, maybe a pinned token, its settings.
struct AppRequest {
    /// Its fields, as device creation, a batch and an install take them.
    static let fields =
        ["bundleId", "environment", "kind", "token", "authorization", "appState", "backgroundMode"] + NotificationSetup.fields

    var bundleID: String
    var environment: APNsEnvironment
    var kind: TokenKind
    var token: String?
    var settings: AppSettings

    var registration: AppRegistration {
        AppRegistration(bundleID: bundleID, environment: environment, settings: settings, kinds: [kind])
    }
}
