public import AdminClient
public import EmulatorServer
import Foundation

/// The emulator a scenario runs against: one the runner starts in this process (nothing else
/// needed), or one already running, reached through its admin API. Either way the steps see
/// the same things: the admin client, the provider endpoints and key, and the values `run`
/// steps get in their environment.
public final class EmulatorTarget: Sendable {
    public let api: EmulatorAdminClient
    public let adminURL: String
    /// The admin API's `--admin-token`, for `run` and `http` steps that call it themselves.
    public let adminToken: String?
    public let provider: ProviderAccess
    /// Set when the runner started the emulator (stopped by `stop()`).
    private let owned: InProcessEmulator?

    /// Where and how to push.
    public struct ProviderAccess: Sendable {
        public var sandbox: HostPort?
        public var production: HostPort?
        /// Channel management (Apple's `api-manage-broadcast` hosts): createChannel steps.
        public var channelSandbox: HostPort?
        public var channelProduction: HostPort?
        /// The CA the endpoints' certificate chains to (nil: the system store).
        public var caPath: String?
        /// The provider key (`--key TEAMID:KEYID:PATH`); nil: push steps cannot sign.
        public var teamID: String?
        public var keyID: String?
        public var keyPath: String?

        public init(
            sandbox: HostPort? = nil, production: HostPort? = nil, caPath: String? = nil, teamID: String? = nil,
            keyID: String? = nil, keyPath: String? = nil, channelSandbox: HostPort? = nil, channelProduction: HostPort? = nil
        ) {
            self.sandbox = sandbox
            self.production = production
            self.channelSandbox = channelSandbox
            self.channelProduction = channelProduction
            self.caPath = caPath
            self.teamID = teamID
            self.keyID = keyID
            self.keyPath = keyPath
        }
    }

    private init(api: EmulatorAdminClient, adminURL: String, adminToken: String?, provider: ProviderAccess, owned: InProcessEmulator?) {
        self.api = api
        self.adminURL = adminURL
        self.adminToken = adminToken
        self.provider = provider
        self.owned = owned
    }

    /// Starts an emulator in this process on free loopback ports, with a fresh provider key
    /// trusted for `bundleIDs`.
    public static func inProcess(bundleIDs: [String], arguments: [String] = []) throws(StartupError) -> EmulatorTarget {
        let emulator = try InProcessEmulator(bundleIDs: bundleIDs, arguments: arguments)
        let access = ProviderAccess(
            sandbox: emulator.sandbox, production: emulator.production, caPath: emulator.caCertificatePath,
            teamID: emulator.key.teamID, keyID: emulator.key.keyID, keyPath: emulator.key.path,
            channelSandbox: emulator.channelSandbox, channelProduction: emulator.channelProduction)
        let api = EmulatorAdminClient(address: emulator.admin, token: emulator.adminToken)
        return EmulatorTarget(
            api: api, adminURL: "http://\(emulator.admin)", adminToken: emulator.adminToken, provider: access, owned: emulator)
    }

    /// An emulator already running. Provider and channel endpoints and CA not given in `overrides` are
    /// taken from its `GET /api/v1/info` (addresses it bound to all interfaces are reached
    /// on loopback).
    public static func remote(admin: HostPort, token: String?, overrides: ProviderAccess) throws(EmulatorAdminError) -> EmulatorTarget {
        let api = EmulatorAdminClient(address: admin, token: token)
        let addresses = try api.info()["addresses"] ?? .null
        // A `--listen` listener serves both push environments, not channel management.
        func address(_ name: String, orListen: Bool = true) -> HostPort? {
            let text = addresses[name]?.stringValue ?? (orListen ? addresses["listen"]?.arrayValue?.first?.stringValue : nil)
            guard let text, var parsed = try? HostPort(parsing: text) else { return nil }
            if parsed.host == "0.0.0.0" { parsed.host = "127.0.0.1" }
            if parsed.host == "::" { parsed.host = "::1" }
            return parsed
        }
        var access = overrides
        access.sandbox = overrides.sandbox ?? address("sandbox")
        access.production = overrides.production ?? address("production")
        access.channelSandbox = overrides.channelSandbox ?? address("channelSandbox", orListen: false)
        access.channelProduction = overrides.channelProduction ?? address("channelProduction", orListen: false)
        access.caPath = overrides.caPath ?? addresses["caFile"]?.stringValue
        return EmulatorTarget(api: api, adminURL: "http://\(admin)", adminToken: token, provider: access, owned: nil)
    }

    public var isInProcess: Bool { owned != nil }

    /// Stops the emulator if the runner started it.
    public func stop() { owned?.stop() }

    /// What `${emulator.NAME}` and a `run` step's `APNS_*` variables say.
    func value(_ name: String, topic: String) -> String? {
        switch name {
        case "adminUrl": return adminURL
        case "adminToken": return adminToken
        case "host": return provider.sandbox?.host
        case "port": return provider.sandbox.map { String($0.port) }
        case "productionPort": return provider.production.map { String($0.port) }
        case "ca": return provider.caPath
        case "keyPath": return provider.keyPath
        case "keyId": return provider.keyID
        case "teamId": return provider.teamID
        case "topic": return topic
        default: return nil
        }
    }

    /// The environment a provider command needs to reach this emulator (notify.py's names).
    func providerEnvironment(topic: String) -> [String: String] {
        let names = [
            ("APNS_ADMIN_URL", "adminUrl"), ("APNS_ADMIN_TOKEN", "adminToken"), ("APNS_HOST", "host"), ("APNS_PORT", "port"),
            ("APNS_PRODUCTION_PORT", "productionPort"), ("APNS_CA", "ca"), ("APNS_KEY_PATH", "keyPath"),
            ("APNS_KEY_ID", "keyId"), ("APNS_TEAM_ID", "teamId"), ("APNS_TOPIC", "topic"),
        ]
        var environment: [String: String] = [:]
        for (variable, name) in names { environment[variable] = value(name, topic: topic) }
        return environment
    }
}
