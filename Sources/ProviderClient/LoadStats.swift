import APNsCore
import HTTP2

/// How one request of a load run ended.
public enum LoadOutcome: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// An HTTP answer, with the APNs reason of an error.
    case answered(status: Int, reason: String?)
    /// The server reset the stream (RST_STREAM with this HTTP/2 error code).
    case reset(code: UInt32)
    /// Not processed: above the last stream id of the server's GOAWAY (safe to retry).
    case refusedByGoAway
    /// Never sent: the connection stopped accepting streams first.
    case notSent
    /// The connection closed or failed with the request in flight.
    case connectionLost
    /// No answer within the request timeout (the stream was cancelled).
    case timedOut
    /// Still unanswered when the run stopped waiting.
    case unfinished

    public var description: String {
        switch self {
        case .answered(let status, let reason): return reason.map { "\(status) \($0)" } ?? String(status)
        case .reset(let code): return "RST_STREAM \(HTTP2ErrorCode.name(code))"
        case .refusedByGoAway: return "refused by GOAWAY"
        case .notSent: return "not sent"
        case .connectionLost: return "connection lost"
        case .timedOut: return "timed out"
        case .unfinished: return "unfinished"
        }
    }

    public var status: Int? {
        if case .answered(let status, _) = self { return status }
        return nil
    }

    /// Answers first by status and reason, then the ways of getting none.
    public static func < (a: LoadOutcome, b: LoadOutcome) -> Bool {
        switch (a, b) {
        case (.answered(let s1, let r1), .answered(let s2, let r2)): return (s1, r1 ?? "") < (s2, r2 ?? "")
        case (.answered, _): return true
        case (_, .answered): return false
        default: return a.description < b.description
        }
    }

    /// What a finished stream says. Only errors carry a body, so a 200 parses nothing.
    init(_ response: HTTP2Response) {
        if let status = response.status {
            let reason = response.body.isEmpty ? nil : (try? JSONValue.parse(response.body))?["reason"]?.stringValue
            self = .answered(status: status, reason: reason)
        } else if let code = response.resetErrorCode {
            self = .reset(code: code)
        } else if response.notSentError != nil {
            self = .notSent
        } else if response.closeErrorCode == HTTP2ErrorCode.refusedStream {
            self = .refusedByGoAway
        } else {
            self = .connectionLost
        }
    }
}

/// What a load run counted. Each connection's thread keeps its own; they are merged at the
/// end. Bounded: outcomes are a short list (a server inventing reasons is cut at
/// `maxOutcomes`), latencies a fixed-size histogram, error messages the first few distinct.
public struct LoadStats: Sendable {
    public var outcomes: [LoadOutcome: Int] = [:]
    public var pushTypes: [PushMix.Kind: Int] = [:]
    /// Submit to complete answer, for requests that got an HTTP status.
    public var latency = LatencyHistogram()
    public var goAways = 0
    /// Connections that closed or failed under the generator (GOAWAY, reset, error).
    public var connectionsLost = 0
    public var reconnects = 0
    public var connectFailures = 0
    /// Distinct connection error messages, the first `maxMessages` of them.
    public var connectionErrors: [String] = []

    static let maxOutcomes = 64
    static let maxMessages = 8

    public init() {}

    /// Requests that were submitted (every outcome but `notSent`).
    public var sent: Int { outcomes.filter { $0.key != .notSent }.values.reduce(0, +) }
    public var answered: Int { outcomes.filter { $0.key.status != nil }.values.reduce(0, +) }
    public var succeeded: Int { outcomes[.answered(status: 200, reason: nil)] ?? 0 }

    mutating func count(_ outcome: LoadOutcome, _ kind: PushMix.Kind) {
        var outcome = outcome
        if outcomes[outcome] == nil, outcomes.count >= Self.maxOutcomes, case .answered(let status, _) = outcome {
            outcome = .answered(status: status, reason: "(other reasons)")
        }
        outcomes[outcome, default: 0] += 1
        pushTypes[kind, default: 0] += 1
    }

    mutating func note(connectionError message: String) {
        if connectionErrors.count < Self.maxMessages, !connectionErrors.contains(message) { connectionErrors.append(message) }
    }

    public mutating func merge(_ other: LoadStats) {
        outcomes.merge(other.outcomes, uniquingKeysWith: +)
        pushTypes.merge(other.pushTypes, uniquingKeysWith: +)
        latency.merge(other.latency)
        goAways += other.goAways
        connectionsLost += other.connectionsLost
        reconnects += other.reconnects
        connectFailures += other.connectFailures
        for message in other.connectionErrors { note(connectionError: message) }
    }
}
