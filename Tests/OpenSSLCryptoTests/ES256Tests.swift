import Foundation
import Testing
import OpenSSLCrypto

@Suite("ES256 signing and verification")
struct ES256Tests {
    let message = Array("eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyMzQ1NjcifQ.eyJpc3MiOiJERUY5ODc2NTQzIiwiaWF0IjoxNzAwMDAwMDAwfQ".utf8)

    @Test func rawSignatureRoundTrip() throws {
        let key = try ES256PrivateKey.generate()
        let signature = try key.sign(message)
        #expect(signature.count == 64)
        #expect(key.publicKey.verify(signature: signature, message: message))
    }

    @Test func derSignatureRoundTrip() throws {
        let key = try ES256PrivateKey.generate()
        let signature = try key.signDER(message)
        #expect(signature.first == 0x30)
        #expect((8...72).contains(signature.count))
        #expect(key.publicKey.verify(signature: signature, message: message))
    }

    @Test func rawSignaturesAreAlways64BytesAndVerify() throws {
        // r or s with leading zero bytes must still be left-padded to 32 bytes each; over a few
        // hundred signatures such short scalars occur (probability ~1/128 per signature).
        let key = try ES256PrivateKey.generate()
        for index in 0..<300 {
            let text = Array("message \(index)".utf8)
            let signature = try key.sign(text)
            #expect(signature.count == 64)
            #expect(key.publicKey.verify(signature: signature, message: text))
        }
    }

    @Test func emptyMessageCanBeSignedAndVerified() throws {
        let key = try ES256PrivateKey.generate()
        #expect(key.publicKey.verify(signature: try key.sign([]), message: []))
        #expect(key.publicKey.verify(signature: try key.signDER([]), message: []))
        #expect(!key.publicKey.verify(signature: try key.sign([]), message: [0]))
    }

    @Test func flippedBitInMessageFails() throws {
        let key = try ES256PrivateKey.generate()
        let raw = try key.sign(message)
        let der = try key.signDER(message)
        for bit in [0, 7, 100, message.count * 8 - 1] {
            var tampered = message
            tampered[bit / 8] ^= UInt8(1 << (bit % 8))
            #expect(!key.publicKey.verify(signature: raw, message: tampered))
            #expect(!key.publicKey.verify(signature: der, message: tampered))
        }
    }

    @Test func flippedBitInSignatureFails() throws {
        let key = try ES256PrivateKey.generate()
        let raw = try key.sign(message)
        for bit in stride(from: 0, to: raw.count * 8, by: 13) {
            var tampered = raw
            tampered[bit / 8] ^= UInt8(1 << (bit % 8))
            #expect(!key.publicKey.verify(signature: tampered, message: message), "raw bit \(bit)")
        }
        let der = try key.signDER(message)
        for bit in stride(from: 0, to: der.count * 8, by: 11) {
            var tampered = der
            tampered[bit / 8] ^= UInt8(1 << (bit % 8))
            #expect(!key.publicKey.verify(signature: tampered, message: message), "DER bit \(bit)")
        }
    }

    @Test func signatureFromAnotherKeyFails() throws {
        let key = try ES256PrivateKey.generate()
        let other = try ES256PrivateKey.generate()
        #expect(!other.publicKey.verify(signature: try key.sign(message), message: message))
        #expect(!other.publicKey.verify(signature: try key.signDER(message), message: message))
    }

    @Test func malformedSignaturesAreRejected() throws {
        let key = try ES256PrivateKey.generate()
        let raw = try key.sign(message)
        let der = try key.signDER(message)
        var random = SystemRandomNumberGenerator()
        let garbage64 = (0..<64).map { _ in UInt8.random(in: 0...255, using: &random) }
        let candidates: [(String, [UInt8])] = [
            ("empty", []),
            ("one byte", [0x30]),
            ("truncated raw", Array(raw.dropLast())),
            ("raw + 1 byte", raw + [0]),
            ("raw, 65 bytes with leading zero", [0] + raw),
            ("half raw", Array(raw.prefix(32))),
            ("all zero raw", [UInt8](repeating: 0, count: 64)),
            ("all 0xff raw", [UInt8](repeating: 0xff, count: 64)),
            ("random 64 bytes", garbage64),
            ("random 64 bytes starting like DER", [0x30, 0x3e] + garbage64.prefix(62)),
            ("truncated DER", Array(der.dropLast())),
            ("DER + trailing byte", der + [0]),
            ("DER with wrong outer length", [0x30, der[1] &+ 1] + der.dropFirst(2)),
            ("DER r=0 s=0", [0x30, 0x06, 0x02, 0x01, 0x00, 0x02, 0x01, 0x00]),
            ("huge", [UInt8](repeating: 0x30, count: 4096)),
        ]
        for (name, signature) in candidates {
            #expect(!key.publicKey.verify(signature: signature, message: message), "\(name)")
        }
        // The genuine ones still pass afterwards (no sticky error state).
        #expect(key.publicKey.verify(signature: raw, message: message))
        #expect(key.publicKey.verify(signature: der, message: message))
    }

    @Test func nonCanonicalDERIsRejected() throws {
        let key = try ES256PrivateKey.generate()
        let der = try key.signDER(message)
        // Same r and s, but the outer SEQUENCE length written in long form (0x81 nn): BER, not DER.
        let longForm = [0x30, 0x81, der[1]] + der.dropFirst(2)
        #expect(!key.publicKey.verify(signature: Array(longForm), message: message))
    }

    @Test func pkcs8PEMRoundTrip() throws {
        let key = try ES256PrivateKey.generate()
        let pem = key.pkcs8PEM
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let reloaded = try ES256PrivateKey(pem: pem)
        #expect(reloaded.publicKey.pem == key.publicKey.pem)
        #expect(key.publicKey.verify(signature: try reloaded.sign(message), message: message))
    }

    @Test func publicKeyPEMRoundTrip() throws {
        let key = try ES256PrivateKey.generate()
        let pem = key.publicKey.pem
        #expect(pem.hasPrefix("-----BEGIN PUBLIC KEY-----"))
        #expect(!pem.contains("PRIVATE"))
        let loaded = try ES256PublicKey(pem: pem)
        #expect(loaded.pem == pem)
        #expect(loaded.verify(signature: try key.sign(message), message: message))
    }

    @Test func pemPrivateOrPublicAcceptsBoth() throws {
        let key = try ES256PrivateKey.generate()
        let fromPrivate = try ES256PublicKey(pemPrivateOrPublic: key.pkcs8PEM)
        let fromPublic = try ES256PublicKey(pemPrivateOrPublic: key.publicKey.pem)
        #expect(fromPrivate.pem == key.publicKey.pem)
        #expect(fromPublic.pem == key.publicKey.pem)
        let signature = try key.sign(message)
        #expect(fromPrivate.verify(signature: signature, message: message))
        #expect(fromPublic.verify(signature: signature, message: message))
    }

    @Test func pemWithCRLFLineEndingsLoads() throws {
        let key = try ES256PrivateKey.generate()
        let crlf = key.pkcs8PEM.replacingOccurrences(of: "\n", with: "\r\n")
        let loaded = try ES256PublicKey(pemPrivateOrPublic: crlf)
        #expect(loaded.pem == key.publicKey.pem)
    }

    @Test(arguments: [
        "",
        "not a key",
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        "-----BEGIN PRIVATE KEY-----\n!!!! not base64 !!!!\n-----END PRIVATE KEY-----\n",
        "-----BEGIN EC PRIVATE KEY-----\nMAA=\n-----END EC PRIVATE KEY-----\n",
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n",
    ])
    func garbagePEMThrows(pem: String) {
        #expect(throws: CryptoError.self) { try ES256PrivateKey(pem: pem) }
        #expect(throws: CryptoError.self) { try ES256PublicKey(pem: pem) }
        #expect(throws: CryptoError.self) { try ES256PublicKey(pemPrivateOrPublic: pem) }
    }

    @Test func publicKeyPEMIsNotAPrivateKey() throws {
        let key = try ES256PrivateKey.generate()
        #expect(throws: CryptoError.self) { try ES256PrivateKey(pem: key.publicKey.pem) }
        #expect(throws: CryptoError.self) { try ES256PublicKey(pem: key.pkcs8PEM) }
    }

    @Test func errorMessagesCarryOpenSSLDetail() throws {
        do {
            _ = try ES256PrivateKey(pem: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
            Issue.record("expected an error")
        } catch let error as CryptoError {
            #expect(error.message.contains("could not parse private key PEM"))
            #expect(error.description.contains(error.message))
        }
    }

    @Test func concurrentVerificationIsCorrect() throws {
        let key = try ES256PrivateKey.generate()
        let publicKey = key.publicKey
        let good = try key.sign(message)
        let goodDER = try key.signDER(message)
        var tampered = good
        tampered[10] ^= 0x01
        let bad = tampered
        let failures = Counter()
        DispatchQueue.concurrentPerform(iterations: 8) { worker in
            for round in 0..<150 {
                let expectValid = (round + worker) % 3 != 0
                let signature = expectValid ? (round % 2 == 0 ? good : goodDER) : bad
                if publicKey.verify(signature: signature, message: message) != expectValid {
                    failures.increment()
                }
            }
        }
        #expect(failures.value == 0)
    }
}

/// A tiny thread-safe counter for the concurrency test.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func increment() { lock.lock(); count += 1; lock.unlock() }
    var value: Int { lock.lock(); defer { lock.unlock() }; return count }
}
