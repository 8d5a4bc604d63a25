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
        try run(on: connection, keys: keys, arguments: arguments, after: [])
    }

    /// Runs the script after `prelude`, in the same round trip: commands whose effect the script
    /// relies on. The use: a large value `SET` into a key the script then renames, instead of
    /// an argument, because Redis turns every argument into a Lua string and hashes each of its
    /// bytes. An error reply to a prelude command throws `.server` with Redis's text.
    public func run(
        on connection: RedisConnection, keys: [RedisArgument] = [],
        arguments: [RedisArgument] = [], after prelude: [[RedisArgument]]
    ) throws(RedisError) -> RedisReply {
        if prelude.contains(where: \.isEmpty) { throw RedisError(.protocolError, "a command needs at least its name") }
        return try run(on: connection, keys: keys, arguments: arguments, after: RedisCommands(prelude))
    }

    /// `run(on:keys:arguments:after:)` after commands built in their wire form already (a
    /// large value written in place: `RedisCommands`).
    public func run(
        on connection: RedisConnection, keys: [RedisArgument] = [],
        arguments: [RedisArgument] = [], after prelude: consuming RedisCommands
    ) throws(RedisError) -> RedisReply {
        let rest: [RedisArgument] = [.int(keys.count)] + keys + arguments
        var commands = consume prelude
        commands.append(["EVALSHA", .text(sha1)] + rest)
        let replies = try connection.pipeline(commands)
        for reply in replies.dropLast() {
            if case .error(let text) = reply { throw RedisError(.server, text) }
        }
        switch replies.last {
        case .error(let text) where text.hasPrefix("NOSCRIPT"):
            // EVAL caches the script again, so the next run is an EVALSHA hit. (What the
            // prelude did stays done: it is sent once.)
            return try connection.command(["EVAL", .text(source)] + rest)
        case .error(let text):
            throw RedisError(.server, text)
        case let reply?:
            return reply
        case nil:
            throw RedisError(.protocolError, "no reply to EVALSHA")
        }
    }
}
