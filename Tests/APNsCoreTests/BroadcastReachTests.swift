// BroadcastReachTests: what a broadcast's journal record counts of its deliveries.
import Testing

@testable import APNsCore

@Suite("Broadcast reach")
struct BroadcastReachTests {
    func delivery(_ device: String, _ outcome: DeliveryOutcome, fromStore: Bool = false) -> BroadcastReach.Delivery {
        BroadcastReach.Delivery(deviceID: device, activityID: "A-\(device)", outcome: outcome, explanation: "x", fromStore: fromStore)
    }

    @Test func countsEveryDeliveryAndKeepsTheFirstHundred() {
        var reach = BroadcastReach(channelID: "c")
        for i in 0..<150 { reach.add(delivery("d\(i)", i.isMultiple(of: 3) ? .ignored : .delivered)) }
        #expect(reach.subscribers == 150 && reach.reached == 100)
        #expect(reach.outcomes == [.delivered: 100, .ignored: 50])
        #expect(reach.deliveries.count == BroadcastReach.maxDeliveries && reach.omitted == 50)
        #expect(reach.summaryOutcome(keptForLater: false) == .delivered)
    }

    @Test func aStoredDeliveryThatArrivesLaterIsCountedOnceWithItsNewOutcome() {
        var reach = BroadcastReach(channelID: "c")
        reach.add(delivery("away", .stored))
        reach.add(delivery("other", .stored))
        #expect(reach.summaryOutcome(keptForLater: true) == .stored)
        reach.settle(delivery("away", .delivered, fromStore: true), previously: .stored)
        #expect(reach.subscribers == 2 && reach.reached == 1)
        #expect(reach.outcomes == [.delivered: 1, .stored: 1])
        #expect(reach.deliveries.map(\.deviceID) == ["away", "other"], "in place of the stored entry")
        #expect(reach.deliveries.first?.fromStore == true && reach.deliveries.first?.outcome == .delivered)
        // A device that was not counted before is only added (another's stored count stays).
        reach.settle(delivery("new", .delivered, fromStore: true), previously: .stored)
        #expect(reach.outcomes == [.delivered: 2, .stored: 1] && reach.subscribers == 3)
    }

    @Test func theRecordsOutcomeFollowsTheDeliveries() {
        var reach = BroadcastReach(channelID: "c")
        #expect(reach.summaryOutcome(keptForLater: false) == .expired, "nobody subscribed, nothing kept")
        #expect(reach.summaryOutcome(keptForLater: true) == .stored)
        reach.add(delivery("a", .expired))
        #expect(reach.summaryOutcome(keptForLater: false) == .expired)
        reach.add(delivery("b", .ignored))
        #expect(reach.summaryOutcome(keptForLater: false) == .ignored)
        reach.add(delivery("c", .throttled))
        #expect(reach.summaryOutcome(keptForLater: false) == .throttled)
    }
}
