import Glibc
import MonotonicClock
import Networking
import OpenSSLCrypto

/// A server that speaks something else than the connection asked for: a setup mistake (a
/// wrong port, a missing or extra `--h2c`), which trying again will not mend.
public enum ProtocolMismatch: Sendable, Equatable {
    /// A cleartext (h2c) connection was answered in TLS: the address is a TLS listener.
    case answeredWithTLS
    /// A TLS connection was answered in something else: a cleartext server (HTTP/1.1, h2c).
    case notTLS
    /// TLS, but the server did not choose HTTP/2 ("h2") in ALPN.
    case noHTTP2InALPN
    /// The server's first bytes were not an HTTP/2 SETTINGS frame (an HTTP/1.1 server).
    case notHTTP2
}

/// What a server's first bytes say about the protocol it speaks.
enum FirstBytes {
    /// A TLS record (change cipher spec, alert, handshake, data) of version 3.x.
    static func lookLikeTLS(_ bytes: [UInt8]) -> Bool {
        bytes.count >= 2 && (20...23).contains(bytes[0]) && bytes[1] == 3
    }

    /// An HTTP/2 SETTINGS frame's header (a multiple of 6 bytes long, type 4, stream 0): what
    /// a cleartext HTTP/2 server sends first.
    static func lookLikeHTTP2Settings(_ bytes: [UInt8]) -> Bool {
        guard bytes.count >= 9, bytes[3] == 4, bytes[5] & 0x7f == 0, bytes[6] == 0, bytes[7] == 0, bytes[8] == 0 else { return false }
        let length = Int(bytes[0]) << 16 | Int(bytes[1]) << 8 | Int(bytes[2])
        return length % 6 == 0
    }

    /// The bytes for a message: their first line as text (at most 40 characters), or the first
    /// eight in hex when they are not text.
    static func excerpt(_ bytes: [UInt8]) -> String {
        let firstLine = bytes.prefix { $0 != 13 && $0 != 10 }
        let line = firstLine.prefix(40)
        if !line.isEmpty, line.allSatisfy({ (32...126).contains($0) }) {
            return "\"" + String(decoding: line, as: UTF8.self) + (line.count < firstLine.count ? "…\"" : "\"")
        }
        return "bytes " + bytes.prefix(8).map { String(format: "%02x", $0) }.joined(separator: " ")
    }

    /// Up to `count` bytes waiting on the socket, left there for whoever reads next.
    static func peek(_ fd: Int32, count: Int = 64) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        let n = recv(fd, &buffer, count, Int32(MSG_PEEK))
        return n > 0 ? Array(buffer[0..<n]) : []
    }
}

/// Whether the server at `address` answers a TLS ClientHello in TLS. Asked when a cleartext
/// connection was closed without a byte: that is what a TLS listener does with an HTTP/2
/// preface (OpenSSL sends no alert to a peer that does not look like TLS).
func answersInTLS(_ address: HostPort, timeoutMilliseconds: Int32) -> Bool {
    guard let fd = try? Socket.connect(to: address, timeoutMilliseconds: timeoutMilliseconds) else { return false }
    defer { close(fd) }
    guard let context = try? TLSContext.client(trustedCAPath: nil, verifyPeer: false, alpnProtocols: ["h2"]),
        let connection = try? TLSConnection(context: context, fd: fd, isServer: false, serverName: address.host)
    else { return false }
    Socket.setBlocking(fd, false)
    let deadline = Monotonic.nowMilliseconds() + Int64(timeoutMilliseconds)
    while Monotonic.nowMilliseconds() < deadline {
        let event: Int32
        switch withSIGPIPEBlocked({ connection.handshake() }) {
        case .ok: return true
        case .wantRead: event = POLLIN
        case .wantWrite: event = POLLOUT
        case .closed, .failed: return false
        }
        var pfd = pollfd(fd: fd, events: Int16(event), revents: 0)
        _ = poll(&pfd, 1, Int32(clamping: max(deadline - Monotonic.nowMilliseconds(), 0)))
        // The server's first bytes settle it; the handshake need not finish.
        if event == POLLIN, case let bytes = FirstBytes.peek(fd), !bytes.isEmpty { return FirstBytes.lookLikeTLS(bytes) }
    }
    return false
}

/// Whether the server at `address` answers an HTTP/2 connection preface in cleartext with its
/// SETTINGS frame (an h2c listener). Asked when a TLS handshake failed on an answer that
/// OpenSSL read before it could be looked at.
func answersHTTP2InCleartext(_ address: HostPort, timeoutMilliseconds: Int32) -> Bool {
    guard let fd = try? Socket.connect(to: address, timeoutMilliseconds: timeoutMilliseconds) else { return false }
    defer { close(fd) }
    // The preface and an empty SETTINGS frame, as a client with prior knowledge begins.
    let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8) + [0, 0, 0, 4, 0, 0, 0, 0, 0]
    guard withSIGPIPEBlocked({ send(fd, preface, preface.count, 0) }) == preface.count else { return false }
    var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    guard poll(&pfd, 1, timeoutMilliseconds) > 0 else { return false }
    return FirstBytes.lookLikeHTTP2Settings(FirstBytes.peek(fd))
}
