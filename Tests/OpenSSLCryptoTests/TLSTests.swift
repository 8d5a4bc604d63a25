import Foundation
import Glibc
import Testing
import OpenSSLCrypto

@Suite("TLS contexts and connections")
struct TLSTests {
    @Test func alpnH2IsNegotiatedOnBothSides() async throws {
        let pki = try TestPKI()
        defer { pki.directory.remove() }
        let client = try TLSContext.client(trustedCAPath: pki.caPath, verifyPeer: true, alpnProtocols: ["h2"])
        let (server, clientSide) = try await handshakePair(
            server: try pki.serverContext(), client: client,
            serverName: "localhost")
        #expect(server.result == .ok(0))
        #expect(clientSide.result == .ok(0))
        #expect(server.alpn == "h2")
        #expect(clientSide.alpn == "h2")
        #expect(server.version == "TLSv1.3")
        #expect(clientSide.version == "TLSv1.3")
    }

    @Test func h2IsPickedFromALongerOffer() async throws {
        let pki = try TestPKI()
        defer { pki.directory.remove() }
        let client = try TLSContext.client(trustedCAPath: pki.caPath, verifyPeer: true, alpnProtocols: ["http/1.1", "h2"])
        let (server, clientSide) = try await handshakePair(
            server: try pki.serverContext(), client: client,
            serverName: "localhost")
        #expect(server.alpn == "h2")
        #expect(clientSide.alpn == "h2")
    }

    @Test func noALPNStillHandshakes() async throws {
        let pki = try TestPKI()
        defer { pki.directory.remove() }
        let client = try TLSContext.client(trustedCAPath: pki.caPath, verifyPeer: true, alpnProtocols: [])
        let (server, clientSide) = try await handshakePair(
            server: try pki.serverContext(), client: client,
            serverName: "localhost")
        #expect(server.result == .ok(0))
        #expect(clientSide.result == .ok(0))
        #expect(server.alpn == nil)
        #expect(clientSide.alpn == nil)
    }

    @Test func alpnWithoutH2HandshakesWithNoSelection() async throws {
        let pki = try TestPKI()
        defer { pki.directory.remove() }
        let client = try TLSContext.client(trustedCAPath: pki.caPath, verifyPeer: true, alpnProtocols: ["http/1.1"])
        let (server, clientSide) = try await handshakePair(
            server: try pki.serverContext(), client: client,
            serverName: "localhost")
        #expect(server.result == .ok(0))
        #expect(clientSide.result == .ok(0))
        #expect(server.alpn == nil)
        #expect(clientSide.alpn == nil)
    }

    @Test func sniIsVisibleToTheServer() async throws {
        let pki = try TestPKI()
        defer { pki.directory.remove() }
        let client = try TLSContext.client(trustedCAPath: pki.caPath, verifyPeer: true, alpnProtocols: ["h2"])
        let (server, clientSide) = try await handshakePair(
            server: try pki.serverContext(), client: client,
            serverName: "api.push.apple.com")
        #expect(clientSide.result == .ok(0))
        #expect(server.result == .ok(0))
        #expect(server.serverName == "api.push.apple.com")
    }

    @Test func noSNIWithoutServerName() async throws {
        let pki = try TestPKI()
        defer { pki.directory.remove() }
        let client = try TLSContext.client(trustedCAPath: nil, verifyPeer: false, alpnProtocols: ["h2"])
        let (server, clientSide) = try await handshakePair(server: try pki.serverContext(), client: client)
        #expect(clientSide.result == .ok(0))
        #expect(server.serverName == nil)
    }

    @Test func ipAddressServerNameVerifiesAgainstIPSANWithoutSNI() async throws {
        let pki = try TestPKI()
        defer { pki.directory.remove() }
        let client = try TLSContext.client(trustedCAPath: pki.caPath, verifyPeer: true, alpnProtocols: ["h2"])
        for address in ["127.0.0.1", "::1"] {
            let (server, clientSide) = try await handshakePair(
                server: try pki.serverContext(), client: client,
                serverName: address)
            #expect(clientSide.result == .ok(0), "\(address)")
            #expect(server.result == .ok(0), "\(address)")
            // RFC 6066: IP literals are not sent as SNI.
            #expect(server.serverName == nil, "\(address)")
        }
        let (_, wrongIP) = try await handshakePair(server: try pki.serverContext(), client: client, serverName: "10.0.0.1")
        #expect(wrongIP.result.isFailure)
    }

    @Test func applicationBytesRoundTrip() async throws {
        let pki = try TestPKI()
        defer { pki.directory.remove() }
        let client = try TLSContext.client(trustedCAPath: pki.caPath, verifyPeer: true, alpnProtocols: ["h2"])
        let request = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8) + (0..<50_000).map { UInt8(truncatingIfNeeded: $0) }
        let received = Box<[UInt8]>([])
        let echoed = Box<[UInt8]>([])
        let serverEnd = Box<TLSIOResult?>(nil)

        let (server, clientSide) = try await handshakePair(
            server: try pki.serverContext(), client: client, serverName: "localhost",
            serverAfterHandshake: { connection in
                // Read the whole request, echo it back, then expect the client's close_notify.
                var buffer = [UInt8](repeating: 0, count: 4096)
                var got: [UInt8] = []
                while got.count < request.count {
                    let result = buffer.withUnsafeMutableBytes { connection.read(into: $0) }
                    guard case .ok(let n) = result else { serverEnd.value = result; return }
                    got += buffer[..<n]
                }
                received.value = got
                #expect(writeAll(connection, got))
                let end = buffer.withUnsafeMutableBytes { connection.read(into: $0) }
                serverEnd.value = end
            },
            clientAfterHandshake: { connection in
                #expect(writeAll(connection, request))
                var buffer = [UInt8](repeating: 0, count: 1000)
                var got: [UInt8] = []
                while got.count < request.count {
                    let result = buffer.withUnsafeMutableBytes { connection.read(into: $0) }
                    guard case .ok(let n) = result else { return }
                    got += buffer[..<n]
                }
                echoed.value = got
                connection.shutdown()
            })
        #expect(server.result == .ok(0))
        #expect(clientSide.result == .ok(0))
        #expect(received.value == request)
        #expect(echoed.value == request)
        #expect(serverEnd.value == .closed)
    }

    @Test func eofWithoutCloseNotifyReadsAsClosed() async throws {
        let pki = try TestPKI()
        defer { pki.directory.remove() }
        let serverContext = try pki.serverContext()
        let clientContext = try TLSContext.client(trustedCAPath: nil, verifyPeer: false, alpnProtocols: ["h2"])
        let (serverFD, clientFD) = try makeSocketPair()
        defer { close(serverFD) }
        let server = try TLSConnection(context: serverContext, fd: serverFD, isServer: true)
        let client = try TLSConnection(context: clientContext, fd: clientFD, isServer: false)
        let (serverResult, clientResult) = onTwoThreads(
            { () -> TLSIOResult in
                guard server.handshake() == .ok(0) else { return .failed("handshake") }
                var buffer = [UInt8](repeating: 0, count: 100)
                return buffer.withUnsafeMutableBytes { server.read(into: $0) }
            },
            { () -> TLSIOResult in
                let result = client.handshake()
                close(clientFD)  // abrupt: no close_notify
                return result
            })
        #expect(clientResult == .ok(0))
        #expect(serverResult == .closed)
    }

    @Test func verifiedClientFailsAgainstUntrustedCA() async throws {
        let serverPKI = try TestPKI()
        let otherPKI = try TestPKI()
        defer {
            serverPKI.directory.remove()
            otherPKI.directory.remove()
        }
        let client = try TLSContext.client(trustedCAPath: otherPKI.caPath, verifyPeer: true, alpnProtocols: ["h2"])
        let (server, clientSide) = try await handshakePair(
            server: try serverPKI.serverContext(), client: client,
            serverName: "localhost")
        #expect(clientSide.result.isFailure)
        #expect(clientSide.result.failureText.contains("certificate verify failed"), "\(clientSide.result)")
        #expect(server.result.isFailure || server.result == .closed)

        // Without verification the same pair connects.
        let lenient = try TLSContext.client(trustedCAPath: otherPKI.caPath, verifyPeer: false, alpnProtocols: ["h2"])
        let (_, lenientSide) = try await handshakePair(
            server: try serverPKI.serverContext(), client: lenient,
            serverName: "localhost")
        #expect(lenientSide.result == .ok(0))
    }

    @Test func verifiedClientFailsOnHostnameMismatch() async throws {
        let pki = try TestPKI()
        defer { pki.directory.remove() }
        let client = try TLSContext.client(trustedCAPath: pki.caPath, verifyPeer: true, alpnProtocols: ["h2"])
        let (_, clientSide) = try await handshakePair(
            server: try pki.serverContext(), client: client,
            serverName: "push.example.com")
        #expect(clientSide.result.isFailure)
        #expect(clientSide.result.failureText.contains("hostname mismatch"), "\(clientSide.result)")
        for name in ["api.sandbox.push.apple.com", "api.development.push.apple.com"] {
            let (_, ok) = try await handshakePair(server: try pki.serverContext(), client: client, serverName: name)
            #expect(ok.result == .ok(0), "\(name)")
        }
    }

    @Test func clientCertificateIsOptionalAndVisibleToServer() async throws {
        let pki = try TestPKI()
        let clientPKI = try TestPKI()  // an unrelated CA: the server must accept it anyway
        defer {
            pki.directory.remove()
            clientPKI.directory.remove()
        }
        let anonymous = try TLSContext.client(trustedCAPath: pki.caPath, verifyPeer: true, alpnProtocols: ["h2"])
        let (server1, client1) = try await handshakePair(
            server: try pki.serverContext(), client: anonymous,
            serverName: "localhost")
        #expect(client1.result == .ok(0))
        #expect(server1.result == .ok(0))
        #expect(server1.peerCertificate == nil)
        let serverDER = try runChecked(["openssl", "x509", "-in", pki.certificatePath, "-outform", "DER"]).stdout
        #expect(client1.peerCertificate == [UInt8](serverDER))

        let withCertificate = try TLSContext.client(
            trustedCAPath: pki.caPath, verifyPeer: true, alpnProtocols: ["h2"],
            clientCertificatePath: clientPKI.certificatePath,
            clientKeyPath: clientPKI.keyPath)
        let (server2, client2) = try await handshakePair(
            server: try pki.serverContext(), client: withCertificate,
            serverName: "localhost")
        #expect(client2.result == .ok(0))
        #expect(server2.result == .ok(0))
        let clientDER = try runChecked(["openssl", "x509", "-in", clientPKI.certificatePath, "-outform", "DER"]).stdout
        #expect(server2.peerCertificate == [UInt8](clientDER))
    }

    @Test func nonBlockingHandshakeAndIO() throws {
        let pki = try TestPKI()
        defer { pki.directory.remove() }
        let (serverFD, clientFD) = try makeSocketPair(nonBlocking: true)
        defer {
            close(serverFD)
            close(clientFD)
        }
        let server = try TLSConnection(context: try pki.serverContext(), fd: serverFD, isServer: true)
        let client = try TLSConnection(
            context: try TLSContext.client(trustedCAPath: pki.caPath, verifyPeer: true, alpnProtocols: ["h2"]),
            fd: clientFD, isServer: false, serverName: "localhost")

        // One thread pumps both sides: every call must return promptly with want-read until
        // the peer has produced what it needs.
        var serverDone = false
        var clientDone = false
        var sawWantRead = false
        for _ in 0..<20 where !(serverDone && clientDone) {
            if !clientDone {
                switch client.handshake() {
                case .ok: clientDone = true
                case .wantRead: sawWantRead = true
                case let other: Issue.record("client handshake: \(other)"); return
                }
            }
            if !serverDone {
                switch server.handshake() {
                case .ok: serverDone = true
                case .wantRead: sawWantRead = true
                case let other: Issue.record("server handshake: \(other)"); return
                }
            }
        }
        #expect(serverDone && clientDone)
        #expect(sawWantRead)
        #expect(server.isHandshakeComplete && client.isHandshakeComplete)

        var buffer = [UInt8](repeating: 0, count: 64)
        #expect(buffer.withUnsafeMutableBytes { server.read(into: $0) } == .wantRead)
        let payload = Array("hello".utf8)
        #expect(payload.withUnsafeBytes { client.write($0) } == .ok(5))
        // Read 2 bytes of the 5-byte record: the remainder stays buffered inside OpenSSL.
        #expect(buffer.withUnsafeMutableBytes { server.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<2])) } == .ok(2))
        #expect(server.hasBufferedReadData)
        #expect(buffer.withUnsafeMutableBytes { server.read(into: $0) } == .ok(3))
        #expect(!server.hasBufferedReadData)
        #expect(buffer.withUnsafeMutableBytes { server.read(into: $0) } == .wantRead)

        client.shutdown()
        #expect(buffer.withUnsafeMutableBytes { server.read(into: $0) } == .closed)
        server.shutdown()  // answering close_notify after the peer's must be harmless
    }

    @Test func garbageFromClientFailsTheHandshake() async throws {
        let pki = try TestPKI()
        defer { pki.directory.remove() }
        let (serverFD, clientFD) = try makeSocketPair()
        defer {
            close(serverFD)
            close(clientFD)
        }
        let server = try TLSConnection(context: try pki.serverContext(), fd: serverFD, isServer: true)
        let junk = Array("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8)
        #expect(junk.withUnsafeBytes { Glibc.write(clientFD, $0.baseAddress, $0.count) } == junk.count)
        let result = await onThread { server.handshake() }
        #expect(result.isFailure, "\(result)")
        server.shutdown()  // must be a no-op after a fatal error
    }

    @Test func contextConstructionErrors() throws {
        let pki = try TestPKI()
        let other = try TestPKI()
        defer {
            pki.directory.remove()
            other.directory.remove()
        }
        #expect(throws: CryptoError.self) {
            try TLSContext.server(certificateChainPath: pki.directory.file("missing.pem"), privateKeyPath: pki.keyPath)
        }
        #expect {
            try TLSContext.server(certificateChainPath: pki.certificatePath, privateKeyPath: other.keyPath)
        } throws: { error in
            (error as? CryptoError)?.message.contains("does not match") == true
        }
        #expect(throws: CryptoError.self) {
            try TLSContext.client(trustedCAPath: pki.directory.file("missing.pem"), verifyPeer: true, alpnProtocols: [])
        }
        #expect(throws: CryptoError.self) {
            try TLSContext.client(trustedCAPath: nil, verifyPeer: true, alpnProtocols: [""])
        }
        #expect(throws: CryptoError.self) {
            try TLSContext.client(
                trustedCAPath: nil, verifyPeer: true, alpnProtocols: ["h2"],
                clientCertificatePath: pki.certificatePath)
        }
        let serverContext = try pki.serverContext()
        #expect(throws: CryptoError.self) {
            try TLSConnection(context: serverContext, fd: 0, isServer: false)
        }
    }
}

/// Writes everything, looping over partial writes.
func writeAll(_ connection: TLSConnection, _ bytes: [UInt8]) -> Bool {
    var offset = 0
    while offset < bytes.count {
        let result = bytes[offset...].withUnsafeBytes { connection.write($0) }
        guard case .ok(let n) = result else { return false }
        offset += n
    }
    return true
}

/// A mutable slot shared between a test and the thread it starts (joined before reading).
final class Box<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: T
    init(_ value: T) { stored = value }
    var value: T {
        get { lock.lock(); defer { lock.unlock() }; return stored }
        set { lock.lock(); stored = newValue; lock.unlock() }
    }
}
