// APNsEmulatorTesting: an emulator inside `swift test` (`TestEmulator`), with the typed admin
// client, which this module re-exports so that `import APNsEmulatorTesting` is all a test
// needs. Imports EmulatorServer, AdminClient, APNsCore, Networking, OpenSSLCrypto, Foundation.

// The typed admin client and `TestEmulator`'s addresses (`HostPort`s).
@_exported public import AdminClient
@_exported public import struct Networking.HostPort
// `TestEmulator.Options.configure` changes a `ServeConfiguration`; naming it needs no other import.
@_exported public import struct EmulatorServer.ServeConfiguration
