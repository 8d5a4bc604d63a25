// EmulatorServer: the composition of the server: configuration, the provider connections,
// the device gateway, the admin API's host and the listeners that tie them to event loops,
// started and stopped as an ordered list of services. Imports the core, the wrappers (HTTP2,
// OpenSSLCrypto, Networking), the stores, AdminAPI, HTTP1Server, BackendCalls, Lifecycle and
// CommandLineOptions.

import AdminAPI
public import APNsCore
import BackendCalls
import Foundation
import Glibc
import HTTP1Server
public import Lifecycle
import MonotonicClock
import Networking
import OpenSSLCrypto
import StatePersistence
import Synchronization
import Locking
import RedisStore

public struct StartupError: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ description: String) { self.description = description }

    /// `what` and why, in words: a file-system error's own sentence rather than Foundation's
    /// dump of its domain, code and user info.
    init(_ what: String, because error: any Error) {
        self.description = "\(what): " + ((error as? CocoaError)?.localizedDescription ?? "\(error)")
    }
}

/// The composition root of `apns-emulator serve`. `init` builds every part from the
/// configuration and reads what it names (keys, the state directory) but starts nothing: no
/// thread, socket or write. `start` starts the services in order; `stop` ends them in
/// reverse, giving open provider connections until a deadline to go.
public final class Emulator: Sendable {
    public static let version = "0.1.0"
    public static let demoTeamID = "DEMOTEAM00"
    public static let demoKeyID = "DEMOKEY000"
    public static let demoBundleID = "com.example.app"
    public static let demoDeviceID = "demo-iphone"

    public let configuration: ServeConfiguration
    public let logger: Logger
    public let clock: any EmulatorClock
    public let state: EmulatorState
    /// The emulator's time: the followed clock plus what `POST /api/v1/clock` added.
    let offsetClock: OffsetClock
    let group: EventLoopGroup
    /// The admin API's own loop.
    let adminGroup: EventLoopGroup
    let providers: ProviderConnections
    let devices: DeviceGateway
    /// `--state-dir`: the writer that commits changes; nil keeps everything in memory.
    let durability: StateWriter?
    /// `--redis`: the instances sharing this world; nil for a single instance.
    let shared: RedisCoordinator?
    /// The simulated apps' calls to their backends.
    let backendCalls: BackendCaller
    let events: EventHub
    let adminMetrics = AdminMetrics()
    let adminService: AdminService
    let adminServer: HTTP1Server
    let listeners: ListenerSet
    private let serving: Serving
    private let services: ServiceGroup
    /// The demo key's path when demo mode made the demo device.
    private let demoKeyPath: String?
    public let startedAtMs: Int64
    /// When it started on the monotonic clock: uptime is real time, whatever the emulator's
    /// clock was moved by (`POST /api/v1/clock`).
    private let startedMonotonicMs: Int64
    public var uptimeMilliseconds: Int64 { Monotonic.nowMilliseconds() - startedMonotonicMs }

    public var isReady: Bool { serving.isReady }
    /// The addresses bound (empty before `start`).
    public var addresses: BoundAddresses { listeners.addresses }
    /// Demo mode: the key's path and the demo device's sandbox token, as the state has it now.
    public var demo: (keyPath: String, token: String)? {
        guard let demoKeyPath,
            let token = state.readWorld({ $0.registry.devices[Self.demoDeviceID]?.apps[Self.demoBundleID]?.tokens[.app] })
        else { return nil }
        return (demoKeyPath, token)
    }

    /// `logger` defaults to standard error, info and up (warnings and up with `quiet`).
    public init(
        configuration: ServeConfiguration, clock followed: any EmulatorClock = SystemClock(), logger: Logger? = nil
    )
        throws(StartupError)
    {
        self.configuration = configuration
        let logger =
            logger
            ?? Logger(minimum: configuration.quiet ? .warning : .info) {
                RFC3339.format(milliseconds: SystemClock().nowMilliseconds())
            }
        self.logger = logger
        for message in configuration.settingsWithoutEffect { logger.warning(message) }
        for key in configuration.authKeys where key.teamID.utf8.count != 10 || key.keyID.utf8.count != 10 {
            logger.warning(
                "auth key \(key.keyID) of team \(key.teamID): Apple's key and team ids are 10 characters; a provider set up with these ids is refused by APNs (403 InvalidProviderToken)"
            )
        }
        if let readyFile = configuration.readyFile { try Serving.checkReadyFile(readyFile) }
        let clock = OffsetClock(base: followed)
        self.clock = clock
        offsetClock = clock
        startedAtMs = clock.nowMilliseconds()
        startedMonotonicMs = Monotonic.nowMilliseconds()

        // The world to start with: the configuration, laid under what a state directory holds.
        var world = World(
            registry: DeviceRegistry(tokenByteCount: configuration.tokenBytes, limits: configuration.registryLimits),
            records: RecordStore(capacity: configuration.records.maxRecords, byteBudget: configuration.records.maxRecordBytes),
            deliveryOptions: configuration.delivery)
        world.deliveryOptions.deliveryIDsAreSequences = configuration.state.redis != nil
        // Before the configured devices: their Live Activities take the policy when declared.
        world.liveActivities.policy = configuration.liveActivities
        world.liveActivities.policy.tokenByteCount = configuration.tokenBytes
        let madeDemoDevice = try StartCredentials.configure(configuration, into: &world, clock: clock)
        demoKeyPath = madeDemoDevice ? StartCredentials.demoKeyPath(configuration) : nil
        for rule in configuration.faultRules { world.faults.add(rule) }
        world.backends = configuration.backends
        world.broadcastDisabledApps = configuration.broadcastDisabledApps
        world.channels.maxLivePerApp = configuration.records.maxChannels
        world.channels.maxBroadcastsPerSecond = configuration.records.channelBroadcastRate
        var current = world
        var stateDirectory: StateDirectoryService?
        if let directory = configuration.state.directory {
            let (restored, service) = try StateDirectory.open(
                directory.path, configured: world, journalLag: directory.journalLag,
                onFailure: directory.onFailure, clock: clock, logger: logger)
            current = restored
            stateDirectory = service
            for warning in StartCredentials.pinnedTokensNotKept(configuration.devices, in: current, stateName: directory.path) {
                logger.warning("state: " + warning)
            }
        }
        durability = stateDirectory?.writer
        if configuration.state.redis != nil { current.startTrackingChanges() }

        let backendCalls = BackendCaller(
            now: { clock.nowMilliseconds() }, maxQueued: configuration.records.maxBackendCalls,
            logCapacity: configuration.records.maxBackendCalls)
        self.backendCalls = backendCalls
        state = EmulatorState(start: current, persistence: durability) { [weak backendCalls] intents in
            backendCalls?.enqueue(intents.map(BackendRequest.init(intent:)))
        }
        // A reset goes back to the configuration, not to what a state directory held.
        state.setStartState(world)
        if let redis = configuration.state.redis {
            let coordinator = RedisCoordinator(
                store: RedisStateStore(url: redis.url, prefix: redis.prefix), state: state,
                configured: world, clock: clock, loadKey: StateDirectory.loadKey, logger: logger,
                followsJournalLazily: redis.follow == .lazy)
            state.attach(coordinator: coordinator)
            shared = coordinator
        } else {
            shared = nil
        }

        let tls = ServerTLS(configuration: configuration, logger: logger)
        let shared = self.shared
        var relay: (@Sendable ([DeviceFrame]) -> Void)?
        if let shared { relay = { [weak shared] frames in shared?.relay(frames) } }
        let commits: (any CommitTracker)? = durability ?? self.shared
        let devices = DeviceGateway(state: state, clock: clock, commits: commits, logger: logger, relay: relay)
        self.devices = devices
        shared?.deliverFrames.set { [weak devices] frames in devices?.dispatch(frames) }
        if shared != nil {
            state.routeWaitingPushesBeforeLeaseChanges(now: { clock.nowMilliseconds() }) { [weak devices] frames in
                devices?.dispatch(frames)
            }
        }
        // A reset through another instance attaches the devices connected here again, as one
        // through this instance does (they would keep a socket for a device that is gone); a
        // reload that undid the close of a connection here detaches its device.
        if shared != nil {
            state.observeSharedResets { [weak devices] reattach in
                devices?.detachClosedConnections()
                if reattach { devices?.reattachAll() }
            }
        }
        let endpoint = ProviderEndpoint(state: state, clock: clock, options: configuration.endpoint)
        providers = ProviderConnections(
            connections: configuration.connections, load: configuration.load, devices: devices,
            channels: ChannelEndpoint(state: state, clock: clock),
            commits: commits, deferredChecks: shared.map { DeferredPushChecks(endpoint: endpoint, commits: $0) },
            tls: tls, logger: logger)
        events = EventHub(state: state, metrics: adminMetrics)
        let events = self.events
        backendCalls.onChange = { [weak events] call in events?.backendCallChanged(call) }
        do {
            group = try EventLoopGroup(count: configuration.connections.threads)
            adminGroup = try EventLoopGroup(count: 1, namePrefix: "admin")
        } catch {
            throw StartupError("cannot create event loops: \(error)")
        }
        let adminHost = EmulatorAdminHost()
        adminService = Self.makeAdminService(configuration, host: adminHost, events: events, metrics: adminMetrics)
        adminServer = Self.makeAdminServer(configuration, service: adminService)
        listeners = ListenerSet(
            configuration: configuration, tls: tls, group: group, adminLoop: adminGroup.loops[0], endpoint: endpoint,
            providers: providers, devices: devices, admin: adminServer, logger: logger
        ) { [weak shared] in
            shared?.firstConnectionID ?? 1
        }

        // Started in this order, stopped in reverse: each may rely on those before it.
        var parts: [any Service] = []
        if let stateDirectory { parts.append(stateDirectory) }
        if let shared { parts.append(shared) }
        parts.append(ServicePart("backend calls", stop: { [backendCalls] _ in backendCalls.shutdown() }))
        parts.append(tls)
        parts.append(listeners)
        parts.append(
            ServicePart(
                "event loops",
                start: { [group, adminGroup] in
                    group.start()
                    adminGroup.start()
                },
                stop: { [group, adminGroup, providers] _ in
                    group.stop()
                    adminGroup.stop()
                    providers.deferredChecks?.stop()
                }))
        if stateDirectory != nil || shared != nil {
            // Loading a kept or shared state leaves its decoding's garbage in the heap, which
            // glibc keeps: an instance that loaded 19,000 records held 108 MB, one that made
            // them 62 MB. Given back before serving.
            parts.append(ServicePart("loaded state's garbage", start: { Memory.returnFreedPages() }, stop: { _ in }))
        }
        serving = Serving(
            tickLoop: group.loops[0], devices: devices, listeners: listeners, providers: providers,
            readyFile: configuration.readyFile, logger: logger)
        parts.append(serving)
        services = ServiceGroup(parts)
        adminHost.attach(self)
    }

    public func log(_ message: @autoclosure () -> String) { logger.info(message()) }

    /// Starts every service in order. On failure the ones already started are stopped and
    /// the error says what failed, in the words of the flag that asked for it.
    public func start() throws(StartupError) {
        signal(SIGPIPE, SIG_IGN)
        // Past a file-size limit (ulimit -f) a write fails with EFBIG, which the state writer
        // handles like a full disk, instead of the signal killing the process.
        signal(SIGXFSZ, SIG_IGN)
        do { try services.start() } catch { throw StartupError(error.description) }
    }

    /// Stops every service in reverse order. Provider connections get GOAWAY `Shutdown` (as
    /// APNs sends before going away) and until `drainMilliseconds` from now to close; then
    /// the loops end, the backend calls stop and the state is committed. Later calls return
    /// at once.
    public func stop(drainMilliseconds: Int64 = 0) { services.stop(within: drainMilliseconds) }
}

/// The last service: once everything else runs, the emulator is ready (`/readyz`, the
/// `--ready-file`) and ticks once a second; stopping it is the drain, which comes first.
private final class Serving: Service {
    var serviceName: String { "serving" }
    private let ready = Atomic<Bool>(false)
    private let tickLoop: EventLoop
    private let devices: DeviceGateway
    private let listeners: ListenerSet
    private let providers: ProviderConnections
    private let readyFile: String?
    private let logger: Logger

    init(
        tickLoop: EventLoop, devices: DeviceGateway, listeners: ListenerSet, providers: ProviderConnections, readyFile: String?,
        logger: Logger
    ) {
        self.tickLoop = tickLoop
        self.devices = devices
        self.listeners = listeners
        self.providers = providers
        self.readyFile = readyFile
        self.logger = logger
    }

    var isReady: Bool { ready.load(ordering: .acquiring) }

    func start() {
        tickLoop.execute { [weak self] in self?.scheduleTicks() }  // timers are set on the loop's thread
        ready.store(true, ordering: .releasing)
        if let readyFile { writeReadyFile(readyFile) }
    }

    /// Not ready, no new connections, providers told to go and given until the deadline.
    func stop(deadlineMs: Int64) {
        ready.store(false, ordering: .releasing)
        // Not ready any more: a harness waiting for the file must not find it.
        if let readyFile { unlink(readyFile) }
        listeners.stopAccepting()
        providers.drain(deadlineMs: deadlineMs)
    }

    /// Once a second: stored notifications expire, batches and refilled budgets release.
    private func scheduleTicks() {
        tickLoop.schedule(afterMilliseconds: 1000) { [weak self] in
            guard let self, self.isReady else { return }
            self.devices.tick()
            self.scheduleTicks()
        }
    }

    /// The ready file must be writable where it is asked for: a harness waiting for it would
    /// otherwise wait for its own timeout while the emulator serves.
    static func checkReadyFile(_ path: String) throws(StartupError) {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw StartupError("--ready-file \(path) is a directory; give a file path")
        }
        let parent = (path as NSString).deletingLastPathComponent
        let directory = parent.isEmpty ? "." : parent
        guard access(directory, W_OK) == 0 else {
            throw StartupError("--ready-file \(path): cannot write in \(directory) (\(String(cString: strerror(errno))))")
        }
        // One left by an earlier run names its addresses: gone until this one is ready.
        unlink(path)
    }

    private func writeReadyFile(_ path: String) {
        let temporary = path + ".tmp"
        guard FileManager.default.createFile(atPath: temporary, contents: Data(listeners.addresses.json.serialized(pretty: true).utf8)),
            rename(temporary, path) == 0
        else {
            logger.warning("cannot write --ready-file \(path) (\(String(cString: strerror(errno))))")
            return
        }
    }
}

/// A service made of two closures, for parts whose own module knows nothing of services.
final class ServicePart: Service {
    let serviceName: String
    private let starting: @Sendable () throws -> Void
    private let stopping: @Sendable (_ deadlineMs: Int64) -> Void

    init(_ name: String, start: @escaping @Sendable () throws -> Void = {}, stop: @escaping @Sendable (_ deadlineMs: Int64) -> Void) {
        serviceName = name
        starting = start
        stopping = stop
    }

    func start() throws { try starting() }
    func stop(deadlineMs: Int64) { stopping(deadlineMs) }
}
