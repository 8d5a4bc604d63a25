// ListenerSet: the listeners of `serve` (provider endpoints, admin API, device socket) as one
// service, and the hand-over of each accepted descriptor to an event loop with its protocol.
import APNsCore
import Foundation
import Glibc
import HTTP1Server
import Lifecycle
import Locking
import MonotonicClock
import Networking
import OpenSSLCrypto
import Synchronization

/// Binds every configured listener when started (making TEST ONLY certificates first when
/// they are needed and missing) and closes them when stopped. Accepted connections go to
/// the provider loops, except the admin API's, which has a loop of its own.
final class ListenerSet: Service, @unchecked Sendable {
    var serviceName: String { "listeners" }
    private let configured: ServeConfiguration.Listeners
    private let tlsSource: ServeConfiguration.TLSSource
    private let tls: ServerTLS
    private let group: EventLoopGroup
    private let adminLoop: EventLoop
    private let endpoint: ProviderEndpoint
    private let providers: ProviderConnections
    private let devices: DeviceGateway
    private let admin: HTTP1Server
    let providerBudget: ConnectionBudget
    let deviceBudget: ConnectionBudget
    private let logger: Logger
    /// Connection ids: unique per instance, and with `--redis` across instances (the high
    /// bits are the instance's number, known once the shared state is joined).
    private let nextConnectionID = Atomic<UInt64>(1)
    private let firstConnectionID: @Sendable () -> UInt64
    /// Listener pauses for lack of file descriptors (metrics).
    let acceptPauses = Atomic<Int>(0)

    /// Counters go back to zero with a reset.
    func resetCounters() {
        acceptPauses.store(0, ordering: .relaxed)
        providerBudget.refused.store(0, ordering: .relaxed)
        deviceBudget.refused.store(0, ordering: .relaxed)
    }
    // Written by `start` before any loop runs, read by the loops after.
    private var listeners: [(listener: Listener, loop: EventLoop)] = []
    private let bound = Locked(BoundAddresses())

    init(
        configuration: ServeConfiguration, tls: ServerTLS, group: EventLoopGroup, adminLoop: EventLoop, endpoint: ProviderEndpoint,
        providers: ProviderConnections, devices: DeviceGateway, admin: HTTP1Server, logger: Logger,
        firstConnectionID: @escaping @Sendable () -> UInt64
    ) {
        configured = configuration.listeners
        tlsSource = configuration.tls.source
        self.tls = tls
        self.group = group
        self.adminLoop = adminLoop
        self.endpoint = endpoint
        self.providers = providers
        self.devices = devices
        self.admin = admin
        self.logger = logger
        self.firstConnectionID = firstConnectionID
        providerBudget = ConnectionBudget(kind: "provider", limit: configuration.connections.maxConnections)
        deviceBudget = ConnectionBudget(kind: "device", limit: configuration.connections.maxConnections)
    }

    /// What was bound (real ports where 0 was asked for); empty before `start`.
    var addresses: BoundAddresses { bound.withLock { $0 } }

    func start() throws {
        nextConnectionID.store(firstConnectionID(), ordering: .relaxed)
        var addresses = BoundAddresses()
        if configured.needsServerCertificate, let path = tlsSource.generatedCAPath {
            // Absolute: the ready file, /api/v1/info and the curl export are read elsewhere.
            addresses.caFile = absolutePath(path)
        }
        let configured = self.configured
        let acceptLoop = group.loops[0]
        for address in configured.listen {
            // Sandbox unless the name the client asked for is Apple's production host; channel
            // management when it is one of Apple's channel-management hosts.
            if let bound = try bind(
                address, "--listen", on: acceptLoop,
                { [unowned self] fd, peer in
                    self.acceptProvider(fd: fd, peer: peer, environment: .sandbox, tls: true, role: .byName)
                })
            {
                addresses.listen.append(bound)
            }
        }
        addresses.sandbox = try bind(configured.sandbox, "--sandbox-listen", on: acceptLoop) { [unowned self] fd, peer in
            self.acceptProvider(fd: fd, peer: peer, environment: .sandbox, tls: true)
        }
        addresses.production = try bind(configured.production, "--production-listen", on: acceptLoop) { [unowned self] fd, peer in
            self.acceptProvider(fd: fd, peer: peer, environment: .production, tls: true)
        }
        addresses.h2cSandbox = try bind(configured.h2cSandbox, "--h2c-sandbox-listen", on: acceptLoop) { [unowned self] fd, peer in
            self.acceptProvider(fd: fd, peer: peer, environment: .sandbox, tls: false)
        }
        addresses.h2cProduction = try bind(configured.h2cProduction, "--h2c-production-listen", on: acceptLoop) { [unowned self] fd, peer in
            self.acceptProvider(fd: fd, peer: peer, environment: .production, tls: false)
        }
        addresses.channelSandbox = try bind(configured.channelSandbox, "--channel-sandbox-listen", on: acceptLoop) {
            [unowned self] fd, peer in
            self.acceptProvider(fd: fd, peer: peer, environment: .sandbox, tls: true, role: .channelManagement)
        }
        addresses.channelProduction = try bind(configured.channelProduction, "--channel-production-listen", on: acceptLoop) {
            [unowned self] fd, peer in
            self.acceptProvider(fd: fd, peer: peer, environment: .production, tls: true, role: .channelManagement)
        }
        // Its own loop, accepting too: the admin API answers while provider loops are busy
        // (a load test, or with --redis a slow Redis they wait for).
        let admin = self.admin
        let adminLoop = self.adminLoop
        addresses.admin = try bind(configured.admin, "--admin-listen", on: adminLoop) { [unowned self] fd, peer in
            self.hand(fd: fd, peer: peer, tls: false, on: adminLoop) { connection in admin.connection(connection) }
        }
        let gateway = devices
        addresses.device = try bind(configured.device, "--device-listen", on: acceptLoop) { [unowned self] fd, peer in
            self.hand(fd: fd, peer: peer, tls: configured.deviceTLS, budget: self.deviceBudget) { connection in
                DeviceConnection(connection: connection, gateway: gateway)
            }
        }
        bound.withLock { $0 = addresses }
    }

    /// No new connections: each listening socket is closed on its loop (at once when the
    /// loop never ran; a stopped loop has closed it already). Accepted connections stay.
    func stopAccepting() {
        for (listener, loop) in listeners {
            if loop.isConfinedToCaller {
                listener.close()
            } else {
                let listener = LoopConfined(value: listener)
                loop.execute { listener.value.close() }
            }
        }
    }

    func stop(deadlineMs: Int64) { stopAccepting() }

    private func bind(
        _ address: HostPort?, _ what: String, on loop: EventLoop,
        _ accept: @escaping (Int32, String) -> Void
    ) throws(StartupError) -> HostPort? {
        guard let address else { return nil }
        do {
            let listener = try Listener(address: address, loop: loop, accept: accept)
            let bound = listener.address
            let logger = self.logger
            listener.onExhausted = { [unowned self] code in
                self.acceptPauses.add(1, ordering: .relaxed)
                logger.warning(
                    "\(what) \(bound): out of file descriptors (\(String(cString: strerror(code)))); not accepting for a moment. The open-file limit is \(OpenFileLimit.current); raise it (ulimit -n) or lower --max-connections"
                )
            }
            listener.onError = { error in logger.warning("\(what) \(bound): \(error)") }
            try listener.start()
            listeners.append((listener, loop))
            return listener.address
        } catch {
            throw StartupError(Self.bindFailure(address, what, error))
        }
    }

    /// What to do about a listener that cannot be bound, in the terms of the flag that asked for it.
    static func bindFailure(_ address: HostPort, _ flag: String, _ error: SystemError) -> String {
        var message = "cannot listen on \(address) for \(flag): \(error)"
        switch error.code {
        case EACCES where address.port < 1024:
            message +=
                ". Ports below 1024 need privileges: run as root, give the binary the capability"
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

    /// Gives a new descriptor to the next loop and builds its protocol handler there. Over
    /// its kind's budget the descriptor is closed at once.
    private func hand(
        fd: Int32, peer: String, tls: Bool, budget: ConnectionBudget? = nil, on chosen: EventLoop? = nil,
        makeHandler: @escaping @Sendable (Connection) -> ConnectionHandler?
    ) {
        if let budget, !budget.take() {
            Glibc.close(fd)
            if budget.shouldReportRefusal() {
                logger.warning("\(budget.kind) connection from \(peer) refused: \(budget.limit) already open, the most --max-connections allows")
            }
            return
        }
        let loop = chosen ?? group.next()
        let id = nextConnectionID.add(1, ordering: .relaxed).oldValue
        let context = tls ? self.tls.context : nil
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

    private func acceptProvider(
        fd: Int32, peer: String, environment: APNsEnvironment, tls: Bool, role: ProviderConnection.Role = .push
    ) {
        let endpoint = self.endpoint
        let providers = self.providers
        if let churn = providers.churn, !churn.withLock({ $0.admit(nowMs: Monotonic.nowMilliseconds()) }) {
            // Too many new connections in the window: closed on arrival, as a busy service does.
            close(fd)
            if providers.churnRefused.add(1, ordering: .relaxed).newValue % 1000 == 1 {
                providers.logger.info("--connection-churn: closing new provider connections until the window ends (\(peer))")
            }
            return
        }
        hand(fd: fd, peer: peer, tls: tls, budget: providerBudget) { connection in
            do {
                let handler = try ProviderConnection(
                    connection: connection, listenerEnvironment: environment,
                    endpoint: endpoint, providers: providers, role: role)
                providers.connectionOpened(handler)
                return handler
            } catch {
                providers.logger.warning("cannot create an HTTP/2 session: \(error)")
                return nil
            }
        }
    }
}

/// A value handed to a loop's task and touched only on that loop's thread.
private struct LoopConfined<Value>: @unchecked Sendable {
    let value: Value
}
