import Foundation
import Glibc
import Testing
import TestSupport
import OpenSSLCrypto

/// A TCP listener on 127.0.0.1 (ephemeral port) whose thread serves `connections` TLS
/// connections one after the other with our server context, recording what each handshake saw.
final class LoopbackTLSServer: @unchecked Sendable {
    struct Seen: Sendable {
        let result: TLSIOResult
        let alpn: String?
        let serverName: String?
        let version: String
        let reused: Bool
    }

    static let greeting = "hello from the emulator\n"
    let port: UInt16
    private let listener: Int32
    private let done = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var seen: [Seen] = []

    init(context: TLSContext, connections: Int) throws {
        signal(SIGPIPE, SIG_IGN)
        (listener, port) = try loopbackListener()
        Thread { [self] in
            for _ in 0..<connections { serveOne(context) }
            done.signal()
        }.start()
    }

    private func serveOne(_ context: TLSContext) {
        let fd = accept(listener, nil, nil)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard let connection = try? TLSConnection(context: context, fd: fd, isServer: true) else { return }
        let result = connection.handshake()
        if result == .ok(0) {
            // Greet, then close first: s_client (run with -ign_eof) reads everything the server
            // sent, TLS 1.3 session tickets included, before it sees our close_notify and exits.
            _ = writeAll(connection, Array(LoopbackTLSServer.greeting.utf8))
            connection.shutdown()
            // Wait for the client's close_notify (or EOF) so closing the fd cannot reset the
            // connection while the client still reads.
            var buffer = [UInt8](repeating: 0, count: 1024)
            while case .ok = buffer.withUnsafeMutableBytes({ connection.read(into: $0) }) {}
        }
        let record = Seen(
            result: result, alpn: connection.negotiatedALPN, serverName: connection.requestedServerName,
            version: connection.protocolVersion, reused: connection.isSessionReused)
        lock.lock()
        seen.append(record)
        lock.unlock()
    }

    /// Waits for the serving thread, then returns what it saw.
    func finish() -> [Seen] {
        done.wait()
        close(listener)
        lock.lock()
        defer { lock.unlock() }
        return seen
    }
}

@Suite("openssl s_client against our server")
struct OpenSSLClientInteropTests {
    func sClient(port: UInt16, pki: TestPKI, extra: [String]) throws -> CommandResult {
        try run(
            [
                "openssl", "s_client", "-connect", "127.0.0.1:\(port)", "-CAfile", pki.caPath,
                "-verify_return_error", "-servername", "api.push.apple.com", "-ign_eof",
            ] + extra)
    }

    @Test(arguments: ["-tls1_2", "-tls1_3"])
    func sClientNegotiatesH2AndResumes(version: String) throws {
        let pki = try TestPKI()
        defer { pki.directory.remove() }
        let server = try LoopbackTLSServer(context: try pki.serverContext(), connections: 2)
        let session = pki.directory.file("session.pem")
        let first = try sClient(port: server.port, pki: pki, extra: [version, "-alpn", "h2", "-sess_out", session])
        let second = try sClient(port: server.port, pki: pki, extra: [version, "-alpn", "h2", "-sess_in", session])
        let seen = server.finish()

        #expect(first.status == 0, "\(first.err)")
        #expect(first.out.contains("ALPN protocol: h2"))
        #expect(first.out.contains(LoopbackTLSServer.greeting))
        #expect(first.out.contains("Verify return code: 0 (ok)"))
        #expect(second.status == 0, "\(second.err)")
        #expect(second.out.contains("Reused, TLSv1."), "\(second.out)")
        try #require(seen.count == 2)
        let expectedVersion = version == "-tls1_2" ? "TLSv1.2" : "TLSv1.3"
        for record in seen {
            #expect(record.result == .ok(0))
            #expect(record.alpn == "h2")
            #expect(record.serverName == "api.push.apple.com")
            #expect(record.version == expectedVersion)
        }
        #expect(!seen[0].reused)
        #expect(seen[1].reused)
    }

    @Test func sClientWithoutALPNGetsNoProtocol() throws {
        let pki = try TestPKI()
        defer { pki.directory.remove() }
        let server = try LoopbackTLSServer(context: try pki.serverContext(), connections: 1)
        let result = try sClient(port: server.port, pki: pki, extra: ["-alpn", "http/1.1"])
        let seen = server.finish()
        #expect(result.status == 0, "\(result.err)")
        #expect(result.out.contains("No ALPN negotiated"))
        try #require(seen.count == 1)
        #expect(seen[0].result == .ok(0))
        #expect(seen[0].alpn == nil)
    }

    @Test func tls11IsRefused() throws {
        let pki = try TestPKI()
        defer { pki.directory.remove() }
        let server = try LoopbackTLSServer(context: try pki.serverContext(), connections: 1)
        // SECLEVEL=0 lets the CLI offer TLS 1.1 at all. On the server, OpenSSL 3's default
        // security level would refuse it as well, so this guards the outcome, not the mechanism.
        let result = try sClient(port: server.port, pki: pki, extra: ["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"])
        let seen = server.finish()
        #expect(result.status != 0)
        try #require(seen.count == 1)
        #expect(seen[0].result.isFailure, "\(seen[0].result)")
    }
}
