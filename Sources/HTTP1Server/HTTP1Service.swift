/// What an `HTTP1Server` serves: the service judges and answers requests, words the refusals
/// the server makes on its own (so their text can name the service's settings), and counts
/// what the server did. Called on the connection's event loop, except `count`, which any
/// thread may call.
public protocol HTTP1Service: AnyObject, Sendable {
    /// Judges a complete head before its body is read: nil to go on, or the answer that
    /// refuses it (the connection stays open when the request has no body).
    func screen(_ head: HTTP1RequestHead, path: String, query: [String: String]) -> HTTP1ServerResponse?
    /// Answers a request, now or later, with `connection.respond` (or a stream).
    func handle(_ request: HTTP1Request, on connection: HTTP1Connection)
    /// Whether a connection in the reserve may serve this path (health checks).
    func servesFromReserve(_ path: String) -> Bool
    /// The answer to a request the server refuses itself.
    func answer(_ refusal: HTTP1Refusal) -> HTTP1ServerResponse
    func count(_ event: HTTP1ServerEvent)
}

/// Why the server answered without asking the service.
public enum HTTP1Refusal: Sendable, Equatable {
    /// The request broke HTTP/1.1 syntax or framing (the connection closes).
    case malformed(HTTP1Failure)
    /// Every connection place is taken, none of them idle (503, then closed).
    case noPlace
    /// A connection from the reserve asked for something else than a health check (503).
    case reserveOnly
    /// The bodies being read take the whole body budget (503).
    case bodyBudgetSpent
    /// The head, or the body, did not arrive within the read timeout (408).
    case headTooSlow, bodyTooSlow
}

/// What the server counts for the service's metrics.
public enum HTTP1ServerEvent: Sendable, Equatable {
    /// A connection found no place (answered `noPlace`).
    case connectionRefused
    /// An idle connection was closed to make room for a new one.
    case connectionEvicted
    case bodyBudgetRefused
    case malformed
    case timedOut(HTTP1Timeout)
}

public enum HTTP1Timeout: String, Sendable {
    case headers, body, idle
}
