public import HTTPGrammar
import MonotonicClock

/// Settings for how the endpoint judges requests where Apple's behaviour is unconfirmed.
public struct EndpointOptions: Sendable {
    public enum InvalidPayloadPolicy: String, Sendable, CaseIterable {
        /// 400 `BadRequestPayload` for a body that is not a JSON object (default).
        case reject
        /// 200, recorded as dropped: what APNs may do ("may return an error, delay, or drop").
        case accept
    }

    public var tokenPolicy = TokenPolicy()
    public var invalidPayload: InvalidPayloadPolicy = .reject
    /// Apple documents `BadEnvironmentKeyIdInToken`; `BadEnvironmentKeyInToken` was seen from
    /// APNs in 2025 (docs/apns-behaviour.md, "Reasons and statuses"). The spelling sent on the wire.
    public var badEnvironmentKeySpelling = "BadEnvironmentKeyIdInToken"
    /// How many payload bytes a record keeps.
    public var recordedPayloadLimit = 8192

    public init() {}

    public func reasonText(_ reason: APNsReason) -> String {
        reason == .badEnvironmentKeyIdInToken ? badEnvironmentKeySpelling : reason.rawValue
    }
}

/// How a provider connection authenticates: provider tokens (JWT) on every request, or the
/// TLS client certificate it connected with (docs/apns-behaviour.md, "Certificate connections").
public enum ProviderCredentialKind: Sendable {
    case token
    case certificate(CertificateCredential)
}

/// What an APNs provider certificate allows: one app's topics, in one or both environments.
public struct CertificateCredential: Sendable, Equatable {
    public var bundleID: String
    /// Every topic the certificate lists (the bundle id, `.voip`, `.complication`…).
    public var topics: [String]
    public var development: Bool
    public var production: Bool
    /// The certificate's subject, for records.
    public var subject: String
    /// Why the certificate is not valid (does not chain to the trusted CA, expired…), or nil.
    public var problem: String?

    public init(
        bundleID: String, topics: [String], development: Bool, production: Bool, subject: String,
        problem: String? = nil
    ) {
        self.bundleID = bundleID
        self.topics = topics.isEmpty ? [bundleID] : topics
        self.development = development
        self.production = production
        self.subject = subject
        self.problem = problem
    }

    public func allows(_ environment: APNsEnvironment) -> Bool {
        environment == .sandbox ? development : production
    }
}

/// Per-connection state the endpoint needs. Owned by the connection; used from its thread.
public struct ProviderConnectionContext: Sendable {
    public let connectionID: UInt64
    public let listenerEnvironment: APNsEnvironment
    /// The TLS SNI the client sent, if any.
    public let serverName: String?
    public var credential: ProviderCredentialKind = .token
    public var authenticator: ConnectionAuthenticator
    public var random: FastRandom

    /// The last `authorization` value and its form without the JWT signature: clients send
    /// the same token for many requests, so this is worked out once per token.
    private var lastRedaction: (original: String, redacted: String)?
    /// The last request's header names (`APNsHeaderFields.read`).
    var headerNames = HeaderNames()
    /// The last device push path and what `checkRequestLine` made of it.
    var recentPath = ProviderEndpoint.RecentPath()
    /// The last complete payload, its JSON verdict and content.
    var recentPayload = ProviderEndpoint.RecentPayload()

    /// The last header array redacted (`redactAuthorization`) and what it became.
    private var lastHeaders: (received: [HeaderField], redacted: [HeaderField]) = ([], [])

    /// Replaces the `authorization` value at `index` by its form without the signature. The
    /// HTTP/2 layer hands over the same array for a request whose header list repeats the last
    /// one's (`RecentHeaderFields`): that array is redacted once, and its records share the result.
    mutating func redactAuthorization(_ headers: inout [HeaderField], at index: Int) {
        if Bytes.sameArray(headers, lastHeaders.received) {
            headers = lastHeaders.redacted
            return
        }
        let received = headers
        headers[index].value = redactedAuthorization(headers[index].value)
        lastHeaders = (received, headers)
    }

    mutating func redactedAuthorization(_ value: String) -> String {
        if let last = lastRedaction, last.original == value { return last.redacted }
        let redacted = ProviderToken.withoutSignature(value)
        lastRedaction = (value, redacted)
        return redacted
    }

    public init(
        connectionID: UInt64, listenerEnvironment: APNsEnvironment, serverName: String?,
        tokenPolicy: TokenPolicy, random: FastRandom = FastRandom()
    ) {
        self.connectionID = connectionID
        self.listenerEnvironment = listenerEnvironment
        self.serverName = serverName
        self.authenticator = ConnectionAuthenticator(policy: tokenPolicy)
        self.random = random
    }
}

/// What to send back, as APNs would (docs/apns-behaviour.md, "Responses").
public struct PushResponse: Sendable {
    public var status: Int
    /// The `apns-id` (written from its bits into the answer: `apnsID` is its text).
    public var apnsPushID: PushID
    /// Sandbox only (`uniqueID` is its text).
    public var uniquePushID: PushID
    public var apnsID: String {
        get { apnsPushID.text }
        set { apnsPushID = PushID(newValue) }
    }
    public var uniqueID: String? {
        get { uniquePushID.optionalText }
        set { uniquePushID = newValue.map(PushID.init) ?? .none }
    }
    public var reason: APNsReason?
    /// The reason as spelled on the wire.
    public var reasonText: String?
    /// 410 `Unregistered` only (ms).
    public var timestampMs: Int64?
    /// The first valid provider token on this connection: raise MAX_CONCURRENT_STREAMS now.
    public var raiseStreamLimit: Bool
    /// The request changed nothing (refused because the state cannot take changes): the
    /// answer waits for no commit.
    public var changedNothing = false
    /// A fault rule fired: the connection carries out its action (delay, reset, GOAWAY…).
    public var fault: FiredFault? {
        get { faultBox?.fault }
        set { faultBox = newValue.map(FiredFaultBox.init) }
    }
    /// Boxed: an optional `FiredFault` (an enum with payloads inside) is copied and destroyed
    /// through the runtime's generic witnesses, a few hundred instructions a request even when
    /// nil, and an answer is copied several times on its way out.
    fileprivate var faultBox: FiredFaultBox?
    /// The record's sequence number in the journal.
    public var recordSequence: UInt64
    /// Messages for device connections (write them after the request is answered).
    public var deviceFrames: [DeviceFrame] = []
    /// Judged in a shared turn (`ChangeMode.shared`), the push turned out to change what only
    /// a change under the lease may (a Live Activity, a token counting down to its 410):
    /// nothing was changed, and it is to be judged again under the lease.
    public var needsLease = false

    /// `{"reason":"…"}` (plus `"timestamp"` for 410), or nil for a success.
    public var body: [UInt8]? {
        guard let reasonText else { return nil }
        var out = Array("{\"reason\":".utf8)
        JSONValue.writeString(reasonText, into: &out)
        if let timestampMs { out.append(contentsOf: ",\"timestamp\":\(timestampMs)".utf8) }
        out.append(UInt8(ascii: "}"))
        return out
    }
}

extension PushResponse {
    /// An answer to fill in (`ProviderEndpoint.fill`).
    static var blank: PushResponse {
        PushResponse(
            status: 0, apnsPushID: .none, uniquePushID: .none, reason: nil, reasonText: nil, timestampMs: nil,
            raiseStreamLimit: false, recordSequence: 0)
    }
}

extension PendingNotification {
    /// A notification to fill in (`ProviderEndpoint.accepted`). Stored: built in a getter, it
    /// was made, copied out and the original destroyed, on every push.
    static let blank = PendingNotification(
        sequence: 0, apnsID: "", token: "", topic: "", deviceID: "", bundleID: "", pushType: .alert, priority: 10,
        collapseID: nil, storeUntilMs: nil, payload: [], content: PushContent())
}

fileprivate final class FiredFaultBox: Sendable {
    let fault: FiredFault
    init(_ fault: FiredFault) { self.fault = fault }
}

/// Judges `POST /3/device/<token>` requests with Apple's rules, in the order of
/// docs/apns-behaviour.md, "Check order": method → path → duplicate headers → header syntax →
/// provider token (or certificate) → topic → device token → payload → rate. Pure logic: no
/// I/O; the clock and the shared state are injected.
public final class ProviderEndpoint: Sendable {
    public let state: EmulatorState
    public let clock: any EmulatorClock
    public let options: EndpointOptions

    public init(state: EmulatorState, clock: any EmulatorClock, options: EndpointOptions = EndpointOptions()) {
        self.state = state
        self.clock = clock
        self.options = options
    }

    fileprivate struct Rejection: Error, Sendable {
        var reason: APNsReason
        var explanation: String
        var timestampMs: Int64? = nil
        /// A token of the other environment: the record says where the environment came from.
        var wrongEnvironment = false
    }

    /// How a request's environment was chosen (`APNsEnvironment.resolve`), for a token of the
    /// other one: a provider sending by IP address learns that the port, not the token, chose.
    static func environmentSource(authority: String?, chosen: APNsEnvironment) -> String {
        if let authority, APNsEnvironment.forAppleHost(Substring(authority)) != nil {
            return " (:authority \(authority) selects \(chosen.rawValue))"
        }
        let named = authority.map { ":authority \($0) names no Apple host" } ?? "no :authority"
        return
            " (\(named), so the TLS server name, else the port it came to, chose \(chosen.rawValue); \(chosen.other.appleHost), or the emulator's \(chosen.other.rawValue) port, takes this token)"
    }

    /// A push's `apns-id`: the client's when it is a canonical UUID (echoed as sent), else a new one.
    private static func apnsID(_ fields: APNsHeaderFields, random: inout FastRandom) -> PushID {
        if let id = fields.apnsID, CanonicalUUID.isValid(Substring(id)) { return PushID(id) }
        return random.apnsID()
    }

    public func handle(_ request: consuming PushRequest, connection: inout ProviderConnectionContext) -> PushResponse {
        switch begin(request, connection: &connection) {
        case .answered(let response): return response
        case .needsState(let check): return finish(check)
        }
    }

    /// What `begin` leaves: an answer, or the stages that need the state still to run.
    public enum Judging: Sendable {
        case answered(PushResponse)
        case needsState(PendingCheck)
    }

    /// A push judged as far as it can be without the state (the request line, header syntax,
    /// the provider token or certificate, the payload's JSON): the stateful stages (topic,
    /// device token, payload, rate) and the record are still to run, under the state's lock,
    /// now (`finish`) or on a thread that may wait for the other instances (`judge`). A class:
    /// the record it carries is large, and a value moved through `Judging` and into a queue was
    /// copied each time (1,700 instructions of memcpy a request).
    public final class PendingCheck: @unchecked Sendable {
        fileprivate enum Stage: Sendable {
            case judge(fields: APNsHeaderFields, syntax: Syntax, provider: ProviderIdentity, json: JSONValidator.Verdict?, content: PushContent)
            /// Rejected before any state was consulted: only the record and counters remain.
            case journal(Rejection)
        }
        fileprivate let stage: Stage
        fileprivate var record: NotificationRecord
        fileprivate let request: PushRequest
        fileprivate let environment: APNsEnvironment
        fileprivate let now: Int64
        fileprivate let raiseStreamLimit: Bool
        fileprivate let verification: String?
        fileprivate let fault: FiredFault?
        /// The `apns-id` the answer carries.
        public let apnsID: PushID

        fileprivate init(
            stage: Stage, record: NotificationRecord, request: PushRequest, environment: APNsEnvironment, now: Int64,
            raiseStreamLimit: Bool, verification: String?, fault: FiredFault?, apnsID: PushID
        ) {
            self.stage = stage
            self.record = record
            self.request = request
            self.environment = environment
            self.now = now
            self.raiseStreamLimit = raiseStreamLimit
            self.verification = verification
            self.fault = fault
            self.apnsID = apnsID
        }
    }

    /// Judges the stateless stages; see `PendingCheck`. A push that a fault rule answers, or
    /// that the state cannot take now (`unavailableReason`), is answered here.
    public func begin(
        _ request: consuming PushRequest, connection: inout ProviderConnectionContext, deferring: Deferring = .never
    ) -> Judging {
        if state.unavailableReason != nil {
            // The shared state (--redis) cannot be reached or the state directory cannot
            // commit: nothing can be judged or kept, so nothing is promised (APNs answers 503
            // when it cannot serve).
            return .answered(unavailable(apnsID: connection.random.apnsID(), raise: false))
        }
        let now = clock.nowMilliseconds()
        var fields = APNsHeaderFields()
        APNsHeaderFields.read(request.headers, names: &connection.headerNames, into: &fields)
        let environment = APNsEnvironment.resolve(
            authority: fields.authority.map { Substring($0) }, serverName: connection.serverName.map { Substring($0) },
            listener: connection.listenerEnvironment)

        var record = NotificationRecord(
            apnsID: Self.apnsID(fields, random: &connection.random), token: "", environment: environment, receivedAtMs: now)
        // Judging takes microseconds; the clock's millisecond resolution makes them one.
        record.respondedAtMs = now
        record.connectionID = connection.connectionID
        record.streamID = request.streamID
        // Unwrapped before they are stored: a `String?` copied whole goes through a merged
        // outlined copy that asks the runtime (about 140 instructions each, three a request).
        if let method = fields.method { record.method = method }
        if let path = fields.path { record.path = path }
        record.requestHeaders = request.headers
        request.headers = []  // the record now holds the only reference: edited in place below
        // A provider token may be signed with a real key and valid for an hour: records keep
        // its header and claims, never its signature.
        if fields.duplicate != nil {
            for index in record.requestHeaders.indices where record.requestHeaders[index].name == "authorization" {
                record.requestHeaders[index].value = ProviderToken.withoutSignature(record.requestHeaders[index].value)
            }
        } else if let index = fields.authorizationIndex {
            connection.redactAuthorization(&record.requestHeaders, at: index)
        }
        if let topic = fields.topic { record.topic = topic }
        record.collapseID = fields.collapseID.flatMap { $0.isEmpty ? nil : $0 }
        record.payloadSize = request.bodyLength
        record.payload =
            request.body.count <= options.recordedPayloadLimit
            ? request.body : Array(request.body.prefix(options.recordedPayloadLimit))
        record.headerListBytes = request.headerListSize ?? 0
        if environment == .sandbox { record.uniquePushID = connection.random.uniquePushID() }

        var fault: FiredFault?
        // Rules act on pushes (`POST /3/device/TOKEN`), not on requests APNs refuses as such.
        if state.hasFaultRules, fields.method == "POST", fields.path.map(Self.isDevicePushPath) == true,
            let fired = evaluateFaults(fields, environment: environment, connection: connection)
        {
            if let reply = applyFault(fired, record: &record, now: now) {
                if reply.reason == .expiredProviderToken { connection.authenticator.noteExpired(authorization: fields.authorization) }
                return .answered(reply)
            }
            // Only a delay or a SETTINGS change: judge the request normally, then act.
            record.faultRuleID = fired.ruleID
            record.respondedAtMs = now + Int64(fired.delayMs)
            fault = fired
        }
        var raiseStreamLimit = false
        // Held by the stateful stages from here on (a `consuming` parameter cannot be).
        let pushRequest = request
        do throws(Rejection) {
            var syntax = try checkRequestLine(fields, record: &record, recent: &connection.recentPath)
            try checkHeaderSyntax(fields, syntax: &syntax, record: &record)
            let provider: ProviderIdentity
            switch connection.credential {
            case .token:
                provider = .token(
                    try authenticate(
                        fields, environment: environment, now: now,
                        connection: &connection, record: &record, raise: &raiseStreamLimit))
            case .certificate(let certificate):
                provider = .certificate(try checkCertificate(certificate, environment: environment, record: &record))
            }
            // Payload facts that need no state are worked out before taking the lock.
            let json: JSONValidator.Verdict?
            let content: PushContent
            if pushRequest.bodyLength > 0 && pushRequest.bodyLength == pushRequest.body.count {
                if connection.recentPayload.isPayload(pushRequest.body) {
                    // The same payload as the last push (one alert to many devices): its verdict
                    // and content are reused (checking and reading it cost 3,000 instructions).
                    json = connection.recentPayload.json
                    content = connection.recentPayload.content
                } else {
                    let verdict = JSONValidator.check(pushRequest.body)
                    json = verdict
                    content = verdict == .object ? PushContent.read(pushRequest.body) : PushContent()
                    connection.recentPayload = RecentPayload(bytes: pushRequest.body, json: verdict, content: content)
                }
            } else {
                json = nil
                content = PushContent()
            }
            let verification = connection.authenticator.lastVerification
            connection.authenticator.lastVerification = nil
            // Judged in place when it can be (what it needs is borrowed, not copied into a
            // `PendingCheck`); packed up only for a thread that may wait. The record is passed
            // through `stateful`, and the closure captures only constants: a `var` it captured
            // (the record, the syntax, the raise flag) was boxed on the heap, three allocations
            // and three run-time exclusivity checks a request.
            let checkedSyntax = syntax
            let raise = raiseStreamLimit
            func judgeNow(_ subject: inout NotificationRecord, _ world: inout World, _ reply: inout PushResponse) {
                judge(
                    &subject, fields: fields, syntax: checkedSyntax, provider: provider, json: json, content: content,
                    request: pushRequest, environment: environment, now: now, raise: raise,
                    verification: verification, world: &world, reply: &reply)
            }
            var answer = PushResponse.blank
            let apnsID = record.apnsPushID
            if stateful(&record, judgeNow, answer: &answer, deferring: deferring, apnsID: apnsID, raise: raise, fault: fault) {
                return .answered(answer)
            }
            return .needsState(
                PendingCheck(
                    stage: .judge(fields: fields, syntax: syntax, provider: provider, json: json, content: content),
                    record: record, request: pushRequest, environment: environment, now: now,
                    raiseStreamLimit: raiseStreamLimit, verification: verification, fault: fault, apnsID: record.apnsPushID))
        } catch {
            record.reject(error, spelledAs: options.reasonText(error.reason))
            let verification = connection.authenticator.lastVerification
            connection.authenticator.lastVerification = nil
            let raise = raiseStreamLimit
            func journalNow(_ subject: inout NotificationRecord, _ world: inout World, _ reply: inout PushResponse) {
                reply = journal(
                    &subject, rejection: error, environment: environment, raise: raise, verification: verification,
                    world: &world)
            }
            var answer = PushResponse.blank
            let apnsID = record.apnsPushID
            if stateful(&record, journalNow, answer: &answer, deferring: deferring, apnsID: apnsID, raise: raise, fault: fault) {
                return .answered(answer)
            }
            return .needsState(
                PendingCheck(
                    stage: .journal(error), record: record, request: pushRequest, environment: environment, now: now,
                    raiseStreamLimit: raiseStreamLimit, verification: verification, fault: fault, apnsID: record.apnsPushID))
        }
    }

    /// Whether `begin` may hand the stateful stages back instead of running them.
    public enum Deferring: Sendable {
        /// Never: run them now, waiting for the state if need be (`handle`).
        case never
        /// When running them now would wait (`--redis`: for the lease).
        case ifWaiting
        /// Always (the connection has pushes waiting already, which must go first).
        case always
    }

    /// Runs the stateful part `body` as `deferring` allows, filling `answer` in place (a
    /// returned answer is copied once and destroyed once more): true when `answer` is its answer
    /// (with the fault rule that fired) or 503 when the change cannot be kept, false when it is
    /// to be handed back.
    private func stateful(
        _ record: inout NotificationRecord, _ body: (inout NotificationRecord, inout World, inout PushResponse) -> Void,
        answer: inout PushResponse, deferring: Deferring, apnsID: PushID, raise: Bool, fault: FiredFault?
    ) -> Bool {
        switch deferring {
        case .never:
            if state.withSharedWorld(mode: .shared, { body(&record, &$0, &answer) }) == nil {
                answer = unavailable(apnsID: apnsID, raise: raise)
            } else if answer.needsLease, state.withSharedWorld({ body(&record, &$0, &answer) }) == nil {
                answer = unavailable(apnsID: apnsID, raise: raise)
            }
        case .ifWaiting:
            switch state.withSharedWorldIfReady(mode: .shared, { body(&record, &$0, &answer) }) {
            case .done where answer.needsLease: return false
            case .done: break
            case .refused:
                answer = unavailable(apnsID: apnsID, raise: raise)
                return true
            case .wouldWait: return false
            }
        case .always:
            return false
        }
        if let fault { answer.fault = fault }
        return true
    }

    /// Runs `check`'s stateful stages under the state's lock (with `--redis`, waiting for this
    /// instance's turn to change the shared state); 503 when the change cannot be kept.
    public func finish(_ check: PendingCheck) -> PushResponse {
        let answer = state.withSharedWorld(mode: .shared) { (world: inout World) -> PushResponse in judge(check, in: &world) }
        guard let answer, answer.needsLease else { return answer ?? unavailable(check) }
        return state.withSharedWorld { (world: inout World) -> PushResponse in judge(check, in: &world) } ?? unavailable(check)
    }

    /// 503 for a check whose change could not be kept (see `unavailable`).
    public func unavailable(_ check: PendingCheck) -> PushResponse {
        unavailable(apnsID: check.apnsID, raise: check.raiseStreamLimit)
    }

    /// The stateful stages of `check` on a world the caller holds (`finish`, or a batch of
    /// deferred checks in one change). Moves the record into the journal (unless the answer
    /// `needsLease`: then nothing changed, and `check` is to be judged again under the lease).
    public func judge(_ check: PendingCheck, in world: inout World) -> PushResponse {
        var reply = PushResponse.blank
        switch check.stage {
        case .judge(let fields, let syntax, let provider, let json, let content):
            judge(
                &check.record, fields: fields, syntax: syntax, provider: provider, json: json, content: content,
                request: check.request, environment: check.environment, now: check.now,
                raise: check.raiseStreamLimit, verification: check.verification, world: &world, reply: &reply)
        case .journal(let rejection):
            reply = journal(
                &check.record, rejection: rejection, environment: check.environment, raise: check.raiseStreamLimit,
                verification: check.verification, world: &world)
        }
        if let fault = check.fault { reply.fault = fault }
        return reply
    }

    /// The record and counters of a push rejected before any state was consulted.
    private func journal(
        _ record: inout NotificationRecord, rejection: Rejection, environment: APNsEnvironment, raise: Bool, verification: String?,
        world: inout World
    ) -> PushResponse {
        // The push type the record names (the header's, or the topic's suffix), as later stages count it.
        Self.noteEffectivePushType(&record, credentials: world.credentials)
        let pushType = record.pushType.flatMap { PushType(rawValue: $0) }
        world.counters.countNotification(
            status: record.status, reason: rejection.reason, reasonText: nil, pushType: pushType, environment: environment)
        if let verification { world.counters.countVerification(verification) }
        let reply = response(for: record, rejection: rejection, raise: raise, sequence: world.records.nextSequence)
        world.records.append(moving: &record)
        return reply
    }

    private func judge(
        _ record: inout NotificationRecord, fields: APNsHeaderFields, syntax: Syntax, provider: ProviderIdentity,
        json: JSONValidator.Verdict?, content: PushContent, request: PushRequest, environment: APNsEnvironment, now: Int64,
        raise raiseStreamLimit: Bool, verification: String?, world: inout World, reply: inout PushResponse
    ) {
        var rejection: Rejection?
        var route = AcceptedRoute.none
        // Filled in place by `accepted` for `.deliver` (bound out of the route, it was copied).
        var notification = PendingNotification.blank
        var pushType: PushType?
        var tokenSlot = -1
        do throws(Rejection) {
            let topic = try checkTopic(fields, syntax: syntax, provider: provider, world: &world, record: &record)
            pushType = topic.pushType
            if topic.pushType == .liveactivity,
                let owner = try checkLiveActivityToken(syntax, topic: topic.topic, environment: environment, world: world, record: &record)
            {
                // A device's Live Activities are changed under the lease.
                if world.inSharedTurn { return Self.needingLease(record, reply: &reply) }
                try checkPayload(request, pushType: topic.pushType, json: json, headers: record.requestHeaders)
                record.status = 200
                record.deviceID = owner.deviceID
                record.bundleID = owner.bundleID
                route = .liveActivity(token: record.token, priority: record.priority, expiration: record.expiration)
            } else {
                // Not optional: a `TokenEntry?` was destroyed through the runtime's generic witnesses.
                var leaseNeeded = false
                let entry = try checkDeviceToken(
                    syntax, topic: topic.topic, environment: environment, now: now,
                    world: &world, record: &record, needsLease: &leaseNeeded, slot: &tokenSlot)
                if leaseNeeded { return Self.needingLease(record, reply: &reply) }
                try checkPayload(request, pushType: topic.pushType, json: json, headers: record.requestHeaders)
                if entry.state == .rateLimited {
                    throw Rejection(reason: .tooManyRequests, explanation: "the token is set to rate-limited (admin API)")
                }
                if world.isFlooding(token: entry.token, nowMs: now) {
                    throw Rejection(
                        reason: .tooManyRequests,
                        explanation:
                            "more than \(world.deliveryOptions.tooManyRequests?.count ?? 0) pushes to this token within \(world.deliveryOptions.tooManyRequests?.windowMs ?? 0) ms"
                    )
                }
                record.status = 200
                record.deviceID = entry.deviceID
                record.bundleID = entry.bundleID
                route =
                    if case .unregistered = entry.state {
                        // Invalidated, the 410 not started yet: APNs takes it, the device does not.
                        .drop("accepted; \(world.registry.whyInvalidated(entry)), so the device discards it", step: .unregistered)
                    } else {
                        accepted(
                            expiration: record.expiration, priority: record.priority, collapseID: record.collapseID,
                            apnsID: record.apnsPushID, payload: record.payload, sequence: world.records.nextSequence,
                            entry: entry, pushType: topic.pushType, json: json, content: content, now: now,
                            options: world.deliveryOptions, into: &notification)
                    }
            }
        } catch {
            record.reject(error, spelledAs: options.reasonText(error.reason))
            if error.wrongEnvironment {
                record.explanation += Self.environmentSource(authority: fields.authority, chosen: environment)
            }
            Self.noteEffectivePushType(&record, credentials: world.credentials)
            // Refused before its topic gave it a type: counted under the type its record shows.
            if pushType == nil { pushType = record.pushType.flatMap { PushType(rawValue: $0) } }
            rejection = error
        }
        world.counters.countNotification(
            status: record.status, reason: rejection?.reason, reasonText: nil,
            pushType: pushType, environment: environment)
        world.counters.payloadSizes.record(Double(record.payloadSize))
        // A topic refused as no app's takes none of the metric's slots: a provider sending
        // junk topics would otherwise use them up before the real ones come.
        let topicRefused = rejection?.reason == .badTopic || rejection?.reason == .topicDisallowed
        world.counters.countTopic(topicRefused ? Counters.otherTopic : record.topic)
        if let verification { world.counters.countVerification(verification) }
        Self.fill(
            &reply, for: record, rejection: rejection, raise: raiseStreamLimit,
            sequence: world.records.nextSequence)
        // Moved, not copied, into the journal; `record` now holds the evicted one, which
        // is released when this request is done, outside the lock.
        let sequence = world.records.append(moving: &record)
        switch route {
        case .deliver:
            let deviceSlot = world.registry.deviceSlot(ofTokenIn: tokenSlot, deviceID: notification.deviceID)
            reply.deviceFrames = world.routeOrHandOff(notification, nowMs: now, deviceSlot: deviceSlot)
        case .drop(let why, let step): world.setOutcome(sequence, .droppedBySystem, why, atMs: now, step: step)
        case .liveActivity(let token, let priority, let expiration):
            reply.deviceFrames = world.applyLiveActivityPush(
                token: token, payload: request.body, priority: priority, expiration: expiration, sequence: sequence, nowMs: now)
        case .none: break
        }
    }
    /// The answer of a push that must be judged again under the lease (`needsLease`).
    private static func needingLease(_ record: NotificationRecord, reply: inout PushResponse) {
        reply = PushResponse(
            status: 0, apnsPushID: record.apnsPushID, uniquePushID: .none, reason: nil, reasonText: nil, timestampMs: nil,
            raiseStreamLimit: false, recordSequence: 0)
        reply.needsLease = true
        reply.changedNothing = true
    }

    /// 503 `ServiceUnavailable`, not journaled: the shared state (`--redis`) or the state
    /// directory (`--state-dir`) could not take the request's changes.
    private func unavailable(apnsID: PushID, raise: Bool) -> PushResponse {
        var response = PushResponse(
            status: 503, apnsPushID: apnsID, uniquePushID: .none, reason: .serviceUnavailable,
            reasonText: options.reasonText(.serviceUnavailable), timestampMs: nil, raiseStreamLimit: raise,
            recordSequence: 0)
        response.changedNothing = true
        return response
    }

    /// `/3/device/TOKEN`, one segment after `/3/device/` and no query: the requests fault
    /// rules act on (any other path is APNs's 404 `BadPath`).
    static func isDevicePushPath(_ path: String) -> Bool {
        guard path.hasPrefix("/3/device/") else { return false }
        let token = path.utf8.dropFirst(10)
        return !token.isEmpty && !token.contains(UInt8(ascii: "/")) && !token.contains(UInt8(ascii: "?"))
    }

    /// Journals a request the HTTP/2 layer reset before it could be judged (its header list
    /// was over the advertised limit, or it stalled), so it can be seen like any other.
    public func recordRefused(
        streamID: Int32, headers: [HeaderField], headersTruncated: Bool,
        explanation: String, connection: inout ProviderConnectionContext
    ) {
        let now = clock.nowMilliseconds()
        let fields = APNsHeaderFields(headers)
        let environment = APNsEnvironment.resolve(
            authority: fields.authority.map { Substring($0) }, serverName: connection.serverName.map { Substring($0) },
            listener: connection.listenerEnvironment)
        // The APNs fields that arrived, as far as they are well formed, so that the attempt is
        // found by the client's own `apns-id` and shows what it asked for.
        var record = NotificationRecord(
            apnsID: Self.apnsID(fields, random: &connection.random), token: "", environment: environment, receivedAtMs: now)
        if let path = fields.path, let token = Self.deviceToken(inPath: path) { record.token = String(token.prefix(512)) }
        if let priority = fields.priority.flatMap(APNsHeaderFields.priority) { record.priority = priority }
        if let expiration = fields.expiration.flatMap(APNsHeaderFields.expirationSeconds) { record.expiration = expiration }
        record.collapseID = fields.collapseID.flatMap { $0.isEmpty || $0.utf8.count > 64 ? nil : $0 }
        if let value = fields.pushType {
            record.pushTypeHeaderPresent = true
            if let type = PushType(headerValue: Substring(value)) { record.pushType = type.rawValue }
        }
        record.respondedAtMs = now
        record.connectionID = connection.connectionID
        record.streamID = streamID
        // Unwrapped before they are stored: a `String?` copied whole goes through a merged
        // outlined copy that asks the runtime (about 140 instructions each, three a request).
        if let method = fields.method { record.method = method }
        if let path = fields.path { record.path = path }
        record.topic = fields.topic
        record.requestHeaders = headers
        if let index = fields.authorizationIndex {
            record.requestHeaders[index].value = ProviderToken.withoutSignature(headers[index].value)
        }
        record.headersTruncated = headersTruncated
        record.explanation = explanation
        state.withWorld { world in
            Self.noteEffectivePushType(&record, credentials: world.credentials)
            // Counted under the type the record shows, as a push refused by an APNs rule is.
            world.counters.countNotification(
                status: 0, reason: nil, reasonText: nil, pushType: record.pushType.flatMap { PushType(rawValue: $0) },
                environment: environment)
            _ = world.records.append(moving: &record)
        }
    }

    /// The answers of these journaled pushes never reached the client (the stream was reset,
    /// or the connection closed, while an answer was held back or waited for its commit):
    /// their records say so, since their answer fields tell what was decided, not what the
    /// client read, and a provider left without an answer sends the push again.
    public func noteAnswersNotSent(_ sequences: [UInt64], why: String) {
        guard !sequences.isEmpty else { return }
        state.withWorld { world in
            for sequence in sequences {
                world.records.update(sequence: sequence) { $0.explanation += "; its answer was never sent: \(why)" }
            }
        }
    }

    // MARK: Faults

    private func evaluateFaults(
        _ fields: APNsHeaderFields, environment: APNsEnvironment,
        connection: ProviderConnectionContext
    ) -> FiredFault? {
        let path = fields.path ?? ""
        let token = Self.deviceToken(inPath: path).map(String.init) ?? ""
        let topic = fields.topic ?? ""
        let pushType =
            fields.pushType.map { PushType(headerValue: Substring($0))?.rawValue ?? $0 }
            ?? TopicRules.pushTypeWithoutHeader(topic: Substring(topic), implied: PushType.implied(byTopic: Substring(topic))).rawValue
        let facts = FaultFacts(
            token: token, topic: topic, pushType: pushType, priority: Int(fields.priority ?? "10") ?? 10,
            environment: environment, connectionID: connection.connectionID)
        let fired = state.withWorld { world in
            let fired = world.faults.evaluate(facts)
            if let fired { world.counters.countFault(fired.ruleID) }
            return fired
        }
        return fired.map {
            var f = $0; f.pushType = pushType; return f
        }
    }

    /// Journals and answers a fault that replaces judging; nil for a delay-only or SETTINGS fault.
    private func applyFault(_ fired: FiredFault, record: inout NotificationRecord, now: Int64) -> PushResponse? {
        if let token = record.path.flatMap(Self.deviceToken(inPath:)) { record.token = String(token) }
        record.pushType = fired.pushType
        record.outcome = .rejected
        record.faultRuleID = fired.ruleID
        record.respondedAtMs = now + Int64(fired.delayMs)
        switch fired.action.kind {
        case .none, .maxConcurrentStreams:
            return nil
        case .respond(let status, let reason):
            record.status = status
            record.reason = reason
            if status == 410 { record.timestampMs = now }
            record.explanation = "fault rule \(fired.ruleID): answered \(status) \(reason)"
        case .resetStream(let code):
            record.explanation = "fault rule \(fired.ruleID): stream reset with RST_STREAM error \(code)"
        case .goAway(let reason, _, let code):
            record.explanation = "fault rule \(fired.ruleID): connection ended with GOAWAY error \(code)" + (reason.map { " \"\($0)\"" } ?? "")
        case .closeConnection:
            record.explanation = "fault rule \(fired.ruleID): connection closed"
        }
        // A rule answering with one of Apple's reasons is that reason to the rest of the
        // emulator (the stream-limit drop after ExpiredProviderToken, say).
        var reply = PushResponse(
            status: record.status, apnsPushID: record.apnsPushID, uniquePushID: record.uniquePushID,
            reason: record.reason.flatMap(APNsReason.init(appleName:)), reasonText: record.reason, timestampMs: record.timestampMs,
            raiseStreamLimit: false,
            recordSequence: 0)
        let pushType = record.pushType.flatMap(PushType.init(rawValue:))
        reply.recordSequence = state.withWorld { world in
            world.counters.countNotification(
                status: record.status, reason: record.reason.flatMap(APNsReason.init(appleName:)),
                reasonText: record.reason, pushType: pushType, environment: record.environment)
            return world.records.append(moving: &record)
        }
        reply.fault = fired
        return reply
    }

    /// A push refused before its topic was judged, without `apns-push-type`, still has the type
    /// its topic implies (else alert) on its record, so that the journal's `pushType` filter
    /// finds it; one with an unknown `apns-push-type` has none.
    private static func noteEffectivePushType(_ record: inout NotificationRecord, credentials: Credentials) {
        guard record.pushType == nil, !record.pushTypeHeaderPresent else { return }
        let topic = record.topic ?? ""
        let implied = topic.isEmpty ? nil : TopicRules.impliedPushType(ofTopic: topic, credentials: credentials)
        record.pushType = TopicRules.pushTypeWithoutHeader(topic: Substring(topic), implied: implied).rawValue
    }

    private func response(
        for record: NotificationRecord, rejection: Rejection?, raise: Bool, sequence: UInt64
    )
        -> PushResponse
    {
        PushResponse(
            status: record.status, apnsPushID: record.apnsPushID, uniquePushID: record.uniquePushID,
            reason: rejection?.reason, reasonText: record.reason, timestampMs: record.timestampMs,
            raiseStreamLimit: raise, recordSequence: sequence)
    }

    /// `response(for:…)` written over `reply` field by field (every field, so a reply filled
    /// before, under a shared turn, is all replaced).
    private static func fill(
        _ reply: inout PushResponse, for record: NotificationRecord, rejection: Rejection?, raise: Bool, sequence: UInt64
    ) {
        reply.status = record.status
        reply.apnsPushID = record.apnsPushID
        reply.uniquePushID = record.uniquePushID
        reply.reason = rejection?.reason
        reply.reasonText = record.reason
        reply.timestampMs = record.timestampMs
        reply.raiseStreamLimit = raise
        reply.changedNothing = false
        if reply.faultBox != nil { reply.faultBox = nil }
        reply.recordSequence = sequence
        if !reply.deviceFrames.isEmpty { reply.deviceFrames = [] }
        reply.needsLease = false
    }

    // MARK: Stages

    /// A device push path, its token and that token's shape (`checkRequestLine`).
    struct RecentPath: Sendable {
        var path = ""
        var token: Substring = ""
        var tokenString = ""
        var shape = Hex.TokenShape(isEvenLengthHex: false, hasUppercase: false, hasPathDelimiter: false)

        /// `path` is this one, byte for byte (not by `==`, which compares canonical equivalence).
        @inline(__always)
        func isPath(_ other: String) -> Bool {
            !path.isEmpty && path.utf8.count == other.utf8.count && ASCII.sameBytes(path, other)
        }
    }

    /// A payload and what `JSONValidator.check` and `PushContent.read` made of it.
    struct RecentPayload: Sendable {
        var bytes: [UInt8] = []
        var json = JSONValidator.Verdict.notAnObject
        var content = PushContent()

        /// `payload` is this one, byte for byte.
        @inline(__always)
        func isPayload(_ payload: [UInt8]) -> Bool {
            !bytes.isEmpty && Bytes.equal(bytes, payload)
        }
    }

    /// What the stateless stages learned, for the later ones.
    fileprivate struct Syntax: Sendable {
        var token: Substring
        var tokenShape: Hex.TokenShape
        /// The `apns-push-type` header, parsed.
        var pushType: PushType? = nil
    }

    /// For a channel management path sent to the device-push endpoint: where it is served
    /// (Apple serves it on host names of its own; so does `--listen`, by `:authority`).
    static func otherServiceHint(_ path: String?) -> String {
        guard let path, ASCII.hasPrefix(path, "/1/apps/") else { return "" }
        return
            " (a channel management path: it is served on --channel-sandbox-listen/--channel-production-listen, and on --listen when :authority names an api-manage-broadcast host, as `channels --sandbox` or `--production` sends it)"
    }

    /// The text after `/3/device/`, or nil when the path does not start with it.
    static func deviceToken(inPath path: String) -> Substring? {
        guard ASCII.hasPrefix(path, "/3/device/") else { return nil }
        return Substring(path.utf8.dropFirst(10))
    }

    private func checkRequestLine(
        _ fields: APNsHeaderFields, record: inout NotificationRecord, recent: inout RecentPath
    ) throws(Rejection) -> Syntax {
        // Known before any check refuses it: a refused push's record shows its effective type
        // (the header's when it names one; see `journal` for a push without it). Parsed once:
        // `checkHeaderSyntax` refuses one that names no type.
        var headerType: PushType? = nil
        if let value = fields.pushType {
            record.pushTypeHeaderPresent = true
            headerType = PushType(headerValue: Substring(value))
            if let headerType { record.pushType = headerType.rawValue }
        }
        guard fields.method == "POST" else {
            throw Rejection(
                reason: .methodNotAllowed,
                explanation: "method \(fields.method ?? "(none)") is not allowed; APNs accepts only POST" + Self.otherServiceHint(fields.path))
        }
        let token: Substring
        let shape: Hex.TokenShape
        if let path = fields.path, recent.isPath(path) {
            // The same path as the last push (a provider sends to one device again and again):
            // its token String and shape are reused (allocating and classifying cost 1,000).
            token = recent.token
            record.token = recent.tokenString
            shape = recent.shape
        } else {
            guard let path = fields.path, let found = Self.deviceToken(inPath: path) else {
                throw Rejection(
                    reason: .badPath,
                    explanation: "path \(fields.path ?? "(none)") is not /3/device/<device-token>" + Self.otherServiceHint(fields.path))
            }
            token = found
            record.token = String(found)
            shape = Hex.shape(ofToken: found)
            recent = RecentPath(path: path, token: found, tokenString: record.token, shape: shape)
        }
        guard !shape.hasPathDelimiter else {
            throw Rejection(reason: .badPath, explanation: "path \(recent.path) has more than one segment after /3/device/")
        }
        if let duplicate = fields.duplicate {
            throw Rejection(reason: .duplicateHeaders, explanation: "header \(duplicate) appears more than once")
        }
        return Syntax(token: token, tokenShape: shape, pushType: headerType)
    }

    private func checkHeaderSyntax(
        _ fields: APNsHeaderFields, syntax: inout Syntax, record: inout NotificationRecord
    )
        throws(Rejection)
    {
        if let id = fields.apnsID, !CanonicalUUID.isValid(Substring(id)) {
            throw Rejection(reason: .badMessageId, explanation: "apns-id '\(id)' is not a UUID (8-4-4-4-12 hex digits)")
        }
        if let priority = fields.priority {
            guard let value = APNsHeaderFields.priority(priority) else {
                throw Rejection(reason: .badPriority, explanation: "apns-priority '\(priority)' is not 10, 5 or 1")
            }
            record.priority = value
        }
        if let expiration = fields.expiration {
            // 0 means "deliver once, do not store".
            guard let seconds = APNsHeaderFields.expirationSeconds(expiration) else {
                throw Rejection(
                    reason: .badExpirationDate,
                    explanation: "apns-expiration '\(expiration)' is not a UNIX time in whole seconds")
            }
            record.expiration = seconds
        }
        if let collapse = fields.collapseID, collapse.utf8.count > 64 {
            throw Rejection(
                reason: .badCollapseId,
                explanation: "apns-collapse-id is \(collapse.utf8.count) bytes; the limit is 64")
        }
        if let value = fields.pushType, syntax.pushType == nil {
            throw Rejection(
                reason: .invalidPushType,
                explanation: "apns-push-type '\(value)' is not one of \(PushType.allCases.map(\.rawValue).joined(separator: ", "))")
        }
    }

    private func authenticate(
        _ fields: APNsHeaderFields, environment: APNsEnvironment, now: Int64,
        connection: inout ProviderConnectionContext, record: inout NotificationRecord, raise: inout Bool
    ) throws(Rejection) -> AuthenticatedProvider {
        let state = self.state
        let result = connection.authenticator.authenticate(
            authorization: fields.authorization, environment: environment, nowMs: now - clock.offsetMilliseconds,
            credentialsGeneration: state.currentCredentialsGeneration,
            lookUpKey: { id in state.readWorld { $0.credentials.keys[id] } })
        record.noteProviderToken(result, authorizationSent: fields.authorization != nil)
        switch result {
        case .authenticated(let provider, let first):
            raise = first
            return provider
        case .rejected(let reason, let explanation, _):
            throw Rejection(reason: reason, explanation: explanation)
        }
    }

    /// Topic rules (docs/apns-behaviour.md, "Push types and topics"). Returns the topic and the
    /// effective push type.
    /// Who sent a request: a verified provider token, or the connection's certificate.
    fileprivate enum ProviderIdentity: Sendable {
        case token(AuthenticatedProvider)
        case certificate(CertificateCredential)
    }

    /// Certificate connections (docs/apns-behaviour.md, "Certificate connections"):
    /// `authorization` is ignored; the certificate must be valid and cover the request's
    /// environment.
    private func checkCertificate(
        _ certificate: CertificateCredential, environment: APNsEnvironment,
        record: inout NotificationRecord
    ) throws(Rejection) -> CertificateCredential {
        record.certificateSubject = certificate.subject
        if let problem = certificate.problem {
            throw Rejection(reason: .badCertificate, explanation: "the client certificate is not valid: \(problem)")
        }
        guard certificate.allows(environment) else {
            throw Rejection(
                reason: .badCertificateEnvironment,
                explanation:
                    "the client certificate is for \(certificate.development ? "sandbox" : "production") only; this request is \(environment.rawValue)"
            )
        }
        return certificate
    }

    private func checkTopic(
        _ fields: APNsHeaderFields, syntax: Syntax, provider identity: ProviderIdentity,
        world: inout World, record: inout NotificationRecord
    ) throws(Rejection) -> (topic: String, pushType: PushType) {
        // The topic is lent, not bound: `let topic = fields.topic` copied and destroyed the
        // `String?` through the runtime's generic witnesses (about 300 instructions).
        if case .token(let verified) = identity,
            let pushType = world.lastTopicVerdict.pushType(
                provider: verified, topic: fields.topic, header: syntax.pushType, generation: world.credentials.generation)
        {
            record.pushType = pushType.rawValue
            record.bundleID = world.lastTopicVerdict.bundleID
            return (world.lastTopicVerdict.topic, pushType)
        }
        var requested = fields.topic.flatMap { $0.isEmpty ? nil : $0 }
        if requested == nil, case .certificate(let certificate) = identity, certificate.topics.count == 1 {
            // A single-topic certificate names the default topic (docs/apns-behaviour.md,
            // "Certificate connections").
            requested = certificate.topics[0]
            record.topic = requested
        }
        guard let topic = requested else {
            if case .certificate(let certificate) = identity {
                throw Rejection(
                    reason: .missingTopic,
                    explanation: "the client certificate covers \(certificate.topics.count) topics, so apns-topic is required")
            }
            throw Rejection(reason: .missingTopic, explanation: "apns-topic is required on token-based connections")
        }
        if let refusal = TopicRules.syntaxRefusal(topic) { throw Rejection(reason: refusal.reason, explanation: refusal.explanation) }
        let credentials = world.credentials
        let implied = TopicRules.impliedPushType(ofTopic: topic, credentials: credentials)
        let pushType: PushType
        if let header = syntax.pushType {
            if header.topicSuffix.isEmpty, let implied {
                throw Rejection(
                    reason: .invalidPushType,
                    explanation: "push type \(header.rawValue) cannot be sent to topic \(topic), which is for \(implied.rawValue) pushes")
            }
            if !header.topicSuffix.isEmpty, implied != header {
                throw Rejection(
                    reason: .invalidPushType,
                    explanation: "push type \(header.rawValue) needs topic <bundle id>\(header.topicSuffix); got \(topic)")
            }
            pushType = header
        } else {
            pushType = TopicRules.pushTypeWithoutHeader(topic: Substring(topic), implied: implied)
        }
        record.pushType = pushType.rawValue
        let bundleID = TopicRules.bundleID(ofTopic: topic, pushType: pushType)
        record.bundleID = bundleID
        let provider: AuthenticatedProvider
        switch identity {
        case .certificate(let certificate):
            if pushType.requiresToken {
                throw Rejection(
                    reason: .invalidPushType,
                    explanation: "\(pushType.rawValue) pushes need provider tokens; this connection uses a certificate")
            }
            guard certificate.topics.contains(topic) else {
                throw Rejection(
                    reason: .topicDisallowed,
                    explanation: "the client certificate covers \(certificate.topics.joined(separator: ", ")), not \(topic)")
            }
            return (topic, pushType)
        case .token(let verified):
            provider = verified
        }
        if let refusal = TopicRules.tokenRefusal(
            pushType: pushType, bundleID: bundleID, topic: topic, provider: provider, credentials: credentials)
        {
            throw Rejection(reason: refusal.reason, explanation: refusal.explanation)
        }
        world.lastTopicVerdict = TopicVerdict(
            provider: provider, topic: topic, header: syntax.pushType, generation: credentials.generation,
            pushType: pushType, bundleID: bundleID)
        return (topic, pushType)
    }

    /// The shared rules (DeviceTokenRules.swift); a token invalidated with a delay may reach
    /// its 410 early after enough pushes, so this push is counted first (under the lease: in a
    /// shared turn, where the registry is not changed, `needsLease` is set instead).
    private func checkDeviceToken(
        _ syntax: Syntax, topic: String, environment: APNsEnvironment, now: Int64,
        world: inout World, record: inout NotificationRecord, needsLease: inout Bool, slot: inout Int
    ) throws(Rejection) -> TokenEntry {
        if let refusal = DeviceTokenRules.refusal(ofText: syntax.token, shape: syntax.tokenShape) { throw Rejection(refusal) }
        // The record already holds the token as a String; reuse it unless it needs lowercasing.
        let normalized = syntax.tokenShape.hasUppercase ? Hex.lowercased(syntax.token) : record.token
        // Found by its slot, which leads to its device's too (`DeviceRegistry.deviceSlot`).
        slot = world.registry.tokens.slot(of: normalized) ?? -1
        guard slot >= 0 else {
            // A Live Activity's token with the app's own topic (or another push type's) is a token
            // for another topic, as Apple answers it, not one never issued.
            if let owner = world.liveActivities.tokens[normalized] {
                record.deviceID = owner.deviceID
                do { try DeviceTokenRules.judge(liveActivityToken: owner, topic: topic, environment: environment) } catch {
                    throw Rejection(error)
                }
            }
            throw Rejection(DeviceTokenRules.neverIssued)
        }
        let found = world.registry.tokens.row(inSlot: slot)
        if found.pushesUntilUnregistered != nil, world.inSharedTurn {
            needsLease = true
            return found
        }
        record.deviceID = found.deviceID
        do {
            return try DeviceTokenRules.judge(found, topic: topic, environment: environment, nowMs: now) { entry in
                entry.pushesUntilUnregistered == nil
                    ? entry.state : world.registry.countPushToInvalidatedToken(entry.token, nowMs: now) ?? entry.state
            }
        } catch {
            throw Rejection(error.sayingWhy(found, in: world.registry))
        }
    }

    /// A `liveactivity` push may go to a push-to-start or update token of a device's Live
    /// Activities instead of a device token: nil when the token is not one of those. Its
    /// environment and app must match, as a device token's must.
    private func checkLiveActivityToken(
        _ syntax: Syntax, topic: String, environment: APNsEnvironment, world: World, record: inout NotificationRecord
    ) throws(Rejection) -> LiveActivityWorld.TokenOwner? {
        guard !world.liveActivities.tokens.isEmpty, syntax.tokenShape.isEvenLengthHex, !syntax.token.isEmpty else { return nil }
        let normalized = syntax.tokenShape.hasUppercase ? Hex.lowercased(syntax.token) : record.token
        guard let owner = world.liveActivities.tokens[normalized] else { return nil }
        record.deviceID = owner.deviceID
        do { try DeviceTokenRules.judge(liveActivityToken: owner, topic: topic, environment: environment) } catch { throw Rejection(error) }
        if normalized != record.token { record.token = normalized }
        return owner
    }

    /// `headers`: the request's (the record holds them by now), read for a 413 only.
    private func checkPayload(
        _ request: PushRequest, pushType: PushType, json: JSONValidator.Verdict?, headers: [HeaderField]
    )
        throws(Rejection)
    {
        guard request.bodyLength > 0 else {
            throw Rejection(reason: .payloadEmpty, explanation: "the request has no body")
        }
        let limit = pushType.payloadLimit
        if request.bodyLength > limit {
            // Answered before the rest came: the size the client declared, when it did.
            let declared = request.isComplete ? nil : headers.first { $0.name == "content-length" }.flatMap { Int($0.value) }
            let size =
                request.isComplete
                ? "\(request.bodyLength) bytes"
                : declared.map { "of \($0) bytes (its content-length; \(request.bodyLength) read before the answer, the rest was not read)" }
                    ?? "at least \(request.bodyLength) bytes (the rest was not read)"
            throw Rejection(
                reason: .payloadTooLarge,
                explanation: "payload \(size) > \(limit) limit for push type \(pushType.rawValue)")
        }
        if json != .object, options.invalidPayload == .reject {
            let what: String
            switch json {
            case .invalid(let offset)?: what = "is not valid JSON (error at byte \(offset))"
            case .tooDeep(let offset)?:
                what = "nests objects and arrays more than \(JSONValidator.maxDepth) deep (at byte \(offset)), deeper than the emulator reads"
            default: what = "is JSON but not an object"
            }
            throw Rejection(reason: .badRequestPayload, explanation: "payload \(what)")
        }
    }

    /// What becomes of an accepted notification once it is journaled.
    /// Not wrapped in an Optional (`none` instead), for the same reason as `record.topic`.
    fileprivate enum AcceptedRoute {
        case none
        /// The notification `accepted` filled in.
        case deliver
        /// Taken, then dropped by the device; `step` names it in the delivery log (nil: the
        /// outcome's).
        case drop(String, step: DeliveryLog.Step? = nil)
        /// A push to a Live Activity token: the device's Live Activities take it.
        case liveActivity(token: String, priority: Int, expiration: Int64?)
    }

    /// Prepares an accepted notification for delivery (store, device, budget…), before the
    /// record is moved into the journal.
    private func accepted(
        expiration: Int64?, priority: Int, collapseID: String?, apnsID: PushID, payload: [UInt8],
        sequence: UInt64, entry: TokenEntry, pushType: PushType, json: JSONValidator.Verdict?,
        content: PushContent, now: Int64, options: DeliveryOptions, into notification: inout PendingNotification
    ) -> AcceptedRoute {
        guard json == .object else {
            return .drop("accepted; the payload is not a JSON object, so the device discards it")
        }
        notification.sequence = sequence
        notification.apnsPushID = apnsID
        notification.token = entry.token
        notification.topic = entry.topic
        notification.deviceID = entry.deviceID
        notification.bundleID = entry.bundleID
        notification.pushType = pushType
        notification.priority = priority
        notification.collapseID = collapseID
        notification.storeUntilMs = PendingNotification.storeUntil(
            expiration: expiration, receivedAtMs: now, defaultStorageMs: options.defaultStorageMs)
        notification.payload = payload
        notification.content = content
        notification.acceptedAtNanos = Monotonic.nowNanoseconds()
        return .deliver
    }
}

extension ProviderEndpoint.Rejection {
    fileprivate init(_ refusal: DeviceTokenRules.Refusal) {
        self.init(
            reason: refusal.reason, explanation: refusal.explanation, timestampMs: refusal.timestampMs,
            wrongEnvironment: refusal.kind == .wrongEnvironment)
    }
}

extension NotificationRecord {
    fileprivate mutating func reject(_ rejection: ProviderEndpoint.Rejection, spelledAs text: String) {
        status = rejection.reason.status
        reason = text
        timestampMs = rejection.timestampMs
        explanation = rejection.explanation
        outcome = .rejected
    }
}
