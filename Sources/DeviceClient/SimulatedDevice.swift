public import JSON
import Glibc
import MonotonicClock
public import Networking
import OpenSSLCrypto

/// One simulated device: a blocking client of the emulator's device protocol
/// (docs/device-protocol.md) over a TLS or plain TCP connection.
///
/// Not thread-safe: use it from one thread. There is no background reader: bytes are read
/// only inside the calls below (`poll`, `nextMessage`, `nextNotification` and the commands),
/// and every frame read is queued, in order, until a call takes it. Commands wait for their
/// own answer frame and leave everything else (notifications above all) queued.
///
/// The device keeps its state as the emulator reports it (`tokens` from `registered`, app
/// settings from `appUpdated`, …), and `connect()` after `disconnect()` (or a dropped
/// connection) announces the apps it currently has, with the same device id, so the emulator
/// restores it.
public final class SimulatedDevice {
    /// Longest line either side may send (the protocol's limit), without the `\n`.
    public static let maxLineBytes = 1 << 20

    public let address: HostPort
    public let deviceID: String
    /// The apps the next `hello` announces, with their settings. Kept up to date from the
    /// emulator's answers (`appUpdated`, `registered`, `uninstalled`, `erased`); set it while
    /// disconnected to change what the next `connect()` announces. Apps the emulator installed
    /// without the device asking (the admin API's install, a restored backup) are listed here
    /// too but left out of `hello`: the emulator keeps them with the settings it has, which a
    /// `hello` would replace with the defaults.
    public var apps: [DeviceApp]
    /// Bundle ids of `apps` that came from the emulator, not from this device's own requests.
    private var installedByEmulator: Set<String> = []
    /// Low Power Mode as the next `hello` announces it (updated from `deviceUpdated`).
    public var lowPowerMode: Bool
    public let tls: (caPath: String?, verifyPeer: Bool)?

    /// Ack every notification as soon as it is read (default). Turn off to ack yourself with `ack(_:)`.
    public var autoAck = true
    /// How long the commands (`setApp`, `install`, `tap`, …) wait for their answer.
    public var commandTimeoutMilliseconds = 5000
    /// How long a write may wait for the emulator to take the bytes.
    public var writeTimeoutMilliseconds = 10_000

    /// bundleId → kind → token, from `registered` frames.
    public private(set) var tokens: [String: [TokenKind: String]] = [:]
    /// Push-to-start tokens by bundle id and ActivityAttributes type, from `activity` frames.
    public private(set) var pushToStartTokens: [String: [String: String]] = [:]
    /// The device's Live Activities as the newest `activity` frame about each showed them
    /// (the `activity` object of the frame: state, contentState, pushToken…), by activity id.
    public private(set) var activities: [String: JSONObject] = [:]
    /// Notifications received and not yet acked (delivery id to apns-id), and the ones acked
    /// last, oldest first: the next `hello` lists those (`acked`), so an ack the emulator took
    /// but could not keep (a Redis fault, a socket moved to another instance) still counts.
    /// A delivery's apns-id and token: ids start over after a reset or a restart without a state
    /// directory, and a provider may send the same apns-id again, but the token is new after either.
    private struct DeliveryMark: Equatable {
        var apnsID: String
        var token: String
    }
    private var unacked: [Int64: DeliveryMark] = [:]
    private var recentAcks: [(id: Int64, mark: DeliveryMark)] = []
    static let acksInHello = 128
    /// The last `welcome` frame (nil before the first one on this connection).
    public private(set) var welcome: JSONObject?
    /// The account logged in on the device, as the emulator last said (nil: logged out).
    public private(set) var userID: String?
    /// A `replaced` frame arrived on the current (or last) connection.
    public private(set) var wasReplaced = false
    /// The device was deleted through the admin API (`removed`); reconnecting would create it
    /// anew, with new tokens.
    public private(set) var wasRemoved = false
    /// Why the last connection ended (nil while connected or before the first connect).
    public private(set) var disconnectReason: String?

    private var transport: Transport?
    /// The connection the emulator closed (after `replaced`, an error), kept for the acks of
    /// the frames read last: the emulator still reads a closing connection's acks, and they
    /// count. Closed at the next connect or disconnect.
    private var lingering: Transport?
    private var tlsContext: TLSContext?
    private var readBuffer: [UInt8] = []
    private var readStart = 0
    private var scanFrom = 0
    private var inbox: [(seq: UInt64, message: JSONObject)] = []
    private var received: UInt64 = 0
    /// Settings of apps being installed, adopted into `apps` when their `registered` arrives.
    private var pendingInstalls: [String: DeviceApp] = [:]
    /// Bad frames met while a command waited (or while good frames were queued for `poll`):
    /// reported, in order, by the next `poll` / `nextMessage` / `nextNotification`.
    private var deferredErrors: [DeviceClientError] = []
    /// Notifications read with `autoAck` on and not acked yet: acked together once the bytes
    /// read so far are parsed (one write, not one per notification).
    private var autoAcks: [Int64] = []
    /// Scratch space for socket reads, kept: zeroing 64 KB on every poll adds up.
    private var chunk = [UInt8](repeating: 0, count: 64 * 1024)

    public init(
        address: HostPort, deviceID: String, apps: [DeviceApp], lowPowerMode: Bool = false,
        tls: (caPath: String?, verifyPeer: Bool)? = nil
    ) {
        self.address = address
        self.deviceID = deviceID
        self.apps = apps
        self.lowPowerMode = lowPowerMode
        self.tls = tls
    }

    deinit {
        transport?.close()
        lingering?.close()
    }

    // MARK: Connection

    public var isConnected: Bool { transport != nil }

    /// The socket, for poll()-based loops (-1 when not connected). Wait for POLLIN, then call
    /// `poll(timeoutMilliseconds: 0)`. With TLS, also call it whenever `hasBufferedInput`.
    public var fileDescriptor: Int32 { transport?.fd ?? -1 }

    /// Input is already waiting inside the client (queued frames or decrypted TLS bytes): do not
    /// wait for the socket before calling `poll`.
    public var hasBufferedInput: Bool {
        !inbox.isEmpty || !deferredErrors.isEmpty || (transport?.hasBufferedData ?? false)
    }

    /// The `hello` this device sends.
    public var helloFrame: JSONValue {
        var object = JSONObject()
        object["type"] = "hello"
        object["version"] = 1
        object["deviceId"] = .string(deviceID)
        object["lowPowerMode"] = .bool(lowPowerMode)
        object["apps"] = .array(apps.filter { !installedByEmulator.contains($0.bundleID) }.map { .object($0.protocolFields) })
        // What it last heard of its Live Activities: what changed while its frames went to a
        // dead socket comes again (`current`). Not the dismissed ones (they change no more, and
        // a long run gathers many), and at most the 1000 a hello may list.
        if !recentAcks.isEmpty {
            object["acked"] = .array(recentAcks.map { ["id": .int($0.id), "apnsId": .string($0.mark.apnsID)] })
        }
        object["activities"] = .array(
            activities.filter { $0.value["state"]?.stringValue != "dismissed" }.sorted { $0.key < $1.key }.prefix(1000).map { id, activity in
                [
                    "activityId": .string(id), "updates": activity["updates"] ?? 0, "state": activity["state"] ?? "active",
                    "pushToken": activity["pushToken"] ?? .null,
                ]
            })
        return .object(object)
    }

    /// Connects, sends `hello`, and waits for `welcome` and one `registered` per app and kind
    /// announced; fills `tokens`. Those frames are consumed; anything else that arrives
    /// (stored notifications, `registered` for apps the hello did not list) stays queued.
    /// Throws (and disconnects) on a server `error`, a timeout or a closed connection.
    public func connect(timeoutMilliseconds: Int = 5000) throws(DeviceClientError) {
        let deadline = Monotonic.nowMilliseconds() + Int64(timeoutMilliseconds)
        let mark = received
        let expected = apps.filter { !installedByEmulator.contains($0.bundleID) }.flatMap { app in app.kinds.map { (app.bundleID, $0) } }
        try open(timeoutMilliseconds: timeoutMilliseconds)
        do {
            _ = try awaitAnswer(after: mark, deadline: deadline, what: "welcome") { $0["type"]?.stringValue == "welcome" }
            var missing = expected
            while !missing.isEmpty {
                let (bundleID, kind) = missing[0]
                _ = try awaitAnswer(after: mark, deadline: deadline, what: "registered for \(bundleID) (\(kind.rawValue))") {
                    Self.isRegistered($0, bundleID: bundleID, kind: kind)
                }
                missing.removeFirst()
            }
        } catch {
            if error.kind != .replaced { disconnect(reason: "connect failed: \(error.description)") }
            throw error
        }
    }

    /// Connects and sends `hello` without waiting for the answer: `welcome`, `registered` and
    /// stored notifications then arrive through `poll` like any other frame.
    public func open(timeoutMilliseconds: Int = 5000) throws(DeviceClientError) {
        guard transport == nil else { throw DeviceClientError(.usage, "device \(deviceID) is already connected") }
        lingering?.close()
        lingering = nil
        var context: TLSContext?
        if let tls {
            if tlsContext == nil {
                do {
                    tlsContext = try TLSContext.client(trustedCAPath: tls.caPath, verifyPeer: tls.verifyPeer, alpnProtocols: [])
                } catch {
                    throw DeviceClientError(.connectFailed, "TLS client setup failed: \(error)")
                }
            }
            context = tlsContext
        }
        let transport = try Transport(address: address, tlsContext: context, timeoutMilliseconds: timeoutMilliseconds)
        self.transport = transport
        readBuffer.removeAll(keepingCapacity: true)
        readStart = 0
        scanFrom = 0
        welcome = nil
        wasReplaced = false
        wasRemoved = false
        disconnectReason = nil
        try send(helloFrame)
    }

    /// Closes the connection (the device goes offline). Frames already read stay queued.
    /// `connect()` reconnects with the same device id.
    public func disconnect() {
        disconnect(reason: "disconnected by the client")
        lingering?.close()
        lingering = nil
    }

    private func disconnect(reason: String, lingerForAcks: Bool = false) {
        guard let transport else { return }
        if lingerForAcks {
            lingering?.close()
            lingering = transport
        } else {
            transport.close()
        }
        self.transport = nil
        disconnectReason = reason
    }

    // MARK: Reading

    /// Returns every frame that is queued or arrives within the timeout (all complete frames
    /// available once the first is there), in order, and empties the queue. An empty array
    /// means the timeout passed. Throws when the connection is closed and nothing is queued
    /// (`.replaced` after a `replaced` frame), and on a bad frame from the emulator (frames
    /// read before it are kept for the next call).
    public func poll(timeoutMilliseconds: Int) throws(DeviceClientError) -> [JSONObject] {
        try throwDeferredError()
        let deadline = Monotonic.nowMilliseconds() + Int64(max(0, timeoutMilliseconds))
        while true {
            if transport != nil {
                do {
                    try drain()
                } catch {
                    // Report the bad frame after the good ones that came before it.
                    guard !inbox.isEmpty else { throw error }
                    deferredErrors.append(error)
                }
            }
            if !inbox.isEmpty {
                let messages = inbox.map(\.message)
                inbox.removeAll()
                return messages
            }
            guard let transport else { throw closedError() }
            if Monotonic.nowMilliseconds() >= deadline { return [] }
            _ = transport.waitReadable(deadline: deadline)
        }
    }

    /// Takes the first queued frame of `type` (any type when nil), waiting up to the timeout
    /// for it; other frames stay queued. Returns nil on timeout.
    public func nextMessage(ofType type: String? = nil, timeoutMilliseconds: Int) throws(DeviceClientError) -> JSONObject? {
        try throwDeferredError()
        let deadline = Monotonic.nowMilliseconds() + Int64(max(0, timeoutMilliseconds))
        return try take(deadline: deadline, deferBadFrames: false) { type == nil || $0["type"]?.stringValue == type }
    }

    /// Waits for the next `notification` (other frames that arrive meanwhile stay queued).
    /// Returns nil on timeout. With `autoAck` it has already been acked.
    public func nextNotification(timeoutMilliseconds: Int) throws(DeviceClientError) -> DeliveredNotification? {
        guard let frame = try nextMessage(ofType: "notification", timeoutMilliseconds: timeoutMilliseconds) else { return nil }
        return try DeliveredNotification(frame: frame)
    }

    // MARK: Writing

    /// Sends one frame (a JSON value, written as one line). Use it for anything, including
    /// deliberately wrong frames.
    public func send(_ message: JSONValue) throws(DeviceClientError) {
        var line = message.serializedBytes()
        line.append(UInt8(ascii: "\n"))
        try sendLine(line)
    }

    /// Sends raw bytes as they are (a test can send broken or partial lines).
    public func sendRaw(_ bytes: [UInt8]) throws(DeviceClientError) {
        try sendLine(bytes)
    }

    /// Sends a request without waiting for its answer (the answer arrives through `poll`).
    public func request(_ request: DeviceRequest) throws(DeviceClientError) {
        if case .install(let app) = request { pendingInstalls[app.bundleID] = app }
        try send(request.frame)
    }

    public func ack(_ id: Int64) throws(DeviceClientError) {
        try ack([id])
    }

    /// Acks several notifications in one write.
    public func ack(_ ids: [Int64]) throws(DeviceClientError) {
        guard !ids.isEmpty else { return }
        var lines: [UInt8] = []
        for id in ids {
            DeviceRequest.ack(id: id).frame.append(to: &lines)
            lines.append(UInt8(ascii: "\n"))
        }
        try sendLine(lines, orLingering: true)
        noteAcked(ids)
    }

    private func noteAcked(_ ids: [Int64]) {
        for id in ids {
            guard let mark = unacked.removeValue(forKey: id) else { continue }
            recentAcks.append((id, mark))
        }
        if recentAcks.count > Self.acksInHello { recentAcks.removeFirst(recentAcks.count - Self.acksInHello) }
    }

    private func sendLine(_ bytes: [UInt8], orLingering: Bool = false) throws(DeviceClientError) {
        guard let transport = transport ?? (orLingering ? lingering : nil) else { throw closedError() }
        do {
            try transport.write(bytes, deadline: Monotonic.nowMilliseconds() + Int64(writeTimeoutMilliseconds))
        } catch {
            if error.kind == .notConnected { disconnect(reason: error.message) }
            throw error
        }
    }

    // MARK: Commands (each waits for its answer)

    /// Changes an app's settings; returns the `appUpdated` answer.
    @discardableResult
    public func setApp(
        _ bundleID: String, appState: AppState? = nil, authorization: Authorization? = nil,
        backgroundMode: Bool? = nil
    ) throws(DeviceClientError) -> JSONObject {
        try command(
            .app(bundleID: bundleID, appState: appState, authorization: authorization, backgroundMode: backgroundMode),
            what: "appUpdated"
        ) { $0["type"]?.stringValue == "appUpdated" && $0["bundleId"]?.stringValue == bundleID }
    }

    /// Turns Low Power Mode on or off; waits for `deviceUpdated`.
    public func setLowPowerMode(_ on: Bool) throws(DeviceClientError) {
        _ = try command(.device(lowPowerMode: on), what: "deviceUpdated") { $0["type"]?.stringValue == "deviceUpdated" }
    }

    /// Installs (or reinstalls) an app; returns its tokens from the `registered` answers.
    @discardableResult
    public func install(_ app: DeviceApp) throws(DeviceClientError) -> [TokenKind: String] {
        let deadline = Monotonic.nowMilliseconds() + Int64(commandTimeoutMilliseconds)
        let mark = received
        try request(.install(app))
        return try awaitRegistered(bundleID: app.bundleID, kinds: app.kinds, after: mark, deadline: deadline)
    }

    /// Uninstalls an app; returns the `uninstalled` answer (`unregisteredAt`, `tokens`).
    @discardableResult
    public func uninstall(_ bundleID: String) throws(DeviceClientError) -> JSONObject {
        try command(.uninstall(bundleID: bundleID), what: "uninstalled") {
            $0["type"]?.stringValue == "uninstalled" && $0["bundleId"]?.stringValue == bundleID
        }
    }

    /// APNs replaces the app's tokens; returns the new ones.
    @discardableResult
    public func rotate(_ bundleID: String) throws(DeviceClientError) -> [TokenKind: String] {
        let known = tokens[bundleID].map { Array($0.keys) } ?? []
        let kinds = !known.isEmpty ? known : (apps.first { $0.bundleID == bundleID }?.kinds ?? [.app])
        let deadline = Monotonic.nowMilliseconds() + Int64(commandTimeoutMilliseconds)
        let mark = received
        try request(.rotate(bundleID: bundleID))
        return try awaitRegistered(bundleID: bundleID, kinds: kinds, after: mark, deadline: deadline)
    }

    /// Erase All Content and Settings: waits for `erased`; `apps` and `tokens` are then empty.
    public func erase() throws(DeviceClientError) {
        _ = try command(.erase, what: "erased") { $0["type"]?.stringValue == "erased" }
    }

    /// Restores another device's backup here; waits for `restored` (the `registered` frames
    /// before it are taken too and fill `tokens`). Returns the `restored` answer.
    @discardableResult
    public func restore(from deviceID: String) throws(DeviceClientError) -> JSONObject {
        let deadline = Monotonic.nowMilliseconds() + Int64(commandTimeoutMilliseconds)
        let mark = received
        try request(.restore(fromDeviceID: deviceID))
        let answer = try awaitAnswer(after: mark, deadline: deadline, what: "restored") { $0["type"]?.stringValue == "restored" }
        let restoredBundles = Set((answer["bundleIds"]?.arrayValue ?? []).compactMap(\.stringValue))
        inbox.removeAll { entry in
            entry.seq > mark && entry.message["type"]?.stringValue == "registered"
                && restoredBundles.contains(entry.message["bundleId"]?.stringValue ?? "")
        }
        return answer
    }

    /// The user taps a notification; returns the `tapped` answer (`callbacks`, `launched`).
    @discardableResult
    public func tap(apnsID: String) throws(DeviceClientError) -> JSONObject {
        try command(.tap(apnsID: apnsID), what: "tapped") {
            $0["type"]?.stringValue == "tapped" && ($0["apnsId"]?.stringValue).map { $0.lowercased() == apnsID.lowercased() } ?? true
        }
    }

    /// The user acts on a notification (`default`, `dismiss`, or an action of its category,
    /// with `text` for a text-input action); returns the `responded` answer.
    @discardableResult
    public func respond(apnsID: String, action: String, text: String? = nil) throws(DeviceClientError) -> JSONObject {
        try command(.respond(apnsID: apnsID, action: action, text: text), what: "responded") {
            $0["type"]?.stringValue == "responded" && ($0["apnsId"]?.stringValue).map { $0.lowercased() == apnsID.lowercased() } ?? true
        }
    }

    /// Sets the device's switches (`focus`, `scheduledSummary`, `muted`, `locked`); returns
    /// the `deviceUpdated` answer.
    @discardableResult
    public func setSwitches(_ fields: JSONObject) throws(DeviceClientError) -> JSONObject {
        try command(.switches(fields), what: "deviceUpdated") { $0["type"]?.stringValue == "deviceUpdated" }
    }

    /// Changes an app's notification setup (categories, `foregroundPresentation`, entitlements,
    /// `badge`…); returns the `appUpdated` answer.
    @discardableResult
    public func setNotificationSettings(bundleID: String, _ fields: JSONObject) throws(DeviceClientError) -> JSONObject {
        try command(.notificationSettings(bundleID: bundleID, fields), what: "appUpdated") {
            $0["type"]?.stringValue == "appUpdated" && $0["bundleId"]?.stringValue == bundleID
        }
    }

    /// Logs an account in on the device; waits for `loggedIn` (the answer carries
    /// `previousUserId`). The emulator then calls the apps' backend hooks (unbind, register, bind).
    @discardableResult
    public func login(_ userID: String) throws(DeviceClientError) -> JSONObject {
        try command(.login(userID: userID), what: "loggedIn") { $0["type"]?.stringValue == "loggedIn" }
    }

    /// Logs the account out; waits for `loggedOut`.
    @discardableResult
    public func logout() throws(DeviceClientError) -> JSONObject {
        try command(.logout, what: "loggedOut") { $0["type"]?.stringValue == "loggedOut" }
    }

    /// Sends `ping` and waits for `pong`.
    public func ping() throws(DeviceClientError) {
        _ = try command(.ping, what: "pong") { $0["type"]?.stringValue == "pong" }
    }

    // MARK: Live Activities

    /// Declares the app's ActivityAttributes types; returns its push-to-start tokens by type.
    @discardableResult
    public func declareLiveActivities(
        _ bundleID: String, types: [String], frequentUpdates: Bool = false
    ) throws(DeviceClientError)
        -> [String: String]
    {
        _ = try command(.liveActivities(bundleID: bundleID, types: types, frequentUpdates: frequentUpdates), what: "liveActivitiesDeclared") {
            $0["type"]?.stringValue == "liveActivitiesDeclared" && $0["bundleId"]?.stringValue == bundleID
        }
        return pushToStartTokens[bundleID] ?? [:]
    }

    /// `Activity.request` in the app; returns the started activity (with its `pushToken` when
    /// it takes token pushes). An ActivityKit error comes back as a `.server` error.
    @discardableResult
    public func startActivity(
        _ bundleID: String, attributesType: String, attributes: JSONValue = .object(JSONObject()),
        contentState: JSONValue = .object(JSONObject()), channel: String? = nil, pushToken: Bool = true
    ) throws(DeviceClientError) -> JSONObject {
        let answer = try command(
            .startActivity(
                bundleID: bundleID, attributesType: attributesType, attributes: attributes, contentState: contentState, channel: channel,
                pushToken: pushToken),
            what: "activityStarted"
        ) { $0["type"]?.stringValue == "activityStarted" }
        return answer["activity"]?.objectValue ?? answer
    }

    /// `Activity.end` in the app.
    public func endActivity(_ activityID: String, contentState: JSONValue? = nil, dismissalDate: Double? = nil) throws(DeviceClientError) {
        _ = try command(.endActivity(activityID: activityID, contentState: contentState, dismissalDate: dismissalDate), what: "activityEnded") {
            $0["type"]?.stringValue == "activityEnded" && $0["activityId"]?.stringValue == activityID
        }
    }

    /// The user removes an activity from the Lock Screen.
    public func dismissActivity(_ activityID: String) throws(DeviceClientError) {
        _ = try command(.dismissActivity(activityID: activityID), what: "activityDismissed") {
            $0["type"]?.stringValue == "activityDismissed" && $0["activityId"]?.stringValue == activityID
        }
    }

    /// The next `activity` frame (an activity started, updated, went stale, ended, was
    /// dismissed; a token issued or ended), or nil when none comes in time.
    public func nextActivityChange(timeoutMilliseconds: Int) throws(DeviceClientError) -> JSONObject? {
        try nextMessage(ofType: "activity", timeoutMilliseconds: timeoutMilliseconds)
    }

    public func token(for bundleID: String, kind: TokenKind = .app) -> String? {
        tokens[bundleID]?[kind]
    }

    // MARK: Waiting

    private func command(
        _ request: DeviceRequest, what: String,
        matches: (JSONObject) -> Bool
    ) throws(DeviceClientError) -> JSONObject {
        let deadline = Monotonic.nowMilliseconds() + Int64(commandTimeoutMilliseconds)
        let mark = received
        try self.request(request)
        return try awaitAnswer(after: mark, deadline: deadline, what: what, matches: matches)
    }

    private func awaitRegistered(
        bundleID: String, kinds: [TokenKind], after mark: UInt64,
        deadline: Int64
    ) throws(DeviceClientError) -> [TokenKind: String] {
        var result: [TokenKind: String] = [:]
        for kind in kinds where result[kind] == nil {
            let frame = try awaitAnswer(after: mark, deadline: deadline, what: "registered for \(bundleID) (\(kind.rawValue))") {
                Self.isRegistered($0, bundleID: bundleID, kind: kind)
            }
            result[kind] = frame["token"]?.stringValue
        }
        return result
    }

    private static func isRegistered(_ frame: JSONObject, bundleID: String, kind: TokenKind) -> Bool {
        frame["type"]?.stringValue == "registered" && frame["bundleId"]?.stringValue == bundleID
            && (frame["kind"]?.stringValue ?? "app") == kind.rawValue
    }

    /// Takes the first frame received after `mark` that `matches`; an `error` frame received
    /// after `mark` (before the answer) is the answer instead and is thrown.
    private func awaitAnswer(
        after mark: UInt64, deadline: Int64, what: String,
        matches: (JSONObject) -> Bool
    ) throws(DeviceClientError) -> JSONObject {
        let started = Monotonic.nowMilliseconds()
        let frame = try take(after: mark, deadline: deadline, deferBadFrames: true) { entry in
            entry["type"]?.stringValue == "error" || matches(entry)
        }
        guard let frame else {
            let waited = max(0, Monotonic.nowMilliseconds() - started)
            throw DeviceClientError(.timeout, "timed out after \(waited) ms waiting for \(what) from the emulator")
        }
        if frame["type"]?.stringValue == "error", !matches(frame) {
            throw DeviceClientError(serverFrame: frame)
        }
        return frame
    }

    /// Takes the first queued frame (received after `mark`) that `matches`, reading until the
    /// deadline. nil on timeout; throws when the connection closes first.
    private func take(
        after mark: UInt64 = 0, deadline: Int64, deferBadFrames: Bool,
        _ matches: (JSONObject) -> Bool
    ) throws(DeviceClientError) -> JSONObject? {
        var checked = 0
        while true {
            if let index = inbox[checked...].firstIndex(where: { $0.seq > mark && matches($0.message) }) {
                return inbox.remove(at: index).message
            }
            checked = inbox.count
            guard transport != nil else { throw closedError() }
            do {
                try drain()
            } catch {
                // A command's answer may still come after a bad frame: keep waiting, and let
                // the reading calls report it.
                guard deferBadFrames, error.kind == .badFrame else { throw error }
                deferredErrors.append(error)
                continue
            }
            if inbox.count > checked { continue }
            guard let transport else { throw closedError() }
            if Monotonic.nowMilliseconds() >= deadline { return nil }
            _ = transport.waitReadable(deadline: deadline)
        }
    }

    private func throwDeferredError() throws(DeviceClientError) {
        guard !deferredErrors.isEmpty else { return }
        throw deferredErrors.removeFirst()
    }

    private func closedError() -> DeviceClientError {
        if wasReplaced {
            return DeviceClientError(.replaced, "device \(deviceID) was replaced by a newer connection with the same id")
        }
        return DeviceClientError(.notConnected, "device \(deviceID) is not connected" + (disconnectReason.map { ": \($0)" } ?? ""))
    }

    /// Reads everything the socket has now (never blocks) and queues the complete frames.
    private func drain() throws(DeviceClientError) {
        // Notifications parsed before a bad frame are acked all the same.
        defer { sendAutoAcks() }
        // Frames already buffered (left by an earlier bad line) come first.
        try extractLines()
        while let transport {
            let outcome = chunk.withUnsafeMutableBytes { transport.read(into: $0) }
            switch outcome {
            case .data(let n):
                readBuffer.append(contentsOf: chunk[0..<n])
                try extractLines()
                sendAutoAcks()
            case .wouldBlock:
                return
            case .closed:
                let partial = readBuffer.count > readStart
                disconnect(
                    reason: wasReplaced
                        ? "replaced by a newer connection"
                        : wasRemoved
                            ? "the device was deleted through the admin API"
                            : "the emulator closed the connection" + (partial ? " (in the middle of a line)" : ""),
                    lingerForAcks: true)
                return
            case .failed(let message):
                disconnect(reason: message)
                return
            }
        }
    }

    private func extractLines() throws(DeviceClientError) {
        while true {
            guard let newline = readBuffer[scanFrom...].firstIndex(of: UInt8(ascii: "\n")) else {
                scanFrom = readBuffer.count
                // (+1: a line of exactly the limit may still get its "\r" before the "\n".)
                if readBuffer.count - readStart > Self.maxLineBytes + 1 {
                    disconnect(reason: "the emulator sent a line over 1 MiB")
                    throw DeviceClientError(.lineTooLong, "the emulator sent a line longer than \(Self.maxLineBytes) bytes; connection closed")
                }
                compact()
                return
            }
            let lineStart = readStart
            readStart = newline + 1
            scanFrom = readStart
            var end = newline
            if end > lineStart && readBuffer[end - 1] == UInt8(ascii: "\r") { end -= 1 }
            if end - lineStart > Self.maxLineBytes {
                disconnect(reason: "the emulator sent a line over 1 MiB")
                throw DeviceClientError(.lineTooLong, "the emulator sent a line longer than \(Self.maxLineBytes) bytes; connection closed")
            }
            let line = readBuffer[lineStart..<end]
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
            let value: JSONValue
            do {
                value = try JSONValue.parseKeepingText(Array(line))
            } catch {
                throw DeviceClientError(.badFrame, "the emulator sent invalid JSON (\(error.description)): \(Self.excerpt(line))")
            }
            guard case .object(let object) = value, object["type"]?.stringValue != nil else {
                throw DeviceClientError(.badFrame, "the emulator sent a line that is not an object with a \"type\": \(Self.excerpt(line))")
            }
            receive(object)
        }
    }

    private func compact() {
        guard readStart > 0 else { return }
        if readStart == readBuffer.count {
            readBuffer.removeAll(keepingCapacity: true)
        } else if readStart > 64 * 1024 {
            readBuffer.removeSubrange(0..<readStart)
        } else {
            return
        }
        scanFrom -= readStart
        readStart = 0
    }

    private static func excerpt(_ line: ArraySlice<UInt8>) -> String {
        let text = String(decoding: line.prefix(200), as: UTF8.self)
        return line.count > 200 ? text + "…" : text
    }

    /// Applies what a frame says about the device's state, queues it, and acks notifications
    /// when `autoAck` is on.
    private func receive(_ frame: JSONObject) {
        // The emulator sends a delivery again when it cannot know whether its frame left (a
        // reload, a re-attachment after an outage): one the app has is not shown twice, and
        // one it acked is acked again (the emulator is waiting for that).
        if frame["type"]?.stringValue == "notification", let id = frame["id"]?.intValue,
            let apnsID = frame["apnsId"]?.stringValue,
            let acked = alreadyReceived(id: id, DeliveryMark(apnsID: apnsID, token: frame["token"]?.stringValue ?? ""))
        {
            if acked { autoAcks.append(id) }
            return
        }
        received += 1
        inbox.append((received, frame))
        switch frame["type"]?.stringValue {
        case "welcome":
            welcome = frame
            userID = frame["userId"]?.stringValue
        case "loggedIn":
            userID = frame["userId"]?.stringValue
        case "loggedOut":
            userID = nil
        case "registered":
            guard let bundleID = frame["bundleId"]?.stringValue, let token = frame["token"]?.stringValue else { break }
            let kind = TokenKind(rawValue: frame["kind"]?.stringValue ?? "app")
            if let kind { tokens[bundleID, default: [:]][kind] = token }
            if let index = apps.firstIndex(where: { $0.bundleID == bundleID }) {
                if let pending = pendingInstalls.removeValue(forKey: bundleID) {
                    apps[index] = pending
                    installedByEmulator.remove(bundleID)
                } else if let environment = frame["environment"]?.stringValue.flatMap(APNsEnvironment.init(rawValue:)),
                    apps[index].environment != environment
                {
                    // Switched without this device asking (the admin API, a raw install frame):
                    // the next hello says so, or it installs the other build again and every
                    // token the provider holds answers 410.
                    apps[index].environment = environment
                }
                if let kind, !apps[index].kinds.contains(kind) { apps[index].kinds.append(kind) }
            } else if let pending = pendingInstalls.removeValue(forKey: bundleID) {
                apps.append(pending)
            } else if let kind {
                // An app this device did not ask for by name (restored from another device,
                // installed through the admin API): known for its token, not re-declared.
                let environment = frame["environment"]?.stringValue.flatMap(APNsEnvironment.init(rawValue:)) ?? .sandbox
                apps.append(DeviceApp(bundleID: bundleID, environment: environment, kinds: [kind]))
                installedByEmulator.insert(bundleID)
            }
        case "appUpdated":
            guard let bundleID = frame["bundleId"]?.stringValue,
                let index = apps.firstIndex(where: { $0.bundleID == bundleID })
            else { break }
            if let value = frame["appState"]?.stringValue.flatMap(AppState.init(rawValue:)) { apps[index].appState = value }
            if let value = frame["authorization"]?.stringValue.flatMap(Authorization.init(rawValue:)) {
                apps[index].authorization = value
            }
            if let value = frame["backgroundMode"]?.boolValue { apps[index].backgroundMode = value }
            // Kept for the next hello, so a reconnect declares the setup the emulator has.
            if let value = frame["notificationSettings"]?.objectValue { apps[index].notificationSettings = value }
        case "deviceUpdated":
            if let value = frame["lowPowerMode"]?.boolValue { lowPowerMode = value }
        case "uninstalled":
            guard let bundleID = frame["bundleId"]?.stringValue else { break }
            tokens[bundleID] = nil
            pushToStartTokens[bundleID] = nil
            activities = activities.filter { $0.value["bundleId"]?.stringValue != bundleID }
            apps.removeAll { $0.bundleID == bundleID }
            installedByEmulator.remove(bundleID)
        case "erased":
            tokens = [:]
            pushToStartTokens = [:]
            activities = [:]
            apps = []
            installedByEmulator = []
        case "replaced":
            wasReplaced = true
        case "removed":
            wasRemoved = true
        case "activity":
            if let activity = frame["activity"]?.objectValue, let id = activity["activityId"]?.stringValue { activities[id] = activity }
            if frame["change"]?.stringValue == "token", frame["kind"]?.stringValue == "pushToStart",
                let bundleID = frame["bundleId"]?.stringValue, let type = frame["attributesType"]?.stringValue,
                let token = frame["token"]?.stringValue
            {
                pushToStartTokens[bundleID, default: [:]][type] = token
            }
        case "activityStarted":
            if let activity = frame["activity"]?.objectValue, let id = activity["activityId"]?.stringValue { activities[id] = activity }
        case "notification":
            guard let id = frame["id"]?.intValue else { break }
            if let apnsID = frame["apnsId"]?.stringValue {
                // Bounded for a client that never acks: the oldest unacked are forgotten.
                if unacked.count >= 8 * Self.acksInHello, let any = unacked.keys.min() { unacked.removeValue(forKey: any) }
                unacked[id] = DeliveryMark(apnsID: apnsID, token: frame["token"]?.stringValue ?? "")
            }
            guard autoAck else { break }
            autoAcks.append(id)
        default:
            break
        }
    }

    /// nil for a delivery not seen before; whether it was acked for one seen (the same delivery
    /// id, apns-id and token: a new apns-id or token under an old id is a new delivery, ids begin
    /// again after a reset or when the emulator restarts).
    private func alreadyReceived(id: Int64, _ mark: DeliveryMark) -> Bool? {
        if unacked[id] == mark { return false }
        if recentAcks.contains(where: { $0.id == id && $0.mark == mark }) { return true }
        return nil
    }

    private func sendAutoAcks() {
        guard !autoAcks.isEmpty else { return }
        let ids = autoAcks
        autoAcks.removeAll(keepingCapacity: true)
        guard transport != nil || lingering != nil else { return }
        do {
            try ack(ids)
        } catch {
            // The frames stay queued; acks that cannot be written mean the connection is
            // unusable (the emulator puts the deliveries back in its store).
            disconnect(reason: "cannot ack notifications \(ids.first!)…\(ids.last!): \(error.message)")
        }
    }
}
