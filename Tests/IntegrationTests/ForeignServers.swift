import Foundation
import Glibc
import Networking
import OpenSSLCrypto
import Testing
import TestSupport

/// A server that is not the emulator, for what the commands say when pointed at one: Python's
/// http.server (HTTP/1.x, an HTML page for a 404 and for a request it cannot read) or
/// `openssl s_server -www` (TLS without HTTP/2 in ALPN). Stopped when released.
final class ForeignServer {
    let address: HostPort
    private let process = Process()
    /// Its files: `name.pem` is the certificate of `tlsNamed`.
    let directory: String

    /// `python3 -m http.server` on a free loopback port.
    static func http() throws -> ForeignServer {
        try ForeignServer { port, _ in
            (ExternalTool.python3.path!, ["-m", "http.server", String(port), "--bind", "127.0.0.1"])
        }
    }

    /// A Python HTTP server that answers `200 {}` (JSON) to every method and path, as a
    /// catch-all backend does.
    static func jsonToEverything() throws -> ForeignServer {
        try ForeignServer { port, directory in
            let script = directory + "/any.py"
            try """
            import http.server, sys
            class H(http.server.BaseHTTPRequestHandler):
                def answer(self):
                    length = int(self.headers.get("content-length") or 0)
                    if length: self.rfile.read(length)
                    self.send_response(200); self.send_header("content-type", "application/json")
                    self.send_header("content-length", "2"); self.end_headers(); self.wfile.write(b"{}")
                do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = answer
                def log_message(self, *args): pass
            http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
            """.write(toFile: script, atomically: true, encoding: .utf8)
            return (ExternalTool.python3.path!, [script, String(port)])
        }
    }

    /// `openssl s_server -www` with a test certificate: TLS, and no ALPN protocol chosen.
    static func tlsWithoutHTTP2() throws -> ForeignServer {
        try ForeignServer { port, directory in
            let (_, certificate, key) = try TestCertificates.generate(into: directory)
            return (
                ExternalTool.openssl.path!,
                ["s_server", "-accept", "127.0.0.1:\(port)", "-cert", certificate, "-key", key, "-www", "-quiet"]
            )
        }
    }

    /// `openssl s_server` with a self-signed certificate for `name` only (trust it with --ca
    /// `directory/name.pem`): verification passes, and fails on the name for 127.0.0.1.
    static func tlsNamed(_ name: String) throws -> ForeignServer {
        try ForeignServer { port, directory in
            let certificate = "\(directory)/\(name).pem"
            let key = "\(directory)/\(name)-key.pem"
            let made = try run(
                ExternalTool.openssl.path!,
                [
                    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out",
                    certificate, "-days", "1", "-subj", "/CN=\(name)", "-addext", "subjectAltName=DNS:\(name)",
                ])
            guard made.status == 0 else { throw HarnessError("openssl req: \(made.err)") }
            return (ExternalTool.openssl.path!, ["s_server", "-accept", "127.0.0.1:\(port)", "-cert", certificate, "-key", key, "-www", "-quiet"])
        }
    }

    private init(_ command: (_ port: Int, _ directory: String) throws -> (String, [String])) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("foreign-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let port = try freePort()
        address = try HostPort(parsing: "127.0.0.1:\(port)")
        let (executable, arguments) = try command(port, directory)
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let address = address
        try eventually("\(executable) listening on \(address)", seconds: 10, pollingEvery: 0.05) {
            guard let fd = try? Socket.connect(to: address, timeoutMilliseconds: 500) else { return false }
            close(fd)
            return true
        }
    }

    deinit {
        // SIGKILL: a child of the test process inherits its blocked SIGTERM, and waiting for a
        // terminate() hung the suite.
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: directory)
    }
}
