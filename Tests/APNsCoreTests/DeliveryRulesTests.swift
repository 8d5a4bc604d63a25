import APNsCore
import Testing

/// Every row of docs/device-model.md's tables: permission × app state × push kind.
struct RuleRow: Sendable, CustomTestStringConvertible {
    let content: PushContent
    let authorization: Authorization
    let appState: AppState
    let callbacks: [String]
    let display: Display
    let outcome: DeliveryOutcome

    var testDescription: String {
        let kind = content.isVisible ? (content.contentAvailable ? "alert+content-available" : "alert") : "background"
        return "\(kind), \(authorization), \(appState) → \(callbacks) \(display)"
    }
}

let alert = PushContent(isVisible: true)
let background = PushContent(contentAvailable: true)
let alertAndBackground = PushContent(isVisible: true, contentAvailable: true)

let ruleRows: [RuleRow] = {
    var rows: [RuleRow] = []
    // Alert pushes, permission on: app state decides (table "App state decides the callback").
    for auth in [Authorization.authorized, .ephemeral] {
        rows.append(
            RuleRow(content: alert, authorization: auth, appState: .foreground, callbacks: ["willPresent"], display: .banner, outcome: .delivered))
        for state in [AppState.background, .suspended, .notRunning, .terminated] {
            rows.append(RuleRow(content: alert, authorization: auth, appState: state, callbacks: [], display: .banner, outcome: .delivered))
        }
    }
    // Provisional: quietly to Notification Center.
    rows.append(
        RuleRow(
            content: alert, authorization: .provisional, appState: .foreground, callbacks: ["willPresent"], display: .notificationCenter,
            outcome: .delivered))
    for state in [AppState.background, .suspended, .notRunning, .terminated] {
        rows.append(
            RuleRow(content: alert, authorization: .provisional, appState: state, callbacks: [], display: .notificationCenter, outcome: .delivered))
    }
    // Denied / not determined: dropped by the system, no callback at all.
    for auth in [Authorization.denied, .notDetermined] {
        for state in AppState.allCases {
            rows.append(RuleRow(content: alert, authorization: auth, appState: state, callbacks: [], display: .none, outcome: .droppedBySystem))
        }
    }
    // Background pushes need no permission.
    for auth in Authorization.allCases {
        rows.append(
            RuleRow(
                content: background, authorization: auth, appState: .foreground, callbacks: ["didReceiveRemoteNotification"], display: .none,
                outcome: .delivered))
        for state in [AppState.background, .suspended, .notRunning] {
            rows.append(
                RuleRow(
                    content: background, authorization: auth, appState: state, callbacks: ["didReceiveRemoteNotification"], display: .none,
                    outcome: .delivered))
        }
    }
    // Alert with content-available.
    rows.append(
        RuleRow(
            content: alertAndBackground, authorization: .authorized, appState: .foreground,
            callbacks: ["willPresent", "didReceiveRemoteNotification"], display: .banner, outcome: .delivered))
    for state in [AppState.background, .suspended, .notRunning] {
        rows.append(
            RuleRow(
                content: alertAndBackground, authorization: .authorized, appState: state,
                callbacks: ["didReceiveRemoteNotification"], display: .banner, outcome: .delivered))
    }
    rows.append(
        RuleRow(
            content: alertAndBackground, authorization: .authorized, appState: .terminated,
            callbacks: [], display: .banner, outcome: .delivered))
    // Permission denied: the alert is dropped, the background part still runs.
    rows.append(
        RuleRow(
            content: alertAndBackground, authorization: .denied, appState: .background,
            callbacks: ["didReceiveRemoteNotification"], display: .none, outcome: .delivered))
    return rows
}()

@Suite("Delivery rules (docs/device-model.md)")
struct DeliveryRulesTests {
    @Test(arguments: ruleRows)
    func row(_ row: RuleRow) {
        let decision = DeliveryRules.decide(
            pushType: row.content.isVisible ? .alert : .background, content: row.content,
            app: AppSettings(authorization: row.authorization, appState: row.appState, backgroundMode: true),
            lowPowerMode: false, budgetAvailable: true)
        guard case .deliver(let verdict) = decision else {
            Issue.record("expected a delivery, got \(decision)")
            return
        }
        #expect(verdict.callbacks == row.callbacks)
        #expect(verdict.display == row.display)
        #expect(verdict.outcome == row.outcome)
        if row.outcome == .droppedBySystem { #expect(verdict.reason != nil) }
    }

    @Test func forceQuitAppGetsNoBackgroundPushUntilLaunched() {
        let decision = DeliveryRules.decide(
            pushType: .background, content: background,
            app: AppSettings(appState: .terminated), lowPowerMode: false, budgetAvailable: true)
        #expect(decision == .deferBackground(.terminated))
    }

    @Test func withoutTheBackgroundModeBackgroundPushesNeverReachTheApp() {
        for state in AppState.allCases {
            let decision = DeliveryRules.decide(
                pushType: .background, content: background,
                app: AppSettings(appState: state, backgroundMode: false),
                lowPowerMode: false, budgetAvailable: true)
            guard case .deliver(let verdict) = decision else {
                Issue.record("expected a drop for \(state)")
                continue
            }
            #expect(verdict.callbacks.isEmpty)
            #expect(verdict.outcome == .droppedBySystem)
        }
    }

    @Test func mutableContentRunsTheServiceExtensionFirstButNeverForBackgroundPushes() {
        let mutable = PushContent(isVisible: true, mutableContent: true)
        guard
            case .deliver(let verdict) = DeliveryRules.decide(
                pushType: .alert, content: mutable, app: AppSettings(appState: .foreground),
                lowPowerMode: false, budgetAvailable: true)
        else { Issue.record("expected delivery"); return }
        #expect(verdict.callbacks == ["serviceExtension", "willPresent"])
        let silentMutable = PushContent(contentAvailable: true, mutableContent: true)
        guard
            case .deliver(let silent) = DeliveryRules.decide(
                pushType: .background, content: silentMutable, app: AppSettings(),
                lowPowerMode: false, budgetAvailable: true)
        else { Issue.record("expected delivery"); return }
        #expect(!silent.callbacks.contains("serviceExtension"))
        // A dropped alert never reaches the extension either.
        guard
            case .deliver(let denied) = DeliveryRules.decide(
                pushType: .alert, content: mutable, app: AppSettings(authorization: .denied),
                lowPowerMode: false, budgetAvailable: true)
        else { Issue.record("expected a drop"); return }
        #expect(denied.callbacks.isEmpty)
    }

    @Test func budgetAndLowPowerHoldBackgroundPushes() {
        #expect(
            DeliveryRules.decide(
                pushType: .background, content: background, app: AppSettings(), lowPowerMode: false,
                budgetAvailable: false) == .deferBackground(.budget))
        #expect(
            DeliveryRules.decide(
                pushType: .background, content: background, app: AppSettings(), lowPowerMode: true,
                budgetAvailable: true) == .deferBackground(.lowPower))
        // In the foreground the app gets it regardless.
        guard
            case .deliver = DeliveryRules.decide(
                pushType: .background, content: background, app: AppSettings(appState: .foreground),
                lowPowerMode: true, budgetAvailable: false)
        else { Issue.record("foreground app should receive it"); return }
    }

    @Test func voipGoesToPushKit() {
        guard
            case .deliver(let verdict) = DeliveryRules.decide(
                pushType: .voip, content: PushContent(), app: AppSettings(authorization: .denied, appState: .terminated),
                lowPowerMode: false, budgetAvailable: false)
        else { Issue.record("expected delivery"); return }
        #expect(verdict.callbacks == ["didReceiveIncomingPush"])
    }

    @Test(arguments: [
        (#"{"aps":{"alert":"hi"}}"#, PushContent(isVisible: true)),
        (#"{"aps":{"badge":0}}"#, PushContent(isVisible: true, needsPresentation: true, badge: 0)),
        (
            #"{"aps":{"sound":"default","mutable-content":1,"alert":{"title":"t"}}}"#,
            PushContent(isVisible: true, mutableContent: true)
        ),
        (#"{"aps":{"content-available":1},"custom":{"aps":{"alert":"x"}}}"#, PushContent(contentAvailable: true)),
        (#"{"aps":{"content-available":0}}"#, PushContent()),
        (#"{"other":[1,{"a":"}"}],"aps":{"alert":null,"content-available":1}}"#, PushContent(contentAvailable: true)),
        (#"{"mdm":"x"}"#, PushContent()),
        // The service extension runs for alerts only: not for a sound or badge alone.
        (#"{"aps":{"sound":"default","badge":1,"mutable-content":1}}"#, PushContent(isVisible: true, needsPresentation: true, badge: 1)),
        (#"{"aps":{"mutable-content":1,"alert":null,"badge":2}}"#, PushContent(isVisible: true, needsPresentation: true, badge: 2)),
        // A plain alert (a string, or a dictionary of texts), a badge, a thread need no reading;
        // what has no text, a localized alert, a category, a level or a sound dictionary do.
        (#"{"aps":{"alert":{"title":"a","body":""},"badge":12,"thread-id":"t"}}"#, PushContent(isVisible: true, badge: 12)),
        (#"{"aps":{"alert":{"title":"","body":null}}}"#, PushContent(isVisible: true, needsPresentation: true)),
        (#"{"aps":{"alert":{"loc-key":"K","body":"b"}}}"#, PushContent(isVisible: true, needsPresentation: true)),
        (#"{"aps":{"alert":"hi","badge":"3"}}"#, PushContent(isVisible: true, needsPresentation: true)),
        (#"{"aps":{"alert":"","sound":"default"}}"#, PushContent(isVisible: true, needsPresentation: true)),
        (#"{"aps":{"alert":"hi","sound":{"critical":1,"name":"a"}}}"#, PushContent(isVisible: true, needsPresentation: true)),
        (#"{"aps":{"alert":"hi","thread-id":"t"}}"#, PushContent(isVisible: true)),
        (#"{"aps":{"alert":"hi","category":"C"}}"#, PushContent(isVisible: true, needsPresentation: true)),
        (#"{"aps":{"alert":"hi","interruption-level":"passive"}}"#, PushContent(isVisible: true, needsPresentation: true)),
        (#"{"aps":{"alert":"hi","sound":"default"},"thread-id":"not aps"}"#, PushContent(isVisible: true)),
        (#" { "aps" : { "alert" : "a\"b" , "content-available" : 1 } } "#, PushContent(isVisible: true, contentAvailable: true)),
        // A repeated aps: the last counts, as in the full read that presents it.
        (#"{"aps":{"alert":"first"},"aps":{}}"#, PushContent()),
        (#"{"aps":{},"aps" : {"alert":"second"} }"#, PushContent(isVisible: true)),
        (#"{"aps":{"alert":{"title":"t"}},"x":1,"aps":{"content-available":1}}"#, PushContent(contentAvailable: true)),
        // Keys with escapes are the keys they decode to (RFC 8259 §7).
        (#"{"\u0061ps":{"alert":"hi"}}"#, PushContent(isVisible: true)),
        (#"{"aps":{"\u0061lert":"hi","b\u0061dge":9}}"#, PushContent(isVisible: true, badge: 9)),
        (#"{"aps":{"content\u002davailable":1}}"#, PushContent(contentAvailable: true)),
        (#"{"aps":{"alert":"a\nb \u00e9","\u0062adge":"x"}}"#, PushContent(isVisible: true, needsPresentation: true)),
        (#"{"a\"ps":{"alert":"hi"},"aps\u0000":{"alert":"hi"}}"#, PushContent()),
    ])
    func payloadFacts(payload: String, expected: PushContent) {
        #expect(PushContent.read(Array(payload.utf8)) == expected)
    }
}

@Suite("Background budget")
struct BackgroundBudgetTests {
    @Test func threePerHourRefillsContinuously() {
        var budget = BackgroundBudget(perHour: 3, nowMs: 0)
        var uses: [Bool] = []
        for _ in 0..<4 { uses.append(budget.consume(nowMs: 0)) }
        #expect(uses == [true, true, true, false])
        // One wake comes back every 20 minutes.
        let early = budget.available(nowMs: 1_199_999)
        #expect(!early)
        let onTime = budget.consume(nowMs: 1_200_000)
        #expect(onTime)
        let again = budget.available(nowMs: 1_200_000)
        #expect(!again)
        // Never more than the hourly amount banked.
        uses = []
        for _ in 0..<4 { uses.append(budget.consume(nowMs: 100_000_000)) }
        #expect(uses == [true, true, true, false])
    }

    @Test func zeroBudgetNeverWakes() {
        var budget = BackgroundBudget(perHour: 0, nowMs: 0)
        let used = budget.consume(nowMs: 10_000_000_000)
        #expect(!used)
    }
}

/// `--stored-survivor random`: each of the notifications that arrived for a slot is kept with
/// equal chance, and one seed always makes the same choice.
@Suite struct StoredSurvivorChoiceTests {
    /// The index (0-based) of the notification kept when `count` arrive, as `store` applies it.
    static func kept(_ survivor: StoredSurvivor, device: String, count: Int) -> Int {
        var kept = 0
        for arrivals in 2...count where survivor.newcomerWins(deviceID: device, bundleID: "com.example.app", arrivals: arrivals) {
            kept = arrivals - 1
        }
        return kept
    }

    @Test func eachArrivalIsKeptWithEqualChance() {
        var counts = [Int](repeating: 0, count: 5)
        for device in 0..<20_000 { counts[Self.kept(.random(seed: 42), device: "device-\(device)", count: 5)] += 1 }
        // 4,000 each expected; 3.5 standard deviations is about ±200.
        for count in counts { #expect((3_700...4_300).contains(count), "\(counts)") }
    }

    @Test func oneSeedChoosesTheSameAndNewestAlwaysTakesTheSlot() {
        let seeded = (0..<100).map { Self.kept(.random(seed: 7), device: "d\($0)", count: 6) }
        #expect((0..<100).map { Self.kept(.random(seed: 7), device: "d\($0)", count: 6) } == seeded)
        #expect((0..<100).map { Self.kept(.random(seed: 8), device: "d\($0)", count: 6) } != seeded)
        #expect((0..<100).allSatisfy { Self.kept(.newest, device: "d\($0)", count: 6) == 5 })
    }
}
