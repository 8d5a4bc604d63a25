import Foundation
import Glibc
import Scenarios
import Testing
import TestSupport

/// examples/scenarios against examples/backend/backend.py: real hook calls from the emulator
/// to a real backend process (the emulator's BackendCaller sends them).
@Suite("Scenarios: the examples against the example backend")
struct ExampleBackendTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test(.requires(.python3))
    func reinstallUploadsTheNewToken() throws {
        let backend = try BackendProcess(buggy: false)
        defer { backend.stop() }
        let scenario = try ScenarioParser.parse(
            file: Self.root.appendingPathComponent("examples/scenarios/reinstall-uploads-new-token.json").path,
            variables: ["BACKEND": backend.url])
        let report = ScenarioRunner.run(scenario, options: ScenarioRunner.Options(workingDirectory: Self.root.path))
        let printer = ReportPrinter(ascii: true)
        #expect(report.passed, "\((report.steps.map(printer.step) + [printer.footer(report)]).joined(separator: "\n"))")
    }
}

/// `python3 examples/backend/backend.py --port 0`, its URL read from the line it prints.
final class BackendProcess: Sendable {
    let process: Process
    let url: String

    struct StartError: Error, CustomStringConvertible { let description: String }

    init(buggy: Bool) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: ExternalTool.python3.path ?? "/usr/bin/python3")
        process.arguments =
            [ExampleBackendTests.root.appendingPathComponent("examples/backend/backend.py").path, "--port", "0"]
            + (buggy ? ["--buggy"] : [])
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        // "listening on http://127.0.0.1:PORT", read on a thread so a silent backend cannot hang the test.
        let line = LineReader(output.fileHandleForReading)
        guard let text = line.wait(seconds: 10), let start = text.range(of: "http://") else {
            process.terminate()
            throw StartError(description: "backend.py did not say where it listens within 10 s")
        }
        self.process = process
        url = String(text[start.lowerBound...].prefix { !$0.isWhitespace })
    }

    func stop() {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}

/// The first line of a pipe, read on its own thread.
private final class LineReader: @unchecked Sendable {
    private var line: String?
    private let ready = DispatchSemaphore(value: 0)

    init(_ handle: FileHandle) {
        Thread.detachNewThread { [self] in
            var data = Data()
            while !data.contains(0x0A) {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                data.append(chunk)
            }
            line = String(decoding: data, as: UTF8.self)
            ready.signal()
        }
    }

    func wait(seconds: Double) -> String? {
        ready.wait(timeout: .now() + seconds) == .success ? line : nil
    }
}
