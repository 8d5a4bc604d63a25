// IgnoredPushTests: pushes the device ignored, kept for the checks (bounded, counted on), and
// the Live Activity and widget push counters of /metrics.
@testable import APNsCore
import Testing

@Suite("Ignored pushes and Live Activity counters")
struct IgnoredPushTests {
    private func ignored(_ n: UInt64) -> IgnoredPush {
        IgnoredPush(
            sequence: n, apnsID: "ID-\(n)", deviceID: "d", bundleID: "com.example.app", pushType: "liveactivity",
            explanation: "ignored: \(n)", atMs: Int64(n))
    }

    @Test func theNewestAreKeptAndEveryOneIsCounted() {
        var world = World()
        let total = World.ignoredPushesKeep + 5
        for n in 1...UInt64(total) { world.noteIgnoredPush(ignored(n)) }
        #expect(world.counters.ignoredPushes == UInt64(total))
        #expect(world.ignoredPushes.count == World.ignoredPushesKeep)
        #expect(world.ignoredPushes.first?.sequence == 6 && world.ignoredPushes.last?.sequence == UInt64(total))
    }

    @Test func anOutcomeIsCountedAndOnlyAnIgnoredOneIsAFinding() {
        var world = World()
        var described = 0
        for outcome in [DeliveryOutcome.delivered, .throttled, .ignored, .pending, .rejected] {
            world.noteLiveActivityOutcome(outcome) {
                described += 1
                return ignored(1)
            }
        }
        #expect(described == 1, "a finding is described only when there is one")
        #expect(world.counters.liveActivityPushes == [.delivered: 1, .throttled: 1, .ignored: 1])
        #expect(world.ignoredPushes.map(\.sequence) == [1])
    }

    @Test func widgetPushesAreCountedByKindAndOutcome() {
        var counters = Counters()
        counters.countWidgetPush(kind: .widgets, outcome: .delivered)
        counters.countWidgetPush(kind: .controls, outcome: .ignored)
        counters.countWidgetPush(kind: .controls, outcome: .ignored)
        let seen = counters.widgetPushes.map { "\($0.kind.rawValue) \($0.outcome.rawValue) \($0.count)" }.sorted()
        #expect(seen == ["controls ignored 2", "widgets delivered 1"])
        #expect(WidgetPushKind(.widgets) == .widgets && WidgetPushKind(.controls) == .controls && WidgetPushKind(.alert) == nil)
    }
}
