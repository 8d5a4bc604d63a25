// What the user does with notifications on screen (respond: the default action, a button,
// typed text, a dismiss) and what the device shows (its Notification Center: groups by
// thread, badges, the scheduled summary). Built from the journal's records.

/// One notification as Notification Center lists it.
public struct ListedNotification: Sendable {
    public var record: NotificationRecord
    public var presentation: Presentation
}

/// One stack of Notification Center: an app's thread (or the app itself without a thread-id).
public struct NotificationGroup: Sendable {
    public var bundleID: String
    public var threadID: String?
    /// Newest first.
    public var notifications: [ListedNotification]
    /// "3 more messages from Alice" under a stack of more than one.
    public var summary: String?
}

/// What a device shows now.
public struct NotificationCenterView: Sendable {
    public var deviceID: String
    public var attention: DeviceAttention
    public var badges: [(bundleID: String, badge: Int)]
    public var groups: [NotificationGroup]
    /// Held for the scheduled summary, highest relevance first.
    public var waitingForSummary: [ListedNotification]
    /// The next summary time (ms), when a summary is scheduled.
    public var nextSummaryMs: Int64?
    /// Held for a summary whose time has passed (now also in `groups`), highest relevance first.
    public var summarized: [ListedNotification]
}

extension World {
    /// How many of a device's newest records Notification Center looks through.
    public static let notificationCenterScan = 500
    /// The most a user types into a text-input action, in bytes.
    public static let maxResponseText = 4_096

    /// Whether a delivered record is in Notification Center now (not answered yet); with
    /// `orOnScreen`, also a banner that is not kept there (the user may still tap it: the
    /// emulator does not time a banner's few seconds on screen).
    static func isListed(_ r: NotificationRecord, nowMs: Int64, orOnScreen: Bool = false) -> Bool {
        guard r.outcome == .delivered, let display = r.display, display != Display.none.rawValue, !isLiveActivityAlert(r),
            !r.callbacks.contains(AppCallback.didReceive), r.presentation?.response == nil,
            orOnScreen || r.presentation?.listed != false
        else { return false }
        if display == Display.scheduledSummary.rawValue { return (r.presentation?.heldUntilMs ?? .max) <= nowMs }
        return true
    }

    /// A Live Activity push's alert lights the screen and shows the activity (expanded in the
    /// Dynamic Island, or a banner of it): it is not a notification, so Notification Center
    /// never lists it and it cannot be answered (a tap opens the app through the activity's
    /// own link, not `didReceive`).
    static func isLiveActivityAlert(_ r: NotificationRecord) -> Bool {
        r.pushType == PushType.liveactivity.rawValue
    }

    /// The user answers a notification on screen: `action` is `default` (a tap), `dismiss`,
    /// or one of its category's actions (with `text` for a text-input action).
    public mutating func respond(
        deviceID: String, apnsID: String, action: String, text: String?, nowMs: Int64
    ) throws(DeviceRequestError)
        -> (apnsID: String, bundleID: String, effect: ResponseEffect, launched: Bool, frames: [DeviceFrame])
    {
        guard let device = registry.devices[deviceID] else {
            throw DeviceRequestError(RegistryError.unknownDevice(deviceID))
        }
        guard !action.isEmpty else {
            throw DeviceRequestError("bad_request", "\"action\" is required: default (a tap), dismiss, or one of the notification's actions")
        }
        guard (text?.utf8.count ?? 0) <= Self.maxResponseText else {
            throw DeviceRequestError("bad_request", "\"text\" may be at most \(Self.maxResponseText) bytes")
        }
        // A search: records kept encoded are decoded once for it, not on every response.
        records.decodeKept()
        let shown = records.newestFirst(limit: 1) { r in
            r.deviceID == deviceID && Self.isListed(r, nowMs: nowMs, orOnScreen: true) && Hex.equalIgnoringCase(r.apnsID, apnsID)
        }.first
        guard let shown, let bundleID = shown.bundleID, let app = device.apps[bundleID], Self.isOfThisInstall(shown, app) else {
            let activityAlert = records.newestFirst(limit: 1) { r in
                r.deviceID == deviceID && Self.isLiveActivityAlert(r) && Hex.equalIgnoringCase(r.apnsID, apnsID)
            }.first
            if activityAlert != nil {
                throw DeviceRequestError(
                    "bad_request",
                    "\(apnsID) is a Live Activity push: its alert shows the activity, it is not a notification, so it is neither in Notification Center nor answered (a tap on the activity opens the app through its own link)"
                )
            }
            let held = records.newestFirst(limit: 1) { r in
                r.deviceID == deviceID && Hex.equalIgnoringCase(r.apnsID, apnsID) && (r.presentation?.heldUntilMs ?? .min) > nowMs
            }.first
            if let until = held?.presentation?.heldUntilMs {
                throw DeviceRequestError(
                    "bad_request",
                    "\(apnsID) is held for the scheduled summary until \(RFC3339.format(milliseconds: until)): it is in Notification Center, and can be answered, from then"
                )
            }
            throw DeviceRequestError("bad_request", "no notification \(apnsID) is on screen or in Notification Center")
        }
        let settings = app.settings
        var presentation = shown.presentation ?? Presentation.plain(shown) ?? Presentation()
        let effect: ResponseEffect
        do throws(NotificationSettingsError) {
            effect = try PresentationRules.respond(
                action: action, text: text, presentation: presentation, setup: settings.notifications, locked: device.attention.locked,
                nowMs: nowMs)
        } catch {
            throw DeviceRequestError("bad_request", error.description)
        }
        presentation.response = effect.response
        let launched = effect.callbacks.isEmpty ? false : settings.appState == .notRunning || settings.appState == .terminated
        records.update(sequence: shown.sequence) { [presentation] in
            $0.presentation = presentation
            $0.callbacks.append(contentsOf: effect.callbacks)
            $0.explanation += "; " + Self.describe(effect, launched: launched)
        }
        var frames: [DeviceFrame] = []
        if effect.opensApp {
            // Opening the app releases what waited for a launch; it then fetches what the
            // notification points to.
            frames = try updateApp(
                deviceID: deviceID, bundleID: bundleID, appState: .foreground, authorization: nil, backgroundMode: nil, nowMs: nowMs
            ).1
        } else if effect.runsInBackground && launched {
            frames = try updateApp(
                deviceID: deviceID, bundleID: bundleID, appState: .background, authorization: nil, backgroundMode: nil, nowMs: nowMs
            ).1
        }
        // The device is told its app's new state, as after its own `app` request: a reconnect's
        // hello would otherwise put the app back as it was before the tap.
        if let app = registry.devices[deviceID]?.apps[bundleID], app.settings.appState != settings.appState,
            let connectionID = registry.devices[deviceID]?.connectionID
        {
            let update = Self.appUpdatedMessage(bundleID: bundleID, app.settings)
            frames.insert(DeviceFrame(deviceID: deviceID, connectionID: connectionID, message: .object(update)), at: 0)
        }
        if effect.response.actionIdentifier == NotificationResponseAction.defaultAction {
            call(.fetch, deviceID: deviceID, bundleID: bundleID, payload: shown.payload, apnsID: shown.apnsID)
        } else if !effect.callbacks.isEmpty {
            call(.action, deviceID: deviceID, bundleID: bundleID, payload: shown.payload, response: (shown.apnsID, effect.response))
        }
        return (shown.apnsID, bundleID, effect, launched, frames)
    }

    static func describe(_ effect: ResponseEffect, launched: Bool) -> String {
        let action = effect.response.actionIdentifier
        if effect.callbacks.isEmpty { return "dismissed (the category has no customDismissAction, so the app is not told)" }
        var words = action == NotificationResponseAction.defaultAction ? "tapped" : "responded \(action)"
        if let text = effect.response.userText { words += " with text \"\(text)\"" }
        words += ": " + effect.callbacks.joined(separator: ", ")
        if launched { words += effect.opensApp ? " after a cold launch" : " after a launch in the background" }
        return words
    }

    /// Whether a notification reached the app as it is installed now, not an install before a
    /// reinstall (whose notifications iOS removed with it).
    static func isOfThisInstall(_ record: NotificationRecord, _ app: InstalledApp) -> Bool {
        record.receivedAtMs >= app.installedAtMs
    }

    /// The device's Notification Center: what is listed, grouped by app and thread, the
    /// badges, and the scheduled summary.
    /// nil for an unknown device.
    public func notificationCenter(deviceID: String, nowMs: Int64) -> NotificationCenterView? {
        guard let device = registry.devices[deviceID] else { return nil }
        let recent = records.newestFirst(limit: Self.notificationCenterScan) { r in
            r.deviceID == deviceID && r.outcome == .delivered && r.display != nil && r.display != Display.none.rawValue
                && !Self.isLiveActivityAlert(r)
        }.map(StateCodec.decodeKept)
        var groups: [NotificationGroup] = []
        var waiting: [ListedNotification] = []
        var summarized: [ListedNotification] = []
        for record in recent {
            // An uninstalled app's notifications leave with it, and do not come back with a
            // reinstall.
            guard let bundleID = record.bundleID, let app = device.apps[bundleID], Self.isOfThisInstall(record, app),
                let presentation = record.presentation ?? Presentation.plain(record)
            else { continue }
            let listed = ListedNotification(record: record, presentation: presentation)
            if record.display == Display.scheduledSummary.rawValue {
                guard !record.callbacks.contains(AppCallback.didReceive), presentation.response == nil else { continue }
                if (presentation.heldUntilMs ?? .max) > nowMs {
                    waiting.append(listed)
                    continue
                }
                summarized.append(listed)
            }
            guard Self.isListed(record, nowMs: nowMs) else { continue }
            if let index = groups.firstIndex(where: { $0.bundleID == bundleID && $0.threadID == presentation.threadID }) {
                groups[index].notifications.append(listed)
            } else {
                groups.append(NotificationGroup(bundleID: bundleID, threadID: presentation.threadID, notifications: [listed]))
            }
        }
        for index in groups.indices {
            let setup = device.apps[groups[index].bundleID]?.settings.notifications ?? NotificationSetup()
            groups[index].summary = Self.groupSummary(groups[index].notifications, setup: setup)
        }
        let byRelevance = { (a: ListedNotification, b: ListedNotification) in
            (a.presentation.relevanceScore ?? 0) > (b.presentation.relevanceScore ?? 0)
        }
        return NotificationCenterView(
            deviceID: deviceID, attention: device.attention,
            badges: device.apps.values.filter { $0.badge > 0 }.sorted { $0.bundleID < $1.bundleID }.map { ($0.bundleID, $0.badge) },
            groups: groups, waitingForSummary: waiting.sorted(by: byRelevance),
            nextSummaryMs: device.attention.summary?.next(afterMs: nowMs), summarized: summarized.sorted(by: byRelevance))
    }

    /// The line under a stack: the notifications under the newest count by their
    /// `summary-arg-count` (1 each by default), named by their `summary-arg`s, in the newest's
    /// category's summary format (or iOS's "%u more notifications", "1 more notification").
    static func groupSummary(_ notifications: [ListedNotification], setup: NotificationSetup) -> String? {
        guard notifications.count > 1 else { return nil }
        let under = notifications.dropFirst()
        let count = under.reduce(0) { $0 + max(0, $1.presentation.summaryArgCount ?? 1) }
        var names: [String] = []
        for item in under {
            if let arg = item.presentation.summaryArg, !arg.isEmpty, !names.contains(arg) { names.append(arg) }
        }
        let noun = count == 1 ? "notification" : "notifications"
        let format =
            notifications.first?.presentation.category.flatMap { setup.category($0)?.summaryFormat }
            ?? (names.isEmpty ? "%u more \(noun)" : "%u more \(noun) from %@")
        let joined = names.count <= 2 ? names.joined(separator: " and ") : names.dropLast().joined(separator: ", ") + " and " + names.last!
        return AlertContent.fill(format.replacingUnsigned(count), [joined])
    }
}

extension String {
    /// `%u` (and `%d`, `%lu`, `%ld`) replaced by `n`: the count of a summary format.
    fileprivate func replacingUnsigned(_ n: Int) -> String {
        var out = ""
        var rest = self[...]
        while let c = rest.popFirst() {
            guard c == "%" else {
                out.append(c)
                continue
            }
            var ahead = rest
            if ahead.first == "l" { ahead.removeFirst() }
            if let d = ahead.first, d == "u" || d == "d" {
                ahead.removeFirst()
                out += String(n)
                rest = ahead
            } else {
                out.append(c)
                if rest.first == "%" { out.append(rest.removeFirst()) }
            }
        }
        return out
    }
}
