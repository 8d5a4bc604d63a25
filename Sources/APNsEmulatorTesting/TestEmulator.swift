// TestEmulator: an emulator inside the test process (free ports, its own key and directory)
// and conveniences over its admin client. Imports EmulatorServer (the emulator itself), JSON,
// Foundation and Networking.
public import EmulatorServer
public import JSON
import Foundation
import Networking

/// An APNs emulator running inside the test process: real TLS, real HTTP/2 and the same rules
/// as `apns-emulator serve`, on free loopback ports, with a fresh provider key and its own
/// temporary directory. Start one per test (they are independent) and stop it at the end:
///
/// ```swift
/// let apns = try TestEmulator.start()
/// defer { apns.stop() }
/// let device = try apns.createDevice()
/// // … point the provider under test at apns.sandboxURL, trusting apns.caCertificatePath,
/// // signing with apns.signingKey …
/// let record = try await apns.waitForNotification(matching: PushFilter(token: device.token))
/// ```
///
/// `start()` ignores SIGPIPE in the process (as the emulator binary does): a peer that goes
/// away makes a write fail instead of killing the test runner.
public final class TestEmulator: Sendable {
    /// What to start with. Anything else `apns-emulator serve` accepts is set in Swift with
    /// `configure`, or given as `arguments`.
    public struct Options: Sendable {
        /// The provider key's team and key id (10 characters each, as Apple's).
        public var teamID = "TESTTEAM01"
        public var keyID = "TESTKEY001"
        /// Apps of the team: pushes to these topics are accepted with `signingKey`.
        public var bundleIDs: [String]
        /// More `apns-emulator serve` options, e.g. `["--unregistered-delay", "0"]`. They apply
        /// after `configure` and win where both set something.
        public var arguments: [String]
        /// Let the emulator log to standard error (off: tests stay quiet).
        public var logging = false
        /// Changes the configuration in Swift, e.g. `{ $0.delivery.deviceWindow = 10 }`. It is
        /// given the test kit's own: free loopback ports, certificates in the emulator's
        /// directory, the provider key and `bundleIDs`, quiet unless `logging`.
        public var configure: @Sendable (inout ServeConfiguration) -> Void

        public init(
            bundleIDs: [String] = ["com.example.app"], arguments: [String] = [],
            configure: @escaping @Sendable (inout ServeConfiguration) -> Void = { _ in }
        ) {
            self.bundleIDs = bundleIDs
            self.arguments = arguments
            self.configure = configure
        }
    }

    public let options: Options
    public let signingKey: SigningKey
    /// Provider endpoints (TLS, HTTP/2), one per environment.
    public let sandbox: HostPort
    public let production: HostPort
    /// The admin API and web UI (HTTP/1.1).
    public let admin: HostPort
    /// The device socket (docs/device-protocol.md), for `DeviceClient.SimulatedDevice`.
    public let device: HostPort
    /// Channel management, as `api-manage-broadcast.sandbox.push.apple.com` and
    /// `api-manage-broadcast.push.apple.com` (TLS, HTTP/2); nil when an argument turned it off.
    public let channelSandbox: HostPort?
    public let channelProduction: HostPort?
    /// The CA that issued the endpoints' certificate: the provider must trust it.
    public let caCertificatePath: String
    /// The emulator's temporary directory (certificates, key); removed by `stop()`.
    public let directory: String
    /// A typed client of this emulator's admin API.
    public let api: EmulatorAdminClient

    private let emulator: InProcessEmulator

    public var sandboxURL: String { "https://\(sandbox)" }
    public var productionURL: String { "https://\(production)" }
    public var adminURL: String { "http://\(admin)" }
    public var bundleID: String { options.bundleIDs.first ?? "com.example.app" }
    public var caCertificatePEM: String { (try? String(contentsOfFile: caCertificatePath, encoding: .utf8)) ?? "" }

    /// Starts an emulator on free loopback ports. Throws `TestEmulatorError` with the
    /// emulator's own message when an option is wrong.
    public static func start(_ options: Options = Options()) throws(TestEmulatorError) -> TestEmulator {
        try TestEmulator(options)
    }

    private init(_ options: Options) throws(TestEmulatorError) {
        self.options = options
        do {
            emulator = try InProcessEmulator(
                teamID: options.teamID, keyID: options.keyID, bundleIDs: options.bundleIDs,
                arguments: options.arguments, logging: options.logging,
                configure: options.configure)
        } catch {
            throw TestEmulatorError(error.description)
        }
        let key = emulator.key
        signingKey = SigningKey(teamID: key.teamID, keyID: key.keyID, pem: key.pem, path: key.path)
        sandbox = emulator.sandbox
        production = emulator.production
        admin = emulator.admin
        device = emulator.device
        channelSandbox = emulator.channelSandbox
        channelProduction = emulator.channelProduction
        caCertificatePath = emulator.caCertificatePath
        directory = emulator.directory
        api = EmulatorAdminClient(address: admin, token: emulator.adminToken)
    }

    /// Starts an emulator, runs `body` with it and stops it however `body` ends:
    ///
    /// ```swift
    /// @Test func shipping() async throws {
    ///     try await TestEmulator.with { apns in … }
    /// }
    /// ```
    public static func with<T>(_ options: Options = Options(), _ body: (TestEmulator) async throws -> T) async throws -> T {
        let emulator = try start(options)
        defer { emulator.stop() }
        return try await body(emulator)
    }

    /// Closes every listener and connection and removes the temporary directory.
    public func stop() { emulator.stop() }

    // MARK: Conveniences over `api`

    /// A virtual device with `bundleID` installed (the first of `options.bundleIDs` by
    /// default): its id and token.
    public func createDevice(
        bundleID: String? = nil, environment: PushEnvironment = .sandbox, deviceID: String? = nil
    )
        throws(EmulatorAdminError) -> DeviceHandle
    {
        let bundle = bundleID ?? self.bundleID
        let info = try api.createDevice(bundleID: bundle, environment: environment, deviceID: deviceID)
        guard let token = info.apps.first(where: { $0.bundleID == bundle })?.token else {
            throw EmulatorAdminError(status: 0, message: "device \(info.deviceID) was created without a token for \(bundle)")
        }
        return DeviceHandle(api: api, deviceID: info.deviceID, bundleID: bundle, token: token, environment: environment)
    }

    /// Records matching `filter`, newest first.
    public func notifications(matching filter: PushFilter = PushFilter()) throws(EmulatorAdminError) -> [PushRecord] {
        try api.notifications(filter)
    }

    /// The first record matching `filter`, already received or still to come; throws
    /// `TestEmulatorError` when none arrives within `timeout`. Runs the long poll on its own
    /// thread, so waiting does not hold a thread of Swift's concurrency pool.
    public func waitForNotification(matching filter: PushFilter, timeout: Duration = .seconds(10)) async throws -> PushRecord {
        var sinceStart = filter
        if sinceStart.sinceMs == nil { sinceStart.sinceMs = 0 }
        let filter = sinceStart
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        let api = self.api
        let found: PushRecord? = try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                do { continuation.resume(returning: try api.waitForNotification(filter, timeoutSeconds: seconds)) } catch {
                    continuation.resume(throwing: error)
                }
            }
            thread.start()
        }
        guard let found else {
            throw TestEmulatorError(
                "no notification matching \(filter) arrived within \(timeout); received: "
                    + ((try? api.notifications(limit: 5).map(\.description).joined(separator: "; ")) ?? "?"))
        }
        return found
    }
}

/// A test emulator could not start or a wait ran out.
public struct TestEmulatorError: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// A virtual device made by `TestEmulator.createDevice`: its token and what can happen to it.
public struct DeviceHandle: Sendable {
    public let api: EmulatorAdminClient
    public let deviceID: String
    public let bundleID: String
    /// The app's current token (a reinstall returns a new handle with the new one).
    public let token: String
    public let environment: PushEnvironment

    /// The device as the emulator sees it now.
    public func info() throws(EmulatorAdminError) -> DeviceInfo { try api.device(deviceID) }

    /// Notifications sent to this device's token, newest first.
    public func notifications() throws(EmulatorAdminError) -> [PushRecord] { try api.notifications(PushFilter(token: token)) }

    public func setPermission(_ authorization: String) throws(EmulatorAdminError) {
        try api.setApp(deviceID: deviceID, bundleID: bundleID, authorization: authorization)
    }

    public func setAppState(_ appState: String) throws(EmulatorAdminError) {
        try api.setApp(deviceID: deviceID, bundleID: bundleID, appState: appState)
    }

    public func setOnline(_ online: Bool) throws(EmulatorAdminError) { try api.setOnline(deviceID: deviceID, online) }

    /// Uninstalls the app: pushes to `token` get 410 `Unregistered` from now on (or after the
    /// emulator's `--unregistered-delay`).
    public func uninstall() throws(EmulatorAdminError) { try api.uninstall(deviceID: deviceID, bundleID: bundleID) }

    /// Reinstalls the app: a new handle with the new token; the old token is no longer valid.
    public func reinstall() throws(EmulatorAdminError) -> DeviceHandle {
        let token = try api.reinstall(deviceID: deviceID, bundleID: bundleID)
        return DeviceHandle(api: api, deviceID: deviceID, bundleID: bundleID, token: token, environment: environment)
    }

    // MARK: Live Activities

    /// Declares the app's ActivityAttributes types; returns each type's push-to-start token
    /// (push a `liveactivity` start event to it, topic `BUNDLE.push-type.liveactivity`).
    @discardableResult
    public func declareLiveActivities(_ types: [String], frequentUpdates: Bool = false) throws(EmulatorAdminError) -> [String: String] {
        try api.declareLiveActivities(deviceID: deviceID, bundleID: bundleID, types: types, frequentUpdates: frequentUpdates)
    }

    /// The app starts an activity of a declared type (by default taking token-push updates: its
    /// `pushToken` is where the provider sends them).
    @discardableResult
    public func startActivity(
        _ attributesType: String, attributes: JSONValue = .object(JSONObject()), contentState: JSONValue = .object(JSONObject()),
        updates: ActivityUpdates = .token
    ) throws(EmulatorAdminError) -> ActivityInfo {
        try api.startActivity(
            deviceID: deviceID, bundleID: bundleID, attributesType: attributesType, attributes: attributes, contentState: contentState,
            updates: updates)
    }

    /// The device's activities (every app's), dismissed ones included, oldest first.
    public func activities() throws(EmulatorAdminError) -> [ActivityInfo] { try api.activities(deviceID: deviceID) }

    /// The app ends the activity, with final content when given; it leaves the Lock Screen at
    /// `dismissalDate` (seconds since 1970), by default up to four hours on.
    @discardableResult
    public func endActivity(
        _ activityID: String, contentState: JSONValue? = nil, dismissalDate: Double? = nil
    ) throws(EmulatorAdminError)
        -> ActivityInfo
    {
        try api.endActivity(deviceID: deviceID, activityID: activityID, contentState: contentState, dismissalDate: dismissalDate)
    }

    /// The user swipes the activity away.
    public func dismissActivity(_ activityID: String) throws(EmulatorAdminError) {
        try api.dismissActivity(deviceID: deviceID, activityID: activityID)
    }
}

extension TestEmulator {
    /// The provider key the emulator trusts: give it to the provider under test.
    public struct SigningKey: Sendable {
        public let teamID: String
        public let keyID: String
        /// The key as Apple issues it (`AuthKey_KEYID.p8`, PKCS#8 PEM).
        public let pem: String
        /// The same, written to a file in the emulator's directory.
        public let path: String
    }
}
