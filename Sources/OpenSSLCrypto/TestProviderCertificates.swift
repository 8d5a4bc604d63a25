import COpenSSL
import Foundation

extension TestCertificates {
    /// Issues a TEST ONLY APNs provider certificate signed by the test CA (`caPath`, `caKeyPath`
    /// as written by `generate(into:)`; any CA certificate with its matching private key works).
    ///
    /// Subject: UID = `bundleID`, CN = "Apple Push Services: <bundleID>" (see `commonName`), O = "apns-emulator (TEST ONLY)".
    /// Extensions: 1.2.840.113635.100.6.3.1 (DER NULL) if `development`, …6.3.2 if `production`,
    /// the …6.3.6 topic list `topics` (default: `defaultTopics(for: bundleID)`; an empty array
    /// leaves the extension out, like pre-2015 certificates), clientAuth extendedKeyUsage,
    /// digitalSignature keyUsage, CA:FALSE, subject/authority key identifiers. EC P-256 key
    /// (RSA-2048 with `rsa`), SHA-256 signature (ECDSA for an EC CA key).
    ///
    /// Valid until `validityDays` days from now (-36500...36500). Normally valid from an hour ago;
    /// when `validityDays` < 1 the validity period starts a day before it ends, so `validityDays: -1`
    /// gives a certificate that expired a day ago.
    ///
    /// Writes `<name>.pem` (certificate only) and `<name>-key.pem` (PKCS#8 key, mode 0600) into
    /// `directory` (created if missing), replacing existing files.
    /// `rsa`: an RSA-2048 key, as Apple issues (some libraries read a one-file PEM's key as
    /// RSA only); an EC P-256 key otherwise.
    public static func generateProviderCertificate(
        into directory: String, name: String, caPath: String, caKeyPath: String,
        bundleID: String, development: Bool, production: Bool,
        topics: [(topic: String, kind: String)]? = nil,
        validityDays: Int = 365, rsa: Bool = false
    ) throws -> (certificatePath: String, keyPath: String) {
        guard !name.isEmpty, !name.contains("/") else {
            throw CryptoError(message: "invalid certificate file name \"\(name)\"")
        }
        guard !bundleID.isEmpty else { throw CryptoError(message: "bundleID must not be empty") }
        guard (-36500...36500).contains(validityDays) else {
            throw CryptoError(message: "validityDays \(validityDays) out of range (-36500...36500)")
        }
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw CryptoError(message: "cannot create directory \(directory): \(whyNotCreated(directory, error))")
        }
        ERR_clear_error()
        let ca = try loadCertificate(path: caPath)
        defer { X509_free(ca) }
        let caKey = try loadAnyPrivateKey(path: caKeyPath)
        defer { EVP_PKEY_free(caKey) }
        guard X509_check_private_key(ca, caKey) == 1 else {
            throw CryptoError.openSSL("CA key \(caKeyPath) does not match CA certificate \(caPath)")
        }
        let key = rsa ? try generateRSAKey(bits: 2048) : try generateP256Key()
        defer { EVP_PKEY_free(key) }

        var rawExtensions: [(oid: String, contents: [UInt8])] = []
        let derNull: [UInt8] = [0x05, 0x00]
        if development { rawExtensions.append((APNsCertificateOID.development, derNull)) }
        if production { rawExtensions.append((APNsCertificateOID.production, derNull)) }
        let topicList = topics ?? defaultTopics(for: bundleID)
        if !topicList.isEmpty { rawExtensions.append((APNsCertificateOID.topics, encodeTopicList(topicList))) }

        let day = 86_400
        let certificate = try makeCertificate(
            subject: [("UID", bundleID), ("CN", commonName(bundleID)), ("O", "apns-emulator (TEST ONLY)")],
            publicKey: key, issuer: ca, issuerKey: caKey, days: validityDays,
            notBeforeOffset: min(-3600, (validityDays - 1) * day),
            extensions: leafExtensions(purpose: "clientAuth"),
            rawExtensions: rawExtensions)
        defer { X509_free(certificate) }

        let base = directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        let certificatePath = base + "/" + name + ".pem"
        let keyPath = base + "/" + name + "-key.pem"
        try writeFile(keyPath, try privateKeyPEM(key), mode: 0o600)
        try writeFile(certificatePath, try certificatePEM(certificate), mode: 0o644)
        return (certificatePath, keyPath)
    }

    /// Writes `server-rsa.pem` and `server-rsa-key.pem` into `directory`: an RSA-2048 server
    /// certificate with the names of `server.pem`, signed by the CA there (`ca.pem`,
    /// `ca-key.pem`). Apple's servers present an RSA certificate, so a TLS 1.2 client limited
    /// to RSA cipher suites (`ECDHE-RSA-…`) needs one; the emulator serves both, and OpenSSL
    /// picks by what the client offers.
    @discardableResult
    public static func generateRSAServerCertificate(into directory: String) throws -> (certificatePath: String, keyPath: String) {
        let key = try generateRSAKey(bits: 2048)
        defer { EVP_PKEY_free(key) }
        return try writeServerCertificate(for: key, into: directory, named: "server-rsa")
    }

    /// Writes a new `server.pem` and `server-key.pem` (EC P-256) into `directory`, signed by
    /// the CA already there: the CA that providers and devices trust stays as it is.
    @discardableResult
    public static func generateServerCertificate(into directory: String) throws -> (certificatePath: String, keyPath: String) {
        let key = try generateP256Key()
        defer { EVP_PKEY_free(key) }
        return try writeServerCertificate(for: key, into: directory, named: "server")
    }

    /// `NAME.pem` and `NAME-key.pem` in `directory`: a server certificate for `key`, signed by
    /// the CA there (`ca.pem`, `ca-key.pem`).
    private static func writeServerCertificate(
        for key: OpaquePointer, into directory: String, named name: String
    ) throws -> (certificatePath: String, keyPath: String) {
        let base = directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        ERR_clear_error()
        let ca = try loadCertificate(path: base + "/ca.pem")
        defer { X509_free(ca) }
        let caKey = try loadAnyPrivateKey(path: base + "/ca-key.pem")
        defer { EVP_PKEY_free(caKey) }
        guard X509_check_private_key(ca, caKey) == 1 else {
            throw CryptoError.openSSL("CA key \(base)/ca-key.pem does not match CA certificate \(base)/ca.pem")
        }
        let leaf = try makeServerCertificate(publicKey: key, ca: ca, caKey: caKey)
        defer { X509_free(leaf) }
        let certificatePath = base + "/\(name).pem"
        let keyPath = base + "/\(name)-key.pem"
        try writeFile(keyPath, try privateKeyPEM(key), mode: 0o600)
        try writeFile(certificatePath, try certificatePEM(leaf), mode: 0o644)
        return (certificatePath, keyPath)
    }

    static func generateRSAKey(bits: UInt32) throws -> OpaquePointer {
        guard let ctx = EVP_PKEY_CTX_new_from_name(nil, "RSA", nil) else {
            throw CryptoError.openSSL("EVP_PKEY_CTX_new_from_name(RSA) failed")
        }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_keygen_init(ctx) == 1, EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, Int32(bits)) == 1 else {
            throw CryptoError.openSSL("cannot set up RSA key generation")
        }
        var key: OpaquePointer? = nil
        guard EVP_PKEY_generate(ctx, &key) == 1, let key else { throw CryptoError.openSSL("RSA key generation failed") }
        return key
    }

    /// The topics of a current APNs certificate for `bundleID`: the app itself, its VoIP topic
    /// and its watch complication topic.
    /// "Apple Push Services: <bundleID>", or the bundle id alone (its first 64 characters) when
    /// that is over X.509's 64-character limit for a common name: an MDM topic
    /// (`com.apple.mgmt.External.<UUID>`, 60 characters) is. The UID holds the whole id.
    static func commonName(_ bundleID: String) -> String {
        let full = "Apple Push Services: \(bundleID)"
        return full.count <= 64 ? full : String(bundleID.prefix(64))
    }

    public static func defaultTopics(for bundleID: String) -> [(topic: String, kind: String)] {
        [(bundleID, "app"), (bundleID + ".voip", "voip"), (bundleID + ".complication", "complication")]
    }

    /// Adds a non-critical extension with DER `contents` (the extnValue octets) under `oid`.
    static func addRawExtension(_ certificate: OpaquePointer, oid: String, contents: [UInt8]) throws {
        guard let object = OBJ_txt2obj(oid, 1) else { throw CryptoError.openSSL("bad OID \(oid)") }
        defer { ASN1_OBJECT_free(object) }
        guard let octets = ASN1_OCTET_STRING_new() else { throw CryptoError.openSSL("ASN1_OCTET_STRING_new failed") }
        defer { ASN1_OCTET_STRING_free(octets) }
        guard contents.count < Int(Int32.max), ASN1_OCTET_STRING_set(octets, contents, Int32(contents.count)) == 1 else {
            throw CryptoError.openSSL("cannot set extension \(oid) contents")
        }
        // Copies both the object and the octets.
        guard let ext = X509_EXTENSION_create_by_OBJ(nil, object, 0, octets) else {
            throw CryptoError.openSSL("cannot build extension \(oid)")
        }
        defer { X509_EXTENSION_free(ext) }
        guard X509_add_ext(certificate, ext, -1) == 1 else { throw CryptoError.openSSL("X509_add_ext failed") }
    }

    /// The first certificate of a PEM file. The caller owns the X509.
    private static func loadCertificate(path: String) throws -> OpaquePointer {
        let pem = try readPEMFile(path, what: "CA certificate")
        let certificate = try withReadBIO(pem) { bio in PEM_read_bio_X509(bio, nil, refusePassphrase, nil) }
        guard let certificate else { throw CryptoError.openSSL("no PEM CERTIFICATE in \(path)") }
        return certificate
    }

    /// An unencrypted private key of any type from a PEM file. The caller owns the EVP_PKEY.
    private static func loadAnyPrivateKey(path: String) throws -> OpaquePointer {
        let pem = try readPEMFile(path, what: "CA private key")
        let key = try withReadBIO(pem) { bio in PEM_read_bio_PrivateKey(bio, nil, refusePassphrase, nil) }
        guard let key else { throw CryptoError.openSSL("cannot load an unencrypted private key from \(path)") }
        return key
    }

    private static func readPEMFile(_ path: String, what: String) throws -> String {
        do {
            return try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw CryptoError(message: "cannot read \(what) \(path): \(error.localizedDescription)")
        }
    }
}
