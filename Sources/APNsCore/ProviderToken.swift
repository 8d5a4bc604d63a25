/// Verifies a signature over bytes. The emulator plugs in OpenSSL's ES256 here; Core stays pure.
public protocol SignatureVerifier: Sendable {
    func verify(signature: [UInt8], message: [UInt8]) -> Bool
}

/// A provider authentication token (JWT, compact JWS) taken apart but not yet trusted.
public struct ProviderToken: Sendable {
    public var algorithm: String?
    public var keyID: String?
    public var issuer: String?
    /// `iat` in seconds since the epoch.
    public var issuedAt: Int64?
    /// The decoded header and claims as JSON text, for inspection.
    public var headerJSON: String
    public var claimsJSON: String
    public var signingInput: [UInt8]
    public var signature: [UInt8]

    /// Why a token string is not a well-formed JWT; the text is shown in inspection records.
    public struct ParseError: Error, Sendable, Equatable { public let explanation: String }

    public static func parse(_ token: Substring) -> Result<ProviderToken, ParseError> {
        let parts = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            return .failure(ParseError(explanation: "provider token has \(parts.count) dot-separated parts, a JWT has 3"))
        }
        guard let headerBytes = Base64URL.decode(parts[0]), let claimBytes = Base64URL.decode(parts[1]) else {
            return .failure(ParseError(explanation: "provider token header or claims are not base64url"))
        }
        guard let signature = Base64URL.decode(parts[2]), !signature.isEmpty else {
            return .failure(ParseError(explanation: "provider token signature is missing or not base64url"))
        }
        guard let header = (try? JSONValue.parse(headerBytes))?.objectValue else {
            return .failure(ParseError(explanation: "provider token header is not a JSON object"))
        }
        guard let claims = (try? JSONValue.parse(claimBytes))?.objectValue else {
            return .failure(ParseError(explanation: "provider token claims are not a JSON object"))
        }
        let signedLength = parts[0].count + 1 + parts[1].count
        let parsed = ProviderToken(
            algorithm: header["alg"]?.stringValue,
            keyID: header["kid"]?.stringValue,
            issuer: claims["iss"]?.stringValue,
            // `iat` is whole seconds as a JSON number (reference §5.1); a string is not a time.
            issuedAt: claims["iat"]?.intValue,
            headerJSON: String(decoding: headerBytes, as: UTF8.self),
            claimsJSON: String(decoding: claimBytes, as: UTF8.self),
            signingInput: Array(token.utf8.prefix(signedLength)),
            signature: signature)
        return .success(parsed)
    }
}

extension ProviderToken {
    /// Builds a signed provider token. `sign` returns the JWS signature (raw r||s for ES256).
    /// Used by the `send` command and by tests.
    public static func make(keyID: String, teamID: String, issuedAt: Int64,
                            sign: ([UInt8]) throws -> [UInt8]) rethrows -> String
    {
        let header: JSONValue = ["alg": "ES256", "kid": .string(keyID)]
        let claims: JSONValue = ["iss": .string(teamID), "iat": .int(issuedAt)]
        let input = Base64URL.encode(header.serializedBytes()) + "." + Base64URL.encode(claims.serializedBytes())
        let signature = try sign(Array(input.utf8))
        return input + "." + Base64URL.encode(signature)
    }
}
