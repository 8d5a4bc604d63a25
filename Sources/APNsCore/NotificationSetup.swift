// NotificationSetup: what an app told UserNotifications about itself (its categories and
// actions, what `willPresent` returns, its strings) and what the user and its entitlements
// allow it (time-sensitive, critical alerts, badges, sounds). The presentation rules read it;
// the admin API, the device protocol and the config file all set it through `apply`. Pure.

/// A setting the admin API, a device or the config file gave that cannot be taken.
public struct NotificationSettingsError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// What `userNotificationCenter(_:willPresent:)` returns (`UNNotificationPresentationOptions`).
public struct PresentationOptions: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let banner = PresentationOptions(rawValue: 1)
    public static let list = PresentationOptions(rawValue: 2)
    public static let sound = PresentationOptions(rawValue: 4)
    public static let badge = PresentationOptions(rawValue: 8)
    public static let all: PresentationOptions = [.banner, .list, .sound, .badge]

    static let names: [(String, PresentationOptions)] = [("banner", .banner), ("list", .list), ("sound", .sound), ("badge", .badge)]
    public var names: [String] { Self.names.filter { contains($0.1) }.map(\.0) }
}

/// One button of a category (`UNNotificationAction`, or `UNTextInputNotificationAction` when
/// `textInput` is set).
public struct NotificationAction: Sendable, Equatable {
    public var identifier: String
    public var title: String
    /// Launches the app into the foreground.
    public var foreground = false
    /// Drawn in red.
    public var destructive = false
    /// Only runs once the device is unlocked.
    public var authenticationRequired = false
    public var textInput: TextInput?

    public struct TextInput: Sendable, Equatable {
        public var buttonTitle: String
        public var placeholder: String

        public init(buttonTitle: String, placeholder: String) {
            self.buttonTitle = buttonTitle
            self.placeholder = placeholder
        }
    }

    public init(identifier: String, title: String) {
        self.identifier = identifier
        self.title = title
    }
}

/// A notification category (`UNNotificationCategory`).
public struct NotificationCategory: Sendable, Equatable {
    public var identifier: String
    public var actions: [NotificationAction]
    /// The app hears about dismissals (`UNNotificationDismissActionIdentifier`).
    public var customDismissAction = false
    /// `categorySummaryFormat`, e.g. "%u more messages from %@".
    public var summaryFormat: String?

    public init(identifier: String, actions: [NotificationAction] = []) {
        self.identifier = identifier
        self.actions = actions
    }

    public func action(_ identifier: String) -> NotificationAction? { actions.first { $0.identifier == identifier } }
}

/// The app's notification setup and the user's per-app switches beyond permission.
public struct NotificationSetup: Sendable, Equatable {
    public var categories: [NotificationCategory] = []
    /// What `willPresent` returns while the app is in the foreground. iOS shows nothing when
    /// an app does not implement it; the emulator's default is everything, what an app that
    /// wants its notifications seen returns (docs/device-model.md, "Presentation").
    public var foregroundPresentation = PresentationOptions.all
    /// The Time Sensitive Notifications capability, and the user's switch for it.
    public var timeSensitiveEntitlement = false
    public var timeSensitiveEnabled = true
    /// The critical-alerts entitlement, and the user's critical-alert permission.
    public var criticalAlertEntitlement = false
    public var criticalAlertsAllowed = false
    /// Announce Notifications (Siri reads them aloud over headphones): time-sensitive ones.
    public var announce = false
    /// The user's Badges and Sounds switches for the app.
    public var badgesEnabled = true
    public var soundsEnabled = true
    /// The app's Localizable.strings: `loc-key` and `title-loc-key` are looked up here.
    public var localizedStrings: [String: String] = [:]
    /// Communication notifications: the service extension names the sender from this payload
    /// key (an INSendMessageIntent), which a Focus's allowed people are matched against.
    public var senderKey: String?

    public init() {}

    public static let maxCategories = 64
    public static let maxActions = 10
    public static let maxStrings = 500
    static let maxText = 256
    static let maxStringValue = 1_024

    public func category(_ identifier: String) -> NotificationCategory? { categories.first { $0.identifier == identifier } }

    /// Nothing set: the presentation rules need not read the payload beyond what
    /// `PushContent` found.
    public var isDefault: Bool {
        // Field by field (cheap: read for every push): no default value is built to compare with.
        categories.isEmpty && foregroundPresentation == .all && !timeSensitiveEntitlement && timeSensitiveEnabled
            && !criticalAlertEntitlement && !criticalAlertsAllowed && !announce && badgesEnabled && soundsEnabled
            && localizedStrings.isEmpty && senderKey == nil
    }

    public static let fields = [
        "categories", "foregroundPresentation", "timeSensitiveEntitlement", "timeSensitiveEnabled", "criticalAlertEntitlement",
        "criticalAlertsAllowed", "announce", "badgesEnabled", "soundsEnabled", "localizedStrings", "senderKey",
    ]

    /// The fields, quoted, for a message that lists them.
    public static var fieldList: String { fields.map { "\"\($0)\"" }.joined(separator: ", ") }

    /// Whether `object` holds any of the setup's fields (an app change may hold none).
    public static func mentions(_ object: JSONObject) -> Bool { fields.contains { object[$0] != nil } }

    /// Takes the setup's fields present in `object` (others are left as they are); keys that
    /// are not the setup's are the caller's to check.
    public mutating func apply(_ object: JSONObject) throws(NotificationSettingsError) {
        var next = self
        if let value = object["categories"] { next.categories = try Self.categories(value) }
        if let value = object["foregroundPresentation"] { next.foregroundPresentation = try Self.options(value) }
        if let value = try Self.bool(object, "timeSensitiveEntitlement") { next.timeSensitiveEntitlement = value }
        if let value = try Self.bool(object, "timeSensitiveEnabled") { next.timeSensitiveEnabled = value }
        if let value = try Self.bool(object, "criticalAlertEntitlement") { next.criticalAlertEntitlement = value }
        if let value = try Self.bool(object, "criticalAlertsAllowed") { next.criticalAlertsAllowed = value }
        if let value = try Self.bool(object, "announce") { next.announce = value }
        if let value = try Self.bool(object, "badgesEnabled") { next.badgesEnabled = value }
        if let value = try Self.bool(object, "soundsEnabled") { next.soundsEnabled = value }
        if let value = object["localizedStrings"] { next.localizedStrings = try Self.strings(value) }
        if let value = object["senderKey"] {
            if value == .null {
                next.senderKey = nil
            } else {
                guard let key = value.stringValue, !key.isEmpty, key.utf8.count <= Self.maxText, key != "aps" else {
                    throw NotificationSettingsError("\"senderKey\" must be the name of a top-level payload key (not \"aps\"), or null")
                }
                next.senderKey = key
            }
        }
        self = next
    }

    public var json: JSONObject {
        JSONObject([
            ("categories", .array(categories.map(\.json))),
            ("foregroundPresentation", .array(foregroundPresentation.names.map(JSONValue.string))),
            ("timeSensitiveEntitlement", .bool(timeSensitiveEntitlement)), ("timeSensitiveEnabled", .bool(timeSensitiveEnabled)),
            ("criticalAlertEntitlement", .bool(criticalAlertEntitlement)), ("criticalAlertsAllowed", .bool(criticalAlertsAllowed)),
            ("announce", .bool(announce)), ("badgesEnabled", .bool(badgesEnabled)), ("soundsEnabled", .bool(soundsEnabled)),
            ("localizedStrings", .object(JSONObject(localizedStrings.sorted { $0.key < $1.key }.map { ($0.key, JSONValue.string($0.value)) }))),
            ("senderKey", senderKey.map(JSONValue.string) ?? .null),
        ])
    }

    /// The setup as a JSON object holding only what differs from the default (what a store
    /// keeps; `apply` reads it back).
    public var storedJSON: [UInt8] {
        guard !isDefault else { return [] }
        let defaults = NotificationSetup().json
        let changed = json.members.filter { member in defaults[member.key] != member.value }
        return JSONValue.object(JSONObject(changed)).serializedBytes()
    }

    public init(storedJSON bytes: [UInt8]) throws(NotificationSettingsError) {
        self.init()
        guard !bytes.isEmpty else { return }
        guard let object = (try? JSONValue.parse(bytes))?.objectValue else {
            throw NotificationSettingsError("stored notification settings are not a JSON object")
        }
        try apply(object)
    }

    // MARK: Parsing

    static func bool(_ object: JSONObject, _ key: String) throws(NotificationSettingsError) -> Bool? {
        guard let value = object[key], value != .null else { return nil }
        guard let bool = value.boolValue else { throw NotificationSettingsError("\"\(key)\" must be true or false") }
        return bool
    }

    static func text(_ value: JSONValue?, _ what: String, required: Bool = true) throws(NotificationSettingsError) -> String? {
        guard let value, value != .null else {
            if required { throw NotificationSettingsError("\(what) is required") }
            return nil
        }
        guard let text = value.stringValue, text.utf8.count <= maxText, !(required && text.isEmpty) else {
            throw NotificationSettingsError("\(what) must be a\(required ? " non-empty" : "") string of at most \(maxText) bytes")
        }
        return text
    }

    static func options(_ value: JSONValue) throws(NotificationSettingsError) -> PresentationOptions {
        guard let items = value.arrayValue else {
            throw NotificationSettingsError("\"foregroundPresentation\" must be a list of banner, list, sound, badge ([] shows nothing)")
        }
        var options: PresentationOptions = []
        for item in items {
            guard let name = item.stringValue, let option = PresentationOptions.names.first(where: { $0.0 == name })?.1 else {
                throw NotificationSettingsError("\"foregroundPresentation\" items must be banner, list, sound or badge")
            }
            options.insert(option)
        }
        return options
    }

    static func strings(_ value: JSONValue) throws(NotificationSettingsError) -> [String: String] {
        guard let object = value.objectValue else { throw NotificationSettingsError("\"localizedStrings\" must be an object of strings") }
        guard object.members.count <= maxStrings else {
            throw NotificationSettingsError("\"localizedStrings\" may hold at most \(maxStrings) strings")
        }
        var strings: [String: String] = [:]
        for (key, item) in object {
            guard key.utf8.count <= maxText else {
                throw NotificationSettingsError("\"localizedStrings\": a key may be at most \(maxText) bytes")
            }
            guard let text = item.stringValue, text.utf8.count <= maxStringValue else {
                throw NotificationSettingsError("\"localizedStrings\".\(key) must be a string of at most \(maxStringValue) bytes")
            }
            strings[key] = text
        }
        return strings
    }

    static func categories(_ value: JSONValue) throws(NotificationSettingsError) -> [NotificationCategory] {
        guard let items = value.arrayValue else { throw NotificationSettingsError("\"categories\" must be a list of categories") }
        guard items.count <= maxCategories else { throw NotificationSettingsError("an app may register at most \(maxCategories) categories") }
        var categories: [NotificationCategory] = []
        for (index, item) in items.enumerated() {
            let category = try NotificationCategory.parse(item, at: "categories[\(index)]")
            if categories.contains(where: { $0.identifier == category.identifier }) {
                throw NotificationSettingsError("categories[\(index)]: \"\(category.identifier)\" is registered twice")
            }
            categories.append(category)
        }
        return categories
    }
}

extension NotificationCategory {
    static func parse(_ value: JSONValue, at place: String) throws(NotificationSettingsError) -> NotificationCategory {
        guard let object = value.objectValue else { throw NotificationSettingsError("\(place) must be an object with \"identifier\"") }
        try Self.refuseUnknown(object, ["identifier", "actions", "options", "summaryFormat"], at: place)
        var category = NotificationCategory(identifier: try NotificationSetup.text(object["identifier"], "\(place).identifier")!)
        if let actions = object["actions"], actions != .null {
            guard let list = actions.arrayValue else { throw NotificationSettingsError("\(place).actions must be a list") }
            guard list.count <= NotificationSetup.maxActions else {
                throw NotificationSettingsError("\(place): a category may have at most \(NotificationSetup.maxActions) actions")
            }
            for (index, item) in list.enumerated() {
                let action = try NotificationAction.parse(item, at: "\(place).actions[\(index)]")
                if category.action(action.identifier) != nil || NotificationResponseAction.reserved.contains(action.identifier) {
                    throw NotificationSettingsError("\(place).actions[\(index)]: identifier \"\(action.identifier)\" is taken")
                }
                category.actions.append(action)
            }
        }
        for option in try Self.words(object["options"], at: "\(place).options") {
            guard option == "customDismissAction" else {
                throw NotificationSettingsError("\(place).options: \"\(option)\" is not a category option (customDismissAction)")
            }
            category.customDismissAction = true
        }
        category.summaryFormat = try NotificationSetup.text(object["summaryFormat"], "\(place).summaryFormat", required: false)
        return category
    }

    static func words(_ value: JSONValue?, at place: String) throws(NotificationSettingsError) -> [String] {
        guard let value, value != .null else { return [] }
        guard let items = value.arrayValue, let words = Optional(items.compactMap(\.stringValue)), words.count == items.count else {
            throw NotificationSettingsError("\(place) must be a list of strings")
        }
        return words
    }

    static func refuseUnknown(_ object: JSONObject, _ known: [String], at place: String) throws(NotificationSettingsError) {
        if let unknown = object.keys.first(where: { !known.contains($0) }) {
            throw NotificationSettingsError("\(place): unknown field \"\(unknown)\" (expected \(known.joined(separator: ", ")))")
        }
    }

    var json: JSONValue {
        [
            "identifier": .string(identifier), "actions": .array(actions.map(\.json)),
            "options": .array(customDismissAction ? ["customDismissAction"] : []),
            "summaryFormat": summaryFormat.map(JSONValue.string) ?? .null,
        ]
    }
}

extension NotificationAction {
    static func parse(_ value: JSONValue, at place: String) throws(NotificationSettingsError) -> NotificationAction {
        guard let object = value.objectValue else { throw NotificationSettingsError("\(place) must be an object with \"identifier\" and \"title\"") }
        try NotificationCategory.refuseUnknown(object, ["identifier", "title", "options", "textInput"], at: place)
        var action = NotificationAction(
            identifier: try NotificationSetup.text(object["identifier"], "\(place).identifier")!,
            title: try NotificationSetup.text(object["title"], "\(place).title")!)
        for option in try NotificationCategory.words(object["options"], at: "\(place).options") {
            switch option {
            case "foreground": action.foreground = true
            case "destructive": action.destructive = true
            case "authenticationRequired": action.authenticationRequired = true
            default:
                throw NotificationSettingsError(
                    "\(place).options: \"\(option)\" is not an action option (foreground, destructive, authenticationRequired)")
            }
        }
        if let input = object["textInput"], input != .null {
            guard let fields = input.objectValue else {
                throw NotificationSettingsError("\(place).textInput must be an object with \"buttonTitle\" and \"placeholder\"")
            }
            try NotificationCategory.refuseUnknown(fields, ["buttonTitle", "placeholder"], at: "\(place).textInput")
            action.textInput = TextInput(
                buttonTitle: try NotificationSetup.text(fields["buttonTitle"], "\(place).textInput.buttonTitle")!,
                placeholder: try NotificationSetup.text(fields["placeholder"], "\(place).textInput.placeholder", required: false) ?? "")
        }
        return action
    }

    var optionNames: [String] {
        [("foreground", foreground), ("destructive", destructive), ("authenticationRequired", authenticationRequired)].filter(\.1).map(\.0)
    }

    var json: JSONValue {
        [
            "identifier": .string(identifier), "title": .string(title), "options": .array(optionNames.map(JSONValue.string)),
            "textInput": textInput.map { ["buttonTitle": .string($0.buttonTitle), "placeholder": .string($0.placeholder)] } ?? .null,
        ]
    }
}
