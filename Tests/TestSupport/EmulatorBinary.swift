// TestSupport: where the `apns-emulator` binary under test is, and the package it is built
// from. Imports Foundation only.
import Foundation

public enum EmulatorBinary {
    /// `APNS_EMULATOR_BIN` (scripts/test and scripts/test-sanitizers set it), else the binary
    /// in the directory `swift build --show-bin-path` names for this package: the build the
    /// tests came from, whatever its scratch path or configuration, never a fixed path that can
    /// be stale. Asked once per process.
    public static let path: String = {
        if let path = ProcessInfo.processInfo.environment["APNS_EMULATOR_BIN"], !path.isEmpty { return path }
        // No fallback path: a test that cannot find the binary fails saying so.
        let unknown = "(no apns-emulator: set APNS_EMULATOR_BIN, or run from a package where `swift build --show-bin-path` works)"
        guard let swift = which("swift"),
            let answer = try? run(swift, ["build", "--show-bin-path"], workingDirectory: PackageRoot.path, timeout: 120),
            answer.status == 0,
            let directory = answer.out.split(separator: "\n").last.map(String.init)
        else { return unknown }
        return directory + "/apns-emulator"
    }()
}

public enum PackageRoot {
    /// The package's root directory, from this file's place in it (Tests/TestSupport/).
    public static let path: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.path
    }()
}
