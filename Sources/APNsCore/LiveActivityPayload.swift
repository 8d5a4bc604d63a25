// LiveActivityPayload: the `aps` of a `liveactivity` push read the way the device reads it
// (start, update, end), and the plain-words reason when the device would drop it. APNs
// answers 200 to all of these; only the device knows the push went nowhere. Pure.

/// The three events an ActivityKit push carries in `aps.event`.
public enum LiveActivityPushEvent: String, Sendable, CaseIterable {
    case start, update, end

    /// How a refusal of this event begins ("would not start: …").
    var refusalVerb: String {
        switch self {
        case .start: return "would not start"
        case .update: return "would not update"
        case .end: return "would not end"
        }
    }
}

/// Why the device drops a Live Activity push (or the app's own start), in plain words.
/// `description` is the whole sentence, e.g. `would not start: content-state is not an object`.
public struct LiveActivityRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    /// The event the push was for (nil: no usable `aps.event`).
    public var event: LiveActivityPushEvent?
    /// What is wrong, without the leading verb.
    public var detail: String

    public init(_ event: LiveActivityPushEvent?, _ detail: String) {
        self.event = event
        self.detail = detail
    }

    public var description: String { "\(event?.refusalVerb ?? "ignored"): \(detail)" }
}

/// A Live Activity push's `aps`, checked. Fields a given event does not use are nil; those
/// an event requires are always set (`attributesType`, `attributes`, `contentState` and
/// `alert` on start, `contentState` on update).
public struct LiveActivityPayload: Sendable, Equatable {
    public var event: LiveActivityPushEvent
    /// `aps.timestamp`, seconds since 1970: the system keeps the newest content.
    public var timestamp: Double
    /// `aps["content-state"]`: an object (optional on `end`, which may keep the last content).
    public var contentState: JSONValue?
    /// `aps["stale-date"]`, as ms since 1970.
    public var staleDateMs: Int64?
    /// `aps["dismissal-date"]`, as ms since 1970 (read on `end` only).
    public var dismissalDateMs: Int64?
    /// `aps["relevance-score"]`.
    public var relevanceScore: Double?
    /// `aps.alert`: lights the screen (required to start).
    public var alert: JSONValue?
    /// Start: `aps["attributes-type"]`, the Swift type name of the ActivityAttributes.
    public var attributesType: String?
    /// Start: `aps.attributes`, the static data (an object).
    public var attributes: JSONValue?
    /// Start (iOS 18): `"input-push-token": 1` asks the system for an update token.
    public var inputPushToken: Bool
    /// Start (iOS 18): `aps["input-push-channel"]`, a broadcast channel to subscribe to.
    public var inputPushChannel: String?

    public init(
        event: LiveActivityPushEvent, timestamp: Double, contentState: JSONValue? = nil, staleDateMs: Int64? = nil,
        dismissalDateMs: Int64? = nil, relevanceScore: Double? = nil, alert: JSONValue? = nil, attributesType: String? = nil,
        attributes: JSONValue? = nil, inputPushToken: Bool = false, inputPushChannel: String? = nil
    ) {
        self.event = event
        self.timestamp = timestamp
        self.contentState = contentState
        self.staleDateMs = staleDateMs
        self.dismissalDateMs = dismissalDateMs
        self.relevanceScore = relevanceScore
        self.alert = alert
        self.attributesType = attributesType
        self.attributes = attributes
        self.inputPushToken = inputPushToken
        self.inputPushChannel = inputPushChannel
    }

    /// The `aps` object of a whole push payload (JSON text kept `raw` is parsed first); nil
    /// when there is none.
    public static func aps(of payload: JSONValue) -> JSONObject? {
        LiveActivityJSON.parsedIfRaw(payload)["aps"].map(LiveActivityJSON.parsedIfRaw)?.objectValue
    }

    /// Reads `aps` as the device does. Checks the shape and decodability only; whether the
    /// app declares the type, the size with the stored attributes and the activity's state
    /// are the book's to check.
    public static func parse(aps: JSONObject, strictDecoding: Bool = false) -> Result<LiveActivityPayload, LiveActivityRefusal> {
        do throws(LiveActivityRefusal) {
            return .success(try read(aps, strictDecoding: strictDecoding))
        } catch {
            return .failure(error)
        }
    }

    private static func read(_ aps: JSONObject, strictDecoding: Bool) throws(LiveActivityRefusal) -> LiveActivityPayload {
        guard let eventValue = aps["event"] else { throw LiveActivityRefusal(nil, "aps.event is missing (start, update or end)") }
        guard let name = eventValue.stringValue else {
            throw LiveActivityRefusal(nil, "aps.event is not a string (start, update or end)")
        }
        guard let event = LiveActivityPushEvent(rawValue: name) else {
            throw LiveActivityRefusal(nil, "aps.event \"\(name)\" is not start, update or end")
        }
        func refuse(_ detail: String) -> LiveActivityRefusal { LiveActivityRefusal(event, detail) }

        guard let timestampValue = aps["timestamp"] else { throw refuse("timestamp is missing (seconds since 1970)") }
        guard let timestamp = timestampValue.numberValue, timestamp.isFinite else {
            throw refuse("timestamp is not a number (seconds since 1970)")
        }
        var payload = LiveActivityPayload(event: event, timestamp: timestamp)

        if event == .start {
            guard let type = aps["attributes-type"] else { throw refuse("attributes-type is missing") }
            guard let typeName = type.stringValue, !typeName.isEmpty else { throw refuse("attributes-type is not a string") }
            payload.attributesType = typeName
            guard let attributes = aps["attributes"] else { throw refuse("attributes is missing") }
            guard attributes.objectValue != nil else { throw refuse("attributes is not an object") }
            payload.attributes = attributes
        }
        if let state = aps["content-state"] {
            guard state.objectValue != nil else { throw refuse("content-state is not an object") }
            payload.contentState = state
        } else if event != .end {
            throw refuse("content-state is missing")
        }
        // `"alert": null` is no alert, as for every push (JSON encoders write null for unset fields).
        if let alert = aps["alert"], alert != .null {
            guard alert.stringValue != nil || alert.objectValue != nil else { throw refuse("alert is neither a string nor an object") }
            payload.alert = alert
        } else if event == .start {
            throw refuse("alert is missing (a push-to-start needs one)")
        }
        payload.staleDateMs = try seconds(aps, "stale-date", event).map(LiveActivityTime.ms(fromSeconds:))
        if event == .end { payload.dismissalDateMs = try seconds(aps, "dismissal-date", event).map(LiveActivityTime.ms(fromSeconds:)) }
        payload.relevanceScore = try number(aps, "relevance-score", event)
        if event == .start {
            let token = aps["input-push-token"]
            payload.inputPushToken = token?.intValue == 1 || token?.boolValue == true
            if let channel = aps["input-push-channel"] {
                guard let id = channel.stringValue, !id.isEmpty else { throw refuse("input-push-channel is not a string (a channel id)") }
                payload.inputPushChannel = id
            }
            if payload.inputPushToken && payload.inputPushChannel != nil {
                throw refuse("input-push-token and input-push-channel are both set; an activity gets its updates one way")
            }
        }

        // The app decodes attributes and content state with Codable: what it cannot decode
        // drops the push. Whether a null or a date string is such depends on the app's types,
        // which the emulator does not know: judged only with --live-activity-strict-decoding.
        if strictDecoding {
            if let attributes = payload.attributes { try LiveActivityJSON.checkDecodable(attributes, field: "attributes", event: event) }
            if let state = payload.contentState { try LiveActivityJSON.checkDecodable(state, field: "content-state", event: event) }
        }
        return payload
    }

    private static func number(_ aps: JSONObject, _ key: String, _ event: LiveActivityPushEvent) throws(LiveActivityRefusal) -> Double? {
        guard let value = aps[key] else { return nil }
        guard let number = value.numberValue, number.isFinite else { throw LiveActivityRefusal(event, "\(key) is not a number") }
        return number
    }

    private static func seconds(_ aps: JSONObject, _ key: String, _ event: LiveActivityPushEvent) throws(LiveActivityRefusal) -> Double? {
        guard let value = aps[key] else { return nil }
        guard let number = value.numberValue, number.isFinite else {
            throw LiveActivityRefusal(event, "\(key) is not a number (seconds since 1970)")
        }
        return number
    }
}

/// Seconds (as payloads write them) and ms (as the model keeps time), and how both read in
/// explanations.
enum LiveActivityTime {
    /// Whole ms, clamped far inside Int64 (a payload may say 1e300).
    static func ms(fromSeconds seconds: Double) -> Int64 {
        let ms = (seconds * 1000).rounded()
        return Int64(min(max(ms, -9.0e15), 9.0e15))
    }

    /// `1700000000`, or `1700000000.5`: as the payload wrote it.
    static func seconds(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 9.0e15 ? String(Int64(value)) : String(value)
    }

    static func time(_ ms: Int64) -> String { RFC3339.format(milliseconds: ms) }
}

/// The checks Codable would fail on, over JSON values.
enum LiveActivityJSON {
    /// A value kept as JSON text, parsed (anything else as it is).
    static func parsedIfRaw(_ value: JSONValue) -> JSONValue {
        guard case .raw(let bytes) = value else { return value }
        return (try? JSONValue.parse(bytes)) ?? value
    }

    /// The serialized size the 4 KB limit counts.
    static func byteCount(_ value: JSONValue?) -> Int { value?.serializedBytes().count ?? 0 }

    /// A null anywhere fails a non-optional field (which the model cannot tell from an
    /// optional one: with strict decoding any null is refused), and an ISO-8601 string where a
    /// `Date` is expected fails too, since ActivityKit decodes dates from seconds since 1970.
    static func checkDecodable(_ value: JSONValue, field: String, event: LiveActivityPushEvent) throws(LiveActivityRefusal) {
        if let pointer = firstNull(in: value, pointer: "") {
            throw LiveActivityRefusal(event, "\(field) has a null value at \(pointer.isEmpty ? "/" : pointer)")
        }
        if let path = firstDateString(in: value, path: field) {
            throw LiveActivityRefusal(event, "\(path) looks like an ISO-8601 date string; dates decode from seconds since 1970")
        }
    }

    /// The JSON Pointer (RFC 6901) of the first null, depth first.
    static func firstNull(in value: JSONValue, pointer: String) -> String? {
        // The path is spelled only once a null is found (a broadcast checks every subscriber).
        guard let steps = firstPath(in: value, where: { $0 == .null }) else { return nil }
        return pointer
            + steps.reversed().map { step in
                switch step {
                case .key(let key): return "/" + key.replacing("~", with: "~0").replacing("/", with: "~1")
                case .index(let index): return "/\(index)"
                }
            }.joined()
    }

    /// The dotted path (`attributes.stops[1].eta`) of the first string that looks like a date.
    static func firstDateString(in value: JSONValue, path: String) -> String? {
        guard
            let steps = firstPath(
                in: value,
                where: {
                    if case .string(let text) = $0 { return looksLikeDateTime(text) } else { return false }
                })
        else { return nil }
        return path
            + steps.reversed().map { step in
                switch step {
                case .key(let key): return "." + key
                case .index(let index): return "[\(index)]"
                }
            }.joined()
    }

    enum PathStep {
        case key(String)
        case index(Int)
    }

    /// The steps to the first value that matches, innermost first; nil when none does.
    static func firstPath(in value: JSONValue, where matches: (JSONValue) -> Bool) -> [PathStep]? {
        if matches(value) { return [] }
        switch value {
        case .object(let object):
            for member in object {
                if var found = firstPath(in: member.value, where: matches) {
                    found.append(.key(member.key))
                    return found
                }
            }
            return nil
        case .array(let items):
            for (index, item) in items.enumerated() {
                if var found = firstPath(in: item, where: matches) {
                    found.append(.index(index))
                    return found
                }
            }
            return nil
        default: return nil
        }
    }

    /// `YYYY-MM-DDTHH:MM`, then only what a date-time continues with (seconds, fraction,
    /// `Z` or an offset): `2025-01-01T10:00:00Z`, `2025-01-01T10:00:00.5+02:00`.
    static func looksLikeDateTime(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count >= 16, bytes.count <= 40 else { return false }
        func digits(_ range: Range<Int>) -> Bool { bytes[range].allSatisfy { $0 >= 0x30 && $0 <= 0x39 } }
        guard digits(0..<4), bytes[4] == UInt8(ascii: "-"), digits(5..<7), bytes[7] == UInt8(ascii: "-"), digits(8..<10),
            bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: "t"), digits(11..<13), bytes[13] == UInt8(ascii: ":"),
            digits(14..<16)
        else { return false }
        return bytes[16...].allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ":.+-Zz".utf8.contains($0) }
    }
}
