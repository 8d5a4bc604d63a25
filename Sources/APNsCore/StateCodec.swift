import HTTPGrammar

/// A compact binary form of the rows a store keeps as blobs: journal records, waiting
/// notifications, fault rules, broadcast channels and devices' Live Activities
/// (LiveActivityPersistence.swift). Backend-neutral (SQLite blobs today, Redis values later);
/// pure Swift, no unsafe code. Each value starts with a format byte so a reader can refuse
/// what it does not know instead of misreading it.
public enum StateCodec {
    /// 2 added the account fields (userID, addressee, crossAccount), 3 a broadcast's reach,
    /// 4 the delivery transitions, 5 the presentation, 6 whether it awaits its device's owner
    /// (with the device, right after the sequence: `RecordDelivery.awaitingOwner`); 1 to 5
    /// are still read.
    static let recordFormat: UInt8 = 6
    static let notificationFormat: UInt8 = 1
    static let faultsFormat: UInt8 = 1
    static let channelFormat: UInt8 = 1
    static let liveActivityFormat: UInt8 = 1
    /// Stored JSON (a Live Activity's data) may nest this deep: past the parser's 128.
    static let maxStoredJSONDepth = 130

    // MARK: Records

    /// Every field but `accountedBytes`, which the journal works out again when it takes the
    /// record back. `decodeRecord` reads the same fields in the same order.
    public static func encode(_ r: NotificationRecord) -> [UInt8] {
        if let kept = r.keptEncoded { return r.keptDeliveryChanged ? encode(decodeKept(r)) : kept }
        // The journal's estimate is above what the record encodes to: one allocation, no growth.
        var w = ByteWriter(capacity: r.approximateBytes)
        write(record: r, into: &w)
        return w.bytes
    }

    /// What `encode(_:)` makes of a record not kept encoded, written where `w` is.
    static func write(record r: NotificationRecord, into w: inout ByteWriter) {
        w.u8(recordFormat)
        w.put(r.sequence)
        // Read before the rest by an instance that keeps the record encoded.
        if r.delivery.awaitingOwner, let deviceID = r.deviceID {
            w.u8(1)
            w.put(deviceID)
        } else {
            w.u8(0)
        }
        w.id(r.apnsPushID)
        w.optionalID(r.uniquePushID)
        w.put(r.token)
        w.put(r.topic)
        w.put(r.pushType)
        w.put(r.pushTypeHeaderPresent)
        w.put(r.priority)
        w.put(r.expiration)
        w.put(r.collapseID)
        w.put(r.environment)
        w.put(r.status)
        w.put(r.reason)
        w.put(r.timestampMs)
        w.blob(r.payload)
        w.put(r.payloadSize)
        w.put(r.receivedAtMs)
        w.put(r.explanation)
        w.put(r.connectionID)
        w.put(r.streamID)
        w.put(r.method)
        w.put(r.path)
        w.u64(UInt64(r.requestHeaders.count))
        for header in r.requestHeaders {
            w.put(header.name)
            w.put(header.value)
        }
        w.put(r.headersTruncated)
        w.put(r.teamID)
        w.put(r.keyID)
        w.put(r.jwtHeader)
        w.put(r.jwtClaims)
        w.u8(r.jwtVerified.map { $0 ? 2 : 1 } ?? 0)
        w.put(r.deviceID)
        w.put(r.bundleID)
        w.put(r.outcome)
        w.put(r.callbacks)
        w.put(r.display)
        w.put(r.deliveredAtMs)
        w.put(r.wasStored)
        w.put(r.deliveryNote)
        w.put(r.respondedAtMs)
        w.put(r.faultRuleID)
        w.put(r.certificateSubject)
        w.put(r.userID)
        w.put(r.addressee)
        w.put(r.crossAccount)
        encode(r.broadcast, into: &w)
        w.u64(UInt64(r.transitionCount))
        r.forEachTransition { atMs, step in
            w.put(atMs)
            w.put(step.code)
        }
        encode(r.presentation, into: &w)
    }

    private static func encode(_ p: Presentation?, into w: inout ByteWriter) {
        guard let p else { return w.put(false) }
        w.put(true)
        w.put(p.title)
        w.put(p.subtitle)
        w.put(p.body)
        w.put(p.category)
        w.put(p.categoryRegistered)
        w.u64(UInt64(p.actions.count))
        for action in p.actions {
            w.put(action.identifier)
            w.put(action.title)
            w.u8((action.foreground ? 1 : 0) | (action.destructive ? 2 : 0) | (action.authenticationRequired ? 4 : 0))
            w.put(action.textInput?.buttonTitle)
            w.put(action.textInput?.placeholder)
        }
        w.put(p.threadID)
        w.put(p.requestedLevel?.rawValue)
        w.put(p.level.rawValue)
        w.put(p.sound.rawValue)
        w.put(p.screenLit)
        w.put(p.listed)
        w.put(p.badge)
        w.put(p.heldUntilMs)
        w.put(p.relevanceScore)
        w.put(p.summaryArg)
        w.put(p.summaryArgCount)
        w.put(p.sender)
        w.put(p.response?.actionIdentifier)
        if let response = p.response {
            w.put(response.userText)
            w.put(response.atMs)
        }
    }

    private static func decodePresentation(_ r: inout ByteReader) throws(StateStoreError) -> Presentation? {
        guard try r.take() as Bool else { return nil }
        var p = Presentation()
        p.title = try r.take()
        p.subtitle = try r.take()
        p.body = try r.take()
        p.category = try r.take()
        p.categoryRegistered = try r.take()
        let count = try r.count()
        guard count <= NotificationSetup.maxActions else { throw r.damaged("\(count) actions") }
        for _ in 0..<count {
            var action = NotificationAction(identifier: try r.take(), title: try r.take())
            let flags = try r.u8()
            action.foreground = flags & 1 != 0
            action.destructive = flags & 2 != 0
            action.authenticationRequired = flags & 4 != 0
            let button: String? = try r.take()
            let placeholder: String? = try r.take()
            if let button { action.textInput = NotificationAction.TextInput(buttonTitle: button, placeholder: placeholder ?? "") }
            p.actions.append(action)
        }
        p.threadID = try r.take()
        let requested: String? = try r.take()
        p.requestedLevel = requested.flatMap(InterruptionLevel.init(rawValue:))
        let level: String = try r.take()
        let sound: String = try r.take()
        guard let knownLevel = InterruptionLevel(rawValue: level), let knownSound = SoundOutcome(rawValue: sound) else {
            throw r.damaged("presentation level \(level) or sound \(sound)")
        }
        p.level = knownLevel
        p.sound = knownSound
        p.screenLit = try r.take()
        p.listed = try r.take()
        p.badge = try r.take()
        p.heldUntilMs = try r.take()
        p.relevanceScore = try r.take()
        p.summaryArg = try r.take()
        p.summaryArgCount = try r.take()
        p.sender = try r.take()
        let action: String? = try r.take()
        if let action { p.response = NotificationResponse(actionIdentifier: action, userText: try r.take(), atMs: try r.take()) }
        return p
    }

    private static func encode(_ reach: BroadcastReach?, into w: inout ByteWriter) {
        guard let reach else { return w.put(false) }
        w.put(true)
        w.put(reach.channelID)
        w.put(reach.subscribers)
        w.put(reach.reached)
        w.put(reach.omitted)
        let outcomes = reach.outcomes.sorted { $0.key.rawValue < $1.key.rawValue }
        w.u64(UInt64(outcomes.count))
        for (outcome, count) in outcomes {
            w.put(outcome)
            w.put(count)
        }
        w.u64(UInt64(reach.deliveries.count))
        for delivery in reach.deliveries {
            w.put(delivery.deviceID)
            w.put(delivery.activityID)
            w.put(delivery.outcome)
            w.put(delivery.explanation)
            w.put(delivery.fromStore)
        }
    }

    private static func decodeReach(_ r: inout ByteReader) throws(StateStoreError) -> BroadcastReach? {
        guard try r.take() as Bool else { return nil }
        var reach = BroadcastReach(channelID: try r.take())
        reach.subscribers = try r.take()
        reach.reached = try r.take()
        reach.omitted = try r.take()
        for _ in 0..<(try r.count()) {
            let outcome: DeliveryOutcome = try r.take()
            let count: Int = try r.take()
            reach.outcomes[outcome] = count
        }
        for _ in 0..<(try r.count()) {
            reach.deliveries.append(
                BroadcastReach.Delivery(
                    deviceID: try r.take(), activityID: try r.take(), outcome: try r.take(), explanation: try r.take(), fromStore: try r.take()))
        }
        return reach
    }

    /// A record as `decodeRecord` reads it, or kept encoded (`NotificationRecord.keptEncoded`)
    /// when nothing needs its fields yet: one with a collapse id is decoded at once, since a
    /// replica tracks what is on screen per collapse id as it applies records.
    /// A record awaiting its owner comes kept with `deviceID` and `delivery.awaitingOwner` set
    /// (read from its head), for the hand-off it stands for.
    static func recordKeptEncoded(_ bytes: [UInt8]) throws(StateStoreError) -> NotificationRecord {
        let head = try recordHead(bytes)
        if head.hasCollapseID { return try decodeRecord(bytes) }
        var kept = NotificationRecord(keptEncoded: bytes, sequence: head.sequence)
        if let device = head.awaitingOwnerDevice {
            kept.deviceID = device
            kept.delivery.awaitingOwner = true
        }
        return kept
    }

    /// What a follower reads of an encoded record before keeping it: its number, the device
    /// whose owner it awaits (if it does), and whether it has a collapse id.
    static func recordHead(_ bytes: [UInt8]) throws(StateStoreError) -> (sequence: UInt64, awaitingOwnerDevice: String?, hasCollapseID: Bool) {
        var r = ByteReader(bytes, what: "journal record")
        let format = try r.expectFormat(in: 1...recordFormat)
        let sequence: UInt64 = try r.take()
        var awaitingOwner: String?
        if format >= 6, try r.u8() == 1 { awaitingOwner = try r.take() as String }
        try r.skipBytes()  // apnsID
        try r.skipOptionalBytes()  // uniqueID
        try r.skipBytes()  // token
        try r.skipOptionalBytes()  // topic
        try r.skipOptionalBytes()  // pushType
        _ = try r.u8()  // pushTypeHeaderPresent
        _ = try r.u64()  // priority
        if try r.u8() != 0 { _ = try r.u64() }  // expiration
        return (sequence, awaitingOwner, try r.u8() != 0)
    }

    /// A record kept encoded, decoded (with the journal's accounting it carried). Only its
    /// start was read when its row arrived (the row list around it was checked whole), so a
    /// record damaged further in is found here: the record says so rather than take the
    /// instance down.
    static func decodeKept(_ kept: NotificationRecord) -> NotificationRecord {
        guard let bytes = kept.keptEncoded else { return kept }
        var record: NotificationRecord
        do {
            record = try decodeRecord(bytes)
        } catch {
            record = NotificationRecord(apnsID: "", token: "", environment: .sandbox, receivedAtMs: 0)
            record.sequence = kept.sequence
            record.explanation = "this record could not be read back: \(error)"
        }
        record.accountedBytes = kept.accountedBytes
        record.headerListBytes = kept.headerListBytes
        if kept.keptDeliveryChanged { record.delivery = kept.delivery }
        return record
    }

    public static func decodeRecord(_ bytes: [UInt8]) throws(StateStoreError) -> NotificationRecord {
        try decodeRecord(bytes, reading: .all)
    }

    /// The delivery part of an encoded record, passing over the rest without reading it (a
    /// record kept encoded that this instance routes: `RecordStore.update`). A damaged record
    /// gives an empty part.
    public static func delivery(ofRecord bytes: [UInt8]) -> RecordDelivery {
        (try? decodeRecord(bytes, reading: .delivery))?.delivery ?? RecordDelivery()
    }

    /// What an owner routes a hand-off from (`RecordStore.takeForRouting`): the delivery part
    /// and the fields a notification is built from (`World.handedOffNotification`), the rest
    /// passed over. Nil when the record is damaged.
    public static func handOff(ofRecord bytes: [UInt8]) -> NotificationRecord? {
        try? decodeRecord(bytes, reading: .handOff)
    }

    /// Whether an encoded record's apns-id or apns-unique-id is `id` (its UTF-8 bytes; ASCII
    /// letters compared without case, as the admin API looks records up), read in place: a
    /// follower finds one record among thousands it keeps encoded without decoding them.
    public static func record(_ bytes: [UInt8], hasID id: [UInt8]) -> Bool {
        var r = ByteReader(bytes, what: "journal record")
        do {
            let format = try r.expectFormat(in: 1...recordFormat)
            _ = try r.u64()  // sequence
            if format >= 6, try r.u8() == 1 { try r.skipBytes() }  // awaiting its owner: the device
            if try r.textMatches(id) { return true }
            return try r.u8() != 0 && r.textMatches(id)  // uniqueID
        } catch {
            return false
        }
    }

    /// Which fields `decodeRecord` reads; the others are passed over.
    private enum RecordFields {
        case all
        /// `RecordDelivery` alone.
        case delivery
        /// `RecordDelivery`, and apnsID, token, pushType, priority, expiration, collapseID,
        /// payload, payloadSize, receivedAtMs, deviceID and bundleID.
        case handOff
    }

    private static func decodeRecord(_ bytes: [UInt8], reading: RecordFields) throws(StateStoreError) -> NotificationRecord {
        // Filled in through `inout`, and returned after one `try`: built and returned here
        // across every read, the record was copied and destroyed whole on its way out (about
        // 1,400 instructions a record).
        var record = NotificationRecord(apnsID: "", token: "", environment: .sandbox, receivedAtMs: 0)
        try read(bytes, reading: reading, into: &record)
        return record
    }

    private static func read(_ bytes: [UInt8], reading: RecordFields, into record: inout NotificationRecord) throws(StateStoreError) {
        let deliveryOnly = reading != .all
        let handOff = reading == .handOff
        var r = ByteReader(bytes, what: "journal record")
        let format = try r.expectFormat(in: 1...recordFormat)
        record.sequence = try r.take()
        if format >= 6, try r.u8() == 1 {
            try r.skipBytes()  // the device id, read below where it always is
            record.delivery.awaitingOwner = true
        }
        if handOff {
            record.apnsID = try r.take()
            try r.skipOptionalBytes()  // uniqueID
            record.token = try r.take()
            try r.skipOptionalBytes()  // topic
            record.pushType = try r.take()
            _ = try r.u8()  // pushTypeHeaderPresent
            record.priority = try r.take()
            record.expiration = try r.take()
            record.collapseID = try r.take()
            try r.skipBytes()  // environment
            _ = try r.u64()  // status
            try r.skipOptionalBytes()  // reason
            if try r.u8() != 0 { _ = try r.u64() }  // timestampMs
            record.payload = try r.bytes()
            record.payloadSize = try r.take()
            record.receivedAtMs = try r.take()
        } else if deliveryOnly {
            try r.skipBytes()  // apnsID
            try r.skipOptionalBytes()  // uniqueID
            try r.skipBytes()  // token
            try r.skipOptionalBytes()  // topic
            try r.skipOptionalBytes()  // pushType
            _ = try r.u8()  // pushTypeHeaderPresent
            _ = try r.u64()  // priority
            if try r.u8() != 0 { _ = try r.u64() }  // expiration
            try r.skipOptionalBytes()  // collapseID
            try r.skipBytes()  // environment
            _ = try r.u64()  // status
            try r.skipOptionalBytes()  // reason
            if try r.u8() != 0 { _ = try r.u64() }  // timestampMs
            try r.skipBytes()  // payload
            _ = try r.u64()  // payloadSize
            _ = try r.u64()  // receivedAtMs
        } else {
            record.apnsID = try r.take()
            record.uniqueID = try r.take()
            record.token = try r.take()
            record.topic = try r.take()
            record.pushType = try r.take()
            record.pushTypeHeaderPresent = try r.take()
            record.priority = try r.take()
            record.expiration = try r.take()
            record.collapseID = try r.take()
            record.environment = try r.take()
            record.status = try r.take()
            record.reason = try r.take()
            record.timestampMs = try r.take()
            record.payload = try r.bytes()
            record.payloadSize = try r.take()
            record.receivedAtMs = try r.take()
        }
        record.explanation = try r.take()
        let headerCount: Int
        if deliveryOnly {
            _ = try r.u64()  // connectionID
            _ = try r.u64()  // streamID
            try r.skipOptionalBytes()  // method
            try r.skipOptionalBytes()  // path
            headerCount = try r.count()
            for _ in 0..<headerCount {
                try r.skipBytes()
                try r.skipBytes()
            }
            _ = try r.u8()  // headersTruncated
            for _ in 0..<4 { try r.skipOptionalBytes() }  // teamID, keyID, jwtHeader, jwtClaims
            _ = try r.u8()  // jwtVerified
            if handOff {
                record.deviceID = try r.take()
                record.bundleID = try r.take()
            } else {
                try r.skipOptionalBytes()  // deviceID
                try r.skipOptionalBytes()  // bundleID
            }
        } else {
            record.connectionID = try r.take()
            record.streamID = try r.take()
            record.method = try r.take()
            record.path = try r.take()
            headerCount = try r.count()
            record.requestHeaders.reserveCapacity(headerCount)
            for _ in 0..<headerCount { record.requestHeaders.append(HeaderField(name: try r.take(), value: try r.take())) }
            record.headersTruncated = try r.take()
            record.teamID = try r.take()
            record.keyID = try r.take()
            record.jwtHeader = try r.take()
            record.jwtClaims = try r.take()
            switch try r.u8() {
            case 0: record.jwtVerified = nil
            case 1: record.jwtVerified = false
            default: record.jwtVerified = true
            }
            record.deviceID = try r.take()
            record.bundleID = try r.take()
        }
        record.outcome = try r.take()
        record.callbacks = try r.take()
        record.display = try r.take()
        record.deliveredAtMs = try r.take()
        record.wasStored = try r.take()
        record.deliveryNote = try r.take()
        if deliveryOnly {
            if try r.u8() != 0 { _ = try r.u64() }  // respondedAtMs
            try r.skipOptionalBytes()  // faultRuleID
            try r.skipOptionalBytes()  // certificateSubject
        } else {
            record.respondedAtMs = try r.take()
            record.faultRuleID = try r.take()
            record.certificateSubject = try r.take()
        }
        if format >= 2 {
            record.userID = try r.take()
            record.addressee = try r.take()
            record.crossAccount = try r.take()
        }
        if format >= 3 { record.broadcast = try decodeReach(&r) }
        if format >= 4 { try decodeTransitions(&r, into: &record.delivery) }
        if format >= 5 { record.presentation = try decodePresentation(&r) }
        try r.expectEnd()
    }

    /// Into `delivery` one by one (its first step inline, no array made and split again).
    private static func decodeTransitions(_ r: inout ByteReader, into delivery: inout RecordDelivery) throws(StateStoreError) {
        let count = try r.count()
        guard count <= RecordDelivery.maxTransitions else {
            throw r.damaged("\(count) transitions, more than \(RecordDelivery.maxTransitions)")
        }
        for _ in 0..<count {
            let atMs: Int64 = try r.take()
            delivery.noteTransition(try r.deliveryStep(), atMs: atMs)
        }
    }

    // MARK: A record's delivery part (`StateChange.recordDelivered`)

    /// 2 added `awaitingOwner`; 1 is still read.
    static let deliveryFormat: UInt8 = 2

    /// The delivery part alone, with the record's sequence number, in the record's own
    /// field order for those fields.
    public static func encodeDelivery(sequence: UInt64, _ d: RecordDelivery) -> [UInt8] {
        var w = ByteWriter(capacity: 96)
        w.u8(deliveryFormat)
        w.put(sequence)
        w.put(d.explanation)
        w.put(d.outcome)
        w.put(d.callbacks)
        w.put(d.display)
        w.put(d.deliveredAtMs)
        w.put(d.wasStored)
        w.put(d.deliveryNote)
        w.put(d.userID)
        w.put(d.addressee)
        w.put(d.crossAccount)
        encode(d.broadcast, into: &w)
        w.u64(UInt64(d.transitionCount))
        d.forEachTransition { atMs, step in
            w.put(atMs)
            w.put(step.code)
        }
        encode(d.presentation, into: &w)
        w.put(d.awaitingOwner)
        return w.bytes
    }

    public static func decodeDelivery(_ bytes: [UInt8]) throws(StateStoreError) -> (sequence: UInt64, delivery: RecordDelivery) {
        // Filled in through `inout`, as a record is (`decodeRecord`): returned across every
        // read, the part was copied and destroyed on its way out.
        var d = RecordDelivery()
        let sequence = try readDelivery(bytes, into: &d)
        return (sequence, d)
    }

    private static func readDelivery(_ bytes: [UInt8], into d: inout RecordDelivery) throws(StateStoreError) -> UInt64 {
        var r = ByteReader(bytes, what: "record's delivery")
        let format = try r.expectFormat(in: 1...deliveryFormat)
        let sequence: UInt64 = try r.take()
        d.explanation = try r.take()
        d.outcome = try r.take()
        d.callbacks = try r.take()
        d.display = try r.take()
        d.deliveredAtMs = try r.take()
        d.wasStored = try r.take()
        d.deliveryNote = try r.take()
        d.userID = try r.take()
        d.addressee = try r.take()
        d.crossAccount = try r.take()
        d.broadcast = try decodeReach(&r)
        try decodeTransitions(&r, into: &d)
        d.presentation = try decodePresentation(&r)
        if format >= 2 { d.awaitingOwner = try r.take() }
        try r.expectEnd()
        return sequence
    }

    // MARK: Waiting notifications

    public static func encode(_ n: PendingNotification) -> [UInt8] {
        var w = ByteWriter(capacity: 256 + n.payload.count)
        w.u8(notificationFormat)
        w.put(n.sequence)
        w.id(n.apnsPushID)
        w.put(n.token)
        w.put(n.topic)
        w.put(n.deviceID)
        w.put(n.bundleID)
        w.put(n.pushType)
        w.put(n.priority)
        w.put(n.collapseID)
        w.put(n.storeUntilMs)
        w.blob(n.payload)
        w.put(n.content.isVisible)
        w.put(n.content.contentAvailable)
        w.put(n.content.mutableContent)
        w.put(n.wasStored)
        return w.bytes
    }

    public static func decodeNotification(_ bytes: [UInt8]) throws(StateStoreError) -> PendingNotification {
        var r = ByteReader(bytes, what: "waiting notification")
        try r.expectFormat(notificationFormat)
        var n = PendingNotification(
            sequence: try r.take(), apnsID: try r.take(), token: try r.take(), topic: try r.take(),
            deviceID: try r.take(), bundleID: try r.take(), pushType: try r.take(),
            priority: try r.take(), collapseID: try r.take(), storeUntilMs: try r.take(),
            payload: try r.bytes(),
            content: PushContent(isVisible: try r.take(), contentAvailable: try r.take(), mutableContent: try r.take()),
            wasStored: try r.take())
        try r.expectEnd()
        // Not stored: read again from the payload, as the endpoint read it.
        let read = PushContent.read(n.payload)
        n.content.needsPresentation = read.needsPresentation
        n.content.badge = read.badge
        n.content.contentAvailableMisread = read.contentAvailableMisread
        return n
    }

    // MARK: Fault rules

    public static func encode(_ faults: FaultRulesSnapshot) -> [UInt8] {
        var w = ByteWriter(capacity: 128 * (faults.rules.count + 1))
        w.u8(faultsFormat)
        w.put(faults.nextNumber)
        w.u64(UInt64(faults.rules.count))
        for rule in faults.rules {
            w.put(rule.id)
            w.put(rule.match.token)
            w.put(rule.match.topic)
            w.put(rule.match.pushType)
            w.put(rule.match.priority)
            w.put(rule.match.environment?.rawValue)
            w.put(rule.match.connectionID.map { Int64(bitPattern: $0) })
            switch rule.action.kind {
            case .none:
                w.u8(0)
            case .respond(let status, let reason):
                w.u8(1)
                w.put(status)
                w.put(reason)
            case .resetStream(let code):
                w.u8(2)
                w.put(code)
            case .goAway(let reason, let lastStreamID, let code):
                w.u8(3)
                w.put(reason)
                w.put(lastStreamID)
                w.put(code)
            case .closeConnection:
                w.u8(4)
            case .maxConcurrentStreams(let limit):
                w.u8(5)
                w.put(limit)
            }
            w.put(rule.action.delayMs)
            w.put(rule.action.jitterMs)
            w.put(rule.times)
            w.put(rule.after)
            w.put(rule.probability)
            w.put(rule.seed.map { Int64(bitPattern: $0) })
            w.put(rule.matched)
            w.put(rule.fired)
        }
        return w.bytes
    }

    public static func decodeFaults(_ bytes: [UInt8]) throws(StateStoreError) -> FaultRulesSnapshot {
        var r = ByteReader(bytes, what: "fault rules")
        try r.expectFormat(faultsFormat)
        let nextNumber: Int = try r.take()
        let count = try r.count()
        var rules: [FaultInjectionRule] = []
        for _ in 0..<count {
            let id: String = try r.take()
            var match = FaultMatch()
            match.token = try r.take()
            match.topic = try r.take()
            match.pushType = try r.take()
            match.priority = try r.take()
            match.environment = try (r.take() as String?).map { (text: String) throws(StateStoreError) -> APNsEnvironment in
                guard let value = APNsEnvironment(rawValue: text) else { throw r.damaged("environment \(text)") }
                return value
            }
            match.connectionID = try (r.take() as Int64?).map { UInt64(bitPattern: $0) }
            let kind: FaultAction.Kind
            switch try r.u8() {
            case 0: kind = .none
            case 1: kind = .respond(status: try r.take(), reason: try r.take())
            case 2: kind = .resetStream(errorCode: try r.take())
            case 3: kind = .goAway(reason: try r.take(), lastStreamID: try r.take(), errorCode: try r.take())
            case 4: kind = .closeConnection
            case 5: kind = .maxConcurrentStreams(try r.take())
            case let other: throw r.damaged("fault action \(other)")
            }
            let action = FaultAction(kind: kind, delayMs: try r.take(), jitterMs: try r.take())
            var rule = FaultInjectionRule(
                id: id, match: match, action: action, times: try r.take(), after: try r.take(),
                probability: try r.take(), seed: (try r.take() as Int64?).map { UInt64(bitPattern: $0) })
            rule.restoreCounts(matched: try r.take(), fired: try r.take())
            rules.append(rule)
        }
        try r.expectEnd()
        return FaultRulesSnapshot(rules: rules, nextNumber: nextNumber)
    }
}

extension StateCodec {
    // MARK: Broadcast channels

    /// Everything but the rate limit's window of recent broadcasts (per instance, not kept).
    public static func encode(_ c: BroadcastChannel) -> [UInt8] {
        var w = ByteWriter(capacity: 96 + (c.storedMessage?.payload.count ?? 0))
        w.u8(channelFormat)
        w.put(c.id)
        w.put(c.bundleID)
        w.put(c.environment)
        w.put(c.policy.rawValue)
        w.put(c.createdAtMs)
        w.put(c.deletedAtMs)
        w.put(c.broadcasts)
        w.put(c.lastBroadcastAtMs)
        if let message = c.storedMessage {
            w.u8(1)
            w.put(message.key)
            w.blob(message.payload)
            w.put(message.priority)
            w.put(message.receivedAtMs)
            w.put(message.expiresAtMs)
        } else {
            w.u8(0)
        }
        return w.bytes
    }

    public static func decodeChannel(_ bytes: [UInt8]) throws(StateStoreError) -> BroadcastChannel {
        var r = ByteReader(bytes, what: "broadcast channel")
        try r.expectFormat(channelFormat)
        let id: String = try r.take()
        let bundleID: String = try r.take()
        let environment: APNsEnvironment = try r.take()
        let policyValue: Int = try r.take()
        guard let policy = ChannelStoragePolicy(rawValue: policyValue) else { throw r.damaged("storage policy \(policyValue)") }
        var channel = BroadcastChannel(id: id, bundleID: bundleID, environment: environment, policy: policy, createdAtMs: try r.take())
        channel.deletedAtMs = try r.take()
        channel.broadcasts = try r.take()
        channel.lastBroadcastAtMs = try r.take()
        if try r.u8() != 0 {
            channel.storedMessage = StoredBroadcast(
                key: try r.take(), payload: try r.bytes(), priority: try r.take(), receivedAtMs: try r.take(),
                expiresAtMs: try r.take())
        }
        try r.expectEnd()
        return channel
    }
}

/// A value with a byte form in `StateCodec`'s blobs: integers as zigzag varints (unsigned
/// 64-bit ones as plain varints), texts and lists length-prefixed, an optional as a presence
/// byte and then the value.
protocol StateCodable {
    func write(to w: inout ByteWriter)
    static func read(from r: inout ByteReader) throws(StateStoreError) -> Self
}

extension UInt64: StateCodable {
    func write(to w: inout ByteWriter) { w.u64(self) }
    static func read(from r: inout ByteReader) throws(StateStoreError) -> UInt64 { try r.u64() }
}

extension Int64: StateCodable {
    func write(to w: inout ByteWriter) { w.int(self) }
    static func read(from r: inout ByteReader) throws(StateStoreError) -> Int64 { try r.int() }
}

/// Narrower integers are stored as `Int64` and cut back to size when read.
extension StateCodable where Self: FixedWidthInteger {
    func write(to w: inout ByteWriter) { w.int(Int64(self)) }
    static func read(from r: inout ByteReader) throws(StateStoreError) -> Self { Self(truncatingIfNeeded: try r.int()) }
}

extension Int: StateCodable {}
extension Int32: StateCodable {}
extension UInt32: StateCodable {}

extension Bool: StateCodable {
    func write(to w: inout ByteWriter) { w.bool(self) }
    static func read(from r: inout ByteReader) throws(StateStoreError) -> Bool { try r.u8() != 0 }
}

extension Double: StateCodable {
    func write(to w: inout ByteWriter) { w.u64(bitPattern) }
    static func read(from r: inout ByteReader) throws(StateStoreError) -> Double { Double(bitPattern: try r.u64()) }
}

extension String: StateCodable {
    func write(to w: inout ByteWriter) { w.string(self) }
    static func read(from r: inout ByteReader) throws(StateStoreError) -> String { try r.string() }
}

/// Enumerations are stored as their raw text.
extension StateCodable where Self: RawRepresentable, RawValue == String {
    func write(to w: inout ByteWriter) { w.string(rawValue) }
    static func read(from r: inout ByteReader) throws(StateStoreError) -> Self {
        let text = try r.string()
        guard let value = Self(rawValue: text) else { throw r.damaged("unknown value \(text)") }
        return value
    }
}

extension APNsEnvironment: StateCodable {}
extension DeliveryOutcome: StateCodable {
    /// Matched by its bytes in place, as a delivery step is: through `init(rawValue:)` (a
    /// string switch) it cost 500 instructions, read once per delivery part another instance sends.
    static func read(from r: inout ByteReader) throws(StateStoreError) -> DeliveryOutcome {
        try r.matching(outcomeCodes, what: "delivery outcome")
    }

    private static let outcomeCodes: [(value: DeliveryOutcome, code: [UInt8])] = allCases.map { ($0, Array($0.rawValue.utf8)) }
}
extension PushType: StateCodable {}

extension Optional: StateCodable where Wrapped: StateCodable {
    func write(to w: inout ByteWriter) {
        guard let self else { return w.u8(0) }
        w.u8(1)
        self.write(to: &w)
    }

    static func read(from r: inout ByteReader) throws(StateStoreError) -> Wrapped? {
        try r.u8() == 0 ? nil : try Wrapped.read(from: &r)
    }
}

extension Array: StateCodable where Element: StateCodable {
    func write(to w: inout ByteWriter) {
        w.u64(UInt64(count))
        for element in self { element.write(to: &w) }
    }

    static func read(from r: inout ByteReader) throws(StateStoreError) -> [Element] {
        let count = try r.count()
        var elements: [Element] = []
        elements.reserveCapacity(count)
        for _ in 0..<count { elements.append(try Element.read(from: &r)) }
        return elements
    }
}

/// Appends values: unsigned LEB128 varints, zigzag for signed numbers, length-prefixed bytes.
struct ByteWriter {
    var bytes: [UInt8] = []

    init(capacity: Int) { bytes.reserveCapacity(capacity) }

    mutating func u8(_ value: UInt8) { bytes.append(value) }

    @inline(__always)
    mutating func u64(_ value: UInt64) {
        // Most numbers written are small (counts, lengths, flags): one byte, no loop.
        if value < 0x80 { return bytes.append(UInt8(truncatingIfNeeded: value)) }
        longU64(value)
    }

    private mutating func longU64(_ value: UInt64) {
        var v = value
        while v >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        bytes.append(UInt8(v))
    }

    mutating func int(_ value: Int64) { u64(UInt64(bitPattern: (value << 1) ^ (value >> 63))) }
    mutating func bool(_ value: Bool) { bytes.append(value ? 1 : 0) }

    mutating func string(_ value: String) {
        // A native string lends its bytes without a copy of the string (`withUTF8` needs a
        // `var`, a retain and release a field).
        let lent: Void? = value.utf8.withContiguousStorageIfAvailable { utf8 in
            u64(UInt64(utf8.count))
            bytes.append(contentsOf: utf8)
        }
        if lent == nil {
            let utf8 = Array(value.utf8)
            u64(UInt64(utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }

    /// An id as `string` writes its text; a drawn one's text is written from its bits.
    mutating func id(_ id: PushID) {
        guard let drawn = id.drawn else { return string(id.text) }
        u64(UInt64(UUIDText.count))
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: UUIDText.count))
        var text = bytes.mutableSpan
        UUIDText.write(drawn.high, drawn.low, uppercase: drawn.uppercase, into: &text, at: start)
    }

    /// An id as an optional String is written: nil (`PushID.none`) or the id.
    mutating func optionalID(_ id: PushID) {
        guard id.exists else { return u8(0) }
        u8(1)
        self.id(id)
    }

    mutating func blob(_ value: [UInt8]) {
        u64(UInt64(value.count))
        bytes.append(contentsOf: value)
    }

    /// Starts bytes written with their length ahead of them, as `blob` would, without a buffer
    /// of their own: the length goes in a three-byte varint (padded with continuation bits,
    /// which a reader takes as any varint), filled in by `endLengthPrefixed` once the rest is
    /// written. Longer than such a varint holds (2 MiB), the bytes are moved up for a longer one.
    mutating func beginLengthPrefixed() -> Int {
        let start = bytes.count
        u8(0x80)
        u8(0x80)
        u8(0)
        return start
    }

    mutating func endLengthPrefixed(_ start: Int) {
        let length = bytes.count - start - 3
        if length < 1 << 21 {
            bytes[start] = UInt8(truncatingIfNeeded: length) | 0x80
            bytes[start + 1] = UInt8(truncatingIfNeeded: length >> 7) | 0x80
            bytes[start + 2] = UInt8(truncatingIfNeeded: length >> 14)
        } else {
            var prefix = ByteWriter(capacity: 10)
            prefix.u64(UInt64(length))
            bytes.replaceSubrange(start..<start + 3, with: prefix.bytes)
        }
    }

    /// Appends the value's byte form. (One value a call: Swift 6.3 does not specialize a
    /// parameter pack's elements, and a `put(a, b, c)` cost twice as much per field.)
    @inline(__always)
    mutating func put<Value: StateCodable>(_ value: Value) {
        value.write(to: &self)
    }
}

/// Reads what `ByteWriter` wrote; any inconsistency is a `StateStoreError` naming the value.
struct ByteReader {
    private let data: [UInt8]
    private var offset = 0
    private let what: String

    init(_ bytes: [UInt8], what: String) {
        self.data = bytes
        self.what = what
    }

    func damaged(_ detail: String) -> StateStoreError {
        StateStoreError("a stored \(what) is damaged (\(detail) at byte \(offset))")
    }

    mutating func expectFormat(_ format: UInt8) throws(StateStoreError) {
        let found = try u8()
        guard found == format else {
            throw StateStoreError("a stored \(what) has format \(found); this apns-emulator reads format \(format)")
        }
    }

    /// Reads the format byte; any format in `formats` is accepted and returned.
    mutating func expectFormat(in formats: ClosedRange<UInt8>) throws(StateStoreError) -> UInt8 {
        let found = try u8()
        guard formats.contains(found) else {
            throw StateStoreError(
                "a stored \(what) has format \(found); this apns-emulator reads formats \(formats.lowerBound) to \(formats.upperBound)")
        }
        return found
    }

    func expectEnd() throws(StateStoreError) {
        guard offset == data.count else { throw damaged("\(data.count - offset) extra bytes") }
    }

    func peekU8() throws(StateStoreError) -> UInt8 {
        guard offset < data.count else { throw damaged("unexpected end") }
        return data[offset]
    }

    mutating func u8() throws(StateStoreError) -> UInt8 {
        guard offset < data.count else { throw damaged("unexpected end") }
        defer { offset += 1 }
        return data[offset]
    }

    mutating func u64() throws(StateStoreError) -> UInt64 {
        // Most numbers read are small (lengths, counts, flags): one byte, no loop.
        if offset < data.count, data[offset] < 0x80 {
            defer { offset += 1 }
            return UInt64(data[offset])
        }
        return try longU64()
    }

    private mutating func longU64() throws(StateStoreError) -> UInt64 {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let byte = try u8()
            guard shift < 64 else { throw damaged("varint too long") }
            value |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 { return value }
            shift += 7
        }
    }

    mutating func int() throws(StateStoreError) -> Int64 {
        let raw = try u64()
        return Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1)
    }

    mutating func bool() throws(StateStoreError) -> Bool { try u8() != 0 }

    mutating func count() throws(StateStoreError) -> Int {
        let value = try u64()
        guard value <= UInt64(data.count - offset) else { throw damaged("length \(value)") }
        return Int(value)
    }

    mutating func bytes() throws(StateStoreError) -> [UInt8] {
        let n = try count()
        defer { offset += n }
        return Array(data[offset..<offset + n])
    }

    /// Whether the length-prefixed text here is `text` (ASCII letters compared without case),
    /// passing over it either way.
    mutating func textMatches(_ text: [UInt8]) throws(StateStoreError) -> Bool {
        let n = try count()
        defer { offset += n }
        guard n == text.count else { return false }
        for i in 0..<n where !Self.sameIgnoringCase(data[offset + i], text[i]) { return false }
        return true
    }

    private static func sameIgnoringCase(_ a: UInt8, _ b: UInt8) -> Bool {
        if a == b { return true }
        let lower = a | 0x20
        return lower == b | 0x20 && lower >= UInt8(ascii: "a") && lower <= UInt8(ascii: "z")
    }

    /// A delivery step, matched by its code in place (no text made for it: a record's
    /// transitions are read each time an owner routes a hand-off).
    mutating func deliveryStep() throws(StateStoreError) -> DeliveryLog.Step {
        try matching(Self.stepCodes, what: "delivery step")
    }

    private static let stepCodes: [(value: DeliveryLog.Step, code: [UInt8])] = DeliveryLog.Step.allCases.map { ($0, Array($0.code.utf8)) }

    /// The value whose code is the length-prefixed text here, compared against the codes'
    /// bytes made once: comparing with each value's text made that text and walked it
    /// generically (1,400 instructions a delivery step, two steps a record).
    mutating func matching<Value>(_ codes: [(value: Value, code: [UInt8])], what kind: String) throws(StateStoreError) -> Value {
        let n = try count()
        defer { offset += n }
        for (value, code) in codes where code.count == n && bytes(at: offset, equal: code) { return value }
        throw damaged("\(kind) \(String(decoding: data[offset..<offset + n], as: UTF8.self))")
    }

    private func bytes(at start: Int, equal code: [UInt8]) -> Bool {
        for i in code.indices where data[start + i] != code[i] { return false }
        return true
    }

    /// The record sequence number of the delivery part (`StateChange.recordDelivered`, row
    /// kind 20) that starts here, read without moving on or decoding the part.
    func deliveryPartSequence() throws(StateStoreError) -> UInt64 {
        var ahead = self
        guard try ahead.u8() == 20 else { throw damaged("not a delivery part") }
        _ = try ahead.count()
        _ = try ahead.u8()  // the part's format
        return try ahead.u64()
    }

    /// Passes over length-prefixed bytes (a text or a blob) without reading them.
    mutating func skipBytes() throws(StateStoreError) {
        offset += try count()
    }

    /// Passes over an optional text or blob.
    mutating func skipOptionalBytes() throws(StateStoreError) {
        if try u8() != 0 { try skipBytes() }
    }

    mutating func string() throws(StateStoreError) -> String {
        let n = try count()
        defer { offset += n }
        return String(decoding: data[offset..<offset + n], as: UTF8.self)
    }

    /// Reads a value of the type the context asks for (what `ByteWriter.put` wrote).
    @inline(__always)
    mutating func take<Value: StateCodable>() throws(StateStoreError) -> Value {
        try Value.read(from: &self)
    }
}
