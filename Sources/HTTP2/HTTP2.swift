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
// - Request bodies are kept up to `maxBufferedBody` bytes; the rest is only counted.
// - A session is confined to one thread at a time (see the class docs).
//
// The first-SETTINGS patch (server): see `SettingsPatcher` in NGHTTP2Support.swift.
//
// nghttp2 1.52 behaviour worth knowing (HTTP messaging is on, as by default):
// - Request validation happens before any callback: a request without :method, :scheme,
//   :path or :authority/host, a bad pseudo-header, a connection-specific field (connection,
//   keep-alive, proxy-connection, transfer-encoding, upgrade, te other than "trailers"), an
//   upper-case name, an invalid character in a value, or (RFC 9113) leading/trailing
//   whitespace in a value gets RST_STREAM(PROTOCOL_ERROR) and never reaches the app. With no
//   on_invalid_header callback installed (we install none), even "ignorable" invalid regular
//   fields reset the stream rather than being dropped.
// - content-length is checked against the DATA received: a mismatch → RST_STREAM
//   (PROTOCOL_ERROR), no request event.
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
