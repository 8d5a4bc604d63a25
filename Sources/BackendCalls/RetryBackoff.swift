/// How long to wait before the next attempt: `baseMs` after the first failure, doubling after
/// each further one, at most `maxMs`; up to a tenth less at random, so devices whose calls
/// failed together do not all come back in the same millisecond.
struct RetryBackoff: Sendable {
    let baseMs: Int
    let maxMs: Int

    init(baseMs: Int, maxMs: Int) {
        self.baseMs = max(1, baseMs)
        self.maxMs = max(self.baseMs, maxMs)
    }

    /// The wait after `failedAttempts` attempts (1 or more) have failed.
    func delayMs(afterFailedAttempts failedAttempts: Int) -> Int {
        let doublings = min(max(0, failedAttempts - 1), 30)
        let full = min(maxMs, baseMs << doublings)
        return full - Int.random(in: 0...(full / 10))
    }
}
