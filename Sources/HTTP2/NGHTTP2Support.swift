// Internal helpers shared by the server and client sessions: constants, error text,
// the reusable header-block scratch buffer, and the SETTINGS patcher.

import CNghttp2
import HTTPGrammar

// MARK: - Constants (nghttp2 C enums imported as structs; compare on raw bytes)

enum FrameType {
    static let data = UInt8(NGHTTP2_DATA.rawValue)
    static let headers = UInt8(NGHTTP2_HEADERS.rawValue)
    static let rstStream = UInt8(NGHTTP2_RST_STREAM.rawValue)
    static let settings = UInt8(NGHTTP2_SETTINGS.rawValue)
    static let ping = UInt8(NGHTTP2_PING.rawValue)
    static let goAway = UInt8(NGHTTP2_GOAWAY.rawValue)
}

enum FrameFlag {
    static let endStream = UInt8(NGHTTP2_FLAG_END_STREAM.rawValue)
    static let ack = UInt8(NGHTTP2_FLAG_ACK.rawValue)
}

enum NVFlag {
    static let none = UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)
    static let noIndex = UInt8(NGHTTP2_NV_FLAG_NO_INDEX.rawValue)
    static let noCopyName = UInt8(NGHTTP2_NV_FLAG_NO_COPY_NAME.rawValue)
    static let noCopyValue = UInt8(NGHTTP2_NV_FLAG_NO_COPY_VALUE.rawValue)
}

enum LibError {
    static let invalidArgument = NGHTTP2_ERR_INVALID_ARGUMENT.rawValue
    static let proto = NGHTTP2_ERR_PROTO.rawValue
    static let nomem = NGHTTP2_ERR_NOMEM.rawValue
    static let callbackFailure = NGHTTP2_ERR_CALLBACK_FAILURE.rawValue
    static let temporalCallbackFailure = NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue
    static let pause = NGHTTP2_ERR_PAUSE.rawValue
    static let httpHeader = NGHTTP2_ERR_HTTP_HEADER.rawValue
    static let httpMessaging = NGHTTP2_ERR_HTTP_MESSAGING.rawValue
}

func libErrorText(_ code: Int32) -> String {
    guard let cstr = nghttp2_strerror(code) else { return "nghttp2 error \(code)" }
    return String(cString: cstr)
}

func makeError(_ code: Int32, _ detail: String? = nil) -> HTTP2Error {
    let base = libErrorText(code)
    if let detail, !detail.isEmpty { return HTTP2Error(code: code, message: "\(base): \(detail)") }
    return HTTP2Error(code: code, message: base)
}

@inline(__always)
func makeString(_ p: UnsafePointer<UInt8>?, _ n: Int) -> String {
    guard let p, n > 0 else { return "" }
    return String(decoding: UnsafeBufferPointer(start: p, count: n), as: UTF8.self)
}

/// Stream user data: we store `slot index + 1` as the pointer's bit pattern (0 = none).
@inline(__always)
func slotPointer(_ index: Int) -> UnsafeMutableRawPointer? {
    UnsafeMutableRawPointer(bitPattern: index + 1)
}

@inline(__always)
func slotIndex(_ p: UnsafeMutableRawPointer?) -> Int? {
    guard let p else { return nil }
    return Int(bitPattern: p) - 1
}

/// Creates the nghttp2 settings entries for `settings` and calls `body` with them. The array
/// lives only during `body`.
func withSettingsEntries<R>(
    _ settings: [HTTP2Setting],
    _ body: (UnsafePointer<nghttp2_settings_entry>?, Int) -> R
) -> R {
    withUnsafeTemporaryAllocation(of: nghttp2_settings_entry.self, capacity: max(settings.count, 1)) { buf in
        for (i, s) in settings.enumerated() {
            buf[i] = nghttp2_settings_entry(settings_id: s.id, value: s.value)
        }
        return body(UnsafePointer(buf.baseAddress), settings.count)
    }
}

// MARK: - Header block scratch

/// A session-owned, reused scratch area for building an `nghttp2_nv` array plus the bytes
/// its names/values point to. `begin` sizes it for the whole block up front, so the
/// pointers handed to nghttp2 stay valid until the next `begin` — in practice only for the
/// one submit call that follows. nghttp2 copies the fields during that call (no NO_COPY
/// flags are set for bytes here), so nothing here needs to outlive it; an answer's values
/// that must are written into `AnswerBytes` (`setAnswer`).
struct HeaderScratch: ~Copyable {
    private(set) var nv: UnsafeMutablePointer<nghttp2_nv>
    private var nvCapacity: Int
    private var bytes: UnsafeMutablePointer<UInt8>
    private var byteCapacity: Int
    private(set) var count = 0
    private var used = 0

    init(fields: Int = 16, bytes: Int = 1024) {
        nvCapacity = fields
        byteCapacity = bytes
        nv = .allocate(capacity: fields)
        self.bytes = .allocate(capacity: bytes)
    }

    deinit {
        nv.deallocate()
        bytes.deallocate()
    }

    /// Starts a new block of at most `fields` fields whose copied bytes total at most `byteCount`.
    mutating func begin(fields: Int, byteCount: Int) {
        if fields > nvCapacity {
            nv.deallocate()
            nvCapacity = max(fields, nvCapacity * 2)
            nv = .allocate(capacity: nvCapacity)
        }
        if byteCount > byteCapacity {
            bytes.deallocate()
            byteCapacity = max(byteCount, byteCapacity * 2)
            bytes = .allocate(capacity: byteCapacity)
        }
        count = 0
        used = 0
    }

    @inline(__always)
    private mutating func copy(_ string: String) -> (UnsafeMutablePointer<UInt8>, Int) {
        let start = bytes + used
        var s = string
        let n = s.withUTF8 { src -> Int in
            if let base = src.baseAddress, src.count > 0 {
                start.update(from: base, count: src.count)
            }
            return src.count
        }
        used += n
        return (start, n)
    }

    /// `:status` with a 3-digit value: the name from the binary's static bytes (no allocation,
    /// no escaping `withUnsafe…` pointer), the three digits written here (`begin` must count
    /// them). nghttp2 copies both during the submit call, so NO_COPY flags are never set.
    mutating func appendStatus(_ status: Int) {
        precondition((100...999).contains(status), "HTTP status must have 3 digits: \(status)")
        let start = bytes + used
        start[0] = UInt8(truncatingIfNeeded: 48 + status / 100)
        start[1] = UInt8(truncatingIfNeeded: 48 + (status / 10) % 10)
        start[2] = UInt8(truncatingIfNeeded: 48 + status % 10)
        used += 3
        let name: StaticString = ":status"
        nv[count] = nghttp2_nv(
            name: UnsafeMutablePointer(mutating: name.utf8Start), value: start,
            namelen: name.utf8CodeUnitCount, valuelen: 3, flags: NVFlag.none)
        count += 1
    }

    @inline(__always)
    mutating func append(_ field: HTTP2HeaderField) {
        let (n, nl) = copy(field.name)
        let (v, vl) = copy(field.value)
        nv[count] = nghttp2_nv(
            name: n, value: v, namelen: nl, valuelen: vl,
            flags: field.neverIndex ? NVFlag.noIndex : NVFlag.none)
        count += 1
    }

    /// Bytes needed to copy `fields` (plus `extra`).
    @inline(__always)
    static func byteCount(_ fields: [HTTP2HeaderField], extra: Int = 0) -> Int {
        var total = extra
        for f in fields { total += f.name.utf8.count + f.value.utf8.count }
        return total
    }

    // MARK: Answers

    /// Bytes `setAnswer` writes for `fields`: the status's three digits and each value that is
    /// not constant.
    static func answerByteCount(_ fields: [HTTP2AnswerField]) -> Int {
        var total = 3
        for index in fields.indices {
            switch fields[index].value {
            case .text(let text): total += text.utf8.count
            case .constant: break
            case .uuid: total += UUIDText.count
            }
        }
        return total
    }

    /// Room for `count` bytes of values in the scratch (until the next `begin`).
    mutating func valueRoom(_ count: Int) -> UnsafeMutablePointer<UInt8> {
        begin(fields: 0, byteCount: count)
        return bytes
    }

    /// The block of an answer: `:status`, then `fields`. Names are static (nghttp2 need not copy
    /// them); values are written at `values` (`answerByteCount` bytes), which nghttp2 is told not
    /// to copy when `kept` (they then stay as they are until the frame has gone).
    mutating func setAnswer(status: Int, fields: [HTTP2AnswerField], values: UnsafeMutablePointer<UInt8>, kept: Bool) {
        precondition((100...999).contains(status), "HTTP status must have 3 digits: \(status)")
        let fieldCount = fields.count + 1
        if fieldCount > nvCapacity {
            nv.deallocate()
            nvCapacity = max(fieldCount, nvCapacity * 2)
            nv = .allocate(capacity: nvCapacity)
        }
        let valueFlag = kept ? NVFlag.noCopyValue : NVFlag.none
        values[0] = UInt8(truncatingIfNeeded: 48 + status / 100)
        values[1] = UInt8(truncatingIfNeeded: 48 + (status / 10) % 10)
        values[2] = UInt8(truncatingIfNeeded: 48 + status % 10)
        nv[0] = Self.entry(":status", values, 3, NVFlag.noCopyName | valueFlag)
        var used = 3
        for index in fields.indices {
            let name = fields[index].name
            assert(!name.withUTF8Buffer { $0.contains { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") } }, "\(name) is not lower-case")
            let flags = NVFlag.noCopyName | (fields[index].neverIndex ? NVFlag.noIndex : NVFlag.none)
            switch fields[index].value {
            case .text(let text):
                let start = values + used
                let length =
                    text.utf8.withContiguousStorageIfAvailable { utf8 in
                        if let base = utf8.baseAddress, !utf8.isEmpty { start.update(from: base, count: utf8.count) }
                        return utf8.count
                    } ?? Self.copySlowly(text, to: start)
                used += length
                nv[index + 1] = Self.entry(name, start, length, flags | valueFlag)
            case .constant(let value):
                nv[index + 1] = Self.entry(name, UnsafeMutablePointer(mutating: value.utf8Start), value.utf8CodeUnitCount, flags | NVFlag.noCopyValue)
            case .uuid(let high, let low, let uppercase):
                var text = UnsafeMutableBufferPointer(start: values + used, count: UUIDText.count).mutableSpan
                UUIDText.write(high, low, uppercase: uppercase, into: &text, at: 0)
                nv[index + 1] = Self.entry(name, values + used, UUIDText.count, flags | valueFlag)
                used += UUIDText.count
            }
        }
        count = fieldCount
    }

    @inline(__always)
    private static func entry(_ name: StaticString, _ value: UnsafeMutablePointer<UInt8>, _ length: Int, _ flags: UInt8) -> nghttp2_nv {
        nghttp2_nv(
            name: UnsafeMutablePointer(mutating: name.utf8Start), value: value, namelen: name.utf8CodeUnitCount,
            valuelen: length, flags: flags)
    }

    /// A String without contiguous UTF-8 (bridged): copied through a native copy.
    private static func copySlowly(_ text: String, to start: UnsafeMutablePointer<UInt8>) -> Int {
        var native = text
        return native.withUTF8 { utf8 in
            if let base = utf8.baseAddress, !utf8.isEmpty { start.update(from: base, count: utf8.count) }
            return utf8.count
        }
    }
}

/// The bytes each stream slot keeps for its answer's values until the HEADERS frame that carries
/// them has gone (nghttp2 is told not to copy them: `HeaderScratch.setAnswer`). A slot is given
/// to another stream only once its stream has closed, and by then its answer has gone or was
/// dropped unsent (nghttp2 sends nothing more on a closed stream), so its bytes are free to
/// write over. Bounded: one buffer per slot (slots are bounded by the stream limit), each the
/// size of its largest answer.
struct AnswerBytes: ~Copyable {
    private var buffers: [UnsafeMutablePointer<UInt8>] = []
    private var capacities: [Int] = []
    /// Room for `:status`, two ids and a content type, with some to spare.
    private static let initialCapacity = 128

    deinit {
        for buffer in buffers { buffer.deallocate() }
    }

    /// Room for `count` bytes of `slot`'s answer (what was there before is not kept).
    mutating func room(slot: Int, count: Int) -> UnsafeMutablePointer<UInt8> {
        while buffers.count <= slot {
            buffers.append(.allocate(capacity: Self.initialCapacity))
            capacities.append(Self.initialCapacity)
        }
        if capacities[slot] < count {
            buffers[slot].deallocate()
            capacities[slot] = max(count, capacities[slot] * 2)
            buffers[slot] = .allocate(capacity: capacities[slot])
        }
        return buffers[slot]
    }
}

// MARK: - SETTINGS patcher

/// Rewrites setting values inside outgoing non-ACK SETTINGS frames, each frame as it was
/// asked for when submitted (`expect`), then switches itself off.
///
/// Why: APNs advertises MAX_CONCURRENT_STREAMS = 1 on a fresh connection, yet clients may
/// (RFC 9113 §6.5.3: old limits apply until the SETTINGS ACK) open many streams before they
/// have read that frame. nghttp2 however applies a submitted MAX_CONCURRENT_STREAMS to
/// incoming streams *immediately* ("pending" local limit, see
/// `session_is_incoming_concurrent_streams_pending_max` in lib/nghttp2_session.c) and
/// refuses the burst with RST_STREAM(REFUSED_STREAM); there is no API to opt out. So we
/// submit the value we want nghttp2 to enforce (e.g. 1000) and rewrite the value bytes on
/// the wire (e.g. to 1) as the frame leaves the session. A limit lowered later (APNs after an
/// expired provider token, a fault rule) goes out the same way: once acknowledged, nghttp2
/// would end the whole connection for one stream over its own limit, where APNs (Netty)
/// refuses that stream alone; the server session refuses over the lower limit itself.
///
/// The output is parsed as a frame stream (9-byte header: length(24) type(8) flags(8)
/// stream(32)), so the patch works whether `mem_send` hands the frame over whole, in
/// pieces, or behind other frames. Inside a target frame, each 6-byte entry is
/// id(16) | value(32); the value bytes of an overridden id are replaced. While a submitted
/// frame has not left, every frame is parsed (`isActive`); `mem_send` hands frames over
/// whole between drains, so parsing always starts at a frame's first byte.
struct SettingsPatcher {
    /// A submitted SETTINGS frame has not left yet.
    var isActive: Bool { !queue.isEmpty }
    /// Number of entries rewritten (for diagnostics/tests).
    private(set) var patchedEntries = 0
    /// Per non-ACK SETTINGS frame still to leave, in order: the values to put on the wire.
    private var queue: [[(id: UInt16, value: UInt32)]]

    private var headerPos = 0
    private var length = 0
    private var type: UInt8 = 0
    private var flags: UInt8 = 0
    private var remaining = 0
    private var patchingFrame = false
    private var entryPos = 0
    private var entryID: UInt16 = 0
    private var entryOverride: UInt32? = nil

    /// `overrides`: for the first SETTINGS frame (none: it leaves as submitted). `expecting`:
    /// later frames will be `expect`ed, so the first is counted even without overrides.
    init(overrides: [HTTP2Setting], expecting: Bool = false) {
        queue = overrides.isEmpty && !expecting ? [] : [Self.entries(overrides)]
    }

    private static func entries(_ settings: [HTTP2Setting]) -> [(id: UInt16, value: UInt32)] {
        settings.map { (UInt16(truncatingIfNeeded: $0.id), $0.value) }
    }

    /// A SETTINGS frame was just submitted after the first: `overrides` go on the wire in its
    /// place (none: it leaves as submitted, but is counted, so a later frame's patch waits for
    /// its own frame).
    mutating func expect(_ overrides: [HTTP2Setting]) {
        queue.append(Self.entries(overrides))
    }

    private func override(for id: UInt16) -> UInt32? {
        var found: UInt32? = nil
        for o in queue.first ?? [] where o.id == id { found = o.value }  // last one wins
        return found
    }

    private mutating func finishFrame() {
        if patchingFrame { queue.removeFirst() }
        headerPos = 0
        length = 0
        patchingFrame = false
    }

    /// Whether any output has passed through yet.
    private var started = false

    /// Switches the patch off before anything was sent, so that the first SETTINGS frame goes
    /// out with the enforced values; false once output has passed (too late).
    mutating func withdraw() -> Bool {
        guard !started else { return queue.isEmpty }
        if !queue.isEmpty { queue[0] = [] }
        return true
    }

    /// Inspects (and possibly rewrites) the next `count` bytes of the outgoing stream.
    mutating func process(_ p: UnsafeMutablePointer<UInt8>, count: Int) {
        started = true
        var i = 0
        while i < count && isActive {
            if headerPos < 9 {
                let b = p[i]
                switch headerPos {
                case 0, 1, 2: length = (length << 8) | Int(b)
                case 3: type = b
                case 4: flags = b
                default: break
                }
                headerPos += 1
                i += 1
                if headerPos == 9 {
                    remaining = length
                    patchingFrame = type == FrameType.settings && (flags & FrameFlag.ack) == 0
                    entryPos = 0
                    if remaining == 0 { finishFrame() }
                }
            } else if patchingFrame {
                let b = p[i]
                switch entryPos {
                case 0:
                    entryID = UInt16(b) << 8
                case 1:
                    entryID |= UInt16(b)
                    entryOverride = override(for: entryID)
                    if entryOverride != nil { patchedEntries += 1 }
                default:
                    if let v = entryOverride {
                        p[i] = UInt8(truncatingIfNeeded: v >> UInt32(8 * (5 - entryPos)))
                    }
                }
                entryPos = entryPos == 5 ? 0 : entryPos + 1
                remaining -= 1
                i += 1
                if remaining == 0 { finishFrame() }
            } else {
                let skip = min(remaining, count - i)
                i += skip
                remaining -= skip
                if remaining == 0 { finishFrame() }
            }
        }
    }
}

/// Appends everything nghttp2 has pending to `buffer` (mem_send until it returns 0),
/// passing each appended region through `patch` while it is active.
/// Returns a negative nghttp2 error code on a fatal error, else 0.
@inline(__always)
func drainSession(
    _ session: OpaquePointer, into buffer: inout [UInt8],
    patcher: inout SettingsPatcher
) -> Int32 {
    while true {
        var data: UnsafePointer<UInt8>? = nil
        let n = nghttp2_session_mem_send(session, &data)
        if n < 0 { return Int32(truncatingIfNeeded: n) }
        if n == 0 { return 0 }
        guard let data else { return 0 }
        let start = buffer.count
        buffer.append(contentsOf: UnsafeBufferPointer(start: data, count: n))
        if patcher.isActive {
            buffer.withUnsafeMutableBufferPointer { buf in
                patcher.process(buf.baseAddress! + start, count: n)
            }
        }
    }
}

// MARK: - Receiving

/// The HTTP/2 error code put in the GOAWAY we queue when nghttp2 itself failed hard.
func goAwayCode(forLibError code: Int32) -> UInt32 {
    switch code {
    case NGHTTP2_ERR_FLOODED.rawValue: return HTTP2ErrorCode.enhanceYourCalm
    case NGHTTP2_ERR_NOMEM.rawValue, NGHTTP2_ERR_CALLBACK_FAILURE.rawValue: return HTTP2ErrorCode.internalError
    case NGHTTP2_ERR_HEADER_COMP.rawValue: return HTTP2ErrorCode.compressionError
    default: return HTTP2ErrorCode.protocolError
    }
}

/// True when nghttp2 has decided to tear the session down (a terminating GOAWAY is queued
/// or sent: its private NGHTTP2_GOAWAY_TERM_ON_SEND flag).
///
/// nghttp2 handles most connection errors internally: it queues GOAWAY, ignores the rest
/// of the input and `mem_recv` still returns success (Debian's CVE-2026-27135 backport even
/// returns early with success). There is no public getter for that state, so we probe it:
/// `nghttp2_submit_goaway` returns 0 without doing anything when TERM_ON_SEND is set, and
/// otherwise rejects a `last_stream_id` that is one of our own stream ids with
/// NGHTTP2_ERR_INVALID_ARGUMENT before touching any state. Both outcomes are side-effect
/// free. (`ownStreamID`: 2 for a server, 1 for a client.)
@inline(__always)
func sessionIsTerminating(_ session: OpaquePointer, ownStreamID: Int32) -> Bool {
    nghttp2_submit_goaway(
        session, UInt8(NGHTTP2_FLAG_NONE.rawValue), ownStreamID,
        HTTP2ErrorCode.noError, nil, 0) == 0
}

/// Diagnostics recorded by the error callbacks (reset at each `receive`), turned into text
/// only when we throw.
struct ErrorNote {
    var message: String? = nil
    var invalidFrameType: UInt8 = 0
    var invalidFrameStream: Int32 = 0
    var invalidFrameCode: Int32 = 0

    var isSet: Bool { message != nil || invalidFrameCode != 0 }

    var detail: String? {
        var parts: [String] = []
        if invalidFrameCode != 0 {
            parts.append("invalid frame (type \(invalidFrameType), stream \(invalidFrameStream)): \(libErrorText(invalidFrameCode))")
        }
        if let message { parts.append(message) }
        return parts.isEmpty ? nil : parts.joined(separator: "; ")
    }
}

enum FeedResult {
    case ok
    /// `mem_recv` failed (bad client magic, flooding, fatal); nothing queued by nghttp2.
    case libraryError(Int32)
    /// nghttp2 handled a connection error itself and queued a terminating GOAWAY.
    case terminated
}

/// Feeds `bytes` to nghttp2 and classifies the outcome.
@inline(__always)
func feedSession(_ session: OpaquePointer, _ bytes: UnsafeRawBufferPointer, ownStreamID: Int32) -> FeedResult {
    if bytes.count > 0, let base = bytes.baseAddress {
        let rv = nghttp2_session_mem_recv(session, base.assumingMemoryBound(to: UInt8.self), bytes.count)
        if rv < 0 {
            let code = Int32(truncatingIfNeeded: rv)
            // Make sure a GOAWAY goes out (no-op if nghttp2 already queued a terminating one).
            _ = nghttp2_session_terminate_session(session, goAwayCode(forLibError: code))
            return .libraryError(code)
        }
    }
    return sessionIsTerminating(session, ownStreamID: ownStreamID) ? .terminated : .ok
}

/// Error path only: serializes the pending output into `pending` (the owner hands it out
/// first on its next `drainOutput`) so the GOAWAY nghttp2 queued can be read for the error.
func makeTerminationError(
    _ session: OpaquePointer, _ result: FeedResult, note: ErrorNote,
    patcher: inout SettingsPatcher, pending: inout [UInt8]
) -> HTTP2Error {
    let start = pending.count
    _ = drainSession(session, into: &pending, patcher: &patcher)
    var goAwayCode: UInt32? = nil
    var goAwayDebug = ""
    var i = start
    while i + 9 <= pending.count {
        let length = Int(pending[i]) << 16 | Int(pending[i + 1]) << 8 | Int(pending[i + 2])
        let end = i + 9 + length
        guard end <= pending.count else { break }
        if pending[i + 3] == FrameType.goAway && length >= 8 {
            var code: UInt32 = 0
            for k in 0..<4 { code = code << 8 | UInt32(pending[i + 13 + k]) }
            goAwayCode = code
            goAwayDebug = String(decoding: pending[(i + 17)..<end], as: UTF8.self)
        }
        i = end
    }
    let libCode: Int32
    switch result {
    case .libraryError(let code): libCode = code
    default: libCode = note.invalidFrameCode != 0 ? note.invalidFrameCode : LibError.proto
    }
    var parts: [String] = []
    if let goAwayCode {
        parts.append("GOAWAY(\(errorCodeName(goAwayCode))\(goAwayDebug.isEmpty ? "" : ", \"\(goAwayDebug)\""))")
    }
    if let detail = note.detail { parts.append(detail) }
    return HTTP2Error(
        code: libCode,
        message: parts.isEmpty ? libErrorText(libCode) : libErrorText(libCode) + ": " + parts.joined(separator: "; "),
        goAwayErrorCode: goAwayCode)
}

func errorCodeName(_ code: UInt32) -> String {
    switch code {
    case 0x0: return "NO_ERROR"
    case 0x1: return "PROTOCOL_ERROR"
    case 0x2: return "INTERNAL_ERROR"
    case 0x3: return "FLOW_CONTROL_ERROR"
    case 0x4: return "SETTINGS_TIMEOUT"
    case 0x5: return "STREAM_CLOSED"
    case 0x6: return "FRAME_SIZE_ERROR"
    case 0x7: return "REFUSED_STREAM"
    case 0x8: return "CANCEL"
    case 0x9: return "COMPRESSION_ERROR"
    case 0xa: return "CONNECT_ERROR"
    case 0xb: return "ENHANCE_YOUR_CALM"
    case 0xc: return "INADEQUATE_SECURITY"
    case 0xd: return "HTTP_1_1_REQUIRED"
    default: return "0x" + String(code, radix: 16)
    }
}
