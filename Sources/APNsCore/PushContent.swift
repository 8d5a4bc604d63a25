/// What a payload asks of the device, read from its `aps` dictionary. Only presence and the two
/// flags matter to the delivery rules (docs/device-model.md, "Delivery rules").
public struct PushContent: Sendable, Equatable {
    /// `alert`, `badge` or `sound` present: something for the user.
    public var isVisible: Bool
    /// `content-available: 1`: wake the app in the background.
    public var contentAvailable: Bool
    /// `mutable-content: 1` on a push with an alert: the Notification Service Extension runs
    /// first (not for sound or badge alone).
    public var mutableContent: Bool
    /// How it is presented needs deciding from more than this walk found: no alert text to
    /// show (an empty alert, a badge or sound alone), a localized alert, a category, an
    /// interruption level, a sound dictionary (`AlertContent` then reads the payload). A plain
    /// alert with a badge under default settings needs no parse: the record's presentation is
    /// read from its payload when someone looks (`Presentation.plain`).
    public var needsPresentation: Bool
    /// `aps.badge` as a whole number (0 or more), when it is one.
    public var badge: Int?
    /// A wake the provider meant and iOS does not read (`PayloadAdvice` says so in the
    /// record): `aps.content-available` that is not the number 1 (`true`, `"1"`), spelt
    /// `content_available` or `contentAvailable`, or outside `aps`.
    public var contentAvailableMisread = false

    public init(
        isVisible: Bool = false, contentAvailable: Bool = false, mutableContent: Bool = false, needsPresentation: Bool = false,
        badge: Int? = nil
    ) {
        self.isVisible = isVisible
        self.contentAvailable = contentAvailable
        self.mutableContent = mutableContent
        self.needsPresentation = needsPresentation
        self.badge = badge
    }

    /// Reads the facts from a payload already known to be a JSON object, without building a
    /// tree: it walks the top-level members, and the members of `aps`.
    public static func read(_ payload: [UInt8]) -> PushContent {
        payload.withUnsafeBufferPointer { bytes in
            var walker = Walker(bytes: bytes)
            return walker.topLevel()
        }
    }

    private struct Walker {
        let bytes: UnsafeBufferPointer<UInt8>
        var i = 0
        /// A string read so far had an escape: keys that do not match byte for byte are then
        /// compared decoded too (`"\u0061ps"` is `"aps"`, RFC 8259 §7). No encoder seen escapes
        /// an ASCII key, so a payload without escapes pays nothing more.
        var escapes = false

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        mutating func topLevel() -> PushContent {
            var content = PushContent()
            var misplaced = false
            skipSpace()
            guard take(UInt8(ascii: "{")) else { return content }
            while let key = memberKey() {
                if equals(key, "aps"), peek() == UInt8(ascii: "{") {
                    // A repeated `aps`: the last one counts, as in the full read (and Foundation's).
                    content = aps()
                    skipSpace()
                    _ = take(UInt8(ascii: "}"))
                } else {
                    if isContentAvailable(key) { misplaced = true }
                    if !skipValue() { break }
                }
                if !nextMember() { break }
            }
            if misplaced { content.contentAvailableMisread = true }
            return content
        }

        /// `content-available` as providers misspell it too (a key of the same length range:
        /// one length check for most keys).
        func isContentAvailable(_ key: Range<Int>) -> Bool {
            guard key.count == 17 || key.count == 16 || escapes else { return false }
            return equals(key, "content-available") || equals(key, "content_available") || equals(key, "contentAvailable")
        }

        /// The value when it is a JSON number (iOS reads `1.0` as 1); nil for anything else.
        func number(_ value: Range<Int>) -> Double? {
            guard let first = value.first.map({ bytes[$0] }), (first >= 0x30 && first <= 0x39) || first == UInt8(ascii: "-") else {
                return nil
            }
            return Double(String(decoding: UnsafeBufferPointer(rebasing: bytes[value]), as: UTF8.self))
        }

        mutating func aps() -> PushContent {
            var content = PushContent()
            var hasAlert = false
            readAps(into: &content, hasAlert: &hasAlert)
            // The service extension runs for alerts only, not for sound or badge alone.
            if !hasAlert {
                content.mutableContent = false
                if content.isVisible { content.needsPresentation = true }
            }
            return content
        }

        private mutating func readAps(into content: inout PushContent, hasAlert: inout Bool) {
            _ = take(UInt8(ascii: "{"))
            while let key = memberKey() {
                let valueStart = i
                if equals(key, "alert"), peek() == UInt8(ascii: "{") {
                    // Walked once: skipped and judged together.
                    hasAlert = true
                    content.isVisible = true
                    guard let plain = plainAlertDictionary() else { return }
                    if !plain { content.needsPresentation = true }
                    if !nextMember() { return }
                    continue
                }
                guard skipValue() else { return }
                let isNull = equals(valueStart..<i, "null")
                if equals(key, "alert") || equals(key, "badge") || equals(key, "sound") {
                    if !isNull { content.isVisible = true }
                    if !isNull && equals(key, "alert") {
                        hasAlert = true
                        // A plain non-empty string needs nothing more; `""` shows nothing.
                        if bytes[valueStart] != UInt8(ascii: "\"") || i - valueStart <= 2 { content.needsPresentation = true }
                    } else if !isNull && equals(key, "badge") {
                        content.badge = Self.wholeNumber(bytes, valueStart..<i)
                        if content.badge == nil { content.needsPresentation = true }
                    } else if !isNull && bytes[valueStart] == UInt8(ascii: "{") {
                        content.needsPresentation = true  // a sound dictionary (critical)
                    }
                } else if equals(key, "category") || equals(key, "interruption-level") {
                    content.needsPresentation = true
                } else if equals(key, "content-available") {
                    // `1` is the wake, `0` (or `0.0`) says none; anything else is a mistake.
                    if equals(valueStart..<i, "1") {
                        content.contentAvailable = true
                    } else if let value = number(valueStart..<i) {
                        content.contentAvailable = value == 1
                        content.contentAvailableMisread = value != 0 && value != 1
                    } else {
                        content.contentAvailableMisread = true
                    }
                } else if equals(key, "content_available") || equals(key, "contentAvailable") {
                    content.contentAvailableMisread = true
                } else if equals(key, "mutable-content") {
                    content.mutableContent = equals(valueStart..<i, "1")
                }
                if !nextMember() { return }
            }
        }

        /// Moves past an alert dictionary; whether it is plain: a non-empty `title`, `subtitle`
        /// or `body` string and nothing but those (no `loc-key`s, which need the app's
        /// strings). nil when the JSON ends early.
        mutating func plainAlertDictionary() -> Bool? {
            _ = take(UInt8(ascii: "{"))
            var hasText = false
            var onlyTexts = true
            while let key = memberKey() {
                let start = i
                guard skipValue() else { return nil }
                let isText = equals(key, "title") || equals(key, "subtitle") || equals(key, "body")
                if !isText && !equals(key, "launch-image") { onlyTexts = false }
                if isText && bytes[start] == UInt8(ascii: "\"") && i - start > 2 { hasText = true }
                if !nextMember() { break }
            }
            skipSpace()
            guard take(UInt8(ascii: "}")) else { return nil }
            return hasText && onlyTexts
        }

        /// `0`…`99999999`: a badge number as iOS takes it (anything else is read in full).
        static func wholeNumber(_ bytes: UnsafeBufferPointer<UInt8>, _ value: Range<Int>) -> Int? {
            guard (1...8).contains(value.count) else { return nil }
            var n = 0
            for k in value {
                let c = bytes[k]
                guard c >= 0x30 && c <= 0x39 else { return nil }
                n = n * 10 + Int(c - 0x30)
            }
            return n
        }

        /// Reads `"key" :` and leaves the cursor at the value; nil at the end of the object.
        mutating func memberKey() -> Range<Int>? {
            skipSpace()
            guard let key = keyRange() else { return nil }
            skipSpace()
            guard take(UInt8(ascii: ":")) else { return nil }
            skipSpace()
            return key
        }

        /// Moves past the `,` after a value; false at the end of the object.
        mutating func nextMember() -> Bool {
            skipSpace()
            return take(UInt8(ascii: ","))
        }

        func peek() -> UInt8? { i < bytes.count ? bytes[i] : nil }

        mutating func take(_ c: UInt8) -> Bool {
            guard peek() == c else { return false }
            i += 1
            return true
        }

        mutating func skipSpace() {
            while let c = peek(), c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 { i += 1 }
        }

        /// The bytes of a string key (without quotes), escapes left as they are.
        mutating func keyRange() -> Range<Int>? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            let start = i
            while let c = peek(), c != UInt8(ascii: "\"") {
                if c == UInt8(ascii: "\\") {
                    escapes = true
                    i += 2
                } else {
                    i += 1
                }
            }
            guard i < bytes.count else { return nil }
            let range = start..<i
            i += 1
            return range
        }

        func equals(_ range: Range<Int>, _ word: StaticString) -> Bool {
            guard range.count == word.utf8CodeUnitCount else { return escapes && decodedEquals(range, word) }
            for k in 0..<range.count where bytes[range.lowerBound + k] != word.utf8Start[k] {
                return escapes && decodedEquals(range, word)
            }
            return true
        }

        /// `range` (a key's bytes, escapes and all) decoded is `word` (ASCII).
        func decodedEquals(_ range: Range<Int>, _ word: StaticString) -> Bool {
            var k = range.lowerBound
            var w = 0
            while k < range.upperBound {
                var c = bytes[k]
                if c == UInt8(ascii: "\\") {
                    guard k + 1 < range.upperBound else { return false }
                    let e = bytes[k + 1]
                    if e == UInt8(ascii: "u") {
                        // The words are ASCII: only \u00XX can be one of their characters.
                        guard k + 5 < range.upperBound,
                            let scalar = UInt32(String(decoding: UnsafeBufferPointer(rebasing: bytes[(k + 2)..<(k + 6)]), as: UTF8.self), radix: 16),
                            scalar < 0x80
                        else { return false }
                        c = UInt8(scalar)
                        k += 6
                    } else {
                        switch e {
                        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): c = e
                        default: return false  // \b \f \n \r \t: in no word
                        }
                        k += 2
                    }
                } else {
                    k += 1
                }
                guard w < word.utf8CodeUnitCount, word.utf8Start[w] == c else { return false }
                w += 1
            }
            return w == word.utf8CodeUnitCount
        }

        /// Skips one JSON value; the payload has already been validated.
        mutating func skipValue() -> Bool {
            guard let c = peek() else { return false }
            switch c {
            case UInt8(ascii: "\""):
                return keyRange() != nil
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                var depth = 0
                while let d = peek() {
                    switch d {
                    case UInt8(ascii: "\""):
                        guard keyRange() != nil else { return false }
                        continue
                    case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                    case UInt8(ascii: "}"), UInt8(ascii: "]"):
                        depth -= 1
                        if depth == 0 {
                            i += 1
                            return true
                        }
                    default: break
                    }
                    i += 1
                }
                return false
            default:
                while let d = peek(), d != UInt8(ascii: ","), d != UInt8(ascii: "}"), d != UInt8(ascii: "]"),
                    d != 0x20, d != 0x0A, d != 0x0D, d != 0x09
                {
                    i += 1
                }
                return true
            }
        }
    }
}
