// In-memory micro benchmarks of the session wrappers. They measure; they assert nothing.
// They live with the tests, not in the HTTP2 library: `BenchmarkSmokeTests` runs them, and
// timing them wants a release-mode test run (`swift test -c release`): debug builds are
// several times slower.

import HTTP2

/// In-memory throughput measurements of the HTTP2 wrapper (no sockets, no TLS).
enum HTTP2MicroBenchmark {
    struct Result: Sendable, CustomStringConvertible {
        /// Requests answered.
        var requests: Int
        /// Wall time of the measured part.
        var elapsed: Duration
        var requestsPerSecond: Double {
            let c = elapsed.components
            let seconds = Double(c.seconds) + Double(c.attoseconds) / 1e18
            return seconds > 0 ? Double(requests) / seconds : 0
        }
        var description: String {
            "\(requests) requests in \(elapsed): \(Int(requestsPerSecond)) req/s"
        }
    }

    /// Typical APNs provider request header list (values are placeholders).
    static func sampleRequestHeaders(deviceToken: String = String(repeating: "ab", count: 32)) -> [HTTP2HeaderField] {
        [
            HTTP2HeaderField(":method", "POST"),
            HTTP2HeaderField(":scheme", "https"),
            HTTP2HeaderField(":path", "/3/device/" + deviceToken),
            HTTP2HeaderField(":authority", "api.sandbox.push.apple.com"),
            HTTP2HeaderField(
                "authorization",
                "bearer eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyMzQ1NjcifQ.eyJpc3MiOiJERUYxMjM0NTY3IiwiaWF0IjoxNzAwMDAwMDAwfQ.c2lnbmF0dXJl"),
            HTTP2HeaderField("apns-topic", "com.example.app"),
            HTTP2HeaderField("apns-push-type", "alert"),
            HTTP2HeaderField("apns-priority", "10"),
            HTTP2HeaderField("content-length", String(sampleRequestBody.count)),
        ]
    }

    static let sampleRequestBody: [UInt8] = Array(#"{"aps":{"alert":"Hello from the load generator"}}"#.utf8)

    /// Server side only. First a client runs `requests` requests (in batches of `batch`
    /// concurrent streams) against a recording server while every byte the client sends is
    /// kept; then that byte stream is replayed into a fresh, identically configured server
    /// that answers each request with 200 + `apns-id` (no body) and drains its output. Only
    /// the replay is timed, so this approximates the per-core server cost of the wrapper.
    static func serverReplay(requests: Int, batch: Int = 100) throws(HTTP2Error) -> Result {
        let settings = [HTTP2Setting(id: HTTP2Setting.maxConcurrentStreams, value: 1000)]
        let overrides = [HTTP2Setting(id: HTTP2Setting.maxConcurrentStreams, value: 1)]
        let responseHeaders = [HTTP2HeaderField("apns-id", "00000000-0000-0000-0000-000000000000")]
        let headers = sampleRequestHeaders()

        // Record.
        let client = try HTTP2ClientSession(peerMaxConcurrentStreamsBeforeSettings: UInt32(batch))
        let recorder = try HTTP2ServerSession(settings: settings, advertisedOverrides: overrides)
        var chunks: [[UInt8]] = []
        var remaining = requests
        while remaining > 0 || client.openStreamCount > 0 {
            if client.openStreamCount == 0 && remaining > 0 {
                let n = min(batch, remaining)
                for _ in 0..<n { try client.submitRequest(headers: headers, body: sampleRequestBody) }
                remaining -= n
            }
            var c2s: [UInt8] = []
            client.drainOutput(into: &c2s)
            if !c2s.isEmpty {
                chunks.append(c2s)
                try recorder.receive(c2s)
            }
            recorder.consumeEvents { event in
                if case .request(let request) = event {
                    recorder.submitResponse(streamID: request.streamID, status: 200, headers: responseHeaders, body: nil)
                }
            }
            var s2c: [UInt8] = []
            recorder.drainOutput(into: &s2c)
            recorder.consumeEvents { _ in }
            if !s2c.isEmpty { try client.receive(s2c) }
            _ = client.takeCompletedResponses()
            if c2s.isEmpty && s2c.isEmpty { break }  // stalled; should not happen
        }

        // Replay (timed).
        let server = try HTTP2ServerSession(settings: settings, advertisedOverrides: overrides)
        var out: [UInt8] = []
        out.reserveCapacity(1 << 16)
        var answered = 0
        let clock = ContinuousClock()
        let start = clock.now
        for chunk in chunks {
            try server.receive(chunk)
            server.consumeEvents { event in
                if case .request(let request) = event {
                    server.submitResponse(streamID: request.streamID, status: 200, headers: responseHeaders, body: nil)
                    answered += 1
                }
            }
            server.drainOutput(into: &out)
            server.consumeEvents { _ in }
            out.removeAll(keepingCapacity: true)
        }
        return Result(requests: answered, elapsed: clock.now - start)
    }

    /// Both sides in one thread: client submits `batch` requests, bytes go to the server,
    /// it answers 200 (no body), bytes go back, the client collects the responses.
    static func roundTrip(requests: Int, batch: Int = 100) throws(HTTP2Error) -> Result {
        let client = try HTTP2ClientSession()
        let server = try HTTP2ServerSession(settings: [HTTP2Setting(id: HTTP2Setting.maxConcurrentStreams, value: 1000)])
        let headers = sampleRequestHeaders()
        let responseHeaders = [HTTP2HeaderField("apns-id", "00000000-0000-0000-0000-000000000000")]
        var c2s: [UInt8] = []
        var s2c: [UInt8] = []
        var completed = 0
        let clock = ContinuousClock()
        let start = clock.now
        var submitted = 0
        while completed < requests {
            if submitted < requests && client.openStreamCount == 0 {
                let n = min(batch, requests - submitted)
                for _ in 0..<n { try client.submitRequest(headers: headers, body: sampleRequestBody) }
                submitted += n
            }
            client.drainOutput(into: &c2s)
            if !c2s.isEmpty { try server.receive(c2s) }
            c2s.removeAll(keepingCapacity: true)
            server.consumeEvents { event in
                if case .request(let request) = event {
                    server.submitResponse(streamID: request.streamID, status: 200, headers: responseHeaders, body: nil)
                }
            }
            server.drainOutput(into: &s2c)
            server.consumeEvents { _ in }
            if !s2c.isEmpty { try client.receive(s2c) }
            s2c.removeAll(keepingCapacity: true)
            let done = client.takeCompletedResponses().count
            completed += done
            if done == 0 && client.openStreamCount > 0 && !client.wantsWrite && !server.wantsWrite {
                break  // stalled (should not happen); don't spin
            }
        }
        return Result(requests: completed, elapsed: clock.now - start)
    }
}
