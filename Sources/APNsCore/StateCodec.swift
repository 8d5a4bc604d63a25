/// A compact binary form of the rows a store keeps as blobs: journal records, waiting
/// notifications and fault rules. Backend-neutral (SQLite blobs today, Redis values later);
/// pure Swift, no unsafe code. Each value starts with a format byte so a reader can refuse
/// what it does not know instead of misreading it.
public enum StateCodec {
    static let recordFormat: UInt8 = 1
    static let notificationFormat: UInt8 = 1
    static let faultsFormat: UInt8 = 1

    // MARK: Records

    /// Every field but `accountedBytes`, which the journal works out again when it takes the
    /// record back.
    public static func encode(_ r: NotificationRecord) -> [UInt8] {
        var w = ByteWriter(capacity: 512 + r.payload.count)
        w.u8(recordFormat)
        w.u64(r.sequence)
        w.string(r.apnsID)
        w.optionalString(r.uniqueID)
        w.string(r.token)
        w.optionalString(r.topic)
        w.optionalString(r.pushType)
        w.bool(r.pushTypeHeaderPresent)
        w.int(Int64(r.priority))
        w.optionalInt(r.expiration)
        w.optionalString(r.collapseID)
        w.string(r.environment.rawValue)
        w.int(Int64(r.status))
        w.optionalString(r.reason)
        w.optionalInt(r.timestampMs)
        w.blob(r.payload)
        w.int(Int64(r.payloadSize))
        w.int(r.receivedAtMs)
        w.string(r.explanation)
        w.u64(r.connectionID)
        w.int(Int64(r.streamID))
        w.optionalString(r.method)
        w.optionalString(r.path)
        w.u64(UInt64(r.requestHeaders.count))
        for header in r.requestHeaders {
            w.string(header.name)
            w.string(header.value)
        }
        w.bool(r.headersTruncated)
        w.optionalString(r.teamID)
        w.optionalString(r.keyID)
        w.optionalString(r.jwtHeader)
        w.optionalString(r.jwtClaims)
        w.u8(r.jwtVerified.map { $0 ? 2 : 1 } ?? 0)
        w.optionalString(r.deviceID)
        w.optionalString(r.bundleID)
        w.string(r.outcome.rawValue)
        w.u64(UInt64(r.callbacks.count))
        for callback in r.callbacks { w.string(callback) }
        w.optionalString(r.display)
        w.optionalInt(r.deliveredAtMs)
        w.bool(r.wasStored)
        w.optionalString(r.deliveryNote)
        w.optionalInt(r.respondedAtMs)
        w.optionalString(r.faultRuleID)
        w.optionalString(r.certificateSubject)
        return w.bytes
    }

    public static func decodeRecord(_ bytes: [UInt8]) throws(StateStoreError) -> NotificationRecord {
        var r = ByteReader(bytes, what: "journal record")
        try r.expectFormat(recordFormat)
        let sequence = try r.u64()
        let apnsID = try r.string()
        let uniqueID = try r.optionalString()
        let token = try r.string()
        let topic = try r.optionalString()
        let pushType = try r.optionalString()
        let pushTypeHeaderPresent = try r.bool()
        let priority = try r.int()
        let expiration = try r.optionalInt()
        let collapseID = try r.optionalString()
        let environment = try r.enumValue(APNsEnvironment.self)
        var record = NotificationRecord(apnsID: apnsID, token: token, environment: environment, receivedAtMs: 0)
        record.sequence = sequence
        record.uniqueID = uniqueID
        record.topic = topic
        record.pushType = pushType
        record.pushTypeHeaderPresent = pushTypeHeaderPresent
        record.priority = Int(priority)
        record.expiration = expiration
        record.collapseID = collapseID
        record.status = Int(try r.int())
        record.reason = try r.optionalString()
        record.timestampMs = try r.optionalInt()
        record.payload = try r.bytes()
        record.payloadSize = Int(try r.int())
        record.receivedAtMs = try r.int()
        record.explanation = try r.string()
        record.connectionID = try r.u64()
        record.streamID = Int32(truncatingIfNeeded: try r.int())
        record.method = try r.optionalString()
        record.path = try r.optionalString()
        let headerCount = try r.count()
        var headers: [(name: String, value: String)] = []
        headers.reserveCapacity(headerCount)
        for _ in 0..<headerCount { headers.append((try r.string(), try r.string())) }
        record.requestHeaders = headers
        record.headersTruncated = try r.bool()
        record.teamID = try r.optionalString()
        record.keyID = try r.optionalString()
        record.jwtHeader = try r.optionalString()
        record.jwtClaims = try r.optionalString()
        switch try r.u8() {
        case 0: record.jwtVerified = nil
        case 1: record.jwtVerified = false
        default: record.jwtVerified = true
        }
        record.deviceID = try r.optionalString()
        record.bundleID = try r.optionalString()
        record.outcome = try r.enumValue(DeliveryOutcome.self)
        let callbackCount = try r.count()
        var callbacks: [String] = []
        for _ in 0..<callbackCount { callbacks.append(try r.string()) }
        record.callbacks = callbacks
        record.display = try r.optionalString()
        record.deliveredAtMs = try r.optionalInt()
        record.wasStored = try r.bool()
        record.deliveryNote = try r.optionalString()
        record.respondedAtMs = try r.optionalInt()
        record.faultRuleID = try r.optionalString()
        record.certificateSubject = try r.optionalString()
        try r.expectEnd()
        return record
    }

    // MARK: Waiting notifications

    public static func encode(_ n: PendingNotification) -> [UInt8] {
        var w = ByteWriter(capacity: 256 + n.payload.count)
        w.u8(notificationFormat)
        w.u64(n.sequence)
        w.string(n.apnsID)
        w.string(n.token)
        w.string(n.topic)
        w.string(n.deviceID)
        w.string(n.bundleID)
        w.string(n.pushType.rawValue)
        w.int(Int64(n.priority))
        w.optionalString(n.collapseID)
        w.optionalInt(n.storeUntilMs)
        w.blob(n.payload)
        w.bool(n.content.isVisible)
        w.bool(n.content.contentAvailable)
        w.bool(n.content.mutableContent)
        w.bool(n.wasStored)
        return w.bytes
    }

    public static func decodeNotification(_ bytes: [UInt8]) throws(StateStoreError) -> PendingNotification {
        var r = ByteReader(bytes, what: "waiting notification")
        try r.expectFormat(notificationFormat)
        let n = PendingNotification(
            sequence: try r.u64(), apnsID: try r.string(), token: try r.string(), topic: try r.string(),
            deviceID: try r.string(), bundleID: try r.string(), pushType: try r.enumValue(PushType.self),
            priority: Int(try r.int()), collapseID: try r.optionalString(), storeUntilMs: try r.optionalInt(),
            payload: try r.bytes(),
            content: PushContent(isVisible: try r.bool(), contentAvailable: try r.bool(), mutableContent: try r.bool()),
            wasStored: try r.bool())
        try r.expectEnd()
        return n
    }

    // MARK: Fault rules

    public static func encode(_ faults: FaultRulesSnapshot) -> [UInt8] {
        var w = ByteWriter(capacity: 128 * (faults.rules.count + 1))
        w.u8(faultsFormat)
        w.int(Int64(faults.nextNumber))
        w.u64(UInt64(faults.rules.count))
        for rule in faults.rules {
            w.string(rule.id)
            w.optionalString(rule.match.token)
            w.optionalString(rule.match.topic)
            w.optionalString(rule.match.pushType)
            w.optionalInt(rule.match.priority.map(Int64.init))
            w.optionalString(rule.match.environment?.rawValue)
            w.optionalInt(rule.match.connectionID.map { Int64(bitPattern: $0) })
            switch rule.action.kind {
            case .none:
                w.u8(0)
            case .respond(let status, let reason):
                w.u8(1)
                w.int(Int64(status))
                w.string(reason)
            case .resetStream(let code):
                w.u8(2)
                w.int(Int64(code))
            case .goAway(let reason, let lastStreamID, let code):
                w.u8(3)
                w.optionalString(reason)
                w.optionalInt(lastStreamID.map(Int64.init))
                w.int(Int64(code))
            case .closeConnection:
                w.u8(4)
            case .maxConcurrentStreams(let limit):
                w.u8(5)
                w.int(Int64(limit))
            }
            w.int(Int64(rule.action.delayMs))
            w.int(Int64(rule.action.jitterMs))
            w.optionalInt(rule.times.map(Int64.init))
            w.int(Int64(rule.after))
            w.optionalDouble(rule.probability)
            w.optionalInt(rule.seed.map { Int64(bitPattern: $0) })
            w.int(Int64(rule.matched))
            w.int(Int64(rule.fired))
        }
        return w.bytes
    }

    public static func decodeFaults(_ bytes: [UInt8]) throws(StateStoreError) -> FaultRulesSnapshot {
        var r = ByteReader(bytes, what: "fault rules")
        try r.expectFormat(faultsFormat)
        let nextNumber = Int(try r.int())
        let count = try r.count()
        var rules: [FaultRule] = []
        for _ in 0..<count {
            let id = try r.string()
            var match = FaultMatch()
            match.token = try r.optionalString()
            match.topic = try r.optionalString()
            match.pushType = try r.optionalString()
            match.priority = try r.optionalInt().map { Int($0) }
            match.environment = try r.optionalString().map { (text: String) throws(StateStoreError) -> APNsEnvironment in
                guard let value = APNsEnvironment(rawValue: text) else { throw r.damaged("environment \(text)") }
                return value
            }
            match.connectionID = try r.optionalInt().map { UInt64(bitPattern: $0) }
            let kind: FaultAction.Kind
            switch try r.u8() {
            case 0: kind = .none
            case 1: kind = .respond(status: Int(try r.int()), reason: try r.string())
            case 2: kind = .resetStream(errorCode: UInt32(truncatingIfNeeded: try r.int()))
            case 3: kind = .goAway(reason: try r.optionalString(), lastStreamID: try r.optionalInt().map { Int32(truncatingIfNeeded: $0) },
                                   errorCode: UInt32(truncatingIfNeeded: try r.int()))
            case 4: kind = .closeConnection
            case 5: kind = .maxConcurrentStreams(UInt32(truncatingIfNeeded: try r.int()))
            case let other: throw r.damaged("fault action \(other)")
            }
            let action = FaultAction(kind: kind, delayMs: Int(try r.int()), jitterMs: Int(try r.int()))
            let times = try r.optionalInt().map { Int($0) }
            let after = Int(try r.int())
            let probability = try r.optionalDouble()
            let seed = try r.optionalInt().map { UInt64(bitPattern: $0) }
            var rule = FaultRule(id: id, match: match, action: action, times: times, after: after, probability: probability, seed: seed)
            rule.restoreCounts(matched: Int(try r.int()), fired: Int(try r.int()))
            rules.append(rule)
        }
        try r.expectEnd()
        return FaultRulesSnapshot(rules: rules, nextNumber: nextNumber)
    }
}

/// Appends values: unsigned LEB128 varints, zigzag for signed numbers, length-prefixed bytes.
struct ByteWriter {
    var bytes: [UInt8] = []

    init(capacity: Int) { bytes.reserveCapacity(capacity) }

    mutating func u8(_ value: UInt8) { bytes.append(value) }

    mutating func u64(_ value: UInt64) {
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
        var value = value
        value.withUTF8 { utf8 in
            u64(UInt64(utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }

    mutating func blob(_ value: [UInt8]) {
        u64(UInt64(value.count))
        bytes.append(contentsOf: value)
    }

    mutating func optionalString(_ value: String?) {
        guard let value else { return bytes.append(0) }
        bytes.append(1)
        string(value)
    }

    mutating func optionalInt(_ value: Int64?) {
        guard let value else { return bytes.append(0) }
        bytes.append(1)
        int(value)
    }

    mutating func optionalDouble(_ value: Double?) {
        guard let value else { return bytes.append(0) }
        bytes.append(1)
        u64(value.bitPattern)
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

    func expectEnd() throws(StateStoreError) {
        guard offset == data.count else { throw damaged("\(data.count - offset) extra bytes") }
    }

    mutating func u8() throws(StateStoreError) -> UInt8 {
        guard offset < data.count else { throw damaged("unexpected end") }
        defer { offset += 1 }
        return data[offset]
    }

    mutating func u64() throws(StateStoreError) -> UInt64 {
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

    mutating func string() throws(StateStoreError) -> String {
        let n = try count()
        defer { offset += n }
        return String(decoding: data[offset..<offset + n], as: UTF8.self)
    }

    mutating func optionalString() throws(StateStoreError) -> String? { try u8() == 0 ? nil : try string() }
    mutating func optionalInt() throws(StateStoreError) -> Int64? { try u8() == 0 ? nil : try int() }
    mutating func optionalDouble() throws(StateStoreError) -> Double? {
        try u8() == 0 ? nil : Double(bitPattern: try u64())
    }

    mutating func enumValue<T: RawRepresentable>(_: T.Type) throws(StateStoreError) -> T where T.RawValue == String {
        let text = try string()
        guard let value = T(rawValue: text) else { throw damaged("unknown value \(text)") }
        return value
    }
}
