// `TestEmulator`'s addresses are `HostPort`s; `import APNsEmulatorTesting` is enough to use them.
@_exported public import struct Networking.HostPort
