import CommandLineOptions
import DeviceClient
import Foundation

/// `apns-emulator device`: one simulated device on the command line. Prints one JSON event per
/// line on stdout (DeviceEvents.swift) and takes commands, one per line, on stdin
/// (DeviceStdinCommands.swift); DeviceLoop.swift waits on both.
let deviceCommand = Subcommand(
    name: "device", listing: "run one simulated device (JSON events on stdout, commands on stdin)",
    summary: deviceSummary,
    specs: [
        OptionSpec("connect", "HOST:PORT", default: "127.0.0.1:5223", "the emulator's device listener (serve --device-listen)"),
        OptionSpec("device-id", "ID", "the device's id: letters, digits, '-', '_', '.', at most 128 characters (required)"),
        OptionSpec("bundle", "BUNDLEID", "bundle id of the app installed on the device (required)"),
        OptionSpec("environment", "sandbox|production", "the app's APNs environment: sandbox (a development build) or production (required)"),
        OptionSpec(
            "authorization", "PERMISSION", default: "authorized",
            "the app's notification permission: notDetermined, denied, authorized, provisional or ephemeral"),
        OptionSpec(
            "app-state", "STATE", default: "background",
            "foreground, background, suspended, notRunning or terminated (force-quit by the user)"),
        OptionSpec("no-background-mode", nil, "the app lacks the Remote notifications background mode"),
        OptionSpec(
            "kinds", "KIND,KIND", default: "app",
            "token kinds the app registers for: \(TokenKind.allCases.map(\.rawValue).joined(separator: ", "))"),
        OptionSpec(
            "live-activity-types", "TYPE,TYPE",
            "ActivityAttributes types the app supports (Live Activities; a push-to-start token each, printed as activity events)"),
        OptionSpec("frequent-updates", nil, "with --live-activity-types: the app sets NSSupportsLiveActivitiesFrequentUpdates"),
        OptionSpec(
            "notification-settings", "JSON",
            "the app's notification setup (categories, foregroundPresentation, entitlements…), or @FILE holding it"),
        OptionSpec("low-power", nil, "start with Low Power Mode on"),
        OptionSpec("tls", nil, "connect with TLS (for serve --device-tls)"),
        OptionSpec("ca", "PATH", "with --tls: CA certificate to trust (default: certs/ca.pem if present, else the system store)"),
        OptionSpec("insecure", nil, "with --tls: do not verify the emulator's certificate"),
        OptionSpec(
            "no-retry", nil,
            "exit 1 if the first connection fails (refused, closed, or no welcome within 10 s) instead of retrying until the emulator is up"),
    ],
    environmentVariables: true,
    run: { command, args in DeviceCLI.start(command, args).run() }
)

private let deviceSummary = """
    Runs one simulated device: connects to the emulator's device listener, installs the app and \
    prints one JSON object per line on stdout (events: registered, notification, appUpdated, \
    deviceUpdated, uninstalled, tapped, responded, loggedIn, loggedOut, erased, restored, pong, offline, online, \
    disconnected, replaced, removed, error; with --live-activity-types also activity, whose change is token, \
    started, updated, stale, ended, dismissed, tokenEnded or current (what it missed, after a reconnect), and the answers liveActivitiesDeclared, activityStarted, \
    activityEnded, activityDismissed and activities). Every notification is acked after it is printed. Reconnects (with the same \
    device id) when the connection drops; exits 0 when a newer connection takes the device id or the device is \
    deleted through the admin API.

    stdin commands, one per line: \(DeviceCLI.stdinCommands.map(\.synopsis).joined(separator: " | ")). \
    login and logout make the app call its backend (bind, unbind, and a pending token upload) when one is \
    configured. A line starting with '{' is sent to the emulator as a raw frame. End of stdin is not a quit.
    """

/// The `device` command's session: the device, the app it manages, and where the connection
/// and stdin stand.
final class DeviceCLI {
    let device: SimulatedDevice
    /// The app this command manages, with its current settings (what `reinstall` installs).
    var app: DeviceApp
    let retryFirstConnect: Bool

    enum Link { case connected, retrying(at: Int64), offline }
    var link = Link.retrying(at: 0)
    var backoffMilliseconds: Int64 = 100
    /// A `disconnected` event was printed for the current outage (printed once per outage).
    var outageAnnounced = false
    /// The current connection has seen `welcome`.
    var welcomed = false
    /// Some connection has (`--no-retry` gives up only before the first welcome).
    var everWelcomed = false
    /// When the current connection counts as failed if `welcome` has not come.
    var welcomeDeadline: Int64?
    var announceOnline = false
    var reinstallAfterErase = false
    var installAfterUninstall = false
    var lastDisplayedAPNsID: String?
    /// The deliveries shown last (delivery id and apns-id), oldest first: the emulator sends a
    /// delivery again when it cannot know whether its frame left (a reload, a re-attachment
    /// after an outage), and a delivery seen already is acked again, not shown twice.
    struct DeliveryKey: Hashable {
        var id: Int64
        var apnsID: String
        /// Ids start over after a reset or a restart without a state directory, and a provider
        /// may send a fixed apns-id: the token, new after either, tells such a push apart.
        var token: String
    }
    var recentDeliveries: Set<DeliveryKey> = []
    var recentDeliveryOrder: [DeliveryKey] = []
    var recentDeliveryNext = 0
    static let recentDeliveriesKept = 1024

    /// While frames read together are handled, their events wait here and their acks in
    /// `acks`: one write to stdout and one to the emulator per read, not one per frame.
    var held: [UInt8]?
    var acks: [Int64] = []

    var stdinOpen = true
    var stdinBuffer: [UInt8] = []
    var discardingLongLine = false

    init(device: SimulatedDevice, app: DeviceApp, retryFirstConnect: Bool) {
        self.device = device
        self.app = app
        self.retryFirstConnect = retryFirstConnect
        device.autoAck = false  // ack after printing
    }

    // MARK: Options

    /// The session the command line asks for; a usage error ends the process (status 2).
    static func start(_ command: Subcommand, _ args: [String]) -> DeviceCLI {
        let (options, positional) = command.parse(args, environment: ProcessInfo.processInfo.environment)
        func usage(_ message: String) -> Never { command.fail(message) }
        guard positional.isEmpty else {
            usage("device takes no arguments (got '\(positional.joined(separator: " "))'); see --help")
        }
        func spec(_ name: String) -> OptionSpec { command.spec(name) }
        func isOn(_ name: String) -> Bool {
            do { return try options.switchValue(spec(name)) ?? false } catch { usage(error.description) }
        }
        func choice<T: RawRepresentable & CaseIterable>(_ name: String, _: T.Type) -> T where T.RawValue == String {
            let text = options.string(name) ?? ""
            guard let value = T(rawValue: text) else {
                usage("\(options.origin(spec(name))) '\(text)' is not allowed; use one of \(T.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return value
        }

        guard let addressText = options.string("connect") else { usage("device needs --connect HOST:PORT") }
        let address: HostPort
        do { address = try HostPort(parsing: addressText) } catch {
            usage("\(options.origin(spec("connect"))): \(error.description)")
        }
        guard let deviceID = options.string("device-id") else {
            usage("device needs --device-id ID (letters, digits, '-', '_', '.', at most 128 characters)")
        }
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
        guard !deviceID.isEmpty, deviceID.count <= 128, deviceID.allSatisfy({ allowed.contains($0) }) else {
            usage("\(options.origin(spec("device-id"))) '\(deviceID)' is not a device id: use letters, digits, '-', '_', '.', at most 128 characters")
        }
        guard let bundleID = options.string("bundle"), !bundleID.isEmpty else { usage("device needs --bundle BUNDLEID") }
        guard options.isSet("environment") else { usage("device needs --environment sandbox|production") }
        let environment = choice("environment", APNsEnvironment.self)
        let authorization = choice("authorization", Authorization.self)
        let appState = choice("app-state", AppState.self)
        var kinds: [TokenKind] = []
        for word in (options.string("kinds") ?? "app").split(separator: ",", omittingEmptySubsequences: false) {
            let name = word.trimmingCharacters(in: .whitespaces)
            guard let kind = TokenKind(rawValue: name) else {
                usage(
                    "\(options.origin(spec("kinds"))) has '\(name)', which is not a token kind; use a comma-separated list of \(TokenKind.allCases.map(\.rawValue).joined(separator: ", "))"
                )
            }
            if !kinds.contains(kind) { kinds.append(kind) }
        }
        var tls: (caPath: String?, verifyPeer: Bool)?
        if isOn("tls") {
            let caPath = options.string("ca") ?? (FileManager.default.fileExists(atPath: "certs/ca.pem") ? "certs/ca.pem" : nil)
            if let caPath, !FileManager.default.isReadableFile(atPath: caPath) {
                usage("\(options.origin(spec("ca"))): cannot read \(caPath)")
            }
            tls = (caPath, !isOn("insecure"))
        } else if options.isSet("ca") || isOn("insecure") {
            usage("--ca and --insecure apply to TLS connections: add --tls (the device listener is TLS only with serve --device-tls)")
        }
        var liveActivityTypes: [String]?
        if let list = options.string("live-activity-types") {
            let types = list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            guard !types.isEmpty else { usage("\(options.origin(spec("live-activity-types"))) needs at least one type name") }
            liveActivityTypes = types
        } else if isOn("frequent-updates") {
            usage("--frequent-updates needs --live-activity-types (the app must support Live Activities)")
        }
        var notificationSettings: JSONObject?
        if let text = options.string("notification-settings") {
            let where_ = options.origin(spec("notification-settings"))
            var json = text
            if text.hasPrefix("@") {
                guard let data = FileManager.default.contents(atPath: String(text.dropFirst())) else {
                    usage("\(where_): cannot read \(text.dropFirst())")
                }
                json = String(decoding: data, as: UTF8.self)
            }
            guard let object = (try? JSONValue.parse(json))?.objectValue else {
                usage("\(where_) must be a JSON object such as {\"categories\": [...]} or @FILE holding one")
            }
            notificationSettings = object
        }
        let app = DeviceApp(
            bundleID: bundleID, environment: environment, authorization: authorization, appState: appState,
            backgroundMode: !isOn("no-background-mode"), kinds: kinds, liveActivityTypes: liveActivityTypes,
            frequentUpdates: isOn("frequent-updates"), notificationSettings: notificationSettings)
        let device = SimulatedDevice(address: address, deviceID: deviceID, apps: [app], lowPowerMode: isOn("low-power"), tls: tls)
        return DeviceCLI(device: device, app: app, retryFirstConnect: !isOn("no-retry"))
    }
}
