// Networking: event loops on epoll, non-blocking sockets and connections (TLS through
// OpenSSLCrypto), listeners and timers; nothing about what the bytes mean. Imports Glibc,
// CLinux, OpenSSLCrypto, Locking, MonotonicClock and Foundation.

import Foundation
import CLinux
import Glibc
import Synchronization
import Locking
import MonotonicClock

/// Something an event loop tells about readiness of its file descriptor.
public protocol IOHandler: AnyObject {
    func readable()
    func writable()
    /// EPOLLHUP/EPOLLERR with nothing left to read.
    func hangup()
    /// The loop is ending: release the descriptor (and unregister it).
    func close()
}

extension IOHandler {
    public func close() {}
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
///
/// Descriptors, timers and the handlers are confined to the loop's thread (or to the thread
/// that sets the loop up before `start`); debug builds assert it.
public final class EventLoop: @unchecked Sendable {
    public let name: String
    /// Position in its group (0 for a lone loop), for per-loop data.
    public let index: Int
    private let epollFD: Int32
    private let wakeFD: Int32
    /// Indexed by descriptor. `token` is what the registration put in `epoll_event.data.u64`:
    /// the descriptor in the low 32 bits, a generation in the high ones (0 = not registered).
    /// A handler may close a descriptor whose event is still further down the batch, and a new
    /// connection may get the same number before the batch ends; the old event then carries
    /// the old generation and is dropped instead of reaching the new handler.
    private var registrations: [Registration] = []
    /// Never 0 once used, so no registration's token can equal `wakeToken`.
    private var generation: UInt32 = 0
    private static let wakeToken: UInt64 = 0
    /// Events dropped because their registration had ended earlier in the same batch.
    internal private(set) var staleEventsDropped = 0
    private let pending = Locked<[@Sendable () -> Void]>([])
    private var timers = TimerHeap()
    private var nextTimerID: UInt64 = 1
    /// Cancelled timers still in the heap (the heap cannot remove from the middle).
    private var cancelledTimers = Set<UInt64>()
    private let stopping = Atomic<Bool>(false)
    /// Signalled when `run` has returned, so `stop` can wait for it.
    private let finished = DispatchSemaphore(value: 0)
    /// 0 before `start`, `starting` between `start` and `run`, then the loop thread's id.
    private let owner = Atomic<UInt>(0)
    private static let starting = UInt.max
    /// Scratch space shared by every connection of this loop for reads.
    public let readBuffer: UnsafeMutableRawBufferPointer

    private struct Registration {
        var token: UInt64 = 0
        var handler: IOHandler?
    }

    public init(name: String, index: Int = 0) throws(SystemError) {
        self.name = name
        self.index = index
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epollFD >= 0 else { throw SystemError.last("epoll_create1") }
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard wakeFD >= 0 else {
            let error = SystemError.last("eventfd")
            close(epollFD)
            throw error
        }
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.u64 = Self.wakeToken
        // A loop that cannot be woken would never run `execute`d work or notice `stop`.
        guard epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, &event) == 0 else {
            let error = SystemError.last("epoll_ctl(ADD eventfd)")
            close(wakeFD)
            close(epollFD)
            throw error
        }
        readBuffer = .allocate(byteCount: 256 * 1024, alignment: 16)
    }

    deinit {
        close(epollFD)
        close(wakeFD)
        readBuffer.deallocate()
    }

    /// On the loop's own thread (false before it runs).
    public var inEventLoop: Bool { owner.load(ordering: .relaxed) == UInt(pthread_self()) }

    /// Whether the caller may touch the loop's confined state: it is the loop's thread, or the
    /// loop has not been started (set-up before `start` hands the loop over to its thread).
    public var isConfinedToCaller: Bool {
        let current = owner.load(ordering: .relaxed)
        return current == 0 || current == UInt(pthread_self())
    }

    /// Crashes a debug build when called where `isConfinedToCaller` is false; compiled out of
    /// release builds (`assert` does not evaluate its condition there).
    @inlinable @inline(__always)
    public func assertConfined(_ function: StaticString = #function, file: StaticString = #fileID, line: UInt = #line) {
        assert(isConfinedToCaller, "\(function) called off event loop \(name)'s thread", file: file, line: line)
    }

    /// Starts the loop on a new thread.
    public func start() {
        let claimed = owner.compareExchange(expected: 0, desired: Self.starting, ordering: .relaxed).exchanged
        assert(claimed, "event loop \(name) started twice")
        let thread = Thread(named: name) { [self] in self.run() }
        thread.stackSize = 4 << 20
        thread.start()
    }

    /// Ends the loop: what is still registered is closed on the loop's thread, pending tasks
    /// and timers are dropped. From another thread it waits until the loop has ended (so the
    /// descriptors are closed when it returns); from the loop's own thread it returns at once.
    public func stop() {
        stopping.store(true, ordering: .releasing)
        wake()
        let current = owner.load(ordering: .acquiring)
        if current == 0 {
            // Never started (a start-up that failed half-way): nothing runs it, close here.
            closeEverything()
            return
        }
        guard current != UInt(pthread_self()) else { return }
        finished.wait()
        finished.signal()  // later calls return at once
    }

    /// Runs `task` on the loop's thread (later, even when called from it). Any thread.
    public func execute(_ task: @escaping @Sendable () -> Void) {
        // After `stop` nothing runs tasks: dropping them frees what they hold.
        guard !stopping.load(ordering: .acquiring) else { return }
        // Tasks already waiting mean a wake-up is on its way and the loop takes them all
        // together: under load (a push per device frame from another loop) this saves a
        // write(2) on the eventfd per task.
        let first = pending.withLock { tasks in
            tasks.append(task)
            return tasks.count == 1
        }
        if first { wake() }
    }

    private func wake() {
        var one: UInt64 = 1
        _ = Glibc.write(wakeFD, &one, 8)
    }

    // MARK: File descriptors (loop thread only)

    /// Watches `fd` for `events` (level-triggered) and gives them to `handler`, which the loop
    /// keeps until `unregister`. Throws epoll_ctl's error: EEXIST when `fd` is registered
    /// already (that registration stays as it was), EBADF when it is not open, EPERM for a
    /// regular file, ENOSPC past fs.epoll.max_user_watches, ENOMEM.
    public func register(fd: Int32, events: IOEvents, handler: IOHandler) throws(SystemError) {
        assertConfined()
        guard fd >= 0 else { throw SystemError(operation: "epoll_ctl(ADD)", code: EBADF) }
        generation &+= 1
        if generation == 0 { generation = 1 }
        let token = UInt64(generation) << 32 | UInt64(UInt32(bitPattern: fd))
        var event = epoll_event()
        event.events = events.rawValue
        event.data.u64 = token
        guard epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) == 0 else { throw SystemError.last("epoll_ctl(ADD)") }
        if Int(fd) >= registrations.count {
            registrations.append(contentsOf: repeatElement(Registration(), count: Int(fd) + 64 - registrations.count))
        }
        // A slot still holding a handler means its descriptor was closed without `unregister`
        // (the kernel dropped that registration with the descriptor); the new one replaces it.
        registrations[Int(fd)] = Registration(token: token, handler: handler)
    }

    /// Changes what `fd` is watched for. Throws ENOENT when it is not registered with this
    /// loop, or epoll_ctl's error (ENOENT too when the descriptor was closed and reopened
    /// behind the loop's back: the kernel forgot the registration with the old file).
    public func modify(fd: Int32, events: IOEvents) throws(SystemError) {
        assertConfined()
        guard fd >= 0, Int(fd) < registrations.count, registrations[Int(fd)].token != 0 else {
            throw SystemError(operation: "epoll_ctl(MOD)", code: ENOENT)
        }
        var event = epoll_event()
        event.events = events.rawValue
        event.data.u64 = registrations[Int(fd)].token
        guard epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event) == 0 else { throw SystemError.last("epoll_ctl(MOD)") }
    }

    /// Stops watching `fd` and lets go of its handler; call it before closing the descriptor.
    /// The handler gets no further events (not even ones already fetched in this batch), even
    /// when this throws epoll_ctl's error: ENOENT when `fd` was not registered, EBADF when it
    /// was closed already (the kernel dropped the registration with it).
    public func unregister(fd: Int32) throws(SystemError) {
        assertConfined()
        if fd >= 0 && Int(fd) < registrations.count { registrations[Int(fd)] = Registration() }
        guard epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil) == 0 else { throw SystemError.last("epoll_ctl(DEL)") }
    }

    // MARK: Timers (loop thread only)

    @discardableResult
    public func schedule(afterMilliseconds delay: Int64, _ task: @escaping () -> Void) -> TimerID {
        assertConfined()
        let id = nextTimerID
        nextTimerID += 1
        timers.push(deadline: Monotonic.nowMilliseconds() + max(0, delay), id: id, task: task)
        return TimerID(value: id)
    }

    /// Cancels a timer that has not run yet; cancelling one that ran or was cancelled already
    /// does nothing.
    public func cancel(_ timer: TimerID) {
        assertConfined()
        cancelledTimers.insert(timer.value)
        // Ids of timers that already ran would stay in the set forever (connections cancel
        // their timers on close whether or not they fired). Keep only those still in the
        // heap; the slack makes the sweep amortised O(1) per cancel.
        if cancelledTimers.count > 2 * timers.count + 64 {
            let live = timers.ids
            cancelledTimers = cancelledTimers.filter { live.contains($0) }
        }
    }

    /// Cancelled timers still remembered (tests: must stay bounded).
    internal var cancelledTimerCount: Int { cancelledTimers.count }

    // MARK: The loop

    /// Runs the loop on the calling thread until `stop`.
    public func run() {
        let previous = owner.exchange(UInt(pthread_self()), ordering: .acquiring)
        assert(previous == 0 || previous == Self.starting, "event loop \(name) is running on another thread already")
        // Once the loop has ended, its owner may take it apart from any thread.
        defer { owner.store(0, ordering: .releasing) }
        let capacity = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        defer { events.deallocate() }
        let readable = EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue
        let failed = EPOLLHUP.rawValue | EPOLLERR.rawValue
        while !stopping.load(ordering: .acquiring) {
            let timeout = nextTimeout()
            let n = epoll_wait(epollFD, events, Int32(capacity), timeout)
            if n < 0 {
                if errno == EINTR { continue }
                // Only a bug (the epoll descriptor closed) gets here; a loop that quietly
                // ended would leave its connections hanging.
                fatalError("event loop \(name): \(SystemError.last("epoll_wait"))")
            }
            for i in 0..<Int(n) {
                let token = events[i].data.u64
                if token == Self.wakeToken {
                    var value: UInt64 = 0
                    _ = Glibc.read(wakeFD, &value, 8)
                    continue
                }
                let flags = events[i].events
                let slot = Int(UInt32(truncatingIfNeeded: token))
                // Looked up again before each call: a handler may end registrations (its own
                // or others') while the batch is handled.
                guard let handler = handler(slot, token) else {
                    staleEventsDropped &+= 1
                    continue
                }
                if flags & readable != 0 {
                    if flags & EPOLLIN.rawValue == 0 && flags & failed != 0 {
                        handler.hangup()
                    } else {
                        handler.readable()
                    }
                }
                if flags & EPOLLOUT.rawValue != 0, let handler = self.handler(slot, token) {
                    handler.writable()
                }
            }
            runPendingTasks()
            runDueTimers()
        }
        closeEverything()
        finished.signal()
    }

    /// Closes what is still registered (connections, listeners) when the loop ends, so a
    /// stopped emulator frees its sockets even when its process goes on (tests).
    private func closeEverything() {
        let handlers = registrations.compactMap { $0.token == 0 ? nil : $0.handler }
        for handler in handlers { handler.close() }
        for slot in registrations.indices { registrations[slot] = Registration() }
        pending.withLock { $0.removeAll() }
        timers = TimerHeap()
        cancelledTimers.removeAll()
    }

    /// The handler of the registration that produced `token`, nil when it has ended.
    @inline(__always)
    private func handler(_ slot: Int, _ token: UInt64) -> IOHandler? {
        guard slot < registrations.count, registrations[slot].token == token else { return nil }
        return registrations[slot].handler
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
        // Timers scheduled by these tasks wait for the next turn, after I/O: a task that
        // schedules itself again with no delay must not keep the loop to itself.
        let limit = nextTimerID
        while let top = timers.peek, top.deadline <= now, top.id < limit {
            let (id, task) = timers.pop()
            if cancelledTimers.remove(id) != nil { continue }
            task()
        }
    }

    private func nextTimeout() -> Int32 {
        if pending.withLock({ !$0.isEmpty }) { return 0 }
        guard let deadline = timers.peek?.deadline else { return -1 }
        let wait = deadline - Monotonic.nowMilliseconds()
        return Int32(clamping: max(0, wait))
    }
}

/// A min-heap of timers ordered by deadline.
struct TimerHeap {
    private var items: [(deadline: Int64, id: UInt64, task: () -> Void)] = []

    var isEmpty: Bool { items.isEmpty }
    var count: Int { items.count }
    var peek: (deadline: Int64, id: UInt64)? { items.first.map { ($0.deadline, $0.id) } }
    var ids: Set<UInt64> { Set(items.lazy.map(\.id)) }

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

public struct SystemError: Error, CustomStringConvertible, Sendable {
    public let operation: String
    public let code: Int32
    /// (Code 0: the operation says why; strerror(0) would add "Success".)
    public var description: String { code == 0 ? operation : "\(operation): \(String(cString: strerror(code)))" }

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
