// Fuzz target: everything that reads a provider token from an `authorization` header.

@testable import APNsCore

public func fuzzJWT(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    if let token = ConnectionAuthenticator.bearerToken(Substring(text)) {
        if case .success(let parsed) = ProviderToken.parse(token) {
            _ = parsed.issuedAt
            _ = parsed.issuedAtProblem
        }
        // Redacted means: everything up to the last dot, then the marker, nothing of what followed;
        // or, for a value that is not a JWT, the scheme and at most 4 bytes of the credential.
        let redacted = ProviderToken.withoutSignature(text)
        if redacted != text {
            let utf8 = Array(text.utf8)
            let asJWT = utf8.lastIndex(of: UInt8(ascii: ".")).map {
                Array(redacted.utf8) == Array(utf8[...$0]) + Array(ProviderToken.signatureMarker.utf8)
            }
            let notJWTSuffix = " bytes, not kept: not a JWT)"
            var asOther = false
            let marker = Array("… (".utf8)
            let bytes = Array(redacted.utf8)
            let cut = bytes.indices.reversed().first { bytes[$0...].starts(with: marker) }
            if redacted.hasSuffix(notJWTSuffix), let cut {
                let head = Array(bytes[..<cut])
                let scheme = utf8.contains(0x20) ? utf8.prefix { $0 != 0x20 } : []
                let credentialStart = scheme.count + utf8.dropFirst(scheme.count).prefix { $0 == 0x20 }.count
                // 4 bytes of the credential, each at worst a replacement character (3 bytes).
                asOther = head.starts(with: utf8[..<credentialStart]) && head.count <= credentialStart + 12
            }
            guard asJWT == true || asOther else { fatalError("the signature survived redaction") }
        }
    }
    _ = IssuedAt.decimalNumber(text)
    return 0
}
