import Foundation
import HTTP2
import MonotonicClock
import Networking

/// One connection of a load run and the thread that drives it: keeps up to
/// `streamsPerConnection` requests in flight, refilling as answers arrive, and replaces the
/// connection when the server ends it (GOAWAY, close, reset), as a real provider does.
/// Confined to its thread once `run` starts; `stats` is read after the thread has finished.
final class LoadWorker: @unchecked Sendable {
    let number: Int
    private let shared: LoadRunState
    private var plan: LoadPlan { shared.plan }
    private(set) var stats = LoadStats()
    /// The server could not be reached again for `plan.reconnectGiveUp` seconds.
    private(set) var gaveUp = false
    /// When the last request ended (monotonic nanoseconds; 0: none did).
    private(set) var lastFinished: UInt64 = 0

    private var connection: HTTP2ClientConnection?
    /// The current connection got a GOAWAY: no new streams on it; replaced once its own end.
    private var goAwaySeen = false
    private var inFlight: [Int32: InFlight] = [:]
    private struct InFlight {
        var started: UInt64
        var kind: PushMix.Kind
    }

    private var tokenSignedAt: UInt64 = 0
    private var headers: [PushMix.Kind: [HTTP2HeaderField]] = [:]
    private let payloads: [PushMix.Kind: [UInt8]]

    /// Counted since the last report to the shared progress counters.
    private var completedSinceReport = 0
    private var failedSinceReport = 0

    private static let second: UInt64 = 1_000_000_000
    private static let millisecond: UInt64 = 1_000_000

    init(number: Int, shared: LoadRunState) {
        self.number = number
        self.shared = shared
        var payloads: [PushMix.Kind: [UInt8]] = [:]
        for kind in PushMix.Kind.allCases { payloads[kind] = shared.plan.payload(for: kind) }
        self.payloads = payloads
    }

    /// Opens a connection. A new connection has no token history, so an ageing provider token
    /// is replaced here rather than on a connection that has used it for less than 20 minutes.
    func connect() throws(ClientError) {
        let now = Monotonic.nowNanoseconds()
        if headers.isEmpty || now - tokenSignedAt > 20 * 60 * Self.second { try signProviderToken(now: now) }
        connection = try HTTP2ClientConnection(plan.connection)
        goAwaySeen = false
    }

    private func signProviderToken(now: UInt64) throws(ClientError) {
        let token: String
        do { token = try plan.signingKey.token(issuedAt: Int64(Date().timeIntervalSince1970)) } catch {
            throw ClientError("cannot sign a provider token: \(error)")
        }
        tokenSignedAt = now
        for kind in PushMix.Kind.allCases {
            let (pushType, priority) = LoadPlan.headers(for: kind)
            headers[kind] = [
                HTTP2HeaderField("authorization", "bearer \(token)"), HTTP2HeaderField("apns-topic", plan.topic),
                HTTP2HeaderField("apns-push-type", pushType), HTTP2HeaderField("apns-priority", priority),
            ]
        }
    }

    func run() {
        let deadline = shared.deadline
        var sending = true
        /// A claimed request waiting for its slot from the pacer.
        var pending: (number: Int, due: UInt64)?
        var drainDeadline: UInt64?
        var lastTimeoutCheck: UInt64 = 0
        var reconnectFailingSince: UInt64?
        var reconnectDelay: UInt64 = 0

        while true {
            let now = Monotonic.nowNanoseconds()
            if sending && (now >= deadline || shared.isStopped) {
                sending = false
                pending = nil  // claimed, never sent: not a request
            }
            if !sending {
                if inFlight.isEmpty { break }
                let limit = drainDeadline ?? now + UInt64(plan.drainTimeout * 1e9)
                drainDeadline = limit
                if now >= limit {
                    abandonInFlight(as: .unfinished)
                    break
                }
            }

            // Replace a connection the server ended, once nothing more can come on it.
            if connection == nil || connection!.isClosed || (goAwaySeen && inFlight.isEmpty) {
                if let ended = connection {
                    ended.close()
                    connection = nil
                    stats.connectionsLost += 1
                    abandonInFlight(as: .connectionLost)
                }
                guard sending else { break }
                do {
                    try connect()
                    stats.reconnects += 1
                    reconnectFailingSince = nil
                    reconnectDelay = 0
                } catch {
                    stats.connectFailures += 1
                    shared.connectFailures.wrappingAdd(1, ordering: .relaxed)
                    stats.note(connectionError: error.description)
                    let since = reconnectFailingSince ?? now
                    reconnectFailingSince = since
                    // A server gone for good ends this connection's part of the run.
                    if now - since > UInt64(plan.reconnectGiveUp * 1e9) {
                        sending = false
                        gaveUp = true
                        continue
                    }
                    reconnectDelay = min(max(reconnectDelay * 2, 50 * Self.millisecond), 2 * Self.second)
                    usleep(UInt32(min(reconnectDelay, deadline > now ? deadline - now : 0) / 1000))
                    continue
                }
            }
            guard let connection else { continue }

            if sending && !goAwaySeen {
                if now - tokenSignedAt > UInt64(plan.providerTokenRefresh * 1e9) {
                    do { try signProviderToken(now: now) } catch { stats.note(connectionError: error.description) }
                }
                while inFlight.count < plan.streamsPerConnection {
                    if pending == nil {
                        guard let number = shared.claimRequest() else {
                            sending = false
                            break
                        }
                        pending = (number, shared.pacer?.reserve(now: now) ?? 0)
                    }
                    guard let next = pending, next.due <= now else { break }
                    submit(next.number, on: connection)
                    pending = nil
                }
            }

            // Wait for answers, or until the next paced request is due.
            var wait = 100 * Self.millisecond
            if sending, let pending, inFlight.count < plan.streamsPerConnection {
                wait = pending.due > now ? min(wait, pending.due - now) : 0
            }
            if sending { wait = min(wait, deadline > now ? deadline - now : 0) }
            do {
                try connection.pumpOnce(waitMilliseconds: Int32((wait + Self.millisecond - 1) / Self.millisecond))
            } catch {
                stats.note(connectionError: error.description)
                connection.close()
            }
            collect(from: connection)
            if connection.session.goAway != nil && !goAwaySeen {
                goAwaySeen = true
                stats.goAways += 1
            }
            let after = Monotonic.nowNanoseconds()
            if after - lastTimeoutCheck > 100 * Self.millisecond {
                lastTimeoutCheck = after
                cancelOverdue(on: connection, now: after)
            }
            reportProgress()
        }
        connection?.close()
        reportProgress()
    }

    private func submit(_ number: Int, on connection: HTTP2ClientConnection) {
        let kind = plan.mix.kind(ofRequest: number)
        let request = ClientRequest(
            method: "POST", path: shared.paths[number % shared.paths.count], headers: headers[kind]!,
            body: payloads[kind]!, authority: plan.authority)
        do {
            let stream = try connection.submit(request)
            inFlight[stream] = InFlight(started: Monotonic.nowNanoseconds(), kind: kind)
        } catch {
            record(.notSent, kind)
        }
    }

    private func collect(from connection: HTTP2ClientConnection) {
        let responses = connection.takeFinishedResponses()
        guard !responses.isEmpty else { return }
        let now = Monotonic.nowNanoseconds()
        for response in responses {
            // Streams cancelled for their timeout are already counted.
            guard let request = inFlight.removeValue(forKey: response.streamID) else { continue }
            let outcome = LoadOutcome(response)
            if outcome.status != nil { stats.latency.record(nanoseconds: now - request.started) }
            record(outcome, request.kind)
        }
    }

    private func cancelOverdue(on connection: HTTP2ClientConnection, now: UInt64) {
        let limit = UInt64(plan.requestTimeout * 1e9)
        for (stream, request) in inFlight where now - request.started > limit {
            // One still queued behind the server's stream limit never left: not sent.
            let sent = connection.session.hasSent(streamID: stream)
            connection.session.submitRstStream(streamID: stream, errorCode: HTTP2ErrorCode.cancel)
            inFlight.removeValue(forKey: stream)
            record(sent ? .timedOut : .notSent, request.kind)
        }
    }

    private func abandonInFlight(as outcome: LoadOutcome) {
        for request in inFlight.values { record(outcome, request.kind) }
        inFlight.removeAll()
    }

    private func record(_ outcome: LoadOutcome, _ kind: PushMix.Kind) {
        stats.count(outcome, kind)
        completedSinceReport += 1
        if outcome != .answered(status: 200, reason: nil) { failedSinceReport += 1 }
    }

    private func reportProgress() {
        guard completedSinceReport > 0 else { return }
        lastFinished = Monotonic.nowNanoseconds()
        shared.addProgress(completed: completedSinceReport, failed: failedSinceReport)
        completedSinceReport = 0
        failedSinceReport = 0
    }
}
