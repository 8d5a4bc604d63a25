@testable import HTTP2
import Testing
import TestSupport

@Suite("Request/response")
struct RequestResponseTests {
    @Test("headers and body arrive; success = 1 HEADERS + 0 DATA; error = 1 HEADERS + 1 DATA")
    func simpleRequestResponse() throws {
        let pair = try Pair()
        let body = Array(#"{"aps":{"alert":"hi"}}"#.utf8)
        let errorBody = Array(#"{"reason":"BadDeviceToken"}"#.utf8)
        pair.responder = { request, server in
            if request.firstValue(":path") == "/3/device/good" {
                server.submitResponse(
                    streamID: request.streamID, status: 200,
                    headers: [HTTP2HeaderField("apns-id", "A-1")], body: nil)
            } else {
                server.submitResponse(
                    streamID: request.streamID, status: 400,
                    headers: [HTTP2HeaderField.contentTypeJSON, HTTP2HeaderField("apns-id", "A-2")],
                    body: errorBody)
            }
        }
        let extra = [HTTP2HeaderField("apns-topic", "com.example"), HTTP2HeaderField("content-length", "\(body.count)")]
        let good = try pair.client.submitRequest(headers: requestHeaders(path: "/3/device/good", extra: extra), body: body)
        let bad = try pair.client.submitRequest(headers: requestHeaders(path: "/3/device/bad", extra: extra), body: body)
        try pair.pump()

        #expect(pair.requests.count == 2)
        let first = try #require(pair.requests.first { $0.streamID == good })
        #expect(first.headers.map(\.name) == [":method", ":scheme", ":path", ":authority", "apns-topic", "content-length"])
        #expect(first.headers.map(\.value) == ["POST", "https", "/3/device/good", "api.push.apple.com", "com.example", "\(body.count)"])
        #expect(first.body == body)
        #expect(first.bodyLength == body.count)

        let ok = try #require(pair.response(good))
        #expect(ok.status == 200)
        #expect(ok.headers.map(\.name) == ["apns-id"], "\":status\" is parsed into status, not listed")
        #expect(ok.firstValue("apns-id") == "A-1")
        #expect(ok.headersFrameCount == 1)
        #expect(ok.dataFrameCount == 0)
        #expect(ok.body.isEmpty)
        #expect(ok.resetErrorCode == nil)

        let failed = try #require(pair.response(bad))
        #expect(failed.status == 400)
        #expect(failed.firstValue("content-type") == "application/json")
        #expect(failed.headersFrameCount == 1)
        #expect(failed.dataFrameCount == 1)
        #expect(failed.body == errorBody)

        // Cross-check on the wire.
        let frames = pair.serverFrames
        #expect(frames.filter { $0.streamID == good && $0.type == WireFrame.headers }.count == 1)
        #expect(frames.filter { $0.streamID == good && $0.type == WireFrame.data }.count == 0)
        #expect(
            frames.first { $0.streamID == good && $0.type == WireFrame.headers }.map { $0.flags & 0x1 != 0 } == true,
            "bodiless response carries END_STREAM on HEADERS")
        let badData = frames.filter { $0.streamID == bad && $0.type == WireFrame.data }
        #expect(badData.count == 1)
        #expect(badData.first?.flags == 0x1, "single DATA frame with END_STREAM")
        #expect(badData.first?.payload == errorBody)

        #expect(pair.server.openStreamCount == 0)
        #expect(pair.client.openStreamCount == 0)
        #expect(pair.serverEvents.filter { if case .streamClosed = $0 { return true } else { return false } }.count == 2)
        #expect(pair.server.lastReceivedStreamID == bad)
    }

    @Test("uncommon status codes are encoded too")
    func uncommonStatus() throws {
        let pair = try Pair()
        pair.responder = { r, s in s.submitResponse(streamID: r.streamID, status: 418, headers: [], body: nil) }
        let id = try pair.client.submitRequest(headers: requestHeaders(), body: nil)
        try pair.pump()
        #expect(pair.response(id)?.status == 418)
    }

    @Test("body nil = HEADERS with END_STREAM; empty body = an empty DATA frame with END_STREAM")
    func emptyBodies() throws {
        let pair = try Pair()
        let noBody = try pair.client.submitRequest(headers: requestHeaders(), body: nil)
        let emptyBody = try pair.client.submitRequest(headers: requestHeaders(), body: [])
        try pair.pump()
        let frames = pair.clientFrames
        let h = frames.filter { $0.streamID == noBody }
        #expect(h.map(\.type) == [WireFrame.headers])
        #expect((h.first?.flags ?? 0) & 0x1 == 0x1)
        let e = frames.filter { $0.streamID == emptyBody }
        #expect(e.map(\.type) == [WireFrame.headers, WireFrame.data])
        #expect(e.last?.payload.isEmpty == true)
        #expect(e.last?.flags == 0x1)
        #expect(pair.requests.count == 2)
        #expect(pair.requests.allSatisfy { $0.bodyLength == 0 && $0.body.isEmpty })
        #expect(pair.responses.allSatisfy { $0.status == 200 })
    }

    @Test("a request body can be sent as several DATA frames")
    func multiFrameRequestBody() throws {
        let pair = try Pair()
        let body = (0..<5000).map { UInt8(truncatingIfNeeded: $0) }
        let id = try pair.client.submitRequest(headers: requestHeaders(), body: body, maxDataFrameSize: 1000)
        try pair.pump()
        let data = pair.clientFrames.filter { $0.streamID == id && $0.type == WireFrame.data }
        #expect(data.count == 5)
        #expect(data.map(\.payload.count) == [1000, 1000, 1000, 1000, 1000])
        #expect(data.map { $0.flags & 0x1 } == [0, 0, 0, 0, 1])
        #expect(pair.requests.first?.body == body)
        #expect(pair.response(id)?.status == 200)
    }

    @Test("request body beyond the cap is counted, not kept")
    func bodyCap() throws {
        let pair = try Pair(maxBufferedBody: 65536)
        let body = (0..<102_400).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let id = try pair.client.submitRequest(headers: requestHeaders(), body: body)
        try pair.pump()
        let request = try #require(pair.requests.first)
        #expect(request.streamID == id)
        #expect(request.bodyLength == 102_400)
        #expect(request.body.count == 65_536)
        #expect(request.body == Array(body.prefix(65_536)))
        #expect(request.isBodyTruncated)
        #expect(pair.response(id)?.status == 200, "the app can still answer")
    }

    @Test("duplicate regular headers arrive twice, in order")
    func duplicateHeaders() throws {
        let pair = try Pair()
        _ = try pair.client.submitRequest(
            headers: requestHeaders(extra: [
                HTTP2HeaderField("apns-topic", "com.example.one"),
                HTTP2HeaderField("apns-priority", "10"),
                HTTP2HeaderField("apns-topic", "com.example.two"),
            ]), body: nil)
        try pair.pump()
        let request = try #require(pair.requests.first)
        #expect(request.headers.filter { $0.name == "apns-topic" }.map(\.value) == ["com.example.one", "com.example.two"])
        #expect(request.headers.map(\.name).suffix(3) == ["apns-topic", "apns-priority", "apns-topic"])
    }

    @Test("indexed and never-indexed authorization decode the same (raw HPACK)")
    func authorizationIndexing() throws {
        let server = try HTTP2ServerSession(settings: [setting(HTTP2Setting.maxConcurrentStreams, 100)])
        let token =
            "bearer eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQyJ9.eyJpc3MiOiJERUYiLCJpYXQiOjE3MDAwMDAwMDB9.c2lnbmF0dXJlLXNpZ25hdHVyZS1zaWduYXR1cmUtc2lnbmF0dXJl"
        #expect(token.utf8.count > 127, "multi-byte HPACK length")
        func block(_ authorization: [UInt8]) -> [UInt8] {
            [0x83, 0x87]  // :method POST, :scheme https (static)
                + RawHTTP2.integer(4, prefixBits: 4, flags: 0x00) + RawHTTP2.string("/3/device/ab")  // :path, not indexed
                + RawHTTP2.integer(1, prefixBits: 4, flags: 0x00) + RawHTTP2.string("api.push.apple.com")
                + authorization
        }
        let incremental = RawHTTP2.integer(23, prefixBits: 6, flags: 0x40) + RawHTTP2.string(token)  // adds dynamic entry 62
        let indexed = RawHTTP2.integer(62, prefixBits: 7, flags: 0x80)  // dynamic table reference
        let neverIndexed = RawHTTP2.integer(23, prefixBits: 4, flags: 0x10) + RawHTTP2.string(token)
        let bytes =
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, [])
            + RawHTTP2.frame(type: 0x1, flags: 0x5, stream: 1, block(incremental))
            + RawHTTP2.frame(type: 0x1, flags: 0x5, stream: 3, block(indexed))
            + RawHTTP2.frame(type: 0x1, flags: 0x5, stream: 5, block(neverIndexed))
        try server.receive(bytes)
        let requests = server.takeEvents().compactMap { event -> HTTP2Request? in
            if case .request(let r) = event { return r } else { return nil }
        }
        #expect(requests.map(\.streamID) == [1, 3, 5])
        #expect(requests.map { $0.firstValue("authorization") } == [token, token, token])
        #expect(requests.map { $0.headers.first { $0.name == "authorization" }?.neverIndex } == [false, false, true])
    }

    @Test(
        "a request on a stream id used before, or lower than one used, is a connection error (RFC 9113 §5.1.1), not ignored",
        arguments: [([1, 1], false), ([5, 3], false), ([5, 3], true), ([1, 5, 3], true)])
    func reusedStreamIDs(ids: [UInt32], headersOnly: Bool) throws {
        let server = try HTTP2ServerSession(settings: [setting(HTTP2Setting.maxConcurrentStreams, 100)])
        let block: [UInt8] =
            [0x83, 0x87] + RawHTTP2.integer(4, prefixBits: 4, flags: 0x00) + RawHTTP2.string("/3/device/ab")
            + RawHTTP2.integer(1, prefixBits: 4, flags: 0x00) + RawHTTP2.string("api.push.apple.com")
        // `headersOnly`: one HEADERS with END_STREAM (a bodiless request, as h2spec sends);
        // otherwise HEADERS and then DATA with END_STREAM.
        func request(_ id: UInt32) -> [UInt8] {
            headersOnly
                ? RawHTTP2.frame(type: 0x1, flags: 0x5, stream: id, block)
                : RawHTTP2.frame(type: 0x1, flags: 0x4, stream: id, block) + RawHTTP2.frame(type: 0x0, flags: 0x1, stream: id, [0x7b, 0x7d])
        }
        let answered = ids.dropLast()
        try server.receive(RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, []) + answered.flatMap(request))
        let first = server.takeEvents().compactMap { event -> HTTP2Request? in
            if case .request(let r) = event { return r } else { return nil }
        }
        #expect(first.map(\.streamID) == answered.map { Int32($0) })
        for id in answered { _ = server.submitResponse(streamID: Int32(id), status: 200, headers: [], body: nil) }
        var out: [UInt8] = []
        server.drainOutput(into: &out)
        #expect(!RawHTTP2.frames(out).contains { $0.type == WireFrame.goAway })
        try? server.receive(request(ids.last!))
        out = []
        server.drainOutput(into: &out)
        let goAway = try #require(RawHTTP2.frames(out).first { $0.type == WireFrame.goAway }, "the client is told, not left waiting")
        #expect(goAway.errorCode == HTTP2ErrorCode.protocolError)
        #expect(!server.wantsRead)
    }

    /// `expect: 100-continue` on a request whose body has not come yet gets an interim 100 at
    /// once (RFC 9110 §10.1.1): the JDK's HttpClient sends no body until it has one.
    @Test(arguments: [true, false])
    func aRequestExpectingContinueGetsOne(expects: Bool) throws {
        let server = try HTTP2ServerSession(settings: [setting(HTTP2Setting.maxConcurrentStreams, 100)])
        var block: [UInt8] =
            [0x83, 0x87] + RawHTTP2.integer(4, prefixBits: 4, flags: 0x00) + RawHTTP2.string("/3/device/ab")
            + RawHTTP2.integer(1, prefixBits: 4, flags: 0x00) + RawHTTP2.string("api.push.apple.com")
        // A literal field without indexing, new name: expect: 100-continue.
        if expects { block += [0x00] + RawHTTP2.string("expect") + RawHTTP2.string("100-continue") }
        try server.receive(
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, []) + RawHTTP2.frame(type: 0x1, flags: 0x4, stream: 1, block))
        var out: [UInt8] = []
        server.drainOutput(into: &out)
        let headers = RawHTTP2.frames(out).filter { $0.type == 0x1 && $0.streamID == 1 }
        #expect(headers.count == (expects ? 1 : 0), "an interim answer only when asked for")
        #expect(headers.first.map { $0.flags & 0x1 == 0 } ?? true, "not the end of the stream")
        #expect(server.takeEvents().allSatisfy { if case .request = $0 { false } else { true } }, "the request is not complete yet")
    }

    /// Trailers (a HEADERS with END_STREAM after the body) are not merged into the request's
    /// fields (RFC 9110 §6.5.2): the request is handed over with the fields of its header block.
    @Test func trailersAreNotTheRequestsFields() throws {
        let server = try HTTP2ServerSession(settings: [setting(HTTP2Setting.maxConcurrentStreams, 100)])
        let block: [UInt8] =
            [0x83, 0x87] + RawHTTP2.integer(4, prefixBits: 4, flags: 0x00) + RawHTTP2.string("/3/device/ab")
            + RawHTTP2.integer(1, prefixBits: 4, flags: 0x00) + RawHTTP2.string("api.push.apple.com")
        let trailers: [UInt8] = [0x00] + RawHTTP2.string("apns-topic") + RawHTTP2.string("com.example.late")
        try server.receive(
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, [])
                + RawHTTP2.frame(type: 0x1, flags: 0x4, stream: 1, block) + RawHTTP2.frame(type: 0x0, flags: 0, stream: 1, Array("{}".utf8))
                + RawHTTP2.frame(type: 0x1, flags: 0x5, stream: 1, trailers))
        let requests = server.takeEvents().compactMap { event -> HTTP2Request? in
            if case .request(let r) = event { return r } else { return nil }
        }
        #expect(requests.map(\.streamID) == [1], "handed over at the trailers' END_STREAM")
        #expect(requests.first?.body == Array("{}".utf8))
        #expect(requests.first?.firstValue("apns-topic") == nil && requests.first?.headers.count == 4)
    }

    /// A HEADERS with END_STREAM on a stream that was open once (trailers after an answer that
    /// came early) is minimally processed and dropped: no connection error.
    @Test func headersEndingAStreamThatWasOpenOnceAreDropped() throws {
        let server = try HTTP2ServerSession(settings: [setting(HTTP2Setting.maxConcurrentStreams, 100)])
        let block: [UInt8] =
            [0x83, 0x87] + RawHTTP2.integer(4, prefixBits: 4, flags: 0x00) + RawHTTP2.string("/3/device/ab")
            + RawHTTP2.integer(1, prefixBits: 4, flags: 0x00) + RawHTTP2.string("api.push.apple.com")
        try server.receive(
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, []) + RawHTTP2.frame(type: 0x1, flags: 0x5, stream: 1, block))
        _ = server.takeEvents()
        _ = server.submitResponse(streamID: 1, status: 200, headers: [], body: nil)
        var out: [UInt8] = []
        server.drainOutput(into: &out)
        try server.receive(RawHTTP2.frame(type: 0x1, flags: 0x5, stream: 1, [0x40, 0x01, 0x78, 0x01, 0x79]))
        out = []
        server.drainOutput(into: &out)
        #expect(!RawHTTP2.frames(out).contains { $0.type == WireFrame.goAway })
        #expect(server.wantsRead)
    }

    @Test("client: authorization with and without neverIndex arrives intact (nghttp2 never-indexes it anyway)")
    func clientAuthorization() throws {
        let pair = try Pair()
        let token = "bearer abc.def.ghi"
        let plain = try pair.client.submitRequest(
            headers: requestHeaders(extra: [HTTP2HeaderField("authorization", token)]), body: nil)
        let never = try pair.client.submitRequest(
            headers: requestHeaders(extra: [HTTP2HeaderField("authorization", token, neverIndex: true)]), body: nil)
        let topicNever = try pair.client.submitRequest(
            headers: requestHeaders(extra: [HTTP2HeaderField("apns-topic", "t", neverIndex: true)]), body: nil)
        try pair.pump()
        for id in [plain, never] {
            let field = pair.requests.first { $0.streamID == id }?.headers.first { $0.name == "authorization" }
            #expect(field?.value == token)
            // nghttp2's HPACK encoder always uses literal-never-indexed for "authorization".
            #expect(field?.neverIndex == true)
        }
        let topic = pair.requests.first { $0.streamID == topicNever }?.headers.first { $0.name == "apns-topic" }
        #expect(topic?.neverIndex == true, "neverIndex is honoured for other fields")
    }

    @Test("10k requests on one connection: no growth of per-session state")
    func manyRequests() throws {
        let pair = try Pair()
        pair.responder = { r, s in
            s.submitResponse(streamID: r.streamID, status: 200, headers: [HTTP2HeaderField("apns-id", "x")], body: nil)
        }
        let batch = 200
        var total = 0
        for _ in 0..<50 {
            for _ in 0..<batch {
                _ = try pair.client.submitRequest(
                    headers: requestHeaders(extra: [HTTP2HeaderField("apns-topic", "t")]),
                    body: Array("{}".utf8))
            }
            try pair.pump()
            total += pair.responses.count
            #expect(pair.responses.allSatisfy { $0.status == 200 })
            pair.responses.removeAll()
            pair.requests.removeAll()
            pair.serverEvents.removeAll()
            #expect(pair.server.openStreamCount == 0)
            #expect(pair.client.openStreamCount == 0)
        }
        #expect(total == 10_000)
        #expect(pair.server.streamSlotCapacity <= batch, "stream slots are reused")
        #expect(pair.client.streamSlotCapacity <= batch)
        #expect(pair.server.lastReceivedStreamID == 19_999)
    }

    @Test("consumeEvents visits events once and reuses storage")
    func consumeEvents() throws {
        let pair = try Pair()
        pair.responder = nil
        _ = try pair.client.submitRequest(headers: requestHeaders(), body: nil)
        var out: [UInt8] = []
        pair.client.drainOutput(into: &out)
        try pair.server.receive(out)
        var seen: [Int32] = []
        pair.server.consumeEvents { event in
            if case .request(let r) = event {
                seen.append(r.streamID)
                pair.server.submitResponse(streamID: r.streamID, status: 200, headers: [], body: nil)
            }
        }
        #expect(seen == [1])
        var again = 0
        pair.server.consumeEvents { _ in again += 1 }
        #expect(again == 0)
        #expect(pair.server.takeEvents().isEmpty)
        var s2c: [UInt8] = []
        pair.server.drainOutput(into: &s2c)
        var closed: [Int32] = []
        pair.server.consumeEvents { if case .streamClosed(let id) = $0 { closed.append(id) } }
        #expect(closed == [1])
    }

    @Test("header lists that repeat, grow, shrink or change arrive as sent, also when their blocks and bodies interleave")
    func repeatedHeaderListsArriveAsSent() throws {
        let pair = try Pair()
        pair.responder = { request, server in
            server.submitResponse(streamID: request.streamID, status: 200, headers: [], body: nil)
        }
        let topic = HTTP2HeaderField("apns-topic", "com.example")
        let lists: [[HTTP2HeaderField]] = [
            requestHeaders(path: "/3/device/aa", extra: [topic]),
            requestHeaders(path: "/3/device/aa", extra: [topic]),  // the same again: shared
            requestHeaders(path: "/3/device/aa", extra: [topic, HTTP2HeaderField("apns-priority", "5")]),  // one more
            requestHeaders(path: "/3/device/aa"),  // fewer
            requestHeaders(path: "/3/device/bb", extra: [topic]),  // another value
            requestHeaders(path: "/3/device/bb", extra: [HTTP2HeaderField("apns-topic", "com.example", neverIndex: true)]),
            requestHeaders(path: "/3/device/bb", extra: [topic]),
        ]
        var expected: [Int32: [HTTP2HeaderField]] = [:]
        // One at a time, then all at once (every HEADERS before the bodies' DATA frames).
        for list in lists {
            expected[try pair.client.submitRequest(headers: list, body: Array("{}".utf8))] = list
            try pair.pump()
        }
        for list in lists + lists.reversed() {
            expected[try pair.client.submitRequest(headers: list, body: Array("{}".utf8))] = list
        }
        try pair.pump()
        // Paths of ever other lengths: the bytes kept of replaced fields are let go of now and then.
        for length in 1...60 {
            let list = requestHeaders(path: "/3/device/" + String(repeating: "c", count: length * 7 % 97), extra: [topic])
            expected[try pair.client.submitRequest(headers: list, body: Array("{}".utf8))] = list
            try pair.pump()
        }
        #expect(pair.requests.count == expected.count)
        for request in pair.requests {
            let sent = try #require(expected[request.streamID])
            #expect(request.headers.map(\.name) == sent.map(\.name))
            #expect(request.headers.map(\.value) == sent.map(\.value))
            #expect(request.headers.map(\.neverIndex) == sent.map(\.neverIndex))
        }
    }

    @Test("a request taken out of its event is the only owner of its header array")
    func takeRequestMovesTheRequestOut() throws {
        let pair = try Pair()
        pair.responder = nil
        _ = try pair.client.submitRequest(headers: requestHeaders(path: "/3/device/aa"), body: Array("{}".utf8))
        var out: [UInt8] = []
        pair.client.drainOutput(into: &out)
        try pair.server.receive(out)
        var taken: [HTTP2Request] = []
        var unique: [Bool] = []
        pair.server.consumeEvents { event in
            guard var request = event.takeRequest() else { return }
            #expect(event.takeRequest() == nil, "the event is left without its request")
            // An edit of a uniquely held array keeps its storage; a shared one would be copied.
            let before = request.headers.withUnsafeBufferPointer { $0.baseAddress }
            request.headers[0].value += ""
            unique.append(request.headers.withUnsafeBufferPointer { $0.baseAddress } == before)
            taken.append(request)
        }
        #expect(taken.map(\.streamID) == [1])
        #expect(taken.first?.firstValue(":path") == "/3/device/aa")
        #expect(taken.first?.body == Array("{}".utf8))
        #expect(unique == [true])
    }
}

@Suite("SETTINGS")
struct SettingsTests {
    @Test("first SETTINGS carries advertised values; later SETTINGS are sent as-is; ACK events fire")
    func advertisedSettings() throws {
        let pair = try Pair(
            serverSettings: [
                setting(HTTP2Setting.headerTableSize, 4096),
                setting(HTTP2Setting.maxConcurrentStreams, 1000),
                setting(HTTP2Setting.maxHeaderListSize, 8000),
            ], overrides: [setting(HTTP2Setting.maxConcurrentStreams, 1)])
        try pair.pump()

        let first = try #require(pair.serverFrames.first)
        #expect(first.type == WireFrame.settings && !first.isAck, "the server's first frame is its SETTINGS")
        #expect(first.settingEntries == [setting(1, 4096), setting(3, 1), setting(6, 8000)])
        #expect(pair.client.receivedSettings.first?.entries == [setting(1, 4096), setting(3, 1), setting(6, 8000)])
        #expect(pair.client.receivedSettings.first?.isAck == false)
        #expect(pair.client.remoteMaxConcurrentStreams == 1)
        #expect(pair.server.advertisedOverridesApplied == 1)
        #expect(pair.server.isSettingsAcknowledged)
        #expect(pair.client.receivedSettings.contains { $0.isAck }, "server ACKed the client's SETTINGS")

        pair.server.submitSettings([setting(HTTP2Setting.maxConcurrentStreams, 1000)])
        try pair.pump()
        let later = pair.client.receivedSettings.filter { !$0.isAck }
        #expect(later.count == 2)
        #expect(later.last?.entries == [setting(3, 1000)])
        #expect(pair.client.remoteMaxConcurrentStreams == 1000)
        let acks = pair.serverEvents.filter { if case .settingsAcknowledged = $0 { return true } else { return false } }
        #expect(acks.count == 2)
    }

    @Test("an override for a setting not in `settings` is added with nghttp2's current value")
    func overrideOfMissingSetting() throws {
        let pair = try Pair(
            serverSettings: [setting(HTTP2Setting.maxHeaderListSize, 8000)],
            overrides: [setting(HTTP2Setting.maxConcurrentStreams, 1)])
        try pair.pump()
        let first = try #require(pair.serverFrames.first)
        #expect(first.settingEntries == [setting(6, 8000), setting(3, 1)])
    }

    @Test("100-stream burst before the client reads SETTINGS is served (advertised MCS 1, enforced 1000)")
    func pendingLimitBurstServed() throws {
        let pair = try Pair(
            serverSettings: [
                setting(HTTP2Setting.headerTableSize, 4096),
                setting(HTTP2Setting.maxConcurrentStreams, 1000),
                setting(HTTP2Setting.maxHeaderListSize, 8000),
            ], overrides: [setting(HTTP2Setting.maxConcurrentStreams, 1)])
        var ids: [Int32] = []
        for _ in 0..<100 { ids.append(try pair.client.submitRequest(headers: requestHeaders(), body: Array("{}".utf8))) }
        // The client sends everything before it has read a byte from the server.
        var c2s: [UInt8] = []
        pair.client.drainOutput(into: &c2s)
        let burst = RawHTTP2.frames(c2s, skipPreface: true).filter { $0.type == WireFrame.headers }
        #expect(burst.count == 100)
        #expect(pair.client.receivedSettings.isEmpty)
        pair.clientWire += c2s
        try pair.server.receive(c2s)
        try pair.pump()

        #expect(pair.responses.count == 100)
        #expect(pair.responses.allSatisfy { $0.status == 200 && $0.resetErrorCode == nil })
        #expect(Set(pair.responses.map(\.streamID)) == Set(ids))
        #expect(!pair.serverFrames.contains { $0.type == WireFrame.rstStream })
        #expect(pair.client.receivedSettings.first?.entries.first { $0.id == HTTP2Setting.maxConcurrentStreams }?.value == 1)
        #expect(pair.client.remoteMaxConcurrentStreams == 1)
    }

    /// Served until the client has acknowledged the advertised 1 (above); from then on a
    /// stream over it is refused as APNs refuses it, unless the limit was raised meanwhile.
    @Test("a stream opened over the acknowledged advertised limit: RST_STREAM REFUSED_STREAM", arguments: [false, true])
    func overTheAcknowledgedLimit(raisedFirst: Bool) throws {
        let server = try HTTP2ServerSession(
            settings: [setting(HTTP2Setting.maxConcurrentStreams, 1000)], advertisedOverrides: [setting(HTTP2Setting.maxConcurrentStreams, 1)])
        var out: [UInt8] = []
        server.drainOutput(into: &out)
        #expect(RawHTTP2.frames(out).first?.settingEntries == [setting(3, 1)])
        if raisedFirst { server.submitSettings([setting(HTTP2Setting.maxConcurrentStreams, 1000)]) }
        let block: [UInt8] =
            [0x83, 0x87] + RawHTTP2.integer(4, prefixBits: 4, flags: 0x00) + RawHTTP2.string("/3/device/ab")
            + RawHTTP2.integer(1, prefixBits: 4, flags: 0x00) + RawHTTP2.string("api.push.apple.com")
        let acknowledged =
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, []) + RawHTTP2.frame(type: 0x4, flags: 0x1, stream: 0, [])
        // Stream 1 stays open (no answer yet) while stream 3 opens.
        try server.receive(
            acknowledged + RawHTTP2.frame(type: 0x1, flags: 0x5, stream: 1, block) + RawHTTP2.frame(type: 0x1, flags: 0x5, stream: 3, block))
        var requests: [Int32] = []
        var refused: [HTTP2RefusedRequest] = []
        server.consumeEvents { event in
            if case .request(let r) = event { requests.append(r.streamID) }
            if case .requestRefused(let r) = event { refused.append(r) }
        }
        _ = server.submitResponse(streamID: 1, status: 200, headers: [], body: nil)
        out = []
        server.drainOutput(into: &out)
        let frames = RawHTTP2.frames(out)
        if raisedFirst {
            #expect(requests == [1, 3] && refused.isEmpty)
            #expect(!frames.contains { $0.type == WireFrame.goAway || $0.type == WireFrame.rstStream })
            return
        }
        #expect(requests == [1], "the stream within the limit is served")
        #expect(refused.map(\.streamID) == [3] && refused.first?.reason == .overStreamLimit(limit: 1))
        #expect(refused.first?.headers.contains { $0.name == ":path" && $0.value == "/3/device/ab" } == true, "its fields are kept")
        let reset = try #require(frames.first { $0.type == WireFrame.rstStream })
        #expect(reset.streamID == 3 && reset.errorCode == HTTP2ErrorCode.refusedStream)
        #expect(!frames.contains { $0.type == WireFrame.goAway }, "a stream error: the connection goes on")
        #expect(frames.contains { $0.type == WireFrame.headers && $0.streamID == 1 }, "stream 1 is still answered")
    }

    @Test("control: with MCS 1 submitted normally, nghttp2 refuses 99 of the burst")
    func pendingLimitControl() throws {
        let pair = try Pair(serverSettings: [
            setting(HTTP2Setting.headerTableSize, 4096),
            setting(HTTP2Setting.maxConcurrentStreams, 1),
            setting(HTTP2Setting.maxHeaderListSize, 8000),
        ])
        for _ in 0..<100 { _ = try pair.client.submitRequest(headers: requestHeaders(), body: Array("{}".utf8)) }
        try pair.pump()
        #expect(pair.responses.count == 100)
        #expect(pair.responses.filter { $0.status == 200 }.count == 1)
        #expect(pair.responses.filter { $0.resetErrorCode == HTTP2ErrorCode.refusedStream }.count == 99)
        #expect(pair.serverFrames.filter { $0.type == WireFrame.rstStream }.count == 99)
    }

    @Test("lowering MCS later with submitSettings refuses extra streams at once, each reported")
    func loweringLater() throws {
        let pair = try Pair()
        try pair.pump()
        pair.server.submitSettings([setting(HTTP2Setting.maxConcurrentStreams, 1)])
        pair.responder = nil
        // Client hasn't read the new SETTINGS yet when it sends three streams.
        for _ in 0..<3 { _ = try pair.client.submitRequest(headers: requestHeaders(), body: nil) }
        var c2s: [UInt8] = []
        pair.client.drainOutput(into: &c2s)
        try pair.server.receive(c2s)
        let events = pair.server.takeEvents()
        #expect(events.filter { if case .request = $0 { return true } else { return false } }.count == 1)
        #expect(
            events.filter { if case .requestRefused(let r) = $0 { return r.reason == .overStreamLimit(limit: 1) } else { return false } }.count == 2)
        var s2c: [UInt8] = []
        pair.server.drainOutput(into: &s2c)
        #expect(RawHTTP2.frames(s2c).filter { $0.type == WireFrame.rstStream }.map(\.errorCode) == [7, 7])
    }

    /// A limit lowered after the start, once the client has acknowledged it: a stream over it
    /// is refused alone (APNs, on Netty, does so), where nghttp2 ends the connection with
    /// GOAWAY PROTOCOL_ERROR, the stream within the limit left unanswered.
    @Test("a stream over a lowered limit the client acknowledged: refused alone, the connection goes on")
    func overALoweredAcknowledgedLimit() throws {
        let server = try HTTP2ServerSession(settings: [setting(HTTP2Setting.maxConcurrentStreams, 1000)])
        var out: [UInt8] = []
        server.drainOutput(into: &out)
        let settingsAndAck =
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, []) + RawHTTP2.frame(type: 0x4, flags: 0x1, stream: 0, [])
        try server.receive(settingsAndAck)
        server.submitSettings([setting(HTTP2Setting.maxConcurrentStreams, 1)])
        out = []
        server.drainOutput(into: &out)
        let lowered = RawHTTP2.frames(out).filter { $0.type == WireFrame.settings && !$0.isAck }
        #expect(lowered.map(\.settingEntries) == [[setting(3, 1)]], "the wire says 1")
        let block: [UInt8] =
            [0x83, 0x87] + RawHTTP2.integer(4, prefixBits: 4, flags: 0x00) + RawHTTP2.string("/3/device/ab")
            + RawHTTP2.integer(1, prefixBits: 4, flags: 0x00) + RawHTTP2.string("api.push.apple.com")
        // The ACK of the lowered limit, then three streams at once (stream 1 stays open).
        try server.receive(
            RawHTTP2.frame(type: 0x4, flags: 0x1, stream: 0, []) + RawHTTP2.frame(type: 0x1, flags: 0x5, stream: 1, block)
                + RawHTTP2.frame(type: 0x1, flags: 0x5, stream: 3, block) + RawHTTP2.frame(type: 0x1, flags: 0x5, stream: 5, block))
        var requests: [Int32] = []
        var refused: [HTTP2RefusedRequest] = []
        server.consumeEvents { event in
            if case .request(let r) = event { requests.append(r.streamID) }
            if case .requestRefused(let r) = event { refused.append(r) }
        }
        #expect(requests == [1])
        #expect(refused.map(\.streamID) == [3, 5] && refused.allSatisfy { $0.reason == .overStreamLimit(limit: 1) })
        _ = server.submitResponse(streamID: 1, status: 200, headers: [], body: nil)
        out = []
        server.drainOutput(into: &out)
        let frames = RawHTTP2.frames(out)
        #expect(!frames.contains { $0.type == WireFrame.goAway }, "a stream error: the connection goes on")
        #expect(frames.filter { $0.type == WireFrame.rstStream }.map(\.streamID) == [3, 5])
        #expect(frames.contains { $0.type == WireFrame.headers && $0.streamID == 1 }, "stream 1 is answered")
    }
}

@Suite("Patcher")
struct PatcherTests {
    func frame(_ type: UInt8, _ flags: UInt8, _ stream: UInt32, _ payload: [UInt8]) -> [UInt8] {
        let n = payload.count
        return [
            UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff), type, flags,
            UInt8(stream >> 24), UInt8(stream >> 16 & 0xff), UInt8(stream >> 8 & 0xff), UInt8(stream & 0xff),
        ] + payload
    }

    func entries(_ list: [(UInt16, UInt32)]) -> [UInt8] {
        list.flatMap { id, v in [UInt8(id >> 8), UInt8(id & 0xff), UInt8(v >> 24), UInt8(v >> 16 & 0xff), UInt8(v >> 8 & 0xff), UInt8(v & 0xff)] }
    }

    @Test("patches only the first non-ACK SETTINGS, across arbitrary piece boundaries")
    func piecewise() {
        let windowUpdate = frame(0x8, 0, 0, [0, 0, 0x10, 0])
        let ack = frame(0x4, 0x1, 0, [])
        let first = frame(0x4, 0, 0, entries([(1, 4096), (3, 1000), (6, 8000), (3, 1000)]))
        let second = frame(0x4, 0, 0, entries([(3, 1000)]))
        let stream = windowUpdate + ack + first + second
        let expected = windowUpdate + ack + frame(0x4, 0, 0, entries([(1, 4096), (3, 1), (6, 8000), (3, 1)])) + second

        for pieceSize in [1, 2, 5, 7, 9, 13, stream.count] {
            var bytes = stream
            var patcher = SettingsPatcher(overrides: [setting(3, 1)])
            var offset = 0
            bytes.withUnsafeMutableBufferPointer { buf in
                while offset < buf.count {
                    let n = min(pieceSize, buf.count - offset)
                    patcher.process(buf.baseAddress! + offset, count: n)
                    offset += n
                }
            }
            #expect(bytes == expected, "piece size \(pieceSize)")
            #expect(!patcher.isActive)
            #expect(patcher.patchedEntries == 2)
        }
    }

    @Test("no overrides → inactive from the start")
    func inactive() {
        let patcher = SettingsPatcher(overrides: [])
        #expect(!patcher.isActive)
    }

    @Test("a later frame is patched as it was expected, after the frames submitted before it")
    func laterFrames() {
        let first = frame(0x4, 0, 0, entries([(3, 1000), (6, 8000)]))
        let asSubmitted = frame(0x4, 0, 0, entries([(1, 4096)]))
        let lowered = frame(0x4, 0, 0, entries([(3, 1000)]))
        var bytes = first + frame(0x4, 0x1, 0, []) + asSubmitted + lowered
        var patcher = SettingsPatcher(overrides: [], expecting: true)
        patcher.expect([])
        patcher.expect([setting(3, 1)])
        bytes.withUnsafeMutableBufferPointer { patcher.process($0.baseAddress!, count: $0.count) }
        #expect(bytes == first + frame(0x4, 0x1, 0, []) + asSubmitted + frame(0x4, 0, 0, entries([(3, 1)])))
        #expect(!patcher.isActive && patcher.patchedEntries == 1)
    }
}

@Suite("Control frames")
struct ControlFrameTests {
    @Test("PING is ACKed automatically")
    func ping() throws {
        let pair = try Pair()
        try pair.pump()
        #expect(pair.client.pingAcksReceived == 0)
        pair.client.submitPing()
        try pair.pump()
        #expect(pair.client.pingAcksReceived == 1)
        #expect(pair.serverEvents.contains { if case .ping = $0 { return true } else { return false } })
    }

    @Test("GOAWAY with debug data reaches the client")
    func goAway() throws {
        let pair = try Pair()
        let id = try pair.client.submitRequest(headers: requestHeaders(), body: nil)
        try pair.pump()
        #expect(pair.client.goAway == nil)
        pair.server.submitGoAway(
            errorCode: HTTP2ErrorCode.noError, lastStreamID: nil,
            debugData: Array(#"{"reason":"IdleTimeout"}"#.utf8))
        try pair.pump()
        let g = try #require(pair.client.goAway)
        #expect(g.errorCode == HTTP2ErrorCode.noError)
        #expect(g.lastStreamID == id)
        #expect(String(decoding: g.debugData, as: UTF8.self) == #"{"reason":"IdleTimeout"}"#)
        #expect(!pair.server.wantsRead && !pair.server.wantsWrite, "server done after GOAWAY with no open streams")
    }

    @Test("GOAWAY from the client is reported to the server; explicit lastStreamID and code")
    func goAwayToServer() throws {
        let pair = try Pair()
        try pair.pump()
        pair.client.submitGoAway(errorCode: HTTP2ErrorCode.enhanceYourCalm, lastStreamID: 0, debugData: [])
        try pair.pump()
        #expect(
            pair.serverEvents.contains {
                if case .goAwayReceived(let code, let last) = $0 { return code == 0xb && last == 0 } else { return false }
            })
    }

    @Test("RST_STREAM from the server reaches the client as resetErrorCode")
    func rstStream() throws {
        let pair = try Pair()
        pair.responder = { r, s in s.submitRstStream(streamID: r.streamID, errorCode: HTTP2ErrorCode.refusedStream) }
        let id = try pair.client.submitRequest(headers: requestHeaders(), body: nil)
        try pair.pump()
        let r = try #require(pair.response(id))
        #expect(r.resetErrorCode == 7)
        #expect(r.status == nil)
        #expect(r.closeErrorCode == 7)
        #expect(pair.server.openStreamCount == 0)
    }

    @Test("RST_STREAM from the client is reported; a response to a reset stream is dropped")
    func clientReset() throws {
        let pair = try Pair()
        pair.responder = nil
        let id = try pair.client.submitRequest(headers: requestHeaders(), body: Array("{}".utf8))
        try pair.pump()
        #expect(pair.requests.count == 1)
        pair.client.submitRstStream(streamID: id, errorCode: HTTP2ErrorCode.cancel)
        try pair.pump()
        #expect(
            pair.serverEvents.contains {
                if case .streamReset(let sid, let code) = $0 { return sid == id && code == 8 } else { return false }
            })
        #expect(pair.server.submitResponse(streamID: id, status: 200, headers: [], body: nil) == false)
        #expect(pair.response(id)?.closeErrorCode == 8)
    }
}

@Suite("Errors and validation")
struct ErrorTests {
    @Test("garbage instead of the preface: receive throws and GOAWAY is queued")
    func badPreface() throws {
        let server = try HTTP2ServerSession(settings: [setting(HTTP2Setting.maxConcurrentStreams, 100)])
        let garbage = Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        #expect(throws: HTTP2Error.self) { try server.receive(garbage) }
        do {
            try server.receive(garbage)
            Issue.record("expected a throw")
        } catch {
            #expect(error.code == -903)  // NGHTTP2_ERR_BAD_CLIENT_MAGIC
            #expect(error.goAwayErrorCode == HTTP2ErrorCode.protocolError)
        }
        var out: [UInt8] = []
        server.drainOutput(into: &out)
        let goAway = try #require(RawHTTP2.frames(out).first { $0.type == WireFrame.goAway })
        #expect(goAway.errorCode == HTTP2ErrorCode.protocolError)
        #expect(!server.wantsRead && !server.wantsWrite)
    }

    @Test("a malformed frame after a valid preface: receive throws (GOAWAY queued by nghttp2)")
    func malformedFrame() throws {
        let server = try HTTP2ServerSession(settings: [])
        // Preface, then a SETTINGS frame whose length (5) is not a multiple of 6.
        let bytes = RawHTTP2.clientPreface + [0, 0, 5, 0x4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0]
        var thrown: HTTP2Error?
        do { try server.receive(bytes) } catch { thrown = error }
        let error = try #require(thrown)
        #expect(error.code < 0)
        #expect(error.goAwayErrorCode == HTTP2ErrorCode.frameSizeError)

        var out: [UInt8] = []
        server.drainOutput(into: &out)
        let goAway = try #require(RawHTTP2.frames(out).first { $0.type == WireFrame.goAway })
        #expect(goAway.errorCode == HTTP2ErrorCode.frameSizeError)
        #expect(throws: HTTP2Error.self) { try server.receive([0]) }
    }

    @Test("preface followed by something other than SETTINGS: error quotes nghttp2's GOAWAY reason")
    func settingsExpected() throws {
        let server = try HTTP2ServerSession(settings: [])
        let ping = RawHTTP2.frame(type: 0x6, flags: 0, stream: 0, [UInt8](repeating: 0, count: 8))
        var thrown: HTTP2Error?
        do { try server.receive(RawHTTP2.clientPreface + ping) } catch { thrown = error }
        let error = try #require(thrown)
        #expect(error.goAwayErrorCode == HTTP2ErrorCode.protocolError)
        #expect(error.message.contains("SETTINGS expected"), "\(error.message)")
        var out: [UInt8] = []
        server.drainOutput(into: &out)
        let frames = RawHTTP2.frames(out)
        #expect(frames.first?.type == WireFrame.settings, "our SETTINGS still goes out first")
        #expect(frames.last?.type == WireFrame.goAway)
        #expect(frames.last.map { String(decoding: $0.payload.dropFirst(8), as: UTF8.self) } == "SETTINGS expected")
    }

    @Test("an invalid frame is named in the error, on either side (the shared error callbacks)")
    func invalidFrameDetail() throws {
        let server = try HTTP2ServerSession(settings: [])
        let badPush = RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, [0, 2, 0, 0, 0, 2])  // ENABLE_PUSH = 2
        var thrown: HTTP2Error?
        do { try server.receive(RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, []) + badPush) } catch { thrown = error }
        #expect(thrown?.message.contains("invalid frame (type 4, stream 0)") == true, "\(thrown?.message ?? "")")

        let client = try HTTP2ClientSession()
        var out: [UInt8] = []
        client.drainOutput(into: &out)  // the preface and SETTINGS
        let badWindow = RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, [0, 4, 0x80, 0, 0, 0])  // INITIAL_WINDOW_SIZE 2^31
        thrown = nil
        do { try client.receive(RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, []) + badWindow) } catch { thrown = error }
        #expect(thrown?.goAwayErrorCode == HTTP2ErrorCode.flowControlError)
        #expect(thrown?.message.contains("invalid frame (type 4, stream 0)") == true, "\(thrown?.message ?? "")")
    }

    @Test("PRIORITY frames are accepted silently; one that depends on itself is a connection error in nghttp2")
    func priorityFrames() throws {
        let server = try HTTP2ServerSession(settings: [setting(HTTP2Setting.maxConcurrentStreams, 100)])
        let block: [UInt8] = [0x83, 0x87, 0x84] + RawHTTP2.integer(1, prefixBits: 4, flags: 0) + RawHTTP2.string("x")  // POST https / x
        let prioritySpec: [UInt8] = [0, 0, 0, 0, 15]  // depends on 0, weight 16
        let bytes =
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, [])
            + RawHTTP2.frame(type: 0x2, flags: 0, stream: 3, prioritySpec)  // PRIORITY on an idle stream
            + RawHTTP2.frame(type: 0x1, flags: 0x5 | 0x20, stream: 1, prioritySpec + block)  // HEADERS with PRIORITY flag
        try server.receive(bytes)
        let ids = server.takeEvents().compactMap { e -> Int32? in if case .request(let r) = e { return r.streamID } else { return nil } }
        #expect(ids == [1])
        #expect(server.openStreamCount == 1, "the idle PRIORITY anchor is not a request stream")

        var thrown: HTTP2Error?
        do { try server.receive(RawHTTP2.frame(type: 0x2, flags: 0, stream: 5, [0, 0, 0, 5, 15])) } catch { thrown = error }
        #expect(thrown?.goAwayErrorCode == HTTP2ErrorCode.protocolError)
        #expect(thrown?.message.contains("depend on itself") == true, "\(thrown?.message ?? "")")
    }

    @Test("HPACK garbage in a HEADERS frame: COMPRESSION_ERROR")
    func compressionError() throws {
        let pair = try Pair()
        try pair.pump()
        // HEADERS on stream 1 with END_HEADERS, payload = indexed field 127+ beyond any table.
        let bad: [UInt8] = [0, 0, 2, 0x1, 0x4 | 0x1, 0, 0, 0, 1, 0xFF, 0x7F]
        var thrown: HTTP2Error?
        do { try pair.server.receive(bad) } catch { thrown = error }
        #expect(thrown?.goAwayErrorCode == HTTP2ErrorCode.compressionError)
        var out: [UInt8] = []
        pair.server.drainOutput(into: &out)
        #expect(RawHTTP2.frames(out).first { $0.type == WireFrame.goAway }?.errorCode == HTTP2ErrorCode.compressionError)
    }

    @Test("stream-level errors do not throw: content-length mismatch → RST_STREAM(PROTOCOL_ERROR), no request")
    func contentLengthMismatch() throws {
        let pair = try Pair()
        let id = try pair.client.submitRequest(
            headers: requestHeaders(extra: [HTTP2HeaderField("content-length", "10")]), body: Array("12345".utf8))
        try pair.pump()
        #expect(pair.requests.isEmpty)
        #expect(pair.response(id)?.resetErrorCode == HTTP2ErrorCode.protocolError)
        #expect(pair.server.openStreamCount == 0)
    }

    @Test("nghttp2 header validation: invalid regular values and connection headers reset the stream; surrounding spaces reach the application")
    func headerValidation() throws {
        let pair = try Pair()
        let leadingSpace = try pair.client.submitRequest(
            headers: requestHeaders(extra: [
                HTTP2HeaderField("apns-topic", " leading-space")
            ]), body: nil)
        let controlChar = try pair.client.submitRequest(
            headers: requestHeaders(extra: [
                HTTP2HeaderField("apns-topic", "a\u{01}b")
            ]), body: nil)
        let connection = try pair.client.submitRequest(
            headers: requestHeaders(extra: [
                HTTP2HeaderField("connection", "close")
            ]), body: nil)
        let missingPath = try pair.client.submitRequest(
            headers: [
                HTTP2HeaderField(":method", "POST"), HTTP2HeaderField(":scheme", "https"),
                HTTP2HeaderField(":authority", "x"),
            ], body: nil)
        let fine = try pair.client.submitRequest(
            headers: requestHeaders(extra: [
                HTTP2HeaderField("apns-topic", "inner space ok")
            ]), body: nil)
        try pair.pump()
        for id in [controlChar, connection, missingPath] {
            #expect(pair.response(id)?.resetErrorCode == HTTP2ErrorCode.protocolError, "stream \(id)")
        }
        // RFC 9113 calls a value with surrounding whitespace malformed; the server lets it
        // through unchanged so the APNs rules can decide (they ignore the spaces).
        #expect(pair.requests.map(\.streamID) == [leadingSpace, fine])
        #expect(pair.requests.first?.firstValue("apns-topic") == " leading-space")
        #expect(pair.requests.last?.firstValue("apns-topic") == "inner space ok")
        #expect(pair.response(fine)?.status == 200)
    }

    @Test("requests after a GOAWAY are not sent and complete with notSentError")
    func requestAfterGoAway() throws {
        let pair = try Pair()
        try pair.pump()
        pair.server.submitGoAway(errorCode: 0, lastStreamID: 0, debugData: [])
        try pair.pump()
        let id = try pair.client.submitRequest(headers: requestHeaders(), body: nil)
        try pair.pump()
        let r = try #require(pair.response(id))
        #expect(r.status == nil)
        #expect(r.notSentError != nil)
        #expect(pair.client.openStreamCount == 0)
    }
}

@Suite("Micro benchmark smoke")
struct BenchmarkSmokeTests {
    @Test("benchmark helpers run to completion (no timing assertions)")
    func smoke() throws {
        #expect(try HTTP2MicroBenchmark.serverReplay(requests: 300, batch: 100).requests == 300)
        #expect(try HTTP2MicroBenchmark.roundTrip(requests: 300, batch: 100).requests == 300)
    }
}

@Suite("Input forms")
struct InputFormTests {
    @Test("receive accepts a raw buffer, an array and an array slice alike")
    func inputForms() throws {
        let client = try HTTP2ClientSession()
        _ = try client.submitRequest(headers: requestHeaders(), body: nil)
        var bytes: [UInt8] = []
        client.drainOutput(into: &bytes)
        let readBuffer = bytes + [UInt8](repeating: 0xEE, count: 100)  // junk after the valid part

        for form in 0..<3 {
            let server = try HTTP2ServerSession(settings: [])
            switch form {
            case 0: try bytes.withUnsafeBytes { raw in try server.receive(raw) }
            case 1: try server.receive(bytes)
            default: try server.receive(readBuffer[0..<bytes.count])
            }
            let n = server.takeEvents().filter { if case .request = $0 { return true } else { return false } }.count
            #expect(n == 1, "form \(form)")
        }
    }
}

@Suite("Connection preface")
struct ConnectionPrefaceTests {
    @Test func tellsHTTP2FromHTTP1() {
        let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
        #expect(ConnectionPreface.classify(preface) == .http2)
        #expect(ConnectionPreface.classify(preface + [0, 0, 18, 4]) == .http2)
        #expect(ConnectionPreface.classify(preface.prefix(10)) == .undecided)
        #expect(ConnectionPreface.classify([UInt8]()) == .undecided)
        #expect(ConnectionPreface.classify(Array("POS".utf8)) == .undecided)
        #expect(
            ConnectionPreface.classify(Array("POST /3/device/ab HTTP/1.1\r\nhost: x\r\n".utf8))
                == .http1(requestLine: "POST /3/device/ab HTTP/1.1"))
        #expect(ConnectionPreface.classify(Array("GET / HTTP/1.1\r\n".utf8)) == .http1(requestLine: "GET / HTTP/1.1"))
        // Neither: the HTTP/2 session gets it and rejects the bad preface itself.
        #expect(ConnectionPreface.classify([0x16, 0x03, 0x01, 0x02]) == .http2)
        #expect(ConnectionPreface.classify(Array("hello world".utf8)) == .http2)
    }
}

@Suite("Request limits")
struct RequestLimitTests {
    /// The attack from the hardening issue, in raw HPACK: one 4000-byte field enters the
    /// dynamic table once and is then referenced by one-byte indexes, so a few kilobytes on
    /// the wire decode to megabytes. Over the limit nothing more is kept.
    @Test func headerListOverTheLimitIsResetAndNotKept() throws {
        let server = try HTTP2ServerSession(
            settings: [setting(HTTP2Setting.maxConcurrentStreams, 100)],
            maxHeaderListSize: 8000)
        let big = String(repeating: "x", count: 4000)
        func block(_ extra: [UInt8]) -> [UInt8] {
            [0x83, 0x87]  // :method POST, :scheme https
                + RawHTTP2.integer(4, prefixBits: 4, flags: 0x00) + RawHTTP2.string("/3/device/ab")
                + RawHTTP2.integer(1, prefixBits: 4, flags: 0x00) + RawHTTP2.string("api.push.apple.com")
                + extra
        }
        let bomb =
            RawHTTP2.integer(0, prefixBits: 6, flags: 0x40) + RawHTTP2.string("x-bomb") + RawHTTP2.string(big)  // entry 62
            + [UInt8](repeating: 0x80 | 62, count: 5000)  // 5000 references
        let wire =
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, [])
            + RawHTTP2.frame(type: 0x1, flags: 0x5, stream: 1, block(bomb))
            + RawHTTP2.frame(type: 0x1, flags: 0x5, stream: 3, block([]))
        #expect(wire.count < 10_000, "\(wire.count) bytes on the wire")
        try server.receive(wire)
        let events = server.takeEvents()
        let requests = events.compactMap { event -> HTTP2Request? in
            if case .request(let r) = event { return r } else { return nil }
        }
        let refused = events.compactMap { event -> HTTP2RefusedRequest? in
            if case .requestRefused(let r) = event { return r } else { return nil }
        }
        #expect(requests.map(\.streamID) == [3], "the connection keeps serving other streams")
        try #require(refused.count == 1)
        #expect(refused[0].streamID == 1)
        // Decoding stopped counting at the field that went over: the size is where it stopped.
        let fixed = (7 + 4 + 32) + (7 + 5 + 32) + (5 + 12 + 32) + (10 + 18 + 32)
        #expect(refused[0].reason == .headerListTooLarge(size: fixed + 2 * (6 + 4000 + 32), limit: 8000))
        let kept = refused[0].headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 32 }
        #expect(kept <= 8000, "only what fits in the limit is kept: \(kept)")
        var output: [UInt8] = []
        server.drainOutput(into: &output)
        let resets = RawHTTP2.frames(output).filter { $0.type == WireFrame.rstStream }
        #expect(resets.map(\.streamID) == [1])
        #expect(resets.first.map { Array($0.payload) } == [0, 0, 0, 1], "PROTOCOL_ERROR")
    }

    /// A client that keeps sending header lists over the limit is not decoded for ever: the
    /// third ends the connection with GOAWAY ENHANCE_YOUR_CALM; the ones before are refused
    /// one by one and the connection serves what else comes.
    @Test func repeatedOversizedHeaderListsEndTheConnection() throws {
        let server = try HTTP2ServerSession(
            settings: [setting(HTTP2Setting.maxConcurrentStreams, 100)],
            maxHeaderListSize: 8000)
        let big = String(repeating: "x", count: 4000)
        func block(_ extra: [UInt8]) -> [UInt8] {
            [0x83, 0x87] + RawHTTP2.integer(4, prefixBits: 4, flags: 0x00) + RawHTTP2.string("/3/device/ab")
                + RawHTTP2.integer(1, prefixBits: 4, flags: 0x00) + RawHTTP2.string("api.push.apple.com") + extra
        }
        let define = RawHTTP2.integer(0, prefixBits: 6, flags: 0x40) + RawHTTP2.string("x-bomb") + RawHTTP2.string(big)
        let references = [UInt8](repeating: 0x80 | 62, count: 5000)
        var wire =
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, [])
            + RawHTTP2.frame(type: 0x1, flags: 0x5, stream: 1, block(define + references))
            + RawHTTP2.frame(type: 0x1, flags: 0x5, stream: 3, block([]))
        for stream in stride(from: 5, through: 11, by: 2) {
            wire += RawHTTP2.frame(type: 0x1, flags: 0x5, stream: UInt32(stream), block(references))
        }
        try server.receive(wire)
        let events = server.takeEvents()
        let refused = events.compactMap { event -> Int32? in
            if case .requestRefused(let r) = event { return r.streamID } else { return nil }
        }
        let served = events.compactMap { event -> Int32? in
            if case .request(let r) = event { return r.streamID } else { return nil }
        }
        #expect(refused == [1, 5, 7], "three refused, then nothing more is read")
        #expect(served == [3])
        var output: [UInt8] = []
        server.drainOutput(into: &output)
        let frames = RawHTTP2.frames(output).filter { $0.type == WireFrame.rstStream || $0.type == WireFrame.goAway }
        #expect(
            frames.map(\.type) == [WireFrame.rstStream, WireFrame.rstStream, WireFrame.rstStream, WireFrame.goAway],
            "each stream's reset, then the GOAWAY")
        let goAway = try #require(frames.last)
        #expect(Array(goAway.payload[4..<8]) == [0, 0, 0, 0x0b], "ENHANCE_YOUR_CALM")
        #expect(!server.wantsRead, "nothing more is read")
        try server.receive(wire)
        #expect(
            !server.takeEvents().contains { event in
                switch event {
                case .request, .requestRefused: return true
                default: return false
                }
            }, "what comes after is not read")
    }

    @Test func aHeaderListExactlyAtTheLimitIsServed() throws {
        let pair = try Pair(maxHeaderListSize: 8000)
        let base = requestHeaders().reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 32 }
        let filler = String(repeating: "y", count: 8000 - base - 32 - 1)
        let id = try pair.client.submitRequest(headers: requestHeaders(extra: [HTTP2HeaderField("f", filler)]), body: nil)
        try pair.pump()
        #expect(pair.response(id)?.status == 200)
    }

    /// A server that answers a body past 5120 bytes with 413 before it ends.
    static func earlyAnsweringPair() throws -> Pair {
        let pair = try Pair(maxBufferedBody: 5121, earlyAnswerBodyLength: 5120)
        pair.responder = { request, server in
            server.submitResponse(
                streamID: request.streamID, status: request.isComplete ? 200 : 413,
                headers: [HTTP2HeaderField("content-type", "application/json")],
                body: Array(#"{"reason":"PayloadTooLarge"}"#.utf8))
        }
        return pair
    }

    /// A body past the limit is answered before it ends; the rest is read and dropped, so a
    /// client that goes on sending (the JDK's HttpClient, httpx) gets to read the answer.
    @Test func aBodyPastTheLimitIsAnsweredEarlyAndTheRestDrained() throws {
        let pair = try Self.earlyAnsweringPair()
        let body = [UInt8](repeating: 0x61, count: 200_000)
        let id = try pair.client.submitRequest(headers: requestHeaders(), body: body, maxDataFrameSize: 4096)
        try pair.pump()
        #expect(pair.requests.count == 1 && pair.requests.first?.isComplete == false)
        #expect(pair.response(id)?.status == 413)
        let sent = pair.clientFrames.filter { $0.type == 0 && $0.streamID == id }.reduce(0) { $0 + $1.payload.count }
        #expect(sent == body.count, "the whole body went (the window kept opening)")
        #expect(!pair.serverFrames.contains { $0.type == 3 && $0.streamID == id }, "no reset under the drain length")
    }

    /// A body answered early whose client never ends it is reset (NO_ERROR) at the request
    /// deadline, so it does not hold a stream's place for good; it is not reported as stalled.
    @Test func aBodyAnsweredEarlyThatNeverEndsIsResetAtTheDeadline() throws {
        let server = try HTTP2ServerSession(
            settings: [setting(HTTP2Setting.maxConcurrentStreams, 100)], maxBufferedBody: 5121, earlyAnswerBodyLength: 5120)
        let block: [UInt8] =
            [0x83, 0x87] + RawHTTP2.integer(4, prefixBits: 4, flags: 0x00) + RawHTTP2.string("/3/device/ab")
            + RawHTTP2.integer(1, prefixBits: 4, flags: 0x00) + RawHTTP2.string("api.push.apple.com")
        try server.receive(
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, []) + RawHTTP2.frame(type: 0x1, flags: 0x4, stream: 1, block)
                + RawHTTP2.frame(type: 0x0, flags: 0, stream: 1, [UInt8](repeating: 0x61, count: 6000)))
        let early = server.takeEvents().compactMap { event -> HTTP2Request? in if case .request(let r) = event { return r } else { return nil } }
        #expect(early.first?.isComplete == false)
        _ = server.submitResponse(streamID: 1, status: 413, headers: [], body: Array(#"{"reason":"PayloadTooLarge"}"#.utf8))
        var out: [UInt8] = []
        server.drainOutput(into: &out)
        #expect(!RawHTTP2.frames(out).contains { $0.type == 3 }, "no reset yet: the rest of the body is read")
        #expect(server.resetStalledRequests(startedBefore: .max).isEmpty, "answered already: not stalled")
        out = []
        server.drainOutput(into: &out)
        let reset = RawHTTP2.frames(out).first { $0.type == 3 && $0.streamID == 1 }
        #expect(reset.map { Array($0.payload) } == [0, 0, 0, 0], "RST_STREAM NO_ERROR")
    }

    /// Past `drainBeforeResetLength` the stream is reset with NO_ERROR so the client stops
    /// sending (RFC 9113 §8.1).
    @Test func aBodyPastTheLimitIsAnsweredEarly() throws {
        let pair = try Self.earlyAnsweringPair()
        let body = [UInt8](repeating: 0x61, count: HTTP2ServerSession.drainBeforeResetLength + 200_000)
        let id = try pair.client.submitRequest(headers: requestHeaders(), body: body, maxDataFrameSize: 4096)
        try pair.pump()
        try #require(pair.requests.count == 1)
        #expect(!pair.requests[0].isComplete)
        #expect(pair.requests[0].bodyLength <= 8192)
        #expect(pair.requests[0].body.count <= 5121)
        let response = try #require(pair.response(id))
        #expect(response.status == 413)
        #expect(response.body == Array(#"{"reason":"PayloadTooLarge"}"#.utf8), "the answer arrives whole before the reset")
        // The server's frames: the answer (HEADERS, DATA with END_STREAM), then RST_STREAM NO_ERROR.
        let frames = pair.serverFrames.filter { $0.streamID == id && $0.type != 8 }  // WINDOW_UPDATEs aside
        let kinds = frames.map(\.type)
        #expect(kinds.suffix(3) == [1, 0, 3], "\(kinds)")
        #expect(frames.last.map { Array($0.payload) } == [0, 0, 0, 0])
        // The client stopped: far fewer DATA bytes than the body crossed the wire.
        let sent = pair.clientFrames.filter { $0.type == 0 && $0.streamID == id }.reduce(0) { $0 + $1.payload.count }
        #expect(sent < body.count, "client sent \(sent) of \(body.count) bytes")
    }

    @Test func aCompleteBodyAtTheLimitIsNotAnsweredEarly() throws {
        let pair = try Pair(maxBufferedBody: 5121, earlyAnswerBodyLength: 5120)
        let id = try pair.client.submitRequest(headers: requestHeaders(), body: [UInt8](repeating: 0x61, count: 5120))
        try pair.pump()
        #expect(pair.requests.first?.isComplete == true)
        #expect(pair.requests.first?.body.count == 5120)
        #expect(pair.response(id)?.status == 200)
        #expect(!pair.serverFrames.contains { $0.type == 3 }, "no reset")
    }

    @Test func floodLimitsAreAvailableInThisNghttp2() {
        // Debian's nghttp2 1.52 carries the backports; the emulator sets them explicitly.
        #expect(FloodLimits.hasRapidResetLimit)
        #expect(FloodLimits.hasContinuationLimit)
    }
}
