import COpenSSL

// ES256 = ECDSA over P-256 with SHA-256 (RFC 7518 §3.4), the algorithm of APNs provider tokens.

/// SHA-256 fetched once: passing the legacy `EVP_sha256()` to the EVP calls makes OpenSSL 3
/// re-fetch the implementation from the provider store (a locked lookup) on every operation.
/// An `EVP_MD` is immutable and may be shared between threads.
nonisolated(unsafe) let sha256Digest: OpaquePointer? = EVP_MD_fetch(nil, "SHA256", nil) ?? EVP_sha256()

/// SHA-384 and SHA-512, fetched once the same way: provider tokens that name ES384 or ES512
/// (signed with the P-256 key all the same) are verified with the hash they name.
nonisolated(unsafe) let sha384Digest: OpaquePointer? = EVP_MD_fetch(nil, "SHA384", nil) ?? EVP_sha384()
nonisolated(unsafe) let sha512Digest: OpaquePointer? = EVP_MD_fetch(nil, "SHA512", nil) ?? EVP_sha512()

/// A JOSE ECDSA algorithm applied to a P-256 key: the hash it names, and how long r and s are
/// in its raw signature (the named curve's length; P-256 values zero-padded to it).
public enum JOSEAlgorithm: Sendable {
    case es256, es384, es512

    var digest: OpaquePointer? {
        switch self {
        case .es256: return sha256Digest
        case .es384: return sha384Digest
        case .es512: return sha512Digest
        }
    }

    var rawScalarLength: Int {
        switch self {
        case .es256: return 32
        case .es384: return 48
        case .es512: return 66
        }
    }
}

/// Length of one P-256 scalar (r or s) in a raw JOSE signature.
private let scalarLength = 32
/// Largest DER ECDSA-Sig-Value for P-256: SEQUENCE header + two INTEGERs of up to 33 bytes.
private let maxDERSignatureLength = 72

public final class ES256PrivateKey: @unchecked Sendable {
    // Immutable after init; OpenSSL allows concurrent signing with a shared EVP_PKEY.
    private let key: OpaquePointer
    public let publicKey: ES256PublicKey

    private init(takingOwnershipOf key: OpaquePointer) throws {
        self.key = key
        publicKey = try freeingOnError(key) { try ES256PublicKey(publicHalfOf: key) }
    }

    deinit { EVP_PKEY_free(key) }

    public static func generate() throws -> ES256PrivateKey {
        try ES256PrivateKey(takingOwnershipOf: try generateP256Key())
    }

    /// PEM "PRIVATE KEY" (PKCS#8: the .p8 file Apple issues) or "EC PRIVATE KEY" (SEC1).
    /// Must be a P-256 key, else CryptoError naming the problem ("key is not an EC P-256 key").
    public convenience init(pem: String) throws {
        try self.init(takingOwnershipOf: try loadPrivateKey(pem: pem))
    }

    /// The key as unencrypted PKCS#8 PEM ("-----BEGIN PRIVATE KEY-----"), the .p8 layout.
    public var pkcs8PEM: String {
        // Only fails if a memory BIO cannot allocate; not an input problem.
        do {
            return try stringFromWriteBIO("PKCS#8 private key") { bio in
                PEM_write_bio_PrivateKey(bio, key, nil, nil, 0, nil, nil) == 1
            }
        } catch {
            fatalError("\(error)")
        }
    }

    /// JWS signature: ECDSA over SHA-256(message), as raw r||s (64 bytes, each half left-padded).
    public func sign(_ message: [UInt8], as algorithm: JOSEAlgorithm = .es256) throws -> [UInt8] {
        try derToRaw(try signDER(message, as: algorithm), scalarLength: algorithm.rawScalarLength)
    }

    /// DER-encoded ECDSA-Sig-Value, as produced by `openssl dgst -sha256 -sign`.
    public func signDER(_ message: [UInt8], as algorithm: JOSEAlgorithm = .es256) throws -> [UInt8] {
        guard let ctx = EVP_MD_CTX_new() else { throw CryptoError.openSSL("EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, algorithm.digest, nil, key) == 1 else {
            throw CryptoError.openSSL("EVP_DigestSignInit failed")
        }
        var signature = [UInt8](repeating: 0, count: maxDERSignatureLength)
        var length = signature.count
        let ok = withNonNullBytes(message) { bytes, count in
            EVP_DigestSign(ctx, &signature, &length, bytes, count) == 1
        }
        guard ok, length <= signature.count else { throw CryptoError.openSSL("ECDSA signing failed") }
        return Array(signature[..<length])
    }
}

public final class ES256PublicKey: @unchecked Sendable {
    // Immutable after init; verification only reads it, so sharing across threads is safe.
    private let key: OpaquePointer
    public let pem: String

    private init(takingOwnershipOf key: OpaquePointer) throws {
        self.key = key
        pem = try freeingOnError(key) { try stringFromWriteBIO("public key") { bio in PEM_write_bio_PUBKEY(bio, key) == 1 } }
    }

    deinit { EVP_PKEY_free(key) }

    /// A public-only copy of a private key (SPKI DER round trip), so this object never holds
    /// private material.
    convenience init(publicHalfOf privateKey: OpaquePointer) throws {
        let length = i2d_PUBKEY(privateKey, nil)
        guard length > 0 else { throw CryptoError.openSSL("cannot encode public key") }
        var der = [UInt8](repeating: 0, count: Int(length))
        let key: OpaquePointer? = der.withUnsafeMutableBufferPointer { buffer in
            var out = buffer.baseAddress
            guard i2d_PUBKEY(privateKey, &out) == length else { return nil }
            var input = UnsafePointer(buffer.baseAddress)
            return d2i_PUBKEY(nil, &input, Int(length))
        }
        guard let key else { throw CryptoError.openSSL("cannot extract public key") }
        try self.init(takingOwnershipOf: key)
    }

    /// PEM "PUBLIC KEY" (SPKI). Must be P-256.
    public convenience init(pem: String) throws {
        ERR_clear_error()
        let key = try withReadBIO(pem) { bio in PEM_read_bio_PUBKEY(bio, nil, refusePassphrase, nil) }
        guard let key else { throw CryptoError.openSSL("could not parse PUBLIC KEY PEM") }
        try freeingOnError(key) { try requireP256(key) }
        try self.init(takingOwnershipOf: key)
    }

    /// Accepts a PEM PUBLIC KEY, or a PKCS#8/SEC1 private key PEM (then uses its public half).
    /// This is what the emulator's `--auth-key TEAMID:KEYID:PATH` loads.
    public convenience init(pemPrivateOrPublic: String) throws {
        if pemPrivateOrPublic.contains("-----BEGIN PUBLIC KEY-----") {
            try self.init(pem: pemPrivateOrPublic)
            return
        }
        let privateKey = try loadPrivateKey(pem: pemPrivateOrPublic)
        defer { EVP_PKEY_free(privateKey) }
        try self.init(publicHalfOf: privateKey)
    }

    /// true only if `signature` is a valid ES256 signature of `message`, given either as raw
    /// 64-byte r||s (JOSE) or as DER. Anything else yields false. Thread-safe: each call uses
    /// its own EVP_MD_CTX and the shared key is only read.
    public func verify(signature: [UInt8], message: [UInt8]) -> Bool {
        verify(signature: signature, message: message, as: .es256)
    }

    /// The same with the hash `algorithm` names (a provider token naming ES384 or ES512).
    public func verify(signature: [UInt8], message: [UInt8], as algorithm: JOSEAlgorithm) -> Bool {
        // Failed verifications leave entries on this thread's error queue; if left there they
        // would be misattributed to the next TLS call on the same thread.
        defer { ERR_clear_error() }
        let (digest, rawScalarLength) = (algorithm.digest, algorithm.rawScalarLength)
        if signature.count == 2 * rawScalarLength {
            if let der = rawToDER(signature, scalarLength: rawScalarLength), verifyDER(der, message, digest) { return true }
            // A DER signature can, rarely, be exactly 64 bytes long too.
            return signature[0] == 0x30 && verifyDER(signature, message, digest)
        }
        guard signature.count >= 8, signature.count <= maxDERSignatureLength, signature[0] == 0x30 else {
            return false
        }
        // OpenSSL re-encodes the parsed signature and rejects non-canonical DER.
        return verifyDER(signature, message, digest)
    }

    private func verifyDER(_ signature: [UInt8], _ message: [UInt8], _ digest: OpaquePointer?) -> Bool {
        guard let ctx = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestVerifyInit(ctx, nil, digest, nil, key) == 1 else { return false }
        return withNonNullBytes(message) { bytes, count in
            EVP_DigestVerify(ctx, signature, signature.count, bytes, count) == 1
        }
    }
}

// MARK: - Helpers

/// A fresh P-256 key pair; the caller owns the returned EVP_PKEY. (EVP_EC_gen is a variadic
/// macro Swift cannot call, hence the explicit context.)
func generateP256Key() throws -> OpaquePointer {
    guard let ctx = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else {
        throw CryptoError.openSSL("EVP_PKEY_CTX_new_from_name(EC) failed")
    }
    defer { EVP_PKEY_CTX_free(ctx) }
    guard EVP_PKEY_keygen_init(ctx) == 1,
        EVP_PKEY_CTX_set_group_name(ctx, "P-256") == 1
    else {
        throw CryptoError.openSSL("cannot set up P-256 key generation")
    }
    var key: OpaquePointer? = nil
    guard EVP_PKEY_generate(ctx, &key) == 1, let key else {
        throw CryptoError.openSSL("P-256 key generation failed")
    }
    return key
}

/// Reads a private key PEM (PKCS#8 or SEC1, never prompting for a passphrase) and checks that
/// it is P-256. The caller owns the returned EVP_PKEY.
private func loadPrivateKey(pem: String) throws -> OpaquePointer {
    ERR_clear_error()
    let key = try withReadBIO(pem) { bio in PEM_read_bio_PrivateKey(bio, nil, refusePassphrase, nil) }
    guard let key else {
        throw CryptoError.openSSL("could not parse private key PEM (expected PRIVATE KEY or EC PRIVATE KEY, unencrypted)")
    }
    try freeingOnError(key) { try requireP256(key) }
    return key
}

/// Runs `body` for a key we own (not yet handed to an object whose deinit frees it); if it
/// throws, frees the key before passing the error on.
private func freeingOnError<T>(_ key: OpaquePointer, _ body: () throws -> T) rethrows -> T {
    do {
        return try body()
    } catch {
        EVP_PKEY_free(key)
        throw error
    }
}

/// Throws "key is not an EC P-256 key (...)" unless `key` is an EC key on prime256v1.
private func requireP256(_ key: OpaquePointer) throws {
    guard EVP_PKEY_is_a(key, "EC") == 1 else {
        let type = EVP_PKEY_get0_type_name(key).map { String(cString: $0) } ?? "unknown"
        throw CryptoError(message: "key is not an EC P-256 key (key type \(type))")
    }
    var name = [CChar](repeating: 0, count: 80)
    var nameLength = 0
    guard EVP_PKEY_get_group_name(key, &name, name.count, &nameLength) == 1 else {
        _ = drainOpenSSLErrors()
        throw CryptoError(message: "key is not an EC P-256 key (curve has no name)")
    }
    let curve = stringFromCString(name)
    // The default provider reports the SN ("prime256v1"); accept the NIST alias as well.
    var nid = OBJ_sn2nid(curve)
    if nid == NID_undef { nid = EC_curve_nist2nid(curve) }
    guard nid == NID_X9_62_prime256v1 else {
        throw CryptoError(message: "key is not an EC P-256 key (curve \(curve))")
    }
}

/// DER ECDSA-Sig-Value → raw r||s, each left-padded to `scalarLength` bytes.
private func derToRaw(_ der: [UInt8], scalarLength: Int) throws -> [UInt8] {
    let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
        var input = buffer.baseAddress
        return d2i_ECDSA_SIG(nil, &input, buffer.count)
    }
    guard let parsed else { throw CryptoError.openSSL("cannot parse DER ECDSA signature") }
    defer { ECDSA_SIG_free(parsed) }
    var raw = [UInt8](repeating: 0, count: 2 * scalarLength)
    let ok = raw.withUnsafeMutableBufferPointer { out in
        BN_bn2binpad(ECDSA_SIG_get0_r(parsed), out.baseAddress, Int32(scalarLength)) == scalarLength
            && BN_bn2binpad(ECDSA_SIG_get0_s(parsed), out.baseAddress! + scalarLength, Int32(scalarLength)) == scalarLength
    }
    guard ok else { throw CryptoError.openSSL("ECDSA signature scalar too large for P-256") }
    return raw
}

/// Raw 64-byte r||s → DER ECDSA-Sig-Value, or nil if OpenSSL cannot encode it.
private func rawToDER(_ raw: [UInt8], scalarLength: Int) -> [UInt8]? {
    guard raw.count == 2 * scalarLength, let sig = ECDSA_SIG_new() else { return nil }
    defer { ECDSA_SIG_free(sig) }
    let (r, s) = raw.withUnsafeBufferPointer { buffer in
        (
            BN_bin2bn(buffer.baseAddress, Int32(scalarLength), nil),
            BN_bin2bn(buffer.baseAddress! + scalarLength, Int32(scalarLength), nil)
        )
    }
    // ECDSA_SIG_set0 takes ownership of r and s only when it succeeds.
    guard let r, let s, ECDSA_SIG_set0(sig, r, s) == 1 else {
        BN_free(r)
        BN_free(s)
        return nil
    }
    let length = i2d_ECDSA_SIG(sig, nil)
    guard length > 0 else { return nil }
    var der = [UInt8](repeating: 0, count: Int(length))
    let written = der.withUnsafeMutableBufferPointer { buffer in
        var out = buffer.baseAddress
        return i2d_ECDSA_SIG(sig, &out)
    }
    return written == length ? der : nil
}

/// Calls `body` with a non-NULL pointer even for an empty message: some OpenSSL paths treat a
/// NULL data pointer as an error regardless of the length.
private func withNonNullBytes<T>(_ bytes: [UInt8], _ body: (UnsafePointer<UInt8>, Int) -> T) -> T {
    if bytes.isEmpty {
        var dummy: UInt8 = 0
        return body(&dummy, 0)
    }
    return bytes.withUnsafeBufferPointer { body($0.baseAddress!, $0.count) }
}
