/// A Lua script run by its SHA-1 (EVALSHA), sent in full (EVAL) only when the server does not
/// have it cached: the first run, after a restart, or after SCRIPT FLUSH.
public struct RedisScript: Sendable {
    public let source: String
    /// Lower-case hex, as SCRIPT LOAD returns it.
    public let sha1: String

    public init(_ source: String) {
        self.source = source
        sha1 = SHA1.hex(Array(source.utf8))
    }

    public func run(
        on connection: RedisConnection, keys: [RedisArgument] = [],
        arguments: [RedisArgument] = []
    ) throws(RedisError) -> RedisReply {
        let rest: [RedisArgument] = [.int(keys.count)] + keys + arguments
        do throws(RedisError) {
            return try connection.command(["EVALSHA", .text(sha1)] + rest)
        } catch let error where error.kind == .server && error.description.hasPrefix("NOSCRIPT") {
            // EVAL caches the script again, so the next run is an EVALSHA hit.
            return try connection.command(["EVAL", .text(source)] + rest)
        }
    }
}
