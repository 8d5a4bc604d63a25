// LiveActivityPolicy+Options: the flags for the budgets a device puts on Live Activity updates
// and widget (or control) reloads by push, and their mapping. Apple publishes none of these
// numbers, so each is a parameter. Imports APNsCore (LiveActivityPolicy) and
// CommandLineOptions only.
import APNsCore
import CommandLineOptions

extension LiveActivityPolicy {
    enum Flag {
        private static let defaults = LiveActivityPolicy()
        static let updateBudget = OptionSpec(
            "live-activity-budget-per-hour", "N", default: String(defaults.updatesPerWindow),
            "priority-10 updates one Live Activity may show per hour (Apple publishes no figure); the rest are throttled and shown when the budget allows, 0 = every priority-10 update is throttled"
        )
        static let frequentUpdateBudget = OptionSpec(
            "live-activity-frequent-budget-per-hour", "N", default: String(defaults.updatesPerWindowWithFrequentUpdates),
            "the same for apps that declare frequent updates (NSSupportsLiveActivitiesFrequentUpdates); never below --live-activity-budget-per-hour (when not given, raised to it)"
        )
        static let strictDecoding = OptionSpec(
            "live-activity-strict-decoding", nil,
            "a device drops a Live Activity push whose attributes or content-state hold a null or an ISO-8601 date string, as an app whose fields are not optional (or are Dates) fails to decode them; off: shown, as for optional or String fields"
        )
        static let maxHeld = OptionSpec(
            "max-live-activities", "N", default: String(defaults.maxHeld),
            "Live Activities one device holds at once, running or ended and still on its Lock Screen, across its apps: a start past it makes the ended one that ended first leave the Lock Screen, or, when all still run, is refused as iOS refuses one past its maximum (iOS's own per-app and per-device figures are not published, and lower: give a smaller N to model them)"
        )
        static let widgetBudget = OptionSpec(
            "widget-push-budget-per-day", "N", default: String(defaults.widgetPushesPerWindow),
            "widgets and controls reloads by push one app may have per day (Apple publishes no figure); over it one reload waits for the budget, 0 = none goes through"
        )
    }

    /// The largest budget a flag takes: far beyond anything a device allows, and small enough
    /// that a budget's remembered times stay bounded.
    static let maxBudget = 100_000

    init(_ options: ResolvedOptions, over base: Self) throws(UsageError) {
        self = base
        let updates = try options.integer(Flag.updateBudget, in: 0...Self.maxBudget)
        let frequent = try options.integer(Flag.frequentUpdateBudget, in: 0...Self.maxBudget)
        updatesPerWindow = updates ?? updatesPerWindow
        if let frequent {
            // Frequent updates raise the budget (Apple's wording); a lower figure is a mistake.
            guard frequent >= updatesPerWindow else {
                throw UsageError(
                    "\(options.origin(Flag.frequentUpdateBudget)): \(frequent) is below the budget without frequent updates (\(updatesPerWindow), \(options.origin(Flag.updateBudget))); frequent updates raise the budget, they never lower it"
                )
            }
            updatesPerWindowWithFrequentUpdates = frequent
        } else {
            // Only the ordinary budget given: frequent updates still never get less.
            updatesPerWindowWithFrequentUpdates = max(updatesPerWindowWithFrequentUpdates, updatesPerWindow)
        }
        widgetPushesPerWindow = try options.integer(Flag.widgetBudget, in: 0...Self.maxBudget) ?? widgetPushesPerWindow
        strictDecoding = try options.switchValue(Flag.strictDecoding) ?? strictDecoding
        maxHeld = try options.integer(Flag.maxHeld, in: 1...10_000) ?? maxHeld
    }
}
