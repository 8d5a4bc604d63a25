import Foundation
import HTTP2
import JSON
import ProviderClient
import Testing
import TestSupport

/// `--error-disconnect`: "APNs disconnects a provider connection with too many error
/// conditions, and sooner with certain ones such as BadDeviceToken; 410 is not an error
/// condition". Seen on the wire: the answer that went over the limit, then GOAWAY with its
/// reason, then the connection closes.
@Suite struct ErrorDisconnectTests {
    /// Sends pushes one after another on `connection` until GOAWAY comes or `count` are sent;
    /// the answers it got.
    static func pushUntilGoAway(_ connection: HTTP2ClientConnection, _ push: APNsPush, count: Int) throws -> [APNsResult] {
        var results: [APNsResult] = []
        for _ in 0..<count {
            guard connection.session.goAway == nil, !connection.isClosed else { break }
            results.append(APNsResult(try connection.send(push.request)))
            // The GOAWAY follows the answer that went over the limit; give it a moment to arrive.
            try? connection.pump(timeoutMilliseconds: 50) { connection.session.goAway != nil }
        }
        return results
    }

    static func goAwayReason(_ connection: HTTP2ClientConnection) -> String? {
        // The GOAWAY follows the last answer, maybe in a later read than it.
        try? connection.pump(timeoutMilliseconds: 3000) { connection.session.goAway != nil || connection.isClosed }
        guard let goAway = connection.session.goAway, let body = try? JSONValue.parse(goAway.debugData) else { return nil }
        return body["reason"]?.stringValue
    }

    /// After the GOAWAY the server closes the connection: reading ends.
    static func closedByServer(_ connection: HTTP2ClientConnection) -> Bool {
        try? connection.pump(timeoutMilliseconds: 3000) { connection.isClosed }
        return connection.isClosed
    }

    @Test func aConnectionWithTooManyErrorsEndsWithGoAwayAndTheReason() throws {
        let emulator = try EmulatorProcess(["--error-disconnect", "10/60"])
        let token = try emulator.createDevice().token

        // One point each: the tenth answer is sent, then GOAWAY {"reason":"BadTopic"}.
        let badTopic = try emulator.connect()
        var push = try emulator.push(token)
        push.topic = "com..example"
        let answers = try Self.pushUntilGoAway(badTopic, push, count: 15)
        #expect(answers.count == 10)
        #expect(answers.allSatisfy { $0.status == 400 && $0.reason == "BadTopic" })
        #expect(Self.goAwayReason(badTopic) == "BadTopic")
        #expect(badTopic.session.goAway?.errorCode == HTTP2ErrorCode.noError)
        #expect(Self.closedByServer(badTopic))

        // BadDeviceToken costs five: the second one ends the connection.
        let badToken = try emulator.connect()
        let unknown = try Self.pushUntilGoAway(badToken, try emulator.push(String(repeating: "ab", count: 32)), count: 5)
        #expect(unknown.map(\.reason) == ["BadDeviceToken", "BadDeviceToken"])
        #expect(Self.goAwayReason(badToken) == "BadDeviceToken")
        #expect(Self.closedByServer(badToken))

        // 410 is not an error condition: thirty of them leave the connection open, and it still works.
        let uninstalled = try emulator.createDevice()
        #expect(try emulator.admin("DELETE", "/api/v1/devices/\(uninstalled.deviceID)/apps/\(EmulatorProcess.bundleID)").status == 200)
        let gone = try emulator.connect()
        let unregistered = try Self.pushUntilGoAway(gone, try emulator.push(uninstalled.token), count: 30)
        #expect(unregistered.count == 30 && unregistered.allSatisfy { $0.status == 410 })
        #expect(gone.session.goAway == nil)
        #expect(APNsResult(try gone.send(try emulator.push(token).request)).status == 200)
        #expect(try emulator.metric("apns_emulator_connections_ended_for_errors_total") == 2)
    }

    /// The answer that goes over the limit is sent whole, HEADERS and DATA, before the GOAWAY:
    /// a GOAWAY between them left python-h2 clients unable to read the reason.
    @Test func theAnswerOverTheLimitIsWholeBeforeTheGoAway() throws {
        let emulator = try EmulatorProcess(["--error-disconnect", "1/60", "--h2c-sandbox-listen", "127.0.0.1:0"])
        let wire =
            RawHTTP2.clientPreface + RawHTTP2.frame(type: 0x4, flags: 0, stream: 0, [])
            + RawHTTP2.frame(type: 0x1, flags: 0x4, stream: 1, try ShutdownTests.pushHeaderBlock(emulator, String(repeating: "ab", count: 32)))
            + RawHTTP2.frame(type: 0x0, flags: 0x1, stream: 1, Array(#"{"aps":{"alert":"hi"}}"#.utf8))
        let frames = try RawHTTP2.exchange(try emulator.address("h2cSandbox"), wire) { frames in frames.contains { $0.type == 0x7 } }
        let data = try #require(frames.firstIndex { $0.type == 0x0 && $0.streamID == 1 }, "the answer's DATA")
        let goAway = try #require(frames.firstIndex { $0.type == 0x7 }, "the GOAWAY")
        #expect(data < goAway, "\(frames.map { ($0.type, $0.streamID) })")
        #expect(String(decoding: frames[data].payload, as: UTF8.self) == #"{"reason":"BadDeviceToken"}"#)
    }

    /// The streams received before the limit was crossed are answered before the GOAWAY:
    /// python-h2 (httpx, aioapns, kalyke-apns) read those sent after it as a protocol error.
    @Test(PythonH2.installed) func pythonH2ReadsEveryAnswerBeforeTheGoAway() throws {
        let emulator = try EmulatorProcess(["--error-disconnect", "10/60", "--h2c-sandbox-listen", "127.0.0.1:0"])
        // BadDeviceToken costs 5: the second push crosses the limit, the four sent with it
        // are answered all the same.
        let seen = try PythonH2.answerOrder(emulator, token: String(repeating: "ab", count: 32), count: 5)
        #expect(seen == Array(repeating: "answer 400", count: 6) + ["goaway", "eof"], "\(seen)")
    }

    /// An answer held back longer than the 10 s a GOAWAY waits for requests still arriving
    /// (a fault's `delayMs`; `--connection-rate` does the same) still goes out before the
    /// GOAWAY: the connection closed at 10 s, and the delivered push got no answer under a
    /// GOAWAY that claimed it.
    @Test func anAnswerHeldPastTenSecondsGoesOutBeforeTheGoAway() throws {
        let emulator = try EmulatorProcess(["--error-disconnect", "1/60"])
        let device = try emulator.createDevice()
        let rule: JSONValue = ["match": ["priority": 5], "action": ["delayMs": 11_000]]
        #expect(try emulator.admin("POST", "/api/v1/faults", body: rule).status == 201)
        let connection = try emulator.connect()
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
        var held = try emulator.push(device.token)
        held.priority = "5"
        let answers = try connection.send(
            [held.request, try emulator.push(String(repeating: "ab", count: 32)).request], timeoutMilliseconds: 20_000)
        #expect(answers.map { APNsResult($0).status } == [200, 400], "\(answers.map(\.status))")
        #expect(Self.goAwayReason(connection) == "BadDeviceToken")
        #expect(Self.closedByServer(connection))
    }

    /// Off by default: a connection may make as many errors as it likes.
    @Test func withoutTheOptionErrorsNeverEndAConnection() throws {
        let emulator = try EmulatorProcess()
        let connection = try emulator.connect()
        let answers = try Self.pushUntilGoAway(connection, try emulator.push(String(repeating: "ab", count: 32)), count: 40)
        #expect(answers.count == 40 && answers.allSatisfy { $0.reason == "BadDeviceToken" })
        #expect(connection.session.goAway == nil)
    }

    /// `--profile realistic` turns it on (50 points in 60 s): ten unknown tokens end a connection.
    @Test func theRealisticProfileDisconnectsAfterTenBadTokens() throws {
        let emulator = try EmulatorProcess(["--profile", "realistic"])
        let connection = try emulator.connect()
        let answers = try Self.pushUntilGoAway(connection, try emulator.push(String(repeating: "cd", count: 32)), count: 20)
        #expect(answers.count == 10)
        #expect(Self.goAwayReason(connection) == "BadDeviceToken")
    }
}
