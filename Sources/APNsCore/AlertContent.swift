// AlertContent: the parts of a payload's `aps` that decide how a notification is presented
// (its text after localization, category, thread, interruption level, summary arguments,
// badge, sound), read the way the device reads them. Pure.

/// `aps.interruption-level` (iOS 15).
public enum InterruptionLevel: String, Sendable, CaseIterable {
    case passive, active
    case timeSensitive = "time-sensitive"
    case critical
}

public struct AlertContent: Sendable, Equatable {
    /// `aps.alert` is present (a string or a dictionary, not null).
    public var hasAlert = false
    /// What the user reads, after `loc-key`s are looked up.
    public var title: String?
    public var subtitle: String?
    public var body: String?
    /// What the reading left out or chose, in plain words ("the app has no string for loc-key X").
    public var notes: [String] = []
    public var category: String?
    public var threadID: String?
    /// The level asked for (nil: none given, which is `active`); `critical` also when the
    /// sound dictionary has `"critical": 1`.
    public var interruptionLevel: InterruptionLevel?
    public var relevanceScore: Double?
    public var summaryArg: String?
    public var summaryArgCount: Int?
    public var badge: Int?
    /// `aps.sound` is present (a name or a dictionary).
    public var hasSound = false
    /// The alert dictionary names a sound: where a Live Activity's alert carries it (Apple's
    /// example, "alert": {…, "sound": "chime.aiff"}); a notification's is `aps.sound`.
    public var alertHasSound = false
    /// A communication notification's sender (the app's `senderKey`), when named.
    public var sender: String?

    public init() {}

    /// Some title, subtitle or body to show.
    public var hasText: Bool { [title, subtitle, body].contains { !($0 ?? "").isEmpty } }

    public static func read(_ payload: [UInt8], setup: NotificationSetup) -> AlertContent {
        var content = AlertContent()
        guard let root = (try? JSONValue.parse(payload))?.objectValue, let aps = root["aps"]?.objectValue else { return content }
        if let key = setup.senderKey, let sender = root[key]?.stringValue, !sender.isEmpty { content.sender = sender }
        switch aps["alert"] {
        case .string(let text)?:
            content.hasAlert = true
            content.body = text
        case .object(let alert)?:
            content.hasAlert = true
            content.title = localized(alert, "title", setup, &content.notes)
            content.subtitle = localized(alert, "subtitle", setup, &content.notes)
            content.body = localized(alert, "body", setup, &content.notes, keyName: "loc-key", argsName: "loc-args")
            content.alertHasSound = alert["sound"]?.stringValue != nil || alert["sound"]?.objectValue != nil
        default:
            break
        }
        content.category = aps["category"]?.stringValue
        content.threadID = aps["thread-id"]?.stringValue
        if let level = aps["interruption-level"]?.stringValue {
            if let known = InterruptionLevel(rawValue: level) {
                content.interruptionLevel = known
            } else {
                content.notes.append("interruption-level \"\(level)\" is not one iOS knows, so it is active")
            }
        }
        switch aps["sound"] {
        case .string?:
            content.hasSound = true
        case .object(let sound)?:
            content.hasSound = true
            if sound["critical"]?.intValue == 1, content.interruptionLevel == nil { content.interruptionLevel = .critical }
        case nil, .null?:
            break
        case let other?:
            content.notes.append("sound is \(PayloadAdvice.shown(other)), not a sound name or a dictionary, so iOS plays none")
        }
        content.relevanceScore = aps["relevance-score"]?.numberValue
        content.summaryArg = aps["summary-arg"]?.stringValue
        content.summaryArgCount = aps["summary-arg-count"]?.intValue.map { Int(clamping: $0) }
        content.badge = aps["badge"]?.intValue.map { Int(clamping: max(0, $0)) }
        if content.badge == nil, let badge = aps["badge"], badge != .null {
            // A common provider mistake ("3", a string): say why the icon did not change.
            content.notes.append("badge is \(PayloadAdvice.shown(badge)), not a whole number, so iOS ignores it")
        }
        return content
    }

    /// A field of the alert dictionary: `<field>-loc-key` (with `-loc-args`) looked up in the
    /// app's strings, else the plain `<field>`, else a `<field>` object holding `loc-key` and
    /// `loc-args` (the form Apple's Live Activity examples use). A key the app lacks is shown
    /// as the key itself (what iOS has done, docs/device-model.md "What the user reads");
    /// `null` counts as absent.
    static func localized(
        _ alert: JSONObject, _ field: String, _ setup: NotificationSetup, _ notes: inout [String],
        keyName: String? = nil, argsName: String? = nil
    ) -> String? {
        let keyField = keyName ?? "\(field)-loc-key"
        if let key = alert[keyField]?.stringValue {
            return lookUp(key, alert[argsName ?? "\(field)-loc-args"], named: keyField, setup, &notes)
        }
        if let nested = alert[field]?.objectValue, let key = nested["loc-key"]?.stringValue {
            return lookUp(key, nested["loc-args"], named: "\(field).loc-key", setup, &notes)
        }
        return alert[field]?.stringValue
    }

    private static func lookUp(
        _ key: String, _ args: JSONValue?, named keyField: String, _ setup: NotificationSetup, _ notes: inout [String]
    ) -> String {
        let args = (args?.arrayValue ?? []).map { item in
            item.stringValue ?? item.numberValue.map { $0 == $0.rounded() ? String(Int64($0)) : String($0) } ?? ""
        }
        guard let format = setup.localizedStrings[key] else {
            // The key is then the format, as in Apple's own Live Activity example
            // ("%@ is on an adventure!" with loc-args): its arguments are still filled in.
            notes.append(
                "the app has no string for \(keyField) \"\(key)\", so iOS uses the key itself"
                    + (args.isEmpty ? "" : " as the format, with its loc-args"))
            return fill(key, args)
        }
        return fill(format, args)
    }

    /// A strings-file format with `%@` and `%1$@` (and `%%`) filled from `args`.
    static func fill(_ format: String, _ args: [String]) -> String {
        var out = ""
        var next = 0
        var chars = Array(format)[...]
        while let c = chars.popFirst() {
            guard c == "%", let d = chars.first else {
                out.append(c)
                continue
            }
            if d == "%" {
                chars.removeFirst()
                out.append("%")
            } else if d == "@" {
                chars.removeFirst()
                out += next < args.count ? args[next] : ""
                next += 1
            } else if let dollar = chars.firstIndex(of: "$"), dollar - chars.startIndex <= 2,
                let position = Int(String(chars[chars.startIndex..<dollar])), chars.index(after: dollar) < chars.endIndex,
                chars[chars.index(after: dollar)] == "@"
            {
                chars = chars[chars.index(dollar, offsetBy: 2)...]
                out += position >= 1 && position <= args.count ? args[position - 1] : ""
            } else {
                out.append(c)
            }
        }
        return out
    }
}
