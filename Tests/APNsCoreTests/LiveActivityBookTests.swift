// LiveActivityBookTests: a Live Activity's life on the device (start, update, stale, end, the
// four hours on the Lock Screen, the eight-hour limit, dismissal), its tokens and their
// rotation, broadcasts, and the app's own start and end.
import APNsCore
import Testing

@Suite("Live Activity life cycle")
struct LiveActivityLifecycleTests {
    typealias F = LiveFixture

    @Test("a device holds at most maxHeld activities: an ended one leaves the Lock Screen for a new one; with all running, a start is refused")
    func aDeviceHoldsAtMostItsMaximum() throws {
        var (book, token) = try F.book(policy: LiveActivityPolicy(maxHeld: 3))
        var ids: [String] = []
        for n in 0..<3 { ids.append(try F.started(&book, token: token, nowMs: F.t0 + Int64(n) * F.minute).id) }
        // All three run: the fourth start by push and by the app are refused, nothing changes.
        let refused = book.receiveStart(
            pushToStartToken: token, payload: F.start(timestamp: F.seconds0 + 300), priority: 10, nowMs: F.t0 + 5 * F.minute)
        guard case .refused(let why) = refused.outcome else {
            Issue.record("a start past the maximum: \(refused.outcome)")
            return
        }
        #expect(why.contains("holds 3 running Live Activities"), "\(why)")
        #expect(throws: LiveActivityRefusal.self) {
            try book.startByApp(
                bundleID: F.bundle, attributesType: F.type, attributes: ["orderID": "A2"], contentState: ["status": "x"], updates: .token,
                nowMs: F.t0 + 5 * F.minute)
        }
        #expect(book.activities().count == 3)
        // Two end; the next start makes the one that ended first leave the Lock Screen.
        for (n, id) in [ids[1], ids[0]].enumerated() {
            let token = try #require(book.activity(id)?.pushToken)
            let ended = book.receiveUpdate(
                updateToken: token, payload: F.end(timestamp: F.seconds0 + 400 + Int64(n)), priority: 10, nowMs: F.t0 + (6 + Int64(n)) * F.minute)
            #expect(ended.outcome == .applied)
        }
        let started = book.receiveStart(
            pushToStartToken: token, payload: F.start(timestamp: F.seconds0 + 600), priority: 10, nowMs: F.t0 + 10 * F.minute)
        #expect(started.outcome == .applied)
        #expect(started.changes.first == .dismissed(activityID: ids[1], by: .system, atMs: F.t0 + 10 * F.minute))
        #expect(book.activity(ids[1])?.state == .dismissed && book.activity(ids[0])?.state == .ended)
        #expect(book.activities().count == 3)
    }

    @Test("an end with a content-state brings the final content (no stale date or relevance unless given); without one the last stays")
    func anEndsFinalContent() throws {
        for withContent in [true, false] {
            var (book, token) = try F.book()
            let (id, updateToken) = try F.started(&book, token: token)
            let staleAt = F.seconds0 + 3600
            let update = book.receiveUpdate(
                updateToken: try #require(updateToken),
                payload: F.update(timestamp: F.seconds0 + 60, [("stale-date", .int(staleAt)), ("relevance-score", 75)]), priority: 10,
                nowMs: F.t0 + F.minute)
            #expect(update.outcome == .applied)
            let content: [(String, JSONValue)] = withContent ? [("content-state", ["status": "delivered"])] : []
            let end = book.receiveUpdate(
                updateToken: try #require(updateToken),
                payload: F.payload([("event", "end"), ("timestamp", .int(F.seconds0 + 120))] + content, [], removing: []),
                priority: 10, nowMs: F.t0 + 2 * F.minute)
            #expect(end.outcome == .applied)
            let ended = try #require(book.activity(id))
            #expect(ended.staleDateMs == (withContent ? nil : staleAt * 1000), "content-state given: \(withContent)")
            #expect(ended.relevanceScore == (withContent ? nil : 75), "content-state given: \(withContent)")
        }
        // The app's own end (`Activity.end` with final content) the same way.
        for withContent in [true, false] {
            var (book, token) = try F.book()
            let (id, updateToken) = try F.started(&book, token: token)
            let update = book.receiveUpdate(
                updateToken: try #require(updateToken),
                payload: F.update(timestamp: F.seconds0 + 60, [("stale-date", .int(F.seconds0 + 3600)), ("relevance-score", 75)]),
                priority: 10, nowMs: F.t0 + F.minute)
            #expect(update.outcome == .applied)
            let end = try book.endByApp(activityID: id, contentState: withContent ? ["status": "delivered"] : nil, nowMs: F.t0 + 2 * F.minute)
            #expect(end.outcome == .applied)
            let ended = try #require(book.activity(id))
            #expect(ended.relevanceScore == (withContent ? nil : 75), "the app's end, content-state given: \(withContent)")
            #expect((ended.staleDateMs == nil) == withContent, "the app's end, content-state given: \(withContent)")
        }
    }

    @Test("start by push, update, stale, end, four hours on the Lock Screen, removed")
    func wholeLife() throws {
        var (book, token) = try F.book()
        let start = book.receiveStart(pushToStartToken: token, payload: F.start(), priority: 10, nowMs: F.t0)
        let id = try #require(start.activityID)
        let updateToken = try #require(book.activity(id)?.pushToken)
        #expect(start.outcome == .applied)
        #expect(
            start.changes == [
                .started(activityID: id, bundleID: F.bundle, attributesType: F.type, by: .push, alert: ["title": "Order", "body": "Preparing"]),
                .tokenIssued(kind: .update, token: updateToken, bundleID: F.bundle, attributesType: F.type, activityID: id),
            ])
        let fresh = try #require(book.activity(id))
        #expect(fresh.state == .active)
        #expect(fresh.startedBy == .push)
        #expect(fresh.startedAtMs == F.t0)
        #expect(fresh.attributes == ["orderID": "A1"])
        #expect(fresh.newestTimestamp == Double(F.seconds0))
        #expect(fresh.updates == 0)
        #expect(updateToken.count == 64 && updateToken.allSatisfy(\.isHexDigit))

        // An update with a stale date ten minutes on, and an alert.
        let staleAt = F.seconds0 + 600
        let update = book.receiveUpdate(
            updateToken: updateToken,
            payload: F.update(timestamp: F.seconds0 + 60, [("stale-date", .int(staleAt)), ("relevance-score", 75), ("alert", "On the way")]),
            priority: 10, nowMs: F.t0 + F.minute)
        #expect(update.outcome == .applied)
        #expect(update.changes == [.updated(activityID: id, alert: "On the way")])
        #expect(F.status(book, id) == "on the way")
        #expect(book.activity(id)?.staleDateMs == staleAt * 1000)
        #expect(book.activity(id)?.relevanceScore == 75)
        #expect(book.nextDeadlineMs(nowMs: F.t0 + F.minute) == staleAt * 1000)

        #expect(book.tick(nowMs: staleAt * 1000 - 1).isEmpty)
        #expect(book.tick(nowMs: staleAt * 1000) == [.stale(activityID: id)])
        #expect(book.activity(id)?.state == .stale)
        #expect(book.tick(nowMs: staleAt * 1000 + F.minute).isEmpty)

        // A stale activity still takes updates; one without a stale date is fresh again.
        let again = book.receiveUpdate(
            updateToken: updateToken, payload: F.update(timestamp: staleAt + 60, status: "near"), priority: 5, nowMs: (staleAt + 60) * 1000)
        #expect(again.outcome == .applied)
        #expect(book.activity(id)?.state == .active)
        #expect(book.activity(id)?.staleDateMs == nil)

        let endAt = F.t0 + 20 * F.minute
        let end = book.receiveUpdate(updateToken: updateToken, payload: F.end(timestamp: endAt / 1000), priority: 10, nowMs: endAt)
        #expect(end.outcome == .applied)
        #expect(end.changes == [.ended(activityID: id, by: .push, atMs: endAt, alert: nil)])
        let ended = try #require(book.activity(id))
        #expect(ended.state == .ended)
        #expect(ended.endedAtMs == endAt)
        #expect(ended.dismissalDateMs == endAt + 4 * F.hour)
        #expect(F.status(book, id) == "delivered")
        #expect(ended.updates == 2)

        // Ended: pushes are ignored, the activity stays on the Lock Screen for four hours.
        let late = book.receiveUpdate(updateToken: updateToken, payload: F.update(timestamp: endAt / 1000 + 1), priority: 10, nowMs: endAt + F.minute)
        #expect(late.outcome == .ignored("ignored: the activity ended at 2023-11-14T22:33:20.000Z; pushes after the end are ignored"))
        #expect(F.status(book, id) == "delivered")
        #expect(book.tick(nowMs: endAt + 4 * F.hour - 1).isEmpty)
        #expect(book.activity(id)?.state(atMs: endAt + 4 * F.hour) == .dismissed)
        #expect(
            book.tick(nowMs: endAt + 4 * F.hour) == [
                .dismissed(activityID: id, by: .system, atMs: endAt + 4 * F.hour),
                .tokenEnded(kind: .update, token: updateToken, activityID: id),
            ])
        #expect(book.activities().isEmpty)
        #expect(book.activities(includeDismissed: true).map(\.activityID) == [id])
        let gone = book.receiveUpdate(
            updateToken: updateToken, payload: F.update(timestamp: endAt / 1000 + 2), priority: 10, nowMs: endAt + 5 * F.hour)
        #expect(gone.outcome == .ignored("ignored: activity \(id) left the Lock Screen at 2023-11-15T02:33:20.000Z; its update token ended with it"))
        #expect(book.nextDeadlineMs(nowMs: endAt + 5 * F.hour) == nil)
    }

    @Test("an end with a dismissal date in the past removes the activity at once")
    func dismissalDateInThePast() throws {
        var (book, token) = try F.book()
        let (id, updateToken) = try F.started(&book, token: token)
        let now = F.t0 + 10 * F.minute
        let end = book.receiveUpdate(
            updateToken: try #require(updateToken), payload: F.end(timestamp: now / 1000, [("dismissal-date", .int(F.seconds0))]), priority: 10,
            nowMs: now)
        #expect(end.outcome == .applied)
        #expect(
            end.changes == [
                .ended(activityID: id, by: .push, atMs: now, alert: nil), .dismissed(activityID: id, by: .system, atMs: now),
                .tokenEnded(kind: .update, token: try #require(updateToken), activityID: id),
            ])
        #expect(book.activity(id)?.state == .dismissed)
    }

    @Test("a dismissal date is honoured up to four hours after the end, no later")
    func dismissalDateLimits() throws {
        var (book, token) = try F.book()
        let (soon, soonToken) = try F.started(&book, token: token)
        let (far, farToken) = try F.started(&book, token: token)
        let now = F.t0 + F.minute
        _ = book.receiveUpdate(
            updateToken: try #require(soonToken), payload: F.end(timestamp: F.seconds0 + 60, [("dismissal-date", .int(F.seconds0 + 3600))]),
            priority: 10, nowMs: now)
        _ = book.receiveUpdate(
            updateToken: try #require(farToken), payload: F.end(timestamp: F.seconds0 + 60, [("dismissal-date", .int(F.seconds0 + 86_400))]),
            priority: 10, nowMs: now)
        #expect(book.activity(soon)?.dismissalDateMs == F.t0 + F.hour)
        #expect(book.activity(far)?.dismissalDateMs == now + 4 * F.hour)
        _ = book.tick(nowMs: F.t0 + F.hour)
        #expect(book.activity(soon)?.state == .dismissed)
        #expect(book.activity(far)?.state == .ended)
    }

    @Test("after eight hours the activity ends by itself, and is gone four hours later")
    func eightHours() throws {
        var (book, token) = try F.book()
        let (id, updateToken) = try F.started(&book, token: token)
        let tokenValue = try #require(updateToken)
        let eight = F.t0 + 8 * F.hour
        #expect(book.nextDeadlineMs(nowMs: F.t0) == eight)
        #expect(book.tick(nowMs: eight - 1).isEmpty)
        #expect(
            book.tick(nowMs: eight) == [
                .ended(activityID: id, by: .lifetime, atMs: eight, alert: nil), .tokenEnded(kind: .update, token: tokenValue, activityID: id),
            ])
        #expect(book.activity(id)?.state == .ended)
        #expect(book.activity(id)?.endedBy == .lifetime)
        #expect(book.activity(id)?.pushToken == nil)
        let late = book.receiveUpdate(updateToken: tokenValue, payload: F.update(timestamp: eight / 1000), priority: 10, nowMs: eight + 1)
        #expect(
            late.outcome
                == .ignored("ignored: activity \(id) ended at 2023-11-15T06:13:20.000Z (its 8 hours were up); its update token ended with it"))
        #expect(book.tick(nowMs: F.t0 + 12 * F.hour) == [.dismissed(activityID: id, by: .system, atMs: F.t0 + 12 * F.hour)])
    }

    @Test("a push that arrives after the eight hours ends the activity first, then is ignored")
    func pushAfterEightHours() throws {
        var (book, token) = try F.book()
        let (id, updateToken) = try F.started(&book, token: token, [("input-push-token", 0), ("input-push-channel", "ch-1")])
        #expect(updateToken == nil)
        let receipts = book.receiveBroadcast(
            channelID: "ch-1", key: "b1", payload: F.update(timestamp: F.seconds0 + 1), priority: 10, nowMs: F.t0 + 9 * F.hour)
        #expect(receipts.count == 1)
        #expect(receipts[0].changes == [.ended(activityID: id, by: .lifetime, atMs: F.t0 + 8 * F.hour, alert: nil)])
        #expect(
            receipts[0].outcome
                == .ignored("ignored: the activity ended at 2023-11-15T06:13:20.000Z (its 8 hours were up); pushes after the end are ignored"))
    }

    @Test("one tick long after the start ends and removes the activity in order")
    func lateTick() throws {
        var (book, token) = try F.book()
        let (id, updateToken) = try F.started(&book, token: token)
        #expect(
            book.tick(nowMs: F.t0 + 13 * F.hour) == [
                .ended(activityID: id, by: .lifetime, atMs: F.t0 + 8 * F.hour, alert: nil),
                .dismissed(activityID: id, by: .system, atMs: F.t0 + 12 * F.hour),
                .tokenEnded(kind: .update, token: try #require(updateToken), activityID: id),
            ])
    }

    @Test("a person dismisses an activity: gone, its token ended")
    func userDismissal() throws {
        var (book, token) = try F.book()
        let (id, updateToken) = try F.started(&book, token: token)
        let tokenValue = try #require(updateToken)
        let now = F.t0 + F.minute
        #expect(
            try book.dismiss(activityID: id, nowMs: now) == [
                .dismissed(activityID: id, by: .user, atMs: now), .tokenEnded(kind: .update, token: tokenValue, activityID: id),
            ])
        #expect(book.activity(id)?.state == .dismissed)
        #expect(book.activity(id)?.endedBy == .user)
        #expect(try book.dismiss(activityID: id, nowMs: now + 1).isEmpty)
        let push = book.receiveUpdate(updateToken: tokenValue, payload: F.update(timestamp: F.seconds0 + 100), priority: 10, nowMs: now + 2)
        #expect(
            push.outcome == .ignored("ignored: activity \(id) was dismissed by the user at 2023-11-14T22:14:20.000Z; its update token ended with it"))
        #expect(throws: LiveActivityBookError.unknownActivity("nope")) { try book.dismiss(activityID: "nope", nowMs: now) }
    }

    @Test("a stale date already past at the start makes the activity stale at once")
    func staleAtStart() throws {
        var (book, token) = try F.book()
        let receipt = book.receiveStart(
            pushToStartToken: token, payload: F.start([("stale-date", .int(F.seconds0 - 1))]), priority: 10, nowMs: F.t0)
        let id = try #require(receipt.activityID)
        #expect(receipt.changes.last == .stale(activityID: id))
        #expect(book.activity(id)?.state == .stale)
    }

    @Test("dismissed activities beyond those kept are forgotten, oldest first")
    func dismissedKept() throws {
        var (book, token) = try F.book(policy: LiveActivityPolicy(dismissedKept: 2))
        var ids: [String] = []
        for n in 0..<4 {
            let (id, _) = try F.started(&book, token: token, nowMs: F.t0 + Int64(n))
            ids.append(id)
        }
        for (n, id) in ids.enumerated() { try book.dismiss(activityID: id, nowMs: F.t0 + F.minute + Int64(n)) }
        #expect(book.activities(includeDismissed: true).map(\.activityID) == Array(ids.suffix(2)))
    }
}

@Suite("Live Activity tokens")
struct LiveActivityTokenTests {
    typealias F = LiveFixture

    @Test("declaring types issues one push-to-start token per type; dropping a type ends its token")
    func pushToStartTokens() throws {
        var book = LiveActivityBook(seed: 7)
        let changes = try book.declare(bundleID: F.bundle, types: ["A", "B", "A"], frequentUpdates: false)
        let a = try #require(book.pushToStartToken(bundleID: F.bundle, type: "A"))
        let b = try #require(book.pushToStartToken(bundleID: F.bundle, type: "B"))
        #expect(a != b)
        #expect(
            changes == [
                .tokenIssued(kind: .pushToStart, token: a, bundleID: F.bundle, attributesType: "A", activityID: nil),
                .tokenIssued(kind: .pushToStart, token: b, bundleID: F.bundle, attributesType: "B", activityID: nil),
            ])
        #expect(book.apps[F.bundle]?.attributesTypes == ["A", "B"])
        let again = try book.declare(bundleID: F.bundle, types: ["B"], frequentUpdates: false)
        #expect(again == [.tokenEnded(kind: .pushToStart, token: a, activityID: nil)])
        #expect(book.pushToStartToken(bundleID: F.bundle, type: "B") == b)
        let start = book.receiveStart(pushToStartToken: a, payload: F.start([("attributes-type", "A")]), priority: 10, nowMs: F.t0)
        #expect(start.outcome == .ignored("ignored: push-to-start token \(a) ended: com.example.app no longer declares A"))
        #expect(throws: LiveActivityBookError.invalidBundleID("not a bundle")) {
            try book.declare(bundleID: "not a bundle", types: ["A"], frequentUpdates: false)
        }
        #expect(throws: LiveActivityBookError.invalidAttributesType("Two Words")) {
            try book.declare(bundleID: F.bundle, types: ["Two Words"], frequentUpdates: false)
        }
    }

    @Test("the same seed gives the same tokens and ids")
    func deterministic() throws {
        var (first, firstToken) = try F.book()
        var (second, secondToken) = try F.book()
        #expect(firstToken == secondToken)
        let a = try F.started(&first, token: firstToken)
        let b = try F.started(&second, token: secondToken)
        #expect(a.id == b.id && a.updateToken == b.updateToken)
        #expect(a.id.count == 36 && a.id == a.id.uppercased())
    }

    @Test("a rotated push-to-start token: the old one starts nothing, the new one does")
    func rotatePushToStart() throws {
        var (book, old) = try F.book()
        let now = F.t0 + F.minute
        let (new, changes) = try book.rotatePushToStartToken(bundleID: F.bundle, type: F.type, nowMs: now)
        #expect(new != old)
        #expect(
            changes == [
                .tokenEnded(kind: .pushToStart, token: old, activityID: nil),
                .tokenIssued(kind: .pushToStart, token: new, bundleID: F.bundle, attributesType: F.type, activityID: nil),
            ])
        let stale = book.receiveStart(pushToStartToken: old, payload: F.start(), priority: 10, nowMs: now + 1)
        #expect(
            stale.outcome
                == .ignored("ignored: push-to-start token \(old) ended: it was replaced by a newer one at 2023-11-14T22:14:20.000Z (rotated)"))
        #expect(book.activities().isEmpty)
        #expect(book.receiveStart(pushToStartToken: new.uppercased(), payload: F.start(), priority: 10, nowMs: now + 1).outcome == .applied)
        #expect(throws: LiveActivityBookError.undeclaredType(bundleID: F.bundle, attributesType: "Other")) {
            try book.rotatePushToStartToken(bundleID: F.bundle, type: "Other", nowMs: now)
        }
    }

    @Test("a rotated update token: an update to the old one is ignored and says why")
    func rotateUpdateToken() throws {
        var (book, token) = try F.book()
        let (id, first) = try F.started(&book, token: token)
        let old = try #require(first)
        let now = F.t0 + F.minute
        let (new, changes) = try book.rotateUpdateToken(activityID: id, nowMs: now)
        #expect(
            changes == [
                .tokenEnded(kind: .update, token: old, activityID: id),
                .tokenIssued(kind: .update, token: new, bundleID: F.bundle, attributesType: F.type, activityID: id),
            ])
        #expect(book.activity(id)?.pushToken == new)
        let toOld = book.receiveUpdate(updateToken: old, payload: F.update(timestamp: F.seconds0 + 60), priority: 10, nowMs: now + 1)
        #expect(
            toOld.outcome
                == .ignored(
                    "ignored: update token \(old) was replaced by a newer one at 2023-11-14T22:14:20.000Z (rotated); activity \(id) now takes updates at its new token"
                ))
        #expect(F.status(book, id) == "preparing")
        #expect(book.receiveUpdate(updateToken: new, payload: F.update(timestamp: F.seconds0 + 60), priority: 10, nowMs: now + 1).outcome == .applied)
        #expect(F.status(book, id) == "on the way")
    }

    @Test("without input-push-token a started activity gets no update token")
    func noTokenAsked() throws {
        var (book, token) = try F.book()
        let receipt = book.receiveStart(pushToStartToken: token, payload: F.start(removing: ["input-push-token"]), priority: 10, nowMs: F.t0)
        let id = try #require(receipt.activityID)
        #expect(
            receipt.changes == [
                .started(activityID: id, bundleID: F.bundle, attributesType: F.type, by: .push, alert: ["title": "Order", "body": "Preparing"])
            ])
        #expect(book.activity(id)?.pushToken == nil)
        #expect(throws: LiveActivityBookError.noUpdateToken(activityID: id)) { try book.rotateUpdateToken(activityID: id, nowMs: F.t0) }
    }

    @Test("removing the app removes its activities and ends its tokens")
    func removeApp() throws {
        var (book, token) = try F.book()
        let (id, updateToken) = try F.started(&book, token: token)
        let changes = book.removeApp(bundleID: F.bundle, nowMs: F.t0 + 1)
        #expect(
            changes == [
                .dismissed(activityID: id, by: .system, atMs: F.t0 + 1),
                .tokenEnded(kind: .update, token: try #require(updateToken), activityID: id),
                .tokenEnded(kind: .pushToStart, token: token, activityID: nil),
            ])
        #expect(book.apps[F.bundle] == nil)
        #expect(book.activity(id)?.endedBy == .system)
        #expect(
            book.receiveStart(pushToStartToken: token, payload: F.start(), priority: 10, nowMs: F.t0 + 2).outcome.explanation?.hasSuffix(
                "com.example.app was removed") == true)
    }
}

@Suite("Live Activity broadcasts")
struct LiveActivityBroadcastTests {
    typealias F = LiveFixture

    @Test("a broadcast updates the activities subscribed to its channel, and only those")
    func subscribersOnly() throws {
        var (book, token) = try F.book()
        let (one, _) = try F.started(&book, token: token, nowMs: F.t0 + 1, [("input-push-channel", "ch-1")], removing: ["input-push-token"])
        let (two, _) = try F.started(&book, token: token, nowMs: F.t0 + 2, [("input-push-channel", "ch-2")], removing: ["input-push-token"])
        let (three, _) = try F.started(&book, token: token, nowMs: F.t0 + 3)
        let (four, _) = try F.started(&book, token: token, nowMs: F.t0 + 4, [("input-push-channel", "ch-1")], removing: ["input-push-token"])
        let receipts = book.receiveBroadcast(
            channelID: "ch-1", key: "b2", payload: F.update(timestamp: F.seconds0 + 60), priority: 10, nowMs: F.t0 + F.minute)
        #expect(receipts.map(\.activityID) == [one, four])
        #expect(receipts.allSatisfy { $0.outcome == .applied })
        #expect(F.status(book, one) == "on the way" && F.status(book, four) == "on the way")
        #expect(F.status(book, two) == "preparing" && F.status(book, three) == "preparing")
        #expect(
            book.receiveBroadcast(channelID: "ch-9", key: "b3", payload: F.update(timestamp: F.seconds0 + 60), priority: 10, nowMs: F.t0)
                .isEmpty)
    }

    @Test("an activity takes a broadcast once: the same request again, for example a stored message, is skipped")
    func onceEach() throws {
        var (book, token) = try F.book()
        let (one, _) = try F.started(&book, token: token, nowMs: F.t0 + 1, [("input-push-channel", "ch-1")], removing: ["input-push-token"])
        let first = book.receiveBroadcast(
            channelID: "ch-1", key: "r1", payload: F.update(timestamp: F.seconds0 + 60), priority: 5, nowMs: F.t0 + 2)
        #expect(first.map(\.outcome) == [.applied])
        #expect(
            book.receiveBroadcast(channelID: "ch-1", key: "r1", payload: F.update(timestamp: F.seconds0 + 60), priority: 5, nowMs: F.t0 + 3)
                .isEmpty)
        #expect(book.activity(one)?.updates == 1 && book.activity(one)?.lastBroadcastKey == "r1")
        let (two, _) = try F.started(&book, token: token, nowMs: F.t0 + 4, [("input-push-channel", "ch-1")], removing: ["input-push-token"])
        let late = book.receiveBroadcast(
            channelID: "ch-1", key: "r1", payload: F.update(timestamp: F.seconds0 + 60), priority: 5, nowMs: F.t0 + 5, only: two)
        #expect(late.map(\.activityID) == [two] && late.map(\.outcome) == [.applied])
    }

    @Test("a broadcast never starts an activity")
    func neverStarts() throws {
        var (book, token) = try F.book()
        _ = try F.started(&book, token: token, [("input-push-channel", "ch-1")], removing: ["input-push-token"])
        for (index, payload) in [F.start(), F.start(removing: ["alert"])].enumerated() {
            let receipts = book.receiveBroadcast(channelID: "ch-1", key: "b4-\(index)", payload: payload, priority: 10, nowMs: F.t0 + 1)
            #expect(
                receipts.map(\.outcome) == [
                    .ignored("ignored: a broadcast cannot start a Live Activity (channel ch-1); starts go to the app's push-to-start token")
                ])
        }
        #expect(book.activities().count == 1)
    }

    @Test("a broadcast end ends every subscriber; a later broadcast is ignored by each")
    func endThenIgnored() throws {
        var (book, token) = try F.book()
        let (one, _) = try F.started(&book, token: token, [("input-push-channel", "ch-1")], removing: ["input-push-token"])
        let now = F.t0 + F.minute
        let end = book.receiveBroadcast(channelID: "ch-1", key: "b5", payload: F.end(timestamp: F.seconds0 + 60), priority: 10, nowMs: now)
        #expect(
            end == [LiveActivityReceipt(outcome: .applied, activityID: one, changes: [.ended(activityID: one, by: .push, atMs: now, alert: nil)])])
        let after = book.receiveBroadcast(
            channelID: "ch-1", key: "b6", payload: F.update(timestamp: F.seconds0 + 120), priority: 10, nowMs: now + 1)
        #expect(after.map(\.outcome) == [.ignored("ignored: the activity ended at 2023-11-14T22:14:20.000Z; pushes after the end are ignored")])
        let bad = book.receiveBroadcast(
            channelID: "ch-1", key: "b7", payload: F.update(timestamp: F.seconds0 + 120, removing: ["timestamp"]), priority: 10, nowMs: now + 1)
        #expect(bad.map(\.outcome) == [.refused("would not update: timestamp is missing (seconds since 1970)")])
    }
}

@Suite("Live Activity started by the app")
struct LiveActivityAppStartTests {
    typealias F = LiveFixture

    @Test("with token push the app's activity gets an update token")
    func tokenPush() throws {
        var (book, _) = try F.book()
        let receipt = try book.startByApp(
            bundleID: F.bundle, attributesType: F.type, attributes: ["orderID": "B2"], contentState: ["status": "packing"], updates: .token,
            nowMs: F.t0)
        let id = try #require(receipt.activityID)
        let activity = try #require(book.activity(id))
        let token = try #require(activity.pushToken)
        #expect(
            receipt.changes == [
                .started(activityID: id, bundleID: F.bundle, attributesType: F.type, by: .app, alert: nil),
                .tokenIssued(kind: .update, token: token, bundleID: F.bundle, attributesType: F.type, activityID: id),
            ])
        #expect(activity.startedBy == .app)
        #expect(activity.newestTimestamp == nil)
        // No timestamp yet: any first update is newer.
        #expect(book.receiveUpdate(updateToken: token, payload: F.update(timestamp: 1), priority: 10, nowMs: F.t0 + 1).outcome == .applied)
        #expect(book.activity(id)?.newestTimestamp == 1)
    }

    @Test("Activity.request throws for an unknown channel, an undeclared type, bad or large data")
    func requestThrows() throws {
        var (book, _) = try F.book(policy: LiveActivityPolicy(strictDecoding: true))
        let known: Set<String> = ["ch-1"]
        func start(
            type: String = F.type, attributes: JSONValue = ["orderID": "B2"], state: JSONValue = ["status": "packing"], updates: LiveActivityUpdates
        )
            throws(LiveActivityRefusal)
        {
            _ = try book.startByApp(
                bundleID: F.bundle, attributesType: type, attributes: attributes, contentState: state, updates: updates, nowMs: F.t0,
                channelExists: { known.contains($0) })
        }
        #expect(throws: LiveActivityRefusal(.start, "channel ch-2 is not a live channel of com.example.app \(LiveActivityBook.channelScope)")) {
            try start(updates: .channel("ch-2"))
        }
        #expect(throws: LiveActivityRefusal(.start, "attributes-type Other is not declared by com.example.app")) {
            try start(type: "Other", updates: .none)
        }
        #expect(throws: LiveActivityRefusal(.start, "content-state has a null value at /status")) {
            try start(state: ["status": nil], updates: .none)
        }
        #expect(throws: LiveActivityRefusal(.start, "attributes is not an object")) { try start(attributes: "B2", updates: .none) }
        #expect(throws: LiveActivityRefusal.self) { try start(state: oversizedState, updates: .none) }
        #expect(book.activities().isEmpty)
        try start(updates: .channel("ch-1"))
        #expect(book.activities().map(\.channelID) == ["ch-1"])
        #expect(
            LiveActivityRefusal(.start, "channel ch-2 is not a live channel of com.example.app").description
                == "would not start: channel ch-2 is not a live channel of com.example.app")
    }

    @Test("the app ends its activity, with final content and a dismissal policy")
    func appEnds() throws {
        var (book, _) = try F.book()
        let id = try #require(
            try book.startByApp(
                bundleID: F.bundle, attributesType: F.type, attributes: ["orderID": "B2"], contentState: ["status": "packing"], updates: .none,
                nowMs: F.t0
            ).activityID)
        let end = try book.endByApp(activityID: id, contentState: ["status": "done"], dismissalDateMs: F.t0 + F.hour, nowMs: F.t0 + F.minute)
        #expect(end.outcome == .applied)
        #expect(end.changes == [.ended(activityID: id, by: .app, atMs: F.t0 + F.minute, alert: nil)])
        #expect(F.status(book, id) == "done")
        #expect(book.activity(id)?.dismissalDateMs == F.t0 + F.hour)
        let twice = try book.endByApp(activityID: id, nowMs: F.t0 + 2 * F.minute)
        #expect(twice.outcome == .ignored("already over: the activity ended at 2023-11-14T22:14:20.000Z"))
    }
}
