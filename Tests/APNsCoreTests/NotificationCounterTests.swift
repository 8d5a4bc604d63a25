@testable import APNsCore
import Testing

@Suite("Notification counters")
struct NotificationCounterTests {
    /// 200s are counted apart from the rest; read back, every key is where it was counted.
    @Test func everyAnswerIsReadBackUnderItsStatusReasonTypeAndEnvironment() {
        var counters = Counters()
        for _ in 0..<3 { counters.countNotification(status: 200, reason: nil, reasonText: nil, pushType: .alert, environment: .sandbox) }
        counters.countNotification(status: 200, reason: nil, reasonText: nil, pushType: .background, environment: .production)
        counters.countNotification(status: 200, reason: nil, reasonText: nil, pushType: nil, environment: .production)
        counters.countNotification(status: 200, reason: nil, reasonText: nil, pushType: .mdm, environment: .sandbox)
        counters.countNotification(status: 400, reason: .badDeviceToken, reasonText: nil, pushType: .alert, environment: .sandbox)
        counters.countNotification(status: 200, reason: nil, reasonText: "Invented", pushType: .alert, environment: .sandbox)
        let counts = counters.notifications(spelling: \.rawValue)
        #expect(
            counts == [
                Counters.NotificationKey(status: 200, reason: "", pushType: "alert", environment: .sandbox): 3,
                Counters.NotificationKey(status: 200, reason: "", pushType: "background", environment: .production): 1,
                Counters.NotificationKey(status: 200, reason: "", pushType: "", environment: .production): 1,
                Counters.NotificationKey(status: 200, reason: "", pushType: "mdm", environment: .sandbox): 1,
                Counters.NotificationKey(status: 400, reason: "BadDeviceToken", pushType: "alert", environment: .sandbox): 1,
                Counters.NotificationKey(status: 200, reason: "Invented", pushType: "alert", environment: .sandbox): 1,
            ])
    }

    /// A run is one topic by `==` (canonical equivalence), whichever String brings it; it is
    /// counted under the spelling it started with.
    @Test func aRunOfOneTopicKeepsTheSpellingItStartedWith() {
        var counters = Counters()
        for topic in ["caf\u{E9}", "cafe\u{301}", "caf\u{E9}", String("caf\u{E9}x".dropLast())] { counters.countTopic(topic) }
        #expect(counters.byTopic.count == 1)
        #expect(counters.byTopic.first.map { Array($0.key.utf8) } == Array("caf\u{E9}".utf8))
        #expect(counters.byTopic.first?.value == 4)
        counters.countTopic("cafe\u{301}x")
        #expect(counters.byTopic.count == 2)
    }

    @Test func everyDeliveryStepIsCountedUnderItself() {
        var counters = Counters()
        for (n, step) in DeliveryLog.Step.allCases.enumerated() {
            #expect(step.ordinal == n)
            for _ in 0...n { counters.countConsole(step) }
        }
        #expect(counters.consoleSteps.map(\.0) == DeliveryLog.Step.allCases)
        #expect(counters.consoleSteps.map(\.1) == DeliveryLog.Step.allCases.indices.map { UInt64($0 + 1) })
    }
}
