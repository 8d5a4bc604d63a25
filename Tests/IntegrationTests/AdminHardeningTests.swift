import APNsCore
import Foundation
import Glibc
import Locking
import Networking
import OpenSSLCrypto
import ProviderClient
import Synchronization
import Testing
import TestSupport

extension EmulatorProcess {
    /// `count` pushes to `token` on one connection (the first alone: one stream until a
    /// provider token is accepted, then batches).
    func pushMany(_ token: String, count: Int, payload: String = #"{"aps":{"alert":"hello"}}"#) throws {
        let connection = try connect()
        let request = try push(token, payload: payload).request
        #expect(APNsResult(try connection.send(request)).status == 200)
        var left = count - 1
        while left > 0 {
            let n = min(100, left)
            _ = try connection.send(Array(repeating: request, count: n), timeoutMilliseconds: 30_000)
            left -= n
        }
    }
}

@Suite("Admin API: who may call it")
struct AdminAccessIntegrationTests {
    @Test func aForeignHostIsRefusedEvenForHealthChecks() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let port = try emulator.address("admin").port
        let foreign = try emulator.admin("GET", "/api/v1/info", host: "evil.example")
        #expect(foreign.status == 403)
        #expect(foreign.json["error"]?.stringValue?.contains("--admin-allowed-host evil.example") == true, "\(foreign.raw)")
        #expect(try emulator.admin("GET", "/api/v1/devices", host: "rebind.attacker.example:\(port)").status == 403)
        #expect(try emulator.admin("GET", "/livez", host: "evil.example:\(port)").status == 403)
        #expect(try emulator.admin("GET", "/api/v1/info", host: "localhost:\(port)").status == 200)
        #expect(try emulator.admin("GET", "/api/v1/info", host: "[::1]:\(port)").status == 200)
        #expect(try emulator.admin("GET", "/api/v1/info", host: "ui.localhost:\(port)").status == 200)
        #expect(try emulator.metric("apns_emulator_admin_requests_refused_total", labels: "reason=\"host\"") == 3)

        let allowing = try EmulatorProcess(["--admin-allowed-host", "apns-emulator"], inProcess: true)
        #expect(try allowing.admin("GET", "/api/v1/info", host: "apns-emulator:8197").status == 200)
        #expect(try allowing.admin("GET", "/api/v1/info", host: "evil.example").status == 403)
    }

    /// What a page on another site can send without a preflight changes nothing.
    @Test func crossSiteRequestsChangeNothing() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let body: JSONValue = ["bundleId": "com.example.app", "environment": "sandbox", "deviceId": "keep-me"]
        #expect(try emulator.admin("POST", "/api/v1/devices", body: body).status == 201)
        let evil = ("Origin", "http://evil.example")
        let attempts: [(String, String, JSONValue?, [(String, String)], Int)] = [
            ("POST", "/api/v1/reset", .string("x"), [evil, ("Content-Type", "text/plain")], 403),
            ("POST", "/api/v1/reset", nil, [evil], 403),
            ("POST", "/api/v1/reset", nil, [("Origin", "null")], 403),
            ("POST", "/api/v1/reset", nil, [("Content-Type", "application/x-www-form-urlencoded")], 415),
            ("DELETE", "/api/v1/devices/keep-me", nil, [evil], 403),
            (
                "POST", "/api/v1/devices", ["bundleId": "com.example.app", "environment": "sandbox"],
                [evil, ("Content-Type", "text/plain;charset=UTF-8")], 403
            ),
            ("POST", "/api/v1/devices", ["bundleId": "com.example.app", "environment": "sandbox"], [("Content-Type", "text/plain")], 415),
            (
                "POST", "/api/v1/devices", ["bundleId": "com.example.app", "environment": "sandbox"],
                [("Content-Type", "application/x-www-form-urlencoded")], 415
            ),
            (
                "POST", "/api/v1/devices", ["bundleId": "com.example.app", "environment": "sandbox"],
                [("Content-Type", "multipart/form-data; boundary=x")], 415
            ),
            ("POST", "/api/v1/faults", ["match": [:], "action": ["status": 500]], [evil, ("Content-Type", "application/json")], 403),
            ("PUT", "/api/v1/tokens/00/state", ["state": "expired"], [("Origin", "http://127.0.0.1:1")], 403),
        ]
        for (method, path, body, headers, status) in attempts {
            let reply = try emulator.admin(method, path, body: body, headers: headers)
            #expect(reply.status == status, "\(method) \(path) \(headers): \(reply.raw)")
        }
        let devices = try emulator.admin("GET", "/api/v1/devices").json["devices"]?.arrayValue ?? []
        #expect(devices.compactMap { $0["deviceId"]?.stringValue } == ["keep-me"])
        #expect(try emulator.admin("GET", "/api/v1/faults").json["faults"]?.arrayValue?.isEmpty == true)
        let refusedByType = try emulator.metric("apns_emulator_admin_requests_refused_total", labels: "reason=\"content-type\"")
        #expect(refusedByType == 4)
    }

    @Test func theWebUIsOwnOriginMayChangeState() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let port = try emulator.address("admin").port
        let body: JSONValue = ["bundleId": "com.example.app", "environment": "sandbox"]
        #expect(try emulator.admin("POST", "/api/v1/devices", body: body, headers: [("Origin", "http://127.0.0.1:\(port)")]).status == 201)
        #expect(
            try emulator.admin(
                "POST", "/api/v1/devices", body: body, headers: [("Origin", "http://localhost:\(port)")],
                host: "localhost:\(port)"
            ).status == 201)
        #expect(
            try emulator.admin(
                "POST", "/api/v1/devices", body: body,
                headers: [("Origin", "http://localhost:\(port)")]
            ).status == 403, "another host name is another origin")
        #expect(
            try emulator.admin(
                "POST", "/api/v1/devices", body: body,
                headers: [("Content-Type", "application/json; charset=utf-8")]
            ).status == 201)
        // A body without a type (no page can send one without Origin) is read as JSON.
        var raw = "POST /api/v1/devices HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        let json = #"{"bundleId":"com.example.app","environment":"sandbox"}"#
        raw += "Content-Length: \(json.utf8.count)\r\n\r\n\(json)"
        #expect(try EmulatorProcess.reply(try AdminSocket(emulator).exchange(Array(raw.utf8))).status == 201)
        #expect(try emulator.admin("GET", "/api/v1/devices").json["devices"]?.arrayValue?.count == 4)
    }

    @Test func theTokenIsRequiredAcceptedAndHealthChecksStayOpen() throws {
        let token = "t-\(UUID().uuidString)"
        let emulator = try EmulatorProcess(environment: ["APNS_EMULATOR_ADMIN_TOKEN": token])
        let port = try emulator.address("admin").port
        let missing = try AdminSocket(emulator).exchange(Array("GET /api/v1/info HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n".utf8))
        #expect(missing.hasPrefix("HTTP/1.1 401"))
        #expect(missing.contains("WWW-Authenticate: Bearer"))
        for path in ["/api/v1/info", "/api/v1/devices", "/metrics", "/api/v1/openapi.json"] {
            #expect(try emulator.admin("GET", path).status == 401, "\(path)")
        }
        #expect(try emulator.admin("GET", "/api/v1/info", headers: [("Authorization", "Bearer wrong")]).status == 401)
        // A refusal keeps the connection, as browsers reuse it for the next try.
        let keepAlive = try AdminSocket(emulator)
        for (authorization, status) in [("", 401), ("Authorization: Bearer wrong\r\n", 401), ("Authorization: Bearer \(token)\r\n", 200)] {
            keepAlive.send("GET /api/v1/info HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\(authorization)\r\n")
            #expect(try keepAlive.readResponse().hasPrefix("HTTP/1.1 \(status)"))
        }
        for path in ["/livez", "/readyz", "/", "/ui/app.js"] {
            #expect(try emulator.admin("GET", path).status == 200, "\(path) needs no token")
        }
        // The UI may not be framed by another site (clickjacking a Reset).
        let ui = try AdminSocket(emulator)
        ui.send("GET / HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n")
        let page = try ui.readResponse()
        #expect(
            page.contains("X-Frame-Options: DENY") && page.contains("X-Content-Type-Options: nosniff")
                && page.contains("Content-Security-Policy: frame-ancestors 'none'"), "\(page.prefix(300))")
        let ready = try run(EmulatorProcess.binary, ["readyz", "--admin", try emulator.address("admin").description])
        #expect(ready.status == 0, "readyz works without the token")

        emulator.adminToken = token
        #expect(try emulator.admin("GET", "/api/v1/info").status == 200)
        #expect(try emulator.createDevice().token.count == 64)
        #expect(try emulator.metric("apns_emulator_admin_requests_refused_total", labels: "reason=\"token\"") == 8)

        // The event stream takes the token in the query (EventSource cannot set headers); nothing else does.
        let stream = try AdminSocket(emulator)
        stream.send("GET /api/v1/events?access_token=\(token) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n")
        let head = String(decoding: stream.read(atLeast: 40), as: UTF8.self)
        #expect(head.hasPrefix("HTTP/1.1 200") && head.contains("text/event-stream"), "\(head)")
        emulator.adminToken = nil
        #expect(try emulator.admin("GET", "/api/v1/events?access_token=wrong").status == 401)
        #expect(try emulator.admin("GET", "/api/v1/info?access_token=\(token)").status == 401)
    }

    @Test func aNonLoopbackAdminListenerNeedsATokenOrAnExplicitFlag() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apns-emulator-open-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let refused = try run(
            EmulatorProcess.binary,
            [
                "serve", "--channel-sandbox-listen", "off", "--channel-production-listen", "off", "--sandbox-listen", "127.0.0.1:0",
                "--production-listen", "off", "--device-listen", "off",
                "--admin-listen", "0.0.0.0:0", "--certs-dir", directory, "--demo", "off",
            ])
        #expect(refused.status != 0)
        #expect(refused.err.contains("--admin-token") && refused.err.contains("--admin-insecure"), "\(refused.err)")

        let insecure = try EmulatorProcess(["--admin-listen", "0.0.0.0:0", "--admin-insecure"])
        #expect(try insecure.admin("GET", "/livez").status == 200)
        let withToken = try EmulatorProcess(["--admin-listen", "0.0.0.0:0"], environment: ["APNS_EMULATOR_ADMIN_TOKEN": "secret-1"])
        #expect(try withToken.admin("GET", "/api/v1/info").status == 401)
    }

    /// Outside `--keys-dir` every path gets the same answer, byte for byte, whether a file is there or not.
    @Test func keyPathsOutsideTheKeysDirectoryAreRefusedAlike() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("apns-emulator-keys-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        let keys = root + "/keys"
        try FileManager.default.createDirectory(atPath: keys, withIntermediateDirectories: true)
        let pem = try ES256PrivateKey.generate().pkcs8PEM
        try pem.write(toFile: keys + "/inside.p8", atomically: true, encoding: .utf8)
        try pem.write(toFile: root + "/outside.p8", atomically: true, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: keys + "/escape.p8", withDestinationPath: root + "/outside.p8")

        let without = try EmulatorProcess(inProcess: true)
        let noDirectory = try without.admin("POST", "/api/v1/keys", body: ["teamId": "TEAM1", "keyId": "K1", "path": .string(without.keyPath)])
        #expect(noDirectory.status == 400)
        #expect(noDirectory.json["error"]?.stringValue?.contains("--keys-dir") == true && noDirectory.raw.contains("pem"))

        let emulator = try EmulatorProcess(["--keys-dir", keys], inProcess: true)
        func add(_ keyID: String, _ path: String) throws -> EmulatorProcess.AdminReply {
            try emulator.admin("POST", "/api/v1/keys", body: ["teamId": "TEAM1", "keyId": .string(keyID), "path": .string(path)])
        }
        #expect(try add("KEYREL", "inside.p8").status == 201)
        #expect(try add("KEYABS", keys + "/inside.p8").status == 201)
        let outsideExisting = try add("K2", root + "/outside.p8")
        #expect(outsideExisting.status == 400)
        for path in [
            root + "/missing.p8", "../outside.p8", "../missing.p8", "escape.p8", "/etc/passwd", "/etc/no-such-file",
            "nope.p8", keys, "/proc/self/environ", "",
        ] {
            let reply = try add("K2", path)
            #expect(reply.status == 400)
            #expect(reply.raw == outsideExisting.raw, "\(path): \(reply.raw)")
        }
        let ids = try emulator.admin("GET", "/api/v1/keys").json["keys"]?.arrayValue?.compactMap { $0["keyId"]?.stringValue } ?? []
        #expect(ids.contains("KEYREL") && ids.contains("KEYABS") && !ids.contains("K2"))
    }

    /// A line feed in a device id never reaches a device frame or the log.
    @Test func controlCharactersInDeviceIdsAreRefusedEverywhere() throws {
        let emulator = try EmulatorProcess()
        let bad = "bad\nINJECTED"
        for id in [bad, "bad\rINJECTED", "bad id", "bad/INJECTED", "bäd", String(repeating: "a", count: 129), ""] {
            let reply = try emulator.admin(
                "POST", "/api/v1/devices",
                body: ["bundleId": "com.example.app", "environment": "sandbox", "deviceId": .string(id)])
            #expect(reply.status == 400, "\(id.debugDescription): \(reply.raw)")
        }
        #expect(
            try emulator.admin(
                "POST", "/api/v1/devices",
                body: ["bundleId": "com.example.app", "environment": "sandbox", "deviceId": "ok-id_1.2"]
            ).status == 201)
        for (method, path, body) in [
            ("GET", "/api/v1/devices/bad%0AINJECTED", nil), ("DELETE", "/api/v1/devices/bad%0AINJECTED", nil),
            ("PATCH", "/api/v1/devices/bad%0D%0AINJECTED", ["online": false]), ("POST", "/api/v1/devices/bad%0AINJECTED/erase", nil),
            ("POST", "/api/v1/devices/bad%00INJECTED/apps", ["bundleId": "com.example.app", "environment": "sandbox"]),
            ("DELETE", "/api/v1/devices/bad%0AINJECTED/apps/com.example.app", nil),
            ("POST", "/api/v1/devices/ok-id_1.2/restore", ["fromDeviceId": .string(bad)]),
        ] as [(String, String, JSONValue?)] {
            let reply = try emulator.admin(method, path, body: body)
            #expect(reply.status == 400, "\(method) \(path): \(reply.raw)")
        }

        // The device protocol: hello, and restore from another id.
        let socket = try Socket.connect(to: try emulator.address("device"))
        defer { close(socket) }
        Socket.setTimeouts(socket, milliseconds: 10_000)
        var lines = LineReader(fd: socket)
        func frame(_ value: JSONValue) {
            let bytes = value.serializedBytes() + [0x0A]
            _ = bytes.withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        frame(["type": "hello", "version": 1, "deviceId": .string(bad)])
        let refused = lines.next() ?? .null
        #expect(refused["type"]?.stringValue == "error" && refused["code"]?.stringValue == "bad_request", "\(refused)")
        frame(["type": "hello", "version": 1, "deviceId": "phone-ok"])
        #expect(lines.next()?["type"]?.stringValue == "welcome")
        frame(["type": "restore", "fromDeviceId": .string(bad)])
        let restore = lines.next() ?? .null
        #expect(restore["type"]?.stringValue == "error", "\(restore)")

        // Config files too.
        let config = emulator.directory + "/bad-device.json"
        let file: JSONValue = ["devices": [["deviceId": .string(bad), "apps": .array([])]]]
        try file.serialized().write(toFile: config, atomically: true, encoding: .utf8)
        let start = try run(
            EmulatorProcess.binary,
            [
                "serve", "--channel-sandbox-listen", "off", "--channel-production-listen", "off", "--config", config, "--admin-listen", "127.0.0.1:0",
                "--sandbox-listen", "127.0.0.1:0",
                "--production-listen", "off", "--device-listen", "off", "--certs-dir", emulator.directory + "/certs",
            ])
        #expect(start.status != 0)
        #expect(start.err.contains("device id"), "\(start.err)")
        #expect(!start.err.contains("\nINJECTED"))
        #expect(!emulator.stderr.contains("INJECTED"), "a refused id reached the log:\n\(emulator.stderr)")
    }
}

/// Newline-delimited JSON from a socket (the device protocol).
struct LineReader {
    let fd: Int32
    var buffer: [UInt8] = []

    init(fd: Int32) { self.fd = fd }

    mutating func next() -> JSONValue? {
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            if let newline = buffer.firstIndex(of: 0x0A) {
                let line = Array(buffer[..<newline])
                buffer.removeFirst(newline + 1)
                return try? JSONValue.parse(line)
            }
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { return nil }
            buffer.append(contentsOf: chunk[0..<n])
        }
    }
}

@Suite("Admin API: HTTP/1.1 on the wire")
struct AdminHTTP1Tests {
    /// RFC 9112: framing a proxy could read differently, and syntax it forbids, end the
    /// connection with a clear status.
    @Test(arguments: [
        ("two Content-Length", "POST /api/v1/reset HTTP/1.1\r\nHost: H\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", 400),
        ("differing Content-Length", "POST /api/v1/reset HTTP/1.1\r\nHost: H\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}x", 400),
        ("Content-Length list", "POST /api/v1/reset HTTP/1.1\r\nHost: H\r\nContent-Length: 2, 2\r\n\r\n{}", 400),
        (
            "Transfer-Encoding and Content-Length",
            "POST /api/v1/reset HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n0\r\n\r\n", 400
        ),
        ("unknown transfer coding", "POST /api/v1/reset HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
        ("a coding before chunked", "POST /api/v1/reset HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501),
        ("whitespace before the colon", "GET /livez HTTP/1.1\r\nHost : H\r\n\r\n", 400),
        ("obsolete line folding", "GET /livez HTTP/1.1\r\nHost: H\r\nX-Folded: a\r\n b\r\n\r\n", 400),
        ("bare CR", "GET /livez HTTP/1.1\r\nHost: H\rX: 1\r\n\r\n", 400),
        ("no Host", "GET /livez HTTP/1.1\r\nX: 1\r\n\r\n", 400),
        ("two Hosts", "GET /livez HTTP/1.1\r\nHost: H\r\nHost: H\r\n\r\n", 400),
        ("HTTP/2.0 in HTTP/1 syntax", "GET /livez HTTP/2.0\r\nHost: H\r\n\r\n", 505),
        ("a body too large", "POST /api/v1/devices HTTP/1.1\r\nHost: H\r\nContent-Length: 8388609\r\n\r\n", 413),
    ])
    func malformedRequestsAreRefusedAndTheConnectionCloses(name: String, request: String, status: Int) throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let host = try emulator.address("admin").description
        let socket = try AdminSocket(emulator)
        // Keep-alive was asked for (HTTP/1.1 default); the server still closes.
        let response = try socket.exchange(Array(request.replacingOccurrences(of: "Host: H", with: "Host: \(host)").utf8))
        #expect(response.hasPrefix("HTTP/1.1 \(status) "), "\(name): \(response)")
        #expect(response.contains("Connection: close"), "\(name): \(response)")
        #expect(try EmulatorProcess.reply(response).json["error"]?.stringValue?.isEmpty == false)
        #expect(try emulator.admin("GET", "/livez").status == 200)
    }

    @Test func headAnswersCarryTheHeadersOfGetButNoBody() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let host = try emulator.address("admin").description
        let get = try emulator.admin("GET", "/api/v1/openapi.json")
        let socket = try AdminSocket(emulator)
        socket.send("HEAD /api/v1/openapi.json HTTP/1.1\r\nHost: \(host)\r\n\r\n")
        let head = try socket.readResponse(head: true)
        #expect(head.hasPrefix("HTTP/1.1 200"))
        #expect(head.contains("Content-Length: \(get.raw.utf8.count)\r\n"), "\(head)")
        // The next response on the same connection starts right after the head: no body came.
        socket.send("GET /livez HTTP/1.1\r\nHost: \(host)\r\nConnection: close\r\n\r\n")
        let next = socket.readToEnd()
        #expect(next.hasPrefix("HTTP/1.1 200"), "\(next)")
        #expect(next.hasSuffix(#"{"status":"live"}"# + "\n"))
        let stream = try AdminSocket(emulator)
        let events = try stream.exchange(Array("HEAD /api/v1/events HTTP/1.1\r\nHost: \(host)\r\n\r\n".utf8))
        #expect(events.hasPrefix("HTTP/1.1 200") && events.hasSuffix("\r\n\r\n"), "\(events)")
    }

    /// The head limit holds when the bytes come one by one, and a request whose line ends are
    /// split between packets is read normally.
    @Test func theHeaderLimitHoldsByteByByte() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let host = try emulator.address("admin").description
        let socket = try AdminSocket(emulator)
        socket.send("GET /livez HTTP/1.1\r\nHost: \(host)\r\nX-Long: ")
        // One byte per packet (TCP_NODELAY), past 64 KiB, never a line end.
        for _ in 0..<(66 * 1024) { socket.send([UInt8(ascii: "a")]) }
        let status = socket.readToEnd()
        #expect(status.hasPrefix("HTTP/1.1 431"), "\(status.prefix(200))")

        let split = try AdminSocket(emulator)
        for piece in ["GET /livez HTTP/1.1\r", "\nHost: \(host)\r", "\nConnection: close\r\n\r", "\n"] {
            split.send(piece)
            usleep(1000)
        }
        #expect(split.readToEnd().hasPrefix("HTTP/1.1 200"))
    }

    @Test func chunkedBodiesAreRead() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let host = try emulator.address("admin").description
        let json = #"{"bundleId":"com.example.app","environment":"sandbox","deviceId":"chunked-1"}"#
        let bytes = Array(json.utf8)
        var request =
            "POST /api/v1/devices HTTP/1.1\r\nHost: \(host)\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        request += String(bytes.count - 10, radix: 16) + "\r\n" + String(decoding: bytes[..<(bytes.count - 10)], as: UTF8.self) + "\r\n"
        request += "a;ext=1\r\n" + String(decoding: bytes[(bytes.count - 10)...], as: UTF8.self) + "\r\n0\r\n\r\n"
        let response = try AdminSocket(emulator).exchange(Array(request.utf8))
        #expect(response.hasPrefix("HTTP/1.1 201"), "\(response)")
        #expect(try emulator.admin("GET", "/api/v1/devices/chunked-1").status == 200)
    }
}

@Suite("Admin API: bounded resources")
struct AdminLimitsTests {
    @Test func aSlowClientIsClosedWhileOthersAreServed() throws {
        let emulator = try EmulatorProcess(["--admin-read-timeout", "1", "--admin-idle-timeout", "1"], inProcess: true)
        let host = try emulator.address("admin").description
        let slowHead = try AdminSocket(emulator)
        slowHead.send("GET /api/v1/info HTTP/1.1\r\nHost: \(host)\r\n")
        let slowBody = try AdminSocket(emulator)
        slowBody.send("POST /api/v1/devices HTTP/1.1\r\nHost: \(host)\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"bundle")
        let idle = try AdminSocket(emulator)
        // Meanwhile everyone else is served.
        #expect(try emulator.admin("GET", "/api/v1/info").status == 200)
        #expect(try emulator.createDevice().token.count == 64)
        // The slow ones get 408 and the connection ends (the socket timeout of 15 s is only a backstop).
        let head = slowHead.readToEnd()
        #expect(head.hasPrefix("HTTP/1.1 408") && head.contains("--admin-read-timeout"), "\(head)")
        #expect(slowBody.readToEnd().hasPrefix("HTTP/1.1 408"))
        #expect(idle.readToEnd().isEmpty && idle.isClosedByServer())
        #expect(try emulator.metric("apns_emulator_admin_timeouts_total", labels: "phase=\"headers\"") == 1)
        #expect(try emulator.metric("apns_emulator_admin_timeouts_total", labels: "phase=\"body\"") == 1)
    }

    /// 60 clients each sending most of an 8 MiB body: the budget (32 MiB) holds four, the
    /// rest get 503 before they send it (`Expect: 100-continue` tells them which), and memory
    /// stays bounded.
    @Test func requestBodiesShareABudget() throws {
        let emulator = try EmulatorProcess()
        let host = try emulator.address("admin").description
        let before = emulator.residentBytes
        let length = 8 << 20
        let head =
            "POST /api/v1/devices HTTP/1.1\r\nHost: \(host)\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(length)\r\nExpect: 100-continue\r\n\r\n"
        let partial = [UInt8](repeating: 0x20, count: length - 1)
        var sockets = try (0..<60).map { _ in try AdminSocket(emulator, timeoutMilliseconds: 30_000) }
        let collected = Locked([String](repeating: "", count: sockets.count))
        let all = sockets
        DispatchQueue.concurrentPerform(iterations: all.count) { i in
            all[i].send(head)
            let answer = String(decoding: all[i].read(atLeast: 12), as: UTF8.self)
            if answer.hasPrefix("HTTP/1.1 100") { all[i].send(partial) }
            collected.withLock { $0[i] = answer }
        }
        let answers = collected.withLock { $0 }
        let refused = answers.filter { $0.hasPrefix("HTTP/1.1 503") }
        #expect(refused.count == 56, "\(answers.map { $0.prefix(12) })")
        #expect(answers.filter { $0.hasPrefix("HTTP/1.1 100 Continue") }.count == 4)
        #expect(try eventually { try emulator.metric("apns_emulator_admin_body_bytes_in_flight") == Double(32 << 20) })
        let during = emulator.residentBytes
        print("body budget: RSS \(before >> 20) MiB before, \(during >> 20) MiB with 60 clients sending 8 MiB bodies")
        if EmulatorProcess.memoryIsMeasurable {
            #expect(during - before < 120 << 20, "RSS grew by \((during - before) >> 20) MiB")
        }
        #expect(try emulator.metric("apns_emulator_admin_body_budget_refusals_total") == 56)
        // A small request meanwhile: the budget is spent, a clear 503 (bodyless requests still work).
        let small = try emulator.admin("POST", "/api/v1/devices", body: ["bundleId": "com.example.app", "environment": "sandbox"])
        #expect(small.status == 503 && small.raw.contains("try again"), "\(small.raw)")
        #expect(try emulator.admin("GET", "/api/v1/info").status == 200)
        // Once the holders go, the budget is free again.
        sockets.removeAll()
        #expect(try eventually { try emulator.metric("apns_emulator_admin_body_bytes_in_flight") == 0 })
        #expect(try emulator.admin("POST", "/api/v1/devices", body: ["bundleId": "com.example.app", "environment": "sandbox"]).status == 201)
    }

    /// At the cap the oldest idle keep-alive connection makes room for a new one.
    @Test func idleConnectionsMakeRoomForNewOnes() throws {
        let emulator = try EmulatorProcess(["--admin-max-connections", "3"])
        let host = try emulator.address("admin").description
        var open: [AdminSocket] = []
        for _ in 0..<3 {
            let socket = try AdminSocket(emulator)
            socket.send("GET /livez HTTP/1.1\r\nHost: \(host)\r\n\r\n")
            #expect(try socket.readResponse().hasPrefix("HTTP/1.1 200"))
            open.append(socket)
        }
        let newcomer = try emulator.admin("GET", "/api/v1/info")
        #expect(newcomer.status == 200, "\(newcomer.raw)")
        #expect(open[0].isClosedByServer(), "the oldest idle connection was closed")
        open[1].send("GET /livez HTTP/1.1\r\nHost: \(host)\r\n\r\n")
        #expect(try open[1].readResponse().hasPrefix("HTTP/1.1 200"), "the others stay")
        #expect(try emulator.metric("apns_emulator_admin_connections_evicted_total") >= 1)
    }

    /// When every connection is busy (long polls here), a few reserve places still answer
    /// health checks, one request each; other requests there get 503 and are closed.
    @Test func busyConnectionsLeaveRoomForHealthChecks() throws {
        let emulator = try EmulatorProcess(["--admin-max-connections", "4", "--admin-max-waiters", "8"])
        let host = try emulator.address("admin").description
        // Connections are admitted on the event loops in no fixed order, so the request that
        // reads the gauge may take a place before a poll does; a poll refused so is sent again.
        var polls: [AdminSocket] = []
        defer { withExtendedLifetime(polls) {} }
        #expect(
            try eventually {
                polls.removeAll { socket in
                    var byte: UInt8 = 0
                    return recv(socket.fd, &byte, 1, Int32(MSG_DONTWAIT | MSG_PEEK)) >= 0
                }
                while polls.count < 4 {
                    let socket = try AdminSocket(emulator)
                    socket.send("GET /api/v1/notifications/wait?token=aa&timeout=30 HTTP/1.1\r\nHost: \(host)\r\n\r\n")
                    polls.append(socket)
                }
                return try emulator.metric("apns_emulator_admin_waiters") == 4
            })
        #expect(try emulator.admin("GET", "/readyz").status == 200)
        #expect(try emulator.admin("GET", "/livez").status == 200)
        let other = try AdminSocket(emulator)
        other.send("GET /api/v1/info HTTP/1.1\r\nHost: \(host)\r\n\r\n")
        let refused = try EmulatorProcess.reply(try other.readResponse())
        #expect(refused.status == 503 && refused.raw.contains("only /livez, /readyz and /metrics"), "\(refused.raw)")
        #expect(other.isClosedByServer())
        // Keep-alive asked for, but a reserve place answers once and closes.
        let health = try AdminSocket(emulator)
        health.send("GET /readyz HTTP/1.1\r\nHost: \(host)\r\n\r\n")
        #expect(try health.readResponse().hasPrefix("HTTP/1.1 200"))
        #expect(health.isClosedByServer())
    }

    /// The issue's case, scaled down: 200 long polls against 64 connections and 16 waiters,
    /// every client keeping its connection open. Refused polls are closed by the server, so
    /// /readyz and ordinary requests are served while the 16 wait.
    @Test func refusedLongPollsDoNotFillTheConnections() throws {
        let emulator = try EmulatorProcess(["--admin-max-connections", "64", "--admin-max-waiters", "16"])
        let host = try emulator.address("admin").description
        let request = "GET /api/v1/notifications/wait?token=aa&timeout=60 HTTP/1.1\r\nHost: \(host)\r\n\r\n"
        let polls = try (0..<200).map { _ in
            let socket = try AdminSocket(emulator)
            socket.send(request)
            return socket
        }
        #expect(try eventually { try emulator.metric("apns_emulator_admin_waiters") == 16 })
        #expect(try emulator.admin("GET", "/readyz").status == 200)
        #expect(try emulator.admin("GET", "/api/v1/info").status == 200)
        var closed = 0
        var refusedWithClose = 0
        for socket in polls {
            // Short: the refused ones are answered and closed already; the 16 waiters time out.
            Socket.setTimeouts(socket.fd, milliseconds: 500)
            let answer = socket.readToEnd()
            guard socket.isClosedByServer() else { continue }
            closed += 1
            if answer.hasPrefix("HTTP/1.1 503"), answer.contains("Connection: close") { refusedWithClose += 1 }
        }
        #expect(closed == 184, "\(closed) of the 184 refused polls were closed by the server")
        #expect(refusedWithClose >= 100, "\(refusedWithClose) were answered 503 with Connection: close")
        #expect(try emulator.metric("apns_emulator_admin_waiters") == 16)
        #expect(try emulator.admin("GET", "/api/v1/devices").status == 200)
    }

    /// Event stream clients that never read are dropped once 8 MiB behind, costing a bounded
    /// amount of memory; a client that reads gets everything.
    @Test func eventStreamClientsThatNeverReadAreDropped() throws {
        let emulator = try EmulatorProcess()
        let host = try emulator.address("admin").description
        let device = try emulator.createDevice()
        let request = "GET /api/v1/events HTTP/1.1\r\nHost: \(host)\r\n\r\n"
        let stuck = try (0..<30).map { _ in try AdminSocket(emulator, receiveBuffer: 4096) }
        for socket in stuck { socket.send(request) }
        let reader = try AdminSocket(emulator)
        reader.send(request)
        #expect(try eventually { try emulator.metric("apns_emulator_admin_event_streams") == 31 })
        let before = emulator.residentBytes

        // The reading client: counts notification events as they come.
        let seen = Atomic<Int>(0)
        let reading = Thread {
            let marker = Array("event: notification\n".utf8)
            var tail: [UInt8] = []
            while true {
                let chunk = reader.read(atLeast: 1)
                if chunk.isEmpty { return }
                let bytes = tail + chunk
                var i = 0
                while i + marker.count <= bytes.count {
                    if bytes[i] == marker[0] && Array(bytes[i..<(i + marker.count)]) == marker {
                        seen.add(1, ordering: .relaxed); i += marker.count
                    } else {
                        i += 1
                    }
                }
                tail = Array(bytes.suffix(marker.count - 1))
            }
        }
        reading.start()
        // About 4.5 KB of record JSON per push, 3,500 pushes: some 16 MB of events for each stream.
        let payload = #"{"aps":{"alert":""# + String(repeating: "x", count: 3500) + #""}}"#
        try emulator.pushMany(device.token, count: 3500, payload: payload)
        #expect(try eventually(60) { try emulator.metric("apns_emulator_admin_event_streams_dropped_total") == 30 })
        #expect(try emulator.metric("apns_emulator_admin_event_streams") == 1, "the reading client stays")
        let after = emulator.residentBytes
        print("event streams: RSS \(before >> 20) MiB with 30 stuck clients, \(after >> 20) MiB after 3,500 pushes of 3.5 KB")
        if EmulatorProcess.memoryIsMeasurable {
            #expect(after - before < 160 << 20, "RSS grew by \((after - before) >> 20) MiB")
        }
        #expect(emulator.stderr.components(separatedBy: "fell 8 MiB behind").count - 1 == 30, "one log line per dropped client")
        for socket in stuck {
            _ = socket.readToEnd()
            #expect(socket.isClosedByServer())
        }
        // At least one event per push reached the reading client.
        #expect(try eventually(60) { seen.load(ordering: .relaxed) >= 3500 }, "the reading client saw \(seen.load(ordering: .relaxed)) events")
    }

    /// A push compares a record only with waiters filed under one of its keys: waiters for
    /// other tokens are neither compared nor woken.
    @Test func longPollsForOtherTokensAreNotWoken() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let host = try emulator.address("admin").description
        let a = try emulator.createDevice()
        let b = try emulator.createDevice()
        let waitersA = try (0..<50).map { _ in try AdminSocket(emulator, timeoutMilliseconds: 60_000) }
        for socket in waitersA {
            socket.send("GET /api/v1/notifications/wait?token=\(a.token)&timeout=60 HTTP/1.1\r\nHost: \(host)\r\n\r\n")
        }
        let waiterB = try AdminSocket(emulator, timeoutMilliseconds: 60_000)
        waiterB.send("GET /api/v1/notifications/wait?token=\(b.token)&timeout=60 HTTP/1.1\r\nHost: \(host)\r\n\r\n")
        #expect(try eventually { try emulator.metric("apns_emulator_admin_waiters") == 51 })

        try emulator.pushMany(b.token, count: 1)
        #expect(try waiterB.readResponse().hasPrefix("HTTP/1.1 200"))
        #expect(try emulator.metric("apns_emulator_admin_waiter_wakeups_total") == 1)
        #expect(try emulator.metric("apns_emulator_admin_waiter_checks_total") == 1, "only B's waiter was compared")
        #expect(try emulator.metric("apns_emulator_admin_waiters") == 50)

        try emulator.pushMany(a.token, count: 1)
        for socket in waitersA { #expect(try socket.readResponse().contains(a.token)) }
        #expect(try emulator.metric("apns_emulator_admin_waiter_wakeups_total") == 51)
        #expect(try emulator.metric("apns_emulator_admin_waiter_checks_total") == 51)
        #expect(try emulator.metric("apns_emulator_admin_waiters") == 0)
    }

    @Test func longPollsAreCapped() throws {
        let emulator = try EmulatorProcess(["--admin-max-waiters", "2"], inProcess: true)
        let host = try emulator.address("admin").description
        let waiters = try (0..<2).map { _ in try AdminSocket(emulator) }
        for socket in waiters { socket.send("GET /api/v1/notifications/wait?token=aa&timeout=30 HTTP/1.1\r\nHost: \(host)\r\n\r\n") }
        #expect(try eventually { try emulator.metric("apns_emulator_admin_waiters") == 2 })
        let third = try emulator.admin("GET", "/api/v1/notifications/wait?token=aa&timeout=30")
        #expect(third.status == 503 && third.raw.contains("--admin-max-waiters"), "\(third.raw)")
        // The connection closes after a 503, and its head says so (as admin-api.md promises).
        let fourth = try AdminSocket(emulator)
        fourth.send("GET /api/v1/notifications/wait?token=aa&timeout=30 HTTP/1.1\r\nHost: \(host)\r\n\r\n")
        let refused = fourth.readToEnd()
        #expect(refused.hasPrefix("HTTP/1.1 503") && refused.contains("\r\nConnection: close\r\n"), "\(refused)")
        #expect(try emulator.metric("apns_emulator_admin_waiters_refused_total") == 2)
    }
}
