// Public value types of the HTTP2 module. Nothing here mentions an nghttp2 C type:
// the module is built with `InternalImportsByDefault`, so `CNghttp2` stays an
// implementation detail.

public import HTTPGrammar

/// One SETTINGS entry (RFC 9113 §6.5.1): a 16-bit identifier (kept as `Int32` like nghttp2)
/// and a 32-bit value.
public struct HTTP2Setting: Sendable, Hashable {
    public var id: Int32
    public var value: UInt32

    public init(id: Int32, value: UInt32) {
        self.id = id
        self.value = value
    }

    // Setting identifiers (RFC 9113 §6.5.2, RFC 8441, RFC 9218).
    public static let headerTableSize: Int32 = 1
    public static let enablePush: Int32 = 2
    public static let maxConcurrentStreams: Int32 = 3
    public static let initialWindowSize: Int32 = 4
    public static let maxFrameSize: Int32 = 5
    public static let maxHeaderListSize: Int32 = 6
    public static let enableConnectProtocol: Int32 = 8
    public static let noRFC7540Priorities: Int32 = 9
}

/// One header field (`HTTPGrammar.HeaderField`). `name` should be lower-case: nghttp2
/// lower-cases names it copies when a header block is submitted, and rejects upper-case names
/// on receipt. Received bytes that are not valid UTF-8 are repaired with U+FFFD.
public typealias HTTP2HeaderField = HeaderField

extension HeaderField {
    /// `content-type: application/json` (string literals: no allocation).
    public static let contentTypeJSON = HeaderField(name: "content-type", value: "application/json")
}

/// HTTP/2 error codes (RFC 9113 §7) as used in RST_STREAM and GOAWAY.
public enum HTTP2ErrorCode {
    public static let noError: UInt32 = 0x0
    public static let protocolError: UInt32 = 0x1
    public static let internalError: UInt32 = 0x2
    public static let flowControlError: UInt32 = 0x3
    public static let settingsTimeout: UInt32 = 0x4
    public static let streamClosed: UInt32 = 0x5
    public static let frameSizeError: UInt32 = 0x6
    public static let refusedStream: UInt32 = 0x7
    public static let cancel: UInt32 = 0x8
    public static let compressionError: UInt32 = 0x9
    public static let connectError: UInt32 = 0xa
    public static let enhanceYourCalm: UInt32 = 0xb
    public static let inadequateSecurity: UInt32 = 0xc
    public static let http11Required: UInt32 = 0xd

    /// The RFC 9113 name of a code ("REFUSED_STREAM"), or its hex value when unknown.
    public static func name(_ code: UInt32) -> String { errorCodeName(code) }
}

/// An error reported by nghttp2. `code` is an nghttp2 library error code (negative,
/// e.g. -903 = NGHTTP2_ERR_BAD_CLIENT_MAGIC, -505 = NGHTTP2_ERR_PROTO); `message` is
/// nghttp2's text for it plus whatever detail nghttp2 gave (error callback text, the
/// GOAWAY debug data it queued).
public struct HTTP2Error: Error, CustomStringConvertible, Sendable {
    public let code: Int32
    public let message: String
    /// For a connection error: the HTTP/2 error code of the GOAWAY that was queued
    /// (e.g. 1 PROTOCOL_ERROR, 6 FRAME_SIZE_ERROR, 9 COMPRESSION_ERROR).
    public let goAwayErrorCode: UInt32?

    public init(code: Int32, message: String, goAwayErrorCode: UInt32? = nil) {
        self.code = code
        self.message = message
        self.goAwayErrorCode = goAwayErrorCode
    }

    public var description: String { "HTTP2Error(\(code)): \(message)" }
}

/// A complete request received by the server (END_STREAM seen).
public struct HTTP2Request: Sendable {
    public var streamID: Int32
    /// Every field in the order received, duplicates kept, pseudo-headers (":method", ":scheme",
    /// ":path", ":authority") included. Trailer fields, if any, are appended after the header
    /// block's fields. Fields that nghttp2 silently drops as invalid (see module docs) are absent.
    public var headers: [HTTP2HeaderField]
    /// The request body, up to the session's `maxBufferedBody` cap.
    public var body: [UInt8]
    /// True total number of DATA payload bytes received (may exceed `body.count`).
    public var bodyLength: Int
    /// False when the request was handed over before its end because the body outgrew the
    /// session's `earlyAnswerBodyLength`: answer it; the rest of the body is not read.
    public var isComplete = true
    /// The header list's size as RFC 9113 §6.5.2 counts it (name + value + 32 per field).
    public var headerListSize = 0

    public init(streamID: Int32, headers: [HTTP2HeaderField], body: [UInt8], bodyLength: Int) {
        self.streamID = streamID
        self.headers = headers
        self.body = body
        self.bodyLength = bodyLength
    }

    /// The first value of the field called `name` (names are lower-case on the wire).
    public func firstValue(_ name: String) -> String? {
        for field in headers where field.name == name { return field.value }
        return nil
    }

    /// True when the body was cut at the cap.
    public var isBodyTruncated: Bool { bodyLength > body.count }
}

/// A request the session reset on its own, before it could be handed over.
public struct HTTP2RefusedRequest: Sendable {
    public enum Reason: Sendable, Equatable {
        /// The decoded header list (RFC 9113 §6.5.2 sizes) went over the session's limit.
        case headerListTooLarge(size: Int, limit: Int)
        /// A header field HTTP/2 does not allow (RFC 9113 §8.2.1, §8.2.2: an upper-case or
        /// otherwise invalid name, a connection-specific field, `te` other than `trailers`).
        case invalidHeaderField
        /// The request breaks HTTP/2's message rules (RFC 9113 §8.3.1: a required pseudo-header
        /// missing).
        case malformedMessage
        /// The body's DATA came to more, or ended at less, than its `content-length` (RFC 9113
        /// §8.1.1); `received` counts what came up to the reset.
        case bodyLength(contentLength: Int64, received: Int64)
        /// Opened while the peer already had `limit` streams open, after it acknowledged the
        /// SETTINGS that set that limit (reset with REFUSED_STREAM).
        case overStreamLimit(limit: Int)
    }
    public var streamID: Int32
    /// The fields decoded before the limit was reached.
    public var headers: [HTTP2HeaderField]
    public var reason: Reason
}

public enum HTTP2ServerEvent: Sendable {
    /// A complete request (END_STREAM seen), or one answered early (`isComplete` false).
    case request(HTTP2Request)
    /// A request reset by the session itself (see `HTTP2RefusedRequest`).
    case requestRefused(HTTP2RefusedRequest)
    /// The peer ACKed one of our SETTINGS frames.
    case settingsAcknowledged
    /// A PING (not a PING ACK) was received; nghttp2 has queued the ACK already.
    case ping
    /// The peer sent GOAWAY.
    case goAwayReceived(errorCode: UInt32, lastStreamID: Int32)
    /// The peer sent RST_STREAM.
    case streamReset(streamID: Int32, errorCode: UInt32)
    /// A stream that had started a request closed (normally: after our response was sent).
    case streamClosed(streamID: Int32)

    /// The request this event carries, moved out (the event is left a `.ping`): the caller
    /// then holds the only reference to its header array and body. nil for other events.
    public mutating func takeRequest() -> HTTP2Request? {
        guard case .request(let request) = self else { return nil }
        self = .ping
        return request
    }
}

/// A field of an answer (`HTTP2ServerSession.submitAnswer`). Its name is static and must be
/// lower-case; its value is written into bytes the stream keeps until the HEADERS frame has
/// gone, so nghttp2 copies neither (and lower-cases nothing).
public struct HTTP2AnswerField: Sendable {
    public var name: StaticString
    public var value: Value
    /// Encode as "literal header field never indexed" (RFC 7541 §6.2.3).
    public var neverIndex: Bool

    public enum Value: Sendable {
        case text(String)
        /// Static text: nghttp2 is pointed at it, nothing is written.
        case constant(StaticString)
        /// 128 bits written as UUID text (`UUIDText`, most significant first): an id goes out
        /// without a String made for it.
        case uuid(high: UInt64, low: UInt64, uppercase: Bool)
    }

    public init(name: StaticString, value: Value, neverIndex: Bool = false) {
        self.name = name
        self.value = value
        self.neverIndex = neverIndex
    }
}

/// A response (or the end of a stream) seen by the client.
public struct HTTP2Response: Sendable {
    public var streamID: Int32
    /// The `:status` of the final response; nil if the stream ended before a response header block.
    public var status: Int?
    /// Response header fields in the order received, duplicates kept, EXCLUDING ":status"
    /// (which is parsed into `status`); trailer fields are appended; informational (1xx)
    /// header blocks are included too.
    public var headers: [HTTP2HeaderField]
    public var body: [UInt8]
    /// HEADERS frames received on the stream (a CONTINUATION does not count separately).
    public var headersFrameCount: Int
    /// DATA frames received on the stream (0 for a bodiless success).
    public var dataFrameCount: Int
    /// Error code of an RST_STREAM received from the peer, if one was.
    public var resetErrorCode: UInt32?
    /// The error code nghttp2 reported when the stream closed: 0 for a clean close, the
    /// RST_STREAM code, or e.g. REFUSED_STREAM (7) when a GOAWAY's last-stream-id excluded it.
    public var closeErrorCode: UInt32
    /// Non-nil when nghttp2 never sent the request (nghttp2 library error code, e.g.
    /// -529 NGHTTP2_ERR_START_STREAM_NOT_ALLOWED after a GOAWAY).
    public var notSentError: Int32?

    public init(streamID: Int32) {
        self.streamID = streamID
        self.status = nil
        self.headers = []
        self.body = []
        self.headersFrameCount = 0
        self.dataFrameCount = 0
        self.resetErrorCode = nil
        self.closeErrorCode = 0
        self.notSentError = nil
    }

    public func firstValue(_ name: String) -> String? {
        for field in headers where field.name == name { return field.value }
        return nil
    }
}

/// One SETTINGS frame received from the peer (`entries` is empty for an ACK).
public struct HTTP2ReceivedSettings: Sendable {
    public var entries: [HTTP2Setting]
    public var isAck: Bool

    /// The last value for `id` in this frame, if present.
    public func value(for id: Int32) -> UInt32? {
        entries.last(where: { $0.id == id })?.value
    }
}
