/// How the provider endpoint pushes back under load, as Apple's does when a provider pushes
/// hard (all off by default; `--profile realistic` turns on a preset). See docs/load-testing.md,
/// "Apple's behaviour under load".
public struct LoadBehaviour: Sendable {
    /// After `ExpiredProviderToken`: SETTINGS MAX_CONCURRENT_STREAMS 1 and RST_STREAM
    /// REFUSED_STREAM for the streams already sent; back to the full limit after a success.
    public var streamLimitDrop = false
    /// Every answer waits this long, plus up to `responseJitterMs` more (uniformly).
    public var responseLatencyMs = 0
    public var responseJitterMs = 0
    /// At most this many answers per second on one connection (nil: no cap); the rest queue.
    public var answersPerSecondPerConnection: Int?
    /// More than `count` new provider connections within `windowMs` (all peers together) are
    /// closed on arrival until the window ends.
    public var connectionChurn: (count: Int, windowMs: Int64)?
    /// A connection whose error points (see `ErrorBudget`) within `windowMs` reach `points` is
    /// ended with GOAWAY (nil: never).
    public var errorDisconnect: (points: Int, windowMs: Int64)?

    public init() {}

    public var delaysAnswers: Bool { responseLatencyMs > 0 || responseJitterMs > 0 || answersPerSecondPerConnection != nil }
}

/// Paces one connection's answers to a rate: each answer takes the next free slot.
public struct AnswerPacer: Sendable {
    public let intervalNanos: UInt64
    private var nextFreeNanos: UInt64 = 0

    public init(perSecond: Int) { intervalNanos = 1_000_000_000 / UInt64(max(1, perSecond)) }

    /// How long the answer due now must wait (ns).
    public mutating func delay(nowNanos: UInt64) -> UInt64 {
        let slot = max(nowNanos, nextFreeNanos)
        nextFreeNanos = slot + intervalNanos
        return slot - nowNanos
    }
}

/// Counts new connections in fixed windows; over the limit, the rest of the window refuses.
public struct ChurnLimiter: Sendable {
    public let limit: Int
    public let windowMs: Int64
    private var windowStartMs: Int64?
    private var admitted = 0

    public init(limit: Int, windowMs: Int64) {
        self.limit = limit
        self.windowMs = windowMs
    }

    public mutating func admit(nowMs: Int64) -> Bool {
        if windowStartMs.map({ nowMs - $0 >= windowMs }) ?? true {
            windowStartMs = nowMs
            admitted = 0
        }
        guard admitted < limit else { return false }
        admitted += 1
        return true
    }
}

/// "APNs disconnects a provider connection with too many error conditions, and sooner with
/// certain ones such as BadDeviceToken; 410 is not an error condition" (Apple's page on handling
/// responses; the numbers are not published). Each error answer costs points on its
/// connection; when the points of the last `windowMs` reach `limit`, the connection is ended.
public struct ErrorBudget: Sendable {
    /// What a `BadDeviceToken` costs; any other counted error costs 1 (chosen).
    public static let badDeviceTokenPoints = 5

    public let limit: Int
    public let windowMs: Int64
    /// The charges of the window, oldest first: at most `limit` of them, since reaching the
    /// limit ends the connection.
    private var charges: [(atMs: Int64, points: Int)] = []
    private var total = 0

    public init(limit: Int, windowMs: Int64) {
        self.limit = limit
        self.windowMs = windowMs
    }

    /// What an answer costs: 4xx errors count, `BadDeviceToken` more; 410 does not (Apple says
    /// so), nor do 429s (APNs' own pushback, which a provider is told to retry), nor 5xx (the
    /// server's failures, not the provider's).
    public static func points(status: Int, reason: APNsReason?) -> Int {
        guard (400..<500).contains(status), status != 410, status != 429 else { return 0 }
        return reason == .badDeviceToken ? badDeviceTokenPoints : 1
    }

    /// Counts an answer's `points` (> 0); true when the connection has now made too many errors.
    public mutating func charge(_ points: Int, nowMs: Int64) -> Bool {
        var expired = 0
        while expired < charges.count, charges[expired].atMs <= nowMs - windowMs {
            total -= charges[expired].points
            expired += 1
        }
        if expired > 0 { charges.removeFirst(expired) }
        charges.append((nowMs, points))
        total += points
        return total >= limit
    }
}
