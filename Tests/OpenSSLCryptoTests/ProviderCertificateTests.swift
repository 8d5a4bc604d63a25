import Foundation
import Glibc
import Testing
import TestSupport
import OpenSSLCrypto

/// A test CA (from `TestCertificates.generate`) that issues provider certificates.
private struct ProviderPKI {
    let pki: TestPKI
    var directory: TemporaryDirectory { pki.directory }
    var caPath: String { pki.caPath }
    var caKeyPath: String { pki.directory.file("ca-key.pem") }

    init() throws { pki = try TestPKI() }

    func issue(
        _ name: String, bundleID: String = "com.example.app", development: Bool = true, production: Bool = false,
        topics: [(topic: String, kind: String)]? = nil,
        validityDays: Int = 365
    ) throws -> (certificatePath: String, keyPath: String) {
        try TestCertificates.generateProviderCertificate(
            into: directory.path, name: name, caPath: caPath,
            caKeyPath: caKeyPath, bundleID: bundleID,
            development: development, production: production,
            topics: topics, validityDays: validityDays)
    }
}

private func der(ofPEMFile path: String) throws -> [UInt8] {
    try ProviderCertificateInfo.derFromPEM(try readText(path))
}

private func info(ofPEMFile path: String) throws -> ProviderCertificateInfo {
    try ProviderCertificateInfo(der: try der(ofPEMFile: path))
}

/// Topic pairs as comparable strings ("topic|kind").
private func pairs(_ topics: [(topic: String, kind: String)]) -> [String] {
    topics.map { "\($0.topic)|\($0.kind)" }
}

/// One DER element with a short-form length (enough for hand-built test data).
private func tlv(_ tag: UInt8, _ contents: [UInt8]) -> [UInt8] {
    precondition(contents.count < 0x80)
    return [tag, UInt8(contents.count)] + contents
}

private func hex(_ bytes: [UInt8]) -> String {
    bytes.map { String(format: "%02X", $0) }.joined(separator: ":")
}

/// A small seeded generator (SplitMix64), so a fuzz failure can be reproduced.
private struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

private func isAbout(_ date: Date?, _ expected: Date, within seconds: TimeInterval = 120) -> Bool {
    guard let date else { return false }
    return abs(date.timeIntervalSince(expected)) <= seconds
}

@Suite("APNs provider certificates")
struct ProviderCertificateTests {
    // MARK: Issuing and reading back

    @Test func developmentCertificateReadsBackWithDefaultTopics() throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        let (certificatePath, keyPath) = try ca.issue("dev", bundleID: "com.example.app", development: true, production: false)
        #expect(certificatePath == ca.directory.file("dev.pem"))
        #expect(keyPath == ca.directory.file("dev-key.pem"))

        let parsed = try info(ofPEMFile: certificatePath)
        #expect(parsed.subjectUID == "com.example.app")
        #expect(parsed.commonName == "Apple Push Services: com.example.app")
        #expect(parsed.development)
        #expect(!parsed.production)
        #expect(
            pairs(parsed.topics) == [
                "com.example.app|app", "com.example.app.voip|voip",
                "com.example.app.complication|complication",
            ])
        #expect(parsed.issuerCommonName == TestCertificates.caCommonName)
        let now = Date()
        #expect(isAbout(parsed.notBefore, now.addingTimeInterval(-3600)), "\(String(describing: parsed.notBefore))")
        #expect(isAbout(parsed.notAfter, now.addingTimeInterval(365 * 86_400)), "\(String(describing: parsed.notAfter))")
    }

    @Test(arguments: [(true, false), (false, true), (true, true), (false, false)])
    func environmentFlagsFollowTheExtensions(development: Bool, production: Bool) throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        let (certificatePath, _) = try ca.issue(
            "cert", bundleID: "com.example.flags", development: development,
            production: production)
        let parsed = try info(ofPEMFile: certificatePath)
        #expect(parsed.development == development)
        #expect(parsed.production == production)
        #expect(parsed.subjectUID == "com.example.flags")
        // The CLI sees exactly the extensions the flags ask for.
        let text = try runChecked(["openssl", "x509", "-in", certificatePath, "-noout", "-text"]).out
        #expect(text.contains("1.2.840.113635.100.6.3.1:") == development)
        #expect(text.contains("1.2.840.113635.100.6.3.2:") == production)
    }

    @Test func customTopicsKeepTheirOrderIncludingLongAndNonASCIIOnes() throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        // A 200-byte topic needs a long-form DER length, and the whole list more than 255 bytes.
        let long = "com.example." + String(repeating: "x", count: 188)
        let topics: [(topic: String, kind: String)] = [
            ("com.example.other.voip", "voip"), ("com.example.other", "app"), (long, "complication"),
            ("com.example.café", "app"),
        ]
        let (certificatePath, _) = try ca.issue(
            "custom", bundleID: "com.example.other", development: false,
            production: true, topics: topics)
        let parsed = try info(ofPEMFile: certificatePath)
        #expect(pairs(parsed.topics) == pairs(topics))
        #expect(parsed.subjectUID == "com.example.other")
    }

    @Test func emptyTopicListLeavesTheExtensionOut() throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        let (certificatePath, _) = try ca.issue("legacy", topics: [])
        let parsed = try info(ofPEMFile: certificatePath)
        #expect(parsed.topics.isEmpty)
        #expect(parsed.subjectUID == "com.example.app")
        let text = try runChecked(["openssl", "x509", "-in", certificatePath, "-noout", "-text"]).out
        #expect(!text.contains("1.2.840.113635.100.6.3.6"))
    }

    @Test func keyFileIsPKCS8P256MatchingTheCertificateWithMode0600() throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        let (certificatePath, keyPath) = try ca.issue("keyed")
        let mode = (try FileManager.default.attributesOfItem(atPath: keyPath)[.posixPermissions] as? NSNumber)?.intValue
        #expect(mode == 0o600)
        let pem = try readText(keyPath)
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let key = try ES256PrivateKey(pem: pem)  // throws unless P-256
        let certificateKey = try runChecked(["openssl", "x509", "-in", certificatePath, "-noout", "-pubkey"]).out
        #expect(key.publicKey.pem == certificateKey)
    }

    @Test func expiredCertificateHasItsValidityInThePast() throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        let (certificatePath, _) = try ca.issue("expired", validityDays: -1)
        let parsed = try info(ofPEMFile: certificatePath)
        let now = Date()
        #expect(isAbout(parsed.notAfter, now.addingTimeInterval(-86_400)))
        #expect(isAbout(parsed.notBefore, now.addingTimeInterval(-2 * 86_400)))
        #expect(try run(["openssl", "x509", "-in", certificatePath, "-noout", "-checkend", "0"]).status != 0)
    }

    @Test func infoIsEquatable() throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        let first = try info(ofPEMFile: try ca.issue("a").certificatePath)
        #expect(first == (try info(ofPEMFile: ca.directory.file("a.pem"))))
        var changed = first
        changed.topics[1].kind = "app"
        #expect(changed != first)
        changed = first
        changed.topics.removeLast()
        #expect(changed != first)
        changed = first
        changed.production = true
        #expect(changed != first)
    }

    @Test func issuingRejectsBadInputs() throws {
        let ca = try ProviderPKI()
        let other = try TestPKI()
        defer {
            ca.directory.remove()
            other.directory.remove()
        }
        #expect {
            try TestCertificates.generateProviderCertificate(
                into: ca.directory.path, name: "p", caPath: ca.caPath, caKeyPath: other.directory.file("ca-key.pem"),
                bundleID: "com.example.app", development: true, production: false)
        } throws: { error in
            (error as? CryptoError)?.message.contains("does not match") == true
        }
        #expect(throws: CryptoError.self) { try ca.issue("a/b") }
        #expect(throws: CryptoError.self) { try ca.issue("p", bundleID: "") }
        #expect(throws: CryptoError.self) {
            try TestCertificates.generateProviderCertificate(
                into: ca.directory.path, name: "p", caPath: ca.directory.file("missing.pem"), caKeyPath: ca.caKeyPath,
                bundleID: "com.example.app", development: true, production: false)
        }
    }

    // MARK: Interop with the openssl CLI

    @Test func opensslShowsTheAPNsExtensionsUIDAndTopicStrings() throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        let (certificatePath, _) = try ca.issue("both", bundleID: "com.example.app", development: true, production: true)
        let text = try runChecked(["openssl", "x509", "-in", certificatePath, "-noout", "-text"]).out
        for oid in ["1.2.840.113635.100.6.3.1:", "1.2.840.113635.100.6.3.2:", "1.2.840.113635.100.6.3.6:"] {
            #expect(text.contains(oid), "\(oid) missing")
        }
        #expect(text.contains("TLS Web Client Authentication"))
        let subject = try runChecked([
            "openssl", "x509", "-in", certificatePath, "-noout", "-subject",
            "-nameopt", "RFC2253",
        ]).out
        #expect(subject.contains("UID=com.example.app"), "\(subject)")
        #expect(subject.contains("CN=Apple Push Services: com.example.app"), "\(subject)")
        #expect(subject.contains("(TEST ONLY)"), "\(subject)")

        // The CLI agrees it chains to the CA and suits TLS client authentication.
        let verify = try run(["openssl", "verify", "-purpose", "sslclient", "-CAfile", ca.caPath, certificatePath])
        #expect(verify.status == 0, "\(verify.out) \(verify.err)")

        // openssl's own DER parser reads the topic list as the alternating strings, in order.
        let dump = try runChecked(["openssl", "asn1parse", "-in", certificatePath]).out.split(separator: "\n")
        let oidLine = try #require(dump.firstIndex { $0.contains(":1.2.840.113635.100.6.3.6") })
        let octetLine = try #require(dump[(oidLine + 1)...].first { $0.contains("OCTET STRING") })
        let offset = try #require(octetLine.split(separator: ":").first?.trimmingCharacters(in: .whitespaces))
        let inner = try runChecked(["openssl", "asn1parse", "-in", certificatePath, "-strparse", offset]).out
        let lines = inner.split(separator: "\n")
        let strings = lines.filter { $0.contains("UTF8STRING") }.compactMap { $0.split(separator: ":").last.map(String.init) }
        #expect(
            strings == [
                "com.example.app", "app", "com.example.app.voip", "voip",
                "com.example.app.complication", "complication",
            ], "\(inner)")
        #expect(lines.filter { $0.contains("SEQUENCE") }.count == 4, "\(inner)")  // the list + one per kind
    }

    /// Root → intermediate → provider certificate made with the openssl CLI alone, with a topic
    /// list hand-encoded as DER in the config file.
    struct CLIChain {
        let directory: TemporaryDirectory
        var rootPath: String { directory.file("root.pem") }
        var intermediatePath: String { directory.file("intermediate.pem") }
        var leafPath: String { directory.file("leaf.pem") }
        var leafKeyPath: String { directory.file("leaf-key.pem") }
        var chainPath: String { directory.file("leaf-chain.pem") }

        init(topicListDER: [UInt8], topicsOID: String = "1.2.840.113635.100.6.3.6") throws {
            directory = try TemporaryDirectory()
            let config = """
                [req]
                distinguished_name = provider_dn
                prompt = no
                utf8 = yes
                string_mask = utf8only

                [provider_dn]
                UID = com.example.cli
                CN = Apple Push Services: com.example.cli
                O = openssl CLI (TEST ONLY)

                [root_ext]
                basicConstraints = critical,CA:TRUE
                keyUsage = critical,keyCertSign,cRLSign
                subjectKeyIdentifier = hash

                [intermediate_ext]
                basicConstraints = critical,CA:TRUE,pathlen:0
                keyUsage = critical,keyCertSign,cRLSign
                subjectKeyIdentifier = hash
                authorityKeyIdentifier = keyid:always

                [provider_ext]
                basicConstraints = critical,CA:FALSE
                keyUsage = critical,digitalSignature
                extendedKeyUsage = clientAuth
                subjectKeyIdentifier = hash
                authorityKeyIdentifier = keyid:always
                1.2.840.113635.100.6.3.1 = ASN1:NULL
                \(topicsOID) = DER:\(hex(topicListDER))

                """
            let cfg = directory.file("openssl.cnf")
            try config.write(toFile: cfg, atomically: true, encoding: .utf8)
            let newKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
            let dir = directory
            try runChecked(
                ["openssl", "req", "-x509", "-new"] + newKey + [
                    "-keyout", dir.file("root-key.pem"), "-out", dir.file("root.pem"), "-subj", "/CN=openssl CLI TEST ONLY Root",
                    "-days", "30", "-config", cfg, "-extensions", "root_ext",
                ])
            try runChecked(
                ["openssl", "req", "-new"] + newKey + [
                    "-keyout", dir.file("intermediate-key.pem"), "-out", dir.file("intermediate.csr"),
                    "-subj", "/CN=openssl CLI TEST ONLY Intermediate", "-config", cfg,
                ])
            try runChecked([
                "openssl", "x509", "-req", "-in", dir.file("intermediate.csr"), "-CA", dir.file("root.pem"),
                "-CAkey", dir.file("root-key.pem"), "-set_serial", "2", "-days", "30",
                "-extfile", cfg, "-extensions", "intermediate_ext", "-out", dir.file("intermediate.pem"),
            ])
            try runChecked(
                ["openssl", "req", "-new"] + newKey + [
                    "-keyout", dir.file("leaf-key.pem"), "-out", dir.file("leaf.csr"), "-config", cfg,
                ])
            try runChecked([
                "openssl", "x509", "-req", "-in", dir.file("leaf.csr"), "-CA", dir.file("intermediate.pem"),
                "-CAkey", dir.file("intermediate-key.pem"), "-set_serial", "3", "-days", "30",
                "-extfile", cfg, "-extensions", "provider_ext", "-out", dir.file("leaf.pem"),
            ])
            try (readText(dir.file("leaf.pem")) + readText(dir.file("intermediate.pem")))
                .write(toFile: dir.file("leaf-chain.pem"), atomically: true, encoding: .utf8)
        }
    }

    /// Apple names extension .3.4 beside .3.6 as listing the topics: a certificate with its
    /// list there gives the same topics.
    @Test func topicsListedInTheOtherTopicExtensionCount() throws {
        let topicList = tlv(
            0x30,
            tlv(0x0C, Array("com.example.cli".utf8)) + tlv(0x30, tlv(0x0C, Array("app".utf8)))
                + tlv(0x0C, Array("com.example.cli.voip".utf8)) + tlv(0x30, tlv(0x0C, Array("voip".utf8))))
        let chain = try CLIChain(topicListDER: topicList, topicsOID: "1.2.840.113635.100.6.3.4")
        defer { chain.directory.remove() }
        #expect(pairs(try info(ofPEMFile: chain.leafPath).topics) == ["com.example.cli|app", "com.example.cli.voip|voip"])
        // Something else in .3.4 is passed over, not a reason to refuse the certificate.
        let other = try CLIChain(topicListDER: tlv(0x0C, Array("x".utf8)), topicsOID: "1.2.840.113635.100.6.3.4")
        defer { other.directory.remove() }
        #expect(try info(ofPEMFile: other.leafPath).topics.isEmpty)
    }

    @Test func certificateMadeWithTheOpenSSLCLIParses() throws {
        let topicList = tlv(
            0x30,
            tlv(0x0C, Array("com.example.cli".utf8)) + tlv(0x30, tlv(0x0C, Array("app".utf8)))
                + tlv(0x0C, Array("com.example.cli.voip".utf8)) + tlv(0x30, tlv(0x0C, Array("voip".utf8))))
        let chain = try CLIChain(topicListDER: topicList)
        defer { chain.directory.remove() }
        let parsed = try info(ofPEMFile: chain.leafPath)
        #expect(parsed.subjectUID == "com.example.cli")
        #expect(parsed.commonName == "Apple Push Services: com.example.cli")
        #expect(parsed.development)
        #expect(!parsed.production)
        #expect(pairs(parsed.topics) == ["com.example.cli|app", "com.example.cli.voip|voip"])
        #expect(parsed.issuerCommonName == "openssl CLI TEST ONLY Intermediate")

        // Its validity, as the CLI prints it, is what we read.
        let enddate = try runChecked(["openssl", "x509", "-in", chain.leafPath, "-noout", "-enddate"]).out
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "MMM d HH:mm:ss yyyy zzz"
        let text = enddate.replacingOccurrences(of: "notAfter=", with: "").trimmingCharacters(in: .whitespacesAndNewlines)
            .replacingOccurrences(of: "  ", with: " ")
        #expect(parsed.notAfter == formatter.date(from: text), "\(text)")
    }

    @Test func malformedTopicListFromTheCLIThrows() throws {
        // A topic with no SEQUENCE { kind } after it.
        let chain = try CLIChain(topicListDER: tlv(0x30, tlv(0x0C, Array("com.example.cli".utf8))))
        defer { chain.directory.remove() }
        #expect {
            try info(ofPEMFile: chain.leafPath)
        } throws: { error in
            (error as? CryptoError)?.message.contains("malformed APNs topic extension") == true
        }
    }

    // MARK: Verification in a mutual-TLS handshake

    /// What the server concluded about the client after one handshake.
    private struct ServerView: Sendable {
        var info: ProviderCertificateInfo?
        var infoError: String?
        var verdicts: [String?] = []
    }

    /// Handshakes a client presenting `certificate` (nil = none) with the test server and returns
    /// the server's view: the parsed peer certificate and `verify` run once per store / path.
    /// The client trusts the system store, like a real provider talking to Apple, unless
    /// `clientTrustsServerCA`: then it verifies the server, and OpenSSL, finding the issuer of its
    /// own certificate in that store too, sends that CA along with the certificate.
    private func serverView(
        pki: TestPKI, certificate: (certificatePath: String, keyPath: String)?,
        stores: [CertificateTrustStore], caPaths: [String] = [],
        clientTrustsServerCA: Bool = false
    ) async throws -> ServerView {
        let client = try TLSContext.client(
            trustedCAPath: clientTrustsServerCA ? pki.caPath : nil,
            verifyPeer: clientTrustsServerCA, alpnProtocols: ["h2"],
            clientCertificatePath: certificate?.certificatePath,
            clientKeyPath: certificate?.keyPath)
        let view = Box(ServerView())
        let (server, clientSide) = try await handshakePair(
            server: try pki.serverContext(), client: client, serverName: "localhost",
            serverAfterHandshake: { connection in
                var result = ServerView()
                if let der = connection.peerCertificateDER {
                    do { result.info = try ProviderCertificateInfo(der: der) } catch { result.infoError = "\(error)" }
                }
                result.verdicts =
                    stores.map { connection.verifyPeerCertificate(trustStore: $0) }
                    + caPaths.map { connection.verifyPeerCertificate(trustedCAPath: $0) }
                view.value = result
            })
        #expect(server.result == .ok(0))
        #expect(clientSide.result == .ok(0))
        return view.value
    }

    @Test func mutualTLSPeerCertificateParsesAndVerifiesAgainstItsCAOnly() async throws {
        let ca = try ProviderPKI()
        let otherCA = try TestPKI()  // same subject name as `ca`, different key
        defer {
            ca.directory.remove()
            otherCA.directory.remove()
        }
        let provider = try ca.issue("provider", bundleID: "com.example.tls", development: true, production: true)
        // One bundle holding an unrelated CA first, then the right one.
        let bundlePath = ca.directory.file("bundle.pem")
        try (readText(otherCA.caPath) + readText(ca.caPath)).write(toFile: bundlePath, atomically: true, encoding: .utf8)
        let bundle = try CertificateTrustStore(pemPath: bundlePath)
        #expect(bundle.certificateCount == 2)

        let view = try await serverView(
            pki: ca.pki, certificate: provider,
            stores: [
                try CertificateTrustStore(pemPath: ca.caPath), try CertificateTrustStore(pemPath: otherCA.caPath),
                bundle,
            ],
            caPaths: [ca.caPath, otherCA.caPath, ca.directory.file("missing.pem")])
        #expect(view.infoError == nil)
        #expect(view.info == (try info(ofPEMFile: provider.certificatePath)))
        #expect(view.info?.subjectUID == "com.example.tls")
        #expect(view.info?.development == true && view.info?.production == true)
        #expect(pairs(view.info?.topics ?? []) == pairs(TestCertificates.defaultTopics(for: "com.example.tls")))

        #expect(view.verdicts.count == 6)
        guard view.verdicts.count == 6 else { return }
        #expect(view.verdicts[0] == nil)
        #expect(view.verdicts[1] == "unable to get local issuer certificate")
        #expect(view.verdicts[2] == nil)
        #expect(view.verdicts[3] == nil)
        #expect(view.verdicts[4] == "unable to get local issuer certificate")
        #expect(view.verdicts[5]?.hasPrefix("cannot load trusted CA certificates") == true, "\(String(describing: view.verdicts[5]))")

        // A client that also sends its (self-signed) CA: still fine against that CA, and refused
        // against the other one, in different words.
        let chained = try await serverView(
            pki: ca.pki, certificate: provider,
            stores: [
                try CertificateTrustStore(pemPath: ca.caPath),
                try CertificateTrustStore(pemPath: otherCA.caPath),
            ],
            clientTrustsServerCA: true)
        #expect(chained.info?.subjectUID == "com.example.tls")
        #expect(chained.verdicts == [nil, "self-signed certificate in certificate chain"])
    }

    @Test func expiredProviderCertificateIsReportedAsExpired() async throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        let expired = try ca.issue("expired", validityDays: -1)
        let store = try CertificateTrustStore(pemPath: ca.caPath)
        // The handshake itself still succeeds: the emulator decides after reading the reason.
        let view = try await serverView(pki: ca.pki, certificate: expired, stores: [store], caPaths: [ca.caPath])
        #expect(view.info?.subjectUID == "com.example.app")
        #expect(view.verdicts == ["certificate has expired", "certificate has expired"])
        #expect(store.verify(der: try der(ofPEMFile: expired.certificatePath)) == "certificate has expired")
    }

    @Test func noClientCertificateIsReported() async throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        let view = try await serverView(
            pki: ca.pki, certificate: nil, stores: [try CertificateTrustStore(pemPath: ca.caPath)],
            caPaths: [ca.caPath])
        #expect(view.info == nil)
        #expect(view.verdicts == ["no certificate", "no certificate"])
    }

    @Test func serverOnlyCertificateIsRefusedForClientAuthentication() async throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        // The test server certificate chains to the CA but its extendedKeyUsage is serverAuth only.
        let view = try await serverView(
            pki: ca.pki, certificate: (ca.pki.certificatePath, ca.pki.keyPath),
            stores: [try CertificateTrustStore(pemPath: ca.caPath)])
        #expect(view.verdicts == ["unsuitable certificate purpose"])
        #expect(view.info?.subjectUID == nil)
        #expect(view.info?.development == false && view.info?.production == false)
        #expect(view.info?.topics.isEmpty == true)
    }

    @Test func intermediateSentByTheClientCompletesTheChain() async throws {
        let topicList = tlv(0x30, tlv(0x0C, Array("com.example.cli".utf8)) + tlv(0x30, tlv(0x0C, Array("app".utf8))))
        let chain = try CLIChain(topicListDER: topicList)
        let pki = try TestPKI()
        defer {
            chain.directory.remove()
            pki.directory.remove()
        }
        let root = try CertificateTrustStore(pemPath: chain.rootPath)
        let intermediate = try CertificateTrustStore(pemPath: chain.intermediatePath)
        let leafDER = try der(ofPEMFile: chain.leafPath)
        // On its own the leaf does not reach the root, but the intermediate alone is an anchor.
        #expect(root.verify(der: leafDER) == "unable to get local issuer certificate")
        #expect(intermediate.verify(der: leafDER) == nil)

        let view = try await serverView(
            pki: pki, certificate: (chain.chainPath, chain.leafKeyPath),
            stores: [root, intermediate, try CertificateTrustStore(pemPath: pki.caPath)])
        #expect(view.info?.subjectUID == "com.example.cli")
        #expect(view.verdicts == [nil, nil, "unable to get local issuer certificate"])
    }

    @Test func trustStoreNeedsNoFileAfterLoadingAndIsSharedAcrossThreads() throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        let good = try der(ofPEMFile: try ca.issue("good").certificatePath)
        let expired = try der(ofPEMFile: try ca.issue("expired", validityDays: -1).certificatePath)
        let store = try CertificateTrustStore(pemPath: ca.caPath)
        #expect(store.certificateCount == 1)
        try FileManager.default.removeItem(atPath: ca.caPath)
        #expect(store.verify(der: good) == nil)
        @Sendable func mismatches() -> Int {
            (0..<300).filter { _ in
                store.verify(der: good) != nil || store.verify(der: expired) != "certificate has expired"
            }.count
        }
        let (first, second) = onTwoThreads(mismatches, mismatches)
        #expect(first == 0 && second == 0)
    }

    @Test func verifyingBeforeTheHandshakeSaysNoCertificate() throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        let (serverFD, clientFD) = try makeSocketPair()
        defer {
            close(serverFD)
            close(clientFD)
        }
        let connection = try TLSConnection(context: try ca.pki.serverContext(), fd: serverFD, isServer: true)
        #expect(connection.verifyPeerCertificate(trustStore: try CertificateTrustStore(pemPath: ca.caPath)) == "no certificate")
    }

    // MARK: Garbage

    @Test func garbageDERThrowsAndNeverCrashes() throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        let good = try der(ofPEMFile: try ca.issue("good").certificatePath)
        let store = try CertificateTrustStore(pemPath: ca.caPath)
        #expect(store.verify(der: good) == nil)

        var generator = SeededGenerator(state: 20_260_101)
        let random = (0..<600).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let publicKeyDER = [UInt8](try runChecked(["openssl", "pkey", "-in", ca.caKeyPath, "-pubout", "-outform", "DER"]).stdout)
        let garbage: [(String, [UInt8])] = [
            ("empty", []), ("one byte", [0x30]), ("text", Array("hello".utf8)), ("random", random),
            ("PEM text instead of DER", Array(try readText(ca.caPath).utf8)),
            ("trailing byte", good + [0x00]), ("two certificates", good + good),
            ("a public key", publicKeyDER), ("huge length", [0x30, 0x84, 0xFF, 0xFF, 0xFF, 0xFF, 0x02]),
        ]
        for (name, bytes) in garbage {
            #expect(throws: CryptoError.self, "\(name)") { try ProviderCertificateInfo(der: bytes) }
            #expect(store.verify(der: bytes) == "cannot parse certificate", "\(name)")
        }
        // Every truncation of a real certificate is refused.
        for length in 0..<good.count {
            #expect(throws: CryptoError.self, "length \(length)") { try ProviderCertificateInfo(der: Array(good[..<length])) }
        }
        // Bit flips anywhere: either an error or a value, never a crash.
        var parsedAfterFlip = 0
        for _ in 0..<3000 {
            var bytes = good
            let index = Int.random(in: 0..<bytes.count, using: &generator)
            bytes[index] ^= 1 << UInt8.random(in: 0...7, using: &generator)
            if (try? ProviderCertificateInfo(der: bytes)) != nil { parsedAfterFlip += 1 }
            _ = store.verify(der: bytes)
        }
        #expect(parsedAfterFlip < 3000)
    }

    @Test func pemAndTrustStoreInputErrors() throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        #expect(throws: CryptoError.self) { try ProviderCertificateInfo.derFromPEM("not a certificate") }
        #expect(throws: CryptoError.self) { try ProviderCertificateInfo.derFromPEM(try readText(ca.caKeyPath)) }
        #expect(
            try ProviderCertificateInfo.derFromPEM(try readText(ca.caPath))
                == [UInt8](try runChecked(["openssl", "x509", "-in", ca.caPath, "-outform", "DER"]).stdout))

        #expect(throws: CryptoError.self) { try CertificateTrustStore(pemPath: ca.directory.file("missing.pem")) }
        #expect {
            try CertificateTrustStore(pemPath: ca.caKeyPath)
        } throws: { error in
            (error as? CryptoError)?.message.contains("no PEM CERTIFICATE") == true
        }
        let corrupt = try readText(ca.caPath).replacingOccurrences(of: "M", with: "*")
        #expect(throws: CryptoError.self) { try CertificateTrustStore(pem: corrupt) }
        // A key block before the certificate is skipped.
        let mixed = try CertificateTrustStore(pem: try readText(ca.caKeyPath) + readText(ca.caPath))
        #expect(mixed.certificateCount == 1)
    }
}

// MARK: - Resumption (openssl s_client against our server)

/// A loopback TLS server whose thread serves `connections` connections in turn and records, for
/// each, whether the session was resumed and what `verifyPeerCertificate` said per trust store.
private final class VerifyingTLSServer: @unchecked Sendable {
    struct Seen: Sendable {
        let handshake: TLSIOResult
        let reused: Bool
        let subjectUID: String?
        let verdicts: [String?]
    }

    let port: UInt16
    private let listener: Int32
    private let done = DispatchSemaphore(value: 0)
    private let seen = Box<[Seen]>([])

    init(context: TLSContext, connections: Int, stores: [CertificateTrustStore]) throws {
        signal(SIGPIPE, SIG_IGN)
        (listener, port) = try loopbackListener()
        Thread { [self] in
            for _ in 0..<connections { serveOne(context, stores) }
            done.signal()
        }.start()
    }

    private func serveOne(_ context: TLSContext, _ stores: [CertificateTrustStore]) {
        let fd = accept(listener, nil, nil)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard let connection = try? TLSConnection(context: context, fd: fd, isServer: true) else { return }
        let result = connection.handshake()
        var subjectUID: String? = nil
        var verdicts: [String?] = []
        if result == .ok(0) {
            subjectUID = connection.peerCertificateDER.flatMap { try? ProviderCertificateInfo(der: $0) }?.subjectUID
            verdicts = stores.map { connection.verifyPeerCertificate(trustStore: $0) }
            // Greet and close first, so s_client (-ign_eof) reads the TLS 1.3 tickets and exits.
            _ = writeAll(connection, Array("hello\n".utf8))
            connection.shutdown()
            var buffer = [UInt8](repeating: 0, count: 1024)
            while case .ok = buffer.withUnsafeMutableBytes({ connection.read(into: $0) }) {}
        }
        seen.value.append(
            Seen(
                handshake: result, reused: connection.isSessionReused, subjectUID: subjectUID,
                verdicts: verdicts))
    }

    func finish() -> [Seen] {
        done.wait()
        close(listener)
        return seen.value
    }
}

@Suite("APNs provider certificates on resumed sessions")
struct ProviderCertificateResumptionTests {
    @Test(arguments: ["-tls1_2", "-tls1_3"])
    func resumedSessionStillHasThePeerCertificate(version: String) throws {
        let ca = try ProviderPKI()
        defer { ca.directory.remove() }
        let provider = try ca.issue("provider", bundleID: "com.example.resume")
        let store = try CertificateTrustStore(pemPath: ca.caPath)
        let server = try VerifyingTLSServer(context: try ca.pki.serverContext(), connections: 2, stores: [store])
        let session = ca.directory.file("session.pem")
        func sClient(_ extra: [String]) throws -> CommandResult {
            try run(
                [
                    "openssl", "s_client", "-connect", "127.0.0.1:\(server.port)", "-CAfile", ca.caPath,
                    "-verify_return_error", "-servername", "localhost", "-ign_eof", version,
                    "-cert", provider.certificatePath, "-key", provider.keyPath,
                ] + extra)
        }
        let first = try sClient(["-sess_out", session])
        let second = try sClient(["-sess_in", session])
        let seen = server.finish()
        #expect(first.status == 0, "\(first.err)")
        #expect(second.status == 0, "\(second.err)")
        try #require(seen.count == 2)
        #expect(!seen[0].reused)
        #expect(seen[1].reused)
        for record in seen {
            #expect(record.handshake == .ok(0))
            #expect(record.subjectUID == "com.example.resume")
            #expect(record.verdicts == [nil])
        }
    }

    /// OpenSSL keeps the peer's leaf in a session ticket but not the intermediates it sent, so
    /// on resumption only a trust store holding the intermediate itself still verifies.
    @Test(arguments: ["-tls1_2", "-tls1_3"])
    func resumedSessionLosesTheIntermediatesTheClientSent(version: String) throws {
        let topicList = tlv(0x30, tlv(0x0C, Array("com.example.cli".utf8)) + tlv(0x30, tlv(0x0C, Array("app".utf8))))
        let chain = try ProviderCertificateTests.CLIChain(topicListDER: topicList)
        let pki = try TestPKI()
        defer {
            chain.directory.remove()
            pki.directory.remove()
        }
        let root = try CertificateTrustStore(pemPath: chain.rootPath)
        let intermediate = try CertificateTrustStore(pemPath: chain.intermediatePath)
        let server = try VerifyingTLSServer(context: try pki.serverContext(), connections: 2, stores: [root, intermediate])
        let session = pki.directory.file("session.pem")
        func sClient(_ extra: [String]) throws -> CommandResult {
            try run(
                [
                    "openssl", "s_client", "-connect", "127.0.0.1:\(server.port)", "-CAfile", pki.caPath,
                    "-verify_return_error", "-servername", "localhost", "-ign_eof", version,
                    "-cert", chain.leafPath, "-key", chain.leafKeyPath, "-cert_chain", chain.intermediatePath,
                ] + extra)
        }
        let first = try sClient(["-sess_out", session])
        let second = try sClient(["-sess_in", session])
        let seen = server.finish()
        #expect(first.status == 0, "\(first.err)")
        #expect(second.status == 0, "\(second.err)")
        try #require(seen.count == 2)
        #expect(!seen[0].reused)
        #expect(seen[1].reused)
        #expect(seen.map(\.subjectUID) == ["com.example.cli", "com.example.cli"])
        #expect(seen[0].verdicts == [nil, nil])
        try #require(seen[1].verdicts.count == 2)
        let resumedAgainstRoot = try #require(seen[1].verdicts[0])
        #expect(resumedAgainstRoot.hasPrefix("unable to get local issuer certificate (resumed session"), "\(resumedAgainstRoot)")
        #expect(seen[1].verdicts[1] == nil)
    }
}
