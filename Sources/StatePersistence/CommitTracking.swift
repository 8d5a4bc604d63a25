// What answers that promise a change was kept wait for: a ticket per change, committed in
// order, and the tasks waiting for one. Shared by the state directory's writer and the
// Redis coordinator's (`--redis`), so connections hold answers the same way for both.

/// Changes are made at once and committed later, in order (`--state-dir`'s group commit,
/// `--redis`'s pipelined writer). An answer that promises a change was kept waits for the
/// ticket of the last change made before it.
public protocol CommitTracker: AnyObject, Sendable {
    /// The ticket an answer must wait for, or nil when it may go now. `everything` waits for
    /// changes the tracker would otherwise let answers run ahead of (admin answers).
    func uncommittedTicket(everything: Bool) -> UInt64?
    /// Runs `task` on `executor` once everything up to `ticket` is committed (`true`), or once
    /// that failed (`false`: what the task would announce was not kept). The task may capture
    /// objects confined to the executor's thread: it only ever runs there.
    func afterCommit(_ ticket: UInt64, on executor: any CommitExecutor, _ task: @escaping (_ committed: Bool) -> Void)
    /// Why changes are refused right now, or nil.
    var unavailableReason: String? { get }
}

extension CommitTracker {
    public func uncommittedTicket() -> UInt64? { uncommittedTicket(everything: false) }
}

/// A task handed from its owning thread through a writer and back to that thread.
struct ConfinedTask: @unchecked Sendable {
    let run: (_ committed: Bool) -> Void
    init(_ run: @escaping (_ committed: Bool) -> Void) { self.run = run }
}

/// The tasks waiting for commits, kept under their writer's lock.
public struct CommitWaiters {
    struct Waiter {
        let ticket: UInt64
        let executor: any CommitExecutor
        let task: ConfinedTask
    }
    private var waiters: [Waiter] = []

    public init() {}

    public var isEmpty: Bool { waiters.isEmpty }

    public mutating func add(_ ticket: UInt64, on executor: any CommitExecutor, _ task: @escaping (_ committed: Bool) -> Void) {
        waiters.append(Waiter(ticket: ticket, executor: executor, task: ConfinedTask(task)))
    }

    /// Those whose tickets are committed (`done`), to be run outside the lock.
    public mutating func takeReady(committed done: UInt64) -> CommitRelease {
        guard !waiters.isEmpty else { return CommitRelease(waiters: []) }
        if waiters.allSatisfy({ $0.ticket <= done }) {
            defer { waiters.removeAll(keepingCapacity: true) }
            return CommitRelease(waiters: waiters)
        }
        let ready = waiters.filter { $0.ticket <= done }
        waiters.removeAll { $0.ticket <= done }
        return CommitRelease(waiters: ready)
    }

    /// Every one of them (a failed commit fails all that wait).
    public mutating func takeAll() -> CommitRelease {
        defer { waiters.removeAll() }
        return CommitRelease(waiters: waiters)
    }
}

/// Waiters taken from `CommitWaiters`, run outside the writer's lock.
public struct CommitRelease {
    let waiters: [CommitWaiters.Waiter]

    /// One hop per executor (event loop) per commit, not one per answer.
    public func run(committed: Bool) {
        guard !waiters.isEmpty else { return }
        var groups: [ObjectIdentifier: (executor: any CommitExecutor, tasks: [ConfinedTask])] = [:]
        var order: [ObjectIdentifier] = []
        for waiter in waiters {
            let id = ObjectIdentifier(waiter.executor)
            if groups[id] == nil {
                groups[id] = (waiter.executor, [])
                order.append(id)
            }
            groups[id]!.tasks.append(waiter.task)
        }
        for id in order {
            let (executor, tasks) = groups[id]!
            executor.execute { for task in tasks { task.run(committed) } }
        }
    }
}

extension CommitExecutor {
    /// Runs `task`, which may capture objects confined to this executor's thread, there.
    public func executeConfined(_ task: @escaping (_ committed: Bool) -> Void, committed: Bool) {
        let confined = ConfinedTask(task)
        execute { confined.run(committed) }
    }
}
