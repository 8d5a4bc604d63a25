import Foundation

/// The start-up banner: where everything is, what to trust, and a push to paste.
public enum Banner {
    public static func text(for emulator: Emulator) -> String {
        let a = emulator.addresses
        let c = emulator.configuration
        var lines = ["apns-emulator \(Emulator.version): local APNs emulator. TEST ONLY: never point real devices or keys you care about at it."]
        func row(_ label: String, _ value: String) { lines.append("  " + label.padding(toLength: 24, withPad: " ", startingAt: 0) + value) }
        for x in a.listen {
            row("provider, Apple-style", "https://\(x)  (environment by host name: api.push.apple.com = production, api.sandbox.push.apple.com = sandbox)")
        }
        if let x = a.sandbox { row("provider, sandbox", "https://\(x)  (TLS 1.2+, ALPN h2 or prior knowledge)") }
        if let x = a.production { row("provider, production", "https://\(x)") }
        if let x = a.h2cSandbox { row("provider, sandbox h2c", "http://\(x)  (cleartext HTTP/2, prior knowledge)") }
        if let x = a.h2cProduction { row("provider, production h2c", "http://\(x)") }
        if let x = a.admin { row("admin API", "http://\(x)/api/v1  (health: /livez, /readyz)") }
        if let x = a.device {
            row("device socket", "\(x)  (\(c.deviceTLS ? "TLS" : "plain TCP"), docs/device-protocol.md)")
        }
        if let ca = a.caFile { row("trust this CA", ca) } else if !c.listen.isEmpty || c.sandboxListen != nil || c.productionListen != nil {
            row("TLS certificate", c.tlsCertificatePath)
        }
        let keys = emulator.state.withWorld { world in
            world.credentials.keys.values.sorted { $0.keyID < $1.keyID }.map { "\($0.teamID):\($0.keyID)" }
        }
        row("provider keys", keys.isEmpty ? "none (add --auth-key TEAMID:KEYID:PATH)" : keys.joined(separator: ", "))

        let exe = executablePath()
        let endpoint: String
        if let x = a.sandbox { endpoint = "https://\(x)" }
        else if let x = a.production { endpoint = "https://\(x)" }
        else if let x = a.h2cSandbox { endpoint = "http://\(x)" }
        else if let x = a.h2cProduction { endpoint = "http://\(x)" }
        else { endpoint = "" }
        let keySpec: String
        let token: String
        let topic: String
        if let demo = emulator.demo {
            row("demo", "team \(Emulator.demoTeamID), key \(Emulator.demoKeyID) (\(demo.keyPath)), app \(Emulator.demoBundleID), device \(Emulator.demoDeviceID)")
            keySpec = "\(Emulator.demoTeamID):\(Emulator.demoKeyID):\(demo.keyPath)"
            token = demo.token
            topic = Emulator.demoBundleID
        } else {
            keySpec = "TEAMID:KEYID:AuthKey_KEYID.p8"
            token = "DEVICE_TOKEN"
            topic = "com.example.app"
        }
        let caFlag = a.caFile.map { "--cacert \($0) " } ?? (endpoint.hasPrefix("http://") ? "" : "--cacert CA.pem ")
        let curlFlag = endpoint.hasPrefix("http://") ? "--http2-prior-knowledge" : "--http2"
        lines.append("")
        lines.append("Send a push with curl:")
        lines.append("  curl -sS \(curlFlag) \(caFlag)\\")
        lines.append("    -H \"authorization: bearer $(\(exe) jwt --key \(keySpec))\" \\")
        lines.append("    -H 'apns-topic: \(topic)' -H 'apns-push-type: alert' \\")
        lines.append("    -d '{\"aps\":{\"alert\":\"Hello\"}}' -D - \(endpoint)/3/device/\(token)")
        lines.append("or with the built-in provider:")
        let hostFlag = a.sandbox.map { "--host \($0) " } ?? ""
        let caOption = a.caFile.map { "--ca \($0) " } ?? ""
        lines.append("  \(exe) send \(hostFlag)\(caOption)--key \(keySpec) --topic \(topic) --token \(token) '{\"aps\":{\"alert\":\"Hello\"}}'")
        if let x = a.admin {
            lines.append("and see what arrived:")
            lines.append("  curl -s 'http://\(x)/api/v1/notifications?token=\(token)'")
        }
        return lines.joined(separator: "\n")
    }

    /// The binary as it was invoked, so the examples run as printed.
    static func executablePath() -> String { CommandLine.arguments.first ?? "apns-emulator" }
}
