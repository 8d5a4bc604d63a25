import HTTPGrammar

/// Judges channel management (`/1/apps/<bundle>/channels`, `…/all-channels`) and broadcast
/// sends (`POST /4/broadcasts/apps/<bundle>`) with Apple's rules, in the order of
/// docs/apns-behaviour.md, "Broadcast channels": path and method → request id → provider
/// token (or certificate) → the app in the path → the app's broadcast capability → the
/// operation's own headers and body. Pure logic: no I/O; the clock and the state are injected.

/// The reasons of Apple's broadcast and channel error table, with their statuses.
public enum ChannelReason: String, Error, Sendable, CaseIterable {
    case featureNotEnabled = "FeatureNotEnabled"
    case missingChannelId = "MissingChannelId"
    case badChannelId = "BadChannelId"
    case channelNotRegistered = "ChannelNotRegistered"
    case badRequestParams = "BadRequestParams"
    case badRequestPayload = "BadRequestPayload"
    case payloadEmpty = "PayloadEmpty"
    /// Not in Apple's broadcast table; the device API's answer to a header sent twice (chosen).
    case duplicateHeaders = "DuplicateHeaders"
    case badMessageId = "BadMessageId"
    case missingPushType = "MissingPushType"
    case invalidPushType = "InvalidPushType"
    case cannotCreateChannelConfig = "CannotCreateChannelConfig"
    case badExpirationDate = "BadExpirationDate"
    case topicDisallowed = "TopicDisallowed"
    case badPriority = "BadPriority"
    case topicMismatch = "TopicMismatch"
    case badPath = "BadPath"
    case methodNotAllowed = "MethodNotAllowed"
    case payloadTooLarge = "PayloadTooLarge"
    case tooManyRequests = "TooManyRequests"
    case serviceUnavailable = "ServiceUnavailable"

    public var status: Int {
        switch self {
        case .topicMismatch: return 403
        case .badPath: return 404
        case .methodNotAllowed: return 405
        case .payloadTooLarge: return 413
        case .tooManyRequests: return 429
        case .serviceUnavailable: return 503
        default: return 400
        }
    }
}

/// What a channel request is, from its method and path.
public enum ChannelOperation: Sendable, Equatable {
    case create(bundleID: String)
    case read(bundleID: String)
    case delete(bundleID: String)
    case list(bundleID: String)
    case broadcast(bundleID: String)

    public var bundleID: String {
        switch self {
        case .create(let b), .read(let b), .delete(let b), .list(let b), .broadcast(let b): return b
        }
    }

    public var name: String {
        switch self {
        case .create: return "create"
        case .read: return "read"
        case .delete: return "delete"
        case .list: return "list"
        case .broadcast: return "broadcast"
        }
    }
}

/// The answer to a channel request, as APNs sends it.
public struct ChannelResponse: Sendable {
    public var status: Int
    /// Echoed from the request, else generated (lowercase UUID).
    public var requestID: String
    /// The reason as spelled on the wire; nil for a success.
    public var reason: String?
    /// Why, in plain words (logs and the admin API); nil for a success.
    public var explanation: String?
    /// `apns-channel-id` of a channel just created.
    public var channelID: String?
    /// A read's or a list's JSON.
    public var json: JSONValue?
    /// The first valid provider token on this connection: raise MAX_CONCURRENT_STREAMS now.
    public var raiseStreamLimit = false
    public var operation: ChannelOperation?
    /// What the devices hear of a broadcast (`activity` frames for connected devices).
    public var deviceFrames: [DeviceFrame] = []

    /// A create, delete or broadcast that succeeded: with `--state-dir` it is answered once
    /// committed (reads and refusals changed nothing).
    public var changedState: Bool {
        guard reason == nil, let operation else { return false }
        switch operation {
        case .create, .delete, .broadcast: return true
        case .read, .list: return false
        }
    }

    /// `{"reason":"…"}` for a failure, the JSON of a read or list, else nothing.
    public var body: [UInt8]? {
        if let reason {
            var out = Array("{\"reason\":".utf8)
            JSONValue.writeString(reason, into: &out)
            out.append(UInt8(ascii: "}"))
            return out
        }
        return json?.serializedBytes()
    }
}

public final class ChannelEndpoint: Sendable {
    /// Apple's broadcast payload limit, in bytes.
    public static let broadcastPayloadLimit = 5120
    public let state: EmulatorState
    public let clock: any EmulatorClock

    public init(state: EmulatorState, clock: any EmulatorClock) {
        self.state = state
        self.clock = clock
    }

    struct Rejection: Error, Sendable {
        var reason: String
        var status: Int
        var explanation: String

        init(_ reason: ChannelReason, _ explanation: String) {
            self.reason = reason.rawValue
            status = reason.status
            self.explanation = explanation
        }

        init(provider reason: APNsReason, _ explanation: String) {
            self.reason = reason.rawValue
            status = reason.status
            self.explanation = explanation
        }
    }

    /// The headers a channel request is judged by (lower-case names, as HTTP/2 sends them).
    struct Fields {
        var method: String?
        var path: String?
        var authority: String?
        var authorization: String?
        var requestID: String?
        var apnsID: String?
        var channelID: String?
        var pushType: String?
        var topic: String?
        var priority: String?
        var expiration: String?
        /// The first of these headers that came more than once.
        var duplicate: String?

        init(_ headers: [HeaderField]) {
            for field in headers {
                let (name, value) = (field.name, field.value)
                let trimmed = value.trimmingSpaces
                let earlier: String?
                switch name {
                case ":method": (earlier, method) = (method, value)
                case ":path": (earlier, path) = (path, value)
                case ":authority": (earlier, authority) = (authority, value)
                case "authorization": (earlier, authorization) = (authorization, trimmed)
                case "apns-request-id": (earlier, requestID) = (requestID, trimmed)
                case "apns-id": (earlier, apnsID) = (apnsID, trimmed)
                case "apns-channel-id": (earlier, channelID) = (channelID, trimmed)
                case "apns-push-type": (earlier, pushType) = (pushType, trimmed)
                case "apns-topic": (earlier, topic) = (topic, trimmed)
                case "apns-priority": (earlier, priority) = (priority, trimmed)
                case "apns-expiration": (earlier, expiration) = (expiration, trimmed)
                default: earlier = nil
                }
                if earlier != nil, duplicate == nil { duplicate = name }
            }
            // An optional header sent empty counts as absent, as on the device API.
            for field in [\Fields.requestID, \Fields.apnsID, \Fields.topic, \Fields.priority, \Fields.expiration]
            where self[keyPath: field]?.isEmpty == true {
                self[keyPath: field] = nil
            }
        }
    }

    /// Which operation a method and path name: nil for a path Apple does not serve (404
    /// `BadPath`), `.failure` for a path it serves with another method (405).
    public static func operation(method: String?, path: String?) -> Result<ChannelOperation, ChannelReason> {
        guard let path else { return .failure(.badPath) }
        let plain = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? path
        let parts = plain.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        // "", "1", "apps", bundle, "channels" | "all-channels"; "", "4", "broadcasts", "apps", bundle
        if parts.count == 5, parts[0].isEmpty, parts[1] == "1", parts[2] == "apps", !parts[3].isEmpty {
            let bundle = parts[3]
            switch (parts[4], method) {
            case ("channels", "POST"): return .success(.create(bundleID: bundle))
            case ("channels", "GET"): return .success(.read(bundleID: bundle))
            case ("channels", "DELETE"): return .success(.delete(bundleID: bundle))
            case ("channels", _): return .failure(.methodNotAllowed)
            case ("all-channels", "GET"): return .success(.list(bundleID: bundle))
            case ("all-channels", _): return .failure(.methodNotAllowed)
            default: return .failure(.badPath)
            }
        }
        if parts.count == 5, parts[0].isEmpty, parts[1] == "4", parts[2] == "broadcasts", parts[3] == "apps", !parts[4].isEmpty {
            return method == "POST" ? .success(.broadcast(bundleID: parts[4])) : .failure(.methodNotAllowed)
        }
        return .failure(.badPath)
    }

    /// Whether a path is a broadcast send's (on a push listener the rest is the device-push
    /// endpoint's). Runs for every request there: its first three bytes compared at once
    /// (`String.hasPrefix` is Unicode-aware; the UTF-8 view's iterator cost about 90 instructions).
    public static func isBroadcastPath(_ path: String) -> Bool { ASCII.hasPrefix(path, "/4/") }

    /// Judges one request. `management` is true on a channel-management host (its own
    /// listeners, or `--listen` for the `api-manage-broadcast` names), where only `/1/…`
    /// paths exist; elsewhere only broadcast sends do.
    public func handle(_ request: PushRequest, management: Bool, connection: inout ProviderConnectionContext) -> ChannelResponse {
        let fields = Fields(request.headers)
        let environment = APNsEnvironment.resolve(
            authority: fields.authority.map { Substring($0) },
            serverName: connection.serverName.map { Substring($0) },
            listener: connection.listenerEnvironment)
        let requestID =
            fields.requestID.flatMap { CanonicalUUID.isValid(Substring($0)) ? $0 : nil }
            ?? fields.apnsID.flatMap { CanonicalUUID.isValid(Substring($0)) ? $0 : nil }
            ?? connection.random.uniqueID()
        var response = ChannelResponse(status: 200, requestID: requestID)
        // Broadcasts are journaled (refused ones too), as device pushes are.
        var record: NotificationRecord? =
            !management && Self.isBroadcastPath(fields.path ?? "")
            ? Self.broadcastRecord(
                request, fields: fields, environment: environment, requestID: requestID, receivedAtMs: clock.nowMilliseconds(),
                connection: &connection) : nil
        do throws(Rejection) {
            if let reason = state.unavailableReason {
                throw Rejection(.serviceUnavailable, "the emulator cannot take changes now: \(reason)")
            }
            let operation = try Self.checkRequestLine(fields, management: management)
            response.operation = operation
            if let name = fields.duplicate {
                throw Rejection(.duplicateHeaders, "the \(name) header appears more than once")
            }
            if let id = fields.requestID, !CanonicalUUID.isValid(Substring(id)) {
                throw Rejection(.badMessageId, "apns-request-id '\(id)' is not a UUID (8-4-4-4-12 hex digits)")
            }
            if let id = fields.apnsID, !CanonicalUUID.isValid(Substring(id)) {
                throw Rejection(.badMessageId, "apns-id '\(id)' is not a UUID (8-4-4-4-12 hex digits)")
            }
            let identity = try authenticate(fields, environment: environment, connection: &connection, response: &response, record: &record)
            let now = clock.nowMilliseconds()
            let payload = request.body
            let outcome = try performLocked(
                operation, fields: fields, identity: identity, environment: environment, payload: payload,
                bodyLength: request.bodyLength, now: now, requestID: requestID, random: &connection.random, record: &record)
            response.status = outcome.status
            response.channelID = outcome.channelID
            response.json = outcome.json
            response.deviceFrames = outcome.deviceFrames
        } catch {
            response.status = error.status
            response.reason = error.reason
            response.explanation = error.explanation
            if var refused = record {
                // Refused before the world was consulted: journaled on its own.
                refused.reject(error)
                _ = state.withSharedWorld { world in world.records.append(moving: &refused) }
            }
        }
        return response
    }

    /// The journal record of a broadcast request, before it is judged.
    static func broadcastRecord(
        _ request: PushRequest, fields: Fields, environment: APNsEnvironment, requestID: String, receivedAtMs: Int64,
        connection: inout ProviderConnectionContext
    ) -> NotificationRecord {
        var record = NotificationRecord(apnsID: requestID, token: "", environment: environment, receivedAtMs: receivedAtMs)
        record.respondedAtMs = receivedAtMs
        record.connectionID = connection.connectionID
        record.streamID = request.streamID
        record.method = fields.method
        record.path = fields.path
        record.requestHeaders = request.headers.map { header in
            header.name == "authorization" ? HeaderField(header.name, connection.redactedAuthorization(header.value)) : header
        }
        record.pushType = fields.pushType
        record.pushTypeHeaderPresent = fields.pushType != nil
        record.priority = fields.priority.flatMap { Int($0) } ?? 10
        record.expiration = fields.expiration.flatMap { Int64($0) }
        record.topic = fields.topic
        record.payloadSize = request.bodyLength
        record.payload = Array(request.body.prefix(ChannelEndpoint.broadcastPayloadLimit))
        let parts = (fields.path ?? "").split(separator: "/")
        if parts.count == 4 { record.bundleID = String(parts[3]) }
        record.broadcast = BroadcastReach(channelID: fields.channelID ?? "")
        return record
    }

    /// Whether a host name is one of Apple's channel-management hosts.
    public static func isManagementHost(_ host: Substring) -> Bool {
        var name = host.lowercased()
        if let colon = name.lastIndex(of: ":"), !name.hasPrefix("[") { name = String(name[..<colon]) }
        return name == "api-manage-broadcast.push.apple.com" || name == "api-manage-broadcast.sandbox.push.apple.com"
    }

    static func checkRequestLine(_ fields: Fields, management: Bool) throws(Rejection) -> ChannelOperation {
        switch operation(method: fields.method, path: fields.path) {
        case .failure(let reason):
            throw Rejection(
                reason, "\(fields.method ?? "?") \(fields.path ?? "?"): \(reason == .badPath ? "no such path" : "method not allowed on this path")")
        case .success(let operation):
            if case .broadcast = operation, management {
                throw Rejection(.badPath, "broadcasts are sent to the push hosts (api.push.apple.com), not to the channel-management host")
            }
            if !management, operation != .broadcast(bundleID: operation.bundleID) {
                throw Rejection(
                    .badPath, "channel management lives on api-manage-broadcast(.sandbox).push.apple.com (ports 2195 and 2196), not on the push hosts"
                )
            }
            return operation
        }
    }

    enum Identity {
        case token(AuthenticatedProvider)
        case certificate(CertificateCredential)
    }

    /// `record`: a broadcast's journal record, which keeps the provider token's header and
    /// claims whether it was verified or refused (as a device push's does).
    private func authenticate(
        _ fields: Fields, environment: APNsEnvironment, connection: inout ProviderConnectionContext,
        response: inout ChannelResponse, record: inout NotificationRecord?
    ) throws(Rejection) -> Identity {
        switch connection.credential {
        case .certificate(let certificate):
            if let problem = certificate.problem {
                throw Rejection(provider: .badCertificate, "the client certificate is not valid: \(problem)")
            }
            guard certificate.allows(environment) else {
                throw Rejection(
                    provider: .badCertificateEnvironment,
                    "the client certificate is for \(certificate.development ? "sandbox" : "production") only; this request is \(environment.rawValue)"
                )
            }
            return .certificate(certificate)
        case .token:
            let state = self.state
            let result = connection.authenticator.authenticate(
                authorization: fields.authorization, environment: environment,
                nowMs: clock.nowMilliseconds() - clock.offsetMilliseconds,
                credentialsGeneration: state.currentCredentialsGeneration,
                lookUpKey: { id in state.readWorld { $0.credentials.keys[id] } })
            record?.noteProviderToken(result, authorizationSent: fields.authorization != nil)
            switch result {
            case .authenticated(let provider, let first):
                response.raiseStreamLimit = first
                return .token(provider)
            case .rejected(let reason, let explanation, _):
                throw Rejection(provider: reason, explanation)
            }
        }
    }

    struct Outcome: Sendable {
        var status: Int
        var channelID: String?
        var json: JSONValue?
        var deviceFrames: [DeviceFrame] = []
    }

    private func performLocked(
        _ operation: ChannelOperation, fields: Fields, identity: Identity, environment: APNsEnvironment, payload: [UInt8],
        bodyLength: Int, now: Int64, requestID: String, random: inout FastRandom, record: inout NotificationRecord?
    ) throws(Rejection) -> Outcome {
        // Bodies are read before the lock is taken (so it is held briefly); what they got wrong
        // is reported in the check order, after the app checks.
        let create: Result<ChannelStoragePolicy, Rejection>? =
            operation.isCreate ? Result { () throws(Rejection) in try Self.createRequest(payload, bodyLength: bodyLength) } : nil
        let payloadProblem: Rejection? = operation.isBroadcast ? Self.payloadProblem(payload, bodyLength: bodyLength) : nil
        if let read = readOutcome(operation, fields: fields, identity: identity, environment: environment) { return try read.get() }
        var drawn = random
        var journal = record
        record = nil
        let result = state.withSharedWorld { (world: inout World) -> Result<Outcome, Rejection> in
            let result = Self.perform(
                operation, fields: fields, identity: identity, environment: environment, payload: payload, now: now, requestID: requestID,
                create: create, payloadProblem: payloadProblem, drawn: &drawn, world: &world, journal: &journal)
            if var entry = journal {
                if case .failure(let error) = result { entry.reject(error) }
                let reach = entry.broadcast
                let sequence = world.records.append(moving: &entry)
                if let reach, let ignored = reach.outcomes[.ignored], let first = reach.deliveries.first(where: { $0.outcome == .ignored }) {
                    // One finding per broadcast, however many activities ignored it; it names
                    // their devices (the first ten of those the record lists).
                    let devices = reach.deliveries.filter { $0.outcome == .ignored }.map(\.deviceID)
                    let named = devices.prefix(10).joined(separator: ", ") + (ignored > 10 ? " and \(ignored - 10) more" : "")
                    world.noteIgnoredPush(
                        IgnoredPush(
                            sequence: sequence, apnsID: requestID, deviceID: first.deviceID, bundleID: operation.bundleID,
                            pushType: PushType.liveactivity.rawValue,
                            explanation:
                                "\(ignored) of \(reach.subscribers) subscribed Live Activities ignored the broadcast on channel \(reach.channelID) (on \(named)); the first: \(first.explanation)",
                            atMs: now))
                }
            }
            return result
        }
        guard let result else {
            throw Rejection(.serviceUnavailable, "the shared state (--redis) did not take the change")
        }
        random = drawn
        return try result.get()
    }

    private static func perform(
        _ operation: ChannelOperation, fields: Fields, identity: Identity, environment: APNsEnvironment, payload: [UInt8], now: Int64,
        requestID: String, create: Result<ChannelStoragePolicy, Rejection>?, payloadProblem: Rejection?, drawn: inout FastRandom,
        world: inout World, journal: inout NotificationRecord?
    ) -> Result<Outcome, Rejection> {
        do throws(Rejection) {
            try Self.checkApp(operation.bundleID, identity: identity, world: world)
            switch operation {
            case .create(let bundle):
                guard let create else { throw Rejection(.badRequestPayload, "no request body") }
                let policy = try create.get()
                guard
                    let channel = world.channels.create(
                        bundleID: bundle, environment: environment, policy: policy, nowMs: now,
                        makeID: { ChannelDirectory.randomID(&drawn) })
                else {
                    throw Rejection(
                        .cannotCreateChannelConfig,
                        "\(bundle) already has \(world.channels.maxLivePerApp) live channels in \(environment.rawValue) (deleted ones do not count)"
                    )
                }
                return .success(Outcome(status: 201, channelID: channel.id))
            case .read(let bundle):
                let channel = try Self.channel(fields, bundle: bundle, environment: environment, world: world)
                return .success(Self.readAnswer(channel))
            case .list(let bundle):
                return .success(Self.listAnswer(world.channels, bundle: bundle, environment: environment))
            case .delete(let bundle):
                let channel = try Self.channel(fields, bundle: bundle, environment: environment, world: world)
                world.channels.delete(id: channel.id, bundleID: bundle, environment: environment, nowMs: now)
                world.storedBroadcastOfDeletedChannel(channel, nowMs: now)
                return .success(Outcome(status: 204))
            case .broadcast(let bundle):
                let channel = try Self.channel(fields, bundle: bundle, environment: environment, world: world)
                let message = try Self.broadcast(
                    fields, channel: channel, payload: payload, problem: payloadProblem, now: now,
                    // Its record is appended next, under this lock: it takes this sequence.
                    key: StoredBroadcast.key(requestID: requestID, recordSequence: world.records.nextSequence))
                guard world.channels.allowsBroadcast(id: channel.id, nowMs: now) else {
                    throw Rejection(
                        .tooManyRequests,
                        "channel \(channel.id) took \(world.channels.maxBroadcastsPerSecond) broadcasts in the last second (--channel-broadcast-rate)"
                    )
                }
                world.channels.recordBroadcast(id: channel.id, message: message)
                if channel.policy == .mostRecentMessageStored, message.expiresAtMs > now, let replaced = channel.storedMessage {
                    world.storedBroadcastLeft(replaced, channelID: channel.id, replacedBy: requestID, nowMs: now)
                }
                let (reach, frames) = world.deliverBroadcast(channel, message: message, nowMs: now)
                // An apns-expiration already past leaves nothing stored.
                let kept = channel.policy == .mostRecentMessageStored && message.expiresAtMs > now
                journal?.status = 200
                journal?.broadcast = reach
                journal?.outcome = reach.summaryOutcome(keptForLater: kept)
                journal?.explanation = Self.reachSummary(reach, channelID: channel.id, stored: kept ? Self.keptForLater : "")
                return .success(Outcome(status: 200, deviceFrames: frames))
            }
        } catch {
            return .failure(error)
        }
    }

    /// What a broadcast's explanation ends with while its channel keeps it.
    static let keptForLater = "; the channel keeps it for later subscribers (Most Recent Message Stored)"
    /// The same once the channel is deleted: it takes no new subscribers, but the activities
    /// that subscribed before and were offline may still take its message.
    static let keptForThoseWaiting =
        "; the channel was deleted: it keeps the message only for the activities subscribed before, whose devices were offline"

    /// The ending of a stored broadcast's explanation for `channel` as it is now.
    static func storedSuffix(_ channel: BroadcastChannel?) -> String {
        channel?.isLive == false ? keptForThoseWaiting : keptForLater
    }

    /// The record's explanation of a broadcast that was accepted; `stored` says what became of
    /// the channel's copy (empty on a No Message Stored channel).
    static func reachSummary(_ reach: BroadcastReach, channelID: String, stored: String) -> String {
        guard reach.subscribers > 0 else { return "accepted; no Live Activity subscribes to channel \(channelID)\(stored)" }
        let counts = reach.outcomes.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.value) \($0.key.rawValue)" }.joined(separator: ", ")
        return "accepted; \(reach.reached) of \(reach.subscribers) subscribed Live Activities showed it (\(counts))\(stored)"
    }

    /// Read and list of a single instance take the read path. With `--redis` they take the
    /// write path, whose lease brings this copy up to date first: a channel just created on
    /// another instance is then found, as on Apple's hosts. Nil for the operations that
    /// change something.
    private func readOutcome(
        _ operation: ChannelOperation, fields: Fields, identity: Identity, environment: APNsEnvironment
    )
        -> Result<Outcome, Rejection>?
    {
        guard state.coordinator == nil else { return nil }
        switch operation {
        case .read, .list: break
        default: return nil
        }
        return state.readWorld { world -> Result<Outcome, Rejection> in
            do throws(Rejection) {
                try Self.checkApp(operation.bundleID, identity: identity, world: world)
                if case .list(let bundle) = operation {
                    return .success(Self.listAnswer(world.channels, bundle: bundle, environment: environment))
                }
                let channel = try Self.channel(fields, bundle: operation.bundleID, environment: environment, world: world)
                return .success(Self.readAnswer(channel))
            } catch {
                return .failure(error)
            }
        }
    }

    static func readAnswer(_ channel: BroadcastChannel) -> Outcome {
        Outcome(status: 200, json: ["message-storage-policy": .int(Int64(channel.policy.rawValue)), "push-type": "LiveActivity"])
    }

    static func listAnswer(_ channels: ChannelDirectory, bundle: String, environment: APNsEnvironment) -> Outcome {
        Outcome(status: 200, json: ["channels": .array(channels.liveChannels(bundleID: bundle, environment: environment).map { .string($0.id) })])
    }

    /// The body of a create: `{"message-storage-policy": 0|1, "push-type": "LiveActivity"}`.
    /// The policy may be a number or a numeric string and the push type any case: node-apn
    /// sends `"1"` and `"liveactivity"`, and Apple does not say these are refused.
    static func createRequest(_ payload: [UInt8], bodyLength: Int) throws(Rejection) -> ChannelStoragePolicy {
        // "No payload" is `PayloadEmpty` in Apple's table for this API, as for a broadcast.
        guard bodyLength > 0 else {
            throw Rejection(
                .payloadEmpty, "the request has no body; it needs {\"message-storage-policy\": 0 or 1, \"push-type\": \"LiveActivity\"}")
        }
        // Only the first bytes of a longer body are kept (`bodyLength` counts them all): cut
        // short, it would read as "not JSON". Apple publishes no limit for this body; its error
        // table's only size reason is a broadcast's.
        guard bodyLength <= broadcastPayloadLimit else {
            throw Rejection(
                .payloadTooLarge,
                "the body is \(bodyLength) bytes; a channel's is {\"message-storage-policy\": 0 or 1, \"push-type\": \"LiveActivity\"}, and the emulator reads at most \(broadcastPayloadLimit)"
            )
        }
        let value: JSONValue
        do { value = try JSONValue.parse(payload) } catch {
            throw Rejection(.badRequestPayload, "the body is not JSON: \(error)")
        }
        guard let object = value.objectValue else { throw Rejection(.badRequestPayload, "the body is not a JSON object") }
        for key in object.keys where key != "message-storage-policy" && key != "push-type" {
            throw Rejection(.badRequestParams, "unknown attribute '\(key)' (only message-storage-policy and push-type exist)")
        }
        guard let type = object["push-type"] else { throw Rejection(.missingPushType, "the body has no push-type") }
        guard let text = type.stringValue, text.lowercased() == "liveactivity" else {
            throw Rejection(.invalidPushType, "push-type must be LiveActivity, not \(type.serialized())")
        }
        guard let policyValue = object["message-storage-policy"] else {
            throw Rejection(.badRequestParams, "the body has no message-storage-policy (0: No Message Stored, 1: Most Recent Message Stored)")
        }
        let number = policyValue.intValue ?? policyValue.stringValue.flatMap { Int64($0) }
        guard let number, let policy = ChannelStoragePolicy(rawValue: Int(number)) else {
            throw Rejection(.badRequestParams, "message-storage-policy must be 0 or 1, not \(policyValue.serialized())")
        }
        return policy
    }

    /// The app in the path must be the token's team's (or the certificate's), and have the
    /// broadcast capability.
    static func checkApp(_ bundle: String, identity: Identity, world: World) throws(Rejection) {
        switch identity {
        case .token(let provider):
            // Channels carry Live Activity updates only: a topic-specific key that lists the
            // app's Live Activity topic (and not the bundle) covers them too.
            guard world.credentials.owner(ofBundle: bundle)?.teamID == provider.teamID,
                provider.key.covers(bundleID: bundle, topic: bundle + PushType.liveactivity.topicSuffix)
            else {
                throw Rejection(.topicMismatch, "the provider token's team \(provider.teamID) (key \(provider.key.keyID)) does not cover \(bundle)")
            }
        case .certificate(let certificate):
            guard certificate.bundleID == bundle else {
                throw Rejection(.topicMismatch, "the client certificate is for \(certificate.bundleID), not \(bundle)")
            }
        }
        if world.broadcastDisabledApps.contains(bundle) {
            throw Rejection(.featureNotEnabled, "\(bundle) does not have the Broadcast capability (--app …?broadcast=off)")
        }
    }

    /// The channel `apns-channel-id` names, live, of this app in this environment.
    static func channel(
        _ fields: Fields, bundle: String, environment: APNsEnvironment, world: World
    ) throws(Rejection)
        -> BroadcastChannel
    {
        guard let id = fields.channelID, !id.isEmpty else { throw Rejection(.missingChannelId, "no apns-channel-id header") }
        guard ChannelDirectory.isWellFormedID(id) else { throw Rejection(.badChannelId, "apns-channel-id '\(id)' is not base64") }
        guard let channel = world.channels.live(id: id, bundleID: bundle, environment: environment) else {
            let known = world.channels.channels[id]
            let why: String
            if let known, !known.isLive {
                why = "channel \(id) was deleted"
            } else if let known, known.environment != environment {
                why = "channel \(id) is a \(known.environment.rawValue) channel; sandbox and production channels are separate"
            } else if let known {
                why = "channel \(id) belongs to \(known.bundleID), not \(bundle)"
            } else {
                why = "no channel \(id) for \(bundle) in \(environment.rawValue)"
            }
            throw Rejection(.channelNotRegistered, why)
        }
        return channel
    }

    /// A broadcast's headers and payload (docs/apns-behaviour.md, "Broadcast send").
    static func broadcast(
        _ fields: Fields, channel: BroadcastChannel, payload: [UInt8], problem: Rejection?, now: Int64, key: String
    ) throws(Rejection) -> StoredBroadcast {
        guard let type = fields.pushType, !type.isEmpty else { throw Rejection(.missingPushType, "no apns-push-type header") }
        guard type.lowercased() == "liveactivity" else {
            throw Rejection(.invalidPushType, "apns-push-type must be liveactivity for a broadcast, not \(type)")
        }
        if let topic = fields.topic, topic.contains(".push-type.") {
            throw Rejection(.topicDisallowed, "apns-topic \(topic) carries a push-type suffix; broadcasts take no topic")
        }
        // Both headers may be left out, as on the device API: node-apn sends `apns-priority` only
        // when it is not 10 and `apns-expiration` only when one is set.
        let priorityText = fields.priority ?? "10"
        guard let priority = APNsHeaderFields.priority(priorityText) else {
            throw Rejection(.badPriority, "apns-priority must be 10, 5 or 1, not \(priorityText)")
        }
        let expirationText = fields.expiration ?? "0"
        guard let expiration = APNsHeaderFields.expirationSeconds(expirationText) else {
            throw Rejection(.badExpirationDate, "apns-expiration must be 0 or a UNIX time in seconds, not \(expirationText)")
        }
        if expiration != 0, channel.policy == .noMessageStored {
            throw Rejection(.badExpirationDate, "channel \(channel.id) is No Message Stored (policy 0): apns-expiration must be 0")
        }
        if let problem { throw problem }
        let longest = now + ChannelDirectory.maxStorageMs
        let expires = expiration == 0 ? longest : min(longest, millisecondsSince1970(wholeSeconds: expiration))
        return StoredBroadcast(key: key, payload: payload, priority: priority, receivedAtMs: now, expiresAtMs: expires)
    }
}

extension ChannelEndpoint {
    /// What is wrong with a broadcast's payload, if anything: empty, over 5,120 bytes, not a
    /// JSON object with an `aps` dictionary.
    static func payloadProblem(_ payload: [UInt8], bodyLength: Int) -> Rejection? {
        guard bodyLength > 0 else { return Rejection(.payloadEmpty, "the broadcast has no payload") }
        guard bodyLength <= ChannelEndpoint.broadcastPayloadLimit else {
            return Rejection(
                .payloadTooLarge, "the payload is \(bodyLength) bytes; a broadcast takes at most \(ChannelEndpoint.broadcastPayloadLimit)")
        }
        guard let value = try? JSONValue.parse(payload) else { return Rejection(.badRequestPayload, "the payload is not JSON") }
        guard value.objectValue?["aps"]?.objectValue != nil else {
            return Rejection(.badRequestPayload, "the payload has no aps dictionary")
        }
        return nil
    }
}

extension ChannelOperation {
    var isCreate: Bool { if case .create = self { return true } else { return false } }
    var isBroadcast: Bool { if case .broadcast = self { return true } else { return false } }
}

extension String {
    /// Without leading and trailing spaces and tabs.
    fileprivate var trimmingSpaces: String {
        var text = Substring(self)
        while let first = text.first, first == " " || first == "\t" { text = text.dropFirst() }
        while let last = text.last, last == " " || last == "\t" { text = text.dropLast() }
        return String(text)
    }
}

extension NotificationRecord {
    fileprivate mutating func reject(_ rejection: ChannelEndpoint.Rejection) {
        status = rejection.status
        reason = rejection.reason
        explanation = rejection.explanation
        outcome = .rejected
    }
}
