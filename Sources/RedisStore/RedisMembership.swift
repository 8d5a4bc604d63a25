// RedisStore: which instance owns which device (the members, in the log) and the routing of
// the pushes other instances hand to this one (DeviceOwnership in APNsCore has the rules).
import APNsCore
import Foundation
import Locking
import MonotonicClock
import Redis

extension RedisCoordinator {
    // MARK: Who owns which device

    /// This copy's view of who owns which device, in the coordinator and in the world; the
    /// hand-offs this instance now owns are routed (a member that left or stopped leaves its
    /// devices' hand-offs to the next owner).
    func setOwnership(_ s: inout Shared, _ members: [Int]) {
        let ownership = DeviceOwnership(members: members, me: instance)
        guard ownership != s.ownership else { return }
        s.ownership = ownership
        othersAreMembers.store(ownership.members != [instance], ordering: .relaxed)
        let owned = state.applyShared { (world: inout World) -> [String] in
            world.ownership = ownership
            return world.handOffsToRoute
        }
        if !owned.isEmpty { queueHandOffs(owned) }
    }

    /// Changes the members (`update` gets the current ones), under the lease with the writer
    /// idle, written at once. False when that could not be done (Redis away).
    @discardableResult
    func changeMembership(_ update: @escaping ([Int]) -> [Int]) -> Bool {
        let done = shared.withLock(when: { $0.writerIdle || $0.unavailable != nil }, timeoutMilliseconds: Int(Self.acquireTimeoutMilliseconds)) {
            (s: inout Shared, ready: Bool) -> Bool in
            guard ready, s.unavailable == nil, let redis = s.redis else { return false }
            do {
                if s.sharing { try releaseSharedTurn(&s, redis) }
                try takeLease(&s, redis)
                if s.needsReload { try reload(&s, redis) }
                let current = try store.members(on: redis)
                let next = Array(Set(update(current))).sorted()
                if next != current {
                    let written = try store.append(
                        [], instance: instance, fence: s.token, epoch: .expect(s.epoch), members: next, on: redis)
                    // Under the lease, the writer idle: the entry follows this copy's version.
                    s.version = written.version
                    s.lastID = written.id
                    s.lastExclusiveChangeMs = Monotonic.nowMilliseconds()
                }
                setOwnership(&s, next)
                return true
            } catch {
                failed(&s, error)
                return false
            }
        }
        flushAnnouncements()
        return done
    }

    /// Becomes a member (owns devices, makes pushes in shared turns), unless another member
    /// numbers its journal records in the same stripe (then it keeps taking the lease).
    /// True when the change was made (the instance may still not be a member: a clash).
    @discardableResult
    func join() -> Bool {
        let stripe = UInt64(instance) % SequenceStripes.count
        return changeMembership { [instance, logger] members in
            let clash = members.first { $0 != instance && UInt64($0) % SequenceStripes.count == stripe }
            if let clash {
                logger.warning(
                    "shared state: instance \(clash) numbers records like this one (\(instance)); this one takes the lease for every change")
                return members
            }
            return members + [instance]
        }
    }

    /// Members whose heartbeat stopped leave (their devices go to the others), and this
    /// instance joins again when it is not one (after a restore, or after being taken for
    /// stopped while paused).
    func sweepMembers() {
        let (members, isMember) = shared.withLock { ($0.ownership?.members ?? [], $0.ownership?.isMember ?? false) }
        if !isMember {
            // Taken for stopped (paused for seconds) or a restored state: the others marked the
            // devices connected here disconnected, and pushes for them were stored; the
            // sockets are still open, so attach them again (they said nothing to make it so).
            // Only once this instance is a member again (not while Redis is away, nor when
            // another instance's stripe clashes and it stays out).
            if join(), shared.withLock({ $0.ownership?.isMember ?? false }) { state.reattachConnectedDevices() }
            return
        }
        let stopped = stoppedInstances(among: members.filter { $0 != instance })
        guard !stopped.isEmpty else { return }
        if changeMembership({ $0.filter { !stopped.contains($0) } }) {
            // Their heartbeat lapsed: stopped, paused, or (after an outage) still reloading;
            // one that is alive joins again by itself, and attaches its devices again.
            logger.info(
                "instance(s) \(stopped.sorted().map(String.init).joined(separator: ", ")) missed their heartbeat for 3 s (stopped, paused, or still reloading after an outage): their devices move to the others until they join again"
            )
        }
    }

    /// Hand-offs routed in one change at most.
    static let handOffsPerChange = 128

    func queueHandOffs(_ devices: [String]) {
        handOffQueue.withLock { (q: inout HandOffQueue) in q.devices.formUnion(devices) }
    }

    /// Routes what other instances handed to this one, in shared turns, and sends the frames
    /// once the changes are written. A change that cannot be written leaves the hand-offs in
    /// place (in Redis too): the reload that follows queues them again.
    func routeHandOffsLoop() {
        while true {
            let devices = handOffQueue.withLock(when: { !$0.devices.isEmpty || !$0.running }, timeoutMilliseconds: 200) {
                (q: inout HandOffQueue, _: Bool) -> [String]? in
                guard q.running else { return nil }
                defer { q.devices = [] }
                return q.devices.sorted()
            }
            guard let devices else { return }
            if devices.isEmpty { continue }
            let now = clock.nowMilliseconds()
            // A bounded number per change: pushes on this instance wait while one runs.
            let (frames, more) =
                state.withSharedWorld(mode: .shared) { world in
                    world.routeHandOffs(deviceIDs: devices, nowMs: now, limit: Self.handOffsPerChange)
                } ?? ([], [])
            if !more.isEmpty { queueHandOffs(more) }
            if !frames.isEmpty { deliverFrames.value?(frames) }
        }
    }
}
