import DeviceClient
import Foundation
import Glibc
import MonotonicClock

/// The `device` command's loop: it waits on stdin and the device's socket at once, reconnects
/// with backoff when the connection drops, and writes events and acks in one go per read.
extension DeviceCLI {
    func run() -> Never {
        attemptConnect(first: true)
        while true {
            var fds: [pollfd] = []
            var stdinIndex = -1
            var deviceIndex = -1
            if stdinOpen {
                stdinIndex = fds.count
                fds.append(pollfd(fd: 0, events: Int16(POLLIN), revents: 0))
            }
            if device.isConnected {
                deviceIndex = fds.count
                fds.append(pollfd(fd: device.fileDescriptor, events: Int16(POLLIN), revents: 0))
            }
            var timeout: Int32 = -1
            if device.isConnected && device.hasBufferedInput {
                timeout = 0
            } else if case .retrying(let at) = link {
                timeout = Int32(clamping: max(0, at - Monotonic.nowMilliseconds()))
            }
            let n = Glibc.poll(&fds, nfds_t(fds.count), timeout)
            if n < 0 && errno != EINTR {
                FileHandle.standardError.write(Data("apns-emulator: poll failed: \(String(cString: strerror(errno)))\n".utf8))
                exit(1)
            }
            if device.isConnected && ((deviceIndex >= 0 && fds[deviceIndex].revents != 0) || device.hasBufferedInput) {
                readDevice()
            }
            if stdinIndex >= 0 && fds[stdinIndex].revents != 0 {
                readStdin()
            }
            if case .retrying(let at) = link, Monotonic.nowMilliseconds() >= at {
                attemptConnect(first: false)
            }
        }
    }

    func attemptConnect(first: Bool) {
        welcomed = false
        do {
            try device.open(timeoutMilliseconds: 3000)
            link = .connected
        } catch {
            if first && !retryFirstConnect {
                emit(["event": "disconnected", "reason": .string(error.description)])
                FileHandle.standardError.write(Data("apns-emulator: \(error.description)\n".utf8))
                exit(1)
            }
            announceOutage(error.description)
            scheduleRetry()
        }
    }

    func scheduleRetry() {
        link = .retrying(at: Monotonic.nowMilliseconds() + backoffMilliseconds)
        backoffMilliseconds = min(backoffMilliseconds * 2, 2000)
    }

    func announceOutage(_ reason: String) {
        guard !outageAnnounced else { return }
        outageAnnounced = true
        emit(["event": "disconnected", "reason": .string(reason)])
    }

    func readDevice() {
        held = []
        defer { releaseHeld() }
        do {
            for frame in try device.poll(timeoutMilliseconds: 0) { handle(frame) }
        } catch {
            switch error.kind {
            case .badFrame, .lineTooLong:
                emit(.object(errorEvent(code: error.kind == .badFrame ? "bad_frame" : "line_too_long", message: error.message)))
            default:
                break  // closed: handled below
            }
        }
        if !device.isConnected, case .connected = link { connectionLost() }
    }

    func connectionLost() {
        if device.wasReplaced { replaced() }
        var reason = device.disconnectReason ?? "connection closed"
        if !welcomed && device.tls == nil {
            reason += " (before welcome: if the emulator runs with --device-tls, add --tls)"
        }
        announceOutage(reason)
        scheduleRetry()
    }

    /// Prints the held events, then acks their notifications (acked after printed).
    func releaseHeld() {
        guard let bytes = held else { return }
        held = nil
        write(bytes)
        let ids = acks
        acks.removeAll(keepingCapacity: true)
        do { try device.ack(ids) } catch { /* the connection is gone; handled by the loop */  }
    }

    func replaced() -> Never {
        emit(["event": "replaced"])
        releaseHeld()
        device.disconnect()
        exit(0)
    }

    func write(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = Glibc.write(1, raw.baseAddress! + offset, raw.count - offset)
                if n > 0 { offset += n } else if n < 0 && errno == EINTR { continue } else { exit(1) }
            }
        }
    }

    func sendRequest(_ request: DeviceRequest) {
        sending { () throws(DeviceClientError) in try device.request(request) }
    }

    /// Writes to the emulator with `body`; a failure is an event (and, when the connection
    /// dropped with it, an outage).
    func sending(_ body: () throws(DeviceClientError) -> Void) {
        do { try body() } catch {
            emit(.object(errorEvent(code: "not_connected", message: error.description)))
            if !device.isConnected, case .connected = link { connectionLost() }
        }
    }

    func readStdin() {
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        let n = chunk.withUnsafeMutableBytes { Glibc.read(0, $0.baseAddress, $0.count) }
        if n < 0 && (errno == EINTR || errno == EAGAIN) { return }
        if n <= 0 {
            // End of stdin is not a quit: keep serving the socket.
            stdinOpen = false
            if !stdinBuffer.isEmpty && !discardingLongLine { command(stdinBuffer) }
            stdinBuffer = []
            return
        }
        var start = 0
        for index in 0..<n where chunk[index] == UInt8(ascii: "\n") {
            let piece = chunk[start..<index]
            if discardingLongLine {
                discardingLongLine = false
            } else if stdinBuffer.count + piece.count > Self.maxCommandBytes {
                emit(.object(errorEvent(code: "bad_command", message: "command line longer than \(Self.maxCommandBytes) bytes")))
            } else {
                command(stdinBuffer + piece)
            }
            stdinBuffer = []
            start = index + 1
        }
        if !discardingLongLine { stdinBuffer.append(contentsOf: chunk[start..<n]) }
        if stdinBuffer.count > Self.maxCommandBytes {
            emit(.object(errorEvent(code: "bad_command", message: "command line longer than \(Self.maxCommandBytes) bytes")))
            stdinBuffer = []
            discardingLongLine = true
        }
    }
}
