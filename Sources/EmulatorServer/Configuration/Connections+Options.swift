// Connections+Options: the flags for event loops and per-connection limits, and their mapping.
// Imports CommandLineOptions only.
import CommandLineOptions

extension ServeConfiguration.Connections {
    enum Flag {
        private static let defaults = ServeConfiguration.Connections()
        static let threads = OptionSpec("threads", "N", "event-loop threads (default: number of cores)")
        static let idleTimeout = OptionSpec(
            "idle-timeout", "SECONDS", default: String(defaults.idleTimeoutSeconds),
            "close idle provider connections with GOAWAY IdleTimeout (0 = never)")
        static let maxConnections = OptionSpec(
            "max-connections", "N", default: String(defaults.maxConnections),
            "simultaneous connections of each kind (provider connections, device sockets); beyond it a new one is closed at once and counted")
        static let requestTimeout = OptionSpec(
            "request-timeout", "SECONDS", default: String(defaults.requestTimeoutSeconds),
            "reset a provider request (RST_STREAM CANCEL) whose headers and body have not all arrived this long after it began")
    }

    init(_ options: ResolvedOptions, over base: Self) throws(UsageError) {
        self = base
        threads = try options.integer(Flag.threads, in: 1...256) ?? threads
        idleTimeoutSeconds = try options.integer(Flag.idleTimeout, in: 0...86_400 * 30) ?? idleTimeoutSeconds
        requestTimeoutSeconds = try options.integer(Flag.requestTimeout, in: 1...3600) ?? requestTimeoutSeconds
        maxConnections = try options.integer(Flag.maxConnections, in: 1...10_000_000) ?? maxConnections
    }
}
