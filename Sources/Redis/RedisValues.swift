/// A failed Redis call. `kind` says what the caller can do about it: after `.connection`,
/// `.timeout` and `.protocolError` the connection is broken and a new one is needed; `.server`
/// is an error reply (the connection stays usable); `.badURL` comes from `RedisURL(parsing:)`.
public struct RedisError: Error, CustomStringConvertible, Sendable {
    public enum Kind: Sendable, Equatable {
        case connection, timeout, protocolError, server, badURL
    }

    public let kind: Kind
    /// For `.server`, Redis's own error text (e.g. "NOSCRIPT No matching script…").
    public let description: String

    public init(_ kind: Kind, _ description: String) {
        self.kind = kind
        self.description = description
    }
}

/// One reply. RESP3 types that hiredis may return are folded into these: map → flat
/// key/value array, set/push → array, double/bignum/verbatim → string, bool → integer 0/1.
public enum RedisReply: Sendable, Equatable {
    /// A bulk string (binary-safe).
    case string([UInt8])
    /// A simple string such as `OK` or `PONG`.
    case status(String)
    case integer(Int64)
    case array([RedisReply])
    /// A nil bulk string or nil array (GET of a missing key, XREAD BLOCK timing out).
    case null
    /// Only inside arrays (EXEC) and pipelines; a top-level error reply throws `.server`.
    case error(String)

    /// The bytes of a string or status reply.
    public var bytes: [UInt8]? {
        switch self {
        case .string(let bytes): return bytes
        case .status(let text): return Array(text.utf8)
        default: return nil
        }
    }

    /// A string reply that is valid UTF-8, or a status reply.
    public var text: String? {
        switch self {
        case .string(let bytes): return String(validating: bytes, as: UTF8.self)
        case .status(let text): return text
        default: return nil
        }
    }

    /// An integer reply, or a string reply holding a decimal integer (GET of an INCR'd key).
    public var int: Int64? {
        switch self {
        case .integer(let value): return value
        case .string(let bytes): return String(validating: bytes, as: UTF8.self).flatMap { Int64($0) }
        default: return nil
        }
    }

    /// The elements of an array reply.
    public var elements: [RedisReply]? {
        if case .array(let elements) = self { return elements }
        return nil
    }
}

/// One argument of a command, sent binary-safe.
public enum RedisArgument: Sendable, Equatable, ExpressibleByStringLiteral {
    case bytes([UInt8])
    case text(String)

    public init(stringLiteral value: String) { self = .text(value) }

    /// An integer in decimal, the way Redis expects numbers.
    public static func int(_ value: Int) -> RedisArgument { .text(String(value)) }
    public static func int(_ value: Int64) -> RedisArgument { .text(String(value)) }
}
