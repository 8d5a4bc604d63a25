import Glibc
import CLinux

/// A `HOST:PORT` pair as given on the command line: `127.0.0.1:2197`, `localhost:0`,
/// `[::1]:8197`. Port 0 asks the kernel for a free port.
public struct HostPort: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: UInt16

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    public struct ParseError: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    public init(parsing text: String) throws(ParseError) {
        let host: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw ParseError(description: "'\(text)' is not HOST:PORT (IPv6 hosts go in brackets: [::1]:2197)")
            }
            host = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":") else {
                throw ParseError(description: "'\(text)' is not HOST:PORT (for example 127.0.0.1:2197)")
            }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        }
        guard !host.isEmpty else { throw ParseError(description: "'\(text)' has no host (for example 127.0.0.1:2197)") }
        guard let port = UInt16(portText) else {
            throw ParseError(description: "'\(text)' has port '\(portText)'; a port is a number from 0 to 65535")
        }
        self.host = String(host)
        self.port = port
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// Thin wrappers over BSD sockets. Descriptors are close-on-exec and, where the caller asks,
/// non-blocking.
public enum Socket {
    /// Resolves a host name or address to socket addresses.
    static func resolve(_ address: HostPort, passive: Bool) throws(SystemError) -> [(family: Int32, storage: sockaddr_storage, length: socklen_t)] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = passive ? AI_PASSIVE : 0
        var result: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(address.host, String(address.port), &hints, &result)
        guard status == 0, let first = result else {
            throw SystemError(operation: "resolve \(address.host): \(String(cString: gai_strerror(status)))", code: 0)
        }
        defer { freeaddrinfo(first) }
        var out: [(Int32, sockaddr_storage, socklen_t)] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let info = cursor {
            var storage = sockaddr_storage()
            withUnsafeMutableBytes(of: &storage) { raw in
                raw.copyMemory(from: UnsafeRawBufferPointer(start: info.pointee.ai_addr, count: Int(info.pointee.ai_addrlen)))
            }
            out.append((info.pointee.ai_family, storage, info.pointee.ai_addrlen))
            cursor = info.pointee.ai_next
        }
        return out
    }

    /// Binds and listens; returns the descriptor and the address actually bound (the real
    /// port when 0 was asked for).
    public static func listen(_ address: HostPort, backlog: Int32 = 1024) throws(SystemError) -> (fd: Int32, bound: HostPort) {
        var lastError = SystemError(operation: "bind \(address)", code: EADDRNOTAVAIL)
        for candidate in try resolve(address, passive: true) {
            let fd = socket(candidate.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            guard fd >= 0 else { lastError = .last("socket"); continue }
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            var storage = candidate.storage
            let bound = withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, candidate.length) }
            }
            guard bound == 0 else {
                lastError = SystemError(operation: "bind \(address)", code: errno)
                close(fd)
                continue
            }
            guard Glibc.listen(fd, backlog) == 0 else {
                lastError = .last("listen \(address)")
                close(fd)
                continue
            }
            return (fd, HostPort(host: address.host, port: localPort(fd)))
        }
        throw lastError
    }

    public static func localPort(_ fd: Int32) -> UInt16 {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return port(of: storage)
    }

    static func port(of storage: sockaddr_storage) -> UInt16 {
        var copy = storage
        return withUnsafePointer(to: &copy) { pointer -> UInt16 in
            if Int32(storage.ss_family) == AF_INET6 {
                return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
            }
            return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
        }
    }

    /// Text form of a peer address ("127.0.0.1:53412").
    static func describe(_ storage: sockaddr_storage) -> String {
        var copy = storage
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        let length = socklen_t(Int32(storage.ss_family) == AF_INET6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafePointer(to: &copy) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getnameinfo($0, length, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST)
            }
        }
        let name = ok == 0 ? String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?"
        return HostPort(host: name, port: port(of: storage)).description
    }

    /// What `accept` took from the backlog.
    public enum Accepted {
        case connection(fd: Int32, peer: String)
        /// No connection is waiting (EAGAIN), or it went away before it was taken.
        case none
        /// Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM): the connection
        /// stays in the backlog, so the listener must stop asking for a while.
        case exhausted(errno: Int32)
    }

    /// Accepts one pending connection without waiting for one.
    /// The new descriptor is non-blocking and close-on-exec from the start (accept4): no
    /// window in which a fork+exec elsewhere in the process inherits it, and no extra fcntl
    /// calls per connection.
    public static func accept(_ listener: Int32) -> Accepted {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let flags = Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        let fd = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { accept4(listener, $0, &length, flags) }
        }
        guard fd >= 0 else {
            let code = errno
            switch code {
            case EMFILE, ENFILE, ENOBUFS, ENOMEM: return .exhausted(errno: code)
            default: return .none
            }
        }
        setNoDelay(fd)
        return .connection(fd: fd, peer: describe(storage))
    }

    /// A blocking client connection with a timeout for the connect itself.
    /// `receiveBuffer` sets SO_RCVBUF before connecting (a small one makes a slow reader in tests).
    public static func connect(
        to address: HostPort, timeoutMilliseconds: Int32 = 5000,
        receiveBuffer: Int32? = nil
    ) throws(SystemError) -> Int32 {
        var lastError = SystemError(operation: "connect \(address)", code: ECONNREFUSED)
        for candidate in try resolve(address, passive: false) {
            let fd = socket(candidate.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            guard fd >= 0 else { lastError = .last("socket"); continue }
            if var size = receiveBuffer {
                setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            }
            var storage = candidate.storage
            var result = withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, candidate.length) }
            }
            if result != 0 && errno == EINPROGRESS {
                var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                if poll(&pfd, 1, timeoutMilliseconds) == 1 {
                    var error: Int32 = 0
                    var length = socklen_t(MemoryLayout<Int32>.size)
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
                    result = error == 0 ? 0 : -1
                    errno = error
                } else {
                    errno = ETIMEDOUT
                }
            }
            guard result == 0 else {
                lastError = SystemError(operation: "connect \(address)", code: errno)
                close(fd)
                continue
            }
            setBlocking(fd, true)
            setNoDelay(fd)
            return fd
        }
        throw lastError
    }

    public static func setBlocking(_ fd: Int32, _ blocking: Bool) {
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK)
    }

    public static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Sets SO_RCVTIMEO/SO_SNDTIMEO on a blocking socket.
    public static func setTimeouts(_ fd: Int32, milliseconds: Int) {
        var tv = timeval(tv_sec: milliseconds / 1000, tv_usec: (milliseconds % 1000) * 1000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }
}

/// The process's open-file limit.
public enum OpenFileLimit {
    /// Raises the soft limit to the hard one (an emulator holding thousands of connections
    /// needs more than the usual 1024). Returns the soft limit before and after.
    @discardableResult
    public static func raiseToHardLimit() -> (before: UInt64, after: UInt64) {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return (0, 0) }
        let before = UInt64(limit.rlim_cur)
        guard limit.rlim_cur < limit.rlim_max else { return (before, before) }
        limit.rlim_cur = limit.rlim_max
        guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return (before, before) }
        return (before, UInt64(limit.rlim_max))
    }

    public static var current: UInt64 {
        var limit = rlimit()
        return getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 ? UInt64(limit.rlim_cur) : 0
    }
}
