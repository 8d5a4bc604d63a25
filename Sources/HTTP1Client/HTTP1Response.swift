/// A header field as sent or received; names compare case-insensitively where looked up.
public struct HTTP1Header: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

/// A complete answer: status, header fields in order, and the body with its framing removed.
public struct HTTP1Response: Sendable, Equatable {
    public var status: Int
    public var reason: String
    public var headers: [HTTP1Header]
    public var body: [UInt8]
    /// The answer was larger than the caller's limit and the caller asked for it cut
    /// (`OversizedAnswer.cut`): `body` is what had come by then, the rest was not read.
    public var bodyCut: Bool

    public init(status: Int, reason: String = "", headers: [HTTP1Header] = [], body: [UInt8] = [], bodyCut: Bool = false) {
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        self.bodyCut = bodyCut
    }

    /// The first field with this name (case-insensitive).
    public func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.lowercased() == wanted }?.value
    }

    /// The body decoded as UTF-8 (invalid bytes become U+FFFD).
    public var text: String { String(decoding: body, as: UTF8.self) }
}

/// What an exchange does with an answer larger than its limit.
public enum OversizedAnswer: Sendable {
    /// Fails with `responseTooLarge`.
    case fail
    /// Returns the status and headers with the body that had come by the limit, `bodyCut` set
    /// (an answer whose head alone is over the limit still fails).
    case cut
}
