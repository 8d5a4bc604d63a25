// AdminOptions: who may use the admin API and what it may cost, with its flags and their
// mapping. Imports APNsCore, Foundation (the keys directory check), Networking and
// CommandLineOptions.
import APNsCore
import AdminAPI
import Foundation
import HTTPGrammar
import Networking
import CommandLineOptions

/// Settings of the admin listener: who may use it and how much it may cost (docs/admin-api.md,
/// "Access" and "Admin API limits").
public struct AdminOptions: Sendable {
    /// Extra names the API may be reached by (`Host`), lowercased.
    public var allowedHosts: [String] = []
    public var token: String?
    /// Serve a non-loopback admin listener without a token, on purpose.
    public var insecure = false
    /// The real path of `--keys-dir`: `POST /api/v1/keys` may read `path`s inside it only.
    public var keysDirectory: String?
    public var maxConnections = 1024
    public var maxWaiters = 512
    /// A request's head must arrive within this of its first byte, and its body within this
    /// of the head.
    public var readTimeoutMs: Int64 = 10_000
    /// A keep-alive connection with no request (or a response the client does not read) this long is closed.
    public var idleTimeoutMs: Int64 = 60_000

    public init() {}

    enum Flag {
        private static let defaults = AdminOptions()
        static let allowedHost = OptionSpec(
            "admin-allowed-host", "NAME", repeatable: true,
            "another name the admin API may be reached by (its Host header), e.g. apns-emulator in a compose network; loopback names and IP addresses are always allowed"
        )
        static let token = OptionSpec(
            "admin-token", "TOKEN",
            "require Authorization: Bearer TOKEN on the admin API (all but /livez, /readyz and the web UI's files); prefer the environment variable, flags show in ps"
        )
        static let insecure = OptionSpec(
            "admin-insecure", nil,
            "allow --admin-listen on a non-loopback address without --admin-token (anyone who reaches it can change everything)")
        static let keysDirectory = OptionSpec(
            "keys-dir", "DIR", "directory POST /api/v1/keys may read key files from (\"path\"); without it keys are sent as \"pem\"")
        static let maxConnections = OptionSpec(
            "admin-max-connections", "N", default: String(defaults.maxConnections),
            "concurrent admin connections; more are answered 503")
        static let maxWaiters = OptionSpec(
            "admin-max-waiters", "N", default: String(defaults.maxWaiters),
            "concurrent long polls (/api/v1/notifications/wait); more are answered 503")
        static let readTimeout = OptionSpec(
            "admin-read-timeout", "SECONDS", default: String(defaults.readTimeoutMs / 1000),
            "time a client has to send a request's headers, and then its body; slower clients get 408 and are closed")
        static let idleTimeout = OptionSpec(
            "admin-idle-timeout", "SECONDS", default: String(defaults.idleTimeoutMs / 1000),
            "close admin keep-alive connections idle this long")
    }

    static let specs = [
        Flag.allowedHost, Flag.token, Flag.insecure, Flag.keysDirectory, Flag.maxConnections, Flag.maxWaiters, Flag.readTimeout,
        Flag.idleTimeout,
    ]

    /// What the options set replaces `base`'s value (allowed hosts add to its list).
    init(_ options: ResolvedOptions, adminListen: HostPort?, over base: AdminOptions = AdminOptions()) throws(UsageError) {
        self = base
        for name in options.strings(Flag.allowedHost) {
            guard let host = HostName.parse(host: name), host.port == nil else {
                throw UsageError("\(options.origin(Flag.allowedHost)): '\(name)' is not a host name (without a port)")
            }
            allowedHosts.append(host.host)
        }
        if let token = options.string(Flag.token) {
            guard (1...512).contains(token.utf8.count), token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw UsageError("\(options.origin(Flag.token)): the token must be 1 to 512 printable ASCII characters without spaces")
            }
            self.token = token
        }
        insecure = try options.switchValue(Flag.insecure) ?? insecure
        if let directory = options.string(Flag.keysDirectory) {
            var isDirectory: ObjCBool = false
            guard let real = FileSystem.realPath(directory), FileManager.default.fileExists(atPath: real, isDirectory: &isDirectory),
                isDirectory.boolValue
            else {
                throw UsageError("\(options.origin(Flag.keysDirectory)): '\(directory)' is not a directory")
            }
            keysDirectory = real
        }
        maxConnections = try options.integer(Flag.maxConnections, in: 1...1_000_000) ?? maxConnections
        maxWaiters = try options.integer(Flag.maxWaiters, in: 0...1_000_000) ?? maxWaiters
        readTimeoutMs = try options.integer(Flag.readTimeout, in: 1...3600).map { Int64($0) * 1000 } ?? readTimeoutMs
        idleTimeoutMs = try options.integer(Flag.idleTimeout, in: 1...86_400).map { Int64($0) * 1000 } ?? idleTimeoutMs

        if let adminListen, token == nil, !insecure, !Self.isLoopback(adminListen.host) {
            throw UsageError(
                "--admin-listen \(adminListen) makes the admin API (which can add keys, devices and faults, and reset"
                    + " everything) reachable from other machines. Require a token with --admin-token TOKEN"
                    + " (APNS_EMULATOR_ADMIN_TOKEN), or accept the exposure with --admin-insecure (APNS_EMULATOR_ADMIN_INSECURE=true)")
        }
    }

    /// Whether a listen host is reachable from this machine only.
    static func isLoopback(_ host: String) -> Bool {
        HostName.parse(host: host)?.isLoopback ?? false
    }

    /// The access rules for a listener bound to `bound`.
    func policy(boundTo bound: HostPort?) -> AdminAccessPolicy {
        var policy = AdminAccessPolicy(allowedHosts: Set(allowedHosts), token: token)
        if let bound, let host = HostName.parse(host: bound.host), !host.isWildcard { policy.boundHost = host.host }
        return policy
    }
}
