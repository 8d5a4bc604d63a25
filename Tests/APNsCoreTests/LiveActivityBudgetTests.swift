// LiveActivityBudgetTests: the update budget of a Live Activity (priority 10 counted, 5 not,
// frequent updates, throttled updates deferred, coalesced and released by the clock) and the
// widgets and controls push rule with its daily budget.
import APNsCore
import Testing

@Suite("Live Activity budgets")
struct LiveActivityBudgetTests {
    typealias F = LiveFixture

    @Test("the documented limits and the chosen defaults")
    func defaults() {
        #expect(LiveActivityLimits.maxActiveMs == 8 * F.hour)
        #expect(LiveActivityLimits.maxEndedVisibleMs == 4 * F.hour)
        #expect(LiveActivityLimits.maxDataBytes == 4096)
        let policy = LiveActivityPolicy()
        #expect(policy.updatesPerWindow == 15 && policy.updatesPerWindowWithFrequentUpdates == 60 && policy.updateWindowMs == F.hour)
        #expect(policy.widgetPushesPerWindow == 40 && policy.widgetWindowMs == 24 * F.hour)
    }

    @Test("a rolling window forgets what is older than the window")
    func rollingWindow() {
        var budget = LiveActivityBudget()
        for ms: Int64 in [0, 10, 20] { budget.spend(nowMs: ms, windowMs: 100) }
        #expect(budget.used(nowMs: 20, windowMs: 100) == 3)
        #expect(!budget.allows(limit: 3, nowMs: 99, windowMs: 100))
        #expect(budget.nextFreeMs(limit: 3, nowMs: 50, windowMs: 100) == 100)
        #expect(budget.allows(limit: 3, nowMs: 100, windowMs: 100))
        #expect(budget.used(nowMs: 110, windowMs: 100) == 1)
        // A limit lowered below what was spent waits for all but limit - 1 to leave.
        #expect(budget.nextFreeMs(limit: 1, nowMs: 50, windowMs: 100) == 120)
        #expect(budget.nextFreeMs(limit: 4, nowMs: 50, windowMs: 100) == 50)
        #expect(budget.nextFreeMs(limit: 0, nowMs: 50, windowMs: 100) == nil)
        budget.spend(nowMs: 150, windowMs: 100)
        #expect(budget.spentAtMs == [150])
    }

    @Test("priority 10 counts against the hourly budget, priority 5 does not")
    func priorities() throws {
        var (book, token) = try F.book()
        let (id, first) = try F.started(&book, token: token)
        let updateToken = try #require(first)
        var timestamp = F.seconds0
        func send(_ priority: Int, at nowMs: Int64, status: String = "on the way") -> LiveActivityOutcome {
            timestamp += 1
            return book.receiveUpdate(
                updateToken: updateToken, payload: F.update(timestamp: timestamp, status: status), priority: priority, nowMs: nowMs
            )
            .outcome
        }
        for n in 0..<30 { #expect(send(5, at: F.t0 + Int64(n)) == .applied) }
        for n in 0..<15 { #expect(send(10, at: F.t0 + 30 + Int64(n) * F.minute) == .applied) }
        #expect(
            send(10, at: F.t0 + 20 * F.minute, status: "throttled")
                == .throttled(
                    "throttled: activity \(id) has shown its 15 priority-10 updates in the last hour; this update is shown at 2023-11-14T23:13:20.030Z unless a newer one replaces it"
                ))
        #expect(book.activity(id)?.updates == 45)
        #expect(book.activity(id)?.deferred?.payload.contentState == ["status": "throttled"])
        // Priority 5 still gets through, and, being newer, makes the waiting one pointless.
        #expect(send(5, at: F.t0 + 21 * F.minute, status: "low priority") == .applied)
        #expect(book.activity(id)?.deferred == nil)
        #expect(book.tick(nowMs: F.t0 + 2 * F.hour).isEmpty)
        #expect(F.status(book, id) == "low priority")
        #expect(book.activity(id)?.updates == 46)
    }

    @Test("frequent updates raise the budget; the user's switch lowers it again")
    func frequentUpdates() throws {
        var (book, token) = try F.book(frequentUpdates: true)
        let (id, first) = try F.started(&book, token: token)
        let updateToken = try #require(first)
        var timestamp = F.seconds0
        func send(at nowMs: Int64) -> LiveActivityOutcome {
            timestamp += 1
            return book.receiveUpdate(updateToken: updateToken, payload: F.update(timestamp: timestamp), priority: 10, nowMs: nowMs).outcome
        }
        for n in 0..<60 { #expect(send(at: F.t0 + Int64(n) * 1000) == .applied) }
        #expect(
            send(at: F.t0 + F.minute).explanation?.hasPrefix(
                "throttled: activity \(id) has shown its 60 priority-10 updates in the last hour (frequent updates on); ") == true)
        try book.setFrequentUpdatesEnabled(false, bundleID: F.bundle)
        // 60 spent, 15 allowed: free once 46 of them have left the window.
        #expect(
            send(at: F.t0 + 2 * F.minute)
                == .throttled(
                    "throttled: activity \(id) has shown its 15 priority-10 updates in the last hour; this update is shown at 2023-11-14T23:14:05.000Z unless a newer one replaces it; it replaces the throttled update that was waiting"
                ))
        #expect(throws: LiveActivityBookError.unknownApp("com.other")) { try book.setFrequentUpdatesEnabled(true, bundleID: "com.other") }
    }

    @Test("over the budget, updates wait, the newest replaces the one waiting, and the clock releases it")
    func deferredAndCoalesced() throws {
        var (book, token) = try F.book(policy: LiveActivityPolicy(updatesPerWindow: 2))
        let (id, first) = try F.started(&book, token: token)
        let updateToken = try #require(first)
        let s = F.seconds0
        func send(_ seconds: Int64, _ status: String, at nowMs: Int64) -> LiveActivityReceipt {
            book.receiveUpdate(
                updateToken: updateToken, payload: F.update(timestamp: seconds, status: status, [("alert", .string(status))]), priority: 10,
                nowMs: nowMs)
        }
        #expect(send(s + 1, "u1", at: F.t0).outcome == .applied)
        #expect(send(s + 2, "u2", at: F.t0 + F.minute).outcome == .applied)
        let third = send(s + 3, "u3", at: F.t0 + 2 * F.minute)
        #expect(
            third.outcome
                == .throttled(
                    "throttled: activity \(id) has shown its 2 priority-10 updates in the last hour; this update is shown at 2023-11-14T23:13:20.000Z unless a newer one replaces it"
                ))
        #expect(third.changes.isEmpty)
        #expect(
            send(s + 5, "u5", at: F.t0 + 3 * F.minute).outcome.explanation?.hasSuffix("; it replaces the throttled update that was waiting") == true)
        #expect(
            send(s + 4, "u4", at: F.t0 + 4 * F.minute).outcome
                == .ignored("ignored: timestamp 1700000004 is older than the throttled update already waiting (1700000005)"))
        #expect(F.status(book, id) == "u2")
        #expect(book.activity(id)?.deferred?.payload.contentState == ["status": "u5"])
        #expect(book.nextDeadlineMs(nowMs: F.t0 + 5 * F.minute) == F.t0 + F.hour)

        #expect(book.tick(nowMs: F.t0 + F.hour - 1).isEmpty)
        #expect(book.tick(nowMs: F.t0 + F.hour) == [.updated(activityID: id, alert: "u5")])
        #expect(F.status(book, id) == "u5")
        #expect(book.activity(id)?.deferred == nil)
        #expect(book.activity(id)?.updates == 3)
        #expect(book.activity(id)?.newestTimestamp == Double(s + 5))
        #expect(book.tick(nowMs: F.t0 + 3 * F.hour).isEmpty)

        // Back at the limit (u2 and the release are in the window), an end still gets through.
        #expect(send(s + 6, "u6", at: F.t0 + F.hour + 1).outcome.explanation?.hasPrefix("throttled:") == true)
        let end = book.receiveUpdate(updateToken: updateToken, payload: F.end(timestamp: s + 7), priority: 10, nowMs: F.t0 + F.hour + 2)
        #expect(end.outcome == .applied)
        #expect(book.activity(id)?.deferred == nil)
        #expect(book.tick(nowMs: F.t0 + 2 * F.hour).isEmpty)
        #expect(F.status(book, id) == "delivered")
    }
}

@Suite("Widget and control pushes")
struct LiveActivityWidgetPushTests {
    typealias F = LiveFixture

    @Test(
        "without content-changed: true a widgets or controls push does nothing",
        arguments: [WidgetPushKind.widgets, .controls], [nil, false, "true"] as [JSONValue?])
    func contentChangedRule(kind: WidgetPushKind, contentChanged: JSONValue?) {
        var book = LiveActivityBook(seed: 1)
        let aps: JSONValue = contentChanged.map { ["content-changed": $0] } ?? ["alert": "hi"]
        let receipt = book.receiveWidgetPush(kind: kind, bundleID: F.bundle, payload: ["aps": aps], priority: 5, nowMs: F.t0)
        #expect(receipt.outcome == .ignored("ignored: a \(kind.rawValue) push does nothing without \"content-changed\": true in aps"))
        #expect(receipt.changes.isEmpty)
        #expect(book.widgetPushState(kind: kind, bundleID: F.bundle) == nil)
    }

    @Test("content-changed reloads, within a daily budget per app; over it one reload waits")
    func budget() {
        var book = LiveActivityBook(seed: 1)
        let push: JSONValue = ["aps": ["content-changed": true]]
        for n in 0..<40 {
            let receipt = book.receiveWidgetPush(kind: .widgets, bundleID: F.bundle, payload: push, priority: 10, nowMs: F.t0 + Int64(n) * F.minute)
            #expect(receipt == LiveActivityReceipt(outcome: .applied, changes: [.reloaded(kind: .widgets, bundleID: F.bundle)]))
        }
        let over = book.receiveWidgetPush(kind: .widgets, bundleID: F.bundle, payload: push, priority: 10, nowMs: F.t0 + F.hour)
        #expect(
            over.outcome
                == .throttled(
                    "throttled: com.example.app has had its 40 widgets pushes in the last day; the reload waits until 2023-11-15T22:13:20.000Z"))
        #expect(over.changes.isEmpty)
        let again = book.receiveWidgetPush(kind: .widgets, bundleID: F.bundle, payload: push, priority: 10, nowMs: F.t0 + 2 * F.hour)
        #expect(again.outcome.explanation?.hasSuffix(", together with the one already waiting") == true)
        // Controls have a budget of their own.
        #expect(
            book.receiveWidgetPush(kind: .controls, bundleID: F.bundle, payload: push, priority: 10, nowMs: F.t0 + 2 * F.hour).outcome == .applied)
        #expect(book.nextDeadlineMs(nowMs: F.t0 + 2 * F.hour) == F.t0 + 24 * F.hour)

        #expect(book.tick(nowMs: F.t0 + 24 * F.hour - 1).isEmpty)
        #expect(book.tick(nowMs: F.t0 + 24 * F.hour) == [.reloaded(kind: .widgets, bundleID: F.bundle)])
        #expect(book.tick(nowMs: F.t0 + 25 * F.hour).isEmpty)
        #expect(book.widgetPushState(kind: .widgets, bundleID: F.bundle)?.reloads == 41)
        #expect(book.widgetPushState(kind: .widgets, bundleID: F.bundle)?.reloadPending == false)
    }
}
