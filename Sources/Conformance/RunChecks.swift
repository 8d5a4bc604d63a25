import APNsCore
import HTTP2

/// A run whose own key, topic or token the target refuses says nothing about the target: every
/// case after it would "differ" for the same reason. The command stops at such an answer.
public enum SetupCheck {
    /// Why the answer to `planned` shows that the run's own credentials, topic or token were
    /// refused (nil: it does not). Looks only at requests with the run's token on the run's
    /// connection: a 403 to any of them it did not expect, and to the baseline case (the
    /// defaults, expecting 200) a refusal of the topic or of the device token.
    public static func refusal(_ planned: PlannedCase, seen: Observation, inputs: RunInputs) -> String? {
        let expect = planned.item.expect
        // A channel-management request a server takes for an unknown path or method, where
        // Apple's channel host answers with success: --channel-target is another endpoint (most
        // often the device-push port), not a rule that differs.
        if planned.host == .channelManagement, (200..<300).contains(expect.status), let status = seen.status,
            (status == 404 && (seen.reason == nil || seen.reason == "BadPath")) || status == 405
        {
            return "\(planned.item.id) (\(planned.main.request.method) \(planned.main.request.path)) was answered \(seen.summary) by the "
                + "channel-management target: --channel-target is not a channel-management endpoint. The device-push port? (Apple's "
                + "api-manage-broadcast hosts, the emulator's --channel-sandbox-listen 2195 / --channel-production-listen 2196; device "
                + "pushes go to the emulator's 2197 / 2198.) Nothing more was sent"
        }
        guard planned.connection == .shared(inputs.environment), planned.item.settings == nil, let status = seen.status,
            status != expect.status || seen.reason != expect.reason
        else { return nil }
        let answer = seen.summary
        let key = inputs.key
        if status == 403 {
            return "the run's own provider token was refused: \(planned.item.id) was answered \(answer). Check --key "
                + "(team id \(key.teamID), key id \(key.keyID), the .p8 of that key, a key allowed to push in \(inputs.environment.rawValue)); "
                + "nothing more was sent"
        }
        guard planned.item.request.isDefaults, expect.status == 200 else { return nil }
        // A server that does not know /3/device/ is another endpoint, not a rule that differs:
        // most often the emulator's channel-management port given as --target.
        if status == 404, seen.reason == nil || seen.reason == "BadPath" {
            return "the baseline case \(planned.item.id) (\(planned.main.request.method) /3/device/…) was answered \(answer): "
                + "--target is not a device-push endpoint. A channel-management port? (Apple's api-manage-broadcast hosts, "
                + "the emulator's --channel-sandbox-listen 2195 / --channel-production-listen 2196; device pushes go to "
                + "api.sandbox.push.apple.com / api.push.apple.com, the emulator's 2197 / 2198.) Nothing more was sent"
        }
        let environment = inputs.environment.rawValue
        switch seen.reason {
        case "TopicDisallowed", "BadTopic":
            return "the run's own --topic \(inputs.topic) was refused: \(planned.item.id) was answered \(answer). "
                + "Is it the bundle id of an app of team \(key.teamID), with push notifications? Nothing more was sent"
        case "BadDeviceToken":
            return "the run's own --token was refused: \(planned.item.id) was answered \(answer). Is it a \(environment) token "
                + "of \(inputs.topic)? (a development build's token for the sandbox; a TestFlight or App Store build's with "
                + "--production) Nothing more was sent"
        case "DeviceTokenNotForTopic":
            return "the run's own --token is not a token of --topic \(inputs.topic): \(planned.item.id) was answered \(answer). "
                + "Nothing more was sent"
        case "Unregistered":
            return "the run's own --token is no longer active (410: the app was uninstalled, or the token replaced): "
                + "\(planned.item.id) was answered \(answer). Give a token the app has now. Nothing more was sent"
        default: return nil
        }
    }
}

/// Why a request got no answer, in words: a GOAWAY (its code and debug data), a closed
/// connection, or the time running out.
public enum NoAnswer {
    public static func describe(
        goAway: (errorCode: UInt32, lastStreamID: Int32, debugData: [UInt8])?, closed: Bool, error: String
    ) -> String {
        if let goAway {
            let debug = String(decoding: goAway.debugData, as: UTF8.self)
            return
                "the server ended the connection: GOAWAY \(HTTP2ErrorCode.name(goAway.errorCode)) (\(goAway.errorCode)), last stream \(goAway.lastStreamID)"
                + (debug.isEmpty ? ", no debug data" : ", debug data \(debug)")
        }
        if closed { return "the server closed the connection without an answer (no GOAWAY)" }
        if error.hasPrefix("timed out") { return "no answer within 10 s (\(error))" }
        return error
    }
}
