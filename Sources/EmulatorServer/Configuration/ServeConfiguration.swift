// ServeConfiguration: everything `apns-emulator serve` needs, as typed parts that each state
// their own defaults (Listeners, TLS, StateBackend, Connections, RecordLimits beside it; the
// delivery, endpoint and load parts from APNsCore; AdminOptions). Values only: reading flags,
// variables and config files is in the `+Options` files. Imports APNsCore.
public import APNsCore

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
    /// Apps without the Broadcast capability (`?broadcast=off`, `"broadcast": false`).
    public var broadcastDisabledApps: Set<String> = []
    /// Apps' own backends (`"backend"` under an app in the config file), by bundle id.
    public var backends: [String: AppBackend]
    /// Devices that exist from the start (the config file's `"devices"`).
    public var devices: [DeviceSpec]
    /// The quick start's key, app and device (`--demo`).
    public var demo: Demo
    /// Fault rules active from the start (`--faults FILE`).
    public var faultRules: [FaultInjectionRule]
    /// Event loops, and what one provider connection may take.
    public var connections: Connections
    /// What is kept for inspection.
    public var records: RecordLimits
    /// Length of issued device tokens in bytes.
    public var tokenBytes: Int
    /// Devices and tokens held at most (`--max-devices`, `--max-tokens`).
    public var registryLimits = DeviceRegistry.Limits()
    public var endpoint: EndpointOptions
    public var delivery: DeliveryOptions
    /// The budgets of Live Activity updates and widget reloads (`--live-activity-budget-per-hour`
    /// and the like); every device's Live Activities start with it.
    public var liveActivities: LiveActivityPolicy
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
    /// Settings given that do nothing here (`--redis-prefix` without `--redis`, …), one message
    /// each; `serve` logs them as warnings at start.
    public var settingsWithoutEffect: [String] = []

    public init(
        listeners: Listeners = Listeners(), tls: TLS = TLS(), state: StateBackend = .memory,
        authKeys: [AuthKeySpec] = [], apps: [(teamID: String, bundleID: String)] = [], backends: [String: AppBackend] = [:],
        devices: [DeviceSpec] = [], demo: Demo = .auto, faultRules: [FaultInjectionRule] = [],
        connections: Connections = Connections(), records: RecordLimits = RecordLimits(),
        tokenBytes: Int = DeviceRegistry.defaultTokenByteCount, endpoint: EndpointOptions = EndpointOptions(),
        delivery: DeliveryOptions = DeliveryOptions(), liveActivities: LiveActivityPolicy = LiveActivityPolicy(),
        load: LoadBehaviour = LoadBehaviour(), admin: AdminOptions = AdminOptions(), strictChecks: Bool = false, readyFile: String? = nil,
        quiet: Bool = false
    ) {
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
        self.liveActivities = liveActivities
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
    /// `--demo`: the quick start's key, app and device.
    public enum Demo: String, Sendable, CaseIterable {
        case on, off
        /// On when no key is configured.
        case auto
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

        public init(
            teamID: String, keyID: String, path: String, environment: APNsEnvironment? = nil, topics: [String]? = nil,
            relatedKeyID: String? = nil
        ) {
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
        /// The apps' Live Activity declarations (`"liveActivityTypes"`, `"frequentUpdates"`), as
        /// `PUT …/live-activities` makes them: each type gets a push-to-start token.
        public var liveActivities: [LiveActivityDeclaration]
        /// The apps' `"notificationSettings"` (categories, `foregroundPresentation`, entitlements…).
        public var notificationSettings: [String: NotificationSetup] = [:]
        /// The device's `"focus"`, `"scheduledSummary"`, `"muted"` and `"locked"`.
        public var attention = DeviceAttention()

        public init(
            deviceID: String, apps: [(bundleID: String, environment: APNsEnvironment, kind: TokenKind, token: String?)] = [],
            liveActivities: [LiveActivityDeclaration] = []
        ) {
            self.deviceID = deviceID
            self.apps = apps
            self.liveActivities = liveActivities
        }

        public static func == (a: DeviceSpec, b: DeviceSpec) -> Bool {
            a.deviceID == b.deviceID && a.apps.count == b.apps.count
                && zip(a.apps, b.apps).allSatisfy {
                    $0.bundleID == $1.bundleID && $0.environment == $1.environment && $0.kind == $1.kind && $0.token == $1.token
                } && a.liveActivities == b.liveActivities && a.notificationSettings == b.notificationSettings && a.attention == b.attention
        }
    }

    /// An app's ActivityAttributes types on a configured device.
    public struct LiveActivityDeclaration: Sendable, Equatable {
        public var bundleID: String
        public var environment: APNsEnvironment
        public var types: [String]
        /// NSSupportsLiveActivitiesFrequentUpdates in the app's Info.plist.
        public var frequentUpdates: Bool

        public init(bundleID: String, environment: APNsEnvironment, types: [String], frequentUpdates: Bool = false) {
            self.bundleID = bundleID
            self.environment = environment
            self.types = types
            self.frequentUpdates = frequentUpdates
        }
    }
}
