extension AppState {
    /// The app has been launched (its registration callback has run).
    public var isRunning: Bool { self == .foreground || self == .background || self == .suspended }
}

/// What the user sees.
public enum Display: String, Sendable {
    case banner, notificationCenter, none
    /// Waiting for the next scheduled summary (docs/device-model.md, "Presentation").
    case scheduledSummary
}

/// App callbacks by their iOS names.
public enum AppCallback {
    public static let serviceExtension = "serviceExtension"
    public static let willPresent = "willPresent"
    public static let didReceiveRemoteNotification = "didReceiveRemoteNotification"
    public static let didReceive = "didReceive"
    public static let didReceiveIncomingPush = "didReceiveIncomingPush"
}

final class NotificationSetupBox: Sendable {
    let setup: NotificationSetup
    init(_ setup: NotificationSetup) { self.setup = setup }
}

/// The per-app settings the rules read.
public struct AppSettings: Sendable, Equatable {
    public var authorization: Authorization
    public var appState: AppState
    /// The *Remote notifications* background mode.
    public var backgroundMode: Bool
    /// Categories, `willPresent`, entitlements and the user's per-app switches; nil while all
    /// are the defaults, so the settings every push copies stay a few bytes.
    private var setupBox: NotificationSetupBox?

    public var notifications: NotificationSetup {
        get { setupBox?.setup ?? NotificationSetup() }
        set { setupBox = newValue.isDefault ? nil : NotificationSetupBox(newValue) }
    }

    /// `notifications.isDefault`, without building the default setup.
    public var hasDefaultNotifications: Bool { setupBox == nil }

    public init(
        authorization: Authorization = .authorized, appState: AppState = .background, backgroundMode: Bool = true,
        notifications: NotificationSetup = NotificationSetup()
    ) {
        self.authorization = authorization
        self.appState = appState
        self.backgroundMode = backgroundMode
        self.notifications = notifications
    }

    public static func == (a: Self, b: Self) -> Bool {
        a.authorization == b.authorization && a.appState == b.appState && a.backgroundMode == b.backgroundMode
            && (a.setupBox === b.setupBox || a.notifications == b.notifications)
    }
}

/// What iOS does with one notification that reached the device.
public struct DeliveryVerdict: Sendable, Equatable {
    public var callbacks: [String]
    public var display: Display
    /// `delivered`, or `droppedBySystem` when nothing reaches the app or the user.
    public var outcome: DeliveryOutcome = .delivered
    /// Why the system dropped it or what it left out, in plain words.
    public var reason: String? = nil
    /// The background wake used one unit of the app's background budget.
    public var usedBackgroundBudget = false
}

/// Why a background push is held back instead of handed to the app.
public enum DeferReason: String, Sendable, Equatable {
    /// Over the per-app background budget.
    case budget
    /// Low Power Mode is on.
    case lowPower
    /// The user force-quit the app; it gets the push when launched again.
    case terminated
}

public enum DeliveryDecision: Sendable, Equatable {
    case deliver(DeliveryVerdict)
    case deferBackground(DeferReason)
}

/// The delivery-rule tables of docs/device-model.md as a pure function: permission × app state ×
/// push kind → callbacks and display. Unit-tested row by row.
public enum DeliveryRules {
    /// - Parameters:
    ///   - budgetAvailable: whether the app's background budget allows a wake now.
    public static func decide(
        pushType: PushType, content: PushContent, app: AppSettings, lowPowerMode: Bool,
        budgetAvailable: Bool
    ) -> DeliveryDecision {
        var verdict = DeliveryVerdict(callbacks: [], display: .none)
        if let reason = decide(
            pushType: pushType, content: content, app: app, lowPowerMode: lowPowerMode, budgetAvailable: budgetAvailable,
            into: &verdict)
        {
            return .deferBackground(reason)
        }
        return .deliver(verdict)
    }

    /// `decide` for the request path: the verdict filled in place (`verdict` comes in empty),
    /// the reason to hold it back returned. Bound out of a `DeliveryDecision`, the verdict's
    /// callbacks and reason were copied through the runtime's generic witnesses.
    static func decide(
        pushType: PushType, content: PushContent, app: AppSettings, lowPowerMode: Bool,
        budgetAvailable: Bool, into verdict: inout DeliveryVerdict
    ) -> DeferReason? {
        switch pushType {
        case .voip, .complication, .fileprovider:
            // PushKit pushes wake or launch the app whatever its state and permission.
            verdict.callbacks = [AppCallback.didReceiveIncomingPush]
            return nil
        case .liveactivity, .widgets, .controls, .location, .pushtotalk, .mdm:
            // Handled by the system or an extension, not by app callbacks.
            verdict.display = content.isVisible && pushType == .liveactivity ? .banner : .none
            verdict.reason = "handled by the system (\(pushType.rawValue))"
            return nil
        case .alert, .background:
            break
        }

        let permitted: Bool
        switch app.authorization {
        case .authorized, .ephemeral, .provisional: permitted = true
        case .denied, .notDetermined: permitted = false
        }

        // The visible part: banner or Notification Center, maybe through the service extension.
        var callbacks: [String] = []
        var display = Display.none
        var notes: [String] = []
        if content.isVisible {
            if permitted {
                if content.mutableContent { callbacks.append(AppCallback.serviceExtension) }
                if app.appState == .foreground { callbacks.append(AppCallback.willPresent) }
                display = app.authorization == .provisional ? .notificationCenter : .banner
            } else {
                notes.append("notifications are \(app.authorization.rawValue) for this app, so the system drops the alert")
            }
        }

        // The background part: a wake for didReceiveRemoteNotification.
        var usedBudget = false
        if content.contentAvailable {
            if !app.backgroundMode {
                notes.append("the app lacks the Remote notifications background mode, so content-available does not reach it")
            } else if app.appState == .foreground {
                callbacks.append(AppCallback.didReceiveRemoteNotification)
            } else if !content.isVisible {
                // A pure background push: held back until it can run.
                if app.appState == .terminated { return .terminated }
                if lowPowerMode { return .lowPower }
                if !budgetAvailable { return .budget }
                callbacks.append(AppCallback.didReceiveRemoteNotification)
                usedBudget = true
            } else if app.appState == .terminated {
                notes.append(permitted ? "the app was force-quit, so only the alert is shown" : "the app was force-quit, so it is not woken either")
            } else if lowPowerMode {
                notes.append("Low Power Mode is on, so the app is not woken")
            } else if !budgetAvailable {
                notes.append("the background budget is used up, so the app is not woken")
            } else {
                callbacks.append(AppCallback.didReceiveRemoteNotification)
                usedBudget = true
            }
        } else if !content.isVisible {
            notes.append("the payload has no alert, badge or sound and no content-available, so there is nothing to show or run")
        }

        verdict.outcome = callbacks.isEmpty && display == .none ? .droppedBySystem : .delivered
        verdict.callbacks = callbacks
        verdict.display = display
        if !notes.isEmpty { verdict.reason = notes.joined(separator: "; ") }
        verdict.usedBackgroundBudget = usedBudget
        return nil
    }
}

/// A background-push budget: `perHour` wakes per hour, refilled continuously, with at most
/// `perHour` banked (a token bucket, kept as a theoretical arrival time so integer arithmetic
/// stays exact). Apple says "two or three an hour"; its exact policy is not published.
public struct BackgroundBudget: Sendable, Equatable {
    public let perHour: Int
    /// The theoretical arrival time, in units of ms × perHour, so one wake is exactly
    /// 3,600,000 units whatever `perHour` is.
    private var arrival: Int64
    private static let hour: Int64 = 3_600_000

    public init(perHour: Int, nowMs: Int64) {
        self.perHour = perHour
        arrival = nowMs * Int64(max(perHour, 1))
    }

    /// A budget as another instance left it (`arrivalUnits` of that one).
    public init(perHour: Int, arrivalUnits: Int64) {
        self.perHour = perHour
        arrival = arrivalUnits
    }

    /// The state in full, for sharing it (`--redis`).
    public var arrivalUnits: Int64 { arrival }

    private func scaled(_ ms: Int64) -> Int64 { ms * Int64(perHour) }

    public func available(nowMs: Int64) -> Bool {
        perHour > 0 && arrival - scaled(nowMs) <= Int64(perHour - 1) * Self.hour
    }

    /// Uses one wake; false (and nothing used) when none is left.
    public mutating func consume(nowMs: Int64) -> Bool {
        guard available(nowMs: nowMs) else { return false }
        arrival = max(arrival, scaled(nowMs)) + Self.hour
        return true
    }

    /// Wakes that can happen now (0 to `perHour`): `available` is `wakesLeft > 0`.
    public func wakesLeft(nowMs: Int64) -> Int {
        let debt = arrival - scaled(nowMs)
        guard debt > 0 else { return perHour }
        return max(0, perHour - Int((debt + Self.hour - 1) / Self.hour))
    }

    /// Gives back one wake `consume` took for a push the app never received. Never more than
    /// the budget holds: `consume` starts from now when the arrival is past.
    public mutating func refund() {
        arrival -= Self.hour
    }
}
