/// Topic rules for token-based pushes (docs/apns-behaviour.md, "Push types and topics"), shared
/// by the provider endpoint and the admin API's provider-token validator.
public enum TopicRules {
    /// 400 `BadTopic` for a topic that is not a bundle id with an optional push-type suffix.
    public static func syntaxRefusal(_ topic: String) -> (reason: APNsReason, explanation: String)? {
        guard !DeviceRegistry.isValidBundleID(topic) else { return nil }
        return (.badTopic, "apns-topic '\(topic)' is not a bundle id (letters, digits, '-' and '.') with an optional push-type suffix")
    }

    /// The push type a topic's suffix implies (`.voip`, `.push-type.liveactivity`…). A topic that
    /// is itself a registered bundle id has no suffix, even if it happens to end like one (an
    /// app called com.example.voip).
    public static func impliedPushType(ofTopic topic: String, credentials: Credentials) -> PushType? {
        guard let implied = PushType.implied(byTopic: Substring(topic)) else { return nil }
        return credentials.owner(ofBundle: topic) == nil ? implied : nil
    }

    /// A topic of an MDM push certificate (`com.apple.mgmt.External.<uuid>`, its UID): pushes
    /// to it wake the device's MDM client whatever else they carry, and MDM servers written
    /// before `apns-push-type` existed send none.
    public static func isMDMTopic(_ topic: some StringProtocol) -> Bool { topic.hasPrefix("com.apple.mgmt.") }

    /// The push type of a push without `apns-push-type`: the one the topic's suffix implies,
    /// `mdm` for an MDM topic, else `alert`.
    public static func pushTypeWithoutHeader(topic: Substring, implied: PushType?) -> PushType {
        implied ?? (isMDMTopic(topic) ? .mdm : .alert)
    }

    /// The bundle id a topic addresses: the topic without the suffix of `pushType`.
    public static func bundleID(ofTopic topic: String, pushType: PushType) -> String {
        let suffixLength = pushType.topicSuffix.utf8.count
        return suffixLength == 0 ? topic : String(Substring(topic.utf8.dropLast(suffixLength)))
    }

    /// Why a verified provider token may not send a `pushType` push to `topic` of `bundleID`:
    /// 400 `InvalidPushType` for a type only certificates may send; 400 `TopicDisallowed` when
    /// no team owns the bundle, another team does, the key is topic-specific and does not cover
    /// it, or the bundle was added after the connection was bound; nil when it may.
    public static func tokenRefusal(
        pushType: PushType, bundleID: String, topic: String, provider: AuthenticatedProvider, credentials: Credentials
    ) -> (reason: APNsReason, explanation: String)? {
        if pushType.requiresCertificate {
            return (.invalidPushType, "\(pushType.rawValue) pushes need a certificate-based connection; this one uses provider tokens")
        }
        guard let owner = credentials.owner(ofBundle: bundleID) else {
            // Only on this refusal: a bundle that differs in case alone is named, so the fix is
            // the topic's spelling rather than a second app.
            if let sameButCase = credentials.apps.keys.first(where: { $0.lowercased() == bundleID.lowercased() }) {
                return (
                    .topicDisallowed,
                    "no team owns bundle \(bundleID); \(sameButCase) is registered, and topics are matched exactly, case included"
                )
            }
            return (.topicDisallowed, "no team owns bundle \(bundleID); register it with --app \(provider.teamID):\(bundleID)")
        }
        guard owner.teamID == provider.teamID else {
            return (.topicDisallowed, "bundle \(bundleID) belongs to team \(owner.teamID), not \(provider.teamID)")
        }
        guard provider.key.covers(bundleID: bundleID, topic: topic) else {
            return (.topicDisallowed, "topic-specific key \(provider.key.keyID) does not cover \(bundleID)")
        }
        guard owner.addedAtGeneration <= provider.boundAtGeneration else {
            return (
                .topicDisallowed,
                "bundle \(bundleID) was added to team \(owner.teamID) after this connection was bound; open a new connection"
            )
        }
        return nil
    }
}

/// The last topic a verified provider token was allowed to send to, with its push type and
/// bundle (`World.lastTopicVerdict`): a provider sends to one topic again and again, and
/// working it out costs some 2,000 instructions (the bundle's syntax, its owner's lookup).
/// Valid while the credentials keep their generation (every change bumps it, and a reset or a
/// reload moves it past every earlier one).
struct TopicVerdict: Sendable {
    /// Held, so that another provider cannot be taken for it at the same address.
    var provider: AuthenticatedProvider?
    var topic = ""
    var header: PushType?
    var generation: UInt64 = 0
    var pushType = PushType.alert
    var bundleID = ""

    /// The push type when `topic` (compared byte for byte) with the `header` type is what
    /// `provider` was last allowed to send at this `generation`; nil otherwise.
    @inline(__always)
    func pushType(provider: AuthenticatedProvider, topic: String?, header: PushType?, generation: UInt64) -> PushType? {
        guard self.provider === provider, self.generation == generation, self.header == header,
            topic?.utf8.count == self.topic.utf8.count, ASCII.sameBytes(self.topic, topic.unsafelyUnwrapped)
        else { return nil }
        return pushType
    }
}
