import Foundation
import ProviderClient

/// Where this team's server sends pushes and with which credentials. In production it names
/// Apple (api.push.apple.com:443, the system trust store); in tests, the emulator.
public struct APNsSettings: Sendable {
    public var address: HostPort
    /// A CA to trust instead of the system's (the emulator's, in tests).
    public var caPath: String?
    public var teamID: String
    public var keyID: String
    /// The `.p8` signing key's text.
    public var keyPEM: String
    /// The app's bundle id, sent as `apns-topic`.
    public var topic: String

    public init(address: HostPort, caPath: String? = nil, teamID: String, keyID: String, keyPEM: String, topic: String) {
        self.address = address
        self.caPath = caPath
        self.teamID = teamID
        self.keyID = keyID
        self.keyPEM = keyPEM
        self.topic = topic
    }
}

/// The device tokens the server knows, per user.
public final class TokenStore: @unchecked Sendable {
    private var tokens: [String: Set<String>] = [:]
    private let lock = NSLock()

    public init() {}

    public func add(_ token: String, for user: String) { lock.withLock { _ = tokens[user, default: []].insert(token) } }
    public func tokens(for user: String) -> [String] { lock.withLock { tokens[user].map { $0.sorted() } ?? [] } }
    public func remove(_ token: String) { lock.withLock { for user in tokens.keys { tokens[user]?.remove(token) } } }
}

/// What happened to one push.
public struct PushOutcome: Sendable, Equatable {
    public var token: String
    public var status: Int
    public var reason: String?
    /// The token was dropped from the store because APNs said it is no longer valid.
    public var tokenRemoved: Bool
}

/// The part of the server under test: it tells a user their order shipped, on every device
/// they have, and forgets tokens APNs says are gone (410 `Unregistered`, 400 `BadDeviceToken`).
public final class PushService {
    let settings: APNsSettings
    let store: TokenStore
    private let key: ProviderSigningKey
    private var connection: HTTP2ClientConnection?
    private var providerToken: (value: String, issuedAt: Date)?

    public init(settings: APNsSettings, store: TokenStore) throws {
        self.settings = settings
        self.store = store
        key = ProviderSigningKey(teamID: settings.teamID, keyID: settings.keyID, privateKey: try ES256PrivateKey(pem: settings.keyPEM))
    }

    public func notifyOrderShipped(user: String, orderID: Int) throws -> [PushOutcome] {
        let payload = #"{"aps":{"alert":{"title":"Shipped","body":"Order \#(orderID) is on its way"},"sound":"default"},"orderId":\#(orderID)}"#
        var outcomes: [PushOutcome] = []
        for token in store.tokens(for: user) {
            var push = APNsPush(token: token, topic: settings.topic, payload: Array(payload.utf8), providerToken: try currentProviderToken())
            push.pushType = "alert"
            let result = APNsResult(try openConnection().send(push.request))
            let gone = result.status == 410 || result.reason == "BadDeviceToken"
            if gone { store.remove(token) }
            outcomes.append(PushOutcome(token: token, status: result.status, reason: result.reason, tokenRemoved: gone))
        }
        return outcomes
    }

    /// One provider token reused for 30 minutes, as APNs asks (a new one at most every 20).
    private func currentProviderToken() throws -> String {
        if let providerToken, Date().timeIntervalSince(providerToken.issuedAt) < 30 * 60 { return providerToken.value }
        let now = Date()
        let value = try key.token(issuedAt: Int64(now.timeIntervalSince1970))
        providerToken = (value, now)
        return value
    }

    private func openConnection() throws -> HTTP2ClientConnection {
        if let connection, !connection.isClosed { return connection }
        var options = HTTP2ClientConnection.Options(address: settings.address)
        options.caPath = settings.caPath
        let opened = try HTTP2ClientConnection(options)
        connection = opened
        return opened
    }
}
