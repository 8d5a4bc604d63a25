import Foundation
import Testing
import TestSupport
import OpenSSLCrypto

/// Checks a directory holding ca.pem, ca-key.pem, server.pem, server-key.pem with the openssl CLI.
func checkTestPKI(in directory: String) throws {
    let fm = FileManager.default
    for name in ["ca.pem", "ca-key.pem", "server.pem", "server-key.pem"] {
        #expect(fm.fileExists(atPath: directory + "/" + name), "\(name) missing")
    }
    for name in ["ca-key.pem", "server-key.pem"] {
        let mode = (try fm.attributesOfItem(atPath: directory + "/" + name)[.posixPermissions] as? NSNumber)?.intValue
        #expect(mode == 0o600, "\(name) mode \(String(mode ?? -1, radix: 8))")
    }
    let ca = directory + "/ca.pem"
    let leaf = directory + "/server.pem"

    let verify = try run(["openssl", "verify", "-CAfile", ca, leaf])
    #expect(verify.status == 0, "\(verify.err)")
    #expect(verify.out.contains("server.pem: OK"))
    // The TLS server purpose check exercises the EKU and key usage.
    #expect(try run(["openssl", "verify", "-purpose", "sslserver", "-CAfile", ca, leaf]).status == 0)

    let sans = try runChecked(["openssl", "x509", "-in", leaf, "-noout", "-ext", "subjectAltName"]).out
    for name in [
        "DNS:localhost", "IP Address:127.0.0.1", "IP Address:0:0:0:0:0:0:0:1", "DNS:api.push.apple.com",
        "DNS:api.sandbox.push.apple.com", "DNS:api.development.push.apple.com",
        "DNS:api-manage-broadcast.push.apple.com", "DNS:api-manage-broadcast.sandbox.push.apple.com",
        "DNS:api-broadcast.push.apple.com", "DNS:api-broadcast.sandbox.push.apple.com",
    ] {
        #expect(sans.contains(name), "SAN \(name) missing from \(sans)")
    }

    let leafText = try runChecked(["openssl", "x509", "-in", leaf, "-noout", "-text"]).out
    #expect(leafText.contains("CA:FALSE"))
    #expect(leafText.contains("TLS Web Server Authentication"))
    #expect(leafText.contains("ecdsa-with-SHA256"))
    #expect(leafText.contains("NIST CURVE: P-256"))
    let leafSubject = try runChecked(["openssl", "x509", "-in", leaf, "-noout", "-subject"]).out
    #expect(leafSubject.contains("TEST ONLY"))

    let caText = try runChecked(["openssl", "x509", "-in", ca, "-noout", "-text"]).out
    #expect(caText.contains("CA:TRUE"))
    #expect(caText.contains("Certificate Sign"))
    #expect(caText.contains("NIST CURVE: P-256"))
    #expect(try runChecked(["openssl", "x509", "-in", ca, "-noout", "-subject"]).out.contains("TEST ONLY CA"))

    // Validity: leaf 825 days, CA 10 years (checked from both sides with -checkend).
    let day = 86_400
    #expect(try run(["openssl", "x509", "-in", leaf, "-noout", "-checkend", "\(824 * day)"]).status == 0)
    #expect(try run(["openssl", "x509", "-in", leaf, "-noout", "-checkend", "\(826 * day)"]).status != 0)
    #expect(try run(["openssl", "x509", "-in", ca, "-noout", "-checkend", "\(3640 * day)"]).status == 0)
    #expect(try run(["openssl", "x509", "-in", ca, "-noout", "-checkend", "\(3660 * day)"]).status != 0)

    // Both keys are P-256 and the server key matches the leaf.
    _ = try ES256PrivateKey(pem: try readText(directory + "/ca-key.pem"))
    let serverKey = try ES256PrivateKey(pem: try readText(directory + "/server-key.pem"))
    let leafPublic = try runChecked(["openssl", "x509", "-in", leaf, "-noout", "-pubkey"]).out
    #expect(serverKey.publicKey.pem == leafPublic)
}

@Suite("Test certificates")
struct TestCertificatesTests {
    @Test func generatedPKIIsValid() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let target = dir.file("nested/certs")  // must be created
        let paths = try TestCertificates.generate(into: target)
        #expect(paths.caPath == target + "/ca.pem")
        #expect(paths.certificatePath == target + "/server.pem")
        #expect(paths.keyPath == target + "/server-key.pem")
        try checkTestPKI(in: target)
    }

    @Test func regeneratingOverwritesAndTightensKeyModes() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let first = try TestCertificates.generate(into: dir.path)
        let firstCA = try readText(first.caPath)
        chmod(first.keyPath, 0o644)
        let second = try TestCertificates.generate(into: dir.path)
        #expect(try readText(second.caPath) != firstCA)
        try checkTestPKI(in: dir.path)
    }

    @Test func genCertsScriptOutputIsValid() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let target = dir.file("out")
        let result = try runChecked(["bash", PackageRoot.path + "/scripts/gen-certs.sh", target])
        #expect(result.out.contains("server.pem"))
        #expect((result.out + result.err).contains("TEST ONLY"))
        try checkTestPKI(in: target)

        // And the result works as a TLS server identity.
        let client = try TLSContext.client(trustedCAPath: target + "/ca.pem", verifyPeer: true, alpnProtocols: ["h2"])
        let server = try TLSContext.server(
            certificateChainPath: target + "/server.pem",
            privateKeyPath: target + "/server-key.pem")
        let (serverSide, clientSide) = try await handshakePair(
            server: server, client: client,
            serverName: "api.sandbox.push.apple.com")
        #expect(clientSide.result == .ok(0))
        #expect(serverSide.alpn == "h2")
    }

    @Test func genCertsScriptDefaultsToCertsDirectory() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try runChecked(["bash", PackageRoot.path + "/scripts/gen-certs.sh"], workingDirectory: dir.path)
        try checkTestPKI(in: dir.file("certs"))
    }
}
