/// A strict, allocation-free JSON syntax check (RFC 8259), run on every payload. Foundation's
/// parser builds a whole object graph, which is far too slow for the request path. Payloads
/// that pass travel on as their bytes (`JSONValue.raw`): devices and records get exactly what
/// the provider sent.
public enum JSONValidator {
    public enum Verdict: Equatable, Sendable {
        case object
        case notAnObject
        case invalid(offset: Int)
        /// Valid so far, but objects and arrays nest deeper than `maxDepth` at `offset`.
        case tooDeep(offset: Int)

        public var isValid: Bool {
            switch self {
            case .object, .notAnObject: return true
            case .invalid, .tooDeep: return false
            }
        }
    }

    public static func check(_ bytes: [UInt8]) -> Verdict {
        bytes.withUnsafeBufferPointer { buffer in
            var scanner = Scanner(bytes: buffer)
            scanner.skipWhitespace()
            let isObject = scanner.peek() == UInt8(ascii: "{")
            guard scanner.value(depth: 0) else {
                return scanner.tooDeep ? .tooDeep(offset: scanner.index) : .invalid(offset: scanner.index)
            }
            scanner.skipWhitespace()
            guard scanner.index == buffer.count else { return .invalid(offset: scanner.index) }
            return isObject ? .object : .notAnObject
        }
    }

    /// How deep objects and arrays may nest. Apple publishes no limit; this is more than a
    /// payload needs and stays under what the emulator's JSON reader takes (128 levels, a value
    /// included), with which devices and the admin API read payloads.
    public static let maxDepth = 100

    private struct Scanner {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0
        /// Set when the check failed on `maxDepth`.
        var tooDeep = false

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        @inline(__always) func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

        @inline(__always) mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        mutating func value(depth: Int) -> Bool {
            skipWhitespace()
            guard let c = peek() else { return false }
            switch c {
            case UInt8(ascii: "{"): return object(depth: depth + 1)
            case UInt8(ascii: "["): return array(depth: depth + 1)
            case UInt8(ascii: "\""): return string()
            case UInt8(ascii: "t"): return literal("true")
            case UInt8(ascii: "f"): return literal("false")
            case UInt8(ascii: "n"): return literal("null")
            default: return number()
            }
        }

        mutating func object(depth: Int) -> Bool {
            items(upTo: UInt8(ascii: "}"), depth: depth) { s in
                s.skipWhitespace()
                guard s.peek() == UInt8(ascii: "\""), s.string() else { return false }
                s.skipWhitespace()
                guard s.peek() == UInt8(ascii: ":") else { return false }
                s.index += 1
                return s.value(depth: depth)
            }
        }

        mutating func array(depth: Int) -> Bool {
            items(upTo: UInt8(ascii: "]"), depth: depth) { $0.value(depth: depth) }
        }

        /// The items of an object or array, from its opening byte to `close`, separated by ','
        /// (`item` checks one).
        @inline(__always)
        mutating func items(upTo close: UInt8, depth: Int, _ item: (inout Scanner) -> Bool) -> Bool {
            guard depth <= JSONValidator.maxDepth else {
                tooDeep = true
                return false
            }
            index += 1  // { or [
            skipWhitespace()
            if peek() == close { index += 1; return true }
            while true {
                guard item(&self) else { return false }
                skipWhitespace()
                switch peek() {
                case UInt8(ascii: ","): index += 1
                case close: index += 1; return true
                default: return false
                }
            }
        }

        mutating func string() -> Bool {
            index += 1  // opening quote
            while index < bytes.count {
                // Printable ASCII other than `"` and `\`, the bulk of a string, in a tight loop.
                var i = index
                while i < bytes.count, bytes[i] &- 0x20 < 0x60, bytes[i] != UInt8(ascii: "\""), bytes[i] != UInt8(ascii: "\\") {
                    i += 1
                }
                index = i
                guard index < bytes.count else { return false }
                let c = bytes[index]
                switch c {
                case UInt8(ascii: "\""):
                    index += 1
                    return true
                case UInt8(ascii: "\\"):
                    index += 1
                    guard let e = peek() else { return false }
                    switch e {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                        UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        index += 1
                    case UInt8(ascii: "u"):
                        index += 1
                        for _ in 0..<4 {
                            guard let h = peek(), Hex.isHexDigit(h) else { return false }
                            index += 1
                        }
                    default: return false
                    }
                case 0x00..<0x20:
                    return false  // control characters must be escaped
                case 0x80...:
                    guard utf8Sequence() else { return false }
                default:
                    index += 1
                }
            }
            return false
        }

        /// Validates one multi-byte UTF-8 sequence (no overlongs, no surrogates, <= U+10FFFF).
        mutating func utf8Sequence() -> Bool {
            let lead = bytes[index]
            let length: Int
            var lower: UInt8 = 0x80
            var upper: UInt8 = 0xBF
            switch lead {
            case 0xC2...0xDF: length = 2
            case 0xE0: length = 3; lower = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: length = 3
            case 0xED: length = 3; upper = 0x9F
            case 0xF0: length = 4; lower = 0x90
            case 0xF1...0xF3: length = 4
            case 0xF4: length = 4; upper = 0x8F
            default: return false
            }
            guard index + length <= bytes.count else { return false }
            let second = bytes[index + 1]
            guard second >= lower && second <= upper else { return false }
            for k in 2..<max(2, length) where bytes[index + k] & 0xC0 != 0x80 { return false }
            index += length
            return true
        }

        mutating func literal(_ word: StaticString) -> Bool {
            let count = word.utf8CodeUnitCount
            guard index + count <= bytes.count else { return false }
            let start = word.utf8Start
            for k in 0..<count where bytes[index + k] != start[k] { return false }
            index += count
            return true
        }

        mutating func number() -> Bool {
            if peek() == UInt8(ascii: "-") { index += 1 }
            guard let first = peek(), isDigit(first) else { return false }
            index += 1
            if first != UInt8(ascii: "0") { skipDigits() }
            if peek() == UInt8(ascii: ".") {
                index += 1
                guard let d = peek(), isDigit(d) else { return false }
                skipDigits()
            }
            if let e = peek(), e == UInt8(ascii: "e") || e == UInt8(ascii: "E") {
                index += 1
                if let s = peek(), s == UInt8(ascii: "+") || s == UInt8(ascii: "-") { index += 1 }
                guard let d = peek(), isDigit(d) else { return false }
                skipDigits()
            }
            return true
        }

        @inline(__always) func isDigit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }
        @inline(__always) mutating func skipDigits() {
            while let c = peek(), isDigit(c) { index += 1 }
        }
    }
}
