// Listeners+Options: the listener flags (provider endpoints, admin API, device socket) and
// their mapping, with the checks that span listeners (no shared port, one provider listener at
// least). Imports CommandLineOptions and Networking (HostPort) only.
import CommandLineOptions
import Networking

extension ServeConfiguration.Listeners {
    enum Flag {
        private static let defaults = ServeConfiguration.Listeners()
        static let listen = OptionSpec(
            "listen", "HOST:PORT", repeatable: true,
            "TLS listener like Apple's hosts (e.g. 127.0.0.1:443 and 127.0.0.1:2197): SNI or :authority api.push.apple.com means production, api.sandbox/api.development.push.apple.com sandbox, anything else sandbox"
        )
        static let sandbox = OptionSpec(
            "sandbox-listen", "HOST:PORT", default: defaults.sandbox?.description,
            "TLS listener whose environment is sandbox unless the request names Apple's production host ('off' disables)")
        static let production = OptionSpec(
            "production-listen", "HOST:PORT", default: defaults.production?.description,
            "TLS listener whose environment is production unless the request names an Apple sandbox host ('off' disables)")
        static let h2cSandbox = OptionSpec(
            "h2c-sandbox-listen", "HOST:PORT", default: defaults.h2cSandbox?.description,
            "cleartext HTTP/2 (prior knowledge) listener, sandbox (default: off)")
        static let h2cProduction = OptionSpec(
            "h2c-production-listen", "HOST:PORT", default: defaults.h2cProduction?.description,
            "cleartext HTTP/2 (prior knowledge) listener, production (default: off)")
        static let channelSandbox = OptionSpec(
            "channel-sandbox-listen", "HOST:PORT", default: defaults.channelSandbox?.description,
            "TLS listener for channel management in sandbox, like api-manage-broadcast.sandbox.push.apple.com:2195 ('off' disables)")
        static let channelProduction = OptionSpec(
            "channel-production-listen", "HOST:PORT", default: defaults.channelProduction?.description,
            "TLS listener for channel management in production, like api-manage-broadcast.push.apple.com:2196 ('off' disables)")
        static let admin = OptionSpec(
            "admin-listen", "HOST:PORT", default: defaults.admin?.description,
            "admin/inspection HTTP API ('off' disables)")
        static let device = OptionSpec(
            "device-listen", "HOST:PORT", default: defaults.device?.description,
            "device socket, docs/device-protocol.md ('off' disables)")
        static let deviceTLS = OptionSpec("device-tls", nil, "serve the device socket over TLS (same certificate) instead of plain TCP")
    }

    init(_ options: ResolvedOptions, over base: Self) throws(UsageError) {
        self = base
        for text in options.strings(Flag.listen) where text != "off" {
            do { listen.append(try HostPort(parsing: text)) } catch {
                throw UsageError("\(options.origin(Flag.listen)): \(error.description)")
            }
        }
        sandbox = try Self.address(Flag.sandbox, options, otherwise: sandbox)
        production = try Self.address(Flag.production, options, otherwise: production)
        h2cSandbox = try Self.address(Flag.h2cSandbox, options, otherwise: h2cSandbox)
        h2cProduction = try Self.address(Flag.h2cProduction, options, otherwise: h2cProduction)
        channelSandbox = try Self.address(Flag.channelSandbox, options, otherwise: channelSandbox)
        channelProduction = try Self.address(Flag.channelProduction, options, otherwise: channelProduction)
        admin = try Self.address(Flag.admin, options, otherwise: admin)
        device = try Self.address(Flag.device, options, otherwise: device)
        deviceTLS = try options.switchValue(Flag.deviceTLS) ?? deviceTLS

        try Self.checkDistinctPorts(
            listen.map { (Flag.listen.flag, $0) }
                + [
                    (Flag.sandbox.flag, sandbox), (Flag.production.flag, production), (Flag.h2cSandbox.flag, h2cSandbox),
                    (Flag.h2cProduction.flag, h2cProduction), (Flag.channelSandbox.flag, channelSandbox),
                    (Flag.channelProduction.flag, channelProduction), (Flag.admin.flag, admin), (Flag.device.flag, device),
                ].compactMap { name, address in address.map { (name, $0) } })
        if listen.isEmpty && sandbox == nil && production == nil && h2cSandbox == nil && h2cProduction == nil {
            throw UsageError(
                "every provider listener is off; keep at least one of --listen, --sandbox-listen, --production-listen, --h2c-sandbox-listen, --h2c-production-listen"
            )
        }
    }

    /// The option's address, nil for 'off', `current` when it is not set.
    static func address(_ spec: OptionSpec, _ options: ResolvedOptions, otherwise current: HostPort?) throws(UsageError) -> HostPort? {
        guard let text = options.string(spec) else { return current }
        guard text != "off" else { return nil }
        do { return try HostPort(parsing: text) } catch {
            throw UsageError("\(options.origin(spec)): \(error.description), or 'off'")
        }
    }

    /// Two listeners on one port would fail at bind with a bare "address in use"; name both
    /// instead (`--listen 127.0.0.1:2197` next to the default `--sandbox-listen` is the usual way in).
    static func checkDistinctPorts(_ listeners: [(name: String, address: HostPort)]) throws(UsageError) {
        func wildcard(_ host: String) -> Bool { host == "0.0.0.0" || host == "::" || host == "*" || host.isEmpty }
        // `localhost` binds the loopback address, so it clashes with 127.0.0.1 on the same port.
        func same(_ a: String, _ b: String) -> Bool {
            func loopback(_ host: String) -> String { host.lowercased() == "localhost" ? "127.0.0.1" : host.lowercased() }
            return loopback(a) == loopback(b)
        }
        for (i, a) in listeners.enumerated() where a.address.port != 0 {
            for b in listeners[(i + 1)...] where b.address.port == a.address.port {
                guard same(a.address.host, b.address.host) || wildcard(a.address.host) || wildcard(b.address.host) else { continue }
                let off = [a.name, b.name].first { $0 != "--listen" }.map { "; turn one off (e.g. \($0) off) or move it" } ?? ""
                throw UsageError("\(a.name) \(a.address) and \(b.name) \(b.address) would share port \(a.address.port)\(off)")
            }
        }
    }
}
