import HTTPGrammar
import APNsCore
import OpenSSLCrypto
import Synchronization

/// Real ES256 verification for Core tests, counting how often it runs.
final class CountingVerifier: SignatureVerifier {
    let key: ES256PublicKey
    let calls = Atomic<Int>(0)
    init(_ key: ES256PublicKey) { self.key = key }
    func verify(signature: [UInt8], message: [UInt8]) -> Bool {
        calls.add(1, ordering: .relaxed)
        return key.verify(signature: signature, message: message)
    }
    func verify(signature: [UInt8], message: [UInt8], algorithm: TokenAlgorithm) -> Bool {
        calls.add(1, ordering: .relaxed)
        let jose: [TokenAlgorithm: JOSEAlgorithm] = [.es256: .es256, .es384: .es384, .es512: .es512]
        return key.verify(signature: signature, message: message, as: jose[algorithm]!)
    }
}

struct SigningKey {
    let teamID: String
    let keyID: String
    let privateKey: ES256PrivateKey
    let verifier: CountingVerifier

    init(team: String, key: String) throws {
        teamID = team
        keyID = key
        privateKey = try ES256PrivateKey.generate()
        verifier = CountingVerifier(privateKey.publicKey)
    }

    func token(issuedAt: Int64, der: Bool = false, issuer: String? = nil) throws -> String {
        try ProviderToken.make(keyID: keyID, teamID: issuer ?? teamID, issuedAt: issuedAt) {
            der ? try privateKey.signDER($0) : try privateKey.sign($0)
        }
    }

    func providerKey(environment: APNsEnvironment? = nil, topics: Set<String>? = nil, related: String? = nil) -> ProviderKey {
        ProviderKey(
            teamID: teamID, keyID: keyID, environment: environment, topics: topics, relatedKeyID: related,
            verifier: verifier, source: "test")
    }
}

/// A small world: team A owns com.example.app, team B owns com.other.app, with devices and
/// tokens in both environments.
final class Fixture: @unchecked Sendable {
    let clock = ManualClock(milliseconds: 1_767_225_600_000)
    let keyA: SigningKey
    let keyAProductionOnly: SigningKey
    let keyTopic: SigningKey
    let keyTopicRelated: SigningKey
    let keyTopicOther: SigningKey
    let keyB: SigningKey
    let state: EmulatorState
    let endpoint: ProviderEndpoint

    let sandboxToken: String
    let productionToken: String
    let voipToken: String
    let otherAppToken: String
    let uninstalledToken: String
    let uninstalledAtMs: Int64

    init(options: EndpointOptions = EndpointOptions(), onBackendIntents: (@Sendable ([BackendIntent]) -> Void)? = nil) throws {
        keyA = try SigningKey(team: "TEAMAAAAAA", key: "KEYAAAAAAA")
        keyAProductionOnly = try SigningKey(team: "TEAMAAAAAA", key: "KEYAPROD01")
        keyTopic = try SigningKey(team: "TEAMAAAAAA", key: "KEYTOPIC01")
        keyTopicRelated = try SigningKey(team: "TEAMAAAAAA", key: "KEYTOPIC02")
        keyTopicOther = try SigningKey(team: "TEAMAAAAAA", key: "KEYTOPIC03")
        keyB = try SigningKey(team: "TEAMBBBBBB", key: "KEYBBBBBBB")

        var credentials = Credentials()
        credentials.add(keyA.providerKey())
        credentials.add(keyAProductionOnly.providerKey(environment: .production))
        credentials.add(keyTopic.providerKey(environment: .sandbox, topics: ["com.example.app"], related: "KEYTOPIC02"))
        credentials.add(keyTopicRelated.providerKey(environment: .sandbox, topics: ["com.example.app"]))
        credentials.add(keyTopicOther.providerKey(environment: .sandbox, topics: ["com.example.app"]))
        credentials.add(keyB.providerKey())
        credentials.addApp(teamID: "TEAMAAAAAA", bundleID: "com.example.app")
        credentials.addApp(teamID: "TEAMBBBBBB", bundleID: "com.other.app")

        let now = clock.nowMilliseconds()
        var registry = DeviceRegistry(seed: 42)
        try registry.addDevice(id: "d1", isVirtual: true, nowMs: now)
        try registry.addDevice(id: "d2", isVirtual: true, nowMs: now)
        try registry.addDevice(id: "d3", isVirtual: true, nowMs: now)
        sandboxToken = try registry.register(deviceID: "d1", bundleID: "com.example.app", environment: .sandbox, nowMs: now).token
        voipToken = try registry.register(deviceID: "d1", bundleID: "com.example.app", environment: .sandbox, kind: .voip, nowMs: now).token
        productionToken = try registry.register(deviceID: "d2", bundleID: "com.example.app", environment: .production, nowMs: now).token
        otherAppToken = try registry.register(deviceID: "d1", bundleID: "com.other.app", environment: .sandbox, nowMs: now).token
        uninstalledToken = try registry.register(deviceID: "d3", bundleID: "com.example.app", environment: .sandbox, nowMs: now).token
        uninstalledAtMs = now - 5_000
        try registry.uninstall(deviceID: "d3", bundleID: "com.example.app", invalidAtMs: uninstalledAtMs)

        state = EmulatorState(
            start: World(credentials: credentials, registry: registry, records: RecordStore(capacity: 1000)),
            onBackendIntents: onBackendIntents)
        endpoint = ProviderEndpoint(state: state, clock: clock, options: options)
    }

    var nowSeconds: Int64 { clock.nowSeconds() }

    func connection(_ environment: APNsEnvironment = .sandbox, serverName: String? = nil) -> ProviderConnectionContext {
        ProviderConnectionContext(
            connectionID: 1, listenerEnvironment: environment, serverName: serverName,
            tokenPolicy: TokenPolicy(), random: FastRandom(seed: 7))
    }

    /// A valid alert push to the sandbox token, signed with key A.
    func request(
        method: String = "POST", path: String? = nil, token: String? = nil, topic: String? = "com.example.app",
        authorization: String?? = .none, extra: [(String, String)] = [], body: String? = #"{"aps":{"alert":"hi"}}"#,
        authority: String = "127.0.0.1:2197"
    ) throws -> PushRequest {
        var headers: [HeaderField] = [
            HeaderField(":method", method), HeaderField(":scheme", "https"), HeaderField(":authority", authority),
            HeaderField(":path", path ?? "/3/device/\(token ?? sandboxToken)"),
        ]
        switch authorization {
        case .none: headers.append(HeaderField("authorization", "bearer \(try keyA.token(issuedAt: nowSeconds))"))
        case .some(.some(let value)): headers.append(HeaderField("authorization", value))
        case .some(.none): break
        }
        if let topic { headers.append(HeaderField("apns-topic", topic)) }
        headers.append(contentsOf: extra.map { HeaderField($0.0, $0.1) })
        let bytes = Array((body ?? "").utf8)
        return PushRequest(streamID: 1, headers: headers, body: bytes)
    }

    func send(_ request: PushRequest, on environment: APNsEnvironment = .sandbox) -> PushResponse {
        var connection = connection(environment)
        return endpoint.handle(request, connection: &connection)
    }

    func latestRecord() -> NotificationRecord? {
        state.withWorld { $0.records.newestFirst(limit: 1).first }
    }
}

/// A push as a provider sends it, each on a new provider connection (`connectionID`, then
/// counted up), signed with `key` at `issuedAt`.
func providerPush(
    _ endpoint: ProviderEndpoint, token: String, key: SigningKey, issuedAt: Int64, connectionID: inout UInt64,
    topic: String, body: String, headers: [(String, String)]
) throws -> PushResponse {
    var fields: [HeaderField] = [
        HeaderField(":method", "POST"), HeaderField(":scheme", "https"), HeaderField(":authority", "127.0.0.1:2197"),
        HeaderField(":path", "/3/device/\(token)"),
        HeaderField("authorization", "bearer \(try key.token(issuedAt: issuedAt))"), HeaderField("apns-topic", topic),
    ]
    fields += headers.map { HeaderField($0.0, $0.1) }
    var connection = ProviderConnectionContext(
        connectionID: connectionID, listenerEnvironment: .sandbox, serverName: nil,
        tokenPolicy: TokenPolicy(), random: FastRandom(seed: connectionID))
    connectionID += 1
    return endpoint.handle(PushRequest(streamID: 1, headers: fields, body: Array(body.utf8)), connection: &connection)
}
