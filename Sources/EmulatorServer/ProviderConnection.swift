import APNsCore
import Lifecycle
import HTTP2
import MonotonicClock
import Networking
import OpenSSLCrypto
import StatePersistence

/// One provider connection: HTTP/2 over TLS (or h2c) speaking APNs. Lives on one event loop;
/// every request is judged and answered on that loop's thread, with no hop.
final class ProviderConnection: ConnectionHandler {
    /// SETTINGS as APNs sends them (docs/apns-behaviour.md, "The HTTP/2 connection"). nghttp2
    /// enforces 1000 concurrent streams from the start; the wire says 1 until the first valid
    /// provider token, because clients may open streams before they read our SETTINGS and
    /// those must be served.
    static let enforcedSettings: [HTTP2Setting] = [
        HTTP2Setting(id: HTTP2Setting.headerTableSize, value: 4096),
        HTTP2Setting(id: HTTP2Setting.maxConcurrentStreams, value: fullStreamLimit),
        HTTP2Setting(id: HTTP2Setting.initialWindowSize, value: 65535),
        HTTP2Setting(id: HTTP2Setting.maxFrameSize, value: 16384),
        HTTP2Setting(id: HTTP2Setting.maxHeaderListSize, value: maxHeaderListSize),
    ]
    static let maxHeaderListSize: UInt32 = 8000
    static let fullStreamLimit: UInt32 = 1000
    static let advertisedBeforeAuthentication = [HTTP2Setting(id: HTTP2Setting.maxConcurrentStreams, value: 1)]
    static let raisedLimit = [HTTP2Setting(id: HTTP2Setting.maxConcurrentStreams, value: fullStreamLimit)]

    let connection: Connection
    let endpoint: ProviderEndpoint
    let providers: ProviderConnections
    private let session: HTTP2ServerSession
    // Loop-confined and on the request path: exclusivity-unchecked like HTTP2ServerSession's state.
    @exclusivity(unchecked) private var context: ProviderConnectionContext
    private var idleTimer: TimerID?
    /// How long a connection has, once TLS (or TCP) is up, to send the HTTP/2 connection
    /// preface: the same as the TLS handshake. Until then the idle timeout (an hour) would
    /// let silent connections hold every place `--max-connections` allows.
    static let prefaceTimeoutMs: Int64 = 10_000
    /// Bytes received so far; the connection preface is the first 24
    /// ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"; what follows would be rejected if it were wrong).
    private var prefaceBytes = 0
    static let prefaceLength = 24
    /// Runs while requests are arriving, to reset those that stall (`--request-timeout`).
    private var requestDeadlineTimer: TimerID?
    /// The fields of the answer being submitted (`submit`), reused: replaced in place.
    @exclusivity(unchecked) private var answerFields: [HTTP2AnswerField] = []
    /// Id header names (`IDName` bits) sent once with indexing on this connection: their name
    /// is in the peer's HPACK table from then on.
    @exclusivity(unchecked) private var indexedIDNames: UInt8 = 0
    /// The connection's first bytes, held until they tell HTTP/2 from HTTP/1.x (at most the
    /// 24-byte preface); nil once decided.
    private var firstBytes: [UInt8]? = []
    /// An HTTP/1.x client was answered; what it sends from now on is read and dropped.
    private var refusedHTTP1 = false
    /// `--stream-limit-drop`: the limit is down to 1 after ExpiredProviderToken until a success.
    private var streamLimitDropped = false
    /// The limit the client was last told is the full one (not the 1 a token connection starts
    /// with): a drop or a raise is sent only when it changes what the client was told.
    private var streamLimitRaised = false
    /// A fault rule set the limit (`maxConcurrentStreams`): the first valid token does not
    /// raise it over the rule's.
    private var streamLimitFromFault = false
    /// Requests of the same read as an ExpiredProviderToken were in flight when the limit
    /// dropped: they are refused (RST_STREAM REFUSED_STREAM). Only while a read is handled:
    /// an answer held back (latency, a fault delay) does not refuse what the next read brings.
    private var refusingInFlight = false
    private var handlingRead = false
    /// The device frames of the answers sent while one read is handled (or one commit
    /// releases held answers), dispatched together (nil otherwise).
    private var framesOfRead: [DeviceFrame]?
    /// `--error-disconnect`: the connection's error points; once GOAWAY went out for them,
    /// `goingAway` (the answers still owed are sent, then the connection closes).
    private lazy var errorBudget: ErrorBudget? = providers.load.errorDisconnect.map { ErrorBudget(limit: $0.points, windowMs: $0.windowMs) }
    private var goingAway = false
    /// A GOAWAY decided (a fault rule, `--error-disconnect`) and sent once every stream it
    /// covers has its answer: python-h2 (under httpx, aioapns, kalyke-apns) takes no frame
    /// after a GOAWAY, so answers sent after it read as failures, and their pushes, accepted
    /// and delivered, were sent again.
    private var pendingGoAway: (errorCode: UInt32, lastStreamID: Int32, debugData: [UInt8])?
    /// Answers held back by a delay (`--response-latency`, a fault's `delayMs`), by stream:
    /// bounded by the streams a connection may have open, and gone with the connection (a delay
    /// of minutes must not keep what a closed connection was owed). A shutdown sends them at
    /// once: their pushes are journaled, and a provider left without the answer would send
    /// them again.
    private var heldAnswers: [Int32: HeldAnswer] = [:]
    /// `--connection-rate`.
    private lazy var pacer: AnswerPacer? = providers.load.answersPerSecondPerConnection.map { AnswerPacer(perSecond: $0) }

    /// What the listener serves: device pushes and broadcasts (Apple's push hosts), channel
    /// management (its own hosts and ports), or either by the name asked for (`--listen`).
    enum Role: Sendable {
        case push, channelManagement, byName
    }

    let role: Role

    init(
        connection: Connection, listenerEnvironment: APNsEnvironment, endpoint: ProviderEndpoint,
        providers: ProviderConnections, role: Role = .push
    ) throws(HTTP2Error) {
        self.connection = connection
        self.endpoint = endpoint
        self.providers = providers
        self.role = role
        // The advertised MAX_HEADER_LIST_SIZE is enforced; a body past the largest payload
        // limit is answered (413) at once instead of being read to its end.
        session = try HTTP2ServerSession(
            settings: Self.enforcedSettings,
            advertisedOverrides: Self.advertisedBeforeAuthentication,
            maxBufferedBody: PushType.largestPayloadLimit + 1,
            maxHeaderListSize: Int(Self.maxHeaderListSize),
            earlyAnswerBodyLength: PushType.largestPayloadLimit)
        // The SNI is known only after the handshake; a placeholder until then.
        context = ProviderConnectionContext(
            connectionID: connection.id, listenerEnvironment: listenerEnvironment,
            serverName: nil, tokenPolicy: endpoint.options.tokenPolicy)
    }

    func connectionDidBecomeReady(_ connection: Connection) {
        context = ProviderConnectionContext(
            connectionID: connection.id,
            listenerEnvironment: context.listenerEnvironment,
            serverName: connection.serverName,
            tokenPolicy: endpoint.options.tokenPolicy)
        // The environment the SNI picks (a request's :authority may still pick another).
        let environment = APNsEnvironment.resolve(
            authority: nil, serverName: context.serverName.map { Substring($0) }, listener: context.listenerEnvironment)
        providers.logger.info(
            "provider connection \(connection.id) from \(connection.peer) (\(environment.rawValue)"
                + (connection.tls != nil ? ", TLS, ALPN \(connection.negotiatedALPN ?? "none"), SNI \(connection.serverName ?? "none"))" : ", h2c)"))
        if let certificate = clientCertificate() {
            context.credential = .certificate(certificate)
            providers.logger.info(
                "provider connection \(connection.id): client certificate \(certificate.subject)"
                    + (certificate.problem.map { " (not valid: \($0))" } ?? ""))
            if certificate.problem == nil, !certificate.allows(environment) {
                // As APNs does: GOAWAY, last stream 0, {"reason":"BadCertificateEnvironment"}.
                // Nothing reaches the journal (no request was read), so the log and a counter
                // say why: the provider's library often just retries.
                let allowed = certificate.allows(environment.other) ? environment.other.rawValue : "no environment"
                providers.logger.warning(
                    "provider connection \(connection.id): the client certificate (\(certificate.subject)) is for \(allowed), this connection is \(environment.rawValue) (by its listener or SNI): GOAWAY BadCertificateEnvironment before any request, as APNs does. Connect to the \(Self.hostHint(allowed, channelManagement: servesChannelManagement)) host"
                )
                providers.certificateEnvironmentRefused.add(1, ordering: .relaxed)
                session.submitGoAway(
                    errorCode: HTTP2ErrorCode.noError, lastStreamID: 0,
                    debugData: Self.reasonJSON(APNsReason.badCertificateEnvironment.rawValue))
                flushSession()
                connection.closeAfterFlush()
                return
            }
            // Certificate connections are authenticated by the handshake: no one-stream start,
            // the first SETTINGS frame says 1000 (a second one if the first had left already).
            if !session.withdrawAdvertisedOverrides() { session.submitSettings(Self.raisedLimit) }
            streamLimitRaised = true
        }
        if connection.negotiatedALPN == "h2" {
            firstBytes = nil
        }
        // Without ALPN h2 the client may yet turn out to speak HTTP/1.1; our SETTINGS would
        // reach it as garbage, so they wait for the client's HTTP/2 preface.
        if firstBytes == nil { flushSession() }
        scheduleIdleCheck()
        connection.loop.schedule(afterMilliseconds: Self.prefaceTimeoutMs) { [weak self] in
            guard let self, !self.connection.isClosed, !self.refusedHTTP1,
                self.prefaceBytes < Self.prefaceLength
            else { return }
            self.providers.logger.info(
                "provider connection \(self.connection.id): no HTTP/2 connection preface within \(Self.prefaceTimeoutMs / 1000) s; closed")
            self.connection.close()
        }
    }

    /// The provider certificate the client presented, read and checked (docs/apns-behaviour.md,
    /// "Certificate connections").
    private func clientCertificate() -> CertificateCredential? {
        guard let tls = connection.tls, let der = tls.peerCertificateDER else { return nil }
        guard let info = try? ProviderCertificateInfo(der: der) else {
            return CertificateCredential(
                bundleID: "", topics: [], development: false, production: false,
                subject: "(unreadable)", problem: "the client certificate cannot be parsed")
        }
        let bundle = info.subjectUID ?? info.commonName.map { $0.replacingOccurrences(of: "Apple Push Services: ", with: "") } ?? ""
        var problem: String?
        if let trust = providers.tls.clientTrust {
            problem = tls.verifyPeerCertificate(trustStore: trust)
        } else {
            problem = "no --client-ca is configured to trust provider certificates"
        }
        if problem == nil, info.subjectUID == nil {
            problem = "the certificate has no UID (bundle id) in its subject: not an APNs provider certificate"
        }
        if problem == nil, !info.development, !info.production {
            problem = "the certificate has neither the development nor the production APNs extension"
        }
        return CertificateCredential(
            bundleID: bundle, topics: info.topics.map(\.topic), development: info.development,
            production: info.production, subject: info.commonName ?? bundle, problem: problem)
    }

    func connection(_ connection: Connection, didRead bytes: UnsafeRawBufferPointer) {
        if refusedHTTP1 { return }
        if var held = firstBytes {
            held.append(contentsOf: bytes)
            switch ConnectionPreface.classify(held) {
            case .undecided:
                firstBytes = held
                return
            case .http1(let requestLine):
                refuseHTTP1(requestLine: requestLine, upgrade: Self.asksForH2CUpgrade(held))
                return
            case .http2:
                firstBytes = nil
                flushSession()
                held.withUnsafeBytes { receive($0) }
                return
            }
        }
        receive(bytes)
    }

    private func receive(_ bytes: UnsafeRawBufferPointer) {
        prefaceBytes += bytes.count
        do {
            try session.receive(bytes)
        } catch {
            // nghttp2 has queued a GOAWAY; send it and hang up.
            // A warning: the provider broke the protocol, which its developer wants to see.
            providers.logger.warning("provider connection \(connection.id): HTTP/2 error: \(error.message)")
            http2ErrorLogged = true
            journalUnprocessed(after: error.message)
            flushSession()
            connection.closeAfterFlush()
            return
        }
        handlingRead = true
        framesOfRead = []
        // With --redis the changes are queued for Redis's writer rather than waited for: the
        // answers that promise them wait in the commit gate, as with --state-dir.
        endpoint.state.committingLater {
            session.consumeEvents { event in
                if var request = event.takeRequest() {
                    handle(&request)
                } else if case .requestRefused(let refused) = event {
                    journal(refused)
                }
            }
        }
        handlingRead = false
        refusingInFlight = false
        dispatchFramesOfRead()
        flushSession()
        if !session.wantsRead && !session.wantsWrite { closeSoon() }
        if requestDeadlineTimer == nil, session.openStreamCount > 0 { scheduleRequestDeadline(after: providers.requestTimeoutSeconds * 1000) }
    }

    /// Requests that came in the same read as the connection error: they cannot be answered
    /// any more (the GOAWAY goes first, and the session ends with it), so they are not judged
    /// or delivered, but journaled as not processed, as every request is.
    private func journalUnprocessed(after error: String) {
        session.consumeEvents { event in
            if let request = event.takeRequest() {
                endpoint.recordRefused(
                    streamID: request.streamID, headers: request.headers, headersTruncated: false,
                    explanation:
                        "not processed: it came in the same read as a connection error of the client's (\(error)), and the connection ended with GOAWAY before it could be answered. Not delivered; the GOAWAY's last stream id may cover it, so the client cannot tell",
                    connection: &context)
            } else if case .requestRefused(let refused) = event {
                journal(refused)
            }
        }
    }

    /// Device frames of the answers sent together go to the device gateway in one hand-over.
    private func dispatchFramesOfRead() {
        let frames = framesOfRead ?? []
        framesOfRead = nil
        if !frames.isEmpty { providers.devices.dispatch(frames) }
    }

    /// A client that trickles a request (slowloris) must not hold its stream's buffers for
    /// ever: requests not complete within the timeout are reset and journaled.
    private func scheduleRequestDeadline(after milliseconds: Int) {
        requestDeadlineTimer = connection.loop.schedule(afterMilliseconds: Int64(max(milliseconds, 10))) { [weak self] in
            guard let self, !self.connection.isClosed else { return }
            self.requestDeadlineTimer = nil
            let timeout = Int64(self.providers.requestTimeoutSeconds) * 1000
            let now = Monotonic.nowMilliseconds()
            for stalled in self.session.resetStalledRequests(startedBefore: now - timeout) {
                let explanation =
                    "stream reset (RST_STREAM CANCEL): the request was not complete \(self.providers.requestTimeoutSeconds) s after it began (--request-timeout)"
                if let more = self.providers.streamResetLog.take(nowMs: now) {
                    self.providers.logger.info("provider connection \(self.connection.id) stream \(stalled.streamID): \(explanation)\(more)")
                }
                self.endpoint.recordRefused(
                    streamID: stalled.streamID, headers: stalled.headers,
                    headersTruncated: false, explanation: explanation, connection: &self.context)
            }
            self.flushSession()
            if let oldest = self.session.oldestIncompleteRequestStart {
                self.scheduleRequestDeadline(after: Int(oldest + timeout - now))
            }
        }
    }

    /// APNs speaks HTTP/2 only. An HTTP/1.1 request gets a plain answer saying so (a GOAWAY
    /// frame would reach curl as "HTTP/0.9" garbage); the connection closes shortly after,
    /// once the client has had time to read it.
    private func refuseHTTP1(requestLine: String, upgrade: Bool) {
        refusedHTTP1 = true
        firstBytes = nil
        providers.logger.info(
            "provider connection \(connection.id): HTTP/1.1 request '\(requestLine)'\(upgrade ? " asking to upgrade to h2c" : ""), answered 505: APNs speaks HTTP/2 only"
        )
        let howTo =
            connection.tls != nil
            ? "Use an HTTP/2 client: curl --http2, or a library with HTTP/2 enabled (ALPN h2)."
            : "This cleartext listener speaks HTTP/2 with prior knowledge: curl --http2-prior-knowledge, or a client configured for h2c prior knowledge. Upgrading from HTTP/1.1 (Upgrade: h2c) is not supported, as Apple's service has no cleartext HTTP at all."
        let body =
            "apns-emulator: this is an APNs provider endpoint, which speaks HTTP/2 only, as Apple's does. The request arrived as HTTP/1.x (\(requestLine)). \(howTo)\n"
        let head =
            "HTTP/1.1 505 HTTP Version Not Supported\r\ncontent-type: text/plain; charset=utf-8\r\n"
            + "content-length: \(body.utf8.count)\r\nconnection: close\r\n\r\n"
        connection.write(Array((head + body).utf8))
        // Closing at once could reset the connection before the client reads the answer
        // (it may still be sending its body); give it a moment, or until it hangs up.
        connection.loop.schedule(afterMilliseconds: 2000) { [weak self] in self?.connection.closeAfterFlush() }
    }

    /// `Upgrade: h2c` among the headers received so far (the JDK and curl send it on http://).
    static func asksForH2CUpgrade(_ bytes: [UInt8]) -> Bool {
        let text = String(decoding: bytes.prefix(4096), as: UTF8.self).lowercased()
        return text.contains("\nupgrade: h2c") || text.contains("\nupgrade:h2c")
    }

    /// The HTTP/2 error that ended the connection was logged where it was found.
    private var http2ErrorLogged = false

    func connectionDidClose(_ connection: Connection) {
        if session.endedForPeerError {
            providers.http2Errors.add(1, ordering: .relaxed)
            // nghttp2 ended it on its own (a flood limit, a flow-control error): said here, as
            // the metric's documentation promises.
            if !http2ErrorLogged, let goAway = session.peerErrorGoAway {
                providers.logger.warning(
                    "provider connection \(connection.id): ended by the HTTP/2 layer with GOAWAY \(HTTP2ErrorCode.name(goAway.errorCode)) (\(goAway.errorCode)), last stream \(goAway.lastStreamID): the client broke a rule of HTTP/2 or went over a flood limit (docs/limits.md: reset streams, SETTINGS, PING, CONTINUATION)"
                )
            }
        }
        if let idleTimer { connection.loop.cancel(idleTimer) }
        if let requestDeadlineTimer { connection.loop.cancel(requestDeadlineTimer) }
        for answer in heldAnswers.values { connection.loop.cancel(answer.timer) }
        if !heldAnswers.isEmpty {
            endpoint.noteAnswersNotSent(
                heldAnswers.values.map(\.sequence).sorted(),
                why: "the connection closed while it was held back (a fault rule's delayMs or --response-latency)")
        }
        heldAnswers = [:]
        providers.connectionClosed(self)
    }

    private func handle(_ request: inout HTTP2Request) {
        let started = Monotonic.nowNanoseconds()
        providers.streamsTotal.add(1, ordering: .relaxed)
        if refusingInFlight {
            refuseInFlight(request)
            return
        }
        if let ending, request.streamID > ending.lastStreamID {
            refuseAfterFault(request, ending)
            return
        }
        // The fields are handed on, not copied: the journal record ends up holding the only
        // reference to the array the HTTP/2 layer filled, and edits it in place.
        var headers: [HTTP2HeaderField] = []
        swap(&headers, &request.headers)
        let push = PushRequest(
            streamID: request.streamID, headers: consume headers,
            body: request.body, bodyLength: request.bodyLength, isComplete: request.isComplete,
            headerListSize: request.headerListSize)
        if let management = channelRequest(push.headers) {
            let response = providers.channels.handle(push, management: management, connection: &context)
            providers.countChannelRequest(operation: response.operation?.name ?? "unknown", status: response.status)
            // --state-dir: a channel made, deleted or published to is answered once committed.
            if response.changedState, let gate = channelCommitGate, gate.hold((request.streamID, response)) { return }
            answerChannel(request.streamID, response)
            return
        }
        // With --redis, when another instance holds the lease, the stateful stages wait on a
        // thread of their own rather than stop this loop; once one push of a connection waits
        // there, its later ones follow it, so they are judged in the order sent.
        let deferring: ProviderEndpoint.Deferring =
            providers.deferredChecks == nil ? .never : deferredChecks > 0 ? .always : .ifWaiting
        switch endpoint.begin(consume push, connection: &context, deferring: deferring) {
        case .answered(let response):
            deliver(request.streamID, response, started: started)
        case .needsState(let check):
            guard let deferred = providers.deferredChecks else {
                deliver(request.streamID, endpoint.finish(check), started: started)
                return
            }
            deferredChecks += 1
            providers.deferredPushes.add(1, ordering: .relaxed)
            let streamID = request.streamID
            deferred.submit(check, on: connection.loop) { [weak self] response, ticket in
                guard let self else { return }
                self.deferredChecks -= 1
                guard !self.connection.isClosed else { return }
                self.framesOfRead = []
                self.deliver(streamID, response, started: started, ticket: .some(ticket))
                self.dispatchFramesOfRead()
                self.flushSession()
            }
        }
    }

    /// Pushes of this connection waiting in `DeferredPushChecks`.
    private var deferredChecks = 0

    /// What ends the connection (a fault rule's GOAWAY or close, `--error-disconnect`),
    /// decided as a push was judged. The streams above `lastStreamID` are not processed (a
    /// GOAWAY's promise, RFC 9113 §6.8; a closed connection takes nothing more), though they
    /// may be in this very read already. `cause` names it in their records.
    private var ending: (lastStreamID: Int32, cause: String, closing: Bool)?

    private func noteEnding(by fault: FiredFault, at streamID: Int32) {
        guard ending == nil else { return }
        switch fault.action.kind {
        case .goAway(_, let lastStreamID, _):
            // Without a last stream id the GOAWAY covers every stream received so far.
            ending = (lastStreamID ?? session.lastReceivedStreamID, "fault rule \(fault.ruleID)", false)
        case .closeConnection:
            ending = (streamID, "fault rule \(fault.ruleID)", true)
        default:
            break
        }
    }

    private func refuseAfterFault(_ request: HTTP2Request, _ ending: (lastStreamID: Int32, cause: String, closing: Bool)) {
        let explanation: String
        if ending.closing {
            explanation = "not processed: \(ending.cause) closed the connection at an earlier stream"
        } else {
            // Refused outright: the GOAWAY comes once the streams it covers are answered.
            session.submitRstStream(streamID: request.streamID, errorCode: HTTP2ErrorCode.refusedStream)
            explanation =
                "stream refused (RST_STREAM REFUSED_STREAM), not processed: above the last stream id \(ending.lastStreamID) of the GOAWAY of \(ending.cause)"
        }
        endpoint.recordRefused(
            streamID: request.streamID, headers: request.headers, headersTruncated: false, explanation: explanation,
            connection: &context)
    }

    /// Answers now, or (`--state-dir`, `--redis`) once what the request changed is committed:
    /// the changes made so far on this thread, or up to `ticket` for a push judged elsewhere.
    private func deliver(_ streamID: Int32, _ response: PushResponse, started: UInt64, ticket: UInt64?? = nil) {
        if let fault = response.fault { noteEnding(by: fault, at: streamID) }
        if !response.changedNothing, let gate = commitGate {
            let held = ticket.map { gate.hold((streamID, response, started), ticket: $0) } ?? gate.hold((streamID, response, started))
            if held { return }
        }
        answer(streamID, response, started: started)
    }

    private lazy var commitGate: CommitGate<(Int32, PushResponse, UInt64)>? = providers.commits.map { commits in
        CommitGate(durability: commits, executor: connection.loop) { [weak self] answers, committed in
            guard let self else { return }
            guard !self.connection.isClosed else {
                self.endpoint.noteAnswersNotSent(
                    answers.map(\.1.recordSequence), why: "the connection closed while it waited for its change to be committed")
                return
            }
            guard committed else {
                // What these answers promise is not kept (on disk, in Redis): the provider sees
                // the connection drop (no answer), as from a crashed server, and sends again.
                self.providers.logger.warning(
                    "provider connection \(self.connection.id): the state store did not confirm the changes of \(answers.count) answer(s); closing without sending them (the provider sees no answer; should the store have kept them after all, or Redis lost its state and an instance's copy is restored, they may still be delivered, as with APNs when an answer is lost)"
                )
                self.connection.close()
                // Their deliveries are not on disk either: the devices they were for are told.
                let frames = answers.flatMap(\.1.deviceFrames)
                if !frames.isEmpty {
                    self.providers.devices.refuseUncommitted(
                        frames, reason: commits.unavailableReason ?? "the state store could not keep a notification sent to this device")
                }
                return
            }
            self.framesOfRead = []
            for (streamID, response, started) in answers { self.answer(streamID, response, started: started) }
            self.dispatchFramesOfRead()
            self.flushSession()
        }
    }

    private lazy var channelCommitGate: CommitGate<(Int32, ChannelResponse)>? = providers.commits.map { commits in
        CommitGate(durability: commits, executor: connection.loop) { [weak self] answers, committed in
            guard let self, !self.connection.isClosed else { return }
            guard committed else {
                self.providers.logger.warning(
                    "provider connection \(self.connection.id): the state store did not confirm the changes of \(answers.count) channel answer(s); closing without sending them"
                )
                self.connection.close()
                return
            }
            for (streamID, response) in answers { self.answerChannel(streamID, response) }
            self.flushSession()
        }
    }

    private func answer(_ streamID: Int32, _ response: PushResponse, started: UInt64) {
        if !response.deviceFrames.isEmpty {
            if framesOfRead != nil { framesOfRead! += response.deviceFrames } else { providers.devices.dispatch(response.deviceFrames) }
        }
        let loopIndex = connection.loop.index
        let fault = response.fault
        let delay = (fault?.delayMs ?? 0) + (providers.load.delaysAnswers ? loadDelayMs() : 0)
        guard delay > 0 else {
            if let fault { carryOut(fault, streamID: streamID, response) } else { respond(streamID, response) }
            providers.latency.record(nanoseconds: Monotonic.nowNanoseconds() - started, loop: loopIndex)
            return
        }
        let timer = connection.loop.schedule(afterMilliseconds: Int64(delay)) { [weak self] in
            self?.heldAnswers.removeValue(forKey: streamID)?.send()
        }
        heldAnswers[streamID] = HeldAnswer(timer: timer, sequence: response.recordSequence) { [weak self] in
            guard let self, !self.connection.isClosed else { return }
            if let fault { self.carryOut(fault, streamID: streamID, response) } else { self.respond(streamID, response) }
            self.flushSession()
            self.providers.latency.record(nanoseconds: Monotonic.nowNanoseconds() - started, loop: loopIndex)
        }
    }

    struct HeldAnswer {
        let timer: TimerID
        /// The push's journal record.
        let sequence: UInt64
        let send: () -> Void
    }

    /// `--response-latency`, `--response-jitter` and `--connection-rate`: how long this answer waits.
    private func loadDelayMs() -> Int {
        let load = providers.load
        var ms = load.responseLatencyMs
        if load.responseJitterMs > 0 { ms += Int.random(in: 0...load.responseJitterMs) }
        if pacer != nil {
            let wait = pacer!.delay(nowNanos: Monotonic.nowNanoseconds())
            ms += Int((wait + 999_999) / 1_000_000)
        }
        return ms
    }

    /// A request sent before the client saw the limit drop to 1: refused, as APNs does.
    private func refuseInFlight(_ request: HTTP2Request) {
        session.submitRstStream(streamID: request.streamID, errorCode: HTTP2ErrorCode.refusedStream)
        let explanation =
            "stream refused (RST_STREAM REFUSED_STREAM): it was in flight when ExpiredProviderToken dropped the stream limit to 1 (--stream-limit-drop)"
        endpoint.recordRefused(
            streamID: request.streamID, headers: request.headers,
            headersTruncated: false, explanation: explanation, connection: &context)
    }

    /// What a request the HTTP/2 layer found malformed lacks, from the fields it sent (all of
    /// them: the check runs once the header block is complete).
    static func malformedCause(_ headers: [HTTP2HeaderField]) -> String {
        let names = Set(headers.map(\.name))
        let missing = [":method", ":scheme", ":path"].filter { !names.contains($0) }
        if !missing.isEmpty { return "\(missing.joined(separator: ", ")) missing" }
        if !names.contains(":authority") && !names.contains("host") { return "neither :authority nor host" }
        return "a pseudo-header this server does not take for a request (such as :protocol), or one sent twice"
    }

    /// A stream the HTTP/2 layer reset by itself: logged and journaled.
    private func journal(_ refused: HTTP2RefusedRequest) {
        let explanation: String
        // A stream over the limit or a body of another length than it said: the client's bug
        // (a warning in the log).
        var clientBug = false
        switch refused.reason {
        case .headerListTooLarge(let size, let limit):
            explanation =
                "stream reset (RST_STREAM PROTOCOL_ERROR): the header list went over the \(limit) bytes this server advertises in SETTINGS_MAX_HEADER_LIST_SIZE (\(size) bytes at the field that crossed it); the fields from there on were not kept or looked at. A connection's \(HTTP2ServerSession.oversizedHeaderListsPerConnection) such lists end it with GOAWAY ENHANCE_YOUR_CALM"
        case .invalidHeaderField:
            explanation =
                "stream reset (RST_STREAM PROTOCOL_ERROR) by the HTTP/2 layer: a header field HTTP/2 does not allow (RFC 9113 §8.2: an upper-case or otherwise invalid name or value, a connection-specific field such as connection or keep-alive, te other than trailers); the fields before it are kept here"
        case .malformedMessage:
            explanation =
                "stream reset (RST_STREAM PROTOCOL_ERROR) by the HTTP/2 layer: the request breaks HTTP/2's message rules (RFC 9113 §8.1, §8.3): \(Self.malformedCause(refused.headers))"
        case .bodyLength(let declared, let received):
            explanation =
                "stream reset (RST_STREAM PROTOCOL_ERROR) by the HTTP/2 layer: the body came to \(received < declared ? "\(received) bytes, less than" : "at least \(received) bytes, more than") the \(declared) bytes of its content-length (RFC 9113 §8.1.1); it was not processed"
            clientBug = true
        case .overStreamLimit(let limit):
            explanation =
                "stream reset (RST_STREAM REFUSED_STREAM, not processed): the client opened a stream while it had as many open as the SETTINGS_MAX_CONCURRENT_STREAMS in force (\(limit)), or more (\"Maximum active streams violated for this endpoint\", in APNs' words); the connection goes on. The limit is 1 until a request with a valid provider token has been answered (streams opened before the client acknowledged it are served); one lowered later (after ExpiredProviderToken with --stream-limit-drop, a fault rule) applies at once"
            clientBug = true
        }
        // A client that breaks the stream limit has a bug its developer wants to see, under
        // --quiet too.
        if let more = providers.streamResetLog.take(nowMs: Monotonic.nowMilliseconds()) {
            let line = "provider connection \(connection.id) stream \(refused.streamID): \(explanation)\(more)"
            if clientBug { providers.logger.warning(line) } else { providers.logger.info(line) }
        }
        // Cut short: the fields after one over the limit or refused in the block; a message
        // rule judged at the block's end (or at the trailers) had every field.
        let truncated: Bool
        switch refused.reason {
        case .headerListTooLarge, .invalidHeaderField: truncated = true
        case .malformedMessage, .bodyLength, .overStreamLimit: truncated = false
        }
        endpoint.recordRefused(
            streamID: refused.streamID, headers: refused.headers,
            headersTruncated: truncated, explanation: explanation, connection: &context)
    }

    /// Whether this connection is to a channel-management host: its own listeners, or
    /// `--listen` reached by an `api-manage-broadcast` name (SNI).
    private var servesChannelManagement: Bool {
        switch role {
        case .channelManagement: return true
        case .byName: return context.serverName.map { ChannelEndpoint.isManagementHost(Substring($0)) } ?? false
        case .push: return false
        }
    }

    /// The host (and the listener's flag) a certificate of `allowed` should connect to.
    private static func hostHint(_ allowed: String, channelManagement: Bool) -> String {
        switch (allowed, channelManagement) {
        case ("sandbox", false): return "sandbox (api.sandbox.push.apple.com, --sandbox-listen)"
        case ("sandbox", true): return "sandbox (api-manage-broadcast.sandbox.push.apple.com, --channel-sandbox-listen)"
        case (_, false): return "production (api.push.apple.com, --production-listen)"
        case (_, true): return "production (api-manage-broadcast.push.apple.com, --channel-production-listen)"
        }
    }

    /// Whether a request is the channel API's: true for channel management, false for a
    /// broadcast send, nil for a device push. Device pushes pay one look at `:path`.
    private func channelRequest(_ headers: [HTTP2HeaderField]) -> Bool? {
        switch role {
        case .channelManagement:
            return true
        case .byName:
            let named = headers.first { $0.name == ":authority" }.map { Substring($0.value) } ?? context.serverName.map { Substring($0) }
            if let named, ChannelEndpoint.isManagementHost(named) { return true }
        case .push:
            break
        }
        // Pseudo-headers come first; only `:path` is looked at.
        for index in headers.indices {
            guard headers[index].name.utf8.first == UInt8(ascii: ":") else { return nil }
            if headers[index].name == ":path" {
                return ChannelEndpoint.isBroadcastPath(headers[index].value) ? false : nil
            }
        }
        return nil
    }

    private func answerChannel(_ streamID: Int32, _ response: ChannelResponse) {
        if !response.deviceFrames.isEmpty {
            if framesOfRead != nil { framesOfRead! += response.deviceFrames } else { providers.devices.dispatch(response.deviceFrames) }
        }
        var count = 0
        setIDField(&count, .requestID, .text(response.requestID))
        if let channelID = response.channelID { setIDField(&count, .channelID, .text(channelID)) }
        submit(streamID, idFields: count, status: response.status, body: response.body, raise: response.raiseStreamLimit)
        if let explanation = response.explanation {
            providers.logger.info(
                "provider connection \(connection.id) stream \(streamID): channel \(response.operation?.name ?? "request") \(response.status) \(response.reason ?? ""): \(explanation)"
            )
        }
    }

    /// The id fields an answer carries.
    enum IDName: UInt8 {
        case apnsID, uniqueID, requestID, channelID

        var name: StaticString {
            switch self {
            case .apnsID: "apns-id"
            case .uniqueID: "apns-unique-id"
            case .requestID: "apns-request-id"
            case .channelID: "apns-channel-id"
            }
        }
    }

    /// An id as the answer writes it: a drawn one from its bits, no String made for it.
    private static func value(of id: PushID) -> HTTP2AnswerField.Value {
        if let drawn = id.drawn { return .uuid(high: drawn.high, low: drawn.low, uppercase: drawn.uppercase) }
        return .text(id.text)
    }

    /// Sets the answer's field at `count` (the first `idFields` fields are ids) and counts it.
    /// Ids are unique per response: never index them, or they churn the HPACK table. Except
    /// each id name's first time on the connection: its entry puts the name in the table, so
    /// every later id refers to its name by index instead of Huffman-coding it again (about 250
    /// instructions a name, and 10 to 15 bytes less an answer).
    @inline(__always)
    private func setIDField(_ count: inout Int, _ id: IDName, _ value: HTTP2AnswerField.Value) {
        setAnswerField(&count, HTTP2AnswerField(name: id.name, value: value, neverIndex: indexedIDName(id)))
    }

    @inline(__always)
    private func setAnswerField(_ count: inout Int, _ field: HTTP2AnswerField) {
        if count < answerFields.count { answerFields[count] = field } else { answerFields.append(field) }
        count += 1
    }

    /// One answer: the `idFields` id fields set (`setIDField`), `content-type` when there is a
    /// body, and the raised stream limit after the connection's first valid provider token.
    /// Returns false when the stream is gone (the client reset it) and nothing was queued.
    @discardableResult
    private func submit(_ streamID: Int32, idFields: Int, status: Int, body: [UInt8]?, raise: Bool) -> Bool {
        var count = idFields
        if body != nil { setAnswerField(&count, Self.contentTypeJSON) }
        if answerFields.count > count { answerFields.removeLast(answerFields.count - count) }
        guard session.submitAnswer(streamID: streamID, status: status, fields: answerFields, body: body) else { return false }
        if raise && !streamLimitRaised && !streamLimitFromFault {
            session.submitSettings(Self.raisedLimit)
            streamLimitRaised = true
        }
        return true
    }

    private static let contentTypeJSON = HTTP2AnswerField(name: "content-type", value: .constant("application/json"))

    /// Whether `id`'s name went out with indexing before on this connection; notes that it does now.
    @inline(__always)
    private func indexedIDName(_ id: IDName) -> Bool {
        let bit: UInt8 = 1 << id.rawValue
        defer { indexedIDNames |= bit }
        return indexedIDNames & bit != 0
    }

    private func respond(_ streamID: Int32, _ response: PushResponse) {
        var count = 0
        setIDField(&count, .apnsID, Self.value(of: response.apnsPushID))
        if response.uniquePushID.exists { setIDField(&count, .uniqueID, Self.value(of: response.uniquePushID)) }
        let sent = submit(streamID, idFields: count, status: response.status, body: response.body, raise: response.raiseStreamLimit)
        if !sent {
            endpoint.noteAnswersNotSent(
                [response.recordSequence], why: "the client had reset its stream (RST_STREAM) before the answer went out")
        }
        // Successes cost nothing: no clock read for them.
        // The points first: the (lazy, optional) budget is read and copied only for an error.
        if !goingAway, case let points = ErrorBudget.points(status: response.status, reason: response.reason), points > 0,
            var budget = errorBudget
        {
            let tooMany = budget.charge(points, nowMs: Monotonic.nowMilliseconds())
            errorBudget = budget
            if tooMany { goAwayForErrors(after: response) }
        }
        guard providers.load.streamLimitDrop else { return }
        if response.reason == .expiredProviderToken {
            // Observed at APNs: SETTINGS MAX_CONCURRENT_STREAMS 1 at once, and the streams
            // already in flight refused.
            if streamLimitRaised {
                session.submitSettings(Self.advertisedBeforeAuthentication)
                streamLimitRaised = false
            }
            streamLimitDropped = true
            refusingInFlight = handlingRead
        } else if streamLimitDropped, response.status == 200 {
            if !streamLimitRaised {
                session.submitSettings(Self.raisedLimit)
                streamLimitRaised = true
            }
            streamLimitDropped = false
        }
    }

    /// What a fault rule asked for (README, "Faults").
    private func carryOut(_ fault: FiredFault, streamID: Int32, _ response: PushResponse) {
        switch fault.action.kind {
        case .none, .respond:
            respond(streamID, response)
        case .maxConcurrentStreams(let limit):
            session.submitSettings([HTTP2Setting(id: HTTP2Setting.maxConcurrentStreams, value: limit)])
            streamLimitFromFault = true
            respond(streamID, response)
        case .resetStream(let code):
            session.submitRstStream(streamID: streamID, errorCode: code)
        case .goAway(let reason, let lastStreamID, let code):
            // Its own push was not processed (the record says so): refused, not left open; before
            // the GOAWAY, which would otherwise close a stream above its last id unannounced.
            session.submitRstStream(streamID: streamID, errorCode: HTTP2ErrorCode.refusedStream)
            goAwayOnceAnswered(
                errorCode: code, lastStreamID: ending?.lastStreamID ?? lastStreamID ?? session.lastReceivedStreamID,
                debugData: reason.map(Self.reasonJSON) ?? [])
        case .closeConnection:
            // The answers of the streams before it (already in nghttp2's output) go first: the
            // connection drops at this stream, not before it.
            connection.write { session.drainOutput(into: &$0) }
            connection.closeAfterFlush()
        }
    }

    private func flushSession() {
        connection.write { session.drainOutput(into: &$0) }
        if pendingGoAway != nil, session.openStreamCount == 0, Monotonic.nowMilliseconds() >= goAwayNotBeforeMs { sendPendingGoAway() }
        // After a GOAWAY: closed once every stream owed an answer has it.
        if goingAway, pendingGoAway == nil, !session.wantsRead, !session.wantsWrite { closeSoon() }
    }

    /// The streams up to `lastStreamID` are answered (the rest refused as they come), then
    /// GOAWAY, then the connection closes.
    private func goAwayOnceAnswered(errorCode: UInt32, lastStreamID: Int32, debugData: [UInt8]) {
        pendingGoAway = (errorCode, lastStreamID, debugData)
        goingAway = true
        if lastStreamID > session.lastReceivedStreamID {
            // It covers streams the client has not opened yet: they are taken and answered for a
            // moment first (once it is sent, nghttp2 drops a new stream unanswered, which the
            // GOAWAY told the client might have been processed).
            goAwayNotBeforeMs = Monotonic.nowMilliseconds() + Self.closeGraceMilliseconds
            connection.loop.schedule(afterMilliseconds: Self.closeGraceMilliseconds) { [weak self] in self?.flushSession() }
        }
        flushSession()
        connection.loop.schedule(afterMilliseconds: 10_000) { [weak self] in self?.stopWaitingForRequests() }
    }

    /// 10 s after a GOAWAY was decided: requests still arriving (a body that never ends) are
    /// refused, as at shutdown; the answers owed for pushes already taken (held by a delay or
    /// `--connection-rate`, waiting for a commit) still go out before the GOAWAY: closing
    /// here left delivered pushes unanswered under a GOAWAY that claimed them. Ten minutes
    /// later (longer than any delay) the connection ends whatever is owed.
    private func stopWaitingForRequests() {
        guard !connection.isClosed, pendingGoAway != nil else { return }
        refuseRequestsStillArriving(
            "stream refused (RST_STREAM REFUSED_STREAM): the request was still arriving 10 s after the connection's GOAWAY was decided; it was not processed"
        )
        flushSession()
        connection.loop.schedule(afterMilliseconds: 600_000) { [weak self] in
            guard let self else { return }
            self.sendPendingGoAway()
            self.connection.closeAfterFlush()
        }
    }

    /// Requests not complete yet: refused (RST_STREAM REFUSED_STREAM, safe to send again),
    /// each journaled with `explanation`.
    private func refuseRequestsStillArriving(_ explanation: String) {
        for refused in session.resetStalledRequests(startedBefore: .max, errorCode: HTTP2ErrorCode.refusedStream) {
            providers.logger.info("provider connection \(connection.id) stream \(refused.streamID): \(explanation)")
            endpoint.recordRefused(
                streamID: refused.streamID, headers: refused.headers, headersTruncated: false, explanation: explanation,
                connection: &context)
        }
    }

    private func sendPendingGoAway() {
        guard let pending = pendingGoAway else { return }
        pendingGoAway = nil
        session.submitGoAway(errorCode: pending.errorCode, lastStreamID: pending.lastStreamID, debugData: pending.debugData)
        connection.write { session.drainOutput(into: &$0) }
    }

    /// The session is done: the connection closes when the peer does (clients close once a
    /// GOAWAY leaves them nothing to wait for), at the latest a second later, reading
    /// meanwhile. The peer's last frames (the ACK of a SETTINGS sent with an answer, requests
    /// it sent before it read the GOAWAY) would otherwise meet a closed socket: a TLS client
    /// such as httpx drops the answer it has read when its write fails, and a close with
    /// unread bytes sends RST, which loses the answers the client has not read yet (the JDK's
    /// HttpClient reported a delivered push failed, with 150 ms).
    private func closeSoon() {
        guard !closing else { return }
        closing = true
        connection.loop.schedule(afterMilliseconds: Self.closeGraceMilliseconds) { [weak self] in self?.connection.closeAfterFlush() }
    }

    private var closing = false
    static let closeGraceMilliseconds: Int64 = 1000
    /// A GOAWAY covering streams not opened yet waits until then for them (`goAwayOnceAnswered`).
    private var goAwayNotBeforeMs: Int64 = 0

    /// `{"reason":"…"}`, the debug data APNs puts in its GOAWAY frames.
    static func reasonJSON(_ reason: String) -> [UInt8] {
        var debug = Array(#"{"reason":"#.utf8)
        JSONValue.writeString(reason, into: &debug)
        debug.append(UInt8(ascii: "}"))
        return debug
    }

    /// Ends the connection the way APNs does: GOAWAY carrying `{"reason":"…"}`.
    ///
    /// For `Shutdown` the GOAWAY's last stream covers every stream received, so none of them
    /// is left in doubt: the requests already complete are still answered, before the GOAWAY
    /// (a client such as python-h2 takes no frame after one; the drain's deadline bounds the
    /// wait), and those still arriving, or opened later, are refused with RST_STREAM
    /// REFUSED_STREAM, which tells the client they were not processed and may be sent again.
    func goAway(reason: APNsReason, errorCode: UInt32 = HTTP2ErrorCode.noError) {
        guard reason == .shutdown else {
            session.submitGoAway(errorCode: errorCode, lastStreamID: nil, debugData: Self.reasonJSON(reason.rawValue))
            flushSession()
            connection.closeAfterFlush()
            return
        }
        refuseRequestsStillArriving(
            "stream refused (RST_STREAM REFUSED_STREAM): the emulator was shutting down before the request was complete; it was not processed")
        let held = heldAnswers.sorted(by: { $0.key < $1.key })
        heldAnswers = [:]
        for (_, answer) in held {
            connection.loop.cancel(answer.timer)
            answer.send()
        }
        if ending == nil { ending = (session.lastReceivedStreamID, "the shutdown", false) }
        // Closes the connection once no answer is owed.
        goAwayOnceAnswered(
            errorCode: errorCode, lastStreamID: ending?.lastStreamID ?? session.lastReceivedStreamID, debugData: Self.reasonJSON(reason.rawValue))
    }

    /// `--error-disconnect`: GOAWAY with the reason of the error that went over the limit. The
    /// streams already received are still answered first (a 200 is never lost to it), newer
    /// ones refused, and the connection closes once nothing is owed (`goAwayOnceAnswered`).
    private func goAwayForErrors(after response: PushResponse) {
        let reason = response.reason?.rawValue ?? String(response.status)
        providers.logger.info(
            "provider connection \(connection.id): too many errors (\(errorBudget?.limit ?? 0) points within \((errorBudget?.windowMs ?? 0) / 1000) s, --error-disconnect), GOAWAY \(reason)"
        )
        providers.countErrorDisconnect()
        let last = session.lastReceivedStreamID
        if ending == nil { ending = (last, "--error-disconnect", false) }
        goAwayOnceAnswered(errorCode: HTTP2ErrorCode.noError, lastStreamID: ending?.lastStreamID ?? last, debugData: Self.reasonJSON(reason))
    }

    /// `atLeast`: the soonest next look, in ms (a request under way is looked at again each second).
    private func scheduleIdleCheck(atLeast: Int64 = 10) {
        let timeout = Int64(providers.idleTimeoutSeconds) * 1000
        guard timeout > 0, !connection.isClosed else { return }
        let due = connection.lastActivity + timeout - Monotonic.nowMilliseconds()
        idleTimer = connection.loop.schedule(afterMilliseconds: max(due, atLeast)) { [weak self] in
            guard let self, !self.connection.isClosed else { return }
            guard Monotonic.nowMilliseconds() - self.connection.lastActivity >= timeout else { return self.scheduleIdleCheck() }
            // A request still open is not idleness: --request-timeout ends a stalled one.
            guard self.session.openStreamCount == 0 else { return self.scheduleIdleCheck(atLeast: 1000) }
            self.providers.logger.info("provider connection \(self.connection.id): idle for \(timeout / 1000) s, GOAWAY IdleTimeout")
            self.goAway(reason: .idleTimeout)
        }
    }
}
