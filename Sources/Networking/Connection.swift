import Glibc
import MonotonicClock
public import OpenSSLCrypto

/// What a protocol (HTTP/2, HTTP/1.1, device frames) implements on top of a `Connection`.
public protocol ConnectionHandler: AnyObject {
    /// The transport is ready (TLS handshake done, or at once for cleartext).
    func connectionDidBecomeReady(_ connection: Connection)
    /// Bytes arrived. The buffer is only valid during the call.
    func connection(_ connection: Connection, didRead bytes: UnsafeRawBufferPointer)
    /// All buffered output has been written.
    func connectionDidDrainOutput(_ connection: Connection)
    /// The connection is closed; no further calls follow.
    func connectionDidClose(_ connection: Connection)
}

extension ConnectionHandler {
    public func connectionDidDrainOutput(_ connection: Connection) {}
}

/// A non-blocking socket owned by one event loop, optionally wrapped in TLS, with an output
/// buffer. Used only on its loop's thread (debug builds assert it).
public final class Connection: IOHandler {
    public let id: UInt64
    public let loop: EventLoop
    public let fd: Int32
    public let peer: String
    public var handler: ConnectionHandler?
    /// Runs once when the connection closes, after the handler was told.
    public var onClose: (() -> Void)?
    public private(set) var tls: TLSConnection?
    public private(set) var isClosed = false
    /// Monotonic ms of the last byte read or written (for idle timeouts).
    public private(set) var lastActivity: Int64
    /// Why the loop could not keep watching the socket (epoll_ctl failed), which closed the
    /// connection or came up while closing it; nil for an ordinary close.
    public private(set) var failure: SystemError?

    private var ready = false
    private var output: [UInt8] = []
    private var outputOffset = 0
    private var closeWhenDrained = false
    private var shutdownWhenDrained = false
    private var events: IOEvents = .read
    private var readPaused = false
    /// Whether what the peer sent before a failure (its reset, a write that failed) is still
    /// read and handed over before the connection closes: a device's last acks. Off for
    /// providers, whose requests could not be answered any more.
    public var readsWhatArrivedBeforeFailure = false
    /// The peer is gone and the connection closes on the loop's next turn: nothing is written.
    private var failing = false
    /// Stop reading from a peer that does not read its responses, so a slow or stuck client
    /// cannot make the emulator buffer without bound.
    private static let outputHighWater = 4 << 20

    public init(id: UInt64, loop: EventLoop, fd: Int32, peer: String, tls: TLSConnection?) {
        self.id = id
        self.loop = loop
        self.fd = fd
        self.peer = peer
        self.tls = tls
        self.lastActivity = Monotonic.nowMilliseconds()
    }

    /// Registers with the loop and starts the TLS handshake (or reports readiness).
    public func start() {
        loop.assertConfined()
        do {
            try loop.register(fd: fd, events: events, handler: self)
        } catch {
            failure = error
            Glibc.close(fd)
            isClosed = true
            handler?.connectionDidClose(self)
            return
        }
        if tls == nil {
            ready = true
            handler?.connectionDidBecomeReady(self)
        } else {
            // A peer that never finishes the handshake must not hold a descriptor forever.
            loop.schedule(afterMilliseconds: Self.handshakeTimeoutMs) { [weak self] in
                guard let self, !self.ready else { return }
                self.close()
            }
            continueHandshake()
        }
    }

    static let handshakeTimeoutMs: Int64 = 10_000

    public var negotiatedALPN: String? { tls?.negotiatedALPN }
    public var serverName: String? { tls?.requestedServerName }

    // MARK: Output

    /// Appends to the output buffer through `body`, then tries to write (unless inside
    /// `batchingWrites`).
    public func write(_ body: (inout [UInt8]) -> Void) {
        loop.assertConfined()
        guard !isClosed else { return }
        body(&output)
        if !batching { flush() }
    }

    private var batching = false

    /// Runs `body`, holding back the writes it makes and sending them in one go afterwards:
    /// a read that answers many small messages costs one system call, not one per answer.
    public func batchingWrites(_ body: () -> Void) {
        loop.assertConfined()
        let outer = batching
        batching = true
        body()
        batching = outer
        if !batching { flush() }
    }

    public func write(_ bytes: [UInt8]) {
        write { $0.append(contentsOf: bytes) }
    }

    public var bufferedOutputCount: Int { output.count - outputOffset }

    /// Closes once everything buffered has been written.
    public func closeAfterFlush() {
        loop.assertConfined()
        guard !isClosed else { return }
        closeWhenDrained = true
        if bufferedOutputCount == 0 { close() } else { flush() }
    }

    /// Sends what is buffered, then ends the write side (FIN) and reads on until the peer
    /// closes: a server that closes with unread request bytes sends RST, and the client may
    /// lose the response. The caller closes after a grace period. TLS connections just close.
    public func shutdownOutputAfterFlush() {
        loop.assertConfined()
        guard !isClosed else { return }
        if tls != nil {
            closeAfterFlush()
            return
        }
        shutdownWhenDrained = true
        if bufferedOutputCount == 0 { shutdownOutput() } else { flush() }
    }

    private func shutdownOutput() {
        shutdownWhenDrained = false
        // A failed epoll update on the way here may have closed the descriptor (its number may
        // belong to another connection by now).
        guard !isClosed else { return }
        _ = Glibc.shutdown(fd, Int32(SHUT_WR))
    }

    public func close() {
        loop.assertConfined()
        guard !isClosed else { return }
        isClosed = true
        tls?.shutdown()
        // The descriptor is closed either way (which ends any registration the kernel still
        // has); a failure here means the registration was already gone, which is worth telling.
        do { try loop.unregister(fd: fd) } catch { failure = failure ?? error }
        Glibc.close(fd)
        output = []
        let handler = self.handler
        self.handler = nil
        handler?.connectionDidClose(self)
        let onClose = self.onClose
        self.onClose = nil
        onClose?()
    }

    /// Hands the handler what has arrived and not been read yet, without waiting for more and
    /// whatever the read pause (for a close that must not leave the peer's last words unread).
    /// The end of the stream or an error is left for the close; nothing is written meanwhile
    /// beyond what the handler writes itself. Only outside the handler's own `didRead`.
    public func readPendingInput() {
        loop.assertConfined()
        guard ready, !isClosed else { return }
        let buffer = loop.readBuffer
        var budget = Self.readBudgetPerEvent
        while budget > 0, !isClosed {
            guard case .ok(let n) = receive(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<min(buffer.count, budget)])) else {
                return
            }
            handler?.connection(self, didRead: UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            budget -= n
        }
    }

    /// One read from the socket (through TLS when there is TLS) into `window`.
    private func receive(into window: UnsafeMutableRawBufferPointer) -> IOResult {
        if let tls { return IOResult(tls.read(into: window)) }
        let n = Glibc.recv(fd, window.baseAddress, window.count, 0)
        return n > 0 ? .ok(n) : n == 0 ? .closed : (errno == EAGAIN || errno == EWOULDBLOCK ? .wantRead : .failed)
    }

    /// Closes after a failure: at once, or (`readsWhatArrivedBeforeFailure`) on the loop's next
    /// turn after reading what arrived. Not at once then: a write fails inside whatever made
    /// it (frames sent while another change is handled), which the handler's reads must not
    /// run into.
    private func closeAfterFailure() {
        guard readsWhatArrivedBeforeFailure, ready, !isClosed, !failing else {
            close()
            return
        }
        failing = true
        _ = loop.schedule(afterMilliseconds: 0) { [weak self] in
            guard let self, !self.isClosed else { return }
            self.readPendingInput()
            self.close()
        }
    }

    private func flush() {
        guard ready, !isClosed, !failing else { return }
        while outputOffset < output.count {
            let result = output.withUnsafeBytes { raw -> IOResult in
                let pending = UnsafeRawBufferPointer(rebasing: raw[outputOffset...])
                if let tls { return IOResult(tls.write(pending)) }
                let n = Glibc.send(fd, pending.baseAddress, pending.count, Int32(MSG_NOSIGNAL))
                if n >= 0 { return .ok(n) }
                return errno == EAGAIN || errno == EWOULDBLOCK ? .wantWrite : .failed
            }
            switch result {
            case .ok(let n):
                outputOffset += n
                lastActivity = Monotonic.nowMilliseconds()
            case .wantWrite, .wantRead:
                setWriteInterest(true)
                updateReadPause()
                return
            case .closed, .failed:
                closeAfterFailure()
                return
            }
        }
        output.removeAll(keepingCapacity: output.capacity <= 1 << 20)
        outputOffset = 0
        setWriteInterest(false)
        updateReadPause()
        guard !isClosed else { return }  // the epoll update failed and closed the connection
        if closeWhenDrained {
            close()
            return
        }
        if shutdownWhenDrained { shutdownOutput() }
        handler?.connectionDidDrainOutput(self)
    }

    private func setWriteInterest(_ on: Bool) {
        guard !isClosed else { return }
        let wanted: IOEvents = (readPaused ? IOEvents() : IOEvents.read).union(on ? IOEvents.write : IOEvents())
        if wanted != events {
            events = wanted
            do {
                try loop.modify(fd: fd, events: wanted)
            } catch {
                // Without the new interest the connection would stall (no EPOLLOUT) or spin
                // (a level-triggered event it no longer acts on).
                failure = error
                close()
            }
        }
    }

    private func updateReadPause() {
        guard !isClosed else { return }
        let shouldPause = bufferedOutputCount > Self.outputHighWater
        guard shouldPause != readPaused else { return }
        readPaused = shouldPause
        setWriteInterest(events.contains(.write))
    }

    // MARK: IOHandler

    public func readable() {
        if isReadyForIO() { readAvailable() }
    }

    public func writable() {
        guard isReadyForIO() else { return }
        flush()
        // TLS may have wanted a write to finish a read (renegotiation-style record flow).
        if tls?.hasBufferedReadData == true { readAvailable() }
    }

    public func hangup() {
        closeAfterFailure()
    }

    /// Whether reads and writes may go ahead: open, and past the TLS handshake (an event
    /// before then moves the handshake on instead).
    private func isReadyForIO() -> Bool {
        guard !isClosed else { return false }
        guard ready else {
            continueHandshake()
            return false
        }
        return true
    }

    private func continueHandshake() {
        guard let tls else { return }
        switch tls.handshake() {
        case .ok:
            ready = true
            setWriteInterest(false)
            handler?.connectionDidBecomeReady(self)
            flush()
            // The client's first HTTP/2 bytes may already sit in TLS's buffer.
            readAvailable()
        case .wantRead:
            setWriteInterest(false)
        case .wantWrite:
            setWriteInterest(true)
        case .closed, .failed:
            close()
        }
    }

    /// Bytes handed to the handler per readiness event: one busy peer cannot keep its loop
    /// from the other connections on it for long (a flood of tiny messages is work per byte).
    static let readBudgetPerEvent = 128 * 1024

    private func readAvailable() {
        let buffer = loop.readBuffer
        var budget = Self.readBudgetPerEvent
        while budget > 0 {
            guard !isClosed, !readPaused else { return }
            let window = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<min(buffer.count, budget)])
            switch receive(into: window) {
            case .ok(let n):
                lastActivity = Monotonic.nowMilliseconds()
                handler?.connection(self, didRead: UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                budget -= n
                if tls == nil && n < window.count { return }
            case .wantRead:
                return
            case .wantWrite:
                setWriteInterest(true)
                return
            case .closed, .failed:
                close()
                return
            }
        }
        // Out of budget. Unread bytes in the socket wake the loop again; bytes TLS has already
        // decrypted would not, so come back for them after the other connections' turn.
        if let tls, tls.hasBufferedReadData, !isClosed {
            _ = loop.schedule(afterMilliseconds: 0) { [weak self] in self?.readAvailable() }
        }
    }
}

enum IOResult {
    case ok(Int)
    case wantRead, wantWrite, closed, failed

    init(_ tls: TLSIOResult) {
        switch tls {
        case .ok(let n): self = .ok(n)
        case .wantRead: self = .wantRead
        case .wantWrite: self = .wantWrite
        case .closed: self = .closed
        case .failed: self = .failed
        }
    }
}

/// A listening socket on one loop; accepted connections are spread over the group.
public final class Listener: IOHandler {
    public let address: HostPort
    public let fd: Int32
    private let loop: EventLoop
    private let accept: (Int32, String) -> Void
    /// Told when accepting pauses for lack of descriptors, at most every 10 seconds, so a full
    /// table does not flood the log.
    public var onExhausted: ((Int32) -> Void)?
    /// Told when the loop cannot change or end the listener's registration (epoll_ctl
    /// failed): accepting may have stopped for good.
    public var onError: ((SystemError) -> Void)?
    private var paused = false
    private var closed = false
    /// How long to stop accepting when the process is out of descriptors.
    static let exhaustedPauseMs: Int64 = 100

    /// `accept` runs on the listener's loop for each new descriptor; it decides which loop
    /// gets the connection.
    public init(address: HostPort, loop: EventLoop, accept: @escaping (Int32, String) -> Void) throws(SystemError) {
        let (fd, bound) = try Socket.listen(address)
        self.fd = fd
        self.address = bound
        self.loop = loop
        self.accept = accept
    }

    public func start() throws(SystemError) {
        try loop.register(fd: fd, events: .read, handler: self)
    }

    public func readable() {
        guard !paused else { return }
        for _ in 0..<64 {
            switch Socket.accept(fd) {
            case .connection(let client, let peer):
                accept(client, peer)
            case .none:
                return
            case .exhausted(let code):
                // Level-triggered epoll would report the waiting connection again at once
                // and spin a core; stop listening for a moment instead (as nginx does).
                pause(code)
                return
            }
        }
    }

    /// When `onExhausted` was last called (monotonic ms), if ever.
    private var lastReported: Int64?

    private func pause(_ code: Int32) {
        paused = true
        let now = Monotonic.nowMilliseconds()
        if lastReported.map({ now - $0 >= 10_000 }) ?? true {
            lastReported = now
            onExhausted?(code)
        }
        do {
            try loop.modify(fd: fd, events: IOEvents())
        } catch {
            onError?(error)
        }
        _ = loop.schedule(afterMilliseconds: Self.exhaustedPauseMs) { [weak self] in
            guard let self, self.paused, !self.closed else { return }
            self.paused = false
            do throws(SystemError) {
                try self.loop.modify(fd: self.fd, events: .read)
            } catch {
                self.onError?(error)
            }
        }
    }

    public func writable() {}
    public func hangup() {}

    public func close() {
        guard !closed else { return }
        closed = true
        do { try loop.unregister(fd: fd) } catch { onError?(error) }
        Glibc.close(fd)
    }
}
