// Server side of the nghttp2 wrapper. Bytes in (`receive`) → events (`takeEvents` /
// `consumeEvents`); submits (`submitResponse`, …) → bytes out (`drainOutput`).

import CNghttp2
import Glibc
import MonotonicClock

/// Per-stream state of a request, kept in `StreamSlots`.
struct ServerStreamSlot: StreamSlot {
    var streamID: Int32 = 0
    var inUse = false
    var headers: [HTTP2HeaderField] = []
    /// While its header block arrives: every field so far is the one the last request had at
    /// its position (`RecentHeaderFields`), and `headers` is still empty. The fields are taken
    /// from the recent ones at the block's end (`settleHeaders`): the whole array when they
    /// are all of them, so a client repeating its header list costs no array and no retains.
    var sharing = false
    /// Fields matched so far while `sharing`.
    var sharedFields = 0
    /// RFC 9113 §6.5.2 size of the header list so far (name + value + 32 per field).
    var headerListSize = 0
    /// The header list went over the limit: fields are no longer kept, the stream is reset.
    var headersRefused = false
    /// The reset for `headersRefused` has been queued and reported.
    var refusalSent = false
    var body: [UInt8] = []
    var bodyLength = 0
    /// Handed over before END_STREAM (the body outgrew `earlyAnswerBodyLength`); the rest
    /// of the body is read and dropped, and the stream is reset with NO_ERROR once answered and
    /// past `drainBeforeResetLength` bytes.
    var answeredEarly = false
    /// The early answer has gone out; a reset waits for the body to pass the drain length.
    var earlyAnswerSent = false
    /// The NO_ERROR reset was queued.
    var resetQueued = false
    /// The request asked for `100 Continue` before its body.
    var expectsContinue = false
    /// The request was handed over (or refused): only its answer is left.
    var handedOver = false
    /// Opened over the stream limit the peer acknowledged: refused at the end of its header
    /// block (`refuseOverStreamLimit`).
    var overStreamLimit = false
    /// Its method is HEAD: the answer goes without content (RFC 9110 §9.3.2).
    var isHead = false
    /// An answer was submitted (`submitAnswer`): its values are in the slot's `AnswerBytes`.
    var answered = false
    /// When its HEADERS arrived (monotonic ms), for `resetStalledRequests`.
    var startedAtMs: Int64 = 0
    /// The message checks so far (`HTTP2ServerSession.checksMessages`).
    var check = MessageCheck()
    var response = OutgoingBody()

    mutating func clear() {
        headers = []
        body = []
        response = OutgoingBody()
    }
}

/// An HTTP/2 server session over nghttp2 1.52.
///
/// Thread confinement: a session is NOT thread-safe. It must be used from one thread at a
/// time (typically the event-loop thread owning the connection); it is `@unchecked Sendable`
/// only so it can be handed from the thread that accepted the connection to the one that
/// drives it. All nghttp2 callbacks run synchronously inside `receive` / `drainOutput`.
///
/// Driving it: `receive(bytes)`, then read events (`takeEvents()` or `consumeEvents`),
/// submit responses, then `drainOutput(into:)` and write what was appended. Close the
/// connection when `wantsRead` and `wantsWrite` are both false, or after draining once
/// `receive` has thrown.
public final class HTTP2ServerSession: NGHTTP2SessionOwner, @unchecked Sendable {
    let core: NGHTTP2SessionCore
    /// `core.session`, kept here too for the request path.
    fileprivate let session: OpaquePointer
    // The state below is touched only on the connection's event-loop thread, by this class
    // and by nghttp2's callbacks (which nghttp2 calls from `receive`, never while one of these
    // is being modified), so no two accesses can overlap. Run-time exclusivity checks on them
    // cost about a tenth of the request path (a header callback alone makes three accesses
    // per field), hence `unchecked`.
    @exclusivity(unchecked) fileprivate var events: [HTTP2ServerEvent] = []
    @exclusivity(unchecked) private var eventBatch: [HTTP2ServerEvent] = []
    @exclusivity(unchecked) fileprivate var slots = StreamSlots<ServerStreamSlot>()
    fileprivate let maxBufferedBody: Int
    fileprivate let maxHeaderListSize: Int
    fileprivate let earlyAnswerBodyLength: Int
    @exclusivity(unchecked) fileprivate var headerCapacityHint = 12
    /// The slot whose fields are still the recent ones (`ServerStreamSlot.sharing`), if any.
    @exclusivity(unchecked) fileprivate var sharingSlot: Int?
    /// The stream whose slot was allocated last, and its slot (-1: none): the header fields
    /// and body that follow its HEADERS are matched to it without a lookup in nghttp2's stream
    /// map (about 35 instructions each, a dozen a request). Cleared when the slot is released.
    @exclusivity(unchecked) fileprivate var recentStreamID: Int32 = -1
    @exclusivity(unchecked) fileprivate var recentSlot = 0
    /// Header fields of recent requests by position, to reuse their Strings (see `field`).
    @exclusivity(unchecked) fileprivate var recentFields = RecentHeaderFields()
    @exclusivity(unchecked) fileprivate var settingsAcked = false
    /// The session makes nghttp2's HTTP messaging checks itself (MessageChecks.swift), with
    /// nghttp2's turned off. Not when SETTINGS_NO_RFC7540_PRIORITIES is 1: nghttp2 then also
    /// reads the `priority` field (RFC 9218) as part of them, which is left to it.
    fileprivate let checksMessages: Bool
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL was submitted as 1 (`:protocol` allowed, RFC 8441).
    @exclusivity(unchecked) fileprivate var connectProtocol = false
    /// MAX_CONCURRENT_STREAMS as advertised in the first SETTINGS (the wire value, lower than
    /// the one nghttp2 enforces: see `SettingsPatcher`).
    private let advertisedStreamLimit: Int?
    /// The limit this session refuses new streams over (RST_STREAM REFUSED_STREAM, reported:
    /// RFC 9113 §5.1.2): the advertised one once the peer acknowledged the frame that carried
    /// it (§6.5.3), unless another was submitted since; one lower than nghttp2's, submitted
    /// later, at once (`submitSettings`). nil: nghttp2's own limit is the only one.
    @exclusivity(unchecked) fileprivate var acknowledgedStreamLimit: Int?
    @exclusivity(unchecked) private var streamLimitResubmitted = false
    /// MAX_CONCURRENT_STREAMS as nghttp2 enforces it (nil: its default, no limit).
    private var enforcedStreamLimit: UInt32?
    /// Header lists over `maxHeaderListSize` on this connection so far.
    @exclusivity(unchecked) fileprivate var oversizedHeaderLists = 0
    /// The last one allowed has come: nothing more is read, and the next drain ends the
    /// connection with GOAWAY ENHANCE_YOUR_CALM (`calmSent` once it has).
    @exclusivity(unchecked) fileprivate var endingForCalm = false
    @exclusivity(unchecked) private var calmSent = false
    /// GOAWAYs this side's owner submitted (`submitGoAway`); any other with an error code is
    /// nghttp2's own, for the peer's error.
    @exclusivity(unchecked) fileprivate var ownGoAways = 0
    /// The session sent a GOAWAY with an error code it decided on itself (a flood, a protocol,
    /// flow-control or compression error of the peer), not one its owner asked for.
    public fileprivate(set) var endedForPeerError = false
    /// That GOAWAY's error code and last stream id (for the log: nghttp2 ends a connection on
    /// its own for a flood or a flow-control error, without an error returned to the owner).
    public fileprivate(set) var peerErrorGoAway: (errorCode: UInt32, lastStreamID: Int32)?
    /// Stream ids the client passed over (it opened a higher one first): they were never open,
    /// so a request on one later is an unexpected stream id, not a frame on a closed stream.
    /// The newest ranges only; a client skips ids rarely.
    @exclusivity(unchecked) fileprivate var skippedStreamIDs: [ClosedRange<Int32>] = []
    fileprivate static let skippedRangesKept = 32
    /// The connection is ended (GOAWAY ENHANCE_YOUR_CALM) at this many oversized header lists:
    /// a client that keeps sending them is not one to keep decoding for.
    public static let oversizedHeaderListsPerConnection = 3
    @exclusivity(unchecked) private var scratch = HeaderScratch()
    /// Each slot's answer values, kept until its HEADERS frame has gone (`submitAnswer`).
    @exclusivity(unchecked) private var answerBytes = AnswerBytes()

    /// - Parameters:
    ///   - settings: the SETTINGS nghttp2 submits and enforces (first SETTINGS frame).
    ///   - advertisedOverrides: values that replace, on the wire only, the values of the same
    ///     ids in that FIRST SETTINGS frame (see `SettingsPatcher` for why). nghttp2 keeps
    ///     enforcing `settings`. Only use overrides the peer can honour safely, i.e. ones at
    ///     least as strict as the enforced value (MAX_CONCURRENT_STREAMS 1 advertised while
    ///     1000 is enforced is the intended use). An override id missing from `settings` is
    ///     added to the submitted frame with nghttp2's current (default) local value.
    ///   - maxBufferedBody: request body bytes kept per request; further bytes are counted only.
    ///   - maxHeaderListSize: the decoded header list a request may have (RFC 9113 §6.5.2
    ///     sizes). nghttp2 does not enforce SETTINGS_MAX_HEADER_LIST_SIZE itself; over this,
    ///     the stream is reset with PROTOCOL_ERROR at once, `.requestRefused` reports it with
    ///     the fields kept so far, and the rest of the block is decoded without being looked
    ///     at; the `oversizedHeaderListsPerConnection`-th such list ends the connection with
    ///     GOAWAY ENHANCE_YOUR_CALM. nil: no limit.
    ///   - earlyAnswerBodyLength: once a body is longer than this, the request is handed over
    ///     at once (`isComplete` false) so it can be answered (413) without reading the rest;
    ///     the stream is reset with NO_ERROR after the answer (RFC 9113 §8.1). nil: never.
    public init(
        settings: [HTTP2Setting], advertisedOverrides: [HTTP2Setting] = [],
        maxBufferedBody: Int = 65536, maxHeaderListSize: Int? = nil,
        earlyAnswerBodyLength: Int? = nil
    ) throws(HTTP2Error) {
        let checksMessages = !settings.contains { $0.id == HTTP2Setting.noRFC7540Priorities && $0.value == 1 }
        core = try NGHTTP2SessionCore(.server, advertisedOverrides: advertisedOverrides) { callbacks, option in
            nghttp2_session_callbacks_set_on_begin_frame_callback(callbacks, serverOnBeginFrame)
            nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, serverOnBeginHeaders)
            nghttp2_session_callbacks_set_on_header_callback(callbacks, serverOnHeader)
            nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, serverOnDataChunk)
            nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, serverOnFrameRecv)
            nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, serverOnStreamClose)
            nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, serverOnFrameSend)
            // Don't keep closed streams around for the RFC 7540 priority tree: bounded, but
            // up to MAX_CONCURRENT_STREAMS dead stream objects per connection otherwise.
            nghttp2_option_set_no_closed_streams(option, 1)
            // RFC 9113 makes a value with leading or trailing whitespace malformed, and nghttp2
            // resets such streams. HTTP/1-era servers strip it instead; the application decides.
            nghttp2_option_set_no_rfc9113_leading_and_trailing_ws_validation(option, 1)
            // Its HTTP messaging checks every byte of every field of every request; this
            // session makes the same checks and skips a field its connection sent before.
            if checksMessages { nghttp2_option_set_no_http_messaging(option, 1) }
            FloodLimits.apply(to: option)
        }
        self.checksMessages = checksMessages
        session = core.session
        self.maxBufferedBody = max(0, maxBufferedBody)
        self.maxHeaderListSize = maxHeaderListSize ?? Int.max
        self.earlyAnswerBodyLength = earlyAnswerBodyLength ?? Int.max
        advertisedStreamLimit = advertisedOverrides.last { $0.id == HTTP2Setting.maxConcurrentStreams }.map { Int($0.value) }
        enforcedStreamLimit = settings.last { $0.id == HTTP2Setting.maxConcurrentStreams }?.value
        core.attach(self)
        core.onInvalidStreamFrame = { [unowned self] streamID, code in noteInvalidStreamFrame(streamID, code: code) }

        var submitted = settings
        for o in advertisedOverrides where !submitted.contains(where: { $0.id == o.id }) {
            switch o.id {
            case 1...6, 8, 9:
                let current = nghttp2_session_get_local_settings(session, nghttp2_settings_id(UInt32(o.id)))
                submitted.append(HTTP2Setting(id: o.id, value: current))
            default:
                throw makeError(LibError.invalidArgument, "advertised override for unknown setting \(o.id)")
            }
        }
        try core.submitInitialSettings(submitted)
        noteConnectProtocol(submitted)
    }

    /// As nghttp2 reads a submitted SETTINGS: the last ENABLE_CONNECT_PROTOCOL entry counts.
    private func noteConnectProtocol(_ settings: [HTTP2Setting]) {
        if let last = settings.last(where: { $0.id == HTTP2Setting.enableConnectProtocol }) { connectProtocol = last.value == 1 }
    }

    // MARK: Input

    /// Feeds received bytes to nghttp2; events are recorded for `takeEvents`.
    ///
    /// Throws when the peer committed a connection error (bad preface, malformed frame,
    /// HPACK failure, flooding…): nghttp2 has then queued GOAWAY and ignores further input.
    /// The caller should `drainOutput`, write it, and close. Events recorded before the
    /// error are still available. Stream-level errors do not throw (nghttp2 answers them
    /// with RST_STREAM by itself).
    public func receive(_ bytes: UnsafeRawBufferPointer) throws(HTTP2Error) {
        if endingForCalm { return }
        try core.receive(bytes)
    }

    /// Convenience for `[UInt8]` input.
    public func receive(_ bytes: [UInt8]) throws(HTTP2Error) {
        if endingForCalm { return }
        try core.receive(bytes)
    }

    /// Convenience for part of a read buffer, e.g. `try session.receive(readBuffer[0..<n])`.
    public func receive(_ bytes: ArraySlice<UInt8>) throws(HTTP2Error) {
        if endingForCalm { return }
        try core.receive(bytes)
    }

    /// Returns and clears the recorded events. Returns the shared empty array (no
    /// allocation) when there are none.
    public func takeEvents() -> [HTTP2ServerEvent] {
        if events.isEmpty { return [] }
        let out = events
        events = []
        return out
    }

    /// Visits and clears the recorded events, reusing the event storage across calls
    /// (cheaper than `takeEvents` on the hot path). `body` may call back into the session
    /// (submit responses, even `receive`): events recorded meanwhile are kept for the next call.
    /// If `body` throws, the events not yet visited are dropped.
    ///
    /// `body` gets each event in place, so it can move a request out (`takeRequest`) instead
    /// of copying it: the request's header array then has one owner, which can keep it (the
    /// journal does) and edit it without a copy.
    public func consumeEvents<E: Error>(_ body: (inout HTTP2ServerEvent) throws(E) -> Void) throws(E) {
        if events.isEmpty { return }
        var batch = eventBatch
        eventBatch = []
        swap(&batch, &events)
        defer {
            batch.removeAll(keepingCapacity: true)
            eventBatch = batch
        }
        for index in batch.indices {
            try body(&batch[index])
        }
    }

    // MARK: Output

    /// Queues a response. `body == nil` → one HEADERS frame with END_STREAM. Otherwise
    /// HEADERS, then the body as ONE DATA frame with END_STREAM (as long as it fits in the
    /// peer's SETTINGS_MAX_FRAME_SIZE, ≥ 16384, and flow-control window; a larger body
    /// is split by nghttp2). Header names should be lower-case; `:status` is added here.
    ///
    /// Returns false when the stream is unknown or already closed (e.g. the peer reset it)
    /// or nghttp2 rejected the submit.
    @discardableResult
    public func submitResponse(
        streamID: Int32, status: Int, headers: [HTTP2HeaderField],
        body: [UInt8]?
    ) -> Bool {
        guard let index = slot(of: streamID) else { return false }
        scratch.begin(fields: headers.count + 1, byteCount: HeaderScratch.byteCount(headers, extra: 3))
        scratch.appendStatus(status)
        for field in headers { scratch.append(field) }
        return submit(index, streamID: streamID, body: body)
    }

    /// Queues an answer: `submitResponse` for fields whose names are static lower-case text and
    /// whose values may be 128-bit ids (`HTTP2AnswerField`). nghttp2 copies none of it: the
    /// values are written into bytes the stream's slot keeps until the HEADERS frame has gone
    /// (its copy and lower-casing of each name and value cost about 60 instructions a field).
    @discardableResult
    public func submitAnswer(streamID: Int32, status: Int, fields: [HTTP2AnswerField], body: [UInt8]?) -> Bool {
        guard let index = slot(of: streamID) else { return false }
        let byteCount = HeaderScratch.answerByteCount(fields)
        if slots[index].answered {
            // A second answer on the stream (nghttp2 drops it behind the first's END_STREAM)
            // must not write over the first's values: it is copied.
            scratch.setAnswer(status: status, fields: fields, values: scratch.valueRoom(byteCount), kept: false)
        } else {
            slots[index].answered = true
            scratch.setAnswer(status: status, fields: fields, values: answerBytes.room(slot: index, count: byteCount), kept: true)
        }
        return submit(index, streamID: streamID, body: body)
    }

    /// Submits the block in `scratch` with `body` (see `submitResponse`). A HEAD request's answer
    /// has no content (clients reset a stream whose answer to HEAD carries DATA); its headers,
    /// content-type included, stay as for the same request as GET.
    private func submit(_ index: Int, streamID: Int32, body: [UInt8]?) -> Bool {
        let rv: Int32
        if let body, !slots[index].isHead {
            slots[index].response = OutgoingBody(bytes: body)
            var provider = nghttp2_data_provider(
                source: nghttp2_data_source(ptr: slotPointer(index)),
                read_callback: serverReadResponseBody)
            rv = nghttp2_submit_response(session, streamID, scratch.nv, scratch.count, &provider)
        } else {
            rv = nghttp2_submit_response(session, streamID, scratch.nv, scratch.count, nil)
        }
        return rv == 0
    }

    /// Queues an interim `100` (Continue) on a stream whose request asked for one
    /// (`expect: 100-continue`) before sending its body: RFC 9110 §10.1.1 wants a 100 or a
    /// final answer, and a client such as the JDK's HttpClient sends no body until then.
    fileprivate func submitContinue(streamID: Int32) {
        scratch.begin(fields: 1, byteCount: 3)
        scratch.appendStatus(100)
        _ = nghttp2_submit_headers(session, 0, streamID, nil, scratch.nv, scratch.count, nil)
    }

    /// Queues a SETTINGS frame. A MAX_CONCURRENT_STREAMS in it applies to new streams at once
    /// (as nghttp2 applies a submitted limit, and as APNs cuts it after an expired provider
    /// token). One under the limit nghttp2 enforces is this session's to enforce: nghttp2 keeps
    /// its own, the frame carries the lower one on the wire (`SettingsPatcher`), and a stream
    /// over it is refused alone, reported (`.overStreamLimit`), where nghttp2 would end the
    /// whole connection for it once the peer had acknowledged the frame.
    @discardableResult
    public func submitSettings(_ settings: [HTTP2Setting]) -> Bool {
        guard let limit = settings.last(where: { $0.id == HTTP2Setting.maxConcurrentStreams })?.value else {
            guard core.submitSettings(settings, onTheWire: []) else { return false }
            noteConnectProtocol(settings)
            return true
        }
        streamLimitResubmitted = true
        if let enforced = enforcedStreamLimit, limit < enforced {
            let kept = settings.map { $0.id == HTTP2Setting.maxConcurrentStreams ? HTTP2Setting(id: $0.id, value: enforced) : $0 }
            guard core.submitSettings(kept, onTheWire: [HTTP2Setting(id: HTTP2Setting.maxConcurrentStreams, value: limit)]) else {
                return false
            }
            acknowledgedStreamLimit = Int(limit)
        } else {
            guard core.submitSettings(settings, onTheWire: []) else { return false }
            enforcedStreamLimit = limit
            acknowledgedStreamLimit = nil
        }
        noteConnectProtocol(settings)
        return true
    }

    /// Queues GOAWAY. `lastStreamID` nil = the last stream nghttp2 processed. Graceful: the
    /// session keeps serving streams up to that id; `wantsRead`/`wantsWrite` turn false when done.
    @discardableResult
    public func submitGoAway(errorCode: UInt32, lastStreamID: Int32? = nil, debugData: [UInt8] = []) -> Bool {
        ownGoAways += 1
        return core.submitGoAway(errorCode: errorCode, lastStreamID: lastStreamID, debugData: debugData)
    }

    /// Queues RST_STREAM.
    @discardableResult
    public func submitRstStream(streamID: Int32, errorCode: UInt32) -> Bool {
        core.submitRstStream(streamID: streamID, errorCode: errorCode)
    }

    /// Queues a PING (8 zero bytes of opaque data).
    @discardableResult
    public func submitPing() -> Bool { core.submitPing() }

    /// Appends every pending output byte to `buffer` (calls `mem_send` until it has nothing
    /// more). Stream-close callbacks fire in here (→ `.streamClosed` events).
    public func drainOutput(into buffer: inout [UInt8]) {
        core.drainOutput(into: &buffer)
        if endingForCalm, !calmSent {
            // After the resets already queued (a terminating session sends nothing but its
            // GOAWAY), so the client learns what became of each stream.
            calmSent = true
            _ = nghttp2_session_terminate_session(session, HTTP2ErrorCode.enhanceYourCalm)
            core.drainOutput(into: &buffer)
        }
    }

    // MARK: Stalled requests

    /// When the oldest request still arriving (headers or body not complete) started, in
    /// monotonic ms; nil when none is.
    public var oldestIncompleteRequestStart: Int64? {
        var oldest: Int64?
        for index in slots.indices where slots[index].inUse && !slots[index].handedOver {
            oldest = min(oldest ?? slots[index].startedAtMs, slots[index].startedAtMs)
        }
        return oldest
    }

    /// Resets (RST_STREAM CANCEL, or `errorCode`) every request still arriving that started
    /// before `deadline` (monotonic ms), so a client that trickles a body cannot hold its
    /// buffers for ever. Returns their ids and the header fields received.
    public func resetStalledRequests(
        startedBefore deadline: Int64, errorCode: UInt32 = HTTP2ErrorCode.cancel
    ) -> [(streamID: Int32, headers: [HTTP2HeaderField])] {
        var stalled: [(Int32, [HTTP2HeaderField])] = []
        // A body answered early (413) that the client never ends: its answer went out, so the
        // stream is only told to stop (NO_ERROR), not reported; it no longer holds a place.
        for index in slots.indices
        where slots[index].inUse && slots[index].answeredEarly && slots[index].earlyAnswerSent && !slots[index].resetQueued
            && slots[index].startedAtMs < deadline && nghttp2_session_get_stream_remote_close(session, slots[index].streamID) == 0
        {
            slots[index].resetQueued = true
            nghttp2_submit_rst_stream(session, 0, slots[index].streamID, HTTP2ErrorCode.noError)
        }
        for index in slots.indices where slots[index].inUse && !slots[index].handedOver && slots[index].startedAtMs < deadline {
            slots[index].handedOver = true
            settleHeaders(index)
            var headers: [HTTP2HeaderField] = []
            swap(&headers, &slots[index].headers)
            slots[index].body = []
            nghttp2_submit_rst_stream(session, 0, slots[index].streamID, errorCode)
            stalled.append((slots[index].streamID, headers))
        }
        return stalled
    }

    // MARK: State

    public var wantsRead: Bool { core.wantsRead }
    public var wantsWrite: Bool { core.wantsWrite }
    /// Our first SETTINGS frame has been ACKed by the peer.
    public var isSettingsAcknowledged: Bool { settingsAcked }
    /// Request streams opened by the peer and not yet closed.
    public var openStreamCount: Int { slots.openCount }
    /// The highest peer stream id nghttp2 has processed (the id a GOAWAY would carry).
    public var lastReceivedStreamID: Int32 { nghttp2_session_get_last_proc_stream_id(session) }
    /// The error `receive` threw (or a fatal output error), if any.
    public var terminationError: HTTP2Error? { core.terminalError }
    /// Entries rewritten by the first-SETTINGS patch so far (0 until the frame is drained).
    public var advertisedOverridesApplied: Int { core.patcher.patchedEntries }

    /// Sends the first SETTINGS frame with the enforced values after all, when it has not left
    /// yet (true); false when it has, and a new SETTINGS frame is the only way to change them.
    public func withdrawAdvertisedOverrides() -> Bool {
        guard core.withdrawAdvertisedOverrides() else { return false }
        streamLimitResubmitted = true
        return true
    }

    // MARK: Slots

    /// Stream slots ever allocated (reused; bounded by peak concurrency). For tests.
    var streamSlotCapacity: Int { slots.capacity }

    /// The slot of a request stream, through nghttp2's stream map.
    @inline(__always)
    fileprivate func slot(of streamID: Int32) -> Int? {
        if streamID == recentStreamID { return recentSlot }
        return slotIndex(nghttp2_session_get_stream_user_data(session, streamID))
    }

    fileprivate func releaseSlot(_ index: Int) {
        if recentStreamID == slots[index].streamID { recentStreamID = -1 }
        if sharingSlot == index { sharingSlot = nil }
        slots[index].sharing = false
        slots.release(index)
    }

    /// Gives a slot whose fields were the recent ones (`sharing`) its header array: before the
    /// recent fields change (another field, another block) and before its fields are handed on.
    fileprivate func settleHeaders(_ index: Int) {
        guard slots[index].sharing else { return }
        slots[index].sharing = false
        if sharingSlot == index { sharingSlot = nil }
        let count = slots[index].sharedFields
        if count == recentFields.count {
            slots[index].headers = recentFields.all
        } else {
            slots[index].headers.reserveCapacity(max(headerCapacityHint, count + 1))
            slots[index].headers.append(contentsOf: recentFields.all[..<count])
        }
    }

    fileprivate func allocateSlot(streamID: Int32) -> Int {
        let index = slots.allocate()
        slots[index].streamID = streamID
        slots[index].bodyLength = 0
        slots[index].headerListSize = 0
        slots[index].headersRefused = false
        slots[index].refusalSent = false
        slots[index].answeredEarly = false
        slots[index].earlyAnswerSent = false
        slots[index].resetQueued = false
        slots[index].expectsContinue = false
        slots[index].overStreamLimit = false
        slots[index].handedOver = false
        slots[index].isHead = false
        slots[index].answered = false
        slots[index].check = MessageCheck()
        slots[index].startedAtMs = Monotonic.nowMilliseconds()
        slots[index].sharing = true
        slots[index].sharedFields = 0
        return index
    }

    fileprivate func deliverRequest(_ index: Int, complete: Bool = true) {
        settleHeaders(index)
        var headers: [HTTP2HeaderField] = []
        var body: [UInt8] = []
        swap(&headers, &slots[index].headers)
        swap(&body, &slots[index].body)
        if headers.count > headerCapacityHint { headerCapacityHint = min(headers.count, 64) }
        slots[index].handedOver = true
        var request = HTTP2Request(
            streamID: slots[index].streamID, headers: headers, body: body,
            bodyLength: slots[index].bodyLength)
        request.isComplete = complete
        request.headerListSize = slots[index].headerListSize
        events.append(.request(request))
    }

    /// A header list that just went over the limit, while it is being decoded: refused now.
    /// True when it is the last one this connection may send (see `endingForCalm`).
    fileprivate func refuseOversizedHeaders(_ index: Int) -> Bool {
        slots[index].headersRefused = true
        slots[index].refusalSent = true
        refuseHeaders(index)
        oversizedHeaderLists += 1
        if oversizedHeaderLists >= Self.oversizedHeaderListsPerConnection { endingForCalm = true }
        return endingForCalm
    }

    /// A request nghttp2 resets by itself for breaking an RFC 9113 rule it enforces before
    /// anything is handed over: reported with the fields decoded so far, so that it is logged
    /// and journaled like every other request.
    fileprivate func noteInvalidStreamFrame(_ streamID: Int32, code: Int32) {
        guard code == LibError.httpHeader || code == LibError.httpMessaging, let index = slot(of: streamID),
            !slots[index].handedOver
        else { return }
        slots[index].handedOver = true
        settleHeaders(index)
        var headers: [HTTP2HeaderField] = []
        swap(&headers, &slots[index].headers)
        events.append(
            .requestRefused(
                HTTP2RefusedRequest(
                    streamID: streamID, headers: headers, reason: code == LibError.httpHeader ? .invalidHeaderField : .malformedMessage)))
    }

    /// A field nghttp2's checks would refuse (`checksMessages`): the stream is reset and reported
    /// as nghttp2 does it (PROTOCOL_ERROR; the TEMPORAL_CALLBACK_FAILURE returned makes nghttp2
    /// decode the rest of the block without calling back, and its own INTERNAL_ERROR reset
    /// after ours is dropped, as after its own check).
    fileprivate func refuseField(
        _ streamID: Int32, name: UnsafePointer<UInt8>?, nameLength: Int, value: UnsafePointer<UInt8>?, valueLength: Int
    ) -> Int32 {
        nghttp2_submit_rst_stream(session, 0, streamID, HTTP2ErrorCode.protocolError)
        core.noteStreamError(
            type: FrameType.headers, streamID: streamID, code: LibError.httpHeader,
            message: "Invalid HTTP header field was received: frame type: 1, stream: \(streamID), name: ["
                + makeString(name, nameLength) + "], value: [" + makeString(value, valueLength) + "]")
        noteInvalidStreamFrame(streamID, code: LibError.httpHeader)
        return LibError.temporalCallbackFailure
    }

    /// A header block or a stream's end that breaks a message rule (`checksMessages`): reset
    /// and reported as nghttp2 does (PROTOCOL_ERROR, `.malformedMessage`).
    fileprivate func refuseMessage(_ streamID: Int32) {
        nghttp2_submit_rst_stream(session, 0, streamID, HTTP2ErrorCode.protocolError)
        core.noteStreamError(type: FrameType.headers, streamID: streamID, code: LibError.httpMessaging)
        noteInvalidStreamFrame(streamID, code: LibError.httpMessaging)
    }

    /// The peer acknowledged one of our SETTINGS frames; the first carried the advertised limit.
    fileprivate func noteSettingsAcknowledged() {
        if !settingsAcked && !streamLimitResubmitted { acknowledgedStreamLimit = advertisedStreamLimit }
        settingsAcked = true
        events.append(.settingsAcknowledged)
    }

    /// Whether a stream opening now goes over the limit the peer acknowledged.
    fileprivate func isOverAcknowledgedLimit() -> Bool {
        guard let limit = acknowledgedStreamLimit else { return false }
        return slots.openCount >= limit
    }

    /// A stream opened over the acknowledged limit, at the end of its header block: reset
    /// with REFUSED_STREAM (not processed: safe to retry) and reported with its fields, a stream
    /// error as RFC 9113 §5.1.2 allows; the connection and the streams within the limit go on.
    fileprivate func refuseOverStreamLimit(_ index: Int) {
        reset(index, HTTP2ErrorCode.refusedStream, reason: .overStreamLimit(limit: acknowledgedStreamLimit ?? 0))
    }

    /// A header list over the limit: reset the stream and report what was kept of it.
    fileprivate func refuseHeaders(_ index: Int) {
        reset(
            index, HTTP2ErrorCode.protocolError,
            reason: .headerListTooLarge(size: slots[index].headerListSize, limit: maxHeaderListSize))
    }

    /// A body over or short of its content-length: the stream is reset (PROTOCOL_ERROR) and,
    /// unless the request was handed over already (answered early), reported with its fields;
    /// nghttp2 reset it without a word, so a client could not find its attempt in the journal.
    fileprivate func refuseBodyLength(_ index: Int) {
        slots[index].check.bodyRefused = true
        let check = slots[index].check
        guard !slots[index].handedOver else {
            nghttp2_submit_rst_stream(session, 0, slots[index].streamID, HTTP2ErrorCode.protocolError)
            return
        }
        reset(index, HTTP2ErrorCode.protocolError, reason: .bodyLength(contentLength: check.contentLength, received: check.received))
    }

    /// Resets a request's stream before it was handed over, and reports it with its fields.
    private func reset(_ index: Int, _ errorCode: UInt32, reason: HTTP2RefusedRequest.Reason) {
        let streamID = slots[index].streamID
        slots[index].handedOver = true
        settleHeaders(index)
        var headers: [HTTP2HeaderField] = []
        swap(&headers, &slots[index].headers)
        nghttp2_submit_rst_stream(session, 0, streamID, errorCode)
        events.append(.requestRefused(HTTP2RefusedRequest(streamID: streamID, headers: headers, reason: reason)))
    }
}

// MARK: - nghttp2 callbacks (record only; never throw; return 0 or an nghttp2 error code)

/// Runs `body` with the session behind a callback's user data, borrowed: taken as a strong
/// reference, it was retained and released on every callback (a dozen and more a request).
@inline(__always)
private func withServer<R>(_ userData: UnsafeMutableRawPointer?, orElse none: R, _ body: (HTTP2ServerSession) -> R) -> R {
    guard let userData else { return none }
    return Unmanaged<HTTP2ServerSession>.fromOpaque(userData)._withUnsafeGuaranteedRef(body)
}

@inline(__always)
private func owner(_ userData: UnsafeMutableRawPointer?) -> HTTP2ServerSession? {
    guard let userData else { return nil }
    return Unmanaged<HTTP2ServerSession>.fromOpaque(userData).takeUnretainedValue()
}

private func serverOnBeginHeaders(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    withServer(userData, orElse: 0) { server in
        guard let frame else { return 0 }
        guard frame.pointee.hd.type == FrameType.headers,
            frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST
        else { return 0 }
        let streamID = frame.pointee.hd.stream_id
        // A new block may change the recent fields: a slot still sharing them takes its own.
        if let sharing = server.sharingSlot { server.settleHeaders(sharing) }
        let overLimit = server.isOverAcknowledgedLimit()
        let index = server.allocateSlot(streamID: streamID)
        if overLimit { server.slots[index].overStreamLimit = true }
        if nghttp2_session_set_stream_user_data(server.session, streamID, slotPointer(index)) != 0 {
            server.releaseSlot(index)
            return LibError.callbackFailure
        }
        server.recentStreamID = streamID
        server.recentSlot = index
        server.sharingSlot = index
        return 0
    }
}

private func serverOnHeader(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
    _ name: UnsafePointer<UInt8>?, _ nameLength: Int,
    _ value: UnsafePointer<UInt8>?, _ valueLength: Int,
    _ flags: UInt8, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    withServer(userData, orElse: 0) { server in
        guard let frame, let index = server.slot(of: frame.pointee.hd.stream_id) else {
            return 0
        }
        let streamID = frame.pointee.hd.stream_id
        // Trailers are not the request's header fields (RFC 9110 §6.5.2: not merged into them):
        // an `authorization` or `apns-topic` sent after the body does not count, as at APNs.
        guard frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST else {
            guard server.checksMessages else { return 0 }
            let fieldClass = FieldClass.of(name: name, nameLength: nameLength, value: value, valueLength: valueLength)
            if server.slots[index].check.accept(
                fieldClass, value: value, valueLength: valueLength, trailer: true, connectProtocol: server.connectProtocol)
            {
                return 0
            }
            return server.refuseField(streamID, name: name, nameLength: nameLength, value: value, valueLength: valueLength)
        }
        let neverIndex = flags & NVFlag.noIndex != 0
        // The slot in place: a field reads and changes it several times (one check of the index).
        let slot = server.slots.place(index)
        let sharing = slot.pointee.sharing
        let position = sharing ? slot.pointee.sharedFields : slot.pointee.headers.count
        // The same field as the last request's at this position: judged by the class noted then.
        let recentClass = server.recentFields.matchingClass(
            at: position, name: name, nameLength: nameLength, value: value, valueLength: valueLength, neverIndex: neverIndex)
        let matched = recentClass != nil
        var fieldClass = FieldClass.invalidField
        if server.checksMessages {
            fieldClass = recentClass ?? FieldClass.of(name: name, nameLength: nameLength, value: value, valueLength: valueLength)
            guard
                slot.pointee.check.accept(
                    fieldClass, value: value, valueLength: valueLength, trailer: false, connectProtocol: server.connectProtocol)
            else {
                return server.refuseField(streamID, name: name, nameLength: nameLength, value: value, valueLength: valueLength)
            }
            if fieldClass.token == FieldClass.method {
                slot.pointee.isHead = fieldClass.valueFlags & MessageCheck.methodHead != 0
            }
        } else if nameLength == 7, let name, memcmp(name, ":method", 7) == 0 {
            // HEAD or not, from the bytes (nghttp2 refuses a `:method` after a regular field,
            // or twice, so the one seen is the request's).
            slot.pointee.isHead = valueLength == 4 && value.map { memcmp($0, "HEAD", 4) == 0 } == true
        }
        // Counted before anything is copied: a list over the limit costs no memory however it
        // was compressed (one HPACK index can stand for a 4 KB field). Wrapping adds: a field's
        // lengths are bounded by what nghttp2 buffers, the size by the limit checked here.
        slot.pointee.headerListSize &+= nameLength &+ valueLength &+ 32
        if slot.pointee.headerListSize > server.maxHeaderListSize {
            // Refused now, and nghttp2 told to stop calling back: it still decodes the rest of
            // the block (the HPACK table must stay in step) but no longer validates and hands
            // over every field, which is what made 5,000 one-byte references to a 4 KB field
            // cost milliseconds of CPU per block.
            // The last one allowed stops the read right here (PAUSE: `receive` returns and is fed
            // nothing more); the connection ends at the next drain.
            return server.refuseOversizedHeaders(index) ? LibError.pause : LibError.temporalCallbackFailure
        }
        if sharing {
            if matched {
                slot.pointee.sharedFields = position + 1
                if nameLength == 6, valueLength == 12, server.recentFields.isExpectContinue(at: position) {
                    slot.pointee.expectsContinue = true
                }
                return 0
            }
            server.settleHeaders(index)
        }
        let field = server.recentFields.field(
            at: position, name: name, nameLength: nameLength, value: value,
            valueLength: valueLength, neverIndex: neverIndex, fieldClass: fieldClass, matched: matched)
        // `expect: 100-continue` (a length test first: nearly every field is not it).
        if nameLength == 6, valueLength == 12, RecentHeaderFields.isExpectContinue(field) {
            slot.pointee.expectsContinue = true
        }
        slot.pointee.headers.append(field)
        return 0
    }
}

private func serverOnDataChunk(
    _ session: OpaquePointer?, _ flags: UInt8, _ streamID: Int32,
    _ data: UnsafePointer<UInt8>?, _ length: Int,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    withServer(userData, orElse: 0) { server in
        guard let index = server.slot(of: streamID) else { return 0 }
        if server.checksMessages {
            // Past its content-length: reset and reported (what came is dropped).
            if server.slots[index].check.bodyRefused { return 0 }
            if !server.slots[index].check.acceptData(length) {
                server.refuseBodyLength(index)
                return 0
            }
        }
        if server.slots[index].answeredEarly {
            // Read and dropped (nghttp2 opens the window again); past the drain length, and once
            // answered, the client is asked to stop.
            server.slots[index].bodyLength += length
            server.resetIfDrainedEnough(index, streamID: streamID)
            return 0
        }
        if server.slots[index].headersRefused || server.slots[index].handedOver { return 0 }
        server.slots[index].bodyLength += length
        let room = server.maxBufferedBody - server.slots[index].body.count
        if room > 0, let data, length > 0 {
            server.slots[index].body.append(contentsOf: UnsafeBufferPointer(start: data, count: min(room, length)))
        }
        return 0
    }
}

private func serverOnFrameRecv(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    withServer(userData, orElse: 0) { server in
        guard let frame else { return 0 }
        let hd = frame.pointee.hd
        switch hd.type {
        case FrameType.data, FrameType.headers:
            guard let index = server.slot(of: hd.stream_id) else { break }
            if server.checksMessages, !server.acceptsFrame(index, frame) { break }
            if hd.type == FrameType.headers { server.settleHeaders(index) }
            if server.slots[index].overStreamLimit {
                if hd.type == FrameType.headers, !server.slots[index].handedOver { server.refuseOverStreamLimit(index) }
            } else if server.slots[index].headersRefused {
                // Reset once, when the header block that went over the limit has ended.
                if hd.type == FrameType.headers, !server.slots[index].refusalSent {
                    server.slots[index].refusalSent = true
                    server.refuseHeaders(index)
                }
            } else if hd.flags & FrameFlag.endStream != 0, !server.slots[index].handedOver {
                server.deliverRequest(index)
            } else if hd.type == FrameType.headers, server.slots[index].expectsContinue {
                // The body waits for the go-ahead; an answer that does not depend on it comes anyway.
                server.submitContinue(streamID: hd.stream_id)
            } else if hd.type == FrameType.data, !server.slots[index].handedOver,
                server.slots[index].bodyLength > server.earlyAnswerBodyLength
            {
                // More is coming and the body is already too long: answer now (checked at frame
                // ends, so a body that ends in this frame is judged whole).
                server.slots[index].answeredEarly = true
                server.deliverRequest(index, complete: false)
            }
        case FrameType.settings:
            if hd.flags & FrameFlag.ack != 0 { server.noteSettingsAcknowledged() }
        case FrameType.ping:
            if hd.flags & FrameFlag.ack == 0 { server.events.append(.ping) }
        case FrameType.goAway:
            let g = frame.pointee.goaway
            server.events.append(.goAwayReceived(errorCode: g.error_code, lastStreamID: g.last_stream_id))
        case FrameType.rstStream:
            server.events.append(.streamReset(streamID: hd.stream_id, errorCode: frame.pointee.rst_stream.error_code))
        default:
            break
        }
        return 0
    }
}

/// After the final frame of an early answer, tells the client to stop sending the body.
/// A request HEADERS on a stream id the client has used before (or lower than one it has):
/// nghttp2 ignores the header block of a stream it no longer knows, so the client would wait
/// for an answer that never comes. RFC 9113 §5.1.1 makes it a connection error of type
/// PROTOCOL_ERROR. A HEADERS with END_STREAM is left to nghttp2: it may be the trailers of a
/// request this server reset while they were on their way.
private func serverOnBeginFrame(
    _ session: OpaquePointer?, _ hd: UnsafePointer<nghttp2_frame_hd>?, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let session, let hd, hd.pointee.type == FrameType.headers else { return 0 }
    let streamID = hd.pointee.stream_id
    guard streamID > 0, streamID & 1 == 1 else { return 0 }
    let last = nghttp2_session_get_last_proc_stream_id(session)
    if streamID > last {
        // A new stream; the ids it jumps over are never opened (RFC 9113 §5.1.1).
        if streamID > last + 2, let server = owner(userData) {
            server.skippedStreamIDs.append((last + 1)...(streamID - 1))
            if server.skippedStreamIDs.count > HTTP2ServerSession.skippedRangesKept { server.skippedStreamIDs.removeFirst() }
        }
        return 0
    }
    guard nghttp2_session_find_stream(session, streamID) == nil else { return 0 }
    // A HEADERS with END_STREAM on a stream that was open once may be trailers of a request
    // answered early (its stream reset): minimally processed and dropped, as nghttp2 does. On an
    // id never opened, or without END_STREAM, it is a new request on an id the client may no
    // longer use: a connection error of type PROTOCOL_ERROR.
    if hd.pointee.flags & FrameFlag.endStream == 0 || owner(userData)?.skippedStreamIDs.contains(where: { $0.contains(streamID) }) == true {
        _ = nghttp2_session_terminate_session(session, HTTP2ErrorCode.protocolError)
    }
    return 0
}

private func serverOnFrameSend(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    withServer(userData, orElse: 0) { server in
        guard let frame else { return 0 }
        let hd = frame.pointee.hd
        if hd.type == FrameType.goAway {
            if server.ownGoAways > 0 {
                server.ownGoAways -= 1
            } else if frame.pointee.goaway.error_code != HTTP2ErrorCode.noError {
                server.endedForPeerError = true
                server.peerErrorGoAway = (frame.pointee.goaway.error_code, frame.pointee.goaway.last_stream_id)
            }
            return 0
        }
        guard hd.flags & FrameFlag.endStream != 0, hd.type == FrameType.data || hd.type == FrameType.headers,
            let index = server.slot(of: hd.stream_id),
            server.slots[index].answeredEarly
        else { return 0 }
        server.slots[index].earlyAnswerSent = true
        server.resetIfDrainedEnough(index, streamID: hd.stream_id)
        return 0
    }
}

extension HTTP2ServerSession {
    /// The message checks at a frame's end (`checksMessages`; nghttp2's
    /// `session_after_header_block_received` and `nghttp2_session_on_data_received`): false
    /// when the stream was reset for it, and the frame is then not the application's.
    fileprivate func acceptsFrame(_ index: Int, _ frame: UnsafePointer<nghttp2_frame>) -> Bool {
        let hd = frame.pointee.hd
        let endStream = hd.flags & FrameFlag.endStream != 0
        if hd.type == FrameType.data {
            // A body already over its length was reset, and later frames of it are not seen.
            if slots[index].check.bodyRefused { return false }
            if endStream, !slots[index].check.bodyMatchesLength {
                refuseBodyLength(index)
                return false
            }
            return true
        }
        let valid =
            frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST
            ? slots[index].check.acceptRequestHeaders()
            : endStream  // trailers end the stream
        guard valid else {
            refuseMessage(hd.stream_id)
            return false
        }
        // A stream ended by its header block or trailers with a body of another length.
        if endStream, !slots[index].check.bodyMatchesLength {
            refuseBodyLength(index)
            return false
        }
        return true
    }

    /// Bytes of a body answered early that are read and dropped before the stream is reset
    /// with NO_ERROR (RFC 9113 §8.1). Some clients (the JDK's HttpClient, httpx, curl) go on
    /// sending after the reset and never read the answer: a body up to this long is taken to
    /// its end so they see the 413; a longer one is cut off.
    static let drainBeforeResetLength = 1 << 20

    fileprivate func resetIfDrainedEnough(_ index: Int, streamID: Int32) {
        guard slots[index].earlyAnswerSent, !slots[index].resetQueued,
            slots[index].bodyLength > Self.drainBeforeResetLength,
            nghttp2_session_get_stream_remote_close(session, streamID) == 0
        else { return }
        slots[index].resetQueued = true
        nghttp2_submit_rst_stream(session, 0, streamID, HTTP2ErrorCode.noError)
    }
}

private func serverOnStreamClose(
    _ session: OpaquePointer?, _ streamID: Int32, _ errorCode: UInt32,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    withServer(userData, orElse: 0) { server in
        guard let index = server.slot(of: streamID) else { return 0 }
        server.releaseSlot(index)
        server.events.append(.streamClosed(streamID: streamID))
        return 0
    }
}

private let serverReadResponseBody: nghttp2_data_source_read_callback = { _, _, buffer, length, dataFlags, source, userData in
    withServer(userData, orElse: Int(LibError.temporalCallbackFailure)) { server in
        guard let source, let buffer, let dataFlags,
            let index = slotIndex(source.pointee.ptr)
        else { return Int(LibError.temporalCallbackFailure) }
        return server.slots[index].response.read(into: buffer, length: length, dataFlags: dataFlags)
    }
}

/// Clients send the same header fields in the same order on every request of a connection:
/// only the path and an id or two change. Remembering the fields of recent requests by
/// position lets a repeated name or value reuse the existing String (a reference-count bump)
/// instead of allocating and validating a new one for every request.
struct RecentHeaderFields {
    private var fields: [HTTP2HeaderField] = []
    private static let maxPositions = 32
    /// The fields' bytes, for `matchingClass`: each position's name then value, where its span says.
    /// Compared there without touching the Strings (a String's bytes are reached through a
    /// closure, a copy to the stack for a small one).
    private var bytes: [UInt8] = []
    private var spans: [Span] = []
    /// The bytes the spans cover (the rest of `bytes` is left over from replaced fields).
    private var liveBytes = 0

    private struct Span {
        var offset: Int
        var nameLength: Int
        var valueLength: Int
        var neverIndex: Bool
        /// What the message checks make of the field (`FieldClass.of`), kept with its bytes.
        var fieldClass: FieldClass
    }

    var count: Int { fields.count }
    /// The fields themselves (a request whose fields are all of them shares the array).
    var all: [HTTP2HeaderField] { fields }

    /// The class of the field at `position` when it is this one (its bytes and never-indexed
    /// flag), else nil. (`mutating`: read in place, the arrays are not retained for the call.)
    @inline(__always)
    mutating func matchingClass(
        at position: Int, name: UnsafePointer<UInt8>?, nameLength: Int,
        value: UnsafePointer<UInt8>?, valueLength: Int, neverIndex: Bool
    ) -> FieldClass? {
        guard position < spans.count else { return nil }
        let span = spans[position]
        guard span.nameLength == nameLength, span.valueLength == valueLength, span.neverIndex == neverIndex else { return nil }
        let same = bytes.withUnsafeBufferPointer { stored in
            guard let base = stored.baseAddress else { return nameLength == 0 && valueLength == 0 }
            return Self.same(base + span.offset, name, nameLength) && Self.same(base + span.offset + nameLength, value, valueLength)
        }
        return same ? span.fieldClass : nil
    }

    @inline(__always)
    private static func same(_ stored: UnsafePointer<UInt8>, _ bytes: UnsafePointer<UInt8>?, _ count: Int) -> Bool {
        guard count > 0 else { return true }
        guard let bytes else { return false }
        return count <= 16 ? sameShort(stored, bytes, count) : memcmp(stored, bytes, count) == 0
    }

    /// 1 to 16 bytes compared as two words (or bytes) from each end, overlapping: most names and
    /// many values are this short, and a call to `memcmp` cost about 20 instructions a compare.
    @inline(__always)
    private static func sameShort(_ a: UnsafePointer<UInt8>, _ b: UnsafePointer<UInt8>, _ count: Int) -> Bool {
        let x = UnsafeRawPointer(a)
        let y = UnsafeRawPointer(b)
        if count >= 8 {
            return x.loadUnaligned(as: UInt64.self) == y.loadUnaligned(as: UInt64.self)
                && x.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self) == y.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self)
        }
        if count >= 4 {
            return x.loadUnaligned(as: UInt32.self) == y.loadUnaligned(as: UInt32.self)
                && x.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self) == y.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)
        }
        return a[0] == b[0] && a[count / 2] == b[count / 2] && a[count - 1] == b[count - 1]
    }

    /// Notes the bytes of the field now at `position` (`fields[position]`, or a new last one).
    private mutating func noteBytes(
        at position: Int, name: UnsafePointer<UInt8>?, nameLength: Int, value: UnsafePointer<UInt8>?, valueLength: Int,
        fieldClass: FieldClass
    ) {
        let span = Span(
            offset: bytes.count, nameLength: nameLength, valueLength: valueLength, neverIndex: fields[position].neverIndex,
            fieldClass: fieldClass)
        if position < spans.count, spans[position].nameLength + spans[position].valueLength == nameLength + valueLength {
            // The same length (another device token in the path): written over in place.
            let offset = spans[position].offset
            bytes.withUnsafeMutableBufferPointer { stored in
                if nameLength > 0, let name { (stored.baseAddress! + offset).update(from: name, count: nameLength) }
                if valueLength > 0, let value { (stored.baseAddress! + offset + nameLength).update(from: value, count: valueLength) }
            }
            spans[position] = Span(
                offset: offset, nameLength: nameLength, valueLength: valueLength, neverIndex: span.neverIndex, fieldClass: fieldClass)
            return
        }
        if nameLength > 0, let name { bytes.append(contentsOf: UnsafeBufferPointer(start: name, count: nameLength)) }
        if valueLength > 0, let value { bytes.append(contentsOf: UnsafeBufferPointer(start: value, count: valueLength)) }
        if position < spans.count {
            liveBytes -= spans[position].nameLength + spans[position].valueLength
            spans[position] = span
        } else {
            spans.append(span)
        }
        liveBytes += nameLength + valueLength
        // Bytes of replaced fields are left behind: past four times what is live, start over.
        if bytes.count > 1024, bytes.count > 4 * liveBytes { compact() }
    }

    private mutating func compact() {
        var fresh: [UInt8] = []
        for position in spans.indices {
            var field = fields[position]
            let offset = fresh.count
            field.name.withUTF8 { fresh.append(contentsOf: $0) }
            field.value.withUTF8 { fresh.append(contentsOf: $0) }
            spans[position].offset = offset
        }
        bytes = fresh
    }

    func isExpectContinue(at position: Int) -> Bool { Self.isExpectContinue(fields[position]) }

    static func isExpectContinue(_ field: HTTP2HeaderField) -> Bool {
        field.name == "expect" && field.value.lowercased() == "100-continue"
    }

    /// The field to keep, its Strings reused where they are the recent ones'. `matched`: `matchingClass`
    /// found it equal to the one at `position`. `fieldClass` is noted with a new field's bytes.
    mutating func field(
        at position: Int, name: UnsafePointer<UInt8>?, nameLength: Int,
        value: UnsafePointer<UInt8>?, valueLength: Int, neverIndex: Bool, fieldClass: FieldClass, matched: Bool
    ) -> HTTP2HeaderField {
        if matched { return fields[position] }
        guard position < Self.maxPositions else {
            return HTTP2HeaderField(
                name: makeString(name, nameLength), value: makeString(value, valueLength),
                neverIndex: neverIndex)
        }
        if position < fields.count {
            let cached = fields[position]
            let sameName = Self.matches(cached.name, name, nameLength)
            if sameName && Self.matches(cached.value, value, valueLength) {
                return cached.neverIndex == neverIndex
                    ? cached
                    : HTTP2HeaderField(name: cached.name, value: cached.value, neverIndex: neverIndex)
            }
            let fresh = HTTP2HeaderField(
                name: sameName ? cached.name : makeString(name, nameLength),
                value: makeString(value, valueLength), neverIndex: neverIndex)
            fields[position] = fresh
            noteBytes(at: position, name: name, nameLength: nameLength, value: value, valueLength: valueLength, fieldClass: fieldClass)
            return fresh
        }
        let fresh = HTTP2HeaderField(
            name: makeString(name, nameLength), value: makeString(value, valueLength),
            neverIndex: neverIndex)
        if position == fields.count {
            fields.append(fresh)
            noteBytes(at: position, name: name, nameLength: nameLength, value: value, valueLength: valueLength, fieldClass: fieldClass)
        }
        return fresh
    }

    @inline(__always)
    static func matches(_ string: String, _ bytes: UnsafePointer<UInt8>?, _ count: Int) -> Bool {
        guard string.utf8.count == count else { return false }
        guard count > 0, let bytes else { return true }
        return string.utf8.withContiguousStorageIfAvailable { memcmp($0.baseAddress!, bytes, count) == 0 } ?? false
    }
}

/// nghttp2's protections against request floods, set explicitly rather than left to whatever
/// the installed library defaults to (docs/limits.md, "Provider side").
public enum FloodLimits {
    /// CONTINUATION frames allowed after one HEADERS frame (CVE-2024-28182).
    public static let maxContinuations = 8
    /// RST_STREAMs a peer may cause (burst, then per second) before the connection is ended
    /// with GOAWAY (rapid reset, CVE-2023-44487).
    public static let streamResetBurst: UInt64 = 1000
    public static let streamResetRate: UInt64 = 33
    /// Entries in one SETTINGS frame.
    public static let maxSettingsEntries = 32
    /// PING and SETTINGS ACKs queued for a peer that does not read (ping/settings floods).
    public static let maxOutboundAcks = 1000

    /// Whether the installed nghttp2 has the backported protections.
    public static var hasRapidResetLimit: Bool {
        withOption { cnghttp2_set_stream_reset_rate_limit($0, streamResetBurst, streamResetRate) == 1 }
    }
    public static var hasContinuationLimit: Bool {
        withOption { cnghttp2_set_max_continuations($0, maxContinuations) == 1 }
    }

    static func apply(to option: OpaquePointer) {
        nghttp2_option_set_max_settings(option, maxSettingsEntries)
        nghttp2_option_set_max_outbound_ack(option, maxOutboundAcks)
        _ = cnghttp2_set_stream_reset_rate_limit(option, streamResetBurst, streamResetRate)
        _ = cnghttp2_set_max_continuations(option, maxContinuations)
    }

    private static func withOption(_ body: (OpaquePointer) -> Bool) -> Bool {
        var option: OpaquePointer? = nil
        guard nghttp2_option_new(&option) == 0, let option else { return false }
        defer { nghttp2_option_del(option) }
        return body(option)
    }
}
