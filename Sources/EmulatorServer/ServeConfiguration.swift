public import APNsCore
import AdminAPI
public import Redis
import Foundation
public import Networking
public import CommandLineOptions
public import StatePersistence

/// Everything `apns-emulator serve` needs, validated.
public struct ServeConfiguration: Sendable {
    /// TLS listeners that behave like Apple's hosts: each connection's environment comes from
    /// the name it asked for (SNI, `:authority`), sandbox when that is not an Apple host name.
    public var listen: [HostPort]
    public var sandboxListen: HostPort?
    public var productionListen: HostPort?
    public var h2cSandboxListen: HostPort?
    public var h2cProductionListen: HostPort?
    public var adminListen: HostPort?
    public var deviceListen: HostPort?
    public var tlsCertificatePath: String
    public var tlsKeyPath: String
    /// Where default certificates live (and are generated when missing).
    public var certsDirectory: String
    public var tlsPathsGiven: Bool
    /// CA that issues provider (client) certificates; nil = CERTS-DIR/ca.pem when present.
    public var clientCAPath: String?
    public var authKeys: [AuthKeySpec]
    public var apps: [(teamID: String, bundleID: String)]
    /// Apps' own backends (`"backend"` under an app in the config file).
    public var backends: [String: AppBackend] = [:]
    public var devices: [DeviceSpec]
    public var demo: Bool
    public var threads: Int
    public var idleTimeoutSeconds: Int
    /// Simultaneous connections allowed per kind (providers, devices).
    public var maxConnections: Int
    /// A request whose headers and body have not all arrived this long after it began is reset.
    public var requestTimeoutSeconds: Int
    public var maxRecords: Int
    public var maxRecordBytes: Int
    public var tokenBytes: Int
    public var endpoint: EndpointOptions
    public var readyFile: String?
    public var quiet: Bool
    public var maxBackendCalls = 10_000
    /// How the provider endpoint pushes back under load (`--profile realistic` and its parts).
    public var load = LoadBehaviour()
    public var strictChecks = false
    public var deviceTLS: Bool
    public var delivery: DeliveryOptions
    /// Fault rules from `--faults FILE`, part of the start state.
    public var faultRules: [FaultRule]
    /// `--state-dir`: where state survives restarts (SQLite); nil keeps it in memory only.
    public var stateDirectory: String?
    /// `--state-journal-lag`: journal records a 200 may be sent ahead of their commit.
    public var stateJournalLag: Int
    /// `--state-failure`: while the state directory cannot commit, refuse work (503) or go
    /// on in memory.
    public var stateFailure: StateFailurePolicy = .refuse
    /// `--redis URL`: share the state with other instances through Redis; nil = this process only.
    public var redis: RedisURL?
    /// `--redis-prefix`: the Redis keys' prefix (several emulators in one Redis database).
    public var redisPrefix = "apns-emulator:"
    /// Who may use the admin API and what it may cost (AdminOptions.swift).
    public var admin: AdminOptions

    /// `TEAMID:KEYID:PATH[?environment=…&topics=a,b&related=KEYID]`, or the same as a JSON
    /// object in the config file.
    public struct AuthKeySpec: Sendable, Equatable {
        public var teamID: String
        public var keyID: String
        public var path: String
        public var environment: APNsEnvironment?
        public var topics: [String]?
        public var relatedKeyID: String?
    }

    /// A device that exists from the start (config file only): pinned tokens make test
    /// suites deterministic.
    public struct DeviceSpec: Sendable, Equatable {
        public var deviceID: String
        public var apps: [(bundleID: String, environment: APNsEnvironment, kind: TokenKind, token: String?)]

        public static func == (a: DeviceSpec, b: DeviceSpec) -> Bool {
            a.deviceID == b.deviceID && a.apps.count == b.apps.count
                && zip(a.apps, b.apps).allSatisfy { $0.bundleID == $1.bundleID && $0.environment == $1.environment && $0.kind == $1.kind && $0.token == $1.token }
        }
    }
}

extension ServeConfiguration {
    public static let config = OptionSpec("config", "FILE", "JSON file with any of these settings plus \"devices\"")

    public static let specs: [OptionSpec] = [
        config,
        OptionSpec("listen", "HOST:PORT", repeatable: true,
                   "TLS listener like Apple's hosts (e.g. 127.0.0.1:443 and :2197): SNI or :authority api.push.apple.com means production, api.sandbox/api.development.push.apple.com sandbox, anything else sandbox"),
        OptionSpec("sandbox-listen", "HOST:PORT", default: "127.0.0.1:2197", "TLS listener whose environment is sandbox ('off' disables)"),
        OptionSpec("production-listen", "HOST:PORT", default: "127.0.0.1:2198", "TLS listener whose environment is production ('off' disables)"),
        OptionSpec("h2c-sandbox-listen", "HOST:PORT", "cleartext HTTP/2 (prior knowledge) listener, sandbox (default: off)"),
        OptionSpec("h2c-production-listen", "HOST:PORT", "cleartext HTTP/2 (prior knowledge) listener, production (default: off)"),
        OptionSpec("admin-listen", "HOST:PORT", default: "127.0.0.1:8197", "admin/inspection HTTP API ('off' disables)"),
    ] + AdminOptions.specs + [
        OptionSpec("device-listen", "HOST:PORT", default: "127.0.0.1:5223", "device socket, docs/device-protocol.md ('off' disables)"),
        OptionSpec("device-tls", nil, "serve the device socket over TLS (same certificate) instead of plain TCP"),
        OptionSpec("tls-cert", "PATH", "server certificate chain, PEM (default: CERTS-DIR/server.pem, generated if missing)"),
        OptionSpec("tls-key", "PATH", "server private key, PEM (default: CERTS-DIR/server-key.pem)"),
        OptionSpec("certs-dir", "PATH", default: "certs", "where the default TEST ONLY certificates are read or generated"),
        OptionSpec("client-ca", "PATH", "CA certificates (PEM) that provider client certificates must chain to (default: CERTS-DIR/ca.pem)"),
        OptionSpec("auth-key", "TEAMID:KEYID:PATH", repeatable: true,
                   "provider signing key: .p8 (PKCS#8) or PEM public key; append ?environment=sandbox|production&topics=BUNDLE,BUNDLE&related=KEYID to restrict it"),
        OptionSpec("app", "TEAMID:BUNDLEID", repeatable: true, "team TEAMID owns bundle BUNDLEID"),
        OptionSpec("demo", "on|off|auto", default: "auto", "demo key, app and device for the quick start; auto = on when no key is configured"),
        OptionSpec("threads", "N", "event-loop threads (default: number of cores)"),
        OptionSpec("idle-timeout", "SECONDS", default: "3600", "close idle provider connections with GOAWAY IdleTimeout (0 = never)"),
        OptionSpec("max-connections", "N", default: "20000",
                   "simultaneous connections of each kind (provider connections, device sockets); beyond it a new one is closed at once and counted"),
        OptionSpec("request-timeout", "SECONDS", default: "10",
                   "reset a provider request (RST_STREAM CANCEL) whose headers and body have not all arrived this long after it began"),
        OptionSpec("max-records", "N", default: "50000", "notification records kept for inspection (oldest dropped first)"),
        OptionSpec("max-record-bytes", "BYTES", default: "268435456",
                   "bytes the kept records may take in all (payloads, headers, texts; oldest dropped first); a number with an optional K, M or G suffix"),
        OptionSpec("invalid-payload", "reject|accept", default: "reject",
                   "body that is not a JSON object: 400 BadRequestPayload, or 200 and dropped by the device"),
        OptionSpec("token-bytes", "N", default: "32", "length of issued device tokens in bytes (Apple says not to assume 32)"),
        OptionSpec("bad-environment-reason", "NAME", default: "BadEnvironmentKeyIdInToken",
                   "spelling of the wrong-environment key reason (BadEnvironmentKeyIdInToken or BadEnvironmentKeyInToken)"),
        OptionSpec("jwt-clock-skew", "SECONDS", default: "300", "how far in the future a provider token's iat may be"),
        OptionSpec("background-budget-per-hour", "N", default: "3",
                   "background pushes each app may receive per hour (Apple: two or three); the rest are deferred or throttled"),
        OptionSpec("low-priority-delay", "MS", default: "0",
                   "deliver priority 5 and 1 pushes this many milliseconds late, as Apple batches them for power (0 = at once)"),
        OptionSpec("unregistered-delay", "SECONDS", default: "0",
                   "after an uninstall, keep answering 200 this long before 410 Unregistered starts (Apple delays it unpredictably)"),
        OptionSpec("unregistered-after-pushes", "N", "with --unregistered-delay: start the 410s after N pushes even if the delay is not over"),
        OptionSpec("device-window", "N", default: "1000",
                   "deliveries a connected device may leave unacknowledged; beyond it notifications are stored (the newest per app), older ones coalesced"),
        OptionSpec("device-ack-timeout", "SECONDS", default: "60",
                   "disconnect a device whose oldest unacknowledged delivery is this old (what it did not ack is stored again)"),
        OptionSpec("too-many-requests", "N/SECONDS", "429 TooManyRequests when one device token gets more than N pushes within SECONDS (default: off)"),
        OptionSpec("faults", "FILE", "JSON file of fault rules (a list, or {\"faults\": [...]}) active from the start; see README, Faults"),
        OptionSpec("state-dir", "DIR", "keep devices, tokens, runtime keys/apps/fault rules, stored notifications and the journal in DIR (SQLite) across restarts; see README, State across restarts (default: memory only)"),
        OptionSpec("redis", "URL",
                   "share devices, tokens, stored notifications, budgets and the journal with other instances through Redis (redis://[:PASSWORD@]HOST[:PORT][/DB]); see README, Several instances (default: this process only)"),
        OptionSpec("redis-prefix", "PREFIX", default: "apns-emulator:", "with --redis: the prefix of every key this emulator uses"),
        OptionSpec("state-journal-lag", "N", default: "0",
                   "with --state-dir: journal records a 200 may be sent ahead of their commit (a kill -9 loses at most these, the newest; beyond, answers wait for the disk); 0 = every 200 waits for its record"),
        OptionSpec("state-failure", "refuse|memory", default: "refuse",
                   "with --state-dir, while the directory cannot commit (disk full, read-only, I/O errors): refuse (providers get 503, admin changes 503, /readyz 503, until a retry commits) or memory (go on unpersisted, logged)"),
        OptionSpec("max-backend-calls", "N", default: "10000",
                   "app backend calls kept for inspection, and queued at most, half of them for one backend host:port (beyond, a call is dropped and counted)"),
        OptionSpec("strict-checks", nil,
                   "GET /api/v1/checks answers 409 while a check fails (a push delivered to another account than the one it names)"),
        OptionSpec("profile", "default|realistic", default: "default",
                   "realistic: Apple's behaviour under load on (stream-limit drop, latency, per-connection rate, churn limit, 429s, priority-5 batching); see README"),
        OptionSpec("stream-limit-drop", "on|off", default: "off",
                   "after ExpiredProviderToken: SETTINGS MAX_CONCURRENT_STREAMS 1 and RST_STREAM REFUSED_STREAM for the streams already sent; back up after a success"),
        OptionSpec("response-latency", "MS", default: "0", "hold every answer this long (plus --response-jitter)"),
        OptionSpec("response-jitter", "MS", default: "0", "add up to this much more to each answer's wait, uniformly"),
        OptionSpec("connection-rate", "N", "at most N answers per second on one provider connection; the rest wait their turn (default: no cap)"),
        OptionSpec("connection-churn", "N/SECONDS",
                   "more than N new provider connections within SECONDS are closed on arrival until the window ends (default: off)"),
        OptionSpec("ready-file", "PATH", "write the bound addresses as JSON here once listening"),
        OptionSpec("quiet", nil, "no banner and no per-connection log lines"),
    ]

    /// `123`, `64K`, `256M`, `1G` (binary multiples).
    static func byteCount(_ text: String) -> Int? {
        let multipliers: [Character: Int] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30]
        guard let last = text.uppercased().last else { return nil }
        if let multiplier = multipliers[last] {
            guard let value = Int(text.dropLast()), value >= 0, value <= Int.max / multiplier else { return nil }
            return value * multiplier
        }
        return Int(text).flatMap { $0 >= 0 ? $0 : nil }
    }

    /// Two listeners on one port would fail at bind with a bare "address in use"; name both
    /// instead (`--listen 127.0.0.1:2197` next to the default `--sandbox-listen` is the usual way in).
    static func checkDistinctPorts(_ listeners: [(name: String, address: HostPort)]) throws(UsageError) {
        func wildcard(_ host: String) -> Bool { host == "0.0.0.0" || host == "::" || host == "*" || host.isEmpty }
        for (i, a) in listeners.enumerated() where a.address.port != 0 {
            for b in listeners[(i + 1)...] where b.address.port == a.address.port {
                guard a.address.host == b.address.host || wildcard(a.address.host) || wildcard(b.address.host) else { continue }
                let off = [a.name, b.name].first { $0 != "--listen" }.map { "; turn one off (e.g. \($0) off) or move it" } ?? ""
                throw UsageError("\(a.name) \(a.address) and \(b.name) \(b.address) would share port \(a.address.port)\(off)")
            }
        }
    }

    public static func resolve(arguments: [String], environment: [String: String]) throws(UsageError) -> ServeConfiguration {
        let (options, positional) = try OptionParser.parse(arguments, specs: specs, environment: environment, configSpec: config)
        guard positional.isEmpty else { throw UsageError("unexpected argument '\(positional[0])'; see --help") }
        return try ServeConfiguration(options)
    }

    /// `--profile realistic`: Apple's behaviour under load, each part also its own flag. The
    /// numbers are choices (Apple publishes none); a flag given explicitly wins.
    static let realisticProfile: [(String, String)] = [
        ("stream-limit-drop", "on"), ("response-latency", "5"), ("response-jitter", "10"), ("connection-rate", "5000"),
        ("connection-churn", "100/10"), ("too-many-requests", "100/10"), ("low-priority-delay", "1000"),
        ("background-budget-per-hour", "3"),
    ]

    init(_ given: ResolvedOptions) throws(UsageError) {
        let spec = Dictionary(uniqueKeysWithValues: Self.specs.map { ($0.name, $0) })
        var options = given
        switch given.string("profile") ?? "default" {
        case "default": break
        case "realistic":
            for (name, value) in Self.realisticProfile where given.source(name) == .defaultValue {
                options.values[name] = ([value], .defaultValue)
            }
        case let other: throw UsageError("\(given.origin(spec["profile"]!)): '\(other)' is not one of default, realistic")
        }
        func address(_ name: String) throws(UsageError) -> HostPort? {
            guard let text = options.string(name), text != "off" else { return nil }
            do { return try HostPort(parsing: text) } catch {
                throw UsageError("\(options.origin(spec[name]!)): \(error.description), or 'off'")
            }
        }
        func integer(_ name: String, in range: ClosedRange<Int>) throws(UsageError) -> Int? {
            try options.integer(spec[name]!, in: range)
        }
        func choice<T: RawRepresentable>(_ name: String, _ type: T.Type, allowed: [String]) throws(UsageError) -> T where T.RawValue == String {
            let text = options.string(name) ?? ""
            guard allowed.contains(text), let value = T(rawValue: text) else {
                throw UsageError("\(options.origin(spec[name]!)): '\(text)' is not one of \(allowed.joined(separator: ", "))")
            }
            return value
        }

        listen = []
        for text in options.strings("listen") where text != "off" {
            do { listen.append(try HostPort(parsing: text)) } catch {
                throw UsageError("\(options.origin(spec["listen"]!)): \(error.description)")
            }
        }
        sandboxListen = try address("sandbox-listen")
        productionListen = try address("production-listen")
        h2cSandboxListen = try address("h2c-sandbox-listen")
        h2cProductionListen = try address("h2c-production-listen")
        adminListen = try address("admin-listen")
        admin = try AdminOptions(options, adminListen: adminListen)
        deviceListen = try address("device-listen")
        try Self.checkDistinctPorts(
            listen.map { ("--listen", $0) } + [
                ("--sandbox-listen", sandboxListen), ("--production-listen", productionListen),
                ("--h2c-sandbox-listen", h2cSandboxListen), ("--h2c-production-listen", h2cProductionListen),
                ("--admin-listen", adminListen), ("--device-listen", deviceListen),
            ].compactMap { name, address in address.map { (name, $0) } })
        certsDirectory = options.string("certs-dir") ?? "certs"
        tlsPathsGiven = options.isSet("tls-cert") || options.isSet("tls-key")
        if options.isSet("tls-cert") != options.isSet("tls-key") {
            throw UsageError("--tls-cert and --tls-key go together: give both, or neither to use \(certsDirectory)/")
        }
        tlsCertificatePath = options.string("tls-cert") ?? "\(certsDirectory)/server.pem"
        clientCAPath = options.string("client-ca")
        tlsKeyPath = options.string("tls-key") ?? "\(certsDirectory)/server-key.pem"

        authKeys = []
        for text in options.strings("auth-key") {
            do { authKeys.append(try Self.parseAuthKey(text)) } catch {
                throw UsageError("\(options.origin(spec["auth-key"]!)): \(error.description)")
            }
        }
        apps = []
        for text in options.strings("app") {
            do {
                apps.append(try Self.parseApp(text))
                if let backend = try Self.parseAppBackend(text) { backends[apps.last!.bundleID] = backend }
            } catch {
                throw UsageError("\(options.origin(spec["app"]!)): \(error.description)")
            }
        }
        devices = try Self.parseDevices(options.fileObjects["devices"], path: options.configPath ?? "")
        if let unknown = options.fileObjects.keys.first(where: { $0 != "devices" }) {
            let known = Self.specs.map { "\"\($0.configKey)\"" }.joined(separator: ", ")
            throw UsageError("config file \(options.configPath ?? ""): unknown key \"\(unknown)\"; known keys: \(known), \"devices\"")
        }
        switch options.string("demo") ?? "auto" {
        case "on": demo = true
        case "off": demo = false
        case "auto": demo = authKeys.isEmpty
        case let other: throw UsageError("\(options.origin(spec["demo"]!)): '\(other)' is not one of on, off, auto")
        }
        threads = try integer("threads", in: 1...256) ?? max(1, ProcessInfo.processInfo.activeProcessorCount)
        idleTimeoutSeconds = try integer("idle-timeout", in: 0...86_400 * 30) ?? 3600
        requestTimeoutSeconds = try integer("request-timeout", in: 1...3600) ?? 10
        maxConnections = try integer("max-connections", in: 1...10_000_000) ?? 20_000
        maxRecords = try integer("max-records", in: 1...10_000_000) ?? 50_000
        maxRecordBytes = 256 << 20
        if let text = options.string("max-record-bytes") {
            guard let value = Self.byteCount(text), value >= 64 << 10 else {
                throw UsageError("\(options.origin(spec["max-record-bytes"]!)): '\(text)' is not a size of at least 64K (for example 268435456, 256M or 1G)")
            }
            maxRecordBytes = value
        }
        tokenBytes = try integer("token-bytes", in: 8...255) ?? 32
        endpoint = EndpointOptions()
        endpoint.invalidPayload = try choice("invalid-payload", EndpointOptions.InvalidPayloadPolicy.self, allowed: ["reject", "accept"])
        let spelling = options.string("bad-environment-reason") ?? "BadEnvironmentKeyIdInToken"
        guard ["BadEnvironmentKeyIdInToken", "BadEnvironmentKeyInToken"].contains(spelling) else {
            throw UsageError("\(options.origin(spec["bad-environment-reason"]!)): '\(spelling)' is not one of BadEnvironmentKeyIdInToken, BadEnvironmentKeyInToken")
        }
        endpoint.badEnvironmentKeySpelling = spelling
        endpoint.tokenPolicy.allowedFutureSkewSeconds = Int64(try integer("jwt-clock-skew", in: 0...86_400) ?? 300)
        readyFile = options.string("ready-file")
        stateDirectory = options.string("state-dir")
        stateJournalLag = try integer("state-journal-lag", in: 0...100_000) ?? 0
        stateFailure = try choice("state-failure", StateFailurePolicy.self, allowed: StateFailurePolicy.allCases.map(\.rawValue))
        if stateDirectory?.isEmpty == true {
            throw UsageError("\(options.origin(spec["state-dir"]!)): give a directory (it is created when missing)")
        }
        if let text = options.string("redis") {
            do {
                redis = try RedisURL(parsing: text)
            } catch {
                throw UsageError("\(options.origin(spec["redis"]!)): \(error)")
            }
            if stateDirectory != nil {
                throw UsageError("--state-dir and --redis cannot be combined: with --redis the state lives in Redis")
            }
        }
        redisPrefix = options.string("redis-prefix") ?? "apns-emulator:"
        if redisPrefix.isEmpty || redisPrefix.utf8.count > 200 {
            throw UsageError("\(options.origin(spec["redis-prefix"]!)): give 1 to 200 characters")
        }
        quiet = options.string("quiet") == "true"
        strictChecks = options.string("strict-checks") == "true"
        switch options.string("stream-limit-drop") ?? "off" {
        case "on": load.streamLimitDrop = true
        case "off": load.streamLimitDrop = false
        case let other: throw UsageError("\(options.origin(spec["stream-limit-drop"]!)): '\(other)' is not on or off")
        }
        load.responseLatencyMs = try integer("response-latency", in: 0...60_000) ?? 0
        load.responseJitterMs = try integer("response-jitter", in: 0...60_000) ?? 0
        load.answersPerSecondPerConnection = try integer("connection-rate", in: 1...10_000_000)
        if let text = options.string("connection-churn") {
            let parts = text.split(separator: "/")
            guard parts.count == 2, let count = Int(parts[0]), count > 0, let seconds = Double(parts[1]), seconds > 0, seconds <= 86_400 else {
                throw UsageError("\(options.origin(spec["connection-churn"]!)): '\(text)' is not N/SECONDS (for example 100/10)")
            }
            load.connectionChurn = (count, Int64(seconds * 1000))
        }
        maxBackendCalls = try integer("max-backend-calls", in: 1...1_000_000) ?? 10_000
        deviceTLS = options.string("device-tls") == "true"
        delivery = DeliveryOptions()
        delivery.backgroundBudgetPerHour = try integer("background-budget-per-hour", in: 0...100_000) ?? 3
        delivery.lowPriorityDelayMs = Int64(try integer("low-priority-delay", in: 0...3_600_000) ?? 0)
        delivery.unregisteredDelayMs = Int64(try integer("unregistered-delay", in: 0...86_400 * 30) ?? 0) * 1000
        delivery.unregisteredAfterPushes = try integer("unregistered-after-pushes", in: 1...1_000_000)
        delivery.deviceWindow = try integer("device-window", in: 1...1_000_000) ?? 1000
        delivery.deviceAckTimeoutMs = Int64(try integer("device-ack-timeout", in: 1...86_400) ?? 60) * 1000
        faultRules = []
        if let path = options.string("faults") {
            faultRules = try Self.loadFaults(path, origin: options.origin(spec["faults"]!))
        }
        if let text = options.string("too-many-requests") {
            let parts = text.split(separator: "/")
            guard parts.count == 2, let count = Int(parts[0]), count > 0, let seconds = Double(parts[1]), seconds > 0 else {
                throw UsageError("\(options.origin(spec["too-many-requests"]!)): '\(text)' is not N/SECONDS (for example 100/1)")
            }
            delivery.tooManyRequests = (count, Int64(seconds * 1000))
        }

        if listen.isEmpty && sandboxListen == nil && productionListen == nil && h2cSandboxListen == nil && h2cProductionListen == nil {
            throw UsageError("every provider listener is off; keep at least one of --listen, --sandbox-listen, --production-listen, --h2c-sandbox-listen, --h2c-production-listen")
        }
    }

    static func loadFaults(_ path: String, origin: String) throws(UsageError) -> [FaultRule] {
        let value: JSONValue
        do { value = try JSONValue.parseFile(try InputFile.read(path)) } catch { throw UsageError("\(origin): \(path): \(error)") }
        guard let list = value.arrayValue ?? value["faults"]?.arrayValue else {
            throw UsageError("\(origin): \(path) must hold a list of fault rules or {\"faults\": [...]}")
        }
        var rules: [FaultRule] = []
        for (index, item) in list.enumerated() {
            guard let object = item.objectValue else { throw UsageError("\(origin): rule \(index + 1) in \(path) is not an object") }
            do { rules.append(try FaultJSON.parse(object)) } catch let error as AdminError {
                throw UsageError("\(origin): rule \(index + 1) in \(path): \(error.message)")
            } catch {
                throw UsageError("\(origin): rule \(index + 1) in \(path): \(error)")
            }
        }
        return rules
    }

    static func isTeamOrKeyID(_ text: Substring) -> Bool {
        // Apple's team and key ids are 10 uppercase letters and digits; accept any short
        // alphanumeric id so made-up test ids work too.
        !text.isEmpty && text.count <= 64 && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) }
    }

    public static func parseAuthKey(_ text: String) throws(UsageError) -> AuthKeySpec {
        if text.hasPrefix("{") {
            guard let object = (try? JSONValue.parse(text))?.objectValue else {
                throw UsageError("auth key \(text) is not a JSON object")
            }
            return try authKey(fromObject: object)
        }
        let main: Substring
        var query: Substring = ""
        if let mark = text.firstIndex(of: "?") {
            main = text[..<mark]
            query = text[text.index(after: mark)...]
        } else {
            main = Substring(text)
        }
        let parts = main.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, isTeamOrKeyID(parts[0]), isTeamOrKeyID(parts[1]), !parts[2].isEmpty else {
            throw UsageError("'\(text)' is not TEAMID:KEYID:PATH (for example ABCDE12345:KEY1234567:AuthKey_KEY1234567.p8)")
        }
        var spec = AuthKeySpec(teamID: String(parts[0]), keyID: String(parts[1]), path: String(parts[2]))
        for pair in query.split(separator: "&") where !pair.isEmpty {
            let kv = pair.split(separator: "=", maxSplits: 1)
            let key = kv[0]
            let value = kv.count > 1 ? String(kv[1]) : ""
            switch key {
            case "environment":
                guard let env = APNsEnvironment(rawValue: value) else {
                    throw UsageError("'\(text)': environment must be sandbox or production, not '\(value)'")
                }
                spec.environment = env
            case "topics":
                let topics = value.split(separator: ",").map(String.init)
                guard !topics.isEmpty, topics.allSatisfy(DeviceRegistry.isValidBundleID) else {
                    throw UsageError("'\(text)': topics must be a comma-separated list of bundle ids")
                }
                spec.topics = topics
            case "related":
                guard isTeamOrKeyID(Substring(value)) else { throw UsageError("'\(text)': related must be a key id") }
                spec.relatedKeyID = value
            default:
                throw UsageError("'\(text)': unknown key option '\(key)'; use environment, topics or related")
            }
        }
        return spec
    }

    static func authKey(fromObject object: JSONObject) throws(UsageError) -> AuthKeySpec {
        let text = JSONValue.object(object).serialized()
        guard let team = object["teamId"]?.stringValue, let key = object["keyId"]?.stringValue,
            let path = object["path"]?.stringValue, isTeamOrKeyID(Substring(team)), isTeamOrKeyID(Substring(key))
        else {
            throw UsageError("auth key \(text) needs \"teamId\", \"keyId\" and \"path\"")
        }
        var spec = AuthKeySpec(teamID: team, keyID: key, path: path)
        if let env = object["environment"] {
            guard let value = env.stringValue.flatMap(APNsEnvironment.init(rawValue:)) else {
                throw UsageError("auth key \(text): \"environment\" must be \"sandbox\" or \"production\"")
            }
            spec.environment = value
        }
        if let topics = object["topics"] {
            guard let list = topics.arrayValue?.compactMap(\.stringValue), !list.isEmpty,
                list.count == topics.arrayValue?.count, list.allSatisfy(DeviceRegistry.isValidBundleID)
            else {
                throw UsageError("auth key \(text): \"topics\" must be a list of bundle ids")
            }
            spec.topics = list
        }
        if let related = object["relatedKeyId"] {
            guard let value = related.stringValue else { throw UsageError("auth key \(text): \"relatedKeyId\" must be a string") }
            spec.relatedKeyID = value
        }
        return spec
    }

    /// The `"backend"` of an app written as an object in the config file.
    static func parseAppBackend(_ text: String) throws(UsageError) -> AppBackend? {
        guard text.hasPrefix("{"), let object = (try? JSONValue.parse(text))?.objectValue, let backend = object["backend"],
            backend != .null
        else { return nil }
        do { return try AppBackend.parse(backend) } catch {
            throw UsageError("app \(object["bundleId"]?.stringValue ?? text): \"backend\": \(error.description)")
        }
    }

    public static func parseApp(_ text: String) throws(UsageError) -> (teamID: String, bundleID: String) {
        if text.hasPrefix("{") {
            guard let object = (try? JSONValue.parse(text))?.objectValue, let team = object["teamId"]?.stringValue,
                let bundle = object["bundleId"]?.stringValue
            else { throw UsageError("app \(text) needs \"teamId\" and \"bundleId\"") }
            if let unknown = object.keys.first(where: { !["teamId", "bundleId", "backend"].contains($0) }) {
                throw UsageError("app \(bundle): unknown field \"\(unknown)\" (expected teamId, bundleId, backend)")
            }
            return try parseApp("\(team):\(bundle)")
        }
        let parts = text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, isTeamOrKeyID(parts[0]), DeviceRegistry.isValidBundleID(String(parts[1])) else {
            throw UsageError("'\(text)' is not TEAMID:BUNDLEID (for example ABCDE12345:com.example.app)")
        }
        return (String(parts[0]), String(parts[1]))
    }

    static func parseDevices(_ value: JSONValue?, path: String) throws(UsageError) -> [DeviceSpec] {
        guard let value else { return [] }
        guard let list = value.arrayValue else { throw UsageError("\"devices\" in \(path) must be a list") }
        var out: [DeviceSpec] = []
        for item in list {
            let text = item.serialized()
            if let object = item.objectValue, object["count"] != nil {
                out += try parseDeviceBatch(object, text: text, path: path)
                continue
            }
            guard let object = item.objectValue, let id = object["deviceId"]?.stringValue, !id.isEmpty,
                let apps = object["apps"]?.arrayValue
            else {
                throw UsageError("device \(text) in \(path) needs \"deviceId\" and \"apps\"")
            }
            guard DeviceRegistry.isValidDeviceID(id) else {
                throw UsageError("device \(text) in \(path): \(DeviceRegistry.deviceIDRule)")
            }
            var spec = DeviceSpec(deviceID: id, apps: [])
            for app in apps {
                guard let bundle = app["bundleId"]?.stringValue, DeviceRegistry.isValidBundleID(bundle),
                    let env = app["environment"]?.stringValue.flatMap(APNsEnvironment.init(rawValue:))
                else {
                    throw UsageError("device \(id) in \(path): each app needs a valid \"bundleId\" and \"environment\" (sandbox or production)")
                }
                let kindText = app["kind"]?.stringValue ?? "app"
                guard let kind = TokenKind(rawValue: kindText) else {
                    throw UsageError("device \(id) in \(path): kind '\(kindText)' is not one of \(TokenKind.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                let token = app["token"]?.stringValue
                if let token, !Hex.isEvenLengthHex(Substring(token)) {
                    throw UsageError("device \(id) in \(path): token '\(token)' is not even-length hex")
                }
                spec.apps.append((bundle, env, kind, token))
            }
            out.append(spec)
        }
        return out
    }

    /// `{"count": N, "idPrefix": "load-", "bundleId", "environment"}`: N devices PREFIX1…PREFIXN
    /// with that app (a load test's population, created at start).
    static func parseDeviceBatch(_ object: JSONObject, text: String, path: String) throws(UsageError) -> [DeviceSpec] {
        guard let count = object["count"]?.intValue, (1...Int64(World.maxBatchDevices * 10)).contains(count) else {
            throw UsageError("device batch \(text) in \(path): \"count\" must be a whole number from 1 to \(World.maxBatchDevices * 10)")
        }
        let prefix = object["idPrefix"]?.stringValue ?? "device-"
        guard DeviceRegistry.isValidDeviceID(prefix + String(count)) else {
            throw UsageError("device batch \(text) in \(path): \"idPrefix\": \(DeviceRegistry.deviceIDRule)")
        }
        guard let bundle = object["bundleId"]?.stringValue, DeviceRegistry.isValidBundleID(bundle),
            let environment = object["environment"]?.stringValue.flatMap(APNsEnvironment.init(rawValue:))
        else {
            throw UsageError("device batch \(text) in \(path) needs a valid \"bundleId\" and \"environment\" (sandbox or production)")
        }
        return (1...count).map { n in DeviceSpec(deviceID: "\(prefix)\(n)", apps: [(bundle, environment, .app, nil)]) }
    }
}
