import APNsCore
import AdminClient
import Foundation
import Networking
import ProviderClient

/// What `load` learns from the emulator's admin API before it sends anything: where to
/// connect, which CA and key to use, and the device tokens. Failures are `LoadSetupError`:
/// `usage` ones exit 2, the others 1.
struct LoadSetupError: Error, CustomStringConvertible {
    let description: String
    let isUsage: Bool
    init(_ description: String, usage: Bool = false) {
        self.description = description
        isUsage = usage
    }
}

struct LoadSetup {
    let api: EmulatorAdminClient
    let admin: HostPort
    let bundleID: String
    let environment: PushEnvironment
    /// Notes for standard error (e.g. a fallback taken).
    var notes: [String] = []

    init(admin: HostPort, token: String?, bundleID: String, environment: PushEnvironment) {
        api = EmulatorAdminClient(address: admin, token: token)
        self.admin = admin
        self.bundleID = bundleID
        self.environment = environment
    }

    /// Apple's host name for the environment: sent as `:authority`, it picks the environment on
    /// any emulator listener, the `--listen` ones that serve both included.
    var authority: String { environment == .production ? "api.push.apple.com" : "api.sandbox.push.apple.com" }

    private func adminCall(_ method: String, _ path: String, body: JSONValue? = nil) throws(LoadSetupError) -> JSONValue {
        do { return try api.request(method, path, body: body) } catch {
            throw LoadSetupError(AdminListenerAnswer.problem(admin, request: "\(method) \(path)", error))
        }
    }

    /// `GET /api/v1/info`: the addresses the emulator bound and its CA file.
    func info() throws(LoadSetupError) -> JSONValue {
        do { return try api.info()["addresses"] ?? .null } catch {
            throw LoadSetupError(AdminListenerAnswer.problem(admin, request: "GET /api/v1/info", error))
        }
    }

    /// The provider listener for the environment: its own listener, else a `--listen` one,
    /// else the other environment's (`:authority` still picks ours). `h2c` asks for cleartext.
    func providerAddress(from addresses: JSONValue, h2c: Bool) throws(LoadSetupError) -> HostPort {
        let names =
            h2c
            ? (environment == .sandbox ? ["h2cSandbox", "h2cProduction"] : ["h2cProduction", "h2cSandbox"])
            : (environment == .sandbox ? ["sandbox", "listen", "production"] : ["production", "listen", "sandbox"])
        for name in names {
            let value = addresses[name]
            guard let text = value?.stringValue ?? value?.arrayValue?.first?.stringValue,
                var address = try? HostPort(parsing: text)
            else { continue }
            // A listener on every interface is reached on loopback.
            if address.host == "0.0.0.0" { address.host = "127.0.0.1" }
            if address.host == "::" { address.host = "::1" }
            return address
        }
        let kind = h2c ? "cleartext (h2c) provider listener; start it with --h2c-sandbox-listen or drop --h2c" : "TLS provider listener"
        throw LoadSetupError("the emulator at \(admin) has no \(kind); or give --provider HOST:PORT")
    }

    /// The key to sign with when `--key` is not given: one the emulator lists for the team
    /// that owns the bundle whose private `.p8` is readable from here (the demo key, when the
    /// emulator runs with `--demo on` in the same directory).
    func discoverKey() throws(LoadSetupError) -> (key: ProviderSigningKey, spec: String) {
        let apps = try adminCall("GET", "/api/v1/apps")["apps"]?.arrayValue ?? []
        guard let team = apps.first(where: { $0["bundleId"]?.stringValue == bundleID })?["teamId"]?.stringValue else {
            throw LoadSetupError(
                "no team owns \(bundleID) in the emulator at \(admin); give --bundle of an app it knows, or --key TEAMID:KEYID:PATH", usage: true)
        }
        let keys = try adminCall("GET", "/api/v1/keys")["keys"]?.arrayValue ?? []
        for key in keys where key["teamId"]?.stringValue == team {
            let environmentAllowed = key["environment"]?.stringValue.map { $0 == environment.rawValue } ?? true
            let topicAllowed = key["topics"]?.arrayValue.map { $0.contains(.string(bundleID)) } ?? true
            guard environmentAllowed, topicAllowed, let keyID = key["keyId"]?.stringValue, let path = key["source"]?.stringValue,
                let pem = try? String(contentsOfFile: path, encoding: .utf8), let privateKey = try? ES256PrivateKey(pem: pem)
            else { continue }
            return (ProviderSigningKey(teamID: team, keyID: keyID, privateKey: privateKey), "\(team):\(keyID):\(path)")
        }
        throw LoadSetupError(
            "no --key given, and no key of team \(team) that the emulator lists has a private .p8 readable from here; give --key TEAMID:KEYID:PATH",
            usage: true)
    }

    /// Active app tokens the emulator already has for the bundle and environment, from every
    /// page of its token list.
    func existingTokens() throws(LoadSetupError) -> [String] {
        var usable: [String] = []
        var cursor: String?
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        repeat {
            let page =
                "/api/v1/tokens?limit=10000" + (cursor.map { "&cursor=" + ($0.addingPercentEncoding(withAllowedCharacters: allowed) ?? $0) } ?? "")
            let reply = try adminCall("GET", page)
            for token in reply["tokens"]?.arrayValue ?? []
            where token["bundleId"]?.stringValue == bundleID && token["environment"]?.stringValue == environment.rawValue
                && token["state"]?.stringValue == "active" && (token["kind"]?.stringValue ?? "app") == "app"
            {
                if let text = token["token"]?.stringValue { usable.append(text) }
            }
            cursor = reply["nextCursor"]?.stringValue
        } while cursor != nil
        return usable
    }

    /// Creates `count` virtual devices with the app in one call, or one call each on an
    /// emulator without the batch endpoint.
    mutating func createDevices(_ count: Int) throws(LoadSetupError) -> [String] {
        let body: JSONValue = ["bundleId": .string(bundleID), "environment": .string(environment.rawValue), "count": .int(Int64(count))]
        do {
            let created = try api.request("POST", "/api/v1/devices/batch", body: body)
            return (created["devices"]?.arrayValue ?? []).compactMap { $0["token"]?.stringValue }
        } catch  where error.status == 404 || error.status == 405 {
            // Before the batch endpoint, POST /api/v1/devices/batch matched no route (404) or
            // the device route `/api/v1/devices/{deviceId}`, which takes no POST (405).
            notes.append("the emulator has no POST /api/v1/devices/batch; creating \(count) devices one call each")
        } catch {
            throw LoadSetupError(AdminListenerAnswer.problem(admin, request: "POST /api/v1/devices/batch", error))
        }
        let one: JSONValue = ["bundleId": .string(bundleID), "environment": .string(environment.rawValue)]
        var tokens: [String] = []
        tokens.reserveCapacity(count)
        for _ in 0..<count {
            guard let token = try adminCall("POST", "/api/v1/devices", body: one)["token"]?.stringValue else {
                throw LoadSetupError("--admin \(admin): POST /api/v1/devices answered without a token")
            }
            tokens.append(token)
        }
        return tokens
    }
}
