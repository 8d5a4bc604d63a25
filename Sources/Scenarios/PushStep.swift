import APNsCore
import AdminClient
import Foundation
import ProviderClient

/// `push`: one request over HTTP/2 with our own provider client, signed with the scenario's
/// provider key, to the device's current token; and the clock steps.
extension StepRunner {
    func push() throws(StepFailure) -> String? {
        let provider = context.target.provider
        var token = fields.string("token")
        var bundle = fields.string("bundleId") ?? context.scenario.bundleID
        var environment = fields.string("environment") ?? "sandbox"
        if token == nil {
            let alias = try alias
            let ref = try context.device(alias)
            bundle = fields.string("bundleId") ?? ref.bundleID
            guard let app = try context.app(alias, bundleID: bundle), let current = app.token else {
                throw StepFailure("\(bundle) is not installed on \(alias), so it has no token (push to a saved one with \"token\")")
            }
            token = current
            environment = fields.string("environment") ?? app.environment.rawValue
        }
        guard let token else { throw StepFailure("no token to push to") }
        guard let address = environment == "production" ? provider.production : provider.sandbox else {
            throw StepFailure("no \(environment) endpoint is known: pass --\(environment) HOST:PORT")
        }
        guard let teamID = provider.teamID, let keyID = provider.keyID, let keyPath = provider.keyPath else {
            throw StepFailure("no provider key: pass --key TEAMID:KEYID:PATH to push to an emulator the runner did not start")
        }
        let key: ProviderSigningKey
        do { key = try ProviderSigningKey(spec: "\(teamID):\(keyID):\(keyPath)") } catch { throw StepFailure(error.description) }
        // Signed at the emulator's time: after advanceClock a token from the real clock is
        // more than an hour old to the emulator (403 ExpiredProviderToken).
        let issuedAt = try context.emulatorNow() / 1000
        let jwt: String
        do { jwt = try key.token(issuedAt: issuedAt) } catch { throw StepFailure("cannot sign the provider token: \(error)") }

        var request = APNsPush(token: token, topic: fields.string("topic") ?? bundle, payload: payloadBytes(), providerToken: jwt)
        request.pushType = fields.string("pushType")
        request.priority = fields.string("priority")
        request.expiration = fields.string("expiration")
        request.collapseID = fields.string("collapseId")
        request.apnsID = fields.string("apnsId")
        // Apple's host name picks the environment on every kind of emulator listener.
        request.authority = environment == "production" ? "api.push.apple.com" : "api.sandbox.push.apple.com"

        var options = HTTP2ClientConnection.Options(address: address)
        options.caPath = provider.caPath
        let result: APNsResult
        do {
            let connection = try HTTP2ClientConnection(options)
            defer { connection.close() }
            result = APNsResult(try connection.send(request.request))
        } catch {
            throw StepFailure("push to \(address): \(error.description)")
        }
        context.lastPush = [
            "apnsId": result.apnsID ?? "", "uniqueId": result.uniqueID ?? "", "status": String(result.status),
            "reason": result.reason ?? "", "token": token,
        ]
        let answer = "\(result.status)" + (result.reason.map { " \($0)" } ?? "")
        let expect = fields.nested("expect")
        let status = try StatusPattern(expect?["status"] ?? .int(200))
        var wrong: [String] = []
        if !status.matches(result.status) { wrong.append("status \(status)") }
        if let expect, expect.has("reason"), expect.string("reason") != result.reason {
            wrong.append("reason \(expect.string("reason") ?? "none")")
        }
        guard wrong.isEmpty else {
            throw StepFailure(
                "APNs answered \(answer)", expected: wrong.joined(separator: ", "),
                seen: "status \(answer)" + (result.apnsID.map { ", apns-id \($0)" } ?? ""))
        }
        return "→ \(answer), apns-id \(short(result.apnsID))"
    }

    /// The payload: a JSON value as JSON text, a string as is, by default a small alert.
    private func payloadBytes() -> [UInt8] {
        switch fields["payload"] {
        case .string(let text)?: return Array(text.utf8)
        case let value?: return value.serializedBytes()
        case nil:
            let alert: JSONValue = ["aps": ["alert": .string("Hello from scenario \(context.scenario.name)")]]
            return alert.serializedBytes()
        }
    }

    func advanceClock() throws(StepFailure) -> String? {
        // checkValues has bounded it (0 to 400 days).
        guard let seconds = try fields.double("seconds") else { throw StepFailure("\"seconds\" is required") }
        let reading = try admin("moving the emulator's clock") { () throws(EmulatorAdminError) in try api.advanceClock(seconds: seconds) }
        return "emulator time now \(reading.offsetMs / 1000) s ahead"
    }

    func sleep() throws(StepFailure) -> String? {
        // checkValues has bounded it (0 to 1 hour).
        guard let ms = try fields.int("ms") else { throw StepFailure("\"ms\" is required") }
        Thread.sleep(forTimeInterval: Double(ms) / 1000)
        return nil
    }
}
