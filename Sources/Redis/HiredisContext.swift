import CHiredis
#if canImport(Glibc)
import Glibc
import MonotonicClock
#endif

/// One hiredis context (a blocking TCP connection): every hiredis pointer lives in this file.
///
/// Reads and writes first wait in poll() against a deadline, so a whole call (all replies of a
/// pipeline) is bounded, and a read that runs out of time leaves hiredis's state untouched:
/// the subscriber can return "nothing yet" and read on later. The socket timeouts
/// (redisSetTimeout) are only a backstop for a syscall that blocks after poll said it would not.
final class HiredisContext {
    private var context: UnsafeMutablePointer<redisContext>?
    /// host:port, for messages.
    let endpoint: String

    init(url: RedisURL, connectTimeoutMs: Int, socketTimeoutMs: Int) throws(RedisError) {
        endpoint = url.endpoint
        guard let c = redisConnectWithTimeout(url.host, Int32(clamping: url.port), Self.timeval(ms: connectTimeoutMs)) else {
            throw RedisError(.connection, "redis \(endpoint): connect failed: out of memory")
        }
        if c.pointee.err != 0 {
            // hiredis 0.14 reports a connect timeout as an I/O error with errno's text.
            var failure = error(of: c, doing: "connect")
            if failure.kind == .connection, Self.text(of: c) == String(cString: strerror(ETIMEDOUT)) {
                failure = RedisError(.timeout, "redis \(endpoint): connect timed out after \(connectTimeoutMs) ms")
            }
            redisFree(c)
            throw failure
        }
        context = c
        setSocketTimeout(ms: socketTimeoutMs)
    }

    deinit { close() }

    var isOpen: Bool { context != nil }

    func close() {
        if let context { redisFree(context) }
        context = nil
    }

    func setSocketTimeout(ms: Int) {
        if let context { _ = redisSetTimeout(context, Self.timeval(ms: ms)) }
    }

    /// Writes the commands out before `deadline`, straight to the socket: hiredis's output
    /// buffer would copy them first (and its write(2) needs SIGPIPE blocked around it, four
    /// system calls a write; send(2) with MSG_NOSIGNAL needs none). hiredis only reads.
    func send(_ commands: RedisCommands, deadlineNs: UInt64) throws(RedisError) {
        let c = try live()
        let fd = c.pointee.fd
        var offset = commands.start
        let end = commands.wire.count
        while offset < end {
            guard try wait(for: POLLOUT, on: c, until: deadlineNs) else {
                throw RedisError(.timeout, "redis \(endpoint): could not send the command in time")
            }
            let sent = commands.wire.withUnsafeBytes { raw in
                Glibc.send(fd, raw.baseAddress! + offset, end - offset, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
            }
            if sent >= 0 {
                offset += sent
            } else if errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR {
                throw RedisError(.connection, "redis \(endpoint): send failed: \(String(cString: strerror(errno)))")
            }
        }
    }

    /// The next reply, or nil when none is complete by `deadline`.
    func readReply(until deadlineNs: UInt64) throws(RedisError) -> RedisReply? {
        let c = try live()
        while true {
            // First whatever hiredis has buffered already (a pipeline's later replies).
            var raw: UnsafeMutableRawPointer?
            if redisGetReplyFromReader(c, &raw) != REDIS_OK { throw error(of: c, doing: "read") }
            if let raw {
                defer { freeReplyObject(raw) }
                return try convert(raw.assumingMemoryBound(to: redisReply.self))
            }
            guard try wait(for: POLLIN, on: c, until: deadlineNs) else { return nil }
            if redisBufferRead(c) != REDIS_OK { throw error(of: c, doing: "read") }
        }
    }

    // MARK: - Internals

    private func live() throws(RedisError) -> UnsafeMutablePointer<redisContext> {
        guard let context else { throw RedisError(.connection, "redis \(endpoint): the connection is closed") }
        return context
    }

    /// Waits until the socket is ready for `event`; false when `deadline` passes first.
    private func wait(
        for event: Int32, on c: UnsafeMutablePointer<redisContext>,
        until deadlineNs: UInt64
    ) throws(RedisError) -> Bool {
        var descriptor = pollfd(fd: c.pointee.fd, events: Int16(event), revents: 0)
        while true {
            let ms = Self.milliseconds(until: deadlineNs)
            let n = poll(&descriptor, 1, ms)
            if n > 0 { return true }  // also on POLLHUP/POLLERR: the read or write then reports it
            if n == 0 {
                if ms == 0 { return false }
                continue
            }
            if errno == EINTR { continue }
            throw RedisError(.connection, "redis \(endpoint): poll failed: \(String(cString: strerror(errno)))")
        }
    }

    private func convert(_ reply: UnsafeMutablePointer<redisReply>) throws(RedisError) -> RedisReply {
        let r = reply.pointee
        func bytes() -> [UInt8] {
            guard let str = r.str else { return [] }
            return Array(UnsafeRawBufferPointer(start: str, count: r.len))
        }
        switch r.type {
        // RESP3 (hiredis 1.x only): a double or bignum keeps its decimal text in str, and a
        // verbatim string its text without the "txt:" prefix.
        case REDIS_REPLY_STRING, REDIS_REPLY_VERB, REDIS_REPLY_DOUBLE, REDIS_REPLY_BIGNUM:
            return .string(bytes())
        case REDIS_REPLY_STATUS:
            return .status(String(decoding: bytes(), as: UTF8.self))
        case REDIS_REPLY_ERROR:
            return .error(String(decoding: bytes(), as: UTF8.self))
        case REDIS_REPLY_INTEGER, REDIS_REPLY_BOOL:
            return .integer(Int64(r.integer))
        case REDIS_REPLY_NIL:
            return .null
        case REDIS_REPLY_ARRAY, REDIS_REPLY_MAP, REDIS_REPLY_SET, REDIS_REPLY_PUSH, REDIS_REPLY_ATTR:
            var elements: [RedisReply] = []
            elements.reserveCapacity(r.elements)
            for i in 0..<r.elements {
                if let element = r.element[i] { elements.append(try convert(element)) } else { elements.append(.null) }
            }
            return .array(elements)
        default:
            throw RedisError(.protocolError, "redis \(endpoint): reply of unknown type \(r.type)")
        }
    }

    private func error(of c: UnsafeMutablePointer<redisContext>, doing what: String) -> RedisError {
        let code = c.pointee.err
        let kind: RedisError.Kind =
            switch code {
            case REDIS_ERR_PROTOCOL: .protocolError
            case REDIS_ERR_TIMEOUT: .timeout
            default: .connection
            }
        return RedisError(kind, "redis \(endpoint): \(what) failed: \(Self.text(of: c))")
    }

    private static func text(of c: UnsafeMutablePointer<redisContext>) -> String {
        withUnsafeBytes(of: c.pointee.errstr) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
    }

    private static func timeval(ms: Int) -> Glibc.timeval {
        let ms = max(1, ms)  // zero would mean "no timeout" to the socket options
        return Glibc.timeval(tv_sec: ms / 1000, tv_usec: (ms % 1000) * 1000)
    }

    /// Milliseconds left until `deadlineNs` (Monotonic), rounded up so poll does not spin; 0
    /// once it passed.
    private static func milliseconds(until deadlineNs: UInt64) -> Int32 {
        let now = Monotonic.nowNanoseconds()
        guard deadlineNs > now else { return 0 }
        return Int32(clamping: (deadlineNs - now + 999_999) / 1_000_000)
    }
}
