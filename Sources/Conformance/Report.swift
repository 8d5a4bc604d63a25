public import APNsCore

/// The report of a run: a table for people, JSON for programs.
public struct ConformanceReport: Sendable {
    public var target: String
    public var environment: APNsEnvironment
    /// "catalogue", or the recording's file when replaying.
    public var comparedWith: String
    public var results: [CaseResult]
    /// The signal that stopped the run ("SIGINT", "SIGTERM"), if one did: the cases after it
    /// are reported as not run.
    public var interrupted: String?

    public init(target: String, environment: APNsEnvironment, comparedWith: String, results: [CaseResult], interrupted: String? = nil) {
        self.target = target
        self.environment = environment
        self.comparedWith = comparedWith
        self.results = results
        self.interrupted = interrupted
    }

    public var summary: RunSummary { RunSummary(results) }

    /// A table: case, expected (or recorded), seen, verdict, evidence; then the reasons for
    /// every difference and skip, and the counts.
    public var text: String {
        let expectedTitle = comparedWith == "catalogue" ? "expected" : "recorded"
        var rows: [[String]] = [["case", expectedTitle, "seen", "verdict", "evidence"]]
        for result in results {
            rows.append([
                result.item.id, result.expected, Self.seenText(result), result.verdict.rawValue,
                result.item.evidence + (result.item.unconfirmed ? " (unconfirmed)" : ""),
            ])
        }
        // The case and verdict columns as wide as their cells; expected and seen up to 30
        // characters: a longer one (a case that checks SETTINGS says a lot) runs on into the
        // next column of its row rather than widening every row of the table.
        let widths = (0..<5).map { column in
            let widest = rows.map { $0[column].count }.max() ?? 0
            return column == 1 || column == 2 ? min(widest, 30) : widest
        }
        var lines = ["target \(target), \(environment.rawValue), compared with the \(comparedWith)", ""]
        for row in rows {
            lines.append(
                row.enumerated().map { index, cell in
                    index == 4 || cell.count >= widths[index] + 2
                        ? cell + (index == 4 ? "" : "  ") : cell.padding(toLength: widths[index] + 2, withPad: " ", startingAt: 0)
                }
                .joined())
        }
        let notes = results.filter { $0.verdict != .pass && $0.why != nil }
        if !notes.isEmpty {
            lines.append("")
            for result in notes { lines.append("\(result.item.id) (\(result.verdict.rawValue)): \(result.why ?? "")") }
        }
        let counts = summary
        lines.append("")
        lines.append(
            "\(results.count) \(results.count == 1 ? "case" : "cases"): \(counts.pass) pass, \(counts.differs) differ"
                + (counts.differsUnconfirmed > 0 ? " (\(counts.differsUnconfirmed) of them unconfirmed)" : "")
                + ", \(counts.noAnswer) without an answer, \(counts.skipped) skipped")
        if let interrupted { lines.append("stopped by \(interrupted): the cases after it were not run") }
        return lines.joined(separator: "\n")
    }

    /// What was seen; for a connection case, the SETTINGS parameters it looks at.
    public static func seenText(_ result: CaseResult) -> String {
        guard let seen = result.seen else { return "—" }
        if let expected = result.item.settings, let settings = seen.settings { return settings.describe(lookingAt: expected) }
        return seen.summary
    }

    public var json: JSONValue {
        let cases: [JSONValue] = results.map { result in
            var checks = JSONObject()
            for (check, passed) in result.checks { checks.members.append((check.rawValue, .bool(passed))) }
            let seen: JSONValue =
                result.seen.map { seen in
                    [
                        "status": seen.status.map { .int(Int64($0)) } ?? .null, "reason": seen.reason.map(JSONValue.string) ?? .null,
                        "timestamp": seen.timestampMs.map(JSONValue.int) ?? .null, "apnsId": seen.apnsID.map(JSONValue.string) ?? .null,
                        "uniqueId": seen.uniqueID.map(JSONValue.string) ?? .null,
                        "unanswered": seen.unanswered.map(JSONValue.string) ?? .null,
                        "settings": seen.settings.map(Recording.json) ?? .null,
                    ]
                } ?? .null
            return [
                "id": .string(result.item.id), "title": .string(result.item.title), "stage": .int(Int64(result.item.stage)),
                "evidence": .string(result.item.evidence), "unconfirmed": .bool(result.item.unconfirmed),
                "expected": .string(result.expected), "seen": seen, "checks": .object(checks),
                "verdict": .string(result.verdict.rawValue), "why": result.why.map(JSONValue.string) ?? .null,
            ]
        }
        return [
            "target": .string(target), "environment": .string(environment.rawValue), "comparedWith": .string(comparedWith),
            "cases": .array(cases), "summary": summary.json, "interrupted": interrupted.map(JSONValue.string) ?? .null,
        ]
    }
}

/// What `--dry-run` prints for one case: every request it would send, credentials described.
public enum DryRun {
    /// `target`: where the case's connection goes (Apple's other environment is another host);
    /// `runEnvironment`: the run's own, whose shared connection is "the run's connection".
    public static func describe(_ planned: PlannedCase, target: String, runEnvironment: APNsEnvironment) -> String {
        var lines = ["# \(planned.item.id): \(planned.item.title) (expects \(planned.item.expectedSummary))"]
        let connection =
            switch planned.connection {
            case .shared(let environment) where environment != runEnvironment: "the run's \(environment.rawValue) connection"
            case .shared: "the run's connection"
            case .own: "a connection of its own"
            case .certificate: "a connection of its own with the client certificate"
            }
        let channelConnection = planned.host == .channelManagement ? " (channel management)" : ""
        lines.append("#   to \(target) on \(connection)\(channelConnection), \(planned.connection.environment.rawValue)")
        for (label, request) in [("first", planned.before), ("then", planned.main)] {
            guard let request else { continue }
            if planned.before != nil { lines.append("#   \(label):") }
            lines.append(describeRequest(request, target: target))
        }
        return lines.joined(separator: "\n")
    }

    /// One request's lines: method and path, `:authority`, headers (credentials described), body.
    public static func describeRequest(_ request: PlannedRequest, target: String) -> String {
        var lines = ["\(request.request.method) \(request.request.path)", ":authority: \(request.request.authority ?? target)"]
        for header in request.request.headers {
            lines.append(header.name == "authorization" ? "authorization: <\(request.credentials)>" : "\(header.name): \(header.value)")
        }
        if let body = request.request.body {
            let text = String(decoding: body, as: UTF8.self)
            lines.append(body.count > 160 ? "(\(body.count) bytes) \(text.prefix(120))…" : text)
        } else {
            lines.append("(no body)")
        }
        return lines.joined(separator: "\n")
    }
}
