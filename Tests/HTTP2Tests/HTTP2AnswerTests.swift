@testable import HTTP2
import Testing
import TestSupport

/// Answers whose values nghttp2 does not copy (`submitAnswer`): each stream's values are kept in
/// its slot until its HEADERS frame has gone.
@Suite("Answers")
struct HTTP2AnswerTests {
    static func ids(_ streamID: Int32) -> [HTTP2AnswerField] {
        [
            HTTP2AnswerField(name: "apns-id", value: .uuid(high: 0x0123_4567_89AB_CDEF, low: UInt64(streamID), uppercase: true)),
            HTTP2AnswerField(name: "apns-unique-id", value: .uuid(high: UInt64(streamID) << 40, low: 0xFEDC_BA98_7654_3210, uppercase: false)),
        ]
    }

    /// 8-4-4-4-12 hex of `high` then `low`, made another way than `UUIDText` does.
    static func uuid(_ high: UInt64, _ low: UInt64, uppercase: Bool) -> String {
        func hex(_ word: UInt64) -> String {
            let digits = String(word, radix: 16, uppercase: uppercase)
            return String(repeating: "0", count: 16 - digits.count) + digits
        }
        let all = Array(hex(high) + hex(low))
        return [all[0..<8], all[8..<12], all[12..<16], all[16..<20], all[20..<32]].map { String($0) }.joined(separator: "-")
    }

    static func expectIDs(_ response: HTTP2Response?, _ streamID: Int32) {
        #expect(response?.status == 200)
        #expect(response?.firstValue("apns-id") == uuid(0x0123_4567_89AB_CDEF, UInt64(streamID), uppercase: true))
        #expect(response?.firstValue("apns-unique-id") == uuid(UInt64(streamID) << 40, 0xFEDC_BA98_7654_3210, uppercase: false))
    }

    @Test func fieldsArriveAsWritten() throws {
        let pair = try Pair()
        let body = Array(#"{"reason":"BadDeviceToken"}"#.utf8)
        pair.responder = { request, server in
            let fields = [
                HTTP2AnswerField(name: "apns-id", value: .uuid(high: 0x0123_4567_89AB_CDEF, low: 0xFEDC_BA98_7654_3210, uppercase: true)),
                HTTP2AnswerField(
                    name: "apns-unique-id", value: .uuid(high: .max, low: 0xA, uppercase: false), neverIndex: true),
                HTTP2AnswerField(name: "apns-request-id", value: .text("given id, é")),
                HTTP2AnswerField(name: "apns-channel-id", value: .text("")),
                HTTP2AnswerField(name: "content-type", value: .constant("application/json")),
            ]
            #expect(server.submitAnswer(streamID: request.streamID, status: 400, fields: fields, body: body))
        }
        let id = try pair.client.submitRequest(headers: requestHeaders(), body: nil)
        try pair.pump()
        let answer = try #require(pair.response(id))
        #expect(answer.status == 400)
        #expect(answer.headers.map(\.name) == ["apns-id", "apns-unique-id", "apns-request-id", "apns-channel-id", "content-type"])
        #expect(
            answer.headers.map(\.value) == [
                "01234567-89AB-CDEF-FEDC-BA9876543210", "ffffffff-ffff-ffff-0000-00000000000a", "given id, é", "", "application/json",
            ])
        #expect(answer.body == body)
        #expect(answer.dataFrameCount == 1)
    }

    @Test func answersQueuedOnManyStreamsKeepTheirOwnValues() throws {
        let pair = try Pair()
        pair.responder = nil
        let streams = try (0..<20).map { _ in try pair.client.submitRequest(headers: requestHeaders(), body: nil) }
        try pair.pump()
        #expect(pair.requests.count == 20)
        // Every answer is queued before any is sent.
        for streamID in streams.reversed() {
            #expect(pair.server.submitAnswer(streamID: streamID, status: 200, fields: Self.ids(streamID), body: nil))
        }
        try pair.pump()
        for streamID in streams { Self.expectIDs(pair.response(streamID), streamID) }
    }

    /// A client resets a stream whose answer is queued and opens another, which takes the same
    /// slot and writes its answer there before anything is sent: the reset stream's answer is
    /// dropped unsent, and the new one goes out whole.
    @Test func aSlotTakenBeforeTheAnswerOfItsLastStreamLeft() throws {
        let pair = try Pair()
        pair.responder = nil
        let first = try pair.client.submitRequest(headers: requestHeaders(), body: nil)
        try pair.pump()
        #expect(pair.server.submitAnswer(streamID: first, status: 200, fields: Self.ids(first), body: nil))
        pair.client.submitRstStream(streamID: first, errorCode: HTTP2ErrorCode.cancel)
        let second = try pair.client.submitRequest(headers: requestHeaders(), body: nil)
        pair.responder = { request, server in
            #expect(server.submitAnswer(streamID: request.streamID, status: 200, fields: Self.ids(request.streamID), body: nil))
        }
        try pair.pump()
        #expect(pair.server.streamSlotCapacity == 1, "the second stream took the first one's slot")
        #expect(!pair.serverFrames.contains { $0.streamID == first && $0.type == WireFrame.headers })
        Self.expectIDs(pair.response(second), second)
    }

    @Test func aSecondAnswerOnAStreamLeavesTheFirstAsItWas() throws {
        let pair = try Pair()
        pair.responder = { request, server in
            #expect(server.submitAnswer(streamID: request.streamID, status: 200, fields: Self.ids(request.streamID), body: nil))
            _ = server.submitAnswer(streamID: request.streamID, status: 500, fields: Self.ids(7), body: Array("x".utf8))
        }
        let id = try pair.client.submitRequest(headers: requestHeaders(), body: nil)
        try pair.pump()
        Self.expectIDs(pair.response(id), id)
        #expect(pair.serverFrames.filter { $0.streamID == id && $0.type == WireFrame.headers }.count == 1)
    }

    @Test func anAnswerToAStreamThatIsGoneIsRefused() throws {
        let pair = try Pair()
        pair.responder = nil
        let id = try pair.client.submitRequest(headers: requestHeaders(), body: nil)
        try pair.pump()
        pair.client.submitRstStream(streamID: id, errorCode: HTTP2ErrorCode.cancel)
        try pair.pump()
        #expect(!pair.server.submitAnswer(streamID: id, status: 200, fields: Self.ids(id), body: nil))
    }
}

/// A field is matched against the one its connection sent last at its position by its bytes
/// (`RecentHeaderFields.matchingClass`): the short ones word by word, the long ones with `memcmp`.
@Suite("Recent header fields")
struct RecentHeaderFieldsTests {
    @Test func aFieldMatchesOnlyTheSameBytesWhateverItsLength() {
        for length in 1...40 {
            let name = Array("n".utf8)
            let value = (0..<length).map { UInt8(ascii: "a") + UInt8($0 % 26) }
            var recent = RecentHeaderFields()
            name.withUnsafeBufferPointer { n in
                value.withUnsafeBufferPointer { v in
                    _ = recent.field(
                        at: 0, name: n.baseAddress, nameLength: n.count, value: v.baseAddress, valueLength: v.count, neverIndex: false,
                        fieldClass: .invalidField, matched: false)
                    let same = recent.matchingClass(
                        at: 0, name: n.baseAddress, nameLength: n.count, value: v.baseAddress, valueLength: v.count, neverIndex: false)
                    #expect(same != nil, "\(length) bytes")
                }
            }
            for position in 0..<length {
                var other = value
                other[position] ^= 0x20
                let matched = name.withUnsafeBufferPointer { n in
                    other.withUnsafeBufferPointer { v in
                        recent.matchingClass(
                            at: 0, name: n.baseAddress, nameLength: n.count, value: v.baseAddress, valueLength: v.count, neverIndex: false)
                    }
                }
                #expect(matched == nil, "\(length) bytes, byte \(position) changed")
            }
        }
    }
}
