import AdminClient

/// Why a step failed: a message, and for expectations what was expected and what was seen.
struct StepFailure: Error {
    var message: String
    var expected: String?
    var seen: String?

    init(_ message: String, expected: String? = nil, seen: String? = nil) {
        self.message = message
        self.expected = expected
        self.seen = seen
    }

    /// An admin API error as a step failure (the emulator refused, or could not be reached).
    init(_ error: EmulatorAdminError, doing what: String) {
        self.init("\(what): \(error.status == 0 ? error.message : "the emulator answered \(error.status): \(error.message)")")
    }
}

/// Runs an admin call, turning its error into a step failure that says what was being done.
func admin<T>(_ what: @autoclosure () -> String, _ call: () throws(EmulatorAdminError) -> T) throws(StepFailure) -> T {
    do { return try call() } catch { throw StepFailure(error, doing: what()) }
}
