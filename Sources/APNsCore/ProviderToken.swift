/// Verifies a signature over bytes. The emulator plugs in OpenSSL's ES256 here; Core stays pure.
public protocol SignatureVerifier: Sendable {
    func verify(signature: [UInt8], message: [UInt8]) -> Bool
    /// The same with the hash a token's `alg` names (the key is always P-256).
    func verify(signature: [UInt8], message: [UInt8], algorithm: TokenAlgorithm) -> Bool
    /// The public key as PEM, to tell whether two keys are one; nil when unknown.
    var publicKeyPEM: String? { get }
}

extension SignatureVerifier {
    public var publicKeyPEM: String? { nil }
    public func verify(signature: [UInt8], message: [UInt8], algorithm: TokenAlgorithm) -> Bool {
        algorithm == .es256 && verify(signature: signature, message: message)
    }
}

/// The `alg` values a provider token may name. Apple documents ES256. ES384 and ES512 are
/// taken too, over the same P-256 key: pushok, the most used PHP client, has signed ES512
/// since 2019 and is used against Apple's production servers.
public enum TokenAlgorithm: String, Sendable, CaseIterable {
    case es256 = "ES256", es384 = "ES384", es512 = "ES512"
}

/// A provider authentication token (JWT, compact JWS) taken apart but not yet trusted.
public struct ProviderToken: Sendable {
    public var algorithm: String?
    public var keyID: String?
    public var issuer: String?
    /// `iat` in whole seconds since the epoch, however the provider wrote it (see `IssuedAt`).
    public var issuedAt: Int64?
    /// Why `iat` could not be read as a time, when it could not.
    public var issuedAtProblem: String?
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
        let issuedAt = IssuedAt.read(claims["iat"])
        let parsed = ProviderToken(
            algorithm: header["alg"]?.stringValue,
            keyID: header["kid"]?.stringValue,
            issuer: claims["iss"]?.stringValue,
            issuedAt: issuedAt.seconds,
            issuedAtProblem: issuedAt.problem,
            headerJSON: String(decoding: headerBytes, as: UTF8.self),
            claimsJSON: String(decoding: claimBytes, as: UTF8.self),
            signingInput: Array(token.utf8.prefix(signedLength)),
            signature: signature)
        return .success(parsed)
    }
}

extension ProviderToken {
    /// An `authorization` value with the JWT's signature replaced by a marker, for records:
    /// the header and claims stay readable, the token can no longer be replayed. A value that
    /// is not `scheme header.claims.signature` is another system's secret sent by mistake
    /// (`Basic …`, an API key): past 8 bytes its credential keeps its first 4 and its length.
    public static let signatureMarker = "(signature not kept)"

    public static func withoutSignature(_ authorization: String) -> String {
        let utf8 = authorization.utf8
        if let lastDot = utf8.lastIndex(of: UInt8(ascii: ".")), utf8[..<lastDot].contains(UInt8(ascii: ".")) {
            // JWT-shaped: byte-exact up to and including the last dot (nothing to hide without a signature).
            guard utf8.index(after: lastDot) < utf8.endIndex else { return authorization }
            return String(decoding: utf8[...lastDot], as: UTF8.self) + signatureMarker
        }
        // No scheme (a bare key) is all credential.
        let scheme = utf8.contains(0x20) ? utf8.prefix { $0 != 0x20 } : utf8.prefix(0)
        let credential = utf8.dropFirst(scheme.count).drop { $0 == 0x20 }
        guard credential.count > 8 else { return authorization }
        return String(decoding: utf8[..<credential.startIndex], as: UTF8.self) + String(decoding: credential.prefix(4), as: UTF8.self)
            + "… (\(credential.count) bytes, not kept: not a JWT)"
    }

    /// Builds a signed provider token. `sign` returns the JWS signature (raw r||s for ES256).
    /// Used by the `send` command and by tests.
    public static func make(
        keyID: String, teamID: String, issuedAt: Int64,
        sign: ([UInt8]) throws -> [UInt8]
    ) rethrows -> String {
        let header: JSONValue = ["alg": "ES256", "kid": .string(keyID)]
        let claims: JSONValue = ["iss": .string(teamID), "iat": .int(issuedAt)]
        let input = Base64URL.encode(header.serializedBytes()) + "." + Base64URL.encode(claims.serializedBytes())
        let signature = try sign(Array(input.utf8))
        return input + "." + Base64URL.encode(signature)
    }
}

/// Reads `iat` the way APNs accepts it from providers in wide use, not only as the integer the
/// documentation shows: PyAPNs2 and its forks send `time.time()` (a fractional number) and
/// kalyke-apns and older APNSwift releases send a decimal string, and Apple answers both with
/// 200 (docs/apns-behaviour.md, "Leniencies"). Any finite number, or a string holding one,
/// counts; its whole seconds are the issue time.
enum IssuedAt {
    static func read(_ value: JSONValue?) -> (seconds: Int64?, problem: String?) {
        switch value {
        case nil:
            return (nil, "JWT claims have no iat (the issue time in seconds)")
        case .int(let seconds)?:
            return (seconds, nil)
        case .double(let number)?:
            return wholeSeconds(number, as: "\(number)")
        case .string(let text)?:
            guard let number = decimalNumber(text) else {
                return (nil, "JWT iat is the string \"\(text.prefix(40))\", which does not hold a number of seconds")
            }
            return wholeSeconds(number, as: "\"\(text)\"")
        case .some(let other):
            return (nil, "JWT iat is \(other.serialized().prefix(40)), not a number of seconds")
        }
    }

    /// Truncates towards zero; numbers beyond any plausible time are refused rather than clamped.
    private static func wholeSeconds(_ number: Double, as written: String) -> (Int64?, String?) {
        guard number.isFinite, abs(number) < 9.0e15 else {
            return (nil, "JWT iat \(written.prefix(40)) is not a usable number of seconds")
        }
        return (Int64(number.rounded(.towardZero)), nil)
    }

    /// JSON number syntax inside a string (`"1796024121"`, `"1796024121.398"`); no hex, no
    /// `inf`/`nan`, no surrounding text.
    static func decimalNumber(_ text: String) -> Double? {
        let utf8 = Array(text.utf8)
        guard !utf8.isEmpty, utf8.count <= 64 else { return nil }
        var i = 0
        func digits() -> Int {
            let start = i
            while i < utf8.count, utf8[i] >= 0x30, utf8[i] <= 0x39 { i += 1 }
            return i - start
        }
        if utf8[i] == UInt8(ascii: "-") { i += 1 }
        guard digits() > 0 else { return nil }
        if i < utf8.count, utf8[i] == UInt8(ascii: ".") {
            i += 1
            guard digits() > 0 else { return nil }
        }
        if i < utf8.count, utf8[i] == UInt8(ascii: "e") || utf8[i] == UInt8(ascii: "E") {
            i += 1
            if i < utf8.count, utf8[i] == UInt8(ascii: "+") || utf8[i] == UInt8(ascii: "-") { i += 1 }
            guard digits() > 0 else { return nil }
        }
        guard i == utf8.count else { return nil }
        return Double(text)
    }
}
