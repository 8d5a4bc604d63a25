// What the server and client sessions have in common: the `nghttp2_session*` and its
// lifetime, feeding input and turning connection errors into `HTTP2Error`, draining output
// through the first-SETTINGS patcher and the submits both sides make (NGHTTP2SessionCore),
// plus the per-stream slot array and outgoing bodies both use. Each session class owns one
// core and forwards to it; the request path (header, data and frame callbacks, submitting a
// response) stays in the session classes and does not go through the core.

import CNghttp2

/// The two session classes, as the shared error callbacks see them.
protocol NGHTTP2SessionOwner: AnyObject {
    var core: NGHTTP2SessionCore { get }
}

/// One nghttp2 session and the state both sides keep about it (see the file comment).
///
/// Thread confinement: that of its owner (one thread at a time). nghttp2's user data is the
/// owner, not the core, so the owner's callbacks reach their state without a detour.
final class NGHTTP2SessionCore {
    enum Role {
        case server, client

        /// A stream id this side would open (a server's are even, a client's odd), for
        /// `sessionIsTerminating`.
        var ownStreamID: Int32 { self == .server ? 2 : 1 }
    }

    let session: OpaquePointer
    private let role: Role
    /// Diagnostics from the error callbacks since the last `receive`.
    fileprivate var note = ErrorNote()
    private(set) var patcher: SettingsPatcher
    private(set) var terminalError: HTTP2Error?
    /// Output serialized early on the error path (see `makeTerminationError`); sent first.
    private var pendingOutput: [UInt8] = []

    /// Creates the session with the callbacks and options `configure` sets, plus the shared
    /// error callbacks. The owner must call `attach` before the session sees any input.
    init(
        _ role: Role, advertisedOverrides: [HTTP2Setting] = [],
        configure: (_ callbacks: OpaquePointer, _ option: OpaquePointer) -> Void
    ) throws(HTTP2Error) {
        var callbacks: OpaquePointer? = nil
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else {
            throw makeError(LibError.nomem)
        }
        defer { nghttp2_session_callbacks_del(callbacks) }
        var option: OpaquePointer? = nil
        guard nghttp2_option_new(&option) == 0, let option else {
            throw makeError(LibError.nomem)
        }
        defer { nghttp2_option_del(option) }
        nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(callbacks, onInvalidFrame)
        nghttp2_session_callbacks_set_error_callback2(callbacks, onError)
        configure(callbacks, option)

        var created: OpaquePointer? = nil
        let rv =
            switch role {
            case .server: nghttp2_session_server_new2(&created, callbacks, nil, option)
            case .client: nghttp2_session_client_new2(&created, callbacks, nil, option)
            }
        guard rv == 0, let created else { throw makeError(rv) }
        session = created
        self.role = role
        patcher = SettingsPatcher(overrides: advertisedOverrides, expecting: role == .server)
    }

    /// See `SettingsPatcher.withdraw`.
    func withdrawAdvertisedOverrides() -> Bool { patcher.withdraw() }

    /// Told of a stream's frame nghttp2 found invalid (stream id, nghttp2 error code): nghttp2
    /// resets the stream by itself. Set by the owner once, before any input.
    var onInvalidStreamFrame: ((Int32, Int32) -> Void)?

    /// A stream error the owner found itself, where nghttp2 would have (its checks off): noted
    /// as nghttp2's own would be, for the message of a connection error later in this input.
    func noteStreamError(type: UInt8, streamID: Int32, code: Int32, message: String? = nil) {
        if let message { note.message = message }
        note.invalidFrameCode = code
        note.invalidFrameType = type
        note.invalidFrameStream = streamID
    }

    deinit {
        // nghttp2_session_del runs no callbacks.
        nghttp2_session_del(session)
    }

    /// Makes `owner` the user data every callback receives (unretained: the owner owns us).
    func attach(_ owner: some NGHTTP2SessionOwner) {
        nghttp2_session_set_user_data(session, Unmanaged.passUnretained(owner).toOpaque())
    }

    /// Queues the first SETTINGS frame.
    func submitInitialSettings(_ settings: [HTTP2Setting]) throws(HTTP2Error) {
        let rv = withSettingsEntries(settings) { nghttp2_submit_settings(session, 0, $0, $1) }
        if rv != 0 { throw makeError(rv, "initial SETTINGS rejected") }
    }

    // MARK: Input

    /// Feeds received bytes; throws (and keeps throwing) once the peer committed a connection
    /// error. See the sessions' `receive`.
    func receive(_ bytes: UnsafeRawBufferPointer) throws(HTTP2Error) {
        if let terminalError { throw terminalError }
        if note.isSet { note = ErrorNote() }
        let result = feedSession(session, bytes, ownStreamID: role.ownStreamID)
        if case .ok = result { return }
        let error = makeTerminationError(session, result, note: note, patcher: &patcher, pending: &pendingOutput)
        terminalError = error
        throw error
    }

    func receive(_ bytes: [UInt8]) throws(HTTP2Error) {
        // withUnsafeBytes does not pass a typed error through: carry it out as a Result.
        try bytes.withUnsafeBytes { bytes in Result { () throws(HTTP2Error) in try receive(bytes) } }.get()
    }

    func receive(_ bytes: ArraySlice<UInt8>) throws(HTTP2Error) {
        try bytes.withUnsafeBytes { bytes in Result { () throws(HTTP2Error) in try receive(bytes) } }.get()
    }

    // MARK: Output

    /// Appends every pending output byte to `buffer` (what the error path serialized first,
    /// then `mem_send` until it has nothing more).
    func drainOutput(into buffer: inout [UInt8]) {
        if !pendingOutput.isEmpty {
            buffer.append(contentsOf: pendingOutput)
            pendingOutput = []
        }
        let rv = drainSession(session, into: &buffer, patcher: &patcher)
        if rv != 0 && terminalError == nil {
            terminalError = makeError(rv, "mem_send failed")
        }
    }

    func submitSettings(_ settings: [HTTP2Setting]) -> Bool {
        withSettingsEntries(settings) { nghttp2_submit_settings(session, 0, $0, $1) } == 0
    }

    /// Submits `settings` for nghttp2 to apply, with `onTheWire` in place of their values in
    /// the frame sent (server: see `SettingsPatcher`).
    func submitSettings(_ settings: [HTTP2Setting], onTheWire: [HTTP2Setting]) -> Bool {
        guard submitSettings(settings) else { return false }
        patcher.expect(onTheWire)
        return true
    }

    /// `lastStreamID` nil = the last peer stream nghttp2 processed.
    func submitGoAway(errorCode: UInt32, lastStreamID: Int32?, debugData: [UInt8]) -> Bool {
        let last = lastStreamID ?? nghttp2_session_get_last_proc_stream_id(session)
        return debugData.withUnsafeBufferPointer { buf in
            nghttp2_submit_goaway(session, 0, last, errorCode, buf.baseAddress, buf.count)
        } == 0
    }

    func submitRstStream(streamID: Int32, errorCode: UInt32) -> Bool {
        nghttp2_submit_rst_stream(session, 0, streamID, errorCode) == 0
    }

    /// Whether the stream is open here: a request submitted over the peer's stream limit
    /// waits in nghttp2's queue, its HEADERS unsent, with no stream yet.
    func hasStream(_ streamID: Int32) -> Bool {
        nghttp2_session_find_stream(session, streamID) != nil
    }

    /// A PING with 8 zero bytes of opaque data.
    func submitPing() -> Bool {
        nghttp2_submit_ping(session, 0, nil) == 0
    }

    // MARK: State

    var wantsRead: Bool { nghttp2_session_want_read(session) != 0 }
    var wantsWrite: Bool { nghttp2_session_want_write(session) != 0 }
}

// MARK: - Shared callbacks (error paths only)

/// The core behind `user_data`, whichever session class owns it. A dynamic cast, so only
/// for callbacks that run on errors; the request path uses the owner's typed `owner(_:)`.
private func core(_ userData: UnsafeMutableRawPointer?) -> NGHTTP2SessionCore? {
    guard let userData else { return nil }
    return (Unmanaged<AnyObject>.fromOpaque(userData).takeUnretainedValue() as? any NGHTTP2SessionOwner)?.core
}

private func onInvalidFrame(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
    _ libErrorCode: Int32, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let core = core(userData) else { return 0 }
    core.note.invalidFrameCode = libErrorCode
    core.note.invalidFrameType = frame?.pointee.hd.type ?? 0
    core.note.invalidFrameStream = frame?.pointee.hd.stream_id ?? 0
    if core.note.invalidFrameStream != 0 { core.onInvalidStreamFrame?(core.note.invalidFrameStream, libErrorCode) }
    return 0
}

private func onError(
    _ session: OpaquePointer?, _ libErrorCode: Int32, _ message: UnsafePointer<CChar>?,
    _ length: Int, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let core = core(userData), let message else { return 0 }
    core.note.message = message.withMemoryRebound(to: UInt8.self, capacity: length) { makeString($0, length) }
    return 0
}

// MARK: - Stream slots

/// Per-stream state of one side, kept in a `StreamSlots` array.
protocol StreamSlot {
    init()
    var inUse: Bool { get set }
    /// Drops what the stream held (buffers, bodies) when its slot is released.
    mutating func clear()
}

/// Per-stream state in reused storage: no per-request dictionary and, once it has grown to
/// the peak concurrency, no allocation. nghttp2's stream user data holds `index + 1`
/// (`slotPointer`), so lookups go through nghttp2's own stream map.
///
/// Memory of its own rather than an Array: a slot changed in place through an Array's subscript
/// went through its modify coroutine (not inlined) and a uniqueness check of the storage, about
/// 15 instructions each time, and the header callback changes its slot three times a field.
struct StreamSlots<Slot: StreamSlot>: ~Copyable {
    private var base: UnsafeMutablePointer<Slot>
    /// Slots made so far (initialized memory); `room` is what `base` can hold.
    private var made = 0
    private var room = 8
    private var freeIndices: [Int] = []
    /// Slots in use.
    private(set) var openCount = 0

    init() {
        base = .allocate(capacity: room)
    }

    deinit {
        base.deinitialize(count: made)
        base.deallocate()
    }

    /// Slots ever allocated (reused; bounded by peak concurrency).
    var capacity: Int { made }
    var indices: Range<Int> { 0..<made }

    subscript(index: Int) -> Slot {
        @inline(__always) _read {
            precondition(index >= 0 && index < made, "no stream slot \(index)")
            yield base[index]
        }
        @inline(__always) _modify {
            precondition(index >= 0 && index < made, "no stream slot \(index)")
            yield &base[index]
        }
    }

    /// The slot at `index` in place, for code that reads and changes it many times (its index
    /// checked once). Valid until the next `allocate`, which may move the slots.
    @inline(__always)
    func place(_ index: Int) -> UnsafeMutablePointer<Slot> {
        precondition(index >= 0 && index < made, "no stream slot \(index)")
        return base + index
    }

    /// A slot marked in use: a released one if there is one (as `clear` left it), else a new one.
    mutating func allocate() -> Int {
        let index: Int
        if let reused = freeIndices.popLast() {
            index = reused
        } else {
            if made == room { grow() }
            (base + made).initialize(to: Slot())
            index = made
            made += 1
        }
        base[index].inUse = true
        openCount += 1
        return index
    }

    mutating func release(_ index: Int) {
        self[index].inUse = false
        self[index].clear()
        freeIndices.append(index)
        openCount -= 1
    }

    private mutating func grow() {
        let larger = UnsafeMutablePointer<Slot>.allocate(capacity: room * 2)
        larger.moveInitialize(from: base, count: made)
        base.deallocate()
        base = larger
        room *= 2
    }
}

// MARK: - Outgoing bodies

/// A body handed to nghttp2 through a data provider, read out frame by frame.
struct OutgoingBody {
    var bytes: [UInt8] = []
    var offset = 0

    /// Copies up to `length` bytes into `buffer`, sets EOF on the last ones; returns the count.
    @inline(__always)
    mutating func read(
        into buffer: UnsafeMutablePointer<UInt8>, length: Int,
        dataFlags: UnsafeMutablePointer<UInt32>
    ) -> Int {
        let offset = self.offset
        let n = bytes.withUnsafeBufferPointer { body -> Int in
            let n = min(body.count - offset, length)
            if n > 0, let base = body.baseAddress { buffer.update(from: base + offset, count: n) }
            if offset + n == body.count { dataFlags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
            return n
        }
        self.offset = offset + n
        return n
    }
}
