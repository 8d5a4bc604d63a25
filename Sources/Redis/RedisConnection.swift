// Redis: the thin hiredis wrapper: blocking connections whose every call ends by a deadline,
// pipelines, Lua scripts, a pub/sub subscriber. The only place hiredis's pointers are touched.
// Imports CHiredis, MonotonicClock and Glibc.
import MonotonicClock

/// A blocking connection to one Redis server.
///
/// Not thread-safe: one caller at a time (a pool, or one owning thread). `Sendable` only so it
/// can be handed between threads. Every call is bounded by the command timeout; after a
/// connection-level failure (`.connection`, `.timeout`, `.protocolError`) `isBroken` is true,
/// every later call throws at once, and the caller makes a new connection. Error replies
/// (`.server`) leave the connection usable.
public final class RedisConnection: @unchecked Sendable {
    public let url: RedisURL
    private let context: HiredisContext
    private var commandTimeoutMs: Int
    /// True after an I/O or protocol error or a timeout: the reply stream may be out of step,
    /// so the connection must not be used again.
    public private(set) var isBroken = false

    /// Connects, then sends AUTH (when the URL has a password) and SELECT (when its database
    /// is not 0) in one round trip. Takes at most about connectTimeoutMs + commandTimeoutMs,
    /// plus the name lookup of a host name (getaddrinfo, which hiredis cannot bound).
    public init(url: RedisURL, connectTimeoutMs: Int = 1000, commandTimeoutMs: Int = 2000) throws(RedisError) {
        self.url = url
        self.commandTimeoutMs = max(1, commandTimeoutMs)
        context = try HiredisContext(url: url, connectTimeoutMs: connectTimeoutMs, socketTimeoutMs: self.commandTimeoutMs)
        let handshake = Self.handshake(for: url)
        guard !handshake.isEmpty else { return }
        do throws(RedisError) {
            let replies = try exchange(handshake.map(\.command))
            for (step, reply) in zip(handshake, replies) {
                if case .error(let text) = reply {
                    throw RedisError(.server, "redis \(context.endpoint): \(step.name) failed: \(text)")
                }
            }
        } catch {
            context.close()
            throw error
        }
    }

    deinit { close() }

    /// Sends one command and waits for its reply. An error reply throws `.server` with Redis's text.
    public func command(_ args: [RedisArgument]) throws(RedisError) -> RedisReply {
        let reply = try exchange([args])[0]
        if case .error(let text) = reply { throw RedisError(.server, text) }
        return reply
    }

    public func command(_ args: RedisArgument...) throws(RedisError) -> RedisReply {
        try command(args)
    }

    /// Sends all commands in one write and returns their replies in order; an error reply is an
    /// `.error` element. The command timeout bounds the whole pipeline.
    public func pipeline(_ commands: [[RedisArgument]]) throws(RedisError) -> [RedisReply] {
        if commands.isEmpty { return [] }
        return try exchange(commands)
    }

    /// `pipeline` of commands built in their wire form already.
    public func pipeline(_ commands: RedisCommands) throws(RedisError) -> [RedisReply] {
        if commands.count == 0 { return [] }
        return try exchange(commands)
    }

    /// For commands that wait on the server (XREAD BLOCK, BLPOP): longer than their block time.
    public func setCommandTimeout(milliseconds: Int) {
        commandTimeoutMs = max(1, milliseconds)
        context.setSocketTimeout(ms: commandTimeoutMs)
    }

    /// Idempotent.
    public func close() {
        context.close()
    }

    private func exchange(_ commands: [[RedisArgument]]) throws(RedisError) -> [RedisReply] {
        if commands.contains(where: \.isEmpty) {
            throw RedisError(.protocolError, "redis \(context.endpoint): a command needs at least its name")
        }
        return try exchange(RedisCommands(commands))
    }

    private func exchange(_ commands: RedisCommands) throws(RedisError) -> [RedisReply] {
        if isBroken {
            throw RedisError(.connection, "redis \(context.endpoint): the connection broke earlier; make a new one")
        }
        let deadline = Monotonic.nowNanoseconds() + UInt64(commandTimeoutMs) * 1_000_000
        do throws(RedisError) {
            try context.send(commands, deadlineNs: deadline)
            var replies: [RedisReply] = []
            replies.reserveCapacity(commands.count)
            for _ in 0..<commands.count {
                guard let reply = try context.readReply(until: deadline) else {
                    throw RedisError(.timeout, "redis \(context.endpoint): no reply within \(commandTimeoutMs) ms")
                }
                replies.append(reply)
            }
            return replies
        } catch {
            // A closed connection stays closed; anything else leaves unread replies behind.
            if context.isOpen { isBroken = true }
            throw error
        }
    }

    private static func handshake(for url: RedisURL) -> [(name: String, command: [RedisArgument])] {
        var steps: [(name: String, command: [RedisArgument])] = []
        if let password = url.password {
            var auth: [RedisArgument] = ["AUTH"]
            if let username = url.username { auth.append(.text(username)) }
            auth.append(.text(password))
            steps.append(("AUTH", auth))
        }
        if url.database != 0 {
            steps.append(("SELECT \(url.database)", ["SELECT", .int(url.database)]))
        }
        return steps
    }
}
