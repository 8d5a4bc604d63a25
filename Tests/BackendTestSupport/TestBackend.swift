import Foundation
import Glibc
import Locking
import MonotonicClock
import Networking

/// A real HTTP/1.1 server on loopback standing in for an app's backend: it records every
/// request and answers as the test's `answer` function says. One thread accepts; each
/// connection gets a thread of its own, so a held answer does not hold up the others.
/// Shared by the BackendCalls tests and the integration tests.
public final class TestBackend: Sendable {
    public struct Request: Sendable, Equatable {
        public var method: String
        public var target: String
        /// Field names lowercased.
        public var headers: [String: String]
        public var body: [UInt8]
        /// When the whole request had arrived (`Monotonic.nowMilliseconds()`).
        public var receivedAtMs: Int64
        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    public enum Answer: Sendable {
        /// A status with a Content-Length body, or a chunked one (two chunks, an extension, a trailer).
        case status(Int, body: String = "", chunked: Bool = false)
        /// Written as it is; then the connection closes.
        case raw(String)
        /// No answer until `release()` (then this status), or the connection closes on `stop()`.
        case hold(then: Int)
        /// This status with a 1000-byte body, one byte every `everyMs` (a backend answering at
        /// 1 byte/s when `everyMs` is 1000), until the client or `stop()` closes.
        case trickle(Int, everyMs: Int)
    }

    public let address: HostPort
    private let listener: Int32
    /// The answer for a request, given how many earlier requests had the same target.
    private let answer: @Sendable (Request, Int) -> Answer
    private let state = Locked(State())
    private let acceptorDone = DispatchSemaphore(value: 0)

    private struct State {
        var requests: [Request] = []
        var stopped = false
        var released = false
    }

    public init(host: String = "127.0.0.1", port: UInt16 = 0, answer: @escaping @Sendable (Request, Int) -> Answer = { _, _ in .status(200) }) throws
    {
        (listener, address) = try Socket.listen(HostPort(host: host, port: port))
        self.answer = answer
        Thread { [self] in acceptLoop() }.start()
    }

    public var requests: [Request] { state.withLock { $0.requests } }
    public var targets: [String] { requests.map(\.target) }

    /// `http://address` + path.
    public func url(_ path: String) -> String { "http://\(address)\(path)" }

    /// Held answers go out.
    public func release() { state.withLock { $0.released = true } }

    /// Closes the listener (connections are refused from now on) and every held connection.
    /// Every test stops its servers: the accepting thread keeps the server alive until then.
    public func stop() {
        let first = state.withLock { state in
            defer { state.stopped = true }
            return !state.stopped
        }
        if first { acceptorDone.wait() }
    }

    private var stopped: Bool { state.withLock { $0.stopped } }

    private func acceptLoop() {
        while !stopped {
            var entry = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, 10) > 0, case .connection(let fd, _) = Socket.accept(listener) else { continue }
            Thread { [self] in serve(fd) }.start()
        }
        close(listener)
        acceptorDone.signal()
    }

    private func serve(_ fd: Int32) {
        defer { close(fd) }
        Socket.setBlocking(fd, true)
        Socket.setTimeouts(fd, milliseconds: 5000)
        guard let request = Self.readRequest(fd) else { return }
        let seen = state.withLock { state in
            defer { state.requests.append(request) }
            return state.requests.filter { $0.target == request.target }.count
        }
        switch answer(request, seen) {
        case .status(let status, let body, let chunked):
            Self.write(fd, Self.response(status: status, body: body, chunked: chunked))
        case .raw(let text):
            Self.write(fd, text)
        case .hold(let status):
            while true {
                let (released, stopped) = state.withLock { ($0.released, $0.stopped) }
                if stopped { return }
                if released { break }
                usleep(2000)
            }
            Self.write(fd, Self.response(status: status, body: "", chunked: false))
        case .trickle(let status, let everyMs):
            for byte in Self.response(status: status, body: String(repeating: "x", count: 1000), chunked: false).utf8 {
                guard !stopped, Self.write(fd, [byte]) else { return }
                usleep(useconds_t(everyMs) * 1000)
            }
        }
    }

    public static func response(status: Int, body: String, chunked: Bool) -> String {
        let head = "HTTP/1.1 \(status) Test\r\nConnection: close\r\n"
        guard chunked else { return head + "Content-Length: \(body.utf8.count)\r\n\r\n" + body }
        let bytes = Array(body.utf8)
        let half = bytes.count / 2
        let chunks = [Array(bytes[..<half]), Array(bytes[half...])].filter { !$0.isEmpty }
        return head + "Transfer-Encoding: chunked\r\n\r\n"
            + chunks.map { String($0.count, radix: 16) + ";note=x\r\n" + String(decoding: $0, as: UTF8.self) + "\r\n" }.joined()
            + "0\r\nX-Trailer: done\r\n\r\n"
    }

    /// The request head and its Content-Length body; nil when the client went away first.
    private static func readRequest(_ fd: Int32) -> Request? {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            if let end = bytes.firstRange(of: [13, 10, 13, 10]) {
                let lines = String(decoding: bytes[..<end.lowerBound], as: UTF8.self).split(separator: "\r\n")
                let words = lines.first?.split(separator: " ") ?? []
                guard words.count == 3 else { return nil }
                var headers: [String: String] = [:]
                for line in lines.dropFirst() {
                    guard let colon = line.firstIndex(of: ":") else { return nil }
                    headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                }
                let length = Int(headers["content-length"] ?? "0") ?? 0
                if bytes.count - end.upperBound >= length {
                    return Request(
                        method: String(words[0]), target: String(words[1]), headers: headers,
                        body: Array(bytes[end.upperBound..<end.upperBound + length]),
                        receivedAtMs: Monotonic.nowMilliseconds())
                }
            }
            let count = recv(fd, &buffer, buffer.count, 0)
            guard count > 0 else { return nil }
            bytes.append(contentsOf: buffer[..<count])
        }
    }

    private static func write(_ fd: Int32, _ text: String) { _ = write(fd, Array(text.utf8)) }

    /// False when the client has gone.
    private static func write(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }
}
