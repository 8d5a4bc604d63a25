/// How accepted notifications travel to devices (docs/device-model.md).
public struct DeliveryOptions: Sendable {
    /// Delivery ids are the notifications' journal sequence numbers (several instances
    /// sharing the state, where every instance must find the delivery an ack names).
    public var deliveryIDsAreSequences = false
    /// Background wakes per (device, app) per hour. Apple: "two or three an hour".
    public var backgroundBudgetPerHour = 3
    /// How long APNs keeps a notification for an offline device when `apns-expiration` is absent.
    public var defaultStorageMs: Int64 = 30 * 86_400_000
    /// Priority 5 and 1 are batched for power: delivered this long after acceptance. 0 = at once.
    public var lowPriorityDelayMs: Int64 = 0
    /// After an uninstall, how long APNs keeps answering 200 before 410 starts (0 = at once).
    public var unregisteredDelayMs: Int64 = 0
    /// After an uninstall with a delay, start 410 after this many pushes even if the delay is
    /// not over (nil = time only).
    public var unregisteredAfterPushes: Int?
    /// 429 `TooManyRequests` when one token gets more than `count` pushes within `windowMs`
    /// (nil = off: Apple publishes no number, and load tests hit single tokens hard).
    public var tooManyRequests: (count: Int, windowMs: Int64)?
    /// Deliveries a connected device may have unacknowledged. Beyond it the device is treated
    /// as unreachable: APNs keeps the newest notification per app and the older ones are
    /// coalesced, so a device that falls behind (or never reads) costs bounded memory.
    public var deviceWindow = 1000
    /// A device whose oldest unacknowledged delivery is this old is disconnected; what it
    /// had not acknowledged goes back to the store.
    public var deviceAckTimeoutMs: Int64 = 60_000

    public init() {}
}

/// A message for one device connection, produced inside the lock and written after it.
public struct DeviceFrame: Sendable {
    public init(deviceID: String, connectionID: UInt64, message: JSONValue, closeAfter: Bool = false) {
        self.deviceID = deviceID
        self.connectionID = connectionID
        self.message = message
        self.closeAfter = closeAfter
    }

    public var deviceID: String
    public var connectionID: UInt64
    public var message: JSONValue
    /// Close the connection after writing (a replaced connection).
    public var closeAfter: Bool = false
}

/// A notification on its way to a device.
public struct PendingNotification: Sendable {
    public var sequence: UInt64
    public var apnsID: String
    public var token: String
    public var topic: String
    public var deviceID: String
    public var bundleID: String
    public var pushType: PushType
    public var priority: Int
    public var collapseID: String?
    /// Keep it for an offline device until then (ms); nil = do not store (`apns-expiration: 0`
    /// or a time already past).
    public var storeUntilMs: Int64?
    public var payload: [UInt8]
    public var content: PushContent
    public var wasStored = false
    /// When the provider got its 200 (monotonic ns; 0: not known, e.g. restored from disk),
    /// for the delivery latency histogram.
    public var acceptedAtNanos: UInt64 = 0

    public init(sequence: UInt64, apnsID: String, token: String, topic: String, deviceID: String, bundleID: String,
                pushType: PushType, priority: Int, collapseID: String?, storeUntilMs: Int64?, payload: [UInt8],
                content: PushContent, wasStored: Bool = false)
    {
        self.sequence = sequence
        self.apnsID = apnsID
        self.token = token
        self.topic = topic
        self.deviceID = deviceID
        self.bundleID = bundleID
        self.pushType = pushType
        self.priority = priority
        self.collapseID = collapseID
        self.storeUntilMs = storeUntilMs
        self.payload = payload
        self.content = content
        self.wasStored = wasStored
    }
}

struct AppKey: Hashable, Sendable {
    var deviceID: String
    var bundleID: String
}

struct InFlight: Sendable {
    var connectionID: UInt64
    var notification: PendingNotification
    var verdict: DeliveryVerdict
    var sentAtMs: Int64
}

/// Everything between acceptance and the device: the offline store (one per device and app),
/// held background pushes, deliveries awaiting an ack, budgets and what is on screen.
public struct DeliveryState: Sendable {
    var stored: [AppKey: PendingNotification] = [:]
    var deferred: [AppKey: (notification: PendingNotification, reason: DeferReason)] = [:]
    var batched: [(releaseAtMs: Int64, notification: PendingNotification)] = []
    var inflight: [UInt64: InFlight] = [:]
    /// Unacknowledged deliveries per device (the window, `DeliveryOptions.deviceWindow`).
    var inflightPerDevice: [String: Int] = [:]
    /// Devices whose window filled up: their stored notifications go out as acks free it.
    var windowFull: Set<String> = []
    var budgets: [AppKey: BackgroundBudget] = [:]
    /// Per app, the notification on screen for each `apns-collapse-id` (its record). Only
    /// pushes with a collapse id touch it; taps find their notification in the journal.
    var collapsed: [AppKey: [String: UInt64]] = [:]
    var recentPushes: [String: (windowStartMs: Int64, count: Int)] = [:]
    var nextDeliveryID: UInt64 = 1
    /// Multi-instance mode: notifications another instance sent and is waiting to have
    /// acknowledged, by sequence. That instance owns them (delivery id, verdict, ack timer);
    /// this copy only mirrors them until its rows say where they went. Always empty otherwise.
    var mirroredInflight: [UInt64: PendingNotification] = [:]
    /// With persistence on: notifications entering or leaving a waiting slot, in order.
    /// Budgets, collapse state and flood windows are not kept (they refill or start afresh).
    public var tracksChanges = false
    private var waitingChanges: [StateChange] = []

    public init() {}

    mutating func noteWaiting(_ slot: WaitingSlot, _ notification: PendingNotification, flight: FlightRow? = nil) {
        if tracksChanges {
            waitingChanges.append(.notificationWaiting(WaitingNotification(slot: slot, notification: notification, flight: flight)))
        }
    }

    /// Budgets change only here, so that with change tracking on they are shared.
    mutating func setBudget(_ key: AppKey, _ budget: BackgroundBudget) {
        guard budgets[key] != budget else { return }
        budgets[key] = budget
        if tracksChanges { waitingChanges.append(.budgetSaved(deviceID: key.deviceID, bundleID: key.bundleID, budget: budget)) }
    }

    mutating func noteDone(_ sequence: UInt64) {
        if tracksChanges { waitingChanges.append(.notificationDone(sequence: sequence)) }
    }

    public mutating func takeWaitingChanges() -> [StateChange] { takeAll(&waitingChanges) }

    /// Every waiting notification with its slot, oldest first (a reset's snapshot).
    public var waiting: [WaitingNotification] {
        var all = stored.values.map { WaitingNotification(slot: .stored, notification: $0) }
        all += deferred.values.map { WaitingNotification(slot: .deferred($0.reason), notification: $0.notification) }
        all += batched.map { WaitingNotification(slot: .batched(releaseAtMs: $0.releaseAtMs), notification: $0.notification) }
        all += inflight.map { id, f in
            WaitingNotification(slot: .inFlight, notification: f.notification,
                                flight: FlightRow(deliveryID: id, connectionID: f.connectionID, sentAtMs: f.sentAtMs, verdict: f.verdict))
        }
        all += mirroredInflight.values.map { WaitingNotification(slot: .inFlight, notification: $0) }
        return all.sorted { $0.notification.sequence < $1.notification.sequence }
    }

    /// Notifications accepted and not yet settled, for accounting.
    public var pendingCount: Int { stored.count + deferred.count + batched.count + inflight.count + mirroredInflight.count }
}

// MARK: - Routing accepted notifications

extension World {
    /// An accepted notification: delivered now, stored, held, batched or expired.
    mutating func route(_ notification: PendingNotification, nowMs: Int64) -> [DeviceFrame] {
        guard let device = registry.devices[notification.deviceID] else { return [] }
        if !device.isOnline {
            store(notification, nowMs: nowMs, why: "the device is offline")
            return []
        }
        if notification.priority < 10, deliveryOptions.lowPriorityDelayMs > 0 {
            let releaseAt = nowMs + deliveryOptions.lowPriorityDelayMs
            delivery.batched.append((releaseAt, notification))
            delivery.noteWaiting(.batched(releaseAtMs: releaseAt), notification)
            setOutcome(notification.sequence, .pending,
                       "accepted; priority \(notification.priority) is batched for power and delivered within \(deliveryOptions.lowPriorityDelayMs) ms")
            return []
        }
        return deliverNow(notification, nowMs: nowMs, device: device)
    }

    /// Keeps one notification per (device, app), the newest, until it expires.
    mutating func store(_ notification: PendingNotification, nowMs: Int64, why: String) {
        var notification = notification
        guard let until = notification.storeUntilMs, until > nowMs else {
            setOutcome(notification.sequence, .expired,
                       "\(why), and apns-expiration \(notification.storeUntilMs == nil ? "0 means it is never stored" : "has passed")")
            return
        }
        let key = AppKey(deviceID: notification.deviceID, bundleID: notification.bundleID)
        if let older = delivery.stored[key], older.sequence != notification.sequence {
            setOutcome(older.sequence, .coalesced, "replaced in the store by a newer notification (APNs keeps one per app)")
            delivery.noteDone(older.sequence)
        }
        notification.wasStored = true
        delivery.stored[key] = notification
        delivery.noteWaiting(.stored, notification)
        setOutcome(notification.sequence, .stored, "stored: \(why); kept until \(RFC3339.format(milliseconds: until))")
        records.update(sequence: notification.sequence) { $0.wasStored = true }
    }

    /// Applies the delivery rules and hands the notification to the device.
    mutating func deliverNow(_ notification: PendingNotification, nowMs: Int64, device known: Device? = nil) -> [DeviceFrame] {
        let key = AppKey(deviceID: notification.deviceID, bundleID: notification.bundleID)
        guard let device = known ?? registry.devices[notification.deviceID], let app = device.apps[notification.bundleID] else {
            setOutcome(notification.sequence, .droppedBySystem, "the app is no longer installed, so the device discards it")
            return []
        }
        // Only background wakes need the budget; most pushes never look it up.
        let wantsWake = notification.content.contentAvailable
        var budget = wantsWake
            ? delivery.budgets[key] ?? BackgroundBudget(perHour: deliveryOptions.backgroundBudgetPerHour, nowMs: nowMs)
            : BackgroundBudget(perHour: 0, nowMs: nowMs)
        let decision = DeliveryRules.decide(pushType: notification.pushType, content: notification.content, app: app.settings,
                                            lowPowerMode: device.lowPowerMode, budgetAvailable: budget.available(nowMs: nowMs))
        switch decision {
        case .deferBackground(let reason):
            if let older = delivery.deferred[key], older.notification.sequence != notification.sequence {
                setOutcome(older.notification.sequence, .throttled,
                           "a newer background push replaced it while it was held; the system keeps only the newest")
                delivery.noteDone(older.notification.sequence)
            }
            delivery.deferred[key] = (notification, reason)
            delivery.noteWaiting(.deferred(reason), notification)
            if wantsWake { delivery.setBudget(key, budget) }
            setOutcome(notification.sequence, .deferred, "deferred: " + Self.describe(reason, budget: deliveryOptions.backgroundBudgetPerHour))
            return []
        case .deliver(let verdict):
            if verdict.usedBackgroundBudget {
                _ = budget.consume(nowMs: nowMs)
                delivery.setBudget(key, budget)
            }
            if device.isVirtual {
                settle(notification, verdict: verdict, nowMs: nowMs, device: device)
                return []
            }
            records.update(sequence: notification.sequence) {
                $0.callbacks = verdict.callbacks
                $0.display = verdict.display.rawValue
            }
            guard let connectionID = device.connectionID else {
                store(notification, nowMs: nowMs, why: "the device is offline")
                return []
            }
            let waiting = delivery.inflightPerDevice[device.id, default: 0]
            if waiting >= deliveryOptions.deviceWindow {
                delivery.windowFull.insert(device.id)
                store(notification, nowMs: nowMs,
                      why: "the device has \(waiting) deliveries it has not acknowledged (its window is full)")
                return []
            }
            // Shared state (`--redis`): the notification's sequence, unique across instances,
            // so any instance finds the delivery an ack names, and a row names it at once.
            let id = deliveryOptions.deliveryIDsAreSequences ? notification.sequence : delivery.nextDeliveryID
            delivery.nextDeliveryID = max(delivery.nextDeliveryID, id + 1)
            delivery.inflight[id] = InFlight(connectionID: connectionID, notification: notification, verdict: verdict, sentAtMs: nowMs)
            delivery.inflightPerDevice[device.id] = waiting + 1
            delivery.noteWaiting(.inFlight, notification,
                                 flight: FlightRow(deliveryID: id, connectionID: connectionID, sentAtMs: nowMs, verdict: verdict))
            setOutcome(notification.sequence, .pending, "sent to the device; waiting for its ack")
            return [DeviceFrame(deviceID: device.id, connectionID: connectionID,
                                message: Self.notificationMessage(id: id, notification, verdict))]
        }
    }

    static func describe(_ reason: DeferReason, budget: Int) -> String {
        switch reason {
        case .budget: return "the app's background budget (\(budget) per hour) is used up; delivered when it refills"
        case .lowPower: return "Low Power Mode is on; delivered when it is turned off"
        case .terminated: return "the app was force-quit; delivered when the user launches it"
        }
    }

    /// The final state of a notification the device has (acked, or a virtual device).
    /// Callbacks and display are kept as data; the words are put together when shown.
    /// `device`: the notification's device, when the caller has just looked it up.
    mutating func settle(_ notification: PendingNotification, verdict: DeliveryVerdict, nowMs: Int64, device: Device? = nil) {
        counters.countOutcome(verdict.outcome)
        records.update(sequence: notification.sequence) {
            $0.outcome = verdict.outcome
            $0.explanation = verdict.outcome == .delivered ? "delivered" : "dropped by the system"
            $0.deliveryNote = verdict.reason
            $0.callbacks = verdict.callbacks
            $0.display = verdict.display.rawValue
            $0.deliveredAtMs = nowMs
        }
        noteAccount(notification, verdict: verdict, nowMs: nowMs, device: device)
        guard verdict.display != .none, let collapse = notification.collapseID else { return }
        let key = AppKey(deviceID: notification.deviceID, bundleID: notification.bundleID)
        if let older = delivery.collapsed[key, default: [:]].updateValue(notification.sequence, forKey: collapse),
            older != notification.sequence
        {
            setOutcome(older, .coalesced, "replaced in Notification Center by \(notification.apnsID) with the same apns-collapse-id")
        }
    }

    mutating func setOutcome(_ sequence: UInt64, _ outcome: DeliveryOutcome, _ explanation: String) {
        counters.countOutcome(outcome)
        records.update(sequence: sequence) {
            $0.outcome = outcome
            $0.explanation = explanation
        }
    }

    /// The `notification` frame. The payload goes in as the provider's bytes (validated as a
    /// JSON object on acceptance), so nothing is parsed under the state lock and the device
    /// receives exactly what was sent.
    static func notificationMessage(id: UInt64, _ n: PendingNotification, _ verdict: DeliveryVerdict) -> JSONValue {
        let payload = JSONValue.raw(n.payload)
        return .object(JSONObject([
            ("type", "notification"), ("id", .int(Int64(id))), ("apnsId", .string(n.apnsID)),
            ("bundleId", .string(n.bundleID)), ("token", .string(n.token)), ("topic", .string(n.topic)),
            ("pushType", .string(n.pushType.rawValue)), ("priority", .int(Int64(n.priority))),
            ("collapseId", n.collapseID.map(JSONValue.string) ?? .null), ("payload", payload),
            ("callbacks", .array(verdict.callbacks.map(JSONValue.string))), ("display", .string(verdict.display.rawValue)),
            ("reason", verdict.reason.map(JSONValue.string) ?? .null), ("stored", .bool(n.wasStored)),
        ]))
    }

    /// Per-token flood check (`TooManyRequests`, docs/apns-behaviour.md, "Reasons and statuses");
    /// true when over the limit.
    mutating func isFlooding(token: String, nowMs: Int64) -> Bool {
        guard let limit = deliveryOptions.tooManyRequests else { return false }
        var window = delivery.recentPushes[token] ?? (nowMs, 0)
        if nowMs - window.windowStartMs >= limit.windowMs { window = (nowMs, 0) }
        window.count += 1
        delivery.recentPushes[token] = window
        return window.count > limit.count
    }
}

// MARK: - Device sessions

/// What a device says in `hello` (docs/device-protocol.md).
public struct DeviceHello: Sendable {
    public var deviceID: String
    public var lowPowerMode: Bool
    public var apps: [AppRegistration]

    public init(deviceID: String, lowPowerMode: Bool, apps: [AppRegistration]) {
        self.deviceID = deviceID
        self.lowPowerMode = lowPowerMode
        self.apps = apps
    }
}

public struct AppRegistration: Sendable {
    public var bundleID: String
    public var environment: APNsEnvironment
    public var settings: AppSettings
    public var kinds: [TokenKind]

    public init(bundleID: String, environment: APNsEnvironment, settings: AppSettings, kinds: [TokenKind]) {
        self.bundleID = bundleID
        self.environment = environment
        self.settings = settings
        self.kinds = kinds
    }
}

/// A device request the emulator refuses (answered with an `error` frame).
public struct DeviceRequestError: Error, Sendable, Equatable {
    public var code: String
    public var message: String
    /// The device or app the request names does not exist (the admin API answers 404; the
    /// device protocol has no such distinction and says `bad_request`).
    public var isNotFound = false

    public init(_ code: String, _ message: String, isNotFound: Bool = false) {
        self.code = code
        self.message = message
        self.isNotFound = isNotFound
    }

    /// A registry refusal, keeping whether it was about something missing.
    init(_ error: RegistryError) {
        var code = "bad_request"
        if case .tooManyApps = error { code = Self.tooManyApps }
        self.init(code, error.description, isNotFound: error.isNotFound)
    }

    /// The code of a refusal to take a device over `DeviceRegistry.maxAppsPerDevice`.
    public static let tooManyApps = "too_many_apps"
}

extension World {
    /// A device said hello on `connectionID`. Returns the frames for it (welcome, tokens,
    /// waiting notifications) and, when another connection held the device, a `replaced`
    /// frame for that one.
    public mutating func connectDevice(_ hello: DeviceHello, connectionID: UInt64, nowMs: Int64)
        throws(DeviceRequestError) -> [DeviceFrame]
    {
        // Refused before anything changes: a hello over the bound installs none of its apps.
        do throws(RegistryError) { try registry.checkRoom(forApps: hello.apps.lazy.map(\.bundleID), on: hello.deviceID) } catch {
            throw DeviceRequestError(error)
        }
        var frames: [DeviceFrame] = []
        if registry.devices[hello.deviceID] == nil {
            do throws(RegistryError) { try registry.addDevice(id: hello.deviceID, isVirtual: false, nowMs: nowMs) } catch {
                throw DeviceRequestError(error)
            }
        }
        if let old = registry.devices[hello.deviceID]?.connectionID, old != connectionID {
            frames.append(DeviceFrame(deviceID: hello.deviceID, connectionID: old, message: ["type": "replaced"], closeAfter: true))
            returnInflight(deviceID: hello.deviceID, connectionID: old, nowMs: nowMs)
        }
        try? registry.updateDevice(hello.deviceID) {
            $0.connectionID = connectionID
            $0.isVirtual = false
            $0.lowPowerMode = hello.lowPowerMode
        }
        func mine(_ message: JSONValue) -> DeviceFrame {
            DeviceFrame(deviceID: hello.deviceID, connectionID: connectionID, message: message)
        }
        frames.append(mine(["type": "welcome", "version": 1, "deviceId": .string(hello.deviceID), "serverTime": .int(nowMs),
                            "userId": registry.devices[hello.deviceID]?.userID.map(JSONValue.string) ?? .null]))
        for app in hello.apps {
            frames.append(contentsOf: try install(app, deviceID: hello.deviceID, nowMs: nowMs).map(mine))
        }
        frames.append(contentsOf: flushWaiting(deviceID: hello.deviceID, nowMs: nowMs))
        return frames
    }

    /// Installs (or re-registers) an app; returns one `registered` message per token kind.
    public mutating func install(_ app: AppRegistration, deviceID: String, nowMs: Int64) throws(DeviceRequestError) -> [JSONValue] {
        do throws(RegistryError) {
            return try installApp(deviceID: deviceID, bundleID: app.bundleID, environment: app.environment,
                                  kinds: app.kinds.isEmpty ? [.app] : app.kinds, settings: app.settings, nowMs: nowMs)
                .map(Self.registeredMessage)
        } catch {
            throw DeviceRequestError(error)
        }
    }

    /// Installs (or re-registers) an app's tokens with its settings; a running app's
    /// registration callback runs (an app installed not running registers at its launch).
    /// The one place every install goes through: device frames, the admin API, batches.
    public mutating func installApp(deviceID: String, bundleID: String, environment: APNsEnvironment, kinds: [TokenKind],
                                    fixedToken: String? = nil, settings: AppSettings, nowMs: Int64) throws(RegistryError) -> [TokenEntry]
    {
        var entries: [TokenEntry] = []
        for kind in kinds {
            entries.append(try registry.register(deviceID: deviceID, bundleID: bundleID, environment: environment, kind: kind,
                                                 fixedToken: fixedToken, nowMs: nowMs))
        }
        try registry.updateDevice(deviceID) { $0.apps[bundleID]?.settings = settings }
        if settings.appState.isRunning { didRegister(deviceID: deviceID, bundleID: bundleID) }
        return entries
    }

    public static func registeredMessage(_ entry: TokenEntry) -> JSONValue {
        ["type": "registered", "bundleId": .string(entry.bundleID), "environment": .string(entry.environment.rawValue),
         "kind": .string(entry.kind.rawValue), "token": .string(entry.token), "topic": .string(entry.topic)]
    }

    /// The connection went away: deliveries it did not ack go back to the store.
    public mutating func disconnectDevice(_ deviceID: String, connectionID: UInt64, nowMs: Int64) {
        returnInflight(deviceID: deviceID, connectionID: connectionID, nowMs: nowMs)
        if registry.devices[deviceID]?.connectionID == connectionID {
            try? registry.updateDevice(deviceID) { $0.connectionID = nil }
        }
    }

    mutating func returnInflight(deviceID: String, connectionID: UInt64, nowMs: Int64) {
        let lost = delivery.inflight.filter { $0.value.connectionID == connectionID && $0.value.notification.deviceID == deviceID }
        // Oldest first, so the newest per app ends up in the store.
        for (id, flight) in lost.sorted(by: { $0.key < $1.key }) {
            delivery.inflight.removeValue(forKey: id)
            releaseWindowSlot(deviceID)
            delivery.noteDone(flight.notification.sequence)
            store(flight.notification, nowMs: nowMs, why: "the device disconnected before acknowledging it")
        }
    }

    mutating func releaseWindowSlot(_ deviceID: String) {
        let left = delivery.inflightPerDevice[deviceID, default: 1] - 1
        delivery.inflightPerDevice[deviceID] = left > 0 ? left : nil
    }

    @discardableResult
    /// The device acknowledged a delivery. Returns what it may now receive: once a full
    /// window has drained to half, the notifications stored meanwhile.
    public mutating func acknowledge(deviceID: String, connectionID: UInt64, deliveryID: UInt64, nowMs: Int64)
        throws(DeviceRequestError) -> [DeviceFrame]
    {
        guard let flight = delivery.inflight[deliveryID], flight.notification.deviceID == deviceID,
            flight.connectionID == connectionID
        else {
            throw DeviceRequestError("bad_request", "no delivery \(deliveryID) is waiting for an ack on this connection")
        }
        delivery.inflight.removeValue(forKey: deliveryID)
        releaseWindowSlot(deviceID)
        delivery.noteDone(flight.notification.sequence)
        if flight.notification.acceptedAtNanos > 0 {
            let elapsed = MonotonicTime.nanoseconds() &- flight.notification.acceptedAtNanos
            counters.deliveryLatency.record(Double(elapsed) / 1e9)
        }
        settle(flight.notification, verdict: flight.verdict, nowMs: nowMs)
        guard delivery.windowFull.contains(deviceID),
            delivery.inflightPerDevice[deviceID, default: 0] <= deliveryOptions.deviceWindow / 2
        else { return [] }
        delivery.windowFull.remove(deviceID)
        return flushWaiting(deviceID: deviceID, nowMs: nowMs)
    }

    /// Devices whose oldest unacknowledged delivery has waited past the ack timeout: they are
    /// told why and disconnected, and what they had not acknowledged goes back to the store.
    mutating func disconnectStuckDevices(nowMs: Int64) -> [DeviceFrame] {
        let deadline = nowMs - deliveryOptions.deviceAckTimeoutMs
        var stuck: [String: UInt64] = [:]
        for flight in delivery.inflight.values where flight.sentAtMs <= deadline {
            stuck[flight.notification.deviceID] = flight.connectionID
        }
        var frames: [DeviceFrame] = []
        for (deviceID, connectionID) in stuck.sorted(by: { $0.key < $1.key }) {
            let seconds = deliveryOptions.deviceAckTimeoutMs / 1000
            frames.append(DeviceFrame(deviceID: deviceID, connectionID: connectionID, message: [
                "type": "error", "code": "ack_timeout", "fatal": true,
                "message": .string("a delivery has not been acknowledged for \(seconds) seconds; reconnect to receive what is stored"),
            ], closeAfter: true))
            disconnectDevice(deviceID, connectionID: connectionID, nowMs: nowMs)
        }
        return frames
    }

    /// Delivers what waited for the device: the stored notification and held background
    /// pushes whose reason has passed.
    mutating func flushWaiting(deviceID: String, nowMs: Int64) -> [DeviceFrame] {
        guard let device = registry.devices[deviceID], device.isOnline else { return [] }
        var frames: [DeviceFrame] = []
        for bundleID in device.apps.keys.sorted() {
            let key = AppKey(deviceID: deviceID, bundleID: bundleID)
            if let stored = delivery.stored.removeValue(forKey: key) {
                delivery.noteDone(stored.sequence)
                if let until = stored.storeUntilMs, until > nowMs {
                    frames.append(contentsOf: deliverNow(stored, nowMs: nowMs))
                } else {
                    setOutcome(stored.sequence, .expired, "expired in the store before the device came back online")
                }
            }
            frames.append(contentsOf: releaseDeferred(key, nowMs: nowMs))
        }
        return frames
    }

    /// Tries a held background push again (the rules decide whether it may run now).
    mutating func releaseDeferred(_ key: AppKey, nowMs: Int64) -> [DeviceFrame] {
        guard let held = delivery.deferred.removeValue(forKey: key) else { return [] }
        delivery.noteDone(held.notification.sequence)
        return deliverNow(held.notification, nowMs: nowMs)
    }

    /// Changes an app's settings; a force-quit app that is launched gets its held push.
    public mutating func updateApp(deviceID: String, bundleID: String, appState: AppState?, authorization: Authorization?,
                                   backgroundMode: Bool?, nowMs: Int64) throws(DeviceRequestError) -> (AppSettings, [DeviceFrame])
    {
        guard var settings = registry.devices[deviceID]?.apps[bundleID]?.settings else {
            throw DeviceRequestError(RegistryError.appNotInstalled(deviceID: deviceID, bundleID: bundleID))
        }
        let launched = appState.map { Self.isLaunch(from: settings.appState, to: $0) } ?? false
        if let appState { settings.appState = appState }
        if let authorization { settings.authorization = authorization }
        if let backgroundMode { settings.backgroundMode = backgroundMode }
        try? registry.updateDevice(deviceID) { $0.apps[bundleID]?.settings = settings }
        if launched { didRegister(deviceID: deviceID, bundleID: bundleID) }
        let frames = registry.devices[deviceID]?.isOnline == true
            ? releaseDeferred(AppKey(deviceID: deviceID, bundleID: bundleID), nowMs: nowMs) : []
        return (settings, frames)
    }

    /// Takes a device offline (notifications are stored) or back online (they are delivered),
    /// whether or not a socket is attached.
    public mutating func setForcedOffline(deviceID: String, _ offline: Bool, nowMs: Int64) throws(DeviceRequestError) -> [DeviceFrame] {
        do throws(RegistryError) { try registry.updateDevice(deviceID) { $0.forcedOffline = offline } } catch {
            throw DeviceRequestError(error)
        }
        return offline ? [] : flushWaiting(deviceID: deviceID, nowMs: nowMs)
    }

    public mutating func setLowPowerMode(deviceID: String, _ on: Bool, nowMs: Int64) throws(DeviceRequestError) -> [DeviceFrame] {
        do throws(RegistryError) { try registry.updateDevice(deviceID) { $0.lowPowerMode = on } } catch {
            throw DeviceRequestError(error)
        }
        guard !on, let device = registry.devices[deviceID], device.isOnline else { return [] }
        var frames: [DeviceFrame] = []
        for bundleID in device.apps.keys.sorted() {
            frames.append(contentsOf: releaseDeferred(AppKey(deviceID: deviceID, bundleID: bundleID), nowMs: nowMs))
        }
        return frames
    }

    /// Deletes an app; returns the tokens it had (now invalid, maybe after the configured delay).
    public mutating func uninstallApp(deviceID: String, bundleID: String, nowMs: Int64) throws(DeviceRequestError) -> (invalidAtMs: Int64, tokens: [TokenEntry]) {
        let tokens = registry.devices[deviceID]?.apps[bundleID]?.tokens.values.sorted() ?? []
        let invalidAt = nowMs + deliveryOptions.unregisteredDelayMs
        do throws(RegistryError) {
            try registry.uninstall(deviceID: deviceID, bundleID: bundleID, invalidAtMs: invalidAt,
                                   afterPushes: deliveryOptions.unregisteredDelayMs > 0 ? deliveryOptions.unregisteredAfterPushes : nil)
        } catch {
            throw DeviceRequestError(error)
        }
        dropWaiting(AppKey(deviceID: deviceID, bundleID: bundleID), why: "the app was uninstalled")
        return (invalidAt, tokens.compactMap { registry.token($0) })
    }

    mutating func dropWaiting(_ key: AppKey, why: String) {
        if let stored = delivery.stored.removeValue(forKey: key) {
            setOutcome(stored.sequence, .droppedBySystem, "discarded: \(why)")
            delivery.noteDone(stored.sequence)
        }
        if let held = delivery.deferred.removeValue(forKey: key) {
            setOutcome(held.notification.sequence, .droppedBySystem, "discarded: \(why)")
            delivery.noteDone(held.notification.sequence)
        }
        delivery.collapsed.removeValue(forKey: key)
    }

    public mutating func rotateTokens(deviceID: String, bundleID: String, nowMs: Int64) throws(DeviceRequestError) -> [TokenEntry] {
        let entries: [TokenEntry]
        do throws(RegistryError) { entries = try registry.rotate(deviceID: deviceID, bundleID: bundleID, nowMs: nowMs) } catch {
            throw DeviceRequestError(error)
        }
        didRegister(deviceID: deviceID, bundleID: bundleID)
        return entries
    }

    /// Erase All Content and Settings: every app and token on the device is gone.
    public mutating func eraseDevice(_ deviceID: String, nowMs: Int64) throws(DeviceRequestError) {
        // The bundle ids, not a copy of the device held while its apps are removed (that would
        // copy the app dictionary per app).
        guard let bundleIDs = registry.devices[deviceID]?.apps.keys.sorted() else {
            throw DeviceRequestError(RegistryError.unknownDevice(deviceID))
        }
        for bundleID in bundleIDs {
            _ = try uninstallApp(deviceID: deviceID, bundleID: bundleID, nowMs: nowMs)
        }
    }

    /// Restores a backup of `source` onto `target`: the apps move with new tokens; the
    /// source's tokens become invalid (the old phone is assumed wiped).
    public mutating func restoreBackup(from source: String, to target: String, nowMs: Int64) throws(DeviceRequestError) -> [TokenEntry] {
        guard source != target else { throw DeviceRequestError("bad_request", "a device cannot restore its own backup") }
        // The apps, not a copy of the device held while they are removed from it.
        guard let apps = registry.devices[source]?.apps.values.sorted(by: { $0.bundleID < $1.bundleID }) else {
            throw DeviceRequestError(RegistryError.unknownDevice(source))
        }
        do throws(RegistryError) { try registry.checkRoom(forApps: apps.lazy.map(\.bundleID), on: target) } catch {
            throw DeviceRequestError(error)
        }
        var entries: [TokenEntry] = []
        for app in apps {
            _ = try uninstallApp(deviceID: source, bundleID: app.bundleID, nowMs: nowMs)
            if registry.devices[target]?.apps[app.bundleID] != nil {
                _ = try uninstallApp(deviceID: target, bundleID: app.bundleID, nowMs: nowMs)
            }
            let registration = AppRegistration(bundleID: app.bundleID, environment: app.environment, settings: app.settings,
                                               kinds: app.tokens.keys.sorted { $0.rawValue < $1.rawValue })
            _ = try install(registration, deviceID: target, nowMs: nowMs)
            entries.append(contentsOf: registry.devices[target]?.apps[app.bundleID]?.tokens.values.compactMap { registry.token($0) } ?? [])
        }
        return entries
    }

    /// The user taps a notification on screen or in Notification Center.
    /// Returns the tap's callbacks and the frames of anything held for the app until it was
    /// launched (a background push held while it was force-quit).
    public mutating func tap(deviceID: String, apnsID: String, nowMs: Int64) throws(DeviceRequestError)
        -> (bundleID: String, callbacks: [String], launched: Bool, frames: [DeviceFrame])
    {
        guard let device = registry.devices[deviceID] else {
            throw DeviceRequestError(RegistryError.unknownDevice(deviceID))
        }
        // On screen or in Notification Center: delivered with something to show, not replaced
        // by a newer one with its collapse id, and not tapped yet (a tap removes it).
        let shown = records.newestFirst(limit: 1) { r in
            r.deviceID == deviceID && r.outcome == .delivered && r.display != nil && r.display != Display.none.rawValue
                && !r.callbacks.contains(AppCallback.didReceive) && Hex.equalIgnoringCase(r.apnsID, apnsID)
        }.first
        guard let shown, let bundleID = shown.bundleID, let settings = device.apps[bundleID]?.settings else {
            throw DeviceRequestError("bad_request", "no notification \(apnsID) is on screen or in Notification Center")
        }
        let (callbacks, launched) = DeliveryRules.tap(app: settings)
        records.update(sequence: shown.sequence) {
            $0.callbacks.append(contentsOf: callbacks)
            $0.explanation += "; tapped: " + callbacks.joined(separator: ", ") + (launched ? " after a cold launch" : "")
        }
        // Tapping opens the app, which releases what waited for a launch; the app then fetches
        // what the notification points to.
        let (_, frames) = try updateApp(deviceID: deviceID, bundleID: bundleID, appState: .foreground, authorization: nil,
                                        backgroundMode: nil, nowMs: nowMs)
        call(.fetch, deviceID: deviceID, bundleID: bundleID, payload: shown.payload)
        return (bundleID, callbacks, launched, frames)
    }

    /// Time passes: stored notifications expire, batches and refilled budgets release.
    public mutating func tick(nowMs: Int64) -> [DeviceFrame] {
        var frames = delivery.inflight.isEmpty ? [] : disconnectStuckDevices(nowMs: nowMs)
        for (key, stored) in delivery.stored where (stored.storeUntilMs ?? 0) <= nowMs {
            delivery.stored.removeValue(forKey: key)
            delivery.noteDone(stored.sequence)
            setOutcome(stored.sequence, .expired, "expired in the store (apns-expiration or 30 days) while the device was offline")
        }
        if !delivery.batched.isEmpty {
            let due = delivery.batched.filter { $0.releaseAtMs <= nowMs }
            delivery.batched.removeAll { $0.releaseAtMs <= nowMs }
            for item in due {
                delivery.noteDone(item.notification.sequence)
                if registry.devices[item.notification.deviceID]?.isOnline == true {
                    frames.append(contentsOf: deliverNow(item.notification, nowMs: nowMs))
                } else {
                    store(item.notification, nowMs: nowMs, why: "the device went offline while the push was batched")
                }
            }
        }
        for (key, held) in delivery.deferred where held.reason == .budget {
            guard registry.devices[key.deviceID]?.isOnline == true,
                delivery.budgets[key]?.available(nowMs: nowMs) ?? true
            else { continue }
            frames.append(contentsOf: releaseDeferred(key, nowMs: nowMs))
        }
        return frames
    }
}
