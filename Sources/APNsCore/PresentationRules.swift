// PresentationRules: how iOS presents a notification that reached the app's slot: what the
// foreground app's `willPresent` allows, the interruption level and its entitlements, Focus,
// the scheduled summary, the ring switch, the badge, the category's actions, the group.
// docs/device-model.md, "Presentation". Pure: payload facts and settings in, decision out.

/// What happened to the sound a notification asked for.
public enum SoundOutcome: String, Sendable, CaseIterable {
    /// The payload asked for none.
    case none
    case played
    /// Asked for, but not played (Focus, the ring switch, the summary, passive, the user's switch).
    case silenced
    /// Played at critical-alert volume, through the ring switch and Focus.
    case critical
}

/// The user's answer to a notification (`UNNotificationResponse`).
public struct NotificationResponse: Sendable, Equatable {
    /// `UNNotificationDefaultActionIdentifier`, `UNNotificationDismissActionIdentifier`, or an
    /// action's identifier.
    public var actionIdentifier: String
    public var userText: String?
    public var atMs: Int64

    public init(actionIdentifier: String, userText: String?, atMs: Int64) {
        self.actionIdentifier = actionIdentifier
        self.userText = userText
        self.atMs = atMs
    }
}

/// The two responses every notification has, by their UserNotifications names.
public enum NotificationResponseAction {
    public static let defaultAction = "com.apple.UNNotificationDefaultActionIdentifier"
    public static let dismiss = "com.apple.UNNotificationDismissActionIdentifier"
    static let reserved: Set<String> = [defaultAction, dismiss, "default", "dismiss"]
}

/// How one notification was presented: kept on its record.
public struct Presentation: Sendable, Equatable {
    public var title: String?
    public var subtitle: String?
    public var body: String?
    public var category: String?
    /// The app registered `category` (so its actions are shown).
    public var categoryRegistered = false
    public var actions: [NotificationAction] = []
    /// `thread-id` (nil: the app's own group).
    public var threadID: String?
    /// The level asked for and the one iOS used.
    public var requestedLevel: InterruptionLevel?
    public var level = InterruptionLevel.active
    public var sound = SoundOutcome.none
    /// It lit the screen (a banner or an alert, not passive, silenced or held).
    public var screenLit = false
    /// It stays in Notification Center after it is shown (false: a foreground app's
    /// `willPresent` gave a banner without `list`, so it left with the banner).
    public var listed = true
    /// The app's badge number it set (nil: left alone).
    public var badge: Int?
    /// Held for the scheduled summary until then (ms).
    public var heldUntilMs: Int64?
    public var relevanceScore: Double?
    public var summaryArg: String?
    public var summaryArgCount: Int?
    public var sender: String?
    public var response: NotificationResponse?

    public init() {}

    /// What the payload says the user reads and how it groups, before any rule decides.
    init(reading content: AlertContent) {
        title = content.title
        subtitle = content.subtitle
        body = content.body
        threadID = content.threadID
        relevanceScore = content.relevanceScore
        summaryArg = content.summaryArg
        summaryArgCount = content.summaryArgCount
    }
}

public enum PresentationRules {
    /// Provisional ("Deliver Quietly"): Notification Center only, no banner, sound or badge.
    static let provisionalNote = "provisional authorization delivers quietly to Notification Center (no banner, sound or badge)"

    /// Refines `verdict` (display, outcome, reason) and returns how the notification was
    /// presented; nil when nothing of it was visible to begin with (no permission, or a
    /// background push).
    public static func apply(
        _ verdict: inout DeliveryVerdict, content: AlertContent, app: AppSettings, bundleID: String, attention: DeviceAttention,
        nowMs: Int64
    ) -> Presentation? {
        let foreground = verdict.callbacks.contains(AppCallback.willPresent)
        guard verdict.display != .none || foreground else { return nil }
        let setup = app.notifications
        var p = Presentation(reading: content)
        var notes = content.notes
        p.sender = content.sender
        p.requestedLevel = content.interruptionLevel
        p.level = effectiveLevel(content.interruptionLevel, setup, &notes)

        if let category = content.category {
            p.category = category
            if let registered = setup.category(category) {
                p.categoryRegistered = true
                p.actions = registered.actions
            } else {
                notes.append("the app registered no category \"\(category)\", so no actions are shown")
            }
        }

        let showsAlert = content.hasAlert && content.hasText
        if content.hasAlert && !content.hasText {
            notes.append("the alert has no title, subtitle or body, so iOS shows no banner and lists nothing")
        }
        var display: Display
        var playsSound = content.hasSound && setup.soundsEnabled
        var setsBadge = content.badge != nil && setup.badgesEnabled
        // (A critical alert plays through that switch: said only where it does not.)
        if content.hasSound && !setup.soundsEnabled && p.level != .critical { notes.append("the user turned Sounds off for the app") }
        if content.badge != nil && !setup.badgesEnabled { notes.append("the user turned Badges off for the app") }

        if foreground {
            let options = setup.foregroundPresentation
            display = options.contains(.banner) ? .banner : options.contains(.list) ? .notificationCenter : .none
            if app.authorization == .provisional {
                // Provisional authorization never interrupts, in the app or out of it.
                if display == .banner { display = .notificationCenter }
                playsSound = false
                setsBadge = false
                notes.append(Self.provisionalNote)
            }
            if !options.contains(.sound) { playsSound = false }
            if !options.contains(.badge) { setsBadge = false }
            if options.isEmpty {
                notes.append("the app is in the foreground and willPresent returned no options, so the user sees nothing")
            } else if options != .all {
                notes.append("the app is in the foreground and willPresent returned \(options.names.joined(separator: ", "))")
            }
            p.screenLit = display == .banner
            if display == .banner && !options.contains(.list) {
                p.listed = false
                notes.append("without the list option it is not kept in Notification Center")
            }
        } else if app.authorization == .provisional {
            display = .notificationCenter
            playsSound = false
            setsBadge = false
            notes.append(Self.provisionalNote)
        } else if let summary = attention.summary, summary.apps.contains(bundleID), p.level != .timeSensitive, p.level != .critical {
            let at = summary.next(afterMs: nowMs)
            p.heldUntilMs = at
            display = .scheduledSummary
            playsSound = false
            notes.append("held for the \(summary.clock(atMs: at)) summary")
        } else if let focus = attention.focus, let why = silencedBy(focus, p, content, bundleID: bundleID) {
            display = .notificationCenter
            playsSound = false
            notes.append("silenced by Focus \u{201C}\(focus.name)\u{201D}: \(why)")
        } else if p.level == .passive {
            display = .notificationCenter
            playsSound = false
            notes.append("passive: added to Notification Center without a sound or lighting the screen")
        } else {
            display = .banner
            p.screenLit = true
        }

        if !showsAlert {
            display = .none
            p.screenLit = false
        }
        if content.hasSound {
            if p.level == .critical && display != .none {
                // A critical alert plays through the ring switch, Focus and the app's Sounds
                // switch (it has its own permission, checked for the level).
                p.sound = .critical
            } else if !playsSound {
                p.sound = .silenced
            } else if attention.muted {
                p.sound = .silenced
                notes.append("the ring switch is on silent, so no sound")
            } else {
                p.sound = .played
            }
        }
        if setsBadge { p.badge = content.badge }
        if content.interruptionLevel == .critical, p.level == .critical, !content.hasSound {
            notes.append("a critical alert without a sound plays none")
        }

        verdict.display = display
        // Nothing shown is nothing kept in Notification Center either.
        if display == .none { p.listed = false }
        let somethingHappened = display != .none || !verdict.callbacks.isEmpty || p.badge != nil || p.sound == .played || p.sound == .critical
        verdict.outcome = somethingHappened ? .delivered : .droppedBySystem
        if !notes.isEmpty {
            verdict.reason = ([verdict.reason].compactMap { $0 } + notes).joined(separator: "; ")
        }
        return p
    }

    static func effectiveLevel(_ requested: InterruptionLevel?, _ setup: NotificationSetup, _ notes: inout [String]) -> InterruptionLevel {
        switch requested {
        case nil, .active?: return .active
        case .passive?: return .passive
        case .timeSensitive?:
            return granted(
                .timeSensitive, entitled: setup.timeSensitiveEntitlement, allowed: setup.timeSensitiveEnabled,
                lacking: "the Time Sensitive Notifications entitlement", refused: "the user turned off time-sensitive notifications for the app",
                &notes)
        case .critical?:
            return granted(
                .critical, entitled: setup.criticalAlertEntitlement, allowed: setup.criticalAlertsAllowed,
                lacking: "the critical-alerts entitlement", refused: "the user has not allowed critical alerts for the app", &notes)
        }
    }

    /// `level` when the app has its entitlement and the user allows it; else `active`, and why.
    private static func granted(
        _ level: InterruptionLevel, entitled: Bool, allowed: Bool, lacking: String, refused: String, _ notes: inout [String]
    ) -> InterruptionLevel {
        if !entitled {
            notes.append("\(level.rawValue) needs \(lacking), which the app lacks, so it is active")
            return .active
        }
        if !allowed {
            notes.append("\(refused), so it is active")
            return .active
        }
        return level
    }

    /// Why the Focus silences it, or nil when it may interrupt.
    static func silencedBy(_ focus: FocusMode, _ p: Presentation, _ content: AlertContent, bundleID: String) -> String? {
        if focus.allowedApps.contains(bundleID) || p.level == .critical { return nil }
        if let sender = p.sender, focus.allowedPeople.contains(sender) { return nil }
        if p.level == .timeSensitive {
            return focus.allowTimeSensitive ? nil : "this Focus does not allow time-sensitive notifications"
        }
        switch content.interruptionLevel {
        case .timeSensitive?, .critical?:
            return "the app is not allowed, and the \(content.interruptionLevel!.rawValue) level did not apply (see above)"
        default:
            return "the app is not among its allowed apps" + (p.sender.map { " and \($0) is not among its allowed people" } ?? "")
        }
    }
}

/// What a response does on the device: the callbacks it runs and whether it launches the app
/// into the foreground.
public struct ResponseEffect: Sendable, Equatable {
    public var response: NotificationResponse
    /// `didReceive`, or nothing (a dismiss the category does not ask to hear).
    public var callbacks: [String]
    /// The app comes to the foreground (the default action, a foreground action).
    public var opensApp: Bool
    /// The action ran with the app in the background.
    public var runsInBackground: Bool
}

extension PresentationRules {
    /// Judges the user's response `action` ("default", "dismiss", or an action identifier of
    /// the notification's category) with `text` for a text-input action.
    public static func respond(
        action: String, text: String?, presentation: Presentation?, setup: NotificationSetup, locked: Bool, nowMs: Int64
    ) throws(NotificationSettingsError) -> ResponseEffect {
        let category = presentation?.category.flatMap { setup.category($0) }
        switch action {
        case "default", NotificationResponseAction.defaultAction:
            guard text == nil else { throw NotificationSettingsError("\"text\" goes with a text-input action, not the default action") }
            return ResponseEffect(
                response: NotificationResponse(actionIdentifier: NotificationResponseAction.defaultAction, userText: nil, atMs: nowMs),
                callbacks: [AppCallback.didReceive], opensApp: true, runsInBackground: false)
        case "dismiss", NotificationResponseAction.dismiss:
            guard text == nil else { throw NotificationSettingsError("\"text\" goes with a text-input action, not a dismiss") }
            let heard = category?.customDismissAction == true
            return ResponseEffect(
                response: NotificationResponse(actionIdentifier: NotificationResponseAction.dismiss, userText: nil, atMs: nowMs),
                callbacks: heard ? [AppCallback.didReceive] : [], opensApp: false, runsInBackground: heard)
        default:
            guard let presentation, presentation.categoryRegistered, let chosen = presentation.actions.first(where: { $0.identifier == action })
            else {
                let offered = (presentation?.actions ?? []).map(\.identifier)
                throw NotificationSettingsError(
                    "the notification shows no action \"\(action)\"; it offers "
                        + (["default", "dismiss"] + offered).map { "\"\($0)\"" }.joined(separator: ", "))
            }
            if chosen.textInput != nil {
                guard text != nil else { throw NotificationSettingsError("action \"\(action)\" asks for text: give \"text\"") }
            } else if text != nil {
                throw NotificationSettingsError("action \"\(action)\" takes no text")
            }
            if chosen.authenticationRequired && locked {
                throw NotificationSettingsError(
                    "action \"\(action)\" requires authentication and the device is locked; unlock it first (\"locked\": false)")
            }
            return ResponseEffect(
                response: NotificationResponse(actionIdentifier: action, userText: text, atMs: nowMs), callbacks: [AppCallback.didReceive],
                opensApp: chosen.foreground, runsInBackground: !chosen.foreground)
        }
    }
}

public final class PresentationBox: Sendable {
    public let presentation: Presentation
    public init(_ presentation: Presentation) { self.presentation = presentation }
}

extension NotificationRecord {
    /// How it was presented when that needed deciding; nil for a plain alert under default
    /// settings, which `Presentation.plain` reads back from the payload.
    public var presentation: Presentation? {
        get { delivery.presentation }
        set { delivery.presentation = newValue }
    }
}

extension RecordDelivery {
    public var presentation: Presentation? {
        get { presentationBox?.presentation }
        set { presentationBox = newValue.map(PresentationBox.init) }
    }
}

extension Presentation {
    /// What the record's byte budget counts for it.
    var approximateBytes: Int {
        var total = 96 + (title?.utf8.count ?? 0) + (subtitle?.utf8.count ?? 0) + (body?.utf8.count ?? 0)
        total += (category?.utf8.count ?? 0) + (threadID?.utf8.count ?? 0) + (summaryArg?.utf8.count ?? 0) + (sender?.utf8.count ?? 0)
        for action in actions { total += 24 + action.identifier.utf8.count + action.title.utf8.count }
        return total + (response?.userText?.utf8.count ?? 0)
    }

    /// How a record without a stored presentation was presented: a plain alert string under
    /// default settings (`PushContent.needsPresentation` was false), read back from its payload.
    public static func plain(_ record: NotificationRecord) -> Presentation? {
        guard let display = record.display.flatMap(Display.init(rawValue:)), display != .none else { return nil }
        var p = shown(AlertContent.read(record.payload, setup: NotificationSetup()), display: display)
        // A Live Activity's alert is the activity on screen, not a notification: never listed.
        if record.pushType == PushType.liveactivity.rawValue { p.listed = false }
        return p
    }

    /// What a payload read as `content` shows with no rule of the app's or the device's
    /// deciding more: its texts, badge and sound, the screen lit for a banner.
    static func shown(_ content: AlertContent, display: Display) -> Presentation {
        var p = Presentation(reading: content)
        p.badge = content.badge
        p.sound = content.hasSound ? (display == .banner ? .played : .silenced) : .none
        p.screenLit = display == .banner
        return p
    }
}

extension Presentation {
    /// The record's and the device frame's `presentation` object.
    public var json: JSONValue {
        func text(_ s: String?) -> JSONValue { s.map(JSONValue.string) ?? .null }
        return .object(
            JSONObject([
                ("title", text(title)), ("subtitle", text(subtitle)), ("body", text(body)),
                ("category", text(category)), ("categoryRegistered", .bool(categoryRegistered)),
                ("actions", .array(actions.map(\.json))), ("threadId", text(threadID)),
                ("interruptionLevel", text(requestedLevel?.rawValue)), ("effectiveInterruptionLevel", .string(level.rawValue)),
                ("sound", .string(sound.rawValue)), ("screenLit", .bool(screenLit)), ("listed", .bool(listed)),
                ("badge", badge.map { .int(Int64($0)) } ?? .null),
                ("heldUntil", heldUntilMs.map { .string(RFC3339.format(milliseconds: $0)) } ?? .null),
                ("relevanceScore", relevanceScore.map(JSONValue.double) ?? .null), ("summaryArg", text(summaryArg)),
                ("summaryArgCount", summaryArgCount.map { .int(Int64($0)) } ?? .null), ("sender", text(sender)),
                (
                    "userResponse",
                    response.map { r in
                        [
                            "actionIdentifier": .string(r.actionIdentifier), "userText": text(r.userText),
                            "at": .string(RFC3339.format(milliseconds: r.atMs)),
                        ]
                    } ?? .null
                ),
            ]))
    }
}

extension ResponseEffect {
    /// The answer to a response (the admin API's `…/respond`, a device's `respond`).
    public func json(apnsID: String, bundleID: String, launched: Bool) -> JSONObject {
        JSONObject([
            ("apnsId", .string(apnsID)), ("bundleId", .string(bundleID)),
            ("actionIdentifier", .string(response.actionIdentifier)),
            ("userText", response.userText.map(JSONValue.string) ?? .null),
            ("callbacks", .array(callbacks.map(JSONValue.string))), ("launched", .bool(launched)),
            ("opensApp", .bool(opensApp)), ("runsInBackground", .bool(runsInBackground)),
        ])
    }
}
