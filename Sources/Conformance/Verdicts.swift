public import APNsCore
public import ProviderClient

/// What a target answered to one request, as far as a provider can see it.
public struct Observation: Sendable, Equatable {
    /// nil: no answer (a reset stream, a GOAWAY, a closed connection, a timeout).
    public var status: Int?
    public var reason: String?
    public var timestampMs: Int64?
    public var apnsID: String?
    public var uniqueID: String?
    /// Why no answer came, when none did.
    public var unanswered: String?
    /// A connection case: the server's SETTINGS as seen.
    public var settings: ObservedSettings?

    public init(
        status: Int?, reason: String? = nil, timestampMs: Int64? = nil, apnsID: String? = nil, uniqueID: String? = nil,
        unanswered: String? = nil, settings: ObservedSettings? = nil
    ) {
        self.settings = settings
        self.status = status
        self.reason = reason
        self.timestampMs = timestampMs
        self.apnsID = apnsID
        self.uniqueID = uniqueID
        self.unanswered = unanswered
    }

    public init(_ result: APNsResult, unanswered: String?) {
        self.init(
            status: result.response.status, reason: result.reason, timestampMs: result.timestampMs, apnsID: result.apnsID,
            uniqueID: result.uniqueID, unanswered: result.response.status == nil ? (unanswered ?? "no answer") : nil)
    }

    /// `400 BadTopic`, `200`, or why there was no answer (for a connection case, the SETTINGS).
    public var summary: String {
        if let settings { return settings.summary }
        guard let status else { return "no answer" }
        return reason.map { "\(status) \($0)" } ?? "\(status)"
    }
}

/// The SETTINGS a server sent on a new connection: its first frame's values, and the values in
/// force once the first request was answered (every frame applied in order).
public struct ObservedSettings: Sendable, Equatable {
    public var first: [HTTP2SettingName: UInt32]
    public var afterFirstRequest: [HTTP2SettingName: UInt32]

    public init(first: [HTTP2SettingName: UInt32], afterFirstRequest: [HTTP2SettingName: UInt32]) {
        self.first = first
        self.afterFirstRequest = afterFirstRequest
    }

    /// From the frames received (acks left out), the first of them sent before any request.
    public init(frames: [[(id: Int32, value: UInt32)]], firstCount: Int) {
        func apply(_ frames: ArraySlice<[(id: Int32, value: UInt32)]>) -> [HTTP2SettingName: UInt32] {
            var values: [HTTP2SettingName: UInt32] = [:]
            for frame in frames {
                for entry in frame { if let name = HTTP2SettingName.allCases.first(where: { $0.id == entry.id }) { values[name] = entry.value } }
            }
            return values
        }
        self.init(first: apply(frames.prefix(min(1, firstCount))), afterFirstRequest: apply(frames[...]))
    }

    public var summary: String {
        SettingsExpectation(first: first, afterFirstRequest: afterFirstRequest).summary
    }

    /// The parameters `expected` looks at, each as in force: a parameter the server did not
    /// send has its RFC 9113 initial value, and the text says so.
    public func describe(lookingAt expected: SettingsExpectation) -> String {
        func describe(_ names: Dictionary<HTTP2SettingName, UInt32>.Keys, _ values: [HTTP2SettingName: UInt32]) -> String {
            names.sorted { $0.rawValue < $1.rawValue }.map { "\($0.rawValue) \(Self.text(values[$0], $0))" }.joined(separator: ", ")
        }
        var parts: [String] = []
        if !expected.first.isEmpty { parts.append("first SETTINGS " + describe(expected.first.keys, first)) }
        if !expected.afterFirstRequest.isEmpty {
            parts.append("after a request " + describe(expected.afterFirstRequest.keys, afterFirstRequest))
        }
        return parts.joined(separator: "; ")
    }

    /// Whether the parameters `expected` looks at are in force with the same values in both.
    public func sameInForce(as other: ObservedSettings, lookingAt expected: SettingsExpectation) -> Bool {
        expected.first.keys.allSatisfy { (first[$0] ?? $0.initialValue) == (other.first[$0] ?? $0.initialValue) }
            && expected.afterFirstRequest.keys.allSatisfy {
                (afterFirstRequest[$0] ?? $0.initialValue) == (other.afterFirstRequest[$0] ?? $0.initialValue)
            }
    }

    /// A value as sent, or the initial value of one not sent.
    static func text(_ sent: UInt32?, _ name: HTTP2SettingName) -> String {
        if let sent { return String(sent) }
        return "\(name.initialValue.map(String.init) ?? "unlimited") (not sent: the default)"
    }

    /// What differs from `expected`, in words (nil: nothing). A parameter not sent is judged by
    /// its initial value: APNs leaves INITIAL_WINDOW_SIZE out at times, which is 65535 all the same.
    func differences(from expected: SettingsExpectation) -> String? {
        var lines: [String] = []
        for (name, value) in expected.first.sorted(by: { $0.key.rawValue < $1.key.rawValue }) where (first[name] ?? name.initialValue) != value {
            lines.append("first SETTINGS \(name.rawValue) \(Self.text(first[name], name)), expected \(value)")
        }
        for (name, value) in expected.afterFirstRequest.sorted(by: { $0.key.rawValue < $1.key.rawValue })
        where (afterFirstRequest[name] ?? name.initialValue) != value {
            lines.append("after the first request \(name.rawValue) \(Self.text(afterFirstRequest[name], name)), expected \(value)")
        }
        return lines.isEmpty ? nil : lines.joined(separator: "; ")
    }
}

public enum Verdict: String, Sendable {
    /// The answer is the expected one (or, in a replay, the recorded one).
    case pass
    case differs
    /// The request got no answer at all.
    case noAnswer = "no-answer"
    /// The case was not sent: its needs were not given, or its setup failed.
    case skipped
}

/// One case's result: what was expected (from the catalogue, or a recording), what was seen.
public struct CaseResult: Sendable {
    public var item: ConformanceCase
    public var expected: String
    public var seen: Observation?
    /// Each check the case makes, and whether the answer passed it.
    public var checks: [(check: Check, passed: Bool)]
    public var verdict: Verdict
    /// Why it differs or was skipped, in a sentence.
    public var why: String?

    public static func skipped(_ item: ConformanceCase, expected: String, why: String) -> CaseResult {
        CaseResult(item: item, expected: expected, seen: nil, checks: [], verdict: .skipped, why: why)
    }
}

/// Judging answers against the catalogue's expectations.
public enum Judge {
    public static func judge(_ planned: PlannedCase, seen: Observation) -> CaseResult {
        let expect = planned.item.expect
        let checks = expect.checks.map { ($0, passes($0, seen, planned)) }
        var result = CaseResult(item: planned.item, expected: planned.item.expectedSummary, seen: seen, checks: checks, verdict: .pass)
        if let settings = planned.item.settings {
            if let seenSettings = seen.settings {
                if let why = seenSettings.differences(from: settings) {
                    result.verdict = .differs
                    result.why = why
                }
            } else {
                result.verdict = .noAnswer
                result.why = seen.unanswered ?? "no SETTINGS came"
            }
        } else if seen.status == nil {
            result.verdict = .noAnswer
            result.why = seen.unanswered
        } else if seen.status != expect.status || seen.reason != expect.reason {
            result.verdict = .differs
            result.why = "expected \(expect.summary), answered \(seen.summary)"
        } else if let failed = checks.first(where: { !$0.1 }) {
            result.verdict = .differs
            result.why = "\(failed.0.rawValue): \(explain(failed.0, seen, planned))"
        }
        return result
    }

    static func passes(_ check: Check, _ seen: Observation, _ planned: PlannedCase) -> Bool {
        switch check {
        case .apnsIDPresent: return seen.apnsID.map { !$0.isEmpty } ?? false
        case .apnsIDEchoed:
            let sent = planned.main.request.headers.first { $0.name == "apns-id" }?.value
            return sent != nil && seen.apnsID == sent
        case .uniqueIDOnSandboxOnly:
            return (seen.uniqueID != nil) == (planned.connection.environment == .sandbox)
        case .timestampInMilliseconds:
            // Milliseconds since 1970 passed 10^12 in 2001; seconds will not reach it for millennia.
            return seen.timestampMs.map { $0 > 1_000_000_000_000 } ?? false
        }
    }

    static func explain(_ check: Check, _ seen: Observation, _ planned: PlannedCase) -> String {
        switch check {
        case .apnsIDPresent: "the answer has no apns-id"
        case .apnsIDEchoed:
            "sent apns-id \(planned.main.request.headers.first { $0.name == "apns-id" }?.value ?? "none"), answered \(seen.apnsID ?? "none")"
        case .uniqueIDOnSandboxOnly:
            planned.connection.environment == .sandbox
                ? "a sandbox answer without apns-unique-id" : "a production answer with apns-unique-id \(seen.uniqueID ?? "")"
        case .timestampInMilliseconds: "timestamp \(seen.timestampMs.map(String.init) ?? "missing") is not milliseconds"
        }
    }
}

/// The counts a run ends with.
public struct RunSummary: Sendable, Equatable {
    public var pass = 0
    public var differs = 0
    public var differsUnconfirmed = 0
    public var noAnswer = 0
    public var skipped = 0

    public init(_ results: [CaseResult]) {
        for result in results {
            switch result.verdict {
            case .pass: pass += 1
            case .differs:
                differs += 1
                if result.item.unconfirmed { differsUnconfirmed += 1 }
            case .noAnswer: noAnswer += 1
            case .skipped: skipped += 1
            }
        }
    }

    /// Every case that ran answered as expected.
    public var agrees: Bool { differs == 0 && noAnswer == 0 }

    public var json: JSONValue {
        [
            "pass": .int(Int64(pass)), "differs": .int(Int64(differs)), "differsUnconfirmed": .int(Int64(differsUnconfirmed)),
            "noAnswer": .int(Int64(noAnswer)), "skipped": .int(Int64(skipped)),
        ]
    }
}
