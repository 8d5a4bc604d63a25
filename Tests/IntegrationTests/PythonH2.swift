// PythonH2: what python-h2 (the HTTP/2 layer of httpx, aioapns and kalyke-apns) makes of the
// emulator's answers around a GOAWAY, through Tests/compat/h2_answer_order.py and Debian's
// python3-h2. Imports the harness's modules.
import APNsCore
import Foundation
import Testing
import TestSupport

enum PythonH2 {
    static let python = "/usr/bin/python3"

    /// Skips a test where Debian's python3-h2 is missing (scripts/deps.sh test installs it).
    static let installed = ConditionTrait.enabled(
        if: (try? run(python, ["-c", "import h2"]))?.status == 0,
        Comment(rawValue: "needs the Debian package python3-h2: run scripts/deps.sh test"))

    /// One push to `token`, then `count` at once, on one connection to the emulator's h2c
    /// sandbox listener: what python-h2 reported, in order ("answer 200", "reset 7",
    /// "goaway", "eof", "protocol-error: …").
    static func answerOrder(_ emulator: EmulatorProcess, token: String, count: Int) throws -> [String] {
        let address = try emulator.address("h2cSandbox")
        let script = URL(fileURLWithPath: PackageRoot.path).appendingPathComponent("Tests/compat/h2_answer_order.py").path
        let result = try run(
            python,
            [script, address.host, String(address.port), token, try emulator.providerToken(), EmulatorProcess.bundleID, String(count)])
        #expect(result.status == 0, "\(result.err)")
        return (try JSONValue.parse(Array(result.stdout))).arrayValue?.compactMap(\.stringValue) ?? []
    }
}
