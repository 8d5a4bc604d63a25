// RedisWarnings: what the shared state says in its log about a Redis that misbehaves or is
// set up to lose data, without saying the same thing thousands of times a second.

import Foundation
import Redis

/// A warning repeated while a condition lasts (Redis out of memory: every write fails) is
/// logged once, then at most once per `intervalMs` with how often it came meanwhile. Each text
/// is paced on its own, so two conditions that alternate (a refused write, then a lease that
/// lapsed because of it) do not let each other through; the newest `maxTexts` are remembered.
struct RepeatedWarnings {
    let intervalMs: Int64
    static let maxTexts = 16
    private var recent: [(text: String, loggedMs: Int64, suppressed: Int)] = []

    init(intervalMs: Int64 = 10_000) { self.intervalMs = intervalMs }

    /// The line to log for `text` now, or nil while the same text was logged less than
    /// `intervalMs` ago.
    mutating func line(for text: String, nowMs: Int64) -> String? {
        guard let index = recent.firstIndex(where: { $0.text == text }) else {
            if recent.count >= Self.maxTexts { recent.removeFirst() }
            recent.append((text, nowMs, 0))
            return text
        }
        if nowMs - recent[index].loggedMs < intervalMs {
            recent[index].suppressed += 1
            return nil
        }
        let suppressed = recent[index].suppressed
        recent[index] = (text, nowMs, 0)
        return suppressed > 0 ? text + " (and \(suppressed) more times since it was last logged)" : text
    }
}

extension RedisStateStore {
    /// Why this Redis may drop keys of the shared state on its own, from `INFO memory`: a
    /// memory limit with an eviction policy other than `noeviction`. Evicted keys are
    /// acknowledged pushes, stored notifications or the state itself. With `noeviction` a
    /// full Redis refuses writes instead, which the instances turn into 503s.
    static func evictionRisk(memoryInfo info: String) -> String? {
        var maxMemory: UInt64 = 0
        var policy = ""
        for line in info.split(whereSeparator: \.isNewline) {
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2 else { continue }
            let value = parts[1].trimmingCharacters(in: .whitespaces)
            switch parts[0] {
            case "maxmemory": maxMemory = UInt64(value) ?? 0
            case "maxmemory_policy": policy = value
            default: break
            }
        }
        guard maxMemory > 0, !policy.isEmpty, policy != "noeviction" else { return nil }
        return "maxmemory \(maxMemory) bytes with maxmemory-policy \(policy)"
    }

    /// `evictionRisk(memoryInfo:)` of the Redis `redis` is connected to.
    func evictionRisk(on redis: RedisConnection) throws(RedisError) -> String? {
        Self.evictionRisk(memoryInfo: try redis.command("INFO", "memory").text ?? "")
    }
}
