import APNsCore
import Testing

/// One row per APNs reason (docs/apns-behaviour.md, "Reasons and statuses"): the request that
/// provokes it and Apple's answer.
struct RuleCase: Sendable, CustomTestStringConvertible {
    let name: String
    let status: Int
    let reason: String?
    let environment: APNsEnvironment
    let build: @Sendable (Fixture) throws -> PushRequest

    init(
        _ name: String, _ status: Int, _ reason: String?, on environment: APNsEnvironment = .sandbox,
        _ build: @escaping @Sendable (Fixture) throws -> PushRequest
    ) {
        self.name = name
        self.status = status
        self.reason = reason
        self.environment = environment
        self.build = build
    }

    var testDescription: String { "\(name) → \(status) \(reason ?? "")" }
}

let ruleCases: [RuleCase] = [
    RuleCase("valid alert push", 200, nil) { try $0.request() },
    RuleCase("only the required headers: no apns-id, priority, expiration, push type, collapse id", 200, nil) {
        try $0.request()
    },
    RuleCase("every optional header well-formed", 200, nil) {
        try $0.request(extra: [
            ("apns-id", "123e4567-e89b-12d3-a456-426614174000"), ("apns-priority", "5"),
            ("apns-expiration", "0"), ("apns-push-type", "alert"),
            ("apns-collapse-id", String(repeating: "c", count: 64)),
        ])
    },
    RuleCase("GET", 405, "MethodNotAllowed") { try $0.request(method: "GET") },
    RuleCase("wrong path", 404, "BadPath") { try $0.request(path: "/3/devices/abcd") },
    RuleCase("no slash after /3/device", 404, "BadPath") { try $0.request(path: "/3/device") },
    RuleCase("extra path segment", 404, "BadPath") { f in try f.request(path: "/3/device/\(f.sandboxToken)/x") },
    RuleCase("query string", 404, "BadPath") { f in try f.request(path: "/3/device/\(f.sandboxToken)?x=1") },
    RuleCase("empty token", 400, "MissingDeviceToken") { try $0.request(path: "/3/device/") },
    RuleCase("apns-topic twice", 400, "DuplicateHeaders") { try $0.request(extra: [("apns-topic", "com.example.app")]) },
    RuleCase("unknown header twice", 400, "DuplicateHeaders") {
        try $0.request(extra: [("x-trace", "1"), ("x-trace", "2")])
    },
    RuleCase("cookie split into several fields (RFC 9113 §8.2.3) is not a repeat", 200, nil) {
        try $0.request(extra: [("cookie", "a=1"), ("cookie", "b=2")])
    },
    RuleCase("apns-id not a UUID", 400, "BadMessageId") { try $0.request(extra: [("apns-id", "not-a-uuid")]) },
    RuleCase("apns-id without dashes", 400, "BadMessageId") {
        try $0.request(extra: [("apns-id", "123e4567e89b12d3a456426614174000")])
    },
    RuleCase("apns-priority 7", 400, "BadPriority") { try $0.request(extra: [("apns-priority", "7")]) },
    RuleCase("apns-priority high", 400, "BadPriority") { try $0.request(extra: [("apns-priority", "high")]) },
    RuleCase("apns-expiration words", 400, "BadExpirationDate") { try $0.request(extra: [("apns-expiration", "soon")]) },
    RuleCase("apns-expiration negative", 400, "BadExpirationDate") { try $0.request(extra: [("apns-expiration", "-5")]) },
    RuleCase("apns-expiration with a fraction", 400, "BadExpirationDate") {
        try $0.request(extra: [("apns-expiration", "1767225600.5")])
    },
    RuleCase("apns-collapse-id 65 bytes", 400, "BadCollapseId") {
        try $0.request(extra: [("apns-collapse-id", String(repeating: "c", count: 65))])
    },
    RuleCase("apns-collapse-id of 33 two-byte characters (66 bytes)", 400, "BadCollapseId") {
        try $0.request(extra: [("apns-collapse-id", String(repeating: "é", count: 33))])
    },
    RuleCase("unknown push type", 400, "InvalidPushType") { try $0.request(extra: [("apns-push-type", "banana")]) },
    RuleCase("push type voip on a bare bundle topic", 400, "InvalidPushType") {
        try $0.request(extra: [("apns-push-type", "voip")])
    },
    RuleCase("push type alert on a .voip topic", 400, "InvalidPushType") { f in
        try f.request(token: f.voipToken, topic: "com.example.app.voip", extra: [("apns-push-type", "alert")])
    },
    RuleCase("push type background on a .voip topic", 400, "InvalidPushType") { f in
        try f.request(token: f.voipToken, topic: "com.example.app.voip", extra: [("apns-push-type", "background")])
    },
    RuleCase("mdm push type on a token connection", 400, "InvalidPushType") {
        try $0.request(topic: "com.apple.mgmt.External.1234", extra: [("apns-push-type", "mdm")])
    },
    RuleCase("an MDM topic without apns-push-type is an mdm push, which needs a certificate", 400, "InvalidPushType") {
        try $0.request(topic: "com.apple.mgmt.External.1234")
    },
    RuleCase("no authorization header", 403, "MissingProviderToken") { try $0.request(authorization: .some(nil)) },
    RuleCase("empty bearer", 403, "MissingProviderToken") { try $0.request(authorization: "bearer ") },
    RuleCase("bearer alone", 403, "MissingProviderToken") { try $0.request(authorization: "Bearer") },
    RuleCase("not a bearer header", 403, "InvalidProviderToken") { try $0.request(authorization: "Basic abc") },
    RuleCase("garbage token", 403, "InvalidProviderToken") { try $0.request(authorization: "bearer abc.def.ghi") },
    RuleCase("signature by another key", 403, "InvalidProviderToken") { f in
        // Key B signs a token claiming key A's kid and team.
        let forged = try ProviderToken.make(keyID: f.keyA.keyID, teamID: f.keyA.teamID, issuedAt: f.nowSeconds) {
            try f.keyB.privateKey.sign($0)
        }
        return try f.request(authorization: "bearer \(forged)")
    },
    RuleCase("unknown kid", 403, "InvalidProviderToken") { f in
        let token = try ProviderToken.make(keyID: "NOSUCHKEY1", teamID: f.keyA.teamID, issuedAt: f.nowSeconds) {
            try f.keyA.privateKey.sign($0)
        }
        return try f.request(authorization: "bearer \(token)")
    },
    RuleCase("iss is not the key's team", 403, "InvalidProviderToken") { f in
        try f.request(authorization: "bearer \(try f.keyA.token(issuedAt: f.nowSeconds, issuer: "TEAMBBBBBB"))")
    },
    RuleCase("alg HS256", 403, "InvalidProviderToken") { f in
        let header = Base64URL.encode(Array(#"{"alg":"HS256","kid":"KEYAAAAAAA"}"#.utf8))
        let claims = Base64URL.encode(Array(#"{"iss":"TEAMAAAAAA","iat":\#(f.nowSeconds)}"#.utf8))
        return try f.request(authorization: "bearer \(header).\(claims).c2ln")
    },
    RuleCase("iat a string that is not a number", 403, "InvalidProviderToken") { f in
        let header = Base64URL.encode(Array(#"{"alg":"ES256","kid":"KEYAAAAAAA"}"#.utf8))
        let claims = Base64URL.encode(Array(#"{"iss":"TEAMAAAAAA","iat":"now"}"#.utf8))
        let input = header + "." + claims
        let signature = Base64URL.encode(try f.keyA.privateKey.sign(Array(input.utf8)))
        return try f.request(authorization: "bearer \(input).\(signature)")
    },
    RuleCase("iat 3601 s old", 403, "ExpiredProviderToken") { f in
        try f.request(authorization: "bearer \(try f.keyA.token(issuedAt: f.nowSeconds - 3601))")
    },
    RuleCase("iat exactly 3600 s old is still valid", 200, nil) { f in
        try f.request(authorization: "bearer \(try f.keyA.token(issuedAt: f.nowSeconds - 3600))")
    },
    RuleCase("production-only key on sandbox", 403, "BadEnvironmentKeyIdInToken") { f in
        try f.request(authorization: "bearer \(try f.keyAProductionOnly.token(issuedAt: f.nowSeconds))")
    },
    RuleCase("no apns-topic", 400, "MissingTopic") { try $0.request(topic: nil) },
    RuleCase("malformed topic", 400, "BadTopic") { try $0.request(topic: "com..example app") },
    RuleCase("topic of another team", 400, "TopicDisallowed") { f in
        try f.request(token: f.otherAppToken, topic: "com.other.app")
    },
    RuleCase("topic nobody owns", 400, "TopicDisallowed") { try $0.request(topic: "com.nobody.app") },
    RuleCase("topic-specific key outside its topics", 400, "TopicDisallowed") { f in
        try f.request(
            token: f.otherAppToken, topic: "com.other.app",
            authorization: "bearer \(try f.keyTopic.token(issuedAt: f.nowSeconds))")
    },
    RuleCase("token is not hex", 400, "BadDeviceToken") { try $0.request(path: "/3/device/zz11") },
    RuleCase("token of odd length", 400, "BadDeviceToken") { try $0.request(path: "/3/device/abc") },
    RuleCase("token nobody was issued", 400, "BadDeviceToken") {
        try $0.request(path: "/3/device/" + String(repeating: "ab", count: 32))
    },
    RuleCase("production token sent to sandbox", 400, "BadDeviceToken") { f in try f.request(token: f.productionToken) },
    RuleCase("sandbox token sent to production", 400, "BadDeviceToken", on: .production) { f in try f.request() },
    RuleCase("token of another app", 400, "DeviceTokenNotForTopic") { f in
        try f.request(token: f.otherAppToken)
    },
    RuleCase("app token with a voip topic", 400, "DeviceTokenNotForTopic") { f in
        try f.request(topic: "com.example.app.voip", extra: [("apns-push-type", "voip")])
    },
    RuleCase("uppercase token is the same token", 200, nil) { f in try f.request(token: f.sandboxToken.uppercased()) },
    RuleCase("uninstalled app", 410, "Unregistered") { f in try f.request(token: f.uninstalledToken) },
    RuleCase("empty body", 400, "PayloadEmpty") { try $0.request(body: nil) },
    RuleCase("4097-byte alert", 413, "PayloadTooLarge") { try $0.request(body: payload(size: 4097)) },
    RuleCase("4096-byte alert", 200, nil) { try $0.request(body: payload(size: 4096)) },
    RuleCase("5120-byte voip", 200, nil) { f in
        try f.request(
            token: f.voipToken, topic: "com.example.app.voip", extra: [("apns-push-type", "voip")],
            body: payload(size: 5120))
    },
    RuleCase("5121-byte voip", 413, "PayloadTooLarge") { f in
        try f.request(
            token: f.voipToken, topic: "com.example.app.voip", extra: [("apns-push-type", "voip")],
            body: payload(size: 5121))
    },
    RuleCase("voip push type implied by the topic gets the voip limit", 200, nil) { f in
        try f.request(token: f.voipToken, topic: "com.example.app.voip", body: payload(size: 5000))
    },
    RuleCase("body is not JSON", 400, "BadRequestPayload") { try $0.request(body: "hello") },
    RuleCase("body is a JSON array", 400, "BadRequestPayload") { try $0.request(body: "[1,2]") },
    RuleCase("body without aps is accepted", 200, nil) { try $0.request(body: #"{"mdm":"x"}"#) },
    RuleCase("api.push.apple.com authority selects production", 200, nil, on: .sandbox) { f in
        try f.request(token: f.productionToken, authority: "api.push.apple.com")
    },
    RuleCase("api.development.push.apple.com authority selects sandbox", 200, nil, on: .production) { f in
        try f.request(authority: "api.development.push.apple.com:443")
    },
]

/// A JSON object of exactly `size` bytes.
func payload(size: Int) -> String {
    let skeleton = #"{"aps":{"alert":""}}"#
    return #"{"aps":{"alert":""# + String(repeating: "x", count: size - skeleton.utf8.count) + #""}}"#
}

@Suite("Request rules")
struct RequestRulesTests {
    @Test(arguments: ruleCases)
    func rule(_ row: RuleCase) throws {
        let fixture = try Fixture()
        let response = fixture.send(try row.build(fixture), on: row.environment)
        #expect(response.status == row.status)
        #expect(response.reasonText == row.reason)
        if let reason = row.reason {
            let body = String(decoding: response.body ?? [], as: UTF8.self)
            #expect(body.hasPrefix("{\"reason\":\"\(reason)\""))
        } else {
            #expect(response.body == nil)
        }
        // Every request, accepted or not, is journaled with the same answer.
        let record = try #require(fixture.latestRecord())
        #expect(record.status == row.status)
        #expect(record.reason == row.reason)
        #expect(!record.explanation.isEmpty)
        // Its effective push type too, however early it was refused (the journal's filter).
        if row.reason != "InvalidPushType" { #expect(record.pushType != nil) }
    }

    @Test func aPushRefusedBeforeItsTopicIsJudgedKeepsItsEffectiveType() throws {
        let fixture = try Fixture()
        let refusals: [(topic: String?, extra: [(String, String)], authorization: String??, reason: String, type: String?)] = [
            ("com.example.app.voip", [], .some("bearer abc.def.ghi"), "InvalidProviderToken", "voip"),
            ("com.example.app", [], .some("bearer abc.def.ghi"), "InvalidProviderToken", "alert"),
            ("com.example.app.complication", [("apns-id", "x")], .none, "BadMessageId", "complication"),
            (nil, [], .none, "MissingTopic", "alert"),
            ("com.example.app.voip", [("apns-push-type", "background"), ("apns-id", "x")], .none, "BadMessageId", "background"),
            ("com.example.app", [("apns-push-type", "nonsense")], .none, "InvalidPushType", nil),
        ]
        for refusal in refusals {
            let request = try fixture.request(topic: refusal.topic, authorization: refusal.authorization, extra: refusal.extra)
            #expect(fixture.send(request).reasonText == refusal.reason)
            #expect(fixture.latestRecord()?.pushType == refusal.type, "\(refusal.topic ?? "no topic") \(refusal.reason)")
        }
        // The metric counts each under the same type as its record (MissingTopic was counted
        // under none).
        let counted = fixture.state.readWorld { $0.counters.notifications(spelling: \.rawValue) }
        for refusal in refusals {
            let key = counted.keys.filter { $0.reason == refusal.reason }
            #expect(key.contains { $0.pushType == (refusal.type ?? "") }, "\(refusal.reason): \(key.map(\.pushType))")
        }
    }

    @Test func unregisteredCarriesTheUninstallTimeInMilliseconds() throws {
        let fixture = try Fixture()
        let response = fixture.send(try fixture.request(token: fixture.uninstalledToken))
        #expect(response.status == 410)
        #expect(response.timestampMs == fixture.uninstalledAtMs)
        let body = try JSONValue.parse(response.body ?? [])
        #expect(body["reason"] == "Unregistered")
        #expect(body["timestamp"]?.intValue == fixture.uninstalledAtMs)
    }

    @Test func aTopicDifferingFromARegisteredBundleInCaseOnlySaysSo() throws {
        let fixture = try Fixture()
        let response = fixture.send(try fixture.request(topic: "com.Example.App"))
        #expect(response.reasonText == "TopicDisallowed")
        #expect(
            fixture.latestRecord()?.explanation
                == "no team owns bundle com.Example.App; com.example.app is registered, and topics are matched exactly, case included")
    }

    /// `channels` pointed at a `--listen` port without the management host name reaches the
    /// device-push endpoint: Apple's answer, and a record that says where the path is served.
    @Test(arguments: [("GET", "MethodNotAllowed"), ("POST", "BadPath")])
    func aChannelManagementPathOnTheDeviceEndpointSaysWhereItIsServed(method: String, reason: String) throws {
        let fixture = try Fixture()
        let response = fixture.send(try fixture.request(method: method, path: "/1/apps/com.example.app/channels"))
        #expect(response.reasonText == reason)
        let explanation = fixture.latestRecord()?.explanation ?? ""
        #expect(explanation.contains("a channel management path: it is served on --channel-sandbox-listen"), "\(explanation)")
        // Any other wrong path is told only what the endpoint takes.
        _ = fixture.send(try fixture.request(path: "/3/devices/abcd"))
        #expect(fixture.latestRecord()?.explanation == "path /3/devices/abcd is not /3/device/<device-token>")
    }

    /// A token of the other environment: the record says how the request's environment was
    /// chosen (an Apple host name in :authority, else the server name or the port).
    @Test func aTokenOfTheOtherEnvironmentSaysWhereTheEnvironmentCameFrom() throws {
        let fixture = try Fixture()
        _ = fixture.send(try fixture.request(token: fixture.productionToken))
        #expect(
            fixture.latestRecord()?.explanation
                == "this is a production token, sent to sandbox (:authority 127.0.0.1:2197 names no Apple host, so the TLS server name, else the port it came to, chose sandbox; api.push.apple.com, or the emulator's production port, takes this token)"
        )
        _ = fixture.send(try fixture.request(token: fixture.productionToken, authority: "api.sandbox.push.apple.com"))
        #expect(
            fixture.latestRecord()?.explanation
                == "this is a production token, sent to sandbox (:authority api.sandbox.push.apple.com selects sandbox)")
    }

    @Test func clientApnsIDIsEchoedUnchanged() throws {
        let fixture = try Fixture()
        let id = "7C3D1C3E-0E5F-4A6B-9A3B-3C1D2E4F5A6B"
        let response = fixture.send(try fixture.request(extra: [("apns-id", id)]))
        #expect(response.apnsID == id)
    }

    @Test func generatedApnsIDIsUppercaseUUIDAndUniqueIDOnlyOnSandbox() throws {
        let fixture = try Fixture()
        let sandbox = fixture.send(try fixture.request())
        #expect(sandbox.status == 200)
        #expect(CanonicalUUID.isValid(Substring(sandbox.apnsID)))
        #expect(sandbox.apnsID == sandbox.apnsID.uppercased())
        let unique = try #require(sandbox.uniqueID)
        #expect(CanonicalUUID.isValid(Substring(unique)))

        let production = fixture.send(try fixture.request(token: fixture.productionToken), on: .production)
        #expect(production.status == 200)
        #expect(production.uniqueID == nil)
    }

    @Test func serverNameSelectsEnvironmentWhenAuthorityDoesNot() throws {
        let fixture = try Fixture()
        var connection = fixture.connection(.sandbox, serverName: "api.push.apple.com")
        let response = fixture.endpoint.handle(try fixture.request(token: fixture.productionToken), connection: &connection)
        #expect(response.status == 200)
    }

    @Test func invalidJSONCanBeAcceptedAndDropped() throws {
        var options = EndpointOptions()
        options.invalidPayload = .accept
        let fixture = try Fixture(options: options)
        let response = fixture.send(try fixture.request(body: "not json"))
        #expect(response.status == 200)
        #expect(fixture.latestRecord()?.outcome == .droppedBySystem)
    }

    @Test func badEnvironmentSpellingIsConfigurable() throws {
        var options = EndpointOptions()
        options.badEnvironmentKeySpelling = "BadEnvironmentKeyInToken"
        let fixture = try Fixture(options: options)
        let response = fixture.send(
            try fixture.request(
                authorization: "bearer \(try fixture.keyAProductionOnly.token(issuedAt: fixture.nowSeconds))"))
        #expect(response.status == 403)
        #expect(response.reasonText == "BadEnvironmentKeyInToken")
    }

    /// docs/apns-behaviour.md, "Check order": when several rules are broken, the earliest stage answers.
    @Test func checkOrderFollowsTheReference() throws {
        let fixture = try Fixture()
        // Bad method and bad path: 405 first.
        #expect(fixture.send(try fixture.request(method: "PUT", path: "/nope")).reasonText == "MethodNotAllowed")
        // Bad path and duplicate headers: 404 first.
        #expect(fixture.send(try fixture.request(path: "/nope", extra: [("apns-topic", "x")])).reasonText == "BadPath")
        // Bad priority and no token: header syntax before authentication.
        #expect(
            fixture.send(try fixture.request(authorization: .some(nil), extra: [("apns-priority", "9")])).reasonText
                == "BadPriority")
        // No provider token and no topic: authentication before topic.
        #expect(fixture.send(try fixture.request(topic: nil, authorization: .some(nil))).reasonText == "MissingProviderToken")
        // No topic and a bad device token: topic before device token.
        #expect(fixture.send(try fixture.request(path: "/3/device/zz", topic: nil)).reasonText == "MissingTopic")
        // Bad device token and empty payload: device token before payload.
        #expect(fixture.send(try fixture.request(path: "/3/device/zz", body: nil)).reasonText == "BadDeviceToken")
    }
}

@Suite("Push types and topics")
struct PushTypeTopicTests {
    /// Every push type with the topic suffix it needs, sent to a token of the matching kind.
    @Test(arguments: PushType.allCases.filter { $0 != .mdm && $0 != .background })
    func eachPushTypeWithItsSuffixIsAccepted(type: PushType) throws {
        let fixture = try Fixture()
        let kind = TokenKind(rawValue: type.rawValue) ?? .app
        let now = fixture.clock.nowMilliseconds()
        let token = try fixture.state.withWorld { world throws(RegistryError) in
            try world.registry.register(deviceID: "d1", bundleID: "com.example.app", environment: .sandbox, kind: kind, nowMs: now).token
        }
        let topic = "com.example.app" + type.topicSuffix
        let ok = fixture.send(try fixture.request(token: token, topic: topic, extra: [("apns-push-type", type.rawValue)]))
        #expect(ok.status == 200, "\(type) on \(topic)")
        #expect(fixture.latestRecord()?.pushType == type.rawValue)
        // The same push type on the bare bundle topic is inconsistent (types with a suffix).
        if !type.topicSuffix.isEmpty {
            let bare = fixture.send(try fixture.request(token: token, topic: "com.example.app", extra: [("apns-push-type", type.rawValue)]))
            #expect(bare.reasonText == "InvalidPushType")
        }
    }

    @Test func backgroundPushOnTheAppTopicIsAccepted() throws {
        let fixture = try Fixture()
        let response = fixture.send(
            try fixture.request(
                extra: [("apns-push-type", "background"), ("apns-priority", "5")], body: #"{"aps":{"content-available":1}}"#))
        #expect(response.status == 200)
    }

    @Test func aBundleThatEndsLikeASuffixIsStillABundle() throws {
        let fixture = try Fixture()
        let now = fixture.clock.nowMilliseconds()
        let token = try fixture.state.withWorld { world throws(RegistryError) in
            world.credentials.addApp(teamID: "TEAMAAAAAA", bundleID: "com.example.voip")
            return try world.registry.register(deviceID: "d1", bundleID: "com.example.voip", environment: .sandbox, nowMs: now).token
        }
        let response = fixture.send(try fixture.request(token: token, topic: "com.example.voip", extra: [("apns-push-type", "alert")]))
        #expect(response.status == 200)
    }
}

@Suite("Certificate connections (docs/apns-behaviour.md)")
struct CertificateRulesTests {
    func connection(
        _ fixture: Fixture, _ certificate: CertificateCredential, _ environment: APNsEnvironment = .sandbox
    )
        -> ProviderConnectionContext
    {
        var connection = fixture.connection(environment)
        connection.credential = .certificate(certificate)
        return connection
    }

    let universal = CertificateCredential(
        bundleID: "com.example.app",
        topics: ["com.example.app", "com.example.app.voip", "com.example.app.complication"],
        development: true, production: true, subject: "Apple Push Services: com.example.app")

    @Test func authorizationIsIgnoredAndTheTopicMustBeListed() throws {
        let fixture = try Fixture()
        var conn = connection(fixture, universal)
        let ok = fixture.endpoint.handle(try fixture.request(authorization: "bearer garbage"), connection: &conn)
        #expect(ok.status == 200)
        #expect(fixture.latestRecord()?.certificateSubject == "Apple Push Services: com.example.app")
        let voip = fixture.endpoint.handle(
            try fixture.request(
                token: fixture.voipToken, topic: "com.example.app.voip",
                authorization: .some(nil)), connection: &conn)
        #expect(voip.status == 200)
        let other = fixture.endpoint.handle(try fixture.request(token: fixture.otherAppToken, topic: "com.other.app"), connection: &conn)
        #expect(other.reasonText == "TopicDisallowed")
    }

    @Test func aMultiTopicCertificateNeedsATopicAndASingleTopicOneDefaultsToIt() throws {
        let fixture = try Fixture()
        var conn = connection(fixture, universal)
        #expect(fixture.endpoint.handle(try fixture.request(topic: nil), connection: &conn).reasonText == "MissingTopic")
        var single = connection(
            fixture,
            CertificateCredential(
                bundleID: "com.example.app", topics: ["com.example.app"],
                development: true, production: false, subject: "s"))
        #expect(fixture.endpoint.handle(try fixture.request(topic: nil), connection: &single).status == 200)
        #expect(fixture.latestRecord()?.topic == "com.example.app")
    }

    @Test func locationIsTokenOnlyAndTheEnvironmentMustMatch() throws {
        let fixture = try Fixture()
        var conn = connection(fixture, universal)
        let location = fixture.endpoint.handle(
            try fixture.request(
                topic: "com.example.app.location-query",
                extra: [("apns-push-type", "location")]), connection: &conn)
        #expect(location.reasonText == "InvalidPushType")
        var production = connection(
            fixture,
            CertificateCredential(
                bundleID: "com.example.app", topics: ["com.example.app"],
                development: false, production: true, subject: "s"))
        let wrong = fixture.endpoint.handle(try fixture.request(), connection: &production)
        #expect(wrong.status == 403)
        #expect(wrong.reasonText == "BadCertificateEnvironment")
    }

    @Test func anInvalidCertificateIsBadCertificate() throws {
        let fixture = try Fixture()
        var conn = connection(
            fixture,
            CertificateCredential(
                bundleID: "com.example.app", topics: [], development: true,
                production: true, subject: "s", problem: "certificate has expired"))
        let response = fixture.endpoint.handle(try fixture.request(), connection: &conn)
        #expect(response.status == 403)
        #expect(response.reasonText == "BadCertificate")
        #expect(fixture.latestRecord()?.explanation.contains("expired") == true)
    }
}
