// RedisTestSupport: a real redis-server process for tests, one job. Imports Foundation, Glibc
// and TestSupport (its tool lookup and free ports).
import Foundation
import Glibc
import TestSupport

/// A real `redis-server` for tests: a free loopback port, its own temporary directory, no
/// persistence. Use it from one test at a time.
///
/// Finds `redis-server` at $REDIS_SERVER, else as `ExternalTool.redisServer`, and throws a
/// clear error when it is missing; tests that need it say `.requires(.redisServer)`, so a
/// machine without Redis skips them with that message (scripts/deps.sh test installs it).
public final class RedisServerProcess: @unchecked Sendable {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    public let port: Int
    /// Set with --requirepass; clients must AUTH.
    public let password: String?
    public let directory: String
    private let executable: String
    /// The running server's process id; nil once it exited and was reaped.
    public private(set) var pid: pid_t?

    /// redis://[:password@]127.0.0.1:port
    public var url: String { "redis://" + (password.map { ":\($0)@" } ?? "") + "127.0.0.1:\(port)" }

    /// Set: an append-only file synced at every write, so a restart keeps the data (as a
    /// production Redis would).
    public let persistent: Bool
    /// More redis-server options (a cluster node's).
    public let extraArguments: [String]

    public init(password: String? = nil, persistent: Bool = false, extraArguments: [String] = []) throws {
        self.persistent = persistent
        self.extraArguments = extraArguments
        executable = try Self.findExecutable()
        self.password = password
        directory =
            FileManager.default.temporaryDirectory
            .appendingPathComponent("redis-test-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // A port found free can be taken before redis-server binds it: then try another. Below
        // the ephemeral range, so that `restart()` finds it still free (see
        // `freePortOutsideEphemeralRange`).
        var failures: [String] = []
        for _ in 0..<5 {
            let port = try freePortOutsideEphemeralRange()
            do {
                pid = try Self.launch(
                    executable, port: port, password: password, persistent: persistent, directory: directory, extra: extraArguments)
                self.port = port
                return
            } catch {
                failures.append("\(error)")
            }
        }
        try? FileManager.default.removeItem(atPath: directory)
        throw Failure(description: "redis-server did not start: \(failures.joined(separator: "; "))")
    }

    deinit {
        kill()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// SIGTERM and wait: Redis closes its connections and exits.
    public func stop() {
        guard let pid else { return }
        Glibc.kill(pid, SIGTERM)
        Glibc.kill(pid, SIGCONT)  // a paused server acts on SIGTERM only once it runs again
        Self.reap(pid)
        self.pid = nil
    }

    /// SIGKILL and wait: the kernel resets the connections, with no goodbye from Redis.
    public func kill() {
        guard let pid else { return }
        Glibc.kill(pid, SIGKILL)
        Self.reap(pid)
        self.pid = nil
    }

    /// SIGSTOP: the server keeps its port (the kernel still accepts connections) but answers nothing.
    public func pause() {
        if let pid { Glibc.kill(pid, SIGSTOP) }
    }

    /// SIGCONT after `pause()`.
    public func resume() {
        if let pid { Glibc.kill(pid, SIGCONT) }
    }

    /// Stops the server and starts a new one on the same port, with no data (nothing is saved).
    public func restart() throws {
        stop()
        pid = try Self.launch(
            executable, port: port, password: password, persistent: persistent, directory: directory, extra: extraArguments)
    }

    // MARK: - Internals

    private static func findExecutable() throws -> String {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment["REDIS_SERVER"] {
            guard FileManager.default.isExecutableFile(atPath: path) else {
                throw Failure(description: "REDIS_SERVER=\(path) is not an executable")
            }
            return path
        }
        if let path = ExternalTool.redisServer.path { return path }
        throw Failure(
            description: "redis-server is not installed (not on PATH): these tests need a real Redis. "
                + "Install it with `scripts/deps.sh test` (Debian package redis-server) or set REDIS_SERVER=/path/to/redis-server")
    }

    /// Starts redis-server and waits until its log says it listens and it answers PING. posix_spawn rather than Foundation's
    /// Process: a child started from a test thread would inherit that thread's blocked signals
    /// (libdispatch workers block nearly all), and then ignore SIGTERM.
    private static func launch(
        _ executable: String, port: Int, password: String?, persistent: Bool, directory: String, extra: [String]
    ) throws -> pid_t {
        let log = directory + "/redis-\(port).log"
        try? FileManager.default.removeItem(atPath: log)  // a restart's readiness is read from a fresh log
        var arguments = [
            executable, "--port", "\(port)", "--bind", "127.0.0.1", "--save", "", "--appendonly", persistent ? "yes" : "no", "--appendfsync",
            "always",
            "--dir", directory, "--logfile", log, "--daemonize", "no",
        ]
        if let password { arguments += ["--requirepass", password] }
        arguments += extra.map { $0.replacingOccurrences(of: "{port}", with: String(port)) }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var defaultSignals = sigset_t()
        sigemptyset(&defaultSignals)
        for signal in [SIGPIPE, SIGTERM, SIGINT, SIGHUP] { sigaddset(&defaultSignals, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaultSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var files = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&files)
        defer { posix_spawn_file_actions_destroy(&files) }
        posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&files, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&files, 2, "/dev/null", O_WRONLY, 0)

        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &files, &attributes, &argv, environ)
        guard rc == 0 else { throw Failure(description: "cannot start \(executable): \(String(cString: strerror(rc)))") }

        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                let tail = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").suffix(3)
                throw Failure(description: "redis-server on port \(port) exited (wait status \(status)): \(tail.joined(separator: " | "))")
            }
            // Ours, not another test's that bound the port first (this one then fails to bind and
            // exits, while PING on the port still answers): its own log says it is listening.
            if logSaysListening(log), answersPing(port: port) { return pid }
            usleep(10_000)
        }
        Glibc.kill(pid, SIGKILL)
        reap(pid)
        throw Failure(description: "redis-server on port \(port) did not answer PING within 10 s")
    }

    private static func logSaysListening(_ log: String) -> Bool {
        ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("Ready to accept connections")
    }

    private static func reap(_ pid: pid_t) {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
    }

    /// True once the server answers PING (with +PONG, or -NOAUTH when it wants a password).
    private static func answersPing(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        var timeout = timeval(tv_sec: 0, tv_usec: 500_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = loopback(port: port)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return false }
        let ping = Array("PING\r\n".utf8)
        guard send(fd, ping, ping.count, Int32(MSG_NOSIGNAL)) == ping.count else { return false }
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = recv(fd, &buffer, buffer.count, 0)
        guard n > 0 else { return false }
        let answer = String(decoding: buffer[..<n], as: UTF8.self)
        return answer.hasPrefix("+PONG") || answer.hasPrefix("-NOAUTH")
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return address
    }
}
