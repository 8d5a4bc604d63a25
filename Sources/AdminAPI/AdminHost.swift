public import APNsCore
public import BackendCalls
public import Networking

/// What the admin API needs of the emulator it serves, beyond the shared state. The emulator
/// implements it; the API never sees the emulator itself.
public protocol AdminHost: AnyObject, Sendable {
    var state: EmulatorState { get }
    /// The emulator's time: the followed clock plus what `POST /api/v1/clock` added.
    var clock: OffsetClock { get }
    /// The simulated apps' calls to their backends.
    var backendCalls: BackendCaller { get }
    var isReady: Bool { get }
    var version: String { get }
    var startedAtMs: Int64 { get }
    /// Real time since the start (not moved with the emulator's clock).
    var uptimeMilliseconds: Int64 { get }
    /// The addresses bound, as `GET /api/v1/info` shows them.
    var addresses: JSONValue { get }
    var providerConnectionCount: Int { get }
    /// How the provider endpoint judges pushes (token policy, reason spellings): the
    /// validators answer as it would.
    var endpointOptions: EndpointOptions { get }
    var deviceConnectionCount: Int { get }

    /// `GET /metrics`: every family, Prometheus text.
    func metricsText() -> String
    func log(_ message: String)
    /// A line that shows under `--quiet` too: something a user should know happened.
    func warn(_ message: String)
    /// With `--state-dir`: runs `answer` on `loop` once every change made so far is committed,
    /// with nil, or with why it is not; false (and nothing runs) when nothing waits for a commit
    /// (no state directory, or everything is in already).
    func afterCommit(on loop: EventLoop, _ answer: @escaping (_ failure: String?) -> Void) -> Bool
    /// Writes frames to the device connections they are for.
    func dispatch(_ frames: [DeviceFrame])
    /// Runs the once-a-second tick now: what a moved clock releases or expires happens at once.
    func tickDevices()
    /// Back to the configured start state: the world, backend calls, the clock's offset, the
    /// counters; connected devices are attached again. Returns the world it replaced.
    func resetToStart() -> ReplacedWorld
    /// The key of a `POST /api/v1/keys` body (`teamId`, `keyId`, `environment`, `topics`,
    /// `relatedKeyId`), whose key text is `pem`; 400 when the body or the key is not one
    /// `--auth-key` would take.
    func providerKey(from body: JSONObject, pem: String) throws(AdminError) -> ProviderKey
    /// 400 unless `--app TEAMID:BUNDLEID` would take these.
    func checkApp(teamID: String, bundleID: String) throws(AdminError)
}

/// The admin listener's settings the API's answers depend on.
public struct AdminSettings: Sendable {
    /// Long polls waiting at once (`--admin-max-waiters`).
    public var maxWaiters: Int
    /// The real path of `--keys-dir`: `POST /api/v1/keys` may read `path`s inside it only.
    public var keysDirectory: String?
    /// `--strict-checks`: `GET /api/v1/checks` answers 409 while cross-account deliveries exist.
    public var strictChecks: Bool
    /// `--admin-max-connections` and `--admin-read-timeout`, as the refusals name them.
    public var maxConnections: Int
    public var readTimeoutMs: Int64

    public init(maxWaiters: Int, keysDirectory: String?, strictChecks: Bool, maxConnections: Int, readTimeoutMs: Int64) {
        self.maxWaiters = maxWaiters
        self.keysDirectory = keysDirectory
        self.strictChecks = strictChecks
        self.maxConnections = maxConnections
        self.readTimeoutMs = readTimeoutMs
    }
}
