import APNsCore
import Foundation
import Glibc
import Networking
import ProviderClient
import Synchronization
import Testing
import TestSupport

/// Hostile requests on the wire, against the real binary: each is refused in bounded memory
/// while other clients go on being served.
@Suite("Hostile provider requests")
struct HardeningTests {
    /// HPACK bombs on one cleartext connection: each a few kilobytes on the wire that would
    /// decode to 20 MB of header fields. The emulator resets each stream as soon as its list
    /// passes the limit, keeps a record with the fields that fit, stays small, and ends the
    /// connection at the third (GOAWAY ENHANCE_YOUR_CALM).
    @Test func headerListBombsAreResetInBoundedMemory() throws {
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"])
        let device = try emulator.createDevice()
        let before = emulator.residentBytes >> 10

        let frames = try RawHTTP2.exchange(
            try emulator.address("h2cSandbox"), RawHTTP2.bombs(token: device.token, count: 6),
            until: { frames in frames.contains { $0.type == 0x7 } })
        let resets = frames.filter { $0.type == 0x3 }
        #expect(resets.map(\.streamID) == [1, 3, 5])
        #expect(resets.allSatisfy { $0.payload == [0, 0, 0, 1] }, "RST_STREAM PROTOCOL_ERROR")
        let goAway = try #require(frames.first { $0.type == 0x7 }, "the third bomb ends the connection")
        #expect(Array(goAway.payload[4..<8]) == [0, 0, 0, 0x0b], "ENHANCE_YOUR_CALM")

        // Other clients are served meanwhile and afterwards.
        #expect(APNsResult(try emulator.connect().send(try emulator.push(device.token).request)).status == 200)
        let after = emulator.residentBytes >> 10
        if EmulatorProcess.memoryIsMeasurable {
            #expect(after - before < 30_000, "RSS grew from \(before) kB to \(after) kB")
        }

        let records = try emulator.notifications(limit: 10).filter { $0["headersTruncated"]?.boolValue == true }
        #expect(records.count == 3)
        let first = try #require(records.first)
        #expect(first["explanation"]?.stringValue?.contains("over the 8000 bytes this server advertises") == true)
        #expect(first["token"]?.stringValue == device.token)
        let kept = first["headers"]?.arrayValue ?? []
        #expect(kept.count < 10, "only the fields that fit are kept: \(kept.count)")
    }

    /// Requests HTTP/2 itself forbids (an upper-case header name, a connection-specific
    /// field, no `:path`) are reset by the HTTP/2 layer, as they must be, and still journaled
    /// with why, so a client that sends one finds it.
    @Test func requestsTheHTTP2LayerResetsAreJournaledWithWhy() throws {
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"])
        let device = try emulator.createDevice()
        func request(_ stream: UInt32, _ extra: [UInt8], path: Bool = true) -> [UInt8] {
            let block: [UInt8] =
                [0x83, 0x86]  // :method POST, :scheme http
                + (path ? RawHTTP2.integer(4, prefixBits: 4, flags: 0x00) + RawHTTP2.string("/3/device/\(device.token)") : [])
                + RawHTTP2.integer(1, prefixBits: 4, flags: 0x00) + RawHTTP2.string("api.sandbox.push.apple.com") + extra
            return RawHTTP2.frame(type: 0x1, flags: 0x5, stream: stream, block)
        }
        func literal(_ name: String, _ value: String) -> [UInt8] { [0x00] + RawHTTP2.string(name) + RawHTTP2.string(value) }
        let wire =
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, [])
            + request(1, literal("APNS-Priority", "10")) + request(3, literal("connection", "keep-alive"))
            + request(5, literal("apns-topic", EmulatorProcess.bundleID), path: false)
        let frames = try RawHTTP2.exchange(
            try emulator.address("h2cSandbox"), wire, until: { frames in frames.filter { $0.type == 0x3 }.count >= 3 })
        let resets = frames.filter { $0.type == 0x3 }
        #expect(resets.map(\.streamID) == [1, 3, 5])
        #expect(resets.allSatisfy { $0.payload == [0, 0, 0, 1] }, "RST_STREAM PROTOCOL_ERROR")

        let records = try emulator.notifications(limit: 10).reversed().map { $0 }
        #expect(records.count == 3, "\(records.map { $0["explanation"] ?? .null })")
        let explanations = records.map { $0["explanation"]?.stringValue ?? "" }
        #expect(explanations.count == 3 && explanations[0].contains("a header field HTTP/2 does not allow"), "\(explanations)")
        #expect(explanations.count == 3 && explanations[1].contains("a header field HTTP/2 does not allow"), "\(explanations)")
        #expect(explanations.count == 3 && explanations[2].contains("the request breaks HTTP/2's message rules"), "\(explanations)")
        #expect(records.prefix(2).allSatisfy { $0["token"]?.stringValue == device.token }, "the fields before the bad one")
        #expect(records.allSatisfy { $0["status"]?.intValue == 0 })
        // Cut short where a field was refused; whole when the rule was judged at the block's end.
        #expect(records.map { $0["headersTruncated"]?.boolValue } == [true, true, false], "\(records.map { $0["headersTruncated"] ?? .null })")
        #expect(emulator.stderr.contains("stream 1: stream reset (RST_STREAM PROTOCOL_ERROR) by the HTTP/2 layer"))
    }

    /// Six connections sending HPACK bombs without pause (reconnecting when they are ended)
    /// must not starve a well-behaved provider: 99 % of its pushes are answered within 50 ms,
    /// and none waits a second. (Not every one within 50 ms: one CI run, with the rest of the
    /// suite beside it on two cores, saw a single 351 ms stall among 8,618 pushes, p50 0.2 ms;
    /// starvation slows many pushes, not one.)
    @Test func aProviderIsServedPromptlyWhileSixConnectionsSendHPACKBombs() throws {
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0", "--quiet"])
        let device = try emulator.createDevice()
        let address = try emulator.address("h2cSandbox")
        let wire = RawHTTP2.bombs(token: device.token, count: 3)
        let stop = Atomic<Bool>(false)
        let sent = Atomic<Int>(0)
        var attackers: [Thread] = []
        for _ in 0..<6 {
            let thread = Thread {
                while !stop.load(ordering: .relaxed) {
                    _ = try? RawHTTP2.exchange(address, wire, until: { frames in frames.contains { $0.type == 0x7 } })
                    sent.add(3, ordering: .relaxed)
                }
            }
            thread.start()
            attackers.append(thread)
        }
        defer { stop.store(true, ordering: .relaxed) }
        let connection = try emulator.connect()
        let push = try emulator.push(device.token)
        #expect(APNsResult(try connection.send(push.request)).status == 200)
        usleep(300_000)
        var latencies: [Double] = []
        let end = Date().addingTimeInterval(3)
        while Date() < end {
            let started = Date()
            #expect(APNsResult(try connection.send(push.request)).status == 200)
            latencies.append(Date().timeIntervalSince(started) * 1000)
        }
        stop.store(true, ordering: .relaxed)
        latencies.sort()
        let p50 = latencies[latencies.count / 2], worst = latencies.last ?? 0
        let p99 = latencies[latencies.count * 99 / 100]
        print(
            "HPACK bombs from 6 connections: \(sent.load(ordering: .relaxed)) bombs (20 MB each decoded) in 3 s; \(latencies.count) pushes meanwhile, p50 \(String(format: "%.1f", p50)) ms, p99 \(String(format: "%.1f", p99)) ms, slowest \(String(format: "%.1f", worst)) ms"
        )
        #expect(sent.load(ordering: .relaxed) > 100, "the attack ran")
        #expect(latencies.count > 100, "the provider was served throughout")
        #expect(p99 < 50, "99th percentile \(p99) ms")
        #expect(worst < 1000, "slowest push \(worst) ms")
    }

    /// A request that trickles in (slowloris) is reset after --request-timeout and journaled;
    /// other requests on the same connection are served meanwhile.
    /// With an idle timeout shorter than the request timeout, the open request still gets its
    /// reset: a connection with a request under way is not idle.
    @Test(arguments: [[], ["--idle-timeout", "1"]])
    func aStalledRequestIsResetAfterTheTimeout(idle: [String]) throws {
        let requestTimeout = idle.isEmpty ? "1" : "2"
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0", "--request-timeout", requestTimeout] + idle)
        let device = try emulator.createDevice()
        var block: [UInt8] = [0x83, 0x86]
        block += RawHTTP2.integer(4, prefixBits: 4, flags: 0) + RawHTTP2.string("/3/device/\(device.token)")
        block += RawHTTP2.integer(1, prefixBits: 4, flags: 0) + RawHTTP2.string("api.sandbox.push.apple.com")
        block += RawHTTP2.integer(23, prefixBits: 4, flags: 0) + RawHTTP2.string("bearer \(try emulator.providerToken())")
        let clientID = "E1E1E1E1-1111-2222-3333-444444444444"
        for (name, value) in [("apns-id", clientID), ("apns-priority", "5"), ("apns-push-type", "background"), ("apns-expiration", "0")] {
            block += RawHTTP2.integer(0, prefixBits: 4, flags: 0) + RawHTTP2.string(name) + RawHTTP2.string(value)
        }
        // Headers without END_STREAM and one byte of body; the rest never comes.
        let wire =
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, [])
            + RawHTTP2.frame(type: 0x1, flags: 0x4, stream: 1, block) + RawHTTP2.frame(type: 0x0, flags: 0, stream: 1, [0x7b])
        let frames = try RawHTTP2.exchange(
            try emulator.address("h2cSandbox"), wire,
            until: { frames in
                frames.contains { $0.type == 0x3 }
            })
        let reset = try #require(frames.first { $0.type == 0x3 }, "no RST_STREAM within 10 s")
        #expect(reset.streamID == 1)
        #expect(reset.payload == [0, 0, 0, 8], "CANCEL")
        #expect(!frames.contains { $0.type == 0x7 }, "no GOAWAY before the reset")
        let record = try #require(try emulator.notifications(token: device.token).first)
        #expect(record["explanation"]?.stringValue?.contains("not complete \(requestTimeout) s after it began") == true, "\(record)")
        // The APNs fields that arrived are the record's: found by the client's own apns-id.
        #expect(record["apnsId"]?.stringValue == clientID)
        #expect(record["priority"]?.intValue == 5 && record["pushType"]?.stringValue == "background", "\(record)")
        #expect(record["expiration"]?.intValue == 0)
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(clientID)").status == 200)
        // Counted under the type its record shows.
        let metrics = try emulator.admin("GET", "/metrics").raw
        #expect(
            metrics.contains(#"apns_emulator_notifications_total{status="0",reason="",push_type="background",environment="sandbox"} 1"#),
            "\(metrics.split(separator: "\n").filter { $0.contains("notifications_total") })")
        let authorization = record["headers"]?.arrayValue?.first { $0["name"]?.stringValue == "authorization" }?["value"]?.stringValue
        #expect(authorization?.hasSuffix(ProviderToken.signatureMarker) == true)
    }

    /// Complete requests that come in the same read as a connection error of the client's
    /// cannot be answered (the GOAWAY ends the session), and are journaled as not processed,
    /// not lost without a trace (they had no record, and were not delivered).
    @Test func requestsInTheReadOfAConnectionErrorAreJournaled() throws {
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"])
        let device = try emulator.createDevice()
        let ids = ["A1A1A1A1-1111-2222-3333-444444444444", "B2B2B2B2-1111-2222-3333-444444444444"]
        func request(_ stream: UInt32, id: String) throws -> [UInt8] {
            var block: [UInt8] = [0x83, 0x86]
            block += RawHTTP2.integer(4, prefixBits: 4, flags: 0) + RawHTTP2.string("/3/device/\(device.token)")
            block += RawHTTP2.integer(1, prefixBits: 4, flags: 0) + RawHTTP2.string("api.sandbox.push.apple.com")
            block += RawHTTP2.integer(23, prefixBits: 4, flags: 0) + RawHTTP2.string("bearer \(try emulator.providerToken())")
            for (name, value) in [("apns-id", id), ("apns-topic", EmulatorProcess.bundleID), ("apns-push-type", "alert")] {
                block += RawHTTP2.integer(0, prefixBits: 4, flags: 0) + RawHTTP2.string(name) + RawHTTP2.string(value)
            }
            return RawHTTP2.frame(type: 0x1, flags: 0x4, stream: stream, block)
                + RawHTTP2.frame(type: 0x0, flags: 0x1, stream: stream, Array(#"{"aps":{"alert":"x"}}"#.utf8))
        }
        // Two whole requests, then a WINDOW_UPDATE of 0 on the connection (PROTOCOL_ERROR), one write.
        let wire =
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, []) + (try request(1, id: ids[0]))
            + (try request(3, id: ids[1])) + RawHTTP2.frame(type: 0x8, flags: 0, stream: 0, [0, 0, 0, 0])
        let frames = try RawHTTP2.exchange(try emulator.address("h2cSandbox"), wire, until: { $0.contains { $0.type == 0x7 } })
        let goAway = try #require(frames.first { $0.type == 0x7 }, "no GOAWAY")
        #expect(goAway.errorCode == 1, "PROTOCOL_ERROR")
        for id in ids {
            let record = try emulator.admin("GET", "/api/v1/notifications/\(id)")
            #expect(record.status == 200, "\(id) has a record")
            #expect(record.json["status"] == 0, "\(record.json)")
            #expect(record.json["explanation"]?.stringValue?.hasPrefix("not processed: it came in the same read as a connection error") == true)
        }
        #expect(try emulator.notifications(token: device.token).allSatisfy { $0["status"] == 0 }, "nothing was delivered")
    }

    /// A body far over every payload limit is answered 413 before it has all arrived.
    @Test func anOversizedBodyIsAnsweredBeforeItEnds() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        var push = try emulator.push(device.token)
        push.payload = Array(("{\"aps\":{\"alert\":\"" + String(repeating: "a", count: 4 << 20) + "\"}}").utf8)
        let connection = try emulator.connect()
        let answer = APNsResult(try connection.send(push.request, timeoutMilliseconds: 20_000))
        #expect(answer.status == 413)
        #expect(answer.reason == "PayloadTooLarge")
        let record = try #require(try emulator.notifications(token: device.token).first)
        #expect(record["explanation"]?.stringValue?.contains("the rest was not read") == true, "\(record)")
        let seen = record["payloadSize"]?.intValue ?? 0
        #expect(seen > 5120 && seen < 1 << 20, "the emulator stopped reading early: \(seen) bytes")
        #expect(record["payloadTruncated"]?.boolValue == true)
        // A client that declared its length is told it (as most do).
        push.extraHeaders = [HTTP2HeaderField("content-length", String(push.payload.count))]
        #expect(APNsResult(try connection.send(push.request, timeoutMilliseconds: 20_000)).status == 413)
        let declared = try #require(try emulator.notifications(token: device.token).first)
        #expect(
            declared["explanation"]?.stringValue?.contains("payload of \(push.payload.count) bytes (its content-length;") == true,
            "\(declared["explanation"] ?? .null)")
        // The connection goes on serving pushes.
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
    }
}

/// The floods nghttp2 guards against, on the wire: each ends the offending connection with
/// GOAWAY while another provider keeps being served (docs/limits.md).
@Suite("HTTP/2 floods")
struct FloodTests {
    static var headerBlock: [UInt8] {
        var block: [UInt8] = [0x83, 0x86]
        block += RawHTTP2.integer(4, prefixBits: 4, flags: 0) + RawHTTP2.string("/3/device/ab")
        block += RawHTTP2.integer(1, prefixBits: 4, flags: 0) + RawHTTP2.string("x")
        return block
    }

    static func repeated(_ count: Int, _ frame: (Int) -> [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        for i in 0..<count { out += frame(i) }
        return out
    }

    /// Rapid reset (CVE-2023-44487): open a stream, cancel it, again and again.
    static var rapidReset: [UInt8] {
        repeated(3000) { i -> [UInt8] in
            let stream = UInt32(1 + 2 * i)
            return RawHTTP2.frame(type: 0x1, flags: 0x4, stream: stream, headerBlock)
                + RawHTTP2.frame(type: 0x3, flags: 0, stream: stream, [0, 0, 0, 8])
        }
    }

    /// CONTINUATION flood (CVE-2024-28182): a header block that never ends.
    static var continuationFlood: [UInt8] {
        RawHTTP2.frame(type: 0x1, flags: 0, stream: 1, headerBlock)
            + repeated(3000) { _ in RawHTTP2.frame(type: 0x9, flags: 0, stream: 1, [0x40, 1, 0x61, 1, 0x62]) }
    }

    /// PING and SETTINGS floods: more ACKs owed than the limit.
    static var pingFlood: [UInt8] { repeated(30_000) { _ in RawHTTP2.frame(type: 0x6, flags: 0, stream: 0, Array("12345678".utf8)) } }
    static var settingsFlood: [UInt8] { repeated(30_000) { _ in RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, []) } }

    static let floods: [(name: String, errorCode: UInt32)] = [
        ("rapid reset", 2), ("CONTINUATION flood", 1), ("PING flood", 11), ("SETTINGS flood", 11),
    ]

    static func wire(_ name: String) -> [UInt8] {
        switch name {
        case "rapid reset": return rapidReset
        case "CONTINUATION flood": return continuationFlood
        case "PING flood": return pingFlood
        default: return settingsFlood
        }
    }

    @Test(arguments: floods.indices)
    func aFloodEndsTheConnectionAndOthersAreServed(index: Int) throws {
        let flood = Self.floods[index]
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"])
        let device = try emulator.createDevice()
        let bystander = try emulator.connect()
        #expect(APNsResult(try bystander.send(try emulator.push(device.token).request)).status == 200)
        let frames = try RawHTTP2.exchange(
            try emulator.address("h2cSandbox"),
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, []) + Self.wire(flood.name),
            until: { $0.contains { $0.type == 0x7 } })
        let goAway = try #require(frames.first { $0.type == 0x7 }, "\(flood.name): no GOAWAY")
        let code = goAway.payload.count >= 8 ? goAway.payload[4..<8].reduce(UInt32(0)) { $0 << 8 | UInt32($1) } : 0
        #expect(code == flood.errorCode, "\(flood.name): GOAWAY error \(code)")
        #expect(APNsResult(try bystander.send(try emulator.push(device.token).request)).status == 200, "\(flood.name)")
        // Counted once the flooding connection has closed.
        #expect(try eventually { try emulator.metric("apns_emulator_connections_ended_for_http2_errors_total") == 1 }, "\(flood.name)")
        // And logged, as the metric's documentation says (a flood nghttp2 ends on its own was not).
        #expect(
            try eventually { emulator.stderr.contains("HTTP/2 error") || emulator.stderr.contains("ended by the HTTP/2 layer with GOAWAY") },
            "\(flood.name): \(emulator.stderr.suffix(600))")
    }
}

/// The raw HTTP/2 these tests send (TestSupport writes and reads the frames).
extension RawHTTP2 {
    /// A connection's preface and `count` HPACK bombs: the first adds a 4000-byte field to the
    /// dynamic table, and every bomb then references it 5000 times, one byte each (20 MB of
    /// header fields decoded from some 5 KB on the wire).
    static func bombs(token: String, count: Int) -> [UInt8] {
        let big = String(repeating: "x", count: 4000)
        func block(_ extra: [UInt8]) -> [UInt8] {
            [0x83, 0x86]  // :method POST, :scheme http
                + integer(4, prefixBits: 4, flags: 0x00) + string("/3/device/\(token)")
                + integer(1, prefixBits: 4, flags: 0x00) + string("api.sandbox.push.apple.com")
                + extra
        }
        var wire = clientPreface + frame(type: 0x4, flags: 0, stream: 0, [])
        for i in 0..<count {
            let define = i == 0 ? integer(0, prefixBits: 6, flags: 0x40) + string("x-bomb") + string(big) : []
            wire += frame(type: 0x1, flags: 0x5, stream: UInt32(1 + 2 * i), block(define + [UInt8](repeating: 0x80 | 62, count: 5000)))
        }
        return wire
    }

    /// Sends `bytes` on a cleartext connection and reads frames until `until` holds, the
    /// peer closes, or 10 seconds pass.
    static func exchange(_ address: HostPort, _ bytes: [UInt8], until: ([WireFrame]) -> Bool) throws -> [WireFrame] {
        let fd = try Socket.connect(to: address)
        defer { close(fd) }
        Socket.setTimeouts(fd, milliseconds: 10_000)
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { break }
            offset += n
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if until(frames(received)) { break }
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { break }
            received.append(contentsOf: buffer[0..<n])
        }
        return frames(received)
    }
}

/// Devices that fall behind, on the wire: a raw device socket that says hello and then
/// neither reads nor acknowledges.
@Suite("Slow devices")
struct SlowDeviceTests {
    static func hello(_ fd: Int32, deviceID: String) {
        let line =
            Array(#"{"type":"hello","version":1,"deviceId":"\#(deviceID)","apps":[{"bundleId":"com.example.app","environment":"sandbox"}]}"#.utf8) + [
                0x0A
            ]
        _ = line.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Reads lines until `done` says stop, the peer closes, or the timeout passes.
    static func readLines(_ fd: Int32, until done: ([JSONValue]) -> Bool) -> (lines: [JSONValue], closed: Bool) {
        var lines: [JSONValue] = []
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while !done(lines) {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n == 0 { return (lines, true) }
            if n < 0 { return (lines, false) }
            pending += buffer[0..<n]
            while let newline = pending.firstIndex(of: 0x0A) {
                if let value = try? JSONValue.parse(Array(pending[..<newline])) { lines.append(value) }
                pending.removeFirst(newline + 1)
            }
        }
        return (lines, false)
    }

    @Test func aDeviceThatDoesNotAckHoldsAtMostItsWindow() throws {
        let emulator = try EmulatorProcess(["--device-window", "20", "--max-records", "1000"], inProcess: true)
        let fd = try Socket.connect(to: try emulator.address("device"))
        defer { close(fd) }
        Socket.setTimeouts(fd, milliseconds: 10_000)
        Self.hello(fd, deviceID: "slow-phone")
        let registered = Self.readLines(fd) { $0.contains { $0["type"] == "registered" } }
        let token = try #require(registered.lines.first { $0["type"] == "registered" }?["token"]?.stringValue)

        let connection = try emulator.connect()
        let filler = String(repeating: "x", count: 3900)
        var requests: [ClientRequest] = []
        for i in 0..<300 {
            requests.append(try emulator.push(token, payload: #"{"aps":{"alert":"\#(i)"},"f":"\#(filler)"}"#).request)
        }
        for chunk in stride(from: 0, to: requests.count, by: 100) {
            let answers = try connection.send(Array(requests[chunk..<min(chunk + 100, requests.count)]))
            #expect(answers.allSatisfy { APNsResult($0).status == 200 })
        }
        // Everything the device was sent, read now: exactly its window. A ping sent after all
        // the answers came back is answered after every delivery already queued for it.
        let ping = Array(#"{"type":"ping"}"#.utf8) + [0x0A]
        _ = ping.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        let received = Self.readLines(fd) { $0.contains { $0["type"] == "pong" } }
        let notifications = received.lines.filter { $0["type"] == "notification" }
        #expect(notifications.count == 20, "the device got \(notifications.count) deliveries without acking")
        let outcomes = try emulator.notifications(limit: 1000).compactMap { $0["outcome"]?.stringValue }
        #expect(outcomes.filter { $0 == "pending" }.count == 20)
        #expect(outcomes.filter { $0 == "stored" }.count == 1, "the newest waits in the store")
        #expect(outcomes.filter { $0 == "coalesced" }.count == 279)
    }

    @Test func aDeviceThatNeverAcksIsDisconnectedAfterTheTimeout() throws {
        let emulator = try EmulatorProcess(["--device-ack-timeout", "1"], inProcess: true)
        let fd = try Socket.connect(to: try emulator.address("device"))
        defer { close(fd) }
        Socket.setTimeouts(fd, milliseconds: 10_000)
        Self.hello(fd, deviceID: "stuck-phone")
        let token = try #require(
            Self.readLines(fd) { $0.contains { $0["type"] == "registered" } }.lines
                .first { $0["type"] == "registered" }?["token"]?.stringValue)
        let answer = try emulator.connect().send(try emulator.push(token).request)
        #expect(APNsResult(answer).status == 200)
        let (lines, closed) = Self.readLines(fd) { _ in false }
        #expect(closed, "the emulator closes the connection")
        #expect(lines.contains { $0["type"] == "notification" })
        let error = lines.first { $0["type"] == "error" }
        #expect(error?["code"] == "ack_timeout")
        #expect(error?["fatal"] == true)
        let record = try #require(try emulator.notifications(token: token).first)
        #expect(record["outcome"]?.stringValue == "stored", "what it did not ack is stored again")
    }
    /// A delivery sent but not acknowledged when the app is uninstalled is not kept for the
    /// next install: reinstalled, the app does not get the old install's notification.
    @Test func anUnacknowledgedDeliveryDoesNotOutliveItsInstall() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        var fd = try Socket.connect(to: try emulator.address("device"))
        Socket.setTimeouts(fd, milliseconds: 10_000)
        Self.hello(fd, deviceID: "uninstalled-phone")
        let token = try #require(
            Self.readLines(fd) { $0.contains { $0["type"] == "registered" } }.lines
                .first { $0["type"] == "registered" }?["token"]?.stringValue)
        let answer = APNsResult(try emulator.connect().send(try emulator.push(token).request))
        #expect(answer.status == 200)
        #expect(Self.readLines(fd) { $0.contains { $0["type"] == "notification" } }.lines.contains { $0["type"] == "notification" })
        let uninstall = Array(#"{"type":"uninstall","bundleId":"com.example.app"}"#.utf8) + [0x0A]
        _ = uninstall.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        #expect(Self.readLines(fd) { $0.contains { $0["type"] == "uninstalled" } }.lines.contains { $0["type"] == "uninstalled" })
        close(fd)
        try eventually("the record settles") {
            try emulator.admin("GET", "/api/v1/notifications/\(answer.apnsID!)").json["outcome"] == "dropped-by-system"
        }
        // The app comes back with a new token; the old install's notification does not.
        fd = try Socket.connect(to: try emulator.address("device"))
        defer { close(fd) }
        Socket.setTimeouts(fd, milliseconds: 10_000)
        Self.hello(fd, deviceID: "uninstalled-phone")
        let ping = Array(#"{"type":"ping"}"#.utf8) + [0x0A]
        _ = ping.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        let lines = Self.readLines(fd) { $0.contains { $0["type"] == "pong" } }.lines
        #expect(lines.contains { $0["type"] == "registered" && $0["token"]?.stringValue != token })
        #expect(!lines.contains { $0["type"] == "notification" }, "\(lines)")
    }
}

@Suite("Journal bounds")
struct JournalBoundTests {
    static func pushLarge(_ emulator: EmulatorProcess, count: Int) throws -> String {
        let token = try emulator.createDevice().token
        let connection = try emulator.connect()
        let filler = String(repeating: "x", count: 3900)
        let request = try emulator.push(token, payload: #"{"aps":{"alert":"big"},"f":"\#(filler)"}"#).request
        var sent = 0
        while sent < count {
            let batch = min(500, count - sent)
            let answers = try connection.send(Array(repeating: request, count: batch), timeoutMilliseconds: 60_000)
            #expect(answers.allSatisfy { APNsResult($0).status == 200 })
            sent += batch
        }
        return token
    }

    @Test func theJournalKeepsToItsByteBudget() throws {
        let emulator = try EmulatorProcess(["--max-record-bytes", "256K"], inProcess: true)
        _ = try Self.pushLarge(emulator, count: 200)
        let info = try emulator.admin("GET", "/api/v1/info").json
        let kept = try #require(info["counts"]?["notifications"]?.intValue ?? info["notifications"]?.intValue)
        #expect(kept > 20 && kept < 80, "\(kept) records of ~4.5 KB kept in 256 KiB")
        let listed = try emulator.notifications(limit: 1000)
        #expect(listed.count == Int(kept))
        #expect(listed.first?["payloadSize"]?.intValue ?? 0 > 3900, "the newest are the ones kept")
    }

    /// A list asking for the whole journal is cut at a byte budget and says so.
    @Test func aListResponseIsBoundedInBytes() throws {
        let emulator = try EmulatorProcess(["--max-records", "20000"], inProcess: true)
        _ = try Self.pushLarge(emulator, count: 4000)
        // Generous: under the sanitizers, writing 16 MiB of records takes a while.
        let reply = try emulator.admin("GET", "/api/v1/notifications?limit=20000", timeoutMilliseconds: 120_000)
        #expect(reply.status == 200)
        #expect(reply.json["truncated"] == true)
        let listed = reply.json["notifications"]?.arrayValue?.count ?? 0
        #expect(listed > 1000 && listed < 4000, "\(listed) records in one response")
        #expect(reply.raw.utf8.count < 40 << 20)
    }

    /// Clients that ask for the whole journal and do not read the answer hold its records'
    /// memory; past 64 MiB of them the admin API answers 503, and takes lists again once those
    /// answers have gone (here: their clients closed).
    @Test func listAnswersNotYetReadAreBoundedTogether() throws {
        let emulator = try EmulatorProcess(["--max-records", "20000"], inProcess: true)
        _ = try Self.pushLarge(emulator, count: 4000)
        let request = "GET /api/v1/notifications?limit=20000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        func stall() throws -> AdminSocket {
            let socket = try AdminSocket(emulator, receiveBuffer: 4096, timeoutMilliseconds: 60_000)
            socket.send(request)
            return socket
        }
        // Each whole-journal page holds about 16 MiB: the fifth finds the 64 MiB taken (one
        // more stalled client each time a probe came before a stalled request was read).
        var stalled = try (0..<4).map { _ in try stall() }
        var refused: EmulatorProcess.AdminReply?
        for _ in 0..<3 where refused == nil {
            let probe = try emulator.admin("GET", "/api/v1/notifications?limit=20000", timeoutMilliseconds: 120_000)
            if probe.status == 503 { refused = probe } else { stalled.append(try stall()) }
        }
        let answer = try #require(refused, "a whole-journal list is refused while four others are unread")
        #expect(answer.json["error"]?.stringValue?.contains("MiB of records") == true, "\(answer.json)")
        #expect(try emulator.metric("apns_emulator_admin_list_budget_refusals_total") >= 1, "the refusal is counted")
        #expect(try emulator.admin("GET", "/api/v1/notifications?limit=1").status == 200, "a small page still fits beside them")
        stalled.removeAll()  // closed: their answers can no longer leave
        var again = 0
        for _ in 0..<100 {
            again = try emulator.admin("GET", "/api/v1/notifications?limit=20000", timeoutMilliseconds: 120_000).status
            if again == 200 { break }
            Thread.sleep(forTimeInterval: 0.1)
        }
        #expect(again == 200)
    }
}

/// Payloads reach the device (and the journal) as the bytes the provider sent.
@Suite("Payload fidelity")
struct PayloadFidelityTests {
    @Test(arguments: [
        #"{"aps":{"alert":"lone \ud800 surrogate"}}"#,
        #"{"aps":{"alert":"big"},"n":1e99999,"id":12345678901234567890123,"f":0.1000000000000000055511151231257827}"#,
        "{\n  \"aps\" : {\"alert\":\"pretty\"},\r\n  \"k\":[1, 2.50, -0.0]\n}",
    ])
    func theDeviceReceivesTheBytesAsSent(payload: String) throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let fd = try Socket.connect(to: try emulator.address("device"))
        defer { close(fd) }
        Socket.setTimeouts(fd, milliseconds: 10_000)
        SlowDeviceTests.hello(fd, deviceID: "exact-phone")
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        /// The raw text of the next line whose type is `type`.
        func nextLine(_ type: String) -> String? {
            while true {
                while let newline = pending.firstIndex(of: 0x0A) {
                    let line = String(decoding: pending[..<newline], as: UTF8.self)
                    pending.removeFirst(newline + 1)
                    if line.contains("\"type\":\"\(type)\"") { return line }
                }
                let n = recv(fd, &buffer, buffer.count, 0)
                if n <= 0 { return nil }
                pending += buffer[0..<n]
            }
        }
        let registered = try #require(nextLine("registered"))
        let token = try #require(try JSONValue.parse(registered)["token"]?.stringValue)
        let answer = try emulator.connect().send(try emulator.push(token, payload: payload).request)
        #expect(APNsResult(answer).status == 200)
        let line = try #require(nextLine("notification"))
        // Line breaks between tokens become spaces (the protocol is one JSON object per line);
        // every other byte is the provider's.
        let expected = payload.replacingOccurrences(of: "\r", with: " ").replacingOccurrences(of: "\n", with: " ")
        #expect(line.contains("\"payload\":" + expected), "\(line)")
        let record = try emulator.admin("GET", "/api/v1/notifications?token=\(token)").raw
        #expect(record.contains("\"payload\":" + expected), "the journal shows it as sent too")
    }
}
