// DeviceAttention: the device-wide switches that decide whether a notification interrupts the
// user: a Focus (which apps and people may), the scheduled summary (when held notifications
// appear), the ring/silent switch and the lock. Set like Low Power Mode. Pure.

/// A Focus that is on (Do Not Disturb, Work, Sleep…).
public struct FocusMode: Sendable, Equatable {
    public var name = "Do Not Disturb"
    /// Apps whose notifications still interrupt.
    public var allowedApps: [String] = []
    /// People (a communication notification's sender) whose notifications still interrupt.
    public var allowedPeople: [String] = []
    /// The Focus's "Time Sensitive Notifications" switch (on by default in iOS).
    public var allowTimeSensitive = true

    public init(name: String = "Do Not Disturb") { self.name = name }
}

/// The scheduled summary: notifications of `apps` that are not time-sensitive wait for the
/// next of `times` (minutes after midnight, in the device's time zone).
public struct ScheduledSummary: Sendable, Equatable {
    public var times: [Int]
    public var apps: [String]
    /// The device's time zone as an offset from UTC.
    public var utcOffsetMinutes = 0

    public init(times: [Int], apps: [String], utcOffsetMinutes: Int = 0) {
        self.times = times.sorted()
        self.apps = apps
        self.utcOffsetMinutes = utcOffsetMinutes
    }

    static let dayMs: Int64 = 86_400_000

    /// The first summary time after `nowMs`, in ms since the epoch.
    public func next(afterMs nowMs: Int64) -> Int64 {
        let offset = Int64(utcOffsetMinutes) * 60_000
        let local = nowMs + offset
        let midnight = local - ((local % Self.dayMs) + Self.dayMs) % Self.dayMs
        for day in 0..<2 {
            for minutes in times {
                let at = midnight + Int64(day) * Self.dayMs + Int64(minutes) * 60_000
                if at > local { return at - offset }
            }
        }
        return midnight + Self.dayMs - offset
    }

    /// "18:00".
    public static func clock(_ minutes: Int) -> String {
        let (h, m) = (minutes / 60, minutes % 60)
        return (h < 10 ? "0" : "") + String(h) + ":" + (m < 10 ? "0" : "") + String(m)
    }

    /// The time of day of `atMs` in the device's zone, as `clock` writes it.
    public func clock(atMs: Int64) -> String {
        let local = atMs + Int64(utcOffsetMinutes) * 60_000
        return Self.clock(Int(((local % Self.dayMs) + Self.dayMs) % Self.dayMs / 60_000))
    }
}

/// A device's switches when they are not the defaults (`Device.attention`).
final class DeviceAttentionBox: Sendable, Equatable {
    let attention: DeviceAttention
    init(_ attention: DeviceAttention) { self.attention = attention }
    static func == (a: DeviceAttentionBox, b: DeviceAttentionBox) -> Bool { a === b || a.attention == b.attention }
}

/// The device-wide switches; the default interrupts for everything.
public struct DeviceAttention: Sendable, Equatable {
    public var focus: FocusMode?
    public var summary: ScheduledSummary?
    /// The ring/silent switch is on silent: only critical alerts make a sound.
    public var muted = false
    /// The device is locked: actions that need authentication wait for the user to unlock.
    public var locked = false

    public init() {}

    public var isDefault: Bool { focus == nil && summary == nil && !muted && !locked }

    public static let fields = ["focus", "scheduledSummary", "muted", "locked"]
    static let maxNames = 100

    public static func mentions(_ object: JSONObject) -> Bool { fields.contains { object[$0] != nil } }

    /// Takes the fields present in `object` (`"focus": null` turns the Focus off).
    public mutating func apply(_ object: JSONObject) throws(NotificationSettingsError) {
        var next = self
        if let value = object["focus"] { next.focus = try Self.focus(value) }
        if let value = object["scheduledSummary"] { next.summary = try Self.summary(value) }
        if let value = try NotificationSetup.bool(object, "muted") { next.muted = value }
        if let value = try NotificationSetup.bool(object, "locked") { next.locked = value }
        self = next
    }

    public var json: JSONObject {
        JSONObject([
            ("focus", focus.map(Self.json) ?? .null), ("scheduledSummary", summary.map(Self.json) ?? .null),
            ("muted", .bool(muted)), ("locked", .bool(locked)),
        ])
    }

    /// What a store keeps (empty: the default).
    public var storedJSON: [UInt8] { isDefault ? [] : JSONValue.object(json).serializedBytes() }

    public init(storedJSON bytes: [UInt8]) throws(NotificationSettingsError) {
        self.init()
        guard !bytes.isEmpty else { return }
        guard let object = (try? JSONValue.parse(bytes))?.objectValue else {
            throw NotificationSettingsError("stored device switches are not a JSON object")
        }
        try apply(object)
    }

    static func names(_ value: JSONValue?, _ what: String) throws(NotificationSettingsError) -> [String] {
        let names = try NotificationCategory.words(value, at: what)
        guard names.count <= maxNames else { throw NotificationSettingsError("\(what) may name at most \(maxNames)") }
        guard names.allSatisfy({ $0.utf8.count <= NotificationSetup.maxText }) else {
            throw NotificationSettingsError("\(what): each name may be at most \(NotificationSetup.maxText) bytes")
        }
        return names
    }

    static func focus(_ value: JSONValue) throws(NotificationSettingsError) -> FocusMode? {
        if value == .null || value == .bool(false) { return nil }
        var focus = FocusMode()
        if value == .bool(true) { return focus }
        guard let object = value.objectValue else {
            throw NotificationSettingsError(
                "\"focus\" must be null (off), true, or {\"name\", \"allowedApps\", \"allowedPeople\", \"allowTimeSensitive\"}")
        }
        try NotificationCategory.refuseUnknown(object, ["name", "allowedApps", "allowedPeople", "allowTimeSensitive"], at: "focus")
        if let name = try NotificationSetup.text(object["name"], "focus.name", required: false) { focus.name = name }
        focus.allowedApps = try names(object["allowedApps"], "focus.allowedApps")
        focus.allowedPeople = try names(object["allowedPeople"], "focus.allowedPeople")
        if let allow = try NotificationSetup.bool(object, "allowTimeSensitive") { focus.allowTimeSensitive = allow }
        return focus
    }

    static func summary(_ value: JSONValue) throws(NotificationSettingsError) -> ScheduledSummary? {
        if value == .null || value == .bool(false) { return nil }
        guard let object = value.objectValue else {
            throw NotificationSettingsError("\"scheduledSummary\" must be null (off) or {\"times\": [\"08:00\", \"18:00\"], \"apps\": [bundle ids]}")
        }
        try NotificationCategory.refuseUnknown(object, ["times", "apps", "utcOffsetMinutes"], at: "scheduledSummary")
        let texts = try NotificationCategory.words(object["times"], at: "scheduledSummary.times")
        guard (1...12).contains(texts.count) else {
            throw NotificationSettingsError("scheduledSummary.times must list 1 to 12 times such as \"18:00\"")
        }
        var times: [Int] = []
        for text in texts {
            let parts = text.split(separator: ":")
            guard parts.count == 2, parts[0].count == 2, parts[1].count == 2, let h = Int(parts[0]), let m = Int(parts[1]),
                (0..<24).contains(h), (0..<60).contains(m)
            else { throw NotificationSettingsError("scheduledSummary.times: \"\(text)\" is not a time of day such as \"08:00\"") }
            times.append(h * 60 + m)
        }
        var offset = 0
        if let value = object["utcOffsetMinutes"], value != .null {
            guard let minutes = value.intValue, (-840...840).contains(minutes) else {
                throw NotificationSettingsError("scheduledSummary.utcOffsetMinutes must be from -840 to 840")
            }
            offset = Int(minutes)
        }
        return ScheduledSummary(times: Array(Set(times)), apps: try names(object["apps"], "scheduledSummary.apps"), utcOffsetMinutes: offset)
    }

    static func json(_ focus: FocusMode) -> JSONValue {
        [
            "name": .string(focus.name), "allowedApps": .array(focus.allowedApps.map(JSONValue.string)),
            "allowedPeople": .array(focus.allowedPeople.map(JSONValue.string)), "allowTimeSensitive": .bool(focus.allowTimeSensitive),
        ]
    }

    static func json(_ summary: ScheduledSummary) -> JSONValue {
        [
            "times": .array(summary.times.map { .string(ScheduledSummary.clock($0)) }), "apps": .array(summary.apps.map(JSONValue.string)),
            "utcOffsetMinutes": .int(Int64(summary.utcOffsetMinutes)),
        ]
    }
}

extension Device {
    /// The device protocol's `deviceUpdated` frame: Low Power Mode and the switches as they are
    /// now (the answer to the device's own `device` request, or news of an admin API change).
    public var updatedMessage: JSONValue {
        .object(JSONObject([("type", "deviceUpdated"), ("lowPowerMode", .bool(lowPowerMode))] + attention.json.members))
    }
}
