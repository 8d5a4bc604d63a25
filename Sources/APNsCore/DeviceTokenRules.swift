/// The device-token stage of a push (docs/apns-behaviour.md, "Check order"): what APNs makes of
/// a token for a topic and an environment. The provider endpoint judges every push with it, and
/// the admin API's token validator answers with it, so the two cannot disagree.
public enum DeviceTokenRules {
    /// Why a push to the token is refused at this stage.
    public struct Refusal: Error, Sendable, Equatable {
        public enum Kind: String, Sendable {
            case missing, malformed, unknown
            case wrongEnvironment = "wrong-environment"
            case wrongTopic = "wrong-topic"
            case unregistered, expired
        }
        public var kind: Kind
        public var reason: APNsReason
        public var explanation: String
        /// 410 `Unregistered` only: when the token stopped being valid (ms).
        public var timestampMs: Int64? = nil

        /// A 410's explanation with why the token stopped reaching its app
        /// (`DeviceRegistry.whyInvalidated`), which the rules alone do not know.
        public func sayingWhy(_ entry: TokenEntry?, in registry: DeviceRegistry) -> Refusal {
            guard kind == .unregistered, let entry else { return self }
            var refusal = self
            refusal.explanation += ": " + registry.whyInvalidated(entry)
            return refusal
        }
    }

    /// Refusals the token's text alone decides, before it is looked up.
    public static func refusal(ofText token: Substring, shape: Hex.TokenShape) -> Refusal? {
        guard !token.isEmpty else {
            return Refusal(kind: .missing, reason: .missingDeviceToken, explanation: "no device token after /3/device/")
        }
        guard shape.isEvenLengthHex else {
            return Refusal(kind: .malformed, reason: .badDeviceToken, explanation: "device token is not an even-length run of hex digits")
        }
        return nil
    }

    /// A push-to-start or update token of a device's Live Activities, which a `liveactivity`
    /// push may go to instead of a device token: its environment and app must match, as a
    /// device token's must.
    public static func judge(
        liveActivityToken owner: LiveActivityWorld.TokenOwner, topic: String, environment: APNsEnvironment
    ) throws(Refusal) {
        guard owner.environment == environment else {
            throw Refusal(
                kind: .wrongEnvironment, reason: .badDeviceToken,
                explanation: "this is a \(owner.environment.rawValue) Live Activity token, sent to \(environment.rawValue)")
        }
        let expected = owner.bundleID + PushType.liveactivity.topicSuffix
        guard topic == expected else {
            throw Refusal(
                kind: .wrongTopic, reason: .deviceTokenNotForTopic, explanation: "the Live Activity token belongs to topic \(expected), not \(topic)")
        }
    }

    /// Judges the token's entry (nil: never issued) for a push to `topic` in `environment`.
    /// `stateNow` is the entry's state as this push finds it: the endpoint counts the push
    /// first, for a token that turns 410 after a number of pushes; a validator only reads it.
    public static func judge(
        _ found: TokenEntry?, topic: String, environment: APNsEnvironment, nowMs: Int64,
        stateNow: (TokenEntry) -> TokenState
    ) throws(Refusal) -> TokenEntry {
        guard let entry = found else { throw neverIssued }
        return try judge(entry, topic: topic, environment: environment, nowMs: nowMs, stateNow: stateNow)
    }

    /// A token no device was issued.
    public static let neverIssued = Refusal(kind: .unknown, reason: .badDeviceToken, explanation: "no device was issued this token")

    /// `judge` for a token that was issued. (The endpoint calls this one: an optional entry
    /// is copied and destroyed through the runtime's generic witnesses.)
    public static func judge(
        _ entry: TokenEntry, topic: String, environment: APNsEnvironment, nowMs: Int64,
        stateNow: (TokenEntry) -> TokenState
    ) throws(Refusal) -> TokenEntry {
        guard entry.environment == environment else {
            throw Refusal(
                kind: .wrongEnvironment, reason: .badDeviceToken,
                explanation: "this is a \(entry.environment.rawValue) token, sent to \(environment.rawValue)")
        }
        guard entry.topic == topic else {
            throw Refusal(kind: .wrongTopic, reason: .deviceTokenNotForTopic, explanation: "the token belongs to topic \(entry.topic), not \(topic)")
        }
        switch stateNow(entry) {
        case .unregistered(let since) where since <= nowMs:
            throw Refusal(
                kind: .unregistered, reason: .unregistered,
                explanation: "the token stopped being valid for \(entry.topic) at \(since) ms", timestampMs: since)
        case .expired:
            throw Refusal(kind: .expired, reason: .expiredToken, explanation: "the token has expired")
        case .active, .unregistered, .rateLimited:
            // Invalidated but not answering 410 yet, or rate-limited (the rate stage answers,
            // after the payload checks): this stage lets the push through.
            return entry
        }
    }
}
