import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Redis
import RedisTestSupport
import Testing
import TestSupport

extension RedisServerProcess {
    var redisURL: RedisURL { RedisURL(host: "127.0.0.1", port: port, password: password) }

    func connect(database: Int = 0, commandTimeoutMs: Int = 2000) throws -> RedisConnection {
        var url = redisURL
        url.database = database
        return try RedisConnection(url: url, commandTimeoutMs: commandTimeoutMs)
    }
}

/// Milliseconds `body` took.
func milliseconds(_ body: () -> Void) -> Int {
    let elapsed = ContinuousClock().measure(body)
    return Int(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)
}

@Suite(.requires(.redisServer)) struct RedisConnectionTests {
    @Test func binarySafeSetAndGet() throws {
        let server = try RedisServerProcess()
        let redis = try server.connect()
        let everyByte = (0...255).map { UInt8($0) }
        #expect(try redis.command("SET", .bytes(everyByte), .bytes(everyByte + everyByte)) == .status("OK"))
        #expect(try redis.command("GET", .bytes(everyByte)) == .string(everyByte + everyByte))
        #expect(try redis.command("SET", "empty", .bytes([])) == .status("OK"))
        #expect(try redis.command("GET", "empty") == .string([]))
        #expect(try redis.command("STRLEN", .bytes(everyByte)) == .integer(512))
        // Text goes as its UTF-8 bytes (lengths in bytes, not characters), and a value far
        // larger than one read or write buffer arrives whole.
        #expect(try redis.command("SET", .text("clé ✓"), .text("wert ü")) == .status("OK"))
        #expect(try redis.command("GET", .text("clé ✓")) == .string(Array("wert ü".utf8)))
        let large = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        #expect(try redis.command("SET", "large", .bytes(large)) == .status("OK"))
        #expect(try redis.command("GET", "large") == .string(large))
    }

    @Test func integersArraysNullAndStatus() throws {
        let server = try RedisServerProcess()
        let redis = try server.connect()
        #expect(try redis.command("PING") == .status("PONG"))
        #expect(try redis.command("INCRBY", "n", .int(41)) == .integer(41))
        #expect(try redis.command("INCR", "n").int == 42)
        #expect(try redis.command("GET", "n").int == 42)  // a bulk string holding a number
        #expect(try redis.command("DECRBY", "n", .int(Int64(50))) == .integer(-8))
        #expect(try redis.command("RPUSH", "list", "a", "b", "c") == .integer(3))
        #expect(try redis.command("LRANGE", "list", "0", "-1") == .array([.string([97]), .string([98]), .string([99])]))
        #expect(try redis.command(["LRANGE", "list", "0", "-1"]).elements?.compactMap(\.text) == ["a", "b", "c"])
        #expect(try redis.command("LRANGE", "nothing", "0", "-1") == .array([]))
        #expect(try redis.command("GET", "missing") == .null)
        #expect(try redis.command("HSET", "h", "f", "v") == .integer(1))
        #expect(try redis.command("HGETALL", "h") == .array([.string(Array("f".utf8)), .string(Array("v".utf8))]))
        // Nested arrays, with a nil inside.
        #expect(
            try redis.command("EVAL", "return {1, {'x', false}, 'y'}", "0")
                == .array([.integer(1), .array([.string([120]), .null]), .string([121])]))
    }

    @Test func pipelineKeepsErrorsPerElement() throws {
        let server = try RedisServerProcess()
        let redis = try server.connect()
        let replies = try redis.pipeline([
            ["SET", "a", "1"],
            ["INCR", "a"],
            ["LPUSH", "a", "x"],  // WRONGTYPE: a holds a string
            ["NOSUCHCOMMAND"],
            ["GET", "a"],
        ])
        #expect(replies.count == 5)
        #expect(replies[0] == .status("OK"))
        #expect(replies[1] == .integer(2))
        guard case .error(let wrongType) = replies[2], case .error(let unknown) = replies[3] else {
            Issue.record("expected two error elements: \(replies)")
            return
        }
        #expect(wrongType.hasPrefix("WRONGTYPE"))
        #expect(unknown.hasPrefix("ERR unknown command"))
        #expect(replies[4] == .string(Array("2".utf8)))
        #expect(try redis.pipeline([]) == [])
        #expect(!redis.isBroken)
        // Errors inside EXEC's array are elements too.
        let transaction = try redis.pipeline([["MULTI"], ["SET", "t", "x"], ["INCR", "t"], ["EXEC"]])
        guard case .array(let results) = transaction[3], results.count == 2, case .error(let notInteger) = results[1] else {
            Issue.record("unexpected EXEC reply: \(transaction)")
            return
        }
        #expect(results[0] == .status("OK"))
        #expect(notInteger.hasPrefix("ERR value is not an integer"))
    }

    @Test func aLargeArgumentWrittenInPlaceArrivesWholeWithTheCommandsAfterIt() throws {
        let server = try RedisServerProcess()
        let redis = try server.connect()
        // A value written into the command's own buffer (its length only known once written,
        // with as many digits as a large batch's), then the command's tail and one more command.
        let value = (0..<123_457).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        var commands = RedisCommands(bulkAfter: ["SET", .text("in place ✓")], capacity: 16)
        commands.writeBulk { $0 += value }
        commands.endBulk(tail: ["PX", "60000"])
        commands.append(["PTTL", .text("in place ✓")])
        let replies = try redis.pipeline(commands)
        #expect(replies.count == 2)
        #expect(replies[0] == .status("OK"))
        #expect((replies[1].int ?? 0) > 50_000)
        #expect(try redis.command("GET", .text("in place ✓")) == .string(value))
        // Taken back instead, the value is the bytes written, and no command is left to send.
        var taken = RedisCommands(bulkAfter: ["SET", "k"], capacity: 0)
        taken.writeBulk { $0 += [1, 2, 3] }
        #expect(taken.takeBulk() == [1, 2, 3])
        #expect(taken.count == 0)
        #expect(try redis.pipeline(taken) == [])
    }

    @Test func topLevelErrorReplyThrowsServerError() throws {
        let server = try RedisServerProcess()
        let redis = try server.connect()
        _ = try redis.command("SET", "s", "text")
        let error = redisError { _ = try redis.command("INCR", "s") }
        #expect(error?.kind == .server)
        #expect(error?.description == "ERR value is not an integer or out of range")
        let unknown = redisError { _ = try redis.command("FROBNICATE", "x") }
        #expect(unknown?.kind == .server)
        #expect(unknown?.description.hasPrefix("ERR unknown command 'FROBNICATE'") == true)
        // An error reply leaves the connection usable.
        #expect(!redis.isBroken)
        #expect(try redis.command("PING") == .status("PONG"))
        // An empty command is refused before anything is sent.
        #expect(redisError { _ = try redis.command([]) }?.kind == .protocolError)
        #expect(try redis.command("PING") == .status("PONG"))
    }

    @Test func scriptFallsBackToEvalAfterScriptFlush() throws {
        let server = try RedisServerProcess()
        let redis = try server.connect()
        let script = RedisScript(
            """
            redis.call('SET', KEYS[1], ARGV[1])
            return {redis.call('INCRBY', KEYS[2], ARGV[2]), ARGV[1]}
            """)
        // Redis names it with the same SHA-1.
        #expect(try redis.command("SCRIPT", "LOAD", .text(script.source)).text == script.sha1)
        _ = try redis.command("SCRIPT", "FLUSH")

        // Not cached: EVALSHA gets NOSCRIPT, then EVAL runs (and caches) it.
        #expect(
            try script.run(on: redis, keys: ["k", "counter"], arguments: ["v", .int(5)])
                == .array([.integer(5), .string(Array("v".utf8))]))
        #expect(try redis.command("SCRIPT", "EXISTS", .text(script.sha1)) == .array([.integer(1)]))
        #expect(
            try script.run(on: redis, keys: ["k", "counter"], arguments: ["w", .int(5)])
                == .array([.integer(10), .string(Array("w".utf8))]))
        _ = try redis.command("SCRIPT", "FLUSH")
        #expect(try script.run(on: redis, keys: ["k", "counter"], arguments: ["x", .int(1)]).elements?.first == .integer(11))
        #expect(try redis.command("GET", "k").text == "x")

        // A script's own error is a server error, not a fallback loop.
        let failing = RedisScript("return redis.error_reply('MYERR no good')")
        let error = redisError { _ = try failing.run(on: redis, keys: [], arguments: []) }
        #expect(error?.kind == .server)
        #expect(error?.description.hasPrefix("MYERR no good") == true)
    }

    @Test func streamReadBlocksForEntriesAndReturnsNullOnTimeout() throws {
        let server = try RedisServerProcess()
        let writer = try server.connect()
        let reader = try server.connect()
        let id = try writer.command("XADD", "events", "*", "kind", "first").text
        #expect(id != nil)
        let first = try reader.command("XREAD", "BLOCK", "200", "STREAMS", "events", "0")
        // [[stream, [[id, [field, value]]]]]
        #expect(
            first
                == .array([
                    .array([
                        .string(Array("events".utf8)),
                        .array([
                            .array([.string(Array(id!.utf8)), .array([.string(Array("kind".utf8)), .string(Array("first".utf8))])])
                        ]),
                    ])
                ]))

        // Nothing new within the block time: null, and the connection is fine.
        var empty: RedisReply?
        let waited = milliseconds { empty = try? reader.command("XREAD", "BLOCK", "200", "STREAMS", "events", "$") }
        #expect(empty == .null)
        #expect(waited >= 150)
        #expect(!reader.isBroken)

        // An entry added while the reader blocks wakes it up. The block is longer than the
        // default command timeout, so the reader gets a longer one.
        reader.setCommandTimeout(milliseconds: 5000)
        let url = server.redisURL
        let adder = Thread {
            usleep(300_000)
            _ = try? RedisConnection(url: url).command("XADD", "events", "*", "kind", "second")
        }
        adder.start()
        let woken = try reader.command("XREAD", "BLOCK", "3000", "STREAMS", "events", .text(id!))
        let entries = woken.elements?.first?.elements?[1].elements
        #expect(entries?.count == 1)
        #expect(entries?.first?.elements?[1] == .array([.string(Array("kind".utf8)), .string(Array("second".utf8))]))
    }

    @Test func subscriberReceivesPublishedMessagesAndTimesOut() throws {
        let server = try RedisServerProcess()
        let subscriber = try RedisSubscriber(url: server.redisURL, channels: ["news", "other"])
        var received: [UInt8]? = [0]
        var failure: RedisError?
        let waited = milliseconds {
            do { received = try subscriber.next(timeoutMs: 100)?.message } catch { failure = error as? RedisError }
        }
        #expect(failure == nil)
        #expect(received == nil)
        #expect(waited >= 90 && waited < 1000)

        let publisher = try server.connect()
        let payload: [UInt8] = [0, 1, 2, 0xff, 13, 10]
        #expect(try publisher.command("PUBLISH", "news", .bytes(payload)) == .integer(1))
        #expect(try publisher.command("PUBLISH", "unrelated", "x") == .integer(0))
        #expect(try publisher.command("PUBLISH", "other", "second") == .integer(1))
        let first = try subscriber.next(timeoutMs: 2000)
        #expect(first?.channel == "news")
        #expect(first?.message == payload)
        let second = try subscriber.next(timeoutMs: 2000)
        #expect(second?.channel == "other")
        #expect(second?.message == Array("second".utf8))
        #expect(try subscriber.next(timeoutMs: 50) == nil)
        // Still usable after a timeout.
        _ = try publisher.command("PUBLISH", "news", "third")
        #expect(try subscriber.next(timeoutMs: 2000)?.message == Array("third".utf8))
        #expect(redisError { _ = try RedisSubscriber(url: server.redisURL, channels: []) }?.kind == .protocolError)
        subscriber.close()
        subscriber.close()
        #expect(redisError { _ = try subscriber.next(timeoutMs: 10) }?.kind == .connection)
    }

    @Test func authenticatesWithPasswordAndReportsAWrongOne() throws {
        let server = try RedisServerProcess(password: "s3cret")
        let redis = try RedisConnection(url: RedisURL(parsing: server.url))
        #expect(try redis.command("PING") == .status("PONG"))
        // The ACL form, with the default user.
        let named = try RedisConnection(url: RedisURL(port: server.port, username: "default", password: "s3cret"))
        #expect(try named.command("PING") == .status("PONG"))

        let wrong = redisError { _ = try RedisConnection(url: RedisURL(port: server.port, password: "nope")) }
        #expect(wrong?.kind == .server)
        #expect(wrong?.description.hasPrefix("redis 127.0.0.1:\(server.port): AUTH failed: WRONGPASS") == true)

        let anonymous = try RedisConnection(url: RedisURL(port: server.port))
        let refused = redisError { _ = try anonymous.command("GET", "k") }
        #expect(refused?.kind == .server)
        #expect(refused?.description.hasPrefix("NOAUTH") == true)

        let subscriber = try RedisSubscriber(url: server.redisURL, channels: ["c"])
        _ = try redis.command("PUBLISH", "c", "hi")
        #expect(try subscriber.next(timeoutMs: 2000)?.message == Array("hi".utf8))
        let wrongSubscriber = redisError { _ = try RedisSubscriber(url: RedisURL(port: server.port, password: "nope"), channels: ["c"]) }
        #expect(wrongSubscriber?.description.contains("AUTH failed: WRONGPASS") == true)
    }

    @Test func selectsTheDatabase() throws {
        let server = try RedisServerProcess()
        let three = try RedisConnection(url: RedisURL(parsing: "redis://127.0.0.1:\(server.port)/3"))
        let zero = try server.connect()
        _ = try three.command("SET", "where", "three")
        #expect(try three.command("GET", "where").text == "three")
        #expect(try zero.command("GET", "where") == .null)
        #expect(try zero.command("SELECT", "3") == .status("OK"))
        #expect(try zero.command("GET", "where").text == "three")

        let error = redisError { _ = try server.connect(database: 99) }
        #expect(error?.kind == .server)
        #expect(error?.description == "redis 127.0.0.1:\(server.port): SELECT 99 failed: ERR DB index is out of range")
    }

    @Test func closeIsIdempotentAndLaterCallsThrow() throws {
        let server = try RedisServerProcess()
        let redis = try server.connect()
        redis.close()
        redis.close()
        let error = redisError { _ = try redis.command("PING") }
        #expect(error?.kind == .connection)
        #expect(error?.description.contains("closed") == true)
        #expect(!redis.isBroken)
    }
}

/// What happens when the server dies, hangs or comes back.
@Suite(.requires(.redisServer)) struct RedisFailureTests {
    @Test func killedServerFailsFastAndBreaksTheConnection() throws {
        let server = try RedisServerProcess()
        let redis = try server.connect()
        let writer = try server.connect()
        let subscriber = try RedisSubscriber(url: server.redisURL, channels: ["c"])
        #expect(try redis.command("PING") == .status("PONG"))
        server.kill()

        var error: RedisError?
        let took = milliseconds { error = redisError { _ = try redis.command("SET", "k", "v") } }
        #expect(error?.kind == .connection)
        #expect(took < 1000)
        #expect(redis.isBroken)
        // Once broken, it says so at once.
        let again = redisError { _ = try redis.command("PING") }
        #expect(again?.kind == .connection)
        #expect(again?.description.contains("broke earlier") == true)

        #expect(redisError { _ = try subscriber.next(timeoutMs: 1000) }?.kind == .connection)
        #expect(subscriber.isBroken)

        // A large write to the dead peer gets EPIPE: a thrown error, not a SIGPIPE that ends the process.
        let big = [UInt8](repeating: 0x78, count: 8 << 20)
        #expect(redisError { _ = try writer.command("SET", "big", .bytes(big)) }?.kind == .connection)

        let refused = redisError { _ = try server.connect() }
        #expect(refused?.kind == .connection)
        #expect(refused?.description.contains("Connection refused") == true)
    }

    @Test func pausedServerTimesOutWithinTheCommandTimeout() throws {
        let server = try RedisServerProcess()
        let redis = try server.connect(commandTimeoutMs: 300)
        #expect(try redis.command("PING") == .status("PONG"))
        server.pause()
        defer { server.resume() }

        var error: RedisError?
        let took = milliseconds { error = redisError { _ = try redis.command("GET", "k") } }
        #expect(error?.kind == .timeout)
        #expect(error?.description == "redis 127.0.0.1:\(server.port): no reply within 300 ms")
        #expect(took >= 280 && took < 1000)
        #expect(redis.isBroken)

        // The kernel still accepts connections, so a handshake (AUTH/SELECT) is what times out.
        var handshake: RedisError?
        let connecting = milliseconds { handshake = redisError { _ = try server.connect(database: 1, commandTimeoutMs: 300) } }
        #expect(handshake?.kind == .timeout)
        #expect(connecting < 1500)

        var subscribing: RedisError?
        let subscribeTook = milliseconds {
            subscribing = redisError { _ = try RedisSubscriber(url: server.redisURL, channels: ["c"], connectTimeoutMs: 300) }
        }
        #expect(subscribing?.kind == .timeout)
        #expect(subscribeTook < 1500)

        server.resume()
        let fresh = try server.connect()
        #expect(try fresh.command("PING") == .status("PONG"))
        #expect(redisError { _ = try redis.command("PING") }?.kind == .connection)
    }

    /// A listener whose accept queue is full drops further SYNs, so connect() hangs: the connect
    /// timeout must end it.
    @Test func connectTimesOutOnAnUnansweredConnect() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &address) {
            try $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                guard bind(listener, $0, length) == 0, getsockname(listener, $0, &length) == 0, listen(listener, 0) == 0 else {
                    throw RedisError(.connection, "listener: \(String(cString: strerror(errno)))")
                }
            }
        }
        let port = Int(UInt16(bigEndian: address.sin_port))
        // Fill the accept queue (never accepted) with non-blocking connects.
        var fillers: [Int32] = []
        defer { fillers.forEach { _ = close($0) } }
        for _ in 0..<4 {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            fillers.append(fd)
            _ = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        usleep(50_000)

        var error: RedisError?
        let took = milliseconds {
            error = redisError { _ = try RedisConnection(url: RedisURL(port: port), connectTimeoutMs: 300) }
        }
        #expect(error?.kind == .timeout)
        #expect(error?.description == "redis 127.0.0.1:\(port): connect timed out after 300 ms")
        #expect(took >= 280 && took < 1500)
    }

    @Test func restartedServerNeedsANewConnection() throws {
        let server = try RedisServerProcess()
        let redis = try server.connect()
        _ = try redis.command("SET", "k", "v")
        try server.restart()

        let error = redisError { _ = try redis.command("GET", "k") }
        #expect(error?.kind == .connection)
        #expect(redis.isBroken)
        let fresh = try server.connect()
        #expect(try fresh.command("GET", "k") == .null)  // nothing is saved
        #expect(try fresh.command("SET", "k", "w") == .status("OK"))
    }
}
