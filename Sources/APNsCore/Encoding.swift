import Glibc
import HTTPGrammar

/// Small byte-level encoders used on the request path (no Foundation, no regex).
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in alphabet.enumerated() { table[Int(c)] = UInt8(i) }
        // JWTs must use the URL alphabet, but accepting the standard one costs nothing.
        table[Int(UInt8(ascii: "+"))] = 62
        table[Int(UInt8(ascii: "/"))] = 63
        return table
    }()

    /// Decodes base64url text, with or without `=` padding. Returns nil on any invalid byte.
    public static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        var out = [UInt8]()
        out.reserveCapacity(text.count * 3 / 4)
        var acc: UInt32 = 0
        var bits = 0
        var sawPadding = false
        for c in text {
            if c == UInt8(ascii: "=") { sawPadding = true; continue }
            if sawPadding { return nil }
            let v = decodeTable[Int(c)]
            if v == 0xFF { return nil }
            acc = (acc << 6) | UInt32(v)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: acc >> UInt32(bits)))
            }
        }
        // A single leftover sextet cannot encode a byte.
        if bits >= 6 { return nil }
        return out
    }

    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        var out = [UInt8]()
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var acc: UInt32 = 0
        var bits = 0
        for b in bytes {
            acc = (acc << 8) | UInt32(b)
            bits += 8
            while bits >= 6 {
                bits -= 6
                out.append(alphabet[Int((acc >> UInt32(bits)) & 0x3F)])
            }
        }
        if bits > 0 { out.append(alphabet[Int((acc << UInt32(6 - bits)) & 0x3F)]) }
        return String(decoding: out, as: UTF8.self)
    }
}

public enum Hex {
    @inline(__always)
    static func isHexDigit(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46)
    }

    static let lowerDigits = Array("0123456789abcdef".utf8)
    static let upperDigits = Array("0123456789ABCDEF".utf8)

    public static func encode(_ bytes: some Collection<UInt8>, uppercase: Bool = false) -> String {
        let digits = uppercase ? upperDigits : lowerDigits
        return String(unsafeUninitializedCapacity: bytes.count * 2) { buffer in
            var i = 0
            for b in bytes {
                buffer[i] = digits[Int(b >> 4)]
                buffer[i + 1] = digits[Int(b & 0x0F)]
                i += 2
            }
            return i
        }
    }

    /// True when `text` is a non-empty, even-length run of hex digits (either case).
    public static func isEvenLengthHex(_ text: Substring) -> Bool {
        let utf8 = text.utf8
        guard !utf8.isEmpty, utf8.count % 2 == 0 else { return false }
        return utf8.allSatisfy(isHexDigit)
    }

    /// Compares two hex tokens ignoring case, without allocating.
    public static func equalIgnoringCase(_ a: String, _ b: String) -> Bool {
        a.utf8.count == b.utf8.count && a.utf8.elementsEqual(b.utf8, by: asciiCaseInsensitiveEqual)
    }

    /// What one pass over a device token (the text after /3/device/) finds.
    public struct TokenShape: Equatable, Sendable {
        public var isEvenLengthHex: Bool
        public var hasUppercase: Bool
        /// A '/' or '?': the path has more than a token after /3/device/.
        public var hasPathDelimiter: Bool
    }

    /// Classifies a token in a single pass over its bytes (this runs for every request): each
    /// byte's class from a table, OR-ed together (a switch per byte cost 11 instructions a byte).
    public static func shape(ofToken text: Substring) -> TokenShape {
        var text = text
        let seen = text.withUTF8 { bytes in
            shapeClasses.withUnsafeBufferPointer { table in
                var seen: UInt8 = 0
                for c in bytes { seen |= table[Int(c)] }
                return seen
            }
        }
        let evenLength = !text.utf8.isEmpty && text.utf8.count % 2 == 0
        return TokenShape(
            isEvenLengthHex: evenLength && seen & (notHex | pathDelimiter) == 0,
            hasUppercase: seen & upperHex != 0,
            hasPathDelimiter: seen & pathDelimiter != 0)
    }

    private static let upperHex: UInt8 = 1
    private static let pathDelimiter: UInt8 = 2
    private static let notHex: UInt8 = 4
    /// A byte's class for `shape`: 0 for a digit or a-f.
    private static let shapeClasses: [UInt8] = (0...255).map { c -> UInt8 in
        switch c {
        case 0x30...0x39, 0x61...0x66: return 0
        case 0x41...0x46: return upperHex
        case 0x2F, 0x3F: return pathDelimiter
        default: return notHex
        }
    }

    public static func hasUppercase(_ text: Substring) -> Bool {
        // Over the bytes at once: through the UTF-8 view's iterator it cost 2,400 instructions
        // for a 64-digit token (an owner checks each token handed to it).
        var text = text
        return text.withUTF8 { bytes in bytes.contains { $0 >= 0x41 && $0 <= 0x46 } }
    }

    /// Lowercases hex text; returns the input unchanged (no copy) when it already is lowercase.
    public static func lowercased(_ text: Substring) -> String {
        if hasUppercase(text) {
            return String(decoding: text.utf8.map(asciiLowercased), as: UTF8.self)
        }
        return String(text)
    }
}

public enum CanonicalUUID {
    /// 8-4-4-4-12 hex digits. Apple writes lowercase; the case of client ids is not checked
    /// (whether APNs normalises it is unconfirmed, so ids are echoed unchanged).
    public static func isValid(_ text: Substring) -> Bool {
        let utf8 = text.utf8
        guard utf8.count == 36 else { return false }
        var i = 0
        for c in utf8 {
            if i == 8 || i == 13 || i == 18 || i == 23 {
                if c != UInt8(ascii: "-") { return false }
            } else if !Hex.isHexDigit(c) {
                return false
            }
            i += 1
        }
        return true
    }

    static func format(_ high: UInt64, _ low: UInt64, uppercase: Bool) -> String {
        String(unsafeUninitializedCapacity: UUIDText.count) { buffer in
            var text = buffer.mutableSpan
            UUIDText.write(high, low, uppercase: uppercase, into: &text, at: 0)
            return UUIDText.count
        }
    }
}

public enum Bytes {
    /// The same array storage (and count): one array handed on, not merely equal contents.
    /// Storage that two arrays share is never changed in place, so its contents are the same too.
    @inline(__always)
    public static func sameArray<T>(_ a: [T], _ b: [T]) -> Bool {
        a.count == b.count && !a.isEmpty
            && a.withUnsafeBufferPointer { x in b.withUnsafeBufferPointer { y in x.baseAddress == y.baseAddress } }
    }

    /// The same bytes: one `memcmp` (`==` on arrays compares them one by one).
    @inline(__always)
    public static func equal(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        a.count == b.count
            && a.withUnsafeBufferPointer { x in
                b.withUnsafeBufferPointer { y in x.isEmpty || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0 }
            }
    }
}

/// Byte-level ASCII helpers for the request path, where String's Unicode-aware operations
/// cost hundreds of instructions each.
public enum ASCII {
    /// `text` starts with `prefix`, compared byte for byte.
    @inline(__always)
    public static func hasPrefix(_ text: String, _ prefix: StaticString) -> Bool {
        let count = prefix.utf8CodeUnitCount
        guard text.utf8.count >= count else { return false }
        return text.utf8.withContiguousStorageIfAvailable { memcmp($0.baseAddress!, prefix.utf8Start, count) == 0 }
            ?? text.utf8.prefix(count).elementsEqual(UnsafeBufferPointer(start: prefix.utf8Start, count: count))
    }

    /// The same bytes (the counts must be equal). The same String is one compare of its bits.
    @inline(__always)
    public static func sameBytes(_ a: String, _ b: String) -> Bool {
        if a._isIdentical(to: b) { return true }
        var a = a
        var b = b
        return a.withUTF8 { x in b.withUTF8 { y in x.count == y.count && (x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0) } }
    }

    /// `text` ends with `suffix`, compared byte for byte.
    @inline(__always)
    public static func hasSuffix(_ text: Substring, _ suffix: [UInt8]) -> Bool {
        var text = text
        return text.withUTF8 { bytes in
            bytes.count >= suffix.count
                && suffix.withUnsafeBufferPointer { memcmp(bytes.baseAddress! + bytes.count - $0.count, $0.baseAddress!, $0.count) == 0 }
        }
    }
}

/// A fast, non-cryptographic generator for ids (xoshiro256**), seeded once from the system
/// generator. Drawing from `SystemRandomNumberGenerator` costs a syscall per call on Linux,
/// which is too slow to do twice per request at load-test rates.
public struct FastRandom: RandomNumberGenerator, Sendable {
    private var s0, s1, s2, s3: UInt64

    public init(seed: UInt64) {
        s0 = Self.mixed(seed, 1)
        s1 = Self.mixed(seed, 2)
        s2 = Self.mixed(seed, 3)
        s3 = Self.mixed(seed, 4)
    }

    /// The `index`-th output of SplitMix64 started at `seed`: random-looking bits that depend
    /// on the two numbers alone (a draw that needs no generator state to share).
    public static func mixed(_ seed: UInt64, _ index: UInt64) -> UInt64 {
        var z = seed &+ index &* 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    public init() {
        var system = SystemRandomNumberGenerator()
        self.init(seed: system.next())
    }

    public mutating func next() -> UInt64 {
        let result = ((s1 &* 5) << 7 | (s1 &* 5) >> 57) &* 9
        let t = s1 << 17
        s2 ^= s0; s3 ^= s1; s1 ^= s2; s0 ^= s3
        s2 ^= t
        s3 = (s3 << 45) | (s3 >> 19)
        return result
    }

    /// An id in the shape APNs generates: uppercase 8-4-4-4-12 hex with no version bits
    /// (APNs was seen generating ids that are not RFC 4122: docs/apns-behaviour.md, "Responses").
    public mutating func apnsID() -> PushID {
        let high = next()
        return PushID(high: high, low: next(), uppercase: true)
    }

    /// A lowercase random UUID (version 4 bits set), as used for `apns-unique-id`.
    public mutating func uniquePushID() -> PushID {
        let high = (next() & ~0xF000) | 0x4000
        let low = (next() & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
        return PushID(high: high, low: low, uppercase: false)
    }

    /// `uniquePushID` as text (device ids, channel ids).
    public mutating func uniqueID() -> String { uniquePushID().text }

    public mutating func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(count)
        while out.count < count {
            var word = next()
            for _ in 0..<min(8, count - out.count) {
                out.append(UInt8(truncatingIfNeeded: word))
                word >>= 8
            }
        }
        return out
    }
}
