// TestSupport: external programs some tests run (curl, nghttp, h2load, redis-server, …),
// looked up on PATH once per process; a test that needs a missing one is skipped, saying
// which Debian package brings it. Imports Foundation and Testing only.
import Foundation
import Testing

/// A program a test runs, and the Debian package that installs it (scripts/deps.sh test
/// installs them all).
public struct ExternalTool: Sendable, CustomStringConvertible {
    public let name: String
    public let package: String
    /// Where it was found (PATH, then the sbin directories, where Debian puts haproxy), or nil.
    public let path: String?

    public init(_ name: String, package: String) {
        self.name = name
        self.package = package
        path = which(name)
    }

    public var isInstalled: Bool { path != nil }
    public var description: String { package == name ? name : "\(name) (Debian package \(package))" }

    public static let curl = ExternalTool("curl", package: "curl")
    public static let nghttp = ExternalTool("nghttp", package: "nghttp2-client")
    public static let h2load = ExternalTool("h2load", package: "nghttp2-client")
    public static let openssl = ExternalTool("openssl", package: "openssl")
    public static let python3 = ExternalTool("python3", package: "python3")
    public static let redisServer = ExternalTool("redis-server", package: "redis-server")
    public static let redisCLI = ExternalTool("redis-cli", package: "redis-tools")
    public static let haproxy = ExternalTool("haproxy", package: "haproxy")
    public static let chromium = ExternalTool("chromium", package: "chromium")
    public static let chromedriver = ExternalTool("chromedriver", package: "chromium-driver")
}

extension Trait where Self == ConditionTrait {
    /// Runs the test only where every tool is installed; elsewhere it is skipped with a message
    /// naming what is missing (a machine without them still runs the rest of the suite).
    public static func requires(_ tools: ExternalTool...) -> Self {
        let missing = tools.filter { !$0.isInstalled }
        let named = missing.isEmpty ? tools : missing
        return .enabled(
            if: missing.isEmpty,
            Comment(
                rawValue: "needs \(named.map(\.description).joined(separator: " and ")), "
                    + "not installed here (scripts/deps.sh test installs \(named.count == 1 ? "it" : "them"))"))
    }
}

/// The first executable called `name` on PATH, then in the sbin directories (not on every
/// user's PATH, and where Debian installs some daemons).
public func which(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    let directories = path.split(separator: ":").map(String.init) + ["/usr/sbin", "/sbin", "/usr/local/sbin"]
    return directories.map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
}
