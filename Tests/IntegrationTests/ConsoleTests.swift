import APNsCore
import Foundation
import OpenSSLCrypto
import ProviderClient
import TestSupport
import Testing

/// The Push Notifications Console's view: the token and provider-token validators, and the
/// curl and .apns exports of a recorded push, against the real binary.
@Suite("Console")
struct ConsoleTests {
    // MARK: Device tokens

    /// Each verdict of the token validator, and a real push to the same token answered alike.
    @Test func tokenVerdictsMatchWhatAPushGets() throws {
        let emulator = try EmulatorProcess()
        #expect(try emulator.admin("POST", "/api/v1/apps", body: ["teamId": "TEAM123456", "bundleId": "com.other.app"]).status == 201)
        let device = try emulator.createDevice()
        let gone = try emulator.createDevice()
        #expect(try emulator.admin("DELETE", "/api/v1/devices/\(gone.deviceID)/apps/\(EmulatorProcess.bundleID)").status == 200)
        let stale = try emulator.createDevice()
        #expect(try emulator.admin("PUT", "/api/v1/tokens/\(stale.token)/state", body: ["state": "expired"]).status == 200)
        let unknown = String(repeating: "ab", count: 32)

        let cases: [(token: String, bundle: String, environment: String, verdict: String, status: Int, reason: String?)] = [
            (device.token, EmulatorProcess.bundleID, "sandbox", "valid", 200, nil),
            (device.token.uppercased(), EmulatorProcess.bundleID, "sandbox", "valid", 200, nil),
            (device.token, EmulatorProcess.bundleID, "production", "wrong-environment", 400, "BadDeviceToken"),
            (device.token, "com.other.app", "sandbox", "wrong-topic", 400, "DeviceTokenNotForTopic"),
            (gone.token, EmulatorProcess.bundleID, "sandbox", "unregistered", 410, "Unregistered"),
            (stale.token, EmulatorProcess.bundleID, "sandbox", "expired", 410, "ExpiredToken"),
            (unknown, EmulatorProcess.bundleID, "sandbox", "unknown", 400, "BadDeviceToken"),
            ("abc", EmulatorProcess.bundleID, "sandbox", "malformed", 400, "BadDeviceToken"),
            ("zz" + device.token.dropFirst(2), EmulatorProcess.bundleID, "sandbox", "malformed", 400, "BadDeviceToken"),
        ]
        let connections = ["sandbox": try emulator.connect("sandbox"), "production": try emulator.connect("production")]
        for c in cases {
            let reply = try emulator.admin(
                "POST", "/api/v1/validate/token",
                body: ["token": .string(c.token), "bundleId": .string(c.bundle), "environment": .string(c.environment)])
            #expect(reply.status == 200, "\(reply.raw)")
            #expect(reply.json["verdict"]?.stringValue == c.verdict, "\(c.token) \(c.environment): \(reply.raw)")
            #expect(reply.json["status"]?.intValue == Int64(c.status))
            #expect(reply.json["reason"]?.stringValue == c.reason)
            #expect(reply.json["accepted"]?.boolValue == (c.status == 200))
            #expect(reply.json["explanation"]?.stringValue?.isEmpty == false)

            let pushed = APNsResult(try #require(connections[c.environment]).send(try emulator.push(c.token, topic: c.bundle).request))
            #expect(pushed.status == c.status, "push to \(c.token) in \(c.environment)")
            #expect(pushed.reason == c.reason)
            #expect(pushed.timestampMs == reply.json["timestamp"]?.intValue)
        }

        let valid = try emulator.admin(
            "POST", "/api/v1/validate/token", body: ["token": .string(device.token), "bundleId": "com.example.app", "environment": "production"])
        #expect(valid.json["deviceId"]?.stringValue == device.deviceID)
        #expect(valid.json["issued"]?["environment"]?.stringValue == "sandbox")
        #expect(valid.json["issued"]?["bundleId"]?.stringValue == "com.example.app")
        #expect(valid.json["issued"]?["kind"]?.stringValue == "app")
        let never = try emulator.admin(
            "POST", "/api/v1/validate/token", body: ["token": .string(unknown), "bundleId": "com.example.app", "environment": "sandbox"])
        #expect(never.json["deviceId"] == .null)
        #expect(never.json["issued"] == .null)
        let uninstalled = try emulator.admin(
            "POST", "/api/v1/validate/token", body: ["token": .string(gone.token), "bundleId": "com.example.app", "environment": "sandbox"])
        #expect(uninstalled.json["issued"]?["state"]?.stringValue == "unregistered")
        #expect(uninstalled.json["timestamp"]?.intValue == uninstalled.json["issued"]?["unregisteredAt"]?.intValue)
    }

    /// A VoIP token is judged for its own topic unless another is named.
    @Test func aTokenIsJudgedForItsKindsTopic() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let voip = try emulator.createDevice(kind: "voip")
        let own = try emulator.admin(
            "POST", "/api/v1/validate/token", body: ["token": .string(voip.token), "bundleId": "com.example.app", "environment": "sandbox"])
        #expect(own.json["verdict"]?.stringValue == "valid")
        #expect(own.json["topic"]?.stringValue == "com.example.app.voip")
        let named = try emulator.admin(
            "POST", "/api/v1/validate/token",
            body: ["token": .string(voip.token), "bundleId": "com.example.app", "environment": "sandbox", "topic": "com.example.app"])
        #expect(named.json["verdict"]?.stringValue == "wrong-topic")
        #expect(named.json["reason"]?.stringValue == "DeviceTokenNotForTopic")
    }

    @Test func theTokenValidatorRefusesIllFormedRequests() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let bodies: [(JSONValue, String)] = [
            (["bundleId": "com.example.app", "environment": "sandbox"], "\"token\""),
            (["token": 5, "bundleId": "com.example.app", "environment": "sandbox"], "\"token\""),
            (["token": "abcd", "environment": "sandbox"], "\"bundleId\""),
            (["token": "abcd", "bundleId": "not a bundle", "environment": "sandbox"], "bundle"),
            (["token": "abcd", "bundleId": "com.example.app"], "\"environment\""),
            (["token": "abcd", "bundleId": "com.example.app", "environment": "staging"], "\"environment\""),
            (["token": "abcd", "bundleId": "com.example.app", "environment": "sandbox", "topic": 3], "\"topic\""),
            (.string("x"), "JSON object"),
        ]
        for (body, mention) in bodies {
            let reply = try emulator.admin("POST", "/api/v1/validate/token", body: body)
            #expect(reply.status == 400, "\(body.serialized())")
            #expect(reply.json["error"]?.stringValue?.contains(mention) == true, "\(reply.raw)")
        }
    }

    // MARK: Provider tokens

    @Test func providerTokenVerdictsMatchWhatAPushGets() throws {
        let emulator = try EmulatorProcess()
        let device = try emulator.createDevice()
        let now = Int64(Date().timeIntervalSince1970)
        let stranger = try ES256PrivateKey.generate()
        let restricted = try ES256PrivateKey.generate()
        let added = try emulator.admin(
            "POST", "/api/v1/keys",
            body: ["teamId": "TEAM123456", "keyId": "PROD123456", "pem": .string(restricted.pkcs8PEM), "environment": "production"])
        #expect(added.status == 201, "\(added.raw)")
        let restrictedKey = ProviderSigningKey(teamID: "TEAM123456", keyID: "PROD123456", privateKey: restricted)

        let cases: [(jwt: String, environment: String, status: Int, reason: String?, registered: Bool)] = [
            (try emulator.key.token(issuedAt: now), "sandbox", 200, nil, true),
            (try emulator.key.token(issuedAt: now - 4000), "sandbox", 403, "ExpiredProviderToken", true),
            (
                try ProviderSigningKey(teamID: "TEAM123456", keyID: "NOKEY12345", privateKey: stranger).token(issuedAt: now), "sandbox", 403,
                "InvalidProviderToken", false
            ),
            (
                try ProviderSigningKey(teamID: "TEAM123456", keyID: "KEY1234567", privateKey: stranger).token(issuedAt: now), "sandbox", 403,
                "InvalidProviderToken", true
            ),
            (try restrictedKey.token(issuedAt: now), "sandbox", 403, "BadEnvironmentKeyIdInToken", true),
            (try restrictedKey.token(issuedAt: now), "production", 200, nil, true),
        ]
        let production = try emulator.createDevice(environment: "production")
        for c in cases {
            let reply = try emulator.admin("POST", "/api/v1/validate/jwt", body: ["jwt": .string(c.jwt), "environment": .string(c.environment)])
            #expect(reply.status == 200, "\(reply.raw)")
            #expect(reply.json["accepted"]?.boolValue == (c.status == 200), "\(reply.raw)")
            #expect(reply.json["status"]?.intValue == Int64(c.status), "\(reply.raw)")
            #expect(reply.json["reason"]?.stringValue == c.reason)
            #expect(reply.json["keyRegistered"]?.boolValue == c.registered)
            #expect(reply.json["iss"]?.stringValue == "TEAM123456")
            #expect(reply.json["explanation"]?.stringValue?.isEmpty == false)

            // A fresh connection per token, as the validator assumes.
            let connection = try emulator.connect(c.environment)
            var push = try emulator.push(c.environment == "sandbox" ? device.token : production.token)
            push.providerToken = c.jwt
            let pushed = APNsResult(try connection.send(push.request))
            #expect(pushed.status == c.status, "push with \(reply.json["kid"]?.stringValue ?? "?") in \(c.environment)")
            #expect(pushed.reason == c.reason)
        }

        let valid = try emulator.admin(
            "POST", "/api/v1/validate/jwt", body: ["jwt": .string("bearer " + (try emulator.key.token(issuedAt: now - 30)))])
        #expect(valid.json["accepted"]?.boolValue == true)
        #expect(valid.json["environment"]?.stringValue == "sandbox")
        #expect(valid.json["kid"]?.stringValue == "KEY1234567")
        #expect(valid.json["iat"]?.intValue == now - 30)
        #expect((valid.json["ageSeconds"]?.intValue ?? 0) >= 30)
        #expect(valid.json["teamId"]?.stringValue == "TEAM123456")
        #expect(valid.json["key"]?["environment"] == .null)
        let prod = try emulator.admin("POST", "/api/v1/validate/jwt", body: ["jwt": .string(try restrictedKey.token(issuedAt: now))])
        #expect(prod.json["key"]?["environment"]?.stringValue == "production")
        #expect(prod.json["explanation"]?.stringValue?.contains("restricted to production") == true)
        let badSignature = try emulator.admin(
            "POST", "/api/v1/validate/jwt",
            body: ["jwt": .string(try ProviderSigningKey(teamID: "TEAM123456", keyID: "KEY1234567", privateKey: stranger).token(issuedAt: now))])
        #expect(badSignature.json["explanation"]?.stringValue?.contains("signature") == true)
    }

    @Test func aProviderTokenIsCheckedForATopic() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let jwt = try emulator.providerToken()
        let owned = try emulator.admin("POST", "/api/v1/validate/jwt", body: ["jwt": .string(jwt), "topic": "com.example.app.voip"])
        #expect(owned.json["accepted"]?.boolValue == true, "\(owned.raw)")
        let unowned = try emulator.admin("POST", "/api/v1/validate/jwt", body: ["jwt": .string(jwt), "topic": "com.nobody.app"])
        #expect(unowned.json["accepted"]?.boolValue == false)
        #expect(unowned.json["status"]?.intValue == 400)
        #expect(unowned.json["reason"]?.stringValue == "TopicDisallowed")
        // An MDM topic: its pushes are `mdm`, which provider tokens cannot send (the endpoint's
        // answer to a push there without apns-push-type), not an app to register.
        let mdm = try emulator.admin(
            "POST", "/api/v1/validate/jwt", body: ["jwt": .string(jwt), "topic": "com.apple.mgmt.External.0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"])
        #expect(mdm.json["reason"]?.stringValue == "InvalidPushType", "\(mdm.raw)")
        #expect(mdm.json["explanation"]?.stringValue?.contains("need a certificate-based connection") == true, "\(mdm.raw)")
    }

    @Test func malformedProviderTokensGetTheEndpointsAnswers() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let empty = try emulator.admin("POST", "/api/v1/validate/jwt", body: ["jwt": ""])
        #expect(empty.json["reason"]?.stringValue == "MissingProviderToken")
        #expect(empty.json["status"]?.intValue == 403)
        let garbage = try emulator.admin("POST", "/api/v1/validate/jwt", body: ["jwt": "not.a.jwt"])
        #expect(garbage.json["reason"]?.stringValue == "InvalidProviderToken")
        #expect(garbage.json["kid"] == .null)
        #expect(try emulator.admin("POST", "/api/v1/validate/jwt", body: [:]).status == 400)
        #expect(try emulator.admin("POST", "/api/v1/validate/jwt", body: ["jwt": 1]).status == 400)
        #expect(try emulator.admin("POST", "/api/v1/validate/jwt", body: ["jwt": "x", "environment": "prod"]).status == 400)
    }

    // MARK: Exports

    /// The command for a recorded push, run with the real curl against the emulator, sends the
    /// same request again: accepted, with the same apns-* headers and payload.
    /// A Live Activity push-to-start token is judged as the endpoint judges a push to it: valid
    /// for the app's .push-type.liveactivity topic, not for another app's or in the other
    /// environment, nor for the app's own topic (a token of another topic, as Apple answers an
    /// activity's token sent with the app's topic); each verdict matches what a push gets.
    @Test func aLiveActivityTokenIsJudgedForItsTopic() throws {
        let emulator = try EmulatorProcess()
        #expect(try emulator.admin("POST", "/api/v1/apps", body: ["teamId": "TEAM123456", "bundleId": "com.other.app"]).status == 201)
        let device = try emulator.createDevice()
        let declared = try emulator.admin(
            "PUT", "/api/v1/devices/\(device.deviceID)/apps/\(EmulatorProcess.bundleID)/live-activities", body: ["types": ["DeliveryAttributes"]])
        let startToken = try #require(declared.json["pushToStartTokens"]?.objectValue?["DeliveryAttributes"]?.stringValue)
        let liveTopic = EmulatorProcess.bundleID + ".push-type.liveactivity"
        let cases: [(topic: String?, environment: String, verdict: String, status: Int, reason: String?)] = [
            (nil, "sandbox", "valid", 200, nil),
            ("com.other.app.push-type.liveactivity", "sandbox", "wrong-topic", 400, "DeviceTokenNotForTopic"),
            (liveTopic, "production", "wrong-environment", 400, "BadDeviceToken"),
            (EmulatorProcess.bundleID, "sandbox", "wrong-topic", 400, "DeviceTokenNotForTopic"),
            (EmulatorProcess.bundleID, "production", "wrong-environment", 400, "BadDeviceToken"),
        ]
        let start =
            #"{"aps":{"event":"start","timestamp":1700000000,"attributes-type":"DeliveryAttributes","attributes":{},"content-state":{},"alert":{"title":"x"}}}"#
        for c in cases {
            var body = JSONObject([
                ("token", .string(startToken)), ("bundleId", .string(EmulatorProcess.bundleID)), ("environment", .string(c.environment)),
            ])
            if let topic = c.topic { body["topic"] = .string(topic) }
            let reply = try emulator.admin("POST", "/api/v1/validate/token", body: .object(body))
            #expect(reply.json["verdict"]?.stringValue == c.verdict, "\(c): \(reply.raw)")
            #expect(reply.json["status"]?.intValue == Int64(c.status) && reply.json["reason"]?.stringValue == c.reason)
            #expect(reply.json["liveActivityToken"]?["kind"]?.stringValue == "pushToStart")
            #expect(reply.json["deviceId"]?.stringValue == device.deviceID)
            // The app's own topic: what a liveactivity push with it gets instead is said too.
            let explanation = reply.json["explanation"]?.stringValue ?? ""
            #expect(explanation.contains("InvalidPushType") == (c.verdict == "wrong-topic" && c.topic == EmulatorProcess.bundleID), "\(explanation)")

            var push = try emulator.push(startToken, payload: start, topic: c.topic ?? liveTopic)
            if c.topic != EmulatorProcess.bundleID { push.pushType = "liveactivity" }
            let pushed = APNsResult(try emulator.connect(c.environment).send(push.request))
            #expect(pushed.status == c.status && pushed.reason == c.reason, "push for \(c)")
        }
    }

    /// An update token whose activity is gone still passes the device-token stage (APNs answers
    /// 200), and the validator says the device ignores the push, and why.
    @Test func anEndedLiveActivityTokenIsValidAndSaysTheDeviceIgnoresIt() throws {
        let emulator = try EmulatorProcess()
        let device = try emulator.createDevice()
        let path = "/api/v1/devices/\(device.deviceID)"
        #expect(
            try emulator.admin("PUT", "\(path)/apps/\(EmulatorProcess.bundleID)/live-activities", body: ["types": ["DeliveryAttributes"]]).status
                == 200)
        let started = try emulator.admin(
            "POST", "\(path)/apps/\(EmulatorProcess.bundleID)/activities",
            body: ["attributesType": "DeliveryAttributes", "contentState": ["eta": 5], "pushToken": true])
        #expect(started.status == 201)
        let activityID = try #require(started.json["activityId"]?.stringValue)
        let updateToken = try #require(started.json["pushToken"]?.stringValue, "\(started.raw)")
        let body: JSONValue = ["token": .string(updateToken), "bundleId": .string(EmulatorProcess.bundleID), "environment": "sandbox"]
        let running = try emulator.admin("POST", "/api/v1/validate/token", body: body).json
        #expect(running["verdict"] == "valid" && running["explanation"]?.stringValue?.hasPrefix("an update token of a Live Activity") == true)
        #expect(running["explanation"]?.stringValue?.contains("ended") == false, "\(running)")
        // Ended, still on the Lock Screen with its token: a push to it is ignored, and said so.
        #expect(try emulator.admin("POST", "\(path)/activities/\(activityID)/end", body: ["contentState": ["eta": 0]]).status == 200)
        let ended = try emulator.admin("POST", "/api/v1/validate/token", body: body).json
        #expect(ended["verdict"] == "valid", "\(ended)")
        #expect(ended["explanation"]?.stringValue?.contains("pushes after the end are ignored") == true, "\(ended)")
        // Nor does it take a new update token.
        #expect(try emulator.admin("POST", "\(path)/activities/\(activityID)/rotate-token").status != 200)
        #expect(try emulator.admin("DELETE", "\(path)/activities/\(activityID)").status == 200)
        let gone = try emulator.admin("POST", "/api/v1/validate/token", body: body).json
        #expect(gone["verdict"] == "valid" && gone["status"] == 200, "\(gone)")
        let explanation = gone["explanation"]?.stringValue ?? ""
        #expect(explanation.contains("but the token ended") && explanation.contains("dismissed by the user"), "\(explanation)")
    }

    @Test(.requires(.curl)) func theCurlCommandSendsTheSameRequestAgain() throws {
        let emulator = try EmulatorProcess()
        let device = try emulator.createDevice()
        let payload = #"{"aps":{"alert":"it's \"quoted\" $HOME `date` \\ done"},"n":1}"#
        var push = try emulator.push(device.token, payload: payload)
        push.pushType = "alert"
        push.priority = "5"
        push.collapseID = "it's-a-collapse"
        push.expiration = "0"
        let first = APNsResult(try emulator.connect().send(push.request))
        #expect(first.status == 200)
        let id = try #require(first.apnsID)

        let apple = try emulator.admin("GET", "/api/v1/notifications/\(id)/curl")
        #expect(apple.status == 200)
        #expect(apple.raw.contains("https://api.sandbox.push.apple.com/3/device/\(device.token)"))
        #expect(apple.raw.contains(#"--header "authorization: bearer $APNS_JWT""#))
        #expect(!apple.raw.contains(ProviderToken.signatureMarker))

        let command = try emulator.admin("GET", "/api/v1/notifications/\(first.uniqueID ?? id)/curl?host=emulator")
        #expect(command.status == 200, "\(command.raw)")
        let result = try run(
            "/usr/bin/env",
            ["APNS_JWT=\(try emulator.providerToken())", "APNS_EMULATOR_CA=\(emulator.caPath)", "/bin/sh", "-c", command.raw])
        #expect(result.status == 0, "\(command.raw)\n\(result.err)")
        #expect(result.err.contains("< HTTP/2 200"), "\(result.err)")

        let records = try emulator.notifications(token: device.token)
        #expect(records.count == 2)
        let (again, original) = (try #require(records.first), try #require(records.last))
        #expect(again["status"]?.intValue == 200)
        #expect(again["payload"]?.serialized() == original["payload"]?.serialized())
        #expect(again["payloadSize"]?.intValue == Int64(payload.utf8.count))
        func apnsHeaders(_ record: JSONValue) -> [String] {
            (record["headers"]?.arrayValue ?? []).compactMap { header in
                guard let name = header["name"]?.stringValue, name.hasPrefix("apns-") else { return nil }
                return "\(name): \(header["value"]?.stringValue ?? "")"
            }
        }
        #expect(apnsHeaders(again) == apnsHeaders(original))
        #expect(apnsHeaders(original).count == 5)
    }

    @Test func recordsThatCannotBeRepeatedAreRefused() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        let big = APNsResult(try connection.send(try emulator.push(device.token, payload: String(repeating: " ", count: 9000) + "{}").request))
        #expect(big.reason == "PayloadTooLarge")
        let empty = APNsResult(try connection.send(try emulator.push(device.token, payload: "").request))
        #expect(empty.reason == "PayloadEmpty")

        let truncated = try emulator.admin("GET", "/api/v1/notifications/\(try #require(big.apnsID))")
        #expect(truncated.json["payloadTruncated"]?.boolValue == true)
        let refusedBig = try emulator.admin("GET", "/api/v1/notifications/\(try #require(big.apnsID))/curl")
        #expect(refusedBig.status == 409)
        #expect(refusedBig.json["error"]?.stringValue?.contains("the journal kept the first") == true, "\(refusedBig.raw)")
        let refusedEmpty = try emulator.admin("GET", "/api/v1/notifications/\(try #require(empty.apnsID))/curl")
        #expect(refusedEmpty.status == 422)
        #expect(refusedEmpty.json["error"]?.stringValue?.contains("no payload") == true)
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(try #require(empty.apnsID))/apns").status == 422)
        #expect(try emulator.admin("GET", "/api/v1/notifications/00000000-0000-0000-0000-000000000000/curl").status == 404)
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(try #require(big.apnsID))/curl?host=nowhere").status == 400)
    }

    /// The .apns file: the payload with `Simulator Target Bundle` added, at most 4,096 bytes.
    @Test func theSimulatorFileCarriesThePayloadAndTheBundle() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let voip = try emulator.createDevice(kind: "voip")
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        let pushed = APNsResult(
            try connection.send(try emulator.push(voip.token, payload: #"{"aps":{},"call":{"id":7}}"#, topic: "com.example.app.voip").request))
        #expect(pushed.status == 200)

        let raw = try AdminSocket(emulator).exchange(
            Array(
                "GET /api/v1/notifications/\(try #require(pushed.apnsID))/apns HTTP/1.1\r\nHost: \(try emulator.address("admin"))\r\nConnection: close\r\n\r\n"
                    .utf8))
        let reply = try EmulatorProcess.reply(raw)
        #expect(reply.status == 200)
        #expect(raw.lowercased().contains("content-disposition: attachment; filename=\"\(pushed.apnsID!.lowercased()).apns\""), "\(raw)")
        let file = try #require(reply.json.objectValue)
        #expect(file["Simulator Target Bundle"]?.stringValue == "com.example.app")
        var payload = file
        payload["Simulator Target Bundle"] = nil
        #expect(JSONValue.object(payload) == (try JSONValue.parse(#"{"aps":{},"call":{"id":7}}"#)))

        // 4,096 bytes fit; one more does not.
        let added = #""Simulator Target Bundle":"com.example.app","#.utf8.count
        let frame = #"{"aps":{"alert":""}}"#.utf8.count
        func export(_ padding: Int) throws -> EmulatorProcess.AdminReply {
            let body = #"{"aps":{"alert":""# + String(repeating: "x", count: padding) + #""}}"#
            let result = APNsResult(try connection.send(try emulator.push(device.token, payload: body).request))
            return try emulator.admin("GET", "/api/v1/notifications/\(try #require(result.apnsID))/apns")
        }
        let fits = try export(4096 - added - frame)
        #expect(fits.status == 200, "\(fits.raw)")
        #expect(fits.raw.utf8.count == 4096)
        let tooBig = try export(4096 - added - frame + 1)
        #expect(tooBig.status == 422)
        #expect(tooBig.json["error"]?.stringValue?.contains("4096") == true, "\(tooBig.raw)")

        let notObject = APNsResult(try connection.send(try emulator.push(device.token, payload: "[1,2]").request))
        let refused = try emulator.admin("GET", "/api/v1/notifications/\(try #require(notObject.apnsID))/apns")
        #expect(refused.status == 422)
        #expect(refused.json["error"]?.stringValue?.contains("JSON object") == true)
    }
}
