// ProviderConnections: what every provider connection shares (settings, counters, the table
// of open ones) and the drain that ends them.
import APNsCore
import Foundation
import Lifecycle
import Locking
import MonotonicClock
import Networking
import OpenSSLCrypto
import StatePersistence
import Synchronization

/// What every provider connection shares: settings, counters and the table of open ones.
final class ProviderConnections: @unchecked Sendable {
    let idleTimeoutSeconds: Int
    let requestTimeoutSeconds: Int
    let logger: Logger
    let openConnections = Atomic<Int>(0)
    let connectionsTotal = Atomic<Int>(0)
    let streamsTotal = Atomic<Int>(0)
    /// `--redis`: pushes whose stateful stages waited for the lease on the deferred thread.
    let deferredPushes = Atomic<Int>(0)
    let latency: LatencyHistograms
    /// Where the frames their pushes make go.
    let devices: DeviceGateway
    /// Channel management and broadcast sends.
    let channels: ChannelEndpoint
    /// The endpoints' TLS material, with the trusted issuers of client certificates.
    let tls: ServerTLS
    /// `--state-dir` or `--redis`: answers wait for their changes to be committed.
    let commits: (any CommitTracker)?
    /// `--redis`: pushes judged while another instance holds the lease.
    let deferredChecks: DeferredPushChecks?
    /// Apple's behaviour under load (`--profile realistic`).
    let load: LoadBehaviour
    /// `--connection-churn`: new connections admitted in the current window.
    let churn: Locked<ChurnLimiter>?
    /// Channel management and broadcast requests answered, by operation and status (metrics).
    let channelRequests = Locked<[ChannelRequestKey: Int]>([:])
    struct ChannelRequestKey: Hashable, Sendable {
        var operation: String
        var status: Int
    }

    func countChannelRequest(operation: String, status: Int) {
        channelRequests.withLock { $0[ChannelRequestKey(operation: operation, status: status), default: 0] += 1 }
    }

    /// Connections closed on arrival by `--connection-churn` (metrics).
    let churnRefused = Atomic<Int>(0)
    /// Certificate connections ended with GOAWAY `BadCertificateEnvironment` on arrival (metrics).
    let certificateEnvironmentRefused = Atomic<Int>(0)
    /// Connections the HTTP/2 layer ended for the client's error (a flood, a protocol or
    /// compression error), with GOAWAY (metrics).
    let http2Errors = Atomic<Int>(0)
    /// Connections ended with GOAWAY by `--error-disconnect` (metrics).
    let errorDisconnects = Atomic<Int>(0)
    /// The log lines of streams reset one by one (stalled, malformed, over a limit), which a
    /// client causes at will: 20 every 10 s in the whole emulator, the rest counted.
    let streamResetLog = LogAllowance(lines: 20, windowMilliseconds: 10_000)

    func countErrorDisconnect() { errorDisconnects.add(1, ordering: .relaxed) }

    init(
        connections: ServeConfiguration.Connections, load: LoadBehaviour, devices: DeviceGateway, channels: ChannelEndpoint,
        commits: (any CommitTracker)?, deferredChecks: DeferredPushChecks?,
        tls: ServerTLS, logger: Logger
    ) {
        self.deferredChecks = deferredChecks
        idleTimeoutSeconds = connections.idleTimeoutSeconds
        requestTimeoutSeconds = connections.requestTimeoutSeconds
        latency = LatencyHistograms(loops: connections.threads)
        self.load = load
        churn = load.connectionChurn.map { Locked(ChurnLimiter(limit: $0.count, windowMs: $0.windowMs)) }
        self.devices = devices
        self.channels = channels
        self.commits = commits
        self.tls = tls
        self.logger = logger
    }

    /// Counters go back to zero with a reset (gauges stay).
    func resetCounters() {
        connectionsTotal.store(0, ordering: .relaxed)
        streamsTotal.store(0, ordering: .relaxed)
        deferredPushes.store(0, ordering: .relaxed)
        churnRefused.store(0, ordering: .relaxed)
        certificateEnvironmentRefused.store(0, ordering: .relaxed)
        http2Errors.store(0, ordering: .relaxed)
        errorDisconnects.store(0, ordering: .relaxed)
        channelRequests.withLock { $0 = [:] }
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

    /// Ends every provider connection with GOAWAY `{"reason":"Shutdown"}` (on its own loop),
    /// as APNs does before going away, then waits until the providers have closed them or
    /// `deadlineMs` (Monotonic) has passed, whichever is first.
    /// A deadline already passed closes at once, without GOAWAY (as a killed APNs would).
    func drain(deadlineMs: Int64) {
        guard deadlineMs > Monotonic.nowMilliseconds() else { return }
        for entry in open.withLock({ Array($0.values) }) {
            entry.loop.execute { entry.connection?.goAway(reason: .shutdown) }
        }
        while openConnections.load(ordering: .relaxed) > 0, Monotonic.nowMilliseconds() < deadlineMs { usleep(5_000) }
    }
    func connectionClosed(_ connection: ProviderConnection) {
        openConnections.subtract(1, ordering: .relaxed)
        open.withLock { _ = $0.removeValue(forKey: connection.connection.id) }
    }
}
