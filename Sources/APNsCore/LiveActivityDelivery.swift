// How Live Activity changes leave the world: the journal (what a push or broadcast did), the
// device's socket (`activity` frames), the app's backend (`register` for new tokens), and the
// channel's stored message for activities that subscribe or come back online later.

extension World {
    /// A `liveactivity` push to a Live Activity token, accepted with 200. An online device
    /// takes it at once; for an offline one it waits (the newest per token, until it expires),
    /// as APNs keeps a notification for a device that is away.
    mutating func applyLiveActivityPush(
        token: String, payload: [UInt8], priority: Int, expiration: Int64?, sequence: UInt64, nowMs: Int64
    ) -> [DeviceFrame] {
        guard let owner = liveActivities.tokens[token] else { return [] }
        guard registry.devices[owner.deviceID]?.isOnline ?? true else {
            waitForDevice(
                WaitingLiveActivityPush(
                    token: token, deviceID: owner.deviceID, payload: payload, priority: priority, sequence: sequence,
                    storeUntilMs: Self.storeUntil(expiration: expiration, nowMs: nowMs, defaultMs: deliveryOptions.defaultStorageMs)),
                nowMs: nowMs)
            return []
        }
        return takeLiveActivityPush(token: token, payload: payload, priority: priority, sequence: sequence, nowMs: nowMs, stored: false)
    }

    /// As for device pushes (`PendingNotification.storeUntil`): an expiration already past is
    /// not stored, and said why.
    static func storeUntil(expiration: Int64?, nowMs: Int64, defaultMs: Int64) -> Int64? {
        PendingNotification.storeUntil(expiration: expiration, receivedAtMs: nowMs, defaultStorageMs: defaultMs)
    }

    private mutating func takeLiveActivityPush(
        token: String, payload: [UInt8], priority: Int, sequence: UInt64, nowMs: Int64, stored: Bool
    ) -> [DeviceFrame] {
        guard let owner = liveActivities.tokens[token] else { return [] }
        let live = Set(channels.liveChannels(bundleID: owner.bundleID, environment: owner.environment).map(\.id))
        let json = (try? JSONValue.parse(payload)) ?? .null
        guard
            let (_, receipt) = liveActivities.receive(
                token: token, payload: json, priority: priority, nowMs: nowMs, channelExists: { live.contains($0) },
                origin: .push(sequence: sequence))
        else { return [] }
        let note = stored ? " (after waiting for the device to come online)" : ""
        let (outcome, explanation): (DeliveryOutcome, String)
        var shown: (display: Display, presentation: Presentation?, notes: [String])?
        switch receipt.outcome {
        case .applied:
            let newest = liveActivities.book(deviceID: owner.deviceID)?.activity(receipt.activityID ?? "")?.newestTimestamp
            shown = liveActivityPresentation(payload, deviceID: owner.deviceID, bundleID: owner.bundleID)
            let notes = shown?.notes.map { "; " + $0 }.joined() ?? ""
            (outcome, explanation) = (
                .delivered, "applied to Live Activity \(receipt.activityID ?? "?")" + note + Self.millisecondsHint(newest) + notes
            )
        case .ignored(let why), .refused(let why): (outcome, explanation) = (.ignored, why + note)
        case .throttled(let why): (outcome, explanation) = (.throttled, why + note)
        }
        setOutcome(sequence, outcome, explanation, atMs: nowMs)
        if stored || shown != nil {
            records.update(sequence: sequence) {
                if stored { $0.wasStored = true }
                if let shown {
                    $0.deliveredAtMs = nowMs
                    $0.display = shown.display.rawValue
                    if let presentation = shown.presentation { $0.presentation = presentation }
                }
            }
        }
        let apnsID = outcome == .ignored ? records.apnsID(sequence: sequence) ?? "" : ""
        noteLiveActivityOutcome(outcome) {
            IgnoredPush(
                sequence: sequence, apnsID: apnsID, deviceID: owner.deviceID,
                bundleID: owner.bundleID, pushType: PushType.liveactivity.rawValue, explanation: explanation, atMs: nowMs)
        }
        var frames = liveActivityChanged(deviceID: owner.deviceID, receipt.changes, nowMs: nowMs)
        frames += storedBroadcastsForNewSubscribers(deviceID: owner.deviceID, receipt.changes, nowMs: nowMs)
        return frames
    }

    /// What the screen shows for a Live Activity push that was applied (docs/device-model.md,
    /// "Other push types"): a banner when it carries something to see or hear (an alert with
    /// text, as the app's strings give it, a badge, a sound), else nothing. Read as for an alert.
    /// The presentation is kept only when the app's setup is not the default (its strings
    /// localize the text); otherwise the record reads it back from the payload
    /// (`Presentation.plain`). `notes`: what the reading left out or chose.
    func liveActivityPresentation(
        _ payload: [UInt8], deviceID: String, bundleID: String
    ) -> (display: Display, presentation: Presentation?, notes: [String]) {
        let device = registry.devices[deviceID]
        let setup = device?.apps[bundleID]?.settings.notifications ?? NotificationSetup()
        var content = AlertContent.read(payload, setup: setup)
        // An activity's alert carries its sound inside it (Apple's example: "alert": {…,
        // "sound": "chime.aiff"}); kept in the record, which reads a plain alert's back as a
        // notification's.
        let soundInAlert = !content.hasSound && content.alertHasSound
        if soundInAlert { content.hasSound = true }
        let display: Display = content.hasAlert && content.hasText || content.hasSound || content.badge != nil ? .banner : .none
        guard display == .banner else { return (display, nil, content.notes) }
        var notes = content.notes
        var p = Presentation.shown(content, display: display)
        p.listed = false  // the activity on screen, not a notification in Notification Center
        // The device's switches hold for an activity's alert as for a notification's: a Focus
        // that does not allow the app keeps it quiet and dark, the ring switch on silent
        // keeps it quiet (the activity is updated all the same).
        var quieted = false
        if let focus = device?.attention.focus, let why = PresentationRules.silencedBy(focus, p, content, bundleID: bundleID) {
            notes.append("silenced by Focus \u{201C}\(focus.name)\u{201D}: \(why)")
            p.screenLit = false
            if p.sound == .played { p.sound = .silenced }
            quieted = true
        } else if device?.attention.muted == true, p.sound == .played {
            notes.append("the ring switch is on silent, so no sound")
            p.sound = .silenced
            quieted = true
        }
        guard setup != NotificationSetup() || quieted || soundInAlert else { return (display, nil, notes) }
        return (display, p, notes)
    }

    /// A `timestamp` past year 5000 is almost surely milliseconds: the device takes it as
    /// seconds, so every later update in seconds reads as older. Said in the record.
    static func millisecondsHint(_ timestamp: Double?) -> String {
        guard let timestamp, timestamp > 95_617_584_000 else { return "" }
        return
            "; note: timestamp \(LiveActivityTime.seconds(timestamp)) is read as seconds (after year 5000): if it is milliseconds, later updates in seconds will be ignored as older"
    }

    /// The records of throttled updates that stopped waiting say what became of them: shown
    /// when the budget allowed, replaced by a newer update, or never shown (the activity ended
    /// or left first). A broadcast's record has it in the activity's delivery.
    mutating func settleThrottledLiveActivityUpdates(nowMs: Int64) {
        guard !liveActivities.settledUpdates.isEmpty else { return }
        for (deviceID, settled) in liveActivities.takeSettledUpdates() {
            switch settled.origin {
            case .push(let sequence):
                setOutcome(sequence, settled.outcome, settled.explanation, atMs: nowMs)
                if settled.outcome == .delivered { records.update(sequence: sequence) { $0.deliveredAtMs = nowMs } }
                guard settled.outcome == .ignored, let record = records.record(sequence: sequence) else { continue }
                noteIgnoredPush(
                    IgnoredPush(
                        sequence: sequence, apnsID: record.apnsID, deviceID: deviceID, bundleID: record.bundleID ?? "",
                        pushType: PushType.liveactivity.rawValue, explanation: settled.explanation, atMs: nowMs))
            case .broadcast(let key):
                guard let sequence = broadcastRecordSequence(key: key, channelID: nil) else { continue }
                let channels = self.channels
                records.update(sequence: sequence) { record in
                    guard var reach = record.broadcast else { return }
                    reach.settle(
                        BroadcastReach.Delivery(
                            deviceID: deviceID, activityID: settled.activityID, outcome: settled.outcome, explanation: settled.explanation),
                        previously: .throttled)
                    let channel = channels.channels[reach.channelID]
                    let kept =
                        channel?.policy == .mostRecentMessageStored && channel?.storedMessage?.key == key
                        && (channel?.storedMessage?.expiresAtMs ?? 0) > nowMs
                    record.broadcast = reach
                    record.outcome = reach.summaryOutcome(keptForLater: kept)
                    record.explanation = ChannelEndpoint.reachSummary(
                        reach, channelID: reach.channelID, stored: kept ? ChannelEndpoint.storedSuffix(channel) : "")
                }
                counters.countBroadcastDelivery(settled.outcome)
            }
        }
    }

    private mutating func waitForDevice(_ push: WaitingLiveActivityPush, nowMs: Int64) {
        guard let until = push.storeUntilMs, until > nowMs else {
            let why =
                push.storeUntilMs.map { "its apns-expiration (\(RFC3339.format(milliseconds: $0))) has passed" }
                ?? "apns-expiration 0 means the push is never stored"
            setOutcome(push.sequence, .expired, "the device is offline, and \(why)", atMs: nowMs)
            return
        }
        if let older = liveActivities.waitingPushes[push.token] {
            setOutcome(
                older.sequence, .coalesced, "replaced by a newer push to the same Live Activity token while the device was offline", atMs: nowMs)
        } else if liveActivities.waitingPushes.count >= LiveActivityWorld.maxWaitingPushes {
            setOutcome(
                push.sequence, .expired,
                "the device is offline and \(LiveActivityWorld.maxWaitingPushes) Live Activity pushes already wait for offline devices", atMs: nowMs)
            return
        }
        liveActivities.hold(push)
        setOutcome(push.sequence, .stored, "stored: the device is offline; it takes the push when it is back", atMs: nowMs)
    }

    mutating func expireWaitingLiveActivityPushes(nowMs: Int64) {
        guard !liveActivities.waitingPushes.isEmpty else { return }
        for (token, push) in liveActivities.waitingPushes where (push.storeUntilMs ?? 0) <= nowMs {
            liveActivities.takeWaiting(token: token)
            setOutcome(
                push.sequence, .expired, "expired in the store (apns-expiration or 30 days) while the device was offline",
                atMs: PendingNotification.expiredAtMs(storeUntilMs: push.storeUntilMs, nowMs: nowMs))
        }
    }

    /// A device came online: the Live Activity pushes that waited for it, then what its
    /// channels stored while it was away.
    mutating func flushLiveActivities(deviceID: String, nowMs: Int64) -> [DeviceFrame] {
        guard liveActivities.book(deviceID: deviceID) != nil else { return [] }
        var frames: [DeviceFrame] = []
        // First what waited for the device to be online (a throttled update its budget already
        // allows): it came before anything sent while the device was away.
        let due = liveActivities.tick(deviceID: deviceID, nowMs: nowMs)
        if !due.isEmpty {
            frames += liveActivityChanged(deviceID: deviceID, due, nowMs: nowMs)
            settleThrottledLiveActivityUpdates(nowMs: nowMs)
        }
        // The device's own tokens, not every push waiting anywhere (this runs on each flush).
        let waiting = (liveActivities.tokensOfDevice[deviceID] ?? []).compactMap { liveActivities.waitingPushes[$0] }
            .sorted { $0.sequence < $1.sequence }
        for push in waiting {
            liveActivities.takeWaiting(token: push.token)
            guard (push.storeUntilMs ?? 0) > nowMs else {
                setOutcome(
                    push.sequence, .expired, "expired in the store before the device came back online",
                    atMs: PendingNotification.expiredAtMs(storeUntilMs: push.storeUntilMs, nowMs: nowMs))
                continue
            }
            frames += takeLiveActivityPush(
                token: push.token, payload: push.payload, priority: push.priority, sequence: push.sequence, nowMs: nowMs, stored: true)
        }
        for channelID in liveActivities.channels(ofDevice: deviceID) {
            frames += deliverStoredBroadcast(channelID: channelID, deviceID: deviceID, activityID: nil, nowMs: nowMs, previously: .stored)
        }
        return frames
    }

    /// A broadcast accepted on `channel` (already recorded in the directory as its newest
    /// message): every subscribed activity takes it. The reach goes in the journal record.
    mutating func deliverBroadcast(_ channel: BroadcastChannel, message: StoredBroadcast, nowMs: Int64) -> (BroadcastReach, [DeviceFrame]) {
        guard liveActivities.subscribers[channel.id] != nil else { return (BroadcastReach(channelID: channel.id), []) }
        let registry = self.registry
        let (reach, changed) = liveActivities.receiveBroadcast(
            channelID: channel.id, message: message, policy: channel.policy, nowMs: nowMs,
            isOnline: { registry.devices[$0]?.isOnline ?? false })
        counters.countBroadcastReach(reach)
        var frames: [DeviceFrame] = []
        for (deviceID, changes) in changed { frames += liveActivityChanged(deviceID: deviceID, changes, nowMs: nowMs) }
        settleThrottledLiveActivityUpdates(nowMs: nowMs)
        return (reach, frames)
    }

    /// After changes to a device's activities: activities that just subscribed to a
    /// Most-Recent-Message-Stored channel get its stored message.
    mutating func storedBroadcastsForNewSubscribers(deviceID: String, _ changes: [LiveActivityChange], nowMs: Int64) -> [DeviceFrame] {
        // An offline device takes it when it is back (its flush).
        guard registry.devices[deviceID]?.isOnline ?? false else { return [] }
        var frames: [DeviceFrame] = []
        for case .started(let activityID, _, _, _, _) in changes {
            guard let channelID = liveActivities.book(deviceID: deviceID)?.activity(activityID)?.channelID else { continue }
            frames += deliverStoredBroadcast(channelID: channelID, deviceID: deviceID, activityID: activityID, nowMs: nowMs, previously: nil)
        }
        return frames
    }

    /// The journal record of a broadcast: the one its key names (on every instance, after a
    /// restart too: a map kept by the instance that took it left the record `stored` for
    /// good elsewhere); for a key kept by an older version, the newest record with its request
    /// id when that is a broadcast on `channelID`.
    func broadcastRecordSequence(key: String, channelID: String?) -> UInt64? {
        if let sequence = StoredBroadcast.recordSequence(ofKey: key) { return sequence }
        guard let record = records.newest(withID: StoredBroadcast.requestID(ofKey: key)), let reach = record.broadcast,
            channelID == nil || reach.channelID == channelID
        else { return nil }
        return record.sequence
    }

    private mutating func deliverStoredBroadcast(
        channelID: String, deviceID: String, activityID: String?, nowMs: Int64, previously: DeliveryOutcome?
    ) -> [DeviceFrame] {
        guard let channel = channels.channels[channelID], channel.policy == .mostRecentMessageStored,
            let message = channel.storedMessage, message.expiresAtMs > nowMs
        else { return [] }
        let (deliveries, changes) = liveActivities.receiveStoredBroadcast(
            channelID: channelID, message: message, deviceID: deviceID, activityID: activityID, nowMs: nowMs)
        guard !deliveries.isEmpty else { return [] }
        if let sequence = broadcastRecordSequence(key: message.key, channelID: channelID) {
            records.update(sequence: sequence) { record in
                var reach = record.broadcast ?? BroadcastReach(channelID: channelID)
                for delivery in deliveries {
                    if let previously { reach.settle(delivery, previously: previously) } else { reach.add(delivery) }
                }
                record.broadcast = reach
                record.outcome = reach.summaryOutcome(keptForLater: channel.isLive)
                record.explanation = ChannelEndpoint.reachSummary(reach, channelID: channelID, stored: ChannelEndpoint.storedSuffix(channel))
            }
            // A finding as when the broadcast was sent: activities that took it later ignored it.
            if let first = deliveries.first(where: { $0.outcome == .ignored }) {
                let ignored = deliveries.count { $0.outcome == .ignored }
                noteIgnoredPush(
                    IgnoredPush(
                        sequence: sequence, apnsID: message.requestID, deviceID: deviceID, bundleID: channel.bundleID,
                        pushType: PushType.liveactivity.rawValue,
                        explanation:
                            "\(ignored) Live Activit\(ignored == 1 ? "y" : "ies") ignored the stored broadcast of channel \(channelID) when it reached \(ignored == 1 ? "it" : "them") later; the first: \(first.explanation)",
                        atMs: nowMs))
            }
        }
        for delivery in deliveries { counters.countBroadcastDelivery(delivery.outcome) }
        return liveActivityChanged(deviceID: deviceID, changes, nowMs: nowMs)
    }

    /// Activities about to go (the user dismissed one, the app was uninstalled, the device
    /// removed) that waited, their device offline, for their channel's stored broadcast: its
    /// record stops saying they wait for it (before, "the device is offline" until the copy
    /// expired, hours after the device was back).
    mutating func endStoredBroadcastWaits(deviceID: String, bundleID: String? = nil, activityID: String? = nil, why: String, nowMs: Int64) {
        guard let book = liveActivities.book(deviceID: deviceID) else { return }
        for activity in book.activities(bundleID: bundleID) where activityID == nil || activity.activityID == activityID {
            guard let channelID = activity.channelID, let channel = channels.channels[channelID],
                channel.policy == .mostRecentMessageStored, let message = channel.storedMessage, message.expiresAtMs > nowMs,
                activity.lastBroadcastKey != message.key, let sequence = broadcastRecordSequence(key: message.key, channelID: channelID)
            else { continue }
            var settled = false
            records.update(sequence: sequence) { record in
                guard var reach = record.broadcast,
                    reach.deliveries.contains(where: { $0.deviceID == deviceID && $0.activityID == activity.activityID && $0.outcome == .stored })
                else { return }
                reach.settle(
                    BroadcastReach.Delivery(
                        deviceID: deviceID, activityID: activity.activityID, outcome: .ignored, explanation: why, fromStore: true),
                    previously: .stored)
                record.broadcast = reach
                record.outcome = reach.summaryOutcome(keptForLater: channel.isLive)
                record.explanation = ChannelEndpoint.reachSummary(reach, channelID: channelID, stored: ChannelEndpoint.storedSuffix(channel))
                settled = true
            }
            if settled { counters.countBroadcastDelivery(.ignored) }
        }
    }

    /// A channel's stored message stopped waiting for subscribers: it expired, or (`replacedBy`)
    /// a newer broadcast took its place, when the activities that waited for it count it as
    /// coalesced. Its record no longer reads `stored`.
    mutating func storedBroadcastLeft(_ message: StoredBroadcast, channelID: String, replacedBy: String?, nowMs: Int64) {
        guard let sequence = broadcastRecordSequence(key: message.key, channelID: channelID) else { return }
        let (outcome, why): (DeliveryOutcome, String) =
            if let replacedBy, message.expiresAtMs > nowMs {
                (.coalesced, "broadcast \(replacedBy) replaced it in the channel's store")
            } else {
                (.expired, "the channel's stored copy expired at \(RFC3339.format(milliseconds: message.expiresAtMs))")
            }
        var waited = 0
        records.update(sequence: sequence) { record in
            var reach = record.broadcast ?? BroadcastReach(channelID: channelID)
            waited = reach.leaveStore(as: outcome, explanation: "the device was offline; \(why)")
            record.broadcast = reach
            record.outcome = reach.summaryOutcome(keptForLater: false, otherwise: outcome)
            record.explanation = ChannelEndpoint.reachSummary(reach, channelID: channelID, stored: "; \(why)")
        }
        // Each activity that waited for it counts what became of it, as it counted `stored`.
        for _ in 0..<waited { counters.countBroadcastDelivery(outcome) }
    }

    /// A deleted channel takes no new subscribers: its stored broadcast's record stops saying
    /// it waits for them (it still waits for the subscribed activities of offline devices).
    mutating func storedBroadcastOfDeletedChannel(_ channel: BroadcastChannel, nowMs: Int64) {
        guard channel.policy == .mostRecentMessageStored, let message = channel.storedMessage, message.expiresAtMs > nowMs,
            let sequence = broadcastRecordSequence(key: message.key, channelID: channel.id)
        else { return }
        records.update(sequence: sequence) { record in
            guard let reach = record.broadcast else { return }
            record.outcome = reach.summaryOutcome(keptForLater: false)
            let waiting = reach.outcomes[.stored] != nil
            record.explanation = ChannelEndpoint.reachSummary(
                reach, channelID: channel.id,
                stored: waiting ? ChannelEndpoint.keptForThoseWaiting : "; the channel was deleted, and no subscribed activity waits for it")
        }
    }

    /// Stored broadcasts whose time is up leave their channels (`tick`).
    mutating func expireStoredBroadcasts(nowMs: Int64) {
        for (channelID, message) in channels.expireStoredMessages(nowMs: nowMs) {
            storedBroadcastLeft(message, channelID: channelID, replacedBy: nil, nowMs: nowMs)
        }
    }

    /// What follows a change to a device's activities: `activity` frames for a connected
    /// device, and the app backend's `register` hook for each new token.
    mutating func liveActivityChanged(deviceID: String, _ changes: [LiveActivityChange], nowMs: Int64) -> [DeviceFrame] {
        settleThrottledLiveActivityUpdates(nowMs: nowMs)
        guard !changes.isEmpty else { return [] }
        for case .tokenIssued(let kind, let token, let bundleID, let type, let activityID) in changes {
            accountsCallRegister(deviceID: deviceID, bundleID: bundleID, token: token, kind: kind, attributesType: type, activityID: activityID)
        }
        guard let connectionID = registry.devices[deviceID]?.connectionID else { return [] }
        let book = liveActivities.book(deviceID: deviceID)
        return changes.map { change in
            DeviceFrame(deviceID: deviceID, connectionID: connectionID, message: Self.activityMessage(change, book: book, nowMs: nowMs))
        }
    }

    /// A device's own `install` (or `liveActivities`) declaring types: the app backend hears
    /// of new tokens; the device gets a `token` message for each current push-to-start token
    /// (new or not, so a reinstall or reconnect tells it again).
    public mutating func declaredLiveActivityMessages(
        deviceID: String, bundleID: String, types: [String], frequentUpdates: Bool, nowMs: Int64
    ) throws(DeviceRequestError) -> [JSONValue] {
        guard let app = registry.devices[deviceID]?.apps[bundleID] else { throw Self.noApp(bundleID, deviceID) }
        let changes: [LiveActivityChange]
        do throws(LiveActivityBookError) {
            changes = try liveActivities.declare(
                deviceID: deviceID, bundleID: bundleID, environment: app.environment, types: types, frequentUpdates: frequentUpdates)
        } catch {
            throw DeviceRequestError("bad_request", error.description)
        }
        for case .tokenIssued(let kind, let token, let bundle, let type, let activityID) in changes {
            accountsCallRegister(deviceID: deviceID, bundleID: bundle, token: token, kind: kind, attributesType: type, activityID: activityID)
        }
        let book = liveActivities.book(deviceID: deviceID)
        var messages = changes.filter {
            if case .tokenIssued = $0 { return false } else { return true }
        }.map { Self.activityMessage($0, book: book, nowMs: nowMs) }
        for type in types {
            guard let token = book?.pushToStartToken(bundleID: bundleID, type: type) else { continue }
            messages.append(
                Self.activityMessage(
                    .tokenIssued(kind: .pushToStart, token: token, bundleID: bundleID, attributesType: type, activityID: nil), book: book,
                    nowMs: nowMs))
        }
        // A relaunched app finds its running activities and their update tokens again
        // (`Activity.activities`, `pushTokenUpdates`): a device that reconnects hears them.
        for activity in book?.activities(bundleID: bundleID) ?? [] where activity.isRunning {
            guard let token = activity.pushToken else { continue }
            messages.append(
                Self.activityMessage(
                    .tokenIssued(
                        kind: .update, token: token, bundleID: bundleID, attributesType: activity.attributesType, activityID: activity.activityID),
                    book: book, nowMs: nowMs))
        }
        return messages
    }

    /// The `activity` frame of the device protocol for one change.
    static func activityMessage(_ change: LiveActivityChange, book: LiveActivityBook?, nowMs: Int64) -> JSONValue {
        var o = JSONObject([("type", "activity")])
        func activity(_ id: String) {
            o["activityId"] = .string(id)
            if let activity = book?.activity(id) {
                o["bundleId"] = .string(activity.bundleID)
                o["activity"] = activity.json(atMs: nowMs)
            }
        }
        switch change {
        case .started(let id, _, _, let by, let alert):
            o["change"] = "started"
            o["startedBy"] = .string(by.rawValue)
            activity(id)
            if let alert { o["alert"] = alert }
        case .updated(let id, let alert):
            o["change"] = "updated"
            activity(id)
            if let alert { o["alert"] = alert }
        case .stale(let id):
            o["change"] = "stale"
            activity(id)
        case .ended(let id, let by, _, let alert):
            o["change"] = "ended"
            o["endedBy"] = .string(by.rawValue)
            activity(id)
            if let alert { o["alert"] = alert }
        case .dismissed(let id, let by, _):
            o["change"] = "dismissed"
            o["dismissedBy"] = .string(by.rawValue)
            activity(id)
        case .tokenIssued(let kind, let token, let bundleID, let type, let id):
            o["change"] = "token"
            o["kind"] = .string(kind.rawValue)
            o["token"] = .string(token)
            o["bundleId"] = .string(bundleID)
            o["attributesType"] = .string(type)
            o["activityId"] = id.map(JSONValue.string) ?? .null
        case .tokenEnded(let kind, let token, let id):
            o["change"] = "tokenEnded"
            o["kind"] = .string(kind.rawValue)
            o["token"] = .string(token)
            o["activityId"] = id.map(JSONValue.string) ?? .null
        case .reloaded(let kind, let bundleID):
            o["change"] = "reloaded"
            o["kind"] = .string(kind.rawValue)
            o["bundleId"] = .string(bundleID)
        }
        return .object(o)
    }
}

/// A Live Activity token push waiting for its device to come online.
public struct WaitingLiveActivityPush: Sendable, Equatable {
    public var token: String
    public var deviceID: String
    public var payload: [UInt8]
    public var priority: Int
    /// Its journal record.
    public var sequence: UInt64
    public var storeUntilMs: Int64?

    public init(token: String, deviceID: String, payload: [UInt8], priority: Int, sequence: UInt64, storeUntilMs: Int64?) {
        self.token = token
        self.deviceID = deviceID
        self.payload = payload
        self.priority = priority
        self.sequence = sequence
        self.storeUntilMs = storeUntilMs
    }
}

extension LiveActivity {
    /// As the admin API and the device protocol show it (field names are a contract).
    public func json(atMs nowMs: Int64) -> JSONValue {
        func time(_ ms: Int64?) -> JSONValue { ms.map { .string(RFC3339.format(milliseconds: $0)) } ?? .null }
        return [
            "activityId": .string(activityID), "bundleId": .string(bundleID), "attributesType": .string(attributesType),
            "attributes": attributes, "contentState": contentState, "state": .string(state(atMs: nowMs).rawValue),
            "pushToken": pushToken.map(JSONValue.string) ?? .null, "channel": channelID.map(JSONValue.string) ?? .null,
            "relevanceScore": relevanceScore.map(JSONValue.double) ?? .null, "staleDate": time(staleDateMs),
            "dismissalDate": time(dismissalDateMs), "startedAt": time(startedAtMs), "endedAt": time(endedAtMs),
            "updates": .int(Int64(updates)), "startedBy": .string(startedBy.rawValue),
        ]
    }
}

/// The app's and the user's own calls on a device's Live Activities (admin API, device
/// protocol): each returns what the connected device hears.
extension World {
    /// The app's ActivityAttributes types (push-to-start tokens for new ones).
    public mutating func declareLiveActivities(
        deviceID: String, bundleID: String, types: [String], frequentUpdates: Bool, frequentUpdatesEnabled: Bool? = nil, nowMs: Int64
    ) throws(DeviceRequestError) -> [DeviceFrame] {
        try requireDevice(deviceID)
        guard let app = registry.devices[deviceID]?.apps[bundleID] else { throw Self.noApp(bundleID, deviceID) }
        do throws(LiveActivityBookError) {
            let changes = try liveActivities.declare(
                deviceID: deviceID, bundleID: bundleID, environment: app.environment, types: types, frequentUpdates: frequentUpdates)
            if let frequentUpdatesEnabled {
                try liveActivities.setFrequentUpdatesEnabled(frequentUpdatesEnabled, deviceID: deviceID, bundleID: bundleID)
            }
            return liveActivityChanged(deviceID: deviceID, changes, nowMs: nowMs)
        } catch {
            throw DeviceRequestError("bad_request", error.description)
        }
    }

    /// `Activity.request`: a refusal is the error ActivityKit would throw.
    public mutating func startLiveActivity(
        deviceID: String, bundleID: String, attributesType: String, attributes: JSONValue, contentState: JSONValue,
        updates: LiveActivityUpdates, nowMs: Int64
    ) throws(DeviceRequestError) -> (activity: LiveActivity, frames: [DeviceFrame]) {
        try requireDevice(deviceID)
        guard let app = registry.devices[deviceID]?.apps[bundleID] else { throw Self.noApp(bundleID, deviceID) }
        let live = Set(channels.liveChannels(bundleID: bundleID, environment: app.environment).map(\.id))
        let receipt: LiveActivityReceipt
        do throws(LiveActivityRefusal) {
            receipt = try liveActivities.startByApp(
                deviceID: deviceID, bundleID: bundleID, environment: app.environment, attributesType: attributesType,
                attributes: attributes, contentState: contentState, updates: updates, nowMs: nowMs, channelExists: { live.contains($0) })
        } catch {
            throw DeviceRequestError("bad_request", error.description)
        }
        var frames = liveActivityChanged(deviceID: deviceID, receipt.changes, nowMs: nowMs)
        frames += storedBroadcastsForNewSubscribers(deviceID: deviceID, receipt.changes, nowMs: nowMs)
        guard let id = receipt.activityID, let activity = liveActivities.book(deviceID: deviceID)?.activity(id) else {
            throw DeviceRequestError("bad_request", "the activity was not kept")
        }
        return (activity, frames)
    }

    /// `Activity.end` in the app (optional final content; a dismissal date in the past
    /// removes it at once).
    public mutating func endLiveActivity(
        deviceID: String, activityID: String, contentState: JSONValue?, dismissalDateMs: Int64?, nowMs: Int64
    ) throws(DeviceRequestError) -> (receipt: LiveActivityReceipt, frames: [DeviceFrame]) {
        try requireDevice(deviceID)
        do throws(LiveActivityBookError) {
            let receipt = try liveActivities.endByApp(
                deviceID: deviceID, activityID: activityID, contentState: contentState, dismissalDateMs: dismissalDateMs, nowMs: nowMs)
            return (receipt, liveActivityChanged(deviceID: deviceID, receipt.changes, nowMs: nowMs))
        } catch {
            throw DeviceRequestError("bad_request", error.description, isNotFound: error.isNotFound)
        }
    }

    /// The user removes it from the Lock Screen.
    public mutating func dismissLiveActivity(deviceID: String, activityID: String, nowMs: Int64) throws(DeviceRequestError) -> [DeviceFrame] {
        try requireDevice(deviceID)
        endStoredBroadcastWaits(
            deviceID: deviceID, activityID: activityID, why: "the user dismissed the activity before its device came back online", nowMs: nowMs)
        do throws(LiveActivityBookError) {
            let changes = try liveActivities.dismiss(deviceID: deviceID, activityID: activityID, nowMs: nowMs)
            return liveActivityChanged(deviceID: deviceID, changes, nowMs: nowMs)
        } catch {
            throw DeviceRequestError("bad_request", error.description, isNotFound: error.isNotFound)
        }
    }

    /// The system replaces a push-to-start token (`attributesType`) or an activity's update
    /// token (`activityID`); the old one ends.
    public mutating func rotateLiveActivityToken(
        deviceID: String, bundleID: String? = nil, attributesType: String? = nil, activityID: String? = nil, nowMs: Int64
    ) throws(DeviceRequestError) -> (token: String, frames: [DeviceFrame]) {
        try requireDevice(deviceID)
        do throws(LiveActivityBookError) {
            let (token, changes) = try liveActivities.rotate(
                deviceID: deviceID, bundleID: bundleID, attributesType: attributesType, activityID: activityID, nowMs: nowMs)
            return (token, liveActivityChanged(deviceID: deviceID, changes, nowMs: nowMs))
        } catch {
            throw DeviceRequestError("bad_request", error.description, isNotFound: error.isNotFound)
        }
    }

    /// A device that does not exist is named as such, not as a device without the activity.
    func requireDevice(_ deviceID: String) throws(DeviceRequestError) {
        guard registry.devices[deviceID] != nil else { throw DeviceRequestError(RegistryError.unknownDevice(deviceID)) }
    }

    static func noApp(_ bundleID: String, _ deviceID: String) -> DeviceRequestError {
        DeviceRequestError("bad_request", "no app \(bundleID) on device \(deviceID)", isNotFound: true)
    }
}
