#if canImport(OpenSSLCrypto)
import APNsCore
import DeviceClient
import Foundation
import Glibc
import OpenSSLCrypto
import Testing

/// The device listener behind `serve --device-tls`: the same protocol inside TLS.
@Suite("SimulatedDevice over TLS")
struct TLSDeviceTests {
    static func certificates() throws -> (directory: String, caPath: String, certificatePath: String, keyPath: String) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("device-tls-\(UUID().uuidString)").path
        let (ca, certificate, key) = try TestCertificates.generate(into: directory)
        return (directory, ca, certificate, key)
    }

    @Test("handshake verified against the test CA, then hello, notification, ack and a command")
    func verifiedTLS() throws {
        // The fake peer's TLS writes must not raise SIGPIPE in the test process.
        signal(SIGPIPE, SIG_IGN)
        let files = try Self.certificates()
        defer { try? FileManager.default.removeItem(atPath: files.directory) }
        let context = try TLSContext.server(certificateChainPath: files.certificatePath, privateKeyPath: files.keyPath)
        let peer = try FakePeer(tls: context) { peer in
            let connection = try peer.accept()
            try connection.handshake()
            try connection.send(FakePeer.notification(id: 41, apnsID: "T-1", payload: ["aps": ["alert": "over TLS"]]))
            let ack = try connection.expect("ack")
            guard ack["id"] == 41 else { throw PeerError("ack \(ack)") }
            try connection.expect("ping")
            try connection.send(["type": "pong"])
            try connection.expectEOF()
        }
        try peer.run {
            let device = SimulatedDevice(
                address: peer.address, deviceID: "tls-phone",
                apps: [DeviceApp(bundleID: "com.example.app", environment: .production)],
                tls: (caPath: files.caPath, verifyPeer: true))
            try device.connect()
            #expect(device.token(for: "com.example.app") == FakePeer.token("com.example.app/app"))
            let n = try #require(try device.nextNotification(timeoutMilliseconds: 3000))
            #expect(n.payload == ["aps": ["alert": "over TLS"]])
            try device.ping()
            device.disconnect()
        }
    }

    @Test("a certificate the device does not trust fails connect with .connectFailed")
    func untrustedCertificate() throws {
        signal(SIGPIPE, SIG_IGN)
        let files = try Self.certificates()
        let other = try Self.certificates()
        defer {
            try? FileManager.default.removeItem(atPath: files.directory)
            try? FileManager.default.removeItem(atPath: other.directory)
        }
        let context = try TLSContext.server(certificateChainPath: files.certificatePath, privateKeyPath: files.keyPath)
        let peer = try FakePeer(tls: context) { peer in
            // The server side of the handshake fails too; that is the point.
            _ = try? peer.accept()
        }
        try peer.run {
            let device = SimulatedDevice(
                address: peer.address, deviceID: "tls-phone", apps: [],
                tls: (caPath: other.caPath, verifyPeer: true))
            let error = #expect(throws: DeviceClientError.self) { try device.connect(timeoutMilliseconds: 3000) }
            #expect(error?.kind == .connectFailed)
            #expect(error?.description.contains("certificate") == true)
            #expect(!device.isConnected)
        }
    }
}
#endif
