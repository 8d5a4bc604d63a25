// ServeConfiguration: everything `apns-emulator serve` needs, as typed parts that each state
// their own defaults. Values only: reading flags, variables and config files is in the
// `+Options` files beside this one; nothing here does I/O. Imports only the modules whose
// types and defaults the parts are made of.
public import APNsCore
public import BackendCalls
public import Foundation
public import Networking
public import Redis
public import RedisStore
public import StatePersistence

/// Everything `apns-emulator serve` needs. `ServeConfiguration()` is what `serve` runs with when
/// it is given no options: the option table shows these defaults, it does not restate them.
public struct ServeConfiguration: Sendable {
    /// Where it listens: provider endpoints, admin API, device socket.
    public var listeners: Listeners
    /// The server certificate, and the CA that provider client certificates must chain to.
    public var tls: TLS
    /// Where the state lives: this process's memory, a directory, or Redis.
    public var state: StateBackend
    /// Provider signing keys (`--auth-key`).
    public var authKeys: [AuthKeySpec]
    /// Apps and the team that owns each (`--app`).
    public var apps: [(teamID: String, bundleID: String)]
    /// Apps' own backends (`"backend"` under an app in the config file), by bundle id.
    public var backends: [String: AppBackend]
    /// Devices that exist from the start (the config file's `"devices"`).
    public var devices: [DeviceSpec]
    /// The quick start's key, app and device (`--demo`).
    public var demo: Demo
    /// Fault rules active from the start (`--faults FILE`).
    public var faultRules: [FaultRule]
    /// Event loops, and what one provider connection may take.
    public var connections: Connections
    /// What is kept for inspection.
    public var records: RecordLimits
    /// Length of issued device tokens in bytes.
    public var tokenBytes: Int
    public var endpoint: EndpointOptions
    public var delivery: DeliveryOptions
    /// How the provider endpoint pushes back under load (`--profile realistic` and its parts).
    public var load: LoadBehaviour
    /// Who may use the admin API and what it may cost (AdminOptions.swift).
    public var admin: AdminOptions
    /// `GET /api/v1/checks` answers 409 while a check fails.
    public var strictChecks: Bool
    /// Where to write the bound addresses once listening.
    public var readyFile: String?
    /// No banner and no per-connection log lines.
    public var quiet: Bool

    public init(listeners: Listeners = Listeners(), tls: TLS = TLS(), state: StateBackend = .memory,
                authKeys: [AuthKeySpec] = [], apps: [(teamID: String, bundleID: String)] = [], backends: [String: AppBackend] = [:],
                devices: [DeviceSpec] = [], demo: Demo = .auto, faultRules: [FaultRule] = [],
                connections: Connections = Connections(), records: RecordLimits = RecordLimits(),
                tokenBytes: Int = DeviceRegistry.defaultTokenByteCount, endpoint: EndpointOptions = EndpointOptions(),
                delivery: DeliveryOptions = DeliveryOptions(), load: LoadBehaviour = LoadBehaviour(), admin: AdminOptions = AdminOptions(),
                strictChecks: Bool = false, readyFile: String? = nil, quiet: Bool = false)
    {
        self.listeners = listeners
        self.tls = tls
        self.state = state
        self.authKeys = authKeys
        self.apps = apps
        self.backends = backends
        self.devices = devices
        self.demo = demo
        self.faultRules = faultRules
        self.connections = connections
        self.records = records
        self.tokenBytes = tokenBytes
        self.endpoint = endpoint
        self.delivery = delivery
        self.load = load
        self.admin = admin
        self.strictChecks = strictChecks
        self.readyFile = readyFile
        self.quiet = quiet
    }

    /// Whether the demo key, app and device are made: `auto` makes them when no key is configured.
    public var makesDemo: Bool {
        switch demo {
        case .on: return true
        case .off: return false
        case .auto: return authKeys.isEmpty
        }
    }
}

extension ServeConfiguration {
    /// Where `serve` listens; nil is off. The defaults are on loopback.
    public struct Listeners: Sendable, Equatable {
        /// Listeners that behave like Apple's hosts: each connection's environment comes from the
        /// name it asked for (SNI, `:authority`), sandbox when that is not an Apple host name.
        public var listen: [HostPort]
        public var sandbox: HostPort?
        public var production: HostPort?
        /// Cleartext HTTP/2 (prior knowledge).
        public var h2cSandbox: HostPort?
        public var h2cProduction: HostPort?
        public var admin: HostPort?
        public var device: HostPort?
        /// The device socket speaks TLS (the providers' certificate) instead of plain TCP.
        public var deviceTLS: Bool

        public init(listen: [HostPort] = [], sandbox: HostPort? = HostPort(host: "127.0.0.1", port: 2197),
                    production: HostPort? = HostPort(host: "127.0.0.1", port: 2198), h2cSandbox: HostPort? = nil,
                    h2cProduction: HostPort? = nil, admin: HostPort? = HostPort(host: "127.0.0.1", port: 8197),
                    device: HostPort? = HostPort(host: "127.0.0.1", port: 5223), deviceTLS: Bool = false)
        {
            self.listen = listen
            self.sandbox = sandbox
            self.production = production
            self.h2cSandbox = h2cSandbox
            self.h2cProduction = h2cProduction
            self.admin = admin
            self.device = device
            self.deviceTLS = deviceTLS
        }

        /// Whether a provider listener speaks TLS.
        public var hasTLSProviderListener: Bool { !listen.isEmpty || sandbox != nil || production != nil }
        /// Whether any listener needs the server certificate.
        public var needsServerCertificate: Bool { hasTLSProviderListener || (deviceTLS && device != nil) }
    }

    /// Where the server certificate comes from.
    public enum TLSSource: Sendable, Equatable {
        /// TEST ONLY certificates in the directory (made when missing); its CA is the one to trust.
        case generated(certsDirectory: String)
        /// The operator's own chain and key. The directory still holds the demo key and the
        /// default client CA.
        case files(certificate: String, key: String, certsDirectory: String)

        public static let defaultCertsDirectory = "certs"

        public var certsDirectory: String {
            switch self {
            case .generated(let directory), .files(_, _, let directory): return directory
            }
        }

        public var certificatePath: String {
            switch self {
            case .generated(let directory): return "\(directory)/server.pem"
            case .files(let certificate, _, _): return certificate
            }
        }

        public var keyPath: String {
            switch self {
            case .generated(let directory): return "\(directory)/server-key.pem"
            case .files(_, let key, _): return key
            }
        }

        /// The CA of the generated certificates, what providers must trust; nil for the operator's own.
        public var generatedCAPath: String? {
            guard case .generated(let directory) = self else { return nil }
            return "\(directory)/ca.pem"
        }
    }

    public struct TLS: Sendable, Equatable {
        public var source: TLSSource
        /// The CA provider (client) certificates must chain to; nil = CERTS-DIR/ca.pem when present.
        public var clientCAPath: String?

        public init(source: TLSSource = .generated(certsDirectory: TLSSource.defaultCertsDirectory), clientCAPath: String? = nil) {
            self.source = source
            self.clientCAPath = clientCAPath
        }

        /// The client CA to load, and whether it must exist (given) or is used only when present.
        public var clientCA: (path: String, required: Bool) {
            (clientCAPath ?? "\(source.certsDirectory)/ca.pem", clientCAPath != nil)
        }
    }

    /// Where the state lives. One of three: a state directory and Redis cannot both be chosen.
    public enum StateBackend: Sendable, Equatable {
        /// This process only, gone at exit.
        case memory
        /// Survives restarts in a directory (SQLite).
        case directory(Directory)
        /// Shared with other instances through Redis.
        case redis(Redis)

        public struct Directory: Sendable, Equatable {
            public static let defaultJournalLag = 0
            public static let defaultOnFailure = StateFailurePolicy.refuse
            public var path: String
            /// Journal records a 200 may be sent ahead of their commit.
            public var journalLag: Int
            /// While the directory cannot commit: refuse work (503) or go on in memory.
            public var onFailure: StateFailurePolicy

            public init(path: String, journalLag: Int = defaultJournalLag, onFailure: StateFailurePolicy = defaultOnFailure) {
                self.path = path
                self.journalLag = journalLag
                self.onFailure = onFailure
            }
        }

        public struct Redis: Sendable, Equatable {
            public var url: RedisURL
            /// Every key's prefix (several emulators in one Redis database).
            public var prefix: String

            public init(url: RedisURL, prefix: String = RedisStateStore.defaultPrefix) {
                self.url = url
                self.prefix = prefix
            }
        }

        public var directory: Directory? {
            guard case .directory(let directory) = self else { return nil }
            return directory
        }

        public var redis: Redis? {
            guard case .redis(let redis) = self else { return nil }
            return redis
        }
    }

    /// `--demo`: the quick start's key, app and device.
    public enum Demo: String, Sendable, CaseIterable {
        case on, off
        /// On when no key is configured.
        case auto
    }

    /// Event loops, and the limits of each connection.
    public struct Connections: Sendable, Equatable {
        public var threads: Int
        /// Idle provider connections are closed with GOAWAY IdleTimeout after this (0 = never).
        public var idleTimeoutSeconds: Int
        /// A request whose headers and body have not all arrived this long after it began is reset.
        public var requestTimeoutSeconds: Int
        /// Simultaneous connections allowed per kind (providers, devices).
        public var maxConnections: Int

        public init(threads: Int = max(1, ProcessInfo.processInfo.activeProcessorCount), idleTimeoutSeconds: Int = 3600,
                    requestTimeoutSeconds: Int = 10, maxConnections: Int = 20_000)
        {
            self.threads = threads
            self.idleTimeoutSeconds = idleTimeoutSeconds
            self.requestTimeoutSeconds = requestTimeoutSeconds
            self.maxConnections = maxConnections
        }
    }

    /// What is kept for inspection; beyond it the oldest go first.
    public struct RecordLimits: Sendable, Equatable {
        public var maxRecords: Int
        /// Bytes the kept notification records may take in all.
        public var maxRecordBytes: Int
        /// App backend calls kept, and queued at most.
        public var maxBackendCalls: Int

        public init(maxRecords: Int = 50_000, maxRecordBytes: Int = 256 << 20, maxBackendCalls: Int = BackendCaller.defaultCapacity) {
            self.maxRecords = maxRecords
            self.maxRecordBytes = maxRecordBytes
            self.maxBackendCalls = maxBackendCalls
        }
    }

    /// `TEAMID:KEYID:PATH[?environment=…&topics=a,b&related=KEYID]`, or the same as a JSON
    /// object in the config file.
    public struct AuthKeySpec: Sendable, Equatable {
        public var teamID: String
        public var keyID: String
        public var path: String
        public var environment: APNsEnvironment?
        public var topics: [String]?
        public var relatedKeyID: String?

        public init(teamID: String, keyID: String, path: String, environment: APNsEnvironment? = nil, topics: [String]? = nil,
                    relatedKeyID: String? = nil)
        {
            self.teamID = teamID
            self.keyID = keyID
            self.path = path
            self.environment = environment
            self.topics = topics
            self.relatedKeyID = relatedKeyID
        }
    }

    /// A device that exists from the start (config file only): pinned tokens make test
    /// suites deterministic.
    public struct DeviceSpec: Sendable, Equatable {
        public var deviceID: String
        public var apps: [(bundleID: String, environment: APNsEnvironment, kind: TokenKind, token: String?)]

        public init(deviceID: String, apps: [(bundleID: String, environment: APNsEnvironment, kind: TokenKind, token: String?)] = []) {
            self.deviceID = deviceID
            self.apps = apps
        }

        public static func == (a: DeviceSpec, b: DeviceSpec) -> Bool {
            a.deviceID == b.deviceID && a.apps.count == b.apps.count
                && zip(a.apps, b.apps).allSatisfy { $0.bundleID == $1.bundleID && $0.environment == $1.environment && $0.kind == $1.kind && $0.token == $1.token }
        }
    }
}
