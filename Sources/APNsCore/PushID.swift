import Foundation
public import HTTPGrammar

/// An id a push is known by: its `apns-id`, or in sandbox its `apns-unique-id`. Either the 128
/// bits the emulator drew, made into text only when someone reads it as text, or the id a client
/// sent (or a store kept), as it came.
///
/// Why not a String: both ids were formatted on every push (an allocation, the digits and UTF-8
/// validation, about 640 instructions each) and copied into the answer, the journal record and
/// the notification handed to delivery, though on a push's way through only the answer needs
/// their text, and it writes the bits straight into the bytes HTTP/2 sends (`drawn`).
public struct PushID: Sendable {
    private var high: UInt64
    private var low: UInt64
    /// The id as sent or kept (`.given`); empty otherwise.
    private var given: String
    private var form: Form

    private enum Form: UInt8, Sendable {
        /// No id (`apns-unique-id` in production).
        case none
        /// Drawn, written with upper-case digits (an `apns-id`, as APNs makes them).
        case upper
        /// Drawn, written with lower-case digits (an `apns-unique-id`).
        case lower
        /// Text the emulator did not draw.
        case given
    }

    /// No id.
    public static let none = PushID(high: 0, low: 0, given: "", form: .none)

    private init(high: UInt64, low: UInt64, given: String, form: Form) {
        self.high = high
        self.low = low
        self.given = given
        self.form = form
    }

    /// An id as a client sent it or a store kept it: its text is kept unchanged.
    public init(_ text: String) {
        self.init(high: 0, low: 0, given: text, form: .given)
    }

    /// Drawn bits, written as UUID text with upper- or lower-case digits.
    public init(high: UInt64, low: UInt64, uppercase: Bool) {
        self.init(high: high, low: low, given: "", form: uppercase ? .upper : .lower)
    }

    /// There is an id (`none` has none).
    public var exists: Bool { form != .none }

    /// The id as text: the drawn bits formatted now (every read makes a new String), the given
    /// text as it came, or "" for none.
    public var text: String {
        switch form {
        case .none: return ""
        case .upper, .lower: return CanonicalUUID.format(high, low, uppercase: form == .upper)
        case .given: return given
        }
    }

    /// `text`, or nil for none.
    public var optionalText: String? { form == .none ? nil : text }

    /// The bytes of `text`, without making it.
    public var byteCount: Int {
        switch form {
        case .none: return 0
        case .upper, .lower: return UUIDText.count
        case .given: return given.utf8.count
        }
    }

    /// The bits of a drawn id, for writing its text where it is needed; nil for a given id or none.
    public var drawn: (high: UInt64, low: UInt64, uppercase: Bool)? {
        form == .upper || form == .lower ? (high, low, form == .upper) : nil
    }

    /// The text of a given id; nil for a drawn id or none.
    public var givenText: String? { form == .given ? given : nil }

    /// Whether `text` is this id compared without case (`caseInsensitiveCompare`, as the journal
    /// is searched by id). A drawn id is compared by its bits, so nothing is formatted.
    public func matches(ignoringCase text: String) -> Bool {
        switch form {
        case .none: return false
        case .upper, .lower:
            guard let bits = UUIDText.bits(of: text.utf8) else { return false }
            return bits.high == high && bits.low == low
        case .given: return given.caseInsensitiveCompare(text) == .orderedSame
        }
    }
}
