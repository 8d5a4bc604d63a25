import APNsCore
import Lifecycle
import Foundation
import Networking
import StatePersistence
import Synchronization
import Locking

/// The device side of the emulator: a listener for simulated devices speaking
/// docs/device-protocol.md, and the routing of frames produced under the state lock to the
/// connections they are for (which may live on another event loop).
final class DeviceGateway: Sendable {
    let state: EmulatorState
    let clock: any EmulatorClock
    let logger: Logger
    /// `--state-dir` or `--redis`: frames wait until the changes behind them are committed.
    let commits: (any CommitTracker)?
    /// `--redis`: frames for sockets this instance does not hold go to the instance that does.
    let relay: (@Sendable ([DeviceFrame]) -> Void)?
    /// Live device connections by connection id.
    private let connections = Locked<[UInt64: ConnectionRef]>([:])

    struct ConnectionRef: @unchecked Sendable {
        weak var handler: DeviceConnection?
        let loop: EventLoop
    }

    init(
        state: EmulatorState, clock: any EmulatorClock, commits: (any CommitTracker)?, logger: Logger,
        relay: (@Sendable ([DeviceFrame]) -> Void)?
    ) {
        self.state = state
        self.clock = clock
        self.commits = commits
        self.logger = logger
        self.relay = relay
    }

    func register(_ handler: DeviceConnection) {
        connections.withLock { $0[handler.connection.id] = ConnectionRef(handler: handler, loop: handler.connection.loop) }
    }

    func unregister(_ handler: DeviceConnection) {
        connections.withLock { _ = $0.removeValue(forKey: handler.connection.id) }
    }

    var connectionCount: Int { connections.withLock { $0.count } }

    /// Writes frames to their connections, on each connection's own loop, in order.
    func dispatch(_ frames: [DeviceFrame]) {
        guard !frames.isEmpty else { return }
        var byConnection: [UInt64: [DeviceFrame]] = [:]
        var order: [UInt64] = []
        for frame in frames {
            if byConnection[frame.connectionID] == nil { order.append(frame.connectionID) }
            byConnection[frame.connectionID, default: []].append(frame)
        }
        var elsewhere: [DeviceFrame] = []
        defer { if !elsewhere.isEmpty { relay?(elsewhere) } }
        for id in order {
            guard let ref = connections.withLock({ $0[id] }) else {
                if relay != nil { elsewhere += byConnection[id]! }
                continue
            }
            let batch = byConnection[id]!
            let send: @Sendable () -> Void = {
                guard let handler = ref.handler else { return }
                // One write for the batch, not one per frame.
                handler.connection.batchingWrites {
                    for frame in batch {
                        handler.send(frame.message)
                        if frame.closeAfter { handler.close(reason: Self.closeReason(frame)) }
                    }
                }
            }
            if ref.loop.inEventLoop { send() } else { ref.loop.execute(send) }
        }
    }

    /// The frames were for changes the state store could not commit (the provider's answers
    /// were dropped with them): each local device connection they were for is told
    /// `unavailable` and closed, so its device reconnects later and is given what is stored for
    /// it then, rather than waiting for frames that never come while the record says they went.
    func refuseUncommitted(_ frames: [DeviceFrame], reason: String) {
        var seen = Set<UInt64>()
        for frame in frames where seen.insert(frame.connectionID).inserted {
            guard let ref = connections.withLock({ $0[frame.connectionID] }) else { continue }
            let refuse: @Sendable () -> Void = { ref.handler?.refuseUncommitted(reason: reason) }
            if ref.loop.inEventLoop { refuse() } else { ref.loop.execute(refuse) }
        }
    }

    /// Why a frame that closes its connection does (the log's words).
    static func closeReason(_ frame: DeviceFrame) -> String {
        switch frame.message["type"]?.stringValue {
        case "replaced": return "replaced by a newer connection"
        case "removed": return "the device was deleted (admin API)"
        default: return frame.message["message"]?.stringValue ?? "closed by the emulator"
        }
    }

    /// Whether a connection of this instance is open (registered until it closes).
    func isOpen(_ connectionID: UInt64) -> Bool { connections.withLock { $0[connectionID] != nil } }

    /// After the shared copy was replaced (`World.detachClosedConnections`), on a queue of
    /// its own: the change may wait for the lease, which the thread announcing the reload may
    /// be the one to take. Which connections are open is read under the state lock: a
    /// connection registers before its hello can name it in the state.
    func detachClosedConnections() {
        let reloadedAt = clock.nowMilliseconds()
        tickQueue.async { [self] in
            let now = clock.nowMilliseconds()
            dispatch(state.withWorld { world in world.detachClosedConnections(isOpenHere: { self.isOpen($0) }, nowMs: now) })
            // What the copy has in flight on open connections here goes out again: its frame
            // may never have (`World.inFlightFramesToResend`).
            dispatch(state.readWorld { world in world.inFlightFramesToResend(beforeMs: reloadedAt, isOpenHere: { self.isOpen($0) }) })
        }
    }

    /// Re-attaches every connected device after a reset (on each connection's loop).
    func reattachAll() {
        for ref in connections.withLock({ Array($0.values) }) {
            ref.loop.execute { ref.handler?.reattach() }
        }
    }

    /// Runs once a second: expiries, batches, refilled budgets.
    func tick() {
        if state.unavailableReason != nil { return }
        let now = clock.nowMilliseconds()
        guard state.readWorld({ $0.hasTimedWork(nowMs: now) }) else { return }
        // Runs on an event loop: with --redis its changes are queued, not waited for (the
        // frames it makes wait in each connection's commit gate), and when another instance
        // holds the lease the tick runs on a thread that may wait for it, not on the loop.
        var waits = false
        state.committingLater {
            switch state.withSharedWorldIfReady({ $0.tick(nowMs: now) }) {
            case .done(let frames): dispatch(frames)
            case .refused: break
            case .wouldWait: waits = true
            }
        }
        guard waits, !tickWaiting.exchange(true, ordering: .acquiring) else { return }
        tickQueue.async { [self] in
            defer { tickWaiting.store(false, ordering: .releasing) }
            let now = clock.nowMilliseconds()
            dispatch(state.withWorld { $0.tick(nowMs: now) })
        }
    }

    /// A tick waiting for the lease (`tick`): at most one at a time.
    private let tickWaiting = Atomic<Bool>(false)
    private let tickQueue = DispatchQueue(label: "apns-device-ticks")
}

/// One device connection: newline-delimited JSON (docs/device-protocol.md).
final class DeviceConnection: ConnectionHandler {
    static let maxLine = 1 << 20
    static let helloTimeoutMs: Int64 = 10_000

    let connection: Connection
    let gateway: DeviceGateway
    private var buffer: [UInt8] = []
    private var scanned = 0
    private(set) var deviceID: String?
    /// The device this connection held once it is detached: acks read in the close's grace
    /// period still count (the device acks what came with `replaced` before it goes).
    private var detachedDeviceID: String?
    /// Closing: the last frame (a fatal error, `replaced`, `removed`) is written and the write
    /// side ended; what the device still sends is read and dropped until it closes too or the
    /// grace period ends. Closing at once with its bytes unread would send RST, and the device
    /// could lose the frame that says why.
    private var closing = false
    /// While closing: the last input is read, and only its acks are taken.
    private var readingLastAcks = false
    static let closeGraceMs = 2000
    static let acksKept = 128
    /// The hello this connection made, replayed after a reset so the device stays attached.
    private var lastHello: DeviceHello?
    /// The deliveries acked on this connection last: replayed with the hello on a re-attachment,
    /// since a reload of the shared copy can have lost them (taken while Redis failed).
    private var recentAcks: [UInt64] = []
    private var helloTimer: TimerID?
    /// With `--state-dir` or `--redis`, what this connection is told waits, in order, until
    /// the changes behind it are committed: a device never holds a token or a notification
    /// the state directory (or Redis) would not have after a crash.
    private enum Outgoing {
        case message(JSONValue)
        case close
    }
    private lazy var commitGate: CommitGate<Outgoing>? = gateway.commits.map { commits in
        CommitGate(durability: commits, executor: connection.loop) { [weak self] items, committed in
            guard let self else { return }
            guard committed else {
                // Not on disk: nothing of it may reach the device. It reconnects later and is
                // given what is stored for it then, as after a dropped connection.
                let reason = commits.unavailableReason ?? "the state store could not keep it"
                self.perform(.message(["type": "error", "code": "unavailable", "message": .string(reason), "fatal": true]))
                self.perform(.close)
                return
            }
            items.forEach { self.perform($0) }
        }
    }

    init(connection: Connection, gateway: DeviceGateway) {
        self.connection = connection
        self.gateway = gateway
    }

    var state: EmulatorState { gateway.state }
    var now: Int64 { gateway.clock.nowMilliseconds() }

    func connectionDidBecomeReady(_ connection: Connection) {
        // A device that acks and goes at once (its reset can fail a write to it first) has its
        // last acks read before the close returns what it had not acknowledged to the store.
        connection.readsWhatArrivedBeforeFailure = true
        gateway.register(self)
        helloTimer = connection.loop.schedule(afterMilliseconds: Self.helloTimeoutMs) { [weak self] in
            guard let self, self.deviceID == nil, !self.connection.isClosed else { return }
            self.fail("hello_timeout", "no hello within \(Self.helloTimeoutMs / 1000) seconds", fatal: true)
        }
    }

    func connection(_ connection: Connection, didRead bytes: UnsafeRawBufferPointer) {
        // Closing (replaced by the device's new connection, an ack timeout): only its acks are
        // still taken, so that one sent just before counts; the rest is not answered.
        let lastAcks = closing && !readingLastAcks
        if lastAcks { readingLastAcks = true }
        defer { if lastAcks { readingLastAcks = false } }
        buffer.append(contentsOf: bytes)
        // Lines are taken by position and the consumed prefix removed once: removing each
        // line from the front would copy the rest of the buffer per line (quadratic in a
        // flood of tiny messages). Their answers go out in one write.
        var consumed = 0
        var failed = false
        // With --redis the changes are queued for Redis's writer, not waited for: what this
        // connection is told waits for them in the commit gate.
        state.committingLater {
            connection.batchingWrites {
                failed = !readLines(&consumed)
            }
        }
        if failed { return }
        if consumed > 0 {
            buffer.removeFirst(consumed)
            scanned = max(0, scanned - consumed)
        }
        if buffer.count > Self.maxLine, !connection.isClosed, !closing {
            fail("line_too_long", "a line is longer than 1 MiB", fatal: true)
        }
    }

    /// Handles the complete lines from `consumed` on; false after a fatal error.
    private func readLines(_ consumed: inout Int) -> Bool {
        while !connection.isClosed, !closing || readingLastAcks {
            guard let newline = buffer[max(consumed, scanned)...].firstIndex(of: 0x0A) else {
                scanned = buffer.count
                break
            }
            if newline - consumed > Self.maxLine {
                fail("line_too_long", "a line is longer than 1 MiB", fatal: true)
                return false
            }
            let line = Array(buffer[consumed..<newline])
            consumed = newline + 1
            handle(line: line)
        }
        return true
    }

    func connectionDidClose(_ connection: Connection) {
        if let helloTimer { connection.loop.cancel(helloTimer) }
        gateway.unregister(self)
        detachDevice()
    }

    /// The device is no longer reachable here: what it had not acknowledged goes back to the
    /// store, and pushes for it are stored from now on. Once, at the close or when closing
    /// begins, whichever is first.
    private func detachDevice() {
        guard let deviceID else { return }
        // Closing on our side (the device reconnected on another connection, an ack timeout):
        // acks it sent before are still in the socket, and count before what it did not
        // acknowledge goes back to the store.
        if closing, !connection.isClosed {
            readingLastAcks = true
            connection.readPendingInput()
            readingLastAcks = false
        }
        self.deviceID = nil
        detachedDeviceID = deviceID
        let now = self.now
        let id = connection.id
        var frames: [DeviceFrame] = []
        state.committingLater { frames = state.withWorld { $0.disconnectDevice(deviceID, connectionID: id, nowMs: now) } }
        gateway.dispatch(frames)
        gateway.logger.info("device \(deviceID) disconnected (connection \(id))")
    }

    func send(_ message: JSONValue) { emit(.message(message)) }

    func close(reason: String) { emit(.close) }

    private func emit(_ item: Outgoing) {
        if let gate = commitGate, gate.hold(item) { return }
        perform(item)
    }

    /// What the store could not keep was for this device (`DeviceGateway.refuseUncommitted`).
    func refuseUncommitted(reason: String) {
        perform(.message(["type": "error", "code": "unavailable", "message": .string(reason), "fatal": true]))
        perform(.close)
    }

    private func perform(_ item: Outgoing) {
        guard !closing else { return }
        switch item {
        case .message(let message):
            connection.write { out in
                message.append(to: &out)
                out.append(0x0A)
            }
        case .close:
            closing = true
            // Now, not after the grace period: pushes meanwhile are stored, not sent to a
            // connection that reads no more. From the loop's next turn, outside whatever change
            // this close is part of.
            _ = connection.loop.schedule(afterMilliseconds: 0) { [weak self] in self?.detachDevice() }
            connection.shutdownOutputAfterFlush()
            _ = connection.loop.schedule(afterMilliseconds: Int64(Self.closeGraceMs)) { [weak self] in self?.connection.close() }
        }
    }

    /// After a reset the device is unknown again but its socket is still open: attach it
    /// anew, as if it had just said hello (it gets `welcome` and fresh `registered` tokens).
    func reattach() {
        guard var hello = lastHello, !connection.isClosed, !closing else { return }
        hello.acked = recentAcks.map { AckedDelivery(id: $0, apnsID: nil) }
        let now = self.now
        let id = connection.id
        do {
            let frames = try state.withWorld { world throws(DeviceRequestError) in
                try world.connectDevice(hello, connectionID: id, nowMs: now)
            }
            gateway.dispatch(frames)
        } catch {
            fail(error.code, error.message)
        }
    }

    private func fail(_ code: String, _ message: String, fatal: Bool = false) {
        send(["type": "error", "code": .string(code), "message": .string(message), "fatal": .bool(fatal)])
        if fatal { close(reason: message) }
    }

    // MARK: Messages

    private func handle(line: [UInt8]) {
        if line.allSatisfy({ $0 == 0x20 || $0 == 0x0D || $0 == 0x09 }) { return }
        let object: JSONObject
        do {
            guard let parsed = try JSONValue.parse(line).objectValue else {
                fail("bad_frame", "each line must be a JSON object")
                return
            }
            object = parsed
        } catch {
            fail("bad_frame", "not valid JSON: \(error)")
            return
        }
        guard let type = object["type"]?.stringValue else {
            fail("bad_frame", object["type"] == nil ? "the object has no \"type\"" : "\"type\" must be a string (the frame's name)")
            return
        }
        do {
            try handle(type: type, object)
        } catch let error as DeviceRequestError {
            fail(error.code, error.message)
        } catch {
            fail("bad_request", "\(error)")
        }
    }

    private func handle(type: String, _ m: JSONObject) throws {
        if readingLastAcks, type != "ack" { return }
        if type == "ping" {
            send(["type": "pong"])
            return
        }
        if let reason = state.unavailableReason {
            // The shared state cannot take changes: the device tries again later, as after a
            // dropped connection.
            fail("unavailable", reason, fatal: true)
            return
        }
        guard let deviceID = deviceID ?? (readingLastAcks ? detachedDeviceID : nil) else {
            guard type == "hello" else { throw DeviceRequestError("hello_required", "the first message must be hello") }
            try hello(m)
            return
        }
        let now = self.now
        let id = connection.id
        switch type {
        case "hello":
            throw DeviceRequestError("bad_request", "hello was already received on this connection")
        case "ack":
            guard let delivery = m["id"]?.intValue, delivery > 0 else {
                throw DeviceRequestError("bad_request", "ack needs a numeric \"id\"")
            }
            // Beside the other instances' pushes (`--redis`) when this instance owns the device,
            // as it does while holding its socket: an ack per delivery taking the lease ended
            // every instance's shared turn.
            func acknowledge(_ world: inout World) throws(DeviceRequestError) -> [DeviceFrame] {
                try world.acknowledge(deviceID: deviceID, connectionID: id, deliveryID: UInt64(delivery), nowMs: now)
            }
            let frames =
                try state.withWorld(mode: .shared) { world throws(DeviceRequestError) -> [DeviceFrame]? in
                    world.inSharedTurn && !world.owns(deviceID) ? nil : try acknowledge(&world)
                } ?? state.withWorld { world throws(DeviceRequestError) in try acknowledge(&world) }
            recentAcks.append(UInt64(delivery))
            if recentAcks.count > 2 * Self.acksKept { recentAcks.removeFirst(recentAcks.count - Self.acksKept) }
            gateway.dispatch(frames)
        case "app":
            let bundle = try Self.string(m, "bundleId")
            let appState = try Self.optionalEnum(m, "appState", AppState.self)
            let authorization = try Self.optionalEnum(m, "authorization", Authorization.self)
            let backgroundMode = try Self.optionalBool(m, "backgroundMode")
            let setup = NotificationSetup.mentions(m) || m["badge"] != nil
            let (app, frames) = try state.withWorld { world throws(DeviceRequestError) in
                // The setup first: a refused one changes nothing else.
                if setup { _ = try world.changeNotifications(deviceID: deviceID, bundleID: bundle, m) }
                let frames = try world.updateApp(
                    deviceID: deviceID, bundleID: bundle, appState: appState, authorization: authorization,
                    backgroundMode: backgroundMode, nowMs: now
                ).1
                guard let app = world.registry.devices[deviceID]?.apps[bundle] else {
                    throw DeviceRequestError(RegistryError.appNotInstalled(deviceID: deviceID, bundleID: bundle))
                }
                return (app, frames)
            }
            send(.object(World.appUpdatedMessage(bundleID: bundle, app.settings, setupOf: setup ? app : nil)))
            gateway.dispatch(frames)
        case "device":
            let lowPower = try Self.optionalBool(m, "lowPowerMode")
            let switches = DeviceAttention.mentions(m)
            guard lowPower != nil || switches else {
                throw DeviceRequestError(
                    "bad_request", "device needs any of \"lowPowerMode\", \"focus\", \"scheduledSummary\", \"muted\", \"locked\"")
            }
            let (device, frames) = try state.withWorld { world throws(DeviceRequestError) in
                if switches { _ = try world.changeAttention(deviceID: deviceID, m) }
                let frames = try lowPower.map { on throws(DeviceRequestError) in try world.setLowPowerMode(deviceID: deviceID, on, nowMs: now) } ?? []
                guard let device = world.registry.devices[deviceID] else { throw DeviceRequestError(RegistryError.unknownDevice(deviceID)) }
                return (device, frames)
            }
            send(device.updatedMessage)
            gateway.dispatch(frames)
        case "install":
            let app = try Self.app(m)
            let messages = try state.withWorld { world throws(DeviceRequestError) in
                try world.install(app, deviceID: deviceID, nowMs: now)
            }
            messages.forEach(send)
        case "uninstall":
            let bundle = try Self.string(m, "bundleId")
            let (invalidAt, tokens, activityMessages) = try state.withWorld { world throws(DeviceRequestError) in
                try world.uninstallApp(deviceID: deviceID, bundleID: bundle, nowMs: now)
            }
            send(World.uninstalledMessage(bundleID: bundle, invalidAtMs: invalidAt, tokens: tokens))
            activityMessages.forEach(send)
        case "rotate":
            let bundle = try Self.string(m, "bundleId")
            let entries = try state.withWorld { world throws(DeviceRequestError) in
                try world.rotateTokens(deviceID: deviceID, bundleID: bundle, nowMs: now)
            }
            entries.forEach { send(World.registeredMessage($0)) }
        case "erase":
            let activityMessages = try state.withWorld { world throws(DeviceRequestError) in try world.eraseDevice(deviceID, nowMs: now) }
            send(["type": "erased"])
            activityMessages.forEach(send)
        case "restore":
            let source = try Self.deviceID(m, "fromDeviceId")
            let (entries, messages) = try state.withWorld { world throws(DeviceRequestError) in
                try world.restoreBackup(from: source, to: deviceID, nowMs: now)
            }
            messages.target.forEach(send)
            entries.forEach { send(World.registeredMessage($0)) }
            messages.targetAfterRegistered.forEach(send)
            send([
                "type": "restored", "fromDeviceId": .string(source),
                "bundleIds": .array(Array(Set(entries.map(\.bundleID))).sorted().map(JSONValue.string)),
            ])
            gateway.dispatch(messages.source)
        case "login":
            let user = try Self.string(m, "userId")
            let previous = try state.withWorld { world throws(DeviceRequestError) in try world.login(deviceID: deviceID, userID: user) }
            send(["type": "loggedIn", "userId": .string(user), "previousUserId": previous.map(JSONValue.string) ?? .null])
        case "logout":
            let previous = try state.withWorld { world throws(DeviceRequestError) in try world.logout(deviceID: deviceID) }
            send(["type": "loggedOut", "userId": .null, "previousUserId": previous.map(JSONValue.string) ?? .null])
        case "tap":
            let apnsID = try Self.string(m, "apnsId")
            let tapped = try state.withWorld { world throws(DeviceRequestError) in
                try world.tap(deviceID: deviceID, apnsID: apnsID, nowMs: now)
            }
            send([
                "type": "tapped", "apnsId": .string(tapped.apnsID), "bundleId": .string(tapped.bundleID),
                "callbacks": .array(tapped.callbacks.map(JSONValue.string)), "launched": .bool(tapped.launched),
            ])
            gateway.dispatch(tapped.frames)
        case "respond":
            let apnsID = try Self.string(m, "apnsId")
            let action = try Self.string(m, "action")
            let text = try Self.optionalString(m, "text")
            let answer = try state.withWorld { world throws(DeviceRequestError) in
                try world.respond(deviceID: deviceID, apnsID: apnsID, action: action, text: text, nowMs: now)
            }
            let fields = answer.effect.json(apnsID: answer.apnsID, bundleID: answer.bundleID, launched: answer.launched)
            send(.object(JSONObject([("type", "responded")] + fields.members)))
            gateway.dispatch(answer.frames)
        case "liveActivities", "startActivity", "endActivity", "dismissActivity", "activities":
            try handleLiveActivity(type: type, m, deviceID: deviceID, now: now)
        default:
            throw DeviceRequestError("unknown_type", "unknown message type '\(type)'")
        }
    }

    /// The app's and the user's Live Activity calls (docs/device-protocol.md, "Live
    /// Activities"): the `activity` event frames first, then the answer.
    private func handleLiveActivity(type: String, _ m: JSONObject, deviceID: String, now: Int64) throws {
        switch type {
        case "liveActivities":
            let bundle = try Self.string(m, "bundleId")
            let (types, frequent) = try Self.liveActivityDeclaration(m)
            let messages = try state.withWorld { world throws(DeviceRequestError) in
                try world.declaredLiveActivityMessages(
                    deviceID: deviceID, bundleID: bundle, types: types ?? [], frequentUpdates: frequent, nowMs: now)
            }
            messages.forEach(send)
            send(["type": "liveActivitiesDeclared", "bundleId": .string(bundle), "types": .array((types ?? []).map(JSONValue.string))])
        case "startActivity":
            let bundle = try Self.string(m, "bundleId")
            let attributesType = try Self.string(m, "attributesType")
            let updates: LiveActivityUpdates
            if let channel = m["channel"], channel != .null {
                guard let id = channel.stringValue else { throw DeviceRequestError("bad_request", "\"channel\" must be a channel id") }
                updates = .channel(id)
            } else {
                updates = try Self.optionalBool(m, "pushToken") == false ? .none : .token
            }
            let (activity, frames) = try state.withWorld { world throws(DeviceRequestError) in
                try world.startLiveActivity(
                    deviceID: deviceID, bundleID: bundle, attributesType: attributesType, attributes: m["attributes"] ?? .object(JSONObject()),
                    contentState: m["contentState"] ?? .object(JSONObject()), updates: updates, nowMs: now)
            }
            gateway.dispatch(frames)
            send(["type": "activityStarted", "activityId": .string(activity.activityID), "activity": activity.json(atMs: now)])
        case "endActivity":
            let activityID = try Self.string(m, "activityId")
            var dismissalMs: Int64?
            if let value = m["dismissalDate"], value != .null {
                guard let ms = value.numberValue.flatMap(millisecondsSince1970(seconds:)) else {
                    throw DeviceRequestError("bad_request", "\"dismissalDate\" must be seconds since 1970, up to the end of year 9999")
                }
                dismissalMs = ms
            }
            let (receipt, frames) = try state.withWorld { world throws(DeviceRequestError) in
                try world.endLiveActivity(
                    deviceID: deviceID, activityID: activityID, contentState: m["contentState"], dismissalDateMs: dismissalMs, nowMs: now)
            }
            gateway.dispatch(frames)
            if let why = receipt.outcome.explanation { throw DeviceRequestError("bad_request", why) }
            send(["type": "activityEnded", "activityId": .string(activityID)])
        case "dismissActivity":
            let activityID = try Self.string(m, "activityId")
            let frames = try state.withWorld { world throws(DeviceRequestError) in
                try world.dismissLiveActivity(deviceID: deviceID, activityID: activityID, nowMs: now)
            }
            gateway.dispatch(frames)
            send(["type": "activityDismissed", "activityId": .string(activityID)])
        default:
            let activities = state.readWorld { world in
                (world.liveActivities.book(deviceID: deviceID)?.activities(includeDismissed: true) ?? []).map { $0.json(atMs: now) }
            }
            send(["type": "activities", "activities": .array(activities)])
        }
    }

    private func hello(_ m: JSONObject) throws {
        if let version = m["version"], version.intValue != 1 {
            fail("unsupported_version", "this emulator speaks device protocol version 1", fatal: true)
            return
        }
        let id = try Self.deviceID(m, "deviceId")
        var apps: [AppRegistration] = []
        if let list = m["apps"] {
            guard let items = list.arrayValue else { throw DeviceRequestError("bad_request", "\"apps\" must be a list") }
            guard items.count <= DeviceRegistry.maxAppsPerDevice else {
                fail(
                    DeviceRequestError.tooManyApps,
                    "the hello lists \(items.count) apps; a device has at most "
                        + "\(DeviceRegistry.maxAppsPerDevice) installed", fatal: true)
                return
            }
            for item in items {
                guard let object = item.objectValue else { throw DeviceRequestError("bad_request", "each app must be an object") }
                apps.append(try Self.app(object))
            }
        }
        let hello = DeviceHello(
            deviceID: id, lowPowerMode: try Self.optionalBool(m, "lowPowerMode") ?? false, apps: apps,
            activitiesSeen: try Self.activitiesSeen(m), acked: try Self.acked(m))
        let now = self.now
        let connectionID = connection.id
        let connected = state.withWorld { world in
            Result { () throws(DeviceRequestError) in
                try world.connectDevice(hello, connectionID: connectionID, nowMs: now, isOpenHere: gateway.isOpen)
            }
        }
        if case .failure(let error) = connected, error.code == DeviceRequestError.tooManyApps || error.code == DeviceRequestError.registryFull {
            // Like a hello listing too many: the device must change what it sends (or the
            // emulator be reset).
            fail(error.code, error.message, fatal: true)
            return
        }
        let frames = try connected.get()
        deviceID = id
        lastHello = hello
        if let helloTimer { connection.loop.cancel(helloTimer) }
        gateway.logger.info("device \(id) connected from \(connection.peer) (connection \(connectionID), \(apps.count) app(s))")
        gateway.dispatch(frames)
    }

    // MARK: Field parsing

    static func optionalString(_ m: JSONObject, _ key: String) throws(DeviceRequestError) -> String? {
        guard let value = m[key], value != .null else { return nil }
        guard let text = value.stringValue else { throw DeviceRequestError("bad_request", "\"\(key)\" must be a string") }
        return text
    }

    static func string(_ m: JSONObject, _ key: String) throws(DeviceRequestError) -> String {
        guard let value = m[key]?.stringValue else { throw DeviceRequestError("bad_request", "\"\(key)\" (a string) is required") }
        return value
    }

    /// A device id field; refused before it can reach a frame or a log line.
    static func deviceID(_ m: JSONObject, _ key: String) throws(DeviceRequestError) -> String {
        let id = try string(m, key)
        guard DeviceRegistry.isValidDeviceID(id) else { throw DeviceRequestError("bad_request", "\"\(key)\": \(DeviceRegistry.deviceIDRule)") }
        return id
    }

    /// A hello's `activities`: `[{"activityId", "updates", "state", "pushToken"}]`, the Live
    /// Activities as the device last heard of them (absent: it does not say).
    static func activitiesSeen(_ m: JSONObject) throws(DeviceRequestError) -> [String: ActivitySeen]? {
        guard let value = m["activities"], value != .null else { return nil }
        guard let items = value.arrayValue, items.count <= maxActivitiesSeen else {
            throw DeviceRequestError("bad_request", "\"activities\" must be a list of at most \(maxActivitiesSeen) objects")
        }
        var seen: [String: ActivitySeen] = [:]
        for item in items {
            guard item.objectValue != nil, let id = item["activityId"]?.stringValue else {
                throw DeviceRequestError("bad_request", "each of \"activities\" is an object with an \"activityId\" string")
            }
            guard let updates = item["updates"]?.intValue, (0...Int64(Int32.max)).contains(updates) else {
                throw DeviceRequestError(
                    "bad_request", "\"updates\" of activity \(id) must be a whole number from 0 (as its activity frames gave it)")
            }
            guard let state = item["state"]?.stringValue, LiveActivityState(rawValue: state) != nil else {
                let states = LiveActivityState.allCases.map(\.rawValue).joined(separator: ", ")
                throw DeviceRequestError("bad_request", "\"state\" of activity \(id) must be one of \(states)")
            }
            let token = item["pushToken"] ?? .null
            guard token == .null || token.stringValue != nil else {
                throw DeviceRequestError("bad_request", "\"pushToken\" of activity \(id) must be a string or null")
            }
            seen[id] = ActivitySeen(updates: Int(updates), state: state, pushToken: token.stringValue)
        }
        return seen
    }

    /// A hello's `acked`: `[{"id", "apnsId"}]`, the deliveries the device acked last.
    static func acked(_ m: JSONObject) throws(DeviceRequestError) -> [AckedDelivery] {
        guard let value = m["acked"], value != .null else { return [] }
        guard let items = value.arrayValue, items.count <= maxAckedInHello else {
            throw DeviceRequestError("bad_request", "\"acked\" must be a list of at most \(maxAckedInHello) objects")
        }
        var acked: [AckedDelivery] = []
        for item in items {
            guard item["id"]?.numberValue != nil, let apnsID = item["apnsId"]?.stringValue else {
                throw DeviceRequestError("bad_request", "each of \"acked\" is an object with a numeric \"id\" and an \"apnsId\" string")
            }
            // One that can be no delivery (an id no delivery has, an apns-id longer than any)
            // matches nothing: ignored, as the protocol says, not the whole hello refused.
            guard let id = item["id"]?.intValue, id > 0, apnsID.utf8.count <= 64 else { continue }
            acked.append(AckedDelivery(id: UInt64(id), apnsID: apnsID))
        }
        return acked
    }

    static let maxAckedInHello = 1_000

    /// More than a device's Live Activities can be (live and the dismissed ones kept).
    static let maxActivitiesSeen = 1_000

    static func optionalBool(_ m: JSONObject, _ key: String) throws(DeviceRequestError) -> Bool? {
        guard let value = m[key], value != .null else { return nil }
        guard let bool = value.boolValue else { throw DeviceRequestError("bad_request", "\"\(key)\" must be true or false") }
        return bool
    }

    static func optionalEnum<T: RawRepresentable & CaseIterable>(
        _ m: JSONObject, _ key: String, _ type: T.Type
    )
        throws(DeviceRequestError) -> T? where T.RawValue == String
    {
        guard let value = m[key], value != .null else { return nil }
        guard let text = value.stringValue, let parsed = T(rawValue: text) else {
            throw DeviceRequestError(
                "bad_request",
                "\"\(key)\" must be one of \(T.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return parsed
    }

    static func app(_ m: JSONObject) throws(DeviceRequestError) -> AppRegistration {
        let bundle = try string(m, "bundleId")
        guard DeviceRegistry.isValidBundleID(bundle) else {
            throw DeviceRequestError("bad_request", RegistryError.invalidBundleID(bundle).description)
        }
        let environment = try optionalEnum(m, "environment", APNsEnvironment.self)
        guard let environment else { throw DeviceRequestError("bad_request", "\"environment\" (sandbox or production) is required") }
        var kinds: [TokenKind] = [.app]
        if let list = m["kinds"] {
            guard let items = list.arrayValue, !items.isEmpty else {
                throw DeviceRequestError("bad_request", "\"kinds\" must be a non-empty list")
            }
            kinds = []
            for item in items {
                guard let text = item.stringValue, let kind = TokenKind(rawValue: text) else {
                    throw DeviceRequestError("bad_request", "kinds must be among \(TokenKind.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                kinds.append(kind)
            }
        }
        var settings = AppSettings(
            authorization: try optionalEnum(m, "authorization", Authorization.self) ?? .authorized,
            appState: try optionalEnum(m, "appState", AppState.self) ?? .background,
            backgroundMode: try optionalBool(m, "backgroundMode") ?? true)
        do throws(NotificationSettingsError) { try settings.notifications.apply(m) } catch {
            throw DeviceRequestError("bad_request", "app \(bundle): \(error.description)")
        }
        let (types, frequent) = try liveActivityDeclaration(m)
        return AppRegistration(
            bundleID: bundle, environment: environment, settings: settings, kinds: kinds, liveActivityTypes: types, frequentUpdates: frequent)
    }

    /// `liveActivityTypes` (a list of ActivityAttributes type names; absent: nil) and
    /// `frequentUpdates`.
    static func liveActivityDeclaration(_ m: JSONObject) throws(DeviceRequestError) -> ([String]?, Bool) {
        let frequent = try optionalBool(m, "frequentUpdates") ?? false
        guard let list = m["liveActivityTypes"] else { return (nil, frequent) }
        guard let items = list.arrayValue, let types = Optional(items.compactMap(\.stringValue)), types.count == items.count else {
            throw DeviceRequestError("bad_request", "\"liveActivityTypes\" must be a list of ActivityAttributes type names")
        }
        return (types, frequent)
    }
}
