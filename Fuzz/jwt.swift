// Fuzz target: everything that reads a provider token from an `authorization` header.

@testable import APNsCore

public func fuzzJWT(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    if let token = ConnectionAuthenticator.bearerToken(Substring(text)) {
        if case .success(let parsed) = ProviderToken.parse(token) {
            _ = parsed.issuedAt
            _ = parsed.issuedAtProblem
        }
        // Redacted means: everything up to the last dot, then the marker, nothing of what followed.
        let redacted = ProviderToken.withoutSignature(text)
        if redacted != text {
            let utf8 = Array(text.utf8)
            guard let lastDot = utf8.lastIndex(of: UInt8(ascii: ".")),
                Array(redacted.utf8) == Array(utf8[...lastDot]) + Array(ProviderToken.signatureMarker.utf8)
            else {
                fatalError("the signature survived redaction")
            }
        }
    }
    _ = IssuedAt.decimalNumber(text)
    return 0
}
