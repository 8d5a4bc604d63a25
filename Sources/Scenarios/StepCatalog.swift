/// What each step (`"do": KIND`) takes. One table drives the file check (unknown, missing and
/// mistyped fields) and the field list in error messages, so they cannot drift apart.
public enum StepKind: String, Sendable, CaseIterable {
    case device, install, uninstall, reinstall, restore, rotate
    case permit, deny
    case launch, foreground, background, suspend, terminate, appState
    case online, offline
    case login, logout, switchAccount = "switch"
    case tap, respond
    case notificationSettings, focus, scheduledSummary, deviceSwitches
    case advanceClock, sleep
    case push, run, http
    case declareActivities, startActivity, endActivity, dismissActivity
    case createChannel, broadcast
    case waitFor, expectNone, expect
    case save
}

/// A field's JSON type. A string holding `${…}` is accepted for any scalar type and checked
/// after substitution, when the step runs.
enum FieldType: Equatable {
    case string, number, bool, object, array, any
    /// A string, or null (e.g. `"userId": null`: nobody logged in).
    case stringOrNull
    /// An object of criteria: `delivery` or `backendCall` fields.
    case criteria(CriteriaKind)

    var words: String {
        switch self {
        case .string: return "a string"
        case .number: return "a number"
        case .bool: return "true or false"
        case .object: return "an object"
        case .array: return "an array"
        case .any: return "any JSON value"
        case .stringOrNull: return "a string or null"
        case .criteria(let kind): return "an object of \(kind.rawValue) criteria"
        }
    }
}

enum CriteriaKind: String {
    case delivery, backendCall, activity

    /// The fields a criteria object may hold.
    var fields: [FieldSpec] {
        switch self {
        case .delivery:
            return [
                FieldSpec("device", .string, "device alias"), FieldSpec("token", .string, "device token"),
                FieldSpec("apnsId", .string, "apns-id"), FieldSpec("bundleId", .string, "app (topic)"),
                FieldSpec("outcome", .string, "delivered, deferred, throttled, …"),
                FieldSpec("callback", .string, "a callback that fired, e.g. didReceiveRemoteNotification"),
                FieldSpec("display", .string, "banner, notificationCenter, scheduledSummary, none"),
                FieldSpec("interruptionLevel", .string, "the level iOS used: passive, active, time-sensitive, critical"),
                FieldSpec("sound", .string, "none, played, silenced, critical"),
                FieldSpec("action", .string, "the user's response: an action identifier, or default / dismiss"),
                FieldSpec("crossAccount", .bool, "flagged by the cross-account detector"),
                FieldSpec("userId", .stringOrNull, "account logged in at delivery"),
                FieldSpec("addressee", .string, "whom the payload names"),
                FieldSpec("pushType", .string, "alert, background, …"), FieldSpec("status", .any, "200, 410 or \"4xx\""),
            ]
        case .backendCall:
            return [
                FieldSpec("device", .string, "device alias"), FieldSpec("hook", .string, "register, bind, unbind, fetch"),
                FieldSpec("bundleId", .string, "app"), FieldSpec("token", .string, "the token the call carries"),
                FieldSpec("userId", .stringOrNull, "account logged in when it was made"),
                FieldSpec("status", .any, "the backend's answer: 200 or \"2xx\""),
                FieldSpec("state", .string, "pending, retrying, done, failed, dropped"),
                FieldSpec("url", .string, "a substring of the called URL"),
            ]
        case .activity:
            return [
                FieldSpec("name", .string, required: true, "the activity's name (startActivity, or push with startsActivity)"),
                FieldSpec("state", .string, "active, stale, ended, dismissed"),
                FieldSpec("contentState", .object, "values its content state has: {\"eta\": 5}"),
                FieldSpec("updates", .number, "how many updates it has shown"),
                FieldSpec("attributesType", .string, "its ActivityAttributes type"),
                FieldSpec("startedBy", .string, "app or push"),
            ]
        }
    }
}

struct FieldSpec {
    let name: String
    let type: FieldType
    let required: Bool
    let help: String
    /// What the value may be beyond its type (checked in the file and again once substituted).
    let rule: ValueRule?

    init(_ name: String, _ type: FieldType, required: Bool = false, _ help: String, rule: ValueRule? = nil) {
        self.name = name
        self.type = type
        self.required = required
        self.help = help
        self.rule = rule
    }
}

extension StepKind {
    /// Fields every step may have.
    static let commonFields = [
        FieldSpec("do", .string, required: true, "the step kind"),
        FieldSpec("name", .string, "a label for the report"),
        FieldSpec("save", .object, "variables to set after the step: {\"NAME\": \"${…}\"}"),
    ]

    private static let deviceField = FieldSpec("device", .string, "device alias (optional when the scenario has one device)")
    private static let bundleField = FieldSpec("bundleId", .string, "app (default: the device's app)")

    var fields: [FieldSpec] {
        let appStep = [Self.deviceField, Self.bundleField]
        switch self {
        case .device:
            return [
                FieldSpec("alias", .string, required: true, "the name later steps use"),
                FieldSpec("bundleId", .string, "app to install (default: the scenario's bundleId)"),
                FieldSpec("environment", .string, "sandbox or production"),
                FieldSpec("authorization", .string, "authorized, denied, provisional, ephemeral, notDetermined"),
                FieldSpec("appState", .string, "the state the app is launched into (default background; notRunning: installed, not opened)"),
                FieldSpec("backgroundMode", .bool, "the app has the remote-notification background mode"),
                FieldSpec("deviceId", .string, "the emulator's device id (default: the alias)", rule: .deviceID),
            ]
        case .install, .reinstall:
            return appStep + [
                FieldSpec("environment", .string, "sandbox or production (default: the device's)"),
                FieldSpec("authorization", .string, "permission (default authorized)"),
                FieldSpec("appState", .string, "the state it is launched into (default background; notRunning: not opened)"),
                FieldSpec("backgroundMode", .bool, "the app has the remote-notification background mode"),
            ]
        case .uninstall, .rotate, .deny, .launch, .foreground, .background, .suspend, .terminate:
            return appStep
        case .restore:
            return [
                FieldSpec("device", .string, required: true, "alias of the device restored onto (made when new)"),
                FieldSpec("from", .string, required: true, "alias of the device whose backup is restored"),
            ]
        case .permit:
            return appStep + [FieldSpec("authorization", .string, "authorized (default), provisional or ephemeral")]
        case .appState:
            return appStep + [FieldSpec("state", .string, required: true, "foreground, background, suspended, notRunning, terminated")]
        case .online, .offline, .logout:
            return [Self.deviceField]
        case .login, .switchAccount:
            return [Self.deviceField, FieldSpec("user", .string, required: true, "the account", rule: .userID)]
        case .tap:
            return [Self.deviceField, FieldSpec("apnsId", .string, "the notification (default: the newest one on screen)")]
        case .respond:
            return [
                Self.deviceField, FieldSpec("apnsId", .string, "the notification (default: the newest one on screen)"),
                FieldSpec("action", .string, required: true, "default (a tap), dismiss, or an action identifier of its category"),
                FieldSpec("text", .string, "what the user types into a text-input action"),
                FieldSpec("expect", .object, "{\"status\": 400} to expect a refusal (default: 200)"),
            ]
        case .notificationSettings:
            return appStep + [
                FieldSpec(
                    "settings", .object, required: true,
                    "categories, foregroundPresentation, timeSensitiveEntitlement, criticalAlertEntitlement, badge, … (docs/device-model.md)")
            ]
        case .focus:
            return [
                Self.deviceField, FieldSpec("off", .bool, "turn the Focus off"),
                FieldSpec("mode", .string, "the Focus's name (default Do Not Disturb)"),
                FieldSpec("allowedApps", .array, "bundle ids that still interrupt"),
                FieldSpec("allowedPeople", .array, "senders that still interrupt (the app's senderKey)"),
                FieldSpec("allowTimeSensitive", .bool, "the Focus lets time-sensitive notifications through (default true)"),
            ]
        case .scheduledSummary:
            return [
                Self.deviceField, FieldSpec("off", .bool, "turn the summary off"),
                FieldSpec("times", .array, "times of day such as \"08:00\", \"18:00\""),
                FieldSpec("apps", .array, "bundle ids whose notifications wait for it"),
                FieldSpec("utcOffsetMinutes", .number, "the device's time zone (default 0: UTC)"),
            ]
        case .deviceSwitches:
            return [
                Self.deviceField, FieldSpec("muted", .bool, "the ring/silent switch is on silent"),
                FieldSpec("locked", .bool, "the device is locked"),
            ]
        case .advanceClock:
            return [FieldSpec("seconds", .number, required: true, "how far to move the emulator's time ahead", rule: .clockSeconds)]
        case .sleep:
            return [FieldSpec("ms", .number, required: true, "milliseconds", rule: .waitMs)]
        case .push:
            return [
                FieldSpec("device", .string, "device alias: its app's current token"),
                FieldSpec("token", .string, "a token, instead of device"),
                FieldSpec("activity", .string, "a named Live Activity: its update token, instead of device"),
                FieldSpec("pushToStart", .string, "with device: the push-to-start token of this ActivityAttributes type"),
                FieldSpec("startsActivity", .string, "with pushToStart: the name of the activity the push starts"),
                FieldSpec("staleIn", .number, "sets aps.stale-date this many seconds after the emulator's now", rule: .dateOffset),
                FieldSpec("dismissIn", .number, "sets aps.dismissal-date this many seconds after the emulator's now", rule: .dateOffset),
                FieldSpec("bundleId", .string, "the app (apns-topic unless topic is given)"),
                FieldSpec("topic", .string, "apns-topic"),
                FieldSpec("environment", .string, "sandbox or production (default: the app's)"),
                FieldSpec("payload", .any, "a JSON object, or text sent as is"),
                FieldSpec("pushType", .string, "apns-push-type"), FieldSpec("priority", .number, "apns-priority", rule: .priority),
                FieldSpec("expiration", .number, "apns-expiration", rule: .expiration),
                FieldSpec("expiresIn", .number, "apns-expiration this many seconds after the emulator's now", rule: .dateOffset),
                FieldSpec("collapseId", .string, "apns-collapse-id"),
                FieldSpec("apnsId", .string, "apns-id"),
                FieldSpec("expect", .object, "{\"status\": 200, \"reason\": …} (default: status 200)"),
            ]
        case .run:
            return [
                FieldSpec("argv", .array, required: true, "the command and its arguments"),
                FieldSpec("env", .object, "more environment variables"),
                FieldSpec("cwd", .string, "working directory (default: the runner's)"),
                FieldSpec("expectExit", .number, "expected exit status (default 0)", rule: .exitStatus),
                FieldSpec("stdoutContains", .string, "text the output must contain"),
                FieldSpec("timeoutMs", .number, "kill it after this long (default 60000)", rule: .timeoutMs),
            ]
        case .http:
            return [
                FieldSpec("url", .string, required: true, "http://host:port/path", rule: .httpURL),
                FieldSpec("method", .string, "GET (default), POST, …"),
                FieldSpec("headers", .object, "request headers"), FieldSpec("body", .any, "a JSON body"),
                FieldSpec("expect", .object, "{\"status\": 200, \"json\": {\"/pointer\": value}}"),
                FieldSpec("timeoutMs", .number, "default 10000", rule: .timeoutMs),
            ]
        case .declareActivities:
            return appStep + [
                FieldSpec("types", .array, required: true, "the app's ActivityAttributes type names"),
                FieldSpec("frequentUpdates", .bool, "NSSupportsLiveActivitiesFrequentUpdates (a larger update budget)"),
            ]
        case .startActivity:
            return appStep + [
                FieldSpec("activity", .string, required: true, "the name later steps use"),
                FieldSpec("attributesType", .string, required: true, "a declared ActivityAttributes type"),
                FieldSpec("attributes", .object, "the static data"), FieldSpec("contentState", .object, "the first content"),
                FieldSpec("pushToken", .bool, "take updates by token push (default true; false: none)"),
                FieldSpec("channel", .string, "take updates on this channel (its name from createChannel)"),
                FieldSpec("channelId", .string, "take updates on the channel with this apns-channel-id"),
            ]
        case .endActivity:
            return [
                FieldSpec("activity", .string, required: true, "the activity's name"),
                FieldSpec("contentState", .object, "the final content (default: the last shown)"),
                FieldSpec("dismissIn", .number, "leaves the Lock Screen this many seconds after the emulator's now", rule: .dateOffset),
            ]
        case .dismissActivity:
            return [FieldSpec("activity", .string, required: true, "the activity's name")]
        case .createChannel:
            return [
                FieldSpec("channel", .string, required: true, "the name later steps use"),
                FieldSpec("bundleId", .string, "the app (default: the scenario's)"),
                FieldSpec("environment", .string, "sandbox or production"),
                FieldSpec("messageStoragePolicy", .number, "0: no message stored, 1: the most recent (default 1)", rule: .storagePolicy),
                FieldSpec("expect", .object, "{\"status\": 201, \"reason\": …} (default: status 201)"),
            ]
        case .broadcast:
            return [
                FieldSpec("channel", .string, "a channel's name (from createChannel)"),
                FieldSpec("channelId", .string, "an apns-channel-id, instead of channel"),
                FieldSpec("bundleId", .string, "the app (default: the channel's)"),
                FieldSpec("environment", .string, "sandbox or production (default: the channel's)"),
                FieldSpec("payload", .any, required: true, "the aps update: a JSON object, or text sent as is"),
                FieldSpec("pushType", .string, "apns-push-type (default LiveActivity)"),
                FieldSpec("priority", .number, "apns-priority (default 10)", rule: .priority),
                FieldSpec("expiration", .number, "apns-expiration (default 0)", rule: .expiration),
                FieldSpec("expiresIn", .number, "apns-expiration this many seconds after the emulator's now", rule: .dateOffset),
                FieldSpec("staleIn", .number, "sets aps.stale-date this many seconds after the emulator's now", rule: .dateOffset),
                FieldSpec("dismissIn", .number, "sets aps.dismissal-date this many seconds after the emulator's now", rule: .dateOffset),
                FieldSpec("expect", .object, "{\"status\": 200, \"reason\": …} (default: status 200)"),
            ]
        case .waitFor:
            return [
                FieldSpec("delivery", .criteria(.delivery), "wait for a notification record"),
                FieldSpec("backendCall", .criteria(.backendCall), "wait for an app's call to its backend"),
                FieldSpec("activity", .criteria(.activity), "wait until a Live Activity is like this"),
                FieldSpec("count", .number, "at least this many (default 1)", rule: .count),
                FieldSpec("timeoutMs", .number, "default 10000", rule: .waitMs),
                FieldSpec("since", .any, "\"start\" (default), \"step\", or emulator time in ms"),
            ]
        case .expectNone:
            return [
                FieldSpec("delivery", .criteria(.delivery), "no such notification record"),
                FieldSpec("backendCall", .criteria(.backendCall), "no such backend call"),
                FieldSpec("withinMs", .number, "how long to watch (default 1000)", rule: .waitMs),
                FieldSpec("since", .any, "\"start\" (default), \"step\", or emulator time in ms"),
            ]
        case .expect:
            return [
                Self.deviceField, Self.bundleField,
                FieldSpec("userId", .stringOrNull, "account logged in (null: nobody)"),
                FieldSpec("token", .string, "the app's token equals this"),
                FieldSpec("tokenNot", .string, "the app's token differs from this"),
                FieldSpec("tokenUploadPending", .bool, "a token waits to be uploaded at login"),
                FieldSpec("authorization", .string, "permission"), FieldSpec("appState", .string, "run state"),
                FieldSpec("installed", .bool, "the app is installed"),
                FieldSpec("deliveries", .criteria(.delivery), "count notification records like these"),
                FieldSpec("backendCalls", .criteria(.backendCall), "count backend calls like these"),
                FieldSpec("activity", .criteria(.activity), "a Live Activity is like this now"),
                FieldSpec("count", .number, "exactly this many deliveries or backend calls", rule: .count),
                FieldSpec("checks", .object, "{\"crossAccount\": N}: the detector's count for this scenario's devices"),
                FieldSpec("since", .any, "for deliveries/backendCalls: \"start\" (default), \"step\", or ms"),
            ]
        case .save:
            return []
        }
    }

    /// Steps whose `device` names an alias that must exist (made by an earlier `device` step).
    var usesDevice: Bool {
        switch self {
        case .device, .restore, .advanceClock, .sleep, .run, .http, .waitFor, .expectNone, .save: return false
        case .endActivity, .dismissActivity, .createChannel, .broadcast: return false
        case .push, .expect: return false  // only without a token or another subject (StepParser)
        default: return true
        }
    }
}
