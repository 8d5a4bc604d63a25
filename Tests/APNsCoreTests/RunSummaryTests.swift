@testable import APNsCore
import Testing

/// `GET /api/v1/stats`'s summary says when the journal may not hold the whole run.
@Suite("Run summary")
struct RunSummaryTests {
    func journal(capacity: Int, records: Int) -> RecordStore {
        var store = RecordStore(capacity: capacity)
        for k in 0..<records {
            var record = NotificationRecord(apnsID: "A\(k)", token: "00", environment: .sandbox, receivedAtMs: 1_000 + Int64(k))
            record.status = 200
            _ = store.append(moving: &record)
        }
        return store
    }

    @Test func aJournalThatDroppedOrIsFullMayNotHoldTheWholeRun() {
        #expect(!journal(capacity: 3, records: 2).summary(sinceMs: 0).journalMayBeIncomplete)
        // Dropped here.
        let dropped = journal(capacity: 3, records: 5)
        #expect(dropped.evicted == 2 && dropped.summary(sinceMs: 0).journalMayBeIncomplete)
        // Full, nothing dropped by this instance: loaded so at a restart or a join, it cannot
        // tell what went before.
        let full = journal(capacity: 3, records: 3)
        #expect(full.evicted == 0 && full.summary(sinceMs: 0).journalMayBeIncomplete)
        // A run that began after the oldest record kept is whole.
        #expect(!dropped.summary(sinceMs: 1_004).journalMayBeIncomplete)
        #expect(dropped.summary(sinceMs: 1_004).requests == 1)
        // A reset's journal goes on counting what the instance dropped (notificationsDropped),
        // but holds its own run whole: the drops were before it.
        var afterReset = journal(capacity: 3, records: 2)
        afterReset.continueCountingEvictions(from: dropped)
        #expect(afterReset.evicted == 2 && !afterReset.summary(sinceMs: 0).journalMayBeIncomplete)
    }
}
