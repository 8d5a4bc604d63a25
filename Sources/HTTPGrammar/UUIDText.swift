/// 128 bits as UUID text: 8-4-4-4-12 hex digits. Shared by the core, which makes a String of it
/// when someone reads an id, and the HTTP/2 layer, which writes an answer's ids straight into
/// the bytes it sends (no String made for them).
public enum UUIDText {
    /// Bytes of the text.
    public static let count = 36

    /// Writes the text of `high` then `low` (most significant digit first) at `start`: eight
    /// digits at a time into words stored whole (a digit at a time cost 500 instructions an id).
    @inline(__always)
    public static func write(_ high: UInt64, _ low: UInt64, uppercase: Bool, into out: inout MutableSpan<UInt8>, at start: Int) {
        let letters: UInt64 = uppercase ? 7 : 39  // 'A' or 'a', less '0' and 10
        let a = digits(UInt32(truncatingIfNeeded: high >> 32), letters)
        let b = digits(UInt32(truncatingIfNeeded: high), letters)
        let c = digits(UInt32(truncatingIfNeeded: low >> 32), letters)
        let d = digits(UInt32(truncatingIfNeeded: low), letters)
        let dash = UInt64(UInt8(ascii: "-"))
        // a0…a7 - b0…b3 - b4…b7 - c0…c3 - c4…c7 d0…d7, a word's lowest byte first.
        var bytes = out.mutableBytes
        bytes.storeBytes(of: a.littleEndian, toByteOffset: start, as: UInt64.self)
        bytes.storeBytes(of: (dash | (b & 0xFFFF_FFFF) << 8 | dash << 40 | (b >> 32) << 48).littleEndian, toByteOffset: start + 8, as: UInt64.self)
        bytes.storeBytes(of: (b >> 48 | dash << 16 | (c & 0xFFFF_FFFF) << 24 | dash << 56).littleEndian, toByteOffset: start + 16, as: UInt64.self)
        bytes.storeBytes(of: (c >> 32 | d << 32).littleEndian, toByteOffset: start + 24, as: UInt64.self)
        bytes.storeBytes(of: UInt32(truncatingIfNeeded: d >> 32).littleEndian, toByteOffset: start + 32, as: UInt32.self)
    }

    /// The eight hex digits of `value` as the bytes of a word, the first digit in its lowest byte.
    @inline(__always)
    static func digits(_ value: UInt32, _ letters: UInt64) -> UInt64 {
        // Each 4-bit digit spread into a byte of its own, the last digit in the lowest byte.
        var spread = UInt64(value)
        spread = (spread | spread << 16) & 0x0000_FFFF_0000_FFFF
        spread = (spread | spread << 8) & 0x00FF_00FF_00FF_00FF
        spread = (spread | spread << 4) & 0x0F0F_0F0F_0F0F_0F0F
        // 1 in each byte whose digit is 10 or more (adding 6 carries it into bit 4).
        let isLetter = ((spread &+ 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101
        return (spread &+ 0x3030_3030_3030_3030 &+ isLetter &* letters).byteSwapped
    }

    /// The bits of canonical UUID text (hex digits of either case), nil for anything else.
    public static func bits(of text: some Collection<UInt8>) -> (high: UInt64, low: UInt64)? {
        guard text.count == count else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        var position = 0
        for c in text {
            defer { position += 1 }
            if position == 8 || position == 13 || position == 18 || position == 23 {
                guard c == UInt8(ascii: "-") else { return nil }
                continue
            }
            guard let digit = hexValue(c) else { return nil }
            if position < 19 { high = high << 4 | UInt64(digit) } else { low = low << 4 | UInt64(digit) }
        }
        return (high, low)
    }

    @inline(__always)
    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
