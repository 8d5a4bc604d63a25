/// The rules for provider tokens on one connection (docs/apns-behaviour.md, "Provider tokens").
public struct TokenPolicy: Sendable {
    /// `iat` older than this → 403 ExpiredProviderToken.
    public var maxTokenAgeSeconds: Int64 = 3600
    /// A new token on the same connection sooner than this after the previous one → 429.
    public var minRefreshIntervalSeconds: Int64 = 1200
    /// How far in the future `iat` may be (clock skew) before the token is refused. Apple's
    /// behaviour is unconfirmed; a few minutes of skew is the emulator's choice
    /// (docs/apns-behaviour.md, "Unconfirmed choices").
    public var allowedFutureSkewSeconds: Int64 = 300

    public init() {}
}

/// What a verified token grants for one request. A class, like `ProviderKey`: every
/// request on the connection shares the one instance made when the token was verified.
public final class AuthenticatedProvider: Sendable {
    public let key: ProviderKey
    public let issuedAt: Int64
    public let token: ProviderToken
    /// The credentials generation at which this connection was bound to its team.
    public let boundAtGeneration: UInt64

    /// The key's team.
    public var teamID: String { key.teamID }

    init(key: ProviderKey, issuedAt: Int64, token: ProviderToken, boundAtGeneration: UInt64) {
        self.key = key
        self.issuedAt = issuedAt
        self.token = token
        self.boundAtGeneration = boundAtGeneration
    }
}

public enum AuthenticationResult: Sendable {
    /// `firstOnConnection` is true for the first valid token on the connection: the moment APNs
    /// raises the connection's stream limit.
    case authenticated(AuthenticatedProvider, firstOnConnection: Bool)
    case rejected(APNsReason, explanation: String, token: ProviderToken?)
}

/// Per-connection provider-token state: the team the connection is bound to, the first key,
/// and a cache of verified tokens so ES256 runs once per token string, not once per push.
/// Confined to the connection's thread.
public struct ConnectionAuthenticator: Sendable {
    public let policy: TokenPolicy

    private struct Verified: Sendable {
        var tokenString: Substring
        var provider: AuthenticatedProvider
        var generation: UInt64
        /// When this token string was first used on this connection (ms).
        var firstUsedAt: Int64
        /// A fault rule answered ExpiredProviderToken for it (`noteExpired`).
        var expired = false
        /// The `iat` of the older token of the same key this one replaced on this connection
        /// (its claims: re-signed, it is the same token).
        var replacedIssuedAt: Int64?
    }

    private var boundTeam: String?
    private var boundGeneration: UInt64 = 0
    private var firstKey: ProviderKey?
    /// Most recent verified token per key id (a topic-specific key and its related key may
    /// alternate on one connection); at most a handful of entries.
    private var verified: [Verified] = []
    /// The last authorization header and its entry in `verified`.
    private var lastAuthorization: (header: String, index: Int)?
    /// Set when a token string was checked afresh (not from the cache): `valid` or the
    /// reason it failed. The endpoint reads and clears it for the metrics.
    public var lastVerification: String?

    public init(policy: TokenPolicy = TokenPolicy()) { self.policy = policy }

    public var isBound: Bool { boundTeam != nil }

    /// A fault rule answered `ExpiredProviderToken` to a request carrying this header: its token
    /// counts as expired on this connection from now on, so the fresh one the client makes is
    /// no early update (APNs never answers TooManyProviderTokenUpdates to the token that
    /// replaces one it called expired).
    public mutating func noteExpired(authorization: String?) {
        guard let authorization, let token = Self.bearerToken(Substring(authorization)) else { return }
        for index in verified.indices where verified[index].tokenString == token { verified[index].expired = true }
    }

    public var teamID: String? { boundTeam }

    /// - Parameters:
    ///   - authorization: the `authorization` header value, or nil when absent.
    ///   - credentialsGeneration: the current generation; a cached verdict from an older
    ///     generation is re-checked (keys may have been removed or changed).
    ///   - lookUpKey: finds a key by id in the current credentials.
    public mutating func authenticate(
        authorization: String?, environment: APNsEnvironment, nowMs: Int64,
        credentialsGeneration: UInt64, lookUpKey: (String) -> ProviderKey?
    ) -> AuthenticationResult {
        // Fastest path: the very header value seen last time (String equality short-circuits
        // when both share storage, which the HTTP/2 layer arranges for repeated values).
        if let authorization, let last = lastAuthorization, last.header == authorization,
            verified.indices.contains(last.index), verified[last.index].generation == credentialsGeneration
        {
            return Self.checkAge(verified[last.index].provider, policy: policy, environment: environment, nowMs: nowMs, firstOnConnection: false)
        }
        guard let authorization, !authorization.isEmpty else {
            return .rejected(.missingProviderToken, explanation: "no authorization header on a token-based connection", token: nil)
        }
        guard let tokenString = Self.bearerToken(Substring(authorization)) else {
            return .rejected(
                .invalidProviderToken,
                explanation: "authorization header is not 'bearer <JWT>'", token: nil)
        }
        if tokenString.isEmpty {
            return .rejected(.missingProviderToken, explanation: "authorization header carries an empty token", token: nil)
        }

        // Fast path: the token this connection has already verified.
        if let index = verified.firstIndex(where: { $0.tokenString == tokenString }),
            verified[index].generation == credentialsGeneration
        {
            lastAuthorization = (authorization, index)
            let entry = verified[index]
            return Self.checkAge(entry.provider, policy: policy, environment: environment, nowMs: nowMs, firstOnConnection: false)
        }
        let result = verifyNew(
            tokenString, environment: environment, nowMs: nowMs,
            credentialsGeneration: credentialsGeneration, lookUpKey: lookUpKey)
        switch result {
        case .authenticated: lastVerification = "valid"
        case .rejected(let reason, _, _): lastVerification = reason.rawValue
        }
        lastAuthorization = verified.lastIndex { $0.tokenString == tokenString }.map { (authorization, $0) }
        return result
    }

    /// Accepts `bearer` in any case (Apple writes lowercase; some clients send `Bearer`).
    public static func bearerToken(_ header: Substring) -> Substring? {
        let scheme = "bearer".utf8
        let utf8 = header.utf8
        // `bearer` with nothing after it (its space trimmed away) carries an empty token.
        if utf8.count == scheme.count, utf8.elementsEqual(scheme, by: asciiCaseInsensitiveEqual) { return header.dropFirst(scheme.count) }
        guard utf8.count > scheme.count,
            utf8.prefix(scheme.count).elementsEqual(scheme, by: asciiCaseInsensitiveEqual),
            utf8.dropFirst(scheme.count).first == UInt8(ascii: " ")
        else { return nil }
        var rest = header.dropFirst(scheme.count + 1)
        while rest.first == " " { rest = rest.dropFirst() }
        while rest.last == " " { rest = rest.dropLast() }
        return rest
    }

    /// Static: called from the mutating `authenticate`, a method of `self` made the compiler
    /// copy the whole authenticator for it (about 170 instructions a request).
    private static func checkAge(
        _ provider: AuthenticatedProvider, policy: TokenPolicy, environment: APNsEnvironment, nowMs: Int64,
        firstOnConnection: Bool
    ) -> AuthenticationResult {
        let age = nowMs / 1000 - provider.issuedAt
        if age > policy.maxTokenAgeSeconds {
            return .rejected(
                .expiredProviderToken,
                explanation: "provider token iat is \(age) s old, more than the \(policy.maxTokenAgeSeconds) s APNs allows",
                token: provider.token)
        }
        if let restricted = provider.key.environment, restricted != environment {
            return .rejected(
                .badEnvironmentKeyIdInToken,
                explanation: "key \(provider.key.keyID) is restricted to \(restricted.rawValue), this request is \(environment.rawValue)",
                token: provider.token)
        }
        return .authenticated(provider, firstOnConnection: firstOnConnection)
    }

    private mutating func verifyNew(
        _ tokenString: Substring, environment: APNsEnvironment, nowMs: Int64,
        credentialsGeneration: UInt64, lookUpKey: (String) -> ProviderKey?
    ) -> AuthenticationResult {
        let token: ProviderToken
        switch ProviderToken.parse(tokenString) {
        case .failure(let error):
            return .rejected(.invalidProviderToken, explanation: error.explanation, token: nil)
        case .success(let parsed):
            token = parsed
        }
        guard let algorithm = token.algorithm.flatMap(TokenAlgorithm.init(rawValue:)) else {
            let alg = token.algorithm.map { "'\($0)'" } ?? "missing"
            return .rejected(
                .invalidProviderToken, explanation: "JWT alg is \(alg); APNs takes ES256 (the emulator also ES384 and ES512)", token: token)
        }
        guard let keyID = token.keyID, !keyID.isEmpty else {
            return .rejected(.invalidProviderToken, explanation: "JWT header has no kid", token: token)
        }
        guard let key = lookUpKey(keyID) else {
            return .rejected(.invalidProviderToken, explanation: "no key with id \(keyID) is registered", token: token)
        }
        guard let issuer = token.issuer else {
            return .rejected(.invalidProviderToken, explanation: "JWT claims have no iss (team id)", token: token)
        }
        guard issuer == key.teamID else {
            return .rejected(
                .invalidProviderToken,
                explanation: "JWT iss \(issuer) is not the team of key \(keyID) (\(key.teamID))", token: token)
        }
        guard let issuedAt = token.issuedAt else {
            return .rejected(.invalidProviderToken, explanation: token.issuedAtProblem ?? "JWT claims have no iat", token: token)
        }
        let signatureVerifies =
            algorithm == .es256
            ? key.verifier.verify(signature: token.signature, message: token.signingInput)
            : key.verifier.verify(signature: token.signature, message: token.signingInput, algorithm: algorithm)
        guard signatureVerifies else {
            return .rejected(
                .invalidProviderToken,
                explanation: "JWT signature does not verify with key \(keyID)"
                    + (algorithm == .es256 ? "" : " (\(algorithm.rawValue): SHA-\(algorithm.rawValue.dropFirst(2)) over the key's P-256 curve)"),
                token: token)
        }
        let now = nowMs / 1000
        if issuedAt - now > policy.allowedFutureSkewSeconds {
            // Apple's own sample token carries a millisecond iat; say so when it looks like one.
            let hint =
                issuedAt / 1000 - now < policy.allowedFutureSkewSeconds && issuedAt > 100_000_000_000
                ? "; it looks like milliseconds, iat is in seconds" : ""
            return .rejected(
                .invalidProviderToken,
                explanation: "JWT iat is \(issuedAt - now) s in the future (more than \(policy.allowedFutureSkewSeconds) s of skew)\(hint)",
                token: token)
        }

        // Team binding and key mixing (docs/apns-behaviour.md, "Provider tokens").
        if let boundTeam, boundTeam != key.teamID {
            return .rejected(
                .invalidProviderToken,
                explanation: "connection is bound to team \(boundTeam); a token of team \(key.teamID) needs its own connection",
                token: token)
        }
        if let firstKey, let reason = Self.mixingViolation(first: firstKey, next: key, environment: environment) {
            return .rejected(reason.0, explanation: reason.1, token: token)
        }

        // A different token for the same key within 20 minutes of the previous one. "Different"
        // means different claims (a new iat): ES256 signatures are randomised, so re-signing
        // the same claims yields a new string that is not an update. A previous token that has
        // itself expired may always be replaced: the client had no choice. Nor is a token
        // issued 20 minutes or more after the previous one refused, however late the previous
        // one came to this connection: libraries that share one token among their connections
        // (sideshow/apns2) bring a token first made for another connection to a new one and
        // refresh it on their own cadence there.
        // An expired new token is no update: it is answered ExpiredProviderToken below, the
        // answer that makes clients make a fresh one.
        let previous = verified.first { $0.provider.key.keyID == key.keyID }
        // The token the current one replaced, on a request made before the refresh that
        // reaches the connection after it (a client's concurrent senders, each holding the
        // token it read): no update, and it stays the replaced one. Judged for age as always.
        if let previous, previous.replacedIssuedAt == issuedAt, issuedAt < previous.provider.issuedAt {
            let provider = AuthenticatedProvider(key: key, issuedAt: issuedAt, token: token, boundAtGeneration: boundGeneration)
            return Self.checkAge(provider, policy: policy, environment: environment, nowMs: nowMs, firstOnConnection: false)
        }
        if let previous,
            !previous.expired, previous.provider.issuedAt != issuedAt,
            nowMs - previous.firstUsedAt < policy.minRefreshIntervalSeconds * 1000,
            issuedAt - previous.provider.issuedAt < policy.minRefreshIntervalSeconds,
            now - previous.provider.issuedAt <= policy.maxTokenAgeSeconds,
            now - issuedAt <= policy.maxTokenAgeSeconds
        {
            let seconds = (nowMs - previous.firstUsedAt) / 1000
            return .rejected(
                .tooManyProviderTokenUpdates,
                explanation:
                    "a new provider token \(seconds) s after the previous one on this connection; APNs allows one update per \(policy.minRefreshIntervalSeconds / 60) minutes",
                token: token)
        }

        let firstOnConnection = boundTeam == nil
        if firstOnConnection {
            boundTeam = key.teamID
            boundGeneration = credentialsGeneration
            firstKey = key
        }
        let provider = AuthenticatedProvider(
            key: key, issuedAt: issuedAt, token: token,
            boundAtGeneration: boundGeneration)
        // Re-signed claims keep the first use of those claims, so the 20-minute clock runs on.
        let sameClaims = verified.first { $0.provider.key.keyID == key.keyID && $0.provider.issuedAt == issuedAt }
        let entry = Verified(
            tokenString: tokenString, provider: provider, generation: credentialsGeneration,
            firstUsedAt: sameClaims?.firstUsedAt ?? nowMs,
            replacedIssuedAt: previous.flatMap { $0.provider.issuedAt < issuedAt ? $0.provider.issuedAt : $0.replacedIssuedAt })
        // Age and environment are judged like every later use of the same token, but the
        // token is still remembered: the 20-minute rule counts from its first use.
        let result = Self.checkAge(provider, policy: policy, environment: environment, nowMs: nowMs, firstOnConnection: firstOnConnection)
        if case .rejected = result, firstOnConnection {
            // A token that cannot be used does not bind the connection.
            boundTeam = nil
            firstKey = nil
            return result
        }
        // An expired token (a stale request) is refused and changes nothing: it does not take
        // the current token's place, which would let the next new token skip the 20 minutes.
        if case .rejected(.expiredProviderToken, _, _) = result { return result }
        verified.removeAll { $0.provider.key.keyID == key.keyID || $0.tokenString == tokenString }
        verified.append(entry)
        return result
    }

    /// Which keys may follow the connection's first key (docs/apns-behaviour.md, "Provider
    /// tokens": key kinds and mixing keys).
    static func mixingViolation(
        first: ProviderKey, next: ProviderKey, environment: APNsEnvironment
    )
        -> (APNsReason, String)?
    {
        if first.keyID == next.keyID { return nil }
        if let env = next.environment, env != environment {
            return (.badEnvironmentKeyIdInToken, "key \(next.keyID) is restricted to \(env.rawValue), this request is \(environment.rawValue)")
        }
        switch (first.isTopicSpecific, next.isTopicSpecific) {
        case (false, false):
            // Two team-scoped keys of the same team: fine unless environments conflict,
            // which the environment check above has already caught.
            return nil
        case (false, true):
            return (
                .unrelatedKeyIdInToken,
                "connection began with team-scoped key \(first.keyID); topic-specific key \(next.keyID) needs a new connection"
            )
        case (true, false):
            return (
                .unrelatedKeyIdInToken,
                "connection began with topic-specific key \(first.keyID); team-scoped key \(next.keyID) needs a new connection"
            )
        case (true, true):
            if first.isRelated(to: next) { return nil }
            return (.unrelatedKeyIdInToken, "key \(next.keyID) is not related to \(first.keyID), the first key on this connection")
        }
    }
}

extension NotificationRecord {
    /// The provider token a request was sent with, as the journal shows it: verified (its
    /// team and key), or refused (what it claimed, when it could be read; `verified` false,
    /// or nil when no `authorization` was sent).
    mutating func noteProviderToken(_ result: AuthenticationResult, authorizationSent: Bool) {
        switch result {
        case .authenticated(let provider, _):
            teamID = provider.teamID
            keyID = provider.key.keyID
            jwtHeader = provider.token.headerJSON
            jwtClaims = provider.token.claimsJSON
            jwtVerified = true
        case .rejected(_, _, let token):
            if let token {
                jwtHeader = token.headerJSON
                jwtClaims = token.claimsJSON
                keyID = token.keyID
                teamID = token.issuer
            }
            jwtVerified = authorizationSent ? false : nil
        }
    }
}
