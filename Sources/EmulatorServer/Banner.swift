// Banner: the text `serve` prints at start. Reads the emulator and its configuration; no I/O.
// Imports APNsCore, Networking and Foundation.
import APNsCore
import Networking
import Foundation

/// The start-up banner: where everything is, what to trust, and a push to paste.
public enum Banner {
    public static func text(for emulator: Emulator) -> String {
        let a = emulator.addresses
        let c = emulator.configuration
        var lines = ["apns-emulator \(Emulator.version): local APNs emulator. TEST ONLY: never point real devices or keys you care about at it."]
        // At least one space after the label, also for one of 24 characters or more.
        func row(_ label: String, _ value: String) {
            lines.append("  " + label.padding(toLength: max(24, label.count + 1), withPad: " ", startingAt: 0) + value)
        }
        for x in a.listen {
            row(
                "provider, Apple-style",
                "https://\(x)  (environment by host name: api.push.apple.com = production, api.sandbox.push.apple.com = sandbox)")
        }
        if let x = a.sandbox { row("provider, sandbox", "https://\(x)  (TLS 1.2+, ALPN h2 or prior knowledge)") }
        if let x = a.production { row("provider, production", "https://\(x)") }
        if let x = a.h2cSandbox { row("provider, sandbox h2c", "http://\(x)  (cleartext HTTP/2, prior knowledge)") }
        if let x = a.h2cProduction { row("provider, production h2c", "http://\(x)") }
        if let x = a.channelSandbox { row("channels, sandbox", "https://\(x)  (as api-manage-broadcast.sandbox.push.apple.com:2195)") }
        if let x = a.channelProduction { row("channels, production", "https://\(x)  (as api-manage-broadcast.push.apple.com:2196)") }
        if let x = a.admin {
            let exposed = c.listeners.admin.map { !AdminOptions.isLoopback($0.host) } ?? false
            let access = c.admin.token != nil ? "; token required" : exposed ? "; no token, reachable from the network" : ""
            row("admin API", "http://\(x)/api/v1  (health: /livez, /readyz\(access))")
        }
        if let x = a.device {
            row("device socket", "\(x)  (\(c.listeners.deviceTLS ? "TLS" : "plain TCP"), docs/device-protocol.md)")
        }
        if let ca = a.caFile {
            row("trust this CA", ca)
        } else if c.listeners.hasTLSProviderListener {
            row("TLS certificate", c.tls.source.certificatePath)
        }
        let keys = emulator.state.readWorld { world in
            world.credentials.keys.values.sorted { $0.keyID < $1.keyID }.map { "\($0.teamID):\($0.keyID)" }
        }
        row("provider keys", keys.isEmpty ? "none (add --auth-key TEAMID:KEYID:PATH)" : keys.joined(separator: ", "))
        if case .random(let seed) = c.delivery.storedSurvivor {
            // Printed so a run with plain `random` can be repeated with random:SEED.
            row("stored survivor", "random, seed \(seed) (--stored-survivor random:\(seed) repeats the choices)")
        }
        if let demo = emulator.demo {
            var text =
                "team \(Emulator.demoTeamID), key \(Emulator.demoKeyID) (\(demo.keyPath)), app \(Emulator.demoBundleID), device \(Emulator.demoDeviceID)"
                + " (sandbox token \(demo.token))"
            if let owner = demoAppOwner(emulator) {
                text += "; but \(Emulator.demoBundleID) belongs to team \(owner) (configured), so the demo key is refused for it (TopicDisallowed)"
            }
            row("demo", text)
        }

        lines.append("")
        lines += examples(for: emulator)
        return lines.joined(separator: "\n")
    }

    /// What the examples push: with which key, to which topic and token, through which door.
    struct Example {
        var keySpec: String
        var topic: String
        var environment: APNsEnvironment
        /// A real token, or nil when a device has to be created first.
        var token: String?
        /// Set when no usable key is configured: the commands show placeholders.
        var placeholder = false
        /// Why, when a key can sign but its team owns no app: the line names what is missing.
        var missingApp: (teamID: String, keyID: String)?
    }

    /// Commands that work as printed: the demo setup, else the configured key and an app its
    /// team owns (creating a device first when none has it), else placeholders saying so.
    static func examples(for emulator: Emulator) -> [String] {
        let a = reachable(emulator.addresses)
        let exe = executablePath()
        let example = chooseExample(emulator)
        // Where to send: the listener of the example's environment, else an Apple-style one
        // reached by Apple's host name (curl --resolve), else cleartext.
        let appleHost = example.environment.appleHost
        let direct = example.environment == .production ? a.production : a.sandbox
        var curlFlags: [String] = []
        let endpoint: String
        var sendHost: String?
        if let direct {
            endpoint = "https://\(direct)"
            sendHost = direct.description
        } else if let listen = a.listen.first {
            endpoint = "https://\(appleHost):\(listen.port)"
            curlFlags.append("--resolve \(appleHost):\(listen.port):\(listen.host)")
            sendHost = listen.description
        } else if let x = example.environment == .production ? a.h2cProduction : a.h2cSandbox {
            endpoint = "http://\(x)"
        } else {
            endpoint = "https://HOST:PORT"
        }
        let cleartext = endpoint.hasPrefix("http://")
        curlFlags.insert(cleartext ? "--http2-prior-knowledge" : "--http2", at: 0)
        if !cleartext { curlFlags.append("--cacert \(a.caFile ?? "CA.pem")") }

        // The token itself is a secret and stays out of the banner (and container logs).
        let adminAuth = emulator.configuration.admin.token == nil ? "" : " -H \"authorization: Bearer $APNS_EMULATOR_ADMIN_TOKEN\""
        var lines: [String] = []
        if let missing = example.missingApp {
            let configured = emulator.configuration.apps.filter { $0.teamID == missing.teamID }.map(\.bundleID)
            lines.append(
                configured.isEmpty
                    ? "Key \(missing.keyID) can sign, but its team \(missing.teamID) owns no app (pushes get 400 TopicDisallowed); add one with --app \(missing.teamID):BUNDLEID, then:"
                    : "Key \(missing.keyID) can sign, but the app configured for its team \(missing.teamID) (\(configured.joined(separator: ", "))) belongs to another team in the kept state (see the warning above); then:"
            )
        } else if example.placeholder {
            lines.append(
                "No configured key can sign a push (a .p8 private key is needed); with your own, --auth-key TEAMID:KEYID:AuthKey.p8 --app TEAMID:BUNDLEID:"
            )
        }
        let token: String
        if let known = example.token {
            token = known
        } else if let admin = a.admin {
            token = "$TOKEN"
            lines.append("Create a device with the app (its token goes into $TOKEN):")
            lines.append(
                "  TOKEN=$(curl -s\(adminAuth) -H 'content-type: application/json' -X POST -d '{\"bundleId\":\"\(example.topic)\",\"environment\":\"\(example.environment.rawValue)\"}' \\"
            )
            lines.append("    http://\(admin)/api/v1/devices | sed -n 's/.*\"token\": *\"\\([0-9a-f]*\\)\".*/\\1/p')")
        } else {
            token = "DEVICE_TOKEN"
        }
        lines.append("Send a push with curl:")
        lines.append("  curl -sS \(curlFlags.joined(separator: " ")) \\")
        lines.append("    -H \"authorization: bearer $(\(exe) jwt --key \(example.keySpec))\" \\")
        lines.append("    -H 'apns-topic: \(example.topic)' -H 'apns-push-type: alert' \\")
        lines.append("    -d '{\"aps\":{\"alert\":\"Hello\"}}' -D - \(endpoint)/3/device/\(token)")
        if let sendHost {
            lines.append("or with the built-in provider:")
            let caOption = a.caFile.map { "--ca \($0) " } ?? ""
            let environmentFlag = example.environment == .production ? "--production " : ""
            lines.append(
                "  \(exe) send \(environmentFlag)--host \(sendHost) \(caOption)--key \(example.keySpec) --topic \(example.topic) --token \(token) '{\"aps\":{\"alert\":\"Hello\"}}'"
            )
        }
        if let x = a.admin {
            lines.append("and see what arrived:")
            lines.append("  curl -s\(adminAuth) \"http://\(x)/api/v1/notifications?token=\(token)\"")
        }
        return lines
    }

    /// The team that owns the demo app when it is not the demo team (`--app` gave it to another).
    static func demoAppOwner(_ emulator: Emulator) -> String? {
        let owner = emulator.state.readWorld { $0.credentials.owner(ofBundle: Emulator.demoBundleID)?.teamID }
        return owner == Emulator.demoTeamID ? nil : owner
    }

    static func chooseExample(_ emulator: Emulator) -> Example {
        // The demo key's example only while its team owns the app; else a configured key's.
        if let demo = emulator.demo, demoAppOwner(emulator) == nil {
            return Example(
                keySpec: "\(Emulator.demoTeamID):\(Emulator.demoKeyID):\(demo.keyPath)", topic: Emulator.demoBundleID,
                environment: .sandbox, token: demo.token)
        }
        let c = emulator.configuration
        // A key that can sign (a .p8, not a public key) and an app its team owns.
        var signerWithoutApp: ServeConfiguration.AuthKeySpec?
        let choice = emulator.state.readWorld { world -> Example? in
            for spec in c.authKeys {
                guard let text = try? String(contentsOfFile: spec.path, encoding: .utf8), text.contains("PRIVATE KEY") else { continue }
                // A key kept by the state (added at run time, or the shared one) in its place
                // signs nothing this file can (its warning said so above).
                guard let inUse = world.credentials.keys[spec.keyID], inUse.teamID == spec.teamID, !inUse.addedAtRunTime else { continue }
                let bundles = world.credentials.apps.filter { $0.value.teamID == spec.teamID }.keys.sorted()
                guard let bundle = bundles.first(where: { spec.topics?.contains($0) ?? true }) else {
                    if bundles.isEmpty, signerWithoutApp == nil { signerWithoutApp = spec }
                    continue
                }
                let environment = spec.environment ?? .sandbox
                let token = world.registry.tokens.values
                    .filter { $0.bundleID == bundle && $0.environment == environment && $0.kind == .app && $0.state == .active }
                    .map(\.token).sorted().first
                return Example(
                    keySpec: "\(spec.teamID):\(spec.keyID):\(spec.path)", topic: bundle, environment: environment,
                    token: token)
            }
            return nil
        }
        if let choice { return choice }
        let bundle = emulator.state.readWorld { $0.credentials.apps.keys.sorted().first } ?? "com.example.app"
        if let signer = signerWithoutApp {
            return Example(
                keySpec: "\(signer.teamID):\(signer.keyID):\(signer.path)", topic: "BUNDLEID", environment: signer.environment ?? .sandbox,
                token: nil, placeholder: true, missingApp: (signer.teamID, signer.keyID))
        }
        return Example(
            keySpec: "TEAMID:KEYID:AuthKey_KEYID.p8", topic: bundle, environment: .sandbox, token: nil,
            placeholder: true)
    }

    /// The addresses as a client on this machine reaches them: a listener on every interface
    /// (0.0.0.0, as in a container) is shown as loopback, so the printed commands work here.
    static func reachable(_ addresses: BoundAddresses) -> BoundAddresses {
        func local(_ address: HostPort?) -> HostPort? {
            guard var address else { return nil }
            switch address.host {
            case "0.0.0.0", "", "*": address.host = "127.0.0.1"
            case "::": address.host = "::1"
            default: break
            }
            return address
        }
        var a = addresses
        a.listen = addresses.listen.compactMap { local($0) }
        a.sandbox = local(a.sandbox)
        a.production = local(a.production)
        a.h2cSandbox = local(a.h2cSandbox)
        a.h2cProduction = local(a.h2cProduction)
        a.channelSandbox = local(a.channelSandbox)
        a.channelProduction = local(a.channelProduction)
        a.admin = local(a.admin)
        a.device = local(a.device)
        return a
    }

    /// The binary as it was invoked, so the examples run as printed.
    static func executablePath() -> String { CommandLine.arguments.first ?? "apns-emulator" }
}
