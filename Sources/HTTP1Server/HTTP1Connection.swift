import Foundation
import MonotonicClock
public import Networking

/// One connection: HTTP/1.1 with keep-alive, one request at a time (pipelined requests wait
/// their turn), `Content-Length` and chunked bodies (HTTP1Parser.swift). Every wait is
/// bounded: the head and the body each have the read timeout, an idle connection the idle
/// timeout; bodies draw on a budget shared by all connections.
public final class HTTP1Connection: ConnectionHandler {
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

    public let connection: Connection
    let server: HTTP1Server
    private var service: any HTTP1Service { server.service }
    /// While this connection carries a stream: runs when its output has drained.
    public var onStreamDrained: (() -> Void)?
    /// The slot this connection holds (ConnectionSlots.swift); nil when it was refused one.
    private var slot: ConnectionSlots.Slot?
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
    /// The `onSent` of answers written and not yet drained to the socket.
    private var unsent: [@Sendable () -> Void] = []
    /// Monotonic ms by which the current phase must end; nil when none applies.
    private var deadline: Int64?
    private var ticking = false

    init(connection: Connection, server: HTTP1Server) {
        self.connection = connection
        self.server = server
        self.parser = HTTP1RequestParser(limits: server.options.limits)
        slotID = server.slots.newID()
        slot = server.slots.admit()
    }

    public var isClosed: Bool { connection.isClosed }
    public var isHeadRequest: Bool { head?.method == "HEAD" }

    /// Runs when the client goes away before the current request is answered (cancels long
    /// polls and event streams).
    public func whenClosed(_ body: @escaping () -> Void) { onClose.append(body) }

    // MARK: ConnectionHandler

    public func connectionDidBecomeReady(_ connection: Connection) {
        guard slot != nil else {
            finish(service.answer(.noPlace))
            return
        }
        setDeadline(server.options.idleTimeoutMs)
        becomeIdle(.fresh)
    }

    public func connection(_ connection: Connection, didRead bytes: UnsafeRawBufferPointer) {
        switch phase {
        case .streaming, .closing:
            return
        case .handling:
            // A request pipelined behind one still being answered waits, within limits.
            parser.append(bytes)
            if parser.bufferedCount > server.options.limits.maxHeaderBytes { connection.close() }
        case .idle, .head, .body:
            parser.append(bytes)
            process()
        }
    }

    public func connectionDidDrainOutput(_ connection: Connection) {
        if !unsent.isEmpty { sent() }
        if phase == .streaming { onStreamDrained?() }
    }

    private func sent() {
        let handlers = unsent
        unsent = []
        handlers.forEach { $0() }
    }

    public func connectionDidClose(_ connection: Connection) {
        sent()
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
        target = HTTP1Request.splitTarget(head.originForm)
        let (path, query) = target
        if slot == .reserve, let refusal = reserveRefusal(path) {
            if hasBody { keepAlive = false } else { _ = try? parser.nextBody() }
            finish(refusal)
            return
        }
        if let refusal = service.screen(head, path: path, query: query) {
            // An unread body ends the connection; without one the next request may follow.
            if hasBody { keepAlive = false } else { _ = try? parser.nextBody() }
            phase = .handling
            respond(refusal)
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
        let request = HTTP1Request(method: head.method, path: path, query: query, headers: fields, body: body)
        server.releaseBody(reservedBody)
        reservedBody = 0
        service.handle(request, on: self)
    }

    private func malformed(_ failure: HTTP1Failure) {
        service.count(.malformed)
        finish(service.answer(.malformed(failure)))
    }

    private func overBudget() {
        finish(service.answer(.bodyBudgetSpent))
    }

    // MARK: Answering

    /// Sends the answer to the current request; the next pipelined request follows.
    public func respond(_ response: HTTP1ServerResponse) {
        guard !connection.isClosed, phase == .handling else {
            response.onSent?()
            return
        }
        // Before the write: a write that drains at once reports it from inside.
        if let onSent = response.onSent { unsent.append(onSent) }
        // A 503 says "later": a client that stayed connected would hold a slot meanwhile
        // (512 refused long polls used to keep every other admin client out). Decided before
        // the head is written, so that it says `Connection: close`.
        if response.status == 503 { keepAlive = false }
        var head = "HTTP/1.1 \(response.status) \(HTTP1ServerResponse.statusText(response.status))\r\n"
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
    private func reserveRefusal(_ path: String) -> HTTP1ServerResponse? {
        if server.slots.promote() {
            slot = .regular
            return nil
        }
        keepAlive = false
        if service.servesFromReserve(path) { return nil }
        return service.answer(.reserveOnly)
    }

    /// From now until its next request this connection may be closed to make room.
    private func becomeIdle(_ idleness: ConnectionSlots.Idleness) {
        guard let slot else { return }
        final class Weak: @unchecked Sendable {
            weak var connection: HTTP1Connection?
            init(_ connection: HTTP1Connection) { self.connection = connection }
        }
        let target = Weak(self)
        server.slots.becameIdle(slotID, slot, idleness, ConnectionSlots.Evictor(loop: connection.loop) { target.connection?.evicted() })
    }

    /// Closed (on this connection's loop) to make room for a newer one at the cap. Its slot is
    /// the newcomer's already; a request that arrived meanwhile found that out and closed it.
    private func evicted() {
        if !connection.isClosed { connection.close() }
    }

    /// Answers and closes, whatever state the request is in.
    private func finish(_ response: HTTP1ServerResponse) {
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
        setDeadline(HTTP1Server.lingerMs)
        becomeIdle(.lingering)
    }

    /// Starts a streamed response (server-sent events): the head now, events later. Returns
    /// false for a HEAD request, which gets the head only.
    public func startStream(contentType: String) -> Bool {
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

    public func sendStreamChunk(_ bytes: [UInt8]) {
        connection.write(bytes)
    }

    /// Ends a stream (the client fell too far behind).
    public func close() { connection.close() }

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
            service.count(.timedOut(.idle))
            connection.close()
        case .head:
            service.count(.timedOut(.headers))
            finish(service.answer(.headTooSlow))
        case .body:
            service.count(.timedOut(.body))
            finish(service.answer(.bodyTooSlow))
        case .closing:
            connection.close()
        case .handling, .streaming:
            break
        }
    }
}
