/// Why an exchange failed, with where it was when it did. The message is written for people
/// (it ends up in admin errors and in backend call records); `kind` and `phase` are for code.
public struct HTTP1ClientError: Error, CustomStringConvertible, Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// The URL or the request cannot be sent as given; nothing was sent.
        case invalidRequest
        /// An https:// URL: this client speaks no TLS.
        case httpsUnsupported
        /// No connection: the name does not resolve, the port refuses, the network is unreachable.
        case cannotConnect
        /// The exchange's deadline passed.
        case timedOut
        /// The peer closed or reset the connection before the answer was complete.
        case closedEarly
        /// Bytes that are not an HTTP/1.x answer.
        case malformedResponse
        /// The answer is larger than the caller's limit.
        case responseTooLarge
    }

    /// How far the exchange got.
    public enum Phase: Sendable, Equatable {
        case preparing, connecting, sending, receivingHead, receivingBody
    }

    public let kind: Kind
    public let phase: Phase
    /// Bytes of the answer that had arrived when it failed.
    public let bytesReceived: Int
    public let message: String

    public init(_ kind: Kind, phase: Phase, bytesReceived: Int = 0, _ message: String) {
        self.kind = kind
        self.phase = phase
        self.bytesReceived = bytesReceived
        self.message = message
    }

    public var description: String { message }

    /// The one message for https URLs: backends are reached over plain HTTP only.
    public static let httpsMessage = "https backends are not supported; use http://"
}
