// HTTP2Tests: RFC 9113 §8 message checks on the server, request by request from raw frames.
// Each case pins what the server does (served, refused with which reason and fields, reset
// without a word) and every RST_STREAM it sends for the stream; a valid request on the same
// connection afterwards must still be served (the HPACK state stayed in step).
@testable import HTTP2
import Testing
import TestSupport

/// One raw request on stream 1: its header block, DATA frames, trailers.
struct RawRequest: CustomTestStringConvertible, Sendable {
    var label: String
    var fields: [([UInt8], [UInt8])]
    var endOnHeaders = true
    var data: [[UInt8]] = []
    /// Each DATA frame ends the stream when it is the last and there are no trailers.
    var trailers: [([UInt8], [UInt8])]? = nil
    var trailersEndStream = true

    var testDescription: String { label }

    static func f(_ name: String, _ value: String) -> ([UInt8], [UInt8]) { (Array(name.utf8), Array(value.utf8)) }

    static let method = f(":method", "POST")
    static let scheme = f(":scheme", "https")
    static let path = f(":path", "/3/device/ab")
    static let authority = f(":authority", "api.push.apple.com")
    static let base = [method, scheme, path, authority]

    init(_ label: String, _ fields: [([UInt8], [UInt8])], endOnHeaders: Bool = true) {
        self.label = label
        self.fields = fields
        self.endOnHeaders = endOnHeaders
    }

    static func block(_ fields: [([UInt8], [UInt8])]) -> [UInt8] {
        // Literal without indexing, new name: nothing enters the HPACK table.
        var out: [UInt8] = []
        for (name, value) in fields {
            out.append(0x00)
            out += RawHTTP2.integer(name.count, prefixBits: 7, flags: 0)
            out += name
            out += RawHTTP2.integer(value.count, prefixBits: 7, flags: 0)
            out += value
        }
        return out
    }

    func frames(stream: UInt32) -> [UInt8] {
        let ends = endOnHeaders && data.isEmpty && trailers == nil
        var out = RawHTTP2.frame(type: 0x1, flags: 0x4 | (ends ? 0x1 : 0), stream: stream, Self.block(fields))
        for (i, chunk) in data.enumerated() {
            let last = i == data.count - 1 && trailers == nil
            out += RawHTTP2.frame(type: 0x0, flags: last ? 0x1 : 0, stream: stream, chunk)
        }
        if let trailers {
            out += RawHTTP2.frame(type: 0x1, flags: 0x4 | (trailersEndStream ? 0x1 : 0), stream: stream, Self.block(trailers))
        }
        return out
    }
}

/// What became of stream 1.
enum Outcome: Equatable, CustomStringConvertible {
    case served
    /// Reset and reported, with the names of the fields decoded before.
    case refused(HTTP2RefusedRequest.Reason, [String])
    /// Reset without a request or a report.
    case reset

    var description: String {
        switch self {
        case .served: "served"
        case .refused(let reason, let names): "refused(\(reason), \(names))"
        case .reset: "reset"
        }
    }
}

private func run(_ request: RawRequest, settings: [HTTP2Setting] = [], then: RawRequest? = nil) throws -> (Outcome, [UInt32], Bool) {
    let server = try HTTP2ServerSession(settings: [setting(HTTP2Setting.maxConcurrentStreams, 100)] + settings)
    var events: [HTTP2ServerEvent] = []
    try server.receive(RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, []) + request.frames(stream: 1))
    events += server.takeEvents()
    let follow = then ?? RawRequest("follow-up", RawRequest.base)
    try server.receive(follow.frames(stream: 3))
    events += server.takeEvents()
    var out: [UInt8] = []
    server.drainOutput(into: &out)
    let frames = RawHTTP2.frames(out)
    #expect(!frames.contains { $0.type == WireFrame.goAway }, "no connection error")
    let resets = frames.filter { $0.type == WireFrame.rstStream && $0.streamID == 1 }.map(\.errorCode)
    var outcome = Outcome.reset
    var followServed = false
    for event in events {
        switch event {
        case .request(let r) where r.streamID == 1: outcome = .served
        case .request(let r) where r.streamID == 3: followServed = true
        case .requestRefused(let r) where r.streamID == 1: outcome = .refused(r.reason, r.headers.map(\.name))
        default: break
        }
    }
    return (outcome, resets, followServed)
}

private typealias R = RawRequest
private let invalid = HTTP2RefusedRequest.Reason.invalidHeaderField
private let malformed = HTTP2RefusedRequest.Reason.malformedMessage
private let pseudo = [":method", ":scheme", ":path", ":authority"]

/// Requests whose header fields break a rule: reset (PROTOCOL_ERROR, then INTERNAL_ERROR for the
/// rest of the block, which nghttp2 drops: one goes out) and reported with the fields before.
private let badFields: [(RawRequest, [String])] = [
    (R("empty :path", [R.method, R.scheme, R.f(":path", ""), R.authority]), [":method", ":scheme"]),
    (R("duplicate :method", R.base + [R.method]), pseudo),
    (R("duplicate :path", R.base + [R.path]), pseudo),
    (R("duplicate :scheme", R.base + [R.scheme]), pseudo),
    (R("duplicate :authority", R.base + [R.authority]), pseudo),
    (R("pseudo after a regular field", [R.method, R.scheme, R.path, R.f("apns-topic", "t"), R.authority]), pseudo.dropLast() + ["apns-topic"]),
    (R("unknown pseudo", R.base + [R.f(":foo", "x")]), pseudo),
    (R(":status in a request", R.base + [R.f(":status", "200")]), pseudo),
    (R("connection", R.base + [R.f("connection", "close")]), pseudo),
    (R("keep-alive", R.base + [R.f("keep-alive", "5")]), pseudo),
    (R("proxy-connection", R.base + [R.f("proxy-connection", "x")]), pseudo),
    (R("transfer-encoding", R.base + [R.f("transfer-encoding", "chunked")]), pseudo),
    (R("upgrade", R.base + [R.f("upgrade", "h2c")]), pseudo),
    (R("te gzip", R.base + [R.f("te", "gzip")]), pseudo),
    (R("te trailers, gzip", R.base + [R.f("te", "trailers, gzip")]), pseudo),
    (R("upper-case name", R.base + [R.f("Apns-Topic", "t")]), pseudo),
    (R("space in a name", R.base + [R.f("apns topic", "t")]), pseudo),
    (R("@ in a name", R.base + [R.f("apns@topic", "t")]), pseudo),
    (R("a name of ':' alone", R.base + [R.f(":", "t")]), pseudo),
    (R("an empty name", R.base + [R.f("", "t")]), pseudo),
    (R("a name with 0x80", R.base + [(Array("apns-\u{80}".utf8), Array("t".utf8))]), pseudo),
    (R("upper-case pseudo name", [R.f(":Method", "POST"), R.scheme, R.path, R.authority]), []),
    (R("NUL in a value", R.base + [R.f("apns-topic", "a\u{0}b")]), pseudo),
    (R("CR in a value", R.base + [R.f("apns-topic", "a\rb")]), pseudo),
    (R("LF in a value", R.base + [R.f("apns-topic", "a\nb")]), pseudo),
    (R("0x01 in a value", R.base + [R.f("apns-topic", "a\u{1}b")]), pseudo),
    (R("DEL in a value", R.base + [R.f("apns-topic", "a\u{7f}b")]), pseudo),
    (R("NUL in :authority", [R.method, R.scheme, R.path, R.f(":authority", "a\u{0}")]), [":method", ":scheme", ":path"]),
    (R("space in :method", [R.f(":method", "PO ST"), R.scheme, R.path, R.authority]), []),
    (R("empty :method", [R.f(":method", ""), R.scheme, R.path, R.authority]), []),
    (R("space in :path", [R.method, R.scheme, R.f(":path", "/a b"), R.authority]), [":method", ":scheme"]),
    (R("DEL in :path", [R.method, R.scheme, R.f(":path", "/a\u{7f}"), R.authority]), [":method", ":scheme"]),
    (R("/ in :authority", [R.method, R.scheme, R.path, R.f(":authority", "a/b")]), [":method", ":scheme", ":path"]),
    (R("space in :authority", [R.method, R.scheme, R.path, R.f(":authority", "a b")]), [":method", ":scheme", ":path"]),
    (R("empty :authority", [R.method, R.scheme, R.path, R.f(":authority", "")]), [":method", ":scheme", ":path"]),
    (R("bad host", [R.method, R.scheme, R.path, R.f("host", "a?b")]), [":method", ":scheme", ":path"]),
    (R("empty host", R.base + [R.f("host", "")]), pseudo),
    (R("duplicate host", R.base + [R.f("host", "a"), R.f("host", "a")]), pseudo + ["host"]),
    (R(":scheme starting with a digit", [R.method, R.f(":scheme", "1http"), R.path, R.authority]), [":method"]),
    (R("space in :scheme", [R.method, R.f(":scheme", "ht tp"), R.path, R.authority]), [":method"]),
    (R("empty :scheme", [R.method, R.f(":scheme", ""), R.path, R.authority]), [":method"]),
    (R("content-length not a number", R.base + [R.f("content-length", "abc")]), pseudo),
    (R("content-length empty", R.base + [R.f("content-length", "")]), pseudo),
    (R("content-length signed", R.base + [R.f("content-length", "+5")]), pseudo),
    (R("content-length too large", R.base + [R.f("content-length", "99999999999999999999")]), pseudo),
    (R("content-length twice", R.base + [R.f("content-length", "0"), R.f("content-length", "0")]), pseudo + ["content-length"]),
    (R(":protocol not enabled", [R.f(":method", "CONNECT"), R.f(":protocol", "websocket"), R.scheme, R.path, R.authority]), [":method"]),
]

/// Requests whose fields are each fine but break a message rule, seen at the end of the block
/// or of the stream: reset (PROTOCOL_ERROR) and reported with all their fields.
private let badMessages: [RawRequest] = [
    R("no :method", [R.scheme, R.path, R.authority]),
    R("no :scheme", [R.method, R.path, R.authority]),
    R("no :path", [R.method, R.scheme, R.authority]),
    R("no :authority or host", [R.method, R.scheme, R.path]),
    R("only pseudo-headers missing", [R.f("apns-topic", "t")]),
    R("path without a slash, https", [R.method, R.scheme, R.f(":path", "3/device"), R.authority]),
    R("path * with POST", [R.method, R.scheme, R.f(":path", "*"), R.authority]),
    R("path * with GET, http", [R.f(":method", "GET"), R.f(":scheme", "http"), R.f(":path", "*"), R.authority]),
    R("CONNECT with :path", [R.f(":method", "CONNECT"), R.path, R.authority]),
    R("CONNECT with :scheme", [R.f(":method", "CONNECT"), R.scheme, R.authority]),
    R("CONNECT with host only", [R.f(":method", "CONNECT"), R.f("host", "a:443")]),
]

/// Requests that are served.
private let fine: [RawRequest] = [
    R("host instead of :authority", [R.method, R.scheme, R.path, R.f("host", "api.push.apple.com")]),
    R("host and :authority", R.base + [R.f("host", "other")]),
    R("te trailers", R.base + [R.f("te", "trailers")]),
    R("te Trailers", R.base + [R.f("te", "Trailers")]),
    R("values with surrounding whitespace and obs-text", R.base + [R.f("apns-topic", " a\tb "), (Array("x-y".utf8), [0x80, 0xff])]),
    R("HT in a value", R.base + [R.f("apns-topic", "a\tb")]),
    R("tchar names", R.base + [R.f("a!#$%&'*+-.^_`|~09", "x")]),
    R("empty regular value", R.base + [R.f("apns-topic", "")]),
    R("path without a slash, other scheme", [R.method, R.f(":scheme", "foo"), R.f(":path", "x"), R.authority]),
    R("OPTIONS *", [R.f(":method", "OPTIONS"), R.scheme, R.f(":path", "*"), R.authority]),
    R("scheme in capitals", [R.method, R.f(":scheme", "HTTPS"), R.path, R.authority]),
    R("scheme+.-", [R.method, R.f(":scheme", "a+b.c-d"), R.path, R.authority]),
    R("authority with port and userinfo", [R.method, R.scheme, R.path, R.f(":authority", "u:p@[::1]:443")]),
    R("path with query and odd characters", [R.method, R.scheme, R.f(":path", "/a?b=c&d=%20\"<>{}|\\^`\u{80}"), R.authority]),
    R("content-length 0", R.base + [R.f("content-length", "0")]),
    R("content-length 00", R.base + [R.f("content-length", "00")]),
    R("CONNECT with :authority", [R.f(":method", "CONNECT"), R.authority]),
    R("CONNECT with content-length and no body", [R.f(":method", "CONNECT"), R.authority, R.f("content-length", "5")]),
    R("HEAD", [R.f(":method", "HEAD"), R.scheme, R.path, R.authority]),
    R("pseudo order free", [R.authority, R.path, R.scheme, R.method]),
]

@Suite("HTTP messaging checks (server)")
struct HTTP2MessagingTests {
    @Test(arguments: badFields.map(\.0).indices)
    func aBadFieldResetsTheStream(index: Int) throws {
        let (request, before) = badFields[index]
        let (outcome, resets, followServed) = try run(request)
        #expect(outcome == .refused(invalid, before), "\(request.label)")
        #expect(resets == [HTTP2ErrorCode.protocolError], "\(request.label)")
        #expect(followServed, "\(request.label)")
    }

    @Test(arguments: badMessages)
    func aMalformedMessageResetsTheStream(request: RawRequest) throws {
        let (outcome, resets, followServed) = try run(request)
        #expect(outcome == .refused(malformed, request.fields.map { String(decoding: $0.0, as: UTF8.self) }))
        #expect(resets == [HTTP2ErrorCode.protocolError])
        #expect(followServed)
    }

    /// A header block ending the stream though its content-length promised a body: reset and
    /// reported as the body's length, with every field (it read as a malformed message, the
    /// fields marked cut short and the cause a pseudo-header's).
    @Test func aContentLengthWithNoBodyIsReportedAsTheBodysLength() throws {
        let request = R("content-length with no body", R.base + [R.f("content-length", "5")])
        let (outcome, resets, followServed) = try run(request)
        #expect(outcome == .refused(.bodyLength(contentLength: 5, received: 0), request.fields.map { String(decoding: $0.0, as: UTF8.self) }))
        #expect(resets == [HTTP2ErrorCode.protocolError])
        #expect(followServed)
    }

    @Test(arguments: fine)
    func aValidRequestIsServed(request: RawRequest) throws {
        let (outcome, resets, followServed) = try run(request)
        #expect(outcome == .served)
        #expect(resets == [])
        #expect(followServed)
    }

    /// With SETTINGS_NO_RFC7540_PRIORITIES 1 nghttp2 keeps its own checks: the same outcomes.
    @Test func nghttp2sOwnChecksGiveTheSameOutcomes() throws {
        let settings = [setting(HTTP2Setting.noRFC7540Priorities, 1)]
        for (request, before) in badFields {
            let (outcome, _, followServed) = try run(request, settings: settings)
            #expect(outcome == .refused(invalid, before), "\(request.label)")
            #expect(followServed, "\(request.label)")
        }
        for request in badMessages {
            let (outcome, _, _) = try run(request, settings: settings)
            #expect(outcome == .refused(malformed, request.fields.map { String(decoding: $0.0, as: UTF8.self) }), "\(request.label)")
        }
        for request in fine {
            let (outcome, _, _) = try run(request, settings: settings)
            #expect(outcome == .served, "\(request.label)")
        }
    }

    @Test func bodiesAgainstContentLength() throws {
        var longer = R("longer body", R.base + [R.f("content-length", "3")])
        longer.data = [Array("12".utf8), Array("34".utf8)]
        var shorter = R("shorter body", R.base + [R.f("content-length", "3")])
        shorter.data = [Array("12".utf8)]
        var exact = R("exact body in pieces", R.base + [R.f("content-length", "3")])
        exact.data = [Array("1".utf8), [], Array("23".utf8)]
        var connect = R("CONNECT ignores content-length", [R.f(":method", "CONNECT"), R.authority, R.f("content-length", "1")])
        connect.data = [Array("12345".utf8)]
        var getWithBody = R("GET with a body", [R.f(":method", "GET"), R.scheme, R.path, R.authority])
        getWithBody.data = [Array("12".utf8)]
        var headWithBody = R("HEAD with a body", [R.f(":method", "HEAD"), R.scheme, R.path, R.authority])
        headWithBody.data = [Array("12".utf8)]
        // Reset and reported (nghttp2 reset them without a word), with every field.
        let names = [":method", ":scheme", ":path", ":authority", "content-length"]
        for (request, expected) in [
            (longer, Outcome.refused(.bodyLength(contentLength: 3, received: 4), names)),
            (shorter, .refused(.bodyLength(contentLength: 3, received: 2), names)),
            (exact, .served), (connect, .served), (getWithBody, .served), (headWithBody, .served),
        ] {
            let (outcome, resets, followServed) = try run(request)
            #expect(outcome == expected, "\(request.label)")
            #expect(resets == (expected == .served ? [] : [HTTP2ErrorCode.protocolError]), "\(request.label)")
            #expect(followServed, "\(request.label)")
        }
    }

    @Test func trailers() throws {
        func with(_ label: String, _ trailers: [([UInt8], [UInt8])], contentLength: String? = nil, end: Bool = true) -> RawRequest {
            var r = R(label, R.base + (contentLength.map { [R.f("content-length", $0)] } ?? []))
            r.data = [Array("{}".utf8)]
            r.trailers = trailers
            r.trailersEndStream = end
            return r
        }
        let fields = pseudo
        let cases: [(RawRequest, Outcome, [UInt32])] = [
            (with("plain", [R.f("x-checksum", "1")]), .served, []),
            (with("te trailers", [R.f("te", "trailers")]), .served, []),
            (with("matching content-length", [R.f("x", "1")], contentLength: "2"), .served, []),
            (with("pseudo-header", [R.f(":path", "/x")]), .refused(invalid, fields), [1]),
            (with("connection", [R.f("connection", "close")]), .refused(invalid, fields), [1]),
            (with("upper-case", [R.f("X-A", "1")]), .refused(invalid, fields), [1]),
            (with("bad value", [R.f("x", "a\u{0}")]), .refused(invalid, fields), [1]),
            (with("content-length again", [R.f("content-length", "2")], contentLength: "2"), .refused(invalid, fields + ["content-length"]), [1]),
            (
                with("content-length first here, wrong", [R.f("content-length", "9")]), .refused(.bodyLength(contentLength: 9, received: 2), fields),
                [1]
            ),
            (with("content-length first here, right", [R.f("content-length", "2")]), .served, []),
            (
                with("body shorter than content-length", [R.f("x", "1")], contentLength: "5"),
                .refused(.bodyLength(contentLength: 5, received: 2), fields + ["content-length"]), [1]
            ),
            (with("host when there was none", [R.f("host", "a")]), .served, []),
            (with("without END_STREAM", [R.f("x", "1")], end: false), .refused(malformed, fields), [1]),
        ]
        for (request, expected, resets) in cases {
            let (outcome, sent, followServed) = try run(request)
            #expect(outcome == expected, "\(request.label)")
            #expect(sent == resets, "\(request.label)")
            #expect(followServed, "\(request.label)")
        }
        var hostTwice = with("host again", [R.f("host", "a")])
        hostTwice.fields.append(R.f("host", "a"))
        let (outcome, _, _) = try run(hostTwice)
        #expect(outcome == .refused(invalid, fields + ["host"]))
    }

    @Test func extendedConnect() throws {
        let enable = [setting(HTTP2Setting.enableConnectProtocol, 1)]
        let websocket = [R.f(":method", "CONNECT"), R.f(":protocol", "websocket"), R.scheme, R.f(":path", "/chat"), R.authority]
        var cases: [(RawRequest, Outcome)] = [
            (R("extended CONNECT", websocket), .served),
            (
                R(":protocol with GET", [R.f(":method", "GET"), R.f(":protocol", "websocket"), R.scheme, R.path, R.authority]),
                .refused(malformed, [":method", ":protocol", ":scheme", ":path", ":authority"])
            ),
            (
                R(":protocol with host only", [R.f(":method", "CONNECT"), R.f(":protocol", "websocket"), R.scheme, R.path, R.f("host", "a")]),
                .refused(malformed, [":method", ":protocol", ":scheme", ":path", "host"])
            ),
            (
                R(":protocol blank", [R.f(":method", "CONNECT"), R.f(":protocol", " \t"), R.scheme, R.path, R.authority]),
                .refused(invalid, [":method"])
            ),
            (R(":protocol empty", [R.f(":method", "CONNECT"), R.f(":protocol", ""), R.scheme, R.path, R.authority]), .refused(invalid, [":method"])),
            (
                R(":protocol twice", websocket + [R.f(":protocol", "websocket")]),
                .refused(invalid, [":method", ":protocol", ":scheme", ":path", ":authority"])
            ),
            (
                R(":protocol, bad value", [R.f(":method", "CONNECT"), R.f(":protocol", "a\u{0}"), R.scheme, R.path, R.authority]),
                .refused(invalid, [":method"])
            ),
        ]
        var withBody = R("extended CONNECT keeps its content-length", websocket + [R.f("content-length", "1")])
        withBody.data = [Array("12".utf8)]
        cases.append(
            (
                withBody,
                .refused(.bodyLength(contentLength: 1, received: 2), [":method", ":protocol", ":scheme", ":path", ":authority", "content-length"])
            ))
        for (request, expected) in cases {
            let (outcome, _, followServed) = try run(request, settings: enable)
            #expect(outcome == expected, "\(request.label)")
            #expect(followServed, "\(request.label)")
        }
        // Enabled later by a SETTINGS frame of its own.
        let server = try HTTP2ServerSession(settings: [setting(HTTP2Setting.maxConcurrentStreams, 100)])
        #expect(server.submitSettings(enable))
        try server.receive(RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, []) + R("x", websocket).frames(stream: 1))
        #expect(server.takeEvents().contains { if case .request = $0 { true } else { false } })
    }

    /// The server remembers a connection's recent fields: a field repeated from the last request
    /// must still be judged where it now stands, and a bad one stays bad.
    @Test func repeatedFieldsAreJudgedInTheirNewPlace() throws {
        let server = try HTTP2ServerSession(settings: [setting(HTTP2Setting.maxConcurrentStreams, 100)])
        var events: [HTTP2ServerEvent] = []
        let topic = R.f("apns-topic", "t")
        let sequence: [(RawRequest, Bool)] = [
            (R("valid", R.base + [topic]), true),
            (R("the same again", R.base + [topic]), true),
            (R("the same, :path twice", R.base + [R.path, topic]), false),
            (R("the same, topic before :authority", [R.method, R.scheme, R.path, topic, R.authority]), false),
            (R("bad value", R.base + [R.f("apns-topic", "a\u{1}")]), false),
            (R("bad value again", R.base + [R.f("apns-topic", "a\u{1}")]), false),
            (R("valid after", R.base + [topic]), true),
            (R("content-length 0", R.base + [R.f("content-length", "0")]), true),
            (R("content-length 0 twice", R.base + [R.f("content-length", "0"), R.f("content-length", "0")]), false),
            (R("the pseudo-headers only", R.base), true),
            (R("no :authority", [R.method, R.scheme, R.path]), false),
            (R("valid at last", R.base + [topic]), true),
        ]
        try server.receive(RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, []))
        for (i, (request, _)) in sequence.enumerated() {
            try server.receive(request.frames(stream: UInt32(2 * i + 1)))
            events += server.takeEvents()
        }
        let served = events.compactMap { event -> Int32? in
            if case .request(let r) = event { return r.streamID } else { return nil }
        }
        #expect(served == sequence.indices.filter { sequence[$0].1 }.map { Int32(2 * $0 + 1) })
        let served1 = events.compactMap { event -> HTTP2Request? in
            if case .request(let r) = event { return r } else { return nil }
        }
        #expect(served1.last?.firstValue("apns-topic") == "t")
    }
}
