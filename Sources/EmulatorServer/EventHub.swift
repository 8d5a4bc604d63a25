import APNsCore
import Foundation
import Networking
import Synchronization
import Locking

/// Listeners for journal changes: server-sent event streams (`/api/v1/events`) and long polls
/// (`/api/v1/notifications/wait`). Change tracking in the state is on only while someone
/// listens, so the request path pays nothing otherwise.
final class EventHub: @unchecked Sendable {
    let state: EmulatorState
    private let listeners = Locked<[UInt64: Listener]>([:])
    private let nextID = Atomic<UInt64>(1)

    struct Listener: @unchecked Sendable {
        let query: NotificationQuery
        let loop: EventLoop
        /// Called on `loop` with a matching record (or nil for a reset).
        let deliver: (NotificationRecord?) -> Void
    }

    init(state: EmulatorState) {
        self.state = state
        state.onRecordChanges = { [weak self] sequences, reset in self?.changed(sequences, reset: reset) }
    }

    var listenerCount: Int { listeners.withLock { $0.count } }

    /// Registers a listener; keep the id to remove it.
    func add(query: NotificationQuery, loop: EventLoop, deliver: @escaping (NotificationRecord?) -> Void) -> UInt64 {
        let id = nextID.add(1, ordering: .relaxed).oldValue
        let count = listeners.withLock { list -> Int in
            list[id] = Listener(query: query, loop: loop, deliver: deliver)
            return list.count
        }
        state.setChangeTracking(count > 0)
        return id
    }

    func remove(_ id: UInt64) {
        let count = listeners.withLock { list -> Int in
            list.removeValue(forKey: id)
            return list.count
        }
        state.setChangeTracking(count > 0)
    }

    private func changed(_ sequences: [UInt64], reset: Bool) {
        let current = listeners.withLock { $0 }
        guard !current.isEmpty else { return }
        if reset {
            for listener in current.values {
                listener.loop.execute { listener.deliver(nil) }
            }
            return
        }
        let records = state.withWorld { world in sequences.compactMap { world.records.record(sequence: $0) } }
        for listener in current.values {
            let matching = records.filter(listener.query.matches)
            guard !matching.isEmpty else { continue }
            listener.loop.execute {
                for record in matching { listener.deliver(record) }
            }
        }
    }
}
