import APNsCore
import Foundation
import Networking

/// A parsed HTTP/1.1 request for the admin API.
struct AdminRequest {
    var method: String
    /// The path without the query string, percent-decoded per segment by the router.
    var path: String
    var query: [String: String]
    var headers: [String: String]
    var body: [UInt8]

    func header(_ name: String) -> String? { headers[name.lowercased()] }

    /// The body as a JSON object; an empty body counts as `{}`.
    func jsonObject() throws(AdminError) -> JSONObject {
        if body.isEmpty || body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) { return JSONObject() }
        do {
            guard let object = try JSONValue.parse(body).objectValue else {
                throw AdminError(400, "the request body must be a JSON object")
            }
            return object
        } catch let error as JSONParseError {
            throw AdminError(400, "the request body is not valid JSON: \(error)")
        } catch let error as AdminError {
            throw error
        } catch {
            throw AdminError(400, "\(error)")
        }
    }
}

struct AdminResponse {
    var status: Int
    var headers: [(String, String)] = []
    var body: [UInt8] = []

    static func json(_ status: Int, _ value: JSONValue) -> AdminResponse {
        var body = value.serializedBytes()
        body.append(0x0A)
        return AdminResponse(status: status, headers: [("Content-Type", "application/json")], body: body)
    }

    static func error(_ status: Int, _ message: String) -> AdminResponse {
        json(status, ["error": .string(message), "status": .int(Int64(status))])
    }
}

/// An admin API failure with the status and message to send.
struct AdminError: Error {
    var status: Int
    var message: String
    init(_ status: Int, _ message: String) {
        self.status = status
        self.message = message
    }
}

/// One admin API connection: HTTP/1.1 with keep-alive, one request at a time (pipelined
/// requests wait their turn), `Content-Length` and chunked bodies (HTTP1Parser.swift).
/// Every wait is bounded: the head and the body each have `--admin-read-timeout`, an idle
/// connection `--admin-idle-timeout`; bodies draw on a budget shared by all connections.
final class HTTP1Connection: ConnectionHandler {
    private enum Phase {
        /// Between requests.
        case idle
        case head
        case body
        /// The request is with its route (long polls stay here until answered).
        case handling
        /// Server-sent events: the response never ends; input is ignored.
        case streaming
        /// The final response is out; reading (and dropping) until the client closes.
        case closing
    }

    let connection: Connection
    let server: AdminServer
    /// Set while this connection carries an event stream.
    var eventStream: EventStreamClient?
    /// The slot this connection holds (AdminSlots.swift); nil when it was refused one.
    private var slot: AdminSlots.Slot?
    private let slotID: UInt64
    private var parser: HTTP1RequestParser
    private var phase = Phase.idle
    private var head: HTTP1RequestHead?
    /// The current request's path and query, split once from `head` in `begin`.
    private var target: (String, [String: String]) = ("", [:])
    private var keepAlive = true
    private var reservedBody = 0
    private var processing = false
    private var onClose: [() -> Void] = []
    /// Monotonic ms by which the current phase must end; nil when none applies.
    private var deadline: Int64?
    private var ticking = false

    init(connection: Connection, server: AdminServer) {
        self.connection = connection
        self.server = server
        self.parser = HTTP1RequestParser(limits: server.limits)
        slotID = server.slots.newID()
        slot = server.slots.admit()
    }

    var isClosed: Bool { connection.isClosed }
    var isHeadRequest: Bool { head?.method == "HEAD" }

    /// Runs when the client goes away before the current request is answered (cancels long
    /// polls and event streams).
    func whenClosed(_ body: @escaping () -> Void) { onClose.append(body) }

    // MARK: ConnectionHandler

    func connectionDidBecomeReady(_ connection: Connection) {
        guard slot != nil else {
            finish(.error(503, "too many admin connections (--admin-max-connections \(server.options.maxConnections)), none of them idle; try again later"))
            return
        }
        setDeadline(server.options.idleTimeoutMs)
        becomeIdle(.fresh)
    }

    func connection(_ connection: Connection, didRead bytes: UnsafeRawBufferPointer) {
        switch phase {
        case .streaming, .closing:
            return
        case .handling:
            // A request pipelined behind one still being answered waits, within limits.
            parser.append(bytes)
            if parser.bufferedCount > server.limits.maxHeaderBytes { connection.close() }
        case .idle, .head, .body:
            parser.append(bytes)
            process()
        }
    }

    func connectionDidDrainOutput(_ connection: Connection) {
        if phase == .streaming { eventStream?.drain() }
    }

    func connectionDidClose(_ connection: Connection) {
        if let slot { server.slots.closed(slotID, slot) }
        server.releaseBody(reservedBody)
        reservedBody = 0
        let handlers = onClose
        onClose = []
        handlers.forEach { $0() }
    }

    // MARK: Reading requests

    private func process() {
        guard !processing else { return }
        processing = true
        defer { processing = false }
        while !connection.isClosed {
            switch phase {
            case .idle, .head:
                guard parser.bufferedCount > 0 else { return }
                if phase == .idle {
                    guard server.slots.becameBusy(slotID) else {
                        // Evicted for a newcomer just as this request came: the close is on its way.
                        connection.close()
                        return
                    }
                    phase = .head
                    setDeadline(server.options.readTimeoutMs)
                }
                let next: HTTP1RequestHead?
                do { next = try parser.nextHead() } catch {
                    malformed(error)
                    return
                }
                guard let next else { return }
                begin(next)
            case .body:
                guard let head else { return }
                if case .chunked = head.framing, parser.bodyBytesHeld > reservedBody {
                    // Chunked bodies draw on the budget as they arrive.
                    let more = parser.bodyBytesHeld - reservedBody
                    guard server.reserveBody(more) else {
                        overBudget()
                        return
                    }
                    reservedBody += more
                }
                let body: [UInt8]?
                do { body = try parser.nextBody() } catch {
                    malformed(error)
                    return
                }
                guard let body else { return }
                dispatch(head, body)
            case .handling, .streaming, .closing:
                return
            }
        }
    }

    /// A complete head: the access rules and the body budget decide before any body is read.
    private func begin(_ head: HTTP1RequestHead) {
        self.head = head
        keepAlive = head.keepAlive
        let hasBody = head.framing != .none
        target = Self.splitTarget(head.originForm)
        let (path, query) = target
        if slot == .reserve, let refusal = reserveRefusal(path) {
            if hasBody { keepAlive = false } else { _ = try? parser.nextBody() }
            finish(refusal)
            return
        }
        if let denial = server.admit(head, path: path, query: query) {
            server.metrics.refused(denial.reason)
            // An unread body ends the connection; without one the next request may follow.
            if hasBody { keepAlive = false } else { _ = try? parser.nextBody() }
            phase = .handling
            var response = AdminResponse.error(denial.status, denial.message)
            response.headers += denial.headers
            respond(response)
            return
        }
        if case .length(let length) = head.framing {
            guard server.reserveBody(length) else {
                overBudget()
                return
            }
            reservedBody = length
        }
        if hasBody && head.expectsContinue { connection.write(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)) }
        phase = .body
        setDeadline(server.options.readTimeoutMs)
    }

    private func dispatch(_ head: HTTP1RequestHead, _ body: [UInt8]) {
        phase = .handling
        deadline = nil
        let (path, query) = target
        var fields: [String: String] = [:]
        for (name, value) in head.fields where fields[name] == nil { fields[name] = value }
        let request = AdminRequest(method: head.method, path: path, query: query, headers: fields, body: body)
        server.releaseBody(reservedBody)
        reservedBody = 0
        server.api.handle(request, self)
    }

    private func malformed(_ failure: HTTP1Failure) {
        server.metrics.malformed.add()
        finish(.error(failure.status, failure.message))
    }

    private func overBudget() {
        finish(.error(503, "the admin API is reading \(HTTP1Syntax.size(AdminServer.bodyBudgetBytes)) of request bodies already; try again later"))
    }

    // MARK: Answering

    /// Sends the answer to the current request; the next pipelined request follows.
    func respond(_ response: AdminResponse) {
        guard !connection.isClosed, phase == .handling else { return }
        var head = "HTTP/1.1 \(response.status) \(Self.statusText(response.status))\r\n"
        for (name, value) in response.headers { head += "\(name): \(value)\r\n" }
        head += "Content-Length: \(response.body.count)\r\n"
        head += keepAlive ? "\r\n" : "Connection: close\r\n\r\n"
        // HEAD: the same fields, Content-Length included, and no body (RFC 9110 §9.3.2).
        let body = isHeadRequest ? [] : response.body
        connection.write { out in
            out.append(contentsOf: head.utf8)
            out.append(contentsOf: body)
        }
        self.head = nil
        // Close handlers belong to the request just answered (a long poll's clean-up); a
        // keep-alive connection serving many of them must not collect them.
        onClose.removeAll()
        // A 503 says "later": a client that stayed connected would hold a slot meanwhile
        // (512 refused long polls used to keep every other admin client out).
        if response.status == 503 { keepAlive = false }
        guard keepAlive else {
            linger()
            return
        }
        phase = .idle
        setDeadline(server.options.idleTimeoutMs)
        becomeIdle(.betweenRequests)
        process()
    }

    /// A connection in the health-check reserve serves one health check, or one other request
    /// if a regular slot has come free; else it is refused (nil: go on).
    private func reserveRefusal(_ path: String) -> AdminResponse? {
        if server.slots.promote() {
            slot = .regular
            return nil
        }
        keepAlive = false
        if AdminServer.isHealthCheck(path) { return nil }
        return .error(503, "too many admin connections (--admin-max-connections \(server.options.maxConnections)), none of them idle; "
                      + "only /livez, /readyz and /metrics are answered now; try again later")
    }

    /// From now until its next request this connection may be closed to make room.
    private func becomeIdle(_ idleness: AdminSlots.Idleness) {
        guard let slot else { return }
        final class Weak: @unchecked Sendable {
            weak var connection: HTTP1Connection?
            init(_ connection: HTTP1Connection) { self.connection = connection }
        }
        let target = Weak(self)
        server.slots.becameIdle(slotID, slot, idleness, AdminSlots.Evictor(loop: connection.loop) { target.connection?.evicted() })
    }

    /// Closed (on this connection's loop) to make room for a newer one at the cap. Its slot is
    /// the newcomer's already; a request that arrived meanwhile found that out and closed it.
    private func evicted() {
        if !connection.isClosed { connection.close() }
    }

    /// Answers and closes, whatever state the request is in.
    private func finish(_ response: AdminResponse) {
        keepAlive = false
        phase = .handling
        respond(response)
    }

    /// Ends the response side and drops what the client still sends, then closes.
    private func linger() {
        phase = .closing
        server.releaseBody(reservedBody)
        reservedBody = 0
        connection.shutdownOutputAfterFlush()
        setDeadline(AdminServer.lingerMs)
        becomeIdle(.lingering)
    }

    /// Starts a streamed response (server-sent events): the head now, events later. Returns
    /// false for a HEAD request, which gets the head only.
    func startStream(contentType: String) -> Bool {
        let headText = "HTTP/1.1 200 OK\r\nContent-Type: \(contentType)\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n"
        keepAlive = false
        connection.write(Array(headText.utf8))
        if isHeadRequest {
            linger()
            return false
        }
        phase = .streaming
        deadline = nil
        return true
    }

    func sendStreamChunk(_ bytes: [UInt8]) {
        connection.write(bytes)
    }

    /// Ends an event stream (the client fell too far behind).
    func close() { connection.close() }

    // MARK: Deadlines

    /// One timer per connection ticks once a second while a deadline applies, rather than
    /// a timer per request that would have to be cancelled.
    private func setDeadline(_ milliseconds: Int64) {
        deadline = Monotonic.nowMilliseconds() + milliseconds
        guard !ticking else { return }
        ticking = true
        scheduleTick()
    }

    private func scheduleTick() {
        let wait = max(1, min(1000, (deadline ?? 0) - Monotonic.nowMilliseconds()))
        connection.loop.schedule(afterMilliseconds: wait) { [weak self] in self?.tick() }
    }

    private func tick() {
        guard !connection.isClosed, let deadline else {
            ticking = false
            return
        }
        let now = Monotonic.nowMilliseconds()
        // A client reading a large response slowly is making progress; only silence counts.
        let due = phase == .idle ? max(deadline, connection.lastActivity + server.options.idleTimeoutMs) : deadline
        guard now >= due else {
            scheduleTick()
            return
        }
        ticking = false
        switch phase {
        case .idle:
            server.metrics.timedOut("idle")
            connection.close()
        case .head:
            server.metrics.timedOut("headers")
            finish(.error(408, "the request head did not arrive within \(server.options.readTimeoutMs / 1000) s (--admin-read-timeout)"))
        case .body:
            server.metrics.timedOut("body")
            finish(.error(408, "the request body did not arrive within \(server.options.readTimeoutMs / 1000) s (--admin-read-timeout)"))
        case .closing:
            connection.close()
        case .handling, .streaming:
            break
        }
    }

    // MARK: Helpers

    static func splitTarget(_ target: String) -> (String, [String: String]) {
        guard let mark = target.firstIndex(of: "?") else { return (target, [:]) }
        var query: [String: String] = [:]
        for pair in target[target.index(after: mark)...].split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let key = decode(kv[0])
            let value = kv.count > 1 ? decode(kv[1]) : ""
            query[key] = value
        }
        return (String(target[..<mark]), query)
    }

    static func decode(_ text: Substring) -> String {
        let plusAsSpace = text.replacingOccurrences(of: "+", with: " ")
        return plusAsSpace.removingPercentEncoding ?? plusAsSpace
    }

    static func statusText(_ status: Int) -> String {
        switch status {
        case 100: return "Continue"
        case 200: return "OK"
        case 201: return "Created"
        case 204: return "No Content"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 408: return "Request Timeout"
        case 409: return "Conflict"
        case 411: return "Length Required"
        case 413: return "Content Too Large"
        case 415: return "Unsupported Media Type"
        case 422: return "Unprocessable Content"
        case 431: return "Request Header Fields Too Large"
        case 499: return "Client Closed Request"
        case 500: return "Internal Server Error"
        case 501: return "Not Implemented"
        case 503: return "Service Unavailable"
        case 505: return "HTTP Version Not Supported"
        default: return "Status"
        }
    }
}
