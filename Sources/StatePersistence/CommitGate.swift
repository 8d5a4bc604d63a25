/// With `--state-dir` or `--redis`, what a connection sends that promises durability (a
/// provider's answer, a frame to a device) waits here until the changes made before it are
/// committed.
/// Items leave in order, in one batch per commit, so a connection writes (and flushes) once
/// per commit rather than once per item. Confined to the executor's thread, like its connection.
public final class CommitGate<Item> {
    private let durability: any CommitTracker
    private let executor: any CommitExecutor
    private let release: ([Item], _ committed: Bool) -> Void
    private var held: [(ticket: UInt64, item: Item)] = []
    /// A commit is to be asked for at the end of the executor's turn (`hold`).
    private var asking = false
    private var waiting = false

    /// `release` runs on `executor` with the items whose changes are committed, oldest first,
    /// and `true`; or with `false` when the commit they waited for failed (the store is
    /// failing): then what they announce is not on disk, and they must not be sent as if it were.
    public init(durability: any CommitTracker, executor: any CommitExecutor, release: @escaping ([Item], _ committed: Bool) -> Void) {
        self.durability = durability
        self.executor = executor
        self.release = release
    }

    /// Holds `item` when something is not committed yet (or earlier items still wait);
    /// false means nothing is pending: send it now.
    public func hold(_ item: Item) -> Bool {
        hold(item, ticket: durability.uncommittedTicket())
    }

    /// `hold` for an item whose change another thread made: `ticket` is what that thread's
    /// `uncommittedTicket()` said right after it.
    public func hold(_ item: Item, ticket: UInt64?) -> Bool {
        guard ticket != nil || !held.isEmpty else { return false }
        // Tickets must never go down, or the release below would wait for nothing: one that
        // needs nothing (or less) only waits behind the items before it.
        held.append((max(ticket ?? 0, held.last?.ticket ?? 0), item))
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
    private func waitForCommit() {
        guard !waiting, let last = held.last else { return }
        waiting = true
        let ticket = last.ticket
        durability.afterCommit(ticket, on: executor) { [weak self] committed in
            guard let self else { return }
            self.waiting = false
            // A failed commit fails everything held: later items waited behind it.
            let count = committed ? self.held.prefix { $0.ticket <= ticket }.count : self.held.count
            let ready = self.held[..<count].map(\.item)
            self.held.removeFirst(count)
            self.release(ready, committed)
            if !self.held.isEmpty { self.waitForCommit() }
        }
    }
}
