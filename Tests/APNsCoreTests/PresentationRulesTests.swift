@testable import APNsCore
import JSON
import Testing

/// The presentation rules row by row (docs/device-model.md, 14b–14l), on the pure functions.
@Suite struct PresentationRulesTests {
    static func content(_ payload: String, setup: NotificationSetup = NotificationSetup()) -> AlertContent {
        AlertContent.read(Array(payload.utf8), setup: setup)
    }

    /// The verdict DeliveryRules gives a visible alert, then the presentation stage.
    static func present(
        _ payload: String, app: AppSettings = AppSettings(), attention: DeviceAttention = DeviceAttention(), nowMs: Int64 = 0
    ) -> (DeliveryVerdict, Presentation?) {
        guard
            case .deliver(var verdict) = DeliveryRules.decide(
                pushType: .alert, content: PushContent.read(Array(payload.utf8)), app: app, lowPowerMode: false, budgetAvailable: true)
        else { return (DeliveryVerdict(callbacks: [], display: .none), nil) }
        let p = PresentationRules.apply(
            &verdict, content: content(payload, setup: app.notifications), app: app, bundleID: "com.example.app", attention: attention,
            nowMs: nowMs)
        return (verdict, p)
    }

    static func setup(_ json: JSONValue) -> NotificationSetup {
        var setup = NotificationSetup()
        try! setup.apply(json.objectValue!)
        return setup
    }

    static func attention(_ json: JSONValue) -> DeviceAttention {
        var attention = DeviceAttention()
        try! attention.apply(json.objectValue!)
        return attention
    }

    @Test(arguments: [
        // requested, entitlement, user's switch / permission → used
        ("time-sensitive", false, true, InterruptionLevel.active),
        ("time-sensitive", true, false, .active),
        ("time-sensitive", true, true, .timeSensitive),
        ("critical", false, true, .active),
        ("critical", true, false, .active),
        ("critical", true, true, .critical),
        ("passive", false, false, .passive),
        ("shouting", true, true, .active),
    ])
    func levelsNeedTheirEntitlementAndTheUsersSwitch(level: String, entitled: Bool, allowed: Bool, used: InterruptionLevel) {
        let setup = Self.setup([
            "timeSensitiveEntitlement": .bool(entitled), "timeSensitiveEnabled": .bool(allowed), "criticalAlertEntitlement": .bool(entitled),
            "criticalAlertsAllowed": .bool(allowed),
        ])
        let (_, p) = Self.present(#"{"aps":{"alert":"x","interruption-level":"\#(level)"}}"#, app: AppSettings(notifications: setup))
        #expect(p?.level == used)
    }

    @Test func willPresentOptionsDecideTheForeground() {
        func foreground(_ options: JSONValue, authorization: Authorization = .authorized) -> (DeliveryVerdict, Presentation?) {
            Self.present(
                #"{"aps":{"alert":"x","sound":"a","badge":2}}"#,
                app: AppSettings(authorization: authorization, appState: .foreground, notifications: Self.setup(["foregroundPresentation": options])))
        }
        #expect(foreground(["banner", "sound", "badge"]).0.display == .banner)
        #expect(foreground(["banner", "sound", "badge"]).1?.sound == .played)
        #expect(foreground(["list"]).0.display == .notificationCenter)
        #expect(foreground(["list"]).1?.badge == nil && foreground(["list"]).1?.sound == .silenced)
        let nothing = foreground([])
        #expect(nothing.0.display == .none && nothing.0.outcome == .delivered && nothing.0.callbacks == ["willPresent"])
        #expect(nothing.1?.listed == false, "nothing shown, so nothing kept in Notification Center")
        #expect(foreground(["list"]).1?.listed == true)
        let provisional = foreground(["banner", "sound", "badge"], authorization: .provisional)
        #expect(provisional.0.display == .notificationCenter && provisional.1?.sound == .silenced)
        #expect(provisional.1?.badge == nil, "Deliver Quietly leaves the icon's badge alone")
    }

    /// Provisional ("Deliver Quietly"), the app not in the foreground: Notification Center,
    /// no sound, no badge.
    @Test func provisionalDeliversQuietlyWithoutABadge() {
        let (verdict, presentation) = Self.present(
            #"{"aps":{"alert":"x","sound":"a","badge":9}}"#, app: AppSettings(authorization: .provisional, appState: .background))
        #expect(verdict.display == .notificationCenter)
        #expect(presentation?.sound == .silenced)
        #expect(presentation?.badge == nil)
    }

    /// A payload APNs takes with an unpaired surrogate escape is shown whatever the app's setup
    /// (its text with U+FFFD), as the plain path shows it: it was dropped once the setup asked
    /// for the payload to be read.
    @Test func anAlertWithALoneSurrogateIsShownWhateverTheSetup() {
        let setup = AppSettings(notifications: Self.setup(["foregroundPresentation": ["banner", "list"]]))
        let (verdict, presentation) = Self.present(#"{"aps":{"alert":"q \ud800"}}"#, app: setup)
        #expect(verdict.display == .banner && verdict.outcome == .delivered)
        #expect(presentation?.body == "q \u{FFFD}")
    }

    @Test func focusSilencesAllButAllowedAppsPeopleAndLevels() {
        let focus = Self.attention(["focus": ["name": "Work", "allowedPeople": ["Mum"]]])
        #expect(Self.present(#"{"aps":{"alert":"x","sound":"a"}}"#, attention: focus).0.display == .notificationCenter)
        let allowedApp = Self.attention(["focus": ["allowedApps": ["com.example.app"]]])
        #expect(Self.present(#"{"aps":{"alert":"x"}}"#, attention: allowedApp).0.display == .banner)
        // A person is named only by a communication notification (the app's senderKey).
        let chat = AppSettings(notifications: Self.setup(["senderKey": "from"]))
        #expect(Self.present(#"{"aps":{"alert":"x"},"from":"Mum"}"#, app: chat, attention: focus).0.display == .banner)
        #expect(Self.present(#"{"aps":{"alert":"x"},"from":"Mum"}"#, attention: focus).0.display == .notificationCenter)
        let entitled = AppSettings(
            notifications: Self.setup(["timeSensitiveEntitlement": true, "criticalAlertEntitlement": true, "criticalAlertsAllowed": true]))
        #expect(Self.present(#"{"aps":{"alert":"x","interruption-level":"time-sensitive"}}"#, app: entitled, attention: focus).0.display == .banner)
        let strict = Self.attention(["focus": ["allowTimeSensitive": false]])
        let (held, _) = Self.present(#"{"aps":{"alert":"x","interruption-level":"time-sensitive"}}"#, app: entitled, attention: strict)
        #expect(held.display == .notificationCenter && held.reason?.contains("does not allow time-sensitive") == true)
        #expect(Self.present(#"{"aps":{"alert":"x","interruption-level":"critical"}}"#, app: entitled, attention: strict).0.display == .banner)
    }

    @Test func theRingSwitchSilencesAllButCriticalAlerts() {
        let muted = Self.attention(["muted": true])
        #expect(Self.present(#"{"aps":{"alert":"x","sound":"a"}}"#, attention: muted).1?.sound == .silenced)
        let critical = AppSettings(
            notifications: Self.setup(["criticalAlertEntitlement": true, "criticalAlertsAllowed": true, "soundsEnabled": false]))
        #expect(Self.present(#"{"aps":{"alert":"x","sound":{"critical":1,"name":"a"}}}"#, app: critical, attention: muted).1?.sound == .critical)
        #expect(Self.present(#"{"aps":{"alert":"x"}}"#).1 == nil || Self.present(#"{"aps":{"alert":"x"}}"#).1?.sound == SoundOutcome.none)
    }

    @Test func theSummaryHoldsUntilItsNextTimeInTheDevicesZone() {
        // 2026-12-02T17:30:00Z; the device is at UTC+1, summaries at 08:00 and 18:00 local.
        let now: Int64 = 1_796_232_600_000
        let summary = ScheduledSummary(times: [18 * 60, 8 * 60], apps: ["com.example.app"], utcOffsetMinutes: 60)
        #expect(summary.next(afterMs: now) == 1_796_281_200_000, "08:00 local tomorrow = 07:00Z")
        #expect(summary.clock(atMs: summary.next(afterMs: now)) == "08:00")
        let attention = Self.attention(["scheduledSummary": ["times": ["08:00", "18:00"], "apps": ["com.example.app"], "utcOffsetMinutes": 60]])
        let (held, p) = Self.present(#"{"aps":{"alert":"x","sound":"a"}}"#, attention: attention, nowMs: now)
        #expect(held.display == .scheduledSummary && p?.heldUntilMs == 1_796_281_200_000 && p?.sound == .silenced)
        #expect(held.reason?.contains("held for the 08:00 summary") == true)
        let other = Self.attention(["scheduledSummary": ["times": ["08:00"], "apps": ["com.other"]]])
        #expect(Self.present(#"{"aps":{"alert":"x"}}"#, attention: other, nowMs: now).0.display == .banner)
    }

    @Test func whatTheUserReads() {
        let strings = Self.setup(["localizedStrings": ["INVITE": "%2$@ and %1$@ %%", "HELLO": "Hi %@"]])
        let c = Self.content(
            #"{"aps":{"alert":{"loc-key":"INVITE","loc-args":["a","b"],"title-loc-key":"HELLO","title-loc-args":[7]}}}"#, setup: strings)
        #expect(c.body == "b and a %" && c.title == "Hi 7")
        let missing = Self.content(#"{"aps":{"alert":{"loc-key":"NOPE","body":"fallback"}}}"#)
        #expect(missing.body == "NOPE" && missing.notes.count == 1)
        // Apple's Live Activity examples nest the key and its arguments in `title` and `body`.
        let nested = Self.content(
            #"{"aps":{"alert":{"title":{"loc-key":"HELLO","loc-args":["Panda"]},"body":{"loc-key":"ODD","loc-args":[]}}}}"#,
            setup: strings)
        #expect(nested.title == "Hi Panda" && nested.body == "ODD" && nested.hasText)
        #expect(nested.notes == [#"the app has no string for body.loc-key "ODD", so iOS uses the key itself"#])
        // Apple's example has no strings at all: the key is the format, its loc-args fill it.
        let apples = Self.content(
            #"{"aps":{"alert":{"title":{"loc-key":"%@ is on an adventure!","loc-args":["Power Panda"]},"loc-key":"%@ sent you a message","loc-args":["Bob"]}}}"#
        )
        #expect(
            apples.title == "Power Panda is on an adventure!" && apples.body == "Bob sent you a message", "\(apples.title ?? "") \(apples.body ?? "")"
        )
        #expect(apples.notes.allSatisfy { $0.hasSuffix("so iOS uses the key itself as the format, with its loc-args") })
        let (empty, _) = Self.present(#"{"aps":{"alert":{"title":null,"body":""},"badge":1}}"#)
        #expect(empty.display == .none && empty.outcome == .delivered, "the badge still changes")
        let (nothing, _) = Self.present(#"{"aps":{"alert":""}}"#)
        #expect(nothing.display == .none && nothing.outcome == .droppedBySystem)
    }

    @Test func badgesAndActions() {
        let app = AppSettings(
            notifications: Self.setup([
                "categories": [["identifier": "C", "actions": [["identifier": "A", "title": "Go", "options": ["foreground"]]]]],
                "badgesEnabled": false,
            ]))
        let (_, p) = Self.present(#"{"aps":{"alert":"x","badge":5,"category":"C"}}"#, app: app)
        #expect(p?.badge == nil && p?.categoryRegistered == true && p?.actions.map(\.identifier) == ["A"])
        #expect(Self.present(#"{"aps":{"alert":"x","badge":5}}"#).1?.badge == 5)
    }

    /// A badge or sound iOS cannot read, all the payload would show: dropped by the system,
    /// and the record's reason says why (a string badge is a common provider mistake).
    @Test(arguments: [
        (#"{"aps":{"badge":"3"}}"#, #"badge is "3", not a whole number, so iOS ignores it"#),
        (#"{"aps":{"badge":2.5}}"#, "badge is 2.5, not a whole number, so iOS ignores it"),
        (#"{"aps":{"badge":true}}"#, "badge is true, not a whole number, so iOS ignores it"),
        (#"{"aps":{"sound":5}}"#, "sound is 5, not a sound name or a dictionary, so iOS plays none"),
    ])
    func anUnreadableBadgeOrSoundSaysWhy(payload: String, reason: String) {
        let (verdict, _) = Self.present(payload)
        #expect(verdict.outcome == .droppedBySystem && verdict.display == .none)
        #expect(verdict.reason?.contains(reason) == true, "\(verdict.reason ?? "no reason")")
        // A readable one says nothing of the kind.
        #expect(Self.present(#"{"aps":{"alert":"x","badge":3,"sound":"a.caf"}}"#).0.reason == nil)
    }

    @Test func responses() throws {
        var reply = NotificationAction(identifier: "REPLY", title: "Reply")
        reply.textInput = NotificationAction.TextInput(buttonTitle: "Send", placeholder: "")
        var delete = NotificationAction(identifier: "DELETE", title: "Delete")
        delete.authenticationRequired = true
        var open = NotificationAction(identifier: "OPEN", title: "Open")
        open.foreground = true
        var category = NotificationCategory(identifier: "C", actions: [reply, delete, open])
        var setup = NotificationSetup()
        setup.categories = [category]
        var shown = Presentation()
        shown.category = "C"
        shown.categoryRegistered = true
        shown.actions = category.actions
        func respond(_ action: String, _ text: String? = nil, locked: Bool = false) throws(NotificationSettingsError) -> ResponseEffect {
            try PresentationRules.respond(action: action, text: text, presentation: shown, setup: setup, locked: locked, nowMs: 1)
        }
        #expect(try respond("default").opensApp && respond("default").response.actionIdentifier == NotificationResponseAction.defaultAction)
        #expect(try respond("dismiss").callbacks == [])
        #expect(try respond("REPLY", "ok").runsInBackground && respond("REPLY", "ok").response.userText == "ok")
        #expect(try respond("OPEN").opensApp)
        #expect(throws: NotificationSettingsError.self) { try respond("REPLY") }
        #expect(throws: NotificationSettingsError.self) { try respond("OPEN", "x") }
        #expect(throws: NotificationSettingsError.self) { try respond("DELETE", locked: true) }
        #expect(try respond("DELETE").callbacks == ["didReceive"])
        #expect(throws: NotificationSettingsError.self) { try respond("MISSING") }
        category.customDismissAction = true
        setup.categories = [category]
        #expect(try respond("dismiss").callbacks == ["didReceive"])
    }

    @Test func settingsAreCheckedAndRoundTripThroughTheirStoredForm() throws {
        var setup = NotificationSetup()
        for bad: JSONValue in [
            ["categories": [["identifier": ""]]], ["categories": [["identifier": "C", "actions": [["identifier": "default", "title": "x"]]]]],
            ["categories": [["identifier": "C"], ["identifier": "C"]]], ["foregroundPresentation": "banner"],
            ["categories": [["identifier": "C", "options": ["loud"]]]], ["senderKey": "aps"], ["timeSensitiveEntitlement": "yes"],
        ] {
            #expect(throws: NotificationSettingsError.self, "\(bad.serialized())") { try setup.apply(bad.objectValue!) }
        }
        #expect(setup == NotificationSetup(), "a refused change leaves the setup as it was")
        let full = Self.setup([
            "categories": [
                [
                    "identifier": "C", "options": ["customDismissAction"], "summaryFormat": "%u more",
                    "actions": [
                        ["identifier": "A", "title": "T", "options": ["destructive"], "textInput": ["buttonTitle": "B", "placeholder": "P"]]
                    ],
                ]
            ],
            "foregroundPresentation": ["banner"], "announce": true, "localizedStrings": ["K": "V"], "senderKey": "from",
        ])
        #expect(try NotificationSetup(storedJSON: full.storedJSON) == full)
        #expect(NotificationSetup().storedJSON.isEmpty)
        let switches = Self.attention(["focus": true, "scheduledSummary": ["times": ["07:30"], "apps": []], "locked": true])
        #expect(try DeviceAttention(storedJSON: switches.storedJSON) == switches)
        var attention = DeviceAttention()
        for bad: JSONValue in [["scheduledSummary": ["times": ["25:00"], "apps": []]], ["scheduledSummary": ["times": [], "apps": []]]] {
            #expect(throws: NotificationSettingsError.self) { try attention.apply(bad.objectValue!) }
        }
    }
}
