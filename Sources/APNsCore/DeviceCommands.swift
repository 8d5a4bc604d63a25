// What a device does, over its socket or through the admin API: connect, install and change
// apps, acknowledge, uninstall, rotate, erase, restore, tap. Each is one call under the state
// lock, so the socket and the admin API change a device the same way.

import MonotonicClock

/// What a device says in `hello` (docs/device-protocol.md).
public struct DeviceHello: Sendable {
    public var deviceID: String
    public var lowPowerMode: Bool
    public var apps: [AppRegistration]
    /// The Live Activities as the device last heard of them (nil: it does not say): any that
    /// changed since is sent again as it is now (`change: "current"`), since `activity` frames
    /// are not acknowledged and one can go to a socket that was already dead.
    public var activitiesSeen: [String: ActivitySeen]?
    /// The deliveries the device acked last (id and apns-id): an ack that reached an instance
    /// but not the shared state (Redis failed, the socket moved) counts when the device is back.
    public var acked: [AckedDelivery]

    public init(
        deviceID: String, lowPowerMode: Bool, apps: [AppRegistration], activitiesSeen: [String: ActivitySeen]? = nil,
        acked: [AckedDelivery] = []
    ) {
        self.deviceID = deviceID
        self.lowPowerMode = lowPowerMode
        self.apps = apps
        self.activitiesSeen = activitiesSeen
        self.acked = acked
    }
}

/// A delivery a device says it acknowledged (a hello's `acked`). Without an apns-id: an ack this
/// instance took on the device's socket itself (a re-attachment after an outage).
public struct AckedDelivery: Sendable, Equatable {
    public var id: UInt64
    public var apnsID: String?

    public init(id: UInt64, apnsID: String?) {
        self.id = id
        self.apnsID = apnsID
    }
}

/// One Live Activity as a device last heard of it (the `activity` object of its newest frame).
public struct ActivitySeen: Sendable, Equatable {
    public var updates: Int
    public var state: String
    public var pushToken: String?

    public init(updates: Int, state: String, pushToken: String?) {
        self.updates = updates
        self.state = state
        self.pushToken = pushToken
    }
}

public struct AppRegistration: Sendable {
    public var bundleID: String
    public var environment: APNsEnvironment
    public var settings: AppSettings
    public var kinds: [TokenKind]
    /// The ActivityAttributes types it declares (nil: unchanged), and
    /// NSSupportsLiveActivitiesFrequentUpdates.
    public var liveActivityTypes: [String]?
    public var frequentUpdates: Bool

    public init(
        bundleID: String, environment: APNsEnvironment, settings: AppSettings, kinds: [TokenKind], liveActivityTypes: [String]? = nil,
        frequentUpdates: Bool = false
    ) {
        self.bundleID = bundleID
        self.environment = environment
        self.settings = settings
        self.kinds = kinds
        self.liveActivityTypes = liveActivityTypes
        self.frequentUpdates = frequentUpdates
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
    public init(_ error: RegistryError) {
        var code = "bad_request"
        switch error {
        case .tooManyApps: code = Self.tooManyApps
        case .tooManyDevices, .tooManyTokens: code = Self.registryFull
        default: break
        }
        self.init(code, error.description, isNotFound: error.isNotFound)
    }

    /// The code of a refusal to take a device over `DeviceRegistry.maxAppsPerDevice`.
    public static let tooManyApps = "too_many_apps"
    /// The code of a refusal because the emulator holds `--max-devices` devices or
    /// `--max-tokens` tokens.
    public static let registryFull = "registry_full"
    /// The code of a refusal to change, through the admin API, what a disconnected socket
    /// device's next `hello` sets anyway (its apps' settings, Low Power Mode).
    public static let notConnected = "not_connected"
}

extension World {
    /// Refuses a change from outside to what a socket device's next `hello` sets (`what`: its
    /// apps' settings, its Low Power Mode) while it is not connected: the change could not be
    /// passed on, so the `hello` would undo it unseen, after stored notifications had been
    /// judged by it. Virtual devices, and socket devices while connected, take it.
    public func refuseWhileDisconnected(deviceID: String, what: String) throws(DeviceRequestError) {
        guard let device = registry.devices[deviceID], !device.isVirtual, device.connectionID == nil else { return }
        throw DeviceRequestError(
            DeviceRequestError.notConnected,
            "device \(deviceID) connects over its own socket and is not connected now; its next hello sets \(what), "
                + "so this change would be undone. Make it while the device is connected (it is told), or in the device process")
    }

    /// A device said hello on `connectionID`. Returns the frames for it (welcome, tokens,
    /// waiting notifications) and, when another connection held the device, a `replaced`
    /// frame for that one.
    ///
    /// `isOpenHere` says whether a connection of this instance is still open: one that is not
    /// (its close was a change a reload of the shared copy undid, `--redis`) will read no ack,
    /// so what it had in flight goes out on the new connection at once.
    public mutating func connectDevice(
        _ hello: DeviceHello, connectionID: UInt64, nowMs: Int64, isOpenHere: (UInt64) -> Bool = { _ in true }
    )
        throws(DeviceRequestError) -> [DeviceFrame]
    {
        // Refused before anything changes: a hello over the bound installs none of its apps,
        // and one that names an app twice would register a token the second entry ends at once.
        var named = Set<String>()
        for app in hello.apps where !named.insert(app.bundleID).inserted {
            throw DeviceRequestError("bad_request", "hello lists \(app.bundleID) twice; an app is installed once, in one environment")
        }
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
            // An old connection of this instance's keeps what it was sent and has not
            // acknowledged until it closes (`disconnectDevice`): a device that acked and
            // reconnected at once has its last acks read there first, and what it did not ack
            // goes out again on this connection then. Sent through another instance's (relayed,
            // `--redis`; that instance may be gone), or one of this instance's that is closed
            // already: it goes out again here now.
            let elsewhere = ownership.map { DeviceOwnership.instance(ofConnection: old) != $0.me } ?? false
            if elsewhere || !isOpenHere(old) {
                returnInflight(deviceID: hello.deviceID, connectionID: old, nowMs: nowMs)
            }
        }
        try? registry.updateDevice(hello.deviceID) {
            $0.connectionID = connectionID
            $0.isVirtual = false
            $0.lowPowerMode = hello.lowPowerMode
        }
        func mine(_ message: JSONValue) -> DeviceFrame {
            DeviceFrame(deviceID: hello.deviceID, connectionID: connectionID, message: message)
        }
        frames.append(
            mine([
                "type": "welcome", "version": 1, "deviceId": .string(hello.deviceID), "serverTime": .int(nowMs),
                "userId": registry.devices[hello.deviceID]?.userID.map(JSONValue.string) ?? .null,
            ]))
        for app in hello.apps {
            frames.append(contentsOf: try install(app, deviceID: hello.deviceID, nowMs: nowMs).map(mine))
        }
        // What it missed is told before what waited for it is applied: a change that waited
        // comes as itself (`updated`, `started`…), not once more as `current`.
        if let seen = hello.activitiesSeen {
            frames.append(contentsOf: activitiesMissed(deviceID: hello.deviceID, seen: seen, nowMs: nowMs).map(mine))
        }
        // Before what waits is sent: one it acked already is settled, not sent again.
        if deliveryOptions.deliveryIDsAreSequences {
            for acked in hello.acked {
                frames.append(contentsOf: acknowledgeAgain(deviceID: hello.deviceID, acked, nowMs: nowMs))
            }
        } else if !hello.acked.isEmpty {
            settleAcked(deviceID: hello.deviceID, byAPNsID: hello.acked, nowMs: nowMs)
        }
        // With --redis, what was answered for it and not yet routed was routed before this
        // change began (`routeEveryWaitingPush`): the store holds the newest.
        frames.append(contentsOf: flushWaiting(deviceID: hello.deviceID, nowMs: nowMs))
        return frames
    }

    /// `current` frames for the device's Live Activities that changed since it last heard
    /// (`seen`): started, updated, ended, given a new token while its frames went to a socket
    /// that was gone (an instance killed before the others knew, `--redis`). Dismissed ones
    /// it never heard of are left out.
    func activitiesMissed(deviceID: String, seen: [String: ActivitySeen], nowMs: Int64) -> [JSONValue] {
        guard let book = liveActivities.book(deviceID: deviceID) else { return [] }
        var messages: [JSONValue] = []
        for activity in book.activities(includeDismissed: true) {
            let now = ActivitySeen(updates: activity.updates, state: activity.state(atMs: nowMs).rawValue, pushToken: activity.pushToken)
            if let heard = seen[activity.activityID] {
                if heard == now { continue }
            } else if activity.state == .dismissed {
                continue
            }
            messages.append([
                "type": "activity", "change": "current", "activityId": .string(activity.activityID),
                "bundleId": .string(activity.bundleID), "activity": activity.json(atMs: nowMs),
            ])
        }
        return messages
    }

    /// Installs (or re-registers) an app; returns one `registered` message per token kind,
    /// then, for an app that declares Live Activity types, an `activity` `token` message per
    /// push-to-start token.
    public mutating func install(_ app: AppRegistration, deviceID: String, nowMs: Int64) throws(DeviceRequestError) -> [JSONValue] {
        if let types = app.liveActivityTypes {
            // Checked first, so a bad name installs nothing.
            for type in types where !LiveActivityBook.isValidTypeName(type) {
                throw DeviceRequestError("bad_request", LiveActivityBookError.invalidAttributesType(type).description)
            }
        }
        var messages: [JSONValue]
        do throws(RegistryError) {
            messages = try installApp(
                deviceID: deviceID, bundleID: app.bundleID, environment: app.environment,
                kinds: app.kinds.isEmpty ? [.app] : app.kinds, settings: app.settings, nowMs: nowMs
            )
            .map(Self.registeredMessage)
        } catch {
            throw DeviceRequestError(error)
        }
        if let types = app.liveActivityTypes {
            messages += try declaredLiveActivityMessages(
                deviceID: deviceID, bundleID: app.bundleID, types: types, frequentUpdates: app.frequentUpdates, nowMs: nowMs)
        }
        return messages
    }

    /// Installs (or re-registers) an app's tokens with its settings; a running app's
    /// registration callback runs (an app installed not running registers at its launch).
    /// The one place every install goes through: device frames, the admin API, batches.
    public mutating func installApp(
        deviceID: String, bundleID: String, environment: APNsEnvironment, kinds: [TokenKind],
        fixedToken: String? = nil, settings: AppSettings, nowMs: Int64
    ) throws(RegistryError) -> [TokenEntry] {
        let otherBuild = registry.devices[deviceID]?.apps[bundleID].map { $0.environment != environment } ?? false
        // Room for every new token first: refused halfway, the app kept some of its kinds.
        if let device = registry.devices[deviceID] {
            let current = device.apps[bundleID]
            try registry.checkRoom(forTokens: kinds.filter { otherBuild || current?.tokens[$0] == nil }.count)
        }
        var entries: [TokenEntry] = []
        for kind in kinds {
            entries.append(
                try registry.register(
                    deviceID: deviceID, bundleID: bundleID, environment: environment, kind: kind,
                    fixedToken: fixedToken, nowMs: nowMs))
        }
        // The other environment's build replaces the app, a reinstall: what waited for the old
        // one is discarded, as at an uninstall.
        if otherBuild {
            dropWaiting(
                AppKey(deviceID: deviceID, bundleID: bundleID), why: "the app was replaced by its \(environment.rawValue) build",
                step: .unregistered, nowMs: nowMs)
        }
        try registry.updateDevice(deviceID) { $0.apps[bundleID]?.settings = settings }
        if settings.appState.isRunning { didRegister(deviceID: deviceID, bundleID: bundleID) }
        return entries
    }

    /// The `appUpdated` frame: an app's settings as they are now (the answer to the device's
    /// own `app` request, and what it is told when a change comes from elsewhere); with
    /// `setupOf`, also its notification setup and badge (a change that named them).
    public static func appUpdatedMessage(bundleID: String, _ settings: AppSettings, setupOf app: InstalledApp? = nil) -> JSONObject {
        var message = JSONObject([
            ("type", "appUpdated"), ("bundleId", .string(bundleID)), ("authorization", .string(settings.authorization.rawValue)),
            ("appState", .string(settings.appState.rawValue)), ("backgroundMode", .bool(settings.backgroundMode)),
        ])
        if let app {
            message["notificationSettings"] = .object(app.settings.notifications.json)
            message["badge"] = .int(Int64(app.badge))
        }
        return message
    }

    public static func registeredMessage(_ entry: TokenEntry) -> JSONValue {
        [
            "type": "registered", "bundleId": .string(entry.bundleID), "environment": .string(entry.environment.rawValue),
            "kind": .string(entry.kind.rawValue), "token": .string(entry.token), "topic": .string(entry.topic),
        ]
    }

    /// After the shared copy was reloaded (`--redis`): a device it says is connected on a
    /// connection of this instance that is closed (its close was a change the reload undid:
    /// Redis lost its state, and another instance's copy was restored) is disconnected, so
    /// what it had in flight goes back to the store instead of waiting for acks that cannot
    /// come. (Pushes went on being sent to that connection, and were lost, until the device
    /// reconnected, and then they stayed in flight.) Returns the frames for devices now
    /// connected elsewhere here.
    public mutating func detachClosedConnections(isOpenHere: (UInt64) -> Bool, nowMs: Int64) -> [DeviceFrame] {
        let closed = registry.devices.values.compactMap { device -> (String, UInt64)? in
            guard let id = device.connectionID, ownership.map({ DeviceOwnership.instance(ofConnection: id) == $0.me }) ?? true,
                !isOpenHere(id)
            else { return nil }
            return (device.id, id)
        }
        return closed.flatMap { disconnectDevice($0.0, connectionID: $0.1, nowMs: nowMs) }
    }

    /// After the shared copy was reloaded or restored (`--redis`): the frames of what is in
    /// flight on a device's current connection here, sent again. A delivery can be in flight
    /// in the copy without its frame having gone out: a frame goes out once its change is
    /// written, and a write Redis applied and then lost with its state (or whose answer was
    /// lost) counted as failed here, while the copy restored from it holds the delivery. Nothing
    /// changes: the same delivery id, so the device's ack settles it; a device that had the
    /// frame already sees it twice, as after a move. Only deliveries made before `beforeMs` (the
    /// reload): one made since (a device attached again) went out with its change.
    public func inFlightFramesToResend(beforeMs: Int64, isOpenHere: (UInt64) -> Bool) -> [DeviceFrame] {
        delivery.inflight.sorted { $0.key < $1.key }.compactMap { id, flight in
            let connection = flight.connectionID
            guard flight.sentAtMs < beforeMs, ownership.map({ DeviceOwnership.instance(ofConnection: connection) == $0.me }) ?? true,
                registry.devices[flight.notification.deviceID]?.connectionID == connection, isOpenHere(connection)
            else { return nil }
            let presentation = records.record(sequence: flight.notification.sequence)?.presentation
            return DeviceFrame(
                deviceID: flight.notification.deviceID, connectionID: connection,
                message: Self.notificationMessage(id: id, flight.notification, flight.verdict, presentation))
        }
    }

    /// The connection went away: deliveries it did not ack go back to the store. One that
    /// another connection of the device replaced: they go out again on that one (returned).
    @discardableResult
    public mutating func disconnectDevice(_ deviceID: String, connectionID: UInt64, nowMs: Int64) -> [DeviceFrame] {
        returnInflight(deviceID: deviceID, connectionID: connectionID, nowMs: nowMs)
        guard let current = registry.devices[deviceID]?.connectionID else { return [] }
        if current == connectionID {
            try? registry.updateDevice(deviceID) { $0.connectionID = nil }
            return []
        }
        // With --redis, only the instance holding the device's socket sends to it.
        return registry.devices[deviceID]?.isOnline == true && owns(deviceID) ? flushWaiting(deviceID: deviceID, nowMs: nowMs) : []
    }

    /// A hello's `acked` entry: still in flight (on an old connection) it is acknowledged as an
    /// ack would; returned to the store or coalesced there meanwhile, settled as delivered.
    /// Anything else (settled already, unknown, another device's) is left as it is.
    mutating func acknowledgeAgain(deviceID: String, _ acked: AckedDelivery, nowMs: Int64) -> [DeviceFrame] {
        if let flight = delivery.inflight[acked.id], flight.notification.deviceID == deviceID,
            acked.apnsID.map({ flight.notification.apnsID.caseInsensitiveCompare($0) == .orderedSame }) ?? true
        {
            return (try? acknowledge(deviceID: deviceID, connectionID: flight.connectionID, deliveryID: acked.id, nowMs: nowMs)) ?? []
        }
        settleReturnedDelivery(deviceID: deviceID, sequence: acked.id, apnsID: acked.apnsID, nowMs: nowMs)
        return []
    }

    /// Without `--redis` delivery ids are this process's own, begun again by a restart: a
    /// hello's `acked` entries are found by their apns-id among the device's newest records (an
    /// ack that reached the emulator just before it stopped, with `--state-dir`; one for a
    /// delivery a newer notification replaced in the store once the connection dropped).
    mutating func settleAcked(deviceID: String, byAPNsID acked: [AckedDelivery], nowMs: Int64) {
        var wanted: Set<String> = []
        for entry in acked { if let apnsID = entry.apnsID { wanted.insert(apnsID.lowercased()) } }
        guard !wanted.isEmpty else { return }
        records.decodeKept()
        let found = records.scanNewestFirst(limit: wanted.count, before: nil, scanning: 10_000) { r in
            r.deviceID == deviceID && wanted.contains(r.apnsID.lowercased())
        }.records
        for record in found {
            settleReturnedDelivery(deviceID: deviceID, sequence: record.sequence, apnsID: record.apnsID, nowMs: nowMs, matchedByAPNsID: true)
        }
    }

    /// With `--redis` (delivery ids are journal sequences): an ack for a delivery no longer in
    /// flight because the shared state took it back before the ack counted (the socket moved,
    /// a reload or restore after a Redis fault returned it to the store, where a newer one may
    /// have coalesced it). The device had it: its record was sent to this device under this id
    /// (and has this apns-id, when given) and is not settled otherwise. Settled as delivered,
    /// and taken out of the store, so it is not sent again. True when it was, or when it was
    /// acknowledged already (an ack repeated).
    @discardableResult
    mutating func settleReturnedDelivery(
        deviceID: String, sequence: UInt64, apnsID: String?, nowMs: Int64, matchedByAPNsID: Bool = false
    ) -> Bool {
        guard deliveryOptions.deliveryIDsAreSequences || matchedByAPNsID, let record = records.record(sequence: sequence),
            record.deviceID == deviceID, record.broadcastBox == nil,
            record.outcome == .coalesced || record.outcome == .stored || record.outcome == .delivered
        else { return false }
        if let apnsID, record.apnsID.caseInsensitiveCompare(apnsID) != .orderedSame { return false }
        var sent = false
        var acknowledged = false
        record.forEachTransition { _, step in
            if step == .delivered || step == .deliveredFromStorage { sent = true }
            if step == .acknowledged { acknowledged = true }
        }
        guard sent else { return false }
        // Acked again (a delivery sent once more after a reload): harmless, as documented.
        if acknowledged { return record.outcome == .delivered }
        guard record.outcome != .delivered else { return false }
        if let bundleID = registry.devices[deviceID]?.apps.keys.first(where: {
            delivery.stored[AppKey(deviceID: deviceID, bundleID: $0)]?.sequence == sequence
        }) {
            let key = AppKey(deviceID: deviceID, bundleID: bundleID)
            delivery.stored.removeValue(forKey: key)
            delivery.storeArrivals.removeValue(forKey: key)
            delivery.noteDone(sequence)
        } else if record.outcome == .stored {
            return false
        }
        counters.countOutcome(.delivered)
        counters.countConsole(.acknowledged)
        records.update(sequence: sequence) {
            $0.outcome = .delivered
            $0.explanation = "delivered"
            $0.deliveredAtMs = nowMs
            $0.noteTransition(.acknowledged, atMs: nowMs)
        }
        return true
    }

    @discardableResult
    /// The device acknowledged a delivery. Returns what it may now receive: once a full
    /// window has drained to half, the notifications stored meanwhile.
    public mutating func acknowledge(
        deviceID: String, connectionID: UInt64, deliveryID: UInt64, nowMs: Int64
    )
        throws(DeviceRequestError) -> [DeviceFrame]
    {
        // The device's ack, on whichever of its connections: one sent again on a new connection
        // after a reconnect, or after a reload of the shared copy, may still name the old one.
        guard let flight = delivery.inflight[deliveryID], flight.notification.deviceID == deviceID else {
            if settleReturnedDelivery(deviceID: deviceID, sequence: deliveryID, apnsID: nil, nowMs: nowMs) { return [] }
            throw DeviceRequestError("bad_request", "no delivery \(deliveryID) is waiting for an ack from this device")
        }
        delivery.inflight.removeValue(forKey: deliveryID)
        releaseWindowSlot(deviceID)
        delivery.noteDone(flight.notification.sequence)
        if flight.notification.acceptedAtNanos > 0 {
            let elapsed = Monotonic.nowNanoseconds() &- flight.notification.acceptedAtNanos
            counters.deliveryLatency.record(Double(elapsed) / 1e9)
        }
        if let kind = WidgetPushKind(flight.notification.pushType) {
            // WidgetKit on the device takes it: a reload within the budget, or why not.
            applyWidgetPush(flight.notification, kind: kind, nowMs: nowMs)
        } else {
            settle(flight.notification, verdict: flight.verdict, nowMs: nowMs, acknowledged: true)
        }
        let launch = launchIfWoken(flight.notification, verdict: flight.verdict, nowMs: nowMs)
        guard delivery.windowFull.contains(deviceID),
            delivery.inflightPerDevice[deviceID, default: 0] <= deliveryOptions.deviceWindow / 2
        else { return launch }
        delivery.windowFull.remove(deviceID)
        return launch + flushWaiting(deviceID: deviceID, nowMs: nowMs)
    }

    /// A push that woke an app that was not running launched it into the background: the
    /// system launches the app for a background push or a PushKit push (docs/device-model.md;
    /// not one the user force-quit, whose background pushes are held). Its state becomes
    /// `background` and, as at any launch, it registers (the backend's register hook); a
    /// connected device hears `appUpdated`.
    mutating func launchIfWoken(_ notification: PendingNotification, verdict: DeliveryVerdict, nowMs: Int64) -> [DeviceFrame] {
        guard
            verdict.callbacks.contains(AppCallback.didReceiveRemoteNotification)
                || verdict.callbacks.contains(AppCallback.didReceiveIncomingPush),
            let device = registry.devices[notification.deviceID], device.apps[notification.bundleID]?.settings.appState == .notRunning,
            let (settings, frames) = try? updateApp(
                deviceID: device.id, bundleID: notification.bundleID, appState: .background, authorization: nil,
                backgroundMode: nil, nowMs: nowMs)
        else { return [] }
        guard let connectionID = device.connectionID else { return frames }
        var updated = Self.appUpdatedMessage(bundleID: notification.bundleID, settings)
        updated["launchedBy"] = .string(notification.apnsID)
        return [DeviceFrame(deviceID: device.id, connectionID: connectionID, message: .object(updated))] + frames
    }

    /// Changes an app's settings; a force-quit app that is launched gets its held push.
    public mutating func updateApp(
        deviceID: String, bundleID: String, appState: AppState?, authorization: Authorization?,
        backgroundMode: Bool?, nowMs: Int64
    ) throws(DeviceRequestError) -> (AppSettings, [DeviceFrame]) {
        guard var settings = registry.devices[deviceID]?.apps[bundleID]?.settings else {
            throw DeviceRequestError(RegistryError.appNotInstalled(deviceID: deviceID, bundleID: bundleID))
        }
        let launched = appState.map { Self.isLaunch(from: settings.appState, to: $0) } ?? false
        if let appState { settings.appState = appState }
        if let authorization { settings.authorization = authorization }
        if let backgroundMode { settings.backgroundMode = backgroundMode }
        try? registry.updateDevice(deviceID) { $0.apps[bundleID]?.settings = settings }
        if launched { didRegister(deviceID: deviceID, bundleID: bundleID) }
        let frames =
            registry.devices[deviceID]?.isOnline == true
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

    /// The app is removed: its tokens become invalid (maybe after the configured delay), and
    /// its Live Activities go with it. Returns the tokens, and an `activity` frame for each
    /// change to its activities (dismissed by the system, tokens ended) for the device to hear
    /// after its `uninstalled`.
    public mutating func uninstallApp(
        deviceID: String, bundleID: String, nowMs: Int64
    ) throws(DeviceRequestError) -> (invalidAtMs: Int64, tokens: [TokenEntry], activityMessages: [JSONValue]) {
        let tokens = registry.devices[deviceID]?.apps[bundleID]?.tokens.values.sorted() ?? []
        let invalidAt = nowMs + deliveryOptions.unregisteredDelayMs
        do throws(RegistryError) {
            try registry.uninstall(
                deviceID: deviceID, bundleID: bundleID, invalidAtMs: invalidAt,
                afterPushes: deliveryOptions.unregisteredDelayMs > 0 ? deliveryOptions.unregisteredAfterPushes : nil)
        } catch {
            throw DeviceRequestError(error)
        }
        dropWaiting(AppKey(deviceID: deviceID, bundleID: bundleID), why: "the app was uninstalled", step: .unregistered, nowMs: nowMs)
        var activityMessages: [JSONValue] = []
        if liveActivities.book(deviceID: deviceID)?.apps[bundleID] != nil {
            endStoredBroadcastWaits(
                deviceID: deviceID, bundleID: bundleID, why: "the app was uninstalled before its device came back online", nowMs: nowMs)
            let changes = liveActivities.removeApp(deviceID: deviceID, bundleID: bundleID, nowMs: nowMs)
            let book = liveActivities.book(deviceID: deviceID)
            activityMessages = changes.map { Self.activityMessage($0, book: book, nowMs: nowMs) }
            settleThrottledLiveActivityUpdates(nowMs: nowMs)
        }
        return (invalidAt, tokens.compactMap { registry.token($0) }, activityMessages)
    }

    public mutating func rotateTokens(deviceID: String, bundleID: String, nowMs: Int64) throws(DeviceRequestError) -> [TokenEntry] {
        let entries: [TokenEntry]
        do throws(RegistryError) { entries = try registry.rotate(deviceID: deviceID, bundleID: bundleID, nowMs: nowMs) } catch {
            throw DeviceRequestError(error)
        }
        didRegister(deviceID: deviceID, bundleID: bundleID)
        return entries
    }

    /// The `uninstalled` frame of the device protocol.
    public static func uninstalledMessage(bundleID: String, invalidAtMs: Int64, tokens: [TokenEntry]) -> JSONValue {
        [
            "type": "uninstalled", "bundleId": .string(bundleID), "unregisteredAt": .int(invalidAtMs),
            "tokens": .array(tokens.map { .string($0.token) }),
        ]
    }

    /// Erase All Content and Settings: every app and token on the device is gone. Returns the
    /// `activity` frames of its Live Activities' end, for the device to hear after `erased`.
    public mutating func eraseDevice(_ deviceID: String, nowMs: Int64) throws(DeviceRequestError) -> [JSONValue] {
        // The bundle ids, not a copy of the device held while its apps are removed (that would
        // copy the app dictionary per app).
        guard let bundleIDs = registry.devices[deviceID]?.apps.keys.sorted() else {
            throw DeviceRequestError(RegistryError.unknownDevice(deviceID))
        }
        var activityMessages: [JSONValue] = []
        for bundleID in bundleIDs {
            activityMessages += try uninstallApp(deviceID: deviceID, bundleID: bundleID, nowMs: nowMs).activityMessages
        }
        // Settings go too: Focus, the scheduled summary, the switches.
        try? registry.updateDevice(deviceID) { $0.attention = DeviceAttention() }
        return activityMessages
    }

    /// What a restore did besides the new tokens: the `activity` frames for the target's own
    /// copies of the apps, replaced (before its `registered`), and for a connected source, the
    /// frames of its apps' uninstall (`uninstalled`, then its activities' end).
    public struct RestoreMessages: Sendable {
        public var target: [JSONValue] = []
        /// The target's new push-to-start tokens (`activity` frames), after its `registered`.
        public var targetAfterRegistered: [JSONValue] = []
        public var source: [DeviceFrame] = []
    }

    /// Restores a backup of `source` onto `target`: the apps move with new tokens; the
    /// source's tokens become invalid (the old phone is assumed wiped).
    public mutating func restoreBackup(
        from source: String, to target: String, nowMs: Int64
    ) throws(DeviceRequestError) -> (tokens: [TokenEntry], messages: RestoreMessages) {
        guard source != target else { throw DeviceRequestError("bad_request", "a device cannot restore its own backup") }
        // The apps, not a copy of the device held while they are removed from it.
        guard let apps = registry.devices[source]?.apps.values.sorted(by: { $0.bundleID < $1.bundleID }) else {
            throw DeviceRequestError(RegistryError.unknownDevice(source))
        }
        do throws(RegistryError) {
            try registry.checkRoom(forApps: apps.lazy.map(\.bundleID), on: target)
            // Every token of every app is a new one (the old stay, unregistered, until
            // forgotten): refused here, nothing changes; refused halfway, both devices lost apps.
            try registry.checkRoom(forTokens: apps.reduce(0) { $0 + $1.tokens.count })
        } catch {
            throw DeviceRequestError(error)
        }
        var entries: [TokenEntry] = []
        var messages = RestoreMessages()
        let sourceConnection = registry.devices[source]?.connectionID
        for app in apps {
            let declared = liveActivities.book(deviceID: source)?.apps[app.bundleID]
            let removed = try uninstallApp(deviceID: source, bundleID: app.bundleID, nowMs: nowMs)
            if let sourceConnection {
                let told = [Self.uninstalledMessage(bundleID: app.bundleID, invalidAtMs: removed.invalidAtMs, tokens: removed.tokens)]
                messages.source += (told + removed.activityMessages).map {
                    DeviceFrame(deviceID: source, connectionID: sourceConnection, message: $0)
                }
            }
            if registry.devices[target]?.apps[app.bundleID] != nil {
                messages.target += try uninstallApp(deviceID: target, bundleID: app.bundleID, nowMs: nowMs).activityMessages
            }
            let installed = try installAgain(app, declaring: declared, on: target, nowMs: nowMs)
            entries += installed.tokens
            messages.targetAfterRegistered += installed.activityMessages
        }
        return (entries, messages)
    }

    /// Uninstalls the app and installs it again with the same settings, token kinds and Live
    /// Activity types: new tokens, the old ones invalid (maybe after the configured delay).
    /// Returns the new tokens, and what the device hears, in order: `uninstalled`, its
    /// activities' end and its tokens' (`activity` frames), `registered`, the new push-to-start
    /// tokens (as the device's own uninstall and install would).
    public mutating func reinstallApp(
        deviceID: String, bundleID: String, nowMs: Int64
    ) throws(DeviceRequestError) -> (tokens: [TokenEntry], messages: [JSONValue]) {
        // Not found (404) as for a rotate: the device, or the app on it.
        try requireDevice(deviceID)
        guard let app = registry.devices[deviceID]?.apps[bundleID] else {
            throw DeviceRequestError(RegistryError.appNotInstalled(deviceID: deviceID, bundleID: bundleID))
        }
        // Refused before the uninstall: over --max-tokens the app stays as it was.
        do throws(RegistryError) { try registry.checkRoom(forTokens: app.tokens.count) } catch { throw DeviceRequestError(error) }
        let declared = liveActivities.book(deviceID: deviceID)?.apps[bundleID]
        let removed = try uninstallApp(deviceID: deviceID, bundleID: bundleID, nowMs: nowMs)
        let installed = try installAgain(app, declaring: declared, on: deviceID, nowMs: nowMs)
        let messages =
            [Self.uninstalledMessage(bundleID: bundleID, invalidAtMs: removed.invalidAtMs, tokens: removed.tokens)]
            + removed.activityMessages + installed.tokens.map(Self.registeredMessage) + installed.activityMessages
        return (installed.tokens, messages)
    }

    /// Installs `app` on `deviceID` afresh, with its environment, settings and token kinds, and
    /// the Live Activity types it declared (part of the app, not of the install); returns its
    /// tokens and the `activity` frames of its new push-to-start tokens.
    private mutating func installAgain(
        _ app: InstalledApp, declaring declared: LiveActivityApp?, on deviceID: String, nowMs: Int64
    ) throws(DeviceRequestError) -> (tokens: [TokenEntry], activityMessages: [JSONValue]) {
        let registration = AppRegistration(
            bundleID: app.bundleID, environment: app.environment, settings: app.settings,
            kinds: app.tokens.keys.sorted { $0.rawValue < $1.rawValue })
        _ = try install(registration, deviceID: deviceID, nowMs: nowMs)
        let tokens = registry.devices[deviceID]?.apps[app.bundleID]?.tokens.values.compactMap { registry.token($0) } ?? []
        guard let declared, !declared.attributesTypes.isEmpty else { return (tokens, []) }
        let messages = try declaredLiveActivityMessages(
            deviceID: deviceID, bundleID: app.bundleID, types: declared.attributesTypes, frequentUpdates: declared.frequentUpdates,
            nowMs: nowMs)
        // The user's switch for frequent updates is a setting, kept as the others are.
        try? liveActivities.setFrequentUpdatesEnabled(declared.frequentUpdatesEnabled, deviceID: deviceID, bundleID: app.bundleID)
        return (tokens, messages)
    }

    /// Sets Low Power Mode and whether the device is online (nil: unchanged), in that order;
    /// returns the frames of what that releases.
    public mutating func setPresence(
        deviceID: String, lowPowerMode: Bool?, online: Bool?, nowMs: Int64
    )
        throws(DeviceRequestError) -> [DeviceFrame]
    {
        var frames: [DeviceFrame] = []
        if let lowPowerMode { frames += try setLowPowerMode(deviceID: deviceID, lowPowerMode, nowMs: nowMs) }
        if let online { frames += try setForcedOffline(deviceID: deviceID, !online, nowMs: nowMs) }
        return frames
    }

    /// Removes the device; its tokens become invalid. A device connected now is told
    /// (`removed`) and its connection closed: the frame to send.
    @discardableResult
    public mutating func removeDevice(_ deviceID: String, nowMs: Int64) throws(RegistryError) -> [DeviceFrame] {
        let connectionID = registry.devices[deviceID]?.connectionID
        let bundleIDs = registry.devices[deviceID]?.apps.keys.sorted() ?? []
        try registry.removeDevice(id: deviceID, nowMs: nowMs)
        dropEverythingWaiting(for: deviceID, bundleIDs: bundleIDs, nowMs: nowMs)
        endStoredBroadcastWaits(deviceID: deviceID, why: "the device was removed before it came back online", nowMs: nowMs)
        liveActivities.removeDevice(deviceID, settling: true)
        settleThrottledLiveActivityUpdates(nowMs: nowMs)
        widgetPushes.removeDevice(deviceID)
        guard let connectionID else { return [] }
        return [DeviceFrame(deviceID: deviceID, connectionID: connectionID, message: ["type": "removed"], closeAfter: true)]
    }

    /// A deleted device takes nothing more: what waited for it (stored, held, batched, or sent
    /// and not yet acknowledged) ends now, each record with one outcome, instead of waiting in
    /// the store for a device that no longer exists.
    private mutating func dropEverythingWaiting(for deviceID: String, bundleIDs: [String], nowMs: Int64) {
        let why = "device \(deviceID) was deleted"
        for bundleID in bundleIDs {
            dropWaiting(AppKey(deviceID: deviceID, bundleID: bundleID), why: why, step: .unregistered, nowMs: nowMs)
        }
        for item in delivery.batched where item.notification.deviceID == deviceID {
            setOutcome(item.notification.sequence, .droppedBySystem, "discarded: \(why)", atMs: nowMs, step: .unregistered)
            delivery.noteDone(item.notification.sequence)
        }
        delivery.batched.removeAll { $0.notification.deviceID == deviceID }
        for (id, flight) in delivery.inflight where flight.notification.deviceID == deviceID {
            delivery.inflight.removeValue(forKey: id)
            setOutcome(
                flight.notification.sequence, .droppedBySystem, "discarded: \(why) before it acknowledged the delivery", atMs: nowMs,
                step: .unregistered)
            delivery.noteDone(flight.notification.sequence)
        }
        delivery.windowFull.remove(deviceID)
    }

    /// Sets a token's state directly (a test provoking an answer); nil for an unknown token.
    public mutating func setTokenState(_ token: String, _ state: TokenState) -> TokenEntry? {
        guard registry.setState(token: token, state) else { return nil }
        return registry.token(token)
    }

    /// The user taps a notification on screen or in Notification Center: its default action
    /// (`respond`). Returns the tap's callbacks and the frames of anything held for the app
    /// until it was launched (a background push held while it was force-quit).
    public mutating func tap(
        deviceID: String, apnsID: String, nowMs: Int64
    ) throws(DeviceRequestError)
        -> (apnsID: String, bundleID: String, callbacks: [String], launched: Bool, frames: [DeviceFrame])
    {
        let tapped = try respond(deviceID: deviceID, apnsID: apnsID, action: "default", text: nil, nowMs: nowMs)
        // The notification's own apns-id, whatever case the tap named it in (as `respond` answers).
        return (tapped.apnsID, tapped.bundleID, tapped.effect.callbacks, tapped.launched, tapped.frames)
    }
}
