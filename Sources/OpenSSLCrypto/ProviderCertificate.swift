import COpenSSL
public import Foundation
import Glibc

// Certificate-based provider authentication ("APNs mTLS"): what a provider certificate says
// about the app it was issued for, and whether it chains to a trusted CA.

/// Object identifiers Apple puts into APNs provider certificates.
public enum APNsCertificateOID {
    /// Present (value DER NULL) when the certificate may be used with the development (sandbox) server.
    public static let development = "1.2.840.113635.100.6.3.1"
    /// Present (value DER NULL) when the certificate may be used with the production server.
    public static let production = "1.2.840.113635.100.6.3.2"
    /// The topic list: `SEQUENCE { UTF8String topic, SEQUENCE { UTF8String kind }, ... }`.
    public static let topics = "1.2.840.113635.100.6.3.6"
    /// Apple names this one beside .3.6 as listing the push topics ("Check Extension
    /// 1.2.840.113635.100.6.3.6 and 1.2.840.113635.100.6.3.4"); read the same way.
    public static let otherTopics = "1.2.840.113635.100.6.3.4"
}

/// What an APNs provider certificate says about itself.
public struct ProviderCertificateInfo: Sendable, Equatable {
    /// The subject's first `UID` (0.9.2342.19200300.100.1.1) attribute: the app's bundle id.
    public var subjectUID: String?
    /// The subject's first commonName, e.g. "Apple Push Services: com.example.app".
    public var commonName: String?
    /// The certificate carries extension 1.2.840.113635.100.6.3.1 (valid for the sandbox).
    public var development: Bool
    /// The certificate carries extension 1.2.840.113635.100.6.3.2 (valid for production).
    public var production: Bool
    /// Extension 1.2.840.113635.100.6.3.6 (then .3.4) as (topic, kind) pairs in certificate order, e.g.
    /// ("com.example.app", "app"), ("com.example.app.voip", "voip"). Empty when the extension is
    /// absent (certificates from before 2015 carry only the bundle id in `subjectUID`).
    public var topics: [(topic: String, kind: String)]
    /// Start of the validity period, whole seconds (certificate times have no finer resolution).
    public var notBefore: Date?
    /// End of the validity period, whole seconds.
    public var notAfter: Date?
    /// The issuer's first commonName, e.g. "Apple Worldwide Developer Relations Certification Authority".
    public var issuerCommonName: String?

    public init(
        subjectUID: String?, commonName: String?, development: Bool, production: Bool,
        topics: [(topic: String, kind: String)], notBefore: Date?, notAfter: Date?,
        issuerCommonName: String?
    ) {
        self.subjectUID = subjectUID
        self.commonName = commonName
        self.development = development
        self.production = production
        self.topics = topics
        self.notBefore = notBefore
        self.notAfter = notAfter
        self.issuerCommonName = issuerCommonName
    }

    /// Parses a DER certificate (e.g. `TLSConnection.peerCertificateDER`). Throws CryptoError
    /// when the bytes are not exactly one X.509 certificate, or when a name attribute or the
    /// topic extension is malformed. Says nothing about trust: see `CertificateTrustStore`.
    public init(der: [UInt8]) throws {
        let certificate = try parseCertificateDER(der)
        defer { X509_free(certificate) }
        try self.init(certificate: certificate)
    }

    /// Reads the fields from a parsed certificate (not consumed).
    init(certificate: OpaquePointer) throws {
        defer { ERR_clear_error() }
        guard let subject = X509_get_subject_name(certificate),
            let issuer = X509_get_issuer_name(certificate)
        else {
            throw CryptoError.openSSL("certificate has no subject or issuer name")
        }
        subjectUID = try firstNameAttribute(subject, nid: NID_userId, what: "subject UID")
        commonName = try firstNameAttribute(subject, nid: NID_commonName, what: "subject commonName")
        issuerCommonName = try firstNameAttribute(issuer, nid: NID_commonName, what: "issuer commonName")
        development = try extensionContent(certificate, oid: APNsCertificateOID.development) != nil
        production = try extensionContent(certificate, oid: APNsCertificateOID.production) != nil
        if let topicList = try extensionContent(certificate, oid: APNsCertificateOID.topics) {
            topics = try parseTopicList(topicList)
        } else {
            topics = []
        }
        // Topics listed in .3.4 count too. Its layout is not documented: read as .3.6's, and
        // passed over (not refused) when it is something else.
        if let otherList = try? extensionContent(certificate, oid: APNsCertificateOID.otherTopics),
            let others = try? parseTopicList(otherList)
        {
            for other in others where !topics.contains(where: { $0.topic == other.topic }) { topics.append(other) }
        }
        notBefore = date(from: X509_get0_notBefore(certificate))
        notAfter = date(from: X509_get0_notAfter(certificate))
    }

    /// The DER bytes of the first CERTIFICATE block in `pem`. Throws CryptoError when there is none.
    public static func derFromPEM(_ pem: String) throws -> [UInt8] {
        ERR_clear_error()
        let certificate = try withReadBIO(pem) { bio in PEM_read_bio_X509(bio, nil, refusePassphrase, nil) }
        guard let certificate else { throw CryptoError.openSSL("no PEM CERTIFICATE found") }
        defer { X509_free(certificate) }
        return try derEncoding(of: certificate)
    }

    public static func == (lhs: ProviderCertificateInfo, rhs: ProviderCertificateInfo) -> Bool {
        lhs.subjectUID == rhs.subjectUID && lhs.commonName == rhs.commonName
            && lhs.development == rhs.development && lhs.production == rhs.production
            && lhs.topics.elementsEqual(rhs.topics, by: { $0.topic == $1.topic && $0.kind == $1.kind })
            && lhs.notBefore == rhs.notBefore && lhs.notAfter == rhs.notAfter
            && lhs.issuerCommonName == rhs.issuerCommonName
    }
}

// MARK: - Trust store

/// A set of trusted CA certificates, loaded once (typically at start-up) and then used to
/// verify any number of client certificates, from any thread, without file I/O.
///
/// A certificate verifies when it chains to one of the loaded certificates (any of them may be
/// the anchor, not only self-signed roots: an intermediate such as Apple's WWDR CA works on its
/// own), every certificate in the chain is within its validity period now, and the chain is fit
/// for TLS client authentication (OpenSSL's "ssl_client" purpose, as a TLS server checking client
/// certificates would apply: a certificate whose extendedKeyUsage lacks clientAuth is refused with
/// "unsuitable certificate purpose"). Revocation is not checked.
public final class CertificateTrustStore: @unchecked Sendable {
    // Immutable after init. X509_STORE locks internally, so concurrent verifications (each with
    // its own X509_STORE_CTX) may share it, as SSL_CTXs share theirs.
    private let store: OpaquePointer
    /// How many CA certificates were loaded.
    public let certificateCount: Int

    /// Loads every CERTIFICATE block of a PEM file. Throws CryptoError if the file cannot be
    /// read, holds no certificate, or a block is corrupt.
    public convenience init(pemPath: String) throws {
        let text: String
        do {
            text = try String(contentsOfFile: pemPath, encoding: .utf8)
        } catch {
            throw CryptoError(message: "cannot read trusted CA certificates from \(pemPath): \(error.localizedDescription)")
        }
        do {
            try self.init(pem: text)
        } catch let error as CryptoError {
            throw CryptoError(message: "\(pemPath): \(error.message)")
        }
    }

    /// Loads every CERTIFICATE block of PEM text (other blocks, e.g. keys, are skipped).
    public init(pem: String) throws {
        ERR_clear_error()
        guard let store = X509_STORE_new() else { throw CryptoError.openSSL("X509_STORE_new failed") }
        var count = 0
        do {
            try withReadBIO(pem) { bio in
                while let certificate = PEM_read_bio_X509(bio, nil, refusePassphrase, nil) {
                    defer { X509_free(certificate) }  // the store takes its own reference
                    guard X509_STORE_add_cert(store, certificate) == 1 else {
                        throw CryptoError.openSSL("cannot add CA certificate to the trust store")
                    }
                    count += 1
                }
                // The loop ends at the first failed read: only "no more PEM blocks" is a clean end.
                let last = ERR_peek_last_error()
                if ERR_GET_LIB(last) == ERR_LIB_PEM && ERR_GET_REASON(last) == PEM_R_NO_START_LINE {
                    ERR_clear_error()
                } else {
                    throw CryptoError.openSSL("corrupt PEM CERTIFICATE block")
                }
            }
            guard count > 0 else { throw CryptoError(message: "no PEM CERTIFICATE found") }
        } catch {
            X509_STORE_free(store)
            throw error
        }
        self.store = store
        certificateCount = count
    }

    deinit { X509_STORE_free(store) }

    /// nil when the DER certificate verifies (see the type's description), else a short reason in
    /// OpenSSL's words, e.g. "unable to get local issuer certificate", "certificate has expired",
    /// "certificate is not yet valid", "unsuitable certificate purpose", or
    /// "cannot parse certificate" for bytes that are not a certificate.
    public func verify(der: [UInt8]) -> String? {
        guard let certificate = try? parseCertificateDER(der) else {
            ERR_clear_error()
            return "cannot parse certificate"
        }
        defer { X509_free(certificate) }
        return verify(certificate: certificate, untrustedChain: nil)?.reason
    }

    /// nil when `certificate` verifies, else OpenSSL's X509_V_ERR_* code and its text.
    /// `untrustedChain` (a STACK_OF(X509), may be nil) offers intermediates the peer sent.
    func verify(certificate: OpaquePointer, untrustedChain: OpaquePointer?) -> (code: Int32, reason: String)? {
        // Verification failures must not stay on this thread's error queue, where they would be
        // misattributed to the next TLS call.
        ERR_clear_error()
        defer { ERR_clear_error() }
        let setupFailed = (X509_V_ERR_UNSPECIFIED, "cannot set up certificate verification")
        guard let context = X509_STORE_CTX_new() else { return setupFailed }
        defer { X509_STORE_CTX_free(context) }
        guard X509_STORE_CTX_init(context, store, certificate, untrustedChain) == 1,
            X509_STORE_CTX_set_default(context, "ssl_client") == 1
        else {
            return setupFailed
        }
        // Let any loaded certificate be a trust anchor, not only self-signed roots.
        _ = X509_VERIFY_PARAM_set_flags(X509_STORE_CTX_get0_param(context), UInt(X509_V_FLAG_PARTIAL_CHAIN))
        if X509_verify_cert(context) == 1 { return nil }
        let code = X509_STORE_CTX_get_error(context)
        guard code != X509_V_OK else { return (X509_V_ERR_UNSPECIFIED, "certificate verification failed") }
        return (code, String(cString: X509_verify_cert_error_string(Int(code))))
    }
}

extension TLSConnection {
    /// Whether the peer's certificate verifies against `trustStore` (see `CertificateTrustStore`);
    /// nil when it does, else a short reason ("unable to get local issuer certificate",
    /// "certificate has expired", "no certificate", ...). Intermediates the peer sent with its
    /// certificate are used to build the chain. No file I/O. Safe to call after a successful
    /// handshake (also a resumed one); before it, the answer is "no certificate".
    ///
    /// A peer that sends its root CA too (OpenSSL clients do when the CA is in their own trust
    /// store, see SSL_MODE_NO_AUTO_CHAIN) and is not trusted here gets "self-signed certificate
    /// in certificate chain" rather than "unable to get local issuer certificate".
    ///
    /// Resumed sessions (TLS 1.2 or 1.3 tickets) keep the peer's certificate but not the
    /// intermediates it sent: OpenSSL does not store them in tickets. A certificate that needs
    /// those to reach the trust store then fails with "unable to get local issuer certificate
    /// (resumed session: ...)"; trusting the intermediate CAs directly avoids that.
    public func verifyPeerCertificate(trustStore: CertificateTrustStore) -> String? {
        guard let leaf = SSL_get0_peer_certificate(ssl) else { return "no certificate" }
        guard let (code, reason) = trustStore.verify(certificate: leaf, untrustedChain: SSL_get_peer_cert_chain(ssl)) else {
            return nil
        }
        if code == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, SSL_session_reused(ssl) == 1 {
            return reason + " (resumed session: the client's intermediate certificates are not kept; trust them directly)"
        }
        return reason
    }

    /// As `verifyPeerCertificate(trustStore:)`, loading the trusted CA certificates (PEM, may
    /// hold several) from `trustedCAPath` on every call: prefer a `CertificateTrustStore` loaded
    /// once. A file that cannot be loaded gives a reason starting "cannot load trusted CA certificates".
    public func verifyPeerCertificate(trustedCAPath: String) -> String? {
        let store: CertificateTrustStore
        do {
            store = try CertificateTrustStore(pemPath: trustedCAPath)
        } catch {
            return "cannot load trusted CA certificates: \((error as? CryptoError)?.message ?? "\(error)")"
        }
        return verifyPeerCertificate(trustStore: store)
    }
}

// MARK: - Helpers

/// Parses exactly one DER certificate (trailing bytes are an error). The caller owns the X509.
func parseCertificateDER(_ der: [UInt8]) throws -> OpaquePointer {
    guard !der.isEmpty else { throw CryptoError(message: "empty certificate") }
    ERR_clear_error()
    var consumed = 0
    let certificate: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
        var input = buffer.baseAddress
        let parsed = d2i_X509(nil, &input, buffer.count)
        if parsed != nil, let input { consumed = input - buffer.baseAddress! }
        return parsed
    }
    guard let certificate else { throw CryptoError.openSSL("cannot parse DER certificate") }
    guard consumed == der.count else {
        X509_free(certificate)
        throw CryptoError(message: "cannot parse DER certificate: \(der.count - consumed) trailing bytes")
    }
    return certificate
}

func derEncoding(of certificate: OpaquePointer) throws -> [UInt8] {
    let length = i2d_X509(certificate, nil)
    guard length > 0 else { throw CryptoError.openSSL("cannot encode certificate") }
    var der = [UInt8](repeating: 0, count: Int(length))
    let written = der.withUnsafeMutableBufferPointer { buffer in
        var out = buffer.baseAddress
        return i2d_X509(certificate, &out)
    }
    guard written == length else { throw CryptoError.openSSL("cannot encode certificate") }
    return der
}

/// The first attribute `nid` of a name as a string, nil when absent; throws if it cannot be
/// converted to UTF-8 (e.g. a UTF8String holding invalid UTF-8).
private func firstNameAttribute(_ name: OpaquePointer, nid: Int32, what: String) throws -> String? {
    let index = X509_NAME_get_index_by_NID(name, nid, -1)
    guard index >= 0 else { return nil }
    guard let entry = X509_NAME_get_entry(name, index), let data = X509_NAME_ENTRY_get_data(entry) else {
        throw CryptoError.openSSL("cannot read \(what)")
    }
    var utf8: UnsafeMutablePointer<UInt8>? = nil
    let length = ASN1_STRING_to_UTF8(&utf8, data)
    guard length >= 0, let utf8 else { throw CryptoError.openSSL("\(what) is not a valid string") }
    defer { CRYPTO_free(utf8, nil, 0) }  // OPENSSL_free is a macro
    return String(decoding: UnsafeBufferPointer(start: utf8, count: Int(length)), as: UTF8.self)
}

/// The content (extnValue octets) of the certificate's extension `oid`, nil when absent.
private func extensionContent(_ certificate: OpaquePointer, oid: String) throws -> [UInt8]? {
    guard let object = OBJ_txt2obj(oid, 1) else { throw CryptoError.openSSL("bad OID \(oid)") }
    defer { ASN1_OBJECT_free(object) }
    let index = X509_get_ext_by_OBJ(certificate, object, -1)
    guard index >= 0 else { return nil }
    guard X509_get_ext_by_OBJ(certificate, object, index) < 0 else {
        throw CryptoError(message: "certificate has extension \(oid) more than once")
    }
    guard let ext = X509_get_ext(certificate, index), let data = X509_EXTENSION_get_data(ext) else {
        throw CryptoError.openSSL("cannot read extension \(oid)")
    }
    let length = Int(ASN1_STRING_length(data))
    guard length > 0, let bytes = ASN1_STRING_get0_data(data) else { return [] }
    return Array(UnsafeBufferPointer(start: bytes, count: length))
}

private func date(from time: UnsafePointer<ASN1_TIME>?) -> Date? {
    guard let time else { return nil }
    var parts = tm()
    guard ASN1_TIME_to_tm(time, &parts) == 1 else {
        ERR_clear_error()
        return nil
    }
    return Date(timeIntervalSince1970: TimeInterval(timegm(&parts)))
}

// MARK: - The topic list (DER)

private enum DERTag {
    static let sequence: UInt8 = 0x30
    static let utf8String: UInt8 = 0x0C
    static let printableString: UInt8 = 0x13
    static let ia5String: UInt8 = 0x16
}

/// A bounds-checked reader of definite-length DER TLVs with single-byte tags: all this module
/// needs to walk the small APNs topic list, where OpenSSL has no typed parser.
struct DERReader {
    private let bytes: [UInt8]
    private var index: Int
    private let end: Int

    init(_ bytes: [UInt8]) {
        self.init(bytes, range: bytes.startIndex..<bytes.endIndex)
    }

    private init(_ bytes: [UInt8], range: Range<Int>) {
        self.bytes = bytes
        index = range.lowerBound
        end = range.upperBound
    }

    var isAtEnd: Bool { index >= end }

    /// The next element's tag and a reader over its contents.
    mutating func next() throws -> (tag: UInt8, contents: DERReader) {
        guard end - index >= 2 else { throw malformed("truncated element") }
        let tag = bytes[index]
        guard tag & 0x1F != 0x1F else { throw malformed("multi-byte tag") }
        var length = Int(bytes[index + 1])
        var cursor = index + 2
        if length >= 0x80 {
            let count = length & 0x7F
            guard count >= 1, count <= 3 else { throw malformed("unsupported length encoding") }
            guard end - cursor >= count else { throw malformed("truncated length") }
            length = 0
            for byte in bytes[cursor..<cursor + count] { length = length << 8 | Int(byte) }
            // DER: the shortest form, no leading zero octets.
            guard length >= 0x80, bytes[cursor] != 0 else { throw malformed("non-minimal length") }
            cursor += count
        }
        guard end - cursor >= length else { throw malformed("element longer than its container") }
        index = cursor + length
        return (tag, DERReader(bytes, range: cursor..<cursor + length))
    }

    /// The contents of a UTF8String (or, leniently, PrintableString/IA5String) element.
    mutating func nextString() throws -> String {
        let (tag, contents) = try next()
        guard [DERTag.utf8String, DERTag.printableString, DERTag.ia5String].contains(tag) else {
            throw malformed("expected a string, found tag 0x\(String(tag, radix: 16))")
        }
        guard let string = String(validating: contents.bytes[contents.index..<contents.end], as: UTF8.self) else {
            throw malformed("string is not valid UTF-8")
        }
        return string
    }

    private func malformed(_ detail: String) -> CryptoError {
        CryptoError(message: "malformed APNs topic extension (\(APNsCertificateOID.topics)): \(detail)")
    }
}

/// `SEQUENCE { UTF8String topic, SEQUENCE { UTF8String kind }, ... }` → [(topic, kind)].
func parseTopicList(_ der: [UInt8]) throws -> [(topic: String, kind: String)] {
    var outer = DERReader(der)
    let (tag, list) = try outer.next()
    guard tag == DERTag.sequence, outer.isAtEnd else {
        throw CryptoError(message: "malformed APNs topic extension (\(APNsCertificateOID.topics)): expected one SEQUENCE")
    }
    var items = list
    var topics: [(topic: String, kind: String)] = []
    while !items.isAtEnd {
        let topic = try items.nextString()
        guard !items.isAtEnd else {
            throw CryptoError(message: "malformed APNs topic extension (\(APNsCertificateOID.topics)): topic \"\(topic)\" has no kind")
        }
        let (kindTag, kindSequence) = try items.next()
        var kinds = kindSequence
        guard kindTag == DERTag.sequence, !kinds.isAtEnd else {
            throw CryptoError(
                message: "malformed APNs topic extension (\(APNsCertificateOID.topics)): topic \"\(topic)\" is not followed by SEQUENCE { kind }")
        }
        let kind = try kinds.nextString()
        guard kinds.isAtEnd else {
            throw CryptoError(message: "malformed APNs topic extension (\(APNsCertificateOID.topics)): topic \"\(topic)\" has more than one kind")
        }
        topics.append((topic, kind))
    }
    return topics
}

/// The inverse of `parseTopicList`.
func encodeTopicList(_ topics: [(topic: String, kind: String)]) -> [UInt8] {
    var items: [UInt8] = []
    for (topic, kind) in topics {
        items += derElement(DERTag.utf8String, Array(topic.utf8))
        items += derElement(DERTag.sequence, derElement(DERTag.utf8String, Array(kind.utf8)))
    }
    return derElement(DERTag.sequence, items)
}

func derElement(_ tag: UInt8, _ contents: [UInt8]) -> [UInt8] {
    var encoded = [tag]
    let length = contents.count
    if length < 0x80 {
        encoded.append(UInt8(length))
    } else {
        var lengthBytes: [UInt8] = []
        var remaining = length
        while remaining > 0 {
            lengthBytes.insert(UInt8(remaining & 0xFF), at: 0)
            remaining >>= 8
        }
        encoded.append(0x80 | UInt8(lengthBytes.count))
        encoded += lengthBytes
    }
    return encoded + contents
}
