// HTTP2 — a thin Swift wrapper over nghttp2 1.52 (Debian 12's libnghttp2, ssize_t API).
// Imports CNghttp2, MonotonicClock and Glibc.
//
// It turns bytes in into events and calls into bytes out; it knows nothing about APNs,
// sockets or TLS. Two session types:
//
//   HTTP2ServerSession  receive(bytes) → takeEvents()/consumeEvents → submitResponse(…)
//                       → drainOutput(into:)
//   HTTP2ClientSession  submitRequest(…) → drainOutput(into:) → receive(bytes)
//                       → takeCompletedResponses()
//
// Design
// - Each session owns its `nghttp2_session*` through an `NGHTTP2SessionCore`, which holds
//   what both sides share (feeding input and its errors, draining output, common submits).
//   Callbacks are file-private C-convention functions that recover the owner from
//   `user_data` (Unmanaged, unretained), only record what happened, never throw through C,
//   and return 0 or an nghttp2 error code.
// - Per-stream state lives in a reused slot array (`StreamSlots`); nghttp2's stream user
//   data holds the slot index, so there is no per-request dictionary.
// - Header blocks are built in one session-owned scratch buffer (nv array + bytes) sized up
//   front; nghttp2 copies the fields during the submit call, so no pointer escapes it.
//   The `:status` name is static bytes; its three digits are written into the scratch.
//   Answers (`submitAnswer`) are the exception: their names are static and their values are
//   written into bytes the stream's slot keeps until the HEADERS frame has gone
//   (`AnswerBytes`), so nghttp2 copies neither (NGHTTP2_NV_FLAG_NO_COPY_NAME, …_VALUE).
// - Request bodies are kept up to `maxBufferedBody` bytes; the rest is only counted.
// - A session is confined to one thread at a time (see the class docs).
//
// The SETTINGS patch (server: the advertised first limit, and a limit lowered later): see
// `SettingsPatcher` in NGHTTP2Support.swift.
//
// Request checks: the server session turns nghttp2's HTTP messaging off and makes its checks
// itself (MessageChecks.swift, the rules of nghttp2 1.52's lib/nghttp2_http.c), so a field
// its connection sent before at the same position is judged without reading its bytes again.
// The client session keeps nghttp2's. The outcomes are nghttp2's:
// - A bad field resets the stream (PROTOCOL_ERROR; the rest of the block is decoded, not
//   looked at) and reports it (`.invalidHeaderField`) with the fields before it: a pseudo-header
//   duplicated, empty, unknown (`:status` too), after a regular field or in trailers; a
//   connection-specific field (connection, keep-alive, proxy-connection, transfer-encoding,
//   upgrade, te other than "trailers"); a name with an upper-case or other non-token
//   character; a value with NUL, CR, LF or another control character (leading and trailing
//   whitespace are allowed: the application decides); a :method, :path, :scheme,
//   :authority or host with characters those do not allow; a content-length that is no
//   number or comes twice; `:protocol` unless SETTINGS_ENABLE_CONNECT_PROTOCOL was sent,
//   or blank. `host` and `:authority` may both come and differ.
// - A message rule broken at the end of a block resets it (PROTOCOL_ERROR) and reports it
//   (`.malformedMessage`): :method, :scheme or :path missing, or both :authority and host;
//   an http(s) :path not starting with "/" (or "*" for OPTIONS); a CONNECT with :scheme or
//   :path or without :authority; `:protocol` without CONNECT or :authority; trailers without
//   END_STREAM; a header block or trailers ending the stream after a body of another length
//   than its content-length.
// - A body longer than its content-length, or a DATA frame ending it shorter, is reset
//   (PROTOCOL_ERROR) without a report; a CONNECT's content-length is not held against its
//   DATA (an extended CONNECT's is). A GET or HEAD may have a body.
// - With SETTINGS_NO_RFC7540_PRIORITIES 1 nghttp2 keeps its checks (they also read RFC 9218's
//   `priority` field); the outcomes are the same.
//
// Other nghttp2 1.52 behaviour worth knowing:
// - When submitting, nghttp2 lower-cases header names (so a client cannot send upper-case
//   names), does not validate values, and always encodes "authorization" (and short
//   "cookie" values) as literal-never-indexed regardless of the NO_INDEX flag.
// - PRIORITY frames are processed (RFC 7540 tree); one for an idle stream creates an idle
//   anchor stream; a PRIORITY that depends on itself is a CONNECTION error (GOAWAY) in
//   nghttp2, not a stream error.
// - A submitted MAX_CONCURRENT_STREAMS applies to incoming streams at once (REFUSED_STREAM
//   over the pending value); once ACKed, exceeding it is a connection PROTOCOL_ERROR. So the
//   server session never lowers nghttp2's own limit: a lower one goes out on the wire only
//   (`SettingsPatcher`) and the session refuses streams over it itself, one by one.
// - Most connection errors do not make mem_recv fail: nghttp2 queues GOAWAY, ignores the
//   rest and returns success. `receive` detects that state and throws.
// - Debian's security backports add: a stream-reset rate limit on servers (burst 1000,
//   33/s; exceeding it queues GOAWAY(INTERNAL_ERROR)), and at most 8 CONTINUATION frames
//   per header block.
