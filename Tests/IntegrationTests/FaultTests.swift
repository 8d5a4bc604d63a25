import APNsCore
import Foundation
import HTTP2
import ProviderClient
import Testing
import TestSupport

/// Every fault action, observed with a real HTTP/2 client.
@Suite("Fault injection over the wire")
struct FaultTests {
    func addRule(_ emulator: EmulatorProcess, _ rule: JSONValue) throws -> String {
        let reply = try emulator.admin("POST", "/api/v1/faults", body: rule)
        #expect(reply.status == 201, "\(reply.raw)")
        return reply.json["id"]?.stringValue ?? ""
    }

    /// An emulator whose alert pushes are answered a second late, a device, and a connection
    /// warmed up with a background push (one stream until the provider token is accepted).
    func delayingAlerts() throws -> (EmulatorProcess, token: String, HTTP2ClientConnection, background: APNsPush) {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        _ = try addRule(emulator, ["match": ["pushType": "alert"], "action": ["delayMs": 1000]])
        let connection = try emulator.connect()
        var background = try emulator.push(device.token, payload: #"{"aps":{"content-available":1}}"#)
        background.pushType = "background"
        background.priority = "5"
        #expect(APNsResult(try connection.send(background.request)).status == 200)
        return (emulator, device.token, connection, background)
    }

    /// A reason APNs never sends, or sends with another status, is taken (a rule may mean it)
    /// and said in the answer.
    @Test func aReasonApnsWouldNotSendIsTakenWithAWarning() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        func warnings(_ action: JSONValue) throws -> [String] {
            let reply = try emulator.admin("POST", "/api/v1/faults", body: ["match": [:], "action": action])
            #expect(reply.status == 201, "\(reply.raw)")
            return reply.json["warnings"]?.arrayValue?.compactMap(\.stringValue) ?? []
        }
        #expect(try warnings(["status": 400, "reason": "BadDevicetoken"]).first?.contains("(did you mean BadDeviceToken?)") == true)
        #expect(try warnings(["status": 500, "reason": "BadDeviceToken"]) == ["APNs sends BadDeviceToken with status 400, not 500"])
        #expect(
            try warnings(["status": 400]).first?.hasPrefix(
                "APNs sends InternalServerError with status 500, not 400 (the default for a rule without a reason): give one of Apple's for 400, such as"
            ) == true)
        // The spelling APNs was seen sending in 2025 (`--bad-environment-reason`) is one of its own.
        #expect(try warnings(["status": 403, "reason": "BadEnvironmentKeyInToken"]).isEmpty)
        #expect(try warnings(["status": 410, "reason": "Unregistered"]).isEmpty)
        #expect(try warnings(["rstStream": 7]).isEmpty)
    }

    @Test func statusAndReasonForTheFirstNThenNormal() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        _ = try addRule(
            emulator,
            [
                "match": ["token": .string(device.token)],
                "action": ["status": 500, "reason": "InternalServerError"], "times": 2,
            ])
        let connection = try emulator.connect()
        let results = try (0..<3).map { _ in APNsResult(try connection.send(try emulator.push(device.token).request)) }
        #expect(results.map(\.status) == [500, 500, 200])
        #expect(results[0].reason == "InternalServerError")
        #expect(results[0].response.dataFrameCount == 1)
        let rules = try emulator.admin("GET", "/api/v1/faults").json["faults"]?.arrayValue ?? []
        #expect(rules.first?["fired"]?.intValue == 2)
        #expect(rules.first?["matched"]?.intValue == 3)
        let record = try emulator.admin("GET", "/api/v1/notifications/\(results[0].apnsID!)")
        #expect(record.json["fault"]?.stringValue == rules.first?["id"]?.stringValue)
        // Another token is not matched.
        let other = try emulator.createDevice()
        #expect(APNsResult(try connection.send(try emulator.push(other.token).request)).status == 200)
    }

    /// A rule answering ExpiredProviderToken makes the connection's token expired to it: the
    /// fresh token the client signs then (as pushy and node-apn do) is accepted, not refused as
    /// an update within 20 minutes (TooManyProviderTokenUpdates, which APNs never answers then).
    @Test func aFreshTokenAfterARuleSaidExpiredIsAccepted() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        let now = Int64(Date().timeIntervalSince1970)
        var push = try emulator.push(device.token)
        push.providerToken = try emulator.providerToken(issuedAt: now - 300)
        #expect(APNsResult(try connection.send(push.request)).status == 200)
        _ = try addRule(
            emulator, ["match": ["token": .string(device.token)], "action": ["status": 403, "reason": "ExpiredProviderToken"], "times": 1])
        let expired = APNsResult(try connection.send(push.request))
        #expect(expired.status == 403 && expired.reason == "ExpiredProviderToken")
        push.providerToken = try emulator.providerToken(issuedAt: now)
        let fresh = APNsResult(try connection.send(push.request))
        #expect(fresh.status == 200, "\(fresh.status) \(fresh.reason ?? "")")
    }

    @Test func afterSkipsTheFirstMatches() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        _ = try addRule(emulator, ["match": ["topic": .string(EmulatorProcess.bundleID)], "action": ["unavailable": true], "after": 1])
        let connection = try emulator.connect()
        let results = try (0..<3).map { _ in APNsResult(try connection.send(try emulator.push(device.token).request)) }
        #expect(results.map(\.status) == [200, 503, 503])
        #expect(results[1].reason == "ServiceUnavailable")
    }

    @Test func probabilityWithASeedIsReproducible() throws {
        func pattern() throws -> [Int] {
            let emulator = try EmulatorProcess(inProcess: true)
            let device = try emulator.createDevice()
            _ = try addRule(emulator, ["match": [:], "action": ["status": 500], "probability": 0.5, "seed": 42])
            let connection = try emulator.connect()
            return try (0..<20).map { _ in APNsResult(try connection.send(try emulator.push(device.token).request)).status }
        }
        let first = try pattern()
        let second = try pattern()
        #expect(first == second)
        #expect(first.contains(500) && first.contains(200))
    }

    /// Rules act on pushes: a request APNs refuses as no push (another method, no token) gets
    /// APNs's own answer, not the rule's.
    @Test func rulesActOnPushesOnly() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
        _ = try addRule(emulator, ["match": [:], "action": ["status": 500]])
        var get = try emulator.push(device.token).request
        get.method = "GET"
        get.body = nil
        #expect(APNsResult(try connection.send(get)).reason == "MethodNotAllowed")
        var noToken = try emulator.push(device.token).request
        noToken.path = "/3/device/"
        #expect(APNsResult(try connection.send(noToken)).reason == "MissingDeviceToken")
        for path in ["/3/device/\(device.token)/x", "/3/device/\(device.token)?x=1", "/3/device//"] {
            var badPath = try emulator.push(device.token).request
            badPath.path = path
            #expect(APNsResult(try connection.send(badPath)).reason == "BadPath", "\(path)")
        }
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 500, "a push still gets it")
    }

    /// `jitterMs` alone is a slow but normal answer too: between 0 and the jitter late.
    @Test func jitterAloneDelaysANormalAnswer() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let rule = try emulator.admin("POST", "/api/v1/faults", body: ["match": [:], "action": ["jitterMs": 50]])
        #expect(rule.status == 201, "\(rule.raw)")
        #expect(APNsResult(try emulator.connect().send(try emulator.push(device.token).request)).status == 200)
    }

    /// A delayed answer is held on the wire while the connection goes on: a push sent right
    /// behind the delayed one is answered first.
    @Test func delayHoldsTheAnswerOnTheWire() throws {
        let (emulator, token, connection, background) = try delayingAlerts()
        let delayed = try connection.submit(try emulator.push(token).request)
        let prompt = try connection.submit(background.request)
        try connection.waitFor(streams: [prompt])
        let early = connection.response(for: delayed)
        #expect(early == nil, "the delayed answer came no later than the one sent after it")
        #expect(APNsResult(try #require(connection.response(for: prompt))).status == 200)
        if early == nil { try connection.waitFor(streams: [delayed]) }
        #expect(APNsResult(try #require(early ?? connection.response(for: delayed))).status == 200)
        let rules = try emulator.admin("GET", "/api/v1/faults").json["faults"]?.arrayValue ?? []
        #expect(rules.first?["fired"]?.intValue == 1)
    }

    /// An answer held back (a fault's `delayMs`) that never reaches the client, its stream
    /// reset or its connection closed meanwhile, is said in the push's record: it read as
    /// answered, although the provider, left without an answer, would send the push again.
    @Test(arguments: ["reset", "close"]) func anAnswerHeldBackThatNeverLeavesIsSaidInTheRecord(ending: String) throws {
        let (emulator, token, connection, _) = try delayingAlerts()
        let stream = try connection.submit(try emulator.push(token).request)
        try connection.flushOutput()
        func newest() throws -> JSONValue? { try emulator.notifications(token: token, limit: 1).first }
        #expect(try eventually(5) { try newest()?["pushType"] == "alert" }, "the delayed push was journaled")
        if ending == "reset" { try connection.reset(stream: stream) } else { connection.close() }
        let expected = ending == "reset" ? "reset its stream" : "the connection closed"
        var explanation = ""
        #expect(
            try eventually(5) {
                explanation = try newest()?["explanation"]?.stringValue ?? ""
                return explanation.contains("its answer was never sent") && explanation.contains(expected)
            }, "\(explanation)")
    }

    @Test func rstStreamIsSeenOnTheWireAndTheConnectionLives() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        _ = try addRule(emulator, ["match": ["priority": 5], "action": ["rstStream": 2]])
        let connection = try emulator.connect()
        var low = try emulator.push(device.token)
        low.priority = "5"
        let reset = try connection.send(low.request)
        #expect(reset.resetErrorCode == HTTP2ErrorCode.internalError)
        #expect(reset.status == nil)
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
    }

    @Test func goAwayCarriesReasonAndLastStreamID() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        _ = try addRule(
            emulator,
            [
                "match": ["environment": "sandbox"],
                "action": ["goAway": ["reason": "Shutdown", "lastStreamId": 0, "errorCode": 0]],
            ])
        let connection = try emulator.connect()
        _ = try? connection.send(try emulator.push(device.token).request, timeoutMilliseconds: 2000)
        try connection.pump(timeoutMilliseconds: 2000) { connection.session.goAway != nil }
        let goAway = try #require(connection.session.goAway)
        #expect(goAway.errorCode == 0)
        #expect(goAway.lastStreamID == 0)
        #expect(String(decoding: goAway.debugData, as: UTF8.self) == #"{"reason":"Shutdown"}"#)
    }

    /// A GOAWAY fault keeps the GOAWAY's promise for the streams sent with the faulted one:
    /// above its last stream id they are refused and not processed (safe to send again), at or
    /// below it they are answered before the connection closes. Its own push is refused.
    @Test(arguments: [Optional<Int>.some(1), nil])
    func aGoAwayFaultAnswersWhatItCoversAndProcessesNothingAbove(lastStreamID: Int?) throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
        var goAway = JSONObject([("reason", .string("Shutdown"))])
        if let lastStreamID { goAway["lastStreamId"] = .int(Int64(lastStreamID)) }
        _ = try addRule(emulator, ["match": [:], "action": ["goAway": .object(goAway)], "times": 1])
        let requests = try (0..<4).map { _ in try emulator.push(device.token).request }
        let answers = try connection.send(requests, timeoutMilliseconds: 5000)
        let rest = answers.dropFirst()
        if lastStreamID != nil {
            // Above the last stream id: the client itself closes them as not processed.
            #expect(answers.allSatisfy { $0.status == nil }, "\(answers.map(\.status))")
        } else {
            #expect(answers.first?.resetErrorCode == HTTP2ErrorCode.refusedStream, "the faulted push is refused")
            #expect(rest.allSatisfy { $0.status == 200 }, "covered by the GOAWAY: answered, \(rest.map(\.status))")
        }
        try connection.pump(timeoutMilliseconds: 3000) { connection.isClosed }
        #expect(connection.isClosed, "closed once nothing is owed")
        let delivered = try emulator.notifications().filter { $0["status"] == 200 }.count
        #expect(delivered == (lastStreamID != nil ? 1 : 4), "nothing above the last stream id was processed")
    }

    /// A GOAWAY whose last stream id is past the streams opened so far covers streams the
    /// client has yet to send: those sent one by one after the rule fired are answered, then it
    /// goes (sent at once, nghttp2 dropped them unanswered under a GOAWAY that claimed them).
    /// An even last stream id, which no client opens, is refused.
    @Test func aGoAwayFaultCoveringStreamsNotSentYetAnswersThem() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let even = try emulator.admin(
            "POST", "/api/v1/faults", body: ["match": [:], "action": ["goAway": ["reason": "Shutdown", "lastStreamId": 2]]])
        #expect(even.status == 400 && even.raw.contains("must be 0 or odd"), "\(even.raw)")
        let connection = try emulator.connect()
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
        _ = try addRule(emulator, ["match": [:], "action": ["goAway": ["reason": "Shutdown", "lastStreamId": 99]], "times": 1])
        func answer(_ stream: Int32) throws -> HTTP2Response? {
            var got: HTTP2Response?
            try connection.pump(timeoutMilliseconds: 3000) {
                got = got ?? connection.response(for: stream)
                return got != nil
            }
            return got
        }
        let faulted = try connection.submit(try emulator.push(device.token).request)
        #expect(try answer(faulted)?.resetErrorCode == HTTP2ErrorCode.refusedStream, "the push it fired on is refused")
        for _ in 0..<2 {
            let stream = try connection.submit(try emulator.push(device.token).request)
            #expect(try answer(stream).map { APNsResult($0).status } == 200, "stream \(stream), sent after, is covered and answered")
        }
        try connection.pump(timeoutMilliseconds: 4000) { connection.isClosed }
        #expect(connection.session.goAway?.lastStreamID == 99)
        #expect(try emulator.notifications().filter { $0["status"] == 200 }.count == 3)
    }

    /// The streams a `goAway` rule's GOAWAY covers are answered before it goes out: python-h2
    /// (httpx, aioapns, kalyke-apns) takes no frame after a GOAWAY, and read the answers sent
    /// after it as a protocol error, so their pushes, delivered, were reported failed.
    @Test(PythonH2.installed) func pythonH2ReadsEveryAnswerAGoAwayRuleCovers() throws {
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"])
        let device = try emulator.createDevice()
        _ = try addRule(emulator, ["match": [:], "action": ["goAway": ["reason": "Shutdown"]], "after": 1, "times": 1])
        let seen = try PythonH2.answerOrder(emulator, token: device.token, count: 5)
        #expect(seen == ["answer 200", "reset 7"] + Array(repeating: "answer 200", count: 4) + ["goaway", "eof"], "\(seen)")
        #expect(try emulator.notifications().filter { $0["status"] == 200 }.count == 5)
    }

    /// The pushes sent after the one a `close` rule ends the connection at are not processed:
    /// a provider retrying them sends no duplicate.
    @Test func nothingAfterACloseFaultIsProcessed() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
        _ = try addRule(emulator, ["match": [:], "action": ["close": true], "after": 1, "times": 1])
        let streams = try (0..<5).map { _ in try connection.submit(try emulator.push(device.token).request) }
        try? connection.pump(timeoutMilliseconds: 3000) { connection.isClosed }
        #expect(connection.isClosed)
        #expect(connection.response(for: streams[0]).map { APNsResult($0).status } == 200, "the one before it is answered before the drop")
        let notProcessed = "closed the connection at an earlier stream"
        #expect(
            try eventually {
                try emulator.notifications().filter { $0["explanation"]?.stringValue?.contains(notProcessed) == true }.count == 3
            }, "the three after it are journaled as not processed")
        #expect(try emulator.notifications().filter { $0["status"] == 200 }.count == 2, "only the pushes before the rule's")
    }

    /// Rules from `--faults` hold from the very first push (it escaped them: the fast path
    /// that skips fault matching learned of the rules only at the first change).
    @Test func rulesFromAFileHoldForTheFirstPush() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("faults-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        try #"[{"id":"all","match":{},"action":{"status":500}}]"#.write(toFile: file, atomically: true, encoding: .utf8)
        // The demo device: no change is made before the push (a change would tell the fast path).
        let emulator = try EmulatorProcess(["--faults", file, "--demo", "on"], withKey: false)
        let device = try emulator.admin("GET", "/api/v1/devices/demo-iphone").json
        let token = try #require(device["apps"]?.arrayValue?.first?["token"]?.stringValue)
        let key = ProviderSigningKey(
            teamID: "DEMOTEAM00", keyID: "DEMOKEY000",
            privateKey: try ES256PrivateKey(pem: String(contentsOfFile: emulator.directory + "/certs/demo-AuthKey_DEMOKEY000.p8", encoding: .utf8)))
        var push = try emulator.push(token)
        push.providerToken = try key.token(issuedAt: Int64(Date().timeIntervalSince1970))
        #expect(APNsResult(try emulator.connect().send(push.request)).status == 500)
    }

    @Test func closeConnectionDropsTheSocket() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        _ = try addRule(emulator, ["match": ["token": .string(device.token)], "action": ["close": true], "times": 1])
        let connection = try emulator.connect()
        #expect(throws: (any Error).self) { _ = try connection.send(try emulator.push(device.token).request, timeoutMilliseconds: 3000) }
        #expect(connection.isClosed)
        #expect(connection.session.goAway == nil, "closed without a GOAWAY")
        #expect(APNsResult(try emulator.connect().send(try emulator.push(device.token).request)).status == 200)
    }

    @Test func maxConcurrentStreamsIsLoweredBySettings() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        _ = try connection.send(try emulator.push(device.token).request)
        try connection.pump(timeoutMilliseconds: 2000) { connection.session.remoteMaxConcurrentStreams == 1000 }
        _ = try addRule(emulator, ["match": [:], "action": ["maxConcurrentStreams": 1], "times": 1])
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
        try connection.pump(timeoutMilliseconds: 2000) { connection.session.remoteMaxConcurrentStreams == 1 }
        #expect(connection.session.remoteMaxConcurrentStreams == 1)

        // On a connection's first request, the raise that follows a first valid token does not
        // undo the rule's limit.
        _ = try addRule(emulator, ["match": [:], "action": ["maxConcurrentStreams": 2], "times": 1])
        let fresh = try emulator.connect()
        #expect(APNsResult(try fresh.send(try emulator.push(device.token).request)).status == 200)
        #expect(APNsResult(try fresh.send(try emulator.push(device.token).request)).status == 200)
        try? fresh.pump(timeoutMilliseconds: 500) { fresh.session.remoteMaxConcurrentStreams == 1000 }
        #expect(fresh.session.remoteMaxConcurrentStreams == 2)
    }

    @Test func rulesAreOrderedAndCanBeRemoved() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let first = try addRule(emulator, ["match": ["token": .string(device.token)], "action": ["status": 429, "reason": "TooManyRequests"]])
        _ = try addRule(emulator, ["match": [:], "action": ["status": 500]])
        let connection = try emulator.connect()
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).reason == "TooManyRequests")
        #expect(try emulator.admin("DELETE", "/api/v1/faults/\(first)").status == 200)
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).reason == "InternalServerError")
        #expect(try emulator.admin("DELETE", "/api/v1/faults").status == 200)
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
        #expect(try emulator.admin("DELETE", "/api/v1/faults/nope").status == 404)
        #expect(try emulator.admin("POST", "/api/v1/faults", body: ["match": [:], "action": [:]]).status == 400)
        #expect(try emulator.admin("POST", "/api/v1/faults", body: ["action": ["status": 500], "times": 0]).status == 400)
    }

    /// A rule's `/metrics` series lives as long as the rule: a suite adding and deleting a rule per
    /// test does not grow the metrics for good.
    @Test func aDeletedRuleTakesItsMetricSeriesWithIt() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        for n in 0..<3 {
            #expect(try emulator.admin("POST", "/api/v1/faults", body: ["id": .string("churn\(n)"), "action": ["status": 500]]).status == 201)
            #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 500)
            #expect(try emulator.metric("apns_emulator_fault_rules_fired_total", labels: #"rule="churn\#(n)""#) == 1)
            #expect(try emulator.admin("DELETE", "/api/v1/faults/churn\(n)").status == 200)
        }
        #expect(try !emulator.admin("GET", "/metrics").raw.contains("apns_emulator_fault_rules_fired_total{"))
    }

    @Test func ruleIDsAreUnique() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        #expect(try addRule(emulator, ["action": ["status": 500]]) == "f1")
        #expect(try addRule(emulator, ["id": "f2", "action": ["status": 503]]) == "f2")
        // The next id given skips the one a client chose.
        #expect(try addRule(emulator, ["action": ["status": 429]]) == "f3")
        let taken = try emulator.admin("POST", "/api/v1/faults", body: ["id": "f2", "action": ["status": 410]])
        #expect(taken.status == 409)
        #expect(taken.json["error"]?.stringValue?.contains("a fault rule with id \"f2\" exists already") == true, "\(taken.raw)")
        #expect(try emulator.admin("GET", "/api/v1/faults/f2").json["action"]?["status"] == 503)
        #expect(try emulator.admin("GET", "/api/v1/faults").json["faults"]?.arrayValue?.count == 3)

        // A file naming one id twice does not start; one without an id is numbered around the named ones.
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("faults-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try #"[{"id": "slow", "action": {"delayMs": 10}}, {"id": "slow", "action": {"status": 500}}]"#
            .write(toFile: path, atomically: true, encoding: .utf8)
        let duplicated = try run(EmulatorProcess.binary, ["serve", "--quiet", "--faults", path])
        #expect(duplicated.status == 2)
        #expect(duplicated.err.contains("rule 2 in \(path): id \"slow\" is rule 1's already"), "\(duplicated.err)")
        try #"[{"action": {"status": 500}}, {"id": "f1", "action": {"status": 503}}]"#.write(toFile: path, atomically: true, encoding: .utf8)
        let numbered = try EmulatorProcess(["--faults", path], inProcess: true)
        let ids = try numbered.admin("GET", "/api/v1/faults").json["faults"]?.arrayValue?.compactMap { $0["id"]?.stringValue }
        #expect(ids == ["f2", "f1"])
    }

    @Test func positionMustBeAPlaceInTheList() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        _ = try addRule(emulator, ["action": ["status": 500]])
        _ = try addRule(emulator, ["action": ["status": 503]])
        for position in ["-1", "abc", "3", "99999", ""] {
            let reply = try emulator.admin("POST", "/api/v1/faults?position=\(position)", body: ["action": ["status": 429]])
            #expect(reply.status == 400, "\(position)")
            let message = reply.json["error"]?.stringValue ?? ""
            #expect(message == "position must be a whole number from 0 to 2, not '\(position)' (0 is first, 2 after the last rule)", "\(message)")
        }
        #expect(try emulator.admin("GET", "/api/v1/faults").json["faults"]?.arrayValue?.count == 2)
        #expect(try addRule(emulator, ["id": "last", "action": ["status": 410]]) == "last")
        let first = try emulator.admin("POST", "/api/v1/faults?position=0", body: ["id": "first", "action": ["status": 429]])
        #expect(first.status == 201)
        let ids = try emulator.admin("GET", "/api/v1/faults").json["faults"]?.arrayValue?.compactMap { $0["id"]?.stringValue }
        #expect(ids == ["first", "f1", "f2", "last"])
    }

    /// Every push is matched against the rules in order: their number is bounded, through the
    /// admin API (507, nothing added) and in a --faults file (refused at start).
    @Test func theRulesAreBounded() throws {
        // One list of 1,000 in a --faults file is taken; the API then adds none.
        let rules = (0..<FaultRules.maxRules).map {
            #"{"match": {"token": "\#(String(repeating: "0", count: 60))\#(String(format: "%04d", $0))"}, "action": {"status": 500}}"#
        }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("faults-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try "[\(rules.joined(separator: ","))]".write(toFile: path, atomically: true, encoding: .utf8)
        let full = try EmulatorProcess(["--faults", path], inProcess: true)
        let refused = try full.admin("POST", "/api/v1/faults", body: ["action": ["status": 429]])
        #expect(refused.status == 507)
        #expect(refused.json["error"]?.stringValue?.contains("there are 1000 fault rules, as many as the emulator keeps") == true, "\(refused.raw)")
        #expect(try full.admin("GET", "/api/v1/faults?limit=10000").json["faults"]?.arrayValue?.count == FaultRules.maxRules)
        // One more in the file is refused at start, naming the bound.
        try "[\((rules + [rules[0]]).joined(separator: ","))]".write(toFile: path, atomically: true, encoding: .utf8)
        let tooMany = try run(EmulatorProcess.binary, ["serve", "--quiet", "--faults", path])
        #expect(tooMany.status == 2 && tooMany.err.contains("holds 1001 fault rules; the emulator keeps at most 1000"), "\(tooMany.err)")
    }

    @Test func faultsFileAndResetBringTheConfiguredRulesBack() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("faults-\(UUID().uuidString).json").path
        try #"[{"match": {"pushType": "voip"}, "action": {"status": 500, "reason": "InternalServerError"}}]"#
            .write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let emulator = try EmulatorProcess(["--faults", path], inProcess: true)
        #expect(try emulator.admin("GET", "/api/v1/faults").json["faults"]?.arrayValue?.count == 1)
        _ = try emulator.admin("DELETE", "/api/v1/faults")
        _ = try emulator.admin("POST", "/api/v1/faults", body: ["action": ["status": 503]])
        _ = try emulator.admin("POST", "/api/v1/reset")
        let after = try emulator.admin("GET", "/api/v1/faults").json["faults"]?.arrayValue ?? []
        #expect(after.count == 1)
        #expect(after.first?["match"]?["pushType"] == "voip")
        let bad = try run(EmulatorProcess.binary, ["serve", "--quiet", "--faults", "/nope.json"])
        #expect(bad.status != 0)
        #expect(bad.err.contains("--faults"))
    }
}
