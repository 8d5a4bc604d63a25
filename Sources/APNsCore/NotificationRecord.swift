public import HTTPGrammar

/// Everything the emulator knows about one request to `/3/device/…`, accepted or rejected.
public struct NotificationRecord: Sendable {
    /// Monotonic, assigned by the store; later records have larger numbers.
    public var sequence: UInt64 = 0
    /// The `apns-id`, drawn or the client's (`apnsID` is its text).
    public var apnsPushID: PushID
    /// Sandbox only: the `apns-unique-id` returned to the provider (`uniqueID` is its text).
    public var uniquePushID = PushID.none
    /// The `apns-id` as text (a drawn one is formatted on each read: hot paths use `apnsPushID`).
    public var apnsID: String {
        get { apnsPushID.text }
        set { apnsPushID = PushID(newValue) }
    }
    /// The `apns-unique-id` as text, nil in production (formatted on each read, as `apnsID`).
    public var uniqueID: String? {
        get { uniquePushID.optionalText }
        set { uniquePushID = newValue.map(PushID.init) ?? .none }
    }
    /// The device token as it appeared in the path (may be malformed on rejected requests).
    public var token: String
    public var topic: String?
    /// The effective push type: the header's, or the one implied by the topic (`mdm` for an MDM topic), else alert.
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
    public var connectionID: UInt64
    public var streamID: Int32
    public var method: String?
    public var path: String?
    public var requestHeaders: [HeaderField]
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
    /// What became of it after the answer (all a later change may touch; `RecordDelivery`).
    public var delivery: RecordDelivery
    /// When the answer was decided (ms).
    public var respondedAtMs: Int64?
    /// The fault rule that acted on the request, if any.
    public var faultRuleID: String?
    /// Certificate connections: the client certificate's subject.
    public var certificateSubject: String?
    /// What the journal counted this record as (bytes), when it was added.
    public var accountedBytes = 0
    /// The request's header list size as HTTP/2 counts it (name + value + 32 per field), when
    /// the HTTP/2 layer measured it (0: not known), so `approximateBytes` need not add it up.
    public var headerListBytes = 0
    public static var maxTransitions: Int { RecordDelivery.maxTransitions }
    /// The allowance for a record's fixed part and its texts.
    public static let fixedBytes = 640
    /// A record another instance wrote (`--redis`), kept in its stored form until something
    /// reads it: decoding every record of every instance cost each follower more than half
    /// of what it spent per push. Only `sequence`, `accountedBytes` and `headerListBytes` are
    /// set meanwhile; `RecordStore` decodes it whenever it hands the record out.
    var keptEncoded: [UInt8]?
    /// A record kept encoded whose `delivery` changed since it arrived (another instance's
    /// notification that this one routed): `delivery` holds the current part, which wins over
    /// the encoded one when the record is decoded or written.
    var keptDeliveryChanged = false

    /// `transitions.count` and a walk over them, without building the array.
    var transitionCount: Int { delivery.transitionCount }
    func forEachTransition(_ body: (Int64, DeliveryLog.Step) -> Void) { delivery.forEachTransition(body) }
    mutating func noteTransition(_ step: DeliveryLog.Step, atMs: Int64) { delivery.noteTransition(step, atMs: atMs) }

    // The delivery part's fields, as the record's own.
    /// Which rule decided the response, in plain words.
    public var explanation: String {
        get { delivery.explanation }
        set { delivery.explanation = newValue }
    }
    public var outcome: DeliveryOutcome {
        get { delivery.outcome }
        set { delivery.outcome = newValue }
    }
    /// App callbacks iOS ran for it (docs/device-model.md), including `didReceive` after a tap.
    public var callbacks: [String] {
        get { delivery.callbacks }
        set { delivery.callbacks = newValue }
    }
    /// What the user saw: banner, notificationCenter or none (nil until it reached a device).
    public var display: String? {
        get { delivery.display }
        set { delivery.display = newValue }
    }
    /// When the device acknowledged it (ms).
    public var deliveredAtMs: Int64? {
        get { delivery.deliveredAtMs }
        set { delivery.deliveredAtMs = newValue }
    }
    /// It waited in the store while the device was offline.
    public var wasStored: Bool {
        get { delivery.wasStored }
        set { delivery.wasStored = newValue }
    }
    /// What the system left out or why it dropped the notification (delivery rules).
    public var deliveryNote: String? {
        get { delivery.deliveryNote }
        set { delivery.deliveryNote = newValue }
    }
    /// Who was logged in on the device when it was delivered.
    public var userID: String? {
        get { delivery.userID }
        set { delivery.userID = newValue }
    }
    /// Whom the payload names (the app backend's `addresseePointer`), when it does.
    public var addressee: String? {
        get { delivery.addressee }
        set { delivery.addressee = newValue }
    }
    /// The payload named another account than the one logged in on the device.
    public var crossAccount: Bool {
        get { delivery.crossAccount }
        set { delivery.crossAccount = newValue }
    }
    /// A broadcast's reach (see `broadcast`); nil for device pushes.
    public var broadcastBox: BroadcastReachBox? {
        get { delivery.broadcastBox }
        set { delivery.broadcastBox = newValue }
    }
    /// How it was presented when that needed deciding (a category, Focus…; `presentation`);
    /// boxed, so records without one stay small to copy.
    public var presentationBox: PresentationBox? {
        get { delivery.presentationBox }
        set { delivery.presentationBox = newValue }
    }
    /// The delivery steps the notification went through, each with when (the console's log).
    public var transitions: [(atMs: Int64, step: DeliveryLog.Step)] {
        get { delivery.transitions }
        set { delivery.transitions = newValue }
    }

    /// Roughly what the record occupies: its variable parts plus a fixed allowance for the
    /// rest. Used for the journal's byte budget, so it must be cheap (UTF-8 counts of native
    /// strings are O(1)).
    public var approximateBytes: Int {
        // Inlined: the journal reads it of the record it is adding, an `inout` value; a getter
        // call was handed a copy of the whole record (617 bytes).
        @inline(__always) get {
            var total = Self.fixedBytes + payload.count + token.utf8.count + explanation.utf8.count + apnsPushID.byteCount
            if headerListBytes > 0 {
                total += headerListBytes
            } else {
                for header in requestHeaders { total += header.name.utf8.count + header.value.utf8.count + 32 }
            }
            total += (jwtHeader?.utf8.count ?? 0) + (jwtClaims?.utf8.count ?? 0) + (path?.utf8.count ?? 0)
            if let box = presentationBox { total += box.presentation.approximateBytes }
            return total
        }
    }

    /// The payload is whole (not cut at the recorded payload limit).
    public var hasWholePayload: Bool { payload.count == payloadSize }

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

    /// The record with `delivery` in place of its own (a store reading a record's delivery
    /// row), kept encoded or not.
    public func applying(_ delivery: RecordDelivery) -> NotificationRecord {
        var record = self
        record.delivery = delivery
        if keptEncoded != nil { record.keptDeliveryChanged = true }
        return record
    }

    /// A record kept in its stored form (`keptEncoded`).
    init(keptEncoded bytes: [UInt8], sequence: UInt64) {
        self.init(apnsID: "", token: "", environment: .sandbox, receivedAtMs: 0)
        self.sequence = sequence
        keptEncoded = bytes
    }

    public init(apnsID: String, token: String, environment: APNsEnvironment, receivedAtMs: Int64) {
        self.init(apnsID: PushID(apnsID), token: token, environment: environment, receivedAtMs: receivedAtMs)
    }

    public init(apnsID: PushID, token: String, environment: APNsEnvironment, receivedAtMs: Int64) {
        self.apnsPushID = apnsID
        self.token = token
        self.pushTypeHeaderPresent = false
        self.priority = 10
        self.environment = environment
        self.status = 0
        self.payload = []
        self.payloadSize = 0
        self.receivedAtMs = receivedAtMs
        self.delivery = RecordDelivery()
        self.connectionID = 0
        self.streamID = 0
        self.requestHeaders = []
    }
}

/// The part of a record that changes after the answer: where the notification went and how
/// it was shown. A later change touches nothing else (`RecordStore.update`), so another
/// instance is told of it with this part alone (`StateChange.recordDelivered`), not the whole
/// record again.
public struct RecordDelivery: Sendable {
    public var outcome = DeliveryOutcome.rejected
    /// Which rule decided the response, or what happened since, in plain words.
    public var explanation = ""
    public var callbacks: [String] = []
    public var display: String?
    public var deliveredAtMs: Int64?
    public var wasStored = false
    public var deliveryNote: String?
    public var userID: String?
    public var addressee: String?
    public var crossAccount = false
    public var broadcastBox: BroadcastReachBox?
    public var presentationBox: PresentationBox?
    /// Accepted by an instance for a device another instance owns (`--redis`), and not routed
    /// by that one yet: the record is the hand-off (DeviceOwnership.swift).
    public var awaitingOwner = false
    /// Accepted by the device's owner itself and held until it has read the others' writes
    /// before its own (`World.holdForOrder`). Never stored or sent: it tells this instance's
    /// writer which of its records to release once written.
    public var heldForOrder = false
    /// The delivery steps the notification went through, each with when (the console's log):
    /// at most `maxTransitions`, the first ones and the newest; 16 bytes each, inside
    /// `NotificationRecord.fixedBytes` (the explanation of the current one is `explanation`).
    public var transitions: [(atMs: Int64, step: DeliveryLog.Step)] {
        get {
            guard let firstTransition else { return [] }
            return [firstTransition] + laterTransitions
        }
        set {
            firstTransition = newValue.first
            laterTransitions = Array(newValue.dropFirst())
        }
    }
    /// The first step kept inline: a virtual device's push has only one, and the array would
    /// cost an allocation (and its release) per record.
    private var firstTransition: (atMs: Int64, step: DeliveryLog.Step)?
    private var laterTransitions: [(atMs: Int64, step: DeliveryLog.Step)] = []
    public static let maxTransitions = 12

    public init() {}

    var transitionCount: Int { firstTransition == nil ? 0 : 1 + laterTransitions.count }
    func forEachTransition(_ body: (Int64, DeliveryLog.Step) -> Void) {
        guard let firstTransition else { return }
        body(firstTransition.atMs, firstTransition.step)
        for transition in laterTransitions { body(transition.atMs, transition.step) }
    }

    mutating func noteTransition(_ step: DeliveryLog.Step, atMs time: Int64) {
        guard let first = firstTransition else {
            firstTransition = (time, step)
            return
        }
        // Never before the step it follows: a time read before the change waited for the lock
        // (a disconnect, with --redis one that waited for the lease) would put "stored" before
        // "received" in the log. The step happened when it was applied.
        let atMs = max(time, laterTransitions.last?.atMs ?? first.atMs)
        // At the bound the newest replaces the one before it (the first ones stay).
        if 1 + laterTransitions.count >= Self.maxTransitions {
            if laterTransitions.isEmpty {
                firstTransition = (atMs, step)
                return
            }
            laterTransitions.removeLast()
        }
        laterTransitions.append((atMs, step))
    }
}

extension RecordDelivery {
    /// Whether something may still change what became of the notification: it waits for its
    /// owner, or to be routed, delivered or acknowledged.
    var mayStillChange: Bool {
        awaitingOwner || heldForOrder || outcome == .pending || outcome == .stored || outcome == .deferred
    }
}

/// Where an accepted notification ended up. Rejected requests never enter delivery.
public enum DeliveryOutcome: String, Sendable {
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
    /// APNs answered 200, the device took no notice (a Live Activity push it could not use).
    case ignored
}

/// How journal numbers are shared by instances that write at once (`RecordStore.numberInStripes`).
public enum SequenceStripes {
    /// The low bits of a number say which writer made it.
    public static let bits: UInt64 = 10
    public static let count: UInt64 = 1 << bits
}

/// A bounded, newest-first journal of records (a ring buffer). Old records fall off the end
/// once `capacity` records or `byteBudget` bytes are reached, so a long load test cannot grow
/// memory without bound.
public struct RecordStore: Sendable {
    public let capacity: Int
    /// Approximate bytes the kept records may take (payloads, header fields, texts).
    public let byteBudget: Int
    /// Slots by physical index; grows to `capacity`. Slots outside the live window hold an
    /// empty placeholder, so an evicted record's memory is released.
    private var ring: [NotificationRecord] = []
    private var head = 0  // physical index of the oldest live record
    private var live = 0
    public private(set) var bytes = 0
    /// The number the next appended record gets.
    public var nextSequence: UInt64 {
        numbering.map { $0.counter << SequenceStripes.bits | $0.stripe } ?? denseNext
    }
    private var denseNext: UInt64 = 1
    /// Several instances appending at once (`--redis`): see `numberInStripes`. nil: one
    /// writer, numbers handed out one after another, kept in that order.
    private var numbering: (stripe: UInt64, counter: UInt64)?
    /// With `numbering`: where each kept record is (physical slot by sequence). Records are put
    /// in the order of their numbers once they have all arrived (`settleArrivals`), which is
    /// not the order they arrived in.
    private var slotBySequence: [UInt64: Int] = [:]
    /// With `numbering`: the oldest place (logical index) from which records may be out of the
    /// order of their numbers: another instance's record arrived after newer ones (this
    /// instance's own, taken while that record was on its way or left unread).
    private var unsettledFrom: Int?
    /// Records that fell off the end (for /info and metrics).
    public private(set) var evicted: UInt64 = 0
    /// Records this journal itself dropped (not carried over a reset or reload, as `evicted`
    /// is): whether a window of it may lack records (`RunSummary.journalMayBeIncomplete`).
    public private(set) var evictedHere: UInt64 = 0
    /// When on, appends and updates note the sequence numbers they touched.
    public var trackChanges = false
    /// Some slots may hold records kept encoded (`NotificationRecord.keptEncoded`: what a
    /// follower took from another instance). Every accessor decodes them; journal reads
    /// decode them first, outside the lock (`EmulatorState.readJournal`).
    public private(set) var mayKeepEncoded = false
    private var changes: [UInt64] = []
    /// Of `changes`, the records only updated (`update`), not added, since the last
    /// `takeUpdatedOnly`: another instance needs only their delivery part.
    private var updatedOnly: Set<UInt64> = []
    /// Records added since the last `takeUpdatedOnly` (an update of one of them is not "only").
    private var addedLately: Set<UInt64> = []
    /// The lowest of `addedLately` (so an eviction of an older record, the usual one, skips
    /// the set).
    private var addedLatelyFrom = UInt64.max
    /// Records added or updated since the last `takeUpdatedOnly` that fell off the end before
    /// it (a journal smaller than one change's pushes): the writer still gets them
    /// (`takeEvictedUnwritten`), since the shared state must have every record answered 200,
    /// a hand-off above all (it is its record). The shared state then evicts them by the same
    /// bound.
    private var evictedUnwritten: [UInt64: NotificationRecord] = [:]
    /// Whether `updatedOnly` is kept (`--redis`: `World.startSharingDeltas`).
    public var tracksUpdatesApart = false
    /// With `tracksUpdatesApart`: the delivery parts of records that fell off this journal
    /// while this instance could still change them (awaiting their owner, held for order,
    /// pending, stored, deferred), so that a later outcome is still written. Journals shared
    /// by several writers keep records in the order they arrived, so an owner's own push can
    /// leave its journal while the others' still hold it; its outcome changed nothing here,
    /// and their copies stayed `pending` for good. Oldest first, at most
    /// `maxEvictedUnsettled`.
    private var evictedUnsettled: [UInt64: RecordDelivery] = [:]
    private var evictedUnsettledOrder: [UInt64] = []
    private var evictedUnsettledHead = 0
    static let maxEvictedUnsettled = 16_384

    public mutating func takeChanges() -> [UInt64] {
        defer { changes.removeAll(keepingCapacity: true) }
        return changes
    }

    /// The records only updated since the last call (see `updatedOnly`).
    public mutating func takeUpdatedOnly() -> Set<UInt64> {
        if !addedLately.isEmpty {
            addedLately.removeAll(keepingCapacity: true)
            addedLatelyFrom = .max
        }
        if updatedOnly.isEmpty { return [] }
        defer { updatedOnly = [] }
        return updatedOnly
    }

    /// The records `evictedUnwritten` keeps, by sequence; call with `takeUpdatedOnly`.
    public mutating func takeEvictedUnwritten() -> [UInt64: NotificationRecord] {
        if evictedUnwritten.isEmpty { return [:] }
        defer { evictedUnwritten = [:] }
        return evictedUnwritten
    }

    private mutating func noteAddedLately(_ sequence: UInt64) {
        addedLately.insert(sequence)
        addedLatelyFrom = min(addedLatelyFrom, sequence)
    }

    /// A record's delivery part, read from its stored form when it is kept encoded unchanged.
    static func deliveryPart(of record: NotificationRecord) -> RecordDelivery {
        if let kept = record.keptEncoded, !record.keptDeliveryChanged { return StateCodec.delivery(ofRecord: kept) }
        return record.delivery
    }

    public init(capacity: Int, byteBudget: Int = Int.max) {
        precondition(capacity > 0 && byteBudget > 0)
        self.capacity = capacity
        self.byteBudget = byteBudget
    }

    public var count: Int { live }

    /// Keeps sequence numbers increasing across a reset, so clients polling with `since`
    /// never see a number twice. With stripes, the counter moves past `next` (a Lamport
    /// clock: numbers made after seeing a record are larger than its number).
    public mutating func continueSequence(from next: UInt64) {
        if let current = numbering {
            let counter = next >> SequenceStripes.bits + 1
            if counter > current.counter { numbering!.counter = counter }
        } else {
            denseNext = max(denseNext, next)
        }
    }

    /// From now on this journal numbers its records in `stripe`, one of several instances
    /// writing to one shared journal at once (`--redis`): number = counter × 2^bits + stripe,
    /// unique as long as the writers' stripes differ, and roughly in time order across writers
    /// because every record seen moves the counter past it (`continueSequence`). A record that
    /// arrives after newer ones is put in its place by `settleArrivals`.
    public mutating func numberInStripes(_ stripe: UInt64) {
        precondition(stripe < SequenceStripes.count)
        let counter = numbering?.counter ?? (denseNext >> SequenceStripes.bits + 1)
        numbering = (stripe, counter)
        slotBySequence = [:]
        slotBySequence.reserveCapacity(live)
        for logical in 0..<live { slotBySequence[ring[physical(logical)].sequence] = physical(logical) }
    }

    /// Puts the records that arrived after newer ones in the order of their numbers (several
    /// writers, `numberInStripes`): then every copy lists the journal in one order, close to
    /// the order the pushes were answered in. A copy that reads another instance's records
    /// late (following lazily: `--redis-follow lazy`) would otherwise list them as newer than
    /// its own pushes that came after them. Called once a batch of arrivals is in (a catch-up
    /// of many calls it once, at its end): it sorts only the end of the journal they reach
    /// into, moving each record there once.
    public mutating func settleArrivals() {
        guard let from = unsettledFrom else { return }
        unsettledFrom = nil
        guard numbering != nil, from < live else { return }
        var lowest = UInt64.max
        for logical in from..<live { lowest = min(lowest, ring[physical(logical)].sequence) }
        // Before `from` the records are in order: the end to sort starts at the first one
        // numbered above the lowest arrival.
        var start = 0
        var end = from
        while start < end {
            let mid = (start + end) / 2
            if ring[physical(mid)].sequence < lowest { start = mid + 1 } else { end = mid }
        }
        let numbers = (start..<live).map { ring[physical($0)].sequence }
        // order[k]: the place (from `start`) of the record that belongs at place k.
        let order = numbers.indices.sorted { numbers[$0] < numbers[$1] }
        var placed = [Bool](repeating: false, count: numbers.count)
        do {
            // Each cycle of the permutation is walked with swaps in place: every record moves
            // once, and is moved, not copied (`Array.swapAt` copies through a temporary,
            // retaining and releasing each of the record's strings and arrays: 57 ms for
            // 50,000 records after a lazy catch-up, against 14–15 ms here).
            let (first, size) = ((head + start) % capacity, capacity)
            var slots = ring.mutableSpan
            for k in order.indices where !placed[k] {
                var current = k
                while order[current] != k {
                    slots.swapAt((first + current) % size, (first + order[current]) % size)
                    placed[current] = true
                    current = order[current]
                }
                placed[current] = true
            }
        }
        for k in order.indices { slotBySequence[numbers[order[k]]] = physical(start + k) }
    }

    /// Takes on another journal's numbering (a reset or reload replaced this one).
    /// Keeps counting the records dropped where `other` left off: `notificationsDropped`
    /// counts what this instance dropped since it started, across a reset and a reload of the
    /// shared state (whose journal this one goes on being).
    mutating func continueCountingEvictions(from other: RecordStore) {
        evicted = max(evicted, other.evicted)
    }

    public mutating func continueNumbering(from other: RecordStore) {
        tracksUpdatesApart = other.tracksUpdatesApart
        guard let theirs = other.numbering else { return continueSequence(from: other.nextSequence) }
        numberInStripes(theirs.stripe)
        numbering!.counter = max(numbering!.counter, theirs.counter)
    }

    /// Appends a record; returns its sequence number and the record that fell off the end, so
    /// the caller can release it outside any lock.
    @discardableResult
    public mutating func append(_ record: NotificationRecord) -> (sequence: UInt64, evicted: NotificationRecord?) {
        var moved = record
        let before = evicted
        let sequence = append(moving: &moved)
        return (sequence, evicted > before ? moved : nil)
    }

    /// Built fresh each time rather than copied from a stored one: the initializer only
    /// stores constants, while a copy of a stored record walks every field (about 700
    /// instructions, once per request while the journal fills).
    private static var placeholder: NotificationRecord {
        NotificationRecord(apnsID: "", token: "", environment: .sandbox, receivedAtMs: 0)
    }

    @inline(__always)
    private func physical(_ logical: Int) -> Int { (head + logical) % capacity }

    /// Appends by moving `record` into the journal, without copying its strings and arrays;
    /// `record` comes back holding the (last) record that fell off the end, for the caller to
    /// release outside any lock. This runs once per request.
    @discardableResult
    public mutating func append(moving record: inout NotificationRecord) -> UInt64 {
        if numbering != nil {
            record.sequence = nextSequence
            numbering!.counter += 1
            return appendArriving(moving: &record)
        }
        record.sequence = denseNext
        denseNext += 1
        let sequence = record.sequence
        if trackChanges {
            changes.append(sequence)
            if tracksUpdatesApart { noteAddedLately(sequence) }
        }
        if record.keptEncoded != nil { mayKeepEncoded = true }
        if record.accountedBytes == 0 { record.accountedBytes = record.approximateBytes }
        // The usual case once the journal is full: the oldest record makes room by count alone
        // and the new one takes its slot (one swap, nothing copied).
        if live == capacity, bytes - ring[head].accountedBytes + record.accountedBytes <= byteBudget {
            bytes += record.accountedBytes - ring[head].accountedBytes
            swap(&ring[head], &record)
            head = (head + 1) % capacity
            evicted += 1
            evictedHere += 1
            return sequence
        }
        // The usual case while the journal fills: nothing to evict, the ring grows. The record
        // is moved into the array once (swapped with a placeholder first, it was copied four
        // times, 617 bytes each).
        if live < capacity, bytes + record.accountedBytes <= byteBudget, physical(live) == ring.count {
            if ring.isEmpty { ring.reserveCapacity(min(capacity, 4096)) }
            bytes += record.accountedBytes
            ring.append(consume record)
            record = Self.placeholder
            live += 1
            return sequence
        }
        // Otherwise make room by count, then by bytes (never evicting the record being added).
        // The last record evicted is reused as the slot's placeholder, moved (`take()`), not
        // copied field by field.
        var lastEvicted: NotificationRecord?
        while live > 0 && (live == capacity || bytes + record.accountedBytes > byteBudget) {
            lastEvicted = dropOldest()
        }
        bytes += record.accountedBytes
        let slot = physical(live)
        if slot == ring.count {
            if ring.isEmpty { ring.reserveCapacity(min(capacity, 4096)) }
            // Moved in (`record` takes the placeholder first): appending `record` itself
            // would copy it, retaining each of its strings and arrays.
            var moved = lastEvicted.take() ?? Self.placeholder
            swap(&moved, &record)
            ring.append(moved)
        } else {
            // The slot holds a placeholder (left by an eviction), which `record` now takes.
            swap(&ring[slot], &record)
            record = lastEvicted.take() ?? Self.placeholder
        }
        live += 1
        return sequence
    }

    /// `append` for several writers: the record keeps its number, and takes the newest end.
    private mutating func appendArriving(moving record: inout NotificationRecord) -> UInt64 {
        let sequence = record.sequence
        if trackChanges {
            changes.append(sequence)
            if tracksUpdatesApart { noteAddedLately(sequence) }
        }
        if record.keptEncoded != nil { mayKeepEncoded = true }
        if record.accountedBytes == 0 { record.accountedBytes = record.approximateBytes }
        var lastEvicted: NotificationRecord?
        while live > 0 && (live == capacity || bytes + record.accountedBytes > byteBudget) {
            lastEvicted = dropOldest()
        }
        bytes += record.accountedBytes
        if unsettledFrom == nil, live > 0, sequence < ring[physical(live - 1)].sequence { unsettledFrom = live }
        let slot = physical(live)
        if slot == ring.count {
            if ring.isEmpty { ring.reserveCapacity(min(capacity, 4096)) }
            var moved = lastEvicted.take() ?? Self.placeholder
            swap(&moved, &record)
            ring.append(moved)
        } else {
            swap(&ring[slot], &record)
            record = lastEvicted.take() ?? Self.placeholder
        }
        slotBySequence[sequence] = slot
        live += 1
        return sequence
    }

    /// Puts a persisted record back with its own sequence number (start-up with
    /// `--state-dir`; oldest first). The usual bounds apply, as for any append.
    public mutating func restore(_ record: NotificationRecord) {
        if numbering != nil { return upsert(record) }
        denseNext = max(denseNext, record.sequence)
        var moved = record
        append(moving: &moved)
    }

    /// Replication: takes a record another instance's journal holds, under its own sequence
    /// number. An update replaces the record in place (keeping what the journal counted it
    /// as, as `update` does); a new one is appended, or put in order if older than the newest.
    public mutating func upsert(_ record: NotificationRecord) {
        if numbering != nil { return upsertArriving(record) }
        if live == 0 || ring[physical(live - 1)].sequence < record.sequence {
            // The usual case: a record newer than any kept (`append` notes one kept encoded).
            return appendKeepingSequence(record)
        }
        if let index = physicalIndex(of: record.sequence) {
            var record = record
            if record.keptEncoded != nil { mayKeepEncoded = true }
            record.accountedBytes = ring[index].accountedBytes
            ring[index] = record
            if trackChanges, changes.last != record.sequence { changes.append(record.sequence) }
            return
        }
        if live > 0, ring[physical(live - 1)].sequence > record.sequence {
            // Rare (only when this journal lost a record the producer still has): rebuild.
            var all = newestFirst(limit: live).reversed() as [NotificationRecord]
            all.insert(record, at: all.firstIndex { $0.sequence > record.sequence } ?? all.count)
            let next = denseNext
            ring = []
            head = 0
            live = 0
            bytes = 0
            let tracking = trackChanges
            trackChanges = false
            for item in all { appendKeepingSequence(item) }
            trackChanges = tracking
            if trackChanges { changes.append(record.sequence) }
            denseNext = max(next, denseNext)
            return
        }
        appendKeepingSequence(record)
    }

    private mutating func appendKeepingSequence(_ record: NotificationRecord) {
        let next = denseNext
        denseNext = record.sequence
        var moved = record
        append(moving: &moved)
        denseNext = max(next, record.sequence + 1)
    }

    /// Replication: another instance's record as it arrived, kept encoded (built in its slot,
    /// not copied there).
    public mutating func upsertKept(_ kept: KeptRecord) {
        var record = NotificationRecord(keptEncoded: kept.bytes, sequence: kept.sequence)
        record.accountedBytes = kept.accountedBytes
        record.headerListBytes = kept.headerListBytes
        if let device = kept.awaitingOwnerDevice {
            record.deviceID = device
            record.delivery.awaitingOwner = true
        }
        guard numbering != nil else { return upsert(record) }
        continueSequence(from: kept.sequence + 1)
        if let index = slotBySequence[kept.sequence] {
            mayKeepEncoded = true
            record.accountedBytes = ring[index].accountedBytes
            swap(&ring[index], &record)
            if trackChanges, changes.last != kept.sequence { changes.append(kept.sequence) }
            return
        }
        appendArriving(moving: &record)
    }

    /// `upsert` for several writers: an update in place, anything else at the newest end
    /// (where it arrived), and the numbering moves past it.
    private mutating func upsertArriving(_ record: NotificationRecord) {
        continueSequence(from: record.sequence + 1)
        if let index = slotBySequence[record.sequence] {
            var record = record
            if record.keptEncoded != nil { mayKeepEncoded = true }
            record.accountedBytes = ring[index].accountedBytes
            ring[index] = record
            if trackChanges, changes.last != record.sequence { changes.append(record.sequence) }
            return
        }
        var moved = record
        appendArriving(moving: &moved)
    }

    /// Replication: drops the records older than `sequence` from the end, as the producer's
    /// journal did (counted as evicted), and never hands out a number below it. (With several
    /// writers, records not yet settled may put a newer number first: eviction stops there.)
    public mutating func evict(before sequence: UInt64) {
        while live > 0, ring[head].sequence < sequence { dropOldest() }
        continueSequence(from: sequence)
    }

    /// Takes the oldest record off the ring (counted as evicted) and hands it back.
    @discardableResult
    private mutating func dropOldest() -> NotificationRecord {
        var emptied = Self.placeholder
        swap(&ring[head], &emptied)
        if emptied.delivery.awaitingOwner { keepEvictedHandOff(emptied) }
        if tracksUpdatesApart { keepIfUnsettled(emptied) }
        if tracksUpdatesApart, evictedUnwritten.count < Self.maxEvictedHandOffs, wasChangedLately(emptied.sequence) {
            evictedUnwritten[emptied.sequence] = emptied
        }
        if numbering != nil {
            slotBySequence[emptied.sequence] = nil
            if let from = unsettledFrom { unsettledFrom = max(0, from - 1) }
        }
        bytes -= emptied.accountedBytes
        head = (head + 1) % capacity
        live -= 1
        evicted += 1
        evictedHere += 1
        return emptied
    }

    /// Records that still awaited their device's owner (`--redis` hand-offs) when they fell off
    /// the journal's end, oldest first, for `World.keepEvictedHandOffs`: a hand-off must outlive
    /// its record. At most `maxEvictedHandOffs` (the oldest go first, counted).
    public private(set) var evictedHandOffs: [NotificationRecord] = []
    private var evictedHandOffsDropped = 0
    static let maxEvictedHandOffs = 65_536

    private mutating func keepEvictedHandOff(_ record: NotificationRecord) {
        if evictedHandOffs.count >= Self.maxEvictedHandOffs {
            evictedHandOffs.removeFirst()
            evictedHandOffsDropped += 1
        }
        evictedHandOffs.append(record)
    }

    /// Keeps the delivery part of a record that left the journal unsettled (see
    /// `evictedUnsettled`). A record kept encoded whose delivery part no one here changed is
    /// kept only while it awaits its owner: its delivery part is not decoded for every record
    /// that falls off.
    private mutating func keepIfUnsettled(_ record: NotificationRecord) {
        let part: RecordDelivery
        if let kept = record.keptEncoded, !record.keptDeliveryChanged {
            guard record.delivery.awaitingOwner else { return }
            part = StateCodec.delivery(ofRecord: kept)
        } else {
            guard record.delivery.mayStillChange else { return }
            part = record.delivery
        }
        if evictedUnsettled.updateValue(part, forKey: record.sequence) == nil { evictedUnsettledOrder.append(record.sequence) }
        while evictedUnsettled.count > Self.maxEvictedUnsettled, evictedUnsettledHead < evictedUnsettledOrder.count {
            evictedUnsettled[evictedUnsettledOrder[evictedUnsettledHead]] = nil
            evictedUnsettledHead += 1
        }
        // The order still lists parts that settled and were written: shed them now and then.
        if evictedUnsettledOrder.count - evictedUnsettledHead > 2 * evictedUnsettled.count + 1_024 {
            evictedUnsettledOrder = evictedUnsettledOrder[evictedUnsettledHead...].filter { evictedUnsettled[$0] != nil }
            evictedUnsettledHead = 0
        }
    }

    /// `update` of a record that left the journal unsettled: its kept delivery part changes.
    private mutating func updateEvicted(sequence: UInt64, _ change: (inout RecordDelivery) -> Void) -> Bool {
        guard evictedUnsettled[sequence] != nil else { return false }
        change(&evictedUnsettled[sequence]!)
        // Not written yet either: the whole record goes with the change as it is now.
        if evictedUnwritten[sequence] != nil { change(&evictedUnwritten[sequence]!.delivery) }
        if trackChanges, changes.last != sequence {
            changes.append(sequence)
            if !addedLately.contains(sequence) { updatedOnly.insert(sequence) }
        }
        return true
    }

    /// The delivery part kept for a record that left the journal unsettled, to be written;
    /// forgotten once it is settled (nothing here changes it again).
    mutating func takeEvictedDelivery(sequence: UInt64) -> RecordDelivery? {
        guard let part = evictedUnsettled[sequence] else { return nil }
        if !part.mayStillChange {
            evictedUnsettled[sequence] = nil
            if evictedUnsettled.isEmpty {
                evictedUnsettledOrder = []
                evictedUnsettledHead = 0
            }
        }
        return part
    }

    /// The records kept since the last call, and how many the bound dropped meanwhile.
    mutating func takeEvictedHandOffs() -> (kept: [NotificationRecord], dropped: Int) {
        defer {
            evictedHandOffs = []
            evictedHandOffsDropped = 0
        }
        return (evictedHandOffs, evictedHandOffsDropped)
    }

    /// The oldest record kept, nil when empty (persistence trims what fell off the end).
    public var oldestSequence: UInt64? {
        live > 0 ? ring[head].sequence : nil
    }

    /// Reads the `index`-th newest record in place (no copy).
    func withRecord<T>(newestFirstIndex index: Int, _ body: (borrowing NotificationRecord) -> T) -> T {
        let slot = physical(live - 1 - index)
        return ring[slot].keptEncoded == nil ? body(ring[slot]) : body(Self.decoded(ring[slot]))
    }

    /// The `index`-th newest record as the journal holds it (possibly kept encoded; tests).
    func withRecordAsStored<T>(newestFirstIndex index: Int, _ body: (borrowing NotificationRecord) -> T) -> T {
        body(ring[physical(live - 1 - index)])
    }

    /// Slot `slot`'s record as a value, decoded when it is kept encoded.
    @inline(__always)
    private func value(at slot: Int) -> NotificationRecord {
        ring[slot].keptEncoded == nil ? ring[slot] : Self.decoded(ring[slot])
    }

    /// Whether slot `slot`'s record matches, read in place unless it is kept encoded.
    @inline(__always)
    private func slot(_ slot: Int, matches: (NotificationRecord) -> Bool) -> Bool {
        ring[slot].keptEncoded == nil ? matches(ring[slot]) : matches(Self.decoded(ring[slot]))
    }

    private static func decoded(_ kept: NotificationRecord) -> NotificationRecord { StateCodec.decodeKept(kept) }

    private mutating func decodeInPlace(_ slot: Int) {
        if ring[slot].keptEncoded != nil { ring[slot] = Self.decoded(ring[slot]) }
    }

    /// Up to `limit` of the records kept encoded, newest first, as they are kept (for decoding
    /// outside the lock: `EmulatorState.decodeKeptRecords`). A scan that reaches the oldest
    /// record clears `mayKeepEncoded`: what it found is about to be replaced, and a record kept
    /// encoded after it sets it again.
    mutating func keptRecords(limit: Int) -> [NotificationRecord] {
        guard mayKeepEncoded else { return [] }
        var found: [NotificationRecord] = []
        var logical = live - 1
        while logical >= 0, found.count < limit {
            let slot = physical(logical)
            if ring[slot].keptEncoded != nil { found.append(ring[slot]) }
            logical -= 1
        }
        if logical < 0 { mayKeepEncoded = false }
        return found
    }

    /// Puts records decoded outside the lock in place of the kept ones they were decoded from;
    /// a record that changed meanwhile (a newer row arrived, or it was decoded and updated) is
    /// left as it is.
    mutating func replaceKept(_ decoded: [(from: NotificationRecord, to: NotificationRecord)]) {
        for (from, to) in decoded {
            guard let slot = physicalIndex(of: from.sequence), let kept = ring[slot].keptEncoded, kept == from.keptEncoded else { continue }
            // Its delivery part may have changed meanwhile: the current one wins.
            let current = ring[slot].keptDeliveryChanged ? ring[slot].delivery : nil
            ring[slot] = to
            if let current { ring[slot].delivery = current }
        }
    }

    /// Decodes every record kept encoded, so that the reads that follow find them ready (an
    /// admin API read after a burst of another instance's pushes decodes each record once,
    /// not once per read).
    public mutating func decodeKept() {
        guard mayKeepEncoded else { return }
        for logical in 0..<live { decodeInPlace(physical(logical)) }
        mayKeepEncoded = false
    }

    /// Records newest first, filtered, at most `limit`; with `before`, only older records than
    /// that sequence number (the next page of a list).
    public func newestFirst(
        limit: Int, before: UInt64? = nil, where matches: (NotificationRecord) -> Bool = { _ in true }
    )
        -> [NotificationRecord]
    {
        scanNewestFirst(limit: limit, before: before, scanning: .max, where: matches).records
    }

    /// The newest record whose apns-id or apns-unique-id is `id` (ASCII letters compared
    /// without case). Records kept encoded are matched in their stored form and only the one
    /// found is decoded, so a lookup needs no decoding of what other instances wrote.
    public func newest(withID id: String) -> NotificationRecord? {
        let idBytes = Array(id.utf8)
        var index = live
        while index > 0 {
            index -= 1
            let slot = physical(index)
            if let kept = ring[slot].keptEncoded {
                if StateCodec.record(kept, hasID: idBytes) { return value(at: slot) }
            } else if ring[slot].apnsPushID.matches(ignoringCase: id) || ring[slot].uniquePushID.matches(ignoringCase: id) {
                return ring[slot]
            }
        }
        return nil
    }

    /// `newestFirst` that looks at no more than `scanning` records (a bound on the time it
    /// holds the state lock), and says where to go on: the sequence to look before next, or
    /// nil when the oldest record was reached.
    public func scanNewestFirst(
        limit: Int, before: UInt64?, scanning: Int, where matches: (NotificationRecord) -> Bool
    )
        -> (records: [NotificationRecord], resumeBefore: UInt64?)
    {
        var out: [NotificationRecord] = []
        // Logical indices below `end` hold sequences below `before` (they increase with the index).
        var end = live
        if let before, numbering != nil {
            // Several writers: the page goes on from where that record is, or (gone) from the
            // newest record numbered below it.
            if let slot = slotBySequence[before] {
                end = (slot - head + capacity) % capacity
            } else {
                while end > 0, ring[physical(end - 1)].sequence >= before { end -= 1 }
            }
        } else if let before {
            var low = 0
            while low < end {
                let mid = (low + end) / 2
                if ring[physical(mid)].sequence < before { low = mid + 1 } else { end = mid }
            }
        }
        guard limit > 0 else { return (out, end > 0 ? ring[physical(end - 1)].sequence + 1 : nil) }
        var i = end - 1
        let stop = scanning >= end ? -1 : end - 1 - scanning
        while i > stop {
            // Read in place: a copy of every record looked at costs more than the comparison.
            if slot(physical(i), matches: matches) {
                out.append(value(at: physical(i)))
                if out.count == limit { return (out, ring[physical(i)].sequence) }
            }
            i -= 1
        }
        return (out, i >= 0 ? ring[physical(i + 1)].sequence : nil)
    }

    /// The oldest record that matches, found without copying the others.
    public func oldest(where matches: (NotificationRecord) -> Bool) -> NotificationRecord? {
        for i in 0..<live where slot(physical(i), matches: matches) { return value(at: physical(i)) }
        return nil
    }

    /// Changes what became of the record with the given sequence number, if it is still kept:
    /// after the answer only its delivery part changes. A record kept encoded is not decoded
    /// for it (its delivery part alone is, once).
    @discardableResult
    public mutating func update(sequence: UInt64, _ change: (inout RecordDelivery) -> Void) -> Bool {
        guard let index = physicalIndex(of: sequence) else {
            return evictedUnsettled.isEmpty ? false : updateEvicted(sequence: sequence, change)
        }
        if let kept = ring[index].keptEncoded, !ring[index].keptDeliveryChanged {
            ring[index].delivery = StateCodec.delivery(ofRecord: kept)
            ring[index].keptDeliveryChanged = true
        }
        change(&ring[index].delivery)
        if trackChanges, changes.last != sequence {
            changes.append(sequence)
            if tracksUpdatesApart, !addedLately.contains(sequence) { updatedOnly.insert(sequence) }
        }
        return true
    }

    /// A record that awaits its owner, taken by the owner to route it: it no longer awaits it
    /// (an update, as `update`), and comes back with what its notification is built from. A
    /// record kept encoded is read once for both, and only for those fields (not decoded).
    public mutating func takeForRouting(sequence: UInt64) -> NotificationRecord? {
        guard let index = physicalIndex(of: sequence) else { return nil }
        let record: NotificationRecord?
        if let kept = ring[index].keptEncoded {
            record = StateCodec.handOff(ofRecord: kept)
            if !ring[index].keptDeliveryChanged {
                ring[index].delivery = record?.delivery ?? RecordDelivery()
                ring[index].keptDeliveryChanged = true
            }
        } else {
            record = ring[index]
        }
        update(sequence: sequence) { $0.awaitingOwner = false }
        return record
    }

    /// Replication: another instance changed the record's delivery part
    /// (`StateChange.recordDelivered`). The record, decoded, when it has a collapse id; else nil.
    @discardableResult
    public mutating func applyDelivery(sequence: UInt64, _ delivery: RecordDelivery) -> NotificationRecord? {
        guard let index = physicalIndex(of: sequence) else { return nil }
        ring[index].delivery = delivery
        if ring[index].keptEncoded != nil { ring[index].keptDeliveryChanged = true }
        if trackChanges, changes.last != sequence { changes.append(sequence) }
        // A copy only where the caller can use it (a collapse id to note): copying every
        // record cost a taker a retain and release of each field per handed-off push.
        guard ring[index].keptEncoded == nil, ring[index].collapseID != nil else { return nil }
        return ring[index]
    }

    /// Whether the record holds its whole payload, read in place.
    public func hasWholePayload(sequence: UInt64) -> Bool {
        guard let index = physicalIndex(of: sequence) else { return false }
        return ring[index].keptEncoded == nil ? ring[index].hasWholePayload : value(at: index).hasWholePayload
    }

    /// The record's delivery part, without decoding a record kept encoded that was not routed.
    public func delivery(sequence: UInt64) -> RecordDelivery? {
        guard let index = physicalIndex(of: sequence) else { return nil }
        return Self.deliveryPart(of: ring[index])
    }

    /// Added or updated since the last `takeUpdatedOnly`, so not written yet.
    private func wasChangedLately(_ sequence: UInt64) -> Bool {
        (sequence >= addedLatelyFrom && addedLately.contains(sequence)) || (!updatedOnly.isEmpty && updatedOnly.contains(sequence))
    }

    public func record(sequence: UInt64) -> NotificationRecord? {
        physicalIndex(of: sequence).map { value(at: $0) }
    }

    /// Whether the record's request named `apns-push-type`, read in place (no copy of the record).
    func pushTypeHeaderPresent(sequence: UInt64) -> Bool? {
        physicalIndex(of: sequence).map { ring[$0].keptEncoded == nil ? ring[$0].pushTypeHeaderPresent : value(at: $0).pushTypeHeaderPresent }
    }

    /// The record's `apns-id`, read in place (no copy of the record).
    func apnsID(sequence: UInt64) -> String? {
        physicalIndex(of: sequence).map { ring[$0].keptEncoded == nil ? ring[$0].apnsID : value(at: $0).apnsID }
    }

    /// Sequence numbers increase from the oldest record to the newest, so a binary search over
    /// the ring's logical order finds one (they have gaps after a filtered delete).
    /// Inlined for the usual case, the record just appended: a call of the journal's own
    /// (non-mutating) method was handed a copy of the whole journal value first (216 bytes).
    @inline(__always)
    private func physicalIndex(of sequence: UInt64) -> Int? {
        if numbering == nil, live > 0, ring[physical(live - 1)].sequence == sequence { return physical(live - 1) }
        return searchIndex(of: sequence)
    }

    private func searchIndex(of sequence: UInt64) -> Int? {
        if numbering != nil { return slotBySequence[sequence] }
        let n = live
        guard n > 0 else { return nil }
        var low = 0
        var high = n - 1
        while low <= high {
            let mid = (low + high) / 2
            let index = physical(mid)
            let value = ring[index].sequence
            if value == sequence { return index }
            if value < sequence { low = mid + 1 } else { high = mid - 1 }
        }
        return nil
    }

    /// Removes the records that match; returns their sequence numbers, oldest first.
    public mutating func removeAll(where matches: (NotificationRecord) -> Bool) -> [UInt64] {
        // What is left keeps its order: settled first, it stays settled.
        settleArrivals()
        var kept: [NotificationRecord] = []
        var removed: [UInt64] = []
        kept.reserveCapacity(live)
        for logical in 0..<live {
            let record = value(at: physical(logical))
            if matches(record) { removed.append(record.sequence) } else { kept.append(record) }
        }
        ring = kept
        head = 0
        live = ring.count
        mayKeepEncoded = false
        bytes = ring.reduce(0) { $0 + $1.accountedBytes }
        if numbering != nil {
            slotBySequence = [:]
            for (slot, record) in ring.enumerated() { slotBySequence[record.sequence] = slot }
        }
        return removed
    }
}
