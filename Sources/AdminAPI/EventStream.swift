import APNsCore
import BackendCalls
import HTTP1Server
import Locking
import Networking

/// The bytes of one server-sent event, made once and shared by every client that gets it.
final class EventChunk: Sendable {
    let bytes: [UInt8]
    init(_ bytes: [UInt8]) { self.bytes = bytes }

    static func notification(_ record: NotificationRecord) -> EventChunk {
        var chunk = Array("event: notification\nid: \(record.sequence)\ndata: ".utf8)
        AdminJSON.record(record).append(to: &chunk)
        chunk.append(contentsOf: "\n\n".utf8)
        return EventChunk(chunk)
    }

    /// An app backend call was made or changed state (no `id:`: the ids count notifications).
    static func backendCall(_ call: BackendCallRecord) -> EventChunk {
        var chunk = Array("event: backendCall\ndata: ".utf8)
        call.json.append(to: &chunk)
        chunk.append(contentsOf: "\n\n".utf8)
        return EventChunk(chunk)
    }

    /// A broadcast channel was created, deleted or published to (as `GET /api/v1/channels`
    /// shows it).
    static func channel(_ json: JSONValue) -> EventChunk {
        var chunk = Array("event: channel\ndata: ".utf8)
        json.append(to: &chunk)
        chunk.append(contentsOf: "\n\n".utf8)
        return EventChunk(chunk)
    }

    static let reset = EventChunk(Array("event: reset\ndata: {}\n\n".utf8))
    /// Every 15 s: keeps proxies from closing an idle stream, and lets a client tell a stream
    /// that went quiet (a proxy buffering it, a dead path) from one with nothing to say (a
    /// comment would do the first, but `EventSource` does not show comments).
    static let ping = EventChunk(Array("event: ping\ndata: {}\n\n".utf8))
}

/// One `/api/v1/events` client. Threads that change records only append to its queue
/// (bounded, a lock held for an append); the client's event loop moves the queue into the
/// socket as fast as the client reads. A client that falls `maxQueuedBytes` behind is dropped
/// (it reconnects and reloads, as the web UI does), so a client that never reads costs a
/// bounded amount of memory and the push path nothing more than the append.
final class EventStreamClient: @unchecked Sendable {
    static let maxQueuedBytes = 8 << 20
    /// Bytes handed to the connection at a time; the rest waits in the queue.
    static let outputWatermark = 256 << 10

    let id: UInt64
    let query: NotificationQuery
    let loop: EventLoop
    private let queue = Locked(Queue())
    /// Read and written on `loop` only.
    private weak var http: HTTP1Connection?
    /// Runs on `loop` after the client was disconnected for falling behind.
    private let dropped: @Sendable (EventStreamClient) -> Void

    private struct Queue {
        var chunks: [EventChunk] = []
        var head = 0
        var bytes = 0
        var drainScheduled = false
        var overflowed = false
    }

    init(id: UInt64, query: NotificationQuery, http: HTTP1Connection, dropped: @escaping @Sendable (EventStreamClient) -> Void) {
        self.id = id
        self.query = query
        self.loop = http.connection.loop
        self.http = http
        self.dropped = dropped
    }

    /// Queues an event; any thread.
    func enqueue(_ chunk: EventChunk) {
        enum Next { case nothing, drain, drop }
        let next = queue.withLock { q -> Next in
            guard !q.overflowed else { return .nothing }
            if q.bytes + chunk.bytes.count > Self.maxQueuedBytes {
                q.overflowed = true
                q.chunks = []
                q.head = 0
                q.bytes = 0
                return .drop
            }
            q.chunks.append(chunk)
            q.bytes += chunk.bytes.count
            guard !q.drainScheduled else { return .nothing }
            q.drainScheduled = true
            return .drain
        }
        switch next {
        case .nothing: break
        case .drain: loop.execute { self.drain() }
        case .drop:
            loop.execute {
                self.http?.close()
                self.dropped(self)
            }
        }
    }

    /// Moves queued events into the connection until its output holds `outputWatermark`;
    /// the connection calls again when its output has drained. On `loop`.
    func drain() {
        guard let http, !http.isClosed else { return }
        while http.connection.bufferedOutputCount < Self.outputWatermark {
            let chunk = queue.withLock { q -> EventChunk? in
                guard q.head < q.chunks.count else {
                    q.chunks.removeAll(keepingCapacity: true)
                    q.head = 0
                    q.drainScheduled = false
                    return nil
                }
                let chunk = q.chunks[q.head]
                q.head += 1
                q.bytes -= chunk.bytes.count
                // Drop the consumed prefix now and then instead of shifting on every event.
                if q.head >= 1024 && q.head * 2 >= q.chunks.count {
                    q.chunks.removeFirst(q.head)
                    q.head = 0
                }
                return chunk
            }
            guard let chunk else { return }
            http.sendStreamChunk(chunk.bytes)
        }
    }
}
