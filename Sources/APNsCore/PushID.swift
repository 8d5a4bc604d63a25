import Foundation
import HTTPGrammar

/// An id a push is known by: its `apns-id`, or in sandbox its `apns-unique-id`. Either the 128
/// bits the emulator drew, made into text only when someone reads it as text, or the id a client
/// sent (or a store kept), as it came.
///
/// Why not a String: both ids were formatted on every push (an allocation, the digits and UTF-8
/// validation, about 640 instructions each) and copied into the answer, the journal record and
/// the notification handed to delivery, though on a push's way through only the answer needs
/// their text, and it writes the bits straight into the bytes HTTP/2 sends (`drawn`).
public struct PushID: Sendable {
    /// An enum rather than bits, text and a form side by side: 24 bytes instead of 40, in the
    /// answer, the record and the pending notification, which are copied whole.
    private var storage: Storage

    private enum Storage: Sendable {
        /// No id (`apns-unique-id` in production).
        case none
        /// Drawn, written with upper-case digits (an `apns-id`, as APNs makes them).
        case upper(UInt64, UInt64)
        /// Drawn, written with lower-case digits (an `apns-unique-id`).
        case lower(UInt64, UInt64)
        /// Text the emulator did not draw.
        case given(String)
    }

    /// No id.
    public static let none = PushID(storage: .none)

    private init(storage: Storage) {
        self.storage = storage
    }

    /// An id as a client sent it or a store kept it: its text is kept unchanged.
    public init(_ text: String) {
        storage = .given(text)
    }

    /// Drawn bits, written as UUID text with upper- or lower-case digits.
    public init(high: UInt64, low: UInt64, uppercase: Bool) {
        storage = uppercase ? .upper(high, low) : .lower(high, low)
    }

    /// There is an id (`none` has none).
    public var exists: Bool {
        if case .none = storage { return false }
        return true
    }

    /// The id as text: the drawn bits formatted now (every read makes a new String), the given
    /// text as it came, or "" for none.
    public var text: String {
        switch storage {
        case .none: return ""
        case .upper(let high, let low): return CanonicalUUID.format(high, low, uppercase: true)
        case .lower(let high, let low): return CanonicalUUID.format(high, low, uppercase: false)
        case .given(let text): return text
        }
    }

    /// `text`, or nil for none.
    public var optionalText: String? { exists ? text : nil }

    /// The bytes of `text`, without making it.
    public var byteCount: Int {
        switch storage {
        case .none: return 0
        case .upper, .lower: return UUIDText.count
        case .given(let text): return text.utf8.count
        }
    }

    /// The bits of a drawn id, for writing its text where it is needed; nil for a given id or none.
    public var drawn: (high: UInt64, low: UInt64, uppercase: Bool)? {
        switch storage {
        case .upper(let high, let low): return (high, low, true)
        case .lower(let high, let low): return (high, low, false)
        case .none, .given: return nil
        }
    }

    /// The text of a given id; nil for a drawn id or none.
    public var givenText: String? {
        if case .given(let text) = storage { return text }
        return nil
    }

    /// Whether this id's text, lower-cased, is `text` (as the journal's filters compare ids, with
    /// the query lower-cased). A drawn id is compared by its bits, so nothing is formatted.
    public func lowercasedText(is text: String) -> Bool {
        switch storage {
        case .none: return false
        case .upper(let high, let low), .lower(let high, let low):
            guard let bits = UUIDText.bits(of: text.utf8), bits.high == high, bits.low == low else { return false }
            return !text.utf8.contains { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "F") }
        case .given(let given): return given.lowercased() == text
        }
    }

    /// Whether `text` is this id compared without case (`caseInsensitiveCompare`, as the journal
    /// is searched by id). A drawn id is compared by its bits, so nothing is formatted.
    public func matches(ignoringCase text: String) -> Bool {
        switch storage {
        case .none: return false
        case .upper(let high, let low), .lower(let high, let low):
            guard let bits = UUIDText.bits(of: text.utf8) else { return false }
            return bits.high == high && bits.low == low
        case .given(let given): return given.caseInsensitiveCompare(text) == .orderedSame
        }
    }
}
