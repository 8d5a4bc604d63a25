@testable import HTTP1Server
import Testing

/// RFC 9112 parsing of admin requests, fed as one read, byte by byte, and in between.
@Suite("HTTP/1.1 request parser")
struct HTTP1ParserTests {
    enum Outcome: Equatable {
        case request(method: String, target: String, body: String)
        case failure(Int)
        case incomplete
    }

    /// Feeds `text` in pieces of `piece` bytes and collects what comes out.
    static func parse(_ text: String, piece: Int = .max, limits: HTTP1RequestParser.Limits = .init()) -> [Outcome] {
        var parser = HTTP1RequestParser(limits: limits)
        var outcomes: [Outcome] = []
        var head: HTTP1RequestHead?
        let bytes = Array(text.utf8)
        var offset = 0
        repeat {
            let end = min(bytes.count, offset + max(1, min(piece, bytes.count)))
            parser.append(bytes[offset..<end])
            offset = end
            do {
                while true {
                    if head == nil {
                        guard let next = try parser.nextHead() else { break }
                        head = next
                    }
                    guard let body = try parser.nextBody() else { break }
                    outcomes.append(.request(method: head!.method, target: head!.target, body: String(decoding: body, as: UTF8.self)))
                    head = nil
                }
            } catch {
                return outcomes + [.failure(error.status)]
            }
        } while offset < bytes.count
        return outcomes + (head != nil || parser.bufferedCount > 0 ? [.incomplete] : [])
    }

    static func all(_ text: String) -> [[Outcome]] { [1, 2, 3, 7, .max].map { parse(text, piece: $0) } }

    @Test func aRequestReadsTheSameHoweverTheBytesArrive() {
        let text = "POST /api/v1/devices?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8197\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}"
        for outcome in Self.all(text) {
            #expect(outcome == [.request(method: "POST", target: "/api/v1/devices?x=1", body: "{\"a\":1}")])
        }
    }

    @Test func pipelinedRequestsAndLeadingEmptyLines() {
        let text = "\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\nHost: x\n\nDELETE /c HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        for outcome in Self.all(text) {
            #expect(
                outcome == [
                    .request(method: "GET", target: "/a", body: ""), .request(method: "GET", target: "/b", body: ""),
                    .request(method: "DELETE", target: "/c", body: ""),
                ])
        }
    }

    /// Found by the fuzzer (scripts/fuzz http1): a first line of bare CRs crashed the parser,
    /// i.e. anyone reaching the admin port could stop the emulator.
    @Test(arguments: ["\r\r\n\n}", "\r\n\r\r\n\n", "\r\r\r\n\r\n", "\r\nGET / HTTP/1.1\r\n\r\r\n\r\n"])
    func linesOfBareCRsAreRefusedNotFatal(text: String) {
        for outcome in Self.all(text) {
            #expect(outcome.last == .failure(400), "\(outcome)")
        }
    }

    @Test func chunkedBodiesWithExtensionsAndTrailers() {
        let text =
            "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4;name=v\r\n{\"a\"\r\n3 \r\n:1}\r\n0\r\nX-Trailer: t\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n"
        for outcome in Self.all(text) {
            #expect(outcome == [.request(method: "POST", target: "/x", body: "{\"a\":1}"), .request(method: "GET", target: "/next", body: "")])
        }
        #expect(Self.parse("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n") == [.failure(400)])
        #expect(Self.parse("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n") == [.failure(400)])
        var small = HTTP1RequestParser.Limits()
        small.maxBodyBytes = 4
        #expect(Self.parse("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n3\r\n", limits: small) == [.failure(413)])
    }

    /// RFC 9112 §6.1 and §6.3: any framing a proxy could read differently is refused.
    @Test(arguments: [
        ("Content-Length: 3\r\nContent-Length: 3", 400),
        ("Content-Length: 3\r\nContent-Length: 4", 400),
        ("Content-Length: 3, 3", 400),
        ("Content-Length: +3", 400),
        ("Content-Length: 0x3", 400),
        ("Content-Length: 99999999999999999999", 400),
        ("Content-Length: 9000000", 413),
        ("Transfer-Encoding: chunked\r\nContent-Length: 3", 400),
        ("Content-Length: 3\r\nTransfer-Encoding: chunked", 400),
        ("Transfer-Encoding: gzip, chunked", 501),
        ("Transfer-Encoding: gzip", 400),
        ("Transfer-Encoding: identity", 400),
        ("Transfer-Encoding: chunked, chunked", 400),
        ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", 400),
    ])
    func ambiguousFramingIsRefused(fields: String, status: Int) {
        let text = "POST /x HTTP/1.1\r\nHost: x\r\n\(fields)\r\n\r\nabc"
        for outcome in Self.all(text) { #expect(outcome == [.failure(status)], "\(fields)") }
    }

    @Test(arguments: [
        ("GET /x HTTP/1.1\r\nHost : x\r\n\r\n", 400),  // whitespace before the colon
        ("GET /x HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n", 400),  // obsolete line folding
        ("GET /x HTTP/1.1\r\nHost: x\r\n\tX-A: 1\r\n\r\n", 400),
        ("GET /x HTTP/1.1\r\nHost: x\rX-A: 1\r\n\r\n", 400),  // bare CR
        ("GET /x HTTP/1.1\r\nHost: x\r\nX-A: a\u{0}b\r\n\r\n", 400),
        ("GET /x HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n", 400),
        ("GET /x HTTP/1.1\r\nX-A: 1\r\n\r\n", 400),  // no Host
        ("GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        ("GET /x HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
        ("GET  /x HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET /x HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        ("GET /x FTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    ])
    func malformedHeadsAreRefused(text: String, status: Int) {
        for outcome in Self.all(text) { #expect(outcome == [.failure(status)], "\(text.debugDescription)") }
    }

    @Test func http10WithoutHostIsAcceptedAndAbsoluteFormNamesTheAuthority() throws {
        #expect(Self.parse("GET /x HTTP/1.0\r\n\r\n") == [.request(method: "GET", target: "/x", body: "")])
        var parser = HTTP1RequestParser()
        parser.append(Array("GET http://localhost:8197/api/v1/info?a=b HTTP/1.1\r\nHost: evil.example\r\n\r\n".utf8))
        let head = try #require(try parser.nextHead())
        #expect(head.authority == "localhost:8197")
        #expect(head.originForm == "/api/v1/info?a=b")
        #expect(head.keepAlive)
    }

    /// The head limit holds whether the bytes come one at a time or all at once, and
    /// whether or not the head ever ends.
    @Test func theHeadLimitHoldsHoweverTheBytesArrive() {
        var limits = HTTP1RequestParser.Limits()
        limits.maxHeaderBytes = 100
        let endless = "GET /x HTTP/1.1\r\nHost: x\r\nX-Long: " + String(repeating: "a", count: 200)
        let complete = endless + "\r\n\r\n"
        let crlfs = String(repeating: "\r\n", count: 200)
        for piece in [1, 2, 3, 50, .max] {
            #expect(Self.parse(endless, piece: piece, limits: limits) == [.failure(431)], "piece \(piece)")
            #expect(Self.parse(complete, piece: piece, limits: limits) == [.failure(431)], "piece \(piece)")
            #expect(Self.parse(crlfs, piece: piece, limits: limits) == [.failure(431)], "piece \(piece)")
        }
        let fits = "GET /x HTTP/1.1\r\nHost: x\r\nX: " + String(repeating: "a", count: 60) + "\r\n\r\n"
        #expect(fits.utf8.count <= 100)
        #expect(Self.parse(fits, piece: 1, limits: limits) == [.request(method: "GET", target: "/x", body: "")])
    }

    @Test func keepAliveAndExpectContinue() throws {
        func head(_ text: String) throws -> HTTP1RequestHead {
            var parser = HTTP1RequestParser()
            parser.append(Array(text.utf8))
            return try #require(try parser.nextHead())
        }
        #expect(try head("GET / HTTP/1.1\r\nHost: x\r\n\r\n").keepAlive)
        #expect(try !head("GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n").keepAlive)
        #expect(try !head("GET / HTTP/1.0\r\n\r\n").keepAlive)
        #expect(try head("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keepAlive)
        #expect(try head("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n").expectsContinue)
    }
}
