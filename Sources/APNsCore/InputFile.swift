import Glibc

/// A file someone names on the command line (a config, scenario, backend or fault-rule file,
/// a payload), read with a size cap checked before reading: a wrong path to a 200 MB log is
/// refused at once instead of being read whole into memory.
public enum InputFile {
    /// 16 MiB: far more than any of these files needs (a config makes thousands of devices
    /// with one `count` entry).
    public static let maxBytes = 16 << 20

    /// What went wrong, in words that follow the file's name ("big.json: the file is …").
    public enum ReadError: Error, Sendable, Equatable, CustomStringConvertible {
        /// Why, in the system's words.
        case unreadable(String)
        /// The file's size (nil when only reading found it too long: a pipe) and the cap.
        case tooLarge(size: Int?, limit: Int)

        public var description: String {
            switch self {
            case .unreadable(let reason): return "cannot read the file (\(reason))"
            case .tooLarge(let size?, let limit):
                return "the file is \(InputFile.describe(size)), over the limit of \(InputFile.describe(limit))"
            case .tooLarge(nil, let limit): return "the file holds more than the limit of \(InputFile.describe(limit))"
            }
        }
    }

    /// The file's bytes; a regular file larger than `limit` is refused from its size alone,
    /// anything else (a pipe, /dev/stdin) once more than `limit` bytes have come.
    public static func read(_ path: String, limit: Int = maxBytes) throws(ReadError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .unreadable(systemError()) }
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0 else { throw .unreadable(systemError()) }
        if status.st_mode & S_IFMT == S_IFDIR { throw .unreadable("it is a directory") }
        if status.st_mode & S_IFMT == S_IFREG, Int(status.st_size) > limit { throw .tooLarge(size: Int(status.st_size), limit: limit) }

        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while bytes.count <= limit {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count == 0 { return bytes }
            if count < 0 {
                if errno == EINTR { continue }
                throw .unreadable(systemError())
            }
            bytes.append(contentsOf: chunk[0..<count])
        }
        throw .tooLarge(size: nil, limit: limit)
    }

    /// "209715200 bytes (200 MiB)", or "512 bytes" when small.
    static func describe(_ bytes: Int) -> String {
        guard bytes >= 1 << 20 else { return "\(bytes) bytes" }
        let mebibytes = Double(bytes) / Double(1 << 20)
        let shown = mebibytes == mebibytes.rounded() ? String(Int(mebibytes)) : String(Double(Int(mebibytes * 10)) / 10)
        return "\(bytes) bytes (\(shown) MiB)"
    }

    private static func systemError() -> String { String(cString: strerror(errno)) }
}
