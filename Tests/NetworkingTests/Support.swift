import Dispatch
import Glibc
import CLinux
import MonotonicClock
import Testing
@testable import Networking

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A loop running on its own thread for the length of `body`.
func withRunningLoop<T>(_ body: (EventLoop) throws -> T) throws -> T {
    let loop = try EventLoop(name: "networking-tests")
    loop.start()
    defer { loop.stop() }
    return try body(loop)
}

/// Hands a value across threads; the semaphore (or the loop's queue) orders the accesses.
final class Box<T>: @unchecked Sendable {
    var value: T
    init(_ value: T) { self.value = value }
}

extension EventLoop {
    /// Runs `body` on the loop's thread and waits for its result.
    func sync<T>(timeoutSeconds: Int = 10, _ body: @escaping () throws -> T) throws -> T {
        let result = Box<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let task = Box(body)
        execute {
            result.value = Result { try task.value() }
            done.signal()
        }
        guard done.wait(timeout: .now() + .seconds(timeoutSeconds)) == .success else {
            throw TestFailure("the loop did not run a task within \(timeoutSeconds) s")
        }
        return try result.value!.get()
    }

    /// Polls `condition` on the loop until it holds.
    func wait(
        timeoutMilliseconds: Int64 = 5000, sourceLocation: SourceLocation = #_sourceLocation,
        until condition: @escaping () -> Bool
    ) throws {
        let deadline = Monotonic.nowMilliseconds() + timeoutMilliseconds
        while try !sync(condition) {
            guard Monotonic.nowMilliseconds() < deadline else {
                throw TestFailure("condition at \(sourceLocation) not met within \(timeoutMilliseconds) ms")
            }
            usleep(2000)
        }
    }
}

/// Counts what the loop tells it; `onReadable` runs inside `readable()`.
final class Recorder: IOHandler, @unchecked Sendable {
    var reads = 0
    var writes = 0
    var hangups = 0
    var onReadable: (() -> Void)?

    func readable() {
        reads += 1
        onReadable?()
    }
    func writable() { writes += 1 }
    func hangup() { hangups += 1 }
}

func makeEventFD(_ initial: UInt32 = 0) throws -> Int32 {
    let fd = eventfd(initial, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
    guard fd >= 0 else { throw SystemError.last("eventfd") }
    return fd
}

func drainEventFD(_ fd: Int32) {
    var value: UInt64 = 0
    _ = read(fd, &value, 8)
}

func signalEventFD(_ fd: Int32) {
    var one: UInt64 = 1
    _ = write(fd, &one, 8)
}

/// The errno `body` failed with, nil when it did not fail.
func failureCode(_ body: () throws -> Void) -> Int32? {
    do {
        try body()
        return nil
    } catch {
        return (error as? SystemError)?.code ?? -1
    }
}

/// Makes `fd` refer to what `source` refers to, in one step (the old file is closed, which
/// ends its epoll registrations), as a new connection given the same number would.
func replaceDescriptor(_ fd: Int32, with source: Int32) throws {
    guard dup2(source, fd) == fd else { throw SystemError.last("dup2") }
    _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
}
