@testable import RedisStore
import Testing

@Suite("Heartbeats: judged only after steady contact with Redis")
struct RedisHeartbeatTests {
    /// Beats every second, all answered at once: steady once the first is 3 s old.
    @Test func beatsAnsweredEverySecondMakeContactSteadyAfterAHeartbeatLifetime() {
        var contact = SteadyContact()
        #expect(!contact.steady(nowMs: 0, for: 3_000), "no beat yet")
        for second in 0...3 { contact.beat(succeeded: true, answeredMs: Int64(second) * 1_000) }
        #expect(!contact.steady(nowMs: 2_999, for: 3_000))
        #expect(contact.steady(nowMs: 3_000, for: 3_000))
        #expect(!contact.steady(nowMs: 4_600, for: 3_000), "a beat overdue: Redis or this instance may be stalled now")
    }

    /// A failed beat (Redis away), or one answered long after the last (Redis paused), starts
    /// the run anew: the others' heartbeats may have lapsed meanwhile for that reason alone.
    @Test(arguments: ["failed", "answered late"])
    func anOutageStartsTheRunAnew(how: String) {
        var contact = SteadyContact()
        for second in 0...5 { contact.beat(succeeded: true, answeredMs: Int64(second) * 1_000) }
        #expect(contact.steady(nowMs: 5_000, for: 3_000))
        if how == "failed" {
            contact.beat(succeeded: false, answeredMs: 6_000)
            #expect(!contact.steady(nowMs: 6_000, for: 3_000))
            contact.beat(succeeded: true, answeredMs: 6_200)
        } else {
            contact.beat(succeeded: true, answeredMs: 6_200)  // 1.2 s after the last: still steady
            #expect(contact.steady(nowMs: 6_200, for: 3_000))
            contact.beat(succeeded: true, answeredMs: 8_200)  // 2 s: Redis stalled in between
        }
        let since = contact.sinceMs ?? 0
        for beat in 1...3 { contact.beat(succeeded: true, answeredMs: since + Int64(beat) * 1_000) }
        #expect(!contact.steady(nowMs: since + 2_999, for: 3_000))
        #expect(contact.steady(nowMs: since + 3_000, for: 3_000))
    }
}
