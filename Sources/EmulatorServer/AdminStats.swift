import APNsCore

/// `GET /api/v1/stats`: a load run's summary and the live gauges (the UI's Load tab).
extension AdminAPI {
    func addStatsRoutes(_ r: inout AdminRouter) {
        r.add("GET", "/api/v1/stats", "summary of the requests since a moment (?since=ms or RFC 3339), with live gauges") { [unowned self] req, _, _ in
            var since: Int64 = 0
            if let text = req.query["since"] {
                since = try Self.query(AdminRequest(method: "GET", path: "", query: ["since": text], headers: [:], body: [])).sinceMs ?? 0
            }
            let (summary, pending, records) = state.readWorld { w in (w.records.summary(sinceMs: since), w.delivery.pendingCount, w.records.count) }
            guard case .object(var body) = summary.json else { return .json(200, summary.json) }
            body["now"] = .string(RFC3339.format(milliseconds: now))
            body["providerConnections"] = .int(Int64(emulator.providers.openConnections.load(ordering: .relaxed)))
            body["deviceConnections"] = .int(Int64(emulator.devices.connectionCount))
            body["pendingDeliveries"] = .int(Int64(pending))
            body["records"] = .int(Int64(records))
            return .json(200, .object(body))
        }
    }
}
