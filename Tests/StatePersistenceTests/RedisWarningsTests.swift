@testable import RedisStore
import Testing

@Suite("Redis warnings: said once, and an evicting Redis named")
struct RedisWarningsTests {
    @Test func aRepeatedWarningIsLoggedOnceAnIntervalWithHowOftenItCame() {
        var warnings = RepeatedWarnings(intervalMs: 10_000)
        #expect(warnings.line(for: "full", nowMs: 0) == "full")
        #expect(warnings.line(for: "full", nowMs: 1) == nil)
        #expect(warnings.line(for: "full", nowMs: 9_999) == nil)
        #expect(warnings.line(for: "full", nowMs: 10_000) == "full (and 2 more times since it was last logged)")
        #expect(warnings.line(for: "full", nowMs: 20_000) == "full", "nothing suppressed in between")
        #expect(warnings.line(for: "other", nowMs: 20_001) == "other", "another text is said at once")
        #expect(warnings.line(for: "full", nowMs: 20_002) == nil, "and does not let the first one through again")
        #expect(warnings.line(for: "other", nowMs: 20_003) == nil)
        #expect(warnings.line(for: "full", nowMs: 30_000) == "full (and 1 more times since it was last logged)")
    }

    @Test func aMemoryLimitWithAnEvictionPolicyIsARisk() {
        func info(_ maxMemory: String, _ policy: String) -> String {
            "# Memory\r\nused_memory:1048576\r\nmaxmemory:\(maxMemory)\r\nmaxmemory_human:x\r\nmaxmemory_policy:\(policy)\r\n"
        }
        #expect(
            RedisStateStore.evictionRisk(memoryInfo: info("104857600", "allkeys-lru"))
                == "maxmemory 104857600 bytes with maxmemory-policy allkeys-lru")
        #expect(RedisStateStore.evictionRisk(memoryInfo: info("104857600", "volatile-ttl")) != nil, "waiting notifications have TTLs")
        #expect(RedisStateStore.evictionRisk(memoryInfo: info("104857600", "noeviction")) == nil, "refuses writes instead: 503")
        #expect(RedisStateStore.evictionRisk(memoryInfo: info("0", "allkeys-lru")) == nil, "no limit, nothing evicted")
        #expect(RedisStateStore.evictionRisk(memoryInfo: "") == nil, "a server that does not say")
    }
}
