// Connections: event-loop threads and what one connection may take. A value with its defaults;
// its flags are in Connections+Options.swift. Imports Foundation (the number of cores).
public import Foundation

extension ServeConfiguration {
    /// Event loops, and the limits of each connection.
    public struct Connections: Sendable, Equatable {
        public var threads: Int
        /// Idle provider connections are closed with GOAWAY IdleTimeout after this (0 = never).
        public var idleTimeoutSeconds: Int
        /// A request whose headers and body have not all arrived this long after it began is reset.
        public var requestTimeoutSeconds: Int
        /// Simultaneous connections allowed per kind (providers, devices).
        public var maxConnections: Int

        public init(
            threads: Int = max(1, ProcessInfo.processInfo.activeProcessorCount), idleTimeoutSeconds: Int = 3600,
            requestTimeoutSeconds: Int = 10, maxConnections: Int = 20_000
        ) {
            self.threads = threads
            self.idleTimeoutSeconds = idleTimeoutSeconds
            self.requestTimeoutSeconds = requestTimeoutSeconds
            self.maxConnections = maxConnections
        }
    }
}
