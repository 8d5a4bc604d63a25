import Glibc

/// File-system calls that hand back C memory.
public enum FileSystem {
    /// The absolute path with every symbolic link, `.` and `..` resolved; nil when some part
    /// of it does not exist or cannot be searched.
    public static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
