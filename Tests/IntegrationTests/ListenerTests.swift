import APNsCore
import Foundation
import Networking
import OpenSSLCrypto
import ProviderClient
import Synchronization
import Testing
import TestSupport

/// `--listen`: listeners that behave like Apple's hosts, for providers that only know
/// Apple's names and ports, and the errors a user meets while setting them up.
@Suite("Apple-style listeners")
struct ListenerTests {
    func connect(_ address: HostPort, _ emulator: EmulatorProcess, serverName: String?) throws -> HTTP2ClientConnection {
        var options = HTTP2ClientConnection.Options(address: address)
        options.caPath = emulator.caPath
        options.serverName = serverName
        return try HTTP2ClientConnection(options)
    }

    @Test func oneListenerServesBothEnvironmentsByHostName() throws {
        let emulator = try EmulatorProcess(["--listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"])
        let listeners = try (emulator.ready["listen"]?.arrayValue ?? []).map { try HostPort(parsing: $0.stringValue ?? "") }
        try #require(listeners.count == 2, "ready file: \(emulator.ready)")
        #expect(listeners[0].port != listeners[1].port)
        let sandbox = try emulator.createDevice(environment: "sandbox")
        let production = try emulator.createDevice(environment: "production")
        for address in listeners {
            let asProduction = try connect(address, emulator, serverName: "api.push.apple.com")
            let ok = try asProduction.send(try emulator.push(production.token).request)
            #expect(APNsResult(ok).status == 200)
            #expect(APNsResult(ok).uniqueID == nil, "production answers carry no apns-unique-id")
            #expect(APNsResult(try asProduction.send(try emulator.push(sandbox.token).request)).reason == "BadDeviceToken")

            for name in ["api.sandbox.push.apple.com", "api.development.push.apple.com"] {
                let asSandbox = try connect(address, emulator, serverName: name)
                let answer = try asSandbox.send(try emulator.push(sandbox.token).request)
                #expect(APNsResult(answer).status == 200, "\(name)")
                #expect(APNsResult(answer).uniqueID != nil, "sandbox answers carry apns-unique-id")
            }
            // Neither name: the listener falls back to sandbox.
            let byAddress = try connect(address, emulator, serverName: nil)
            #expect(APNsResult(try byAddress.send(try emulator.push(sandbox.token).request)).status == 200)
        }
        #expect(emulator.stdout.contains("Apple-style"), "the banner lists the --listen addresses")
    }

    @Test func listenersThatWouldShareAPortAreNamedAtStart() throws {
        let port = UInt16(try freePort())
        let result = try run(
            EmulatorProcess.binary,
            [
                "serve", "--channel-sandbox-listen", "off", "--channel-production-listen", "off", "--listen", "127.0.0.1:\(port)", "--sandbox-listen",
                "127.0.0.1:\(port)",
                "--admin-listen", "off", "--device-listen", "off", "--production-listen", "off",
            ])
        #expect(result.status == 2)
        #expect(result.err.contains("--listen 127.0.0.1:\(port) and --sandbox-listen 127.0.0.1:\(port) would share port \(port)"), "\(result.err)")
        #expect(result.err.contains("--sandbox-listen off"))
        let wildcard = try run(
            EmulatorProcess.binary,
            [
                "serve", "--channel-sandbox-listen", "off", "--channel-production-listen", "off", "--listen", "0.0.0.0:\(port)", "--admin-listen",
                "127.0.0.1:\(port)", "--device-listen", "off",
                "--sandbox-listen", "off", "--production-listen", "off",
            ])
        #expect(wildcard.status == 2)
        #expect(wildcard.err.contains("would share port"), "\(wildcard.err)")
        // localhost is the loopback address: the same clash, named as one.
        let named = try run(
            EmulatorProcess.binary,
            [
                "serve", "--channel-sandbox-listen", "off", "--channel-production-listen", "off", "--sandbox-listen", "127.0.0.1:\(port)",
                "--production-listen", "localhost:\(port)", "--admin-listen", "off", "--device-listen", "off",
            ])
        #expect(named.status == 2)
        #expect(named.err.contains("would share port"), "\(named.err)")
    }

    /// Port 443 as an ordinary user: the error says how to get the privilege. Runs the binary
    /// as `nobody` when the tests run as root.
    @Test func privilegedPortNeedsPrivilegesAndSaysHow() throws {
        let unprivilegedStart =
            (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_unprivileged_port_start", encoding: .utf8))
            .flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) } ?? 1024
        try #require(unprivilegedStart > 443, "this machine lets anyone bind 443; nothing to check")
        var command = EmulatorProcess.binary
        var arguments = [
            "serve", "--channel-sandbox-listen", "off", "--channel-production-listen", "off", "--listen", "127.0.0.1:443", "--sandbox-listen", "off",
            "--production-listen", "off",
            "--admin-listen", "off", "--device-listen", "off", "--demo", "off", "--certs-dir", try readableCerts(),
        ]
        if getuid() == 0 {
            command = try #require(which("setpriv"), "setpriv (util-linux) runs the binary as nobody")
            arguments = ["--reuid=65534", "--regid=65534", "--clear-groups", EmulatorProcess.binary] + arguments
        }
        let result = try run(command, arguments)
        #expect(result.status == 1, "\(result.err)")
        #expect(result.err.contains("cannot listen on 127.0.0.1:443 for --listen"), "\(result.err)")
        #expect(result.err.contains("Ports below 1024 need privileges"))
        #expect(result.err.contains("cap_net_bind_service"))
        #expect(result.err.contains("2197"))
    }

    @Test func aPortInUseIsExplained() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let taken = try emulator.address("sandbox")
        let result = try run(
            EmulatorProcess.binary,
            [
                "serve", "--channel-sandbox-listen", "off", "--channel-production-listen", "off", "--listen", "127.0.0.1:\(taken.port)",
                "--sandbox-listen", "off", "--production-listen", "off",
                "--admin-listen", "off", "--device-listen", "off", "--demo", "off", "--certs-dir", emulator.directory + "/certs",
            ])
        #expect(result.status == 1)
        #expect(result.err.contains("Another program (or another emulator) is listening there"), "\(result.err)")
    }

    /// The provider client checks an IP address against the certificate's IP addresses, as
    /// curl does (it had skipped the check for an IP literal, so any trusted certificate passed).
    @Test func theClientChecksAnIPAddressAgainstTheCertificate() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()  // 127.0.0.1, in the certificate
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
        #expect {
            try emulator.connect(serverName: "127.0.0.2")  // trusted CA, but not its address
        } throws: { "\($0)".contains("mismatch") }
    }

    /// A certs directory that lost its server certificate keeps its CA: the new server
    /// certificate is signed by it, so clients trusting `ca.pem` (and provider certificates
    /// made with it) still verify.
    @Test(.requires(.curl)) func aMissingServerCertificateIsMadeWithTheCAThere() throws {
        let directory = try readableCerts()
        let ca = try Data(contentsOf: URL(fileURLWithPath: directory + "/ca.pem"))
        let caKey = try Data(contentsOf: URL(fileURLWithPath: directory + "/ca-key.pem"))
        for name in ["/server.pem", "/server-key.pem"] { try FileManager.default.removeItem(atPath: directory + name) }
        let emulator = try EmulatorProcess(["--certs-dir", directory])
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory + "/ca.pem")) == ca, "the CA is kept")
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory + "/ca-key.pem")) == caKey)
        #expect(emulator.stderr.contains("signed by the CA there"), "\(emulator.stderr)")
        let reached = try run(
            try #require(ExternalTool.curl.path),
            [
                "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--http2", "--cacert", directory + "/ca.pem",
                "https://\(try emulator.address("sandbox"))/",
            ])
        #expect(reached.status == 0, "TLS verifies with the kept CA: \(reached.err)")
    }

    /// Three instances started together on one new certs directory (demo mode) share one CA
    /// and one demo key: each serves a certificate that chains to `ca.pem` and verifies the
    /// demo key in the file. Each made its own CA and key, and wrote them over the others'.
    @Test func instancesStartedTogetherOnANewCertsDirectoryAgreeOnTheCAAndTheDemoKey() throws {
        let shared = FileManager.default.temporaryDirectory.appendingPathComponent("shared-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: shared) }
        let started = Mutex<[EmulatorProcess?]>([nil, nil, nil])
        DispatchQueue.concurrentPerform(iterations: 3) { index in
            let emulator = try? EmulatorProcess(withKey: false, sharedDirectory: shared)
            started.withLock { $0[index] = emulator }
        }
        let emulators = started.withLock { $0 }.compactMap { $0 }
        try #require(emulators.count == 3, "every instance started")
        #expect(emulators.filter { $0.stderr.contains("generated TEST ONLY certificates") }.count == 1, "one instance made the CA")
        let pem = try String(contentsOfFile: shared + "/certs/demo-AuthKey_DEMOKEY000.p8", encoding: .utf8)
        let demoKey = ProviderSigningKey(teamID: "DEMOTEAM00", keyID: "DEMOKEY000", privateKey: try ES256PrivateKey(pem: pem))
        for emulator in emulators {
            let device = try emulator.admin("GET", "/api/v1/devices/demo-iphone").json
            let token = try #require(device["apps"]?.arrayValue?.first?["token"]?.stringValue)
            var push = try emulator.push(token)
            push.providerToken = try demoKey.token(issuedAt: Int64(Date().timeIntervalSince1970))
            let result = APNsResult(try emulator.connect().send(push.request))
            #expect(result.status == 200, "TLS verifies with the shared ca.pem, the demo key with the file's: \(result.reason ?? "")")
        }
    }

    /// Certificates any user can read, for the run as `nobody`.
    func readableCerts() throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("certs-\(UUID().uuidString)").path
        let made = try run(EmulatorProcess.binary, ["certs", "--dir", directory])
        try #require(made.status == 0, "\(made.err)")
        for name in ["", "/ca.pem", "/server.pem", "/server-key.pem", "/ca-key.pem", "/server-rsa.pem", "/server-rsa-key.pem"] {
            chmod(directory + name, name.isEmpty ? 0o755 : 0o644)
        }
        return directory
    }
}

@Suite("HTTP/1.1 on a provider port", .requires(.curl))
struct HTTP1OnProviderPortTests {
    func curl() throws -> String { try #require(ExternalTool.curl.path) }

    @Test func curlWithoutHTTP2GetsAnAnswerItCanShow() throws {
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"])
        let device = try emulator.createDevice()
        let cleartext = try run(
            try curl(),
            [
                "-sS", "-i", "-d", #"{"aps":{}}"#,
                "http://\(try emulator.address("h2cSandbox"))/3/device/\(device.token)",
            ])
        #expect(cleartext.status == 0, "\(cleartext.err)")
        #expect(cleartext.out.hasPrefix("HTTP/1.1 505 HTTP Version Not Supported"), "\(cleartext.out)")
        #expect(cleartext.out.contains("speaks HTTP/2 only"))
        #expect(cleartext.out.contains("--http2-prior-knowledge"))

        let tls = try run(
            try curl(),
            [
                "-sS", "-i", "--http1.1", "--cacert", emulator.caPath, "-d", #"{"aps":{}}"#,
                "https://\(try emulator.address("sandbox"))/3/device/\(device.token)",
            ])
        #expect(tls.status == 0, "\(tls.err)")
        #expect(tls.out.hasPrefix("HTTP/1.1 505"), "\(tls.out)")
        #expect(tls.out.contains("curl --http2"))
        #expect(try emulator.notifications(token: device.token).isEmpty, "an HTTP/1.1 request is not a push")
    }

    /// curl --http2 on http:// (and the JDK's HttpClient) try `Upgrade: h2c` first.
    @Test func anH2CUpgradeRequestIsRefusedInWords() throws {
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"])
        let result = try run(
            try curl(),
            [
                "-sS", "-i", "--http2", "-d", #"{"aps":{}}"#,
                "http://\(try emulator.address("h2cSandbox"))/3/device/00",
            ])
        #expect(result.out.hasPrefix("HTTP/1.1 505"), "\(result.out)\(result.err)")
        #expect(result.out.contains("Upgrade: h2c) is not supported"))
        #expect(emulator.stderr.contains("asking to upgrade to h2c"))
        // Prior knowledge on the same listener still works.
        let h2 = try run(
            try curl(),
            [
                "-sS", "-o", "/dev/null", "-w", "%{http_version} %{http_code}", "--http2-prior-knowledge",
                "-d", #"{"aps":{}}"#, "http://\(try emulator.address("h2cSandbox"))/3/device/00",
            ])
        #expect(h2.out == "2 403", "\(h2.out) \(h2.err)")
    }
}
