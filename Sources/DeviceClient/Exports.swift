// The types this module's API is written in, so `import DeviceClient` is all a package
// that depends on the DeviceClient product needs.
@_exported public import struct APNsCore.JSONObject
@_exported public import enum APNsCore.JSONValue
@_exported public import enum APNsCore.APNsEnvironment
@_exported public import enum APNsCore.AppState
@_exported public import enum APNsCore.Authorization
@_exported public import enum APNsCore.TokenKind
@_exported public import struct Networking.HostPort
