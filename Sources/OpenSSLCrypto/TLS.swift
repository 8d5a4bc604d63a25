// OpenSSLCrypto: the thin OpenSSL wrapper: ES256 keys and signatures, TLS contexts and
// connections, provider client certificates, and TEST ONLY certificate generation. The only
// place OpenSSL's pointers are touched. Imports COpenSSL, Glibc and Foundation.
import COpenSSL
import Glibc

// MARK: - Context

/// An SSL_CTX configured either as the emulator's server or as a client. Immutable once
/// built, so one context may back many connections on many threads.
public final class TLSContext: @unchecked Sendable {
    let ctx: OpaquePointer
    let isServer: Bool
    let verifyPeer: Bool

    private init(ctx: OpaquePointer, isServer: Bool, verifyPeer: Bool) {
        self.ctx = ctx
        self.isServer = isServer
        self.verifyPeer = verifyPeer
    }

    deinit { SSL_CTX_free(ctx) }

    /// Server: certificate chain PEM file + private key PEM file; TLS 1.2 minimum. ALPN selects
    /// "h2" when offered and otherwise completes the handshake with no protocol selected (some
    /// APNs clients speak HTTP/2 with prior knowledge). A client certificate is requested but
    /// neither required nor verified: the server inspects it later via `peerCertificateDER`.
    /// `alsoRSA`: a second certificate and key of another key type (an RSA one beside an
    /// ECDSA one); OpenSSL presents whichever the client's cipher suites and signature
    /// algorithms can use.
    public static func server(
        certificateChainPath: String, privateKeyPath: String, also second: (certificatePath: String, keyPath: String)? = nil
    ) throws -> TLSContext {
        ERR_clear_error()
        guard let ctx = SSL_CTX_new(TLS_server_method()) else { throw CryptoError.openSSL("SSL_CTX_new failed") }
        // From here on the object owns ctx, so any throw below frees it.
        let context = TLSContext(ctx: ctx, isServer: true, verifyPeer: false)
        try context.applyCommonSettings()

        // HTTP/2 over TLS 1.2 must disable renegotiation (RFC 9113 §9.2.1); and prefer our own
        // (AEAD, forward-secret first) cipher order over whatever the client lists first.
        _ = SSL_CTX_set_options(ctx, copenssl_SSL_OP_NO_RENEGOTIATION() | copenssl_SSL_OP_CIPHER_SERVER_PREFERENCE())

        try context.loadIdentity(certificatePath: certificateChainPath, keyPath: privateKeyPath, role: "server")
        if let second { try context.loadIdentity(certificatePath: second.certificatePath, keyPath: second.keyPath, role: "server") }

        SSL_CTX_set_alpn_select_cb(
            ctx,
            { _, out, outLength, offered, offeredLength, _ in
                selectH2(out: out, outLength: outLength, offered: offered, offeredLength: offeredLength)
            }, nil)

        // Accepting SNI explicitly matters: without a servername callback OpenSSL 3 treats the
        // name as "not acknowledged" and does not store it in the session, so a resumed TLS 1.2
        // connection would report no requestedServerName.
        _ = copenssl_SSL_CTX_set_tlsext_servername_callback(ctx) { _, _, _ in SSL_TLSEXT_ERR_OK }

        // SSL_VERIFY_PEER on a server means "send CertificateRequest"; without
        // FAIL_IF_NO_PEER_CERT a client may still send nothing, and the callback accepts any
        // chain (self-signed, unknown CA, expired) because APNs-style checks happen later.
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, { _, _ in 1 })

        // Required for resumption once peer verification is on: without a session id context
        // OpenSSL fails resumed handshakes ("session id context uninitialized").
        let sessionContext = Array("apns-emulator".utf8)
        guard SSL_CTX_set_session_id_context(ctx, sessionContext, UInt32(sessionContext.count)) == 1 else {
            throw CryptoError.openSSL("SSL_CTX_set_session_id_context failed")
        }
        // The server-side session cache and session tickets (TLS 1.2 and 1.3) are on by default
        // in OpenSSL 3; nothing more to enable.
        return context
    }

    /// Client: trust `trustedCAPath` (PEM) if given, else the system default store; verify the
    /// peer (and, per connection, the hostname against serverName) only if `verifyPeer`; offer
    /// `alpnProtocols` (empty = no ALPN extension). Optional client certificate + key.
    public static func client(
        trustedCAPath: String?, verifyPeer: Bool, alpnProtocols: [String],
        clientCertificatePath: String? = nil, clientKeyPath: String? = nil
    ) throws -> TLSContext {
        ERR_clear_error()
        guard let ctx = SSL_CTX_new(TLS_client_method()) else { throw CryptoError.openSSL("SSL_CTX_new failed") }
        let context = TLSContext(ctx: ctx, isServer: false, verifyPeer: verifyPeer)
        try context.applyCommonSettings()

        if let trustedCAPath {
            guard SSL_CTX_load_verify_locations(ctx, trustedCAPath, nil) == 1 else {
                throw CryptoError.openSSL("cannot load trusted CA certificates from \(trustedCAPath)")
            }
        } else if SSL_CTX_set_default_verify_paths(ctx) != 1 {
            throw CryptoError.openSSL("cannot load the system trust store")
        }
        SSL_CTX_set_verify(ctx, verifyPeer ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nil)

        if !alpnProtocols.isEmpty {
            var wire: [UInt8] = []
            for name in alpnProtocols {
                let bytes = Array(name.utf8)
                guard (1...255).contains(bytes.count) else {
                    throw CryptoError(message: "invalid ALPN protocol name \"\(name)\" (must be 1-255 bytes)")
                }
                wire.append(UInt8(bytes.count))
                wire.append(contentsOf: bytes)
            }
            // Unlike nearly every other OpenSSL call, this one returns 0 on success.
            guard SSL_CTX_set_alpn_protos(ctx, wire, UInt32(wire.count)) == 0 else {
                throw CryptoError.openSSL("SSL_CTX_set_alpn_protos failed")
            }
        }

        switch (clientCertificatePath, clientKeyPath) {
        case (nil, nil):
            break
        case let (certificatePath?, keyPath?):
            try context.loadIdentity(certificatePath: certificatePath, keyPath: keyPath, role: "client")
        default:
            throw CryptoError(message: "a client certificate needs both clientCertificatePath and clientKeyPath")
        }
        return context
    }

    /// Loads a certificate chain and its private key, making sure they belong together.
    private func loadIdentity(certificatePath: String, keyPath: String, role: String) throws {
        guard SSL_CTX_use_certificate_chain_file(ctx, certificatePath) == 1 else {
            throw CryptoError.openSSL("cannot load \(role) certificate chain from \(certificatePath)")
        }
        let mismatch = "\(role) private key \(keyPath) does not match certificate \(certificatePath)"
        guard SSL_CTX_use_PrivateKey_file(ctx, keyPath, SSL_FILETYPE_PEM) == 1 else {
            // The mismatch check already happens here, since the certificate is loaded first.
            let first = ERR_peek_error()
            if ERR_GET_LIB(first) == ERR_LIB_X509,
                [X509_R_KEY_VALUES_MISMATCH, X509_R_KEY_TYPE_MISMATCH].contains(ERR_GET_REASON(first))
            {
                throw CryptoError.openSSL(mismatch)
            }
            throw CryptoError.openSSL("cannot load \(role) private key from \(keyPath)")
        }
        guard SSL_CTX_check_private_key(ctx) == 1 else { throw CryptoError.openSSL(mismatch) }
    }

    private func applyCommonSettings() throws {
        guard copenssl_SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) == 1 else {
            throw CryptoError.openSSL("cannot set TLS 1.2 as minimum version")
        }
        // Partial writes + moving buffer suit a non-blocking event loop that retries a write
        // from a different buffer address; releasing idle buffers saves ~34 KB per idle
        // connection.
        _ = copenssl_SSL_CTX_set_mode(
            ctx,
            Int(
                SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
                    | SSL_MODE_RELEASE_BUFFERS))
        // An encrypted key file must fail to load, not block on a terminal prompt.
        SSL_CTX_set_default_passwd_cb(ctx, refusePassphrase)
    }
}

/// Server-side ALPN choice: "h2" if the client offers it, otherwise no selection (NOACK keeps
/// the handshake going instead of failing it with no_application_protocol).
private func selectH2(
    out: UnsafeMutablePointer<UnsafePointer<UInt8>?>?, outLength: UnsafeMutablePointer<UInt8>?,
    offered: UnsafePointer<UInt8>?, offeredLength: UInt32
) -> Int32 {
    guard let out, let outLength, let offered else { return SSL_TLSEXT_ERR_NOACK }
    let total = Int(offeredLength)
    var index = 0
    // The list is a sequence of length-prefixed names; parse it ourselves rather than via
    // SSL_select_next_proto, whose fallback semantics are awkward (and were CVE-2024-5535).
    while index < total {
        let length = Int(offered[index])
        let start = index + 1
        guard length > 0, start + length <= total else { break }
        if length == 2, offered[start] == UInt8(ascii: "h"), offered[start + 1] == UInt8(ascii: "2") {
            // Pointing into the client's list is allowed: OpenSSL copies it before returning.
            out.pointee = offered + start
            outLength.pointee = 2
            return SSL_TLSEXT_ERR_OK
        }
        index = start + length
    }
    return SSL_TLSEXT_ERR_NOACK
}

// MARK: - Connection

public enum TLSIOResult: Equatable, Sendable {
    case ok(Int)  // bytes read/written (0 for a completed handshake)
    case wantRead, wantWrite
    case closed  // peer sent close_notify, EOF, or reset the connection
    case failed(String)  // error text (OpenSSL queue drained into it)
}

/// One TLS session over an already-connected socket fd (blocking or non-blocking). Does not
/// own or close the fd. Used from one thread at a time.
///
/// OpenSSL writes to the socket with write(2), so writing to a peer that has gone away raises
/// SIGPIPE: the process must ignore SIGPIPE (signal(SIGPIPE, SIG_IGN)) to get `.failed` instead.
public final class TLSConnection: @unchecked Sendable {
    // SSL_new takes its own reference on the SSL_CTX, so the TLSContext may be released first.
    // Internal, not private: ProviderCertificate.swift reads the peer's chain from it.
    let ssl: OpaquePointer
    private let isServer: Bool
    /// After SSL_ERROR_SSL/SYSCALL OpenSSL forbids further I/O, including SSL_shutdown.
    private var hadFatalError = false

    public init(context: TLSContext, fd: Int32, isServer: Bool, serverName: String? = nil) throws {
        guard context.isServer == isServer else {
            throw CryptoError(
                message: "a \(context.isServer ? "server" : "client") TLSContext cannot make a \(isServer ? "server" : "client") connection")
        }
        ERR_clear_error()
        guard let ssl = SSL_new(context.ctx) else { throw CryptoError.openSSL("SSL_new failed") }
        self.ssl = ssl
        self.isServer = isServer
        // Fully initialised from here: a throw below still runs deinit and frees ssl.

        // SSL_set_fd wraps the fd in a socket BIO with BIO_NOCLOSE, so we never close it.
        guard SSL_set_fd(ssl, fd) == 1 else { throw CryptoError.openSSL("SSL_set_fd failed") }
        if isServer {
            SSL_set_accept_state(ssl)
            return
        }
        SSL_set_connect_state(ssl)
        guard let serverName, !serverName.isEmpty else { return }
        let isIPAddress = Self.isIPAddressLiteral(serverName)
        // RFC 6066 forbids IP literals in SNI.
        if !isIPAddress, copenssl_SSL_set_tlsext_host_name(ssl, serverName) != 1 {
            throw CryptoError.openSSL("cannot set SNI \(serverName)")
        }
        guard context.verifyPeer else { return }
        if isIPAddress {
            // SSL_set1_host would compare an IP literal against DNS SANs; match IP SANs instead.
            guard X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), serverName) == 1 else {
                throw CryptoError.openSSL("cannot set expected IP address \(serverName)")
            }
        } else {
            SSL_set_hostflags(ssl, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
            guard SSL_set1_host(ssl, serverName) == 1 else {
                throw CryptoError.openSSL("cannot set expected host name \(serverName)")
            }
        }
    }

    deinit { SSL_free(ssl) }

    public func handshake() -> TLSIOResult {
        perform("TLS handshake") { _ in SSL_do_handshake(ssl) }
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) -> TLSIOResult {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return .ok(0) }
        return perform("TLS read") { SSL_read_ex(ssl, base, buffer.count, &$0) }
    }

    /// May write fewer bytes than given (partial writes are enabled); after `.wantRead` or
    /// `.wantWrite`, retry with the same bytes (the buffer may move, its contents may not).
    public func write(_ bytes: UnsafeRawBufferPointer) -> TLSIOResult {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return .ok(0) }
        return perform("TLS write") { SSL_write_ex(ssl, base, bytes.count, &$0) }
    }

    /// Decrypted application data is waiting inside OpenSSL (SSL_pending > 0): read again
    /// before waiting for the socket to become readable.
    public var hasBufferedReadData: Bool { SSL_pending(ssl) > 0 }

    public var isHandshakeComplete: Bool { SSL_is_init_finished(ssl) == 1 }

    /// The handshake resumed an earlier session (ticket or session cache) instead of a full one.
    public var isSessionReused: Bool { SSL_session_reused(ssl) == 1 }

    /// Best-effort close_notify; never waits for the peer's reply.
    public func shutdown() {
        guard !hadFatalError, SSL_is_init_finished(ssl) == 1 else { return }
        prepareForCall()
        _ = SSL_shutdown(ssl)
        ERR_clear_error()
    }

    public var negotiatedALPN: String? {
        var data: UnsafePointer<UInt8>? = nil
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &length)
        guard let data, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    /// Server side: the SNI host name the client sent (nil if none). Client side: the one we sent.
    public var requestedServerName: String? {
        guard let name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name) else { return nil }
        return String(cString: name)
    }

    /// The peer's leaf certificate in DER, if it presented one.
    public var peerCertificateDER: [UInt8]? {
        guard let certificate = SSL_get1_peer_certificate(ssl) else { return nil }
        defer { X509_free(certificate) }
        let length = i2d_X509(certificate, nil)
        guard length > 0 else { ERR_clear_error(); return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer in
            var out = buffer.baseAddress
            return i2d_X509(certificate, &out)
        }
        return written == length ? der : nil
    }

    /// e.g. "TLSv1.3"; "unknown" before the handshake completes.
    public var protocolVersion: String { String(cString: SSL_get_version(ssl)) }

    // MARK: Private

    private func prepareForCall() {
        // SSL_get_error consults the thread's error queue and errno: stale values from
        // unrelated earlier calls would turn a plain want-read into a bogus failure.
        ERR_clear_error()
        errno = 0
    }

    /// Runs one OpenSSL I/O call (which returns 1 on success and may set a byte count) and
    /// classifies its outcome; errno is saved before anything else can change it.
    @inline(__always)
    private func perform(_ operation: String, _ call: (_ count: inout Int) -> Int32) -> TLSIOResult {
        prepareForCall()
        var count = 0
        let ret = call(&count)
        let savedErrno = errno
        return ret == 1 ? .ok(count) : result(ret, savedErrno, operation: operation)
    }

    private func result(_ ret: Int32, _ savedErrno: Int32, operation: String) -> TLSIOResult {
        let code = SSL_get_error(ssl, ret)
        switch code {
        case SSL_ERROR_WANT_READ:
            return .wantRead
        case SSL_ERROR_WANT_WRITE:
            return .wantWrite
        case SSL_ERROR_ZERO_RETURN:
            return .closed
        case SSL_ERROR_SYSCALL:
            hadFatalError = true
            let queue = drainOpenSSLErrors()
            if queue.isEmpty && savedErrno == 0 { return .closed }  // EOF, 1.1.1-style
            // A peer that closes with our data unread (e.g. TLS 1.3 session tickets) makes
            // the kernel report a reset: it is the peer going away, like an EOF.
            if savedErrno == ECONNRESET || savedErrno == EPIPE { return .closed }
            let reason = savedErrno != 0 ? String(cString: strerror(savedErrno)) : queue
            return .failed("\(operation) failed: \(reason)")
        case SSL_ERROR_SSL:
            hadFatalError = true
            // OpenSSL 3 reports EOF without close_notify as an SSL error rather than
            // SSL_ERROR_SYSCALL; the API treats it as the peer closing.
            let first = ERR_peek_error()
            if ERR_GET_LIB(first) == ERR_LIB_SSL && ERR_GET_REASON(first) == SSL_R_UNEXPECTED_EOF_WHILE_READING {
                ERR_clear_error()
                return .closed
            }
            var message = "\(operation) failed: \(drainOpenSSLErrors())"
            let verifyResult = SSL_get_verify_result(ssl)
            if !isServer, verifyResult != Int(X509_V_OK) {
                message += " (certificate verification: \(String(cString: X509_verify_cert_error_string(verifyResult))))"
            }
            return .failed(message)
        default:
            hadFatalError = true
            return .failed("\(operation) failed: SSL_get_error \(code) \(drainOpenSSLErrors())")
        }
    }

    private static func isIPAddressLiteral(_ name: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, name, &v4) == 1 || inet_pton(AF_INET6, name, &v6) == 1
    }
}
