// `TestEmulator`'s addresses are `HostPort`s; `import APNsEmulatorTesting` is enough to use them.
@_exported public import struct Networking.HostPort
// `TestEmulator.Options.configure` changes a `ServeConfiguration`; naming it needs no other import.
@_exported public import struct EmulatorServer.ServeConfiguration
