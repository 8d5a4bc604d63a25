// DeferredPushChecks: with --redis, the stateful part of pushes that an event loop could not
// judge without waiting for this instance's turn to change the shared state, judged on a
// thread that may wait, in batches.
import APNsCore
import Foundation
import Locking
import StatePersistence

/// Pushes waiting for their stateful stages (`ProviderEndpoint.PendingCheck`) while another
/// instance holds the lease. One thread takes them in order, waits for the lease, judges every
/// one queued in one change, and hands each answer back to its connection's event loop with
/// the commit ticket it waits for. So an event loop never blocks on Redis for a push: it goes
/// on reading and judging the stateless stages of its other requests meanwhile.
final class DeferredPushChecks: @unchecked Sendable {
    /// Checks queued at most; a connection that finds the queue full waits for room, so a
    /// stalled lease holds providers back rather than memory.
    static let maxQueued = 20_000
    /// Checks judged in one change at most (the state's lock is held for all of them).
    static let maxPerChange = 500

    struct Item {
        let check: ProviderEndpoint.PendingCheck
        let executor: any CommitExecutor
        /// Runs on `executor`: the answer, and the ticket it waits for (nil: none).
        let done: (PushResponse, UInt64?) -> Void
    }

    private let endpoint: ProviderEndpoint
    private let commits: any CommitTracker
    private let queue = BlockingLock(Queue())
    private struct Queue {
        var items: [Item] = []
        var running = true
    }

    init(endpoint: ProviderEndpoint, commits: any CommitTracker) {
        self.endpoint = endpoint
        self.commits = commits
        let thread = Thread(named: "deferred-pushes") { [self] in self.run() }
        thread.start()
    }

    /// Queues `check`; `done` runs on `executor` once it is judged (in submission order for
    /// one connection, since one thread judges them in order).
    func submit(_ check: ProviderEndpoint.PendingCheck, on executor: any CommitExecutor, _ done: @escaping (PushResponse, UInt64?) -> Void) {
        queue.withLock(when: { $0.items.count < Self.maxQueued || !$0.running }, timeoutMilliseconds: 30_000) {
            (q: inout Queue, _: Bool) in q.items.append(Item(check: check, executor: executor, done: done))
        }
    }

    func stop() {
        queue.withLock { $0.running = false }
    }

    private func run() {
        while true {
            let batch = queue.withLock(when: { !$0.items.isEmpty || !$0.running }, timeoutMilliseconds: 1_000) {
                (q: inout Queue, _: Bool) -> [Item]? in
                if q.items.isEmpty { return q.running ? [] : nil }
                let count = min(q.items.count, Self.maxPerChange)
                defer { q.items.removeFirst(count) }
                return Array(q.items[..<count])
            }
            guard batch != nil else { return }
            if batch!.isEmpty { continue }
            var responses: [PushResponse] = []
            var ticket: UInt64?
            endpoint.state.committingLater {
                var judged = endpoint.state.withSharedWorld(mode: .shared) { (world: inout World) -> [PushResponse] in
                    batch!.map { endpoint.judge($0.check, in: &world) }
                }
                // The few a shared turn cannot judge (`needsLease`), under the lease after it.
                if let first = judged, first.contains(where: \.needsLease) {
                    let again = first.indices.filter { first[$0].needsLease }
                    let redone = endpoint.state.withSharedWorld { (world: inout World) -> [PushResponse] in
                        again.map { endpoint.judge(batch![$0].check, in: &world) }
                    }
                    for (index, position) in again.enumerated() {
                        judged![position] = redone?[index] ?? endpoint.unavailable(batch![position].check)
                    }
                }
                responses = judged ?? batch!.map { endpoint.unavailable($0.check) }
                ticket = judged == nil ? nil : commits.uncommittedTicket()
            }
            // One task per event loop, not one per answer: each wakes its loop once.
            var byExecutor: [ObjectIdentifier: (executor: any CommitExecutor, answers: [(Item, PushResponse)])] = [:]
            for (item, response) in zip(batch!, responses) {
                byExecutor[ObjectIdentifier(item.executor), default: (item.executor, [])].answers.append((item, response))
            }
            for (executor, answers) in byExecutor.values {
                executor.executeConfined({ _ in for (item, response) in answers { item.done(response, ticket) } }, committed: true)
            }
        }
    }
}
