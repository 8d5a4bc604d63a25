import Glibc
import Testing
@testable import Networking

@Suite struct SocketTests {
    @Test func acceptedSocketsAreNonBlockingAndCloseOnExec() throws {
        let (listener, address) = try Socket.listen(HostPort(host: "127.0.0.1", port: 0))
        defer { close(listener) }
        guard case .none = Socket.accept(listener) else {
            Issue.record("accepted a connection nobody made")
            return
        }
        let client = try Socket.connect(to: address)
        defer { close(client) }
        var pfd = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        #expect(poll(&pfd, 1, 5000) == 1)
        guard case .connection(let fd, let peer) = Socket.accept(listener) else {
            Issue.record("no connection accepted")
            return
        }
        defer { close(fd) }
        #expect(fcntl(fd, F_GETFL) & O_NONBLOCK != 0)
        #expect(fcntl(fd, F_GETFD) & FD_CLOEXEC != 0)
        #expect(peer.hasPrefix("127.0.0.1:"))
        // Non-blocking: nothing to read is EAGAIN, not a wait.
        var byte: UInt8 = 0
        #expect(recv(fd, &byte, 1, 0) == -1 && errno == EAGAIN)
    }
}
