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
            } else if !welcomed, let deadline = welcomeDeadline {
                timeout = Int32(clamping: max(0, deadline - Monotonic.nowMilliseconds()))
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
            if case .connected = link, !welcomed, let deadline = welcomeDeadline, Monotonic.nowMilliseconds() >= deadline {
                // Something answers at that address, but not as the emulator does.
                device.disconnect()
                connectionFailed("no welcome from \(device.address) within \(Self.welcomeTimeoutMs / 1000) s after hello")
            }
            if case .retrying(let at) = link, Monotonic.nowMilliseconds() >= at {
                attemptConnect(first: false)
            }
        }
    }

    /// How long a connection may go without `welcome` before it counts as failed.
    static let welcomeTimeoutMs: Int64 = 10_000

    func attemptConnect(first: Bool) {
        welcomed = false
        do {
            try device.open(timeoutMilliseconds: 3000)
            link = .connected
            welcomeDeadline = Monotonic.nowMilliseconds() + Self.welcomeTimeoutMs
        } catch {
            connectionFailed(error.description)
        }
    }

    /// A connection failed before or after `welcome`: with `--no-retry`, before the first
    /// welcome ever, that ends the command (status 1); otherwise it is an outage, retried.
    func connectionFailed(_ reason: String) {
        welcomeDeadline = nil
        if !everWelcomed && !retryFirstConnect {
            emit(["event": "disconnected", "reason": .string(reason)])
            releaseHeld()  // events of the read that found the connection closed
            FileHandle.standardError.write(Data("apns-emulator: \(reason)\n".utf8))
            exit(1)
        }
        announceOutage(reason)
        scheduleRetry()
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
        if device.wasRemoved { removed() }
        var reason = device.disconnectReason ?? "connection closed"
        if !welcomed && device.tls == nil {
            reason +=
                " (before welcome: is it the emulator's device listener, serve's --device-listen, default 127.0.0.1:5223? "
                + "Provider ports such as 2197 and 2198 take no devices; if the emulator runs with --device-tls, add --tls)"
        }
        connectionFailed(reason)
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

    /// The device was deleted through the admin API: there is nothing left to run (a
    /// reconnect would create it anew, with new tokens).
    func removed() -> Never {
        emit(["event": "removed", "deviceId": .string(device.deviceID)])
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
