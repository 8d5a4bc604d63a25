@testable import HTTP2
import Testing

/// A parsed HTTP/2 frame (test-side parser, independent of nghttp2).
struct WireFrame {
    var type: UInt8
    var flags: UInt8
    var streamID: Int32
    var payload: [UInt8]

    static let data: UInt8 = 0x0
    static let headers: UInt8 = 0x1
    static let rstStream: UInt8 = 0x3
    static let settings: UInt8 = 0x4
    static let ping: UInt8 = 0x6
    static let goAway: UInt8 = 0x7
    static let windowUpdate: UInt8 = 0x8

    var isAck: Bool { flags & 0x1 != 0 }

    /// SETTINGS entries.
    var settings: [HTTP2Setting] {
        stride(from: 0, to: payload.count - 5, by: 6).map { i in
            let id = Int32(payload[i]) << 8 | Int32(payload[i + 1])
            let v = UInt32(payload[i + 2]) << 24 | UInt32(payload[i + 3]) << 16 | UInt32(payload[i + 4]) << 8 | UInt32(payload[i + 5])
            return HTTP2Setting(id: id, value: v)
        }
    }

    /// Error code of RST_STREAM, or of GOAWAY.
    var errorCode: UInt32 {
        let o = type == WireFrame.goAway ? 4 : 0
        return UInt32(payload[o]) << 24 | UInt32(payload[o + 1]) << 16 | UInt32(payload[o + 2]) << 8 | UInt32(payload[o + 3])
    }
}

let clientPreface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

func parseFrames(_ bytes: [UInt8], skipPreface: Bool = false) -> [WireFrame] {
    var i = 0
    if skipPreface {
        precondition(Array(bytes.prefix(24)) == clientPreface, "missing client preface")
        i = 24
    }
    var frames: [WireFrame] = []
    while i + 9 <= bytes.count {
        let length = Int(bytes[i]) << 16 | Int(bytes[i + 1]) << 8 | Int(bytes[i + 2])
        let sid = (Int32(bytes[i + 5]) << 24 | Int32(bytes[i + 6]) << 16 | Int32(bytes[i + 7]) << 8 | Int32(bytes[i + 8])) & 0x7fff_ffff
        guard i + 9 + length <= bytes.count else { break }
        frames.append(WireFrame(type: bytes[i + 3], flags: bytes[i + 4], streamID: sid,
                                payload: Array(bytes[(i + 9)..<(i + 9 + length)])))
        i += 9 + length
    }
    return frames
}

func setting(_ id: Int32, _ value: UInt32) -> HTTP2Setting { HTTP2Setting(id: id, value: value) }

func requestHeaders(path: String = "/3/device/abcdef", extra: [HTTP2HeaderField] = []) -> [HTTP2HeaderField] {
    [
        HTTP2HeaderField(":method", "POST"),
        HTTP2HeaderField(":scheme", "https"),
        HTTP2HeaderField(":path", path),
        HTTP2HeaderField(":authority", "api.push.apple.com"),
    ] + extra
}

/// An in-memory client/server pair. `pump` moves bytes both ways until both are quiet,
/// answering requests with `responder` as they arrive.
final class Pair {
    let client: HTTP2ClientSession
    let server: HTTP2ServerSession
    var serverEvents: [HTTP2ServerEvent] = []
    var requests: [HTTP2Request] = []
    var responses: [HTTP2Response] = []
    /// Every byte each side ever sent.
    var clientWire: [UInt8] = []
    var serverWire: [UInt8] = []
    /// nil = leave requests unanswered.
    var responder: ((HTTP2Request, HTTP2ServerSession) -> Void)? = { request, server in
        server.submitResponse(streamID: request.streamID, status: 200,
                              headers: [HTTP2HeaderField("apns-id", "id-\(request.streamID)")], body: nil)
    }

    init(serverSettings: [HTTP2Setting] = [setting(HTTP2Setting.maxConcurrentStreams, 1000)],
         overrides: [HTTP2Setting] = [], maxBufferedBody: Int = 65536, maxHeaderListSize: Int? = nil,
         earlyAnswerBodyLength: Int? = nil,
         clientSettings: [HTTP2Setting] = HTTP2ClientSession.defaultSettings) throws {
        server = try HTTP2ServerSession(settings: serverSettings, advertisedOverrides: overrides,
                                        maxBufferedBody: maxBufferedBody, maxHeaderListSize: maxHeaderListSize,
                                        earlyAnswerBodyLength: earlyAnswerBodyLength)
        client = try HTTP2ClientSession(settings: clientSettings)
    }

    private func collectServerEvents() {
        for event in server.takeEvents() {
            serverEvents.append(event)
            if case .request(let request) = event {
                requests.append(request)
                responder?(request, server)
            }
        }
    }

    func pump(maxRounds: Int = 10_000) throws {
        for _ in 0..<maxRounds {
            var c2s: [UInt8] = []
            client.drainOutput(into: &c2s)
            clientWire += c2s
            if !c2s.isEmpty { try server.receive(c2s) }
            collectServerEvents()
            var s2c: [UInt8] = []
            server.drainOutput(into: &s2c)
            collectServerEvents()
            serverWire += s2c
            if !s2c.isEmpty { try client.receive(s2c) }
            responses += client.takeCompletedResponses()
            if c2s.isEmpty && s2c.isEmpty { return }
        }
        Issue.record("pump did not settle")
    }

    var serverFrames: [WireFrame] { parseFrames(serverWire) }
    var clientFrames: [WireFrame] { parseFrames(clientWire, skipPreface: true) }

    func response(_ streamID: Int32) -> HTTP2Response? { responses.first { $0.streamID == streamID } }
}

/// Minimal raw HPACK/frame encoding for tests that need representations nghttp2's encoder
/// will not produce (e.g. an indexed "authorization").
enum HPACK {
    static func integer(_ value: Int, prefixBits: Int, flags: UInt8) -> [UInt8] {
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

    /// A string literal without Huffman coding.
    static func string(_ s: String) -> [UInt8] {
        integer(s.utf8.count, prefixBits: 7, flags: 0x00) + Array(s.utf8)
    }

    static func frame(type: UInt8, flags: UInt8, stream: UInt32, _ payload: [UInt8]) -> [UInt8] {
        let n = payload.count
        return [UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff), type, flags,
                UInt8(stream >> 24), UInt8(stream >> 16 & 0xff), UInt8(stream >> 8 & 0xff), UInt8(stream & 0xff)] + payload
    }
}
