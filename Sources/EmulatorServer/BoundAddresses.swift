public import APNsCore
import Foundation
import Glibc
public import Networking

/// The addresses actually bound (real ports when 0 was asked for).
public struct BoundAddresses: Sendable {
    /// `--listen` listeners (environment by SNI / `:authority`).
    public var listen: [HostPort] = []
    public var sandbox: HostPort?
    public var production: HostPort?
    public var h2cSandbox: HostPort?
    public var h2cProduction: HostPort?
    /// Channel management (`api-manage-broadcast` on Apple's ports 2195 and 2196).
    public var channelSandbox: HostPort?
    public var channelProduction: HostPort?
    public var admin: HostPort?
    public var device: HostPort?
    public var caFile: String?

    public var json: JSONValue {
        func text(_ address: HostPort?) -> JSONValue { address.map { .string($0.description) } ?? .null }
        return [
            "listen": .array(listen.map { .string($0.description) }),
            "sandbox": text(sandbox), "production": text(production), "h2cSandbox": text(h2cSandbox),
            "h2cProduction": text(h2cProduction),
            "channelSandbox": text(channelSandbox), "channelProduction": text(channelProduction), "admin": text(admin), "device": text(device),
            "caFile": caFile.map(JSONValue.string) ?? .null, "pid": .int(Int64(getpid())),
        ]
    }
}

/// A path as the emulator's own directory resolves it: what the ready file, `/api/v1/info`
/// and `/api/v1/keys` show is used from other directories (`load`, a test's working
/// directory), where a relative path names another file.
func absolutePath(_ path: String) -> String {
    path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
}
