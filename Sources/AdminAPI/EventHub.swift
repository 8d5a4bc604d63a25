public import APNsCore
public import BackendCalls
import Foundation
import Locking
import Networking
import Synchronization

/// Listeners for journal changes: server-sent event streams (`/api/v1/events`) and long polls
/// (`/api/v1/notifications/wait`). Change tracking in the state is on only while someone
/// listens, so the request path pays nothing otherwise; while someone does, a change costs
/// one serialisation per record (shared by every stream), an append per matching stream and
/// a look-up in the waiter index.
public final class EventHub: @unchecked Sendable {
    let state: EmulatorState
    let metrics: AdminMetrics
    private let streams = Locked<[EventStreamClient]>([])
    private let waiters = Locked(WaiterIndex<Waiter>())
    private let nextID = Atomic<UInt64>(1)
    /// Held while one announcement reads the records and enqueues their events (`changed`).
    private let announcing = Locked(())

    struct Waiter: @unchecked Sendable {
        let loop: EventLoop
        /// Called on `loop` with the record that satisfied the waiter.
        let deliver: (NotificationRecord) -> Void
    }

    public init(state: EmulatorState, metrics: AdminMetrics) {
        self.state = state
        self.metrics = metrics
        state.observeRecordChanges { [weak self] sequences, reset in self?.changed(sequences, reset: reset) }
        state.observeChannelChanges { [weak self] channels in self?.channelsChanged(channels) }
    }

    func newID() -> UInt64 { nextID.add(1, ordering: .relaxed).oldValue }

    var streamCount: Int { streams.withLock { $0.count } }
    var waiterCount: Int { waiters.withLock { $0.count } }

    // MARK: Event streams

    func add(_ stream: EventStreamClient) {
        streams.withLock { $0.append(stream) }
        updateTracking()
    }

    func remove(stream id: UInt64) {
        streams.withLock { $0.removeAll { $0.id == id } }
        updateTracking()
    }

    // MARK: Long polls

    /// Files a waiter; nil when `limit` waiters are waiting already.
    func addWaiter(query: NotificationQuery, loop: EventLoop, limit: Int, deliver: @escaping (NotificationRecord) -> Void) -> UInt64? {
        let id = newID()
        let added = waiters.withLock { index -> Bool in
            guard index.count < limit else { return false }
            index.insert(id, query: query, value: Waiter(loop: loop, deliver: deliver))
            return true
        }
        guard added else {
            metrics.waitersRefused.add()
            return nil
        }
        updateTracking()
        return id
    }

    func remove(waiter id: UInt64) {
        let removed = waiters.withLock { $0.remove(id) } != nil
        if removed { updateTracking() }
    }

    private func updateTracking() {
        let listening = streams.withLock { !$0.isEmpty } || waiters.withLock { $0.count > 0 }
        state.setChangeTracking(listening)
        // `--redis-follow lazy`: from now on the others' writes are read as they come (and
        // announced); what was left unread before is read now.
        if listening { state.coordinator?.catchUpJournal() }
    }

    // MARK: Changes

    /// `event: channel` for each channel created, deleted or published to (every stream:
    /// their filters are about notifications).
    func channelsChanged(_ channels: [(BroadcastChannel, subscribers: Int)]) {
        let clients = streams.withLock { $0 }
        guard !clients.isEmpty else { return }
        for (channel, subscribers) in channels {
            let chunk = EventChunk.channel(ChannelRoutes.json(channel, subscribers: subscribers))
            for client in clients { client.enqueue(chunk) }
        }
    }

    /// Records were deleted (`DELETE /api/v1/notifications`): every stream hears how many, so a
    /// client showing them (the web UI) reads the journal again.
    func recordsDeleted(_ count: Int) {
        let current = streams.withLock { $0 }
        guard count > 0, !current.isEmpty else { return }
        let chunk = EventChunk(Array("event: deleted\ndata: {\"deleted\":\(count)}\n\n".utf8))
        for stream in current { stream.enqueue(chunk) }
    }

    /// The clock was moved ahead (`POST /api/v1/clock`): every stream hears the new time, so a
    /// client showing it (the web UI's Lock Screens, "in 5m") need not poll for it.
    func clockMoved(_ json: JSONValue) {
        let current = streams.withLock { $0 }
        guard !current.isEmpty else { return }
        var bytes = Array("event: clock\ndata: ".utf8)
        json.append(to: &bytes)
        bytes.append(contentsOf: "\n\n".utf8)
        let chunk = EventChunk(bytes)
        for stream in current { stream.enqueue(chunk) }
    }

    /// Every event stream hears of backend calls (their filters are about notifications).
    public func backendCallChanged(_ call: BackendCallRecord) {
        let current = streams.withLock { $0 }
        guard !current.isEmpty else { return }
        let chunk = EventChunk.backendCall(call)
        for stream in current { stream.enqueue(chunk) }
    }

    private func changed(_ sequences: [UInt64], reset: Bool) {
        // Changes are announced by whichever thread made them, after the state's lock: two
        // threads announcing the same record could each read it and then enqueue in the other
        // order, leaving a stream's last event for it older than the journal (a `deferred`
        // after its `throttled`). Reading and enqueueing one announcement at a time keeps
        // every stream's order the order of the reads, so a record's last event is its state.
        // Waiters woken stop tracking outside it (that may read the others' journal, which
        // announces again).
        if announcing.withLock({ _ in announce(sequences, reset: reset) }) { updateTracking() }
    }

    /// Enqueues the events; true when long polls were answered.
    private func announce(_ sequences: [UInt64], reset: Bool) -> Bool {
        let current = streams.withLock { $0 }
        if reset {
            for stream in current { stream.enqueue(.reset) }
            return false
        }
        let records = state.readWorld { world in sequences.compactMap { world.records.record(sequence: $0) } }
        for record in records {
            var chunk: EventChunk?
            for stream in current where stream.query.matches(record) {
                if chunk == nil { chunk = .notification(record) }
                stream.enqueue(chunk!)
            }
        }
        // Long polls are answered newest record first: one step can change an older record too
        // (a broadcast replaced in its channel's store turns coalesced beside the new one), and
        // a waiter for the device wants the new one, not the one it replaced.
        var anyWoken = false
        for record in records.sorted(by: { $0.sequence > $1.sequence }) {
            let (woken, examined) = waiters.withLock { $0.takeMatches(for: record) }
            if examined > 0 { metrics.waiterChecks.add(examined) }
            guard !woken.isEmpty else { continue }
            metrics.waiterWakeups.add(woken.count)
            anyWoken = true
            for waiter in woken {
                waiter.loop.execute { waiter.deliver(record) }
            }
        }
        return anyWoken
    }
}
