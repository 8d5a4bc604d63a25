public import Foundation

extension Thread {
    /// Linux keeps this many bytes of a thread's name (16 with the terminating zero); a longer
    /// name is refused whole.
    public static let systemNameLimit = 15

    /// A thread whose name the system shows (`top -H`, `ps -L`, `/proc/PID/task/*/comm`, gdb),
    /// so that one busy thread can be told from another. The thread names itself as it starts:
    /// Foundation on Linux hands a name to the system only once the thread exists, and a
    /// thread that set `Thread.current.name` before its starter had recorded it was named
    /// nowhere (one loop in three). The name is cut to `systemNameLimit` bytes (ASCII names
    /// are expected).
    public convenience init(named name: String, block: @escaping @Sendable () -> Void) {
        let systemName = String(decoding: name.utf8.prefix(Self.systemNameLimit), as: UTF8.self)
        self.init {
            // What `pthread_setname_np` does, which Swift's Glibc module does not export.
            try? systemName.write(toFile: "/proc/thread-self/comm", atomically: false, encoding: .utf8)
            block()
        }
        self.name = name
    }
}
