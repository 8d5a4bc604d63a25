import Glibc
import Networking

/// A non-blocking client socket whose every wait ends at the exchange's deadline.
struct DeadlineConnection {
    private let fd: Int32
    private let peer: String
    private let deadline: Deadline
    /// Only for messages ("no answer … within 300 ms").
    private let timeoutMs: Int

    static func open(to address: HostPort, deadline: Deadline, timeoutMs: Int) throws(HTTP1ClientError) -> DeadlineConnection {
        let fd: Int32
        do {
            fd = try Socket.connect(to: address, timeoutMilliseconds: max(1, deadline.remainingMs))
        } catch {
            if error.code == ETIMEDOUT {
                throw HTTP1ClientError(.timedOut, phase: .connecting, "no connection to \(address) within \(timeoutMs) ms")
            }
            // Resolver failures carry no errno; their text is in the operation.
            throw HTTP1ClientError(.cannotConnect, phase: .connecting, error.code == 0 ? error.operation : error.description)
        }
        Socket.setBlocking(fd, false)
        return DeadlineConnection(fd: fd, peer: address.description, deadline: deadline, timeoutMs: timeoutMs)
    }

    func close() { _ = Glibc.close(fd) }

    func send(_ bytes: [UInt8]) throws(HTTP1ClientError) {
        var offset = 0
        while offset < bytes.count {
            guard wait(for: POLLOUT) else {
                throw HTTP1ClientError(.timedOut, phase: .sending, "\(peer) did not take the request within \(timeoutMs) ms")
            }
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent > 0 {
                offset += sent
            } else if sent < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
                continue
            } else {
                throw HTTP1ClientError(.closedEarly, phase: .sending, "\(peer) closed the connection while the request was sent")
            }
        }
    }

    func receive(isHeadRequest: Bool, maxResponseBytes: Int, whenLarger: OversizedAnswer = .fail) throws(HTTP1ClientError) -> HTTP1Response {
        var reader = ResponseReader(isHeadRequest: isHeadRequest)
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        func failure(_ kind: HTTP1ClientError.Kind, _ message: String) -> HTTP1ClientError {
            HTTP1ClientError(kind, phase: reader.hasHead ? .receivingBody : .receivingHead, bytesReceived: reader.bytes.count, message)
        }
        while true {
            guard wait(for: POLLIN) else {
                throw failure(
                    .timedOut,
                    reader.hasHead
                        ? "the answer from \(peer) did not complete within \(timeoutMs) ms"
                        : "no answer from \(peer) within \(timeoutMs) ms")
            }
            // One byte past the limit is enough to know the answer is over it.
            let left = maxResponseBytes - reader.bytes.count
            let room = left < buffer.count ? left + 1 : buffer.count
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, room, 0) }
            if count < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) { continue }
            if count < 0 { throw failure(.closedEarly, cutShortMessage(reader)) }
            reader.append(buffer[..<count])
            if reader.bytes.count > maxResponseBytes {
                if case .cut = whenLarger, let cut = try? reader.cutResponse(bodyLimit: maxResponseBytes) { return cut }
                throw failure(.responseTooLarge, "the answer from \(peer) is larger than \(maxResponseBytes) bytes")
            }
            do {
                if let response = try reader.response(atEnd: count == 0) { return response }
            } catch {
                switch error {
                case .malformed(let why): throw failure(.malformedResponse, why)
                case .cutShort: throw failure(.closedEarly, cutShortMessage(reader))
                }
            }
        }
    }

    private func cutShortMessage(_ reader: ResponseReader) -> String {
        if reader.hasHead { return "the answer from \(peer) ended early (the connection closed before the whole body came)" }
        if reader.bytes.isEmpty { return "\(peer) closed the connection without answering" }
        return "\(peer) closed the connection in the middle of the answer's head (\(reader.bytes.count) bytes)"
    }

    /// Waits until the socket is ready for `events` (or has an error to report); false when
    /// the deadline passed first.
    private func wait(for events: Int32) -> Bool {
        while true {
            var entry = pollfd(fd: fd, events: Int16(events), revents: 0)
            let ready = poll(&entry, 1, deadline.remainingMs)
            if ready > 0 { return true }
            if ready == 0 { return false }
            if errno != EINTR { return true }  // let the send or recv report the error
        }
    }
}
