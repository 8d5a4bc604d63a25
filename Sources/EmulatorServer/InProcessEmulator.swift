import APNsCore
import Foundation
public import Networking
import OpenSSLCrypto

/// An emulator in this process on free loopback ports, with a provider key made for it and a
/// temporary directory of its own (certificates, key) that `stop()` removes: what
/// `TestEmulator` runs, and `apns-emulator scenario` without `--admin`.
public final class InProcessEmulator: Sendable {
    /// The provider key the emulator trusts.
    public struct Key: Sendable {
        public let teamID: String
        public let keyID: String
        /// The key as Apple issues it (`AuthKey_KEYID.p8`, PKCS#8 PEM).
        public let pem: String
        /// The same, written to a file in the emulator's directory.
        public let path: String
    }

    public let key: Key
    /// Provider endpoints (TLS, HTTP/2), one per environment.
    public let sandbox: HostPort
    public let production: HostPort
    /// The admin API and web UI (HTTP/1.1), and the token it wants, if any.
    public let admin: HostPort
    public let adminToken: String?
    /// The device socket (docs/device-protocol.md).
    public let device: HostPort
    /// Channel management (as `api-manage-broadcast(.sandbox).push.apple.com`); nil when turned off.
    public let channelSandbox: HostPort?
    public let channelProduction: HostPort?
    /// The CA that issued the endpoints' certificate.
    public let caCertificatePath: String
    public let directory: String
    private let emulator: Emulator

    /// Starts one. `teamID` owns `bundleIDs`; `configure` changes the configuration in Swift,
    /// then `arguments` (more `apns-emulator serve` options) apply over it; without `logging`
    /// the emulator is quiet. The process's APNS_EMULATOR_* variables are not read: it is
    /// self-contained.
    public init(
        teamID: String = "TESTTEAM01", keyID: String = "TESTKEY001", bundleIDs: [String], arguments: [String] = [],
        logging: Bool = false, configure: (inout ServeConfiguration) -> Void = { _ in }
    ) throws(StartupError) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apns-emulator-\(UUID().uuidString)").path
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let made = try ES256PrivateKey.generate()
            let keyPath = "\(directory)/AuthKey_\(keyID).p8"
            try made.pkcs8PEM.write(toFile: keyPath, atomically: true, encoding: .utf8)
            key = Key(teamID: teamID, keyID: keyID, pem: made.pkcs8PEM, path: keyPath)
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw StartupError("cannot prepare \(directory): \(error)")
        }
        var configuration = Self.configuration(
            directory: directory, teamID: teamID, keyID: keyID, keyPath: key.path, bundleIDs: bundleIDs, logging: logging)
        configure(&configuration)
        let emulator: Emulator
        do {
            configuration = try ServeConfiguration.resolve(arguments: arguments, environment: [:], over: configuration)
            emulator = try Emulator(configuration: configuration)
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw StartupError("the emulator did not start: \(error)")
        }
        do {
            try emulator.start()
        } catch {
            emulator.stop()  // closes the listeners bound before the failure
            try? FileManager.default.removeItem(atPath: directory)
            throw StartupError("the emulator did not start: \(error)")
        }
        let bound = emulator.addresses
        guard let sandbox = bound.sandbox, let production = bound.production, let admin = bound.admin, let device = bound.device,
            let ca = bound.caFile
        else {
            emulator.stop()
            try? FileManager.default.removeItem(atPath: directory)
            let off = Self.listenersTurnedOff(configuration)
            throw StartupError(
                off.isEmpty
                    ? "the emulator started without its listeners" : "\(off.joined(separator: ", ")) off: an in-process emulator needs them")
        }
        self.sandbox = sandbox
        self.production = production
        self.admin = admin
        self.device = device
        channelSandbox = bound.channelSandbox
        channelProduction = bound.channelProduction
        self.caCertificatePath = ca
        self.directory = directory
        self.emulator = emulator
        adminToken = emulator.configuration.admin.token
    }

    /// What `arguments` would make of the configuration such an emulator starts from, without
    /// starting one: a usage error (an unknown option, a bad value) is thrown in the words the
    /// start would use (without its "the emulator did not start: "). Files `arguments` name
    /// (`--config`) are read.
    public static func check(arguments: [String], bundleIDs: [String], teamID: String = "TESTTEAM01") throws(StartupError) {
        let base = configuration(
            directory: FileManager.default.temporaryDirectory.appendingPathComponent("apns-emulator-check").path, teamID: teamID,
            keyID: "TESTKEY001", keyPath: "AuthKey_TESTKEY001.p8", bundleIDs: bundleIDs, logging: false)
        let resolved: ServeConfiguration
        do { resolved = try ServeConfiguration.resolve(arguments: arguments, environment: [:], over: base) } catch {
            throw StartupError(error.description)
        }
        let off = listenersTurnedOff(resolved)
        if !off.isEmpty { throw StartupError("\(off.joined(separator: ", ")) off: an in-process emulator needs them") }
    }

    /// The listeners an in-process emulator needs that `arguments` turned off, as their flags.
    private static func listenersTurnedOff(_ configuration: ServeConfiguration) -> [String] {
        let listeners = configuration.listeners
        return [
            ("--sandbox-listen", listeners.sandbox), ("--production-listen", listeners.production),
            ("--admin-listen", listeners.admin), ("--device-listen", listeners.device),
        ].filter { $0.1 == nil }.map { $0.0 }
    }

    /// Free loopback ports, TEST ONLY certificates made in `directory`, the key, the apps.
    private static func configuration(
        directory: String, teamID: String, keyID: String, keyPath: String, bundleIDs: [String], logging: Bool
    ) -> ServeConfiguration {
        let freePort = HostPort(host: "127.0.0.1", port: 0)
        return ServeConfiguration(
            listeners: .init(
                sandbox: freePort, production: freePort, channelSandbox: freePort, channelProduction: freePort, admin: freePort,
                device: freePort),
            tls: .init(source: .generated(certsDirectory: "\(directory)/certs")),
            authKeys: [.init(teamID: teamID, keyID: keyID, path: keyPath)],
            apps: bundleIDs.map { (teamID, $0) },
            quiet: !logging)
    }

    /// Closes every listener and connection and removes the temporary directory.
    public func stop() {
        emulator.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}
