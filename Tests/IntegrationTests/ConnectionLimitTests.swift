import APNsCore
import Foundation
import Glibc
import Networking
import ProviderClient
import Synchronization
import Testing

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
        var retried = false
        for _ in 0..<50 where !retried {
            retried = (try? DeviceSocket(device))?.isServed() == true
            if !retried { usleep(20_000) }
        }
        #expect(retried, "a place freed by a closed device connection is usable again")
        #expect(APNsResult(try emulator.connect().send(try emulator.push(token).request)).status == 200)
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
        for _ in 0..<120 {
            // Connects complete in the kernel's backlog even when the emulator cannot accept.
            guard let fd = try? Socket.connect(to: device) else { break }
            sockets.append(fd)
        }
        #expect(sockets.count == 120)
        try #require(try eventually { emulator.stderr.contains("out of file descriptors") }, "\(emulator.stderr)")

        // Held at the limit for two seconds: the emulator must be mostly idle, not spinning.
        let before = try Self.cpuTicks(emulator)
        usleep(2_000_000)
        let used = try Self.cpuTicks(emulator) - before
        let perSecond = Double(used) / 2 / Double(sysconf(Int32(_SC_CLK_TCK)))
        #expect(perSecond < 0.5, "the emulator used \(perSecond) CPU seconds per second while out of descriptors")
        #expect(emulator.stderr.components(separatedBy: "out of file descriptors").count - 1 == 1, "said once")

        for fd in sockets { close(fd) }
        sockets = []
        var served = false
        for _ in 0..<100 where !served {
            served = (try? DeviceSocket(device))?.isServed() == true
            if !served { usleep(50_000) }
        }
        #expect(served, "accepting resumes once descriptors are free")
        #expect((try Self.metric(emulator, "apns_emulator_accept_pauses_total") ?? 0) >= 1)
    }

    /// User + system CPU time of the emulator process, in clock ticks.
    static func cpuTicks(_ emulator: EmulatorProcess) throws -> Int {
        let stat = try String(contentsOfFile: "/proc/\(emulator.process.processIdentifier)/stat", encoding: .utf8)
        // Fields after the command name (which is in parentheses): utime is the 12th, stime the 13th.
        let fields = stat[stat.index(after: stat.lastIndex(of: ")")!)...].split(separator: " ")
        return Int(fields[11])! + Int(fields[12])!
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
            while pongs.load(ordering: .relaxed) < total {
                let n = recv(fd, &buffer, buffer.count, 0)
                if n <= 0 { break }
                pongs.add(buffer[0..<n].reduce(0) { $0 + ($1 == 0x0A ? 1 : 0) }, ordering: .relaxed)
            }
        }
        let flood = [UInt8](Array("{\"type\":\"ping\"}\n".utf8).repeated(total))
        DispatchQueue.global().async {
            var offset = 0
            while offset < flood.count {
                let n = flood[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if n <= 0 { return }
                offset += n
            }
        }
        while pongs.load(ordering: .relaxed) == 0 { usleep(1000) }  // the flood is being worked on
        #expect(try emulator.admin("GET", "/livez").status == 200)
        let answeredAt = pongs.load(ordering: .relaxed)
        #expect(answeredAt < total / 2, "the admin request waited for \(answeredAt) of \(total) pings")
        _ = reader.wait(timeout: .now() + 120)
        #expect(pongs.load(ordering: .relaxed) == total, "every ping is answered in the end")
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
