import APNsCore
import Foundation
import HTTP2
import OpenSSLCrypto
import ProviderClient
import Testing
import TestSupport

/// Certificate-based (mTLS) provider connections over the wire (docs/apns-behaviour.md,
/// "Certificate connections").
@Suite("Certificate-based provider connections")
struct CertificateTests {
    /// A provider certificate for com.example.app issued by the emulator's own test CA.
    func certificate(
        _ emulator: EmulatorProcess, development: Bool = true, production: Bool = true,
        topics: [(topic: String, kind: String)]? = nil, days: Int = 30, name: String = "provider"
    )
        throws -> (cert: String, key: String)
    {
        let made = try TestCertificates.generateProviderCertificate(
            into: emulator.directory, name: name, caPath: emulator.caPath, caKeyPath: emulator.directory + "/certs/ca-key.pem",
            bundleID: EmulatorProcess.bundleID, development: development, production: production, topics: topics,
            validityDays: days)
        return (made.certificatePath, made.keyPath)
    }

    func connect(
        _ emulator: EmulatorProcess, _ credential: (cert: String, key: String), listener: String = "sandbox"
    ) throws
        -> HTTP2ClientConnection
    {
        var options = HTTP2ClientConnection.Options(address: try emulator.address(listener))
        options.caPath = emulator.caPath
        options.clientCertificatePath = credential.cert
        options.clientKeyPath = credential.key
        return try HTTP2ClientConnection(options)
    }

    func push(_ token: String, topic: String? = EmulatorProcess.bundleID, pushType: String? = nil) -> APNsPush {
        var push = APNsPush(token: token, topic: topic, payload: Array(#"{"aps":{"alert":"cert"}}"#.utf8), providerToken: nil)
        push.pushType = pushType
        return push
    }

    @Test func aValidCertificateNeedsNoProviderToken() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let voip = try emulator.createDevice(kind: "voip")
        let connection = try connect(emulator, try certificate(emulator))
        // No one-stream start on certificate connections: the first SETTINGS frame says 1000.
        try connection.pump(timeoutMilliseconds: 2000) { connection.session.remoteMaxConcurrentStreams == 1000 }
        let first = try #require(connection.session.receivedSettings.first { !$0.isAck })
        #expect(first.value(for: HTTP2Setting.maxConcurrentStreams) == 1000, "\(first)")
        let ok = APNsResult(try connection.send(push(device.token).request))
        #expect(ok.status == 200)
        let record = try emulator.admin("GET", "/api/v1/notifications/\(ok.apnsID!)")
        #expect(record.json["certificate"]?.stringValue == "Apple Push Services: \(EmulatorProcess.bundleID)")
        #expect(record.json["jwt"] == .null)
        // The certificate's VoIP topic works; the topic is required with a multi-topic certificate.
        #expect(APNsResult(try connection.send(push(voip.token, topic: EmulatorProcess.bundleID + ".voip").request)).status == 200)
        #expect(APNsResult(try connection.send(push(device.token, topic: nil).request)).reason == "MissingTopic")
        #expect(APNsResult(try connection.send(push(device.token, topic: "com.other.app").request)).reason == "TopicDisallowed")
        #expect(
            APNsResult(
                try connection.send(
                    push(
                        device.token, topic: EmulatorProcess.bundleID + ".location-query",
                        pushType: "location"
                    ).request)
            ).reason == "InvalidPushType")
    }

    /// Apple presents an RSA certificate; a TLS 1.2 client limited to RSA cipher suites must
    /// connect here too (and one that can use ECDSA gets the EC certificate).
    @Test(arguments: [("ECDHE-RSA-AES128-GCM-SHA256", "2048 bit"), ("ECDHE-ECDSA-AES128-GCM-SHA256", "256 bit")])
    func tls12ClientsOfEitherKeyTypeConnect(cipher: String, keySize: String) throws {
        let emulator = try EmulatorProcess()
        let address = try emulator.address("sandbox")
        let result = try run(
            "/usr/bin/openssl",
            [
                "s_client", "-connect", "\(address.host):\(address.port)", "-tls1_2", "-cipher", cipher, "-CAfile", emulator.caPath,
                "-servername", "api.sandbox.push.apple.com", "-verify_return_error",
            ])
        #expect(result.out.contains("Cipher is \(cipher)"), "\(result.out.suffix(600)) \(result.err.suffix(600))")
        #expect(result.out.contains("Server public key is \(keySize)"))
        #expect(result.out.contains("Verify return code: 0 (ok)"))
    }

    @Test func aSingleTopicCertificateDefaultsTheTopic() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try connect(emulator, try certificate(emulator, topics: []))
        #expect(APNsResult(try connection.send(push(device.token, topic: nil).request)).status == 200)
    }

    @Test func aCertificateForTheOtherEnvironmentGetsGoAwayBadCertificateEnvironment() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try connect(emulator, try certificate(emulator, development: false, production: true))
        _ = try? connection.send(push(device.token).request, timeoutMilliseconds: 2000)
        try connection.pump(timeoutMilliseconds: 2000) { connection.session.goAway != nil }
        let goAway = try #require(connection.session.goAway)
        #expect(goAway.errorCode == 0)
        #expect(goAway.lastStreamID == 0)
        #expect(String(decoding: goAway.debugData, as: UTF8.self) == #"{"reason":"BadCertificateEnvironment"}"#)
        // No request was read, so nothing is journaled: the counter says why it went.
        #expect(
            try ConnectionLimitTests.metric(emulator, #"apns_emulator_connections_refused_total{kind="certificate_environment"}"#) == 1)
        // The same certificate is fine on the production listener.
        let production = try emulator.createDevice(environment: "production")
        let prod = try connect(
            emulator, try certificate(emulator, development: false, production: true, name: "prod"),
            listener: "production")
        #expect(APNsResult(try prod.send(push(production.token).request)).status == 200)
    }

    /// On a channel-management listener the log names the management host to use instead.
    @Test func theRefusalOnAChannelListenerNamesTheChannelHost() throws {
        let emulator = try EmulatorProcess()
        let connection = try connect(
            emulator, try certificate(emulator, development: false, production: true), listener: "channelSandbox")
        _ = try? connection.send(ClientRequest(method: "GET", path: "/1/apps/\(EmulatorProcess.bundleID)/all-channels"), timeoutMilliseconds: 2000)
        try connection.pump(timeoutMilliseconds: 2000) { connection.session.goAway != nil }
        #expect(String(decoding: try #require(connection.session.goAway).debugData, as: UTF8.self) == #"{"reason":"BadCertificateEnvironment"}"#)
        let deadline = Date().addingTimeInterval(5)
        while !emulator.stderr.contains("BadCertificateEnvironment"), Date() < deadline { usleep(20_000) }
        #expect(
            emulator.stderr.contains("Connect to the production (api-manage-broadcast.push.apple.com, --channel-production-listen) host"),
            "\(emulator.stderr.suffix(800))")
    }

    @Test func untrustedAndExpiredCertificatesAreBadCertificate() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let expired = try connect(emulator, try certificate(emulator, days: -1))
        let result = APNsResult(try expired.send(push(device.token).request))
        #expect(result.status == 403)
        #expect(result.reason == "BadCertificate")
        #expect(try emulator.admin("GET", "/api/v1/notifications/\(result.apnsID!)").json["explanation"]?.stringValue?.contains("expired") == true)

        // A certificate from a CA the emulator does not trust.
        let other = emulator.directory + "/other-ca"
        let otherCA = try TestCertificates.generate(into: other)
        let stranger = try TestCertificates.generateProviderCertificate(
            into: other, name: "stranger", caPath: otherCA.caPath, caKeyPath: other + "/ca-key.pem",
            bundleID: EmulatorProcess.bundleID, development: true, production: true)
        let connection = try connect(emulator, (stranger.certificatePath, stranger.keyPath))
        #expect(APNsResult(try connection.send(push(device.token).request)).reason == "BadCertificate")
    }

    @Test func sendCommandAndCertsCommandWorkTogether() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let sandboxDevice = try emulator.createDevice()
        let productionDevice = try emulator.createDevice(environment: "production")
        // One certificate per environment: the second must not overwrite the first.
        for environment in ["sandbox", "production"] {
            let made = try run(
                EmulatorProcess.binary,
                [
                    "certs", "--dir", emulator.directory + "/certs", "--provider",
                    EmulatorProcess.bundleID, "--environment", environment,
                ])
            #expect(made.status == 0, "\(made.err)")
            #expect(made.out.contains("provider-\(EmulatorProcess.bundleID)-\(environment).pem"), "\(made.out)")
        }
        for (environment, device, listener) in [("sandbox", sandboxDevice, "sandbox"), ("production", productionDevice, "production")] {
            let cert = emulator.directory + "/certs/provider-\(EmulatorProcess.bundleID)-\(environment).pem"
            let key = emulator.directory + "/certs/provider-\(EmulatorProcess.bundleID)-\(environment)-key.pem"
            let sent = try run(
                EmulatorProcess.binary,
                [
                    "send", "--host", try emulator.address(listener).description, "--ca", emulator.caPath,
                    "--cert", cert, "--cert-key", key, "--topic", EmulatorProcess.bundleID,
                    "--token", device.token,
                ])
            #expect(sent.status == 0, "\(environment): \(sent.out) \(sent.err)")
            #expect(sent.out.contains("status: 200"))
        }
        // A sandbox-only certificate on the production listener is refused as Apple does.
        let wrong = try run(
            EmulatorProcess.binary,
            [
                "send", "--host", try emulator.address("production").description, "--ca", emulator.caPath,
                "--cert", emulator.directory + "/certs/provider-\(EmulatorProcess.bundleID)-sandbox.pem",
                "--cert-key", emulator.directory + "/certs/provider-\(EmulatorProcess.bundleID)-sandbox-key.pem",
                "--topic", EmulatorProcess.bundleID, "--token", productionDevice.token,
            ])
        #expect(wrong.status != 0)
        #expect((wrong.out + wrong.err).contains("BadCertificateEnvironment"), "\(wrong.out) \(wrong.err)")

        // An RSA-2048 provider certificate, as Apple issues, works the same way.
        let rsa = try run(
            EmulatorProcess.binary,
            ["certs", "--dir", emulator.directory + "/certs", "--provider", EmulatorProcess.bundleID, "--key-type", "rsa"])
        #expect(rsa.status == 0, "\(rsa.err)")
        let rsaCert = emulator.directory + "/certs/provider-\(EmulatorProcess.bundleID).pem"
        let text = try run("/usr/bin/openssl", ["x509", "-in", rsaCert, "-noout", "-text"])
        #expect(text.out.contains("rsaEncryption") && text.out.contains("2048 bit"), "\(text.out.prefix(600))")
        let sentRSA = try run(
            EmulatorProcess.binary,
            [
                "send", "--host", try emulator.address("sandbox").description, "--ca", emulator.caPath, "--cert", rsaCert,
                "--cert-key", emulator.directory + "/certs/provider-\(EmulatorProcess.bundleID)-key.pem", "--topic",
                EmulatorProcess.bundleID, "--token", sandboxDevice.token,
            ])
        #expect(sentRSA.out.contains("status: 200"), "\(sentRSA.out) \(sentRSA.err)")
        // A single-topic certificate, as many in use are: its topic is the default one.
        let single = try run(
            EmulatorProcess.binary,
            ["certs", "--dir", emulator.directory + "/certs", "--provider", EmulatorProcess.bundleID, "--single-topic"])
        #expect(single.status == 0 && single.out.contains("the topic \(EmulatorProcess.bundleID) alone"), "\(single.out) \(single.err)")
        // Named apart: the universal (RSA) certificate is still there to compare.
        let singlePath = emulator.directory + "/certs/provider-\(EmulatorProcess.bundleID)-single-topic.pem"
        #expect(single.out.contains(singlePath), "\(single.out)")
        #expect(try run("/usr/bin/openssl", ["x509", "-in", rsaCert, "-noout", "-text"]).out.contains("rsaEncryption"))
        let singleConnection = try connect(
            emulator, (singlePath, emulator.directory + "/certs/provider-\(EmulatorProcess.bundleID)-single-topic-key.pem"))
        #expect(APNsResult(try singleConnection.send(push(sandboxDevice.token, topic: nil).request)).status == 200)
        // `send` over it without --topic, as such libraries send (it asked for --topic).
        let sentWithoutTopic = try run(
            EmulatorProcess.binary,
            [
                "send", "--host", try emulator.address("sandbox").description, "--ca", emulator.caPath, "--cert", singlePath,
                "--cert-key", emulator.directory + "/certs/provider-\(EmulatorProcess.bundleID)-single-topic-key.pem", "--token",
                sandboxDevice.token,
            ])
        #expect(sentWithoutTopic.status == 0 && sentWithoutTopic.out.contains("status: 200"), "\(sentWithoutTopic.out) \(sentWithoutTopic.err)")
        let tokenWithoutTopic = try run(
            EmulatorProcess.binary,
            ["send", "--host", try emulator.address("sandbox").description, "--key", "T:K:/nonexistent", "--token", sandboxDevice.token])
        #expect(tokenWithoutTopic.status == 2 && tokenWithoutTopic.err.contains("send needs --topic BUNDLEID"), "\(tokenWithoutTopic.err)")
        let voipRefused = APNsResult(try singleConnection.send(push(sandboxDevice.token, topic: EmulatorProcess.bundleID + ".voip").request))
        #expect(voipRefused.reason == "TopicDisallowed")
        // An MDM topic is longer than a common name may be: the certificate is still issued.
        let mdmTopic = "com.apple.mgmt.External.12345678-1234-1234-1234-123456789abc"
        let mdm = try run(EmulatorProcess.binary, ["certs", "--dir", emulator.directory + "/certs", "--provider", mdmTopic, "--single-topic"])
        #expect(mdm.status == 0, "\(mdm.err)")
        let mdmSubject = try run(
            "/usr/bin/openssl", ["x509", "-in", emulator.directory + "/certs/provider-\(mdmTopic)-single-topic.pem", "-noout", "-subject"])
        #expect(mdmSubject.out.contains("UID = \(mdmTopic)"), "\(mdmSubject.out)")
        let noCA = try run(EmulatorProcess.binary, ["certs", "--dir", emulator.directory + "/nothing-here", "--provider", EmulatorProcess.bundleID])
        #expect(noCA.status == 2 && noCA.err.contains("no CA in \(emulator.directory)/nothing-here"), "\(noCA.err)")
        let singleWithoutProvider = try run(EmulatorProcess.binary, ["certs", "--dir", emulator.directory + "/certs", "--single-topic"])
        #expect(singleWithoutProvider.status == 2 && singleWithoutProvider.err.contains("--single-topic goes with --provider"))
        let badType = try run(EmulatorProcess.binary, ["certs", "--dir", emulator.directory + "/certs", "--provider", "x.y", "--key-type", "dsa"])
        #expect(badType.status == 2 && badType.err.contains("--key-type must be ec or rsa"))
        let badBundle = try run(EmulatorProcess.binary, ["certs", "--dir", emulator.directory + "/certs", "--provider", "bad bundle"])
        #expect(badBundle.status == 2 && badBundle.err.contains("'bad bundle' is not a valid bundle id"), "\(badBundle.err)")
        #expect(!FileManager.default.fileExists(atPath: emulator.directory + "/certs/provider-bad bundle.pem"))
        let underAFile = try run(EmulatorProcess.binary, ["certs", "--dir", emulator.directory + "/certs/ca.pem/sub"])
        #expect(underAFile.status == 2 && underAFile.err.contains("ca.pem is a file, not a directory"), "\(underAFile.err)")
    }
}
