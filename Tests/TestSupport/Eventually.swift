// TestSupport: what the test targets share and none of them owns: waiting for a condition,
// external tools (looked up once, missing ones skip the tests that need them), running a
// command, the emulator binary under test, free ports and raw HTTP/2 bytes.
// Imports Foundation, Glibc and Testing only, so any test target can use it without linking
// the package's own modules.
import Foundation
import Glibc
import Testing

/// Polls `condition` every `interval` seconds until it holds or `seconds` pass, and says
/// whether it held. This is how a test waits for something to happen (a gauge in /metrics, a
/// record's outcome, a file appearing, a socket closing, a process exiting), never for a fixed
/// time: the deadline is a failure condition only, never a measurement.
public func eventually(
    _ seconds: Double = 20, pollingEvery interval: Double = 0.01,
    _ condition: () throws -> Bool
) throws -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
    while true {
        if try condition() { return true }
        if ContinuousClock.now >= deadline { return false }
        usleep(useconds_t(interval * 1_000_000))
    }
}

/// `eventually` for a test that cannot go on without the condition: throws, naming what did
/// not happen and where, once `seconds` pass.
public func eventually(
    _ what: String, seconds: Double = 5, pollingEvery interval: Double = 0.002,
    sourceLocation: SourceLocation = #_sourceLocation, _ condition: () throws -> Bool
) throws {
    guard try eventually(seconds, pollingEvery: interval, condition) else {
        throw TimedOut(description: "not within \(seconds) s: \(what) (\(sourceLocation))")
    }
}

/// What the throwing `eventually` throws.
public struct TimedOut: Error, CustomStringConvertible {
    public let description: String
}
