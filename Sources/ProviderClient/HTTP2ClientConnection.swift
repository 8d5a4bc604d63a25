import Glibc
public import HTTP2
import MonotonicClock
public import Networking
import OpenSSLCrypto

public struct ClientError: Error, CustomStringConvertible, Sendable {
    public let description: String
    /// Set when the server speaks another protocol than the connection asked for.
    public let mismatch: ProtocolMismatch?
    /// The TLS handshake failed because the server's certificate could not be verified (not
    /// signed by a CA trusted here, another name): trusting its CA, or not verifying, is the fix.
    public let certificateNotVerified: Bool
    public init(_ description: String, mismatch: ProtocolMismatch? = nil, certificateNotVerified: Bool = false) {
        self.description = description
        self.mismatch = mismatch
        self.certificateNotVerified = certificateNotVerified
    }
}

/// One request for `HTTP2ClientConnection.send`.
public struct ClientRequest: Sendable {
    public var method: String
    public var path: String
    /// Regular headers in order; duplicates are sent as given.
    public var headers: [HTTP2HeaderField]
    /// nil sends HEADERS with END_STREAM (no body at all).
    public var body: [UInt8]?
    /// Overrides `:authority` (default: the connection's host:port).
    public var authority: String?

    public init(
        method: String = "POST", path: String, headers: [HTTP2HeaderField] = [], body: [UInt8]? = nil,
        authority: String? = nil
    ) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.authority = authority
    }
}

/// A blocking HTTP/2 client over TLS (ALPN h2, or prior knowledge without ALPN) or
/// cleartext h2c. Used by `apns-emulator send`, the tests and the benchmark scripts.
public final class HTTP2ClientConnection {
    public struct Options: Sendable {
        public var address: HostPort
        public var tls: Bool = true
        /// Offer ALPN "h2". Without it the client speaks HTTP/2 with prior knowledge over TLS.
        public var alpn: Bool = true
        /// CA to trust; nil = the system store.
        public var caPath: String?
        /// A client certificate and key for certificate-based (mTLS) provider connections.
        public var clientCertificatePath: String?
        public var clientKeyPath: String?
        public var verifyPeer: Bool = true
        /// SNI and certificate name; default: the address's host.
        public var serverName: String?
        public var timeoutMilliseconds: Int32 = 10_000
        /// Client SETTINGS; the default is nghttp2's client default.
        public var settings: [HTTP2Setting] = HTTP2ClientSession.defaultSettings

        public init(address: HostPort) { self.address = address }
    }

    public let options: Options
    public let session: HTTP2ClientSession
    private let fd: Int32
    private var tls: TLSConnection?
    private var output: [UInt8] = []
    private var outputOffset = 0
    private var finished: [Int32: HTTP2Response] = [:]
    private var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)
    /// The server's first bytes (up to 64; after TLS, the first decrypted ones): what it speaks.
    private var firstBytes: [UInt8] = []
    public private(set) var isClosed = false

    public init(_ options: Options) throws(ClientError) {
        self.options = options
        do {
            fd = try Socket.connect(to: options.address, timeoutMilliseconds: options.timeoutMilliseconds)
        } catch {
            throw ClientError("cannot connect to \(options.address): \(error)")
        }
        do {
            session = try HTTP2ClientSession(settings: options.settings)
        } catch {
            Glibc.close(fd)
            throw ClientError("HTTP/2 session: \(error)")
        }
        if options.tls {
            do {
                let context = try TLSContext.client(
                    trustedCAPath: options.caPath, verifyPeer: options.verifyPeer,
                    alpnProtocols: options.alpn ? ["h2"] : [],
                    clientCertificatePath: options.clientCertificatePath,
                    clientKeyPath: options.clientKeyPath)
                // An IP literal is checked against the certificate's IP addresses, a name
                // against its DNS names; only a name goes into the SNI (RFC 6066).
                let serverName = options.serverName ?? options.address.host
                let connection = try TLSConnection(context: context, fd: fd, isServer: false, serverName: serverName)
                tls = connection
                Socket.setBlocking(fd, false)
                try handshake(connection)
                if options.alpn, connection.negotiatedALPN != "h2" {
                    throw ClientError(
                        "server at \(options.address) did not offer HTTP/2 in ALPN (it chose \(connection.negotiatedALPN ?? "nothing")): "
                            + "not an HTTP/2 server", mismatch: .noHTTP2InALPN)
                }
            } catch let error as ClientError {
                Glibc.close(fd)
                throw error
            } catch {
                Glibc.close(fd)
                throw ClientError("TLS to \(options.address): \(error)")
            }
        } else {
            Socket.setBlocking(fd, false)
        }
    }

    deinit { close() }

    public var negotiatedALPN: String? { tls?.negotiatedALPN }

    public func close() {
        guard !isClosed else { return }
        isClosed = true
        if let tls { withSIGPIPEBlocked { tls.shutdown() } }
        Glibc.close(fd)
    }

    private func handshake(_ connection: TLSConnection) throws(ClientError) {
        let deadline = Monotonic.nowMilliseconds() + Int64(options.timeoutMilliseconds)
        while true {
            switch withSIGPIPEBlocked({ connection.handshake() }) {
            case .ok: return
            case .wantRead:
                try wait(POLLIN, until: deadline)
                // Looked at before OpenSSL reads them: its error for a server that answers in
                // cleartext ("wrong version number") does not say what the server is.
                if firstBytes.isEmpty { firstBytes = FirstBytes.peek(fd) }
            case .wantWrite: try wait(POLLOUT, until: deadline)
            case .closed: throw notTLS(nil) ?? ClientError("TLS handshake: connection closed")
            // It says "TLS handshake failed: …", and "(certificate verification: …)" when the
            // server's certificate was what failed.
            case .failed(let message):
                throw notTLS(message) ?? ClientError(message, certificateNotVerified: message.contains("(certificate verification: "))
            }
        }
    }

    /// The handshake failed because the server answered in something else than TLS: its first
    /// bytes say so, or OpenSSL does when they came so soon that it read them first (the
    /// record header's version is not TLS's).
    private func notTLS(_ failure: String?) -> ClientError? {
        let notTLSRecord = failure?.contains("wrong version number") == true
        // OpenSSL may have read the answer before it could be looked at: then a cleartext
        // HTTP/2 server is asked again, in its own protocol.
        if FirstBytes.lookLikeHTTP2Settings(firstBytes)
            || (firstBytes.isEmpty && notTLSRecord && answersHTTP2InCleartext(options.address, timeoutMilliseconds: 1000))
        {
            return ClientError(
                "\(options.address) does not speak TLS: it answered with an HTTP/2 SETTINGS frame in cleartext (an h2c listener)",
                mismatch: .notTLS)
        }
        let said: String
        if !firstBytes.isEmpty {
            guard !FirstBytes.lookLikeTLS(firstBytes) else { return nil }
            said = "it answered \(FirstBytes.excerpt(firstBytes))"
        } else {
            guard notTLSRecord else { return nil }
            said = "its answer was not a TLS record"
        }
        return ClientError("\(options.address) does not speak TLS: \(said) (an HTTP/1.1 or cleartext server?)", mismatch: .notTLS)
    }

    /// Waits for the server's first SETTINGS frame, which an HTTP/2 server sends before
    /// anything else. A server that answers in another protocol (HTTP/1.1; TLS to a cleartext
    /// connection) is found here, named, with `mismatch` set, rather than as requests that
    /// got no answer. Throws too when the server closed the connection or stayed silent.
    public func confirmHTTP2(timeoutMilliseconds: Int64? = nil) throws(ClientError) {
        do {
            try pump(timeoutMilliseconds: timeoutMilliseconds ?? Int64(options.timeoutMilliseconds)) { !session.receivedSettings.isEmpty }
        } catch {
            throw notHTTP2() ?? error
        }
        guard session.receivedSettings.isEmpty else { return }
        throw notHTTP2() ?? ClientError("\(options.address) closed the connection before its first HTTP/2 frame")
    }

    /// Why the server is not an HTTP/2 server of the kind asked for, from its first bytes
    /// (nil when they do not say). A cleartext connection closed without a byte is asked
    /// again in TLS: a TLS listener closes so.
    private func notHTTP2() -> ClientError? {
        let address = options.address
        if !options.tls, FirstBytes.lookLikeTLS(firstBytes) || (firstBytes.isEmpty && isClosed && answersInTLS(address, timeoutMilliseconds: 3000)) {
            return ClientError("\(address) answered with TLS, not cleartext HTTP/2 (a TLS listener)", mismatch: .answeredWithTLS)
        }
        guard !firstBytes.isEmpty, session.receivedSettings.isEmpty, session.terminationError != nil || isClosed else { return nil }
        return ClientError(
            "\(address) does not speak HTTP/2: its first bytes were not an HTTP/2 SETTINGS frame (it answered "
                + "\(FirstBytes.excerpt(firstBytes)): an HTTP/1.1 server?); APNs's provider API is HTTP/2 only", mismatch: .notHTTP2)
    }

    private func wait(_ event: Int32, until deadline: Int64) throws(ClientError) {
        let remaining = deadline - Monotonic.nowMilliseconds()
        guard remaining > 0 else { throw ClientError("timed out") }
        var pfd = pollfd(fd: fd, events: Int16(event), revents: 0)
        _ = poll(&pfd, 1, Int32(clamping: remaining))
    }

    // MARK: Requests

    /// Resets a stream (RST_STREAM, CANCEL by default), as a client giving up on a request does.
    public func reset(stream: Int32, errorCode: UInt32 = HTTP2ErrorCode.cancel) throws(ClientError) {
        _ = session.submitRstStream(streamID: stream, errorCode: errorCode)
        try flushOutput()
    }

    /// Queues a request and returns its stream id; call `pump`/`wait` to run it.
    @discardableResult
    public func submit(_ request: ClientRequest) throws(ClientError) -> Int32 {
        var fields = [
            HTTP2HeaderField(":method", request.method),
            HTTP2HeaderField(":scheme", options.tls ? "https" : "http"),
            HTTP2HeaderField(
                ":authority", request.authority ?? options.serverName.map { "\($0):\(options.address.port)" } ?? options.address.description),
            HTTP2HeaderField(":path", request.path),
        ]
        fields.append(contentsOf: request.headers)
        do {
            return try session.submitRequest(headers: fields, body: request.body)
        } catch {
            throw ClientError("cannot submit request: \(error)")
        }
    }

    /// Sends the requests concurrently and waits for every response (or a reset).
    public func send(_ requests: [ClientRequest], timeoutMilliseconds: Int64 = 10_000) throws(ClientError) -> [HTTP2Response] {
        var ids: [Int32] = []
        for request in requests { ids.append(try submit(request)) }
        try waitFor(streams: ids, timeoutMilliseconds: timeoutMilliseconds)
        return ids.map { finished.removeValue(forKey: $0)! }
    }

    public func send(_ request: ClientRequest, timeoutMilliseconds: Int64 = 10_000) throws(ClientError) -> HTTP2Response {
        try send([request], timeoutMilliseconds: timeoutMilliseconds)[0]
    }

    /// Pumps until every listed stream has finished.
    public func waitFor(streams: [Int32], timeoutMilliseconds: Int64 = 10_000) throws(ClientError) {
        try pump(timeoutMilliseconds: timeoutMilliseconds) { streams.allSatisfy { self.finished[$0] != nil } }
        let missing = streams.filter { finished[$0] == nil }
        if !missing.isEmpty {
            throw ClientError("no response for stream(s) \(missing.map(String.init).joined(separator: ", "))")
        }
    }

    /// Writes whatever the session has queued (submitted requests) without waiting.
    public func flushOutput() throws(ClientError) {
        session.drainOutput(into: &output)
        try flush()
    }

    /// Takes a finished response, if it has arrived.
    public func response(for stream: Int32) -> HTTP2Response? { finished.removeValue(forKey: stream) }

    /// Takes every finished response, for callers that keep many streams in flight.
    public func takeFinishedResponses() -> [HTTP2Response] {
        guard !finished.isEmpty else { return [] }
        let responses = Array(finished.values)
        finished.removeAll(keepingCapacity: true)
        return responses
    }

    /// One round without a goal: writes what is queued, waits up to `waitMilliseconds` for the
    /// peer, reads what came. A caller with its own schedule (a load generator pacing its
    /// requests) loops on this instead of `pump`, which throws when its time runs out.
    public func pumpOnce(waitMilliseconds: Int32) throws(ClientError) {
        guard !isClosed else { return }
        session.drainOutput(into: &output)
        try flush()
        collect()
        try waitAndRead(waitMilliseconds: waitMilliseconds)
    }

    /// Runs the connection until `done` is true, the peer closes, or the time runs out.
    /// Returns normally when the peer closed, so callers can inspect a GOAWAY.
    public func pump(timeoutMilliseconds: Int64, until done: () -> Bool) throws(ClientError) {
        let deadline = Monotonic.nowMilliseconds() + timeoutMilliseconds
        while !done() {
            if isClosed { return }
            session.drainOutput(into: &output)
            try flush()
            collect()
            if done() { return }
            let remaining = deadline - Monotonic.nowMilliseconds()
            if remaining <= 0 { throw ClientError("timed out after \(timeoutMilliseconds) ms") }
            try waitAndRead(waitMilliseconds: Int32(clamping: min(remaining, 100)))
        }
    }

    /// Waits for input (or for room to write what is pending), reads it, and closes when the
    /// peer has closed.
    private func waitAndRead(waitMilliseconds: Int32) throws(ClientError) {
        var pfd = pollfd(fd: fd, events: Int16(POLLIN) | (outputOffset < output.count ? Int16(POLLOUT) : 0), revents: 0)
        if tls?.hasBufferedReadData != true {
            _ = poll(&pfd, 1, waitMilliseconds)
        }
        if !(try readAvailable()) {
            collect()
            close()
            return
        }
        collect()
    }

    private func collect() {
        for response in session.takeCompletedResponses() { finished[response.streamID] = response }
    }

    private func flush() throws(ClientError) {
        while outputOffset < output.count {
            let result: Int = output.withUnsafeBytes { raw in
                let pending = UnsafeRawBufferPointer(rebasing: raw[outputOffset...])
                if let tls {
                    switch withSIGPIPEBlocked({ tls.write(pending) }) {
                    case .ok(let n): return n
                    case .wantRead, .wantWrite: return 0
                    default: return -1
                    }
                }
                let n = Glibc.send(fd, pending.baseAddress, pending.count, Int32(MSG_NOSIGNAL))
                if n < 0 { return errno == EAGAIN ? 0 : -1 }
                return n
            }
            if result < 0 { throw ClientError("connection lost while writing") }
            if result == 0 { return }
            outputOffset += result
        }
        output.removeAll(keepingCapacity: true)
        outputOffset = 0
    }

    /// Reads what is there. Returns false when the peer closed the connection.
    private func readAvailable() throws(ClientError) -> Bool {
        while true {
            let n: Int = readBuffer.withUnsafeMutableBytes { raw in
                if let tls {
                    switch tls.read(into: raw) {
                    case .ok(let n): return n
                    case .wantRead, .wantWrite: return 0
                    case .closed: return -1
                    case .failed: return -2
                    }
                }
                let n = Glibc.recv(fd, raw.baseAddress, raw.count, 0)
                if n == 0 { return -1 }
                if n < 0 { return errno == EAGAIN ? 0 : -2 }
                return n
            }
            if n == 0 { return true }
            if n < 0 { return false }
            if firstBytes.count < 64 { firstBytes += readBuffer[0..<min(n, 64 - firstBytes.count)] }
            do {
                try session.receive(readBuffer[0..<n])
            } catch {
                throw ClientError("HTTP/2 error from server: \(error)")
            }
        }
    }
}
