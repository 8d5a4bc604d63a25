import APNsCore
import DeviceClient
import Foundation
import Glibc
import HTTP2
import Locking
import ProviderClient
import Testing
import TestSupport

/// A state directory on a tmpfs of its own (root only: `mount -t tmpfs`), unmounted at the end.
final class SmallDisk {
    let path: String
    let ballast: String

    /// A tmpfs of `megabytes`, of which a file takes `ballastMegabytes` (deleted to free space).
    init?(megabytes: Int, ballastMegabytes: Int) throws {
        guard getuid() == 0 else { return nil }
        path = FileManager.default.temporaryDirectory.appendingPathComponent("apns-small-disk-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let mounted = try run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", path])
        guard mounted.status == 0 else {
            try? FileManager.default.removeItem(atPath: path)
            throw HarnessError("cannot mount a tmpfs: \(mounted.err)")
        }
        ballast = path + "/ballast"
        try Data(repeating: 0x42, count: ballastMegabytes << 20).write(to: URL(fileURLWithPath: ballast))
    }

    var stateDirectory: String { path + "/state" }

    func freeSpace() throws { try FileManager.default.removeItem(atPath: ballast) }

    deinit {
        _ = try? run("/bin/umount", ["-l", path])
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// What a provider saw while pushing through a failing store.
struct PushTally {
    var accepted: [String] = []
    var unavailable = 0
    var dropped = 0
    var other: [Int] = []
}

/// Pushes over one connection at a time, up to `window` in flight, reconnecting when the
/// emulator drops it, until `stop` says so or `seconds` pass.
func pushThroughFailures(
    _ emulator: EmulatorProcess, _ push: APNsPush, window: Int = 20, seconds: Double,
    stop: (PushTally) -> Bool
) -> PushTally {
    var tally = PushTally()
    let deadline = Date().addingTimeInterval(seconds)
    func count(_ result: APNsResult) {
        switch result.status {
        case 200: tally.accepted.append(result.apnsID ?? "")
        case 503: tally.unavailable += 1
        default: tally.other.append(result.status)
        }
    }
    while Date() < deadline && !stop(tally) {
        guard let connection = try? emulator.connect() else {
            usleep(50_000)
            continue
        }
        // One stream until the provider token is accepted, as at Apple.
        guard let first = try? connection.send(push.request) else {
            tally.dropped += 1
            continue
        }
        count(APNsResult(first))
        var inFlight = Set<Int32>()
        while Date() < deadline && !stop(tally) && !connection.isClosed {
            while inFlight.count < window, let id = try? connection.submit(push.request) { inFlight.insert(id) }
            do {
                try connection.pump(timeoutMilliseconds: 5000) {
                    var progress = false
                    for id in inFlight {
                        guard let response = connection.response(for: id) else { continue }
                        inFlight.remove(id)
                        progress = true
                        count(APNsResult(response))
                    }
                    return progress
                }
            } catch {
                break
            }
        }
        tally.dropped += inFlight.count
        if tally.unavailable > 0 { usleep(20_000) }  // a provider backs off after a 503
    }
    return tally
}

@Suite("A 200 is stored, also when the store fails (--state-dir on a full or unwritable disk)", .serialized)
struct StoreFailureTests {
    /// The state directory on a 4 MB tmpfs that fills up: providers get 503 (never a 200 that
    /// is not on disk), admin changes 503, /readyz 503 naming the directory and the error;
    /// once space is freed the emulator serves again by itself, and after a kill -9 every push
    /// it answered 200 and every device it answered 201 is there.
    @Test func aFullDiskRefusesHonestlyAndRecoversWithoutLosingAnything() throws {
        guard let disk = try SmallDisk(megabytes: 4, ballastMegabytes: 2) else {
            print("SKIPPED: mounting a tmpfs needs root; the file-size-limit test covers the same path")
            return
        }
        let flags = ["--state-dir", disk.stateDirectory, "--max-records", "100000", "--quiet"]
        let ports = try EmulatorProcess.restartablePorts()
        let first = try EmulatorProcess(flags + ports)
        let (_, token) = try first.createDevice()
        let push = try first.push(token, payload: #"{"aps":{"alert":"filling the disk"},"pad":"\#(String(repeating: "x", count: 600))"}"#)

        let full = pushThroughFailures(first, push, seconds: 60) { $0.unavailable >= 20 }
        print(
            "disk full: \(full.accepted.count) answered 200, \(full.unavailable) answered 503, \(full.dropped) unanswered (connection closed), other \(full.other)"
        )
        #expect(full.unavailable >= 20, "the full disk is noticed")
        #expect(full.accepted.count > 50)
        #expect(full.other.isEmpty)
        try checkRefusing(first, naming: disk.stateDirectory, error: "full")

        try disk.freeSpace()
        #expect(try eventually(15) { try first.admin("GET", "/readyz").status == 200 }, "serves again by itself")
        #expect(try first.metric("apns_emulator_state_up") == 1)
        #expect(try first.metric("apns_emulator_state_outages_total") == 1)
        let after = pushThroughFailures(first, push, seconds: 30) { $0.accepted.count >= 50 }
        #expect(after.unavailable == 0 && after.accepted.count >= 50)
        let (device, _) = try first.createDevice()

        first.crash()
        let second = try EmulatorProcess(flags + ports)
        let kept = Set(try second.notifications(token: token, limit: 100_000).compactMap { $0["apnsId"]?.stringValue })
        let answered = full.accepted + after.accepted
        let missing = answered.filter { !kept.contains($0) }
        print("after kill -9 and restart: \(kept.count) records, \(answered.count) answered 200, \(missing.count) missing")
        #expect(missing.isEmpty, "every 200 is on disk")
        #expect(try second.admin("GET", "/api/v1/devices/\(device)").status == 200, "the device answered 201 is kept")
    }

    /// A device waiting for pushes whose answers the full disk made the emulator drop is told
    /// `unavailable` and disconnected, as state.md says; reconnected once space is freed, it is
    /// given what was stored for it, and no record is left "sent to the device" without having
    /// gone (they read that until the ack timed out, 60 s later, and the device got nothing).
    @Test func aDeviceWhosePushesTheFullDiskDroppedIsToldSo() throws {
        guard let disk = try SmallDisk(megabytes: 4, ballastMegabytes: 2) else {
            print("SKIPPED: mounting a tmpfs needs root")
            return
        }
        let emulator = try EmulatorProcess(["--state-dir", disk.stateDirectory, "--max-records", "100000", "--quiet"])
        let app = DeviceApp(bundleID: EmulatorProcess.bundleID, environment: .sandbox)
        let phone = DeviceReader(SimulatedDevice(address: try emulator.address("device"), deviceID: "full-disk-phone", apps: [app]))
        try phone.device.connect()
        let token = try #require(phone.device.token(for: EmulatorProcess.bundleID))
        let push = try emulator.push(token, payload: #"{"aps":{"alert":"filling the disk"},"pad":"\#(String(repeating: "x", count: 600))"}"#)
        phone.start()
        // In bursts, with a pause for the device's acks to be committed: the commit that fails
        // then holds pushes alone, and nothing of the device's own.
        var dropped = 0
        var unavailable = 0
        let deadline = Date().addingTimeInterval(60)
        while dropped == 0 || unavailable == 0, Date() < deadline {
            let connection = try emulator.connect()
            var streams: [Int32] = []
            for _ in 0..<20 { streams.append(try connection.submit(push.request)) }
            try? connection.pump(timeoutMilliseconds: 5000) { streams.allSatisfy { connection.response(for: $0) != nil } }
            for id in streams {
                if let response = connection.response(for: id) {
                    if response.status == 503 { unavailable += 1 }
                } else {
                    dropped += 1
                }
            }
            connection.close()
            usleep(300_000)
        }
        #expect(unavailable > 0, "the full disk is noticed")
        #expect(dropped > 0, "answers were waiting for the commit that failed")
        #expect(try eventually(10) { phone.errors.withLock { $0 }.contains("unavailable") }, "the device is told")
        phone.stop()
        #expect(!phone.device.isConnected)

        try disk.freeSpace()
        #expect(try eventually(15) { try emulator.admin("GET", "/readyz").status == 200 }, "serves again by itself")
        try phone.device.connect()
        phone.start()
        // Every record answered 200 settles: delivered (acked), or stored and replaced by a newer
        // one while the device was away; none waits for an ack of a frame that never left.
        func waiting() throws -> Int {
            try emulator.notifications(token: token, limit: 100_000).filter {
                $0["status"] == 200 && $0["outcome"]?.stringValue == "pending"
            }.count
        }
        let settled = try eventually(20) { try waiting() == 0 }
        let left = try waiting()
        #expect(settled, "\(left) records still wait for the device")
        phone.stop()
    }

    /// The same through another real fault: the files may not grow (a file-size limit put on
    /// the running process with prlimit, so writes fail with EFBIG), then the limit is lifted.
    /// Needs no root. Also the opt-in: `--state-failure memory` goes on answering 200.
    @Test(arguments: ["refuse", "memory"])
    func filesThatCannotGrowAreAFailingStoreToo(policy: String) throws {
        let state = try StateDirectory()
        let flags = ["--state-dir", state.path, "--state-failure", policy, "--max-records", "100000"]
        let ports = try EmulatorProcess.restartablePorts()
        let first = try EmulatorProcess(flags + ports)
        let (_, token) = try first.createDevice()
        let push = try first.push(token)
        let pid = String(first.process.processIdentifier)
        let database = state.path + "/state.sqlite"
        let biggest =
            [database, database + "-wal"].compactMap {
                (try? FileManager.default.attributesOfItem(atPath: $0)[.size] as? Int) ?? nil
            }.max() ?? 0
        let limited = try run("/usr/bin/prlimit", ["--pid", pid, "--fsize=\(biggest + 65_536):unlimited"])
        try #require(limited.status == 0, "prlimit: \(limited.err)")

        let failing = pushThroughFailures(first, push, seconds: 60) {
            policy == "refuse" ? $0.unavailable >= 10 : $0.accepted.count >= 3_000
        }
        #expect(failing.other.isEmpty)
        if policy == "refuse" {
            #expect(failing.unavailable >= 10)
            try checkRefusing(first, naming: state.path, error: "")
        } else {
            #expect(failing.unavailable == 0, "memory: never refused")
            #expect(try first.metric("apns_emulator_state_up") == 0, "but the failure shows")
            #expect(first.stderr.contains("--state-failure memory: going on in memory"))
            #expect(try first.admin("GET", "/readyz").status == 200)
        }
        _ = try run("/usr/bin/prlimit", ["--pid", pid, "--fsize=unlimited:unlimited"])
        #expect(try eventually(15) { try first.metric("apns_emulator_state_up") == 1 }, "serves again by itself")
        let after = pushThroughFailures(first, push, seconds: 30) { $0.accepted.count >= 20 }
        #expect(after.unavailable == 0 && after.accepted.count >= 20)

        first.crash()
        let second = try EmulatorProcess(flags + ports)
        let kept = Set(try second.notifications(token: token, limit: 100_000).compactMap { $0["apnsId"]?.stringValue })
        let missing = (failing.accepted + after.accepted).filter { !kept.contains($0) }
        print(
            "\(policy): \(failing.accepted.count + after.accepted.count) answered 200, \(failing.unavailable) 503, \(missing.count) missing after kill -9"
        )
        if policy == "refuse" {
            #expect(missing.isEmpty, "every 200 is on disk")
        } else {
            // Written once the limit was lifted, so nothing is missing here either; what
            // memory mode gives up is only what a crash takes while the disk fails.
            #expect(missing.isEmpty)
        }
    }

    /// A directory damaged while the emulator was down is refused at the next start with what
    /// is wrong and what to do; doing what the message says starts the emulator again.
    @Test func aDamagedDirectoryIsRefusedAtStartWithWhatToDo() throws {
        let state = try StateDirectory()
        let first = try EmulatorProcess(["--state-dir", state.path])
        let (_, token) = try first.createDevice()
        let tally = pushThroughFailures(first, try first.push(token), window: 4, seconds: 30) { $0.accepted.count >= 400 }
        #expect(tally.accepted.count >= 400)
        first.crash()  // the write-ahead log keeps the newest transactions
        let wal = state.path + "/state.sqlite-wal"
        #expect(((try? FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int) ?? 0) > 0)

        func copy(_ name: String) throws -> String {
            let path = state.path + "-" + name
            try FileManager.default.copyItem(atPath: state.path, toPath: path)
            return path
        }
        // The database emptied beside a log full of data.
        let emptied = try copy("emptied")
        defer { try? FileManager.default.removeItem(atPath: emptied) }
        try Data().write(to: URL(fileURLWithPath: emptied + "/state.sqlite"))
        let refusal = try run(
            EmulatorProcess.binary,
            [
                "serve", "--channel-sandbox-listen", "off", "--channel-production-listen", "off", "--state-dir", emptied, "--sandbox-listen",
                "127.0.0.1:0",
                "--production-listen", "off", "--admin-listen", "off", "--device-listen", "off",
            ])
        #expect(refusal.status == 1)
        #expect(refusal.err.contains("\(emptied)/state.sqlite is empty (0 bytes), but its write-ahead log"), "\(refusal.err)")
        #expect(refusal.err.contains("put the original state.sqlite back"))

        // 512 random bytes in a live frame in the middle of the log: SQLite drops what follows; we
        // say so. (The middle of the file may hold frames of an earlier generation that SQLite
        // already ignores, so the frame is found by the log's salt.)
        let damaged = try copy("damaged")
        defer { try? FileManager.default.removeItem(atPath: damaged) }
        let liveFrames = try Self.liveFrameOffsets(ofLog: damaged + "/state.sqlite-wal")
        try #require(liveFrames.count >= 2, "the log holds \(liveFrames.count) live frames")
        let handle = try #require(FileHandle(forWritingAtPath: damaged + "/state.sqlite-wal"))
        try handle.seek(toOffset: UInt64(liveFrames[liveFrames.count / 2] + 24))  // into the page, past the frame header
        handle.write(Data((0..<512).map { _ in UInt8.random(in: 0...255) }))
        try handle.close()
        let gap = try run(
            EmulatorProcess.binary,
            [
                "serve", "--channel-sandbox-listen", "off", "--channel-production-listen", "off", "--state-dir", damaged, "--sandbox-listen",
                "127.0.0.1:0",
                "--production-listen", "off", "--admin-listen", "off", "--device-listen", "off",
            ])
        #expect(gap.status == 1)
        #expect(gap.err.contains("are missing"), "\(gap.err)")
        #expect(gap.err.contains("delete \(damaged)/last-commit"))
        try FileManager.default.removeItem(atPath: damaged + "/last-commit")
        let rest = try EmulatorProcess(["--state-dir", damaged])
        let kept = Set(try rest.notifications(token: token, limit: 100_000).compactMap { $0["apnsId"]?.stringValue })
        print("a damaged write-ahead log: \(tally.accepted.count) answered 200, \(kept.count) left after the damage")
        #expect(kept.count < tally.accepted.count)
    }

    /// Byte offsets of the frames of a SQLite write-ahead log that belong to its current
    /// generation: from the start, while a frame's salts match the log header's (file format 4.1).
    static func liveFrameOffsets(ofLog path: String) throws -> [Int] {
        let log = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        func word(_ at: Int) -> UInt32 { log[at..<at + 4].reduce(0) { $0 << 8 | UInt32($1) } }
        guard log.count >= 32 else { return [] }
        let pageSize = Int(word(8) == 1 ? 65536 : word(8))
        let salts = (word(16), word(20))
        var offsets: [Int] = []
        var frame = 32
        while frame + 24 + pageSize <= log.count, (word(frame + 8), word(frame + 12)) == salts {
            offsets.append(frame)
            frame += 24 + pageSize
        }
        return offsets
    }

    /// While the store fails: 503 with the reason on /readyz and on admin changes, reads served.
    private func checkRefusing(_ emulator: EmulatorProcess, naming directory: String, error: String) throws {
        let ready = try emulator.admin("GET", "/readyz")
        #expect(ready.status == 503)
        let reason = ready.json["reason"]?.stringValue ?? ""
        #expect(reason.contains(directory), "\(reason)")
        #expect(error.isEmpty || reason.contains(error), "\(reason)")
        let change = try emulator.admin("POST", "/api/v1/devices", body: ["bundleId": "com.example.app", "environment": "sandbox"])
        #expect(change.status == 503)
        #expect(change.json["error"]?.stringValue?.contains("cannot take changes now") == true, "refused before anything changed: \(change.raw)")
        #expect(change.json["error"]?.stringValue?.contains(directory) == true, "\(change.raw)")
        #expect(try emulator.admin("GET", "/api/v1/devices").status == 200, "reads are served")
        #expect(try emulator.metric("apns_emulator_state_up") == 0)
        #expect(emulator.stderr.contains("Providers get 503"))
    }
}

/// Reads a device's frames on a thread of its own while the test pushes (a device that reads
/// nothing fills its delivery window): autoAcked notifications, and the codes of error frames.
final class DeviceReader: @unchecked Sendable {
    let device: SimulatedDevice
    let errors = Locked<[String]>([])
    private let stopping = Locked(false)
    private var thread: Thread?
    private let finished = DispatchSemaphore(value: 0)

    init(_ device: SimulatedDevice) { self.device = device }

    func start() {
        stopping.withLock { $0 = false }
        let thread = Thread { [self] in
            while !stopping.withLock({ $0 }) {
                guard let frames = try? device.poll(timeoutMilliseconds: 50) else { break }
                for frame in frames where frame["type"]?.stringValue == "error" {
                    errors.withLock { $0.append(frame["code"]?.stringValue ?? "?") }
                }
            }
            finished.signal()
        }
        self.thread = thread
        thread.start()
    }

    /// Waits for the reading thread to end (the device may be used on this thread again).
    func stop() {
        stopping.withLock { $0 = true }
        if thread != nil { finished.wait() }
        thread = nil
    }
}
