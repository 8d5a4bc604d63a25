import COpenSSL
import Foundation
import Glibc

/// Throwaway PKI for tests and local development. Nothing produced here may ever be trusted
/// outside a test machine: every subject says TEST ONLY.
public enum TestCertificates {
    /// Names the server certificate is valid for, in subjectAltName syntax: loopback, Apple's
    /// host names (push, broadcast and channel management), and `apns-emulator`, the service
    /// name in docker-compose.yml.
    public static let subjectAltNames = [
        "DNS:localhost", "IP:127.0.0.1", "IP:::1",
        "DNS:api.push.apple.com", "DNS:api.sandbox.push.apple.com", "DNS:api.development.push.apple.com",
        "DNS:api-broadcast.push.apple.com", "DNS:api-broadcast.sandbox.push.apple.com",
        "DNS:api-manage-broadcast.push.apple.com", "DNS:api-manage-broadcast.sandbox.push.apple.com",
        "DNS:apns-emulator",
    ]
    public static let caCommonName = "apns-emulator TEST ONLY CA"
    public static let serverCommonName = "apns-emulator TEST ONLY server"

    /// Creates a test-only CA and a server certificate signed by it (see `subjectAltNames`).
    /// Writes `ca.pem`, `ca-key.pem`, `server.pem` (leaf only) and `server-key.pem` into
    /// `directory` (created if missing; key files mode 0600). EC P-256 keys, SHA-256
    /// signatures; CA valid 10 years, leaf 825 days (the most Apple platforms accept). Also
    /// `server-rsa.pem` and `server-rsa-key.pem`, the same names on an RSA key
    /// (`generateRSAServerCertificate`).
    public static func generate(into directory: String) throws -> (caPath: String, certificatePath: String, keyPath: String) {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw CryptoError(message: "cannot create directory \(directory): \(whyNotCreated(directory, error))")
        }
        ERR_clear_error()
        let caKey = try generateP256Key()
        defer { EVP_PKEY_free(caKey) }
        let serverKey = try generateP256Key()
        defer { EVP_PKEY_free(serverKey) }

        let ca = try makeCertificate(
            subject: testSubject(caCommonName), publicKey: caKey, issuer: nil, issuerKey: caKey,
            days: 3650,
            extensions: [
                (NID_basic_constraints, "critical,CA:TRUE,pathlen:0"),
                (NID_key_usage, "critical,keyCertSign,cRLSign"),
                (NID_subject_key_identifier, "hash"),
            ])
        defer { X509_free(ca) }
        let leaf = try makeServerCertificate(publicKey: serverKey, ca: ca, caKey: caKey)
        defer { X509_free(leaf) }

        let base = directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        let caPath = base + "/ca.pem"
        let certificatePath = base + "/server.pem"
        let keyPath = base + "/server-key.pem"
        try writeFile(base + "/ca-key.pem", try privateKeyPEM(caKey), mode: 0o600)
        try writeFile(keyPath, try privateKeyPEM(serverKey), mode: 0o600)
        try writeFile(caPath, try certificatePEM(ca), mode: 0o644)
        try writeFile(certificatePath, try certificatePEM(leaf), mode: 0o644)
        try generateRSAServerCertificate(into: directory)
        return (caPath, certificatePath, keyPath)
    }

    /// The file in the way when `path` or one of its parents is a file, not a directory
    /// (Foundation's own words for it are "NSCocoaErrorDomain error 512").
    /// Why `FileManager` could not create `directory`, in a user's words: a file in the way, or
    /// the system's reason (not Foundation's error dump).
    static func whyNotCreated(_ directory: String, _ error: any Error) -> String {
        if let why = whyNotADirectory(directory) { return why }
        if let cocoa = error as? CocoaError, let posix = cocoa.underlying as NSError?, posix.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(posix.code))) + "; check the path and permissions"
        }
        return "\(error)"
    }

    static func whyNotADirectory(_ path: String) -> String? {
        var current = path
        while !current.isEmpty, current != "/" {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: current, isDirectory: &isDirectory) {
                return isDirectory.boolValue ? nil : "\(current) is a file, not a directory"
            }
            current = (current as NSString).deletingLastPathComponent
        }
        return nil
    }

    /// The server certificate for `publicKey` (EC or RSA): every name of `subjectAltNames`,
    /// 825 days (the most Apple platforms accept), signed by the CA.
    static func makeServerCertificate(publicKey: OpaquePointer, ca: OpaquePointer, caKey: OpaquePointer) throws -> OpaquePointer {
        try makeCertificate(
            subject: testSubject(serverCommonName), publicKey: publicKey, issuer: ca, issuerKey: caKey, days: 825,
            extensions: leafExtensions(purpose: "serverAuth", subjectAltName: subjectAltNames.joined(separator: ",")))
    }

    /// O = "apns-emulator TEST ONLY", CN = `commonName`.
    private static func testSubject(_ commonName: String) -> [(field: String, value: String)] {
        [("O", "apns-emulator TEST ONLY"), ("CN", commonName)]
    }

    /// The extensions of a certificate that is not a CA: digital signatures for `purpose`
    /// (`serverAuth`, `clientAuth`), identified to its issuer by key id.
    static func leafExtensions(purpose: String, subjectAltName: String? = nil) -> [(Int32, String)] {
        var extensions = [
            (NID_basic_constraints, "critical,CA:FALSE"),
            (NID_key_usage, "critical,digitalSignature"),
            (NID_ext_key_usage, purpose),
        ]
        if let subjectAltName { extensions.append((NID_subject_alt_name, subjectAltName)) }
        extensions.append((NID_subject_key_identifier, "hash"))
        extensions.append((NID_authority_key_identifier, "keyid:always"))
        return extensions
    }

    /// Builds and signs a v3 certificate. `issuer == nil` means self-signed. Valid from
    /// `notBeforeOffset` seconds from now until `days` days from now. `rawExtensions` are added
    /// verbatim (non-critical) after `extensions`, for private OIDs OpenSSL has no syntax for.
    static func makeCertificate(
        subject subjectEntries: [(field: String, value: String)], publicKey: OpaquePointer,
        issuer: OpaquePointer?, issuerKey: OpaquePointer, days: Int,
        notBeforeOffset: Int = -3600, extensions: [(Int32, String)],
        rawExtensions: [(oid: String, contents: [UInt8])] = []
    ) throws -> OpaquePointer {
        guard let certificate = X509_new() else { throw CryptoError.openSSL("X509_new failed") }
        do {
            guard X509_set_version(certificate, Int(X509_VERSION_3)) == 1 else {
                throw CryptoError.openSSL("X509_set_version failed")
            }
            // 128 random bits, top bit clear so the INTEGER stays positive; never zero.
            var serial = [UInt8](repeating: 0, count: 16)
            guard RAND_bytes(&serial, Int32(serial.count)) == 1 else { throw CryptoError.openSSL("RAND_bytes failed") }
            serial[0] = (serial[0] & 0x7f) | 0x01
            guard let serialNumber = BN_bin2bn(serial, Int32(serial.count), nil) else {
                throw CryptoError.openSSL("BN_bin2bn failed")
            }
            defer { BN_free(serialNumber) }
            guard BN_to_ASN1_INTEGER(serialNumber, X509_get_serialNumber(certificate)) != nil else {
                throw CryptoError.openSSL("cannot set serial number")
            }
            // Backdated (by default an hour) so a slightly slow clock elsewhere does not reject it.
            guard X509_gmtime_adj(X509_getm_notBefore(certificate), notBeforeOffset) != nil,
                X509_time_adj_ex(X509_getm_notAfter(certificate), Int32(days), 0, nil) != nil
            else {
                throw CryptoError.openSSL("cannot set validity")
            }
            guard let subject = X509_get_subject_name(certificate),
                subjectEntries.allSatisfy({ addNameEntry(subject, $0.field, $0.value) })
            else {
                throw CryptoError.openSSL("cannot set subject")
            }
            let issuerName = issuer.map { X509_get_subject_name($0) } ?? subject
            guard X509_set_issuer_name(certificate, issuerName) == 1,
                X509_set_pubkey(certificate, publicKey) == 1
            else {
                throw CryptoError.openSSL("cannot set issuer or public key")
            }
            // The extension context needs the subject's public key already set (for the
            // subjectKeyIdentifier hash) and the issuer certificate (for authorityKeyIdentifier).
            var v3 = X509V3_CTX()
            X509V3_set_ctx(&v3, issuer ?? certificate, certificate, nil, nil, 0)
            for (nid, value) in extensions {
                guard let ext = X509V3_EXT_conf_nid(nil, &v3, nid, value) else {
                    throw CryptoError.openSSL("cannot build extension \(String(cString: OBJ_nid2sn(nid))) = \(value)")
                }
                defer { X509_EXTENSION_free(ext) }
                guard X509_add_ext(certificate, ext, -1) == 1 else { throw CryptoError.openSSL("X509_add_ext failed") }
            }
            for (oid, contents) in rawExtensions {
                try addRawExtension(certificate, oid: oid, contents: contents)
            }
            guard X509_sign(certificate, issuerKey, sha256Digest) > 0 else {
                throw CryptoError.openSSL("cannot sign certificate")
            }
            return certificate
        } catch {
            X509_free(certificate)
            throw error
        }
    }

    private static func addNameEntry(_ name: OpaquePointer, _ field: String, _ value: String) -> Bool {
        // Explicit length: the byte array is not NUL-terminated, so -1 (strlen) would overrun.
        let bytes = Array(value.utf8)
        return X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8, bytes, Int32(bytes.count), -1, 0) == 1
    }

    static func privateKeyPEM(_ key: OpaquePointer) throws -> String {
        try stringFromWriteBIO("private key") { bio in PEM_write_bio_PrivateKey(bio, key, nil, nil, 0, nil, nil) == 1 }
    }

    static func certificatePEM(_ certificate: OpaquePointer) throws -> String {
        try stringFromWriteBIO("certificate") { bio in PEM_write_bio_X509(bio, certificate) == 1 }
    }

    static func writeFile(_ path: String, _ contents: String, mode: mode_t) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw CryptoError(message: "cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        // open() only applies the mode to new files; an old key file may be more permissive.
        guard fchmod(fd, mode) == 0 else {
            throw CryptoError(message: "cannot chmod \(path): \(String(cString: strerror(errno)))")
        }
        let bytes = Array(contents.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                throw CryptoError(message: "cannot write \(path): \(String(cString: strerror(errno)))")
            }
            offset += written
        }
    }
}
