// HTTP2Tests: the nghttp2 wrapper's client and server sessions against each other in memory,
// their bytes read back by TestSupport's independent frame parser. Imports HTTP2 and TestSupport.
@testable import HTTP2
import Testing
import TestSupport

extension WireFrame {
    /// SETTINGS entries.
    var settingEntries: [HTTP2Setting] {
        stride(from: 0, to: payload.count - 5, by: 6).map { i in
            let id = Int32(payload[i]) << 8 | Int32(payload[i + 1])
            let v = UInt32(payload[i + 2]) << 24 | UInt32(payload[i + 3]) << 16 | UInt32(payload[i + 4]) << 8 | UInt32(payload[i + 5])
            return HTTP2Setting(id: id, value: v)
        }
    }
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
        server.submitResponse(
            streamID: request.streamID, status: 200,
            headers: [HTTP2HeaderField("apns-id", "id-\(request.streamID)")], body: nil)
    }

    init(
        serverSettings: [HTTP2Setting] = [setting(HTTP2Setting.maxConcurrentStreams, 1000)],
        overrides: [HTTP2Setting] = [], maxBufferedBody: Int = 65536, maxHeaderListSize: Int? = nil,
        earlyAnswerBodyLength: Int? = nil,
        clientSettings: [HTTP2Setting] = HTTP2ClientSession.defaultSettings
    ) throws {
        server = try HTTP2ServerSession(
            settings: serverSettings, advertisedOverrides: overrides,
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

    var serverFrames: [WireFrame] { RawHTTP2.frames(serverWire) }
    var clientFrames: [WireFrame] { RawHTTP2.frames(clientWire, skipPreface: true) }

    func response(_ streamID: Int32) -> HTTP2Response? { responses.first { $0.streamID == streamID } }
}
