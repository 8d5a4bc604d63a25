import MonotonicClock

/// A connection in SUBSCRIBE mode, receiving the messages PUBLISHed on its channels.
///
/// Not thread-safe, like `RedisConnection`. When `next` throws, the connection is gone (messages
/// published meanwhile are lost, as Redis pub/sub does not keep them): make a new subscriber.
public final class RedisSubscriber: @unchecked Sendable {
    public let channels: [String]
    private let context: HiredisContext
    public private(set) var isBroken = false

    /// Connects, authenticates and subscribes; returns once Redis confirmed every channel.
    /// The handshake after the connect has connectTimeoutMs too.
    public init(url: RedisURL, channels: [String], connectTimeoutMs: Int = 1000) throws(RedisError) {
        guard !channels.isEmpty else {
            throw RedisError(.protocolError, "redis \(url.endpoint): a subscriber needs at least one channel")
        }
        self.channels = channels
        context = try HiredisContext(url: url, connectTimeoutMs: connectTimeoutMs, socketTimeoutMs: connectTimeoutMs)
        let endpoint = context.endpoint
        do throws(RedisError) {
            var commands: [[RedisArgument]] = []
            if let password = url.password {
                commands.append(["AUTH"] + (url.username.map { [.text($0)] } ?? []) + [.text(password)])
            }
            commands.append(["SUBSCRIBE"] + channels.map { .text($0) })
            let deadline = Monotonic.nowNanoseconds() + UInt64(max(1, connectTimeoutMs)) * 1_000_000
            try context.send(RedisCommands(commands), deadlineNs: deadline)
            func nextReply() throws(RedisError) -> RedisReply {
                guard let reply = try context.readReply(until: deadline) else {
                    throw RedisError(.timeout, "redis \(endpoint): no answer to SUBSCRIBE within \(connectTimeoutMs) ms")
                }
                return reply
            }
            if url.password != nil, case .error(let text) = try nextReply() {
                throw RedisError(.server, "redis \(endpoint): AUTH failed: \(text)")
            }
            // One confirmation per channel: ["subscribe", channel, count].
            for _ in channels {
                let reply = try nextReply()
                if case .error(let text) = reply { throw RedisError(.server, "redis \(endpoint): SUBSCRIBE failed: \(text)") }
                guard reply.elements?.first?.text == "subscribe" else {
                    throw RedisError(.protocolError, "redis \(endpoint): unexpected answer to SUBSCRIBE: \(reply)")
                }
            }
        } catch {
            context.close()
            throw error
        }
    }

    deinit { close() }

    /// The next message, or nil when none arrives within `timeoutMs` (the connection stays usable).
    /// Throws when the connection is gone or closed.
    public func next(timeoutMs: Int) throws(RedisError) -> (channel: String, message: [UInt8])? {
        if isBroken { throw RedisError(.connection, "redis \(context.endpoint): the subscriber's connection broke earlier") }
        let deadline = Monotonic.nowNanoseconds() + UInt64(max(0, timeoutMs)) * 1_000_000
        while true {
            let reply: RedisReply?
            do throws(RedisError) {
                reply = try context.readReply(until: deadline)
            } catch {
                if context.isOpen { isBroken = true }
                throw error
            }
            guard let reply else { return nil }
            // ["message", channel, payload]; anything else (a late confirmation) is skipped.
            if let parts = reply.elements, parts.count == 3, parts[0].text == "message",
                let channel = parts[1].text, let message = parts[2].bytes
            {
                return (channel, message)
            }
        }
    }

    /// Idempotent.
    public func close() {
        context.close()
    }
}
