// EmulatorServer: the composition of the server: configuration, the provider connections,
// the device gateway, the admin API's host and the listeners that tie them to event loops.
// Imports the core, the wrappers (HTTP2, OpenSSLCrypto, Networking), the stores, AdminAPI,
// HTTP1Server, BackendCalls and CommandLineOptions.

import AdminAPI
public import APNsCore
import BackendCalls
import Foundation
import Glibc
import HTTP1Server
import HTTP2
import MonotonicClock
public import Networking
import OpenSSLCrypto
import StatePersistence
import Synchronization
import Locking
import RedisStore

public struct StartupError: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// ES256 verification from OpenSSL, plugged into Core's verifier slot.
struct ES256SignatureVerifier: SignatureVerifier {
    let key: ES256PublicKey
    func verify(signature: [UInt8], message: [UInt8]) -> Bool { key.verify(signature: signature, message: message) }
}

/// The addresses actually bound (real ports when 0 was asked for).
public struct BoundAddresses: Sendable {
    /// `--listen` listeners (environment by SNI / `:authority`).
    public var listen: [HostPort] = []
    public var sandbox: HostPort?
    public var production: HostPort?
    public var h2cSandbox: HostPort?
    public var h2cProduction: HostPort?
    public var admin: HostPort?
    public var device: HostPort?
    public var caFile: String?

    public var json: JSONValue {
        func text(_ address: HostPort?) -> JSONValue { address.map { .string($0.description) } ?? .null }
        return [
            "listen": .array(listen.map { .string($0.description) }),
            "sandbox": text(sandbox), "production": text(production), "h2cSandbox": text(h2cSandbox),
            "h2cProduction": text(h2cProduction), "admin": text(admin), "device": text(device),
            "caFile": caFile.map(JSONValue.string) ?? .null, "pid": .int(Int64(getpid())),
        ]
    }
}

/// The composition root of `apns-emulator serve`: state, event loops, listeners.
public final class Emulator: @unchecked Sendable {
    public static let version = "0.1.0"
    public static let demoTeamID = "DEMOTEAM00"
    public static let demoKeyID = "DEMOKEY000"
    public static let demoBundleID = "com.example.app"
    public static let demoDeviceID = "demo-iphone"

    public let configuration: ServeConfiguration
    public let clock: any EmulatorClock
    public let state: EmulatorState
    let endpoint: ProviderEndpoint
    let group: EventLoopGroup
    /// The admin API's own loop.
    let adminGroup: EventLoopGroup
    let providers: ProviderConnections
    let devices: DeviceGateway
    /// `--state-dir`: the writer that commits changes; nil keeps everything in memory.
    let durability: StateWriter?
    private let ready = Atomic<Bool>(false)
    /// `--max-connections`, one budget per kind of connection.
    let providerBudget: ConnectionBudget
    let deviceBudget: ConnectionBudget
    private let nextConnectionID: Atomic<UInt64>
    /// `--redis`: the instances sharing this world; nil for a single instance.
    let shared: RedisCoordinator?
    private var listeners: [Listener] = []
    private var tlsContext: TLSContext?
    public private(set) var addresses = BoundAddresses()
    /// Set when demo mode made a key: (key path, sandbox device token).
    public private(set) var demo: (keyPath: String, token: String)?

    public var isReady: Bool { ready.load(ordering: .acquiring) }
    public let startedAtMs: Int64
    let events: EventHub
    let adminMetrics = AdminMetrics()
    /// The emulator's time: the followed clock plus what `POST /api/v1/clock` added.
    let offsetClock: OffsetClock
    /// The simulated apps' calls to their backends.
    let backendCalls: BackendCaller
    /// Set once the admin listener is configured (for its gauges in /metrics).
    private(set) var adminServer: HTTP1Server?

    public init(configuration: ServeConfiguration, clock followed: any EmulatorClock = SystemClock()) throws(StartupError) {
        self.configuration = configuration
        let clock = OffsetClock(base: followed)
        self.clock = clock
        offsetClock = clock
        var world = World(registry: DeviceRegistry(tokenByteCount: configuration.tokenBytes),
                          records: RecordStore(capacity: configuration.records.maxRecords, byteBudget: configuration.records.maxRecordBytes),
                          deliveryOptions: configuration.delivery)
        world.deliveryOptions.deliveryIDsAreSequences = configuration.state.redis != nil
        demo = try Self.configureCredentials(configuration, into: &world, clock: clock)
        for rule in configuration.faultRules { world.faults.add(rule) }
        world.backends = configuration.backends
        var current = world
        if let directory = configuration.state.directory {
            let quiet = configuration.quiet
            let (restored, writer) = try StateDirectory.open(directory.path, configured: world, journalLag: directory.journalLag,
                                                             onFailure: directory.onFailure, clock: clock) { message in
                if !quiet { ProviderConnections.logLine(message) }
            }
            current = restored
            durability = writer
            if let path = demo?.keyPath,
                let token = current.registry.devices[Self.demoDeviceID]?.apps[Self.demoBundleID]?.tokens[.app]
            {
                demo = (path, token)
            }
        } else {
            durability = nil
        }
        if configuration.state.redis != nil { current.startTrackingChanges() }
        state = EmulatorState(start: current)
        // A reset goes back to the configuration, not to what a state directory held.
        state.setStartState(world)
        state.persistence = durability
        if let redis = configuration.state.redis {
            let quiet = configuration.quiet
            let coordinator = RedisCoordinator(
                store: RedisStateStore(url: redis.url, prefix: redis.prefix), state: state, configured: world, clock: clock,
                loadKey: StateDirectory.loadKey
            ) { message in
                if !quiet { ProviderConnections.logLine(message) }
            }
            do {
                try coordinator.start()
            } catch {
                throw StartupError("\(error)")
            }
            state.coordinator = coordinator
            shared = coordinator
            nextConnectionID = Atomic(coordinator.firstConnectionID)
            if let path = demo?.keyPath,
                let token = state.readWorld({ $0.registry.devices[Self.demoDeviceID]?.apps[Self.demoBundleID]?.tokens[.app] })
            {
                demo = (path, token)
            }
        } else {
            shared = nil
            nextConnectionID = Atomic(1)
        }
        endpoint = ProviderEndpoint(state: state, clock: clock, options: configuration.endpoint)
        do {
            group = try EventLoopGroup(count: configuration.connections.threads)
            adminGroup = try EventLoopGroup(count: 1, namePrefix: "admin")
        } catch {
            throw StartupError("cannot create event loops: \(error)")
        }
        startedAtMs = clock.nowMilliseconds()
        providerBudget = ConnectionBudget(kind: "provider", limit: configuration.connections.maxConnections)
        deviceBudget = ConnectionBudget(kind: "device", limit: configuration.connections.maxConnections)
        events = EventHub(state: state, metrics: adminMetrics)
        let providers = ProviderConnections(idleTimeoutSeconds: configuration.connections.idleTimeoutSeconds,
                                            requestTimeoutSeconds: configuration.connections.requestTimeoutSeconds, quiet: configuration.quiet,
                                            loops: configuration.connections.threads)
        self.providers = providers
        // Weak: the providers hold the gateway, so a strong capture here would be a cycle that
        // keeps both (and this emulator) alive after it is stopped.
        devices = DeviceGateway(state: state, clock: clock, durability: durability) { [weak providers] in providers?.log($0) }
        if let shared {
            let devices = self.devices
            devices.relay = { [weak shared] frames in shared?.relay(frames) }
            shared.deliverFrames = { [weak devices] frames in devices?.dispatch(frames) }
        }
        providers.devices = devices
        providers.durability = durability
        providers.load = configuration.load
        providers.churn = configuration.load.connectionChurn.map { Locked(ChurnLimiter(limit: $0.count, windowMs: $0.windowMs)) }
        let backendCalls = BackendCaller(now: { clock.nowMilliseconds() }, maxQueued: configuration.records.maxBackendCalls,
                                         logCapacity: configuration.records.maxBackendCalls)
        self.backendCalls = backendCalls
        state.onBackendIntents = { [weak backendCalls] intents in
            backendCalls?.enqueue(intents.map(BackendRequest.init(intent:)))
        }
        let events = self.events
        backendCalls.onChange = { [weak events] call in events?.backendCallChanged(call) }
    }

    public func log(_ message: @autoclosure () -> String) { providers.log(message()) }

    // MARK: Start-up

    /// Loads keys and apps, makes the demo setup if asked, and creates configured devices.
    static func configureCredentials(_ configuration: ServeConfiguration, into world: inout World,
                                     clock: any EmulatorClock) throws(StartupError) -> (keyPath: String, token: String)?
    {
        for spec in configuration.authKeys {
            guard let pem = try? String(contentsOfFile: spec.path, encoding: .utf8) else {
                throw StartupError("--auth-key \(spec.teamID):\(spec.keyID):\(spec.path): cannot read \(spec.path)")
            }
            let key: ES256PublicKey
            do {
                key = try ES256PublicKey(pemPrivateOrPublic: pem)
            } catch {
                throw StartupError("--auth-key \(spec.teamID):\(spec.keyID):\(spec.path): \(error); expected the .p8 file Apple issued (PKCS#8 EC P-256 private key) or a PEM public key")
            }
            // No PEM kept: configured keys are read from their files at every start.
            world.credentials.add(ProviderKey(
                teamID: spec.teamID, keyID: spec.keyID, environment: spec.environment, topics: spec.topics.map(Set.init),
                relatedKeyID: spec.relatedKeyID, verifier: ES256SignatureVerifier(key: key), source: spec.path))
        }
        for app in configuration.apps { world.credentials.addApp(teamID: app.teamID, bundleID: app.bundleID) }

        let now = clock.nowMilliseconds()
        var demo: (String, String)?
        if configuration.makesDemo {
            let path = "\(configuration.tls.source.certsDirectory)/demo-AuthKey_\(demoKeyID).p8"
            let key = try loadOrCreateDemoKey(path: path)
            world.credentials.add(ProviderKey(teamID: demoTeamID, keyID: demoKeyID, verifier: ES256SignatureVerifier(key: key.publicKey),
                                              source: path))
            if world.credentials.owner(ofBundle: demoBundleID) == nil {
                world.credentials.addApp(teamID: demoTeamID, bundleID: demoBundleID)
            }
            if !configuration.devices.contains(where: { $0.deviceID == demoDeviceID }) {
                do {
                    try world.registry.addDevice(id: demoDeviceID, isVirtual: true, nowMs: now)
                    let entry = try world.registry.register(deviceID: demoDeviceID, bundleID: demoBundleID,
                                                            environment: .sandbox, nowMs: now)
                    demo = (path, entry.token)
                } catch {
                    throw StartupError("demo device: \(error)")
                }
            }
        }
        for device in configuration.devices {
            do {
                try world.registry.addDevice(id: device.deviceID, isVirtual: true, nowMs: now)
                for app in device.apps {
                    _ = try world.registry.register(deviceID: device.deviceID, bundleID: app.bundleID, environment: app.environment,
                                                    kind: app.kind, fixedToken: app.token, nowMs: now)
                }
            } catch {
                throw StartupError("config device \(device.deviceID): \(error)")
            }
        }
        return demo
    }

    static func loadOrCreateDemoKey(path: String) throws(StartupError) -> ES256PrivateKey {
        if let pem = try? String(contentsOfFile: path, encoding: .utf8) {
            do { return try ES256PrivateKey(pem: pem) } catch {
                throw StartupError("demo key \(path) is unreadable (\(error)); delete it to make a new one")
            }
        }
        do {
            let key = try ES256PrivateKey.generate()
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                    withIntermediateDirectories: true)
            guard FileManager.default.createFile(atPath: path, contents: Data(key.pkcs8PEM.utf8),
                                                 attributes: [.posixPermissions: 0o600])
            else { throw StartupError("cannot write \(path)") }
            return key
        } catch let error as StartupError {
            throw error
        } catch {
            throw StartupError("cannot create demo key \(path): \(error)")
        }
    }

    /// The TLS context; makes TEST ONLY certificates when none were given and none exist.
    private func makeTLSContext() throws(StartupError) -> TLSContext {
        let source = configuration.tls.source
        let fm = FileManager.default
        if case .generated(let directory) = source, !(fm.fileExists(atPath: source.certificatePath) && fm.fileExists(atPath: source.keyPath)) {
            do {
                let made = try TestCertificates.generate(into: directory)
                log("generated TEST ONLY certificates in \(directory)/ (CA: \(made.caPath))")
            } catch {
                throw StartupError("cannot generate TEST ONLY certificates in \(directory): \(error)")
            }
        }
        do {
            return try TLSContext.server(certificateChainPath: source.certificatePath, privateKeyPath: source.keyPath)
        } catch {
            throw StartupError("--tls-cert \(source.certificatePath) / --tls-key \(source.keyPath): \(error)")
        }
    }

    /// The CA provider client certificates must chain to (certificate-based connections).
    private func loadClientTrust() throws(StartupError) -> CertificateTrustStore? {
        let (path, required) = configuration.tls.clientCA
        guard required || FileManager.default.fileExists(atPath: path) else { return nil }
        do {
            return try CertificateTrustStore(pemPath: path)
        } catch {
            throw StartupError("--client-ca \(path): \(error)")
        }
    }

    /// Binds every listener and starts the event loops.
    public func start() throws(StartupError) {
        signal(SIGPIPE, SIG_IGN)
        // Past a file-size limit (ulimit -f) a write fails with EFBIG, which the state writer
        // handles like a full disk, instead of the signal killing the process.
        signal(SIGXFSZ, SIG_IGN)
        let c = configuration
        let configured = c.listeners
        if configured.needsServerCertificate {
            tlsContext = try makeTLSContext()
            addresses.caFile = c.tls.source.generatedCAPath
            providers.clientTrust = try loadClientTrust()
        }
        let acceptLoop = group.loops[0]
        func bind(_ address: HostPort?, _ what: String, on loop: EventLoop = acceptLoop,
                  _ accept: @escaping (Int32, String) -> Void) throws(StartupError) -> HostPort?
        {
            guard let address else { return nil }
            do {
                let listener = try Listener(address: address, loop: loop, accept: accept)
                let bound = listener.address
                listener.onExhausted = { [unowned self] code in
                    self.acceptPauses.add(1, ordering: .relaxed)
                    self.log("\(what) \(bound): out of file descriptors (\(String(cString: strerror(code)))); not accepting for a moment. The open-file limit is \(OpenFileLimit.current); raise it (ulimit -n) or lower --max-connections")
                }
                listener.onError = { [unowned self] error in
                    self.log("\(what) \(bound): \(error)")
                }
                try listener.start()
                listeners.append(listener)
                return listener.address
            } catch {
                throw StartupError(Self.bindFailure(address, what, error))
            }
        }
        for address in configured.listen {
            // Sandbox unless the name the client asked for is Apple's production host.
            if let bound = try bind(address, "--listen", { [unowned self] fd, peer in
                self.acceptProvider(fd: fd, peer: peer, environment: .sandbox, tls: true)
            }) {
                addresses.listen.append(bound)
            }
        }
        addresses.sandbox = try bind(configured.sandbox, "--sandbox-listen") { [unowned self] fd, peer in
            self.acceptProvider(fd: fd, peer: peer, environment: .sandbox, tls: true)
        }
        addresses.production = try bind(configured.production, "--production-listen") { [unowned self] fd, peer in
            self.acceptProvider(fd: fd, peer: peer, environment: .production, tls: true)
        }
        addresses.h2cSandbox = try bind(configured.h2cSandbox, "--h2c-sandbox-listen") { [unowned self] fd, peer in
            self.acceptProvider(fd: fd, peer: peer, environment: .sandbox, tls: false)
        }
        addresses.h2cProduction = try bind(configured.h2cProduction, "--h2c-production-listen") { [unowned self] fd, peer in
            self.acceptProvider(fd: fd, peer: peer, environment: .production, tls: false)
        }
        let admin = makeAdminServer()
        adminServer = admin
        // Its own loop, accepting too: the admin API answers while provider loops are busy
        // (a load test, or with --redis a slow Redis they wait for).
        let adminLoop = adminGroup.loops[0]
        addresses.admin = try bind(configured.admin, "--admin-listen", on: adminLoop) { [unowned self] fd, peer in
            self.hand(fd: fd, peer: peer, tls: false, on: adminLoop) { connection in admin.connection(connection) }
        }
        let gateway = devices
        addresses.device = try bind(configured.device, "--device-listen") { [unowned self] fd, peer in
            self.hand(fd: fd, peer: peer, tls: configured.deviceTLS, budget: self.deviceBudget) { connection in
                DeviceConnection(connection: connection, gateway: gateway)
            }
        }
        scheduleTicks(on: acceptLoop)
        group.start()
        adminGroup.start()
        ready.store(true, ordering: .releasing)
        if let path = c.readyFile { writeReadyFile(path) }
    }

    /// What to do about a listener that cannot be bound, in the terms of the flag that asked for it.
    static func bindFailure(_ address: HostPort, _ flag: String, _ error: SystemError) -> String {
        var message = "cannot listen on \(address) for \(flag): \(error)"
        switch error.code {
        case EACCES where address.port < 1024:
            message += ". Ports below 1024 need privileges: run as root, give the binary the capability"
                + " (sudo setcap cap_net_bind_service=+ep \(Banner.executablePath())), lower"
                + " net.ipv4.ip_unprivileged_port_start (sudo sysctl net.ipv4.ip_unprivileged_port_start=443),"
                + " or use Apple's other port, 2197"
        case EADDRINUSE:
            message += ". Another program (or another emulator) is listening there; stop it or choose another port"
        case EADDRNOTAVAIL:
            message += ". No network interface has that address; 127.0.0.1 or 0.0.0.0 usually do"
        default:
            break
        }
        return message
    }

    /// Once a second: stored notifications expire, batches and refilled budgets release.
    private func scheduleTicks(on loop: EventLoop) {
        loop.schedule(afterMilliseconds: 1000) { [weak self] in
            guard let self, self.isReady else { return }
            self.devices.tick()
            self.scheduleTicks(on: loop)
        }
    }

    /// A graceful stop: providers get GOAWAY `Shutdown`, as APNs sends before going away.
    public func shutDown(graceMilliseconds: UInt32 = 300) {
        ready.store(false, ordering: .releasing)
        providers.shutDownConnections()
        usleep(graceMilliseconds * 1000)
        stop()
    }

    public func stop() {
        ready.store(false, ordering: .releasing)
        group.stop()
        adminGroup.stop()
        durability?.stop()
        shared?.stop()
        backendCalls.shutdown()
    }

    private func writeReadyFile(_ path: String) {
        let temporary = path + ".tmp"
        guard FileManager.default.createFile(atPath: temporary, contents: Data(addresses.json.serialized(pretty: true).utf8)),
            rename(temporary, path) == 0
        else {
            log("cannot write --ready-file \(path)")
            return
        }
    }

    // MARK: Connections

    /// Listener pauses for lack of file descriptors (metrics).
    let acceptPauses = Atomic<Int>(0)

    /// Gives a new descriptor to the next loop and builds its protocol handler there. Over
    /// its kind's budget the descriptor is closed at once.
    private func hand(fd: Int32, peer: String, tls: Bool, budget: ConnectionBudget? = nil, on chosen: EventLoop? = nil,
                      makeHandler: @escaping @Sendable (Connection) -> ConnectionHandler?) {
        if let budget, !budget.take() {
            Glibc.close(fd)
            if budget.shouldReportRefusal() {
                log("\(budget.kind) connection from \(peer) refused: \(budget.limit) are open (--max-connections)")
            }
            return
        }
        let loop = chosen ?? group.next()
        let id = nextConnectionID.add(1, ordering: .relaxed).oldValue
        let context = tls ? tlsContext : nil
        let build: @Sendable () -> Void = {
            var session: TLSConnection?
            if let context {
                do {
                    session = try TLSConnection(context: context, fd: fd, isServer: true)
                } catch {
                    Glibc.close(fd)
                    budget?.release()
                    return
                }
            }
            let connection = Connection(id: id, loop: loop, fd: fd, peer: peer, tls: session)
            guard let handler = makeHandler(connection) else {
                Glibc.close(fd)
                budget?.release()
                return
            }
            if let budget { connection.onClose = { budget.release() } }
            connection.handler = handler
            connection.start()
        }
        if loop.inEventLoop { build() } else { loop.execute(build) }
    }

    private func acceptProvider(fd: Int32, peer: String, environment: APNsEnvironment, tls: Bool) {
        let endpoint = self.endpoint
        let providers = self.providers
        if let churn = providers.churn, !churn.withLock({ $0.admit(nowMs: Monotonic.nowMilliseconds()) }) {
            // Too many new connections in the window: closed on arrival, as a busy service does.
            close(fd)
            if providers.churnRefused.add(1, ordering: .relaxed).newValue % 1000 == 1 {
                providers.log("--connection-churn: closing new provider connections until the window ends (\(peer))")
            }
            return
        }
        hand(fd: fd, peer: peer, tls: tls, budget: providerBudget) { connection in
            do {
                let handler = try ProviderConnection(connection: connection, listenerEnvironment: environment,
                                                     endpoint: endpoint, providers: providers)
                providers.connectionOpened(handler)
                return handler
            } catch {
                providers.log("cannot create an HTTP/2 session: \(error)")
                return nil
            }
        }
    }
}

/// What every provider connection shares: settings, counters and the table of open ones.
final class ProviderConnections: @unchecked Sendable {
    let idleTimeoutSeconds: Int
    let requestTimeoutSeconds: Int
    let quiet: Bool
    let openConnections = Atomic<Int>(0)
    let connectionsTotal = Atomic<Int>(0)
    let streamsTotal = Atomic<Int>(0)
    let latency: LatencyHistograms
    /// Set once at start-up, before any connection exists.
    var devices: DeviceGateway!
    /// Trusted issuers of provider client certificates; nil = none configured.
    var clientTrust: CertificateTrustStore?
    /// `--state-dir`: answers wait for their changes to be committed. Set once at start-up.
    var durability: StateWriter?
    /// Apple's behaviour under load (`--profile realistic`). Set once at start-up.
    var load = LoadBehaviour()
    /// `--connection-churn`: new connections admitted in the current window.
    var churn: Locked<ChurnLimiter>?
    /// Connections closed on arrival by `--connection-churn` (metrics).
    let churnRefused = Atomic<Int>(0)

    init(idleTimeoutSeconds: Int, requestTimeoutSeconds: Int = 10, quiet: Bool, loops: Int) {
        self.idleTimeoutSeconds = idleTimeoutSeconds
        self.requestTimeoutSeconds = requestTimeoutSeconds
        self.quiet = quiet
        latency = LatencyHistograms(loops: loops)
    }

    /// Counters go back to zero with a reset (gauges stay).
    func resetCounters() {
        connectionsTotal.store(0, ordering: .relaxed)
        streamsTotal.store(0, ordering: .relaxed)
        latency.reset()
    }

    private struct Open: @unchecked Sendable {
        weak var connection: ProviderConnection?
        let loop: EventLoop
    }
    private let open = Locked<[UInt64: Open]>([:])

    func connectionOpened(_ connection: ProviderConnection) {
        openConnections.add(1, ordering: .relaxed)
        connectionsTotal.add(1, ordering: .relaxed)
        open.withLock { $0[connection.connection.id] = Open(connection: connection, loop: connection.connection.loop) }
    }

    /// Ends every provider connection with GOAWAY `{"reason":"Shutdown"}` (on its own loop).
    func shutDownConnections() {
        for entry in open.withLock({ Array($0.values) }) {
            entry.loop.execute { entry.connection?.goAway(reason: .shutdown) }
        }
    }
    func connectionClosed(_ connection: ProviderConnection) {
        openConnections.subtract(1, ordering: .relaxed)
        open.withLock { _ = $0.removeValue(forKey: connection.connection.id) }
    }

    func log(_ message: @autoclosure () -> String) {
        guard !quiet else { return }
        Self.logLine(message())
    }

    static func logLine(_ message: String) {
        let line = "\(RFC3339.format(milliseconds: SystemClock().nowMilliseconds())) \(message)\n"
        FileHandle.standardError.write(Data(line.utf8))
    }
}

/// How many connections of one kind may be open at once (`--max-connections`).
final class ConnectionBudget: Sendable {
    let kind: String
    let limit: Int
    private let open = Atomic<Int>(0)
    /// Connections closed at once because the budget was spent (metrics).
    let refused = Atomic<Int>(0)
    /// When a refusal was last reported (monotonic ms; 0 = never).
    private let lastReport = Atomic<Int64>(0)

    init(kind: String, limit: Int) {
        self.kind = kind
        self.limit = limit
    }

    func take() -> Bool {
        if open.add(1, ordering: .relaxed).newValue <= limit { return true }
        open.subtract(1, ordering: .relaxed)
        refused.add(1, ordering: .relaxed)
        return false
    }

    func release() { open.subtract(1, ordering: .relaxed) }

    /// At most one log line every 10 seconds while connections are being refused.
    func shouldReportRefusal() -> Bool {
        let now = Monotonic.nowMilliseconds()
        let last = lastReport.load(ordering: .relaxed)
        guard last == 0 || now - last >= 10_000 else { return false }
        return lastReport.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged
    }
}
