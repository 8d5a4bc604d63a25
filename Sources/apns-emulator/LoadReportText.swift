import APNsCore
import Foundation
import ProviderClient

/// How `load` shows a run: the header, the progress lines and the summary as text, or the
/// summary as one JSON object.
struct LoadDescription {
    var target: String
    var tls: Bool
    var environment: String
    var tokens: Int
    /// "created" or "from the emulator".
    var tokenSource: String
    var keySpec: String
    var plan: LoadPlan
    /// The user's stop conditions (nil: not given).
    var requests: Int?
    var duration: Double?

    var header: String {
        // Under 10 a second the fraction matters (`--rate 0.5` is not "1", nor 0.001 "0").
        let rate =
            plan.ratePerSecond >= 10
            ? "\(grouped(plan.ratePerSecond)) req/s"
            : plan.ratePerSecond > 0 ? "\(String(format: "%g", plan.ratePerSecond)) req/s" : "unlimited"
        let stops = [requests.map { "\(grouped($0)) requests" }, duration.map { "\(Self.seconds($0)) s" }].compactMap { $0 }
        let sizes = plan.mix.weights.filter { $0.weight > 0 }.map { "\($0.kind.rawValue) \(plan.payload(for: $0.kind).count)" }
        return """
            target       \(tls ? "https" : "http")://\(target) (\(environment)\(tls ? ", TLS" : ", h2c"))
            load         \(plan.connections) connection\(plan.connections == 1 ? "" : "s") × \(plan.streamsPerConnection) stream\(plan.streamsPerConnection == 1 ? "" : "s"), rate \(rate), until \(stops.joined(separator: " or "))
            mix          \(plan.mix) (payload bytes: \(sizes.joined(separator: ", ")))
            tokens       \(grouped(tokens)) (\(tokenSource)), topic \(plan.topic), key \(keySpec)
            """
    }

    /// A duration as given: `--duration 0.5` is not "1 s", nor 2.6 "3 s".
    static func seconds(_ value: Double) -> String {
        value == value.rounded() ? grouped(value) : String(format: "%g", value)
    }

    /// One progress line: the last interval's rate and the totals.
    static func progress(_ now: LoadGenerator.Progress, since last: LoadGenerator.Progress) -> String {
        let interval = max(now.elapsedSeconds - last.elapsedSeconds, 0.001)
        let rate = Double(now.completed - last.completed) / interval
        let line = String(
            format: "%6.1f s  %@ req/s  %@ done  %@ not 200", now.elapsedSeconds, grouped(rate), grouped(now.completed),
            grouped(now.failed))
        return now.connectFailures > 0 ? line + "  \(grouped(now.connectFailures)) failed connects" : line
    }

    func summary(_ report: LoadGenerator.Report) -> String {
        let stats = report.stats
        // Every request the run made, and those that left when some never did (as `--json`'s
        // `requests` and `sent`): the rate is of those sent.
        let made = stats.outcomes.values.reduce(0, +)
        let count = made == stats.sent ? grouped(made) : "\(grouped(made)), sent \(grouped(stats.sent)),"
        let ending =
            [
                "requests": made == stats.sent ? "all sent" : "count reached", "duration": "duration reached",
                "interrupt": "interrupted", "unreachable": "the server could not be reached again",
            ][report.stoppedBy] ?? report.stoppedBy
        var lines = [
            String(
                format: "requests     %@ in %.2f s: %@ req/s (%@)", count, report.durationSeconds,
                grouped(report.throughput), ending)
        ]
        let outcomes = stats.outcomes.sorted { $0.key < $1.key }
        for (i, (outcome, count)) in outcomes.enumerated() {
            lines.append((i == 0 ? "answers      " : "             ") + "\(outcome): \(grouped(count))")
        }
        if outcomes.isEmpty { lines.append("answers      none") }
        let types = plan.mix.weights.map { "\($0.kind.rawValue) \(grouped(stats.pushTypes[$0.kind] ?? 0))" }
        lines.append("push types   " + types.joined(separator: ", "))
        let latency = stats.latency
        if latency.count > 0 {
            let cells = Self.percentiles.map { "\($0.label) \(Self.milliseconds(latency.percentile($0.fraction)))" }
            lines.append(
                "latency ms   " + cells.joined(separator: "  ") + "  max \(Self.milliseconds(latency.maximum))"
                    + "  (mean \(Self.milliseconds(UInt64(latency.mean))))")
        }
        lines.append(
            "connections  \(plan.connections) opened, \(stats.connectionsLost) ended by the server, \(stats.goAways) GOAWAY, "
                + "\(stats.reconnects) reconnects, \(stats.connectFailures) failed connects")
        for message in stats.connectionErrors { lines.append("             error: \(message)") }
        return lines.joined(separator: "\n")
    }

    func json(_ report: LoadGenerator.Report) -> JSONValue {
        let stats = report.stats
        var statuses: [Int: Int] = [:]
        for (outcome, count) in stats.outcomes { if let status = outcome.status { statuses[status, default: 0] += count } }
        let latency = stats.latency
        var latencyMs = JSONObject()
        for p in Self.percentiles { latencyMs[p.label] = .double(Self.ms(latency.percentile(p.fraction))) }
        latencyMs["max"] = .double(Self.ms(latency.maximum))
        latencyMs["min"] = .double(Self.ms(latency.count > 0 ? latency.minimum : 0))
        latencyMs["mean"] = .double(Self.ms(UInt64(latency.mean)))
        latencyMs["samples"] = .int(Int64(latency.count))
        return [
            "target": .string(target), "tls": .bool(tls), "environment": .string(environment), "topic": .string(plan.topic),
            "connections": .int(Int64(plan.connections)), "streams": .int(Int64(plan.streamsPerConnection)),
            "rate": .double(plan.ratePerSecond),
            "mix": .object(JSONObject(plan.mix.weights.map { ($0.kind.rawValue, .int(Int64($0.weight))) })),
            "tokens": .int(Int64(tokens)), "tokenSource": .string(tokenSource),
            "payloadBytes": .object(JSONObject(plan.mix.weights.map { ($0.kind.rawValue, .int(Int64(plan.payload(for: $0.kind).count))) })),
            "requests": .int(Int64(stats.outcomes.values.reduce(0, +))), "sent": .int(Int64(stats.sent)),
            "answered": .int(Int64(stats.answered)), "succeeded": .int(Int64(stats.succeeded)),
            "durationSeconds": .double(report.durationSeconds), "throughput": .double(report.throughput),
            "stoppedBy": .string(report.stoppedBy),
            "statuses": .object(JSONObject(statuses.sorted { $0.key < $1.key }.map { (String($0.key), .int(Int64($0.value))) })),
            "outcomes": .object(JSONObject(stats.outcomes.sorted { $0.key < $1.key }.map { ($0.key.description, .int(Int64($0.value))) })),
            "pushTypes": .object(JSONObject(plan.mix.weights.map { ($0.kind.rawValue, .int(Int64(stats.pushTypes[$0.kind] ?? 0))) })),
            "latencyMs": .object(latencyMs),
            "connectionsEnded": .int(Int64(stats.connectionsLost)), "goAways": .int(Int64(stats.goAways)),
            "reconnects": .int(Int64(stats.reconnects)), "connectFailures": .int(Int64(stats.connectFailures)),
            "connectionErrors": .array(stats.connectionErrors.map(JSONValue.string)),
        ]
    }

    static let percentiles: [(label: String, fraction: Double)] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)]

    static func ms(_ nanoseconds: UInt64) -> Double { (Double(nanoseconds) / 1e4).rounded() / 100 }
    static func milliseconds(_ nanoseconds: UInt64) -> String { String(format: "%.2f", Double(nanoseconds) / 1e6) }
}

/// 12345 → "12,345"; fractions are rounded.
func grouped(_ value: Int) -> String {
    let digits = String(value.magnitude)
    var out = ""
    for (i, digit) in digits.enumerated() {
        if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
        out.append(digit)
    }
    return value < 0 ? "-" + out : out
}

func grouped(_ value: Double) -> String { grouped(Int(value.rounded())) }
