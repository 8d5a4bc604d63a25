// Where an accepted notification goes (delivered, stored, held, batched) and what becomes of
// the waiting ones as devices come and go, acknowledge, and time passes.

extension World {
    /// An accepted notification: delivered now, stored, held, batched or expired.
    /// `deviceSlot`: where the device is in the registry, when known (`DeviceRegistry.deviceSlot`).
    mutating func route(_ notification: PendingNotification, nowMs: Int64, deviceSlot: Int = -1) -> [DeviceFrame] {
        let slot = registry.deviceSlot(notification.deviceID, hint: deviceSlot)
        guard slot >= 0 else { return [] }
        let device = registry.devices.row(inSlot: slot)
        if !device.isOnline {
            store(notification, nowMs: nowMs, why: "the device is offline")
            return []
        }
        if notification.priority < 10, deliveryOptions.lowPriorityDelayMs > 0 {
            let releaseAt = nowMs + deliveryOptions.lowPriorityDelayMs
            delivery.batched.append((releaseAt, notification))
            delivery.noteWaiting(.batched(releaseAtMs: releaseAt), notification)
            setOutcome(
                notification.sequence, .pending,
                "accepted; priority \(notification.priority) is batched for power and delivered after \(deliveryOptions.lowPriorityDelayMs) ms (on the next once-a-second pass)",
                atMs: nowMs)
            return []
        }
        return deliverNow(notification, nowMs: nowMs, device: device)
    }

    /// Applies the delivery rules and hands the notification to the device.
    mutating func deliverNow(_ notification: PendingNotification, nowMs: Int64) -> [DeviceFrame] {
        guard let device = registry.devices[notification.deviceID] else {
            setOutcome(
                notification.sequence, .droppedBySystem, "the app is no longer installed, so the device discards it", atMs: nowMs,
                step: .unregistered)
            return []
        }
        return deliverNow(notification, nowMs: nowMs, device: device)
    }

    /// Keeps one notification per (device, app) until it expires: the newest, or with
    /// `--stored-survivor random` any of those that arrived, with equal chance.
    mutating func store(_ notification: PendingNotification, nowMs: Int64, why: String) {
        var notification = notification
        guard let until = notification.storeUntilMs, until > nowMs else {
            setOutcome(
                notification.sequence, .expired,
                "\(why), and "
                    + (notification.storeUntilMs.map { "its apns-expiration (\(RFC3339.format(milliseconds: $0))) has passed" }
                        ?? "apns-expiration 0 means it is never stored"),
                atMs: nowMs)
            return
        }
        let key = AppKey(deviceID: notification.deviceID, bundleID: notification.bundleID)
        if let older = delivery.stored[key], older.sequence != notification.sequence {
            if deliveryOptions.storedSurvivor != .newest {
                let arrivals = (delivery.storeArrivals[key] ?? 1) + 1
                delivery.storeArrivals[key] = arrivals
                if !deliveryOptions.storedSurvivor.newcomerWins(deviceID: key.deviceID, bundleID: key.bundleID, arrivals: arrivals) {
                    setOutcome(
                        notification.sequence, .coalesced,
                        "not stored: APNs keeps one notification per app and chose another of the \(arrivals) that arrived (--stored-survivor random)",
                        atMs: nowMs)
                    return
                }
            }
            setOutcome(older.sequence, .coalesced, "replaced in the store by a newer notification (APNs keeps one per app)", atMs: nowMs)
            delivery.noteDone(older.sequence)
        } else if deliveryOptions.storedSurvivor != .newest {
            delivery.storeArrivals[key] = 1
        }
        notification.wasStored = true
        delivery.stored[key] = notification
        delivery.noteWaiting(.stored, notification)
        setOutcome(notification.sequence, .stored, "stored: \(why); kept until \(RFC3339.format(milliseconds: until))", atMs: nowMs)
        records.update(sequence: notification.sequence) { $0.wasStored = true }
    }

    /// `deliverNow` for the notification's device, just looked up (borrowed, not copied again:
    /// a device's copy costs a retain and a release for each of its strings and collections).
    mutating func deliverNow(_ notification: PendingNotification, nowMs: Int64, device: Device) -> [DeviceFrame] {
        let key = AppKey(deviceID: notification.deviceID, bundleID: notification.bundleID)
        guard let appIndex = device.appIndex(notification.bundleID) else {
            setOutcome(
                notification.sequence, .droppedBySystem, "the app is no longer installed, so the device discards it", atMs: nowMs,
                step: .unregistered)
            return []
        }
        let app = device.apps.values[appIndex]
        // A socket device offline or with its window full is not reached: the notification
        // waits in the store (one per app) and the rules, its presentation and badge included,
        // run when it leaves the store, as for a device that was offline when it came.
        var socket: (connectionID: UInt64, waiting: Int) = (0, 0)
        if !device.isVirtual {
            guard let connectionID = device.connectionID else {
                store(notification, nowMs: nowMs, why: "the device is offline")
                return []
            }
            let waiting = delivery.inflightPerDevice[device.id, default: 0]
            if waiting >= deliveryOptions.deviceWindow {
                delivery.windowFull.insert(device.id)
                store(
                    notification, nowMs: nowMs,
                    why: "the device has \(waiting) deliveries it has not acknowledged (its window is full)")
                return []
            }
            socket = (connectionID, waiting)
        }
        // Only background wakes need the budget; most pushes never look it up.
        let wantsWake = notification.content.contentAvailable
        var budget =
            wantsWake
            ? delivery.budgets[key] ?? BackgroundBudget(perHour: deliveryOptions.backgroundBudgetPerHour, nowMs: nowMs)
            : BackgroundBudget(perHour: 0, nowMs: nowMs)
        // Filled in place: bound out of a `DeliveryDecision`, the verdict was copied.
        var verdict = DeliveryVerdict(callbacks: [], display: .none)
        if let reason = DeliveryRules.decide(
            pushType: notification.pushType, content: notification.content, app: app.settings,
            lowPowerMode: device.lowPowerMode, budgetAvailable: budget.available(nowMs: nowMs), into: &verdict)
        {
            if let older = delivery.deferred[key], older.notification.sequence != notification.sequence {
                setOutcome(
                    older.notification.sequence, .throttled,
                    "a newer background push replaced it while it was held; the system keeps only the newest", atMs: nowMs)
                delivery.noteDone(older.notification.sequence)
            }
            delivery.deferred[key] = (notification, reason)
            delivery.noteWaiting(.deferred(reason), notification)
            if wantsWake { delivery.setBudget(key, budget) }
            // What the provider got wrong is said of a held push too.
            var advice = DeliveryVerdict(callbacks: [], display: .none)
            advise(notification, &advice)
            setOutcome(
                notification.sequence, .deferred,
                "deferred: " + Self.describe(reason, budget: deliveryOptions.backgroundBudgetPerHour) + (advice.reason.map { "; " + $0 } ?? ""),
                atMs: nowMs)
            return []
        }
        if !notification.content.isVisible || notification.content.contentAvailableMisread {
            advise(notification, &verdict)
        }
        let presentation = present(notification, &verdict, device: device, app: app, nowMs: nowMs)
        // The wake is charged where the app is woken: a virtual device's at once, a socket
        // device's as the frame goes out (refunded if it never acknowledges it,
        // `returnInflight`); a push stored for later is charged when it leaves the store.
        func chargeWake() {
            guard verdict.usedBackgroundBudget else { return }
            _ = budget.consume(nowMs: nowMs)
            delivery.setBudget(key, budget)
        }
        if wantsWake, let older = delivery.deferred[key], older.notification.sequence < notification.sequence,
            verdict.callbacks.contains(AppCallback.didReceiveRemoteNotification)
        {
            // The app is woken with newer content: the held one would reach it late and stale.
            delivery.deferred.removeValue(forKey: key)
            setOutcome(
                older.notification.sequence, .throttled,
                "a newer background push woke the app while this one was held; the system keeps only the newest", atMs: nowMs)
            delivery.noteDone(older.notification.sequence)
        }
        if device.isVirtual {
            chargeWake()
            // WidgetKit, not the app, takes these: a reload within the budget, or why not.
            if let kind = WidgetPushKind(notification.pushType) {
                applyWidgetPush(notification, kind: kind, nowMs: nowMs)
                return []
            }
            settle(notification, verdict: verdict, nowMs: nowMs, userID: device.userID)
            return launchIfWoken(notification, verdict: verdict, nowMs: nowMs)
        }
        records.update(sequence: notification.sequence) {
            $0.callbacks = verdict.callbacks
            $0.display = verdict.display.rawValue
        }
        let (connectionID, waiting) = socket
        // Shared state (`--redis`): the notification's sequence, unique across instances,
        // so any instance finds the delivery an ack names, and a row names it at once.
        chargeWake()
        let id = deliveryOptions.deliveryIDsAreSequences ? notification.sequence : delivery.nextDeliveryID
        delivery.nextDeliveryID = max(delivery.nextDeliveryID, id + 1)
        delivery.inflight[id] = InFlight(connectionID: connectionID, notification: notification, verdict: verdict, sentAtMs: nowMs)
        delivery.inflightPerDevice[device.id] = waiting + 1
        delivery.noteWaiting(
            .inFlight, notification,
            flight: FlightRow(deliveryID: id, connectionID: connectionID, sentAtMs: nowMs, verdict: verdict))
        setOutcome(
            notification.sequence, .pending, "sent to the device; waiting for its ack", atMs: nowMs,
            step: notification.wasStored ? .deliveredFromStorage : .delivered)
        return [
            DeviceFrame(
                deviceID: device.id, connectionID: connectionID,
                message: Self.notificationMessage(id: id, notification, verdict, presentation))
        ]
    }

    /// The presentation rules, where they have something to decide: the payload asks for more
    /// than a plain alert, a badge and a sound name (`PushContent.needsPresentation`), or the
    /// app's setup, its permission (provisional, ephemeral) or the device's switches are not
    /// the defaults. Only then is the payload read (under the
    /// state lock; it is at most 4 KB). The record keeps the result; a badge it sets goes on
    /// the app's icon.
    private mutating func present(
        _ notification: PendingNotification, _ verdict: inout DeliveryVerdict, device: Device, app: InstalledApp, nowMs: Int64
    ) -> Presentation? {
        guard notification.pushType == .alert || notification.pushType == .background else { return nil }
        guard
            notification.content.needsPresentation || !app.settings.hasDefaultNotifications || !device.hasDefaultAttention
                || app.settings.authorization != .authorized
        else {
            // Default settings and a plain alert: only the badge changes here.
            if let badge = notification.content.badge, verdict.display != .none, badge != app.badge {
                try? registry.updateDevice(device.id) { $0.apps[app.bundleID]?.badge = badge }
            }
            return nil
        }
        let content = AlertContent.read(notification.payload, setup: app.settings.notifications)
        guard
            var presentation = PresentationRules.apply(
                &verdict, content: content, app: app.settings, bundleID: app.bundleID, attention: device.attention, nowMs: nowMs)
        else { return nil }
        // A Live Activity's alert is the activity on screen, not a notification: never listed.
        if notification.pushType == .liveactivity { presentation.listed = false }
        records.update(sequence: notification.sequence) { $0.presentation = presentation }
        if let badge = presentation.badge, badge != app.badge {
            try? registry.updateDevice(device.id) { $0.apps[app.bundleID]?.badge = badge }
        }
        return presentation
    }

    /// What the provider got wrong that APNs took without a word, added to the verdict's
    /// reason (`PayloadAdvice`): a push with nothing to show, or a `content-available` not 1.
    private func advise(_ notification: PendingNotification, _ verdict: inout DeliveryVerdict) {
        guard notification.pushType == .alert || notification.pushType == .background else { return }
        let content = notification.content
        var notes: [String] = []
        if content.contentAvailable {
            // (A `background` type came from the header; an `alert` one may be implied.)
            let headerSent = notification.pushType == .background || (records.pushTypeHeaderPresent(sequence: notification.sequence) ?? true)
            notes = PayloadAdvice.backgroundPushNotes(pushType: notification.pushType, headerSent: headerSent, priority: notification.priority)
        } else if let mistake = PayloadAdvice.wakeMistake(notification.payload) {
            if content.isVisible {
                notes = ["\(mistake), so the app is not woken"]
            } else {
                // In place of the rules' "no content-available", which reads as if it were absent.
                verdict.reason = "the payload has no alert, badge or sound, and \(mistake), so there is nothing to show or run"
            }
        }
        guard !notes.isEmpty else { return }
        verdict.reason = ((verdict.reason.map { [$0] } ?? []) + notes).joined(separator: "; ")
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
    /// `userID`: the user logged in on the notification's device (`.some(nil)`: nobody), when
    /// the caller has just looked the device up; nil: look it up.
    /// `acknowledged`: a device's socket acknowledged it (its send was the delivery step).
    mutating func settle(
        _ notification: PendingNotification, verdict: DeliveryVerdict, nowMs: Int64, userID: String?? = nil, acknowledged: Bool = false
    ) {
        counters.countOutcome(verdict.outcome)
        let step =
            acknowledged && verdict.outcome == .delivered
            ? DeliveryLog.Step.acknowledged : DeliveryLog.Step(verdict.outcome, afterStorage: notification.wasStored)
        counters.countConsole(step)
        records.update(sequence: notification.sequence) {
            $0.outcome = verdict.outcome
            $0.explanation = verdict.outcome == .delivered ? "delivered" : "dropped by the system"
            $0.deliveryNote = verdict.reason
            $0.callbacks = verdict.callbacks
            $0.display = verdict.display.rawValue
            $0.deliveredAtMs = nowMs
            $0.noteTransition(step, atMs: nowMs)
        }
        noteAccount(notification, verdict: verdict, nowMs: nowMs, userID: userID)
        guard verdict.display != .none, let collapse = notification.collapseID else { return }
        let key = AppKey(deviceID: notification.deviceID, bundleID: notification.bundleID)
        // One the user already tapped or dismissed has left the screen: nothing to replace.
        if let older = delivery.collapsed[key, default: [:]].updateValue(notification.sequence, forKey: collapse),
            older != notification.sequence, records.record(sequence: older).map(Self.isUnanswered) ?? false
        {
            setOutcome(older, .coalesced, "replaced in Notification Center by \(notification.apnsID) with the same apns-collapse-id", atMs: nowMs)
        }
    }

    /// Whether the user has not yet tapped, dismissed or otherwise answered a delivered
    /// notification (an answer removes it from the screen and Notification Center).
    static func isUnanswered(_ record: NotificationRecord) -> Bool {
        record.outcome == .delivered && record.presentation?.response == nil && !record.callbacks.contains(AppCallback.didReceive)
    }

    /// `step`: how the notification came to `outcome`, when the outcome alone does not say
    /// (see `DeliveryLog.Step`). `logged` false: no step of the delivery log (a push on its way
    /// to the instance that owns its device, `--redis`: Apple's console has no such step, and
    /// `pending` would read as "Stored for power").
    mutating func setOutcome(
        _ sequence: UInt64, _ outcome: DeliveryOutcome, _ explanation: String, atMs nowMs: Int64, step: DeliveryLog.Step? = nil,
        logged: Bool = true
    ) {
        counters.countOutcome(outcome)
        var taken = step ?? DeliveryLog.Step(outcome, afterStorage: false)
        records.update(sequence: sequence) {
            if step == nil { taken = DeliveryLog.Step(outcome, afterStorage: $0.wasStored) }
            $0.outcome = outcome
            $0.explanation = explanation
            if logged { $0.noteTransition(taken, atMs: nowMs) }
        }
        if logged { counters.countConsole(taken) }
    }

    /// The `notification` frame. The payload goes in as the provider's bytes (validated as a
    /// JSON object on acceptance), so the frame parses nothing and the device receives exactly
    /// what was sent.
    static func notificationMessage(
        id: UInt64, _ n: PendingNotification, _ verdict: DeliveryVerdict, _ presentation: Presentation? = nil
    ) -> JSONValue {
        let payload = JSONValue.raw(n.payload)
        var members: [(key: String, value: JSONValue)] = [
            ("type", "notification"), ("id", .int(Int64(id))), ("apnsId", .string(n.apnsID)),
            ("bundleId", .string(n.bundleID)), ("token", .string(n.token)), ("topic", .string(n.topic)),
            ("pushType", .string(n.pushType.rawValue)), ("priority", .int(Int64(n.priority))),
            ("collapseId", n.collapseID.map(JSONValue.string) ?? .null), ("payload", payload),
            ("callbacks", .array(verdict.callbacks.map(JSONValue.string))), ("display", .string(verdict.display.rawValue)),
            ("reason", verdict.reason.map(JSONValue.string) ?? .null), ("stored", .bool(n.wasStored)),
        ]
        if let presentation { members.append(("presentation", presentation.json)) }
        return .object(JSONObject(members))
    }

    /// The background wakes an app on a device has left now (docs/device-model.md, "Budget");
    /// a fresh app starts full.
    public func backgroundWakesLeft(deviceID: String, bundleID: String, nowMs: Int64) -> Int {
        guard let budget = delivery.budgets[AppKey(deviceID: deviceID, bundleID: bundleID)] else {
            return deliveryOptions.backgroundBudgetPerHour
        }
        return budget.wakesLeft(nowMs: nowMs)
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

    // MARK: Waiting notifications, the device window, time

    mutating func returnInflight(deviceID: String, connectionID: UInt64, nowMs: Int64) {
        let lost = delivery.inflight.filter { $0.value.connectionID == connectionID && $0.value.notification.deviceID == deviceID }
        guard !lost.isEmpty else { return }
        // A notification already in the store came after these were sent (it waited because
        // the window was full or the device offline): it is the newest of its app and stays.
        let newerWaiting = Set(lost.values.map(\.notification.bundleID)).filter {
            delivery.stored[AppKey(deviceID: deviceID, bundleID: $0)] != nil
        }
        // Oldest first, so the newest per app ends up in the store.
        for (id, flight) in lost.sorted(by: { $0.key < $1.key }) {
            delivery.inflight.removeValue(forKey: id)
            releaseWindowSlot(deviceID)
            delivery.noteDone(flight.notification.sequence)
            // The app was never woken by it: its wake goes back to the budget (charged again if
            // it is delivered from the store).
            let key = AppKey(deviceID: deviceID, bundleID: flight.notification.bundleID)
            if flight.verdict.usedBackgroundBudget, var budget = delivery.budgets[key] {
                budget.refund()
                delivery.setBudget(key, budget)
            }
            if installIsGone(flight.notification) {
                setOutcome(
                    flight.notification.sequence, .droppedBySystem,
                    "discarded: the app was uninstalled (or reinstalled) after it was sent, before the device acknowledged it",
                    atMs: nowMs, step: .unregistered)
                continue
            }
            if newerWaiting.contains(flight.notification.bundleID) {
                setOutcome(
                    flight.notification.sequence, .coalesced,
                    "the device disconnected before acknowledging it, and a newer notification of the app already waits in the store (APNs keeps one per app)",
                    atMs: nowMs)
                continue
            }
            store(flight.notification, nowMs: nowMs, why: "the device disconnected before acknowledging it")
        }
    }

    /// Whether the app install a notification was sent to is gone: uninstalled, erased,
    /// reinstalled, or replaced by the other environment's build (its token was issued before
    /// the install there now). What it did not acknowledge is not kept for the next install,
    /// as what waited in the store is not (`dropWaiting`). A token rotation keeps the install.
    func installIsGone(_ notification: PendingNotification) -> Bool {
        // A Live Activity's token is not a device token: the activity's own rules apply.
        guard let entry = registry.token(notification.token) else { return false }
        guard let app = registry.devices[notification.deviceID]?.apps[notification.bundleID] else { return true }
        return entry.issuedAtMs < app.installedAtMs
    }

    mutating func releaseWindowSlot(_ deviceID: String) {
        let left = delivery.inflightPerDevice[deviceID, default: 1] - 1
        delivery.inflightPerDevice[deviceID] = left > 0 ? left : nil
    }

    /// The emulator's clock moves by `ms` (`POST /api/v1/clock`, negative to undo): a delivery
    /// waiting for its ack has waited only real time, and the ack timeout is a transport timer,
    /// so the move does not count against it.
    public mutating func clockMoving(byMs ms: Int64) {
        for id in Array(delivery.inflight.keys) { delivery.inflight[id]?.sentAtMs += ms }
    }

    /// Devices whose oldest unacknowledged delivery has waited past the ack timeout: they are
    /// told why and disconnected, and what they had not acknowledged goes back to the store.
    /// With `--redis`, only the instance holding the socket judges its deliveries: each
    /// instance has a clock of its own (`POST /api/v1/clock` moves one), so another's "now" says
    /// nothing about how long this socket has waited.
    mutating func disconnectStuckDevices(nowMs: Int64) -> [DeviceFrame] {
        let deadline = nowMs - deliveryOptions.deviceAckTimeoutMs
        let me = ownership?.me
        var stuck: [String: UInt64] = [:]
        for flight in delivery.inflight.values where flight.sentAtMs <= deadline {
            if let me, DeviceOwnership.instance(ofConnection: flight.connectionID) != me { continue }
            stuck[flight.notification.deviceID] = flight.connectionID
        }
        var frames: [DeviceFrame] = []
        for (deviceID, connectionID) in stuck.sorted(by: { $0.key < $1.key }) {
            let seconds = deliveryOptions.deviceAckTimeoutMs / 1000
            frames.append(
                DeviceFrame(
                    deviceID: deviceID, connectionID: connectionID,
                    message: [
                        "type": "error", "code": "ack_timeout", "fatal": true,
                        "message": .string("a delivery has not been acknowledged for \(seconds) seconds; reconnect to receive what is stored"),
                    ], closeAfter: true))
            disconnectDevice(deviceID, connectionID: connectionID, nowMs: nowMs)
        }
        return frames
    }

    /// Delivers what waited for the device: the stored notifications and held background
    /// pushes whose reason has passed, in the order they were answered in, across its apps.
    mutating func flushWaiting(deviceID: String, nowMs: Int64) -> [DeviceFrame] {
        guard let device = registry.devices[deviceID], device.isOnline else { return [] }
        var waiting: [(sequence: UInt64, key: AppKey, isHeld: Bool)] = []
        for bundleID in device.apps.keys {
            let key = AppKey(deviceID: deviceID, bundleID: bundleID)
            if let stored = delivery.stored[key] { waiting.append((stored.sequence, key, false)) }
            if let held = delivery.deferred[key] { waiting.append((held.notification.sequence, key, true)) }
        }
        var frames: [DeviceFrame] = []
        for item in waiting.sorted(by: { $0.sequence < $1.sequence }) {
            if item.isHeld {
                frames.append(contentsOf: releaseDeferred(item.key, nowMs: nowMs))
                continue
            }
            guard let stored = delivery.stored.removeValue(forKey: item.key) else { continue }
            delivery.storeArrivals.removeValue(forKey: item.key)
            delivery.noteDone(stored.sequence)
            if let until = stored.storeUntilMs, until > nowMs {
                frames.append(contentsOf: deliverNow(stored, nowMs: nowMs))
            } else {
                setOutcome(
                    stored.sequence, .expired, "expired in the store before the device came back online",
                    atMs: PendingNotification.expiredAtMs(storeUntilMs: stored.storeUntilMs, nowMs: nowMs))
            }
        }
        frames.append(contentsOf: flushLiveActivities(deviceID: deviceID, nowMs: nowMs))
        return frames
    }

    /// Tries a held background push again (the rules decide whether it may run now).
    mutating func releaseDeferred(_ key: AppKey, nowMs: Int64) -> [DeviceFrame] {
        guard let reason = delivery.deferred[key]?.reason else { return [] }
        if reason == .terminated {
            // Held because the user force-quit the app: only a launch releases it, and a running
            // app was launched (`terminated` to `notRunning` or `suspended` is not a launch).
            let appState = registry.devices[key.deviceID]?.apps[key.bundleID]?.settings.appState
            guard appState == .foreground || appState == .background else { return [] }
        }
        guard let held = delivery.deferred.removeValue(forKey: key) else { return [] }
        delivery.noteDone(held.notification.sequence)
        return deliverNow(held.notification, nowMs: nowMs)
    }

    /// `step`: why, in the console's words (an uninstalled app's are `unregistered`).
    mutating func dropWaiting(_ key: AppKey, why: String, step: DeliveryLog.Step, nowMs: Int64) {
        delivery.storeArrivals.removeValue(forKey: key)
        if let stored = delivery.stored.removeValue(forKey: key) {
            setOutcome(stored.sequence, .droppedBySystem, "discarded: \(why)", atMs: nowMs, step: step)
            delivery.noteDone(stored.sequence)
        }
        if let held = delivery.deferred.removeValue(forKey: key) {
            setOutcome(held.notification.sequence, .droppedBySystem, "discarded: \(why)", atMs: nowMs, step: step)
            delivery.noteDone(held.notification.sequence)
        }
        delivery.collapsed.removeValue(forKey: key)
    }

    /// Time passes: stored notifications expire, batches and refilled budgets release.
    /// Whether `tick` has anything to do now: most seconds nothing waits for time, and a tick
    /// with `--redis` is a change that takes the lease (every instance's shared turns end for it).
    public func hasTimedWork(nowMs: Int64) -> Bool {
        !delivery.inflight.isEmpty || !liveActivities.books.isEmpty || !widgetPushes.books.isEmpty
            || delivery.stored.values.contains { ($0.storeUntilMs ?? 0) <= nowMs }
            || delivery.batched.contains { $0.releaseAtMs <= nowMs }
            || delivery.deferred.values.contains { $0.reason == .budget }
            || channels.hasExpiredStoredMessage(nowMs: nowMs)
    }

    public mutating func tick(nowMs: Int64) -> [DeviceFrame] {
        var frames = delivery.inflight.isEmpty ? [] : disconnectStuckDevices(nowMs: nowMs)
        if !liveActivities.books.isEmpty {
            let registry = self.registry
            for (deviceID, changes) in liveActivities.tick(nowMs: nowMs, isOnline: { registry.devices[$0]?.isOnline ?? false }) {
                frames.append(contentsOf: liveActivityChanged(deviceID: deviceID, changes, nowMs: nowMs))
            }
            settleThrottledLiveActivityUpdates(nowMs: nowMs)
            expireWaitingLiveActivityPushes(nowMs: nowMs)
        }
        if !widgetPushes.books.isEmpty { runWaitingWidgetReloads(nowMs: nowMs) }
        if channels.hasExpiredStoredMessage(nowMs: nowMs) { expireStoredBroadcasts(nowMs: nowMs) }
        for (key, stored) in delivery.stored where (stored.storeUntilMs ?? 0) <= nowMs {
            delivery.stored.removeValue(forKey: key)
            delivery.storeArrivals.removeValue(forKey: key)
            delivery.noteDone(stored.sequence)
            setOutcome(
                stored.sequence, .expired, "expired in the store (apns-expiration or 30 days) while the device was offline",
                atMs: PendingNotification.expiredAtMs(storeUntilMs: stored.storeUntilMs, nowMs: nowMs))
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
