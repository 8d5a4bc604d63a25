// ProviderClient: a blocking HTTP/2 APNs client, broadcast channel calls and a load generator
// (the `send`, `channels` and `load` commands, tests, benchmarks). Imports APNsCore, HTTP2,
// OpenSSLCrypto, Networking, Locking, MonotonicClock.

// The types this module's API is written in, so `import ProviderClient` is all a package
// that depends on the ProviderClient product needs.
@_exported public import struct HTTP2.HTTP2HeaderField
@_exported public import struct HTTP2.HTTP2Response
@_exported public import class OpenSSLCrypto.ES256PrivateKey
@_exported public import struct Networking.HostPort
