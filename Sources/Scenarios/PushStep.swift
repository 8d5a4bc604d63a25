import APNsCore
import AdminClient
import Foundation
import HTTP2
import ProviderClient

/// `push`: one request over HTTP/2 with our own provider client, signed with the scenario's
/// provider key, to the device's current token (or a Live Activity token); the provider
/// calls the channel steps share; and the clock steps.
extension StepRunner {
    func push() throws(StepFailure) -> String? {
        let target = try pushTarget()
        let bundle = target.bundleID
        let environment = fields.string("environment") ?? target.environment
        guard let address = environment == "production" ? context.target.provider.production : context.target.provider.sandbox else {
            throw StepFailure("no \(environment) endpoint is known: pass --\(environment) HOST:PORT")
        }
        let nowMs = try context.emulatorNow()
        let jwt = try providerToken()
        // A Live Activity token takes liveactivity pushes, on the app's liveactivity topic.
        let pushType = fields.string("pushType") ?? (target.isLiveActivity ? "liveactivity" : nil)
        let topic = fields.string("topic") ?? (pushType == "liveactivity" ? bundle + ".push-type.liveactivity" : bundle)
        var request = APNsPush(token: target.token, topic: topic, payload: try payloadBytes(nowMs: nowMs), providerToken: jwt)
        request.pushType = pushType
        request.priority = fields.string("priority")
        request.expiration = try fields.int("expiresIn").map { String(nowMs / 1000 + Int64($0)) } ?? fields.string("expiration")
        request.collapseID = fields.string("collapseId")
        request.apnsID = fields.string("apnsId")
        // Apple's host name picks the environment on every kind of emulator listener.
        request.authority = environment == "production" ? "api.push.apple.com" : "api.sandbox.push.apple.com"

        // What was on the device before, to tell the activity this push starts from the others.
        var before: Set<String> = []
        if let deviceID = target.deviceID, fields.string("startsActivity") != nil {
            before = Set(try activities(on: deviceID).map(\.activityID))
        }
        let result = APNsResult(try send(request.request, to: address, what: "push"))
        context.lastPush = [
            "apnsId": result.apnsID ?? "", "uniqueId": result.uniqueID ?? "", "status": String(result.status),
            "reason": result.reason ?? "", "token": target.token,
        ]
        let answer = try checkAnswer(status: result.status, reason: result.reason, defaultStatus: 200, id: result.apnsID.map { "apns-id \($0)" })
        if let name = fields.string("startsActivity"), let alias = target.deviceAlias, let deviceID = target.deviceID {
            let started = try startedActivity(on: deviceID, alias: alias, before: before, apnsID: result.apnsID)
            context.activities[name] = RunContext.ActivityRef(deviceAlias: alias, deviceID: deviceID, activityID: started.activityID)
            return "→ \(answer), started activity \(name) (\(short(started.activityID)))"
        }
        return "→ \(answer), apns-id \(short(result.apnsID))"
    }

    /// Where a push goes: a token as given, a named activity's update token, a device's
    /// push-to-start token, or the device's app token.
    private struct PushTarget {
        var token: String
        var bundleID: String
        var environment: String
        var isLiveActivity: Bool
        var deviceAlias: String?
        var deviceID: String?
    }

    private func pushTarget() throws(StepFailure) -> PushTarget {
        let scenarioBundle = context.scenario.bundleID
        if let token = fields.string("token") {
            return PushTarget(
                token: token, bundleID: fields.string("bundleId") ?? scenarioBundle, environment: "sandbox", isLiveActivity: false)
        }
        if let name = fields.string("activity") {
            let ref = try context.activity(name)
            let info = try context.activityInfo(name)
            guard let token = info.pushToken else {
                throw StepFailure("activity \(name) has no update token: it takes no token pushes (started with a channel or none), or it has ended")
            }
            let environment = try context.app(ref.deviceAlias, bundleID: info.bundleID)?.environment.rawValue ?? "sandbox"
            return PushTarget(
                token: token, bundleID: fields.string("bundleId") ?? info.bundleID, environment: environment, isLiveActivity: true,
                deviceAlias: ref.deviceAlias, deviceID: ref.deviceID)
        }
        let alias = try alias
        let ref = try context.device(alias)
        if let type = fields.string("pushToStart") {
            let (token, owner) = try context.pushToStart(alias, attributesType: type)
            let environment = try context.app(alias, bundleID: owner)?.environment.rawValue ?? ref.environment
            return PushTarget(
                token: token, bundleID: fields.string("bundleId") ?? owner, environment: environment, isLiveActivity: true,
                deviceAlias: alias, deviceID: ref.deviceID)
        }
        let bundle = fields.string("bundleId") ?? ref.bundleID
        guard let app = try context.app(alias, bundleID: bundle), let current = app.token else {
            throw StepFailure("\(bundle) is not installed on \(alias), so it has no token (push to a saved one with \"token\")")
        }
        return PushTarget(
            token: current, bundleID: bundle, environment: app.environment.rawValue, isLiveActivity: false, deviceAlias: alias,
            deviceID: ref.deviceID)
    }

    /// The activity a push-to-start push made: new on the device since `before`, of the type
    /// pushed. Virtual devices take the push before APNs answers; the short wait is for
    /// emulators that take longer. When none came, the journal says why.
    private func startedActivity(on deviceID: String, alias: String, before: Set<String>, apnsID: String?) throws(StepFailure) -> ActivityInfo {
        let type = fields.string("pushToStart") ?? ""
        let deadline = Date().addingTimeInterval(2)
        while true {
            let new = try activities(on: deviceID).filter { !before.contains($0.activityID) && $0.attributesType == type }
            if let started = new.last { return started }
            if Date() >= deadline { break }
            Thread.sleep(forTimeInterval: Self.pollInterval)
        }
        let record = try apnsID.flatMap { (id: String) throws(StepFailure) -> PushRecord? in
            try admin("reading the push's record") { () throws(EmulatorAdminError) in try api.notifications(PushFilter(apnsID: id), limit: 1).first }
        }
        throw StepFailure(
            "the push started no \(type) activity on \(alias)", expected: "a new activity named \(fields.string("startsActivity") ?? "?")",
            seen: record.map { "outcome \($0.outcome): \($0.explanation)" } ?? "no record of the push")
    }

    func activities(on deviceID: String) throws(StepFailure) -> [ActivityInfo] {
        try admin("reading the activities of \(deviceID)") { () throws(EmulatorAdminError) in try api.activities(deviceID: deviceID) }
    }

    /// The payload: a JSON value as JSON text, a string as is, by default a small alert; with
    /// `staleIn`/`dismissIn`, its aps dates set from the emulator's time.
    func payloadBytes(nowMs: Int64) throws(StepFailure) -> [UInt8] {
        switch fields["payload"] {
        case .string(let text)?: return Array(text.utf8)
        case var value?:
            let offsets = [("staleIn", "stale-date"), ("dismissIn", "dismissal-date")]
            for (field, key) in offsets {
                guard let seconds = try fields.int(field) else { continue }
                guard case .object(var payload) = value, case .object(var aps)? = payload["aps"] else {
                    throw StepFailure("\"\(field)\" sets aps.\(key), so the payload must be an object with an \"aps\" object")
                }
                aps[key] = .int(nowMs / 1000 + Int64(seconds))
                payload["aps"] = .object(aps)
                value = .object(payload)
            }
            return value.serializedBytes()
        case nil:
            let alert: JSONValue = ["aps": ["alert": .string("Hello from scenario \(context.scenario.name)")]]
            return alert.serializedBytes()
        }
    }

    /// The provider token, signed at the real time: the emulator judges provider tokens on the
    /// real clock, not on its own (which runs ahead after advanceClock), so a token signed at
    /// its time would be in the future by the offset (403 InvalidProviderToken past 5 minutes).
    func providerToken() throws(StepFailure) -> String {
        let provider = context.target.provider
        guard let teamID = provider.teamID, let keyID = provider.keyID, let keyPath = provider.keyPath else {
            throw StepFailure("no provider key: pass --key TEAMID:KEYID:PATH to push to an emulator the runner did not start")
        }
        let key: ProviderSigningKey
        do { key = try ProviderSigningKey(spec: "\(teamID):\(keyID):\(keyPath)") } catch { throw StepFailure(error.description) }
        do { return try key.token(issuedAt: Int64(Date().timeIntervalSince1970)) } catch {
            throw StepFailure("cannot sign the provider token: \(error)")
        }
    }

    /// One request on a connection of its own, trusting the emulator's CA.
    func send(_ request: ClientRequest, to address: HostPort, what: String) throws(StepFailure) -> HTTP2Response {
        var options = HTTP2ClientConnection.Options(address: address)
        options.caPath = context.target.provider.caPath
        do {
            let connection = try HTTP2ClientConnection(options)
            defer { connection.close() }
            return try connection.send(request)
        } catch {
            throw StepFailure("\(what) to \(address): \(error.description)")
        }
    }

    /// The answer against the step's `expect` (`status`, by default `defaultStatus`, and
    /// `reason`); returns it in words for the report.
    func checkAnswer(status: Int, reason: String?, defaultStatus: Int, id: String?) throws(StepFailure) -> String {
        let answer = "\(status)" + (reason.map { " \($0)" } ?? "")
        let expect = fields.nested("expect")
        let pattern = try StatusPattern(expect?["status"] ?? .int(Int64(defaultStatus)))
        var wrong: [String] = []
        if !pattern.matches(status) { wrong.append("status \(pattern)") }
        if let expect, expect.has("reason"), expect.string("reason") != reason {
            wrong.append("reason \(expect.string("reason") ?? "none")")
        }
        guard wrong.isEmpty else {
            throw StepFailure(
                "APNs answered \(answer)", expected: wrong.joined(separator: ", "), seen: "status \(answer)" + (id.map { ", \($0)" } ?? ""))
        }
        return answer
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
