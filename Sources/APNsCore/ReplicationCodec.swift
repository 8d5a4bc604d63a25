// The byte form of every `StateChange` and of device frames, for multi-instance mode: an
// instance appends the rows it produced to a shared log and forwards frames for device
// sockets that another instance holds. Same conventions as the blobs above (format byte,
// varints, length-prefixed texts); the record, notification and fault blobs are reused
// as they are, so one reader understands both.

extension StateCodec {
    /// 2 added broadcast channels (their rows, and in a reset's state), 3 Live Activity rows,
    /// 4 each app's notification setup and badge and the device's switches (Focus…), 5 a
    /// record's delivery part as a row of its own; 1 to 4 are still read.
    static let changeFormat: UInt8 = 5
    static let framesFormat: UInt8 = 1
    /// Deeper JSON than this in a frame is refused: damaged bytes must not exhaust the stack.
    static let maxJSONDepth = 64

    // MARK: Rows

    public static func encode(_ change: StateChange) -> [UInt8] {
        if case .recordSaved(let record) = change { return encodeSaved(record) }
        var w = ByteWriter(capacity: 256)
        w.u8(changeFormat)
        write(change, to: &w)
        return w.bytes
    }

    public static func decodeChange(_ bytes: [UInt8]) throws(StateStoreError) -> StateChange {
        var r = ByteReader(bytes, what: "state change")
        let format = try r.expectFormat(in: 1...changeFormat)
        let change = try readChange(from: &r, format: format)
        try r.expectEnd()
        return change
    }

    /// The row of `StateChange.recordSaved(record)`, for a writer that has the record bound
    /// already (binding it out of the change again copies its some forty fields).
    public static func encodeSaved(_ record: NotificationRecord) -> [UInt8] {
        // Most rows (one a push): sized for the record, so the row grows no more (the
        // journal's estimate is above what a record encodes to).
        var w = ByteWriter(capacity: 64 + record.approximateBytes)
        w.u8(changeFormat)
        writeSaved(record, to: &w)
        return w.bytes
    }

    /// Several rows as one value (one append to the log: what one `withWorld` call produced).
    public static func encode(changes: [StateChange]) -> [UInt8] {
        var w = ByteWriter(capacity: 256 * changes.count + 8)
        w.u8(changeFormat)
        w.u64(UInt64(changes.count))
        for change in changes { write(change, to: &w) }
        return w.bytes
    }

    /// `encode(changes:)` of rows already encoded one by one (`encode(_:)`): their bytes are
    /// copied, not encoded again.
    public static func encode(encodedChanges rows: [[UInt8]]) -> [UInt8] {
        var w = ByteWriter(capacity: rows.reduce(9) { $0 + $1.count })
        w.u8(changeFormat)
        w.u64(UInt64(rows.count))
        for row in rows {
            precondition(row.first == changeFormat, "a row encoded by encode(_:)")
            w.bytes.append(contentsOf: row[1...])
        }
        return w.bytes
    }

    /// The start of `encode(changes:)`'s bytes for `count` changes, at the end of `bytes` (a
    /// buffer the caller builds around them: a Redis command), their rows to follow
    /// (`appendRow`). Written in place, a write's rows are not copied into a buffer of their own.
    public static func beginRows(count: Int, in bytes: inout [UInt8]) {
        withWriter(on: &bytes) { w in
            w.u8(changeFormat)
            w.u64(UInt64(count))
        }
    }

    /// `change`'s row as `encode(changes:)` writes it, at the end of `bytes` (a journal record
    /// straight from its change: encoded on its own first, it cost an allocation and a copy).
    /// For a journal record, what a writer notes of it: bound out of the change again, the
    /// record would be copied again (some forty fields).
    public static func appendRow(_ change: StateChange, to bytes: inout [UInt8]) -> SavedRecordFacts? {
        guard case .recordSaved(let record) = change else {
            withWriter(on: &bytes) { w in write(change, to: &w) }
            return nil
        }
        withWriter(on: &bytes) { w in writeSaved(record, to: &w) }
        return SavedRecordFacts(
            sequence: record.sequence, heldForOrder: record.delivery.heldForOrder, awaitingOwner: record.delivery.awaitingOwner,
            deviceID: record.deviceID)
    }

    /// What a store's writer needs of a journal record it writes (`appendRow`).
    public struct SavedRecordFacts {
        public let sequence: UInt64
        /// `RecordDelivery.heldForOrder`, `awaitingOwner`.
        public let heldForOrder: Bool
        public let awaitingOwner: Bool
        public let deviceID: String?

        public init(sequence: UInt64, heldForOrder: Bool, awaitingOwner: Bool, deviceID: String?) {
            self.sequence = sequence
            self.heldForOrder = heldForOrder
            self.awaitingOwner = awaitingOwner
            self.deviceID = deviceID
        }
    }

    /// `encode(_:)` of the change whose row `appendRow` wrote as `row`.
    public static func standaloneRow(_ row: ArraySlice<UInt8>) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(row.count + 1)
        bytes.append(changeFormat)
        bytes += row
        return bytes
    }

    /// Runs `body` on a writer that writes at the end of `bytes`.
    private static func withWriter(on bytes: inout [UInt8], _ body: (inout ByteWriter) -> Void) {
        var w = ByteWriter(capacity: 0)
        swap(&w.bytes, &bytes)
        body(&w)
        swap(&w.bytes, &bytes)
    }

    /// The rows of `encode(changes:)`. With `keepingRecordsEncoded`, journal records come back
    /// kept in their stored form where nothing needs their fields yet (a follower's journal
    /// decodes them when they are read; `StateCodec.recordKeptEncoded`).
    public static func decodeChanges(_ bytes: [UInt8], keepingRecordsEncoded: Bool = false) throws(StateStoreError) -> [StateChange] {
        var r = ByteReader(bytes, what: "state change list")
        let format = try r.expectFormat(in: 1...changeFormat)
        let count = try r.count()
        var changes: [StateChange] = []
        changes.reserveCapacity(count)
        for _ in 0..<count { changes.append(try readChange(from: &r, format: format, keepingRecordsEncoded: keepingRecordsEncoded)) }
        try r.expectEnd()
        return changes
    }

    /// `decodeChanges` for a follower: a journal record that nothing needs yet comes as it
    /// arrived (`ReplicatedRow.keptRecord`, small to pass around), not as a record placeholder
    /// copied field by field on its way into the journal.
    /// `skippingDeliveryOf`: delivery parts of the records it picks (by sequence number) are
    /// passed over undecoded (parts this copy applied when their write came).
    public static func decodeRows(
        _ bytes: [UInt8], skippingDeliveryOf skipped: ((UInt64) -> Bool)? = nil
    ) throws(StateStoreError) -> [ReplicatedRow] {
        var r = ByteReader(bytes, what: "state change list")
        let format = try r.expectFormat(in: 1...changeFormat)
        let count = try r.count()
        var rows: [ReplicatedRow] = []
        rows.reserveCapacity(count)
        for _ in 0..<count {
            if let skipped, try r.peekU8() == 20, skipped(try r.deliveryPartSequence()) {
                _ = try r.u8()
                try r.skipBytes()
                continue
            }
            if try r.peekU8() == 11 {
                _ = try r.u8()
                let bytes = try r.bytes()
                let head = try recordHead(bytes)
                let accountedBytes: Int = try r.take()
                let headerListBytes: Int = try r.take()
                if head.hasCollapseID {
                    var record = try decodeRecord(bytes)
                    record.accountedBytes = accountedBytes
                    record.headerListBytes = headerListBytes
                    rows.append(.change(.recordSaved(record)))
                } else {
                    rows.append(
                        .keptRecord(
                            KeptRecord(
                                sequence: head.sequence, bytes: bytes, accountedBytes: accountedBytes, headerListBytes: headerListBytes,
                                awaitingOwnerDevice: head.awaitingOwnerDevice)))
                }
                continue
            }
            rows.append(.change(try readChange(from: &r, format: format, keepingRecordsEncoded: true)))
        }
        try r.expectEnd()
        return rows
    }

    /// The delivery parts among a write's rows for the records `wanted` picks by sequence
    /// number, decoded; the journal records and other parts beside them passed over undecoded.
    /// Nil when a row is of another kind (the caller then decodes them all): an instance reads
    /// back this way what became of the pushes it handed off, from writes it otherwise leaves
    /// unread.
    public static func deliveryParts(in bytes: [UInt8], where wanted: (UInt64) -> Bool) throws(StateStoreError) -> [ReplicatedRow]? {
        var r = ByteReader(bytes, what: "state change list")
        let format = try r.expectFormat(in: 1...changeFormat)
        let count = try r.count()
        var parts: [ReplicatedRow] = []
        for _ in 0..<count {
            switch try r.peekU8() {
            case 11:
                // A journal record and the journal's byte accounting of it.
                _ = try r.u8()
                try r.skipBytes()
                _ = try r.u64()
                _ = try r.u64()
            case 20:
                if wanted(try r.deliveryPartSequence()) {
                    parts.append(.change(try readChange(from: &r, format: format)))
                } else {
                    _ = try r.u8()
                    try r.skipBytes()
                }
            default:
                return nil
            }
        }
        try r.expectEnd()
        return parts
    }

    private static func write(_ change: StateChange, to w: inout ByteWriter) {
        switch change {
        case .deviceSaved(let device):
            w.u8(1)
            write(device, to: &w)
        case .deviceRemoved(let id):
            w.u8(2)
            w.put(id)
        case .tokenSaved(let entry):
            w.u8(3)
            write(entry, to: &w)
        case .keySaved(let key):
            w.u8(4)
            write(key, to: &w)
        case .keyRemoved(let id):
            w.u8(5)
            w.put(id)
        case .appSaved(let bundle, let team):
            w.u8(6)
            w.put(bundle)
            w.put(team)
        case .appRemoved(let bundle):
            w.u8(7)
            w.put(bundle)
        case .faultsSaved(let faults):
            w.u8(8)
            w.blob(encode(faults))
        case .notificationWaiting(let waiting):
            w.u8(9)
            write(waiting, to: &w)
        case .notificationDone(let sequence):
            w.u8(10)
            w.put(sequence)
        case .recordSaved(let record):
            writeSaved(record, to: &w)
        case .recordRemoved(let sequence):
            w.u8(12)
            w.put(sequence)
        case .recordsEvicted(let before):
            w.u8(13)
            w.put(before)
        case .reset(let state):
            w.u8(14)
            write(state, to: &w)
        case .budgetSaved(let device, let bundle, let budget):
            w.u8(15)
            w.put(device)
            w.put(bundle)
            write(budget, to: &w)
        case .channelSaved(let channel):
            w.u8(16)
            w.blob(encode(channel))
        case .channelRemoved(let id):
            w.u8(17)
            w.put(id)
        case .liveActivitiesSaved(let row):
            w.u8(18)
            w.blob(encode(row))
        case .liveActivitiesRemoved(let id):
            w.u8(19)
            w.put(id)
        case .recordDelivered(let sequence, let delivery):
            w.u8(20)
            w.blob(encodeDelivery(sequence: sequence, delivery))
        case .clockOffsetSaved(let offset):
            w.u8(21)
            w.put(UInt64(bitPattern: offset))
        }
    }

    private static func readChange(
        from r: inout ByteReader, format: UInt8, keepingRecordsEncoded: Bool = false
    ) throws(StateStoreError)
        -> StateChange
    {
        switch try r.u8() {
        case 1: return .deviceSaved(try readDevice(from: &r, format: format))
        case 2: return .deviceRemoved(id: try r.take())
        case 3: return .tokenSaved(try readToken(from: &r))
        case 4: return .keySaved(try readKey(from: &r))
        case 5: return .keyRemoved(keyID: try r.take())
        case 6: return .appSaved(bundleID: try r.take(), teamID: try r.take())
        case 7: return .appRemoved(bundleID: try r.take())
        case 8: return .faultsSaved(try decodeFaults(try r.bytes()))
        case 9: return .notificationWaiting(try readWaiting(from: &r))
        case 10: return .notificationDone(sequence: try r.take())
        case 11: return .recordSaved(try readRecord(from: &r, keepingEncoded: keepingRecordsEncoded))
        case 12: return .recordRemoved(sequence: try r.take())
        case 13: return .recordsEvicted(before: try r.take())
        case 14: return .reset(try readState(from: &r, format: format))
        case 15: return .budgetSaved(deviceID: try r.take(), bundleID: try r.take(), budget: try readBudget(from: &r))
        case 16: return .channelSaved(try decodeChannel(try r.bytes()))
        case 17: return .channelRemoved(id: try r.take())
        case 18: return .liveActivitiesSaved(try decodeLiveActivities(try r.bytes()))
        case 19: return .liveActivitiesRemoved(deviceID: try r.take())
        case 20:
            let (sequence, delivery) = try decodeDelivery(try r.bytes())
            return .recordDelivered(sequence: sequence, delivery: delivery)
        case 21: return .clockOffsetSaved(milliseconds: Int64(bitPattern: try r.take()))
        case let other: throw r.damaged("change kind \(other)")
        }
    }

    // MARK: Devices and tokens

    private static func write(_ d: Device, to w: inout ByteWriter) {
        w.put(d.id)
        w.put(d.isVirtual)
        w.put(d.createdAtMs)
        w.put(d.connectionID)
        w.put(d.lowPowerMode)
        w.put(d.forcedOffline)
        w.put(d.userID)
        // Sorted, so equal devices have equal bytes.
        w.u64(UInt64(d.apps.count))
        for app in d.apps.values.sorted(by: { $0.bundleID < $1.bundleID }) {
            w.put(app.bundleID)
            w.put(app.environment)
            w.u64(UInt64(app.tokens.count))
            for (kind, token) in app.tokens.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                w.put(kind)
                w.put(token)
            }
            w.put(app.installedAtMs)
            w.put(app.settings.authorization)
            w.put(app.settings.appState)
            w.put(app.settings.backgroundMode)
            w.put(app.uploadPending)
            w.blob(app.settings.notifications.storedJSON)
            w.put(app.badge)
        }
        w.blob(d.attention.storedJSON)
    }

    private static func readDevice(from r: inout ByteReader, format: UInt8) throws(StateStoreError) -> Device {
        var device = Device(id: try r.take(), isVirtual: try r.take(), apps: [:], createdAtMs: try r.take())
        device.connectionID = try r.take()
        device.lowPowerMode = try r.take()
        device.forcedOffline = try r.take()
        device.userID = try r.take()
        let appCount = try r.count()
        for _ in 0..<appCount {
            let bundleID: String = try r.take()
            let environment: APNsEnvironment = try r.take()
            var tokens: [TokenKind: String] = [:]
            let tokenCount = try r.count()
            for _ in 0..<tokenCount {
                let kind: TokenKind = try r.take()
                let token: String = try r.take()  // (assigned directly, `take` would read a `String?`)
                tokens[kind] = token
            }
            let installedAt: Int64 = try r.take()
            var settings = AppSettings(authorization: try r.take(), appState: try r.take(), backgroundMode: try r.take())
            var app = InstalledApp(
                bundleID: bundleID, environment: environment, tokens: tokens,
                installedAtMs: installedAt, settings: settings, uploadPending: try r.take())
            if format >= 4 {
                settings.notifications = try storedSetting(try r.bytes(), r) { bytes throws(NotificationSettingsError) in
                    try NotificationSetup(storedJSON: bytes)
                }
                app.settings = settings
                app.badge = try r.take()
            }
            device.apps[bundleID] = app
        }
        if format >= 4 {
            device.attention = try storedSetting(try r.bytes(), r) { bytes throws(NotificationSettingsError) in
                try DeviceAttention(storedJSON: bytes)
            }
        }
        return device
    }

    /// A setting kept as JSON (`storedJSON`), read back; a damaged one is the row's damage.
    static func storedSetting<T>(
        _ bytes: [UInt8], _ r: ByteReader, _ read: ([UInt8]) throws(NotificationSettingsError) -> T
    ) throws(StateStoreError) -> T {
        do throws(NotificationSettingsError) { return try read(bytes) } catch { throw r.damaged(error.description) }
    }

    private static func write(_ t: TokenEntry, to w: inout ByteWriter) {
        w.put(t.token)
        w.put(t.deviceID)
        w.put(t.bundleID)
        w.put(t.environment)
        w.put(t.kind)
        switch t.state {
        case .active: w.u8(0)
        case .unregistered(let since):
            w.u8(1)
            w.put(since)
        case .expired: w.u8(2)
        case .rateLimited: w.u8(3)
        }
        w.put(t.issuedAtMs)
        w.put(t.pushesUntilUnregistered)
    }

    private static func readToken(from r: inout ByteReader) throws(StateStoreError) -> TokenEntry {
        let token: String = try r.take()
        let deviceID: String = try r.take()
        let bundleID: String = try r.take()
        let environment: APNsEnvironment = try r.take()
        let kind: TokenKind = try r.take()
        let state: TokenState
        switch try r.u8() {
        case 0: state = .active
        case 1: state = .unregistered(sinceMs: try r.take())
        case 2: state = .expired
        case 3: state = .rateLimited
        case let other: throw r.damaged("token state \(other)")
        }
        return TokenEntry(
            token: token, deviceID: deviceID, bundleID: bundleID, environment: environment, kind: kind,
            state: state, issuedAtMs: try r.take(), pushesUntilUnregistered: try r.take())
    }

    // MARK: Keys

    private static func write(_ k: StoredKey, to w: inout ByteWriter) {
        w.put(k.teamID)
        w.put(k.keyID)
        w.put(k.environment)
        w.put(k.topics)
        w.put(k.relatedKeyID)
        w.put(k.pem)
        w.put(k.source)
        w.put(k.addedAtRunTime)
    }

    private static func readKey(from r: inout ByteReader) throws(StateStoreError) -> StoredKey {
        StoredKey(
            teamID: try r.take(), keyID: try r.take(), environment: try r.take(), topics: try r.take(),
            relatedKeyID: try r.take(), pem: try r.take(), source: try r.take(), addedAtRunTime: try r.take())
    }

    // MARK: Waiting notifications and records

    private static func write(_ waiting: WaitingNotification, to w: inout ByteWriter) {
        switch waiting.slot {
        case .stored: w.u8(0)
        case .deferred(let reason):
            w.u8(1)
            w.put(reason)
        case .batched(let releaseAt):
            w.u8(2)
            w.put(releaseAt)
        case .inFlight: w.u8(3)
        case .handedOff: w.u8(4)
        }
        // Without `acceptedAtNanos`: monotonic time means nothing on another host, so a
        // replica treats it as not known (0), as after a restart.
        w.blob(encode(waiting.notification))
        if let flight = waiting.flight {
            w.u8(1)
            w.put(flight.deliveryID)
            w.put(flight.connectionID)
            w.put(flight.sentAtMs)
            w.put(flight.verdict.callbacks)
            w.put(flight.verdict.display)
            w.put(flight.verdict.outcome)
            w.put(flight.verdict.reason)
            w.put(flight.verdict.usedBackgroundBudget)
        } else {
            w.u8(0)
        }
    }

    private static func readWaiting(from r: inout ByteReader) throws(StateStoreError) -> WaitingNotification {
        let slot: WaitingSlot
        switch try r.u8() {
        case 0: slot = .stored
        case 1: slot = .deferred(try r.take())
        case 2: slot = .batched(releaseAtMs: try r.take())
        case 3: slot = .inFlight
        case 4: slot = .handedOff
        case let other: throw r.damaged("waiting slot \(other)")
        }
        var waiting = WaitingNotification(slot: slot, notification: try decodeNotification(try r.bytes()))
        if try r.u8() == 1 {
            let id: UInt64 = try r.take()
            let connection: UInt64 = try r.take()
            let sentAt: Int64 = try r.take()
            let verdict = DeliveryVerdict(
                callbacks: try r.take(), display: try r.take(), outcome: try r.take(),
                reason: try r.take(), usedBackgroundBudget: try r.take())
            waiting.flight = FlightRow(deliveryID: id, connectionID: connection, sentAtMs: sentAt, verdict: verdict)
        }
        return waiting
    }

    /// The record blob plus the journal's byte accounting, so a replica's byte budget evicts
    /// exactly what the producer's did.
    private static func write(_ record: NotificationRecord, to w: inout ByteWriter) {
        if record.keptEncoded != nil {
            w.blob(encode(record))
        } else {
            // Straight into the row: a blob of its own first cost an allocation, a copy and the
            // row's growth.
            let start = w.beginLengthPrefixed()
            write(record: record, into: &w)
            w.endLengthPrefixed(start)
        }
        w.put(record.accountedBytes)
        w.put(record.headerListBytes)
    }

    /// The row of `StateChange.recordSaved`, after the format byte.
    private static func writeSaved(_ record: NotificationRecord, to w: inout ByteWriter) {
        w.u8(11)
        write(record, to: &w)
    }

    private static func readRecord(from r: inout ByteReader, keepingEncoded: Bool = false) throws(StateStoreError) -> NotificationRecord {
        let bytes = try r.bytes()
        var record = keepingEncoded ? try recordKeptEncoded(bytes) : try decodeRecord(bytes)
        record.accountedBytes = try r.take()
        record.headerListBytes = try r.take()
        return record
    }

    // MARK: A whole state (reset)

    private static func write(_ s: PersistedState, to w: inout ByteWriter) {
        w.put(s.initialized)
        w.u64(UInt64(s.devices.count))
        for device in s.devices { write(device, to: &w) }
        w.u64(UInt64(s.tokens.count))
        for token in s.tokens { write(token, to: &w) }
        w.u64(UInt64(s.keys.count))
        for key in s.keys { write(key, to: &w) }
        w.u64(UInt64(s.apps.count))
        for app in s.apps {
            w.put(app.bundleID)
            w.put(app.teamID)
        }
        if let faults = s.faults {
            w.u8(1)
            w.blob(encode(faults))
        } else {
            w.u8(0)
        }
        w.u64(UInt64(s.waiting.count))
        for waiting in s.waiting { write(waiting, to: &w) }
        w.u64(UInt64(s.records.count))
        for record in s.records { write(record, to: &w) }
        w.put(s.nextRecordSequence)
        w.u64(UInt64(s.budgets.count))
        for entry in s.budgets {
            w.put(entry.deviceID)
            w.put(entry.bundleID)
            write(entry.budget, to: &w)
        }
        w.u64(UInt64(s.channels.count))
        for channel in s.channels { w.blob(encode(channel)) }
        w.u64(UInt64(s.liveActivities.count))
        for row in s.liveActivities { w.blob(encode(row)) }
    }

    private static func write(_ budget: BackgroundBudget, to w: inout ByteWriter) {
        w.put(budget.perHour)
        w.put(budget.arrivalUnits)
    }

    private static func readBudget(from r: inout ByteReader) throws(StateStoreError) -> BackgroundBudget {
        BackgroundBudget(perHour: try r.take(), arrivalUnits: try r.take())
    }

    private static func readState(from r: inout ByteReader, format: UInt8) throws(StateStoreError) -> PersistedState {
        var s = PersistedState()
        s.initialized = try r.take()
        for _ in 0..<(try r.count()) { s.devices.append(try readDevice(from: &r, format: format)) }
        for _ in 0..<(try r.count()) { s.tokens.append(try readToken(from: &r)) }
        for _ in 0..<(try r.count()) { s.keys.append(try readKey(from: &r)) }
        for _ in 0..<(try r.count()) { s.apps.append((bundleID: try r.take(), teamID: try r.take())) }
        s.faults = try r.u8() == 0 ? nil : try decodeFaults(try r.bytes())
        for _ in 0..<(try r.count()) { s.waiting.append(try readWaiting(from: &r)) }
        for _ in 0..<(try r.count()) { s.records.append(try readRecord(from: &r)) }
        s.nextRecordSequence = try r.take()
        for _ in 0..<(try r.count()) {
            s.budgets.append((deviceID: try r.take(), bundleID: try r.take(), budget: try readBudget(from: &r)))
        }
        if format >= 2 {
            for _ in 0..<(try r.count()) { s.channels.append(try decodeChannel(try r.bytes())) }
        }
        if format >= 3 {
            for _ in 0..<(try r.count()) { s.liveActivities.append(try decodeLiveActivities(try r.bytes())) }
        }
        return s
    }

    // MARK: Device frames

    /// Frames for device sockets another instance holds (forwarded there and written as is).
    public static func encode(frames: [DeviceFrame]) -> [UInt8] {
        var w = ByteWriter(capacity: 256 * frames.count + 8)
        w.u8(framesFormat)
        w.u64(UInt64(frames.count))
        for frame in frames {
            w.put(frame.deviceID)
            w.put(frame.connectionID)
            w.put(frame.closeAfter)
            write(frame.message, to: &w)
        }
        return w.bytes
    }

    public static func decodeFrames(_ bytes: [UInt8]) throws(StateStoreError) -> [DeviceFrame] {
        var r = ByteReader(bytes, what: "device frame list")
        try r.expectFormat(framesFormat)
        let count = try r.count()
        var frames: [DeviceFrame] = []
        for _ in 0..<count {
            let deviceID: String = try r.take()
            let connectionID: UInt64 = try r.take()
            let closeAfter: Bool = try r.take()
            frames.append(
                DeviceFrame(
                    deviceID: deviceID, connectionID: connectionID,
                    message: try readJSON(from: &r, depth: 0), closeAfter: closeAfter))
        }
        try r.expectEnd()
        return frames
    }

    /// The value's own structure (not JSON text): a `.raw` payload stays the provider's bytes
    /// and nothing needs parsing on the receiving side.
    static func write(_ value: JSONValue, to w: inout ByteWriter) {
        switch value {
        case .null: w.u8(0)
        case .bool(let b): w.u8(b ? 2 : 1)
        case .int(let i):
            w.u8(3)
            w.put(i)
        case .double(let d):
            w.u8(4)
            w.put(d)
        case .string(let s):
            w.u8(5)
            w.put(s)
        case .array(let items):
            w.u8(6)
            w.u64(UInt64(items.count))
            for item in items { write(item, to: &w) }
        case .object(let object):
            w.u8(7)
            w.u64(UInt64(object.members.count))
            for member in object.members {
                w.put(member.key)
                write(member.value, to: &w)
            }
        case .raw(let bytes):
            w.u8(8)
            w.blob(bytes)
        }
    }

    static func readJSON(from r: inout ByteReader, depth: Int, maxDepth: Int = maxJSONDepth) throws(StateStoreError) -> JSONValue {
        guard depth < maxDepth else { throw r.damaged("JSON nested deeper than \(maxDepth)") }
        switch try r.u8() {
        case 0: return .null
        case 1: return .bool(false)
        case 2: return .bool(true)
        case 3: return .int(try r.take())
        case 4: return .double(try r.take())
        case 5: return .string(try r.take())
        case 6:
            let count = try r.count()
            var items: [JSONValue] = []
            for _ in 0..<count { items.append(try readJSON(from: &r, depth: depth + 1, maxDepth: maxDepth)) }
            return .array(items)
        case 7:
            let count = try r.count()
            var members: [(key: String, value: JSONValue)] = []
            for _ in 0..<count { members.append((try r.take(), try readJSON(from: &r, depth: depth + 1, maxDepth: maxDepth))) }
            return .object(JSONObject(members))
        case 8: return .raw(try r.bytes())
        case let other: throw r.damaged("JSON kind \(other)")
        }
    }
}

extension TokenKind: StateCodable {}
extension Authorization: StateCodable {}
extension AppState: StateCodable {}
extension DeferReason: StateCodable {}
extension Display: StateCodable {}
