/// With `--state-dir` or `--redis`, what a connection sends that promises durability (a
/// provider's answer, a frame to a device) waits here until the changes made before it are
/// committed.
/// Items leave in order, in one batch per commit, so a connection writes (and flushes) once
/// per commit rather than once per item. Confined to the executor's thread, like its connection.
public final class CommitGate<Item> {
    @usableFromInline let durability: any CommitTracker
    @usableFromInline let executor: any CommitExecutor
    private let release: ([Item], _ committed: Bool) -> Void
    /// What waits, oldest first, and the ticket each waits for (side by side: mapping an array
    /// of tuples out went through the runtime's generic witnesses, 3,000 instructions an item).
    /// (Touched only on the executor's thread: no run-time exclusivity checks.)
    @exclusivity(unchecked) @usableFromInline var held: [Item] = []
    @exclusivity(unchecked) @usableFromInline var heldTickets: [UInt64] = []
    /// A commit is to be asked for at the end of the executor's turn (`hold`).
    @exclusivity(unchecked) @usableFromInline var asking = false
    @exclusivity(unchecked) @usableFromInline var waiting = false

    /// `release` runs on `executor` with the items whose changes are committed, oldest first,
    /// and `true`; or with `false` when the commit they waited for failed (the store is
    /// failing): then what they announce is not on disk, and they must not be sent as if it were.
    public init(durability: any CommitTracker, executor: any CommitExecutor, release: @escaping ([Item], _ committed: Bool) -> Void) {
        self.durability = durability
        self.executor = executor
        self.release = release
    }

    /// Holds `item` when something is not committed yet (or earlier items still wait);
    /// false means nothing is pending: send it now. (Inlinable, like the next one, so that a
    /// connection's gate is specialized for its items: generic, each answer held went through
    /// the runtime's witnesses for the item's tuple and the array's metadata.)
    @inlinable
    public func hold(_ item: Item) -> Bool {
        hold(item, ticket: durability.uncommittedTicket())
    }

    /// `hold` for an item whose change another thread made: `ticket` is what that thread's
    /// `uncommittedTicket()` said right after it.
    @inlinable
    public func hold(_ item: Item, ticket: UInt64?) -> Bool {
        guard ticket != nil || !held.isEmpty else { return false }
        // Tickets must never go down, or the release below would wait for nothing: one that
        // needs nothing (or less) only waits behind the items before it.
        heldTickets.append(max(ticket ?? 0, heldTickets.last ?? 0))
        held.append(item)
        // Asked for at the end of the executor's current turn, for the last item held by
        // then: the answers of one read leave together, on one commit, in one write, rather
        // than split over the commits that happen to land while the read is handled.
        if !waiting && !asking {
            asking = true
            executor.executeConfined(
                { [weak self] _ in
                    guard let self else { return }
                    self.asking = false
                    self.waitForCommit()
                }, committed: true)
        }
        return true
    }

    /// Tickets only grow, so what is released comes from the front.
    @usableFromInline
    func waitForCommit() {
        guard !waiting, let ticket = heldTickets.last else { return }
        waiting = true
        durability.afterCommit(ticket, on: executor) { [weak self] committed in
            guard let self else { return }
            self.waiting = false
            // A failed commit fails everything held: later items waited behind it.
            var count = self.held.count
            if committed {
                count = 0
                while count < self.heldTickets.count && self.heldTickets[count] <= ticket { count += 1 }
            }
            let ready: [Item]
            if count == self.held.count {
                // The usual case: everything held leaves, so the array is handed over whole.
                ready = self.held
                self.held = []
                self.heldTickets.removeAll(keepingCapacity: true)
            } else {
                ready = Array(self.held[..<count])
                self.held.removeFirst(count)
                self.heldTickets.removeFirst(count)
            }
            self.release(ready, committed)
            if !self.held.isEmpty { self.waitForCommit() }
        }
    }
}
