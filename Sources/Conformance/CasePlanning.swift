public import APNsCore
import HTTP2
public import ProviderClient

/// What the person running the suite gave: the target's topic, tokens, keys, and permissions.
public struct RunInputs: Sendable {
    public var topic: String
    public var environment: APNsEnvironment
    public var key: ProviderSigningKey
    public var deviceToken: String?
    public var uninstalledToken: String?
    public var secondKey: ProviderSigningKey?
    public var otherEnvironmentKey: ProviderSigningKey?
    public var hasCertificate = false
    public var allowTokenUpdate = false
    /// A channel-management target was given, or paired with --target.
    public var hasChannelManagement = false
    public var topicWithoutBroadcast: String?
    public var topicAtChannelLimit: String?
    public var voipToken: String?
    /// The broadcast channel the run created (nil until then).
    public var channelID: String?
    /// A well-formed channel id nobody created: 16 random bytes in padded base64, as Apple's.
    public var unknownChannelID = ""
    /// A well-formed token nobody issued (random per run).
    public var unknownToken: String
    /// The run's clock, in UNIX seconds: every token of the run is signed relative to it.
    public var now: Int64

    public init(topic: String, environment: APNsEnvironment, key: ProviderSigningKey, unknownToken: String, now: Int64) {
        self.topic = topic
        self.environment = environment
        self.key = key
        self.unknownToken = unknownToken
        self.now = now
    }

    public func has(_ need: Need) -> Bool {
        switch need {
        case .deviceToken: deviceToken != nil
        case .uninstalledToken: uninstalledToken != nil
        case .secondKey: secondKey != nil
        case .otherEnvironmentKey: otherEnvironmentKey != nil
        case .certificate: hasCertificate
        case .tokenUpdate: allowTokenUpdate
        case .channelManagement: hasChannelManagement
        case .topicWithoutBroadcast: topicWithoutBroadcast != nil
        case .topicAtChannelLimit: topicAtChannelLimit != nil
        case .voipToken: voipToken != nil
        }
    }

    /// Why a case cannot run with these inputs, or nil when it can.
    public func whySkipped(_ item: ConformanceCase) -> String? {
        let missing = item.needs.sorted().filter { !has($0) }
        guard !missing.isEmpty else { return nil }
        return "needs " + missing.map { "\($0.rawValue) (\($0.option))" }.joined(separator: ", ")
    }
}

/// Which connection a case is sent on.
public enum ConnectionKind: Sendable, Hashable {
    /// The run's connection to one environment, carrying the run's one provider token.
    case shared(APNsEnvironment)
    /// A connection of the case's own, closed after it: other credentials never touch the shared one.
    case own(APNsEnvironment)
    /// A connection of the case's own with the client certificate.
    case certificate(APNsEnvironment)

    public var environment: APNsEnvironment {
        switch self {
        case .shared(let environment), .own(let environment), .certificate(let environment): environment
        }
    }
}

/// One request, with a description of its credentials that gives nothing away.
public struct PlannedRequest: Sendable {
    public var request: ClientRequest
    public var credentials: String
}

/// A case turned into what goes on the wire.
public struct PlannedCase: Sendable {
    public var item: ConformanceCase
    public var connection: ConnectionKind
    /// The push host, or the channel-management one.
    public var host: TargetHost
    /// Sent first on the same connection; it must be answered 200.
    public var before: PlannedRequest?
    public var main: PlannedRequest
}

/// Builds each case's requests. The run's provider token is signed once and reused, so a run
/// sends one token per connection (APNs asks for no more than one new token per 20 minutes).
public struct CasePlanner: Sendable {
    public let catalogue: ConformanceCatalogue
    /// Mutable for the run's channel id, known once the channel is created.
    public var inputs: RunInputs
    public let runToken: String

    public init(catalogue: ConformanceCatalogue, inputs: RunInputs) throws {
        self.catalogue = catalogue
        self.inputs = inputs
        runToken = try inputs.key.token(issuedAt: inputs.now)
    }

    public func plan(_ item: ConformanceCase) throws -> PlannedCase {
        let environment = item.request.environment == .other ? inputs.environment.other : inputs.environment
        let connection: ConnectionKind =
            switch item.request.auth {
            case .certificate: .certificate(environment)
            // A connection case looks at a connection's first SETTINGS: its own, new one.
            case .valid where item.request.before == nil && item.settings == nil: .shared(environment)
            default: .own(environment)
            }
        let before = try item.request.before.map { auth in
            try build(CaseRequest(auth: auth), id: item.id, environment: environment)
        }
        return PlannedCase(
            item: item, connection: connection, host: catalogue.defaults(for: item.request.endpoint).host, before: before,
            main: try build(item.request, id: item.id, environment: environment))
    }

    private func build(_ spec: CaseRequest, id: String, environment: APNsEnvironment) throws -> PlannedRequest {
        let defaults = catalogue.defaults(for: spec.endpoint)
        let fill = { (text: String) in self.fill(text, id: id) }
        var headers: [HTTP2HeaderField] = []
        let (authorization, credentials) = try self.authorization(spec.auth)
        if let authorization { headers.append(HTTP2HeaderField("authorization", authorization)) }
        let removed = Set(spec.remove)
        var pending = spec.set
        for header in defaults.headers where !removed.contains(header.name) {
            if let index = pending.firstIndex(where: { $0.name == header.name }) {
                headers.append(HTTP2HeaderField(header.name, fill(pending.remove(at: index).value)))
            } else {
                headers.append(HTTP2HeaderField(header.name, fill(header.value)))
            }
        }
        headers += pending.map { HTTP2HeaderField($0.name, fill($0.value)) }
        headers += spec.append.map { HTTP2HeaderField($0.name, fill($0.value)) }
        let body: [UInt8]? =
            switch spec.body {
            case .defaults: defaults.body.map { Array(fill($0).utf8) }
            case .none: nil
            case .text(let text): Array(fill(text).utf8)
            case .size(let size): Self.payload(ofSize: size)
            }
        var request = ClientRequest(method: spec.method ?? defaults.method, path: fill(spec.path ?? defaults.path), headers: headers, body: body)
        request.authority = Self.authority(defaults.host, environment)
        return PlannedRequest(request: request, credentials: credentials)
    }

    /// Apple's host name for the request's host and environment: it picks the environment on any target.
    public static func authority(_ host: TargetHost, _ environment: APNsEnvironment) -> String {
        switch host {
        case .push: environment.appleHost
        case .channelManagement:
            environment == .production ? ChannelManagementRequest.productionHost : ChannelManagementRequest.sandboxHost
        }
    }

    /// The request that creates the run's channel: No Message Stored (policy 0), so no broadcast
    /// of the run is kept for a device.
    public func createChannelRequest() -> PlannedRequest {
        var request = ChannelManagementRequest.create(bundleID: inputs.topic, policy: 0, providerToken: runToken)
        request.authority = Self.authority(.channelManagement, inputs.environment)
        return PlannedRequest(request: request.request, credentials: "the run's token (key \(inputs.key.keyID), iat \(inputs.now))")
    }

    /// The request that deletes a channel a run created.
    public func deleteChannelRequest(_ channelID: String) -> PlannedRequest {
        var request = ChannelManagementRequest.delete(bundleID: inputs.topic, channelID: channelID, providerToken: runToken)
        request.authority = Self.authority(.channelManagement, inputs.environment)
        return PlannedRequest(request: request.request, credentials: "the run's token (key \(inputs.key.keyID), iat \(inputs.now))")
    }

    private func fill(_ text: String, id: String) -> String {
        guard text.contains("{") else { return text }
        var filled = text
        let values: [(String, String?)] = [
            (Placeholder.deviceTokenUpperCase, inputs.deviceToken?.uppercased()), (Placeholder.deviceToken, inputs.deviceToken),
            (Placeholder.uninstalledToken, inputs.uninstalledToken), (Placeholder.unknownToken, inputs.unknownToken),
            (Placeholder.topic, inputs.topic), (Placeholder.caseID, id), (Placeholder.channelID, inputs.channelID),
            (Placeholder.unknownChannelID, inputs.unknownChannelID), (Placeholder.topicWithoutBroadcast, inputs.topicWithoutBroadcast),
            (Placeholder.topicAtChannelLimit, inputs.topicAtChannelLimit), (Placeholder.voipToken, inputs.voipToken),
            (Placeholder.now, String(inputs.now)),
        ]
        for (placeholder, value) in values { filled = filled.replacingOccurrences(of: placeholder, with: value ?? "") }
        return filled
    }

    /// The `authorization` value for a kind of credentials (nil: none), and how to describe it.
    private func authorization(_ auth: Auth) throws -> (String?, String) {
        let key = inputs.key
        let now = inputs.now
        func signed(_ header: JSONText, _ claims: JSONText, der: Bool = false, with signingKey: ProviderSigningKey? = nil) throws -> String {
            let input = Base64URL.encode(Array(header.text.utf8)) + "." + Base64URL.encode(Array(claims.text.utf8))
            let message = Array(input.utf8)
            let signer = (signingKey ?? key).privateKey
            let signature = der ? try signer.signDER(message) : try signer.sign(message)
            return input + "." + Base64URL.encode(signature)
        }
        let header = JSONText(#"{"alg":"ES256","kid":"\#(key.keyID)"}"#)
        let claims = JSONText(#"{"iss":"\#(key.teamID)","iat":\#(now)}"#)
        switch auth {
        case .valid: return ("bearer " + runToken, "the run's token (key \(key.keyID), iat \(now))")
        case .none, .certificate: return (nil, auth == .none ? "no authorization" : "the client certificate")
        case .bearerOnly: return ("bearer", "bearer with no token")
        case .capitalBearer: return ("Bearer " + runToken, "the run's token after \"Bearer\"")
        case .garbage: return ("bearer not-a-jwt", "not a JWT")
        case .unsigned:
            let input = Base64URL.encode(Array(#"{"alg":"none","kid":"\#(key.keyID)"}"#.utf8)) + "." + Base64URL.encode(Array(claims.text.utf8))
            return ("bearer " + input + ".", "alg none, no signature")
        case .badSignature:
            // The signature of other claims: well formed, but not over these bytes.
            let other = try signed(header, JSONText(#"{"iss":"\#(key.teamID)","iat":\#(now - 1)}"#))
            let good = try signed(header, claims)
            let signature = other.split(separator: ".").last.map(String.init) ?? ""
            return ("bearer " + good.split(separator: ".").prefix(2).joined(separator: ".") + "." + signature, "a signature over other claims")
        case .unknownKey:
            return (
                "bearer " + (try signed(JSONText(#"{"alg":"ES256","kid":"0000000000"}"#), claims)), "key id 0000000000, signed with --key"
            )
        case .wrongTeam:
            return ("bearer " + (try signed(header, JSONText(#"{"iss":"0000000000","iat":\#(now)}"#))), "iss 0000000000")
        case .expired:
            return ("bearer " + (try signed(header, JSONText(#"{"iss":"\#(key.teamID)","iat":\#(now - 7200)}"#))), "iat two hours ago")
        case .iatMilliseconds:
            return ("bearer " + (try signed(header, JSONText(#"{"iss":"\#(key.teamID)","iat":\#(now * 1000)}"#))), "iat in milliseconds")
        case .iatFractional:
            return ("bearer " + (try signed(header, JSONText(#"{"iss":"\#(key.teamID)","iat":\#(now).25}"#))), "iat \(now).25")
        case .iatString:
            return ("bearer " + (try signed(header, JSONText(#"{"iss":"\#(key.teamID)","iat":"\#(now)"}"#))), "iat \"\(now)\"")
        case .derSignature: return ("bearer " + (try signed(header, claims, der: true)), "signed in DER form")
        case .secondKey:
            let second = try required(inputs.secondKey, .secondKey)
            return ("bearer " + (try second.token(issuedAt: now)), "--second-key (key \(second.keyID))")
        case .otherEnvironmentKey:
            let other = try required(inputs.otherEnvironmentKey, .otherEnvironmentKey)
            return ("bearer " + (try other.token(issuedAt: now)), "--other-environment-key (key \(other.keyID))")
        case .updated:
            return ("bearer " + (try key.token(issuedAt: now - 60)), "a second token of --key (iat \(now - 60))")
        }
    }

    private func required(_ key: ProviderSigningKey?, _ need: Need) throws(CatalogueError) -> ProviderSigningKey {
        guard let key else { throw CatalogueError("this case needs \(need.option)") }
        return key
    }

    /// `{"aps":{"content-available":1},"pad":"xx…"}` of exactly `size` bytes.
    static func payload(ofSize size: Int) -> [UInt8] {
        let prefix = Array(#"{"aps":{"content-available":1},"pad":""#.utf8)
        let suffix = Array(#""}"#.utf8)
        return prefix + [UInt8](repeating: UInt8(ascii: "x"), count: max(0, size - prefix.count - suffix.count)) + suffix
    }
}

/// JSON written by hand for a token's header or claims, so a case controls every byte.
struct JSONText {
    let text: String
    init(_ text: String) { self.text = text }
}
