// ServeConfiguration+Options: the option table of `serve` (flags, APNS_EMULATOR_* variables,
// config keys, --help) and the mapping from resolved options to a ServeConfiguration. Each part
// declares its own flags and maps them in its own `+Options` file; this one orders the table
// and maps what belongs to no part. Imports CommandLineOptions and the parts' modules only.
import APNsCore
public import CommandLineOptions

extension ServeConfiguration {
    /// The flags that belong to no part.
    enum Flag {
        static let config = OptionSpec("config", "FILE", "JSON file with any of these settings plus \"devices\"")
        static let authKey = OptionSpec(
            "auth-key", "TEAMID:KEYID:PATH", repeatable: true,
            "provider signing key: .p8 (PKCS#8) or PEM public key; append ?environment=sandbox|production&topics=BUNDLE,BUNDLE&related=KEYID to restrict it"
        )
        static let app = OptionSpec(
            "app", "TEAMID:BUNDLEID", repeatable: true,
            "team TEAMID owns bundle BUNDLEID; TEAMID:BUNDLEID?broadcast=off: without the Broadcast capability (FeatureNotEnabled)")
        static let demo = OptionSpec(
            "demo", "on|off|auto", default: ServeConfiguration().demo.rawValue,
            "demo key, app and device for the quick start; auto = on when no key is configured")
        static let tokenBytes = OptionSpec(
            "token-bytes", "N", default: String(ServeConfiguration().tokenBytes),
            "length of issued device tokens in bytes (Apple says not to assume 32)")
        static let maxDevices = OptionSpec(
            "max-devices", "N", default: String(DeviceRegistry.Limits().maxDevices),
            "devices the emulator holds at most (virtual and socket); beyond, a new one is refused (admin API 507, device error registry_full)"
        )
        static let maxTokens = OptionSpec(
            "max-tokens", "N", default: String(DeviceRegistry.Limits().maxTokens),
            "device tokens the emulator holds at most, those of uninstalled apps and deleted devices included (they answer 410 until a reset); beyond, a new one is refused"
        )
        static let faults = OptionSpec(
            "faults", "FILE",
            "JSON file of fault rules (a list, or {\"faults\": [...]}) active from the start "
                + "(with `--state-dir`, from a new directory's start and after a reset: a kept state keeps its own rules); see README, Faults"
        )
        static let strictChecks = OptionSpec(
            "strict-checks", nil,
            "GET /api/v1/checks answers 409 while a check fails (a push delivered to another account than the one it names, a push the device ignored)"
        )
        static let profile = OptionSpec(
            "profile", "default|realistic", default: Profile.default.rawValue,
            "realistic: Apple's behaviour under load on (stream-limit drop, latency, per-connection rate, churn limit, disconnect after errors, 429s, priority-5 batching); see docs/load-testing.md"
        )
        static let readyFile = OptionSpec("ready-file", "PATH", "write the bound addresses as JSON here once listening")
        static let quiet = OptionSpec("quiet", nil, "no banner and no info lines (per-connection and the like); warnings still show")
    }

    /// Every option of `serve`, in the order `--help` and docs/configuration.md list them.
    public static let specs: [OptionSpec] =
        [
            Flag.config,
            Listeners.Flag.listen, Listeners.Flag.sandbox, Listeners.Flag.production, Listeners.Flag.h2cSandbox,
            Listeners.Flag.h2cProduction, Listeners.Flag.channelSandbox, Listeners.Flag.channelProduction, Listeners.Flag.admin,
        ] + AdminOptions.specs + [
            Listeners.Flag.device, Listeners.Flag.deviceTLS,
            TLS.Flag.certificate, TLS.Flag.key, TLS.Flag.certsDirectory, TLS.Flag.clientCA,
            Flag.authKey, Flag.app, Flag.demo,
            Connections.Flag.threads, Connections.Flag.idleTimeout, Connections.Flag.maxConnections, Connections.Flag.requestTimeout,
            RecordLimits.Flag.maxRecords, RecordLimits.Flag.maxRecordBytes, RecordLimits.Flag.maxChannels, RecordLimits.Flag.channelBroadcastRate,
            EndpointOptions.Flag.invalidPayload, Flag.tokenBytes, Flag.maxDevices, Flag.maxTokens, EndpointOptions.Flag.badEnvironmentReason,
            EndpointOptions.Flag.jwtClockSkew,
            DeliveryOptions.Flag.backgroundBudget, DeliveryOptions.Flag.lowPriorityDelay, DeliveryOptions.Flag.unregisteredDelay,
            DeliveryOptions.Flag.unregisteredAfterPushes, DeliveryOptions.Flag.deviceWindow, DeliveryOptions.Flag.deviceAckTimeout,
            DeliveryOptions.Flag.tooManyRequests, DeliveryOptions.Flag.storedSurvivor,
            LiveActivityPolicy.Flag.updateBudget, LiveActivityPolicy.Flag.frequentUpdateBudget, LiveActivityPolicy.Flag.strictDecoding,
            LiveActivityPolicy.Flag.maxHeld,
            LiveActivityPolicy.Flag.widgetBudget,
            Flag.faults,
            StateBackend.Flag.directory, StateBackend.Flag.redis, StateBackend.Flag.redisPrefix, StateBackend.Flag.redisFollow,
            StateBackend.Flag.journalLag,
            StateBackend.Flag.failure,
            RecordLimits.Flag.maxBackendCalls, Flag.strictChecks, Flag.profile,
            LoadBehaviour.Flag.streamLimitDrop, LoadBehaviour.Flag.responseLatency, LoadBehaviour.Flag.responseJitter,
            LoadBehaviour.Flag.connectionRate, LoadBehaviour.Flag.connectionChurn, LoadBehaviour.Flag.errorDisconnect,
            Flag.readyFile, Flag.quiet,
        ]

    /// The configuration `arguments`, `environment` (APNS_EMULATOR_*) and the config file they
    /// name make of `base`: what they set replaces the base's value (a repeatable option adds
    /// to the base's list); what they leave unset keeps it.
    public static func resolve(
        arguments: [String], environment: [String: String], over base: ServeConfiguration = ServeConfiguration()
    )
        throws(UsageError) -> ServeConfiguration
    {
        let (options, positional) = try OptionParser.parse(
            arguments, specs: specs, environment: environment, configSpec: Flag.config,
            fillingDefaults: false)
        guard positional.isEmpty else { throw UsageError("unexpected argument '\(positional[0])'; see --help") }
        return try ServeConfiguration(options, over: base)
    }

    /// `--profile`: presets for several options at once.
    enum Profile: String, CaseIterable {
        case `default`, realistic
    }

    /// `--profile realistic`: Apple's behaviour under load, each part also its own flag. The
    /// numbers are choices (Apple publishes none); a flag given explicitly wins.
    static let realisticProfile: [(OptionSpec, String)] = [
        (LoadBehaviour.Flag.streamLimitDrop, "on"), (LoadBehaviour.Flag.responseLatency, "5"), (LoadBehaviour.Flag.responseJitter, "10"),
        (LoadBehaviour.Flag.connectionRate, "5000"), (LoadBehaviour.Flag.connectionChurn, "100/10"),
        (LoadBehaviour.Flag.errorDisconnect, "50/60"),
        (DeliveryOptions.Flag.tooManyRequests, "100/10"), (DeliveryOptions.Flag.lowPriorityDelay, "1000"),
        (DeliveryOptions.Flag.backgroundBudget, "3"),
    ]

    init(_ given: ResolvedOptions, over base: ServeConfiguration) throws(UsageError) {
        try base.checkAccounts()
        var options = given
        if try given.choice(Flag.profile, Profile.self) == .realistic {
            for (spec, value) in Self.realisticProfile { options.preset(spec, value) }
        }
        listeners = try Listeners(options, over: base.listeners)
        admin = try AdminOptions(options, adminListen: listeners.admin, over: base.admin)
        tls = try TLS(options, over: base.tls)

        authKeys = base.authKeys
        for text in options.strings(Flag.authKey) {
            do { authKeys.append(try Self.parseAuthKey(text)) } catch {
                throw UsageError("\(options.origin(Flag.authKey)): \(error.description)")
            }
        }
        apps = base.apps
        backends = base.backends
        broadcastDisabledApps = base.broadcastDisabledApps
        for text in options.strings(Flag.app) {
            do {
                let (spec, broadcast) = try Self.parseBroadcastCapability(text)
                let app = try Self.parseApp(spec)
                apps.append(app)
                if !broadcast { broadcastDisabledApps.insert(app.bundleID) }
                if let backend = try Self.parseAppBackend(spec) { backends[app.bundleID] = backend }
            } catch {
                throw UsageError("\(options.origin(Flag.app)): \(error.description)")
            }
        }
        devices = base.devices + (try Self.parseDevices(options.fileObjects["devices"], path: options.configPath ?? ""))
        if let unknown = options.fileObjects.keys.first(where: { $0 != "devices" }) {
            // `config` is a flag's key too, but a config file cannot name another.
            let path = options.configPath ?? ""
            // A key written as its flag (`max-devices`, `--max-devices`) or in another case: name the key meant.
            let spelled = unknown.drop(while: { $0 == "-" }).lowercased().replacingOccurrences(of: "_", with: "-")
            if let meant = Self.specs.first(where: { $0.configKey != "config" && ($0.name == spelled || $0.configKey.lowercased() == spelled) }) {
                throw UsageError("config file \(path): unknown key \"\(unknown)\"; the key for \(meant.flag) is \"\(meant.configKey)\"")
            }
            // A key one or two letters away (a singular for a plural, "maxRecord"): the key meant.
            let keys = Self.specs.filter { $0.configKey != "config" }.map(\.configKey) + ["devices"]
            let known = keys.map { "\"\($0)\"" }.joined(separator: ", ")
            let advice = OptionParser.unknownKeyAdvice(unknown, among: keys, otherwise: "; known keys: \(known)")
            throw UsageError("config file \(path): unknown key \"\(unknown)\"\(advice)")
        }
        demo = try options.choice(Flag.demo, Demo.self) ?? base.demo

        connections = try Connections(options, over: base.connections)
        records = try RecordLimits(options, over: base.records)
        tokenBytes = try options.integer(Flag.tokenBytes, in: 8...255) ?? base.tokenBytes
        registryLimits = DeviceRegistry.Limits(
            maxDevices: try options.integer(Flag.maxDevices, in: 1...100_000_000) ?? base.registryLimits.maxDevices,
            maxTokens: try options.integer(Flag.maxTokens, in: 1...100_000_000) ?? base.registryLimits.maxTokens)
        endpoint = try EndpointOptions(options, over: base.endpoint)
        readyFile = options.string(Flag.readyFile) ?? base.readyFile
        state = try StateBackend(options, over: base.state)
        settingsWithoutEffect = base.settingsWithoutEffect + StateBackend.settingsWithoutEffect(options, backend: state)
        quiet = try options.switchValue(Flag.quiet) ?? base.quiet
        strictChecks = try options.switchValue(Flag.strictChecks) ?? base.strictChecks
        load = try LoadBehaviour(options, over: base.load)
        delivery = try DeliveryOptions(options, over: base.delivery)
        liveActivities = try LiveActivityPolicy(options, over: base.liveActivities)
        faultRules = base.faultRules
        if let path = options.string(Flag.faults) {
            faultRules = try Self.loadFaults(path, origin: options.origin(Flag.faults))
        }
        settingsWithoutEffect += dependentSettingsWithoutEffect(options)
    }

    /// Settings that only act through another one that is off here: still checked, but a
    /// warning at the start names them, as the state flags' do.
    private func dependentSettingsWithoutEffect(_ options: ResolvedOptions) -> [String] {
        var unused: [(OptionSpec, why: String)] = []
        if delivery.unregisteredDelayMs == 0 {
            unused.append((DeliveryOptions.Flag.unregisteredAfterPushes, "without --unregistered-delay (410 starts at once)"))
        }
        if listeners.device == nil, listeners.deviceTLS { unused.append((Listeners.Flag.deviceTLS, "with --device-listen off")) }
        if listeners.admin == nil {
            unused += [(AdminOptions.Flag.token, "with --admin-listen off"), (AdminOptions.Flag.allowedHost, "with --admin-listen off")]
        }
        return unused.filter { options.string($0.0) != nil && options.source($0.0.name) != .defaultValue }.map { spec, why in
            "\(options.origin(spec)) has no effect \(why)"
        }
    }
}

extension ResolvedOptions {
    /// `N/SECONDS` (for example 100/10): more than N within SECONDS; `off` for none (so a part
    /// of a preset can be turned off). nil when not given, `.some(nil)` for `off`. `example` goes
    /// in the message for a value that is not one. SECONDS is finite (`inf` would overflow the
    /// window in ms), at least a millisecond, and at most a year unless `maxSeconds` says less.
    func countWithin(
        _ spec: OptionSpec, maxSeconds: Double = 86_400 * 365, example: String
    ) throws(UsageError)
        -> (count: Int, windowMs: Int64)??
    {
        guard let text = string(spec) else { return nil }
        if text == "off" { return .some(nil) }
        let parts = text.split(separator: "/")
        // Decimal seconds only (Double would also read hex, "1e3" and "inf").
        guard parts.count == 2, let count = Int(parts[0]), count > 0,
            parts[1].utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E }), let seconds = Double(parts[1]), seconds.isFinite,
            seconds >= 0.001, seconds <= maxSeconds
        else {
            throw UsageError(
                "\(origin(spec)): '\(text)' is not N/SECONDS (for example \(example): N from 1, SECONDS from 0.001 to \(Int(maxSeconds))) or off"
            )
        }
        return .some((count, Int64(seconds * 1000)))
    }

    /// A whole number in `range`, or `off` (`.some(nil)`); nil when not given.
    func integerOrOff(_ spec: OptionSpec, in range: ClosedRange<Int>) throws(UsageError) -> Int?? {
        guard let text = string(spec) else { return nil }
        if text == "off" { return .some(nil) }
        guard let value = Int(text), range.contains(value) else {
            throw UsageError("\(origin(spec)): '\(text)' is not a whole number from \(range.lowerBound) to \(range.upperBound), or off")
        }
        return .some(value)
    }
}
