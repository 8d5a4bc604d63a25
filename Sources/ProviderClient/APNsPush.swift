import APNsCore
import Foundation
public import HTTP2
public import OpenSSLCrypto

/// A provider signing key: team, key id and the private key from Apple's `.p8`.
public struct ProviderSigningKey: Sendable {
    public var teamID: String
    public var keyID: String
    public var privateKey: ES256PrivateKey

    public init(teamID: String, keyID: String, privateKey: ES256PrivateKey) {
        self.teamID = teamID
        self.keyID = keyID
        self.privateKey = privateKey
    }

    /// Loads `TEAMID:KEYID:PATH` where PATH is a `.p8` (PKCS#8) private key.
    public init(spec: String) throws(ClientError) {
        let parts = spec.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty, !parts[2].isEmpty else {
            throw ClientError("--key '\(spec)' is not TEAMID:KEYID:PATH (PATH is the .p8 private key)")
        }
        let path = String(parts[2])
        guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw ClientError("--key \(spec): cannot read \(path)")
        }
        do {
            self.init(teamID: String(parts[0]), keyID: String(parts[1]), privateKey: try ES256PrivateKey(pem: pem))
        } catch {
            throw ClientError("--key \(spec): \(error) (signing needs the private .p8 key)")
        }
    }

    /// A provider token (JWT, ES256) issued at `issuedAt` seconds.
    public func token(issuedAt: Int64) throws -> String {
        try ProviderToken.make(keyID: keyID, teamID: teamID, issuedAt: issuedAt) { try privateKey.sign($0) }
    }
}

/// One push as a provider writes it; optional headers are sent only when set.
public struct APNsPush: Sendable {
    public var token: String
    public var topic: String?
    public var pushType: String?
    public var priority: String?
    public var expiration: String?
    public var collapseID: String?
    public var apnsID: String?
    public var payload: [UInt8]
    /// The provider token (without "bearer ").
    public var providerToken: String?
    public var extraHeaders: [HTTP2HeaderField] = []
    /// `:authority` (default: the address connected to). Apple's host names pick the environment.
    public var authority: String?

    public init(token: String, topic: String?, payload: [UInt8], providerToken: String?) {
        self.token = token
        self.topic = topic
        self.payload = payload
        self.providerToken = providerToken
    }

    public var request: ClientRequest {
        var headers: [HTTP2HeaderField] = []
        if let providerToken { headers.append(HTTP2HeaderField("authorization", "bearer \(providerToken)")) }
        if let topic { headers.append(HTTP2HeaderField("apns-topic", topic)) }
        if let pushType { headers.append(HTTP2HeaderField("apns-push-type", pushType)) }
        if let priority { headers.append(HTTP2HeaderField("apns-priority", priority)) }
        if let expiration { headers.append(HTTP2HeaderField("apns-expiration", expiration)) }
        if let collapseID { headers.append(HTTP2HeaderField("apns-collapse-id", collapseID)) }
        if let apnsID { headers.append(HTTP2HeaderField("apns-id", apnsID)) }
        headers.append(contentsOf: extraHeaders)
        var request = ClientRequest(method: "POST", path: "/3/device/\(token)", headers: headers, body: payload)
        request.authority = authority
        return request
    }
}

/// An APNs answer read back from an HTTP/2 response.
public struct APNsResult: Sendable {
    public var status: Int
    public var reason: String?
    public var timestampMs: Int64?
    public var apnsID: String?
    public var uniqueID: String?
    public var response: HTTP2Response

    public init(_ response: HTTP2Response) {
        self.response = response
        status = response.status ?? 0
        apnsID = response.headers.first { $0.name == "apns-id" }?.value
        uniqueID = response.headers.first { $0.name == "apns-unique-id" }?.value
        if !response.body.isEmpty, let body = try? JSONValue.parse(response.body) {
            reason = body["reason"]?.stringValue
            timestampMs = body["timestamp"]?.intValue
        }
    }
}
