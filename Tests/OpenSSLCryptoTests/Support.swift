// OpenSSLCryptoTests: the OpenSSL wrapper (ES256, keys, TLS, test certificates), checked
// against the openssl command line too. Imports OpenSSLCrypto and TestSupport.
import Foundation
import Glibc
import Testing
import TestSupport
import OpenSSLCrypto

/// A fresh directory under the system temp dir; call `remove()` when done.
struct TemporaryDirectory {
    let path: String

    init() throws {
        var template = Array((NSTemporaryDirectory() + "/openssl-crypto-tests.XXXXXX").utf8CString)
        guard let created = mkdtemp(&template) else {
            throw CryptoError(message: "mkdtemp failed: \(String(cString: strerror(errno)))")
        }
        path = String(cString: created)
    }

    func file(_ name: String) -> String { path + "/" + name }

    func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// Runs a command (looked up on PATH) with no stdin and collects its output.
@discardableResult
func run(_ arguments: [String], workingDirectory: String? = nil) throws -> CommandResult {
    try run("/usr/bin/env", arguments, workingDirectory: workingDirectory, timeout: 120)
}

/// Runs a command and fails the test (by throwing) unless it exits 0.
@discardableResult
func runChecked(_ arguments: [String], workingDirectory: String? = nil) throws -> CommandResult {
    let result = try run(arguments, workingDirectory: workingDirectory)
    guard result.status == 0 else {
        throw CryptoError(message: "\(arguments.joined(separator: " ")) exited \(result.status): \(result.err)")
    }
    return result
}

func readText(_ path: String) throws -> String {
    try String(contentsOfFile: path, encoding: .utf8)
}

func readBytes(_ path: String) throws -> [UInt8] {
    [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
}

// MARK: - Socket pair and threads for TLS tests

/// A connected AF_UNIX stream pair. Blocking, with 10 s send/receive timeouts so a broken
/// handshake shows up as a failure (`.wantRead`) instead of hanging the test run.
func makeSocketPair(nonBlocking: Bool = false) throws -> (Int32, Int32) {
    // OpenSSL writes with write(2); a peer that has gone must give EPIPE, not kill the runner.
    signal(SIGPIPE, SIG_IGN)
    var fds: [Int32] = [0, 0]
    guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else {
        throw CryptoError(message: "socketpair failed: \(String(cString: strerror(errno)))")
    }
    for fd in fds {
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        if nonBlocking {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
    }
    return (fds[0], fds[1])
}

/// Runs blocking work on a dedicated thread, so the two ends of a handshake never depend on
/// the (small) cooperative thread pool to make progress.
func onThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: body()) }.start()
    }
}

/// What one side saw after its handshake.
struct HandshakeOutcome: Sendable {
    let result: TLSIOResult
    let alpn: String?
    let serverName: String?
    let version: String
    let peerCertificate: [UInt8]?

    var succeeded: Bool { result == .ok(0) }
}

/// Handshakes both ends over a fresh blocking socket pair on two threads. On failure a side
/// shuts its socket down so the other end sees EOF instead of waiting for the timeout.
/// `afterHandshake` runs on each side's thread only when that side succeeded.
func handshakePair(
    server serverContext: TLSContext, client clientContext: TLSContext, serverName: String? = nil,
    serverAfterHandshake: (@Sendable (TLSConnection) -> Void)? = nil,
    clientAfterHandshake: (@Sendable (TLSConnection) -> Void)? = nil
) async throws
    -> (server: HandshakeOutcome, client: HandshakeOutcome)
{
    let (serverFD, clientFD) = try makeSocketPair()
    defer {
        close(serverFD)
        close(clientFD)
    }
    let server = try TLSConnection(context: serverContext, fd: serverFD, isServer: true)
    let client = try TLSConnection(context: clientContext, fd: clientFD, isServer: false, serverName: serverName)

    @Sendable func drive(_ connection: TLSConnection, fd: Int32, after: (@Sendable (TLSConnection) -> Void)?) -> HandshakeOutcome {
        let result = connection.handshake()
        if result == .ok(0) {
            after?(connection)
        } else {
            Glibc.shutdown(fd, Int32(SHUT_RDWR))
        }
        return HandshakeOutcome(
            result: result, alpn: connection.negotiatedALPN,
            serverName: connection.requestedServerName, version: connection.protocolVersion,
            peerCertificate: connection.peerCertificateDER)
    }
    return onTwoThreads(
        { drive(server, fd: serverFD, after: serverAfterHandshake) },
        { drive(client, fd: clientFD, after: clientAfterHandshake) })
}

/// A value handed from a thread to its joiner (the semaphore orders the accesses).
final class Slot<T>: @unchecked Sendable {
    var value: T?
}

/// Runs both closures at once on two new threads and waits for both. Unlike `async let`,
/// this does not need a free thread in Swift's cooperative pool, which the suite's blocking
/// integration tests can keep busy on a 2-core machine.
func onTwoThreads<A: Sendable, B: Sendable>(_ a: @escaping @Sendable () -> A, _ b: @escaping @Sendable () -> B) -> (A, B) {
    let first = Slot<A>()
    let second = Slot<B>()
    let done = DispatchSemaphore(value: 0)
    Thread {
        first.value = a(); done.signal()
    }.start()
    Thread {
        second.value = b(); done.signal()
    }.start()
    done.wait()
    done.wait()
    return (first.value!, second.value!)
}

/// A CA + server certificate in a temporary directory, shared by a test.
struct TestPKI {
    let directory: TemporaryDirectory
    let caPath: String
    let certificatePath: String
    let keyPath: String

    init() throws {
        directory = try TemporaryDirectory()
        (caPath, certificatePath, keyPath) = try TestCertificates.generate(into: directory.path)
    }

    func serverContext() throws -> TLSContext {
        try TLSContext.server(certificateChainPath: certificatePath, privateKeyPath: keyPath)
    }
}

extension TLSIOResult {
    var isFailure: Bool {
        if case .failed = self { return true }
        return false
    }

    var failureText: String {
        if case .failed(let text) = self { return text }
        return ""
    }
}

/// A listening TCP socket on 127.0.0.1 with a free port; accept() gives up after 10 s
/// instead of hanging a broken test.
func loopbackListener() throws -> (fd: Int32, port: UInt16) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw CryptoError(message: "socket failed") }
    var timeout = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
            bind(fd, generic, length) == 0 && listen(fd, 8) == 0 && getsockname(fd, generic, &length) == 0
        }
    }
    guard bound else {
        close(fd)
        throw CryptoError(message: "bind/listen failed: \(String(cString: strerror(errno)))")
    }
    return (fd, UInt16(bigEndian: address.sin_port))
}
