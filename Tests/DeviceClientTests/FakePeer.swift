import APNsCore
import Foundation
import Glibc
import MonotonicClock
import Networking
import Synchronization
#if canImport(OpenSSLCrypto)
import OpenSSLCrypto
import Locking
#endif

struct PeerError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A scripted stand-in for the emulator's device listener (docs/device-protocol.md): a
/// loopback listener on a free port whose script runs on its own thread, accepting and
/// talking to connections with blocking reads that time out. `finish()` waits for the script
/// and rethrows what it threw, so assertions inside the script fail the test.
final class FakePeer: Sendable {
    let address: HostPort
    private let listenFD: Int32
    private let done = DispatchSemaphore(value: 0)
    private let failure = Locked<String?>(nil)
    #if canImport(OpenSSLCrypto)
    private let tlsContext: TLSContext?
    #endif

    #if canImport(OpenSSLCrypto)
    init(port: UInt16 = 0, tls: TLSContext? = nil, _ script: @escaping @Sendable (FakePeer) throws -> Void) throws {
        tlsContext = tls
        (listenFD, address) = try Socket.listen(HostPort(host: "127.0.0.1", port: port))
        start(script)
    }
    #else
    init(port: UInt16 = 0, _ script: @escaping @Sendable (FakePeer) throws -> Void) throws {
        (listenFD, address) = try Socket.listen(HostPort(host: "127.0.0.1", port: port))
        start(script)
    }
    #endif

    private func start(_ script: @escaping @Sendable (FakePeer) throws -> Void) {
        let thread = Thread { [self] in
            do { try script(self) } catch { failure.withLock { $0 = "fake peer: \(error)" } }
            done.signal()
        }
        thread.start()
    }

    deinit { close(listenFD) }

    /// Accepts the next connection (TLS handshake included when the peer has a TLS context).
    func accept(timeoutMilliseconds: Int = 5000) throws -> PeerConnection {
        let deadline = Monotonic.nowMilliseconds() + Int64(timeoutMilliseconds)
        while true {
            if case .connection(let fd, _) = Socket.accept(listenFD) {
                Socket.setBlocking(fd, true)
                let connection = PeerConnection(fd: fd)
                #if canImport(OpenSSLCrypto)
                if let tlsContext { try connection.startTLS(tlsContext) }
                #endif
                return connection
            }
            let remaining = deadline - Monotonic.nowMilliseconds()
            guard remaining > 0 else { throw PeerError("no connection within \(timeoutMilliseconds) ms") }
            var pfd = pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0)
            _ = poll(&pfd, 1, Int32(remaining))
        }
    }

    /// No connection is waiting to be accepted. A check, not a wait: make it once whatever
    /// would have connected has had its chance (the device has exited, or has since answered
    /// commands that show its state).
    func expectNoPendingConnection() throws {
        var pfd = pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0)
        if poll(&pfd, 1, 0) > 0 { throw PeerError("an unexpected connection arrived") }
    }

    /// Waits for the script to end; throws what it threw.
    func finish(timeoutMilliseconds: Int = 15_000) throws {
        guard done.wait(timeout: .now() + .milliseconds(timeoutMilliseconds)) == .success else {
            throw PeerError("the fake peer's script did not finish within \(timeoutMilliseconds) ms")
        }
        if let message = failure.withLock({ $0 }) { throw PeerError(message) }
    }

    /// A deterministic lowercase-hex token (tokens are opaque hex to the device).
    static func token(_ seed: String) -> String {
        seed.utf8.map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }

    /// A `notification` frame exactly as docs/device-protocol.md shows it.
    static func notification(
        id: Int64, apnsID: String = UUID().uuidString, bundleID: String = "com.example.app",
        token: String = FakePeer.token("com.example.app/app"), pushType: String = "alert",
        priority: Int64 = 10, collapseID: String? = nil,
        payload: JSONValue = ["aps": ["alert": "Hello"]], callbacks: [String] = ["willPresent"],
        display: String = "banner", reason: String? = nil, stored: Bool = false
    ) -> JSONValue {
        .object(
            JSONObject([
                ("type", "notification"), ("id", .int(id)), ("apnsId", .string(apnsID)), ("bundleId", .string(bundleID)),
                ("token", .string(token)), ("topic", .string(bundleID)), ("pushType", .string(pushType)),
                ("priority", .int(priority)), ("collapseId", collapseID.map { .string($0) } ?? .null), ("payload", payload),
                ("callbacks", .array(callbacks.map { .string($0) })), ("display", .string(display)),
                ("reason", reason.map { .string($0) } ?? .null), ("stored", .bool(stored)),
            ]))
    }

    static func registered(bundleID: String, environment: String = "sandbox", kind: String = "app", token: String) -> JSONValue {
        let suffix = kind == "app" ? "" : "." + (kind == "liveactivity" ? "push-type.liveactivity" : kind)
        return .object(
            JSONObject([
                ("type", "registered"), ("bundleId", .string(bundleID)), ("environment", .string(environment)),
                ("kind", .string(kind)), ("token", .string(token)), ("topic", .string(bundleID + suffix)),
            ]))
    }
}

/// One accepted connection, used on the fake peer's thread only.
final class PeerConnection {
    let fd: Int32
    private var buffer: [UInt8] = []
    private var closed = false
    #if canImport(OpenSSLCrypto)
    private var tls: TLSConnection?
    #endif

    init(fd: Int32) { self.fd = fd }

    deinit { close() }

    #if canImport(OpenSSLCrypto)
    func startTLS(_ context: TLSContext) throws {
        let connection = try TLSConnection(context: context, fd: fd, isServer: true)
        switch connection.handshake() {
        case .ok: tls = connection
        case let other: throw PeerError("server TLS handshake: \(other)")
        }
    }
    #endif

    func close() {
        guard !closed else { return }
        closed = true
        #if canImport(OpenSSLCrypto)
        tls?.shutdown()
        #endif
        Glibc.close(fd)
    }

    private var hasBuffered: Bool {
        #if canImport(OpenSSLCrypto)
        return tls?.hasBufferedReadData ?? false
        #else
        return false
        #endif
    }

    /// Reads more bytes; false at end of stream.
    private func fill(deadline: Int64) throws -> Bool {
        if !hasBuffered {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let remaining = deadline - Monotonic.nowMilliseconds()
            guard remaining > 0, poll(&pfd, 1, Int32(remaining)) > 0 else { throw PeerError("timed out reading from the device") }
        }
        var chunk = [UInt8](repeating: 0, count: 65536)
        #if canImport(OpenSSLCrypto)
        if let tls {
            switch chunk.withUnsafeMutableBytes({ tls.read(into: $0) }) {
            case .ok(let n): buffer.append(contentsOf: chunk[0..<n]); return true
            case .closed: return false
            case .wantRead, .wantWrite: return true
            case .failed(let message): throw PeerError(message)
            }
        }
        #endif
        let n = recv(fd, &chunk, chunk.count, 0)
        if n <= 0 { return false }
        buffer.append(contentsOf: chunk[0..<n])
        return true
    }

    /// The next line from the device (without `\n`).
    func readLine(timeoutMilliseconds: Int = 5000) throws -> [UInt8] {
        let deadline = Monotonic.nowMilliseconds() + Int64(timeoutMilliseconds)
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(buffer[..<newline])
                buffer.removeFirst(newline + 1)
                return line
            }
            guard try fill(deadline: deadline) else { throw PeerError("the device closed the connection") }
        }
    }

    /// The next frame from the device, which must be a JSON object.
    func readFrame(timeoutMilliseconds: Int = 5000) throws -> JSONObject {
        let line = try readLine(timeoutMilliseconds: timeoutMilliseconds)
        guard let object = try JSONValue.parse(line).objectValue else {
            throw PeerError("the device sent a line that is not an object: \(String(decoding: line, as: UTF8.self))")
        }
        return object
    }

    /// The next frame, which must have this type.
    @discardableResult
    func expect(_ type: String, timeoutMilliseconds: Int = 5000) throws -> JSONObject {
        let frame = try readFrame(timeoutMilliseconds: timeoutMilliseconds)
        guard frame["type"]?.stringValue == type else {
            throw PeerError("expected a \(type) frame, got \(JSONValue.object(frame).serialized())")
        }
        return frame
    }

    /// The device closes the connection (no further frame) within the time.
    func expectEOF(timeoutMilliseconds: Int = 5000) throws {
        let deadline = Monotonic.nowMilliseconds() + Int64(timeoutMilliseconds)
        while try fill(deadline: deadline) {
            if !buffer.isEmpty {
                throw PeerError("expected the device to close, got \(String(decoding: buffer, as: UTF8.self))")
            }
        }
    }

    func send(_ frame: JSONValue) throws {
        try sendRaw(frame.serializedBytes() + [UInt8(ascii: "\n")])
    }

    func sendRaw(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            #if canImport(OpenSSLCrypto)
            if let tls {
                let result = bytes.withUnsafeBytes { tls.write(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
                guard case .ok(let n) = result else { throw PeerError("TLS write: \(result)") }
                offset += n
                continue
            }
            #endif
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw PeerError("write to the device failed: \(String(cString: strerror(errno)))") }
            offset += n
        }
    }

    /// Reads `hello`, answers `welcome` and one `registered` per app kind (token =
    /// `FakePeer.token("<bundle>/<kind>")` plus `tokenSuffix`); returns the hello.
    @discardableResult
    func handshake(tokenSuffix: String = "") throws -> JSONObject {
        let hello = try expect("hello")
        let deviceID = hello["deviceId"]?.stringValue ?? ""
        try send(["type": "welcome", "version": 1, "deviceId": .string(deviceID), "serverTime": 1767225600000])
        for app in hello["apps"]?.arrayValue ?? [] {
            let bundle = app["bundleId"]?.stringValue ?? ""
            for kind in app["kinds"]?.arrayValue?.compactMap(\.stringValue) ?? ["app"] {
                try send(
                    FakePeer.registered(
                        bundleID: bundle, environment: app["environment"]?.stringValue ?? "sandbox",
                        kind: kind, token: FakePeer.token("\(bundle)/\(kind)") + tokenSuffix))
            }
        }
        return hello
    }
}

extension FakePeer {
    /// Runs the device side, then waits for the script; a failure on either side fails the
    /// test with both sides' stories (a device-side error usually follows from a peer one).
    func run(_ body: () throws -> Void) throws {
        var deviceError: (any Error)?
        do { try body() } catch { deviceError = error }
        var peerError: (any Error)?
        do { try finish(timeoutMilliseconds: deviceError == nil ? 15_000 : 6_000) } catch { peerError = error }
        switch (deviceError, peerError) {
        case (nil, nil): return
        case (let device?, nil): throw device
        case (nil, let peer?): throw peer
        case (let device?, let peer?): throw PeerError("device side: \(device); \(peer)")
        }
    }
}
