@testable import APNsCore
import JSON
import Testing

/// What the record says of a push APNs takes without a word but a device may hold against the
/// provider (the "works in development, silent in production" mistakes), and why a token
/// stopped reaching its app.
@Suite("Advice on pushes APNs takes silently")
struct PayloadAdviceTests {
    /// Pushes `body` to the fixture's socket device, acknowledges it, and returns its record.
    private func delivered(
        _ f: DeviceFixture, _ body: String, headers: [(String, String)]
    ) throws -> NotificationRecord {
        let response = try f.push(body, headers: headers)
        #expect(response.status == 200)
        try f.ack(response.deviceFrames)
        return try #require(f.record(response))
    }

    @Test func aBackgroundPushWithoutItsPushTypeOrAtPriority10IsCalledOut() throws {
        let f = try DeviceFixture()
        let background = #"{"aps":{"content-available":1}}"#
        let missing = try delivered(f, background, headers: [("apns-priority", "5")])
        #expect(missing.outcome == .delivered)
        #expect(missing.fullExplanation.contains("sent without apns-push-type: Apple requires background"), "\(missing.fullExplanation)")
        #expect(missing.fullExplanation.contains("the emulator goes by the payload"))
        #expect(!missing.fullExplanation.contains("priority 10"))

        let asAlert = try delivered(f, background, headers: [("apns-push-type", "alert"), ("apns-priority", "5")])
        #expect(asAlert.fullExplanation.contains("sent as apns-push-type alert with nothing to show"), "\(asAlert.fullExplanation)")

        let urgent = try delivered(f, background, headers: [("apns-push-type", "background"), ("apns-priority", "10")])
        #expect(urgent.fullExplanation.contains("sent at priority 10"), "\(urgent.fullExplanation)")
        #expect(!urgent.fullExplanation.contains("apns-push-type"))

        // As Apple asks: nothing to say.
        let right = try delivered(f, background, headers: [("apns-push-type", "background"), ("apns-priority", "5")])
        #expect(right.deliveryNote == nil, "\(right.fullExplanation)")
        // An alert with content-available is visible: no advice either (a fresh budget).
        let alert = try delivered(try DeviceFixture(), #"{"aps":{"alert":"hi","content-available":1}}"#, headers: [])
        #expect(alert.deliveryNote == nil, "\(alert.fullExplanation)")
    }

    @Test func aWakeAskedForInAFormIOSDoesNotReadIsNamed() throws {
        let f = try DeviceFixture()
        let headers = [("apns-push-type", "background"), ("apns-priority", "5")]
        let cases: [(String, String)] = [
            (#"{"aps":{"content-available":true}}"#, "content-available is true, not the number 1"),
            (#"{"aps":{"content-available":"1"}}"#, #"content-available is "1", not the number 1"#),
            (#"{"aps":{"content_available":1}}"#, #"aps has "content_available""#),
            (#"{"aps":{"contentAvailable":1}}"#, #"aps has "contentAvailable""#),
            (#"{"content-available":1}"#, "content-available is outside aps"),
        ]
        for (body, said) in cases {
            let record = try delivered(f, body, headers: headers)
            #expect(record.outcome == .droppedBySystem, "\(body)")
            #expect(record.fullExplanation.contains(said), "\(body): \(record.fullExplanation)")
            #expect(!record.fullExplanation.contains("and no content-available"), "\(body)")
        }
        // Nothing at all: the rules' own words.
        let empty = try delivered(f, #"{"aps":{}}"#, headers: headers)
        #expect(empty.fullExplanation.contains("no alert, badge or sound and no content-available"))
        // Visible, with a wake iOS does not read: the alert shows, the note says the app is not woken.
        let visible = try delivered(f, #"{"aps":{"alert":"hi","content-available":true}}"#, headers: [])
        #expect(visible.outcome == .delivered)
        #expect(
            visible.fullExplanation.contains("content-available is true, not the number 1, so the app is not woken"), "\(visible.fullExplanation)")
        // `0` is how providers say "no wake": nothing to say.
        let zero = try delivered(f, #"{"aps":{"alert":"hi","content-available":0}}"#, headers: [])
        #expect(zero.deliveryNote == nil, "\(zero.fullExplanation)")
        // Misspelt, or outside aps, beside an alert: the alert shows, the note says why no wake.
        for (body, said) in [
            (#"{"aps":{"alert":"hi","content_available":1}}"#, #"aps has "content_available""#),
            (#"{"aps":{"alert":"hi","contentAvailable":1}}"#, #"aps has "contentAvailable""#),
            (#"{"content-available":1,"aps":{"alert":"hi"}}"#, "content-available is outside aps"),
        ] {
            let record = try delivered(f, body, headers: [])
            #expect(record.outcome == .delivered, "\(body)")
            #expect(
                record.fullExplanation.contains("\(said)") && record.fullExplanation.contains("so the app is not woken"),
                "\(body): \(record.fullExplanation)")
        }
    }

    @Test func aTokenThatStoppedReachingItsAppSaysWhy() throws {
        var options = DeliveryOptions()
        options.unregisteredDelayMs = 60_000
        let f = try DeviceFixture(options: options)
        let now = f.now
        let old = f.token
        _ = try f.base.state.withWorld { world throws(DeviceRequestError) in
            try world.reinstallApp(deviceID: "phone", bundleID: "com.example.app", nowMs: now)
        }
        // Within the delay: 200, and the device discards it, as an unregistered step.
        let taken = try f.push()
        #expect(taken.status == 200)
        let record = try #require(f.record(taken))
        #expect(record.outcome == .droppedBySystem)
        #expect(record.explanation == "accepted; the app has another token now (reinstalled, or its token replaced), so the device discards it")
        #expect(record.transitions.last?.step == .unregistered)
        let log = DeliveryLog.entries(for: record)
        #expect(log.last?.state == "unregistered")
        #expect(log.last?.note == record.fullExplanation)

        // After the delay: 410, saying the same.
        f.clock.advance(milliseconds: 60_001)
        let gone = try f.push()
        #expect(gone.status == 410)
        let refused = try #require(f.record(gone))
        #expect(refused.explanation.hasSuffix(" ms: the app has another token now (reinstalled, or its token replaced)"), "\(refused.explanation)")
        // A refused record's log ends with its answer, which says why too.
        #expect(DeliveryLog.entries(for: refused).last?.note == "410 Unregistered: \(refused.fullExplanation)")

        // An uninstall says so.
        _ = try f.base.state.withWorld { world throws(DeviceRequestError) in
            try world.uninstallApp(deviceID: "phone", bundleID: "com.example.app", nowMs: now)
        }
        let entry = try #require(f.base.state.readWorld { $0.registry.token(old) })
        #expect(f.base.state.readWorld { $0.registry.whyInvalidated(entry) } == "the app was uninstalled")
    }

    /// `1.0` is the number 1 as iOS reads it: a wake, not a mistake.
    @Test func oneWrittenAsADecimalIsAWake() {
        #expect(PushContent.read(Array(#"{"aps":{"content-available":1.0}}"#.utf8)).contentAvailable)
        #expect(PushContent.read(Array(#"{"aps":{"content-available":1e0}}"#.utf8)).contentAvailable)
        let zero = PushContent.read(Array(#"{"aps":{"content-available":0.0}}"#.utf8))
        #expect(!zero.contentAvailable && !zero.contentAvailableMisread)
        let two = PushContent.read(Array(#"{"aps":{"content-available":2}}"#.utf8))
        #expect(!two.contentAvailable && two.contentAvailableMisread)
    }

    /// A background push held by the budget still says what Apple asks of it.
    @Test func aHeldBackgroundPushKeepsItsAdvice() throws {
        let f = try DeviceFixture()
        let background = #"{"aps":{"content-available":1}}"#
        let right = [("apns-push-type", "background"), ("apns-priority", "5")]
        for _ in 0..<3 { _ = try delivered(f, background, headers: right) }
        let held = try #require(f.record(try f.push(background, headers: [("apns-push-type", "background"), ("apns-priority", "10")])))
        #expect(held.outcome == .deferred)
        #expect(held.explanation.hasPrefix("deferred: the app's background budget"), "\(held.explanation)")
        #expect(held.explanation.contains("sent at priority 10"), "\(held.explanation)")
    }
}
