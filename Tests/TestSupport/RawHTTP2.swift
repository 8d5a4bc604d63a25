// TestSupport: raw HTTP/2 bytes, written and read by hand, for tests that need what no
// well-behaved encoder produces (an indexed "authorization", HPACK bombs, floods) and for
// reading what a peer put on the wire independently of nghttp2. Pure: no I/O, no imports.

/// One HTTP/2 frame as it was on the wire.
public struct WireFrame: Equatable, Sendable {
    public var type: UInt8
    public var flags: UInt8
    public var streamID: Int32
    public var payload: [UInt8]

    public static let data: UInt8 = 0x0
    public static let headers: UInt8 = 0x1
    public static let rstStream: UInt8 = 0x3
    public static let settings: UInt8 = 0x4
    public static let ping: UInt8 = 0x6
    public static let goAway: UInt8 = 0x7
    public static let windowUpdate: UInt8 = 0x8

    public var isAck: Bool { flags & 0x1 != 0 }

    /// Error code of RST_STREAM, or of GOAWAY.
    public var errorCode: UInt32 {
        let o = type == WireFrame.goAway ? 4 : 0
        return UInt32(payload[o]) << 24 | UInt32(payload[o + 1]) << 16 | UInt32(payload[o + 2]) << 8 | UInt32(payload[o + 3])
    }
}

public enum RawHTTP2 {
    public static let clientPreface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    /// An HPACK integer with an N-bit prefix; `flags` are the bits above the prefix.
    public static func integer(_ value: Int, prefixBits: Int, flags: UInt8) -> [UInt8] {
        let max = (1 << prefixBits) - 1
        if value < max { return [flags | UInt8(value)] }
        var out: [UInt8] = [flags | UInt8(max)]
        var rest = value - max
        while rest >= 128 {
            out.append(UInt8(rest % 128 + 128))
            rest /= 128
        }
        out.append(UInt8(rest))
        return out
    }

    /// An HPACK string literal without Huffman coding.
    public static func string(_ s: String) -> [UInt8] {
        integer(s.utf8.count, prefixBits: 7, flags: 0x00) + Array(s.utf8)
    }

    public static func frame(type: UInt8, flags: UInt8, stream: UInt32, _ payload: [UInt8]) -> [UInt8] {
        let n = payload.count
        return [
            UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff), type, flags,
            UInt8(stream >> 24), UInt8(stream >> 16 & 0xff), UInt8(stream >> 8 & 0xff), UInt8(stream & 0xff),
        ] + payload
    }

    /// The complete frames at the start of `bytes` (after the client preface when
    /// `skipPreface`), and how many bytes they took; an incomplete frame at the end is left.
    public static func parse(_ bytes: [UInt8], skipPreface: Bool = false) -> (frames: [WireFrame], consumed: Int) {
        var i = 0
        if skipPreface {
            precondition(Array(bytes.prefix(24)) == clientPreface, "missing client preface")
            i = 24
        }
        var frames: [WireFrame] = []
        while i + 9 <= bytes.count {
            let length = Int(bytes[i]) << 16 | Int(bytes[i + 1]) << 8 | Int(bytes[i + 2])
            guard i + 9 + length <= bytes.count else { break }
            let stream = Int32(bytes[i + 5] & 0x7f) << 24 | Int32(bytes[i + 6]) << 16 | Int32(bytes[i + 7]) << 8 | Int32(bytes[i + 8])
            frames.append(
                WireFrame(
                    type: bytes[i + 3], flags: bytes[i + 4], streamID: stream,
                    payload: Array(bytes[(i + 9)..<(i + 9 + length)])))
            i += 9 + length
        }
        return (frames, i)
    }

    /// The frames in `bytes`, as `parse` reads them.
    public static func frames(_ bytes: [UInt8], skipPreface: Bool = false) -> [WireFrame] {
        parse(bytes, skipPreface: skipPreface).frames
    }
}
