import APNsCore
import Foundation
import Networking

/// The admin/inspection HTTP API (README, "Admin API"). Paths and JSON field names are a
/// public contract.
final class AdminAPI: @unchecked Sendable {
    let emulator: Emulator

    init(emulator: Emulator) { self.emulator = emulator }

    var state: EmulatorState { emulator.state }
    var clock: any EmulatorClock { emulator.clock }

    func handle(_ request: AdminRequest, _ responder: AdminResponder) {
        let response: AdminResponse
        do {
            response = try route(request)
        } catch let error as AdminError {
            response = .error(error.status, error.message)
        } catch {
            response = .error(500, "\(error)")
        }
        responder.respond(response)
    }

    private func route(_ request: AdminRequest) throws -> AdminResponse {
        let segments = request.path.split(separator: "/", omittingEmptySubsequences: true)
            .map { String($0).removingPercentEncoding ?? String($0) }
        func method(_ allowed: String...) throws {
            guard allowed.contains(request.method) else {
                throw AdminError(405, "\(request.method) is not allowed on \(request.path); use \(allowed.joined(separator: " or "))")
            }
        }
        switch segments.count {
        case 1 where segments[0] == "livez":
            try method("GET", "HEAD")
            return .json(200, ["status": "live"])
        case 1 where segments[0] == "readyz":
            try method("GET", "HEAD")
            return emulator.isReady ? .json(200, ["status": "ready"]) : .json(503, ["status": "starting"])
        default:
            break
        }
        guard segments.count >= 3, segments[0] == "api", segments[1] == "v1" else {
            throw AdminError(404, "no such endpoint: \(request.path); see the README's Admin API section")
        }
        let rest = Array(segments.dropFirst(2))
        switch (rest.first, rest.count) {
        case ("devices", 1):
            try method("GET", "POST")
            return request.method == "GET" ? listDevices() : try createDevice(request)
        case ("devices", 2):
            try method("GET", "DELETE")
            return request.method == "GET" ? try getDevice(rest[1]) : try deleteDevice(rest[1])
        case ("devices", 3) where rest[2] == "apps":
            try method("POST")
            return try installApp(deviceID: rest[1], request)
        case ("devices", 4) where rest[2] == "apps":
            try method("DELETE")
            return try uninstall(deviceID: rest[1], bundleID: rest[3])
        case ("tokens", 1):
            try method("GET")
            return listTokens()
        case ("notifications", 1):
            try method("GET")
            return try listNotifications(request)
        case ("reset", 1):
            try method("POST")
            state.reset()
            emulator.log("admin: reset to the configured start state")
            return .json(200, ["reset": true])
        default:
            throw AdminError(404, "no such endpoint: \(request.path); see the README's Admin API section")
        }
    }

    // MARK: Devices

    private func listDevices() -> AdminResponse {
        let devices = state.withWorld { world in
            world.registry.devices.values.sorted { $0.createdAtMs < $1.createdAtMs || ($0.createdAtMs == $1.createdAtMs && $0.id < $1.id) }
                .map { AdminJSON.device($0, registry: world.registry) }
        }
        return .json(200, ["devices": .array(devices)])
    }

    private func getDevice(_ id: String) throws -> AdminResponse {
        let device = state.withWorld { world in world.registry.devices[id].map { AdminJSON.device($0, registry: world.registry) } }
        guard let device else { throw AdminError(404, "no device with id '\(id)'") }
        return .json(200, device)
    }

    private func deleteDevice(_ id: String) throws -> AdminResponse {
        let now = clock.nowMilliseconds()
        do {
            try state.withWorld { world throws(RegistryError) in try world.registry.removeDevice(id: id, nowMs: now) }
        } catch {
            throw AdminError(404, error.description)
        }
        return .json(200, ["deviceId": .string(id), "deleted": true])
    }

    /// Fields shared by device creation and app installation.
    private struct AppRequest {
        var bundleID: String
        var environment: APNsEnvironment
        var kind: TokenKind
        var token: String?
    }

    private func appRequest(_ body: JSONObject) throws -> AppRequest {
        guard let bundle = body["bundleId"]?.stringValue else {
            throw AdminError(400, "\"bundleId\" is required, e.g. {\"bundleId\":\"com.example.app\",\"environment\":\"sandbox\"}")
        }
        guard DeviceRegistry.isValidBundleID(bundle) else {
            throw AdminError(400, RegistryError.invalidBundleID(bundle).description)
        }
        guard let envText = body["environment"]?.stringValue else {
            throw AdminError(400, "\"environment\" is required: \"sandbox\" or \"production\"")
        }
        guard let environment = APNsEnvironment(rawValue: envText) else {
            throw AdminError(400, "\"environment\" must be \"sandbox\" or \"production\", not \"\(envText)\"")
        }
        let kindText = body["kind"]?.stringValue ?? "app"
        guard let kind = TokenKind(rawValue: kindText) else {
            throw AdminError(400, "\"kind\" must be one of \(TokenKind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        var token: String?
        if let value = body["token"] {
            guard let text = value.stringValue, Hex.isEvenLengthHex(Substring(text)) else {
                throw AdminError(400, "\"token\" must be an even-length hex string")
            }
            token = text
        }
        return AppRequest(bundleID: bundle, environment: environment, kind: kind, token: token)
    }

    private func createDevice(_ request: AdminRequest) throws -> AdminResponse {
        let body = try request.jsonObject()
        let app = try appRequest(body)
        var deviceID: String?
        if let value = body["deviceId"] {
            guard let text = value.stringValue, !text.isEmpty, text.count <= 128, !text.utf8.contains(UInt8(ascii: "/")) else {
                throw AdminError(400, "\"deviceId\" must be a non-empty string without '/' (at most 128 characters)")
            }
            deviceID = text
        }
        let now = clock.nowMilliseconds()
        let result = state.withWorld { world -> Result<TokenEntry, RegistryError> in
            // All or nothing: a failed registration leaves no half-made device.
            let saved = world.registry
            do throws(RegistryError) {
                let device = try world.registry.addDevice(id: deviceID, isVirtual: true, nowMs: now)
                return .success(try world.registry.register(deviceID: device.id, bundleID: app.bundleID,
                                                            environment: app.environment, kind: app.kind,
                                                            fixedToken: app.token, nowMs: now))
            } catch {
                world.registry = saved
                return .failure(error)
            }
        }
        switch result {
        case .success(let entry):
            emulator.log("admin: virtual device \(entry.deviceID) with \(entry.bundleID) (\(entry.environment.rawValue)) token \(entry.token)")
            return .json(201, Self.created(entry))
        case .failure(let error):
            throw AdminError(Self.status(for: error), error.description)
        }
    }

    private func installApp(deviceID: String, _ request: AdminRequest) throws -> AdminResponse {
        let app = try appRequest(try request.jsonObject())
        let now = clock.nowMilliseconds()
        let result = state.withWorld { world -> Result<TokenEntry, RegistryError> in
            do throws(RegistryError) {
                return .success(try world.registry.register(deviceID: deviceID, bundleID: app.bundleID,
                                                            environment: app.environment, kind: app.kind,
                                                            fixedToken: app.token, nowMs: now))
            } catch {
                return .failure(error)
            }
        }
        switch result {
        case .success(let entry): return .json(201, Self.created(entry))
        case .failure(let error): throw AdminError(Self.status(for: error), error.description)
        }
    }

    private func uninstall(deviceID: String, bundleID: String) throws -> AdminResponse {
        let now = clock.nowMilliseconds()
        let result = state.withWorld { world -> Result<(Int64, [TokenEntry]), DeviceRequestError> in
            do throws(DeviceRequestError) {
                return .success(try world.uninstallApp(deviceID: deviceID, bundleID: bundleID, nowMs: now))
            } catch {
                return .failure(error)
            }
        }
        switch result {
        case .success(let (invalidAt, tokens)):
            emulator.log("admin: uninstalled \(bundleID) from \(deviceID)")
            return .json(200, [
                "deviceId": .string(deviceID), "bundleId": .string(bundleID),
                "unregisteredAt": .int(invalidAt), "tokens": .array(tokens.map(AdminJSON.token)),
            ])
        case .failure(let error):
            throw AdminError(404, error.message)
        }
    }

    private func listTokens() -> AdminResponse {
        let tokens = state.withWorld { world in
            world.registry.tokens.values.sorted { $0.issuedAtMs < $1.issuedAtMs || ($0.issuedAtMs == $1.issuedAtMs && $0.token < $1.token) }
                .map(AdminJSON.token)
        }
        return .json(200, ["tokens": .array(tokens)])
    }

    static func created(_ entry: TokenEntry) -> JSONValue {
        [
            "deviceId": .string(entry.deviceID), "token": .string(entry.token), "bundleId": .string(entry.bundleID),
            "environment": .string(entry.environment.rawValue), "kind": .string(entry.kind.rawValue),
            "topic": .string(entry.topic),
        ]
    }

    static func status(for error: RegistryError) -> Int {
        switch error {
        case .unknownDevice, .appNotInstalled: return 404
        case .deviceExists, .tokenInUse: return 409
        case .invalidBundleID, .invalidToken: return 400
        }
    }

    // MARK: Notifications

    private func listNotifications(_ request: AdminRequest) throws -> AdminResponse {
        var limit = 1000
        if let text = request.query["limit"] {
            guard let value = Int(text), value >= 0 else {
                throw AdminError(400, "limit must be a whole number ≥ 0, not '\(text)'")
            }
            limit = value
        }
        let token = request.query["token"]
        let records = state.withWorld { world in
            world.records.newestFirst(limit: limit) { record in
                token.map { Hex.equalIgnoringCase(record.token, $0) } ?? true
            }
        }
        return .json(200, ["notifications": .array(records.map(AdminJSON.record))])
    }
}
