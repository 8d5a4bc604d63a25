@testable import Redis
import Testing

/// The RedisError a throwing call threw, or nil.
func redisError(_ body: () throws -> Void) -> RedisError? {
    do {
        try body()
        return nil
    } catch let error as RedisError {
        return error
    } catch {
        Issue.record("not a RedisError: \(error)")
        return nil
    }
}

@Suite struct RedisURLTests {
    @Test func parsesHostPortDatabaseAndCredentials() throws {
        #expect(try RedisURL(parsing: "redis://localhost") == RedisURL(host: "localhost", port: 6379, database: 0))
        #expect(try RedisURL(parsing: "REDIS://cache.internal/") == RedisURL(host: "cache.internal"))
        #expect(try RedisURL(parsing: "redis://10.0.0.5:6380/2") == RedisURL(host: "10.0.0.5", port: 6380, database: 2))
        #expect(try RedisURL(parsing: "redis://:secret@h:7000/1") == RedisURL(host: "h", port: 7000, database: 1, password: "secret"))
        #expect(try RedisURL(parsing: "redis://app:secret@h") == RedisURL(host: "h", username: "app", password: "secret"))
        // Percent-encoded, and a raw '@' in the password (the last '@' ends the credentials).
        #expect(try RedisURL(parsing: "redis://u:p%40ss%3A%2Fword@h").password == "p@ss:/word")
        #expect(try RedisURL(parsing: "redis://:pa@ss@h").password == "pa@ss")
        #expect(try RedisURL(parsing: "redis://[::1]:7001/3") == RedisURL(host: "::1", port: 7001, database: 3))
        #expect(try RedisURL(parsing: "redis://[::1]") == RedisURL(host: "::1"))
    }

    @Test(arguments: [
        ("http://h", "redis URL 'http://h': expected redis://[[user]:password@]host[:port][/db]"),
        ("rediss://h:6380", "redis URL 'rediss://h:6380': TLS (rediss://) is not supported"),
        ("redis://h:0", "redis URL 'redis://h:0': port '0' is not a number from 1 to 65535"),
        ("redis://h:65536", "redis URL 'redis://h:65536': port '65536' is not a number from 1 to 65535"),
        ("redis://h:", "redis URL 'redis://h:': port '' is not a number from 1 to 65535"),
        ("redis://h:+1", "redis URL 'redis://h:+1': port '+1' is not a number from 1 to 65535"),
        ("redis://h/x", "redis URL 'redis://h/x': database 'x' is not a number (0, 1, …)"),
        ("redis://h/-1", "redis URL 'redis://h/-1': database '-1' is not a number (0, 1, …)"),
        ("redis://", "redis URL 'redis://': no host"),
        ("redis://:6379", "redis URL 'redis://:6379': no host"),
        ("redis://h?timeout=1", "redis URL 'redis://h?timeout=1': query options are not supported"),
        ("redis://secret@h", "redis URL 'redis://secret@h': credentials must be [user]:password"),
        ("redis://[::1", "redis URL 'redis://[::1': missing ']' after the IPv6 address"),
        // The password never appears in a message.
        ("redis://u:secret@h:port", "redis URL 'redis://u:***@h:port': port 'port' is not a number from 1 to 65535"),
        ("redis://:s%zz@h", "redis URL 'redis://:***@h': bad percent-encoding in the credentials"),
    ])
    func rejectsBadURLs(text: String, message: String) {
        let error = redisError { _ = try RedisURL(parsing: text) }
        #expect(error?.kind == .badURL)
        #expect(error?.description == message)
    }

    @Test func redactedHidesThePassword() throws {
        #expect(try RedisURL(parsing: "redis://app:secret@h:7000/2").redacted == "redis://app:***@h:7000/2")
        #expect(try RedisURL(parsing: "redis://:secret@h").redacted == "redis://:***@h:6379/0")
        #expect(try RedisURL(parsing: "redis://h").redacted == "redis://h:6379/0")
        #expect(RedisURL(host: "::1", port: 1).redacted == "redis://[::1]:1/0")
    }

    @Test func sha1MatchesKnownDigests() {
        #expect(SHA1.hex([]) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        #expect(SHA1.hex(Array("abc".utf8)) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(SHA1.hex(Array("The quick brown fox jumps over the lazy dog".utf8)) == "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12")
        // 56 bytes: the padding needs a second block.
        #expect(SHA1.hex(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)) == "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
        #expect(SHA1.hex([UInt8](repeating: 0x61, count: 1_000_000)) == "34aa973cd4c4daa4f61eeb2bdbad27316534016f")
    }

    @Test func replyConveniences() {
        #expect(RedisReply.string(Array("42".utf8)).int == 42)
        #expect(RedisReply.string(Array("42".utf8)).text == "42")
        #expect(RedisReply.string([0xff, 0xfe]).text == nil)
        #expect(RedisReply.string([0xff]).bytes == [0xff])
        #expect(RedisReply.status("OK").text == "OK")
        #expect(RedisReply.integer(7).int == 7)
        #expect(RedisReply.null.text == nil)
        #expect(RedisReply.null.elements == nil)
        #expect(RedisReply.array([.integer(1)]).elements == [.integer(1)])
        #expect(RedisArgument.int(-5) == .text("-5"))
        #expect(RedisArgument.int(Int64.max) == .text("9223372036854775807"))
    }
}
