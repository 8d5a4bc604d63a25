// TestSupport: runs an external command to its end and collects what it printed.
// Imports Foundation only.
import Foundation

/// What a finished command left: its exit status and both outputs.
public struct CommandResult: Sendable {
    public let status: Int32
    public let stdout: Data
    public let err: String
    /// stdout as text.
    public var out: String { String(decoding: stdout, as: UTF8.self) }
}

public struct CommandTimedOut: Error, CustomStringConvertible {
    public let description: String
}

/// Runs `executable` (a path) with `arguments` and no standard input, and waits for it; throws
/// when it has not finished after `timeout` seconds (it is then terminated).
@discardableResult
public func run(
    _ executable: String, _ arguments: [String], workingDirectory: String? = nil,
    timeout: TimeInterval = 20
) throws -> CommandResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if let workingDirectory { process.currentDirectoryURL = URL(fileURLWithPath: workingDirectory) }
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.run()
    // Both pipes are read to their end before waiting, so a chatty child cannot block on a full pipe.
    let group = DispatchGroup()
    nonisolated(unsafe) var outData = Data()
    nonisolated(unsafe) var errData = Data()
    DispatchQueue.global().async(group: group) { outData = out.fileHandleForReading.readDataToEndOfFile() }
    DispatchQueue.global().async(group: group) { errData = err.fileHandleForReading.readDataToEndOfFile() }
    if group.wait(timeout: .now() + timeout) == .timedOut {
        process.terminate()
        throw CommandTimedOut(description: "\(executable) \(arguments.joined(separator: " ")) timed out")
    }
    process.waitUntilExit()
    return CommandResult(status: process.terminationStatus, stdout: outData, err: String(decoding: errData, as: UTF8.self))
}
