// LoadBehaviour+Options: the flags for how the provider endpoint pushes back under load
// (`--profile realistic` presets them) and their mapping. Imports APNsCore (LoadBehaviour) and
// CommandLineOptions only.
import APNsCore
import CommandLineOptions

extension LoadBehaviour {
    enum Flag {
        private static let defaults = LoadBehaviour()
        static let streamLimitDrop = OptionSpec(
            "stream-limit-drop", "on|off", default: defaults.streamLimitDrop ? "on" : "off",
            "after ExpiredProviderToken: SETTINGS MAX_CONCURRENT_STREAMS 1 and RST_STREAM REFUSED_STREAM for the streams already sent; back up after a success"
        )
        static let responseLatency = OptionSpec(
            "response-latency", "MS", default: String(defaults.responseLatencyMs),
            "hold every answer this long (plus --response-jitter)")
        static let responseJitter = OptionSpec(
            "response-jitter", "MS", default: String(defaults.responseJitterMs),
            "add up to this much more to each answer's wait, uniformly")
        static let connectionRate = OptionSpec(
            "connection-rate", "N|off",
            "at most N answers per second on one provider connection; the rest wait their turn (default: off, no cap)")
        static let connectionChurn = OptionSpec(
            "connection-churn", "N/SECONDS|off",
            "more than N new provider connections within SECONDS are closed on arrival until the window ends (default: off)")
        static let errorDisconnect = OptionSpec(
            "error-disconnect", "N/SECONDS|off",
            "end a provider connection with GOAWAY once its errors within SECONDS reach N points (a 4xx costs 1, BadDeviceToken 5; 410 and 429 nothing) (default: off)"
        )
    }

    init(_ options: ResolvedOptions, over base: Self) throws(UsageError) {
        self = base
        switch options.string(Flag.streamLimitDrop) {
        case nil: break
        case "on": streamLimitDrop = true
        case "off": streamLimitDrop = false
        case let other?: throw UsageError("\(options.origin(Flag.streamLimitDrop)): '\(other)' is not on or off")
        }
        responseLatencyMs = try options.integer(Flag.responseLatency, in: 0...60_000) ?? responseLatencyMs
        responseJitterMs = try options.integer(Flag.responseJitter, in: 0...60_000) ?? responseJitterMs
        // `off` turns a part of `--profile realistic` off: a flag wins over the preset.
        answersPerSecondPerConnection = try options.integerOrOff(Flag.connectionRate, in: 1...10_000_000) ?? answersPerSecondPerConnection
        connectionChurn = try options.countWithin(Flag.connectionChurn, maxSeconds: 86_400, example: "100/10") ?? connectionChurn
        if let given = try options.countWithin(Flag.errorDisconnect, maxSeconds: 86_400, example: "50/60") {
            errorDisconnect = given.map { (points: $0.count, windowMs: $0.windowMs) }
        }
    }
}
