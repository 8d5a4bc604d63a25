import HTTPGrammar
import APNsCore
import OpenSSLCrypto
import Testing

/// Requests the way real provider libraries write them, which Apple accepts although a strict
/// reading of the documentation would not (docs/apns-behaviour.md, "Leniencies").
@Suite("What Apple accepts from real providers")
struct LeniencyTests {
    /// A token whose claims are `claimsJSON` exactly, signed with key A (raw r||s).
    func token(_ fixture: Fixture, claimsJSON: String) throws -> String {
        let header = Base64URL.encode(Array(#"{"alg":"ES256","kid":"KEYAAAAAAA","typ":"JWT"}"#.utf8))
        let input = header + "." + Base64URL.encode(Array(claimsJSON.utf8))
        let signature = try fixture.keyA.privateKey.sign(Array(input.utf8))
        return input + "." + Base64URL.encode(signature)
    }

    func send(_ fixture: Fixture, claims: String) throws -> (PushResponse, NotificationRecord?) {
        let response = fixture.send(try fixture.request(authorization: "bearer \(try token(fixture, claimsJSON: claims))"))
        return (response, fixture.latestRecord())
    }

    /// pushok (PHP) names ES512 and signs with SHA-512 over the P-256 key, r and s padded to
    /// 66 bytes each; ES384 the same way with 48. A signature of the other hash does not do.
    @Test func tokensNamingES384OrES512AreVerifiedWithThatHash() throws {
        let fixture = try Fixture()
        let claims = Base64URL.encode(Array(#"{"iss":"TEAMAAAAAA","iat":\#(fixture.nowSeconds)}"#.utf8))
        for (alg, jose, length) in [("ES512", JOSEAlgorithm.es512, 132), ("ES384", .es384, 96)] {
            let input = Base64URL.encode(Array(#"{"alg":"\#(alg)","kid":"KEYAAAAAAA"}"#.utf8)) + "." + claims
            let signature = try fixture.keyA.privateKey.sign(Array(input.utf8), as: jose)
            #expect(signature.count == length)
            let good = fixture.send(try fixture.request(authorization: "bearer \(input).\(Base64URL.encode(signature))"))
            #expect(good.status == 200, "\(alg): \(fixture.latestRecord()?.explanation ?? "-")")
            let der = try fixture.keyA.privateKey.signDER(Array(input.utf8), as: jose)
            #expect(fixture.send(try fixture.request(authorization: "bearer \(input).\(Base64URL.encode(der))")).status == 200)
            let es256 = try fixture.keyA.privateKey.sign(Array(input.utf8))
            let wrong = fixture.send(try fixture.request(authorization: "bearer \(input).\(Base64URL.encode(es256))"))
            #expect(wrong.status == 403 && wrong.reason == .invalidProviderToken, "\(alg) with an ES256 signature")
        }
    }

    // PyAPNs2 and apns2-up: `"iat": time.time()`.
    @Test func fractionalIssuedAtIsAccepted() throws {
        let fixture = try Fixture()
        let (response, record) = try send(fixture, claims: #"{"iss":"TEAMAAAAAA","iat":\#(fixture.nowSeconds).398}"#)
        #expect(response.status == 200)
        #expect(record?.jwtVerified == true)
    }

    // kalyke-apns: `"iat": str(int(time))`; older APNSwift releases also sent a string.
    @Test(arguments: ["\"%d\"", "\"%d.75\"", "\"%de0\""])
    func decimalStringIssuedAtIsAccepted(format: String) throws {
        let fixture = try Fixture()
        let iat = format.replacingOccurrences(of: "%d", with: String(fixture.nowSeconds))
        let (response, _) = try send(fixture, claims: #"{"iss":"TEAMAAAAAA","iat":\#(iat)}"#)
        #expect(response.status == 200, "iat \(iat)")
    }

    /// The whole seconds count: a fractional iat exactly an hour old is still valid, one
    /// second more is not.
    @Test func fractionalIssuedAtUsesWholeSecondsForAge() throws {
        let fixture = try Fixture()
        let (fresh, _) = try send(fixture, claims: #"{"iss":"TEAMAAAAAA","iat":\#(fixture.nowSeconds - 3600).999}"#)
        #expect(fresh.status == 200)
        let (stale, record) = try send(fixture, claims: #"{"iss":"TEAMAAAAAA","iat":"\#(fixture.nowSeconds - 3601).2"}"#)
        #expect(stale.reasonText == "ExpiredProviderToken")
        #expect(record?.explanation.contains("3601 s old") == true, "\(record?.explanation ?? "")")
    }

    @Test(arguments: [
        (#""soon""#, "does not hold a number"),
        (#""""#, "does not hold a number"),
        (#""0x6553F100""#, "does not hold a number"),
        (#"" 1767225600""#, "does not hold a number"),
        (#""1767225600s""#, "does not hold a number"),
        ("true", "not a number of seconds"),
        ("null", "not a number of seconds"),
        ("[1767225600]", "not a number of seconds"),
        ("1e300", "not a usable number"),
    ])
    func issuedAtThatIsNotATimeIsRefused(iat: String, explained: String) throws {
        let fixture = try Fixture()
        let (response, record) = try send(fixture, claims: #"{"iss":"TEAMAAAAAA","iat":\#(iat)}"#)
        #expect(response.reasonText == "InvalidProviderToken", "iat \(iat)")
        #expect(record?.explanation.contains(explained) == true, "iat \(iat): \(record?.explanation ?? "")")
    }

    @Test func missingIssuedAtIsRefusedAndSaysSo() throws {
        let fixture = try Fixture()
        let (response, record) = try send(fixture, claims: #"{"iss":"TEAMAAAAAA"}"#)
        #expect(response.reasonText == "InvalidProviderToken")
        #expect(record?.explanation.contains("no iat") == true)
    }

    /// Apple's documentation sample has a millisecond iat; the explanation points at the unit.
    @Test func millisecondIssuedAtIsRefusedWithAHint() throws {
        let fixture = try Fixture()
        let (response, record) = try send(fixture, claims: #"{"iss":"TEAMAAAAAA","iat":"\#(fixture.nowSeconds * 1000)"}"#)
        #expect(response.reasonText == "InvalidProviderToken")
        #expect(record?.explanation.contains("milliseconds") == true, "\(record?.explanation ?? "")")
    }
}

@Suite("Header values as clients write them")
struct HeaderLeniencyTests {
    @Test func spacesAroundValuesAreNotPartOfThem() throws {
        let fixture = try Fixture()
        let token = try fixture.keyA.token(issuedAt: fixture.nowSeconds)
        let request = try fixture.request(
            topic: " com.example.app\t", authorization: "  bearer \(token) ",
            extra: [
                ("apns-priority", "5 "), ("apns-push-type", " alert"), ("apns-expiration", " 0"),
                ("apns-id", " 6a5b0b6e-3c1d-4c52-9d2e-1f0a3b4c5d6e "),
                // 64 bytes with the padding left out, so the same key as without it.
                ("apns-collapse-id", "\t" + String(repeating: "c", count: 64) + "  "),
            ])
        let response = fixture.send(request)
        #expect(response.status == 200)
        #expect(response.apnsID == "6a5b0b6e-3c1d-4c52-9d2e-1f0a3b4c5d6e")
        let record = fixture.latestRecord()
        #expect(record?.priority == 5)
        #expect(record?.expiration == 0)
        #expect(record?.topic == "com.example.app")
        #expect(record?.collapseID == String(repeating: "c", count: 64))
    }

    @Test(arguments: ["apns-id", "apns-priority", "apns-expiration", "apns-push-type", "apns-collapse-id"])
    func emptyOptionalHeaderCountsAsAbsent(name: String) throws {
        let fixture = try Fixture()
        let response = fixture.send(try fixture.request(extra: [(name, "")]))
        #expect(response.status == 200, "\(name) sent empty: \(response.reasonText ?? "")")
    }

    @Test func aBlankTopicIsStillMissing() throws {
        let fixture = try Fixture()
        #expect(fixture.send(try fixture.request(topic: "  ")).reasonText == "MissingTopic")
    }

    @Test(arguments: ["Alert", "ALERT", "Background"])
    func pushTypeInAnyCase(value: String) throws {
        let fixture = try Fixture()
        let response = fixture.send(try fixture.request(extra: [("apns-push-type", value), ("apns-priority", "5")]))
        #expect(response.status == 200)
        #expect(fixture.latestRecord()?.pushType == value.lowercased())
    }

    @Test func aRequestRefusedForItsTokenStillShowsItsPushType() throws {
        let fixture = try Fixture()
        let response = fixture.send(try fixture.request(authorization: "bearer x.y.z", extra: [("apns-push-type", "background")]))
        #expect(response.reasonText == "InvalidProviderToken")
        #expect(fixture.latestRecord()?.pushType == "background")
    }

    @Test func unknownPushTypeIsStillRefused() throws {
        let fixture = try Fixture()
        #expect(fixture.send(try fixture.request(extra: [("apns-push-type", "Alerts")])).reasonText == "InvalidPushType")
    }

    /// aioapns sends `host` instead of `:authority`; Apple's host name in it picks the environment.
    @Test func hostHeaderNamesTheEnvironmentLikeAuthority() throws {
        let fixture = try Fixture()
        var headers = try fixture.request(token: fixture.productionToken).headers.filter { $0.name != ":authority" }
        headers.append(HeaderField(name: "host", value: "api.push.apple.com"))
        let response = fixture.send(PushRequest(streamID: 1, headers: headers, body: Array(#"{"aps":{}}"#.utf8)))
        #expect(response.status == 200)
        #expect(response.uniqueID == nil, "production answers carry no apns-unique-id")
        #expect(fixture.latestRecord()?.environment == .production)
    }

    @Test func uppercaseDeviceTokenIsTheSameToken() throws {
        let fixture = try Fixture()
        #expect(fixture.send(try fixture.request(token: fixture.sandboxToken.uppercased())).status == 200)
    }
}

@Suite("What records keep")
struct RecordRedactionTests {
    @Test func recordsKeepTheTokenHeaderAndClaimsButNotItsSignature() throws {
        let fixture = try Fixture()
        let token = try fixture.keyA.token(issuedAt: fixture.nowSeconds)
        let parts = token.split(separator: ".")
        var connection = fixture.connection()
        for _ in 0..<2 {  // the second request takes the per-connection cache
            #expect(fixture.endpoint.handle(try fixture.request(authorization: "bearer \(token)"), connection: &connection).status == 200)
            let record = try #require(fixture.latestRecord())
            let kept = record.requestHeaders.first { $0.name == "authorization" }?.value
            #expect(kept == "bearer \(parts[0]).\(parts[1]).\(ProviderToken.signatureMarker)")
            #expect(!(kept ?? "").contains(String(parts[2])))
            #expect(record.jwtVerified == true)
            #expect(record.jwtClaims?.contains("TEAMAAAAAA") == true)
        }
    }

    @Test func aDuplicatedAuthorizationIsRedactedEverywhere() throws {
        let fixture = try Fixture()
        let token = try fixture.keyA.token(issuedAt: fixture.nowSeconds)
        let signature = String(token.split(separator: ".")[2])
        let response = fixture.send(try fixture.request(extra: [("authorization", "bearer \(token)")]))
        #expect(response.reasonText == "DuplicateHeaders")
        let values = fixture.latestRecord()?.requestHeaders.filter { $0.name == "authorization" }.map(\.value) ?? []
        #expect(values.count == 2)
        #expect(values.allSatisfy { !$0.contains(signature) && $0.hasSuffix(ProviderToken.signatureMarker) })
    }

    @Test(arguments: ["bearer", "bearer abc", "Basic dXNl", "bearer a.b."])
    func shortValuesThatAreNotJWTsAreKeptAsSent(value: String) {
        #expect(ProviderToken.withoutSignature(value) == value)
    }

    /// Another system's credential sent by mistake is not kept whole in the journal.
    @Test func longerValuesThatAreNotJWTsKeepTheirStartAndLength() {
        #expect(ProviderToken.withoutSignature("Basic dXNlcjpwYXNz") == "Basic dXNl… (12 bytes, not kept: not a JWT)")
        #expect(ProviderToken.withoutSignature("bearer NoDotsSecretValue123") == "bearer NoDo… (20 bytes, not kept: not a JWT)")
        #expect(ProviderToken.withoutSignature("NoSchemeSecretValue") == "NoSc… (19 bytes, not kept: not a JWT)")
    }
}
