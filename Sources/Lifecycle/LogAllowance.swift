// LogAllowance: a bound on lines a client can cause at will (one per stream it resets), so a
// hostile or broken one cannot fill the disk with the log: past the allowance lines are
// counted, and the next line written says how many were left out.
import Synchronization

public final class LogAllowance: Sendable {
    private struct Window {
        var startMs: Int64
        var written = 0
        var skipped = 0
    }
    private let window: Mutex<Window>
    public let lines: Int
    public let windowMilliseconds: Int64

    public init(lines: Int, windowMilliseconds: Int64) {
        self.lines = lines
        self.windowMilliseconds = windowMilliseconds
        window = Mutex(Window(startMs: Int64.min / 2))
    }

    /// Whether a line may be written now (`nowMs` on a monotonic clock): nil to leave it out,
    /// else what to add to it (empty, or how many like it were left out before it).
    public func take(nowMs: Int64) -> String? {
        window.withLock { w in
            if nowMs - w.startMs >= windowMilliseconds {
                let skipped = w.skipped
                w = Window(startMs: nowMs, written: 1)
                guard skipped > 0 else { return "" }
                return " (\(skipped) more line\(skipped == 1 ? "" : "s") like it not logged: at most \(lines) every \(windowMilliseconds / 1000) s)"
            }
            guard w.written < lines else {
                w.skipped += 1
                return nil
            }
            w.written += 1
            return ""
        }
    }
}
