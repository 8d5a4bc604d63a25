// Conformance: the catalogue of APNs cases (conformance/catalogue.json, embedded at build time),
// the requests each case sends, the verdicts, recordings and their replay, and the report.
// Pure: it builds requests and judges answers; `apns-emulator conformance` does the sending.
import JSON

/// The cases `apns-emulator conformance` runs: one per rule of docs/apns-behaviour.md a provider
/// can observe, each with the answer the emulator gives and the evidence that APNs does too.
public struct ConformanceCatalogue: Sendable {
    /// What every case sends unless it says otherwise (method, path, headers in order, body).
    public var defaults: RequestDefaults
    /// The defaults of the other endpoints a case may name (`broadcast`, `channels`: docs/apns-behaviour.md §14a).
    public var endpoints: [String: RequestDefaults] = [:]
    /// Reasons of the check order that no case covers, with why (the drift test reads them).
    public var notCovered: [(reason: String, why: String)]
    public var cases: [ConformanceCase]

    /// The catalogue built into the binary.
    public static func builtIn() throws(CatalogueError) -> ConformanceCatalogue {
        try parse(Array(embeddedCatalogue.utf8))
    }

    public func `case`(_ id: String) -> ConformanceCase? { cases.first { $0.id == id } }

    /// What a request of `endpoint` starts from (nil: a device push).
    public func defaults(for endpoint: String?) -> RequestDefaults { endpoint.flatMap { endpoints[$0] } ?? defaults }
}

/// Which server a request goes to: the push host (device pushes, broadcasts) or Apple's
/// channel-management host (`api-manage-broadcast…`, the emulator's --channel-*-listen ports).
public enum TargetHost: String, Sendable, Hashable {
    case push
    case channelManagement = "channel-management"
}

public struct RequestDefaults: Sendable {
    public var host: TargetHost = .push
    public var method: String
    public var path: String
    public var headers: [(name: String, value: String)]
    /// nil: no body (a channel read sends none).
    public var body: String?
}

/// One rule, as a request and the answer expected for it.
public struct ConformanceCase: Sendable {
    public var id: String
    public var title: String
    /// The stage of docs/apns-behaviour.md's check order that answers (9: accepted; 0: a
    /// connection case, which judges the server's SETTINGS rather than an answer).
    public var stage: Int
    /// The evidence tag from docs/apns-behaviour.md (doc Dn, seen On, lib, chosen).
    public var evidence: String
    /// No public source shows what APNs does; the expectation is the emulator's choice.
    public var unconfirmed: Bool
    public var needs: Set<Need>
    public var request: CaseRequest
    public var expect: Expectation
    /// A connection case: the SETTINGS the server sends, instead of a status and reason.
    public var settings: SettingsExpectation?

    /// Its request names the run's broadcast channel (`{channel-id}`): the run creates one first.
    public var usesRunChannel = false

    /// What it expects, in a few words.
    public var expectedSummary: String { settings?.summary ?? expect.summary }
}

/// What a connection case expects of the server's SETTINGS: values in its first SETTINGS
/// frame, and values in force after the first request with a valid provider token was
/// answered (docs/apns-behaviour.md, "The HTTP/2 connection").
public struct SettingsExpectation: Sendable, Equatable {
    public var first: [HTTP2SettingName: UInt32] = [:]
    public var afterFirstRequest: [HTTP2SettingName: UInt32] = [:]

    public var summary: String {
        var parts: [String] = []
        if !first.isEmpty { parts.append("first SETTINGS " + Self.describe(first)) }
        if !afterFirstRequest.isEmpty { parts.append("after a request " + Self.describe(afterFirstRequest)) }
        return parts.joined(separator: "; ")
    }

    static func describe(_ values: [HTTP2SettingName: UInt32]) -> String {
        values.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue) \($0.value)" }.joined(separator: ", ")
    }
}

/// The SETTINGS parameters of RFC 9113 §6.5.2, by their names.
public enum HTTP2SettingName: String, Sendable, CaseIterable, Hashable {
    case headerTableSize = "HEADER_TABLE_SIZE"
    case enablePush = "ENABLE_PUSH"
    case maxConcurrentStreams = "MAX_CONCURRENT_STREAMS"
    case initialWindowSize = "INITIAL_WINDOW_SIZE"
    case maxFrameSize = "MAX_FRAME_SIZE"
    case maxHeaderListSize = "MAX_HEADER_LIST_SIZE"

    /// The parameter's identifier on the wire.
    public var id: Int32 { Int32(Self.allCases.firstIndex(of: self)! + 1) }

    /// The value in force while a server has not sent the parameter (RFC 9113 §6.5.2); nil:
    /// unlimited (MAX_CONCURRENT_STREAMS, MAX_HEADER_LIST_SIZE).
    public var initialValue: UInt32? {
        switch self {
        case .headerTableSize: 4096
        case .enablePush: 1
        case .maxConcurrentStreams, .maxHeaderListSize: nil
        case .initialWindowSize: 65535
        case .maxFrameSize: 16384
        }
    }
}

/// What a case needs from the person running it; a case whose needs are not given is skipped.
public enum Need: String, Sendable, CaseIterable, Comparable {
    /// A valid device token of `--topic` in the run's environment (`--token`).
    case deviceToken = "device-token"
    /// A token of `--topic` whose app was uninstalled (`--uninstalled-token`).
    case uninstalledToken = "uninstalled-token"
    /// A second key of the same team (`--second-key`).
    case secondKey = "second-key"
    /// A key restricted to the other environment (`--other-environment-key`).
    case otherEnvironmentKey = "other-environment-key"
    /// A provider certificate for `--topic` (`--certificate`).
    case certificate
    /// Permission to sign a second token within 20 minutes on one connection (`--allow-token-update`).
    case tokenUpdate = "token-update"
    /// Where channel management is served (`--channel-target`, by default paired with --target).
    case channelManagement = "channel-management"
    /// A bundle id of the team whose app lacks the Broadcast capability (`--topic-without-broadcast`).
    case topicWithoutBroadcast = "topic-without-broadcast"
    /// A bundle id of the team whose app has as many live channels as it may (`--topic-at-channel-limit`).
    case topicAtChannelLimit = "topic-at-channel-limit"
    /// A VoIP (PushKit) token of `--topic` in this environment (`--voip-token`).
    case voipToken = "voip-token"

    public static func < (a: Need, b: Need) -> Bool { a.rawValue < b.rawValue }

    /// The option that provides it.
    public var option: String {
        switch self {
        case .deviceToken: "--token"
        case .uninstalledToken: "--uninstalled-token"
        case .secondKey: "--second-key"
        case .otherEnvironmentKey: "--other-environment-key"
        case .certificate: "--certificate"
        case .tokenUpdate: "--allow-token-update"
        case .channelManagement: "--channel-target"
        case .topicWithoutBroadcast: "--topic-without-broadcast"
        case .topicAtChannelLimit: "--topic-at-channel-limit"
        case .voipToken: "--voip-token"
        }
    }
}

/// How a case's request differs from the defaults.
public struct CaseRequest: Sendable {
    public enum Body: Sendable, Equatable {
        case defaults
        /// No body at all (HEADERS with END_STREAM).
        case none
        case text(String)
        /// A JSON object of exactly this many bytes.
        case size(Int)
    }

    public enum Environment: String, Sendable { case same, other }

    public var method: String?
    public var path: String?
    /// Headers given a value (added at the end when not among the defaults).
    public var set: [(name: String, value: String)] = []
    public var remove: [String] = []
    /// Headers sent once more after the others (duplicates).
    public var append: [(name: String, value: String)] = []
    public var body: Body = .defaults
    public var auth: Auth = .valid
    /// A request with this authorization sent first on the same connection; it must get 200.
    public var before: Auth?
    public var environment: Environment = .same
    /// The defaults it starts from: nil for a device push, else one of the catalogue's `endpoints`.
    public var endpoint: String?

    /// The defaults unchanged, with the run's token: the run's baseline request.
    public var isDefaults: Bool {
        method == nil && path == nil && set.isEmpty && remove.isEmpty && append.isEmpty && body == .defaults && auth == .valid
            && before == nil && environment == .same && endpoint == nil
    }
}

/// The credentials a request carries: the run's provider token, a variant of it, or none.
public enum Auth: String, Sendable, CaseIterable {
    /// The run's one provider token for `--key`, signed at the start.
    case valid
    case none
    /// `authorization: bearer` with nothing after it.
    case bearerOnly = "bearer-only"
    case capitalBearer = "capital-bearer"
    case garbage
    case unsigned
    case badSignature = "bad-signature"
    case unknownKey = "unknown-key"
    case wrongTeam = "wrong-team"
    case expired
    case iatMilliseconds = "iat-milliseconds"
    case iatFractional = "iat-fractional"
    case iatString = "iat-string"
    case derSignature = "der-signature"
    case secondKey = "second-key"
    case otherEnvironmentKey = "other-environment-key"
    /// A new token of `--key` (other claims) on a connection that used the run's token.
    case updated
    /// A certificate connection, no `authorization`.
    case certificate

    var need: Need? {
        switch self {
        case .secondKey: .secondKey
        case .otherEnvironmentKey: .otherEnvironmentKey
        case .certificate: .certificate
        case .updated: .tokenUpdate
        default: nil
        }
    }
}

/// The answer a case expects.
public struct Expectation: Sendable, Equatable {
    public var status: Int
    public var reason: String?
    public var checks: [Check]

    public var summary: String { reason.map { "\(status) \($0)" } ?? "\(status)" }
}

/// Details of an answer besides status and reason.
public enum Check: String, Sendable, CaseIterable {
    case apnsIDPresent = "apns-id-present"
    /// The answer's `apns-id` is the request's, unchanged.
    case apnsIDEchoed = "apns-id-echoed"
    /// `apns-unique-id` on a sandbox answer, none on a production one.
    case uniqueIDOnSandboxOnly = "unique-id-on-sandbox-only"
    /// The 410 body's `timestamp` is milliseconds since the epoch (after 2001 in ms, not s).
    case timestampInMilliseconds = "timestamp-in-milliseconds"
}

public struct CatalogueError: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ description: String) { self.description = description }
}
