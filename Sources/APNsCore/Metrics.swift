/// Counters kept with the state (so a reset clears them) for `/metrics`. Counting runs once
/// per request inside the state lock, so keys are plain integers, not strings to hash.
public struct Counters: Sendable {
    public struct NotificationKey: Hashable, Sendable {
        public var status: Int
        public var reason: String
        public var pushType: String
        public var environment: APNsEnvironment
    }

    private static let reasons = APNsReason.allCases
    private static let pushTypes = PushType.allCases
    private static let environments = APNsEnvironment.allCases

    /// status × 10⁶ + (reason index + 1) × 10³ + (push type index + 1) × 10 + environment index.
    private var packed: [Int: UInt64] = [:]
    /// 200s (nearly every push), by (push type index + 1) × 2 + environment index: counted in
    /// place, without hashing a key into `packed`.
    private var accepted = [UInt64](repeating: 0, count: (Counters.pushTypes.count + 1) * Counters.environments.count)
    /// Answers with a reason APNs does not have (fault rules may invent one).
    private var unusual: [NotificationKey: UInt64] = [:]
    /// Entries into each delivery state, by `DeliveryOutcome.allCases` index.
    private var outcomeCounts = [UInt64](repeating: 0, count: DeliveryOutcome.allCases.count)
    /// Delivery steps taken, by the Push Notifications Console's names.
    private var consoleCounts = [UInt64](repeating: 0, count: DeliveryLog.Step.allCases.count)
    /// Provider-token verifications (ES256 runs), by result: `valid` or the reason.
    public private(set) var jwtVerifications: [String: UInt64] = [:]
    public private(set) var faultsFired: [String: UInt64] = [:]
    /// Requests by `apns-topic` (the first `maxTopics` seen; the rest are counted as `other`,
    /// so a provider sending random topics cannot grow /metrics without bound).
    public var byTopic: [String: UInt64] {
        var all = countedTopics
        if runCount > 0 { Self.add(runCount, to: runTopic, in: &all) }
        return all
    }
    public static let maxTopics = 100
    /// The label of topics past `maxTopics`, and of topics refused as no app's.
    public static let otherTopic = "other"
    private var countedTopics: [String: UInt64] = [:]
    /// The topic of the latest requests and how many of them in a row (0: none yet), not yet
    /// in `countedTopics`: providers send one topic after another, so a repeat is one
    /// comparison instead of a hash lookup.
    private var runTopic = ""
    private var runCount: UInt64 = 0
    /// The String the run's topic came in last (equal to `runTopic`): the HTTP/2 layer hands on
    /// the same String for a connection's pushes, and a comparison of one String with itself
    /// is one of two references. A provider's connections each have their own: compared with
    /// the run's first String, another connection's was compared byte by byte every time.
    private var runTopicLastSeen = ""

    mutating func countTopic(_ topic: String?) {
        let key = topic ?? "(none)"
        if runCount > 0, runTopicLastSeen == key {
            runCount += 1
            runTopicLastSeen = key
            return
        }
        // Counted in the order first seen, as if each request had been added at once: the
        // run ends before the new topic is looked at.
        if runCount > 0 { Self.add(runCount, to: runTopic, in: &countedTopics) }
        runTopic = key
        runTopicLastSeen = key
        runCount = 1
    }

    private static func add(_ count: UInt64, to topic: String, in counts: inout [String: UInt64]) {
        if let index = counts.index(forKey: topic) {
            counts.values[index] += count
        } else if counts.count < maxTopics {
            counts[topic] = count
        } else {
            counts[otherTopic, default: 0] += count
        }
    }

    /// Provider's 200 → the device's ack (socket devices; virtual ones have no ack).
    public var deliveryLatency = Histogram(bounds: Histogram.latencyBounds)
    /// Body sizes of the requests that reached the payload checks.
    public var payloadSizes = Histogram(bounds: Histogram.payloadBounds)
    /// Deliveries whose payload named another account than the device's (the cross-account check).
    public var crossAccountDeliveries: UInt64 = 0
    /// `--redis`: pushes accepted here for a device another instance owns (handed to it), and
    /// hand-offs from the others routed here (DeviceOwnership.swift).
    public var pushesHandedOff: UInt64 = 0
    public var handOffsRouted: UInt64 = 0
    /// `--redis`: hand-offs this instance owned whose journal record fell off the end before it
    /// routed them and that could not be kept (past the bound of those kept, or the record could
    /// not be routed from: its payload cut, its token gone).
    public var handOffsLost: UInt64 = 0
    /// Broadcast deliveries to subscribed Live Activities, by outcome (a late one from a
    /// channel's stored message counts again with its new outcome).
    public private(set) var broadcastDeliveries: [DeliveryOutcome: UInt64] = [:]

    mutating func countBroadcastReach(_ reach: BroadcastReach) {
        for (outcome, count) in reach.outcomes { broadcastDeliveries[outcome, default: 0] += UInt64(count) }
    }

    mutating func countBroadcastDelivery(_ outcome: DeliveryOutcome) { broadcastDeliveries[outcome, default: 0] += 1 }
    /// Pushes APNs accepted that the device ignored (the ignored-push check).
    public var ignoredPushes: UInt64 = 0
    /// `liveactivity` pushes by what the device did, by `DeliveryOutcome` ordinal.
    private var liveActivityOutcomeCounts = [UInt64](repeating: 0, count: DeliveryOutcome.allCases.count)
    /// `widgets` then `controls` pushes a virtual device took, by `DeliveryOutcome` ordinal.
    private var widgetOutcomeCounts = [UInt64](repeating: 0, count: WidgetPushKind.allCases.count * DeliveryOutcome.allCases.count)

    public init() {}

    mutating func countNotification(
        status: Int, reason: APNsReason?, reasonText: String?, pushType: PushType?,
        environment: APNsEnvironment
    ) {
        if reason == nil, let reasonText {
            unusual[NotificationKey(status: status, reason: reasonText, pushType: pushType?.rawValue ?? "", environment: environment), default: 0] +=
                1
            return
        }
        let p = pushType.flatMap { Self.pushTypes.firstIndex(of: $0) }.map { $0 + 1 } ?? 0
        let e = environment == .sandbox ? 0 : 1
        if status == 200, reason == nil {
            accepted[p * Self.environments.count + e] += 1
            return
        }
        let r = reason.flatMap { Self.reasons.firstIndex(of: $0) }.map { $0 + 1 } ?? 0
        packed[status * 1_000_000 + r * 1000 + p * 10 + e, default: 0] += 1
    }

    /// Counts by status, reason (as spelled on the wire), push type and environment.
    public func notifications(spelling: (APNsReason) -> String) -> [NotificationKey: UInt64] {
        var out = unusual
        for (key, count) in packed {
            let status = key / 1_000_000
            let r = key / 1000 % 1000
            let p = key / 10 % 100
            let e = key % 10
            let notificationKey = NotificationKey(
                status: status, reason: r == 0 ? "" : spelling(Self.reasons[r - 1]),
                pushType: p == 0 ? "" : Self.pushTypes[p - 1].rawValue,
                environment: Self.environments[e])
            out[notificationKey, default: 0] += count
        }
        for (index, count) in accepted.enumerated() where count > 0 {
            let p = index / Self.environments.count
            let key = NotificationKey(
                status: 200, reason: "", pushType: p == 0 ? "" : Self.pushTypes[p - 1].rawValue,
                environment: Self.environments[index % Self.environments.count])
            out[key, default: 0] += count
        }
        return out
    }

    mutating func countOutcome(_ outcome: DeliveryOutcome) {
        outcomeCounts[outcome.ordinal] += 1
    }

    mutating func countConsole(_ step: DeliveryLog.Step) { consoleCounts[step.ordinal] += 1 }

    /// Every console step with its count (zeros included, so dashboards see the series).
    public var consoleSteps: [(DeliveryLog.Step, UInt64)] {
        DeliveryLog.Step.allCases.map { ($0, consoleCounts[$0.ordinal]) }
    }

    public var outcomes: [DeliveryOutcome: UInt64] {
        var out: [DeliveryOutcome: UInt64] = [:]
        for (index, count) in outcomeCounts.enumerated() where count > 0 { out[DeliveryOutcome.allCases[index]] = count }
        return out
    }

    mutating func countLiveActivityPush(_ outcome: DeliveryOutcome) { liveActivityOutcomeCounts[outcome.ordinal] += 1 }

    /// `liveactivity` pushes by outcome (those that occurred).
    public var liveActivityPushes: [DeliveryOutcome: UInt64] {
        var out: [DeliveryOutcome: UInt64] = [:]
        for (index, count) in liveActivityOutcomeCounts.enumerated() where count > 0 { out[DeliveryOutcome.allCases[index]] = count }
        return out
    }

    mutating func countWidgetPush(kind: WidgetPushKind, outcome: DeliveryOutcome) {
        widgetOutcomeCounts[(kind == .widgets ? 0 : 1) * DeliveryOutcome.allCases.count + outcome.ordinal] += 1
    }

    /// `widgets` and `controls` pushes virtual devices took, by kind and outcome (those that occurred).
    public var widgetPushes: [(kind: WidgetPushKind, outcome: DeliveryOutcome, count: UInt64)] {
        var out: [(kind: WidgetPushKind, outcome: DeliveryOutcome, count: UInt64)] = []
        let outcomes = DeliveryOutcome.allCases
        for (index, count) in widgetOutcomeCounts.enumerated() where count > 0 {
            out.append((index < outcomes.count ? .widgets : .controls, outcomes[index % outcomes.count], count))
        }
        return out
    }

    public mutating func countVerification(_ result: String) { jwtVerifications[result, default: 0] += 1 }
    public mutating func countFault(_ rule: String) { faultsFired[rule, default: 0] += 1 }
    /// A rule deleted: its count goes with it (`nil`: every rule's).
    mutating func forgetFaults(_ rule: String?) {
        if let rule { faultsFired[rule] = nil } else { faultsFired = [:] }
    }
}

extension DeliveryOutcome: CaseIterable {
    public static let allCases: [DeliveryOutcome] = [
        .rejected, .pending, .stored, .delivered, .expired, .coalesced, .throttled, .deferred, .droppedBySystem, .ignored,
    ]

    /// Position in `allCases`, without hashing the raw string.
    var ordinal: Int {
        switch self {
        case .rejected: return 0
        case .pending: return 1
        case .stored: return 2
        case .delivered: return 3
        case .expired: return 4
        case .coalesced: return 5
        case .throttled: return 6
        case .deferred: return 7
        case .droppedBySystem: return 8
        case .ignored: return 9
        }
    }
}
