public import Foundation

extension Thread {
    /// Linux keeps this many bytes of a thread's name (16 with the terminating zero); a longer
    /// name is refused whole.
    public static let systemNameLimit = 15

    /// A thread whose name the system shows (`top -H`, `ps -L`, `/proc/PID/task/*/comm`, gdb),
    /// so that one busy thread can be told from another. Foundation on Linux hands a name to
    /// the system only when it is set on the running thread itself; the name is cut to
    /// `systemNameLimit` bytes (ASCII names are expected).
    public convenience init(named name: String, block: @escaping @Sendable () -> Void) {
        let systemName = String(decoding: name.utf8.prefix(Self.systemNameLimit), as: UTF8.self)
        self.init {
            Thread.current.name = systemName
            block()
        }
        self.name = name
    }
}
