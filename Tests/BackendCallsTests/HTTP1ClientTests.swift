import HTTP1Client
import MonotonicClock
import Networking
import BackendTestSupport
import Testing

@Suite struct HTTPURLTests {
    @Test func splitsHostPortAndTarget() throws {
        let url = try HTTPURL(string: "http://api.example.com:8080/v1/devices?token=ab#ignored")
        #expect(url == HTTPURL(host: "api.example.com", port: 8080, target: "/v1/devices?token=ab"))
        #expect(url.hostHeader == "api.example.com:8080")
        #expect(try HTTPURL(string: "HTTP://localhost") == HTTPURL(host: "localhost", port: 80, target: "/"))
        #expect(try HTTPURL(string: "http://127.0.0.1?x=1").target == "/?x=1")
        let v6 = try HTTPURL(string: "http://[::1]:9000/hook")
        #expect(v6 == HTTPURL(host: "::1", port: 9000, target: "/hook"))
        #expect(v6.hostHeader == "[::1]:9000")
        #expect(v6.description == "http://[::1]:9000/hook")
    }

    @Test func httpsIsRefusedWithItsOwnMessage() {
        #expect(throws: HTTP1ClientError(.httpsUnsupported, phase: .preparing, "https backends are not supported; use http://")) {
            try HTTPURL(string: "https://api.example.com/register")
        }
    }

    @Test(arguments: [
        "api.example.com/x", "ftp://host/x", "http://", "http:///path", "http://host:0/", "http://host:70000/",
        "http://host:port/", "http://user@host/", "http://[::1/", "http://[::1]x/", "http://ho st/",
        "http://host/a b", "http://host/é", "http://host/a\r\nX: y",
    ])
    func malformedURLsAreRefused(text: String) {
        #expect {
            try HTTPURL(string: text)
        } throws: { error in
            let error = error as? HTTP1ClientError
            return error?.kind == .invalidRequest && error?.message.contains("is not a usable URL") == true
        }
    }
}

@Suite struct HTTP1ClientTests {
    @Test func sendsHostLengthAndCloseAndReadsAContentLengthAnswer() throws {
        let backend = try TestBackend { _, _ in .status(201, body: "made") }
        defer { backend.stop() }
        let response = try HTTP1Client.exchange(
            url: backend.url("/devices?x=1"), method: "PUT",
            headers: [HTTP1Header("X-App", "demo"), HTTP1Header("Content-Length", "999")],
            body: Array("hello".utf8), timeoutMs: 2000)
        #expect(response.status == 201)
        #expect(response.reason == "Test")
        #expect(response.text == "made")
        #expect(response.header("content-LENGTH") == "4")
        let request = try #require(backend.requests.first)
        #expect(request.method == "PUT" && request.target == "/devices?x=1" && request.text == "hello")
        #expect(request.headers["host"] == backend.address.description)
        #expect(request.headers["connection"] == "close")
        #expect(request.headers["content-length"] == "5", "the caller's Content-Length is replaced by the real one")
        #expect(request.headers["x-app"] == "demo")
    }

    @Test func readsChunkedAnswers() throws {
        let body = String(repeating: "chunked body ", count: 500)
        let backend = try TestBackend { _, _ in .status(200, body: body, chunked: true) }
        defer { backend.stop() }
        let response = try HTTP1Client.exchange(url: backend.url("/"), timeoutMs: 2000)
        #expect(response.text == body)
        #expect(response.header("Transfer-Encoding") == "chunked")
    }

    @Test func readsAnswersThatEndWithTheConnection() throws {
        let backend = try TestBackend { _, _ in .raw("HTTP/1.0 200 OK\r\nX: 1\r\n\r\nuntil the end") }
        defer { backend.stop() }
        #expect(try HTTP1Client.exchange(url: backend.url("/"), timeoutMs: 2000).text == "until the end")
    }

    @Test func skipsInterimAnswersAndReadsNoBodyWhereThereIsNone() throws {
        let backend = try TestBackend { request, _ in
            request.target == "/interim"
                ? .raw("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
                : .raw("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
        }
        defer { backend.stop() }
        #expect(try HTTP1Client.exchange(url: backend.url("/interim"), timeoutMs: 2000).status == 204)
        let head = try HTTP1Client.exchange(url: backend.url("/head"), method: "HEAD", timeoutMs: 2000)
        #expect(head.status == 200 && head.body.isEmpty)
    }

    @Test(arguments: [
        ("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", HTTP1ClientError.Kind.closedEarly, HTTP1ClientError.Phase.receivingBody),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", .closedEarly, .receivingBody),
        ("HTTP/1.1 200 OK\r\nContent-Le", .closedEarly, .receivingHead),
        ("", .closedEarly, .receivingHead),
        ("SSH-2.0-OpenSSH\r\n\r\n", .malformedResponse, .receivingHead),
        ("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", .malformedResponse, .receivingHead),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", .malformedResponse, .receivingBody),
    ])
    func cutShortAndMalformedAnswersAreErrors(answer: String, kind: HTTP1ClientError.Kind, phase: HTTP1ClientError.Phase) throws {
        let backend = try TestBackend { _, _ in .raw(answer) }
        defer { backend.stop() }
        #expect {
            try HTTP1Client.exchange(url: backend.url("/"), timeoutMs: 2000)
        } throws: { error in
            let error = error as? HTTP1ClientError
            return error?.kind == kind && error?.phase == phase
        }
    }

    @Test func answersOverTheLimitAreRefused() throws {
        let backend = try TestBackend { _, _ in .status(200, body: String(repeating: "x", count: 5000)) }
        defer { backend.stop() }
        #expect(try HTTP1Client.exchange(url: backend.url("/"), timeoutMs: 2000, maxResponseBytes: 6000).body.count == 5000)
        #expect {
            try HTTP1Client.exchange(url: backend.url("/"), timeoutMs: 2000, maxResponseBytes: 4096)
        } throws: { error in
            (error as? HTTP1ClientError)?.kind == .responseTooLarge
        }
    }

    @Test func answersOverTheLimitAreCutWhenAskedKeepingTheStatus() throws {
        for chunked in [false, true] {
            let backend = try TestBackend { _, _ in .status(503, body: String(repeating: "x", count: 50_000), chunked: chunked) }
            defer { backend.stop() }
            let response = try HTTP1Client.exchange(url: backend.url("/"), timeoutMs: 2000, maxResponseBytes: 10_000, whenLarger: .cut)
            #expect(response.status == 503)
            #expect(response.bodyCut)
            #expect(response.body.count <= 10_000 && response.body.count > 0 && response.body.allSatisfy { $0 == UInt8(ascii: "x") })
            let whole = try HTTP1Client.exchange(url: backend.url("/"), timeoutMs: 2000, maxResponseBytes: 60_000, whenLarger: .cut)
            #expect(!whole.bodyCut && whole.body.count == 50_000)
        }
    }

    @Test func theTimeoutBoundsTheWholeExchange() throws {
        let backend = try TestBackend { _, _ in .hold(then: 200) }
        defer { backend.stop() }
        let started = Monotonic.nowMilliseconds()
        #expect {
            try HTTP1Client.exchange(url: backend.url("/"), timeoutMs: 300)
        } throws: { error in
            let error = error as? HTTP1ClientError
            return error?.kind == .timedOut && error?.phase == .receivingHead && error?.message.contains("within 300 ms") == true
        }
        let elapsed = Monotonic.nowMilliseconds() - started
        #expect(elapsed >= 290 && elapsed < 2000, "took \(elapsed) ms")
    }

    /// A byte every 50 ms never leaves the client idle for long: only a deadline for the whole
    /// exchange ends it (the answer would take 53 s).
    @Test func aTricklingAnswerEndsAtTheTimeoutToo() throws {
        let backend = try TestBackend { _, _ in .trickle(200, everyMs: 50) }
        defer { backend.stop() }
        let started = Monotonic.nowMilliseconds()
        #expect {
            try HTTP1Client.exchange(url: backend.url("/"), timeoutMs: 600)
        } throws: { error in
            let error = error as? HTTP1ClientError
            return error?.kind == .timedOut && (error?.bytesReceived ?? 0) > 0 && error?.message.contains("within 600 ms") == true
        }
        let elapsed = Monotonic.nowMilliseconds() - started
        #expect(elapsed >= 590 && elapsed < 2000, "took \(elapsed) ms")
    }

    @Test func aRefusedConnectionSaysSo() throws {
        let backend = try TestBackend()
        let url = backend.url("/")
        backend.stop()
        #expect {
            try HTTP1Client.exchange(url: url, timeoutMs: 1000)
        } throws: { error in
            let error = error as? HTTP1ClientError
            return error?.kind == .cannotConnect && error?.message.contains("Connection refused") == true
        }
    }

    @Test func reachesIPv6LiteralsAndNames() throws {
        let v6 = try TestBackend(host: "::1") { _, _ in .status(200, body: "six") }
        defer { v6.stop() }
        let response = try HTTP1Client.exchange(url: "http://[::1]:\(v6.address.port)/", timeoutMs: 2000)
        #expect(response.text == "six")
        #expect(v6.requests.first?.headers["host"] == "[::1]:\(v6.address.port)")

        let v4 = try TestBackend { _, _ in .status(200, body: "name") }
        defer { v4.stop() }
        #expect(try HTTP1Client.exchange(url: "http://localhost:\(v4.address.port)/", timeoutMs: 2000).text == "name")
    }

    @Test func requestsThatWouldBreakTheFramingAreRefused() {
        for (method, headers) in [
            ("GE T", [HTTP1Header]()), ("GET", [HTTP1Header("X", "a\r\nInjected: 1")]), ("GET", [HTTP1Header("Bad Name", "v")]),
        ] {
            #expect {
                try HTTP1Client.exchange(host: "127.0.0.1", port: 9, method: method, target: "/", headers: headers, timeoutMs: 100)
            } throws: { error in
                (error as? HTTP1ClientError)?.kind == .invalidRequest
            }
        }
    }
}
