import Glibc
import CLinux
import Testing
@testable import Networking

@Suite struct RegistrationTests {
    /// Two descriptors are ready in the same epoll_wait batch. Whichever handler runs first
    /// ends the other's registration and puts a new descriptor under the same number (dup2,
    /// as a new connection accepted at that moment would get it), registered with a third
    /// handler. The batch still holds the old descriptor's event: it must be dropped, not
    /// handed to the new registration.
    @Test func anEventOfAnEndedRegistrationDoesNotReachTheNextOneOnTheSameDescriptor() throws {
        try withRunningLoop { loop in
            let a = try makeEventFD(1)
            let b = try makeEventFD(1)
            let handlerA = Recorder()
            let handlerB = Recorder()
            let replacement = Recorder()
            let replaced = Box<Int32?>(nil)
            let failure = Box<(any Error)?>(nil)
            func replace(_ victim: Int32) {
                guard replaced.value == nil else { return }
                replaced.value = victim
                do {
                    try loop.unregister(fd: victim)
                    let fresh = try makeEventFD(0)
                    try replaceDescriptor(victim, with: fresh)
                    close(fresh)
                    try loop.register(fd: victim, events: .read, handler: replacement)
                } catch {
                    failure.value = error
                }
            }
            handlerA.onReadable = {
                drainEventFD(a); replace(b)
            }
            handlerB.onReadable = {
                drainEventFD(b); replace(a)
            }
            // Registered in one task while both are readable already: the next epoll_wait
            // reports both.
            let droppedBefore = try loop.sync {
                try loop.register(fd: a, events: .read, handler: handlerA)
                try loop.register(fd: b, events: .read, handler: handlerB)
                return loop.staleEventsDropped
            }
            try loop.wait { replaced.value != nil }
            _ = try loop.sync {}
            if let error = failure.value { throw error }
            let (readsA, readsB, replacementReads, dropped) = try loop.sync {
                (handlerA.reads, handlerB.reads, replacement.reads, loop.staleEventsDropped)
            }
            #expect(readsA + readsB == 1, "only the handler that ran first was called")
            #expect(replacementReads == 0, "the new registration got the old descriptor's event")
            #expect(dropped - droppedBefore == 1)

            // The new registration itself works.
            let victim = replaced.value!
            try loop.sync { replacement.onReadable = { drainEventFD(victim) } }
            signalEventFD(victim)
            try loop.wait { replacement.reads == 1 }
            try loop.sync {
                try loop.unregister(fd: a)
                try loop.unregister(fd: b)
            }
            close(a)
            close(b)
        }
    }

    @Test func registeringADescriptorTwiceFailsWithEEXISTAndKeepsTheFirstRegistration() throws {
        try withRunningLoop { loop in
            let fd = try makeEventFD()
            defer { close(fd) }
            let first = Recorder()
            let second = Recorder()
            let code = try loop.sync { () -> Int32? in
                first.onReadable = { drainEventFD(fd) }
                try loop.register(fd: fd, events: .read, handler: first)
                return failureCode { try loop.register(fd: fd, events: .read, handler: second) }
            }
            #expect(code == EEXIST)
            signalEventFD(fd)
            try loop.wait { first.reads == 1 }
            #expect(try loop.sync { second.reads } == 0)
            try loop.sync { try loop.unregister(fd: fd) }
        }
    }

    @Test func epollCtlFailuresAreThrown() throws {
        let loop = try EventLoop(name: "not-started")
        let handler = Recorder()
        let fd = try makeEventFD()
        defer { close(fd) }

        // Not registered: nothing to change or remove.
        #expect(failureCode { try loop.modify(fd: fd, events: .write) } == ENOENT)
        #expect(failureCode { try loop.unregister(fd: fd) } == ENOENT)
        // No such descriptor.
        #expect(failureCode { try loop.register(fd: -1, events: .read, handler: handler) } == EBADF)
        #expect(failureCode { try loop.register(fd: Int32.max, events: .read, handler: handler) } == EBADF)
        // Regular files are always ready; epoll refuses them.
        guard let file = tmpfile() else { throw SystemError.last("tmpfile") }
        defer { fclose(file) }
        #expect(failureCode { try loop.register(fd: fileno(file), events: .read, handler: handler) } == EPERM)

        // Replaced behind the loop's back: the kernel forgot the registration with the old file.
        try loop.register(fd: fd, events: .read, handler: handler)
        let other = try makeEventFD()
        try replaceDescriptor(fd, with: other)
        close(other)
        #expect(failureCode { try loop.modify(fd: fd, events: .write) } == ENOENT)
        // The loop's side is cleared even though the kernel has nothing to remove.
        #expect(failureCode { try loop.unregister(fd: fd) } == ENOENT)
        #expect(failureCode { try loop.modify(fd: fd, events: .read) } == ENOENT)
        try loop.register(fd: fd, events: .read, handler: handler)
        try loop.unregister(fd: fd)
    }

    /// A connection whose registration vanished (its descriptor replaced behind its back)
    /// cannot ask for EPOLLOUT when its output backs up: it closes and says why, instead of
    /// waiting forever.
    @Test func aConnectionThatCannotChangeItsRegistrationClosesWithTheError() throws {
        try withRunningLoop { loop in
            var pair: [Int32] = [0, 0]
            var other: [Int32] = [0, 0]
            let stream = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
            guard socketpair(AF_UNIX, stream, 0, &pair) == 0, socketpair(AF_UNIX, stream, 0, &other) == 0 else {
                throw SystemError.last("socketpair")
            }
            defer { close(pair[1]); close(other[1]) }
            let handler = ClosingHandler()
            let connection = Connection(id: 1, loop: loop, fd: pair[0], peer: "test", tls: nil)
            connection.handler = handler
            try loop.sync { connection.start() }
            #expect(try loop.sync { handler.ready })
            // The descriptor now refers to another socket, whose peer never reads.
            try replaceDescriptor(pair[0], with: other[0])
            close(other[0])
            let (closed, failure) = try loop.sync { () -> (Bool, SystemError?) in
                connection.write([UInt8](repeating: 0x41, count: 8 << 20))
                return (handler.closed, connection.failure)
            }
            #expect(closed)
            #expect(failure?.code == ENOENT)
            #expect(failure?.operation == "epoll_ctl(MOD)")
        }
    }
}

final class ClosingHandler: ConnectionHandler, @unchecked Sendable {
    var ready = false
    var closed = false
    func connectionDidBecomeReady(_ connection: Connection) { ready = true }
    func connection(_ connection: Connection, didRead bytes: UnsafeRawBufferPointer) {}
    func connectionDidClose(_ connection: Connection) { closed = true }
}
