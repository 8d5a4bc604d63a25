// APNsCore: the APNs model, pure: request rules and reasons, provider tokens, devices and
// tokens, delivery, fault rules, the notification journal, the state and its codecs. No
// sockets, threads of its own or C. Imports JSON, DeviceVocabulary, HTTPGrammar, Locking,
// MonotonicClock, Foundation (and Glibc to read input files).

// The core's API is written in JSON values (payloads, records, frames) and the words devices
// use (environments, token kinds, permission, run state): `import APNsCore` brings them along.
@_exported public import JSON
@_exported public import DeviceVocabulary
