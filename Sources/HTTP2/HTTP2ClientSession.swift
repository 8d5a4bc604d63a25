// Client side of the nghttp2 wrapper: used by integration tests, the `send` command and
// a load generator. It can send what a well-behaved client would not (duplicate regular
// headers, arbitrary header values, bodies split over many DATA frames, a body on a
// request that claims otherwise…), because tests use it to provoke server errors.

import CNghttp2

struct ClientStreamSlot: StreamSlot {
    var inUse = false
    var response = HTTP2Response(streamID: 0)
    var request = OutgoingBody()
    var maxDataFrame = Int.max

    mutating func clear() {
        request = OutgoingBody()
        maxDataFrame = Int.max
    }
}

/// An HTTP/2 client session over nghttp2 1.52.
///
/// Thread confinement: not thread-safe; use from one thread at a time (`@unchecked Sendable`
/// only to allow handing it over). Callbacks run inside `receive` / `drainOutput`.
///
/// The connection preface and the initial SETTINGS are queued by `init`; the first
/// `drainOutput` emits them.
public final class HTTP2ClientSession: NGHTTP2SessionOwner, @unchecked Sendable {
    let core: NGHTTP2SessionCore
    fileprivate var session: OpaquePointer { core.session }
    fileprivate var slots = StreamSlots<ClientStreamSlot>()
    fileprivate var completed: [HTTP2Response] = []
    private var scratch = HeaderScratch()

    /// Every SETTINGS frame received from the peer, in order (ACKs included, with no entries).
    public fileprivate(set) var receivedSettings: [HTTP2ReceivedSettings] = []
    /// The GOAWAY received from the peer, if any (the last one when several arrive).
    public fileprivate(set) var goAway: (errorCode: UInt32, lastStreamID: Int32, debugData: [UInt8])?
    /// PING ACKs received.
    public fileprivate(set) var pingAcksReceived = 0

    public static let defaultSettings: [HTTP2Setting] = [
        HTTP2Setting(id: HTTP2Setting.enablePush, value: 0),
        HTTP2Setting(id: HTTP2Setting.maxConcurrentStreams, value: 100),
        HTTP2Setting(id: HTTP2Setting.initialWindowSize, value: 1 << 20),
    ]

    /// - Parameters:
    ///   - settings: our SETTINGS (sent right after the preface).
    ///   - peerMaxConcurrentStreamsBeforeSettings: how many streams nghttp2 lets us open
    ///     before the server's first SETTINGS arrives (nghttp2's default is 100). Requests
    ///     beyond the limit in force are queued inside nghttp2, not refused.
    public init(
        settings: [HTTP2Setting] = HTTP2ClientSession.defaultSettings,
        peerMaxConcurrentStreamsBeforeSettings: UInt32 = 100
    ) throws(HTTP2Error) {
        core = try NGHTTP2SessionCore(.client) { callbacks, option in
            nghttp2_session_callbacks_set_on_header_callback(callbacks, clientOnHeader)
            nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, clientOnDataChunk)
            nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, clientOnFrameRecv)
            nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, clientOnStreamClose)
            nghttp2_session_callbacks_set_on_frame_not_send_callback(callbacks, clientOnFrameNotSend)
            nghttp2_option_set_peer_max_concurrent_streams(option, peerMaxConcurrentStreamsBeforeSettings)
        }
        core.attach(self)
        try core.submitInitialSettings(settings)
    }

    // MARK: Requests

    /// Queues a request and returns its stream id.
    ///
    /// - Parameters:
    ///   - headers: sent in this order, duplicates included, values as given (nghttp2 does not
    ///     validate outgoing values; it lower-cases names). Put pseudo-headers first.
    ///     `neverIndex` fields are sent as literal-never-indexed.
    ///   - body: nil → HEADERS with END_STREAM. Non-nil (even empty) → HEADERS, then DATA
    ///     frame(s), the last with END_STREAM.
    ///   - maxDataFrameSize: caps each DATA frame's payload, to send the body as several
    ///     frames (nghttp2 also caps at the peer's MAX_FRAME_SIZE and the flow-control window).
    @discardableResult
    public func submitRequest(
        headers: [HTTP2HeaderField], body: [UInt8]?,
        maxDataFrameSize: Int? = nil
    ) throws(HTTP2Error) -> Int32 {
        let index = slots.allocate()
        scratch.begin(fields: headers.count, byteCount: HeaderScratch.byteCount(headers))
        for field in headers { scratch.append(field) }
        let streamID: Int32
        if let body {
            slots[index].request = OutgoingBody(bytes: body)
            slots[index].maxDataFrame = max(1, maxDataFrameSize ?? Int.max)
            var provider = nghttp2_data_provider(
                source: nghttp2_data_source(ptr: slotPointer(index)),
                read_callback: clientReadRequestBody)
            streamID = nghttp2_submit_request(
                session, nil, scratch.nv, scratch.count, &provider,
                slotPointer(index))
        } else {
            streamID = nghttp2_submit_request(session, nil, scratch.nv, scratch.count, nil, slotPointer(index))
        }
        if streamID < 0 {
            slots.release(index)
            throw makeError(streamID, "submit_request")
        }
        slots[index].response = HTTP2Response(streamID: streamID)
        return streamID
    }

    /// Queues a PING.
    @discardableResult
    public func submitPing() -> Bool { core.submitPing() }

    /// Queues GOAWAY (`lastStreamID` nil = last peer-initiated stream processed, normally 0).
    @discardableResult
    public func submitGoAway(
        errorCode: UInt32 = HTTP2ErrorCode.noError, lastStreamID: Int32? = nil,
        debugData: [UInt8] = []
    ) -> Bool {
        core.submitGoAway(errorCode: errorCode, lastStreamID: lastStreamID, debugData: debugData)
    }

    /// Queues SETTINGS.
    @discardableResult
    public func submitSettings(_ settings: [HTTP2Setting]) -> Bool { core.submitSettings(settings) }

    /// Queues RST_STREAM for one of our streams.
    @discardableResult
    public func submitRstStream(streamID: Int32, errorCode: UInt32) -> Bool {
        core.submitRstStream(streamID: streamID, errorCode: errorCode)
    }

    /// Whether a submitted request has gone out (its HEADERS sent, the stream open): one over
    /// the peer's MAX_CONCURRENT_STREAMS waits in the queue until a stream closes.
    public func hasSent(streamID: Int32) -> Bool { core.hasStream(streamID) }

    // MARK: I/O

    /// Feeds received bytes. Throws on a connection error (nghttp2 has queued GOAWAY; drain,
    /// write, close). Responses completed meanwhile are still available.
    public func receive(_ bytes: UnsafeRawBufferPointer) throws(HTTP2Error) { try core.receive(bytes) }

    public func receive(_ bytes: [UInt8]) throws(HTTP2Error) { try core.receive(bytes) }

    /// Convenience for part of a read buffer, e.g. `try session.receive(readBuffer[0..<n])`.
    public func receive(_ bytes: ArraySlice<UInt8>) throws(HTTP2Error) { try core.receive(bytes) }

    /// Appends all pending output (preface, SETTINGS, requests, …) to `buffer`.
    public func drainOutput(into buffer: inout [UInt8]) { core.drainOutput(into: &buffer) }

    /// Returns and clears the responses of streams that have closed (END_STREAM both ways,
    /// RST_STREAM either way, refused by a GOAWAY, or never sent), in closing order.
    public func takeCompletedResponses() -> [HTTP2Response] {
        if completed.isEmpty { return [] }
        let out = completed
        completed = []
        return out
    }

    // MARK: State

    /// The peer's SETTINGS_MAX_CONCURRENT_STREAMS as last received (nghttp2's default,
    /// 0xFFFFFFFF, before the peer's first SETTINGS).
    public var remoteMaxConcurrentStreams: UInt32 {
        nghttp2_session_get_remote_settings(session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
    }
    /// Submitted requests whose stream has not completed yet.
    public var openStreamCount: Int { slots.openCount }
    public var wantsRead: Bool { core.wantsRead }
    public var wantsWrite: Bool { core.wantsWrite }
    public var terminationError: HTTP2Error? { core.terminalError }

    // MARK: Slots

    /// Stream slots ever allocated (reused; bounded by peak concurrency). For tests.
    var streamSlotCapacity: Int { slots.capacity }

    fileprivate func complete(_ index: Int) {
        var response = HTTP2Response(streamID: 0)
        swap(&response, &slots[index].response)
        completed.append(response)
        slots.release(index)
    }

    /// Slow path for frames not sent (the stream may not exist in nghttp2 then).
    fileprivate func slot(forStream streamID: Int32) -> Int? {
        if let index = slotIndex(nghttp2_session_get_stream_user_data(session, streamID)) { return index }
        for i in slots.indices where slots[i].inUse && slots[i].response.streamID == streamID { return i }
        return nil
    }
}

// MARK: - nghttp2 callbacks

@inline(__always)
private func owner(_ userData: UnsafeMutableRawPointer?) -> HTTP2ClientSession? {
    guard let userData else { return nil }
    return Unmanaged<HTTP2ClientSession>.fromOpaque(userData).takeUnretainedValue()
}

@inline(__always)
private func parseStatus(_ p: UnsafePointer<UInt8>?, _ n: Int) -> Int? {
    guard let p, n > 0 else { return nil }
    var v = 0
    for i in 0..<n {
        let d = Int(p[i]) - 48
        guard d >= 0 && d <= 9 else { return nil }
        v = v * 10 + d
    }
    return v
}

private func clientOnHeader(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
    _ name: UnsafePointer<UInt8>?, _ nameLength: Int,
    _ value: UnsafePointer<UInt8>?, _ valueLength: Int,
    _ flags: UInt8, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let client = owner(userData), let frame, let session else { return 0 }
    guard frame.pointee.hd.type == FrameType.headers,
        let index = slotIndex(nghttp2_session_get_stream_user_data(session, frame.pointee.hd.stream_id))
    else {
        return 0
    }
    // ":status" (7 bytes) is parsed, not listed.
    if nameLength == 7, let name, name[0] == 0x3A /* : */,
        name[1] == 0x73, name[2] == 0x74, name[3] == 0x61, name[4] == 0x74, name[5] == 0x75, name[6] == 0x73
    {
        client.slots[index].response.status = parseStatus(value, valueLength)
        return 0
    }
    client.slots[index].response.headers.append(
        HTTP2HeaderField(
            name: makeString(name, nameLength), value: makeString(value, valueLength),
            neverIndex: flags & NVFlag.noIndex != 0))
    return 0
}

private func clientOnDataChunk(
    _ session: OpaquePointer?, _ flags: UInt8, _ streamID: Int32,
    _ data: UnsafePointer<UInt8>?, _ length: Int,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let client = owner(userData), let session, let data, length > 0,
        let index = slotIndex(nghttp2_session_get_stream_user_data(session, streamID))
    else { return 0 }
    client.slots[index].response.body.append(contentsOf: UnsafeBufferPointer(start: data, count: length))
    return 0
}

private func clientOnFrameRecv(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let client = owner(userData), let frame, let session else { return 0 }
    let hd = frame.pointee.hd
    switch hd.type {
    case FrameType.headers:
        if let index = slotIndex(nghttp2_session_get_stream_user_data(session, hd.stream_id)) {
            client.slots[index].response.headersFrameCount += 1
        }
    case FrameType.data:
        if let index = slotIndex(nghttp2_session_get_stream_user_data(session, hd.stream_id)) {
            client.slots[index].response.dataFrameCount += 1
        }
    case FrameType.rstStream:
        if let index = slotIndex(nghttp2_session_get_stream_user_data(session, hd.stream_id)) {
            client.slots[index].response.resetErrorCode = frame.pointee.rst_stream.error_code
        }
    case FrameType.settings:
        let s = frame.pointee.settings
        var entries: [HTTP2Setting] = []
        if let iv = s.iv, s.niv > 0 {
            entries.reserveCapacity(s.niv)
            for i in 0..<s.niv { entries.append(HTTP2Setting(id: iv[i].settings_id, value: iv[i].value)) }
        }
        client.receivedSettings.append(HTTP2ReceivedSettings(entries: entries, isAck: hd.flags & FrameFlag.ack != 0))
    case FrameType.ping:
        if hd.flags & FrameFlag.ack != 0 { client.pingAcksReceived += 1 }
    case FrameType.goAway:
        let g = frame.pointee.goaway
        var debug: [UInt8] = []
        if let p = g.opaque_data, g.opaque_data_len > 0 {
            debug = Array(UnsafeBufferPointer(start: p, count: g.opaque_data_len))
        }
        client.goAway = (g.error_code, g.last_stream_id, debug)
    default:
        break
    }
    return 0
}

private func clientOnStreamClose(
    _ session: OpaquePointer?, _ streamID: Int32, _ errorCode: UInt32,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let client = owner(userData), let session,
        let index = slotIndex(nghttp2_session_get_stream_user_data(session, streamID))
    else { return 0 }
    client.slots[index].response.closeErrorCode = errorCode
    client.complete(index)
    return 0
}

private func clientOnFrameNotSend(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
    _ libErrorCode: Int32, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let client = owner(userData), let frame, let session else { return 0 }
    guard frame.pointee.hd.type == FrameType.headers else { return 0 }
    let streamID = frame.pointee.hd.stream_id
    guard let index = client.slot(forStream: streamID) else { return 0 }
    client.slots[index].response.notSentError = libErrorCode
    // If nghttp2 has a live stream for it, the close callback completes it later.
    if nghttp2_session_find_stream(session, streamID) == nil {
        client.complete(index)
    }
    return 0
}

private let clientReadRequestBody: nghttp2_data_source_read_callback = { _, _, buffer, length, dataFlags, source, userData in
    guard let client = owner(userData), let source, let buffer, let dataFlags,
        let index = slotIndex(source.pointee.ptr)
    else { return Int(LibError.temporalCallbackFailure) }
    let limit = min(length, client.slots[index].maxDataFrame)
    return client.slots[index].request.read(into: buffer, length: limit, dataFlags: dataFlags)
}
