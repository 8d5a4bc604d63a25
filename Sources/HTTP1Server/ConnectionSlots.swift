import MonotonicClock
import Locking
import MonotonicClock
import Networking
import Synchronization

/// Which connections may stay open (docs/admin-api.md, "Admin API limits"). `maxConnections` regular
/// slots; past them the oldest idle connection (between requests, lingering after a final
/// answer for `lingerGraceMs`, or silent for `freshGraceMs` since it connected; never one with
/// a request in progress, a long poll or an event stream) is closed to make room; when none is
/// idle, `healthReserve` more slots serve the service's health checks only, one request each.
/// So a crowd of clients that keep their connections open cannot lock out health checks or a
/// new client.
final class ConnectionSlots: Sendable {
    /// Slots beyond the cap for health checks.
    static let healthReserve = 16
    /// A new connection's request may still be on its way: in a burst of newcomers, evicting
    /// each other before a byte is read would serve none of them.
    static let freshGraceMs: Int64 = 1000
    /// A connection that got its final answer (a 503, say) reads what the client still sends
    /// for a moment: closed with unread bytes, it would reset, and the client could lose the
    /// answer.
    static let lingerGraceMs: Int64 = 250

    /// How soon an idle connection may be evicted.
    enum Idleness {
        case betweenRequests, fresh, lingering
        var graceMs: Int64 {
            switch self {
            case .betweenRequests: return 0
            case .fresh: return ConnectionSlots.freshGraceMs
            case .lingering: return ConnectionSlots.lingerGraceMs
            }
        }
    }

    enum Slot {
        case regular, reserve
    }

    /// How an idle connection is closed from another thread: on its own loop.
    struct Evictor: Sendable {
        let loop: EventLoop
        let evict: @Sendable () -> Void
    }

    private struct Idle {
        var since: UInt64
        var slot: Slot
        var evictor: Evictor
        /// Monotonic ms from which it may be evicted.
        var evictableAt: Int64
    }

    private struct Table {
        var regular = 0
        var reserve = 0
        var idle: [UInt64: Idle] = [:]
        /// Connections evicted but not yet closed: their slot went to a newcomer.
        var evicted: Set<UInt64> = []
        var clock: UInt64 = 0

        /// Takes the oldest idle connection holding a `slot` out of the table, if any.
        mutating func evictOldest(_ slot: Slot) -> Evictor? {
            let now = Monotonic.nowMilliseconds()
            let candidates = idle.filter { $0.value.slot == slot && $0.value.evictableAt <= now }
            guard let (id, entry) = candidates.min(by: { $0.value.since < $1.value.since }) else { return nil }
            idle.removeValue(forKey: id)
            evicted.insert(id)
            return entry.evictor
        }
    }

    let maxConnections: Int
    private let table = Locked(Table())
    private let nextID = Atomic<UInt64>(1)
    private let count: @Sendable (HTTP1ServerEvent) -> Void

    init(maxConnections: Int, count: @escaping @Sendable (HTTP1ServerEvent) -> Void) {
        self.maxConnections = maxConnections
        self.count = count
    }

    func newID() -> UInt64 { nextID.add(1, ordering: .relaxed).oldValue }

    /// A slot for a new connection, evicting an idle one when the slots are full; nil when
    /// even the reserve is busy.
    func admit() -> Slot? {
        let (slot, evictor) = table.withLock { t -> (Slot?, Evictor?) in
            if t.regular < maxConnections {
                t.regular += 1
                return (.regular, nil)
            }
            if let evictor = t.evictOldest(.regular) { return (.regular, evictor) }
            if t.reserve < Self.healthReserve {
                t.reserve += 1
                return (.reserve, nil)
            }
            if let evictor = t.evictOldest(.reserve) { return (.reserve, evictor) }
            return (nil, nil)
        }
        if slot == nil { count(.connectionRefused) }
        if let evictor {
            count(.connectionEvicted)
            evictor.loop.execute(evictor.evict)
        }
        return slot
    }

    /// A reserve connection asks for a regular slot (its request is not a health check): true
    /// when one is free or an idle connection gave its up.
    func promote() -> Bool {
        let (promoted, evictor) = table.withLock { t -> (Bool, Evictor?) in
            if t.regular < maxConnections {
                t.regular += 1
                t.reserve -= 1
                return (true, nil)
            }
            guard let evictor = t.evictOldest(.regular) else { return (false, nil) }
            t.reserve -= 1
            return (true, evictor)
        }
        if let evictor {
            count(.connectionEvicted)
            evictor.loop.execute(evictor.evict)
        }
        return promoted
    }

    /// The connection waits for a request (or lingers): it may be evicted once its grace is over.
    func becameIdle(_ id: UInt64, _ slot: Slot, _ idleness: Idleness, _ evictor: Evictor) {
        let evictableAt = Monotonic.nowMilliseconds() + idleness.graceMs
        table.withLock { t in
            guard !t.evicted.contains(id) else { return }
            t.clock += 1
            t.idle[id] = Idle(since: t.clock, slot: slot, evictor: evictor, evictableAt: evictableAt)
        }
    }

    /// A request starts: false when the connection was evicted already (it must close).
    func becameBusy(_ id: UInt64) -> Bool {
        table.withLock { t in
            t.idle.removeValue(forKey: id)
            return !t.evicted.contains(id)
        }
    }

    func closed(_ id: UInt64, _ slot: Slot) {
        table.withLock { t in
            t.idle.removeValue(forKey: id)
            // An evicted connection's slot already belongs to the newcomer that evicted it.
            guard t.evicted.remove(id) == nil else { return }
            switch slot {
            case .regular: t.regular -= 1
            case .reserve: t.reserve -= 1
            }
        }
    }

    var open: Int { table.withLock { $0.regular + $0.reserve } }
}
