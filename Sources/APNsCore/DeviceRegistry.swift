// DeviceRegistry: devices, the apps installed on them and the tokens issued to them, as APNs
// sees them. Pure model: imports nothing.

/// The state a device token is in, as APNs sees it.
public enum TokenState: Sendable, Equatable {
    case active
    /// Invalid since this time (ms since the epoch): 410 `Unregistered` with that timestamp.
    case unregistered(sinceMs: Int64)
    /// 410 `ExpiredToken` (no timestamp).
    case expired
    /// 429 `TooManyRequests` for every push (set through the admin API).
    case rateLimited
}

/// One issued token: which device, app, environment and topic it serves.
public struct TokenEntry: Sendable, Equatable {
    public var token: String
    public var deviceID: String
    public var bundleID: String
    public var environment: APNsEnvironment
    public var kind: TokenKind
    public var state: TokenState
    public var issuedAtMs: Int64
    /// After an uninstall with a delay: the number of further pushes after which APNs starts
    /// answering 410 even before the delay is over (nil: time only).
    public var pushesUntilUnregistered: Int?

    public init(
        token: String, deviceID: String, bundleID: String, environment: APNsEnvironment, kind: TokenKind,
        state: TokenState, issuedAtMs: Int64, pushesUntilUnregistered: Int? = nil
    ) {
        self.token = token
        self.deviceID = deviceID
        self.bundleID = bundleID
        self.environment = environment
        self.kind = kind
        self.state = state
        self.issuedAtMs = issuedAtMs
        self.pushesUntilUnregistered = pushesUntilUnregistered
    }

    public var topic: String { kind.topic(forBundle: bundleID) }
}

extension TokenEntry: ListedRow {
    public var listKey: ListKey { ListKey(ms: issuedAtMs, id: token) }
    public var rowID: String { token }
    public static let vacant = TokenEntry(
        token: "", deviceID: "", bundleID: "", environment: .sandbox, kind: .app, state: .active, issuedAtMs: 0)
}

/// An app installed on a simulated device, in one environment (a development-signed build
/// registers in sandbox, a distribution build in production).
public struct InstalledApp: Sendable, Equatable {
    public var bundleID: String
    public var environment: APNsEnvironment
    /// The current token of each kind the app registered for.
    public var tokens: [TokenKind: String]
    public var installedAtMs: Int64
    /// Permission, run state and background mode: what the delivery rules read.
    public var settings = AppSettings()
    /// The app got a token while nobody was logged in: it uploads it (`register`) at login.
    public var uploadPending = false
    /// The number on the app's icon (0: none), as the last `badge` shown set it.
    public var badge = 0

    public init(
        bundleID: String, environment: APNsEnvironment, tokens: [TokenKind: String], installedAtMs: Int64,
        settings: AppSettings = AppSettings(), uploadPending: Bool = false
    ) {
        self.uploadPending = uploadPending
        self.bundleID = bundleID
        self.environment = environment
        self.tokens = tokens
        self.installedAtMs = installedAtMs
        self.settings = settings
    }
}

public struct Device: Sendable, Equatable {
    public var id: String
    /// Virtual devices are created through the admin API and have no socket; they are always
    /// online and simply record what they receive.
    public var isVirtual: Bool
    public var apps: [String: InstalledApp]
    public var createdAtMs: Int64
    /// The device socket currently attached (nil: offline). Virtual devices have none.
    public var connectionID: UInt64?
    public var lowPowerMode = false
    /// Set by the admin API to take a virtual device offline.
    public var forcedOffline = false
    /// The account logged in on the device's apps (nil: logged out).
    public var userID: String?
    /// Focus, the scheduled summary, the ring switch and the lock; nil while all are the
    /// defaults, so the device every push copies stays small.
    private var attentionBox: DeviceAttentionBox?

    public var attention: DeviceAttention {
        get { attentionBox?.attention ?? DeviceAttention() }
        set { attentionBox = newValue.isDefault ? nil : DeviceAttentionBox(newValue) }
    }

    /// `attention.isDefault`, without building the default.
    public var hasDefaultAttention: Bool { attentionBox == nil }

    public init(
        id: String, isVirtual: Bool, apps: [String: InstalledApp], createdAtMs: Int64, connectionID: UInt64? = nil,
        lowPowerMode: Bool = false, forcedOffline: Bool = false, userID: String? = nil
    ) {
        self.userID = userID
        self.id = id
        self.isVirtual = isVirtual
        self.apps = apps
        self.createdAtMs = createdAtMs
        self.connectionID = connectionID
        self.lowPowerMode = lowPowerMode
        self.forcedOffline = forcedOffline
    }

    /// Where the app `bundleID` is in `apps`, when installed. A device with one app (most
    /// simulated devices) compares its bundle id rather than hashing the one asked for. An
    /// index, not the app: an `InstalledApp?` is destroyed through the runtime's generic witnesses.
    func appIndex(_ bundleID: String) -> Dictionary<String, InstalledApp>.Index? {
        guard apps.count == 1 else { return apps.index(forKey: bundleID) }
        return apps.keys[apps.startIndex] == bundleID ? apps.startIndex : nil
    }

    /// Whether notifications can reach the device now.
    public var isOnline: Bool { !forcedOffline && (isVirtual || connectionID != nil) }
}

extension Device: ListedRow {
    public var listKey: ListKey { ListKey(ms: createdAtMs, id: id) }
    public var rowID: String { id }
    public static let vacant = Device(id: "", isVirtual: false, apps: [:], createdAtMs: 0)
}

public enum RegistryError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A batch of devices: how many the emulator held, how many it asked for.
    public struct Batch: Equatable, Sendable {
        public var holding: Int
        public var asked: Int
    }

    case unknownDevice(String)
    case appNotInstalled(deviceID: String, bundleID: String)
    case invalidBundleID(String)
    case deviceExists(String)
    case tokenInUse(String)
    case invalidToken(String)
    case invalidDeviceID(String)
    /// Installing one more app would take the device over `DeviceRegistry.maxAppsPerDevice`.
    case tooManyApps(deviceID: String)
    /// The registry holds as many devices as `--max-devices` allows.
    /// `batch`: a batch that would go over it.
    case tooManyDevices(limit: Int, batch: Batch? = nil)
    /// The registry holds as many tokens (invalidated ones included) as `--max-tokens` allows.
    case tooManyTokens(limit: Int)

    public var description: String {
        switch self {
        case .unknownDevice(let id): return "no device with id '\(id)'"
        case .appNotInstalled(let device, let bundle): return "app '\(bundle)' is not installed on device '\(device)'"
        case .invalidBundleID(let bundle): return "'\(bundle)' is not a valid bundle id (letters, digits, '-' and '.', e.g. com.example.app)"
        case .deviceExists(let id): return "a device with id '\(id)' already exists"
        case .tokenInUse(let token): return "token \(token) is already issued"
        case .invalidToken(let token):
            guard token.utf8.count <= 2 * DeviceRegistry.maxPinnedTokenBytes else {
                return
                    "a token of \(token.utf8.count / 2) bytes is longer than any an app gets (at most \(DeviceRegistry.maxPinnedTokenBytes), as --token-bytes); a push to it could not be sent"
            }
            return "'\(token)' is not an even-length hex token"
        case .invalidDeviceID: return DeviceRegistry.deviceIDRule
        case .tooManyApps(let id): return DeviceRegistry.tooManyAppsMessage(deviceID: id)
        case .tooManyDevices(let limit, let batch?):
            return
                "a batch of \(batch.asked) devices would take the emulator from \(batch.holding) to \(batch.holding + batch.asked) devices, over the \(limit) --max-devices allows (none were added); ask for at most \(max(limit - batch.holding, 0)), delete some (DELETE /api/v1/devices/{id}), reset (POST /api/v1/reset) or start it with a higher --max-devices"
        case .tooManyDevices(let limit, nil):
            return
                "the emulator holds \(limit) devices or more (a kept state can hold more), the most --max-devices allows; delete some (DELETE /api/v1/devices/{id}), reset (POST /api/v1/reset) or start it with a higher --max-devices"
        case .tooManyTokens(let limit):
            return
                "the emulator holds \(limit) device tokens or more (a kept state can hold more), the most --max-tokens allows (tokens of uninstalled apps and deleted devices count: they still answer 410); reset (POST /api/v1/reset) or start it with a higher --max-tokens"
        }
    }

    /// The device or app named does not exist (rather than: the request is malformed).
    public var isNotFound: Bool {
        switch self {
        case .unknownDevice, .appNotInstalled: return true
        case .invalidBundleID, .deviceExists, .tokenInUse, .invalidToken, .invalidDeviceID, .tooManyApps, .tooManyDevices, .tooManyTokens:
            return false
        }
    }
}

/// Devices, their apps and every token ever issued (tokens stay known after they are
/// invalidated so that later pushes get 410 rather than 400). A value type so that the
/// configured start state can be kept and restored by a reset.
public struct DeviceRegistry: Sendable {
    /// By id, and in the order the admin API lists them (creation time, then id).
    public private(set) var devices = OrderedTable<Device>()
    /// Keyed by lowercase hex; listed by issue time, then token.
    public private(set) var tokens = OrderedTable<TokenEntry>()
    /// Token length in bytes. Apple says not to assume one; 32 is what devices use today.
    public var tokenByteCount: Int
    private var random: FastRandom
    /// With persistence on: the devices and tokens changed since `takeChangedIDs`.
    public var tracksChanges = false
    private var changedDevices: Set<String> = []
    private var changedTokens: Set<String> = []

    /// The most apps one device may have installed. A real iPhone has a few dozen apps that
    /// take notifications; the bound keeps what one device costs (its `hello` is installed
    /// under the state lock, its row is saved whole) small and fixed.
    public static let maxAppsPerDevice = 1000

    static func tooManyAppsMessage(deviceID: String) -> String {
        "device '\(deviceID)' would have more than \(maxAppsPerDevice) apps, the most a device may have installed (uninstall one first)"
    }

    /// What devices use today.
    public static let defaultTokenByteCount = 32

    /// How many devices and tokens the registry may hold (`--max-devices`, `--max-tokens`), so
    /// that clients creating them without end (a device socket saying hello under new ids,
    /// each listing a thousand apps) meet a clear refusal rather than running the process out
    /// of memory (about 0.75 KB a token). Tokens are never dropped but by a reset: those of
    /// uninstalled apps and deleted devices keep answering 410.
    public struct Limits: Sendable, Equatable {
        public var maxDevices: Int
        public var maxTokens: Int
        public init(maxDevices: Int = 2_000_000, maxTokens: Int = 4_000_000) {
            self.maxDevices = maxDevices
            self.maxTokens = maxTokens
        }
    }
    public var limits: Limits

    public init(tokenByteCount: Int = defaultTokenByteCount, limits: Limits = Limits(), seed: UInt64? = nil) {
        self.tokenByteCount = tokenByteCount
        self.limits = limits
        self.random = seed.map(FastRandom.init(seed:)) ?? FastRandom()
    }

    /// An empty registry with this one's settings (token length, limits).
    public func emptyLikeThis() -> DeviceRegistry { DeviceRegistry(tokenByteCount: tokenByteCount, limits: limits) }

    public func token(_ hex: String) -> TokenEntry? { tokens[hex] }

    /// The slot of the device the token in `tokenSlot` names (`deviceID`), for `device(_:slot:)`:
    /// the link kept beside the token while it still leads to that device, else found by id
    /// (and kept as the link). A push then hashes the token alone, not its device's id too.
    mutating func deviceSlot(ofTokenIn tokenSlot: Int, deviceID: String) -> Int {
        let link = tokens.link(ofSlot: tokenSlot)
        if devices.slot(link, holds: deviceID) { return link }
        guard let found = devices.slot(of: deviceID) else { return -1 }
        tokens.setLink(found, ofSlot: tokenSlot)
        return found
    }

    /// The slot of the device `id`: `slot` when it holds that device (`deviceSlot(ofTokenIn:)`),
    /// else found by id; -1 when there is none.
    func deviceSlot(_ id: String, hint slot: Int) -> Int {
        devices.slot(slot, holds: id) ? slot : devices.slot(of: id) ?? -1
    }

    /// The ids of devices and tokens changed since the last call (persistence).
    public mutating func takeChangedIDs() -> (devices: Set<String>, tokens: Set<String>) {
        (takeAll(&changedDevices), takeAll(&changedTokens))
    }

    private mutating func noteDevice(_ id: String) { if tracksChanges { changedDevices.insert(id) } }
    private mutating func noteToken(_ token: String) { if tracksChanges { changedTokens.insert(token) } }

    /// Puts persisted devices and tokens back (start-up with `--state-dir`). Devices come back
    /// without a connection; a persisted device or token replaces one with the same id.
    public mutating func restore(devices restored: [Device], tokens restoredTokens: [TokenEntry]) {
        for var device in restored {
            device.connectionID = nil
            devices[device.id] = device
        }
        for entry in restoredTokens { tokens[entry.token] = entry }
    }

    /// Replication: a device row as another instance saved it, connection id included (in
    /// multi-instance mode connection ids are unique across instances and the device's
    /// socket may live elsewhere).
    public mutating func saveReplicated(_ device: Device) {
        devices[device.id] = device
        noteDevice(device.id)
    }

    /// Replication: the device is gone (its tokens come as their own rows).
    public mutating func removeReplicated(deviceID: String) {
        devices.removeValue(forKey: deviceID)
        noteDevice(deviceID)
    }

    /// Replication: a token row as another instance saved it.
    public mutating func saveReplicated(_ entry: TokenEntry) {
        tokens[entry.token] = entry
        noteToken(entry.token)
    }

    /// Copies a device and its current tokens from another registry (a configured device
    /// missing from the persisted state). Its pinned tokens become active again, as after a reset.
    public mutating func adopt(device: Device, from other: DeviceRegistry) {
        devices[device.id] = device
        noteDevice(device.id)
        for app in device.apps.values {
            for token in app.tokens.values {
                guard let entry = other.tokens[token] else { continue }
                tokens[token] = entry
                noteToken(token)
            }
        }
    }

    /// Keeps drawing tokens where `other` left off. A reset restores the registry, but tokens
    /// issued before it must never be handed out again (APNs never reuses a token).
    public mutating func continueRandomness(from other: DeviceRegistry) {
        random = other.random
    }

    /// Letters, digits, `-` and `.`, not starting or ending with a dot, no empty component.
    /// Runs on every request's topic, so it walks the bytes directly.
    public static func isValidBundleID(_ bundle: String) -> Bool {
        var bundle = bundle
        return bundle.withUTF8 { bytes in
            guard !bytes.isEmpty, bytes.count <= 255, bytes.first != UInt8(ascii: "."), bytes.last != UInt8(ascii: ".") else {
                return false
            }
            var previousDot = false
            for c in bytes {
                let isDot = c == UInt8(ascii: ".")
                let lower = c | 0x20
                guard isDot || c == UInt8(ascii: "-") || (c >= 0x30 && c <= 0x39) || (lower >= 0x61 && lower <= 0x7A) else {
                    return false
                }
                if isDot && previousDot { return false }
                previousDot = isDot
            }
            return true
        }
    }

    public mutating func newDeviceID() -> String { random.uniqueID() }

    /// What a device id may be. Ids travel in device frames, log lines and URL paths, so
    /// they are kept to a set that needs no escaping anywhere (no control characters).
    public static let deviceIDRule = "a device id is 1 to 128 letters, digits, '-', '_' or '.', not dots alone"

    /// Letters, digits, `-`, `_` and `.`; 1 to 128 bytes. Not dots alone: `.` and `..` as a
    /// path segment are removed by clients (RFC 3986 §5.2.4), so the admin API could not name it.
    public static func isValidDeviceID(_ id: String) -> Bool {
        let bytes = id.utf8
        return !bytes.isEmpty && bytes.count <= 128 && !bytes.allSatisfy { $0 == 0x2E }
            && bytes.allSatisfy { c in
                let lower = c | 0x20
                return (c >= 0x30 && c <= 0x39) || (lower >= 0x61 && lower <= 0x7A) || c == 0x2D || c == 0x5F || c == 0x2E
            }
    }

    /// Adds a device, virtual or socket-backed.
    @discardableResult
    public mutating func addDevice(id: String? = nil, isVirtual: Bool, nowMs: Int64) throws(RegistryError) -> Device {
        let deviceID = id ?? newDeviceID()
        guard Self.isValidDeviceID(deviceID) else { throw .invalidDeviceID(deviceID) }
        guard devices[deviceID] == nil else { throw .deviceExists(deviceID) }
        guard devices.count < limits.maxDevices else { throw .tooManyDevices(limit: limits.maxDevices) }
        let device = Device(id: deviceID, isVirtual: isVirtual, apps: [:], createdAtMs: nowMs, connectionID: nil)
        devices[deviceID] = device
        noteDevice(deviceID)
        return device
    }

    /// Throws `tooManyApps` when installing `bundleIDs` (those not installed yet) would take the
    /// device over `maxAppsPerDevice`: checked before a hello or a restore installs any of them,
    /// so a refused one changes nothing. An unknown device counts as having none.
    /// The same for `--max-devices` and `--max-tokens`: a new device needs a place, and every
    /// app not installed yet at least one token.
    public func checkRoom(forApps bundleIDs: some Sequence<String>, on deviceID: String) throws(RegistryError) {
        let installed = devices[deviceID]?.apps ?? [:]
        var added = Set<String>()
        for bundleID in bundleIDs where installed[bundleID] == nil {
            added.insert(bundleID)
            if installed.count + added.count > Self.maxAppsPerDevice { throw .tooManyApps(deviceID: deviceID) }
        }
        if devices[deviceID] == nil, devices.count >= limits.maxDevices { throw .tooManyDevices(limit: limits.maxDevices) }
        if tokens.count + added.count > limits.maxTokens { throw .tooManyTokens(limit: limits.maxTokens) }
    }

    /// Throws `tooManyTokens` when `count` new tokens would take the emulator over
    /// `--max-tokens`: checked before a rotate or a reinstall ends the old ones, so a refused
    /// one changes nothing.
    public func checkRoom(forTokens count: Int) throws(RegistryError) {
        if tokens.count + count > limits.maxTokens { throw .tooManyTokens(limit: limits.maxTokens) }
    }

    /// The longest token that may be pinned (bytes; twice as many hex digits), as `--token-bytes`
    /// allows: a far longer one would not fit a request's path (HTTP/2 header limits).
    public static let maxPinnedTokenBytes = 255

    /// Installs an app (or re-registers an installed one) and returns its token of `kind`.
    /// Registering again returns the same token while it is valid, as on iOS. `fixedToken`
    /// lets a configuration pin a token so test suites can hard-code it.
    public mutating func register(
        deviceID: String, bundleID: String, environment: APNsEnvironment,
        kind: TokenKind = .app, fixedToken: String? = nil, nowMs: Int64
    ) throws(RegistryError) -> TokenEntry {
        // The device is changed where it is stored: a copy of it taken out of `devices` and
        // written back would copy its whole app dictionary on every install (a hello listing
        // N apps cost N² that way).
        guard devices[deviceID] != nil else { throw .unknownDevice(deviceID) }
        guard Self.isValidBundleID(bundleID) else { throw .invalidBundleID(bundleID) }
        let installed = devices[deviceID]!.apps[bundleID]
        if installed == nil && devices[deviceID]!.apps.count >= Self.maxAppsPerDevice { throw .tooManyApps(deviceID: deviceID) }
        if tokens.count >= limits.maxTokens, !keepsItsToken(installed, environment: environment, kind: kind, fixedToken: fixedToken) {
            throw .tooManyTokens(limit: limits.maxTokens)
        }
        var app = installed ?? InstalledApp(bundleID: bundleID, environment: environment, tokens: [:], installedAtMs: nowMs)
        if app.environment != environment {
            // Switching between a development and a distribution build is a reinstall.
            invalidateTokens(of: app, nowMs: nowMs)
            app = InstalledApp(bundleID: bundleID, environment: environment, tokens: [:], installedAtMs: nowMs)
        }
        if let existing = app.tokens[kind], let entry = tokens[existing], entry.state == .active,
            fixedToken == nil || fixedToken == existing
        {
            return entry
        }
        let token: String
        if let fixedToken {
            guard Hex.isEvenLengthHex(Substring(fixedToken)), fixedToken.utf8.count <= 2 * Self.maxPinnedTokenBytes else {
                throw .invalidToken(fixedToken)
            }
            token = Hex.lowercased(Substring(fixedToken))
            if let other = tokens[token], other.deviceID != deviceID || other.bundleID != bundleID || other.kind != kind {
                throw .tokenInUse(token)
            }
        } else {
            token = mintToken()
        }
        if let old = app.tokens[kind], old != token { invalidate(token: old, nowMs: nowMs) }
        let entry = TokenEntry(
            token: token, deviceID: deviceID, bundleID: bundleID, environment: environment,
            kind: kind, state: .active, issuedAtMs: nowMs)
        tokens[token] = entry
        app.tokens[kind] = token
        devices[deviceID]!.apps[bundleID] = app
        noteToken(token)
        noteDevice(deviceID)
        return entry
    }

    /// Whether registering `installed` again takes no new token: it has an active one of
    /// `kind` in `environment` (the one pinned, if a token is pinned), or the pinned token is
    /// issued already.
    private func keepsItsToken(_ installed: InstalledApp?, environment: APNsEnvironment, kind: TokenKind, fixedToken: String?) -> Bool {
        if let fixedToken, tokens[Hex.lowercased(Substring(fixedToken))] != nil { return true }
        guard let installed, installed.environment == environment, let existing = installed.tokens[kind],
            tokens[existing]?.state == .active
        else { return false }
        return fixedToken == nil || fixedToken == existing
    }

    /// Replaces the app's tokens (APNs rotating them on its own): new tokens, old ones invalid.
    public mutating func rotate(deviceID: String, bundleID: String, nowMs: Int64) throws(RegistryError) -> [TokenEntry] {
        guard let device = devices[deviceID] else { throw .unknownDevice(deviceID) }
        guard let app = device.apps[bundleID] else { throw .appNotInstalled(deviceID: deviceID, bundleID: bundleID) }
        try checkRoom(forTokens: app.tokens.count)
        invalidateTokens(of: app, nowMs: nowMs)
        var entries: [TokenEntry] = []
        for kind in app.tokens.keys.sorted(by: { $0.rawValue < $1.rawValue }) {
            entries.append(try register(deviceID: deviceID, bundleID: bundleID, environment: app.environment, kind: kind, nowMs: nowMs))
        }
        return entries
    }

    /// Changes a device in place (presence, low power, app settings).
    public mutating func updateDevice(_ id: String, _ change: (inout Device) -> Void) throws(RegistryError) {
        guard devices[id] != nil else { throw .unknownDevice(id) }
        change(&devices[id]!)
        noteDevice(id)
    }

    /// Why an invalidated token no longer reaches its app, in words, from what the device
    /// has now: a 410's explanation and the record of a push the device discards say it.
    public func whyInvalidated(_ entry: TokenEntry) -> String {
        guard let device = devices[entry.deviceID] else { return "its device was removed" }
        guard let app = device.apps[entry.bundleID] else { return "the app was uninstalled" }
        if app.tokens.values.contains(entry.token) { return "it was set unregistered through the admin API (the app still has it)" }
        if app.environment != entry.environment {
            return "the app was installed again as a \(app.environment.rawValue) build, with a \(app.environment.rawValue) token"
        }
        return "the app has another token now (reinstalled, or its token replaced)"
    }

    /// Deletes the app: its tokens become `Unregistered` as of `invalidAtMs` (APNs delays the
    /// 410 after an uninstall; `afterPushes` ends the delay early after that many pushes).
    public mutating func uninstall(
        deviceID: String, bundleID: String, invalidAtMs: Int64,
        afterPushes: Int? = nil
    ) throws(RegistryError) {
        guard devices[deviceID] != nil else { throw .unknownDevice(deviceID) }
        // Removed in place, not from a copy written back (which would copy the app dictionary).
        guard let app = devices[deviceID]!.apps.removeValue(forKey: bundleID) else {
            throw .appNotInstalled(deviceID: deviceID, bundleID: bundleID)
        }
        invalidateTokens(of: app, nowMs: invalidAtMs)
        if let afterPushes {
            for token in app.tokens.values {
                tokens[token]?.pushesUntilUnregistered = afterPushes
                noteToken(token)
            }
        }
        noteDevice(deviceID)
    }

    /// Counts a push to a token whose 410 is delayed; returns the state to answer with now.
    public mutating func countPushToInvalidatedToken(_ token: String, nowMs: Int64) -> TokenState? {
        guard var entry = tokens[token] else { return nil }
        // `left` pushes are still answered 200; the one after them gets the 410.
        if case .unregistered(let since) = entry.state, since > nowMs, let left = entry.pushesUntilUnregistered {
            if left <= 0 {
                entry.state = .unregistered(sinceMs: nowMs)
                entry.pushesUntilUnregistered = nil
            } else {
                entry.pushesUntilUnregistered = left - 1
            }
            tokens[token] = entry
            noteToken(token)
        }
        return entry.state
    }

    /// Sets a token's state directly (admin API, tests).
    public mutating func setState(token: String, _ state: TokenState) -> Bool {
        guard tokens[token] != nil else { return false }
        tokens[token]!.state = state
        noteToken(token)
        return true
    }

    public mutating func removeDevice(id: String, nowMs: Int64) throws(RegistryError) {
        guard let device = devices.removeValue(forKey: id) else { throw .unknownDevice(id) }
        noteDevice(id)
        for app in device.apps.values { invalidateTokens(of: app, nowMs: nowMs) }
    }

    /// Takes back devices just added, with the tokens issued to their apps (a creation that
    /// failed half-way). Cheaper than restoring a saved copy of the registry, which makes the
    /// first change after it copy every device (about 100 ms per 1,000,000, under the lock).
    public mutating func discard(newDevices ids: [String]) {
        for id in ids {
            guard let device = devices.removeValue(forKey: id) else { continue }
            noteDevice(id)
            for token in device.apps.values.flatMap(\.tokens.values) where tokens[token]?.deviceID == id {
                tokens.removeValue(forKey: token)
                noteToken(token)
            }
        }
    }

    /// Drops up to `count` devices and tokens, with no trace (a registry being thrown away, a
    /// piece at a time); false once it is empty.
    public mutating func discardSome(_ count: Int) -> Bool {
        devices.discardSome(count)
        tokens.discardSome(count)
        return !devices.isEmpty || !tokens.isEmpty
    }

    /// A page of devices in the listed order (creation time, then id), after `after`.
    public func devicesPage(after: ListKey?, limit: Int) -> (rows: [Device], more: Bool) {
        devices.page(after: after, limit: limit)
    }

    /// A page of tokens in the listed order (issue time, then token), after `after`.
    public func tokensPage(after: ListKey?, limit: Int) -> (rows: [TokenEntry], more: Bool) {
        tokens.page(after: after, limit: limit)
    }

    private mutating func invalidateTokens(of app: InstalledApp, nowMs: Int64) {
        for token in app.tokens.values { invalidate(token: token, nowMs: nowMs) }
    }

    /// An uninstall, a reinstall or a new token: the old one answers 410 `Unregistered` from
    /// now on, whatever state the admin API had put it in (rate limited, expired); one already
    /// unregistered keeps its time.
    private mutating func invalidate(token: String, nowMs: Int64) {
        guard let state = tokens[token]?.state else { return }
        if case .unregistered = state { return }
        tokens[token]!.state = .unregistered(sinceMs: nowMs)
        noteToken(token)
    }

    /// Whether the token is still its app's on its device (not uninstalled, reinstalled or
    /// replaced).
    public func isCurrent(token: String) -> Bool {
        guard let entry = tokens[token] else { return false }
        return devices[entry.deviceID]?.apps[entry.bundleID]?.tokens[entry.kind] == token
    }

    private mutating func mintToken() -> String {
        while true {
            let candidate = Hex.encode(random.bytes(tokenByteCount))
            if tokens[candidate] == nil { return candidate }
        }
    }
}
