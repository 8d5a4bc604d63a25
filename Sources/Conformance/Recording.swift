public import APNsCore

/// What a run saw, written by `--record FILE` so it can be replayed against another target
/// (`--replay FILE`): typically Apple's answers, replayed against the emulator.
public struct Recording: Sendable {
    public struct Answer: Sendable, Equatable {
        public var id: String
        public var status: Int?
        public var reason: String?
        /// Each check the case makes and whether the recorded answer passed it.
        public var checks: [String: Bool]
        public var unanswered: String?
        /// A connection case's SETTINGS.
        public var settings: ObservedSettings?
    }

    public var target: String
    public var environment: APNsEnvironment
    public var recordedAt: String
    public var tool: String
    public var answers: [Answer]

    public init(target: String, environment: APNsEnvironment, recordedAt: String, tool: String, results: [CaseResult]) {
        self.target = target
        self.environment = environment
        self.recordedAt = recordedAt
        self.tool = tool
        answers = results.compactMap { result in
            guard let seen = result.seen else { return nil }
            return Answer(
                id: result.item.id, status: seen.status, reason: seen.reason,
                checks: Dictionary(uniqueKeysWithValues: result.checks.map { ($0.check.rawValue, $0.passed) }), unanswered: seen.unanswered,
                settings: seen.settings)
        }
    }

    public var json: JSONValue {
        let answerValues: [JSONValue] = answers.map { answer in
            var checks = JSONObject()
            for (name, passed) in answer.checks.sorted(by: { $0.key < $1.key }) { checks.members.append((name, .bool(passed))) }
            return [
                "id": .string(answer.id), "status": answer.status.map { .int(Int64($0)) } ?? .null,
                "reason": answer.reason.map(JSONValue.string) ?? .null, "checks": .object(checks),
                "unanswered": answer.unanswered.map(JSONValue.string) ?? .null,
                "settings": answer.settings.map(Self.json) ?? .null,
            ]
        }
        return [
            "recording": 1, "tool": .string(tool), "target": .string(target), "environment": .string(environment.rawValue),
            "recordedAt": .string(recordedAt), "answers": .array(answerValues),
        ]
    }

    static func json(_ settings: ObservedSettings) -> JSONValue {
        func object(_ values: [HTTP2SettingName: UInt32]) -> JSONValue {
            .object(JSONObject(values.sorted { $0.key.rawValue < $1.key.rawValue }.map { ($0.key.rawValue, .int(Int64($0.value))) }))
        }
        return ["first": object(settings.first), "afterFirstRequest": object(settings.afterFirstRequest)]
    }

    static func settings(_ value: JSONValue?, _ id: String) throws(CatalogueError) -> ObservedSettings? {
        guard let value, value != .null else { return nil }
        func values(_ field: String) throws(CatalogueError) -> [HTTP2SettingName: UInt32] {
            var out: [HTTP2SettingName: UInt32] = [:]
            for (key, number) in value[field]?.objectValue ?? JSONObject() {
                guard let name = HTTP2SettingName(rawValue: key), let raw = number.intValue, let exact = UInt32(exactly: raw) else {
                    throw CatalogueError("answer \(id): settings.\(field).\(key) is not a SETTINGS parameter with a value")
                }
                out[name] = exact
            }
            return out
        }
        return ObservedSettings(first: try values("first"), afterFirstRequest: try values("afterFirstRequest"))
    }

    public static func parse(_ bytes: [UInt8]) throws(CatalogueError) -> Recording {
        let root = try CatalogueError.object(bytes, "the recording")
        guard root["recording"]?.intValue == 1 else { throw CatalogueError("not a conformance recording (no \"recording\": 1)") }
        guard let environmentText = root["environment"]?.stringValue, let environment = APNsEnvironment(rawValue: environmentText) else {
            throw CatalogueError("the recording's environment is not sandbox or production")
        }
        guard let answerValues = root["answers"]?.arrayValue else { throw CatalogueError("the recording has no answers array") }
        var answers: [Answer] = []
        for (index, value) in answerValues.enumerated() {
            guard let object = value.objectValue, let id = object["id"]?.stringValue else {
                throw CatalogueError("answer \(index + 1) of the recording has no id")
            }
            var status: Int?
            if let statusValue = object["status"], statusValue != .null {
                guard let number = statusValue.intValue else { throw CatalogueError("answer \(id): status is not a number or null") }
                status = Int(number)
            }
            var checks: [String: Bool] = [:]
            for (name, passed) in object["checks"]?.objectValue ?? JSONObject() {
                guard let flag = passed.boolValue else { throw CatalogueError("answer \(id): check \(name) is not true or false") }
                checks[name] = flag
            }
            answers.append(
                Answer(
                    id: id, status: status, reason: object["reason"]?.stringValue, checks: checks,
                    unanswered: object["unanswered"]?.stringValue, settings: try settings(object["settings"], id)))
        }
        var recording = Recording(
            target: root["target"]?.stringValue ?? "", environment: environment, recordedAt: root["recordedAt"]?.stringValue ?? "",
            tool: root["tool"]?.stringValue ?? "", results: [])
        recording.answers = answers
        return recording
    }
}

extension Recording.Answer {
    public var summary: String { Observation(status: status, reason: reason, settings: settings).summary }
}

/// Comparing a target's answers with a recording's, case by case.
public enum Replay {
    /// The result of one recorded case seen again: `pass` when the target answered as recorded.
    public static func compare(_ recorded: Recording.Answer, _ planned: PlannedCase, seen: Observation) -> CaseResult {
        let checks = planned.item.expect.checks.map { ($0, Judge.passes($0, seen, planned)) }
        var result = CaseResult(item: planned.item, expected: recorded.summary, seen: seen, checks: checks, verdict: .pass)
        if let expected = planned.item.settings {
            // The parameters the case looks at, as in force in the recording and now (one not
            // sent is its default in both).
            guard let recordedSettings = recorded.settings, let seenSettings = seen.settings else {
                if recorded.settings != nil || seen.settings != nil {
                    result.verdict = seen.settings == nil ? .noAnswer : .differs
                    result.why = "recorded \(recorded.summary), answered \(seen.unanswered ?? seen.summary)"
                }
                return result
            }
            if !seenSettings.sameInForce(as: recordedSettings, lookingAt: expected) {
                result.verdict = .differs
                result.why =
                    "recorded \(recordedSettings.describe(lookingAt: expected)), answered \(seenSettings.describe(lookingAt: expected))"
            }
        } else if seen.status != recorded.status || (seen.status != nil && seen.reason != recorded.reason) {
            result.verdict = .differs
            result.why = "recorded \(recorded.summary), answered \(seen.summary)"
        } else if let changed = checks.first(where: { check in recorded.checks[check.0.rawValue].map { $0 != check.1 } ?? false }) {
            result.verdict = .differs
            result.why = "\(changed.0.rawValue): recorded \(changed.1 ? "failing" : "passing"), answered \(changed.1 ? "passing" : "failing")"
        }
        return result
    }
}
