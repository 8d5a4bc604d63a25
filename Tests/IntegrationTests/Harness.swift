// IntegrationTests: the real binary (and the in-process test kit) on free ports, driven over
// the wire by our own clients, curl, nghttp, device processes and a browser. This file is the
// harness every test here uses. Imports the package's client-side modules and the three
// test-support targets.
import APNsCore
import APNsEmulatorTesting
import Foundation
import Glibc
import HTTP2
import MonotonicClock
import Networking
import OpenSSLCrypto
import ProviderClient
import Testing
import TestSupport

struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The real `apns-emulator` binary, started on free ports in a temporary directory with a
/// fresh provider key. Killed when released.
///
/// `inProcess: true` runs the emulator inside the test process instead, through the public
/// test kit (`TestEmulator`): for tests that need no separate process (no stdout/stderr,
/// signals, resident memory or launcher). Everything else here works the same.
final class EmulatorProcess: @unchecked Sendable {
    static let teamID = "TEAM123456"
    static let keyID = "KEY1234567"
    static let bundleID = "com.example.app"

    let directory: String
    let process = Process()
    let key: ProviderSigningKey
    let keyPath: String
    private(set) var certsDirectory = ""
    let ready: JSONValue
    /// Set when the emulator runs in this process.
    private let kit: TestEmulator?

    static var binary: String { EmulatorBinary.path }

    /// - Parameter launcher: a command that runs the binary (e.g. `prlimit --nofile=64:64 --`);
    ///   it must exec it, so the process id stays the emulator's.
    /// - Parameter sharedDirectory: instances of one service (`--redis`) use the same provider
    ///   key and the same CA from there (the first one creates them).
    init(
        _ extraArguments: [String] = [], environment extraEnvironment: [String: String] = [:],
        withKey: Bool = true, launcher: [String] = [], inProcess: Bool = false, sharedDirectory: String? = nil
    ) throws {
        if inProcess {
            precondition(extraEnvironment.isEmpty && withKey && launcher.isEmpty, "in-process emulators take arguments only")
            var options = TestEmulator.Options(bundleIDs: [Self.bundleID], arguments: extraArguments)
            (options.teamID, options.keyID) = (Self.teamID, Self.keyID)
            let kit = try TestEmulator.start(options)
            self.kit = kit
            directory = kit.directory
            keyPath = kit.signingKey.path
            key = ProviderSigningKey(teamID: Self.teamID, keyID: Self.keyID, privateKey: try ES256PrivateKey(pem: kit.signingKey.pem))
            ready = [
                "sandbox": .string(kit.sandbox.description), "production": .string(kit.production.description),
                "admin": .string(kit.admin.description), "device": .string(kit.device.description),
                "caFile": .string(kit.caCertificatePath),
            ]
            return
        }
        kit = nil
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("apns-emulator-test-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        keyPath = (sharedDirectory ?? directory) + "/AuthKey_\(Self.keyID).p8"
        let privateKey: ES256PrivateKey
        if let pem = try? String(contentsOfFile: keyPath, encoding: .utf8) {
            privateKey = try ES256PrivateKey(pem: pem)
        } else {
            privateKey = try ES256PrivateKey.generate()
            try privateKey.pkcs8PEM.write(toFile: keyPath, atomically: true, encoding: .utf8)
        }
        key = ProviderSigningKey(teamID: Self.teamID, keyID: Self.keyID, privateKey: privateKey)
        certsDirectory = (sharedDirectory ?? directory) + "/certs"

        let readyPath = directory + "/ready.json"
        var arguments = [
            "serve", "--sandbox-listen", "127.0.0.1:0", "--production-listen", "127.0.0.1:0",
            "--channel-sandbox-listen", "127.0.0.1:0", "--channel-production-listen", "127.0.0.1:0",
            "--admin-listen", "127.0.0.1:0", "--device-listen", "127.0.0.1:0", "--certs-dir", certsDirectory,
            "--ready-file", readyPath,
        ]
        if withKey {
            arguments += ["--auth-key", "\(Self.teamID):\(Self.keyID):\(keyPath)", "--app", "\(Self.teamID):\(Self.bundleID)"]
        }
        arguments += extraArguments
        if let command = launcher.first {
            process.executableURL = URL(fileURLWithPath: command)
            process.arguments = Array(launcher.dropFirst()) + [Self.binary] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: Self.binary)
            process.arguments = arguments
        }
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("APNS_EMULATOR_") }
        env.merge(extraEnvironment) { $1 }
        process.environment = env
        FileManager.default.createFile(atPath: directory + "/stdout.log", contents: nil)
        FileManager.default.createFile(atPath: directory + "/stderr.log", contents: nil)
        process.standardOutput = FileHandle(forWritingAtPath: directory + "/stdout.log")
        process.standardError = FileHandle(forWritingAtPath: directory + "/stderr.log")
        try process.run()

        // The ready file is the emulator's readiness signal: written once every listener is bound.
        var written: JSONValue?
        _ = try eventually { [process] in
            if let data = FileManager.default.contents(atPath: readyPath), let value = try? JSONValue.parse(Array(data)) {
                written = value
                return true
            }
            return !process.isRunning
        }
        guard let written else {
            let log = (try? String(contentsOfFile: directory + "/stderr.log", encoding: .utf8)) ?? ""
            process.terminate()
            // No deinit for an init that throws: its directory goes here (tests that expect a
            // start to fail left one in /tmp per run).
            try? FileManager.default.removeItem(atPath: directory)
            throw HarnessError("emulator did not become ready: \(log)")
        }
        ready = written
    }

    deinit {
        kit?.stop()
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    var stderr: String { (try? String(contentsOfFile: directory + "/stderr.log", encoding: .utf8)) ?? "" }
    var stdout: String { (try? String(contentsOfFile: directory + "/stdout.log", encoding: .utf8)) ?? "" }

    func address(_ name: String) throws -> HostPort {
        guard let text = ready[name]?.stringValue else { throw HarnessError("no \(name) listener") }
        return try HostPort(parsing: text)
    }

    var caPath: String { kit?.caCertificatePath ?? certsDirectory + "/ca.pem" }

    /// A provider connection to one of the listeners.
    func connect(_ listener: String = "sandbox", alpn: Bool = true, serverName: String? = nil) throws -> HTTP2ClientConnection {
        var options = HTTP2ClientConnection.Options(address: try address(listener))
        options.tls = !listener.hasPrefix("h2c")
        options.alpn = alpn
        options.caPath = caPath
        options.serverName = serverName
        return try HTTP2ClientConnection(options)
    }

    /// One provider token for the whole test, as real providers reuse theirs for 20–60 minutes.
    private lazy var sharedToken: String = (try? key.token(issuedAt: Int64(Date().timeIntervalSince1970))) ?? ""

    func providerToken(issuedAt: Int64? = nil) throws -> String {
        if let issuedAt { return try key.token(issuedAt: issuedAt) }
        return sharedToken
    }

    /// A valid alert push for `token` signed with the harness key.
    func push(_ token: String, payload: String = #"{"aps":{"alert":"hello"}}"#, topic: String = EmulatorProcess.bundleID) throws -> APNsPush {
        APNsPush(token: token, topic: topic, payload: Array(payload.utf8), providerToken: try providerToken())
    }

    // MARK: Admin API

    struct AdminReply {
        var status: Int
        var json: JSONValue
        var raw: String
    }

    /// Sent as `Authorization: Bearer` by `admin(…)` when the emulator runs with a token.
    var adminToken: String?

    /// One admin request on its own connection (`Connection: close`). `headers` come after
    /// `Host`; a JSON body gets `Content-Type: application/json` unless `headers` name one.
    func admin(
        _ method: String, _ path: String, body: JSONValue? = nil, headers: [(String, String)] = [],
        host: String? = nil, timeoutMilliseconds: Int = 15_000
    ) throws -> AdminReply {
        let address = try address("admin")
        let bytes = body?.serializedBytes() ?? []
        var request = "\(method) \(path) HTTP/1.1\r\nHost: \(host ?? address.description)\r\nConnection: close\r\n"
        if let adminToken, !headers.contains(where: { $0.0.lowercased() == "authorization" }) {
            request += "Authorization: Bearer \(adminToken)\r\n"
        }
        for (name, value) in headers { request += "\(name): \(value)\r\n" }
        if body != nil && !headers.contains(where: { $0.0.lowercased() == "content-type" }) {
            request += "Content-Type: application/json\r\n"
        }
        request += "Content-Length: \(bytes.count)\r\n\r\n"
        let response = try AdminSocket(self, timeoutMilliseconds: timeoutMilliseconds).exchange(Array(request.utf8) + bytes)
        return try Self.reply(response)
    }

    /// Status, JSON body and raw body of a complete response.
    static func reply(_ response: String) throws -> AdminReply {
        guard let headEnd = response.range(of: "\r\n\r\n") else { throw HarnessError("bad admin response: \(response)") }
        let statusLine = response[..<headEnd.lowerBound].split(separator: "\r\n").first ?? ""
        let status = Int(statusLine.split(separator: " ").dropFirst().first ?? "") ?? 0
        let bodyText = String(response[headEnd.upperBound...])
        let json = (try? JSONValue.parse(bodyText)) ?? .null
        return AdminReply(status: status, json: json, raw: bodyText)
    }

    /// A sample of `/metrics`, summed over label sets when `labels` is empty.
    func metric(_ name: String, labels: String = "") throws -> Double {
        let text = try admin("GET", "/metrics").raw
        var total = 0.0
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            // The value follows the last space: label values may hold spaces.
            guard let space = line.lastIndex(of: " ") else { continue }
            let key = line[..<space]
            let matches = labels.isEmpty ? (key == name || key.hasPrefix(name + "{")) : key == "\(name){\(labels)}"
            if matches { total += Double(line[line.index(after: space)...]) ?? 0 }
        }
        return total
    }

    /// Whether resident memory says anything about the emulator's own bounds. Not under
    /// AddressSanitizer (scripts/test-sanitizers asan): its quarantine keeps freed memory and
    /// its allocator returns little, so RSS grows whatever the emulator bounds.
    static var memoryIsMeasurable: Bool { ProcessInfo.processInfo.environment["APNS_EMULATOR_SANITIZER"] != "asan" }

    /// Resident memory of the emulator process (from /proc), in bytes.
    var residentBytes: Int {
        precondition(kit == nil, "resident memory is the test process's own when the emulator runs in it")
        let status = (try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
    }

    /// A virtual device with the app installed; returns (deviceId, token).
    func createDevice(
        bundleID: String = EmulatorProcess.bundleID, environment: String = "sandbox", kind: String? = nil
    )
        throws -> (deviceID: String, token: String)
    {
        var body: JSONObject = JSONObject([("bundleId", .string(bundleID)), ("environment", .string(environment))])
        if let kind { body["kind"] = .string(kind) }
        let reply = try admin("POST", "/api/v1/devices", body: .object(body))
        guard reply.status == 201, let id = reply.json["deviceId"]?.stringValue, let token = reply.json["token"]?.stringValue else {
            throw HarnessError("device creation failed: \(reply.status) \(reply.raw)")
        }
        return (id, token)
    }

    func notifications(token: String? = nil, limit: Int? = nil) throws -> [JSONValue] {
        var query: [String] = []
        if let token { query.append("token=\(token)") }
        if let limit { query.append("limit=\(limit)") }
        let reply = try admin("GET", "/api/v1/notifications" + (query.isEmpty ? "" : "?" + query.joined(separator: "&")))
        return reply.json["notifications"]?.arrayValue ?? []
    }
}

/// A raw connection to the admin listener, for requests the harness would never write.
final class AdminSocket: @unchecked Sendable {
    let fd: Int32

    init(_ emulator: EmulatorProcess, receiveBuffer: Int32? = nil, timeoutMilliseconds: Int = 15_000) throws {
        fd = try Socket.connect(to: try emulator.address("admin"), receiveBuffer: receiveBuffer)
        Socket.setTimeouts(fd, milliseconds: timeoutMilliseconds)
        Socket.setNoDelay(fd)
    }

    deinit { close(fd) }

    /// `recv`, again when a signal interrupted it (a child process of the test exiting sends
    /// SIGCHLD, and that must not read as the server closing).
    private func receive(_ buffer: inout [UInt8]) -> Int {
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n < 0 && errno == EINTR { continue }
            return n
        }
    }

    func send(_ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    func send(_ text: String) { send(Array(text.utf8)) }

    /// Everything until the server closes (or the socket timeout passes).
    func readToEnd() -> String {
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = receive(&buffer)
            if n <= 0 { break }
            response.append(contentsOf: buffer[0..<n])
        }
        return String(decoding: response, as: UTF8.self)
    }

    /// Reads until `count` bytes or more arrived, or the server closed.
    func read(atLeast count: Int) -> [UInt8] {
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while response.count < count {
            let n = receive(&buffer)
            if n <= 0 { break }
            response.append(contentsOf: buffer[0..<n])
        }
        return response
    }

    /// One complete response on a keep-alive connection: the head, then Content-Length bytes
    /// (none when `head` is true).
    func readResponse(head: Bool = false) throws -> String {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let text = String(decoding: bytes, as: UTF8.self)
            if let end = text.range(of: "\r\n\r\n") {
                let headText = text[..<end.lowerBound].lowercased()
                let length =
                    headText.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                    .flatMap { Int($0.dropFirst(15).trimmingCharacters(in: .whitespaces)) } ?? 0
                let total = text.utf8.distance(from: text.utf8.startIndex, to: end.upperBound.samePosition(in: text.utf8)!) + (head ? 0 : length)
                if bytes.count >= total { return String(decoding: bytes[..<total], as: UTF8.self) }
            }
            let n = receive(&buffer)
            if n <= 0 { throw HarnessError("connection ended within a response: \(text)") }
            bytes.append(contentsOf: buffer[0..<n])
        }
    }

    /// Whether the server has closed: a read returns end of file or a reset (not a timeout).
    func isClosedByServer() -> Bool {
        var byte: UInt8 = 0
        let n = recv(fd, &byte, 1, 0)
        return n == 0 || (n < 0 && errno == ECONNRESET)
    }

    /// Sends and reads until the server closes.
    func exchange(_ bytes: [UInt8]) throws -> String {
        send(bytes)
        return readToEnd()
    }
}
