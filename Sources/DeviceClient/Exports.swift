// DeviceClient: the device side of docs/device-protocol.md, a `SimulatedDevice` over TCP or
// TLS, blocking with deadlines. Written in the protocol's words (DeviceVocabulary) and JSON,
// not the emulator's core. Imports DeviceVocabulary, JSON, Networking, OpenSSLCrypto,
// MonotonicClock, Glibc.

// The types this module's API is written in besides its own, so `import DeviceClient` is all a
// package that depends on the DeviceClient product needs.
@_exported public import DeviceVocabulary
@_exported public import struct JSON.JSONObject
@_exported public import enum JSON.JSONValue
@_exported public import struct Networking.HostPort
