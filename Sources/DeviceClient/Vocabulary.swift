// The device protocol's words for an app: its APNs environment, notification permission, run
// state and token kinds, with the spellings docs/device-protocol.md gives them. The emulator's
// core has types of these names for its rules; the protocol's strings are what the two share.

/// Which APNs a token belongs to: the sandbox (a development build) or production.
public enum APNsEnvironment: String, Sendable, CaseIterable {
    case sandbox, production
}

/// The app's notification permission.
public enum Authorization: String, Sendable, CaseIterable {
    case notDetermined, denied, authorized, provisional, ephemeral
}

/// The app's run state (`terminated`: force-quit by the user).
public enum AppState: String, Sendable, CaseIterable {
    case foreground, background, suspended, notRunning, terminated
}

/// What a token is for: the app's own pushes, or PushKit and the other kinds with a topic suffix.
public enum TokenKind: String, Sendable, CaseIterable {
    case app, voip, complication, controls, fileprovider, liveactivity, location, pushtotalk, widgets
}
