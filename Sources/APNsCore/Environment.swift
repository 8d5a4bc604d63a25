extension APNsEnvironment {
    /// Apple's host name for the environment (what `:authority` says to pick it).
    public var appleHost: String { self == .production ? "api.push.apple.com" : "api.sandbox.push.apple.com" }

    /// The other environment.
    public var other: APNsEnvironment { self == .production ? .sandbox : .production }

    /// Apple's host names and the environment each one selects (docs/apns-behaviour.md,
    /// "Endpoints and environments").
    /// `api.development.push.apple.com` appears in Apple's own text and behaves as the sandbox.
    /// The broadcast (`api-broadcast.…`) and channel-management (`api-manage-broadcast.…`)
    /// names of Apple's examples select the environment of the push host they stand beside,
    /// for every request sent to them (a device push, a broadcast, a certificate's check).
    public static func forAppleHost(_ host: Substring) -> APNsEnvironment? {
        // Every Apple host starts with "api"; most requests name an IP or localhost, so
        // reject those on the first byte (this runs for every request).
        guard let first = host.utf8.first, first | 0x20 == UInt8(ascii: "a") else { return nil }
        // Strip an optional ":port" and a trailing dot, and compare case-insensitively without
        // allocating.
        var name = host
        if let colon = name.lastIndex(of: ":"), !name.hasPrefix("[") { name = name[..<colon] }
        // A fully qualified name ("api.push.apple.com.") names the same host.
        if name.utf8.last == UInt8(ascii: ".") { name = name.dropLast() }
        guard let domain = dropApplePrefix(name) else { return nil }
        if domain.elementsEqual("push.apple.com".utf8, by: asciiCaseInsensitiveEqual) {
            return .production
        }
        if domain.elementsEqual("sandbox.push.apple.com".utf8, by: asciiCaseInsensitiveEqual)
            || domain.elementsEqual("development.push.apple.com".utf8, by: asciiCaseInsensitiveEqual)
        {
            return .sandbox
        }
        return nil
    }

    private static let applePrefixes = ["api.", "api-broadcast.", "api-manage-broadcast."]

    /// What follows `api.`, `api-broadcast.` or `api-manage-broadcast.`; nil for another name.
    private static func dropApplePrefix(_ name: Substring) -> Substring.UTF8View.SubSequence? {
        for prefix in applePrefixes {
            let utf8 = name.utf8
            if utf8.count > prefix.utf8.count,
                utf8.prefix(prefix.utf8.count).elementsEqual(prefix.utf8, by: asciiCaseInsensitiveEqual)
            {
                return utf8.dropFirst(prefix.utf8.count)
            }
        }
        return nil
    }

    /// The environment a request runs in: an Apple host name in `:authority` wins, then the TLS
    /// SNI, then the listener's own environment.
    public static func resolve(
        authority: Substring?, serverName: Substring?, listener: APNsEnvironment
    )
        -> APNsEnvironment
    {
        if let authority, let env = forAppleHost(authority) { return env }
        if let serverName, let env = forAppleHost(serverName) { return env }
        return listener
    }
}

@inline(__always)
func asciiLowercased(_ c: UInt8) -> UInt8 { (c >= 0x41 && c <= 0x5A) ? c | 0x20 : c }

@inline(__always)
func asciiCaseInsensitiveEqual(_ a: UInt8, _ b: UInt8) -> Bool {
    asciiLowercased(a) == asciiLowercased(b)
}
