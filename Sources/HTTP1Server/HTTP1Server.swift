// HTTP1Server: an HTTP/1.1 server for one service (the admin API): the pure, fuzzed request
// parser (HTTP1Parser.swift), and connections that read requests and write answers on an event
// loop within their limits (slots, timeouts, a body budget). Knows nothing of what the service
// answers. Imports Networking, MonotonicClock, Locking, HTTPGrammar and Foundation.

public import Networking
import Synchronization

/// What the connections of one listener share: the service, the limits, the connection
/// slots and the budget for request bodies.
public final class HTTP1Server: Sendable {
    public struct Options: Sendable {
        /// Regular connection slots (ConnectionSlots.swift).
        public var maxConnections: Int
        /// A request's head must arrive within this of its first byte, and its body within
        /// this of the head.
        public var readTimeoutMs: Int64
        /// A keep-alive connection with no request (or an answer the client does not read)
        /// this long is closed.
        public var idleTimeoutMs: Int64
        public var limits = HTTP1RequestParser.Limits()

        public init(maxConnections: Int, readTimeoutMs: Int64, idleTimeoutMs: Int64) {
            self.maxConnections = maxConnections
            self.readTimeoutMs = readTimeoutMs
            self.idleTimeoutMs = idleTimeoutMs
        }
    }

    /// All request bodies being read at once, over every connection.
    public static let bodyBudgetBytes = 32 << 20
    /// After a final response the connection reads (and drops) what the client still sends
    /// this long before closing, so the client sees the response rather than a reset.
    static let lingerMs: Int64 = 2000

    public let options: Options
    let service: any HTTP1Service
    let slots: ConnectionSlots
    private let bodyBytesReserved = Atomic<Int>(0)

    public init(options: Options, service: any HTTP1Service) {
        self.options = options
        self.service = service
        slots = ConnectionSlots(maxConnections: options.maxConnections) { [service] in service.count($0) }
    }

    /// The handler for a new connection of this server's listener.
    public func connection(_ connection: Connection) -> HTTP1Connection {
        HTTP1Connection(connection: connection, server: self)
    }

    /// Takes `count` bytes from the body budget; false (and nothing taken) when it is spent.
    func reserveBody(_ count: Int) -> Bool {
        let total = bodyBytesReserved.add(count, ordering: .relaxed).newValue
        guard total <= Self.bodyBudgetBytes else {
            bodyBytesReserved.subtract(count, ordering: .relaxed)
            service.count(.bodyBudgetRefused)
            return false
        }
        return true
    }

    func releaseBody(_ count: Int) {
        if count > 0 { bodyBytesReserved.subtract(count, ordering: .relaxed) }
    }

    public var bodyBytesInFlight: Int { bodyBytesReserved.load(ordering: .relaxed) }

    /// The connections holding a slot.
    public var openConnections: Int { slots.open }
}
