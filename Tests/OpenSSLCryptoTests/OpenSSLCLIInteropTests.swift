import Foundation
import Testing
import TestSupport
import OpenSSLCrypto

/// Keys and signatures exchanged with the `openssl` command-line tool.
@Suite("Interop with the openssl CLI")
struct OpenSSLCLIInteropTests {
    let message = Array("header.payload (as signed by a provider)".utf8)

    @Test func cliGeneratedPKCS8KeyLoadsAndMatchesCLIPublicKey() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // The same shape as Apple's AuthKey_XXXXXXXXXX.p8: unencrypted PKCS#8 PEM, P-256.
        try runChecked([
            "openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-out", dir.file("AuthKey.p8"),
        ])
        let pem = try readText(dir.file("AuthKey.p8"))
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let key = try ES256PrivateKey(pem: pem)

        let cliPublic = try runChecked(["openssl", "pkey", "-in", dir.file("AuthKey.p8"), "-pubout"]).out
        let publicKey = try ES256PublicKey(pem: cliPublic)
        #expect(publicKey.pem == key.publicKey.pem)
        #expect(publicKey.verify(signature: try key.sign(message), message: message))
        #expect(try ES256PublicKey(pemPrivateOrPublic: pem).pem == cliPublic)
    }

    @Test func cliDERSignatureVerifies() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try runChecked([
            "openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-out", dir.file("key.pem"),
        ])
        try Data(message).write(to: URL(fileURLWithPath: dir.file("message")))
        try runChecked([
            "openssl", "dgst", "-sha256", "-sign", dir.file("key.pem"),
            "-out", dir.file("signature.der"), dir.file("message"),
        ])
        let signature = try readBytes(dir.file("signature.der"))
        let publicKey = try ES256PublicKey(pemPrivateOrPublic: try readText(dir.file("key.pem")))
        #expect(publicKey.verify(signature: signature, message: message))
        #expect(!publicKey.verify(signature: signature, message: message + [0x21]))
    }

    @Test func ourDERSignatureVerifiesWithCLI() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let key = try ES256PrivateKey.generate()
        try key.publicKey.pem.write(toFile: dir.file("public.pem"), atomically: true, encoding: .utf8)
        try Data(message).write(to: URL(fileURLWithPath: dir.file("message")))
        try Data(try key.signDER(message)).write(to: URL(fileURLWithPath: dir.file("signature.der")))
        let result = try runChecked([
            "openssl", "dgst", "-sha256", "-verify", dir.file("public.pem"),
            "-signature", dir.file("signature.der"), dir.file("message"),
        ])
        #expect(result.out.contains("Verified OK"))
    }

    @Test func sec1ECPrivateKeyLoads() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // Plain SEC1 ("EC PRIVATE KEY"), and the variant preceded by an "EC PARAMETERS" block.
        try runChecked(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", dir.file("sec1.pem")])
        try runChecked(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-out", dir.file("sec1-params.pem")])
        for name in ["sec1.pem", "sec1-params.pem"] {
            let pem = try readText(dir.file(name))
            #expect(pem.contains("-----BEGIN EC PRIVATE KEY-----"))
            let key = try ES256PrivateKey(pem: pem)
            let cliPublic = try runChecked(["openssl", "pkey", "-in", dir.file(name), "-pubout"]).out
            #expect(key.publicKey.pem == cliPublic, "\(name)")
            #expect(try ES256PublicKey(pemPrivateOrPublic: pem).pem == cliPublic, "\(name)")
        }
    }

    @Test(arguments: [
        ("RSA", ["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"]),
        ("P-384", ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"]),
        ("Ed25519", ["openssl", "genpkey", "-algorithm", "ED25519"]),
    ])
    func wrongKeyTypesAreRejectedClearly(name: String, command: [String]) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try runChecked(command + ["-out", dir.file("key.pem")])
        let privatePEM = try readText(dir.file("key.pem"))
        let publicPEM = try runChecked(["openssl", "pkey", "-in", dir.file("key.pem"), "-pubout"]).out

        func expectRejected(_ load: () throws -> Void) {
            do {
                try load()
                Issue.record("\(name) key was accepted")
            } catch let error as CryptoError {
                #expect(error.message.contains("key is not an EC P-256 key"), "\(name): \(error.message)")
            } catch {
                Issue.record("unexpected error type \(error)")
            }
        }
        expectRejected { _ = try ES256PrivateKey(pem: privatePEM) }
        expectRejected { _ = try ES256PublicKey(pem: publicPEM) }
        expectRejected { _ = try ES256PublicKey(pemPrivateOrPublic: privatePEM) }
        expectRejected { _ = try ES256PublicKey(pemPrivateOrPublic: publicPEM) }
    }

    @Test func p384ErrorNamesTheCurve() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try runChecked([
            "openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384",
            "-out", dir.file("key.pem"),
        ])
        #expect {
            try ES256PrivateKey(pem: try readText(dir.file("key.pem")))
        } throws: { error in
            (error as? CryptoError)?.message.contains("secp384r1") == true
        }
    }

    @Test func encryptedKeyFailsWithoutPrompting() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try runChecked([
            "openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-aes256", "-pass", "pass:secret", "-out", dir.file("key.pem"),
        ])
        let pem = try readText(dir.file("key.pem"))
        #expect(pem.contains("ENCRYPTED PRIVATE KEY"))
        #expect(throws: CryptoError.self) { try ES256PrivateKey(pem: pem) }
        #expect(throws: CryptoError.self) { try ES256PublicKey(pemPrivateOrPublic: pem) }
    }
}
