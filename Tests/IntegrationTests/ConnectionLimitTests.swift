import APNsCore
import Foundation
import Glibc
import Networking
import ProviderClient
import Synchronization
import Testing
import TestSupport

/// `--max-connections` and running out of file descriptors, against the real binary.
@Suite("Connection limits")
struct ConnectionLimitTests {
    /// A plain TCP connection to the device listener that answers `ping` (before `hello`).
    final class DeviceSocket {
        let fd: Int32
        init(_ address: HostPort) throws {
            fd = try Socket.connect(to: address)
            Socket.setTimeouts(fd, milliseconds: 5000)
        }
        deinit { close(fd) }

        /// True when the emulator answers a ping on this connection; false when it closed it.
        func isServed() -> Bool {
            let ping = Array("{\"type\":\"ping\"}\n".utf8)
            _ = ping.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = recv(fd, &buffer, buffer.count, 0)
            return n > 0 && String(decoding: buffer[0..<n], as: UTF8.self).contains("pong")
        }
    }

    static func metric(_ emulator: EmulatorProcess, _ line: String) throws -> Double? {
        let text = try emulator.admin("GET", "/metrics").raw
        guard let found = text.split(separator: "\n").first(where: { $0.hasPrefix(line + " ") }) else { return nil }
        return Double(found.split(separator: " ").last ?? "")
    }

    @Test func connectionsBeyondTheLimitAreClosedAndCounted() throws {
        let emulator = try EmulatorProcess(["--max-connections", "2"])
        let device = try emulator.address("device")
        var first: DeviceSocket? = try DeviceSocket(device)
        let second = try DeviceSocket(device)
        #expect(first?.isServed() == true)
        #expect(second.isServed())
        let third = try DeviceSocket(device)
        #expect(!third.isServed(), "the third device connection is closed on arrival")
        #expect(try Self.metric(emulator, #"apns_emulator_connections_refused_total{kind="device"}"#) == 1)

        // Providers have their own budget.
        let token = try emulator.createDevice().token
        let a = try emulator.connect()
        let b = try emulator.connect()
        #expect(APNsResult(try a.send(try emulator.push(token).request)).status == 200)
        #expect(APNsResult(try b.send(try emulator.push(token).request)).status == 200)
        #expect(throws: (any Error).self, "the third provider connection is closed before its handshake ends") {
            _ = try emulator.connect()
        }
        #expect(try Self.metric(emulator, #"apns_emulator_connections_refused_total{kind="provider"}"#) == 1)

        // A closed connection frees its place.
        b.close()
        first = nil
        withExtendedLifetime(second) {}
        // The emulator frees the place when it has seen the close: try until a connection is served.
        #expect(
            try eventually { (try? DeviceSocket(device))?.isServed() == true },
            "a place freed by a closed device connection is usable again")
        // The provider's place too, once the emulator has seen b close (a busy machine may take a while).
        let served = try eventually {
            guard let connection = try? emulator.connect() else { return false }
            return APNsResult(try connection.send(try emulator.push(token).request)).status == 200
        }
        #expect(served, "a place freed by a closed provider connection is usable again")
    }

    /// Connections that open (TLS done, or TCP for h2c) and never send the HTTP/2 preface are
    /// closed after 10 s, as an unfinished handshake is, not after the hour-long idle timeout:
    /// silent sockets take every place only for a moment.
    @Test func connectionsThatNeverSendThePrefaceAreClosedSoon() throws {
        let emulator = try EmulatorProcess(["--max-connections", "4", "--h2c-sandbox-listen", "127.0.0.1:0"])
        let token = try emulator.createDevice().token
        let address = try emulator.address("h2cSandbox")
        let started = Date()
        let silent = try (0..<4).map { _ in try Socket.connect(to: address) }
        defer { silent.forEach { close($0) } }
        for fd in silent { Socket.setTimeouts(fd, milliseconds: 20_000) }
        #expect(throws: (any Error).self, "every place is taken") { _ = try emulator.connect() }
        // Each silent connection is closed by the emulator (recv sees the end, or a reset).
        var buffer = [UInt8](repeating: 0, count: 4096)
        for fd in silent {
            var n = recv(fd, &buffer, buffer.count, 0)
            while n > 0 { n = recv(fd, &buffer, buffer.count, 0) }  // the emulator's SETTINGS, then the end
        }
        let waited = Date().timeIntervalSince(started)
        #expect(waited > 9 && waited < 15, "closed after \(waited) s")
        #expect(try eventually(5) { (try? emulator.connect().send(try emulator.push(token).request)).map { APNsResult($0).status } == 200 })
        #expect(emulator.stderr.contains("no HTTP/2 connection preface within 10 s"))
    }

    /// With the descriptor table full, the listener stops accepting for a moment instead of
    /// spinning on `accept` (level-triggered epoll reports the waiting connection at once,
    /// again and again), says so once, and serves again when descriptors are free.
    @Test func runningOutOfDescriptorsPausesAcceptingWithoutSpinning() throws {
        let prlimit = try #require(which("prlimit"), "prlimit (util-linux) sets the emulator's descriptor limit")
        let emulator = try EmulatorProcess(["--threads", "1"], launcher: [prlimit, "--nofile=64:64", "--"])
        let device = try emulator.address("device")
        var sockets: [Int32] = []
        defer { for fd in sockets { close(fd) } }
        for index in 0..<120 {
            // Connects complete in the kernel's backlog even when the emulator cannot accept.
            guard let fd = try? Socket.connect(to: device) else { break }
            sockets.append(fd)
            // A hello keeps each connection the emulator accepts open (no hello timeout), so the
            // descriptor table stays full and connections stay waiting for as long as the test needs.
            let hello = Array(#"{"type":"hello","version":1,"deviceId":"fd-\#(index)"}"#.utf8) + [0x0A]
            _ = hello.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        #expect(sockets.count == 120)
        try #require(try eventually { emulator.stderr.contains("out of file descriptors") }, "\(emulator.stderr)")

        // Held at the limit, the emulator goes to sleep between its attempts to accept: every
        // thread is seen sleeping at once. A listener spinning on `accept` keeps its loop's
        // thread running (level-triggered epoll returns at once, again and again), so that
        // never happens.
        var states: [String] = []
        #expect(
            try eventually {
                states = Self.threadStates(emulator)
                return emulator.process.isRunning && !states.isEmpty && !states.contains("R")
            }, "the emulator's threads never all slept while out of descriptors: \(states)")
        #expect(emulator.stderr.components(separatedBy: "out of file descriptors").count - 1 == 1, "said once")

        for fd in sockets { close(fd) }
        sockets = []
        #expect(try eventually { (try? DeviceSocket(device))?.isServed() == true }, "accepting resumes once descriptors are free")
        #expect((try Self.metric(emulator, "apns_emulator_accept_pauses_total") ?? 0) >= 1)
    }

    /// The scheduler state of each of the emulator's threads (from /proc): "R" running or
    /// runnable, "S" sleeping, and so on.
    static func threadStates(_ emulator: EmulatorProcess) -> [String] {
        let tasks = "/proc/\(emulator.process.processIdentifier)/task"
        let ids = (try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? []
        return ids.compactMap { id in
            guard let stat = try? String(contentsOfFile: "\(tasks)/\(id)/stat", encoding: .utf8),
                let paren = stat.lastIndex(of: ")")
            else { return nil }
            // The state is the first field after the command name (which is in parentheses).
            return stat[stat.index(after: paren)...].split(separator: " ").first.map(String.init)
        }
    }
}

@Suite("Fairness")
struct FairnessTests {
    /// One device connection floods tiny pings; an admin request made meanwhile is answered
    /// long before the flood has been worked through, on the same (single) event loop.
    @Test func aFloodOfTinyMessagesDoesNotHoldTheLoop() throws {
        let emulator = try EmulatorProcess(["--threads", "1"])
        let fd = try Socket.connect(to: try emulator.address("device"))
        defer { close(fd) }
        Socket.setTimeouts(fd, milliseconds: 60_000)
        let total = 100_000
        let pongs = Atomic<Int>(0)
        let reader = DispatchGroup()
        DispatchQueue.global().async(group: reader) {
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            while pongs.load(ordering: .relaxed) < total + 1 {
                let n = recv(fd, &buffer, buffer.count, 0)
                if n <= 0 { break }
                pongs.add(buffer[0..<n].reduce(0) { $0 + ($1 == 0x0A ? 1 : 0) }, ordering: .relaxed)
            }
        }
        // A hello first, so the connection is not closed for lacking one (10 s) while a slow
        // build (the sanitizers) works through the flood; its welcome is one more line.
        let hello = Array("{\"type\":\"hello\",\"deviceId\":\"flood\",\"apps\":[]}\n".utf8)
        let flood = hello + [UInt8](Array("{\"type\":\"ping\"}\n".utf8).repeated(total))
        DispatchQueue.global().async {
            var offset = 0
            while offset < flood.count {
                let n = flood[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if n <= 0 { return }
                offset += n
            }
        }
        // The flood is being worked on.
        try #require(try eventually(60) { pongs.load(ordering: .relaxed) > 0 })
        #expect(try emulator.admin("GET", "/livez").status == 200)
        let answeredAt = pongs.load(ordering: .relaxed)
        #expect(answeredAt < total / 2, "the admin request waited for \(answeredAt) of \(total) pings")
        _ = reader.wait(timeout: .now() + 120)
        #expect(pongs.load(ordering: .relaxed) == total + 1, "the welcome, and every ping answered in the end")
    }
}

extension Array {
    func repeated(_ count: Int) -> [Element] {
        var out: [Element] = []
        out.reserveCapacity(self.count * count)
        for _ in 0..<count { out += self }
        return out
    }
}
