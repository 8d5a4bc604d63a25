@testable import APNsCore
import Testing

@Suite("Encodings and JSON")
struct CoreTypesTests {
    @Test func base64URLRoundTrip() {
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 * 37 + 11) }
            #expect(Base64URL.decode(Array(Base64URL.encode(bytes).utf8)) == bytes)
        }
        #expect(Base64URL.decode(Array("a$b".utf8)) == nil)
        #expect(Base64URL.decode(Array("YQ==".utf8)) == [0x61])
    }

    @Test(arguments: [
        ("{}", JSONValidator.Verdict.object), (#"{"aps":{"alert":"hi","badge":1}}"#, .object),
        (#" { "a" : [1, 2.5e3, -0, true, false, null, "\u00e9\n"] } "#, .object),
        ("[]", .notAnObject), ("\"x\"", .notAnObject), ("12", .notAnObject),
    ])
    func validJSON(text: String, verdict: JSONValidator.Verdict) {
        #expect(JSONValidator.check(Array(text.utf8)) == verdict)
    }

    @Test(arguments: [
        "", "{", "{\"a\":}", "{\"a\":1,}", "{a:1}", "{\"a\":01}", "{\"a\":\"\u{01}\"}",
        "{\"a\":1} x", "{\"a\":tru}", "{\"a\":\"\\x\"}", "{\"a\":1.}",
    ])
    func invalidJSON(text: String) {
        guard case .invalid = JSONValidator.check(Array(text.utf8)) else {
            Issue.record("\(text) should be invalid")
            return
        }
        #expect(throws: JSONParseError.self) { try JSONValue.parse(text) }
    }

    /// Objects and arrays nest up to `maxDepth` levels; past that the verdict says so (not
    /// "invalid"), and whatever passes, the JSON reader takes too.
    @Test func nestingIsBoundedAndSaysSo() throws {
        func nested(_ levels: Int) -> String { String(repeating: #"{"a":["#, count: levels / 2) + "1" + String(repeating: "]}", count: levels / 2) }
        let deepest = nested(JSONValidator.maxDepth)
        #expect(JSONValidator.check(Array(deepest.utf8)) == .object)
        _ = try JSONValue.parse(deepest)
        guard case .tooDeep(let offset) = JSONValidator.check(Array(nested(JSONValidator.maxDepth + 2).utf8)) else {
            Issue.record("a payload past the depth limit should be tooDeep")
            return
        }
        #expect(offset == 3 * JSONValidator.maxDepth, "the offset of the first container past the limit (6 bytes a pair of levels)")
    }

    @Test func invalidUTF8IsRejected() {
        #expect(JSONValidator.check([0x7B, 0x22, 0x61, 0x22, 0x3A, 0x22, 0xC3, 0x28, 0x22, 0x7D]) == .invalid(offset: 6))
    }

    @Test func jsonValueRoundTripKeepsKeyOrder() throws {
        let text = #"{"z":1,"a":{"b":[true,null,"x\"y"],"c":2.5},"m":-3}"#
        let value = try JSONValue.parse(text)
        #expect(value.serialized() == text)
        #expect(value["a"]?["c"] == .double(2.5))
        #expect(value["z"]?.intValue == 1)
    }

    @Test func uuidValidation() {
        #expect(CanonicalUUID.isValid("123e4567-e89b-12d3-a456-426614174000"))
        #expect(CanonicalUUID.isValid("123E4567-E89B-12D3-A456-426614174000"))
        #expect(!CanonicalUUID.isValid("123e4567-e89b-12d3-a456-42661417400"))
        #expect(!CanonicalUUID.isValid("123e4567-e89b-12d3-a456_426614174000"))
        #expect(!CanonicalUUID.isValid("g23e4567-e89b-12d3-a456-426614174000"))
    }

    @Test func environmentFromHostNames() {
        #expect(APNsEnvironment.forAppleHost("api.push.apple.com") == .production)
        #expect(APNsEnvironment.forAppleHost("API.PUSH.APPLE.COM:443") == .production)
        #expect(APNsEnvironment.forAppleHost("api.sandbox.push.apple.com:2197") == .sandbox)
        #expect(APNsEnvironment.forAppleHost("api.development.push.apple.com") == .sandbox)
        #expect(APNsEnvironment.forAppleHost("localhost:2197") == nil)
        // A fully qualified name is the same host.
        #expect(APNsEnvironment.forAppleHost("api.push.apple.com.") == .production)
        #expect(APNsEnvironment.forAppleHost("api.sandbox.push.apple.com.:443") == .sandbox)
        #expect(APNsEnvironment.forAppleHost("api.push.apple.com..") == nil)
        // The broadcast and channel-management names of Apple's examples stand beside the push
        // host of their environment, whatever is sent to them.
        #expect(APNsEnvironment.forAppleHost("api-broadcast.push.apple.com:443") == .production)
        #expect(APNsEnvironment.forAppleHost("API-Broadcast.sandbox.push.apple.com") == .sandbox)
        #expect(APNsEnvironment.forAppleHost("api-manage-broadcast.push.apple.com:2196") == .production)
        #expect(APNsEnvironment.forAppleHost("api-manage-broadcast.sandbox.push.apple.com") == .sandbox)
        #expect(APNsEnvironment.forAppleHost("api-broadcast.example.com") == nil)
        #expect(APNsEnvironment.forAppleHost("api.") == nil)
        #expect(APNsEnvironment.forAppleHost("apix.push.apple.com") == nil)
    }

    @Test func pushTypeSuffixes() {
        #expect(PushType.implied(byTopic: "com.a.voip") == .voip)
        #expect(PushType.implied(byTopic: "com.a.voip-ptt") == .pushtotalk)
        #expect(PushType.implied(byTopic: "com.a.push-type.liveactivity") == .liveactivity)
        #expect(PushType.implied(byTopic: "com.a.pushkit.fileprovider") == .fileprovider)
        #expect(PushType.implied(byTopic: "com.a.complication") == .complication)
        #expect(PushType.implied(byTopic: "com.a.location-query") == .location)
        #expect(PushType.implied(byTopic: "com.a.push-type.widgets") == .widgets)
        #expect(PushType.implied(byTopic: "com.a.push-type.controls") == .controls)
        #expect(PushType.implied(byTopic: "com.a") == nil)
        #expect(PushType.allCases.count == 11)
        #expect(PushType.voip.payloadLimit == 5120)
        #expect(PushType.alert.payloadLimit == 4096)
    }
}

@Suite("Journal")
struct RecordStoreTests {
    func record(_ token: String) -> NotificationRecord {
        NotificationRecord(apnsID: "x", token: token, environment: .sandbox, receivedAtMs: 0)
    }

    @Test func ringKeepsTheNewestAndCountsEvictions() {
        var store = RecordStore(capacity: 3)
        for i in 1...5 { store.append(record("t\(i)")) }
        #expect(store.count == 3)
        #expect(store.evicted == 2)
        #expect(store.newestFirst(limit: 10).map(\.token) == ["t5", "t4", "t3"])
        #expect(store.newestFirst(limit: 2).map(\.token) == ["t5", "t4"])
        #expect(store.newestFirst(limit: 10) { $0.token == "t4" }.map(\.sequence) == [4])
    }

    /// The byte budget evicts the oldest records however many there are; the count
    /// budget still holds; the accounting follows evictions, deletes and wrap-around.
    @Test func byteBudgetEvictsTheOldest() {
        func sized(_ n: Int, _ payload: Int = 1000) -> NotificationRecord {
            var r = record(n < 0 ? "big" : "t" + String(1000 + n).dropFirst())  // t001, t002… same length
            r.payload = [UInt8](repeating: 0x61, count: payload)
            return r
        }
        let each = sized(0).approximateBytes
        var store = RecordStore(capacity: 100, byteBudget: each * 3)
        for i in 1...10 { store.append(sized(i)) }
        #expect(store.count == 3)
        #expect(store.bytes == each * 3)
        #expect(store.evicted == 7)
        #expect(store.newestFirst(limit: 10).map(\.token) == ["t010", "t009", "t008"])
        // One big record pushes out as many as it needs, and is kept even if alone over budget.
        let (_, out) = store.append(sized(-1, 10 * each))
        #expect(out?.token == "t010", "the last one evicted comes back to be released outside the lock")
        #expect(store.newestFirst(limit: 10).map(\.token) == ["big"])
        for i in 11...14 { store.append(sized(i)) }
        #expect(store.newestFirst(limit: 10).map(\.token) == ["t014", "t013", "t012"])
        #expect(store.removeAll { $0.token == "t013" }.count == 1)
        #expect(store.bytes == each * 2)
        #expect(store.update(sequence: 15) { $0.outcome = .delivered })
        #expect(store.record(sequence: 15)?.outcome == .delivered)
    }

    @Test func countAndByteBudgetsTogetherAcrossWrapAround() {
        var store = RecordStore(capacity: 4, byteBudget: Int.max)
        for i in 1...50 {
            store.append(record("t\(i)"))
            #expect(store.count == min(i, 4))
            #expect(store.record(sequence: UInt64(i))?.token == "t\(i)")
        }
        #expect(store.newestFirst(limit: 10).map(\.token) == ["t50", "t49", "t48", "t47"])
        #expect(store.record(sequence: 46) == nil)
    }

    @Test func updateFindsRecordsAfterDeletes() {
        var store = RecordStore(capacity: 10)
        for i in 1...6 { store.append(record("t\(i)")) }
        #expect(store.removeAll { $0.token == "t2" || $0.token == "t5" }.count == 2)
        #expect(store.update(sequence: 4) { $0.outcome = .delivered })
        #expect(store.record(sequence: 4)?.outcome == .delivered)
        #expect(!store.update(sequence: 5) { $0.outcome = .delivered })
        store.append(record("t7"))
        #expect(store.newestFirst(limit: 10).map(\.token) == ["t7", "t6", "t4", "t3", "t1"])
    }

    /// Several writers (`--redis`): each numbers in its stripe; a record from another that
    /// arrives after newer ones is put in its place once the arrivals are settled, found by
    /// number, paged from where the cursor's record is, and evicted from the oldest number.
    @Test func stripedNumberingSettlesArrivalsInNumberOrderAndFindsEveryRecord() {
        var mine = RecordStore(capacity: 5)
        mine.append(record("dense"))
        mine.numberInStripes(3)
        var theirs = RecordStore(capacity: 5)
        theirs.numberInStripes(1)
        let first = mine.append(record("m1")).sequence
        #expect(first & (SequenceStripes.count - 1) == 3)
        #expect(first > 1, "past the dense numbers already used")
        // The other writer's record made before it saw ours: a lower counter than ours.
        var other = record("o1")
        other.sequence = theirs.nextSequence
        #expect(other.sequence < first)
        mine.upsert(other)
        #expect(mine.newestFirst(limit: 10).map(\.token) == ["o1", "m1", "dense"], "where it arrived, until settled")
        mine.settleArrivals()
        #expect(mine.newestFirst(limit: 10).map(\.token) == ["m1", "o1", "dense"])
        let second = mine.append(record("m2")).sequence
        #expect(second > first && second > other.sequence, "the counter moves past what it has seen")
        #expect(mine.newestFirst(limit: 10).map(\.token) == ["m2", "m1", "o1", "dense"])
        #expect(mine.record(sequence: other.sequence)?.token == "o1")
        #expect(mine.update(sequence: first) { $0.outcome = .delivered })
        #expect(mine.record(sequence: first)?.outcome == .delivered)
        #expect(mine.newestFirst(limit: 10, before: first).map(\.token) == ["o1", "dense"])
        // An update in place keeps its slot.
        var changed = other
        changed.status = 410
        mine.upsert(changed)
        mine.settleArrivals()
        #expect(mine.newestFirst(limit: 10).map(\.token) == ["m2", "m1", "o1", "dense"])
        #expect(mine.record(sequence: other.sequence)?.status == 410)
        for i in 3...6 { mine.append(record("m\(i)")) }
        #expect(mine.count == 5)
        #expect(mine.newestFirst(limit: 10).map(\.token) == ["m6", "m5", "m4", "m3", "m2"])
        #expect(mine.record(sequence: other.sequence) == nil, "evicted records are forgotten by number too")
        #expect(mine.removeAll { $0.token == "m4" }.count == 1)
        #expect(mine.record(sequence: second)?.token == "m2")
        mine.append(record("m7"))
        #expect(mine.newestFirst(limit: 10).map(\.token) == ["m7", "m6", "m5", "m3", "m2"])
        // A journal that replaces this one (reset, reload) keeps the stripe and the counter.
        var next = RecordStore(capacity: 5)
        next.continueNumbering(from: mine)
        #expect(next.nextSequence == mine.nextSequence)
    }

    /// Two writers in stripes 2 (this copy) and 5 taking pushes in turn, `m<i>` here and, from
    /// `theirsFrom` on, `o<i>` there just before: this copy notes each of the other's numbers
    /// (`continueSequence`, as for a write left unread) but keeps its records for later, and the
    /// other sees this copy's. Returns this copy and the other's records, not yet taken.
    func takingTurns(capacity: Int, pushes: Range<Int>, theirsFrom: Int) -> (RecordStore, [NotificationRecord]) {
        var mine = RecordStore(capacity: capacity)
        mine.numberInStripes(2)
        var theirs = RecordStore(capacity: capacity)
        theirs.numberInStripes(5)
        var late: [NotificationRecord] = []
        for i in pushes {
            if i >= theirsFrom {
                var made = record("o\(i)")
                made.sequence = theirs.append(record("o\(i)")).sequence
                late.append(made)
                mine.continueSequence(from: made.sequence + 1)
            }
            theirs.continueSequence(from: mine.append(record("m\(i)")).sequence + 1)
        }
        return (mine, late)
    }

    /// A copy that read another writer's records late (following lazily) while it took its
    /// own: one settle puts every record in number order, each still found, updated and paged
    /// by number, and the oldest numbers are the ones evicted.
    @Test func aLateBatchOfArrivalsIsSettledAmongTheNewerOwnRecords() {
        var (mine, late) = takingTurns(capacity: 300, pushes: 0..<100, theirsFrom: 0)
        for made in late { mine.upsert(made) }
        mine.settleArrivals()
        let listed = mine.newestFirst(limit: 300)
        #expect(listed.map(\.token) == (0..<100).reversed().flatMap { ["m\($0)", "o\($0)"] })
        #expect(listed.map(\.sequence) == listed.map(\.sequence).sorted(by: >))
        for made in listed { #expect(mine.record(sequence: made.sequence)?.token == made.token) }
        #expect(mine.update(sequence: late[50].sequence) { $0.outcome = .delivered })
        #expect(mine.record(sequence: late[50].sequence)?.outcome == .delivered)
        #expect(mine.newestFirst(limit: 2, before: late[50].sequence).map(\.token) == ["m49", "o49"])
        for i in 100..<250 { mine.append(record("m\(i)")) }
        #expect(mine.count == 300)
        #expect(mine.newestFirst(limit: 300).last?.token == "o25", "the oldest numbers fell off the end")
        // A delete with arrivals not yet settled leaves the rest in number order too.
        var older = record("o-late")
        older.sequence = late[99].sequence + 1
        mine.upsert(older)
        #expect(mine.removeAll { $0.token == "m120" }.count == 1)
        let left = mine.newestFirst(limit: 300).map(\.sequence)
        #expect(left == left.sorted(by: >) && left.contains(older.sequence))
    }

    /// Late arrivals settled in a journal that has wrapped around its ring (the end being
    /// sorted crosses the ring's physical end): every record in number order, found by number.
    @Test func lateArrivalsAreSettledAcrossTheRingsWrapAround() {
        var (mine, late) = takingTurns(capacity: 10, pushes: 0..<17, theirsFrom: 12)
        for made in late { mine.upsert(made) }
        mine.settleArrivals()
        let listed = mine.newestFirst(limit: 10)
        #expect(listed.map(\.token) == ["m16", "o16", "m15", "o15", "m14", "o14", "m13", "o13", "m12", "o12"])
        for made in listed { #expect(mine.record(sequence: made.sequence)?.token == made.token) }
        #expect(mine.update(sequence: late[2].sequence) { $0.outcome = .delivered })
        #expect(mine.record(sequence: late[2].sequence)?.outcome == .delivered)
    }

    @Test func resetRestoresStartStateButKeepsSequencesIncreasing() throws {
        let fixture = try Fixture()
        _ = fixture.send(try fixture.request())
        let before = try #require(fixture.latestRecord()).sequence
        fixture.state.withWorld { world in
            _ = try? world.registry.addDevice(id: "extra", isVirtual: true, nowMs: 0)
        }
        fixture.state.reset()
        #expect(fixture.latestRecord() == nil)
        #expect(fixture.state.withWorld { $0.registry.devices["extra"] } == nil)
        _ = fixture.send(try fixture.request())
        #expect(try #require(fixture.latestRecord()).sequence > before)
    }
}

@Suite("RFC 3339")
struct RFC3339Tests {
    @Test func formatsKnownInstants() {
        #expect(RFC3339.format(milliseconds: 0) == "1970-01-01T00:00:00.000Z")
        #expect(RFC3339.format(milliseconds: 1_767_225_600_123) == "2026-01-01T00:00:00.123Z")
        #expect(RFC3339.format(milliseconds: 951_782_400_000) == "2000-02-29T00:00:00.000Z")
    }

    /// Any Int64 formats (a user's `since` of -2^63 overflowed the arithmetic): outside the
    /// years RFC 3339 writes, as the nearer end.
    @Test func formatsEveryNumberWithinTheYearsItCanWrite() {
        #expect(RFC3339.format(milliseconds: .min) == "0001-01-01T00:00:00.000Z")
        #expect(RFC3339.format(milliseconds: .max) == "9999-12-31T23:59:59.999Z")
        #expect(RFC3339.format(milliseconds: RFC3339.latestMs) == "9999-12-31T23:59:59.999Z")
        #expect(millisecondsSince1970(seconds: 1_700_000_000.5) == 1_700_000_000_500)
        #expect(millisecondsSince1970(seconds: -1) == -1000)
        for bad in [1e16, -1e16, 1e300, .infinity, .nan] { #expect(millisecondsSince1970(seconds: bad) == nil, "\(bad)") }
    }

    @Test func parsesWhatItFormatsAndOffsets() {
        for ms: Int64 in [0, 1, 999, 1_767_225_600_123, 951_782_399_999, 4_102_444_800_000] {
            #expect(RFC3339.parse(RFC3339.format(milliseconds: ms)) == ms)
        }
        #expect(RFC3339.parse("2026-01-01T01:00:00+01:00") == 1_767_225_600_000)
        #expect(RFC3339.parse("2026-01-01T00:00:00.5Z") == 1_767_225_600_500)
        #expect(RFC3339.parse("2026-01-01T00:00:00.123456Z") == 1_767_225_600_123)
        #expect(RFC3339.parse("2026-13-01T00:00:00Z") == nil)
        #expect(RFC3339.parse("yesterday") == nil)
    }
}

@Suite("Token shape")
struct TokenShapeTests {
    @Test(arguments: [
        ("00ff", Hex.TokenShape(isEvenLengthHex: true, hasUppercase: false, hasPathDelimiter: false)),
        ("00FF", Hex.TokenShape(isEvenLengthHex: true, hasUppercase: true, hasPathDelimiter: false)),
        ("0ff", Hex.TokenShape(isEvenLengthHex: false, hasUppercase: false, hasPathDelimiter: false)),
        ("", Hex.TokenShape(isEvenLengthHex: false, hasUppercase: false, hasPathDelimiter: false)),
        ("zz", Hex.TokenShape(isEvenLengthHex: false, hasUppercase: false, hasPathDelimiter: false)),
        ("00/ff", Hex.TokenShape(isEvenLengthHex: false, hasUppercase: false, hasPathDelimiter: true)),
        ("00ff?x=1", Hex.TokenShape(isEvenLengthHex: false, hasUppercase: false, hasPathDelimiter: true)),
    ])
    func shape(text: String, expected: Hex.TokenShape) {
        #expect(Hex.shape(ofToken: Substring(text)) == expected)
    }
}

@Suite("Reset")
struct ResetTests {
    @Test func tokensIssuedBeforeAResetAreNeverIssuedAgain() throws {
        let fixture = try Fixture()
        func mint() throws -> String {
            try fixture.state.withWorld { world throws(RegistryError) -> String in
                let device = try world.registry.addDevice(isVirtual: true, nowMs: 0)
                return try world.registry.register(deviceID: device.id, bundleID: "com.example.app", environment: .sandbox, nowMs: 0).token
            }
        }
        let before = try mint()
        fixture.state.reset()
        let after = try mint()
        #expect(after != before)
    }
}

@Suite("Counters")
struct CounterTests {
    @Test func topicsAreCountedInRunsAndReadWhole() {
        var counters = Counters()
        for topic in ["a", "a", "a", "b", "a", nil, nil] as [String?] { counters.countTopic(topic) }
        // The run still open ("(none)" twice) is part of what is read.
        #expect(counters.byTopic == ["a": 4, "b": 1, "(none)": 2])
        counters.countTopic("b")
        #expect(counters.byTopic == ["a": 4, "b": 2, "(none)": 2])
    }

    @Test func topicsPastTheBoundAreOtherInTheOrderFirstSeen() {
        var counters = Counters()
        for n in 0..<Counters.maxTopics { counters.countTopic("t\(n)") }
        counters.countTopic("late")
        counters.countTopic("late")
        counters.countTopic("t0")
        let counts = counters.byTopic
        #expect(counts.count == Counters.maxTopics + 1)
        #expect(counts["other"] == 2)
        #expect(counts["late"] == nil)
        #expect(counts["t0"] == 2)
        #expect(counts["t\(Counters.maxTopics - 1)"] == 1)
    }
}

@Suite("Delivery steps on a record")
struct RecordTransitionTests {
    /// A step whose time was read before its change waited for the lock is logged at the time
    /// of the step before it, not ahead of it ("stored" before "received").
    @Test func aStepIsNeverLoggedBeforeTheOneItFollows() {
        var record = NotificationRecord(apnsID: "A", token: "t", environment: .sandbox, receivedAtMs: 0)
        record.noteTransition(.delivered, atMs: 169)
        record.noteTransition(.storedOffline, atMs: 160)
        record.noteTransition(.deliveredFromStorage, atMs: 175)
        #expect(record.transitions.map(\.atMs) == [169, 169, 175])
        #expect(record.transitions.map(\.step) == [.delivered, .storedOffline, .deliveredFromStorage])
    }

    @Test func theFirstStepsStayAndTheNewestReplacesTheLastAtTheBound() {
        var record = NotificationRecord(apnsID: "A", token: "t", environment: .sandbox, receivedAtMs: 0)
        #expect(record.transitions.isEmpty && record.transitionCount == 0)
        record.noteTransition(.storedOffline, atMs: 1)
        #expect(record.transitions.map(\.atMs) == [1])
        for ms in 2...20 { record.noteTransition(.deliveredFromStorage, atMs: Int64(ms)) }
        #expect(record.transitionCount == NotificationRecord.maxTransitions)
        #expect(record.transitions.map(\.atMs) == Array(1...11) + [20])
        #expect(record.transitions.first?.step == .storedOffline)
        var walked: [Int64] = []
        record.forEachTransition { atMs, _ in walked.append(atMs) }
        #expect(walked == record.transitions.map(\.atMs))
        record.transitions = [(5, .delivered)]
        #expect(record.transitions.map(\.atMs) == [5] && record.transitionCount == 1)
        record.transitions = []
        #expect(record.transitionCount == 0)
    }
}

@Suite("Notification list filters")
struct NotificationQueryTests {
    /// Every outcome a record can have filters the list, and a wrong one names them all.
    @Test func everyOutcomeIsAFilterAndAWrongOneNamesThemAll() throws {
        for outcome in DeliveryOutcome.allCases {
            #expect(try NotificationQuery.parse(["outcome": outcome.rawValue]).outcome == outcome)
        }
        do {
            _ = try NotificationQuery.parse(["outcome": "lost"])
            Issue.record("outcome=lost was taken")
        } catch {
            for outcome in DeliveryOutcome.allCases { #expect(error.description.contains(outcome.rawValue), "\(error)") }
        }
    }
}
