import APNsCore
import Foundation
import HTTP2
import MonotonicClock
import Networking
import ProviderClient
import Testing
import TestSupport

@Suite("Apple's behaviour under load (--profile realistic and its parts), on the wire")
struct RealisticLoadTests {
    func value(_ settings: HTTP2ReceivedSettings, _ id: Int32) -> UInt32? { settings.entries.first { $0.id == id }?.value }

    /// Two devices; pushes to the second are answered ExpiredProviderToken (a fault rule stands
    /// in for a provider token that aged out, which a test cannot wait an hour for).
    func tokens(_ emulator: EmulatorProcess) throws -> (good: (deviceID: String, token: String), expired: (deviceID: String, token: String)) {
        let good = try emulator.createDevice()
        let expired = try emulator.createDevice()
        let rule = try emulator.admin(
            "POST", "/api/v1/faults",
            body: [
                "match": ["token": .string(expired.token)], "action": ["status": 403, "reason": "ExpiredProviderToken"],
            ])
        #expect(rule.status == 201)
        return (good, expired)
    }

    /// The limit seen in each SETTINGS frame from the server, in order.
    func limits(_ connection: HTTP2ClientConnection) -> [UInt32] {
        connection.session.receivedSettings.filter { !$0.isAck }.compactMap { value($0, HTTP2Setting.maxConcurrentStreams) }
    }

    @Test func expiredProviderTokenDropsTheStreamLimitAndRefusesWhatIsInFlight() throws {
        let emulator = try EmulatorProcess(["--stream-limit-drop", "on"], inProcess: true)
        let (good, expired) = try tokens(emulator)
        let connection = try emulator.connect()
        #expect(APNsResult(try connection.send(try emulator.push(good.token).request)).status == 200)
        try connection.pump(timeoutMilliseconds: 2000) { connection.session.remoteMaxConcurrentStreams == 1000 }
        #expect(limits(connection) == [1, 1000])

        // One write: the expiring request, then nine more sent before the client could see
        // the new limit.
        let first = try connection.submit(try emulator.push(expired.token).request)
        let rest = try (0..<9).map { _ in try connection.submit(try emulator.push(good.token).request) }
        try connection.waitFor(streams: [first] + rest)
        let rejected = APNsResult(connection.response(for: first)!)
        #expect(rejected.status == 403 && rejected.reason == "ExpiredProviderToken")
        let others = rest.map { connection.response(for: $0)! }
        let refused = others.filter { $0.resetErrorCode == HTTP2ErrorCode.refusedStream }
        #expect(!refused.isEmpty, "streams in flight are refused with RST_STREAM REFUSED_STREAM")
        #expect(others.allSatisfy { $0.resetErrorCode == HTTP2ErrorCode.refusedStream || $0.status == 200 })
        #expect(limits(connection) == [1, 1000, 1], "SETTINGS MAX_CONCURRENT_STREAMS 1 after ExpiredProviderToken")
        let journal = try emulator.notifications(token: good.token)
        #expect(journal.filter { $0["explanation"]?.stringValue?.contains("REFUSED_STREAM") == true }.count == refused.count)

        // A success brings the limit back.
        #expect(APNsResult(try connection.send(try emulator.push(good.token).request)).status == 200)
        try connection.pump(timeoutMilliseconds: 2000) { connection.session.remoteMaxConcurrentStreams == 1000 }
        #expect(limits(connection) == [1, 1000, 1, 1000])
    }

    /// An expired token as a connection's first request: the limit is 1 already, so nothing is
    /// sent for the drop, and the first success raises it once.
    @Test func aDropBeforeTheFirstRaiseSendsNoRedundantSettings() throws {
        let emulator = try EmulatorProcess(["--stream-limit-drop", "on"], inProcess: true)
        let (good, expired) = try tokens(emulator)
        let connection = try emulator.connect()
        #expect(APNsResult(try connection.send(try emulator.push(expired.token).request)).reason == "ExpiredProviderToken")
        #expect(APNsResult(try connection.send(try emulator.push(good.token).request)).status == 200)
        try connection.pump(timeoutMilliseconds: 2000) { connection.session.remoteMaxConcurrentStreams == 1000 }
        try? connection.pump(timeoutMilliseconds: 200) { false }  // any SETTINGS still on its way
        #expect(limits(connection) == [1, 1000])
    }

    @Test func withoutTheFlagNothingDrops() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let (good, expired) = try tokens(emulator)
        let connection = try emulator.connect()
        #expect(APNsResult(try connection.send(try emulator.push(good.token).request)).status == 200)
        let first = try connection.submit(try emulator.push(expired.token).request)
        let rest = try (0..<9).map { _ in try connection.submit(try emulator.push(good.token).request) }
        try connection.waitFor(streams: [first] + rest)
        #expect(rest.allSatisfy { connection.response(for: $0)?.status == 200 })
        #expect(!limits(connection).dropFirst(2).contains(1))
    }

    @Test func aConnectionRateCapPacesAnswers() throws {
        let emulator = try EmulatorProcess(["--connection-rate", "100", "--response-latency", "5"], inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        _ = try connection.send(try emulator.push(device.token).request)
        let started = Monotonic.nowMilliseconds()
        let ids = try (0..<50).map { _ in try connection.submit(try emulator.push(device.token).request) }
        try connection.waitFor(streams: ids, timeoutMilliseconds: 20_000)
        let elapsed = Monotonic.nowMilliseconds() - started
        #expect(ids.allSatisfy { connection.response(for: $0)?.status == 200 })
        // 50 answers at 100 per second cannot all come back in much under half a second.
        #expect(elapsed >= 400, "paced: \(elapsed) ms for 50 answers at 100/s")
    }

    @Test func connectionChurnClosesNewConnectionsForTheRestOfTheWindow() throws {
        let emulator = try EmulatorProcess(["--connection-churn", "3/60"], inProcess: true)
        let device = try emulator.createDevice()
        for _ in 0..<3 {
            #expect(APNsResult(try emulator.connect().send(try emulator.push(device.token).request)).status == 200)
        }
        #expect(throws: (any Error).self) { _ = try emulator.connect().send(try emulator.push(device.token).request) }
        #expect(try emulator.metric("apns_emulator_connections_refused_total", labels: #"kind="churn""#) >= 1)
    }

    @Test func theRealisticProfileTurnsThePartsOnAndFlagsWin() throws {
        let emulator = try EmulatorProcess(
            [
                "--profile", "realistic", "--connection-churn", "1000/1", "--connection-rate", "100000",
                "--response-latency", "0", "--response-jitter", "0",
            ], inProcess: true)
        let (good, expired) = try tokens(emulator)
        let connection = try emulator.connect()
        #expect(APNsResult(try connection.send(try emulator.push(good.token).request)).status == 200)
        #expect(APNsResult(try connection.send(try emulator.push(expired.token).request)).status == 403)
        try connection.pump(timeoutMilliseconds: 2000) { connection.session.remoteMaxConcurrentStreams == 1 }
        #expect(limits(connection).last == 1, "the profile turned the stream-limit drop on")
        let bad = try run(EmulatorProcess.binary, ["serve", "--profile", "fast"], timeout: 10)
        #expect(bad.status == 2 && bad.err.contains("not one of default, realistic"))
    }
}
