/// Everything the emulator knows about one request to `/3/device/…`, accepted or rejected.
public struct NotificationRecord: Sendable {
    /// Monotonic, assigned by the store; later records have larger numbers.
    public var sequence: UInt64 = 0
    public var apnsID: String
    /// Sandbox only: the `apns-unique-id` returned to the provider.
    public var uniqueID: String?
    /// The device token as it appeared in the path (may be malformed on rejected requests).
    public var token: String
    public var topic: String?
    /// The effective push type: the header's, or the one implied by the topic, else alert.
    public var pushType: String?
    /// True when the request carried an `apns-push-type` header.
    public var pushTypeHeaderPresent: Bool
    public var priority: Int
    /// `apns-expiration` in seconds, when sent.
    public var expiration: Int64?
    public var collapseID: String?
    public var environment: APNsEnvironment
    public var status: Int
    public var reason: String?
    /// 410 only: the `timestamp` returned (ms).
    public var timestampMs: Int64?
    public var payload: [UInt8]
    /// The body's real size (payload may be cut at the buffering cap).
    public var payloadSize: Int
    public var receivedAtMs: Int64
    /// Which rule decided the response, in plain words.
    public var explanation: String
    public var connectionID: UInt64
    public var streamID: Int32
    public var method: String?
    public var path: String?
    public var requestHeaders: [(name: String, value: String)]
    /// Some request header fields are missing from `requestHeaders` (the list was over the limit).
    public var headersTruncated = false
    public var teamID: String?
    public var keyID: String?
    public var jwtHeader: String?
    public var jwtClaims: String?
    /// nil when the request carried no provider token.
    public var jwtVerified: Bool?
    public var deviceID: String?
    public var bundleID: String?
    public var outcome: DeliveryOutcome
    /// App callbacks iOS ran for it (device-model.md), including `didReceive` after a tap.
    public var callbacks: [String] = []
    /// What the user saw: banner, notificationCenter or none (nil until it reached a device).
    public var display: String?
    /// When the device acknowledged it (ms).
    public var deliveredAtMs: Int64?
    /// It waited in the store while the device was offline.
    public var wasStored = false
    /// What the system left out or why it dropped the notification (delivery rules).
    public var deliveryNote: String?
    /// When the answer was decided (ms).
    public var respondedAtMs: Int64?
    /// The fault rule that acted on the request, if any.
    public var faultRuleID: String?
    /// Certificate connections: the client certificate's subject.
    public var certificateSubject: String?

    /// `explanation` with the delivery details in words.
    public var fullExplanation: String {
        guard outcome == .delivered || outcome == .droppedBySystem || outcome == .coalesced, display != nil else {
            return explanation
        }
        var parts = [explanation]
        if !callbacks.isEmpty { parts.append("callbacks " + callbacks.joined(separator: ", ")) }
        if let display { parts.append("display \(display)") }
        if let deliveryNote { parts.append(deliveryNote) }
        return parts.joined(separator: "; ")
    }

    public init(apnsID: String, token: String, environment: APNsEnvironment, receivedAtMs: Int64) {
        self.apnsID = apnsID
        self.token = token
        self.pushTypeHeaderPresent = false
        self.priority = 10
        self.environment = environment
        self.status = 0
        self.payload = []
        self.payloadSize = 0
        self.receivedAtMs = receivedAtMs
        self.explanation = ""
        self.connectionID = 0
        self.streamID = 0
        self.requestHeaders = []
        self.outcome = .rejected
    }
}

/// Where an accepted notification ended up. Rejected requests never enter delivery.
public enum DeliveryOutcome: String, Sendable, Codable {
    case rejected
    /// Accepted; not yet delivered or otherwise settled.
    case pending
    case stored
    case delivered
    case expired
    case coalesced
    case throttled
    case deferred
    case droppedBySystem = "dropped-by-system"
}

/// A bounded, newest-first journal of records (a ring buffer). Old records fall off the end
/// once `capacity` is reached, so a long load test cannot grow memory without bound.
public struct RecordStore: Sendable {
    public let capacity: Int
    private var ring: [NotificationRecord] = []
    private var head = 0  // index of the oldest record once the ring is full
    public private(set) var nextSequence: UInt64 = 1
    /// Records that fell off the end (for /info and metrics).
    public private(set) var evicted: UInt64 = 0
    /// When on, appends and updates note the sequence numbers they touched.
    public var trackChanges = false
    private var changes: [UInt64] = []

    public mutating func takeChanges() -> [UInt64] {
        defer { changes.removeAll(keepingCapacity: true) }
        return changes
    }

    public init(capacity: Int) {
        precondition(capacity > 0)
        self.capacity = capacity
    }

    public var count: Int { ring.count }

    /// Keeps sequence numbers increasing across a reset, so clients polling with `since`
    /// never see a number twice.
    public mutating func continueSequence(from next: UInt64) {
        nextSequence = max(nextSequence, next)
    }

    /// Appends a record; returns its sequence number and the record that fell off the end, so
    /// the caller can release it outside any lock.
    @discardableResult
    public mutating func append(_ record: NotificationRecord) -> (sequence: UInt64, evicted: NotificationRecord?) {
        var moved = record
        let full = ring.count == capacity
        let sequence = append(moving: &moved)
        return (sequence, full ? moved : nil)
    }

    /// Appends by moving `record` into the journal, without copying its strings and arrays;
    /// `record` comes back holding the record that fell off the end (once the journal is
    /// full), for the caller to release outside any lock. This runs once per request.
    @discardableResult
    public mutating func append(moving record: inout NotificationRecord) -> UInt64 {
        record.sequence = nextSequence
        nextSequence += 1
        let sequence = record.sequence
        if trackChanges { changes.append(sequence) }
        if ring.count < capacity {
            if ring.isEmpty { ring.reserveCapacity(min(capacity, 4096)) }
            ring.append(record)
            return sequence
        }
        swap(&ring[head], &record)
        head = (head + 1) % capacity
        evicted += 1
        return sequence
    }

    /// Records newest first, filtered, at most `limit`.
    public func newestFirst(limit: Int, where matches: (NotificationRecord) -> Bool = { _ in true }) -> [NotificationRecord] {
        var out: [NotificationRecord] = []
        guard limit > 0 else { return out }
        let n = ring.count
        var i = 0
        while i < n {
            // Newest is just before `head` (or at the end while the ring is filling).
            let index = (head + n - 1 - i) % n
            let record = ring[index]
            if matches(record) {
                out.append(record)
                if out.count == limit { break }
            }
            i += 1
        }
        return out
    }

    /// Changes the record with the given sequence number, if it is still kept.
    @discardableResult
    public mutating func update(sequence: UInt64, _ change: (inout NotificationRecord) -> Void) -> Bool {
        guard let index = physicalIndex(of: sequence) else { return false }
        change(&ring[index])
        if trackChanges, changes.last != sequence { changes.append(sequence) }
        return true
    }

    public func record(sequence: UInt64) -> NotificationRecord? {
        physicalIndex(of: sequence).map { ring[$0] }
    }

    /// Sequence numbers increase from the oldest record to the newest, so a binary search over
    /// the ring's logical order finds one (they have gaps after a filtered delete).
    private func physicalIndex(of sequence: UInt64) -> Int? {
        let n = ring.count
        guard n > 0 else { return nil }
        // Most updates are for the record just appended.
        let newest = (head + n - 1) % n
        if ring[newest].sequence == sequence { return newest }
        var low = 0
        var high = n - 1
        while low <= high {
            let mid = (low + high) / 2
            let index = (head + mid) % n
            let value = ring[index].sequence
            if value == sequence { return index }
            if value < sequence { low = mid + 1 } else { high = mid - 1 }
        }
        return nil
    }

    public mutating func removeAll(where matches: (NotificationRecord) -> Bool) -> Int {
        let kept = newestFirst(limit: ring.count) { !matches($0) }.reversed()
        let removed = ring.count - kept.count
        ring = Array(kept)
        head = 0
        return removed
    }
}
