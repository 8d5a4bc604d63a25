import APNsCore
import HTTP1Server

/// The emulator's clock, which only moves forward: expiries, budgets and delays without waiting.
struct ClockRoutes: AdminResource {
    unowned let api: AdminService

    func addRoutes(to r: inout AdminRouter) {
        r.add("GET", "/api/v1/clock", "the emulator's time and how far it was moved ahead") { _, _, _ in
            .json(200, clockJSON())
        }
        r.add("POST", "/api/v1/clock", "move the emulator's time ahead: {\"advanceSeconds\": N} or {\"advanceMs\": N}") { req, _, _ in
            let body = try req.jsonObject()
            try body.refuseUnknownFields(["advanceSeconds", "advanceMs"])
            // Both would leave one of them unused.
            guard body.keys.count <= 1 else { throw AdminError(400, "give \"advanceSeconds\" or \"advanceMs\", not both") }
            let ms: Int64
            let most = OffsetClock.maxAdvanceMilliseconds
            if let seconds = body["advanceSeconds"] {
                guard let value = seconds.numberValue, value >= 0, value <= Double(most / 1000) else {
                    throw AdminError(400, "\"advanceSeconds\" must be a number from 0 to \(most / 1000) (400 days)")
                }
                ms = Int64(value * 1000)
            } else if let millis = body["advanceMs"] {
                guard let value = millis.intValue, value >= 0, value <= most else {
                    throw AdminError(400, "\"advanceMs\" must be a whole number from 0 to \(most) (400 days)")
                }
                ms = value
            } else {
                throw AdminError(400, "give \"advanceSeconds\" or \"advanceMs\" (the clock only moves forward)")
            }
            // First, so that a tick in between finds no ack overdue.
            state.withWorld { $0.clockMoving(byMs: ms) }
            guard host.clock.advance(milliseconds: ms) else {
                state.withWorld { $0.clockMoving(byMs: -ms) }
                throw AdminError(
                    400,
                    "the clock is \(host.clock.offsetMilliseconds / 86_400_000) days ahead already; all moves together take it at most \(OffsetClock.maxOffsetMilliseconds / 86_400_000) days (100 years) ahead. POST /api/v1/reset sets it back"
                )
            }
            // A state directory keeps the offset: after a restart the time goes on from here.
            if state.persistence != nil {
                let offset = host.clock.offsetMilliseconds
                state.withWorld { $0.noteClockOffset(offset) }
            }
            // What the new time releases or expires happens now, not at the next tick.
            host.tickDevices()
            host.log("admin: clock moved ahead by \(ms) ms")
            let moved = clockJSON()
            api.events.clockMoved(moved)
            return .json(200, moved)
        }
    }

    private func clockJSON() -> JSONValue {
        let now = self.now
        return ["now": .string(RFC3339.format(milliseconds: now)), "nowMs": .int(now), "offsetMs": .int(host.clock.offsetMilliseconds)]
    }
}
