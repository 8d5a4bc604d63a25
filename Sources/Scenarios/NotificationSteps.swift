import APNsCore
import AdminClient

/// Steps for the notification as the user meets it: the app's notification setup, the
/// device's Focus, scheduled summary and switches, and the user's response to a notification.
extension StepRunner {
    func setNotificationSettings() throws(StepFailure) -> String? {
        let (ref, bundle) = (try context.device(alias), try bundleID())
        guard let settings = fields["settings"]?.objectValue else { throw StepFailure("\"settings\" must be an object") }
        try admin("changing the notification settings of \(bundle) on \(ref.deviceID)") { () throws(EmulatorAdminError) in
            _ = try api.request("PATCH", "/api/v1/devices/\(ref.deviceID.pathEncoded)/apps/\(bundle.pathEncoded)", body: .object(settings))
        }
        return settings.keys.joined(separator: ", ")
    }

    func setFocus() throws(StepFailure) -> String? {
        var focus = JSONObject()
        if let mode = fields["mode"] { focus["name"] = mode }
        for name in ["allowedApps", "allowedPeople", "allowTimeSensitive"] { if let value = fields[name] { focus[name] = value } }
        let off = try fields.bool("off") == true
        if off && !focus.isEmpty { throw StepFailure("\"off\": true takes no other Focus fields") }
        try patchDevice("setting the Focus", JSONObject([("focus", off ? .null : .object(focus))]))
        return off ? "off" : (focus["name"]?.stringValue ?? "Do Not Disturb")
    }

    func setScheduledSummary() throws(StepFailure) -> String? {
        var summary = JSONObject()
        for name in ["times", "apps", "utcOffsetMinutes"] { if let value = fields[name] { summary[name] = value } }
        let off = try fields.bool("off") == true
        if off && !summary.isEmpty { throw StepFailure("\"off\": true takes no other summary fields") }
        if !off && summary["times"] == nil { throw StepFailure("give \"times\" (or \"off\": true)") }
        try patchDevice("setting the scheduled summary", JSONObject([("scheduledSummary", off ? .null : .object(summary))]))
        return off ? "off" : summary["times"]?.serialized()
    }

    func setSwitches() throws(StepFailure) -> String? {
        var switches = JSONObject()
        for name in ["muted", "locked"] { if let value = fields[name] { switches[name] = value } }
        guard !switches.isEmpty else { throw StepFailure("give \"muted\" and/or \"locked\"") }
        try patchDevice("setting the device's switches", switches)
        return switches.members.map { "\($0.key) \($0.value.serialized())" }.joined(separator: ", ")
    }

    private func patchDevice(_ what: String, _ body: JSONObject) throws(StepFailure) {
        let ref = try context.device(alias)
        try admin("\(what) on \(ref.deviceID)") { () throws(EmulatorAdminError) in
            _ = try api.request("PATCH", "/api/v1/devices/\(ref.deviceID.pathEncoded)", body: .object(body))
        }
    }

    /// The user answers `apnsId` (or the newest notification on screen) with `action`.
    func respond() throws(StepFailure) -> String? {
        let ref = try context.device(alias)
        let action = try fields.requiredString("action")
        let id: String
        if let given = fields.string("apnsId") { id = given } else { id = try newestShown(ref) }
        var body = JSONObject([("action", .string(action))])
        if let text = fields.string("text") { body["text"] = .string(text) }
        if let unknown = fields["expect"]?.objectValue?.keys.first(where: { $0 != "status" }) {
            throw StepFailure("\"expect\" of respond takes \"status\" only, not \"\(unknown)\"")
        }
        let expected = try StatusPattern(fields["expect"]?["status"] ?? 200)
        let answer: JSONValue
        do {
            answer = try api.request(
                "POST", "/api/v1/devices/\(ref.deviceID.pathEncoded)/notifications/\(id.pathEncoded)/respond", body: .object(body))
        } catch {
            guard expected.matches(error.status) else { throw StepFailure(error, doing: "responding \(action) to \(id) on \(ref.deviceID)") }
            return "\(id.prefix(8))… \(action): refused as expected (\(error.status))"
        }
        guard expected.matches(200) else { throw StepFailure("expected status \(expected), got 200: \(answer.serialized())") }
        let callbacks = answer["callbacks"]?.arrayValue?.compactMap(\.stringValue) ?? []
        return "\(id.prefix(8))… \(action): callbacks [\(callbacks.joined(separator: ", "))]"
    }

    /// The newest notification on screen or in Notification Center not answered yet.
    func newestShown(_ ref: RunContext.DeviceRef) throws(StepFailure) -> String {
        let records = try admin("listing \(ref.deviceID)'s notifications") { () throws(EmulatorAdminError) in
            try api.notifications(PushFilter(outcome: "delivered", deviceID: ref.deviceID), limit: 200)
        }
        // One held for a summary is named by apnsId once its time has come.
        let shown = records.first { r in
            r.display != nil && r.display != "none" && r.display != "scheduledSummary" && !r.callbacks.contains("didReceive")
                && r.presentation?["userResponse"].map { $0 == .null } ?? true
        }
        guard let shown else { throw StepFailure("nothing to respond to: no notification is shown on \(try alias)") }
        return shown.apnsID
    }
}

/// The responses' identifiers as a scenario may write them.
enum NotificationResponseNames {
    /// `com.apple.UNNotificationDefaultActionIdentifier` → `default`; `…Dismiss…` → `dismiss`.
    static func short(_ identifier: String) -> String {
        switch identifier {
        case NotificationResponseAction.defaultAction: return "default"
        case NotificationResponseAction.dismiss: return "dismiss"
        default: return identifier
        }
    }
}
