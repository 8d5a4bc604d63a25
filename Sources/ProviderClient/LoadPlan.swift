import Foundation
import HTTP2

/// What a load run sends, where, how much and how fast. `LoadGenerator` takes it as given;
/// the command line checks the bounds.
public struct LoadPlan: Sendable {
    public var connection: HTTP2ClientConnection.Options
    public var signingKey: ProviderSigningKey
    /// `apns-topic`: the bundle id.
    public var topic: String
    /// `:authority`; Apple's host name picks the environment on any emulator listener.
    public var authority: String?
    /// Device tokens, used in turn.
    public var deviceTokens: [String]
    public var mix: PushMix
    /// Each payload is padded to about this many bytes (0: as small as it comes).
    public var payloadBytes = 0
    public var connections = 4
    /// Requests in flight per connection.
    public var streamsPerConnection = 100
    /// Requests to send in all; the run stops at this or `maxDuration`, whichever comes first.
    public var maxRequests = 100_000
    public var maxDuration: Double = 3600
    /// Requests a second over all connections; 0: as fast as answers come.
    public var ratePerSecond: Double = 0
    /// A request unanswered this long is cancelled and counted as timed out.
    public var requestTimeout: Double = 30
    /// How long to wait for answers in flight once the run stops sending.
    public var drainTimeout: Double = 10
    /// A connection that cannot be opened again for this long stops its part of the run:
    /// longer than the churn windows servers close new connections in.
    public var reconnectGiveUp: Double = 30
    /// When to sign a new provider token. Apple accepts one for an hour and refuses a new
    /// one on a connection within 20 minutes of the previous (TooManyProviderTokenUpdates).
    public var providerTokenRefresh: Double = 40 * 60

    public init(
        connection: HTTP2ClientConnection.Options, signingKey: ProviderSigningKey, topic: String,
        authority: String?, deviceTokens: [String], mix: PushMix
    ) {
        self.connection = connection
        self.signingKey = signingKey
        self.topic = topic
        self.authority = authority
        self.deviceTokens = deviceTokens
        self.mix = mix
    }

    /// The payload of a push type, padded with a `"pad"` member to `payloadBytes` when that is
    /// more than its natural size.
    public func payload(for kind: PushMix.Kind) -> [UInt8] {
        let aps: String
        switch kind {
        case .alert: aps = #"{"alert":{"title":"Load test","body":"A push from apns-emulator load"}}"#
        case .background: aps = #"{"content-available":1}"#
        }
        let plain = #"{"aps":\#(aps)}"#
        let padded = { (pad: Int) in #"{"aps":\#(aps),"pad":"\#(String(repeating: "x", count: pad))"}"# }
        let overhead = padded(0).utf8.count
        guard payloadBytes > overhead else { return Array(plain.utf8) }
        return Array(padded(payloadBytes - overhead).utf8)
    }

    /// `apns-push-type` and `apns-priority`: background pushes must be sent at priority 5.
    static func headers(for kind: PushMix.Kind) -> (pushType: String, priority: String) {
        switch kind {
        case .alert: return ("alert", "10")
        case .background: return ("background", "5")
        }
    }
}
