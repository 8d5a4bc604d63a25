/// The eleven `apns-push-type` values and what each one requires (docs/apns-behaviour.md,
/// "Push types and topics").
public enum PushType: String, Sendable, CaseIterable {
    case alert, background, complication, controls, fileprovider, liveactivity, location, mdm,
        pushtotalk, voip, widgets

    /// The suffix the topic must carry after the bundle id.
    public var topicSuffix: String {
        switch self {
        case .alert, .background, .mdm: return ""
        case .complication: return ".complication"
        case .controls: return ".push-type.controls"
        case .fileprovider: return ".pushkit.fileprovider"
        case .liveactivity: return ".push-type.liveactivity"
        case .location: return ".location-query"
        case .pushtotalk: return ".voip-ptt"
        case .voip: return ".voip"
        case .widgets: return ".push-type.widgets"
        }
    }

    /// Apple's documented limits: 5120 bytes for VoIP, 4096 for everything else
    /// (docs/apns-behaviour.md, "Payload").
    public var payloadLimit: Int { self == .voip ? 5120 : 4096 }
    /// The largest payload any push type may carry: a body beyond it is 413 whatever it is.
    public static let largestPayloadLimit = 5120

    /// Push types that token (JWT) connections may not send. MDM pushes are certificate-only.
    public var requiresCertificate: Bool { self == .mdm }
    /// Push types that certificate connections may not send (location is token-only:
    /// docs/apns-behaviour.md, "Push types and topics").
    public var requiresToken: Bool { self == .location }

    /// The push types whose topic carries a suffix, longest suffix first so that
    /// `.voip-ptt` is not mistaken for something shorter.
    static let suffixed: [PushType] = PushType.allCases
        .filter { !$0.topicSuffix.isEmpty }
        .sorted { $0.topicSuffix.utf8.count > $1.topicSuffix.utf8.count }

    private static let suffixBytes: [(PushType, [UInt8])] = suffixed.map { ($0, Array($0.topicSuffix.utf8)) }

    /// The push type a topic's suffix implies, or nil for a bare bundle id. Compares bytes:
    /// this runs on every request.
    public static func implied(byTopic topic: Substring) -> PushType? {
        var topic = topic
        // One pass over the topic's bytes for all the suffixes (not one `withUTF8` each).
        return topic.withUTF8 { bytes in
            for (type, suffix) in suffixBytes
            where bytes.count > suffix.count
                && bytes[bytes.count - 1] == suffix[suffix.count - 1]
                && bytes[(bytes.count - suffix.count)...].elementsEqual(suffix)
            {
                return type
            }
            return nil
        }
    }

    /// Apple writes push types in lowercase; other cases are accepted as the same type
    /// (Apple's own pages spell `liveactivity` three ways).
    public init?(headerValue: Substring) {
        if let exact = Self(lowercaseHeaderValue: headerValue) {
            self = exact
        } else if headerValue.utf8.contains(where: { $0 >= 0x41 && $0 <= 0x5A }) {
            guard let folded = Self(lowercaseHeaderValue: Substring(headerValue.lowercased())) else { return nil }
            self = folded
        } else {
            return nil
        }
    }

    private init?(lowercaseHeaderValue headerValue: Substring) {
        switch headerValue {
        case "alert": self = .alert
        case "background": self = .background
        case "complication": self = .complication
        case "controls": self = .controls
        case "fileprovider": self = .fileprovider
        case "liveactivity": self = .liveactivity
        case "location": self = .location
        case "mdm": self = .mdm
        case "pushtotalk": self = .pushtotalk
        case "voip": self = .voip
        case "widgets": self = .widgets
        default: return nil
        }
    }
}

/// Each token kind is bound to one topic form: a regular app token serves `<bundle>`, a PushKit
/// VoIP token serves `<bundle>.voip`, and so on. A push whose topic differs from the token's
/// topic gets `DeviceTokenNotForTopic` (docs/apns-behaviour.md, "Device tokens").
extension TokenKind {
    public var topicSuffix: String {
        switch self {
        case .app: return ""
        case .voip: return PushType.voip.topicSuffix
        case .complication: return PushType.complication.topicSuffix
        case .controls: return PushType.controls.topicSuffix
        case .fileprovider: return PushType.fileprovider.topicSuffix
        case .liveactivity: return PushType.liveactivity.topicSuffix
        case .location: return PushType.location.topicSuffix
        case .pushtotalk: return PushType.pushtotalk.topicSuffix
        case .widgets: return PushType.widgets.topicSuffix
        }
    }

    public func topic(forBundle bundleID: String) -> String {
        // Read on every push (`TokenEntry.topic`): an app token's topic is the bundle id
        // itself, shared rather than rebuilt by appending "".
        self == .app ? bundleID : bundleID + topicSuffix
    }
}
