// Lifecycle: how the server's long-lived parts start, stop and report: the Service protocol,
// the ServiceGroup that starts them in order and stops them in reverse, and the one Logger with
// levels they are given. Imports Glibc, Locking and MonotonicClock only.
import Glibc

/// Where the server's parts write what happened, one line per event. Passed down at
/// construction, never looked up globally. `--quiet` sets the minimum to `.warning`: the
/// banner and per-connection lines go, a failing disk or a lost Redis still shows.
public struct Logger: Sendable {
    public enum Level: Int, Sendable, Comparable, CaseIterable {
        case debug, info, warning, error
        public static func < (a: Level, b: Level) -> Bool { a.rawValue < b.rawValue }
    }

    public let minimum: Level
    private let stamp: @Sendable () -> String
    private let write: @Sendable (String) -> Void

    /// Lines go to `write` (standard error by default), each opened by `stamp()` and a space.
    public init(
        minimum: Level = .info, stamp: @escaping @Sendable () -> String,
        write: @escaping @Sendable (String) -> Void = Logger.standardError
    ) {
        self.minimum = minimum
        self.stamp = stamp
        self.write = write
    }

    /// A logger that writes nothing (a part built without one).
    public static let silent = Logger(minimum: .error, stamp: { "" }, write: { _ in })

    /// One write(2) per line, so lines from several threads never interleave mid-line.
    public static let standardError: @Sendable (String) -> Void = { line in
        var bytes = Array(line.utf8)
        bytes.withUnsafeMutableBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(STDERR_FILENO, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { return }
                offset += written
            }
        }
    }

    public func willLog(_ level: Level) -> Bool { level >= minimum }

    /// The message is built only when the level is logged. Warnings and errors say so after
    /// the time (`… warning: …`), so they can be found among the rest; a line break inside a
    /// message (a name someone chose) is written as `\n`, so one event stays one line.
    public func log(_ level: Level, _ message: @autoclosure () -> String) {
        guard level >= minimum else { return }
        var text = message()
        if text.utf8.contains(where: { $0 == 0x0A || $0 == 0x0D }) {
            var escaped = ""
            for character in text.unicodeScalars {
                switch character {
                case "\n": escaped += "\\n"
                case "\r": escaped += "\\r"
                default: escaped.unicodeScalars.append(character)
                }
            }
            text = escaped
        }
        let marker = level == .warning ? "warning: " : level == .error ? "error: " : ""
        write("\(stamp()) \(marker)\(text)\n")
    }

    public func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
    public func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    public func error(_ message: @autoclosure () -> String) { log(.error, message()) }
}
