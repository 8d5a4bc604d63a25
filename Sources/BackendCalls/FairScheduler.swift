/// Decides which ready line sends next, so that no backend can starve the others.
///
/// A line is ready in one partition (the backend its first call is for). Each partition has
/// at most `perPartitionLimit` attempts in flight, and the partitions with a ready line and
/// room take turns, one attempt per turn. So a backend that never answers holds at most its
/// own share of the workers however many lines wait for it, and a backend with 200 ready
/// lines gets one turn per round like a backend with one.
///
/// Pure bookkeeping, no I/O: the caller runs the attempts and reports each one's end.
struct FairScheduler<Partition: Hashable, Line> {
    private struct Lane {
        var ready = FIFO<Line>()
        var inFlight = 0
        /// In `turns` (it has a ready line and room for one more attempt).
        var queued = false
    }

    let perPartitionLimit: Int
    private var lanes: [Partition: Lane] = [:]
    /// Partitions that can send now, in the order of their turns.
    private var turns = FIFO<Partition>()
    /// Attempts in flight over all partitions.
    private(set) var inFlight = 0
    /// Attempts that could begin now: over the partitions, their ready lines up to their room.
    private(set) var startable = 0

    init(perPartitionLimit: Int) { self.perPartitionLimit = max(1, perPartitionLimit) }

    /// Attempts in flight for one partition.
    func inFlight(in partition: Partition) -> Int { lanes[partition]?.inFlight ?? 0 }

    /// The line's first call can be sent; it waits for its partition's turn.
    mutating func makeReady(_ line: Line, in partition: Partition) {
        change(partition) { $0.ready.append(line) }
    }

    /// The next line to send, from the partition whose turn it is; its attempt counts as in
    /// flight until `finished(in:)`. Nil when no partition can send now.
    mutating func takeNext() -> (line: Line, partition: Partition)? {
        let limit = perPartitionLimit
        while let partition = turns.popFirst() {
            var taken: Line?
            change(partition) { lane in
                lane.queued = false
                // A turn left over from lines a reset removed is skipped.
                guard lane.inFlight < limit, let line = lane.ready.popFirst() else { return }
                taken = line
                lane.inFlight += 1
            }
            if let taken {
                inFlight += 1
                return (taken, partition)
            }
        }
        return nil
    }

    /// An attempt taken from `partition` has ended (whatever became of it).
    mutating func finished(in partition: Partition) {
        guard lanes[partition].map({ $0.inFlight > 0 }) == true else { return }
        change(partition) { $0.inFlight -= 1 }
        inFlight -= 1
    }

    /// Forgets every ready line (a reset). Attempts in flight stay counted until they end:
    /// they still hold their workers.
    mutating func removeAllReady() {
        for partition in Array(lanes.keys) { change(partition) { $0.ready.removeAll() } }
    }

    /// Applies a change to a partition's lane and keeps `startable`, its place in the turns
    /// and the lane itself (dropped once it has nothing) up to date.
    private mutating func change(_ partition: Partition, _ body: (inout Lane) -> Void) {
        var lane = lanes.removeValue(forKey: partition) ?? Lane()
        startable -= room(lane)
        body(&lane)
        startable += room(lane)
        if !lane.queued && room(lane) > 0 {
            lane.queued = true
            turns.append(partition)
        }
        // A lane still in the turns is kept even when empty: `takeNext` drops it at its turn.
        if lane.inFlight > 0 || !lane.ready.isEmpty || lane.queued { lanes[partition] = lane }
    }

    private func room(_ lane: Lane) -> Int { min(lane.ready.count, max(0, perPartitionLimit - lane.inFlight)) }
}
