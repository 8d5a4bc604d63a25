// Listeners: where `serve` listens (provider endpoints, admin API, device socket). A value
// with its defaults; its flags are in Listeners+Options.swift. Imports Networking (HostPort).
public import Networking

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
        /// Channel management (TLS, HTTP/2), on Apple's ports: `api-manage-broadcast.sandbox`
        /// is 2195, `api-manage-broadcast` 2196.
        public var channelSandbox: HostPort?
        public var channelProduction: HostPort?
        public var admin: HostPort?
        public var device: HostPort?
        /// The device socket speaks TLS (the providers' certificate) instead of plain TCP.
        public var deviceTLS: Bool

        public init(
            listen: [HostPort] = [], sandbox: HostPort? = HostPort(host: "127.0.0.1", port: 2197),
            production: HostPort? = HostPort(host: "127.0.0.1", port: 2198), h2cSandbox: HostPort? = nil,
            h2cProduction: HostPort? = nil, channelSandbox: HostPort? = HostPort(host: "127.0.0.1", port: 2195),
            channelProduction: HostPort? = HostPort(host: "127.0.0.1", port: 2196),
            admin: HostPort? = HostPort(host: "127.0.0.1", port: 8197),
            device: HostPort? = HostPort(host: "127.0.0.1", port: 5223), deviceTLS: Bool = false
        ) {
            self.listen = listen
            self.sandbox = sandbox
            self.production = production
            self.h2cSandbox = h2cSandbox
            self.h2cProduction = h2cProduction
            self.channelSandbox = channelSandbox
            self.channelProduction = channelProduction
            self.admin = admin
            self.device = device
            self.deviceTLS = deviceTLS
        }

        /// Whether a provider listener speaks TLS.
        public var hasTLSProviderListener: Bool {
            !listen.isEmpty || sandbox != nil || production != nil || channelSandbox != nil || channelProduction != nil
        }
        /// Whether any listener needs the server certificate.
        public var needsServerCertificate: Bool { hasTLSProviderListener || (deviceTLS && device != nil) }
    }
}
