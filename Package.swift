// swift-tools-version:6.0
import PackageDescription

// Module layout (see CONTRIBUTING.md, "Code map"):
//   Locking        how threads share values: Locked (brief holds), BlockingLock (held across I/O), SetOnce
//   MonotonicClock the one monotonic clock (CLOCK_MONOTONIC), for durations and deadlines
//   Lifecycle      services started in order and stopped in reverse, and the one Logger with levels
//   JSON           a JSON value type with its parser and writer
//   DeviceVocabulary  the words emulator and devices share: environments, token kinds, app permission and state
//   HTTPGrammar    HTTP's small shared grammar: tokens, host names, the header field (pure)
//   APNsCore       pure APNs model: rules, reasons, JWT claims, token registry, delivery, record store
//   HTTP2          thin nghttp2 wrapper (server + client sessions), knows nothing of APNs
//   OpenSSLCrypto  thin OpenSSL wrapper: ES256, keys, TLS contexts/connections, test certs
//   Networking     epoll event loops, sockets, timers (Glibc)
//   SQLite         thin SQLite wrapper (the only unsafe code for it)
//   Redis          thin hiredis wrapper (the only unsafe code for it)
//   StatePersistence  group-commit writer thread between the state lock and a StateStore
//   SQLiteStateStore  the --state-dir backend (schema, rows) on SQLite
//   RedisStore     --redis: the state in Redis, shared by several instances (lease, log, relay)
//   CommandLineOptions  flags, APNS_EMULATOR_* variables and --config files → option values
//   HTTP1Server    an HTTP/1.1 server for one service: pure request parser, connections, limits
//   AdminAPI       the admin API (a file per resource) and web UI on HTTP1Server; ui/ and
//                  docs/openapi.json are embedded at build time by the EmbedAssets plugin (Plugins/)
//   EmulatorServer the composition: configuration, provider endpoint connections, device
//                  gateway, the admin API's host, listeners
//   ProviderClient blocking HTTP/2 client + APNs helpers (send command, tests, benchmarks)
//   Conformance    the conformance catalogue (conformance/catalogue.json, embedded by EmbedAssets),
//                  the requests of its cases, verdicts, recordings and replay (pure)
//   DeviceClient   the device side of docs/device-protocol.md, in the protocol's words and JSON
//   HTTP1Client    a small blocking HTTP/1.1 client (admin client, backend hook calls)
//   AdminClient    a typed client of the admin API (test kit, `load`, scenarios)
//   BackendCalls   calls to an app's own backend (hooks), queued per device, retried, recorded
//   APNsEmulatorTesting  an emulator inside `swift test`, re-exporting the typed admin client
//   Scenarios      scenario files (devices, accounts, pushes, waits) run against an emulator
//   apns-emulator  the command-line tool (one file per subcommand); does not link the test kit
//
// No unsafeFlags: a package that uses them cannot be depended on, and the library products
// below are for other packages.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("InternalImportsByDefault")
]

let package = Package(
    name: "apns-emulator",
    products: [
        .executable(name: "apns-emulator", targets: ["apns-emulator"]),
        // An emulator in-process for Swift test suites (start on port 0, typed admin client).
        .library(name: "APNsEmulatorTesting", targets: ["APNsEmulatorTesting"]),
        // A simulated device over the device socket, in the device protocol's words (not the core's).
        .library(name: "DeviceClient", targets: ["DeviceClient"]),
        // A small blocking HTTP/2 APNs client (what `apns-emulator send` uses).
        .library(name: "ProviderClient", targets: ["ProviderClient"]),
    ],
    targets: [
        .systemLibrary(
            name: "CNghttp2", pkgConfig: "libnghttp2",
            providers: [.apt(["libnghttp2-dev"])]),
        .systemLibrary(
            name: "COpenSSL", pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CLinux"),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        // No pkgConfig: hiredis.pc adds -D_FILE_OFFSET_BITS=64 (a no-op on 64-bit Linux), which
        // SwiftPM refuses from a dependency with a warning in every package that uses ours.
        .systemLibrary(name: "CHiredis", providers: [.apt(["libhiredis-dev"])]),
        .target(name: "Locking", swiftSettings: swiftSettings),
        .target(name: "MonotonicClock", swiftSettings: swiftSettings),
        .target(name: "Lifecycle", dependencies: ["Locking", "MonotonicClock"], swiftSettings: swiftSettings),
        .target(name: "JSON", swiftSettings: swiftSettings),
        .target(name: "DeviceVocabulary", swiftSettings: swiftSettings),
        .target(name: "HTTPGrammar", swiftSettings: swiftSettings),
        .target(
            name: "APNsCore", dependencies: ["Locking", "MonotonicClock", "JSON", "DeviceVocabulary", "HTTPGrammar"], swiftSettings: swiftSettings),
        .target(name: "HTTP2", dependencies: ["CNghttp2", "MonotonicClock", "HTTPGrammar"], swiftSettings: swiftSettings),
        .target(name: "OpenSSLCrypto", dependencies: ["COpenSSL"], swiftSettings: swiftSettings),
        .target(name: "Networking", dependencies: ["CLinux", "OpenSSLCrypto", "Locking", "MonotonicClock"], swiftSettings: swiftSettings),
        .target(name: "SQLite", dependencies: ["CSQLite"], swiftSettings: swiftSettings),
        .target(name: "Redis", dependencies: ["CHiredis", "MonotonicClock"], swiftSettings: swiftSettings),
        .target(name: "StatePersistence", dependencies: ["APNsCore", "Lifecycle", "Locking", "MonotonicClock"], swiftSettings: swiftSettings),
        .target(name: "SQLiteStateStore", dependencies: ["APNsCore", "SQLite"], swiftSettings: swiftSettings),
        .target(name: "CommandLineOptions", dependencies: ["APNsCore"], swiftSettings: swiftSettings),
        .target(name: "HTTP1Client", dependencies: ["Networking", "MonotonicClock", "HTTPGrammar"], swiftSettings: swiftSettings),
        .target(name: "HTTP1Server", dependencies: ["Networking", "Locking", "MonotonicClock", "HTTPGrammar"], swiftSettings: swiftSettings),
        .target(name: "BackendCalls", dependencies: ["APNsCore", "HTTP1Client", "Locking"], swiftSettings: swiftSettings),
        .target(
            name: "RedisStore", dependencies: ["APNsCore", "Redis", "Locking", "Lifecycle", "MonotonicClock", "StatePersistence"],
            swiftSettings: swiftSettings),
        .target(
            name: "AdminAPI",
            dependencies: ["APNsCore", "BackendCalls", "HTTP1Server", "HTTPGrammar", "Networking", "Locking"],
            swiftSettings: swiftSettings,
            plugins: ["EmbedAssets"]),
        // Writes ui/* and docs/openapi.json into AdminAPI as string literals (UIAssets) at build
        // time. Not SwiftPM's embedInCode resources: byte-array literals made a clean debug
        // build about ten times slower.
        .plugin(name: "EmbedAssets", capability: .buildTool(), dependencies: ["embed-assets-tool"]),
        .executableTarget(name: "embed-assets-tool", path: "Plugins/EmbedAssetsTool"),
        .target(
            name: "EmulatorServer",
            dependencies: [
                "APNsCore", "AdminAPI", "HTTP1Server", "HTTPGrammar", "BackendCalls", "CommandLineOptions", "HTTP2",
                "OpenSSLCrypto", "Networking", "MonotonicClock", "StatePersistence", "SQLiteStateStore", "Redis", "RedisStore",
                "Locking", "Lifecycle",
            ],
            swiftSettings: swiftSettings),
        .target(
            name: "ProviderClient",
            dependencies: ["APNsCore", "HTTP2", "OpenSSLCrypto", "Networking", "Locking", "MonotonicClock"],
            swiftSettings: swiftSettings),
        .target(
            name: "Conformance", dependencies: ["JSON", "APNsCore", "HTTP2", "ProviderClient"],
            swiftSettings: swiftSettings,
            plugins: ["EmbedAssets"]),
        .target(
            name: "DeviceClient", dependencies: ["DeviceVocabulary", "JSON", "Networking", "OpenSSLCrypto", "MonotonicClock"],
            swiftSettings: swiftSettings),
        .target(name: "AdminClient", dependencies: ["JSON", "HTTP1Client", "Networking"], swiftSettings: swiftSettings),
        .target(
            name: "APNsEmulatorTesting",
            dependencies: ["EmulatorServer", "AdminClient", "Networking"],
            swiftSettings: swiftSettings),
        .target(
            name: "Scenarios",
            dependencies: [
                "AdminClient", "EmulatorServer", "ProviderClient", "HTTP2", "APNsCore", "HTTP1Client", "HTTPGrammar", "CLinux", "MonotonicClock",
            ],
            swiftSettings: swiftSettings),
        .executableTarget(
            name: "apns-emulator",
            dependencies: [
                "EmulatorServer", "CommandLineOptions", "ProviderClient", "DeviceClient", "AdminClient", "Scenarios",
                "MonotonicClock", "Conformance",
            ],
            swiftSettings: swiftSettings),
        .testTarget(name: "APNsCoreTests", dependencies: ["APNsCore", "JSON", "OpenSSLCrypto", "Locking"]),
        .testTarget(name: "HTTP2Tests", dependencies: ["HTTP2", "TestSupport"]),
        .testTarget(
            name: "StatePersistenceTests",
            dependencies: [
                "StatePersistence", "SQLiteStateStore", "SQLite", "RedisStore", "Redis", "RedisTestSupport", "APNsCore", "Locking", "Lifecycle",
                "TestSupport",
            ]),
        .testTarget(name: "OpenSSLCryptoTests", dependencies: ["OpenSSLCrypto", "TestSupport"]),
        .testTarget(name: "HTTP1ServerTests", dependencies: ["HTTP1Server"]),
        .testTarget(name: "AdminAPITests", dependencies: ["AdminAPI", "HTTP1Server", "APNsCore"]),
        .testTarget(name: "EmulatorServerTests", dependencies: ["EmulatorServer", "AdminAPI", "CommandLineOptions", "APNsCore", "Networking"]),
        .testTarget(
            name: "DeviceClientTests",
            dependencies: ["DeviceClient", "APNsCore", "Networking", "OpenSSLCrypto", "Locking", "MonotonicClock", "TestSupport"]),
        .testTarget(
            name: "BackendCallsTests",
            dependencies: ["BackendCalls", "HTTP1Client", "APNsCore", "Networking", "Locking", "MonotonicClock", "BackendTestSupport", "TestSupport"]),
        .testTarget(
            name: "ScenariosTests", dependencies: ["Scenarios", "APNsEmulatorTesting", "APNsCore", "ProviderClient", "Networking", "TestSupport"]),
        .testTarget(name: "ConformanceTests", dependencies: ["Conformance", "JSON", "OpenSSLCrypto", "ProviderClient", "TestSupport"]),
        .testTarget(name: "LifecycleTests", dependencies: ["Lifecycle", "Locking"]),
        .testTarget(name: "LockingTests", dependencies: ["Locking"]),
        .testTarget(name: "NetworkingTests", dependencies: ["Networking", "CLinux", "MonotonicClock"]),
        // What every test target may share: one `eventually`, external tools (a missing one skips
        // the tests that need it), a command runner, the binary under test, raw HTTP/2 bytes.
        .target(name: "TestSupport", path: "Tests/TestSupport"),
        // A real redis-server for tests (free port, kill, pause, restart): shared by the test targets.
        .target(name: "RedisTestSupport", dependencies: ["TestSupport"], path: "Tests/RedisTestSupport"),
        // A real HTTP server standing in for an app's backend (answers, holds, trickles): shared too.
        .target(name: "BackendTestSupport", dependencies: ["Networking", "Locking", "MonotonicClock"], path: "Tests/BackendTestSupport"),
        .testTarget(name: "RedisTests", dependencies: ["Redis", "RedisTestSupport", "TestSupport"]),
        .testTarget(
            name: "APNsEmulatorTestingTests",
            dependencies: ["APNsEmulatorTesting", "ProviderClient", "DeviceClient", "APNsCore", "Networking"]),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "ProviderClient", "DeviceClient", "HTTP2", "OpenSSLCrypto", "APNsCore", "Networking", "Locking", "MonotonicClock",
                "APNsEmulatorTesting", "RedisTestSupport", "BackendTestSupport", "TestSupport",
            ]),
    ]
)
