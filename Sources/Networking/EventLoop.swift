import Foundation
import CLinux
import Glibc
import Synchronization
import Locking

/// Something an event loop tells about readiness of its file descriptor.
public protocol IOHandler: AnyObject {
    func readable()
    func writable()
    /// EPOLLHUP/EPOLLERR with nothing left to read.
    func hangup()
}

public struct IOEvents: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let read = IOEvents(rawValue: EPOLLIN.rawValue | EPOLLRDHUP.rawValue)
    public static let write = IOEvents(rawValue: EPOLLOUT.rawValue)
}

public struct TimerID: Hashable, Sendable { let value: UInt64 }

/// One thread, one epoll instance. Every connection belongs to exactly one loop and is only
/// touched on that loop's thread, so request handling never hops threads and needs no locks
/// of its own. Other threads talk to a loop through `execute`, which wakes it with an eventfd.
public final class EventLoop: @unchecked Sendable {
    public let name: String
    /// Position in its group (0 for a lone loop), for per-loop data.
    public let index: Int
    private let epollFD: Int32
    private let wakeFD: Int32
    private var handlers: [IOHandler?] = []
    private let pending = Locked<[@Sendable () -> Void]>([])
    private var timers = TimerHeap()
    private var nextTimerID: UInt64 = 1
    private var cancelledTimers = Set<UInt64>()
    private let stopping = Atomic<Bool>(false)
    private let threadID = Atomic<UInt>(0)
    /// Scratch space shared by every connection of this loop for reads.
    public let readBuffer: UnsafeMutableRawBufferPointer

    public init(name: String, index: Int = 0) throws(SystemError) {
        self.name = name
        self.index = index
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epollFD >= 0 else { throw SystemError.last("epoll_create1") }
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard wakeFD >= 0 else { throw SystemError.last("eventfd") }
        readBuffer = .allocate(byteCount: 256 * 1024, alignment: 16)
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = wakeFD
        epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, &event)
    }

    deinit {
        close(epollFD)
        close(wakeFD)
        readBuffer.deallocate()
    }

    public var inEventLoop: Bool { threadID.load(ordering: .relaxed) == UInt(pthread_self()) }

    /// Starts the loop on a new thread.
    public func start() {
        let thread = Thread { [self] in self.run() }
        thread.name = name
        thread.stackSize = 4 << 20
        thread.start()
    }

    public func stop() {
        stopping.store(true, ordering: .releasing)
        wake()
    }

    /// Runs `task` on the loop's thread (later, even when called from it).
    public func execute(_ task: @escaping @Sendable () -> Void) {
        pending.withLock { $0.append(task) }
        wake()
    }

    private func wake() {
        var one: UInt64 = 1
        _ = Glibc.write(wakeFD, &one, 8)
    }

    // MARK: File descriptors (loop thread only)

    public func register(fd: Int32, events: IOEvents, handler: IOHandler) throws(SystemError) {
        if Int(fd) >= handlers.count { handlers.append(contentsOf: repeatElement(nil, count: Int(fd) + 64 - handlers.count)) }
        handlers[Int(fd)] = handler
        var event = epoll_event()
        event.events = events.rawValue
        event.data.fd = fd
        guard epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) == 0 else {
            handlers[Int(fd)] = nil
            throw SystemError.last("epoll_ctl(ADD)")
        }
    }

    public func modify(fd: Int32, events: IOEvents) {
        var event = epoll_event()
        event.events = events.rawValue
        event.data.fd = fd
        epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event)
    }

    public func unregister(fd: Int32) {
        epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil)
        if Int(fd) < handlers.count { handlers[Int(fd)] = nil }
    }

    // MARK: Timers (loop thread only)

    @discardableResult
    public func schedule(afterMilliseconds delay: Int64, _ task: @escaping () -> Void) -> TimerID {
        let id = nextTimerID
        nextTimerID += 1
        timers.push(deadline: Monotonic.nowMilliseconds() + max(0, delay), id: id, task: task)
        return TimerID(value: id)
    }

    public func cancel(_ timer: TimerID) {
        cancelledTimers.insert(timer.value)
    }

    // MARK: The loop

    public func run() {
        threadID.store(UInt(pthread_self()), ordering: .relaxed)
        let capacity = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        defer { events.deallocate() }
        while !stopping.load(ordering: .acquiring) {
            let timeout = nextTimeout()
            let n = epoll_wait(epollFD, events, Int32(capacity), timeout)
            if n < 0 {
                if errno == EINTR { continue }
                break
            }
            for i in 0..<Int(n) {
                let event = events[i]
                let fd = event.data.fd
                if fd == wakeFD {
                    var value: UInt64 = 0
                    _ = Glibc.read(wakeFD, &value, 8)
                    continue
                }
                let flags = event.events
                // A handler may close other descriptors while this batch is handled, so each
                // one is looked up again instead of cached.
                if flags & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
                    if let handler = handler(for: fd) {
                        if flags & EPOLLIN.rawValue == 0 && flags & (EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
                            handler.hangup()
                        } else {
                            handler.readable()
                        }
                    }
                }
                if flags & EPOLLOUT.rawValue != 0, let handler = handler(for: fd) {
                    handler.writable()
                }
            }
            runPendingTasks()
            runDueTimers()
        }
    }

    @inline(__always)
    private func handler(for fd: Int32) -> IOHandler? {
        Int(fd) < handlers.count ? handlers[Int(fd)] : nil
    }

    private func runPendingTasks() {
        let tasks = pending.withLock { tasks -> [@Sendable () -> Void] in
            let taken = tasks
            tasks.removeAll(keepingCapacity: true)
            return taken
        }
        for task in tasks { task() }
    }

    private func runDueTimers() {
        guard !timers.isEmpty else { return }
        let now = Monotonic.nowMilliseconds()
        while let top = timers.peekDeadline, top <= now {
            let (id, task) = timers.pop()
            if cancelledTimers.remove(id) != nil { continue }
            task()
        }
    }

    private func nextTimeout() -> Int32 {
        if pending.withLock({ !$0.isEmpty }) { return 0 }
        guard let deadline = timers.peekDeadline else { return -1 }
        let wait = deadline - Monotonic.nowMilliseconds()
        return Int32(clamping: max(0, wait))
    }
}

/// A min-heap of timers ordered by deadline.
struct TimerHeap {
    private var items: [(deadline: Int64, id: UInt64, task: () -> Void)] = []

    var isEmpty: Bool { items.isEmpty }
    var peekDeadline: Int64? { items.first?.deadline }

    mutating func push(deadline: Int64, id: UInt64, task: @escaping () -> Void) {
        items.append((deadline, id, task))
        var child = items.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard less(child, parent) else { break }
            items.swapAt(child, parent)
            child = parent
        }
    }

    mutating func pop() -> (UInt64, () -> Void) {
        let top = items[0]
        let last = items.removeLast()
        if !items.isEmpty {
            items[0] = last
            var parent = 0
            while true {
                let left = 2 * parent + 1
                let right = left + 1
                var smallest = parent
                if left < items.count, less(left, smallest) { smallest = left }
                if right < items.count, less(right, smallest) { smallest = right }
                if smallest == parent { break }
                items.swapAt(parent, smallest)
                parent = smallest
            }
        }
        return (top.id, top.task)
    }

    private func less(_ a: Int, _ b: Int) -> Bool {
        items[a].deadline < items[b].deadline || (items[a].deadline == items[b].deadline && items[a].id < items[b].id)
    }
}

public enum Monotonic {
    public static func nowMilliseconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    public static func nowNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}

public struct SystemError: Error, CustomStringConvertible, Sendable {
    public let operation: String
    public let code: Int32
    public var description: String { "\(operation): \(String(cString: strerror(code)))" }

    public static func last(_ operation: String) -> SystemError { SystemError(operation: operation, code: errno) }
}

/// A group of loops, one per core by default; new connections are spread round-robin.
public final class EventLoopGroup: Sendable {
    public let loops: [EventLoop]
    private let counter = Atomic<Int>(0)

    public init(count: Int, namePrefix: String = "loop") throws(SystemError) {
        var loops: [EventLoop] = []
        for i in 0..<max(1, count) { loops.append(try EventLoop(name: "\(namePrefix)-\(i)", index: i)) }
        self.loops = loops
    }

    public func start() { loops.forEach { $0.start() } }
    public func stop() { loops.forEach { $0.stop() } }

    public func next() -> EventLoop {
        loops[counter.add(1, ordering: .relaxed).oldValue % loops.count]
    }
}
