import Foundation
import Networking

/// Key files `POST /api/v1/keys` may read by `path`: only inside `--keys-dir`, judged after
/// symbolic links and `..` are resolved. Every refusal is the same answer, so the API cannot
/// tell whether some file outside exists.
enum KeyFiles {
    /// A .p8 or PEM public key is a few hundred bytes.
    static let maxBytes = 64 * 1024

    /// The text of the key file at `path` (absolute, or relative to the keys directory).
    static func read(_ path: String, keysDirectory: String?) throws(AdminError) -> String {
        guard let directory = keysDirectory else {
            throw AdminError(
                400,
                "\"path\" is not accepted: the emulator was started without --keys-dir (APNS_EMULATOR_KEYS_DIR);"
                    + " send the key itself as \"pem\" (the .p8 text or a PEM public key)")
        }
        // One answer for outside, missing, unreadable and not a file alike; the path is not
        // echoed, so two refusals can be compared byte for byte.
        let refused = AdminError(
            400,
            "\"path\" names no readable key file inside --keys-dir \(directory);"
                + " give a path inside that directory (relative to it or absolute), or send the key as \"pem\"")
        guard let real = resolve(path, in: directory) else { throw refused }
        // Regular files only: a FIFO would block the event loop, a device never ends.
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: real),
            attributes[.type] as? FileAttributeType == .typeRegular,
            let size = attributes[.size] as? NSNumber, size.intValue <= maxBytes,
            let data = FileManager.default.contents(atPath: real), let text = String(data: data, encoding: .utf8)
        else {
            throw refused
        }
        return text
    }

    /// The real path of `path` when it lies inside `directory` (itself a real path); nil otherwise.
    static func resolve(_ path: String, in directory: String) -> String? {
        guard !path.isEmpty, !path.utf8.contains(0) else { return nil }
        let joined = path.hasPrefix("/") ? path : directory + "/" + path
        guard let real = FileSystem.realPath(joined) else { return nil }
        return isInside(real, directory) ? real : nil
    }

    static func isInside(_ path: String, _ directory: String) -> Bool {
        let prefix = directory.hasSuffix("/") ? directory : directory + "/"
        return path.hasPrefix(prefix) && path.count > prefix.count
    }
}
