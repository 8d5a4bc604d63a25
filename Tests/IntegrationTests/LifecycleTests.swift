// LifecycleTests: what --quiet keeps of the one logger's lines (warnings, not per-connection
// info lines). Stopping is ShutdownTests'. Imports the harness's modules.
import Foundation
import Glibc
import Networking
import ProviderClient
import Testing
import TestSupport

@Suite("Logging levels of the binary")
struct LifecycleTests {
    /// `--quiet` drops the info lines (a provider connection opening) but keeps warnings (a
    /// device connection refused over `--max-connections`).
    @Test func quietKeepsWarningsAndDropsInfoLines() throws {
        let emulator = try EmulatorProcess(["--quiet", "--max-connections", "1"])
        let connection = try emulator.connect()
        _ = try connection.send(try emulator.push(String(repeating: "ab", count: 32)).request)
        let device = try emulator.address("device")
        let first = try Socket.connect(to: device)
        defer { close(first) }
        try eventually("a refused device connection is logged") {
            let second = try Socket.connect(to: device)
            close(second)
            return emulator.stderr.contains("device connection from")
        }
        #expect(emulator.stderr.contains("warning: device connection from"), "a warning says so: \(emulator.stderr)")
        #expect(emulator.stderr.contains("refused: 1 already open, the most --max-connections allows"))
        #expect(!emulator.stderr.contains("provider connection"), "an info line passed --quiet: \(emulator.stderr)")
    }
}
