// ConformanceTests: the catalogue as data (it parses, agrees with docs/apns-behaviour.md, is
// refused when it says something the tool does not do) and the requests its cases become.
// Running it against a server is in IntegrationTests/ConformanceCommandTests.
import Conformance
import Foundation
import JSON
import OpenSSLCrypto
import ProviderClient
import Testing
import TestSupport

@Suite struct CatalogueTests {
    static func behaviourPage() throws -> String {
        try String(contentsOfFile: PackageRoot.path + "/docs/apns-behaviour.md", encoding: .utf8)
    }

    /// The reasons each stage of the page's check-order table answers with.
    static func checkOrderReasons() throws -> [Int: Set<String>] {
        let page = try behaviourPage()
        guard let start = page.range(of: "## 3. Check order"), let end = page.range(of: "## 4.", range: start.upperBound..<page.endIndex) else {
            throw HarnessFailure("docs/apns-behaviour.md has no check-order section")
        }
        var stages: [Int: Set<String>] = [:]
        for line in page[start.upperBound..<end.lowerBound].split(separator: "\n") where line.hasPrefix("| ") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 4, let dot = cells[1].firstIndex(of: "."), let stage = Int(cells[1][..<dot]) else { continue }
            let answers = cells[cells.count - 2]
            stages[stage] = Set(answers.split(separator: "`").enumerated().filter { $0.offset % 2 == 1 }.map { String($0.element) })
        }
        return stages
    }

    /// The reasons each step of §14a's check order (channel management and broadcasts) names:
    /// the upper-case words in backticks of each numbered line. Step 5's "JWT reasons" are the
    /// device check order's credential ones.
    static func channelCheckOrderReasons() throws -> [Int: Set<String>] {
        let page = try behaviourPage()
        guard let section = page.range(of: "## 14a. Broadcast channels"),
            let start = page.range(of: "**Check order**", range: section.upperBound..<page.endIndex),
            let end = page.range(of: "**Leniencies", range: start.upperBound..<page.endIndex)
        else { throw HarnessFailure("docs/apns-behaviour.md has no check order in §14a") }
        var steps: [Int: Set<String>] = [:]
        var step = 0
        for line in page[start.upperBound..<end.lowerBound].split(separator: "\n") {
            if let dot = line.firstIndex(of: "."), let number = Int(line[..<dot]) { step = number }
            guard step > 0 else { continue }
            let quoted = line.split(separator: "`", omittingEmptySubsequences: false).enumerated().filter { $0.offset % 2 == 1 }.map(\.element)
            let reasons = quoted.filter { word in word.first?.isUppercase == true && word.allSatisfy { $0.isLetter } }.map(String.init)
            steps[step, default: []].formUnion(reasons)
        }
        steps[5, default: []].formUnion(try checkOrderReasons()[4] ?? [])
        return steps
    }

    /// The same drift test for §14a: every reason of its check order has a case of the channel
    /// or broadcast endpoints at that step (or is not covered, with why), and every such case
    /// expects a reason its step names (a success at step 12, after the last).
    @Test func theCatalogueAndTheChannelCheckOrderAgree() throws {
        let catalogue = try ConformanceCatalogue.builtIn()
        let steps = try Self.channelCheckOrderReasons()
        #expect(Set(steps.keys) == Set(1...11), "§14a's check order has steps \(steps.keys.sorted())")
        let notCovered = Set(catalogue.notCovered.map(\.reason))
        let endpointCases = catalogue.cases.filter { $0.request.endpoint != nil }
        for item in endpointCases {
            if let reason = item.expect.reason {
                #expect(steps[item.stage]?.contains(reason) == true, "case \(item.id) expects \(reason) at §14a step \(item.stage)")
            } else {
                #expect(item.stage == 12, "case \(item.id) expects \(item.expect.status) at §14a step \(item.stage)")
            }
        }
        for (step, reasons) in steps {
            for reason in reasons {
                let covered = endpointCases.contains { $0.stage == step && $0.expect.reason == reason }
                // Step 5 names the credential reasons in general; one case shows the step is there.
                let stepCovered = step == 5 && endpointCases.contains { $0.stage == 5 }
                #expect(
                    covered || stepCovered || notCovered.contains(reason),
                    "§14a step \(step)'s \(reason) has no case and is not listed as not covered")
            }
        }
        // Live Activity and VoIP pushes: their topic and the 5,120-byte VoIP limit.
        for id in ["liveactivity-topic", "liveactivity-to-the-app-topic", "voip-payload-at-limit", "voip-payload-too-large"] {
            #expect(catalogue.case(id) != nil, "no case \(id)")
        }
    }

    @Test func theBuiltInCatalogueIsTheRepositorysFileAndParses() throws {
        let file = try ConformanceCatalogue.parse(Array(try Data(contentsOf: URL(fileURLWithPath: PackageRoot.path + "/conformance/catalogue.json"))))
        let builtIn = try ConformanceCatalogue.builtIn()
        #expect(builtIn.cases.map(\.id) == file.cases.map(\.id))
        #expect(builtIn.cases.count >= 50)
    }

    /// The drift test: every reason the check-order table lists for a stage is the expectation of
    /// a case of that stage (or listed as not covered, with why), and every case expects a reason
    /// its stage's row lists (200 for stage 9).
    @Test func theCatalogueAndTheCheckOrderTableAgree() throws {
        let catalogue = try ConformanceCatalogue.builtIn()
        let table = try Self.checkOrderReasons()
        #expect(Set(table.keys).isSuperset(of: 1...9), "the table has stages \(table.keys.sorted())")
        let notCovered = Set(catalogue.notCovered.map(\.reason))
        // Connection cases judge SETTINGS (docs/apns-behaviour.md §2), not a stage of the check order.
        for item in catalogue.cases where item.settings == nil && item.request.endpoint == nil {
            if let reason = item.expect.reason {
                #expect(
                    table[item.stage]?.contains(reason) == true,
                    "case \(item.id) expects \(reason) at stage \(item.stage); the table's row lists \(table[item.stage]?.sorted() ?? [])")
            } else {
                #expect(item.stage == 9, "case \(item.id) expects 200 at stage \(item.stage)")
            }
        }
        for stage in 1...8 {
            for reason in table[stage] ?? [] {
                let covered = catalogue.cases.contains { $0.stage == stage && $0.expect.reason == reason && $0.request.endpoint == nil }
                #expect(covered || notCovered.contains(reason), "stage \(stage)'s \(reason) has no case and is not listed as not covered")
            }
        }
        let channelSteps = try Self.channelCheckOrderReasons()
        for reason in notCovered {
            #expect(
                table.values.contains { $0.contains(reason) } || channelSteps.values.contains { $0.contains(reason) },
                "notCovered lists \(reason), which neither check order does")
        }
    }

    /// Evidence keys name sources the page lists, and a case that rests on a choice says it is unconfirmed.
    @Test func evidenceNamesThePagesSourcesAndChoicesAreUnconfirmed() throws {
        let page = try Self.behaviourPage()
        let sources = page.components(separatedBy: "## 16. Sources").last ?? ""
        for item in try ConformanceCatalogue.builtIn().cases {
            #expect(["doc", "seen", "lib", "chosen"].contains { item.evidence.hasPrefix($0) }, "case \(item.id): evidence \(item.evidence)")
            for key in item.evidence.split(whereSeparator: { !$0.isLetter && !$0.isNumber }) where key.count >= 2 {
                guard let first = key.first, "DOF".contains(first), key.dropFirst().allSatisfy(\.isNumber) else { continue }
                #expect(sources.contains("**\(key)**"), "case \(item.id) cites \(key), which the page's sources do not list")
            }
            if item.evidence.contains("chosen") { #expect(item.unconfirmed, "case \(item.id) rests on a choice but is not unconfirmed") }
        }
        // Apple documents the reason but not that a negative date earns it, and that location
        // pushes are token-only but not the reason a certificate connection gets.
        for id in ["bad-expiration", "certificate-location"] {
            let item = try #require(try ConformanceCatalogue.builtIn().case(id))
            #expect(item.unconfirmed && item.evidence.contains("chosen"), "\(id): \(item.evidence)")
        }
    }

    @Test func aCatalogueThatSaysWhatTheToolDoesNotDoIsRefused() throws {
        func refusal(_ cases: String) -> String {
            let text = """
                {"version": 1, "defaults": {"method": "POST", "path": "/3/device/{device-token}", "headers": [["apns-topic", "{topic}"]], "body": "{}"},
                 "cases": [\(cases)]}
                """
            do {
                _ = try ConformanceCatalogue.parse(Array(text.utf8))
                return "accepted"
            } catch { return error.description }
        }
        let good =
            #"{"id": "a", "title": "t", "stage": 9, "evidence": "doc D1", "unconfirmed": false, "needs": ["device-token"], "expect": {"status": 200}}"#
        #expect(refusal(good) == "accepted")
        #expect(
            refusal(good.replacingOccurrences(of: #""needs": ["device-token"]"#, with: #""needs": []"#)).contains(
                "needs says [] but its request uses [device-token]"))
        #expect(refusal(good.replacingOccurrences(of: #""title""#, with: #""titel""#)).contains("unknown field titel"))
        #expect(refusal(good + "," + good).contains("case a appears twice"))
        #expect(refusal(good.replacingOccurrences(of: #"{"status": 200}"#, with: #"{"status": 400}"#)).contains("an error has one"))
        #expect(refusal(good.replacingOccurrences(of: #""stage": 9"#, with: #""stage": 12"#)).contains("not 1 to 9"))
        let auth = good.replacingOccurrences(of: #""expect""#, with: #""request": {"auth": "magic"}, "expect""#)
        #expect(refusal(auth).contains("auth magic is not one of"))
    }
}

@Suite struct CasePlanningTests {
    static func planner(deviceToken: String? = "ab12") throws -> CasePlanner {
        let key = ProviderSigningKey(teamID: "TEAM123456", keyID: "KEY1234567", privateKey: try ES256PrivateKey.generate())
        var inputs = RunInputs(
            topic: "com.example.app", environment: .sandbox, key: key, unknownToken: String(repeating: "0f", count: 32), now: 1_796_000_000)
        inputs.deviceToken = deviceToken
        return try CasePlanner(catalogue: try ConformanceCatalogue.builtIn(), inputs: inputs)
    }

    static func header(_ planned: PlannedCase, _ name: String) -> [String] {
        planned.main.request.headers.filter { $0.name == name }.map(\.value)
    }

    @Test func casesWithTheRunsTokenShareOneConnectionAndOneToken() throws {
        let planner = try Self.planner()
        var tokens = Set<String>()
        for item in planner.catalogue.cases where item.request.auth == .valid && item.request.before == nil && item.settings == nil {
            let planned = try planner.plan(item)
            guard case .shared = planned.connection else {
                Issue.record("\(item.id) does not use the shared connection")
                continue
            }
            tokens.formUnion(Self.header(planned, "authorization"))
        }
        #expect(tokens == ["bearer " + planner.runToken])
        // Other credentials never ride on it.
        for id in ["jwt-expired", "bearer-capitalised", "token-update-within-20-minutes"] {
            let planned = try planner.plan(try #require(planner.catalogue.case(id)))
            guard case .own = planned.connection else { throw HarnessFailure("\(id) shares the run's connection") }
        }
    }

    /// No connection sees a second provider token (APNs answers 429 TooManyProviderTokenUpdates
    /// to a new token within 20 minutes), except the one case that tests exactly that, which
    /// needs --allow-token-update. A second key of the team gets a connection of its own.
    @Test func noConnectionChangesItsTokenUnlessAllowed() throws {
        var planner = try Self.planner()
        let secondKey = ProviderSigningKey(teamID: "TEAM123456", keyID: "KEY2222222", privateKey: try ES256PrivateKey.generate())
        var inputs = planner.inputs
        inputs.secondKey = secondKey
        inputs.otherEnvironmentKey = ProviderSigningKey(teamID: "TEAM123456", keyID: "KEY3333333", privateKey: try ES256PrivateKey.generate())
        planner = try CasePlanner(catalogue: planner.catalogue, inputs: inputs)
        for item in planner.catalogue.cases where !item.needs.contains(.tokenUpdate) && !item.needs.contains(.certificate) {
            let planned = try planner.plan(item)
            if let before = planned.before {
                let first = before.request.headers.filter { $0.name == "authorization" }.map(\.value)
                #expect(first == Self.header(planned, "authorization"), "\(item.id) sends two provider tokens on one connection")
            }
            if case .shared = planned.connection {
                #expect(Self.header(planned, "authorization") == ["bearer " + planner.runToken], "\(item.id)")
            }
        }
        let second = try planner.plan(try #require(planner.catalogue.case("second-key-of-the-team")))
        #expect(second.before == nil && second.connection == .own(.sandbox))
    }

    /// The stream-limit case's request is one APNs accepts (a rejected one may set the limit to
    /// 1): the run's device token, sent as the other accepted cases are.
    @Test func theStreamLimitCaseSendsAnAcceptedRequest() throws {
        let planner = try Self.planner()
        let item = try #require(planner.catalogue.case("stream-limit-after-the-first-token"))
        let planned = try planner.plan(item)
        #expect(planned.main.request.path == "/3/device/ab12")
        #expect(Self.header(planned, "apns-push-type") == ["background"])
        #expect(Self.header(planned, "apns-priority") == ["5"])
        #expect(Self.header(planned, "apns-expiration") == ["0"])
        #expect(Self.header(planned, "authorization") == ["bearer " + planner.runToken])
        let withoutToken = try Self.planner(deviceToken: nil)
        #expect(withoutToken.inputs.whySkipped(item) == "needs device-token (--token)")
    }

    @Test func requestsAreTheDefaultsWithTheCasesChanges() throws {
        let planner = try Self.planner()
        let priority = try planner.plan(try #require(planner.catalogue.case("bad-priority")))
        #expect(Self.header(priority, "apns-priority") == ["7"])
        #expect(Self.header(priority, "apns-topic") == ["com.example.app"])
        #expect(priority.main.request.path == "/3/device/" + String(repeating: "0f", count: 32))
        #expect(priority.main.request.authority == "api.sandbox.push.apple.com")
        let duplicate = try planner.plan(try #require(planner.catalogue.case("duplicate-header")))
        #expect(Self.header(duplicate, "apns-priority") == ["5", "5"])
        let noTopic = try planner.plan(try #require(planner.catalogue.case("missing-topic")))
        #expect(Self.header(noTopic, "apns-topic").isEmpty)
        let upper = try planner.plan(try #require(planner.catalogue.case("device-token-upper-case")))
        #expect(upper.main.request.path == "/3/device/AB12")
        let other = try planner.plan(try #require(planner.catalogue.case("device-token-other-environment")))
        #expect(other.connection == .shared(.production) && other.main.request.authority == "api.push.apple.com")
        let empty = try planner.plan(try #require(planner.catalogue.case("payload-empty")))
        #expect(empty.main.request.body == nil)
        for (id, size) in [("payload-at-limit", 4096), ("payload-too-large", 4097)] {
            let item = try #require(planner.catalogue.case(id))
            let body = try #require(try planner.plan(item).main.request.body)
            #expect(body.count == size)
            #expect(try JSONValue.parse(body).objectValue != nil)
        }
    }

    @Test func tokenVariantsSayWhatTheyClaim() throws {
        let planner = try Self.planner()
        func claims(_ id: String) throws -> JSONValue {
            let planned = try planner.plan(try #require(planner.catalogue.case(id)))
            let value = try #require(Self.header(planned, "authorization").first)
            let parts = value.split(separator: " ").last!.split(separator: ".", omittingEmptySubsequences: false)
            var text = String(parts[1]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            while text.count % 4 != 0 { text += "=" }
            return try JSONValue.parse(Array(try #require(Data(base64Encoded: text))))
        }
        #expect(try claims("jwt-expired")["iat"]?.intValue == 1_796_000_000 - 7200)
        #expect(try claims("jwt-iat-milliseconds")["iat"]?.intValue == 1_796_000_000_000)
        #expect(try claims("iat-string")["iat"]?.stringValue == "1796000000")
        #expect(try claims("iat-fractional")["iat"]?.numberValue == 1_796_000_000.25)
        #expect(try claims("jwt-wrong-team")["iss"]?.stringValue == "0000000000")
        // A needed input that is missing is a skip, not a request.
        let withoutToken = try Self.planner(deviceToken: nil)
        #expect(withoutToken.inputs.whySkipped(try #require(withoutToken.catalogue.case("accepted"))) == "needs device-token (--token)")
    }
}

@Suite struct ConnectionCaseTests {
    /// The server's SETTINGS frames, as a connection case sees them: the first frame before the
    /// request, every frame applied in order after it; a value other than the catalogue's differs.
    @Test func settingsAreJudgedFirstFrameAndAfterTheRequest() throws {
        let planner = try CasePlanningTests.planner()
        let first = try planner.plan(try #require(planner.catalogue.case("server-settings")))
        let raised = try planner.plan(try #require(planner.catalogue.case("stream-limit-after-the-first-token")))
        guard case .own = first.connection, case .own = raised.connection else { throw HarnessFailure("a connection case shares a connection") }
        let apple: [[(id: Int32, value: UInt32)]] = [[(1, 4096), (3, 1), (4, 65535), (5, 16384), (6, 8000)], [(3, 1000)]]
        let seen = ObservedSettings(frames: apple, firstCount: 1)
        #expect(seen.first[.maxConcurrentStreams] == 1 && seen.afterFirstRequest[.maxConcurrentStreams] == 1000)
        #expect(Judge.judge(first, seen: Observation(status: 400, settings: seen)).verdict == .pass)
        #expect(Judge.judge(raised, seen: Observation(status: 400, settings: seen)).verdict == .pass)
        // A server that never raises the limit, or starts at 100.
        let never = Judge.judge(raised, seen: Observation(status: 400, settings: ObservedSettings(frames: [apple[0]], firstCount: 1)))
        #expect(never.verdict == .differs)
        #expect(never.why == "after the first request MAX_CONCURRENT_STREAMS 1, expected 1000")
        let hundred = ObservedSettings(frames: [[(1, 4096), (3, 100), (4, 65535), (5, 16384), (6, 8000)]], firstCount: 1)
        #expect(Judge.judge(first, seen: Observation(status: 400, settings: hundred)).why == "first SETTINGS MAX_CONCURRENT_STREAMS 100, expected 1")
        // No SETTINGS at all is no answer.
        #expect(Judge.judge(first, seen: Observation(status: nil, unanswered: "closed")).verdict == .noAnswer)
        // Recorded and read back; a replay compares only the parameters the case looks at.
        var result = Judge.judge(raised, seen: Observation(status: 400, settings: seen))
        let recording = Recording(target: "t", environment: .sandbox, recordedAt: "now", tool: "test", results: [result])
        let answer = try #require(try Recording.parse(Array(recording.json.serialized().utf8)).answers.first)
        #expect(answer.settings == seen)
        #expect(Replay.compare(answer, raised, seen: Observation(status: 400, settings: seen)).verdict == .pass)
        result = Replay.compare(
            answer, raised, seen: Observation(status: 400, settings: ObservedSettings(frames: [apple[0], [(3, 500)]], firstCount: 1)))
        #expect(result.verdict == .differs)
    }
}

extension ConnectionCaseTests {
    /// A parameter the server leaves out of its SETTINGS keeps its RFC 9113 initial value: APNs
    /// at times sends no INITIAL_WINDOW_SIZE, which is 65535 all the same. The line says it was
    /// not sent; one whose default is not the expected value still differs.
    @Test func aParameterNotSentIsJudgedByItsDefault() throws {
        let planner = try CasePlanningTests.planner()
        let first = try planner.plan(try #require(planner.catalogue.case("server-settings")))
        let withoutWindow = ObservedSettings(frames: [[(1, 4096), (3, 1), (5, 16384), (6, 8000)]], firstCount: 1)
        let judged = Judge.judge(first, seen: Observation(status: 200, settings: withoutWindow))
        #expect(judged.verdict == .pass, "\(judged.why ?? "")")
        let seen = ConformanceReport.seenText(judged)
        #expect(seen.contains("INITIAL_WINDOW_SIZE 65535 (not sent: the default)"), "\(seen)")
        // Only MAX_CONCURRENT_STREAMS and INITIAL_WINDOW_SIZE sent: the others' defaults agree, but
        // MAX_HEADER_LIST_SIZE is unlimited unless sent, not 8000.
        let sparse = ObservedSettings(frames: [[(3, 1), (4, 65535)]], firstCount: 1)
        let differs = Judge.judge(first, seen: Observation(status: 200, settings: sparse))
        #expect(differs.why == "first SETTINGS MAX_HEADER_LIST_SIZE unlimited (not sent: the default), expected 8000")
        // A replay compares values in force: recorded without the parameter, seen with it.
        let full = ObservedSettings(frames: [[(1, 4096), (3, 1), (4, 65535), (5, 16384), (6, 8000)]], firstCount: 1)
        let recording = Recording(target: "t", environment: .sandbox, recordedAt: "now", tool: "test", results: [judged])
        let answer = try #require(try Recording.parse(Array(recording.json.serialized().utf8)).answers.first)
        #expect(Replay.compare(answer, first, seen: Observation(status: 200, settings: full)).verdict == .pass)
        #expect(Replay.compare(answer, first, seen: Observation(status: 200, settings: sparse)).verdict == .differs)
    }
}

@Suite struct RecordingTests {
    @Test func aRecordingReadsBackAsWritten() throws {
        let planner = try CasePlanningTests.planner()
        let item = try #require(planner.catalogue.case("accepted"))
        let planned = try planner.plan(item)
        let seen = Observation(status: 200, apnsID: "5E3D6A1B-7C2F-4D8E-9A0B-1C2D3E4F5A6B", uniqueID: "u")
        let result = Judge.judge(planned, seen: seen)
        #expect(result.verdict == .pass)
        let recording = Recording(target: "t:1", environment: .sandbox, recordedAt: "now", tool: "test", results: [result])
        let read = try Recording.parse(Array(recording.json.serialized().utf8))
        #expect(read.answers == recording.answers)
        #expect(read.answers.first?.checks == ["apns-id-present": true, "unique-id-on-sandbox-only": true])
        // The same answer again is the same; one with no apns-unique-id now differs by that check.
        #expect(Replay.compare(read.answers[0], planned, seen: seen).verdict == .pass)
        let changed = Replay.compare(read.answers[0], planned, seen: Observation(status: 200, apnsID: "x"))
        #expect(changed.verdict == .differs)
        #expect(changed.why?.hasPrefix("unique-id-on-sandbox-only") == true)
    }
}

struct HarnessFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
