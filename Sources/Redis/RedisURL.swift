/// Where a Redis server is and how to log in: `redis://[[user]:password@]host[:port][/db]`.
///
/// User and password may be percent-encoded (for `@`, `:` or `/` in a password). An IPv6
/// host is written in brackets: `redis://[::1]:6380`. TLS (`rediss://`), Unix sockets and
/// query options are not supported and are rejected rather than ignored.
public struct RedisURL: Sendable, Equatable {
    public var host: String
    public var port: Int
    public var database: Int
    /// Sent with AUTH (Redis 6 ACL users) only when a password is set.
    public var username: String?
    public var password: String?

    public init(
        host: String = "127.0.0.1", port: Int = 6379, database: Int = 0,
        username: String? = nil, password: String? = nil
    ) {
        self.host = host
        self.port = port
        self.database = database
        self.username = username
        self.password = password
    }

    public init(parsing text: String) throws(RedisError) {
        // Messages quote the URL without its password: they end up in logs.
        let shown = Self.redact(text)
        func bad(_ why: String) -> RedisError { RedisError(.badURL, "redis URL '\(shown)': \(why)") }

        let scheme = "redis://"
        guard text.lowercased().hasPrefix(scheme) else {
            if text.lowercased().hasPrefix("rediss://") { throw bad("TLS (rediss://) is not supported") }
            throw bad("expected redis://[[user]:password@]host[:port][/db]")
        }
        var rest = Substring(text.dropFirst(scheme.count))
        if rest.contains("?") || rest.contains("#") { throw bad("query options are not supported") }

        // The last '@' ends the credentials: the host and db part cannot contain one.
        var username: String?
        var password: String?
        if let at = rest.lastIndex(of: "@") {
            let credentials = rest[..<at]
            rest = rest[rest.index(after: at)...]
            guard let colon = credentials.firstIndex(of: ":") else {
                throw bad("credentials must be [user]:password")
            }
            guard let user = Self.percentDecoded(credentials[..<colon]),
                let pass = Self.percentDecoded(credentials[credentials.index(after: colon)...])
            else {
                throw bad("bad percent-encoding in the credentials")
            }
            username = user.isEmpty ? nil : user
            password = pass
        }

        var database = 0
        if let slash = rest.firstIndex(of: "/") {
            let db = rest[rest.index(after: slash)...]
            rest = rest[..<slash]
            if !db.isEmpty {
                guard Self.isDigits(db), let number = Int(db) else {
                    throw bad("database '\(db)' is not a number (0, 1, …)")
                }
                database = number
            }
        }

        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw bad("missing ']' after the IPv6 address") }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw bad("expected ':port' after ']'") }
                portText = after.dropFirst()
            }
        } else if let colon = rest.firstIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        if host.isEmpty { throw bad("no host") }
        var port = 6379
        if let portText {
            guard Self.isDigits(portText), let number = Int(portText), (1...65535).contains(number) else {
                throw bad("port '\(portText)' is not a number from 1 to 65535")
            }
            port = number
        }
        self.init(host: String(host), port: port, database: database, username: username, password: password)
    }

    /// The URL with the password replaced by `***`, for logs and messages.
    public var redacted: String {
        var text = "redis://"
        if password != nil { text += "\(username ?? ""):***@" }
        text += host.contains(":") ? "[\(host)]" : host
        text += ":\(port)/\(database)"
        return text
    }

    /// Host and port only, for error messages.
    var endpoint: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// `text` with whatever follows the first ':' of the credentials replaced by `***`.
    static func redact(_ text: String) -> String {
        guard let schemeEnd = text.firstRange(of: "://"),
            let at = text[schemeEnd.upperBound...].lastIndex(of: "@")
        else { return text }
        let credentials = text[schemeEnd.upperBound..<at]
        guard let colon = credentials.firstIndex(of: ":") else { return text }
        return String(text[..<text.index(after: colon)]) + "***" + String(text[at...])
    }

    static func isDigits(_ text: Substring) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }

    static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var utf8 = text.utf8[...]
        while let byte = utf8.popFirst() {
            if byte == UInt8(ascii: "%") {
                guard utf8.count >= 2,
                    let value = UInt8(String(decoding: utf8.prefix(2), as: UTF8.self), radix: 16)
                else { return nil }
                bytes.append(value)
                utf8 = utf8.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }
}
