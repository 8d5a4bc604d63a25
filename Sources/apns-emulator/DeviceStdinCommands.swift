import DeviceClient
import Foundation

/// One command of the `device` command's stdin: its word, the arguments it takes, and what it
/// does with them (checked already: `run` gets exactly what `takes` allows).
struct StdinCommand: Sendable {
    enum Arguments {
        case none
        /// One argument, named as in `login USERID`.
        case one(String)
        /// `on` or `off`, given to `run` as "on" or "off".
        case onOff
        /// At most one (`tap [APNSID]`).
        case optional(String)
        /// One or more: the first, then the rest of the line (`respond ACTION [TEXT…]`).
        case atLeastOne(String)
    }

    let word: String
    let takes: Arguments
    let run: @Sendable (DeviceCLI, [String]) -> Void

    /// How `--help` writes it: `tap [APNSID]`, `focus on|off`.
    var synopsis: String {
        switch takes {
        case .none: return word
        case .one(let what): return "\(word) \(what)"
        case .onOff: return "\(word) on|off"
        case .optional(let what): return "\(word) [\(what)]"
        case .atLeastOne(let what): return "\(word) \(what)"
        }
    }
}

extension DeviceCLI {
    /// Stdin lines longer than this are rejected (a raw frame may be up to the protocol's 1 MiB).
    static let maxCommandBytes = SimulatedDevice.maxLineBytes

    /// Every stdin command, in the order an unknown one's error lists them.
    static let stdinCommands: [StdinCommand] =
        AppState.allCases.map { state in
            StdinCommand(word: state.rawValue, takes: .none) { cli, _ in cli.changeApp(appState: state) }
        } + [
            StdinCommand(word: "state", takes: .one(AppState.allCases.map(\.rawValue).joined(separator: "|"))) { cli, arguments in
                guard let state = AppState(rawValue: arguments[0]) else {
                    return cli.badCommand(
                        "'\(arguments[0])' is not an app state; use one of \(AppState.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                cli.changeApp(appState: state)
            },
            StdinCommand(word: "permission", takes: .one(Authorization.allCases.map(\.rawValue).joined(separator: "|"))) { cli, arguments in
                guard let authorization = Authorization(rawValue: arguments[0]) else {
                    return cli.badCommand(
                        "'\(arguments[0])' is not an authorization; use one of \(Authorization.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                cli.changeApp(authorization: authorization)
            },
            StdinCommand(word: "background-mode", takes: .onOff) { cli, arguments in cli.changeApp(backgroundMode: arguments[0] == "on") },
            StdinCommand(word: "low-power", takes: .onOff) { cli, arguments in
                let on = arguments[0] == "on"
                guard cli.device.isConnected else {
                    cli.device.lowPowerMode = on
                    cli.emit(["event": "deviceUpdated", "lowPowerMode": .bool(on), "offline": true])
                    return
                }
                cli.sendRequest(.device(lowPowerMode: on))
            },
            StdinCommand(word: "tap", takes: .optional("APNSID")) { cli, arguments in
                guard let apnsID = arguments.first ?? cli.lastDisplayedAPNsID else {
                    return cli.badCommand("no displayed notification to tap yet; use tap APNSID")
                }
                cli.whenConnected("tap") { cli.sendRequest(.tap(apnsID: apnsID)) }
            },
            StdinCommand(word: "respond", takes: .atLeastOne("ACTION [TEXT…]")) { cli, arguments in
                guard let apnsID = cli.lastDisplayedAPNsID else {
                    return cli.badCommand("no displayed notification to respond to yet (a raw {\"type\":\"respond\",…} frame names one)")
                }
                let text = arguments.count > 1 ? arguments.dropFirst().joined(separator: " ") : nil
                cli.whenConnected("respond") { cli.sendRequest(.respond(apnsID: apnsID, action: arguments[0], text: text)) }
            },
            StdinCommand(word: "focus", takes: .onOff) { cli, arguments in
                cli.whenConnected("focus") { cli.sendRequest(.switches(JSONObject([("focus", .bool(arguments[0] == "on"))]))) }
            },
            StdinCommand(word: "muted", takes: .onOff) { cli, arguments in
                cli.whenConnected("muted") { cli.sendRequest(.switches(JSONObject([("muted", .bool(arguments[0] == "on"))]))) }
            },
            StdinCommand(word: "locked", takes: .onOff) { cli, arguments in
                cli.whenConnected("locked") { cli.sendRequest(.switches(JSONObject([("locked", .bool(arguments[0] == "on"))]))) }
            },
            StdinCommand(word: "login", takes: .one("USERID")) { cli, arguments in
                cli.whenConnected("login") { cli.sendRequest(.login(userID: arguments[0])) }
            },
            StdinCommand(word: "logout", takes: .none) { cli, _ in cli.whenConnected("logout") { cli.sendRequest(.logout) } },
            StdinCommand(word: "uninstall", takes: .none) { cli, _ in
                cli.whenConnected("uninstall") {
                    cli.installAfterUninstall = false
                    cli.sendRequest(.uninstall(bundleID: cli.app.bundleID))
                }
            },
            StdinCommand(word: "reinstall", takes: .none) { cli, _ in
                cli.whenConnected("reinstall") {
                    if cli.device.apps.contains(where: { $0.bundleID == cli.app.bundleID }) || cli.device.tokens[cli.app.bundleID] != nil {
                        // Delete the app first, so the install is a reinstall (new tokens).
                        cli.installAfterUninstall = true
                        cli.sendRequest(.uninstall(bundleID: cli.app.bundleID))
                    } else {
                        cli.sendRequest(.install(cli.app))
                    }
                }
            },
            StdinCommand(word: "rotate", takes: .none) { cli, _ in
                cli.whenConnected("rotate") { cli.sendRequest(.rotate(bundleID: cli.app.bundleID)) }
            },
            StdinCommand(word: "erase", takes: .none) { cli, _ in
                cli.whenConnected("erase") {
                    cli.reinstallAfterErase = true
                    cli.sendRequest(.erase)
                }
            },
            StdinCommand(word: "restore", takes: .one("FROMDEVICEID")) { cli, arguments in
                cli.whenConnected("restore") { cli.sendRequest(.restore(fromDeviceID: arguments[0])) }
            },
            StdinCommand(word: "offline", takes: .none) { cli, _ in
                if case .offline = cli.link { return cli.badCommand("already offline; use online to reconnect") }
                cli.device.disconnect()
                cli.link = .offline
                cli.outageAnnounced = false
                cli.reinstallAfterErase = false
                cli.installAfterUninstall = false
                cli.emit(["event": "offline"])
            },
            StdinCommand(word: "online", takes: .none) { cli, _ in
                switch cli.link {
                case .connected:
                    cli.badCommand("already online")
                case .offline, .retrying:
                    cli.backoffMilliseconds = 100
                    cli.announceOnline = true
                    cli.attemptConnect(first: false)
                }
            },
            StdinCommand(word: "activities", takes: .none) { cli, _ in cli.whenConnected("activities") { cli.sendRequest(.activities) } },
            StdinCommand(word: "start-activity", takes: .optional("TYPE")) { cli, arguments in
                guard let type = arguments.first ?? cli.app.liveActivityTypes?.first else {
                    return cli.badCommand("the app declares no Live Activity types (--live-activity-types); use start-activity TYPE")
                }
                cli.whenConnected("start-activity") {
                    cli.sendRequest(
                        .startActivity(
                            bundleID: cli.app.bundleID, attributesType: type, attributes: .object(JSONObject()),
                            contentState: .object(JSONObject())))
                }
            },
            StdinCommand(word: "end-activity", takes: .one("ACTIVITYID")) { cli, arguments in
                cli.whenConnected("end-activity") { cli.sendRequest(.endActivity(activityID: arguments[0])) }
            },
            StdinCommand(word: "dismiss-activity", takes: .one("ACTIVITYID")) { cli, arguments in
                cli.whenConnected("dismiss-activity") { cli.sendRequest(.dismissActivity(activityID: arguments[0])) }
            },
            StdinCommand(word: "ping", takes: .none) { cli, _ in cli.whenConnected("ping") { cli.sendRequest(.ping) } },
            StdinCommand(word: "quit", takes: .none) { cli, _ in
                cli.device.disconnect()
                exit(0)
            },
        ]

    /// One line of stdin: a raw frame (`{…}`), or a command of the table with its arguments.
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
            whenConnected("send a raw frame") {
                sending { () throws(DeviceClientError) in try device.sendRaw(Array(line.utf8) + [UInt8(ascii: "\n")]) }
            }
            return
        }
        let words = line.split(whereSeparator: \.isWhitespace).map(String.init)
        let name = words[0]
        let arguments = Array(words.dropFirst())
        guard let command = Self.stdinCommands.first(where: { $0.word == name }) else {
            let known = Self.stdinCommands.map(\.word).joined(separator: ", ")
            return badCommand("unknown command '\(name)'; commands: \(known), or a raw {…} frame")
        }
        switch command.takes {
        case .none where !arguments.isEmpty:
            return badCommand("'\(name)' takes no arguments")
        case .one(let what) where arguments.count != 1:
            return badCommand("'\(name)' takes one argument: \(name) \(what)")
        case .onOff where arguments.count != 1:
            return badCommand("'\(name)' takes one argument: \(name) on|off")
        case .onOff where arguments[0] != "on" && arguments[0] != "off":
            return badCommand("'\(name)' takes on or off, not '\(arguments[0])'")
        case .optional(let what) where arguments.count > 1:
            return badCommand("'\(name)' takes at most one argument: \(name) [\(what)]")
        case .atLeastOne(let what) where arguments.isEmpty:
            return badCommand("'\(name)' takes at least one argument: \(name) \(what)")
        default:
            command.run(self, arguments)
        }
    }

    func badCommand(_ message: String) {
        emit(.object(errorEvent(code: "bad_command", message: message)))
    }

    /// Runs `body` while the device is connected; otherwise says why `what` cannot be done.
    func whenConnected(_ what: String, _ body: () -> Void) {
        guard device.isConnected else {
            let state: String
            switch link {
            case .offline: state = "the device is offline (use online)"
            default: state = "the device is not connected (reconnecting)"
            }
            emit(.object(errorEvent(code: "not_connected", message: "cannot \(what): \(state)")))
            return
        }
        body()
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
            emit([
                "event": "appUpdated", "bundleId": .string(app.bundleID), "authorization": .string(app.authorization.rawValue),
                "appState": .string(app.appState.rawValue), "backgroundMode": .bool(app.backgroundMode), "offline": true,
            ])
            return
        }
        sendRequest(.app(bundleID: app.bundleID, appState: appState, authorization: authorization, backgroundMode: backgroundMode))
    }
}
