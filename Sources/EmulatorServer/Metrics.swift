import AdminAPI
import APNsCore
import Foundation
import Locking
import StatePersistence

/// Request processing time, one histogram per event loop (no contention on the hot path);
/// `/metrics` adds them up.
final class LatencyHistograms: Sendable {
    /// One lock per loop, each in a small box.
    private final class Box: Sendable {
        let histogram = Locked(Histogram(bounds: Histogram.latencyBounds))
    }

    private let perLoop: [Box]

    init(loops: Int) {
        perLoop = (0..<max(1, loops)).map { _ in Box() }
    }

    func record(nanoseconds: UInt64, loop: Int) {
        perLoop[loop % perLoop.count].histogram.withLock { $0.record(Double(nanoseconds) / 1e9) }
    }

    func reset() {
        for box in perLoop { box.histogram.withLock { $0 = Histogram(bounds: Histogram.latencyBounds) } }
    }

    /// Every loop's samples together.
    func snapshot() -> Histogram {
        var total = Histogram(bounds: Histogram.latencyBounds)
        for box in perLoop { total.add(box.histogram.withLock { $0 }) }
        return total
    }
}

extension Emulator {
    /// `/metrics`: every family is named `apns_emulator_*`.
    func metricsText() -> String {
        let now = clock.nowMilliseconds()
        let (counters, records, deviceCount, pending, activities, handOffsWaiting) = state.readWorld { w in
            (
                w.counters, w.records.count, w.registry.devices.count, w.delivery.pendingCount,
                Self.activitiesByState(w.liveActivities, nowMs: now), w.handOffsWaiting
            )
        }
        var p = PrometheusText()
        p.family(
            "apns_emulator_notifications_total", "counter",
            "Requests to /3/device by response status, reason, push type and environment.")
        let notifications = counters.notifications(spelling: configuration.endpoint.reasonText)
        for (key, value) in notifications.sorted(by: {
            ($0.key.status, $0.key.reason, $0.key.pushType, $0.key.environment.rawValue) < (
                $1.key.status, $1.key.reason, $1.key.pushType, $1.key.environment.rawValue
            )
        }) {
            p.sample(
                "apns_emulator_notifications_total",
                [
                    ("status", String(key.status)), ("reason", key.reason),
                    ("push_type", key.pushType), ("environment", key.environment.rawValue),
                ],
                Double(value))
        }
        p.labelled(
            "apns_emulator_requests_by_topic_total", "counter",
            "Requests that reached the payload checks, by apns-topic (the first \(Counters.maxTopics) topics; later ones, and topics refused as no app's, as other).",
            by: "topic", counters.byTopic.map { ($0.key, Double($0.value)) }.sorted { $0.0 < $1.0 })
        // The Push Notifications Console's view: requests received and accepted, then each
        // delivery state entered, labelled with the console's names.
        let received = notifications.values.reduce(0, +)
        let accepted = notifications.filter { $0.key.status == 200 }.values.reduce(0, +)
        p.labelled(
            "apns_emulator_console_states_total", "counter",
            "Notifications entering each state of Apple's Push Notifications Console (Received, Accepted, Stored: device offline, Delivered from storage, Discarded: …).",
            by: "state",
            [("Received", Double(received)), ("Accepted", Double(accepted))] + counters.consoleSteps.map { ($0.0.rawValue, Double($0.1)) })
        p.labelled(
            "apns_emulator_delivery_outcomes_total", "counter",
            "Accepted notifications entering each delivery state (stored, delivered, expired, coalesced, throttled, deferred, dropped-by-system, pending, ignored).",
            by: "outcome", counters.outcomes.map { ($0.key.rawValue, Double($0.value)) }.sorted { $0.0 < $1.0 })
        // Every outcome a device gives a Live Activity push, seen or not, so a dashboard's
        // series exist from the start.
        let liveActivityPushes = counters.liveActivityPushes
        var liveActivityOutcomes: [DeliveryOutcome] = [.delivered, .ignored, .throttled]
        liveActivityOutcomes += liveActivityPushes.keys.filter { !liveActivityOutcomes.contains($0) }.sorted { $0.rawValue < $1.rawValue }
        p.labelled(
            "apns_emulator_live_activity_pushes_total", "counter",
            "liveactivity pushes to Live Activity tokens by what the device did: delivered (shown), ignored (dropped, GET /api/v1/checks says why), throttled (over the update budget, shown later).",
            by: "outcome", liveActivityOutcomes.map { ($0.rawValue, Double(liveActivityPushes[$0] ?? 0)) })
        p.labelled(
            "apns_emulator_live_activities", "gauge",
            "Live Activities on every device by state (active, stale, ended, dismissed; dismissed ones as far as they are kept).",
            by: "state", LiveActivityState.allCases.map { ($0.rawValue, Double(activities[$0] ?? 0)) })
        p.family(
            "apns_emulator_widget_pushes_total", "counter",
            "widgets and controls pushes devices took, by kind and outcome: delivered (timelines reloaded), ignored (no content-changed), throttled (over the daily budget)."
        )
        for push in counters.widgetPushes.sorted(by: { ($0.kind.rawValue, $0.outcome.rawValue) < ($1.kind.rawValue, $1.outcome.rawValue) }) {
            p.sample("apns_emulator_widget_pushes_total", [("kind", push.kind.rawValue), ("outcome", push.outcome.rawValue)], Double(push.count))
        }
        p.labelled(
            "apns_emulator_jwt_verifications_total", "counter",
            "Provider tokens checked afresh (cache misses) by result: valid, or the APNs reason.",
            by: "result", counters.jwtVerifications.map { ($0.key, Double($0.value)) }.sorted { $0.0 < $1.0 })
        p.labelled(
            "apns_emulator_fault_rules_fired_total", "counter", "Requests a fault rule acted on, by rule id.",
            by: "rule", counters.faultsFired.map { ($0.key, Double($0.value)) }.sorted { $0.0 < $1.0 })
        p.single(
            "apns_emulator_cross_account_deliveries_total", "counter",
            "Deliveries whose payload named another account (the app backend's addresseePointer) than the one logged in on the device.",
            Double(counters.crossAccountDeliveries))
        p.labelled(
            "apns_emulator_broadcast_deliveries_total", "counter",
            "Broadcasts reaching subscribed Live Activities, by outcome: delivered, ignored, throttled, coalesced (a newer one replaced it), stored (device offline), expired (missed).",
            by: "outcome", counters.broadcastDeliveries.map { ($0.key.rawValue, Double($0.value)) }.sorted { $0.0 < $1.0 })
        let calls = backendCalls.counts
        p.labelled(
            "apns_emulator_backend_calls_total", "counter",
            "Simulated apps' calls to their backends by result: sent (answered, not retried), failed (every attempt), dropped (queue full).",
            by: "result", [("sent", Double(calls.sent)), ("failed", Double(calls.failed)), ("dropped", Double(calls.dropped))])
        let lock = state.lockTime
        p.single(
            "apns_emulator_state_lock_held_seconds_total", "counter",
            "Time changes spent inside the state's lock (one at a time, whatever --threads says).",
            Double(lock.heldNanoseconds) / 1e9)
        p.single(
            "apns_emulator_state_lock_waited_seconds_total", "counter",
            "Time changes waited for the state's lock while another thread held it.", Double(lock.waitedNanoseconds) / 1e9)
        p.single(
            "apns_emulator_state_lock_acquisitions_total", "counter", "Times changes took the state's lock.", Double(lock.acquisitions))
        p.single(
            "apns_emulator_provider_connections", "gauge", "Open provider (HTTP/2) connections.",
            Double(providers.openConnections.load(ordering: .relaxed)))
        p.single(
            "apns_emulator_provider_connections_total", "counter", "Provider connections accepted.",
            Double(providers.connectionsTotal.load(ordering: .relaxed)))
        p.single(
            "apns_emulator_streams_total", "counter", "HTTP/2 requests (streams) answered on provider connections.",
            Double(providers.streamsTotal.load(ordering: .relaxed)))
        p.single(
            "apns_emulator_pushes_handed_off_total", "counter",
            "--redis: pushes this instance accepted for a device another instance owns, handed to that instance to route.",
            Double(counters.pushesHandedOff))
        p.single(
            "apns_emulator_handoffs_routed_total", "counter",
            "--redis: pushes routed here for a device this instance owns, handed over by the instance that accepted them (or left by one that stopped).",
            Double(counters.handOffsRouted))
        p.single(
            "apns_emulator_handoffs_lost_total", "counter",
            "--redis: hand-offs this instance owned that it could not route: their journal record fell off the end first and could not be kept.",
            Double(counters.handOffsLost))
        p.single(
            "apns_emulator_handoffs_waiting", "gauge",
            "--redis: pushes handed off to their device's owner that this instance knows of and has not seen routed yet.",
            Double(handOffsWaiting))
        p.single(
            "apns_emulator_shared_writes_unread", "gauge",
            "--redis-follow lazy: writes of other instances that only added to the journal, not read into this instance's copy yet (an admin API read or a change under the lease reads them).",
            Double(shared?.unreadJournalWrites ?? 0))
        p.single(
            "apns_emulator_pushes_waiting_for_the_lease_total", "counter",
            "--redis: pushes judged on a thread that waited for this instance's turn to change the shared state, not on their event loop.",
            Double(providers.deferredPushes.load(ordering: .relaxed)))
        p.family(
            "apns_emulator_channel_requests_total", "counter",
            "Channel management and broadcast requests by operation (create, read, delete, list, broadcast, unknown) and status.")
        for (key, value) in providers.channelRequests.withLock({ $0 }).sorted(by: {
            ($0.key.operation, $0.key.status) < ($1.key.operation, $1.key.status)
        }) {
            p.sample("apns_emulator_channel_requests_total", [("operation", key.operation), ("status", String(key.status))], Double(value))
        }
        p.histogram(
            "apns_emulator_request_duration_seconds",
            "Time from a complete request to its response being queued (fault delays included).", providers.latency.snapshot())
        p.histogram(
            "apns_emulator_delivery_latency_seconds",
            "Time from the provider's 200 to the device's ack (device sockets; virtual devices have no ack).",
            counters.deliveryLatency)
        p.histogram("apns_emulator_payload_bytes", "Payload sizes of requests that reached the payload checks.", counters.payloadSizes)
        p.labelled(
            "apns_emulator_connections_refused_total", "counter",
            "Connections closed on arrival: --max-connections of their kind were open (provider, device), --connection-churn (churn), or a client certificate of the other environment (certificate_environment: GOAWAY BadCertificateEnvironment).",
            by: "kind",
            [listeners.providerBudget, listeners.deviceBudget].map { ($0.kind, Double($0.refused.load(ordering: .relaxed))) }
                + [
                    ("churn", Double(providers.churnRefused.load(ordering: .relaxed))),
                    ("certificate_environment", Double(providers.certificateEnvironmentRefused.load(ordering: .relaxed))),
                ])
        p.single(
            "apns_emulator_connections_ended_for_errors_total", "counter",
            "Provider connections ended with GOAWAY because their errors reached --error-disconnect.",
            Double(providers.errorDisconnects.load(ordering: .relaxed)))
        p.single(
            "apns_emulator_connections_ended_for_http2_errors_total", "counter",
            "Provider connections the HTTP/2 layer ended with GOAWAY for the client's error: a flood (rapid reset, CONTINUATION, SETTINGS), a protocol, flow-control or compression error.",
            Double(providers.http2Errors.load(ordering: .relaxed)))
        p.single(
            "apns_emulator_accept_pauses_total", "counter",
            "Times a listener stopped accepting for a moment because the process was out of file descriptors.",
            Double(listeners.acceptPauses.load(ordering: .relaxed)))
        p.single("apns_emulator_device_connections", "gauge", "Connected device sockets.", Double(devices.connectionCount))
        p.single("apns_emulator_devices", "gauge", "Devices known (virtual and socket).", Double(deviceCount))
        p.single(
            "apns_emulator_pending_deliveries", "gauge",
            "Accepted notifications not yet settled (stored, deferred, batched, in flight).", Double(pending))
        p.single("apns_emulator_records", "gauge", "Notification records kept for inspection.", Double(records))
        if let durability { stateMetrics(durability.statistics, into: &p) }
        // Real time, as /api/v1/info says it: moving the emulated clock moves no uptime.
        p.single("apns_emulator_uptime_seconds", "gauge", "Seconds since start.", Double(uptimeMilliseconds) / 1000)
        adminMetrics.appendText(to: &p, server: adminServer, events: events)
        return p.text
    }

    /// Every device's activities by their state at `nowMs` (a scrape's work, not a push's).
    private static func activitiesByState(_ world: LiveActivityWorld, nowMs: Int64) -> [LiveActivityState: Int] {
        var counts: [LiveActivityState: Int] = [:]
        for book in world.books.values {
            for activity in book.activities(includeDismissed: true) { counts[activity.state(atMs: nowMs), default: 0] += 1 }
        }
        return counts
    }

    /// `--state-dir` only. Counted since start (a reset does not zero them: they describe
    /// the store, not the emulated service).
    private func stateMetrics(_ stats: StateWriterStats, into p: inout PrometheusText) {
        p.single(
            "apns_emulator_state_changes_written_total", "counter", "Changes committed to the state directory.",
            Double(stats.changesWritten))
        p.single(
            "apns_emulator_state_transactions_total", "counter", "Transactions (group commits) in the state directory.",
            Double(stats.transactions))
        p.labelled(
            "apns_emulator_state_dropped_total", "counter",
            "Changes not persisted: journal records when the writer queue was full, anything still queued when the emulator stopped while the store was failing.",
            by: "kind", [("record", Double(stats.recordsDropped)), ("state", Double(stats.changesDropped))])
        p.single(
            "apns_emulator_state_write_errors_total", "counter", "Failed transactions in the state directory.",
            Double(stats.writeErrors))
        p.single("apns_emulator_state_queue_changes", "gauge", "Changes waiting for the state writer.", Double(stats.queuedChanges))
        p.single(
            "apns_emulator_state_queue_record_bytes", "gauge", "Estimated bytes of journal records waiting for the state writer.",
            Double(stats.queuedRecordBytes))
        p.single(
            "apns_emulator_state_up", "gauge", "1 while the state directory takes writes, 0 while its transactions fail.",
            stats.failure == nil ? 1 : 0)
        p.single(
            "apns_emulator_state_outages_total", "counter",
            "Times the state directory started failing (every attempt at a transaction failed).", Double(stats.outages))
    }
}
