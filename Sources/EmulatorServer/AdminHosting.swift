import AdminAPI
import APNsCore
import BackendCalls
import HTTP1Server
import Locking
import Networking
import OpenSSLCrypto
import StatePersistence

/// The admin API's view of this emulator (AdminAPI's `AdminHost`): its state and clock, its
/// counters and connections, and the configuration rules keys and apps are checked with.
final class EmulatorAdminHost: AdminHost, Sendable {
    /// Unowned: the emulator owns its admin server, which owns this. Attached once, at the
    /// end of `Emulator.init`, because the admin server is one of the emulator's parts.
    private let link = SetOnce<UnownedEmulator>()
    private struct UnownedEmulator: Sendable { unowned let emulator: Emulator }

    init() {}

    func attach(_ emulator: Emulator) { link.set(UnownedEmulator(emulator: emulator)) }

    private var emulator: Emulator {
        guard let link = link.value else { preconditionFailure("the admin host is used before its emulator is built") }
        return link.emulator
    }

    var state: EmulatorState { emulator.state }
    var clock: OffsetClock { emulator.offsetClock }
    var backendCalls: BackendCaller { emulator.backendCalls }
    var isReady: Bool { emulator.isReady }
    var version: String { Emulator.version }
    var startedAtMs: Int64 { emulator.startedAtMs }
    var uptimeMilliseconds: Int64 { emulator.uptimeMilliseconds }
    var addresses: JSONValue { emulator.addresses.json }
    var endpointOptions: EndpointOptions { emulator.configuration.endpoint }
    var providerConnectionCount: Int { emulator.providers.openConnections.load(ordering: .relaxed) }
    var deviceConnectionCount: Int { emulator.devices.connectionCount }

    func metricsText() -> String { emulator.metricsText() }
    func log(_ message: String) { emulator.logger.info(message) }
    func warn(_ message: String) { emulator.logger.warning(message) }
    func dispatch(_ frames: [DeviceFrame]) { emulator.devices.dispatch(frames) }

    func afterCommit(on loop: EventLoop, _ answer: @escaping (_ failure: String?) -> Void) -> Bool {
        guard let durability = emulator.durability, let ticket = durability.uncommittedTicket(everything: true) else { return false }
        durability.afterCommit(ticket, on: loop) { committed in
            answer(committed ? nil : durability.unavailableReason ?? "the state directory could not commit it")
        }
        return true
    }
    func tickDevices() { emulator.devices.tick() }

    func resetToStart() -> ReplacedWorld {
        let replaced = emulator.state.reset()
        emulator.backendCalls.reset()
        emulator.offsetClock.resetOffset()
        emulator.providers.resetCounters()
        emulator.listeners.resetCounters()
        emulator.adminMetrics.reset()
        emulator.devices.reattachAll()
        return replaced
    }

    func providerKey(from body: JSONObject, pem: String) throws(AdminError) -> ProviderKey {
        let spec: ServeConfiguration.AuthKeySpec
        do { spec = try ServeConfiguration.authKey(fromObject: body, pathRequired: false) } catch { throw AdminError(400, error.description) }
        let key: ES256PublicKey
        do { key = try ES256PublicKey(pemPrivateOrPublic: pem) } catch {
            throw AdminError(400, "\(error); expected a PKCS#8 EC P-256 private key (.p8) or a PEM public key")
        }
        return ProviderKey(
            teamID: spec.teamID, keyID: spec.keyID, environment: spec.environment,
            topics: spec.topics.map(Set.init), relatedKeyID: spec.relatedKeyID,
            verifier: ES256SignatureVerifier(key: key), source: body["pem"] != nil ? "api" : absolutePath(spec.path),
            pem: pem, addedAtRunTime: true)
    }

    func checkApp(teamID: String, bundleID: String) throws(AdminError) {
        // Named by field: the parser's wording is the command line's (TEAMID:BUNDLEID).
        if teamID.isEmpty { throw AdminError(400, "\"teamId\" is empty: give the team id, ten letters and digits, e.g. ABCDE12345") }
        if bundleID.isEmpty { throw AdminError(400, "\"bundleId\" is empty: give a bundle id, e.g. com.example.app") }
        do { _ = try ServeConfiguration.parseApp("\(teamID):\(bundleID)") } catch { throw AdminError(400, error.description) }
    }
}

extension Emulator {
    /// The admin API with the access rules and limits of the configuration.
    static func makeAdminService(_ c: ServeConfiguration, host: EmulatorAdminHost, events: EventHub, metrics: AdminMetrics) -> AdminService {
        let settings = AdminSettings(
            maxWaiters: c.admin.maxWaiters, keysDirectory: c.admin.keysDirectory, strictChecks: c.strictChecks,
            maxConnections: c.admin.maxConnections, readTimeoutMs: c.admin.readTimeoutMs)
        return AdminService(
            host: host, events: events, metrics: metrics, policy: c.admin.policy(boundTo: c.listeners.admin),
            settings: settings)
    }

    /// The HTTP/1.1 server of the admin listener.
    static func makeAdminServer(_ c: ServeConfiguration, service: AdminService) -> HTTP1Server {
        let options = HTTP1Server.Options(
            maxConnections: c.admin.maxConnections, readTimeoutMs: c.admin.readTimeoutMs,
            idleTimeoutMs: c.admin.idleTimeoutMs)
        return HTTP1Server(options: options, service: service)
    }
}
