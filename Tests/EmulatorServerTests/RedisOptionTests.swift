import CommandLineOptions
import EmulatorServer
import Testing

@Suite("--redis options")
struct RedisOptionTests {
    func resolve(_ arguments: [String], _ environment: [String: String] = [:]) throws -> ServeConfiguration {
        try ServeConfiguration.resolve(arguments: ["--demo", "off"] + arguments, environment: environment)
    }

    func message(_ arguments: [String]) -> String {
        do {
            _ = try resolve(arguments)
            return ""
        } catch {
            return "\(error)"
        }
    }

    @Test func urlsFromTheFlagAndTheEnvironment() throws {
        #expect(try resolve([]).state.redis == nil)
        let url = try #require(try resolve(["--redis", "redis://:s3cret@10.0.0.5:6380/2"]).state.redis?.url)
        #expect(url.host == "10.0.0.5" && url.port == 6380 && url.database == 2 && url.password == "s3cret")
        #expect(try resolve([], ["APNS_EMULATOR_REDIS": "redis://127.0.0.1"]).state.redis?.url.port == 6379)
        #expect(try resolve(["--redis", "redis://127.0.0.1", "--redis-prefix", "team-a:"]).state.redis?.prefix == "team-a:")
    }

    @Test func theOthersJournalIsFollowedLazilyUnlessAskedToReadEveryWrite() throws {
        #expect(try resolve(["--redis", "redis://127.0.0.1"]).state.redis?.follow == .lazy)
        #expect(try resolve(["--redis", "redis://127.0.0.1", "--redis-follow", "eager"]).state.redis?.follow == .eager)
        #expect(try resolve(["--redis", "redis://127.0.0.1"], ["APNS_EMULATOR_REDIS_FOLLOW": "eager"]).state.redis?.follow == .eager)
        let bad = message(["--redis", "redis://127.0.0.1", "--redis-follow", "sometimes"])
        #expect(bad.contains("--redis-follow") && bad.contains("lazy"), "\(bad)")
    }

    @Test func badValuesAreClearErrors() {
        let bad = message(["--redis", "http://127.0.0.1:6379"])
        #expect(bad.contains("--redis") && bad.contains("redis://"), "\(bad)")
        #expect(!message(["--redis", "redis://:hunter2@127.0.0.1:99999"]).contains("hunter2"), "the password never shows")
        #expect(message(["--redis", "redis://127.0.0.1", "--state-dir", "/tmp/x"]).contains("cannot be combined"))
        #expect(message(["--redis", "redis://127.0.0.1", "--redis-prefix", ""]).contains("--redis-prefix"))
    }

    /// A state flag for a backend not in use is checked, and named as doing nothing.
    @Test func stateFlagsForAnotherBackendAreNamedAsDoingNothing() throws {
        #expect(try resolve(["--redis", "redis://127.0.0.1", "--redis-prefix", "a:"]).settingsWithoutEffect.isEmpty)
        #expect(try resolve(["--state-dir", "/tmp/x", "--state-journal-lag", "5"]).settingsWithoutEffect.isEmpty)
        let memory = try resolve(["--redis-prefix", "a:", "--state-failure", "memory"], ["APNS_EMULATOR_REDIS_FOLLOW": "eager"])
        #expect(
            memory.settingsWithoutEffect == [
                "--redis-prefix has no effect without --redis",
                "--redis-follow (from APNS_EMULATOR_REDIS_FOLLOW) has no effect without --redis",
                "--state-failure has no effect without --state-dir",
            ])
        let redis = try resolve(["--redis", "redis://127.0.0.1", "--state-journal-lag", "5"])
        #expect(redis.settingsWithoutEffect == ["--state-journal-lag has no effect without --state-dir"])
        #expect(message(["--redis-follow", "sometimes"]).contains("--redis-follow"), "still checked without --redis")
    }
}
