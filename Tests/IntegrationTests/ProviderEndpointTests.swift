import APNsCore
import Foundation
import Glibc
import HTTP2
import Networking
import ProviderClient
import Testing
import TestSupport

@Suite("Provider endpoint over real HTTP/2", .serialized)
struct ProviderEndpointTests {
    @Test func successIsOneHeadersFrameWithApnsIDAndUniqueIDOnSandbox() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        #expect(connection.negotiatedALPN == "h2")
        let response = try connection.send(try emulator.push(device.token).request)
        let result = APNsResult(response)
        #expect(result.status == 200)
        #expect(response.headersFrameCount == 1)
        #expect(response.dataFrameCount == 0)
        #expect(response.body.isEmpty)
        let apnsID = try #require(result.apnsID)
        #expect(CanonicalUUID.isValid(Substring(apnsID)))
        #expect(apnsID == apnsID.uppercased())
        let uniqueID = try #require(result.uniqueID)
        #expect(CanonicalUUID.isValid(Substring(uniqueID)))
        #expect(uniqueID == uniqueID.lowercased())

        // The journal has it, with the ids the answer carried, and finds it by either in either case.
        let records = try emulator.notifications(token: device.token)
        #expect(records.count == 1)
        #expect(records.first?["apnsId"]?.stringValue == apnsID)
        #expect(records.first?["uniqueId"]?.stringValue == uniqueID)
        #expect(records.first?["status"]?.intValue == 200)
        #expect(records.first?["payload"]?["aps"]?["alert"]?.stringValue == "hello")
        for id in [apnsID.lowercased(), uniqueID.uppercased()] {
            #expect(try emulator.admin("GET", "/api/v1/notifications/\(id)").json["apnsId"]?.stringValue == apnsID)
        }
    }

    @Test func aClientsApnsIDIsEchoedAsSentOnSandbox() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        var push = try emulator.push(device.token)
        push.apnsID = "4a5B6c7D-1111-2222-3333-44445555666f"
        let result = APNsResult(try connection.send(push.request))
        #expect(result.status == 200)
        #expect(result.apnsID == "4a5B6c7D-1111-2222-3333-44445555666f")
        #expect(result.uniqueID != nil)
        #expect(try emulator.notifications(token: device.token).first?["apnsId"]?.stringValue == "4a5B6c7D-1111-2222-3333-44445555666f")
    }

    @Test func productionHasNoUniqueIDAndEchoesTheClientApnsID() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice(environment: "production")
        let connection = try emulator.connect("production")
        var push = try emulator.push(device.token)
        push.apnsID = "4a5b6c7d-1111-2222-3333-444455556666"
        let result = APNsResult(try connection.send(push.request))
        #expect(result.status == 200)
        #expect(result.apnsID == "4a5b6c7d-1111-2222-3333-444455556666")
        #expect(result.uniqueID == nil)
    }

    @Test func errorIsHeadersPlusExactlyOneDataFrameWithReason() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let connection = try emulator.connect()
        let response = try connection.send(try emulator.push(String(repeating: "ab", count: 32)).request)
        let result = APNsResult(response)
        #expect(result.status == 400)
        #expect(result.reason == "BadDeviceToken")
        #expect(response.headersFrameCount == 1)
        #expect(response.dataFrameCount == 1)
        #expect(response.headers.contains { $0.name == "content-type" && $0.value == "application/json" })
        #expect(result.apnsID != nil)
        #expect(String(decoding: response.body, as: UTF8.self) == #"{"reason":"BadDeviceToken"}"#)
        // Rejected requests are journaled too.
        let records = try emulator.notifications()
        #expect(records.first?["reason"]?.stringValue == "BadDeviceToken")
        #expect(records.first?["status"]?.intValue == 400)
    }

    @Test func uninstalledAppGets410WithMillisecondTimestamp() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let before = Int64(Date().timeIntervalSince1970 * 1000)
        let uninstall = try emulator.admin("DELETE", "/api/v1/devices/\(device.deviceID)/apps/\(EmulatorProcess.bundleID)")
        #expect(uninstall.status == 200)
        let unregisteredAt = try #require(uninstall.json["unregisteredAt"]?.intValue)
        #expect(unregisteredAt >= before - 1000)

        let result = APNsResult(try emulator.connect().send(try emulator.push(device.token).request))
        #expect(result.status == 410)
        #expect(result.reason == "Unregistered")
        #expect(result.timestampMs == unregisteredAt)
        // Milliseconds, not seconds: within a minute of now in ms.
        #expect(abs(result.timestampMs! - Int64(Date().timeIntervalSince1970 * 1000)) < 60_000)
    }

    @Test func badRequestsDoNotWedgeTheConnection() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        var bad = try emulator.push(device.token)
        bad.priority = "11"
        var duplicate = try emulator.push(device.token)
        duplicate.extraHeaders = [HTTP2HeaderField("apns-topic", EmulatorProcess.bundleID)]
        let noBody = ClientRequest(
            path: "/3/device/\(device.token)",
            headers: [
                HTTP2HeaderField("authorization", "bearer \(try emulator.providerToken())"),
                HTTP2HeaderField("apns-topic", EmulatorProcess.bundleID),
            ])
        let get = ClientRequest(method: "GET", path: "/3/device/\(device.token)")
        let big = try emulator.push(device.token, payload: #"{"aps":{"alert":""# + String(repeating: "x", count: 5000) + #""}}"#)
        let results = try connection.send([bad.request, duplicate.request, noBody, get, big.request]).map(APNsResult.init)
        #expect(results.map(\.status) == [400, 400, 400, 405, 413])
        #expect(results.map(\.reason) == ["BadPriority", "DuplicateHeaders", "PayloadEmpty", "MethodNotAllowed", "PayloadTooLarge"])
        // The same connection still answers.
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
        // A HEAD gets its 405 without content (with one, the client resets the stream).
        let head = try connection.send(ClientRequest(method: "HEAD", path: "/3/device/\(device.token)"))
        #expect(head.status == 405 && head.body.isEmpty && head.headers.contains { $0.name == "apns-id" })
    }

    @Test func serverSettingsAreApplesAndTheStreamLimitRisesAfterTheFirstValidToken() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        // A request without a token: rejected, limit stays at 1.
        var unauthenticated = try emulator.push(device.token)
        unauthenticated.providerToken = nil
        #expect(APNsResult(try connection.send(unauthenticated.request)).reason == "MissingProviderToken")
        let first = try #require(connection.session.receivedSettings.first { !$0.isAck })
        func value(_ settings: HTTP2ReceivedSettings, _ id: Int32) -> UInt32? { settings.entries.first { $0.id == id }?.value }
        #expect(value(first, HTTP2Setting.maxConcurrentStreams) == 1)
        #expect(value(first, HTTP2Setting.headerTableSize) == 4096)
        #expect(value(first, HTTP2Setting.maxHeaderListSize) == 8000)
        #expect(connection.session.receivedSettings.filter { !$0.isAck }.count == 1)

        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
        try connection.pump(timeoutMilliseconds: 2000) { connection.session.remoteMaxConcurrentStreams == 1000 }
        let later = connection.session.receivedSettings.filter { !$0.isAck }
        #expect(later.count == 2)
        #expect(value(later[1], HTTP2Setting.maxConcurrentStreams) == 1000)
    }

    @Test func aBurstSentBeforeReadingSettingsIsServed() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        let push = try emulator.push(device.token).request
        // 100 streams queued before a single byte from the server has been read.
        let ids = try (0..<100).map { _ in try connection.submit(push) }
        try connection.waitFor(streams: ids)
        let results = ids.map { APNsResult(connection.response(for: $0)!) }
        #expect(results.allSatisfy { $0.status == 200 })
        #expect(results.allSatisfy { $0.response.resetErrorCode == nil })
        #expect(try emulator.notifications(token: device.token).count == 100)
    }

    @Test func pingsAreAcknowledged() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let connection = try emulator.connect()
        for _ in 0..<5 { _ = connection.session.submitPing() }
        try connection.pump(timeoutMilliseconds: 3000) { connection.session.pingAcksReceived >= 5 }
        #expect(connection.session.pingAcksReceived == 5)
    }

    @Test func idleConnectionsGetGoAwayIdleTimeout() throws {
        let emulator = try EmulatorProcess(["--idle-timeout", "1"])
        let connection = try emulator.connect()
        try connection.pump(timeoutMilliseconds: 5000) { connection.session.goAway != nil }
        let goAway = try #require(connection.session.goAway)
        #expect(goAway.errorCode == HTTP2ErrorCode.noError)
        #expect(String(decoding: goAway.debugData, as: UTF8.self) == #"{"reason":"IdleTimeout"}"#)
    }

    @Test func priorKnowledgeOverTLSWithoutALPN() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect(alpn: false)
        #expect(connection.negotiatedALPN == nil)
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
    }

    @Test func cleartextH2CListeners() throws {
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0", "--h2c-production-listen", "127.0.0.1:0"])
        let sandbox = try emulator.createDevice()
        let production = try emulator.createDevice(environment: "production")
        #expect(APNsResult(try emulator.connect("h2cSandbox").send(try emulator.push(sandbox.token).request)).status == 200)
        #expect(APNsResult(try emulator.connect("h2cProduction").send(try emulator.push(production.token).request)).status == 200)
        // The environments are kept apart on h2c too.
        let crossed = APNsResult(try emulator.connect("h2cProduction").send(try emulator.push(sandbox.token).request))
        #expect(crossed.reason == "BadDeviceToken")
    }

    @Test func appleHostNamesChooseTheEnvironment() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let production = try emulator.createDevice(environment: "production")
        // SNI api.push.apple.com on the sandbox listener → production.
        let bySNI = try emulator.connect("sandbox", serverName: "api.push.apple.com")
        #expect(APNsResult(try bySNI.send(try emulator.push(production.token).request)).status == 200)
        // :authority api.push.apple.com on the sandbox listener → production.
        var request = try emulator.push(production.token).request
        request.authority = "api.push.apple.com:443"
        #expect(APNsResult(try emulator.connect().send(request)).status == 200)
        // Without either, the sandbox listener rejects a production token.
        #expect(APNsResult(try emulator.connect().send(try emulator.push(production.token).request)).reason == "BadDeviceToken")
    }

    @Test func tokenFromAnotherTeamOnABoundConnectionIsRefused() throws {
        let otherKey = ProviderSigningKey(teamID: "OTHERTEAM1", keyID: "OTHERKEY01", privateKey: try .generate())
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("other-\(UUID().uuidString).p8").path
        try otherKey.privateKey.pkcs8PEM.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let emulator = try EmulatorProcess(["--auth-key", "OTHERTEAM1:OTHERKEY01:\(path)", "--app", "OTHERTEAM1:com.other.app"])
        let device = try emulator.createDevice()
        let other = try emulator.createDevice(bundleID: "com.other.app")
        let now = Int64(Date().timeIntervalSince1970)

        let connection = try emulator.connect()
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
        var push = try emulator.push(other.token, topic: "com.other.app")
        push.providerToken = try otherKey.token(issuedAt: now)
        // Bound to TEAM123456: another team's valid token is refused on this connection…
        #expect(APNsResult(try connection.send(push.request)).reason == "InvalidProviderToken")
        // …and accepted on a connection of its own.
        #expect(APNsResult(try emulator.connect().send(push.request)).status == 200)
        // A team's key may not push to another team's bundle.
        var crossTeam = try emulator.push(other.token, topic: "com.other.app")
        crossTeam.providerToken = try emulator.providerToken()
        #expect(APNsResult(try emulator.connect().send(crossTeam.request)).reason == "TopicDisallowed")
    }

    @Test func newTokenWithinTwentyMinutesOnTheSameConnection() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        let now = Int64(Date().timeIntervalSince1970)
        var first = try emulator.push(device.token)
        first.providerToken = try emulator.key.token(issuedAt: now - 10)
        #expect(APNsResult(try connection.send(first.request)).status == 200)
        var second = try emulator.push(device.token)
        second.providerToken = try emulator.key.token(issuedAt: now)
        let result = APNsResult(try connection.send(second.request))
        #expect(result.status == 429)
        #expect(result.reason == "TooManyProviderTokenUpdates")
        // A new connection may use the new token.
        #expect(APNsResult(try emulator.connect().send(second.request)).status == 200)
    }

    @Test func expiredProviderToken() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        var push = try emulator.push(device.token)
        push.providerToken = try emulator.key.token(issuedAt: Int64(Date().timeIntervalSince1970) - 3700)
        let result = APNsResult(try emulator.connect().send(push.request))
        #expect(result.status == 403)
        #expect(result.reason == "ExpiredProviderToken")
    }
}

@Suite("Provider keys over the wire")
struct ProviderKeyTests {
    @Test(.requires(.openssl)) func derSignatureFromOpenSSLIsAccepted() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        // Apple's command-line recipe: openssl dgst -sha256 -sign (DER signature).
        let header = Base64URL.encode(Array(#"{"alg":"ES256","kid":"\#(EmulatorProcess.keyID)"}"#.utf8))
        let claims = Base64URL.encode(Array(#"{"iss":"\#(EmulatorProcess.teamID)","iat":\#(Int64(Date().timeIntervalSince1970))}"#.utf8))
        let input = emulator.directory + "/input.txt"
        try "\(header).\(claims)".write(toFile: input, atomically: true, encoding: .utf8)
        let openssl = try #require(ExternalTool.openssl.path)
        let signed = try run(openssl, ["dgst", "-sha256", "-sign", emulator.keyPath, "-out", emulator.directory + "/sig.der", input])
        #expect(signed.status == 0, "\(signed.err)")
        let signature = try #require(FileManager.default.contents(atPath: emulator.directory + "/sig.der"))
        #expect(signature.count != 64, "a DER signature, not raw r||s")
        var push = try emulator.push(device.token)
        push.providerToken = "\(header).\(claims).\(Base64URL.encode(Array(signature)))"
        #expect(APNsResult(try emulator.connect().send(push.request)).status == 200)
    }

    @Test func restrictedKeysGetApplesReasons() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keys-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let production = ProviderSigningKey(teamID: EmulatorProcess.teamID, keyID: "PRODKEY001", privateKey: try .generate())
        let topicKey = ProviderSigningKey(teamID: EmulatorProcess.teamID, keyID: "TOPICKEY01", privateKey: try .generate())
        try production.privateKey.pkcs8PEM.write(toFile: directory + "/prod.p8", atomically: true, encoding: .utf8)
        // A PEM public key works as well as the .p8.
        try topicKey.privateKey.publicKey.pem.write(toFile: directory + "/topic.pem", atomically: true, encoding: .utf8)
        let emulator = try EmulatorProcess([
            "--auth-key", "\(EmulatorProcess.teamID):PRODKEY001:\(directory)/prod.p8?environment=production",
            "--auth-key", "\(EmulatorProcess.teamID):TOPICKEY01:\(directory)/topic.pem?topics=com.example.other",
            "--app", "\(EmulatorProcess.teamID):com.example.other",
        ])
        let sandboxDevice = try emulator.createDevice()
        let now = Int64(Date().timeIntervalSince1970)

        var wrongEnvironment = try emulator.push(sandboxDevice.token)
        wrongEnvironment.providerToken = try production.token(issuedAt: now)
        let env = APNsResult(try emulator.connect().send(wrongEnvironment.request))
        #expect(env.status == 403)
        #expect(env.reason == "BadEnvironmentKeyIdInToken")

        var outsideTopics = try emulator.push(sandboxDevice.token)
        outsideTopics.providerToken = try topicKey.token(issuedAt: now)
        let topic = APNsResult(try emulator.connect().send(outsideTopics.request))
        #expect(topic.status == 400)
        #expect(topic.reason == "TopicDisallowed")

        let other = try emulator.createDevice(bundleID: "com.example.other")
        var inside = try emulator.push(other.token, topic: "com.example.other")
        inside.providerToken = try topicKey.token(issuedAt: now)
        #expect(APNsResult(try emulator.connect().send(inside.request)).status == 200)
    }
}

@Suite("Robustness")
struct RobustnessTests {
    /// Garbage on every listener: the server answers or hangs up, and keeps serving.
    @Test func garbageNeverWedgesTheServer() throws {
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"])
        let device = try emulator.createDevice()
        for listener in ["sandbox", "h2cSandbox", "admin", "device"] {
            let fd = try Socket.connect(to: try emulator.address(listener))
            Socket.setTimeouts(fd, milliseconds: 2000)
            var junk = [UInt8](repeating: 0, count: 4096)
            for i in junk.indices { junk[i] = UInt8(truncatingIfNeeded: i &* 131 &+ 7) }
            _ = junk.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            var buffer = [UInt8](repeating: 0, count: 4096)
            _ = recv(fd, &buffer, buffer.count, 0)
            close(fd)
        }
        // Half-open connections that never speak do not block others.
        let idle = try Socket.connect(to: try emulator.address("sandbox"))
        defer { close(idle) }
        #expect(APNsResult(try emulator.connect().send(try emulator.push(device.token).request)).status == 200)
        #expect(try emulator.admin("GET", "/livez").status == 200)
    }
}

@Suite("Shutdown")
struct ShutdownTests {
    @Test func sigtermSendsGoAwayShutdownAndExits() throws {
        let emulator = try EmulatorProcess()
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
        emulator.process.terminate()
        try connection.pump(timeoutMilliseconds: 3000) { connection.session.goAway != nil }
        #expect(String(decoding: connection.session.goAway?.debugData ?? [], as: UTF8.self) == #"{"reason":"Shutdown"}"#)
        emulator.process.waitUntilExit()
        #expect(emulator.process.terminationStatus == 0)
        #expect(!FileManager.default.fileExists(atPath: emulator.directory + "/ready.json"), "a stopped emulator leaves no ready file")
    }

    /// A request still arriving when the emulator stops is refused as not processed
    /// (REFUSED_STREAM, safe to send again), not left unanswered under the GOAWAY's last
    /// stream; the connection then closes.
    @Test func aRequestStillArrivingAtShutdownIsRefusedAsNotProcessed() throws {
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"])
        let device = try emulator.createDevice()
        let block = try Self.pushHeaderBlock(emulator, device.token)
        let payload = Array(#"{"aps":{"alert":"hi"}}"#.utf8)
        // Stream 1 complete; stream 3 its headers and one byte of its body.
        let wire =
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, [])
            + RawHTTP2.frame(type: 0x1, flags: 0x4, stream: 1, block) + RawHTTP2.frame(type: 0x0, flags: 0x1, stream: 1, payload)
            + RawHTTP2.frame(type: 0x1, flags: 0x4, stream: 3, block) + RawHTTP2.frame(type: 0x0, flags: 0, stream: 3, [0x7b])
        var stopped = false
        let frames = try RawHTTP2.exchange(
            try emulator.address("h2cSandbox"), wire,
            until: { frames in
                // Once stream 1 is answered, stop the emulator; then read until it closes.
                if !stopped, frames.contains(where: { $0.type == 0x1 && $0.streamID == 1 }) {
                    stopped = true
                    emulator.process.terminate()
                }
                return false
            })
        #expect(stopped, "stream 1 was answered")
        let reset = try #require(frames.first { $0.type == 0x3 }, "no RST_STREAM")
        #expect(reset.streamID == 3)
        #expect(reset.payload == [0, 0, 0, 7], "REFUSED_STREAM")
        let goAway = try #require(frames.first { $0.type == 0x7 }, "no GOAWAY")
        #expect(String(decoding: goAway.payload.dropFirst(8), as: UTF8.self) == #"{"reason":"Shutdown"}"#)
        emulator.process.waitUntilExit()
        #expect(emulator.process.terminationStatus == 0)
    }

    /// A client still busy with its answers when the emulator stops (it writes before it reads
    /// them, as the JDK's HttpClient does under a burst) finds the connection open, read, and
    /// then ended with FIN after the GOAWAY. The process exited 300 ms after SIGTERM before: the
    /// client's next write met a closed socket, and the JDK failed delivered pushes with
    /// `Broken pipe`.
    @Test func aClientStillBusyAtShutdownIsNotResetUnderIt() throws {
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"])
        let device = try emulator.createDevice()
        let fd = try Socket.connect(to: try emulator.address("h2cSandbox"))
        defer { close(fd) }
        Socket.setTimeouts(fd, milliseconds: 5_000)
        func send(_ bytes: [UInt8]) -> Int { bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }
        let request =
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, [])
            + RawHTTP2.frame(type: 0x1, flags: 0x4, stream: 1, try Self.pushHeaderBlock(emulator, device.token))
            + RawHTTP2.frame(type: 0x0, flags: 0x1, stream: 1, Array(#"{"aps":{"alert":"hi"}}"#.utf8))
        #expect(send(request) == request.count)
        #expect(try eventually(5) { try emulator.notifications(token: device.token).count == 1 }, "the push was journaled")
        emulator.process.terminate()
        // Busy for 500 ms (nothing read), then two writes: on a socket closed under it the first
        // would draw a reset and the second fail (EPIPE, the JDK's "Broken pipe").
        usleep(500_000)
        let ping = RawHTTP2.frame(type: 0x6, flags: 0, stream: 0, [1, 2, 3, 4, 5, 6, 7, 8])
        #expect(send(ping) == ping.count)
        usleep(50_000)
        #expect(send(ping) == ping.count, "the second write failed: errno \(errno)")
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        var end = 0
        repeat {
            end = recv(fd, &buffer, buffer.count, 0)
            if end > 0 { received.append(contentsOf: buffer[0..<end]) }
        } while end > 0
        #expect(end == 0, "the connection ended with FIN, not a reset (errno \(errno))")
        let frames = RawHTTP2.frames(received)
        #expect(frames.contains { $0.type == 0x1 && $0.streamID == 1 }, "the answer")
        #expect(frames.contains { $0.type == 0x7 }, "the GOAWAY")
        emulator.process.waitUntilExit()
        #expect(emulator.process.terminationStatus == 0)
    }

    /// An answer held back by `--response-latency` (its push journaled, 200) goes out when the
    /// emulator stops, before the connection closes: a provider left without it would send the
    /// push again.
    @Test func anAnswerHeldBackIsSentAtShutdown() throws {
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0", "--response-latency", "5000"])
        let device = try emulator.createDevice()
        let wire =
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, [])
            + RawHTTP2.frame(type: 0x1, flags: 0x4, stream: 1, try Self.pushHeaderBlock(emulator, device.token))
            + RawHTTP2.frame(type: 0x0, flags: 0x1, stream: 1, Array(#"{"aps":{"alert":"hi"}}"#.utf8))
        var stopped = false
        let frames = try RawHTTP2.exchange(
            try emulator.address("h2cSandbox"), wire,
            until: { _ in
                // Once the push is journaled (its answer held for 5 s), stop the emulator.
                if !stopped {
                    stopped = (try? eventually(4) { try emulator.notifications(token: device.token).count == 1 }) == true
                    emulator.process.terminate()
                }
                return false
            })
        #expect(stopped, "the push was journaled")
        let answer = try #require(frames.first { $0.type == 0x1 && $0.streamID == 1 }, "no answer on stream 1")
        #expect(answer.payload.first == 0x88, ":status 200 (HPACK static index 8)")
        // Before the GOAWAY, which covers it: python-h2 (httpx, aioapns) takes no frame after one.
        let answerAt = try #require(frames.firstIndex { $0.type == 0x1 && $0.streamID == 1 })
        let goAwayAt = try #require(frames.firstIndex { $0.type == 0x7 }, "no GOAWAY")
        #expect(answerAt < goAwayAt, "\(frames.map { "\($0.type)/\($0.streamID)" })")
        #expect(String(decoding: frames[goAwayAt].payload.dropFirst(8), as: UTF8.self) == #"{"reason":"Shutdown"}"#)
        emulator.process.waitUntilExit()
        #expect(emulator.process.terminationStatus == 0)
    }

    /// A push's header block, HPACK without indexing or Huffman: POST, http, its path, Apple's
    /// sandbox host, a provider token and the app's topic.
    static func pushHeaderBlock(_ emulator: EmulatorProcess, _ token: String) throws -> [UInt8] {
        var block: [UInt8] = [0x83, 0x86]
        block += RawHTTP2.integer(4, prefixBits: 4, flags: 0) + RawHTTP2.string("/3/device/\(token)")
        block += RawHTTP2.integer(1, prefixBits: 4, flags: 0) + RawHTTP2.string("api.sandbox.push.apple.com")
        block += RawHTTP2.integer(23, prefixBits: 4, flags: 0) + RawHTTP2.string("bearer \(try emulator.providerToken())")
        block += RawHTTP2.integer(0, prefixBits: 4, flags: 0) + RawHTTP2.string("apns-topic") + RawHTTP2.string(EmulatorProcess.bundleID)
        return block
    }
}
