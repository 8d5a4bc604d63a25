import APNsCore
import Foundation
import HTTP1Server
import Locking
import Networking

/// The emulator itself: health checks, metrics, the web UI and this API's document, what is
/// running, the load summary, and the reset.
struct SystemRoutes: AdminResource {
    unowned let api: AdminService

    func addRoutes(to r: inout AdminRouter) {
        r.add("GET", "/livez", "liveness", open: true) { _, _, _ in .json(200, ["status": "live"]) }
        r.add("GET", "/readyz", "readiness", open: true) { _, _, _ in
            if let reason = state.unavailableReason { return .json(503, ["status": "unavailable", "reason": .string(reason)]) }
            return host.isReady ? .json(200, ["status": "ready"]) : .json(503, ["status": "starting"])
        }
        r.add("GET", "/metrics", "Prometheus metrics") { _, _, _ in
            HTTP1ServerResponse(
                status: 200, headers: [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")], body: Array(host.metricsText().utf8))
        }
        r.add("GET", "/", "web UI", open: true) { _, _, _ in UIAssets.response(for: "index.html") }
        r.add("GET", "/ui/{file}", "web UI assets", open: true) { _, p, _ in UIAssets.response(for: p["file"] ?? "") }
        r.add("GET", "/api/v1/openapi.json", "this API as OpenAPI 3") { _, _, _ in
            HTTP1ServerResponse(status: 200, headers: [("Content-Type", "application/json")], body: Array(UIAssets.openAPI.utf8))
        }
        r.add("GET", "/api/v1/info", "version, uptime, addresses, counts") { _, _, _ in .json(200, info()) }
        r.add("POST", "/api/v1/reset", "back to the configured start state") { req, _, _ in
            try req.refuseBody()
            Self.dispose(host.resetToStart())
            host.log("admin: reset to the configured start state")
            return .json(200, ["reset": true])
        }
        r.add("GET", "/api/v1/stats", "summary of the requests since a moment (?since=ms or RFC 3339), with live gauges") { req, _, _ in
            try stats(req)
        }
    }

    private func info() -> JSONValue {
        let (records, evicted, devices, tokens, keys, apps, faults, pending, ownership) = state.readWorld { w in
            (
                w.records.count, w.records.evicted, w.registry.devices.count, w.registry.tokens.count, w.credentials.keys.count,
                w.credentials.apps.count, w.faults.rules.count, w.delivery.pendingCount, w.ownership
            )
        }
        var info: JSONValue = [
            "version": .string(host.version),
            "startedAt": .string(RFC3339.format(milliseconds: host.startedAtMs)),
            "uptimeSeconds": .int(host.uptimeMilliseconds / 1000),
            "addresses": host.addresses,
            "counts": [
                "notifications": .int(Int64(records)), "notificationsDropped": .int(Int64(evicted)),
                "devices": .int(Int64(devices)), "tokens": .int(Int64(tokens)), "keys": .int(Int64(keys)),
                "apps": .int(Int64(apps)), "faultRules": .int(Int64(faults)), "pendingDeliveries": .int(Int64(pending)),
                "providerConnections": .int(Int64(host.providerConnectionCount)),
                "deviceConnections": .int(Int64(host.deviceConnectionCount)),
            ],
        ]
        // Several instances (`--redis`): this one's number and the members that own devices.
        if let ownership, case .object(var object) = info {
            object["instance"] = .int(Int64(ownership.me))
            object["members"] = .array(ownership.members.map { .int(Int64($0)) })
            info = .object(object)
        }
        return info
    }

    /// A load run's summary and the live gauges (the UI's Load tab).
    private func stats(_ req: HTTP1Request) throws -> HTTP1ServerResponse {
        var since: Int64 = 0
        if let text = req.query["since"] {
            since = try Self.query(HTTP1Request(method: "GET", path: "", query: ["since": text], headers: [:], body: [])).sinceMs ?? 0
        }
        let (summary, pending, records) = state.readJournal { w in (w.records.summary(sinceMs: since), w.delivery.pendingCount, w.records.count) }
        guard case .object(var body) = summary.json else { return .json(200, summary.json) }
        body["now"] = .string(RFC3339.format(milliseconds: now))
        body["providerConnections"] = .int(Int64(host.providerConnectionCount))
        body["deviceConnections"] = .int(Int64(host.deviceConnectionCount))
        body["pendingDeliveries"] = .int(Int64(pending))
        body["records"] = .int(Int64(records))
        return .json(200, .object(body))
    }

    /// Frees the world a reset replaced off the event loops (1,000,000 devices take seconds),
    /// 5,000 devices at a time with a pause between, then gives its pages back to the OS, which
    /// glibc would otherwise keep (a reset used to leave the process at 2.1 GB).
    static func dispose(_ replaced: ReplacedWorld) {
        let thread = Thread(named: "world-disposal") {
            // The lowest priority: throwing the old world away must not take a core from a loop.
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)  // 0: this thread, on Linux
            while replaced.freeSome(5000) { usleep(1000) }
            replaced.free()
            Memory.returnFreedPages()
        }
        thread.start()
    }
}
