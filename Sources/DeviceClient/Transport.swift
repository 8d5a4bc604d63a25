import Glibc
import MonotonicClock
import Networking
import OpenSSLCrypto

/// One connection to the device listener: a non-blocking socket, optionally wrapped in TLS.
/// Reads never block (callers wait with `waitReadable`); writes block up to a deadline.
final class Transport {
    let fd: Int32
    private let tls: TLSConnection?
    private var closed = false

    enum ReadOutcome {
        case data(Int)
        case wouldBlock
        case closed
        case failed(String)
    }

    init(address: HostPort, tlsContext: TLSContext?, timeoutMilliseconds: Int) throws(DeviceClientError) {
        let deadline = Monotonic.nowMilliseconds() + Int64(max(0, timeoutMilliseconds))
        let fd: Int32
        do {
            fd = try Socket.connect(to: address, timeoutMilliseconds: Int32(clamping: max(1, timeoutMilliseconds)))
        } catch {
            throw DeviceClientError(.connectFailed, "cannot connect to \(address): \(error.description)")
        }
        Socket.setBlocking(fd, false)
        self.fd = fd
        guard let tlsContext else {
            tls = nil
            return
        }
        let connection: TLSConnection
        do {
            connection = try TLSConnection(context: tlsContext, fd: fd, isServer: false, serverName: address.host)
        } catch {
            Glibc.close(fd)
            throw DeviceClientError(.connectFailed, "TLS setup for \(address) failed: \(error)")
        }
        tls = connection
        // Fully initialised from here: a throw below runs deinit, so close through close().
        while true {
            let result = withSIGPIPEBlocked { connection.handshake() }
            let events: Int16
            switch result {
            case .ok: return
            case .wantRead: events = Int16(POLLIN)
            case .wantWrite: events = Int16(POLLOUT)
            case .closed:
                close()
                throw DeviceClientError(
                    .connectFailed,
                    "TLS handshake with \(address) failed: the server closed the connection (is its device listener TLS? serve --device-tls)")
            case .failed(let message):
                close()
                // OpenSSL's word for an answer that is no TLS record: a cleartext listener.
                let hint =
                    message.contains("wrong version number")
                    ? " (the server does not speak TLS: a device listener speaks TLS only with serve --device-tls)" : ""
                throw DeviceClientError(.connectFailed, "TLS handshake with \(address) failed: \(message)\(hint)")
            }
            guard Self.wait(fd: fd, events: events, deadline: deadline) else {
                close()
                throw DeviceClientError(.connectFailed, "TLS handshake with \(address) timed out after \(timeoutMilliseconds) ms")
            }
        }
    }

    deinit { close() }

    func close() {
        guard !closed else { return }
        closed = true
        if let tls { withSIGPIPEBlocked { tls.shutdown() } }
        Glibc.close(fd)
    }

    /// Decrypted bytes wait inside OpenSSL: reading again does not need the socket to be readable.
    var hasBufferedData: Bool { tls?.hasBufferedReadData ?? false }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadOutcome {
        if let tls {
            switch withSIGPIPEBlocked({ tls.read(into: buffer) }) {
            case .ok(let n): return n > 0 ? .data(n) : .wouldBlock
            case .wantRead, .wantWrite: return .wouldBlock
            case .closed: return .closed
            case .failed(let message): return .failed(message)
            }
        }
        while true {
            let n = Glibc.recv(fd, buffer.baseAddress, buffer.count, 0)
            if n > 0 { return .data(n) }
            if n == 0 { return .closed }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            default: return .failed("read failed: \(String(cString: strerror(errno)))")
            }
        }
    }

    /// Writes every byte or throws (`.timeout` at the deadline, `.notConnected` on an error).
    func write(_ bytes: [UInt8], deadline: Int64) throws(DeviceClientError) {
        var offset = 0
        while offset < bytes.count {
            var waitFor: Int16 = Int16(POLLOUT)
            if let tls {
                let result = bytes.withUnsafeBytes { raw in
                    withSIGPIPEBlocked { tls.write(UnsafeRawBufferPointer(rebasing: raw[offset...])) }
                }
                switch result {
                case .ok(let n): offset += n; continue
                case .wantWrite: waitFor = Int16(POLLOUT)
                case .wantRead: waitFor = Int16(POLLIN)
                case .closed: throw DeviceClientError(.notConnected, "the emulator closed the connection")
                case .failed(let message): throw DeviceClientError(.notConnected, message)
                }
            } else {
                let n = bytes.withUnsafeBytes { raw in
                    Glibc.send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                }
                if n >= 0 { offset += n; continue }
                switch errno {
                case EINTR: continue
                case EAGAIN, EWOULDBLOCK: waitFor = Int16(POLLOUT)
                default: throw DeviceClientError(.notConnected, "write failed: \(String(cString: strerror(errno)))")
                }
            }
            guard Self.wait(fd: fd, events: waitFor, deadline: deadline) else {
                throw DeviceClientError(.timeout, "writing to the emulator timed out (it is not reading)")
            }
        }
    }

    /// Waits until the socket is readable (or has hung up) or the deadline passes.
    func waitReadable(deadline: Int64) -> Bool {
        if hasBufferedData { return true }
        return Self.wait(fd: fd, events: Int16(POLLIN), deadline: deadline)
    }

    /// poll(2) on one descriptor until `events` (or an error/hang-up) or the deadline.
    static func wait(fd: Int32, events: Int16, deadline: Int64) -> Bool {
        while true {
            let remaining = deadline - Monotonic.nowMilliseconds()
            var pfd = pollfd(fd: fd, events: events, revents: 0)
            let n = Glibc.poll(&pfd, 1, Int32(clamping: max(0, remaining)))
            if n > 0 { return true }
            if n < 0 && errno == EINTR { continue }
            return false
        }
    }
}
