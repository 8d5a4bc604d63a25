// The client's addresses are `HostPort`s; `import AdminClient` is enough to use them.
@_exported public import struct Networking.HostPort
