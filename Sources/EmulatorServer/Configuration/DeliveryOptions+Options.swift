// DeliveryOptions+Options: the flags for how notifications reach devices (budgets, delays,
// the device window, 429s) and their mapping. Imports APNsCore (DeliveryOptions) and
// CommandLineOptions only.
import APNsCore
import CommandLineOptions

extension DeliveryOptions {
    enum Flag {
        private static let defaults = DeliveryOptions()
        static let backgroundBudget = OptionSpec(
            "background-budget-per-hour", "N", default: String(defaults.backgroundBudgetPerHour),
            "background pushes each app may receive per hour (Apple: two or three); the rest are deferred or throttled")
        static let lowPriorityDelay = OptionSpec(
            "low-priority-delay", "MS", default: String(defaults.lowPriorityDelayMs),
            "deliver priority 5 and 1 pushes this many milliseconds late (released by a once-a-second pass: up to 1 s later still), as Apple batches them for power (0 = at once); not Live Activity pushes or broadcasts"
        )
        static let unregisteredDelay = OptionSpec(
            "unregistered-delay", "SECONDS", default: String(defaults.unregisteredDelayMs / 1000),
            "after an uninstall, keep answering 200 this long before 410 Unregistered starts (Apple delays it unpredictably)")
        static let unregisteredAfterPushes = OptionSpec(
            "unregistered-after-pushes", "N",
            "with --unregistered-delay: start the 410s after N pushes even if the delay is not over")
        static let deviceWindow = OptionSpec(
            "device-window", "N", default: String(defaults.deviceWindow),
            "deliveries a connected device may leave unacknowledged; beyond it notifications are stored (the newest per app), older ones coalesced")
        static let deviceAckTimeout = OptionSpec(
            "device-ack-timeout", "SECONDS", default: String(defaults.deviceAckTimeoutMs / 1000),
            "disconnect a device whose oldest unacknowledged delivery is this old (what it did not ack is stored again)")
        static let storedSurvivor = OptionSpec(
            "stored-survivor", "newest|random|random:SEED", default: "newest",
            "which notification an offline device's slot keeps when several arrive for an app: the newest, or one at random (Apple: \"non-deterministic\"); a SEED makes the choice repeatable"
        )
        static let tooManyRequests = OptionSpec(
            "too-many-requests", "N/SECONDS|off",
            "429 TooManyRequests when one device token gets more than N pushes within SECONDS (default: off); not Live Activity push tokens, whose update budgets apply instead"
        )
    }

    init(_ options: ResolvedOptions, over base: Self) throws(UsageError) {
        self = base
        backgroundBudgetPerHour = try options.integer(Flag.backgroundBudget, in: 0...100_000) ?? backgroundBudgetPerHour
        lowPriorityDelayMs = try options.integer(Flag.lowPriorityDelay, in: 0...3_600_000).map(Int64.init) ?? lowPriorityDelayMs
        unregisteredDelayMs =
            try options.integer(Flag.unregisteredDelay, in: 0...86_400 * 30).map { Int64($0) * 1000 }
            ?? unregisteredDelayMs
        unregisteredAfterPushes = try options.integer(Flag.unregisteredAfterPushes, in: 1...1_000_000) ?? unregisteredAfterPushes
        deviceWindow = try options.integer(Flag.deviceWindow, in: 1...1_000_000) ?? deviceWindow
        deviceAckTimeoutMs = try options.integer(Flag.deviceAckTimeout, in: 1...86_400).map { Int64($0) * 1000 } ?? deviceAckTimeoutMs
        tooManyRequests = try options.countWithin(Flag.tooManyRequests, example: "100/1") ?? tooManyRequests
        switch options.string(Flag.storedSurvivor) {
        case nil, "newest": break
        case "random": storedSurvivor = .random(seed: UInt64.random(in: 0...UInt64.max))
        case let text? where text.hasPrefix("random:"):
            guard let seed = UInt64(text.dropFirst("random:".count)) else {
                throw UsageError("\(options.origin(Flag.storedSurvivor)): '\(text)' is not random:SEED with SEED a whole number")
            }
            storedSurvivor = .random(seed: seed)
        case let other?: throw UsageError("\(options.origin(Flag.storedSurvivor)): '\(other)' is not newest, random or random:SEED")
        }
    }
}
