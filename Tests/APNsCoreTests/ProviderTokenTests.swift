import APNsCore
import Testing

@Suite("Provider tokens (JWT)")
struct ProviderTokenTests {
    func authenticate(
        _ fixture: Fixture, _ authenticator: inout ConnectionAuthenticator, _ token: String,
        environment: APNsEnvironment = .sandbox
    ) -> AuthenticationResult {
        let credentials = fixture.state.withWorld { $0.credentials }
        return authenticator.authenticate(
            authorization: "bearer \(token)", environment: environment,
            nowMs: fixture.clock.nowMilliseconds(), credentialsGeneration: credentials.generation,
            lookUpKey: { credentials.keys[$0] })
    }

    func reason(_ result: AuthenticationResult) -> APNsReason? {
        if case .rejected(let reason, _, _) = result { return reason }
        return nil
    }

    /// Whether the token is accepted on the connection.
    func accepted(_ fixture: Fixture, _ authenticator: inout ConnectionAuthenticator, _ token: String) -> Bool {
        if case .authenticated = authenticate(fixture, &authenticator, token) { return true }
        return false
    }

    @Test(arguments: [false, true])
    func bothSignatureEncodingsVerify(der: Bool) throws {
        let fixture = try Fixture()
        var authenticator = ConnectionAuthenticator()
        let result = authenticate(fixture, &authenticator, try fixture.keyA.token(issuedAt: fixture.nowSeconds, der: der))
        guard case .authenticated(let provider, let first) = result else {
            Issue.record("expected success, got \(result)")
            return
        }
        #expect(provider.teamID == "TEAMAAAAAA")
        #expect(first)
    }

    @Test func tamperedClaimsFailVerification() throws {
        let fixture = try Fixture()
        let token = try fixture.keyA.token(issuedAt: fixture.nowSeconds)
        let parts = token.split(separator: ".")
        // Same signature, claims changed to another (valid-looking) issue time.
        let claims = Base64URL.encode(Array(#"{"iss":"TEAMAAAAAA","iat":\#(fixture.nowSeconds - 1)}"#.utf8))
        let tampered = "\(parts[0]).\(claims).\(parts[2])"
        var authenticator = ConnectionAuthenticator()
        #expect(reason(authenticate(fixture, &authenticator, tampered)) == .invalidProviderToken)
        // A flipped signature character fails too.
        var signature = Array(parts[2].utf8)
        signature[5] = signature[5] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        let flipped = "\(parts[0]).\(parts[1]).\(String(decoding: signature, as: UTF8.self))"
        #expect(reason(authenticate(fixture, &authenticator, flipped)) == .invalidProviderToken)
        #expect(!authenticator.isBound)
    }

    @Test func signatureIsVerifiedOncePerTokenPerConnection() throws {
        let fixture = try Fixture()
        let token = try fixture.keyA.token(issuedAt: fixture.nowSeconds)
        var authenticator = ConnectionAuthenticator()
        for _ in 0..<50 {
            guard case .authenticated = authenticate(fixture, &authenticator, token) else {
                Issue.record("expected success")
                return
            }
        }
        #expect(fixture.keyA.verifier.calls.load(ordering: .relaxed) == 1)
    }

    @Test func cachedTokenExpiresAfterAnHour() throws {
        let fixture = try Fixture()
        let token = try fixture.keyA.token(issuedAt: fixture.nowSeconds)
        var authenticator = ConnectionAuthenticator()
        guard case .authenticated = authenticate(fixture, &authenticator, token) else {
            Issue.record("expected success")
            return
        }
        fixture.clock.advance(seconds: 3600)
        guard case .authenticated = authenticate(fixture, &authenticator, token) else {
            Issue.record("a token exactly one hour old is still valid")
            return
        }
        fixture.clock.advance(seconds: 1)
        #expect(reason(authenticate(fixture, &authenticator, token)) == .expiredProviderToken)
    }

    @Test func newTokenWithinTwentyMinutesIsTooManyUpdates() throws {
        let fixture = try Fixture()
        var authenticator = ConnectionAuthenticator()
        let first = try fixture.keyA.token(issuedAt: fixture.nowSeconds)
        guard case .authenticated = authenticate(fixture, &authenticator, first) else {
            Issue.record("expected success")
            return
        }
        fixture.clock.advance(seconds: 19 * 60)
        let second = try fixture.keyA.token(issuedAt: fixture.nowSeconds)
        #expect(reason(authenticate(fixture, &authenticator, second)) == .tooManyProviderTokenUpdates)
        // The old token still works on the connection.
        guard case .authenticated = authenticate(fixture, &authenticator, first) else {
            Issue.record("the previous token should still be accepted")
            return
        }
        fixture.clock.advance(seconds: 61)
        guard case .authenticated(_, let firstOnConnection) = authenticate(fixture, &authenticator, second) else {
            Issue.record("after 20 minutes a new token is fine")
            return
        }
        #expect(!firstOnConnection)
        // Another connection may use its own token at any time.
        var other = ConnectionAuthenticator()
        let third = try fixture.keyA.token(issuedAt: fixture.nowSeconds - 5)
        guard case .authenticated = authenticate(fixture, &other, third) else {
            Issue.record("a different connection has its own token")
            return
        }
    }

    @Test func aTokenIssuedTwentyMinutesAfterThePreviousIsNoUpdateTooSoon() throws {
        // A library that shares one token among its connections: a connection opened late in
        // the token's life first uses it at minute 49, and the library's refresh (issued 50
        // minutes after it) comes a few minutes later on the same connection.
        let fixture = try Fixture()
        var authenticator = ConnectionAuthenticator()
        let shared = try fixture.keyA.token(issuedAt: fixture.nowSeconds - 49 * 60)
        guard case .authenticated = authenticate(fixture, &authenticator, shared) else {
            Issue.record("expected success")
            return
        }
        fixture.clock.advance(seconds: 60)
        let refreshed = try fixture.keyA.token(issuedAt: fixture.nowSeconds)
        guard case .authenticated = authenticate(fixture, &authenticator, refreshed) else {
            Issue.record("a token issued 50 minutes after the previous one is not an update too soon")
            return
        }
        // A token issued 18 minutes after that one, used a minute later, still is.
        fixture.clock.advance(seconds: 18 * 60)
        let early = try fixture.keyA.token(issuedAt: fixture.nowSeconds)
        fixture.clock.advance(seconds: 60)
        #expect(reason(authenticate(fixture, &authenticator, early)) == .tooManyProviderTokenUpdates)
    }

    @Test func theReplacedTokenOnARequestMadeBeforeTheRefreshIsNoUpdate() throws {
        // A client's concurrent senders: one read the old token just before another refreshed
        // it, and its request reaches the connection after the first one with the new token.
        let fixture = try Fixture()
        var authenticator = ConnectionAuthenticator()
        let old = try fixture.keyA.token(issuedAt: fixture.nowSeconds - 50 * 60)
        #expect(accepted(fixture, &authenticator, old))
        fixture.clock.advance(seconds: 5)
        let refreshed = try fixture.keyA.token(issuedAt: fixture.nowSeconds)
        for (token, what) in [(refreshed, "the refreshed token"), (old, "the token it replaced"), (refreshed, "the refreshed token again")] {
            #expect(accepted(fixture, &authenticator, token), "\(what) is refused")
        }
        // Still an update too soon: a third token, and the replaced one's age is judged.
        fixture.clock.advance(seconds: 60)
        let third = try fixture.keyA.token(issuedAt: fixture.nowSeconds)
        #expect(reason(authenticate(fixture, &authenticator, third)) == .tooManyProviderTokenUpdates)
        fixture.clock.advance(seconds: 10 * 60)
        #expect(reason(authenticate(fixture, &authenticator, old)) == .expiredProviderToken)
        #expect(accepted(fixture, &authenticator, refreshed), "the refreshed token is refused after the old one expired")
    }

    @Test func anExpiredTokenRefusedOnTheConnectionDoesNotResetTheRefreshRate() throws {
        // A stale request (an expired token never used here, or the replaced one arriving
        // after its hour) is refused and changes nothing: the next new token is still too soon.
        for stale in ["never used", "the replaced one"] {
            let fixture = try Fixture()
            var authenticator = ConnectionAuthenticator()
            let old = try fixture.keyA.token(issuedAt: fixture.nowSeconds - 3590)
            #expect(accepted(fixture, &authenticator, old))
            let current = try fixture.keyA.token(issuedAt: fixture.nowSeconds)
            #expect(accepted(fixture, &authenticator, current), "a token issued 59 minutes after the previous is no update too soon")
            fixture.clock.advance(seconds: 12)
            let expired = stale == "never used" ? try fixture.keyA.token(issuedAt: fixture.nowSeconds - 3700) : old
            #expect(reason(authenticate(fixture, &authenticator, expired)) == .expiredProviderToken, "\(stale)")
            let next = try fixture.keyA.token(issuedAt: fixture.nowSeconds + 5)
            #expect(reason(authenticate(fixture, &authenticator, next)) == .tooManyProviderTokenUpdates, "\(stale)")
            #expect(accepted(fixture, &authenticator, current), "\(stale): the current token is refused")
        }
    }

    @Test func theReplacedTokenReSignedIsTheReplacedToken() throws {
        // Re-signing the same claims is no new token, for the replaced token as for the current.
        let fixture = try Fixture()
        var authenticator = ConnectionAuthenticator()
        let old = try fixture.keyA.token(issuedAt: fixture.nowSeconds - 50 * 60)
        #expect(accepted(fixture, &authenticator, old))
        #expect(accepted(fixture, &authenticator, try fixture.keyA.token(issuedAt: fixture.nowSeconds)), "the refresh is refused")
        let resigned = try fixture.keyA.token(issuedAt: fixture.nowSeconds - 50 * 60)
        #expect(resigned != old, "ES256 signatures are randomised")
        #expect(accepted(fixture, &authenticator, resigned), "the replaced token re-signed is refused")
    }

    @Test func anExpiredNewTokenIsExpiredNotAnUpdateTooSoon() throws {
        let fixture = try Fixture()
        var authenticator = ConnectionAuthenticator()
        guard case .authenticated = authenticate(fixture, &authenticator, try fixture.keyA.token(issuedAt: fixture.nowSeconds)) else {
            Issue.record("expected success")
            return
        }
        let stale = try fixture.keyA.token(issuedAt: fixture.nowSeconds - 4000)
        #expect(reason(authenticate(fixture, &authenticator, stale)) == .expiredProviderToken)
    }

    @Test func expiredTokenMayBeReplacedAtOnce() throws {
        let fixture = try Fixture()
        var authenticator = ConnectionAuthenticator()
        // A token 59 minutes old when first used; it expires two minutes later.
        let old = try fixture.keyA.token(issuedAt: fixture.nowSeconds - 59 * 60)
        guard case .authenticated = authenticate(fixture, &authenticator, old) else {
            Issue.record("expected success")
            return
        }
        fixture.clock.advance(seconds: 120)
        #expect(reason(authenticate(fixture, &authenticator, old)) == .expiredProviderToken)
        let fresh = try fixture.keyA.token(issuedAt: fixture.nowSeconds)
        guard case .authenticated = authenticate(fixture, &authenticator, fresh) else {
            Issue.record("replacing an expired token must not be TooManyProviderTokenUpdates")
            return
        }
    }

    @Test func connectionIsBoundToTheFirstTeam() throws {
        let fixture = try Fixture()
        var authenticator = ConnectionAuthenticator()
        guard case .authenticated = authenticate(fixture, &authenticator, try fixture.keyA.token(issuedAt: fixture.nowSeconds)) else {
            Issue.record("expected success")
            return
        }
        #expect(authenticator.teamID == "TEAMAAAAAA")
        #expect(
            reason(authenticate(fixture, &authenticator, try fixture.keyB.token(issuedAt: fixture.nowSeconds)))
                == .invalidProviderToken)
    }

    @Test func topicSpecificKeysMixOnlyWithTheirRelatedKey() throws {
        let fixture = try Fixture()
        var authenticator = ConnectionAuthenticator()
        guard case .authenticated = authenticate(fixture, &authenticator, try fixture.keyTopic.token(issuedAt: fixture.nowSeconds)) else {
            Issue.record("expected success")
            return
        }
        guard case .authenticated = authenticate(fixture, &authenticator, try fixture.keyTopicRelated.token(issuedAt: fixture.nowSeconds)) else {
            Issue.record("the related key may share the connection")
            return
        }
        #expect(
            reason(authenticate(fixture, &authenticator, try fixture.keyTopicOther.token(issuedAt: fixture.nowSeconds)))
                == .unrelatedKeyIdInToken)
        #expect(
            reason(authenticate(fixture, &authenticator, try fixture.keyA.token(issuedAt: fixture.nowSeconds)))
                == .unrelatedKeyIdInToken)
    }

    /// A topic-specific key may list a full topic (`com.example.app.voip`). That makes the
    /// bundle its team's, not an app called `com.example.app.voip`: the suffix keeps its meaning,
    /// so VoIP pushes to it stay VoIP pushes for the team's other keys and for this one.
    @Test func aKeyListingAFullTopicLeavesItsSuffixAlone() throws {
        let fixture = try Fixture()
        let voipKey = try SigningKey(team: "TEAMAAAAAA", key: "KEYVOIP001")
        fixture.state.withWorld { $0.addKey(voipKey.providerKey(topics: ["com.example.app.voip"])) }
        #expect(fixture.state.withWorld { $0.credentials.owner(ofBundle: "com.example.app.voip") } == nil)
        #expect(fixture.state.withWorld { $0.credentials.owner(ofBundle: "com.example.app")?.teamID } == "TEAMAAAAAA")
        let big = #"{"aps":{},"x":""# + String(repeating: "v", count: 4_990) + #""}"#
        for key in [fixture.keyA, voipKey] {
            var connection = fixture.connection()
            let typed = fixture.endpoint.handle(
                try fixture.request(
                    token: fixture.voipToken, topic: "com.example.app.voip",
                    authorization: "bearer \(try key.token(issuedAt: fixture.nowSeconds))", extra: [("apns-push-type", "voip")]),
                connection: &connection)
            #expect(typed.status == 200, "\(key.keyID): \(typed.reasonText ?? "")")
            // Without the header the suffix implies voip, and with it VoIP's 5120-byte limit.
            let implied = fixture.endpoint.handle(
                try fixture.request(
                    token: fixture.voipToken, topic: "com.example.app.voip",
                    authorization: "bearer \(try key.token(issuedAt: fixture.nowSeconds))", body: big),
                connection: &connection)
            #expect(implied.status == 200, "\(key.keyID): \(implied.reasonText ?? "")")
            #expect(fixture.latestRecord()?.pushType == "voip")
        }
        // The key covers only the topic it lists.
        var connection = fixture.connection()
        let alert = fixture.endpoint.handle(
            try fixture.request(authorization: "bearer \(try voipKey.token(issuedAt: fixture.nowSeconds))"), connection: &connection)
        #expect(alert.reasonText == "TopicDisallowed")
    }

    @Test func teamKeyConnectionRefusesTopicSpecificKey() throws {
        let fixture = try Fixture()
        var authenticator = ConnectionAuthenticator()
        guard case .authenticated = authenticate(fixture, &authenticator, try fixture.keyA.token(issuedAt: fixture.nowSeconds)) else {
            Issue.record("expected success")
            return
        }
        #expect(
            reason(authenticate(fixture, &authenticator, try fixture.keyTopic.token(issuedAt: fixture.nowSeconds)))
                == .unrelatedKeyIdInToken)
    }

    @Test func futureIssueTimeBeyondSkewIsRefused() throws {
        let fixture = try Fixture()
        var authenticator = ConnectionAuthenticator()
        guard case .authenticated = authenticate(fixture, &authenticator, try fixture.keyA.token(issuedAt: fixture.nowSeconds + 300)) else {
            Issue.record("five minutes of skew is tolerated")
            return
        }
        var other = ConnectionAuthenticator()
        #expect(reason(authenticate(fixture, &other, try fixture.keyA.token(issuedAt: fixture.nowSeconds + 301))) == .invalidProviderToken)
    }

    @Test func firstValidTokenRaisesTheStreamLimitOnce() throws {
        let fixture = try Fixture()
        var connection = fixture.connection()
        let rejected = fixture.endpoint.handle(try fixture.request(authorization: .some(nil)), connection: &connection)
        #expect(!rejected.raiseStreamLimit)
        let first = fixture.endpoint.handle(try fixture.request(), connection: &connection)
        #expect(first.raiseStreamLimit)
        let second = fixture.endpoint.handle(try fixture.request(), connection: &connection)
        #expect(!second.raiseStreamLimit)
    }

    @Test func bundleAddedAfterBindingNeedsANewConnection() throws {
        let fixture = try Fixture()
        let now = fixture.clock.nowMilliseconds()
        var connection = fixture.connection()
        #expect(fixture.endpoint.handle(try fixture.request(), connection: &connection).status == 200)
        let token = try fixture.state.withWorld { world throws(RegistryError) -> String in
            world.credentials.addApp(teamID: "TEAMAAAAAA", bundleID: "com.example.new")
            return try world.registry.register(deviceID: "d1", bundleID: "com.example.new", environment: .sandbox, nowMs: now).token
        }
        let onOld = fixture.endpoint.handle(try fixture.request(token: token, topic: "com.example.new"), connection: &connection)
        #expect(onOld.reasonText == "TopicDisallowed")
        var fresh = fixture.connection()
        #expect(fixture.endpoint.handle(try fixture.request(token: token, topic: "com.example.new"), connection: &fresh).status == 200)
    }

    @Test func aTopicAllowedBeforeIsJudgedAgainOnceTheCredentialsChange() throws {
        let fixture = try Fixture()
        var connection = fixture.connection()
        #expect(fixture.endpoint.handle(try fixture.request(), connection: &connection).status == 200)
        #expect(fixture.endpoint.handle(try fixture.request(), connection: &connection).status == 200)
        fixture.state.withWorld { world in
            world.credentials.removeApp(bundleID: "com.example.app")
            world.credentials.addApp(teamID: "TEAMBBBBBB", bundleID: "com.example.app")
        }
        #expect(fixture.endpoint.handle(try fixture.request(), connection: &connection).reasonText == "TopicDisallowed")
    }

    @Test func aPathOrPayloadLikeTheLastOneIsJudgedOnItsOwnBytes() throws {
        let fixture = try Fixture()
        var connection = fixture.connection()
        #expect(fixture.endpoint.handle(try fixture.request(body: #"{"aps":{"alert":"hi"}}"#), connection: &connection).status == 200)
        // The same length, other bytes: not the last payload's verdict.
        let invalid = fixture.endpoint.handle(try fixture.request(body: #"{"aps":{"alert":"hi"}]"#), connection: &connection)
        #expect(invalid.reasonText == "BadRequestPayload")
        #expect(fixture.endpoint.handle(try fixture.request(body: #"{"aps":{"alert":"hi"}}"#), connection: &connection).status == 200)
        // The same length, another token: not the last path's token.
        let other = String(fixture.sandboxToken.reversed())
        #expect(fixture.endpoint.handle(try fixture.request(token: other), connection: &connection).reasonText == "BadDeviceToken")
        #expect(fixture.endpoint.handle(try fixture.request(), connection: &connection).status == 200)
        let twoSegments = try fixture.request(path: "/3/device/\(fixture.sandboxToken)/x")
        #expect(fixture.endpoint.handle(twoSegments, connection: &connection).reasonText == "BadPath")
    }

    @Test func bearerSchemeIsCaseInsensitive() throws {
        let fixture = try Fixture()
        let response = fixture.send(try fixture.request(authorization: "Bearer \(try fixture.keyA.token(issuedAt: fixture.nowSeconds))"))
        #expect(response.status == 200)
    }
}

@Suite("Provider token updates")
struct ProviderTokenUpdateTests {
    @Test func reSigningTheSameClaimsIsNotAnUpdate() throws {
        let fixture = try Fixture()
        let iat = fixture.nowSeconds
        let a = try fixture.keyA.token(issuedAt: iat)
        let b = try fixture.keyA.token(issuedAt: iat)
        #expect(a != b, "ES256 signatures are randomised")
        var connection = fixture.connection()
        #expect(fixture.endpoint.handle(try fixture.request(authorization: "bearer \(a)"), connection: &connection).status == 200)
        #expect(fixture.endpoint.handle(try fixture.request(authorization: "bearer \(b)"), connection: &connection).status == 200)
        let newer = try fixture.keyA.token(issuedAt: iat + 1)
        #expect(
            fixture.endpoint.handle(try fixture.request(authorization: "bearer \(newer)"), connection: &connection).reasonText
                == "TooManyProviderTokenUpdates")
    }
}
