/// Live Activities of every device in the world (one `LiveActivityBook` each), and which
/// device and app each of their tokens leads to: the provider endpoint looks a `liveactivity`
/// push's token up here when the device registry does not know it. In memory only for now
/// (not in `--state-dir`, not shared with `--redis`).
public struct LiveActivityWorld: Sendable {
    /// Where a push-to-start or update token leads.
    public struct TokenOwner: Sendable, Equatable {
        public var deviceID: String
        public var bundleID: String
        public var environment: APNsEnvironment
        public var kind: LiveActivityTokenKind
    }

    /// Tokens that no longer lead to an activity stay known this long (in number), so a push
    /// to one is answered 200 and journaled with why the device ignored it.
    public static let maxEndedTokens = 10_000

    public private(set) var books: [String: LiveActivityBook] = [:]
    public private(set) var tokens: [String: TokenOwner] = [:]
    private var endedTokens: [String] = []
    public var policy = LiveActivityPolicy()

    public init() {}

    public func book(deviceID: String) -> LiveActivityBook? { books[deviceID] }

    /// The app's ActivityAttributes types on a device; each type gets a push-to-start token in
    /// the app's environment.
    @discardableResult
    public mutating func declare(
        deviceID: String, bundleID: String, environment: APNsEnvironment, types: [String], frequentUpdates: Bool
    ) throws(LiveActivityBookError) -> [LiveActivityChange] {
        var book = books[deviceID] ?? LiveActivityBook(policy: policy)
        let changes = try book.declare(bundleID: bundleID, types: types, frequentUpdates: frequentUpdates)
        books[deviceID] = book
        track(changes, deviceID: deviceID, environment: environment)
        return changes
    }

    /// `Activity.request` in the app.
    public mutating func startByApp(
        deviceID: String, bundleID: String, environment: APNsEnvironment, attributesType: String, attributes: JSONValue,
        contentState: JSONValue, updates: LiveActivityUpdates, nowMs: Int64, channelExists: (String) -> Bool
    ) throws(LiveActivityRefusal) -> LiveActivityReceipt {
        guard var book = books[deviceID] else {
            throw LiveActivityRefusal(.start, "\(bundleID) declares no Live Activities on \(deviceID)")
        }
        let receipt = try book.startByApp(
            bundleID: bundleID, attributesType: attributesType, attributes: attributes, contentState: contentState, updates: updates,
            nowMs: nowMs, channelExists: channelExists)
        books[deviceID] = book
        track(receipt.changes, deviceID: deviceID, environment: environment)
        return receipt
    }

    /// The user removes an activity from the Lock Screen.
    public mutating func dismiss(deviceID: String, activityID: String, nowMs: Int64) throws(LiveActivityBookError) -> [LiveActivityChange] {
        guard var book = books[deviceID] else { throw .unknownActivity(activityID) }
        let changes = try book.dismiss(activityID: activityID, nowMs: nowMs)
        books[deviceID] = book
        track(changes, deviceID: deviceID, environment: nil)
        return changes
    }

    /// A `liveactivity` push to one of these tokens, as the device takes it; nil when the token
    /// is not a Live Activity token.
    public mutating func receive(
        token: String, payload: JSONValue, priority: Int, nowMs: Int64, channelExists: (String) -> Bool
    ) -> (owner: TokenOwner, receipt: LiveActivityReceipt)? {
        guard let owner = tokens[token], var book = books[owner.deviceID] else { return nil }
        let receipt: LiveActivityReceipt
        switch owner.kind {
        case .pushToStart:
            receipt = book.receiveStart(
                pushToStartToken: token, payload: payload, priority: priority, nowMs: nowMs, channelExists: channelExists)
        case .update:
            receipt = book.receiveUpdate(updateToken: token, payload: payload, priority: priority, nowMs: nowMs)
        }
        books[owner.deviceID] = book
        track(receipt.changes, deviceID: owner.deviceID, environment: owner.environment)
        return (owner, receipt)
    }

    /// Time passes: activities go stale, end after 8 hours, leave the Lock Screen; deferred
    /// updates go out once their budget allows.
    public mutating func tick(nowMs: Int64) {
        for deviceID in Array(books.keys) {
            guard var book = books[deviceID], let next = book.nextDeadlineMs(nowMs: nowMs), next <= nowMs else { continue }
            let changes = book.tick(nowMs: nowMs)
            books[deviceID] = book
            track(changes, deviceID: deviceID, environment: nil)
        }
    }

    /// A device is gone: so are its activities and tokens.
    public mutating func removeDevice(_ deviceID: String) {
        guard books.removeValue(forKey: deviceID) != nil else { return }
        tokens = tokens.filter { $0.value.deviceID != deviceID }
        endedTokens.removeAll { tokens[$0] == nil }
    }

    /// New tokens lead to their device; ended ones stay known for a while (see above).
    private mutating func track(_ changes: [LiveActivityChange], deviceID: String, environment: APNsEnvironment?) {
        for change in changes {
            switch change {
            case .tokenIssued(let kind, let token, let app, _, _):
                let inherited = tokens.values.first { $0.deviceID == deviceID && $0.bundleID == app }?.environment
                tokens[token] = TokenOwner(
                    deviceID: deviceID, bundleID: app, environment: environment ?? inherited ?? .sandbox, kind: kind)
            case .tokenEnded(_, let token, _):
                guard tokens[token] != nil else { continue }
                endedTokens.append(token)
                if endedTokens.count > Self.maxEndedTokens { tokens.removeValue(forKey: endedTokens.removeFirst()) }
            default:
                continue
            }
        }
    }
}

extension World {
    /// A `liveactivity` push to a Live Activity token, taken by the device at once (virtual
    /// devices): the record says what came of it. APNs answered 200 whatever the device does.
    mutating func applyLiveActivityPush(token: String, payload: [UInt8], priority: Int, sequence: UInt64, nowMs: Int64) {
        guard let owner = liveActivities.tokens[token] else { return }
        let live = Set(channels.liveChannels(bundleID: owner.bundleID, environment: owner.environment).map(\.id))
        let json = (try? JSONValue.parse(payload)) ?? .null
        guard
            let (_, receipt) = liveActivities.receive(
                token: token, payload: json, priority: priority, nowMs: nowMs, channelExists: { live.contains($0) })
        else { return }
        switch receipt.outcome {
        case .applied:
            setOutcome(sequence, .delivered, "applied to Live Activity \(receipt.activityID ?? "?")")
        case .ignored(let why), .refused(let why):
            setOutcome(sequence, .ignored, why)
        case .throttled(let why):
            setOutcome(sequence, .throttled, why)
        }
    }
}
