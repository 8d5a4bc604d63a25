// DeviceVocabulary: the words the emulator and its devices share for an app: its APNs
// environment, notification permission, run state and token kinds, spelled as
// docs/device-protocol.md spells them. The core adds its rules to them (APNsCore), the device
// client speaks them (DeviceClient). Imports nothing.

/// The two APNs environments. A device token belongs to exactly one of them.
public enum APNsEnvironment: String, Sendable, CaseIterable {
    case sandbox
    case production
}

/// The app's notification permission (docs/device-model.md, "Permission").
public enum Authorization: String, Sendable, CaseIterable {
    case notDetermined, denied, authorized, provisional, ephemeral
}

/// The app's run state (docs/device-model.md, "Delivery rules"); `terminated`: force-quit by
/// the user.
public enum AppState: String, Sendable, CaseIterable {
    case foreground, background, suspended, notRunning, terminated
}

/// What kind of token a device hands out: the app's own, or PushKit's and the other kinds
/// that have a topic of their own.
public enum TokenKind: String, Sendable, CaseIterable {
    case app, voip, complication, controls, fileprovider, liveactivity, location, pushtotalk, widgets
}
