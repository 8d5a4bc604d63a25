import APNsCore
import AdminClient

/// `200`, `"200"` or `"2xx"`: an HTTP status or a class of them.
struct StatusPattern: CustomStringConvertible {
    let text: String

    init(_ value: JSONValue) throws(StepFailure) {
        let text = value.intValue.map(String.init) ?? value.stringValue ?? ""
        let valid =
            text.count == 3 && text.first.map { "12345".contains($0) } == true
            && (Int(text) != nil || text.dropFirst().lowercased() == "xx")
        guard valid else { throw StepFailure("a status is a number such as 200 or a class such as \"2xx\", not \(value.serialized())") }
        self.text = text.lowercased()
    }

    func matches(_ status: Int?) -> Bool {
        guard let status else { return false }
        if text.hasSuffix("xx") { return String(status).first == text.first && (100..<600).contains(status) }
        return String(status) == text
    }

    var description: String { text }
}

/// Which notification records a `delivery` (or `deliveries`) object means. `outcome` is
/// `delivered` unless it says otherwise (`"any"` matches every outcome).
struct DeliveryCriteria {
    var deviceAlias: String?
    var deviceID: String?
    var token: String?
    var apnsID: String?
    var bundleID: String?
    var outcome: String?
    var callback: String?
    var display: String?
    var crossAccount: Bool?
    /// nil: not asked; .some(nil): nobody logged in.
    var userID: String??
    var addressee: String?
    var pushType: String?
    var status: StatusPattern?
    var interruptionLevel: String?
    var sound: String?
    var action: String?

    init(_ fields: StepFields, context: RunContext) throws(StepFailure) {
        interruptionLevel = fields.string("interruptionLevel")
        sound = fields.string("sound")
        action = fields.string("action")
        deviceAlias = fields.string("device")
        deviceID = try context.deviceID(deviceAlias)
        token = fields.string("token")
        apnsID = fields.string("apnsId")
        bundleID = fields.string("bundleId")
        let outcome = fields.string("outcome") ?? "delivered"
        self.outcome = outcome == "any" ? nil : outcome
        callback = fields.string("callback")
        display = fields.string("display")
        crossAccount = try fields.bool("crossAccount")
        if fields.has("userId") { userID = .some(fields.string("userId")) }
        addressee = fields.string("addressee")
        pushType = fields.string("pushType")
        status = try fields["status"].map { v throws(StepFailure) in try StatusPattern(v) }
    }

    /// What the emulator can filter on itself; the rest is checked here.
    func filter(sinceMs: Int64) -> PushFilter {
        PushFilter(token: token, pushType: pushType, outcome: outcome, deviceID: deviceID, apnsID: apnsID, sinceMs: sinceMs)
    }

    func matches(_ record: PushRecord) -> Bool {
        if let deviceID, record.deviceID != deviceID { return false }
        if let token, record.token.lowercased() != token.lowercased() { return false }
        if let apnsID, record.apnsID.lowercased() != apnsID.lowercased() { return false }
        if let bundleID, record.bundleID != bundleID { return false }
        if let outcome, record.outcome != outcome { return false }
        if let callback, !record.callbacks.contains(callback) { return false }
        if let display, record.display != display { return false }
        if let crossAccount, record.crossAccount != crossAccount { return false }
        if let userID, record.userID != userID { return false }
        if let addressee, record.addressee != addressee { return false }
        if let pushType, record.pushType != pushType { return false }
        if let status, !status.matches(record.status) { return false }
        if let interruptionLevel, record.presentation?["effectiveInterruptionLevel"]?.stringValue != interruptionLevel { return false }
        if let sound, record.presentation?["sound"]?.stringValue != sound { return false }
        if let action {
            let answered = record.presentation?["userResponse"]?["actionIdentifier"]?.stringValue
            let short = answered.map(NotificationResponseNames.short)
            if answered != action && short != action { return false }
        }
        return true
    }

    var description: String {
        var parts: [String] = []
        if let outcome { parts.append("outcome \(outcome)") }
        if let callback { parts.append("callback \(callback)") }
        if let display { parts.append("display \(display)") }
        if let crossAccount { parts.append("crossAccount \(crossAccount)") }
        if let userID { parts.append("userId \(userID ?? "null")") }
        if let addressee { parts.append("addressee \(addressee)") }
        if let pushType { parts.append("pushType \(pushType)") }
        if let status { parts.append("status \(status)") }
        if let apnsID { parts.append("apns-id \(apnsID)") }
        if let token { parts.append("token \(token.prefix(12))…") }
        if let bundleID { parts.append("app \(bundleID)") }
        let target = deviceAlias.map { " to \($0)" } ?? ""
        return "notification record\(target)" + (parts.isEmpty ? "" : " with " + parts.joined(separator: ", "))
    }

    static func describe(_ record: PushRecord) -> String {
        var text = "\(record.apnsID.prefix(8))… \(record.pushType ?? "-") status \(record.status)"
        if let reason = record.reason { text += " \(reason)" }
        text += " outcome \(record.outcome)"
        if !record.callbacks.isEmpty { text += " callbacks [\(record.callbacks.joined(separator: ", "))]" }
        if let display = record.display { text += " display \(display)" }
        text += " userId \(record.userID ?? "null")"
        if let addressee = record.addressee { text += " addressee \(addressee)" }
        if record.crossAccount { text += " crossAccount" }
        return text
    }
}

/// Which backend calls a `backendCall` (or `backendCalls`) object means.
struct CallCriteria {
    var deviceAlias: String?
    var deviceID: String?
    var hook: String?
    var bundleID: String?
    var token: String?
    var userID: String??
    var status: StatusPattern?
    var state: String?
    var url: String?

    init(_ fields: StepFields, context: RunContext) throws(StepFailure) {
        deviceAlias = fields.string("device")
        deviceID = try context.deviceID(deviceAlias)
        hook = fields.string("hook")
        bundleID = fields.string("bundleId")
        token = fields.string("token")
        if fields.has("userId") { userID = .some(fields.string("userId")) }
        status = try fields["status"].map { v throws(StepFailure) in try StatusPattern(v) }
        state = fields.string("state")
        url = fields.string("url")
    }

    func matches(_ call: BackendCall, sinceMs: Int64) -> Bool {
        // A call without a time (an emulator that does not report one) is not filtered by it.
        if let at = call.atMs, at < sinceMs { return false }
        if let deviceID, let callDevice = call.deviceID, callDevice != deviceID { return false }
        if let hook, call.hook != hook { return false }
        if let bundleID, call.bundleID != bundleID { return false }
        if let token, call.token?.lowercased() != token.lowercased() { return false }
        if let userID, call.userID != userID { return false }
        if let status, !status.matches(call.status) { return false }
        if let state, call.state != state { return false }
        if let url, !call.url.contains(url) { return false }
        return true
    }

    var description: String {
        var parts: [String] = []
        if let token { parts.append("token \(token.prefix(12))…") }
        if let userID { parts.append("userId \(userID ?? "null")") }
        if let status { parts.append("status \(status)") }
        if let state { parts.append("state \(state)") }
        if let url { parts.append("url containing \(url)") }
        if let bundleID { parts.append("app \(bundleID)") }
        let what = "\(hook ?? "backend") call" + (deviceAlias.map { " from \($0)" } ?? "")
        return what + (parts.isEmpty ? "" : " with " + parts.joined(separator: ", "))
    }
}
