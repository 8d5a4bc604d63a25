import APNsCore
import DeviceClient
import CommandLineOptions
import Foundation
import Glibc
import Networking

// MARK: device

/// `apns-emulator device`: one simulated device on the command line. Prints one JSON event per
/// line on stdout and takes commands, one per line, on stdin (see `DeviceCLI.summary`).
func runDevice(_ args: [String]) -> Never {
    let session = DeviceCLI.start(args)
    session.run()
}

/// Everything of the `device` command lives in here so no name clashes with main.swift's globals.
private final class DeviceCLI {
    static let specs = [
        OptionSpec("connect", "HOST:PORT", default: "127.0.0.1:5223", "the emulator's device listener (serve --device-listen)"),
        OptionSpec("device-id", "ID", "the device's id: letters, digits, '-', '_', '.', at most 128 characters (required)"),
        OptionSpec("bundle", "BUNDLEID", "bundle id of the app installed on the device (required)"),
        OptionSpec("environment", "sandbox|production", "the app's APNs environment: sandbox (a development build) or production (required)"),
        OptionSpec("authorization", "PERMISSION", default: "authorized",
                   "the app's notification permission: notDetermined, denied, authorized, provisional or ephemeral"),
        OptionSpec("app-state", "STATE", default: "background",
                   "foreground, background, suspended, notRunning or terminated (force-quit by the user)"),
        OptionSpec("no-background-mode", nil, "the app lacks the Remote notifications background mode"),
        OptionSpec("kinds", "KIND,KIND", default: "app",
                   "token kinds the app registers for: \(TokenKind.allCases.map(\.rawValue).joined(separator: ", "))"),
        OptionSpec("low-power", nil, "start with Low Power Mode on"),
        OptionSpec("tls", nil, "connect with TLS (for serve --device-tls)"),
        OptionSpec("ca", "PATH", "with --tls: CA certificate to trust (default: certs/ca.pem if present, else the system store)"),
        OptionSpec("insecure", nil, "with --tls: do not verify the emulator's certificate"),
        OptionSpec("no-retry", nil, "exit 1 if the first connection fails instead of retrying until the emulator is up"),
    ]

    static let summary = """
        Runs one simulated device: connects to the emulator's device listener, installs the app and \
        prints one JSON object per line on stdout (events: registered, notification, appUpdated, \
        deviceUpdated, uninstalled, tapped, loggedIn, loggedOut, erased, restored, pong, offline, online, disconnected, \
        replaced, error). Every notification is acked after it is printed. Reconnects (with the same \
        device id) when the connection drops; exits 0 when a newer connection takes the device id.

        stdin commands, one per line: foreground | background | suspended | notRunning | terminated | \
        state APPSTATE | permission AUTHORIZATION | background-mode on|off | low-power on|off | \
        tap [APNSID] | login USERID | logout | uninstall | reinstall | rotate | erase | restore FROMDEVICEID | \
        offline | online | ping | quit. login and logout make the app call its backend (bind, unbind, and \
        a pending token upload) when one is configured. A line starting with '{' is sent to the emulator as a raw frame. End of stdin is \
        not a quit.
        """

    static let commandWords = AppState.allCases.map(\.rawValue) + [
        "state", "permission", "background-mode", "low-power", "tap", "login", "logout", "uninstall", "reinstall", "rotate", "erase",
        "restore", "offline", "online", "ping", "quit",
    ]

    /// Stdin lines longer than this are rejected (a raw frame may be up to the protocol's 1 MiB).
    static let maxCommandBytes = SimulatedDevice.maxLineBytes

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
    var announceOnline = false
    var reinstallAfterErase = false
    var installAfterUninstall = false
    var lastDisplayedAPNsID: String?

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

    static func usage(_ message: String) -> Never {
        FileHandle.standardError.write(Data("apns-emulator: \(message)\n".utf8))
        exit(2)
    }

    static func start(_ args: [String]) -> DeviceCLI {
        if args.contains("--help") || args.contains("-h") {
            print(OptionParser.help(command: "device", summary: summary, specs: specs, environmentVariables: true))
            exit(0)
        }
        let options: ResolvedOptions
        let positional: [String]
        do {
            (options, positional) = try OptionParser.parse(args, specs: specs, environment: ProcessInfo.processInfo.environment)
        } catch {
            usage(error.description)
        }
        guard positional.isEmpty else {
            usage("device takes no arguments (got '\(positional.joined(separator: " "))'); see --help")
        }
        func spec(_ name: String) -> OptionSpec { specs.first { $0.name == name }! }
        func isOn(_ name: String) -> Bool {
            guard let value = options.string(name) else { return false }
            return !["false", "0", "no", "off", ""].contains(value.lowercased())
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
                usage("\(options.origin(spec("kinds"))) has '\(name)', which is not a token kind; use a comma-separated list of \(TokenKind.allCases.map(\.rawValue).joined(separator: ", "))")
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
        let app = DeviceApp(bundleID: bundleID, environment: environment, authorization: authorization, appState: appState,
                            backgroundMode: !isOn("no-background-mode"), kinds: kinds)
        let device = SimulatedDevice(address: address, deviceID: deviceID, apps: [app], lowPowerMode: isOn("low-power"), tls: tls)
        return DeviceCLI(device: device, app: app, retryFirstConnect: !isOn("no-retry"))
    }

    // MARK: Loop

    func run() -> Never {
        attemptConnect(first: true)
        while true {
            var fds: [pollfd] = []
            var stdinIndex = -1
            var deviceIndex = -1
            if stdinOpen {
                stdinIndex = fds.count
                fds.append(pollfd(fd: 0, events: Int16(POLLIN), revents: 0))
            }
            if device.isConnected {
                deviceIndex = fds.count
                fds.append(pollfd(fd: device.fileDescriptor, events: Int16(POLLIN), revents: 0))
            }
            var timeout: Int32 = -1
            if device.isConnected && device.hasBufferedInput {
                timeout = 0
            } else if case .retrying(let at) = link {
                timeout = Int32(clamping: max(0, at - Monotonic.nowMilliseconds()))
            }
            let n = Glibc.poll(&fds, nfds_t(fds.count), timeout)
            if n < 0 && errno != EINTR {
                FileHandle.standardError.write(Data("apns-emulator: poll failed: \(String(cString: strerror(errno)))\n".utf8))
                exit(1)
            }
            if device.isConnected && ((deviceIndex >= 0 && fds[deviceIndex].revents != 0) || device.hasBufferedInput) {
                readDevice()
            }
            if stdinIndex >= 0 && fds[stdinIndex].revents != 0 {
                readStdin()
            }
            if case .retrying(let at) = link, Monotonic.nowMilliseconds() >= at {
                attemptConnect(first: false)
            }
        }
    }

    func attemptConnect(first: Bool) {
        welcomed = false
        do {
            try device.open(timeoutMilliseconds: 3000)
            link = .connected
        } catch {
            if first && !retryFirstConnect {
                emit(["event": "disconnected", "reason": .string(error.description)])
                FileHandle.standardError.write(Data("apns-emulator: \(error.description)\n".utf8))
                exit(1)
            }
            announceOutage(error.description)
            scheduleRetry()
        }
    }

    func scheduleRetry() {
        link = .retrying(at: Monotonic.nowMilliseconds() + backoffMilliseconds)
        backoffMilliseconds = min(backoffMilliseconds * 2, 2000)
    }

    func announceOutage(_ reason: String) {
        guard !outageAnnounced else { return }
        outageAnnounced = true
        emit(["event": "disconnected", "reason": .string(reason)])
    }

    func readDevice() {
        held = []
        defer { releaseHeld() }
        do {
            for frame in try device.poll(timeoutMilliseconds: 0) { handle(frame) }
        } catch {
            switch error.kind {
            case .badFrame, .lineTooLong:
                emit(.object(errorEvent(code: error.kind == .badFrame ? "bad_frame" : "line_too_long", message: error.message)))
            default:
                break  // closed: handled below
            }
        }
        if !device.isConnected, case .connected = link { connectionLost() }
    }

    func connectionLost() {
        if device.wasReplaced { replaced() }
        var reason = device.disconnectReason ?? "connection closed"
        if !welcomed && device.tls == nil {
            reason += " (before welcome: if the emulator runs with --device-tls, add --tls)"
        }
        announceOutage(reason)
        scheduleRetry()
    }

    /// Prints the held events, then acks their notifications (acked after printed).
    func releaseHeld() {
        guard let bytes = held else { return }
        held = nil
        write(bytes)
        let ids = acks
        acks.removeAll(keepingCapacity: true)
        do { try device.ack(ids) } catch { /* the connection is gone; handled by the loop */ }
    }

    func replaced() -> Never {
        emit(["event": "replaced"])
        releaseHeld()
        device.disconnect()
        exit(0)
    }

    // MARK: Frames → events

    func handle(_ frame: JSONObject) {
        let type = frame["type"]?.stringValue ?? ""
        switch type {
        case "welcome":
            welcomed = true
            outageAnnounced = false
            backoffMilliseconds = 100
            if announceOnline {
                announceOnline = false
                emit(["event": "online", "deviceId": .string(device.deviceID)])
            }
        case "registered":
            var event = JSONObject([("event", "registered")])
            event["token"] = frame["token"] ?? .null
            event["bundleId"] = frame["bundleId"] ?? .null
            event["environment"] = frame["environment"] ?? .null
            event["kind"] = frame["kind"] ?? "app"
            event["topic"] = frame["topic"] ?? .null
            emit(.object(event))
        case "notification":
            handleNotification(frame)
        case "error":
            var event = errorEvent(code: frame["code"]?.stringValue ?? "unknown", message: frame["message"]?.stringValue ?? "")
            event["fatal"] = .bool(frame["fatal"]?.boolValue ?? false)
            emit(.object(event))
            if !welcomed, frame["code"]?.stringValue != "unavailable" {
                // The emulator answers hello before anything else: an error before welcome
                // means it rejects this device, and retrying would only repeat that (except
                // `unavailable`: instances sharing their state through Redis that cannot reach
                // it; the connection closes and the device tries again).
                let why = "\(frame["code"]?.stringValue ?? "error"): \(frame["message"]?.stringValue ?? "")"
                releaseHeld()
                FileHandle.standardError.write(Data("apns-emulator: the emulator rejected device \(device.deviceID): \(why)\n".utf8))
                device.disconnect()
                exit(1)
            }
            // A flow waiting for an answer stops at an error (the emulator answers in order).
            reinstallAfterErase = false
            installAfterUninstall = false
        case "replaced":
            replaced()
        case "appUpdated":
            if frame["bundleId"]?.stringValue == app.bundleID {
                if let value = frame["appState"]?.stringValue.flatMap(AppState.init(rawValue:)) { app.appState = value }
                if let value = frame["authorization"]?.stringValue.flatMap(Authorization.init(rawValue:)) { app.authorization = value }
                if let value = frame["backgroundMode"]?.boolValue { app.backgroundMode = value }
            }
            emit(.object(event(from: frame)))
        case "uninstalled":
            emit(.object(event(from: frame)))
            if installAfterUninstall && frame["bundleId"]?.stringValue == app.bundleID {
                installAfterUninstall = false
                sendRequest(.install(app))
            }
        case "erased":
            emit(.object(event(from: frame)))
            if reinstallAfterErase {
                reinstallAfterErase = false
                sendRequest(.install(app))
            }
        default:
            // appUpdated, deviceUpdated, tapped, restored, pong, and anything a later version adds.
            emit(.object(event(from: frame)))
        }
    }

    func handleNotification(_ frame: JSONObject) {
        let notification: DeliveredNotification
        do {
            notification = try DeliveredNotification(frame: frame)
        } catch {
            emit(.object(errorEvent(code: "bad_frame", message: error.message)))
            return
        }
        var event = JSONObject([("event", "notification")])
        event["apnsId"] = .string(notification.apnsID)
        event["pushType"] = .string(notification.pushType)
        event["payload"] = notification.payload
        event["callbacks"] = .array(notification.callbacks.map { .string($0) })
        event["display"] = .string(notification.display)
        if let reason = notification.reason { event["reason"] = .string(reason) }
        event["id"] = .int(notification.id)
        event["bundleId"] = .string(notification.bundleID)
        event["priority"] = .int(Int64(notification.priority))
        event["collapseId"] = notification.collapseID.map { .string($0) } ?? .null
        event["stored"] = .bool(notification.stored)
        event["topic"] = .string(notification.topic)
        event["token"] = .string(notification.token)
        emit(.object(event))
        if notification.isDisplayed { lastDisplayedAPNsID = notification.apnsID }
        if held != nil {
            acks.append(notification.id)
        } else {
            do { try device.ack(notification.id) } catch { /* the connection is gone; handled by the loop */ }
        }
    }

    /// `{"event": <type>, …the frame's other fields}`.
    func event(from frame: JSONObject) -> JSONObject {
        var event = JSONObject([("event", frame["type"] ?? .null)])
        event.members.append(contentsOf: frame.members.filter { $0.key != "type" && $0.key != "event" })
        return event
    }

    func errorEvent(code: String, message: String) -> JSONObject {
        JSONObject([("event", "error"), ("code", .string(code)), ("message", .string(message))])
    }

    func emit(_ event: JSONValue) {
        if held != nil {
            event.append(to: &held!)
            held!.append(UInt8(ascii: "\n"))
            return
        }
        var line = event.serializedBytes()
        line.append(UInt8(ascii: "\n"))
        write(line)
    }

    func write(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = Glibc.write(1, raw.baseAddress! + offset, raw.count - offset)
                if n > 0 { offset += n } else if n < 0 && errno == EINTR { continue } else { exit(1) }
            }
        }
    }

    func sendRequest(_ request: DeviceRequest) {
        do { try device.request(request) } catch {
            emit(.object(errorEvent(code: "not_connected", message: error.description)))
            if !device.isConnected, case .connected = link { connectionLost() }
        }
    }

    // MARK: stdin

    func readStdin() {
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        let n = chunk.withUnsafeMutableBytes { Glibc.read(0, $0.baseAddress, $0.count) }
        if n < 0 && (errno == EINTR || errno == EAGAIN) { return }
        if n <= 0 {
            // End of stdin is not a quit: keep serving the socket.
            stdinOpen = false
            if !stdinBuffer.isEmpty && !discardingLongLine { command(stdinBuffer) }
            stdinBuffer = []
            return
        }
        var start = 0
        for index in 0..<n where chunk[index] == UInt8(ascii: "\n") {
            let piece = chunk[start..<index]
            if discardingLongLine {
                discardingLongLine = false
            } else if stdinBuffer.count + piece.count > Self.maxCommandBytes {
                emit(.object(errorEvent(code: "bad_command", message: "command line longer than \(Self.maxCommandBytes) bytes")))
            } else {
                command(stdinBuffer + piece)
            }
            stdinBuffer = []
            start = index + 1
        }
        if !discardingLongLine { stdinBuffer.append(contentsOf: chunk[start..<n]) }
        if stdinBuffer.count > Self.maxCommandBytes {
            emit(.object(errorEvent(code: "bad_command", message: "command line longer than \(Self.maxCommandBytes) bytes")))
            stdinBuffer = []
            discardingLongLine = true
        }
    }

    func badCommand(_ message: String) {
        emit(.object(errorEvent(code: "bad_command", message: message)))
    }

    func command(_ bytes: [UInt8]) {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            badCommand("command is not UTF-8")
            return
        }
        let line = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if line.isEmpty { return }
        if line.hasPrefix("{") {
            guard (try? JSONValue.parse(line)) != nil else {
                badCommand("a line starting with '{' must be one JSON value (a raw frame): \(String(line.prefix(200)))")
                return
            }
            guard device.isConnected else { return notConnected("a raw frame") }
            do { try device.sendRaw(Array(line.utf8) + [UInt8(ascii: "\n")]) } catch {
                emit(.object(errorEvent(code: "not_connected", message: error.description)))
                if !device.isConnected, case .connected = link { connectionLost() }
            }
            return
        }
        let words = line.split(whereSeparator: \.isWhitespace).map(String.init)
        let name = words[0]
        let arguments = Array(words.dropFirst())
        func noArguments() -> Bool {
            if arguments.isEmpty { return true }
            badCommand("'\(name)' takes no arguments")
            return false
        }
        func oneArgument(_ what: String) -> String? {
            if arguments.count == 1 { return arguments[0] }
            badCommand("'\(name)' takes one argument: \(name) \(what)")
            return nil
        }
        func onOff() -> Bool? {
            guard let word = oneArgument("on|off") else { return nil }
            switch word {
            case "on": return true
            case "off": return false
            default:
                badCommand("'\(name)' takes on or off, not '\(word)'")
                return nil
            }
        }

        switch name {
        case _ where AppState(rawValue: name) != nil:
            guard noArguments() else { return }
            changeApp(appState: AppState(rawValue: name)!)
        case "state":
            guard let word = oneArgument(AppState.allCases.map(\.rawValue).joined(separator: "|")) else { return }
            guard let state = AppState(rawValue: word) else {
                return badCommand("'\(word)' is not an app state; use one of \(AppState.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            changeApp(appState: state)
        case "permission":
            guard let word = oneArgument(Authorization.allCases.map(\.rawValue).joined(separator: "|")) else { return }
            guard let authorization = Authorization(rawValue: word) else {
                return badCommand("'\(word)' is not an authorization; use one of \(Authorization.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            changeApp(authorization: authorization)
        case "background-mode":
            guard let on = onOff() else { return }
            changeApp(backgroundMode: on)
        case "low-power":
            guard let on = onOff() else { return }
            guard device.isConnected else {
                device.lowPowerMode = on
                emit(["event": "deviceUpdated", "lowPowerMode": .bool(on), "offline": true])
                return
            }
            sendRequest(.device(lowPowerMode: on))
        case "tap":
            guard arguments.count <= 1 else { return badCommand("'tap' takes at most one argument: tap [APNSID]") }
            guard let apnsID = arguments.first ?? lastDisplayedAPNsID else {
                return badCommand("no displayed notification to tap yet; use tap APNSID")
            }
            guard device.isConnected else { return notConnected("tap") }
            sendRequest(.tap(apnsID: apnsID))
        case "login":
            guard let user = oneArgument("USERID") else { return }
            guard device.isConnected else { return notConnected("login") }
            sendRequest(.login(userID: user))
        case "logout":
            guard noArguments() else { return }
            guard device.isConnected else { return notConnected("logout") }
            sendRequest(.logout)
        case "uninstall":
            guard noArguments() else { return }
            guard device.isConnected else { return notConnected("uninstall") }
            installAfterUninstall = false
            sendRequest(.uninstall(bundleID: app.bundleID))
        case "reinstall":
            guard noArguments() else { return }
            guard device.isConnected else { return notConnected("reinstall") }
            if device.apps.contains(where: { $0.bundleID == app.bundleID }) || device.tokens[app.bundleID] != nil {
                // Delete the app first, so the install is a reinstall (new tokens).
                installAfterUninstall = true
                sendRequest(.uninstall(bundleID: app.bundleID))
            } else {
                sendRequest(.install(app))
            }
        case "rotate":
            guard noArguments() else { return }
            guard device.isConnected else { return notConnected("rotate") }
            sendRequest(.rotate(bundleID: app.bundleID))
        case "erase":
            guard noArguments() else { return }
            guard device.isConnected else { return notConnected("erase") }
            reinstallAfterErase = true
            sendRequest(.erase)
        case "restore":
            guard let from = oneArgument("FROMDEVICEID") else { return }
            guard device.isConnected else { return notConnected("restore") }
            sendRequest(.restore(fromDeviceID: from))
        case "ping":
            guard noArguments() else { return }
            guard device.isConnected else { return notConnected("ping") }
            sendRequest(.ping)
        case "offline":
            guard noArguments() else { return }
            if case .offline = link { return badCommand("already offline; use online to reconnect") }
            device.disconnect()
            link = .offline
            outageAnnounced = false
            reinstallAfterErase = false
            installAfterUninstall = false
            emit(["event": "offline"])
        case "online":
            guard noArguments() else { return }
            switch link {
            case .connected:
                badCommand("already online")
            case .offline, .retrying:
                backoffMilliseconds = 100
                announceOnline = true
                attemptConnect(first: false)
            }
        case "quit":
            guard noArguments() else { return }
            device.disconnect()
            exit(0)
        default:
            badCommand("unknown command '\(name)'; commands: \(Self.commandWords.joined(separator: ", ")), or a raw {…} frame")
        }
    }

    func notConnected(_ what: String) {
        let state: String
        switch link {
        case .offline: state = "the device is offline (use online)"
        default: state = "the device is not connected (reconnecting)"
        }
        emit(.object(errorEvent(code: "not_connected", message: "cannot \(what): \(state)")))
    }

    /// Sends an `app` change, or while not connected keeps it for the next hello (and says so
    /// with an `appUpdated` event marked `"offline": true`).
    func changeApp(appState: AppState? = nil, authorization: Authorization? = nil, backgroundMode: Bool? = nil) {
        guard device.isConnected else {
            if let appState { app.appState = appState }
            if let authorization { app.authorization = authorization }
            if let backgroundMode { app.backgroundMode = backgroundMode }
            if let index = device.apps.firstIndex(where: { $0.bundleID == app.bundleID }) {
                device.apps[index].appState = app.appState
                device.apps[index].authorization = app.authorization
                device.apps[index].backgroundMode = app.backgroundMode
            }
            emit(["event": "appUpdated", "bundleId": .string(app.bundleID), "authorization": .string(app.authorization.rawValue),
                  "appState": .string(app.appState.rawValue), "backgroundMode": .bool(app.backgroundMode), "offline": true])
            return
        }
        sendRequest(.app(bundleID: app.bundleID, appState: appState, authorization: authorization, backgroundMode: backgroundMode))
    }
}
