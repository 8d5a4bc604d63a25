import APNsCore
import Foundation
import HTTPGrammar

/// What a step field's value may be beyond its JSON type: a number's range, an id's form.
/// The file check applies a rule to the values written in the file, the run to the values
/// `${…}` filled in, with the same words, so `--check` passes exactly what a run takes.
enum ValueRule: Sendable {
    /// A number in `range` (`whole`: without a fraction); `note` says what the bound is.
    case number(ClosedRange<Double>, whole: Bool, note: String?)
    /// An account, as the emulator takes it.
    case userID
    /// A device id, as the emulator takes it.
    case deviceID
    /// An `http://` URL the request can be sent to.
    case httpURL

    /// Why `value` breaks the rule ("must be …, not …"); nil when it keeps it.
    func problem(_ value: JSONValue) -> String? {
        switch self {
        case .number(let range, let whole, let note):
            let expected =
                "must be \(whole ? "a whole number" : "a number") from \(Self.text(range.lowerBound)) to "
                + "\(Self.text(range.upperBound))" + (note.map { " (\($0))" } ?? "")
            guard let number = Self.number(value) else { return "\(expected), not \(Self.shown(value))" }
            let fits = number.isFinite && range.contains(number) && (!whole || number == number.rounded())
            return fits ? nil : "\(expected), not \(Self.shown(value))"
        case .userID:
            guard let text = ScenarioParser.scalarText(value), World.isValidUserID(text) else {
                return "must be 1 to 256 characters without control characters (the emulator's rule for an account)"
                    + Self.length(value)
            }
            return nil
        case .deviceID:
            guard let text = ScenarioParser.scalarText(value), DeviceRegistry.isValidDeviceID(text) else {
                return "is not a device id: \(DeviceRegistry.deviceIDRule)" + Self.length(value)
            }
            return nil
        case .httpURL:
            guard let text = value.stringValue else { return "must be an http:// URL" }
            do throws(PlainHTTPURL.Problem) { _ = try PlainHTTPURL.parse(text) } catch { return error.message(Self.shown(value)) }
            return nil
        }
    }

    /// A number, or a string holding one (what a `${…}` becomes).
    static func number(_ value: JSONValue) -> Double? {
        if let number = value.numberValue { return number }
        guard let text = value.stringValue?.trimmingCharacters(in: .whitespaces) else { return nil }
        return Double(text)
    }

    /// The value in a message: a number as written in JSON, a long string cut short.
    static func shown(_ value: JSONValue) -> String {
        if let number = value.numberValue { return text(number) }
        // A string with a line break or another control character (a command's stdout, say) is
        // quoted as JSON, so the message stays on its line and shows it.
        let plain = value.stringValue.flatMap { $0.unicodeScalars.contains { $0.value < 0x20 } ? nil : $0 }
        let text = plain ?? value.serialized()
        return text.count > 40 ? String(text.prefix(40)) + "… (\(text.count) characters)" : text
    }

    private static func length(_ value: JSONValue) -> String {
        guard let text = value.stringValue, text.count > 40 else { return "" }
        return "; this one has \(text.count) characters"
    }

    private static func text(_ number: Double) -> String {
        number.isFinite && number == number.rounded() && abs(number) < 1e15 ? String(Int64(number)) : String(number)
    }
}

extension ValueRule {
    /// Real time a step waits (`sleep`, the waits): a run that takes longer is a mistake.
    static let waitMs = ValueRule.number(0...3_600_000, whole: true, note: "1 hour")
    /// How long a command or a request may take before it is killed or given up.
    static let timeoutMs = ValueRule.number(1...3_600_000, whole: true, note: "1 hour")
    /// As far as the emulator's clock moves in one step (`POST /api/v1/clock`).
    static let clockSeconds = ValueRule.number(
        0...Double(OffsetClock.maxAdvanceMilliseconds / 1000), whole: false,
        note: "400 days")
    /// apns-priority: APNs takes 10, 5 and 1; the others up to 10 are sent, to test BadPriority.
    static let priority = ValueRule.number(0...10, whole: true, note: "APNs takes 10, 5 and 1")
    /// apns-expiration: UNIX time in seconds (0: deliver once, do not store).
    static let expiration = ValueRule.number(0...9_999_999_999, whole: true, note: "a UNIX time in seconds")
    static let exitStatus = ValueRule.number(0...255, whole: true, note: nil)
    /// A Live Activity date (stale, dismissal) relative to the emulator's now: up to 400 days.
    static let dateOffset = ValueRule.number(-34_560_000...34_560_000, whole: true, note: "seconds, up to 400 days either way")
    /// message-storage-policy: APNs takes 0 and 1; the others up to 9 are sent, to see the 400.
    static let storagePolicy = ValueRule.number(0...9, whole: true, note: "APNs takes 0 and 1")
    /// How many records or backend calls a step counts: one listing holds at most this many.
    static let count = ValueRule.number(0...Double(Watch.listLimit), whole: true, note: nil)
    /// The detector keeps this many cross-account deliveries for `GET /api/v1/checks`.
    static let crossAccount = ValueRule.number(0...Double(World.crossAccountKeep), whole: true, note: nil)
}

extension StepKind {
    /// The first of the step's fields whose value breaks its rule, and why. The file check
    /// asks with the values the file gives, the run with the values filled in.
    func valueProblem(in object: JSONObject) -> (field: String, problem: String)? {
        for spec in Self.commonFields + fields {
            guard let rule = spec.rule, let value = object[spec.name], value != .null, let problem = rule.problem(value) else { continue }
            return (spec.name, problem)
        }
        return nil
    }
}

/// Device aliases are names in `${device.ALIAS.token}` and, unless a step gives `deviceId`,
/// the device's id as well; activity and channel names (`${activity.NAME.pushToken}`) follow
/// the same rule.
enum AliasRule {
    static let maxCharacters = 128

    /// Why `alias` is not one; nil when it is.
    /// `what`: the word for it in the message (activity and channel names keep the same rule).
    static func problem(_ alias: String, what: String = "an alias") -> String? {
        if alias.contains("${") || alias.contains(".") || alias.isEmpty { return "\(what) is a plain name (no ${…}, no dots)" }
        if alias.count > maxCharacters {
            return "\(what) is at most \(maxCharacters) characters; this one has \(alias.count)"
        }
        return nil
    }
}
