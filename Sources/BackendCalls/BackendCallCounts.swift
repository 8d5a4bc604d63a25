/// Totals since start-up or the last reset, for `/metrics`.
public struct BackendCallCounts: Sendable, Equatable {
    /// Calls the backend answered with a final status (state `done`, 2xx to 4xx).
    public var sent = 0
    /// Calls whose every attempt failed, or that could not be sent at all (state `failed`).
    public var failed = 0
    /// Calls never sent because the queue was full (state `dropped`).
    public var dropped = 0
    /// Attempts made, retries included.
    public var attempts = 0
    /// Calls queued or in flight now.
    public var queued = 0

    public init(sent: Int = 0, failed: Int = 0, dropped: Int = 0, attempts: Int = 0, queued: Int = 0) {
        self.sent = sent
        self.failed = failed
        self.dropped = dropped
        self.attempts = attempts
        self.queued = queued
    }
}
