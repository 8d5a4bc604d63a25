import APNsCore
import Foundation
import Glibc
import HTTP2
import Locking
import Networking
import ProviderClient
import RedisTestSupport
import Synchronization
import Testing
import TestSupport

/// Emulator instances sharing one Redis (`--redis`), behind HAProxy in TCP mode for both the
/// providers' TLS listener and the device socket — the deployment docs/several-instances.md
/// describes. Everything is a real process on loopback.
final class EmulatorCluster: @unchecked Sendable {
    let redis: RedisServerProcess
    let shared: String
    let instances: [EmulatorProcess]
    let haproxy: Process
    let provider: HostPort
    let device: HostPort

    /// - Parameter persistent: Redis keeps its data across a restart (an append-only file).
    init(count: Int = 3, extra: [String] = [], persistent: Bool = true) throws {
        redis = try RedisServerProcess(persistent: persistent)
        shared = try makeSharedDirectory()
        // One after the other: the first creates the shared key and CA, and the store's state.
        var started: [EmulatorProcess] = []
        do {
            for _ in 0..<count {
                started.append(try EmulatorProcess(["--redis", redis.url] + extra, sharedDirectory: shared))
            }
        } catch {
            // No deinit for an init that throws.
            try? FileManager.default.removeItem(atPath: shared)
            throw error
        }
        instances = started
        func servers(_ listener: String) throws -> String {
            try started.enumerated().map { index, e in
                "  server e\(index + 1) \(try e.address(listener)) check inter 200ms fall 1 rise 1"
            }.joined(separator: "\n")
        }
        (haproxy, provider, device) = try Self.startHAProxy(
            sandboxServers: try servers("sandbox"), deviceServers: try servers("device"), directory: shared)
    }

    /// HAProxy on two ports found free. Another test can bind one of them first: HAProxy then
    /// exits (while the port still accepts, for the other test), and it is started again on others.
    private static func startHAProxy(
        sandboxServers: String, deviceServers: String, directory: String
    ) throws -> (Process, HostPort, HostPort) {
        guard let binary = ExternalTool.haproxy.path else { throw HarnessError("haproxy is not installed: scripts/deps.sh test installs it") }
        for _ in 0..<5 {
            let provider = HostPort(host: "127.0.0.1", port: UInt16(try freePort()))
            let device = HostPort(host: "127.0.0.1", port: UInt16(try freePort()))
            let config = """
                global
                  maxconn 4096
                defaults
                  mode tcp
                  timeout connect 2s
                  timeout client 60s
                  timeout server 60s
                  retries 3
                  option redispatch
                frontend providers
                  bind \(provider)
                  default_backend sandbox
                backend sandbox
                  balance roundrobin
                \(sandboxServers)
                frontend devices
                  bind \(device)
                  default_backend devices
                backend devices
                  balance roundrobin
                \(deviceServers)

                """
            try config.write(toFile: directory + "/haproxy.cfg", atomically: true, encoding: .utf8)
            let haproxy = Process()
            haproxy.executableURL = URL(fileURLWithPath: binary)
            haproxy.arguments = ["-f", directory + "/haproxy.cfg", "-db"]
            haproxy.standardOutput = FileHandle.nullDevice
            haproxy.standardError = FileHandle(forWritingAtPath: "/dev/null")
            try haproxy.run()
            let ports = [provider.port, device.port]
            let listening = try eventually(10) { !haproxy.isRunning || ports.allSatisfy(Self.accepts(port:)) }
            usleep(100_000)  // a bind that failed has ended it by now
            if listening, haproxy.isRunning { return (haproxy, provider, device) }
            if haproxy.isRunning { haproxy.terminate() }
            haproxy.waitUntilExit()
        }
        throw HarnessError("haproxy did not start (five tries on ports found free)")
    }

    deinit {
        if haproxy.isRunning {
            haproxy.terminate()
            haproxy.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: shared)
    }

    /// A provider connection through the load balancer (each one lands on the next instance).
    func connect() throws -> HTTP2ClientConnection {
        var options = HTTP2ClientConnection.Options(address: provider)
        options.caPath = instances[0].caPath
        return try HTTP2ClientConnection(options)
    }

    /// Kills an instance as a crash would (SIGKILL: no goodbye to Redis or to its devices).
    func kill(_ index: Int) {
        let process = instances[index].process
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// The instance whose device listener holds `count` sockets.
    /// The instance holding the device sockets (once one does) and another instance.
    func holderAndAnother() throws -> (holder: Int, another: EmulatorProcess) {
        var holder: Int?
        #expect(
            try eventually {
                holder = try instanceHoldingDevices()
                return holder != nil
            })
        let index = try #require(holder)
        return (index, instances[(index + 1) % instances.count])
    }

    func instanceHoldingDevices() throws -> Int? {
        try instances.indices.first { index in
            guard instances[index].process.isRunning else { return false }
            return try instances[index].metric("apns_emulator_device_connections") > 0
        }
    }

    static func accepts(port: UInt16) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }
}

/// A TCP proxy that holds every chunk from the upstream server back for a while (a slow
/// Redis); Python's asyncio, so the delay is per chunk and the order is kept.
final class DelayProxy {
    let process = Process()
    let port: Int

    init(upstreamPort: Int, delayMilliseconds: Int) throws {
        port = try freePort()
        let script = """
            import asyncio, sys
            up, port, delay = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) / 1000
            async def pipe(reader, writer, late):
                try:
                    while data := await reader.read(65536):
                        if late:
                            await asyncio.sleep(delay)
                        writer.write(data)
                        await writer.drain()
                finally:
                    writer.close()
            async def serve(client_reader, client_writer):
                server_reader, server_writer = await asyncio.open_connection("127.0.0.1", up)
                await asyncio.gather(pipe(client_reader, server_writer, False), pipe(server_reader, client_writer, True))
            async def main():
                server = await asyncio.start_server(serve, "127.0.0.1", port)
                await server.serve_forever()
            asyncio.run(main())
            """
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, String(upstreamPort), String(port), String(delayMilliseconds)]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let port = UInt16(port)
        guard try eventually(10, { EmulatorCluster.accepts(port: port) }) else { throw HarnessError("the delay proxy did not start") }
    }

    deinit {
        // SIGKILL: children of the test process may inherit SIGTERM blocked.
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}

/// A fresh directory for the instances of one service to share (the provider key and the CA).
private func makeSharedDirectory() throws -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("apns-cluster-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// The instance a provider connection's records came from (connection ids carry it).
private func instanceOf(_ record: JSONValue) -> Int? {
    record["connectionId"]?.intValue.map { Int($0) >> 40 }
}

/// Four providers pushing the harness's push to one emulator in batches of 10, each on a
/// connection of its own, keeping the apns-ids of the pushes answered 200. A connection that
/// drops ends its provider, or (`reconnect`) is replaced by a new one.
final class BatchPushers: @unchecked Sendable {
    private let ids = Locked<[String]>([])
    private let done = Counter()
    private let stopping = Atomic<Bool>(false)

    /// - Parameter batches: per provider (nil: until `stop`).
    init(_ emulator: EmulatorProcess, token: String, batches: Int?, reconnect: Bool) throws {
        let push = try emulator.push(token)
        for _ in 0..<4 {
            Thread { [self] in
                defer { done.add() }
                var connection = try? emulator.connect()
                var sent = 0
                while !stopping.load(ordering: .acquiring), batches.map({ sent < $0 }) ?? true, let open = connection {
                    sent += 1
                    guard let answers = try? open.send(Array(repeating: push.request, count: 10)) else {
                        // Dropped unanswered.
                        connection = reconnect ? try? emulator.connect() : nil
                        continue
                    }
                    let ok = answers.map(APNsResult.init).filter { $0.status == 200 }.compactMap(\.apnsID)
                    ids.withLock { $0 += ok }
                }
            }.start()
        }
    }

    var acknowledged: [String] { ids.withLock { $0 } }
    var finished: Bool { done.count == 4 }
    func stop() { stopping.store(true, ordering: .releasing) }
}

@Suite("Several instances as one APNs (--redis, HAProxy, device processes)", .serialized, .requires(.redisServer, .haproxy))
struct SharedStateTests {
    @Test func tokensPushesStoreAndUninstallAreSharedByEveryInstance() throws {
        let cluster = try EmulatorCluster()
        let (e1, e2, e3) = (cluster.instances[0], cluster.instances[1], cluster.instances[2])
        // The device's socket is on instance 3; its token was made there.
        let device = try DeviceProcess(e3, deviceID: "shared-phone", extra: ["--app-state", "foreground"])
        let token = try device.registeredToken()

        // Accepted by instances 1 and 2, delivered through instance 3, acknowledged there,
        // and seen as delivered by instance 1.
        for (index, emulator) in [e1, e2].enumerated() {
            let result = APNsResult(
                try emulator.connect().send(try emulator.push(token, payload: #"{"aps":{"alert":"from \#(index + 1)"}}"#).request))
            #expect(result.status == 200)
            let event = try #require(device.next("notification"), "instance \(index + 1)'s push did not reach the device on instance 3")
            #expect(event["apnsId"]?.stringValue == result.apnsID)
            #expect(try eventually { try e1.admin("GET", "/api/v1/notifications/\(result.apnsID!)").json["outcome"] == "delivered" })
        }

        // Offline: one stored notification per device and app, whichever instance took the pushes.
        device.command("offline")
        #expect(device.next("offline") != nil)
        let first = APNsResult(try e1.connect().send(try e1.push(token, payload: #"{"aps":{"alert":"one"}}"#).request))
        let second = APNsResult(try e2.connect().send(try e2.push(token, payload: #"{"aps":{"alert":"two"}}"#).request))
        #expect(first.status == 200 && second.status == 200)
        // Instance 3's copy follows the others' writes within milliseconds (admin reads are
        // eventual across instances: docs/several-instances.md).
        #expect(try eventually { try e3.admin("GET", "/api/v1/notifications/\(first.apnsID!)").json["outcome"] == "coalesced" })
        #expect(try eventually { try e3.admin("GET", "/api/v1/notifications/\(second.apnsID!)").json["outcome"] == "stored" })
        device.command("online")
        let stored = try #require(device.next("notification"))
        #expect(stored["apnsId"]?.stringValue == second.apnsID)
        #expect(device.noneBeforePong("notification"))

        // Through the load balancer: connections land on different instances, all answered.
        var instancesSeen: Set<Int> = []
        for _ in 0..<6 {
            let result = APNsResult(try cluster.connect().send(try e1.push(token).request))
            #expect(result.status == 200)
            let record = try e2.admin("GET", "/api/v1/notifications/\(result.apnsID!)").json
            if let instance = instanceOf(record) { instancesSeen.insert(instance) }
        }
        #expect(instancesSeen.count >= 2, "HAProxy spread 6 connections over \(instancesSeen.sorted())")

        // An uninstall on the device's instance makes every instance answer 410.
        device.command("uninstall")
        #expect(device.next("uninstalled") != nil)
        for emulator in [e1, e2] {
            let gone = APNsResult(try emulator.connect().send(try emulator.push(token).request))
            #expect(gone.status == 410)
            #expect(gone.reason == "Unregistered")
        }
    }

    @Test func backgroundBudgetIsOneBudgetWhicheverInstanceTakesThePush() throws {
        let cluster = try EmulatorCluster(extra: ["--background-budget-per-hour", "2"])
        let token = try cluster.instances[0].createDevice().token
        var outcomes: [String] = []
        for emulator in cluster.instances {
            var push = try emulator.push(token, payload: #"{"aps":{"content-available":1}}"#)
            push.pushType = "background"
            push.priority = "5"
            let result = APNsResult(try emulator.connect().send(push.request))
            #expect(result.status == 200)
            // The device's owner decides (a push another instance took is handed to it, and
            // its outcome is "pending" until then): read it once it is settled.
            var outcome = ""
            _ = try eventually {
                outcome = try emulator.admin("GET", "/api/v1/notifications/\(result.apnsID!)").json["outcome"]?.stringValue ?? ""
                return outcome != "pending"
            }
            outcomes.append(outcome)
        }
        // Two wakes an hour for the app, not two per instance.
        #expect(outcomes == ["delivered", "delivered", "deferred"], "\(outcomes)")
    }

    @Test func redisDownMeans503AndServiceReturnsByItself() throws {
        let cluster = try EmulatorCluster(count: 2)
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        let token = try e1.createDevice().token
        #expect(APNsResult(try e2.connect().send(try e2.push(token).request)).status == 200)

        cluster.redis.kill()
        // A 503 the moment the instance finds Redis gone, and /readyz says why. (A push it took
        // before it noticed waits for a write that then fails: it is not answered, and its
        // connection closes.)
        var connection = try e1.connect()
        #expect(
            try eventually(10) {
                do {
                    return APNsResult(try connection.send(try e1.push(token).request)).status == 503
                } catch {
                    connection = try e1.connect()
                    return false
                }
            })
        let refused = APNsResult(try connection.send(try e1.push(token).request))
        #expect(refused.status == 503)
        #expect(refused.reason == "ServiceUnavailable")
        let ready = try e1.admin("GET", "/readyz")
        #expect(ready.status == 503)
        #expect(ready.json["reason"]?.stringValue?.contains("Redis") == true)
        #expect(
            try eventually(10) {
                try e2.admin("POST", "/api/v1/devices", body: ["bundleId": "com.example.app", "environment": "sandbox"]).status == 503
            })

        try cluster.redis.restart()
        #expect(try eventually(15) { try e1.admin("GET", "/readyz").status == 200 && e2.admin("GET", "/readyz").status == 200 })
        let back = APNsResult(try e1.connect().send(try e1.push(token).request))
        #expect(back.status == 200)
        // What was acknowledged before the outage is still there, on both instances.
        var accepted: [JSONValue] = []
        #expect(
            try eventually(5) {
                accepted = try e2.notifications(token: token).filter { $0["status"] == 200 }
                return accepted.count == 2
            }, "instance 2 shows \(accepted.count) accepted pushes")
    }

    /// Redis loses the state under running instances (restarted without an append-only
    /// file, or FLUSHALL): they notice within seconds, refuse meanwhile (503, /readyz says
    /// why), and exactly one writes the newest copy back; both then answer alike again, with
    /// the tokens and the journal from before. That includes a push the restoring instance
    /// had left unread (lazy following): the instance that took it writes it back.
    @Test(.requires(.redisCLI), arguments: ["restarted empty", "FLUSHALL"])
    func aRedisThatLosesItsDataIsRestoredFromTheNewestCopy(how: String) throws {
        let cluster = try EmulatorCluster(count: 2, persistent: false)
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        let first = try e1.createDevice().token
        let second = try e2.createDevice().token
        let before = APNsResult(try e2.connect().send(try e2.push(first).request))
        #expect(before.status == 200)
        #expect(try eventually { try e1.admin("GET", "/api/v1/notifications/\(before.apnsID!)").status == 200 })
        // A push through the first instance for a device it owns, which the second leaves
        // unread; Redis loses it before anything reads it there.
        let own = try #require(try token(handedOff: false, through: e1, other: e2), "no device owned by the first instance among 40")
        let unread = APNsResult(try e1.connect().send(try e1.push(own).request))
        #expect(unread.status == 200)
        #expect(try eventually(5) { try e2.metric("apns_emulator_shared_writes_unread") > 0 })

        if how == "FLUSHALL" {
            let flushed = try run("/usr/bin/env", ["redis-cli", "-p", String(cluster.redis.port), "FLUSHALL"])
            #expect(flushed.out.contains("OK"), "\(flushed)")
        } else {
            try cluster.redis.restart()
        }
        // Noticed: refused until restored, and /readyz says why.
        #expect(try eventually(10) { try e1.admin("GET", "/readyz").json["reason"]?.stringValue?.contains("lost") == true })
        // Restored within seconds, on both.
        #expect(try eventually(20) { try e1.admin("GET", "/readyz").status == 200 && e2.admin("GET", "/readyz").status == 200 })
        for emulator in [e1, e2] {
            for token in [first, second] {
                let result = APNsResult(try emulator.connect().send(try emulator.push(token).request))
                #expect(result.status == 200, "\(how): a token made before answers \(result.status) \(result.reason ?? "")")
            }
            #expect(try emulator.admin("GET", "/api/v1/notifications/\(before.apnsID!)").status == 200, "the journal from before")
            #expect(try emulator.admin("GET", "/api/v1/notifications/\(unread.apnsID!)").status == 200, "a push one copy had left unread")
        }
        let restorer = [e1, e2].firstIndex { $0.stderr.contains("shared state restored into Redis") }.map { $0 + 1 } ?? 0
        print("\(how): restored by instance \(restorer); written back by the other: \([e1, e2].contains { $0.stderr.contains("wrote back") })")
        // One state again: a device made on one instance is known to the other.
        let after = try e1.createDevice().token
        #expect(try eventually(5) { APNsResult(try e2.connect().send(try e2.push(after).request)).status == 200 })
        let restorers = [e1, e2].filter { $0.stderr.contains("shared state restored into Redis") }.count
        #expect(restorers == 1, "exactly one instance wrote its copy back")
    }

    /// Redis losing its data in the middle of a load through both instances, or coming back
    /// from a snapshot older than what was answered (an RDB file saved a second before): afterwards both
    /// journals hold every push either instance answered 200. (An instance whose copy was due
    /// for a reload when the state went, and which did not restore it, lost its last pushes:
    /// it reloaded the restored state before noting what that state lacked. From an older
    /// snapshot every instance reloaded it as the state it followed, and the pushes answered
    /// after the snapshot left every journal.)
    @Test(.requires(.redisCLI), arguments: ["FLUSHALL", "an older snapshot", "a snapshot from before a restore"])
    func nothingAcknowledgedIsLostWhenRedisLosesItsDataMidLoad(how: String) throws {
        let cluster = try EmulatorCluster(count: 2, persistent: false)
        let tokens = try cluster.instances.map { try $0.createDevice().token }
        let acknowledged = Locked<[String]>([])
        let deadline = Date().addingTimeInterval(how == "a snapshot from before a restore" ? 12 : 6)
        let group = DispatchGroup()
        // Three connections through the first instance, one through the second, each sending a
        // push after the answer to the one before, to both devices in turn.
        for (emulator, connections) in zip(cluster.instances, [3, 1]) {
            for _ in 0..<connections {
                DispatchQueue.global().async(group: group) {
                    var connection: HTTP2ClientConnection?
                    var n = 0
                    while Date() < deadline {
                        n += 1
                        do {
                            if connection == nil { connection = try emulator.connect() }
                            let result = APNsResult(try connection!.send(try emulator.push(tokens[n % 2]).request))
                            if result.status == 200, let id = result.apnsID { acknowledged.withLock { $0.append(id) } }
                        } catch {
                            connection = nil
                            Thread.sleep(forTimeInterval: 0.05)
                        }
                    }
                }
            }
        }
        if how == "FLUSHALL" {
            Thread.sleep(forTimeInterval: 2.5)
            let flushed = try run("/usr/bin/env", ["redis-cli", "-p", String(cluster.redis.port), "FLUSHALL"])
            #expect(flushed.out.contains("OK"), "\(flushed)")
        } else {
            // dump.rdb in the server's directory, loaded when it starts again (it saves nothing
            // itself: `--save ""`).
            Thread.sleep(forTimeInterval: 1.5)
            let saved = try run("/usr/bin/env", ["redis-cli", "-p", String(cluster.redis.port), "SAVE"])
            #expect(saved.out.contains("OK"), "\(saved)")
            let answeredAtTheSnapshot = acknowledged.withLock { $0.count }
            if how == "a snapshot from before a restore" {
                // The state is lost and restored under a new epoch; the snapshot holds the old one.
                Thread.sleep(forTimeInterval: 0.5)
                _ = try run("/usr/bin/env", ["redis-cli", "-p", String(cluster.redis.port), "FLUSHALL"])
                #expect(try eventually(20) { cluster.instances.contains { $0.stderr.contains("shared state restored into Redis") } })
                // Every instance back on the restored state (a second fault during a restore,
                // before all have rejoined it, is another case: see several-instances.md).
                #expect(try eventually(20) { try cluster.instances.allSatisfy { try $0.admin("GET", "/readyz").status == 200 } })
            }
            Thread.sleep(forTimeInterval: 1.5)
            #expect(acknowledged.withLock { $0.count } > answeredAtTheSnapshot, "pushes answered after the snapshot")
            try cluster.redis.restart()
        }
        group.wait()
        let answered = Set(acknowledged.withLock { $0 })
        #expect(answered.count > 500, "\(answered.count) answered 200")
        if how != "FLUSHALL" {
            #expect(try eventually(10) { cluster.instances.contains { $0.stderr.contains("shared state went back") } }, "the older state is noticed")
        }
        #expect(try eventually(20) { try cluster.instances.allSatisfy { try $0.admin("GET", "/readyz").status == 200 } })
        for (index, emulator) in cluster.instances.enumerated() {
            var journaled: Set<String> = []
            var cursor: String?
            repeat {
                let page = try emulator.admin("GET", "/api/v1/notifications?status=200&limit=5000" + (cursor.map { "&cursor=\($0)" } ?? ""))
                for record in page.json["notifications"]?.arrayValue ?? [] {
                    if let id = record["apnsId"]?.stringValue { journaled.insert(id) }
                }
                cursor = page.json["nextCursor"]?.stringValue
            } while cursor != nil
            let lost = answered.subtracting(journaled)
            #expect(lost.isEmpty, "instance \(index + 1) lacks \(lost.count) of the \(answered.count) pushes answered 200: \(lost.prefix(5))")
        }
    }

    /// A device (app in the foreground) taking pushes through both instances while its socket
    /// moves to the other instance, Redis loses its data, Redis pauses, or the instance holding
    /// the socket pauses long enough to be taken for stopped: every push the
    /// device printed (and so acked) reads `delivered` afterwards. Before, the acks the shared
    /// state had not taken when it took the deliveries back were lost (the old instance said
    /// "no delivery … is waiting for an ack", Redis never kept them, or the device's last acks
    /// with `replaced` were never written) and 1–23 such pushes read `coalesced`, replaced in
    /// the store by a newer one.
    @Test(.requires(.redisCLI), arguments: ["a socket moved", "FLUSHALL", "Redis paused", "its instance paused"])
    func everyPushADevicePrintedReadsDeliveredAfterAFault(fault: String) throws {
        let cluster = try EmulatorCluster(count: 2, persistent: false)
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        let first = try DeviceProcess(e1, deviceID: "faulty-phone", extra: ["--app-state", "foreground"])
        let token = try first.registeredToken()
        #expect(try eventually { try e2.admin("GET", "/api/v1/devices/faulty-phone").json["connected"]?.boolValue == true })
        let deadline = Date().addingTimeInterval(6)
        let group = DispatchGroup()
        let answered = Atomic<Int>(0)
        for emulator in [e1, e2, e1, e2] {
            DispatchQueue.global().async(group: group) {
                var connection: HTTP2ClientConnection?
                while Date() < deadline {
                    do {
                        if connection == nil { connection = try emulator.connect() }
                        let result = APNsResult(try connection!.send(try emulator.push(token).request))
                        if result.status == 200 { answered.add(1, ordering: .relaxed) }
                    } catch {
                        connection = nil
                        Thread.sleep(forTimeInterval: 0.05)
                    }
                }
            }
        }
        Thread.sleep(forTimeInterval: 2)
        var devices = [first]
        switch fault {
        case "a socket moved":
            devices.append(try DeviceProcess(e2, deviceID: "faulty-phone", extra: ["--app-state", "foreground"]))
            #expect(first.next("replaced", timeout: 10) != nil)
        case "FLUSHALL":
            _ = try run("/usr/bin/env", ["redis-cli", "-p", String(cluster.redis.port), "FLUSHALL"])
        case "its instance paused":
            // Taken for stopped by the other, which gives back what the device had in flight.
            Glibc.kill(e1.process.processIdentifier, SIGSTOP)
            #expect(try eventually(15) { try e2.admin("GET", "/api/v1/devices/faulty-phone").json["connected"]?.boolValue == false })
            Glibc.kill(e1.process.processIdentifier, SIGCONT)
        default:
            cluster.redis.pause()
            Thread.sleep(forTimeInterval: 4)
            cluster.redis.resume()
        }
        group.wait()
        #expect(try eventually(20) { try e1.admin("GET", "/readyz").status == 200 && e2.admin("GET", "/readyz").status == 200 })
        let printed = Set(devices.flatMap { $0.events("notification") }.compactMap { $0["apnsId"]?.stringValue })
        #expect(printed.count > 100, "\(printed.count) printed of \(answered.load(ordering: .relaxed)) answered 200")
        var notDelivered: [String: String] = [:]
        _ = try eventually(15) {
            notDelivered = [:]
            let records = try e1.notifications(token: token, limit: 100_000)
            for record in records {
                guard let id = record["apnsId"]?.stringValue, printed.contains(id) else { continue }
                let outcome = record["outcome"]?.stringValue ?? "?"
                if outcome != "delivered" { notDelivered[id] = outcome + ": " + (record["explanation"]?.stringValue ?? "") }
            }
            return notDelivered.isEmpty
        }
        let refusedAcks = devices.flatMap { $0.events("error") }.filter { $0["message"]?.stringValue?.contains("is waiting for an ack") == true }
        print("\(fault): \(printed.count) printed, \(refusedAcks.count) acks refused, \(notDelivered.count) printed and not delivered")
        #expect(notDelivered.isEmpty, "\(fault): \(notDelivered.count) pushes the device printed read otherwise: \(Array(notDelivered.prefix(3)))")
        #expect(refusedAcks.isEmpty, "\(fault): \(refusedAcks.prefix(3))")
    }

    /// Every Redis answer 500 ms late (a TCP proxy in between): provider pushes wait for it,
    /// but the admin API's reads come from the instance's own copy and are answered at once.
    @Test func adminReadsDoNotWaitForASlowRedis() throws {
        let redis = try RedisServerProcess()
        let proxy = try DelayProxy(upstreamPort: redis.port, delayMilliseconds: 500)
        let emulator = try EmulatorProcess(["--redis", "redis://127.0.0.1:\(proxy.port)", "--threads", "2"])
        let token = try emulator.createDevice().token
        // Four providers pushing all the time, each push waiting for a slow write.
        let stop = Atomic<Bool>(false)
        let pushed = Counter()
        let push = try emulator.push(token)  // here: the harness's provider token is made once, not by four threads at once
        var threads: [Thread] = []
        for _ in 0..<4 {
            let thread = Thread {
                guard let connection = try? emulator.connect() else { return }
                while !stop.load(ordering: .relaxed), (try? connection.send(push.request)) != nil { pushed.add() }
            }
            thread.start()
            threads.append(thread)
        }
        defer { stop.store(true, ordering: .relaxed) }
        // The first pushes wait for several slow round trips (the lease the device was made
        // under given up, a shared turn taken, the write): the reads are timed once pushes flow.
        let started = Date()
        #expect(try eventually(20) { pushed.count > 0 }, "the providers' pushes go through, each waiting for a slow write")
        let firstAfter = Date().timeIntervalSince(started)
        var slowest = 0.0
        for _ in 0..<20 {
            for path in ["/api/v1/devices", "/api/v1/notifications?limit=10", "/api/v1/info", "/readyz"] {
                let started = Date()
                #expect(try emulator.admin("GET", path).status == 200)
                slowest = max(slowest, Date().timeIntervalSince(started))
            }
            usleep(50_000)
        }
        print(
            "slow Redis (500 ms an answer): the first push answered after \(Int(firstAfter * 1000)) ms, \(pushed.count) by the end; slowest admin read \(Int(slowest * 1000)) ms"
        )
        #expect(slowest < 0.25, "admin reads come from the instance's copy: slowest \(slowest) s")
    }

    /// An instance whose pushes wait for the lease (another instance is busy, and every Redis
    /// answer is 150 ms late) still serves its connections meanwhile: its one event loop
    /// answers an HTTP/2 PING at once, and its pushes are answered 200 once its turn comes.
    /// Before, the event loop itself waited in the lease's round trips, and a PING with it.
    @Test func anInstanceWaitingForTheLeaseKeepsServingItsConnections() throws {
        let redis = try RedisServerProcess()
        let proxy = try DelayProxy(upstreamPort: redis.port, delayMilliseconds: 150)
        let shared = try makeSharedDirectory()
        defer { try? FileManager.default.removeItem(atPath: shared) }
        let url = "redis://127.0.0.1:\(proxy.port)"
        let busy = try EmulatorProcess(["--redis", url], sharedDirectory: shared)
        let waiting = try EmulatorProcess(
            ["--redis", url, "--threads", "1", "--h2c-sandbox-listen", "127.0.0.1:0"], sharedDirectory: shared)
        let token = try busy.createDevice().token
        #expect(try eventually(10) { try waiting.admin("GET", "/api/v1/tokens/\(token)").status == 200 })
        let busyPush = try busy.push(token)
        let waitingPush = try waiting.push(token)
        let stop = Atomic<Bool>(false)
        defer { stop.store(true, ordering: .relaxed) }
        let statuses = Locked<[Int]>([])
        // Two providers on each instance, pushing all the time: the lease goes back and forth.
        for (emulator, push) in [(busy, busyPush), (busy, busyPush), (waiting, waitingPush), (waiting, waitingPush)] {
            Thread {
                guard let connection = try? emulator.connect() else { return }
                while !stop.load(ordering: .relaxed) {
                    guard let reply = try? connection.send(push.request) else { return }
                    if emulator === waiting { statuses.withLock { $0.append(APNsResult(reply).status) } }
                }
            }.start()
        }
        #expect(try eventually(20) { statuses.withLock { $0.count } >= 2 }, "the waiting instance's pushes are answered")
        var slowest = 0.0
        let address = try waiting.address("h2cSandbox")
        for round in 0..<10 {
            let opaque = [UInt8](repeating: UInt8(round), count: 8)
            var wire = RawHTTP2.clientPreface
            wire += RawHTTP2.frame(type: WireFrame.settings, flags: 0, stream: 0, [])
            wire += RawHTTP2.frame(type: WireFrame.ping, flags: 0, stream: 0, opaque)
            let started = Date()
            let frames = try RawHTTP2.exchange(address, wire) { frames in frames.contains { $0.type == WireFrame.ping && $0.isAck } }
            slowest = max(slowest, Date().timeIntervalSince(started))
            let acked = frames.contains { $0.type == WireFrame.ping && $0.isAck && $0.payload == opaque }
            #expect(acked, "PING \(round) acknowledged")
            usleep(100_000)
        }
        stop.store(true, ordering: .relaxed)
        let answered = statuses.withLock { $0 }
        print("lease elsewhere, Redis 150 ms late: slowest PING \(Int(slowest * 1000)) ms; \(answered.count) pushes answered meanwhile")
        #expect(answered.allSatisfy { $0 == 200 }, "\(Set(answered))")
        #expect(slowest < 0.1, "the event loop answered a PING after \(Int(slowest * 1000)) ms")
        #expect(try waiting.metric("apns_emulator_pushes_waiting_for_the_lease_total") >= 1, "its pushes waited off the event loop")
    }

    /// A long poll on one instance is answered by a push another instance took: changes that
    /// arrive through the log reach listeners as this instance's own do.
    @Test func aLongPollOnOneInstanceSeesAPushTakenByAnother() throws {
        let cluster = try EmulatorCluster(count: 2)
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        let token = try e1.createDevice().token
        let answer = Locked<EmulatorProcess.AdminReply?>(nil)
        Thread {
            let reply = try? e2.admin("GET", "/api/v1/notifications/wait?token=\(token)&timeout=20", timeoutMilliseconds: 30_000);
            answer.withLock { $0 = reply }
        }.start()
        usleep(300_000)  // the poll is waiting before the push
        let pushed = APNsResult(try e1.connect().send(try e1.push(token).request))
        #expect(pushed.status == 200)
        #expect(try eventually(20) { answer.withLock { $0 } != nil })
        let reply = try #require(answer.withLock { $0 })
        #expect(reply.status == 200)
        #expect(reply.json["apnsId"]?.stringValue == pushed.apnsID)
    }

    /// Every Redis answer 100 ms late: pushes arriving on many connections while a write is on
    /// its way are written together by the next one (the event loops queue their changes and
    /// go on reading; the answers wait for their write), not one write per connection's read.
    @Test(.requires(.redisCLI)) func pushesOfManyConnectionsShareAWriteWhileRedisIsSlow() throws {
        let redis = try RedisServerProcess()
        let proxy = try DelayProxy(upstreamPort: redis.port, delayMilliseconds: 100)
        let emulator = try EmulatorProcess(["--redis", "redis://127.0.0.1:\(proxy.port)", "--threads", "2"])
        let token = try emulator.createDevice().token
        let push = try emulator.push(token)
        let count = 24
        func scripts() throws -> Int {
            let stats = try run("/usr/bin/env", ["redis-cli", "-p", String(redis.port), "info", "commandstats"]).out
            // Redis ends its lines with CRLF, one Character in Swift.
            let line = stats.split(whereSeparator: \.isNewline).first { $0.hasPrefix("cmdstat_evalsha:") } ?? ""
            return Int(line.split(separator: ",").first?.split(separator: "=").last ?? "0") ?? 0
        }
        // Every connection made first, then all pushes at once.
        let connected = Counter()
        let go = Atomic<Bool>(false)
        let statuses = Locked<[Int]>([])
        for _ in 0..<count {
            Thread {
                let connection = try? emulator.connect()
                connected.add()
                while !go.load(ordering: .acquiring) { usleep(1_000) }
                let status = (try? connection.map { try APNsResult($0.send(push.request)).status }) ?? nil
                statuses.withLock { $0.append(status ?? 0) }
            }.start()
        }
        #expect(try eventually(20) { connected.count == count })
        let before = try scripts()
        go.store(true, ordering: .releasing)
        #expect(try eventually(20) { statuses.withLock { $0.count } == count })
        let written = try scripts() - before
        #expect(statuses.withLock { $0 } == Array(repeating: 200, count: count))
        // One script per connection before; now the first push's write and one or two for
        // everything that queued behind it (and the odd lease renewal).
        #expect(written <= 8, "\(written) scripts for \(count) pushes")
        print("slow Redis (100 ms an answer): \(count) pushes on as many connections, \(written) scripts")
    }

    /// An idle instance learns within a heartbeat that Redis is gone (its /readyz said ready
    /// until the next push found out), and is ready again once Redis is back.
    @Test func anIdleInstanceNoticesRedisIsGoneWithinAHeartbeat() throws {
        let redis = try RedisServerProcess(persistent: true)
        let emulator = try EmulatorProcess(["--redis", redis.url])
        #expect(try emulator.admin("GET", "/readyz").status == 200)
        redis.kill()
        #expect(try eventually(5) { try emulator.admin("GET", "/readyz").status == 503 }, "readyz says so without a push")
        try redis.restart()
        #expect(try eventually(15) { try emulator.admin("GET", "/readyz").status == 200 })
    }

    /// Redis stops answering (SIGSTOP) in the middle of a stream of pushes: the push whose
    /// write cannot be made gets no answer (the connection drops), later ones get 503, and
    /// every push that got its 200 is in the shared journal once Redis is back.
    @Test func nothingAcknowledgedIsLostWhenRedisStops() throws {
        let cluster = try EmulatorCluster(count: 2)
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        let token = try e1.createDevice().token
        var acknowledged: [String] = []
        var connection = try e1.connect()
        var unanswered = 0
        var refused = 0
        for i in 0..<80 {
            if i == 40 { cluster.redis.pause() }
            do {
                let result = APNsResult(try connection.send(try e1.push(token, payload: #"{"aps":{"alert":"\#(i)"}}"#).request))
                if result.status == 200 { acknowledged.append(result.apnsID!) }
                if result.status == 503 { refused += 1 }
            } catch {
                unanswered += 1
                connection = try e1.connect()
            }
        }
        cluster.redis.resume()
        #expect(acknowledged.count >= 40, "\(acknowledged.count) acknowledged, \(refused) refused, \(unanswered) unanswered")
        #expect(unanswered + refused == 80 - acknowledged.count, "every push without a 200 was refused or unanswered")
        #expect(refused > 0, "once the instance knows Redis is gone it answers 503")
        #expect(try eventually(15) { try e1.admin("GET", "/readyz").status == 200 && e2.admin("GET", "/readyz").status == 200 })
        var journaled: Set<String> = []
        #expect(
            try eventually(5) {
                journaled = Set(try e2.notifications(token: token, limit: 500).compactMap { $0["apnsId"]?.stringValue })
                return journaled.isSuperset(of: acknowledged)
            }, "acknowledged but missing from the shared journal: \(Set(acknowledged).subtracting(journaled))")
    }

    /// The token of a device made on `taker` whose pushes through `taker` are handed to `other`
    /// (`handedOff`) or are not, among up to 40 made (each probed with a push answered 200).
    private func token(handedOff: Bool, through taker: EmulatorProcess, other: EmulatorProcess) throws -> String? {
        for _ in 0..<40 {
            let made = try taker.createDevice()
            #expect(try eventually { try other.admin("GET", "/api/v1/devices/\(made.deviceID)").json["ownerInstance"]?.intValue != nil })
            let before = try taker.metric("apns_emulator_pushes_handed_off_total")
            #expect(APNsResult(try taker.connect().send(try taker.push(made.token).request)).status == 200)
            if try (taker.metric("apns_emulator_pushes_handed_off_total") > before) == handedOff { return made.token }
        }
        return nil
    }

    /// `--redis-follow lazy` (the default): the other instance's pushes for a device it does
    /// not own (nothing for it to route) are left unread; a push handed to it is read and routed
    /// at once, after what was left unread before it; and the first read of its journal reads
    /// whatever is left, so the admin API lists every push either instance took.
    @Test func anInstanceReadsTheOthersPushesWhenItsJournalIsReadAndRoutesWhatIsHandedToItAtOnce() throws {
        let cluster = try EmulatorCluster(count: 2)
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        let own = try #require(try token(handedOff: false, through: e1, other: e2), "no device owned by the first instance among 40")
        let theirs = try #require(try token(handedOff: true, through: e1, other: e2), "no device owned by the second instance among 40")
        let connection = try e1.connect()
        func pushOwn(_ count: Int) throws -> [String] {
            try (0..<count).compactMap { _ in
                let result = APNsResult(try connection.send(try e1.push(own).request))
                #expect(result.status == 200)
                return result.apnsID
            }
        }
        let first = try pushOwn(100)
        #expect(try eventually(10) { try e2.metric("apns_emulator_shared_writes_unread") > 0 }, "the first instance's pushes, left unread")

        let routed = try e2.metric("apns_emulator_handoffs_routed_total")
        #expect(APNsResult(try connection.send(try e1.push(theirs).request)).status == 200)
        #expect(try eventually(10) { try e2.metric("apns_emulator_handoffs_routed_total") == routed + 1 }, "routed with no read of the journal")
        #expect(try e2.metric("apns_emulator_shared_writes_unread") == 0, "what was left unread before the hand-off was read with it")
        // What became of it (the owner's write) reaches the instance that handed it off at once:
        // its copy keeps the hand-off waiting until then. Checked well within the quiet second
        // after which anything left unread is read anyway.
        usleep(300_000)
        #expect(try e1.metric("apns_emulator_handoffs_waiting") == 0, "the routed hand-off, no longer waiting where it was taken")

        let second = try pushOwn(100)
        #expect(try eventually(10) { try e2.metric("apns_emulator_shared_writes_unread") > 0 })
        let listed = Set(try e2.notifications(token: own, limit: 500).compactMap { $0["apnsId"]?.stringValue })
        #expect(Set(first + second).isSubset(of: listed), "every push of the first instance in the second one's journal")
        #expect(try e2.metric("apns_emulator_shared_writes_unread") == 0)
    }

    /// Pushes answered one after another through alternate instances: an admin API read on
    /// either, made right after an answer, has that push as the newest (it waits until its copy
    /// has every write made before it), and both list the pushes in the order they were
    /// answered. Before, a read could miss a push answered a moment earlier through the other
    /// instance, and a copy following lazily listed the other's pushes, read late, as newer
    /// than its own that came after them (so `latest` named an older push).
    @Test(arguments: ["eager", "lazy"]) func everyInstanceListsPushesInTheOrderTheyWereAnswered(follow: String) throws {
        let cluster = try EmulatorCluster(count: 2, extra: ["--redis-follow", follow])
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        let connections = [try e1.connect(), try e2.connect()]
        // One device each instance owns: pushes through the other are handed off.
        for token in [try token(handedOff: false, through: e1, other: e2), try token(handedOff: true, through: e1, other: e2)] {
            let token = try #require(token, "no such device among 40")
            var answered: [String] = []
            for i in 0..<12 {
                let (taker, reader) = i % 2 == 0 ? (e1, e2) : (e2, e1)
                let result = APNsResult(try connections[i % 2].send(try taker.push(token, payload: #"{"aps":{"alert":"\#(i)"}}"#).request))
                #expect(result.status == 200)
                let apnsID = try #require(result.apnsID)
                answered.append(apnsID)
                let latest = try reader.admin("GET", "/api/v1/notifications/latest?token=\(token)").json["apnsId"]?.stringValue
                #expect(latest == apnsID, "push \(i), read through the other instance at once")
            }
            for instance in [e1, e2] {
                // (After them, the push that found out which instance owns the device.)
                let listed = try instance.notifications(token: token, limit: 500).compactMap { $0["apnsId"]?.stringValue }
                #expect(Array(listed.prefix(answered.count)) == answered.reversed(), "newest first, in the order they were answered")
            }
        }
    }

    /// A journal of five records (`--max-records 5`) under load, every push for a device the
    /// other instance owns: each is answered 200 and routed by the owner, none lost. Before, the
    /// rows of a write left Redis as soon as the journal's bound passed them, within
    /// milliseconds: the owner, a few writes behind, reloaded over and over and dropped the
    /// answers in flight each time; and a record that a change's own later pushes evicted
    /// before it was written never reached Redis, so its hand-off was lost without a trace.
    @Test func aTinyJournalLosesNoHandOffAndNoAnswer() throws {
        let cluster = try EmulatorCluster(count: 2, extra: ["--max-records", "5"])
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        let token = try #require(try token(handedOff: true, through: e1, other: e2), "no device owned by the second instance among 40")

        let load = pushThroughFailures(e1, try e1.push(token), window: 50, seconds: 60) { $0.accepted.count >= 5_000 }
        #expect(load.accepted.count >= 5_000)
        // (`dropped` counts too the pushes still in flight when the load stopped: the log says
        // whether any answer was dropped, below.)
        #expect(load.unavailable == 0 && load.other.isEmpty, "every answer 200: \(load.unavailable) 503, others \(load.other)")
        let handedOff = try e1.metric("apns_emulator_pushes_handed_off_total")
        #expect(handedOff >= 5_000)
        var routed = 0.0
        #expect(
            try eventually(15) {
                routed = try e2.metric("apns_emulator_handoffs_routed_total")
                return routed == handedOff
            }, "routed \(routed) of \(handedOff) handed off")
        #expect(try e2.metric("apns_emulator_handoffs_lost_total") == 0)
        #expect(!e1.stderr.contains("did not keep") && !e2.stderr.contains("did not keep"), "no answer dropped by a reload")
    }

    /// Three instances with a journal of 50 records under `apns-emulator load` through HAProxy
    /// (alert and background pushes to 20 devices): once the load is over no record stays
    /// `pending` on any instance, no hand-off waits, and each push handed off is counted routed
    /// once. Before, an owner's own push, held for order, could leave its journal before it was
    /// routed (journals keep records in the order they arrived, and the others' records arrived
    /// after it): its outcome changed nothing there and was never written, so the others'
    /// copies stayed `pending` for good; and a push the owner held that another instance routed
    /// under the lease was counted as a hand-off routed.
    @Test func aSmallJournalLeavesNothingPendingAndCountsEachHandOffOnce() throws {
        let cluster = try EmulatorCluster(count: 3, extra: ["--max-records", "50"])
        let e1 = cluster.instances[0]
        let result = try run(
            EmulatorProcess.binary,
            [
                "load", "--admin", try e1.address("admin").description, "--provider", cluster.provider.description,
                "--bundle", EmulatorProcess.bundleID, "--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(e1.keyPath)",
                "--requests", "6000", "--devices", "20", "--mix", "alert=80,background=20", "--json", "--quiet",
            ], timeout: 90)
        #expect(result.status == 0, "\(result.err)")
        #expect(try JSONValue.parse(Array(result.out.utf8))["succeeded"]?.intValue == 6000)

        func pending(_ instance: EmulatorProcess) throws -> Int {
            try instance.admin("GET", "/api/v1/notifications?outcome=pending&limit=500").json["notifications"]?.arrayValue?.count ?? -1
        }
        func sum(_ metric: String) throws -> Double { try cluster.instances.reduce(0) { $0 + (try $1.metric(metric)) } }
        var seen: [Int] = []
        #expect(
            try eventually(15) {
                seen = try cluster.instances.map(pending)
                return seen.allSatisfy { $0 == 0 }
            }, "records still pending on each instance: \(seen)")
        #expect(try eventually(5) { try sum("apns_emulator_handoffs_waiting") == 0 })
        let handedOff = try sum("apns_emulator_pushes_handed_off_total")
        #expect(handedOff > 0)
        #expect(try sum("apns_emulator_handoffs_routed_total") == handedOff)
    }

    /// An instance paused while the other takes more pushes than Redis keeps the rows of (about
    /// 20,000 records of each instance, with a journal of five) finds those rows gone when it
    /// resumes. Reading every write (`--redis-follow eager`) it says so, reloads the shared
    /// state, and serves again on the same state. Leaving the others' journal-only writes
    /// unread (`lazy`), it needs none of those rows: it goes on without a reload, and its
    /// journal, once read, is the other's.
    @Test(arguments: ["eager", "lazy"]) func anInstanceFurtherBehindThanRedisKeepsReloadsAndSaysWhy(follow: String) throws {
        let cluster = try EmulatorCluster(count: 2, extra: ["--max-records", "5", "--redis-follow", follow])
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        // A device the first instance owns: nothing is handed to the paused one.
        let token = try #require(try token(handedOff: false, through: e1, other: e2), "no device owned by the first instance among 40")

        Glibc.kill(e2.process.processIdentifier, SIGSTOP)
        let load = pushThroughFailures(e1, try e1.push(token), window: 50, seconds: 120) { $0.accepted.count >= 22_000 }
        Glibc.kill(e2.process.processIdentifier, SIGCONT)
        #expect(load.accepted.count >= 22_000 && load.unavailable == 0 && load.other.isEmpty, "\(load.accepted.count) answered 200")
        if follow == "eager" {
            #expect(
                try eventually(20) { e2.stderr.contains("it fell further behind than Redis keeps them") },
                "the resumed instance says why it reloads")
        } else {
            #expect(try eventually(20) { try e2.metric("apns_emulator_shared_writes_unread") > 0 }, "the writes it missed, left unread")
        }
        #expect(try eventually(20) { try e2.admin("GET", "/readyz").status == 200 })
        func newest(_ emulator: EmulatorProcess) throws -> [String] {
            try emulator.notifications(token: token, limit: 5).compactMap { $0["apnsId"]?.stringValue }
        }
        #expect(try eventually(10) { try newest(e2) == newest(e1) && newest(e1).count == 5 }, "the same journal on both")
        // The load stops with up to a window of pushes sent and not waited for (`dropped`):
        // those are answered all the same, so the newest records may be theirs.
        let unknown = Set(try newest(e1)).subtracting(load.accepted)
        #expect(unknown.count <= load.dropped, "\(unknown.count) newest records not answered 200 to the load, \(load.dropped) left unanswered")
        #expect(APNsResult(try e2.connect().send(try e2.push(token).request)).status == 200, "and it serves again")
        // An instance that joins now loads the state once, without replaying the log whose
        // oldest rows are gone (it took that for falling behind, said so and loaded twice).
        if follow == "eager" {
            let late = try EmulatorProcess(["--redis", cluster.redis.url, "--max-records", "5"], sharedDirectory: cluster.shared)
            #expect(!late.stderr.contains("fell further behind"), "\(late.stderr.split(separator: "\n").prefix(3))")
            #expect(try eventually(10) { try newest(late) == newest(e1) })
        }
        if follow == "lazy" {
            #expect(try e2.metric("apns_emulator_shared_writes_unread") == 0, "read for the journal's read")
            // Unless the load outlasted the paused instance's heartbeat (3 s, a slow machine):
            // then the first took it for stopped, a change of members it must read, and those
            // rows may be gone too, so a reload is right.
            if !e1.stderr.contains("missed their heartbeat") {
                #expect(
                    !e2.stderr.contains("fell further behind") && !e2.stderr.contains("reloading"),
                    "no reload: \(e2.stderr.split(separator: "\n").filter { $0.contains("reload") }.prefix(3))")
            }
        }
    }

    /// A full Redis (its maxmemory reached, `noeviction`: it refuses writes) is a failing store:
    /// providers get 503 or an unanswered stream, never a 200 that Redis lacks; the log says
    /// why once, not for every refused write; once Redis has room the instances serve again by
    /// themselves, and every push answered 200 is in the other instance's journal.
    @Test(.requires(.redisCLI)) func aFullRedisRefusesHonestlyAndRecoversWithoutLosingAnything() throws {
        let cluster = try EmulatorCluster(count: 2, persistent: false)
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        let token = try e1.createDevice().token
        let push = try e1.push(token)
        let before = pushThroughFailures(e1, push, seconds: 30) { $0.accepted.count >= 50 }
        #expect(before.accepted.count >= 50 && before.unavailable == 0)

        let redisCLI = ["redis-cli", "-p", String(cluster.redis.port)]
        let limited = try run("/usr/bin/env", redisCLI + ["CONFIG", "SET", "maxmemory", "1"])
        try #require(limited.out.contains("OK"), "\(limited)")
        let full = pushThroughFailures(e1, push, seconds: 30) { $0.unavailable >= 20 }
        print("Redis full: \(full.accepted.count) answered 200, \(full.unavailable) 503, \(full.dropped) unanswered")
        #expect(full.unavailable >= 20, "the full Redis is noticed")
        #expect(full.other.isEmpty, "\(full.other)")
        let said = e1.stderr.components(separatedBy: "is out of memory").count - 1
        #expect((1...4).contains(said), "said once (and again at most every 10 s), not for every write: \(said)")

        _ = try run("/usr/bin/env", redisCLI + ["CONFIG", "SET", "maxmemory", "0"])
        let after = pushThroughFailures(e1, push, seconds: 30) { $0.accepted.count >= 20 }
        #expect(after.accepted.count >= 20, "serves again by itself")
        let answered = before.accepted + full.accepted + after.accepted
        var kept: Set<String> = []
        #expect(
            try eventually(10) {
                kept = Set(try e2.notifications(token: token, limit: 100_000).compactMap { $0["apnsId"]?.stringValue })
                return answered.allSatisfy(kept.contains)
            }, "answered 200 but missing from the shared journal: \(answered.filter { !kept.contains($0) }.count) of \(answered.count)")
    }

    /// A Redis set up to evict keys when full (a memory limit and an LRU policy) would drop
    /// acknowledged pushes on its own: the instance says so in its log as it starts.
    @Test func aRedisThatMayEvictKeysIsNamedInTheLog() throws {
        let redis = try RedisServerProcess(extraArguments: ["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"])
        let emulator = try EmulatorProcess(["--redis", redis.url])
        #expect(try eventually(5) { emulator.stderr.contains("may evict keys when it is full") })
        #expect(emulator.stderr.contains("maxmemory-policy allkeys-lru"))
        #expect(emulator.stderr.contains("Set maxmemory-policy noeviction"))

        let careful = try RedisServerProcess(extraArguments: ["--maxmemory", "100mb", "--maxmemory-policy", "noeviction"])
        let quiet = try EmulatorProcess(["--redis", careful.url])
        #expect(try quiet.admin("GET", "/readyz").status == 200)
        #expect(!quiet.stderr.contains("may evict keys"))
    }

    /// Each device's deliveries are decided by one instance, its owner. A push another instance
    /// takes is answered 200 there (the record says it was handed on), handed to the owner and
    /// routed by it; both count it in /metrics. An owner that stops (SIGSTOP, then SIGKILL)
    /// with hand-offs not yet routed leaves them to the instance its devices move to: each
    /// push answered 200 ends up delivered.
    @Test func aPushForAnotherInstancesDeviceIsRoutedByItsOwnerEvenAfterTheOwnerDies() throws {
        let cluster = try EmulatorCluster(count: 2)
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        // A device e2 owns: e1 hands pushes for it off.
        var target: (deviceID: String, token: String)?
        for _ in 0..<40 where target == nil {
            let made = try e1.createDevice()
            #expect(try eventually { try e2.admin("GET", "/api/v1/devices/\(made.deviceID)").json["ownerInstance"]?.intValue != nil })
            let before = try e1.metric("apns_emulator_pushes_handed_off_total")
            let probe = APNsResult(try e1.connect().send(try e1.push(made.token).request))
            #expect(probe.status == 200)
            if try e1.metric("apns_emulator_pushes_handed_off_total") > before {
                target = made
                #expect(try eventually { try e1.admin("GET", "/api/v1/notifications/\(probe.apnsID!)").json["outcome"] == "delivered" })
            }
        }
        let (deviceID, token) = try #require(target, "no device owned by the second instance among 40")
        let owner = try #require(try e1.admin("GET", "/api/v1/devices/\(deviceID)").json["ownerInstance"]?.intValue)
        #expect(try e2.admin("GET", "/api/v1/devices/\(deviceID)").json["ownerInstance"]?.intValue == owner, "both agree who owns it")
        #expect(try e2.metric("apns_emulator_handoffs_routed_total") >= 1, "the owner routed what it was handed")

        // The owner stops: what e1 hands it now waits, answered 200, and is routed once the
        // device has moved to e1.
        Glibc.kill(e2.process.processIdentifier, SIGSTOP)
        var answered: [String] = []
        let connection = try e1.connect()
        for index in 0..<5 {
            let result = APNsResult(
                try connection.send(try e1.push(token, payload: #"{"aps":{"alert":"while the owner is away \#(index)"}}"#).request))
            #expect(result.status == 200)
            if result.status == 200, let id = result.apnsID { answered.append(id) }
        }
        for id in answered {
            #expect(try e1.admin("GET", "/api/v1/notifications/\(id)").json["outcome"] == "pending", "handed off, not routed yet")
        }
        cluster.kill(1)
        #expect(
            try eventually(20) { try e1.admin("GET", "/api/v1/devices/\(deviceID)").json["ownerInstance"]?.intValue != owner },
            "the device moved")
        for id in answered {
            #expect(
                try eventually(10) { try e1.admin("GET", "/api/v1/notifications/\(id)").json["outcome"] == "delivered" },
                "\(id) routed by the new owner")
        }
    }

    /// The instance holding a device's socket owns the device: a push another instance takes
    /// is handed to it, one it takes itself is routed there, the device's acks are applied
    /// there, and once the socket is gone the hash over the members decides again.
    /// `POST /api/v1/reset` through one instance attaches again the devices whose sockets are on
    /// another, as a reset through their own instance does: they get `registered` with fresh
    /// tokens, are listed everywhere, and take pushes through any instance.
    @Test func aResetThroughOneInstanceAttachesTheDevicesConnectedToAnother() throws {
        let cluster = try EmulatorCluster(count: 2)
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        let device = try DeviceProcess(e2, deviceID: "reset-phone", extra: ["--app-state", "foreground"])
        let before = try device.registeredToken()
        #expect(try e1.admin("POST", "/api/v1/reset").status == 200)
        let after = try #require(device.next("registered", timeout: 10)?["token"]?.stringValue, "no registered event after the reset")
        #expect(after != before, "a reset issues fresh tokens")
        for emulator in [e1, e2] {
            #expect(try eventually { try emulator.admin("GET", "/api/v1/devices/reset-phone").status == 200 }, "listed on every instance")
        }
        let pushed = APNsResult(try e1.connect().send(try e1.push(after).request))
        #expect(pushed.status == 200)
        #expect(try #require(device.next("notification"))["apnsId"]?.stringValue == pushed.apnsID)
    }

    /// A reset leaves the shared log holding the reset alone: a test suite that makes a batch of
    /// devices and resets, over and over, grew Redis by the batches (each one log entry, and
    /// the log is bounded in entries). The other instance follows the reset as before.
    @Test(.requires(.redisCLI)) func aResetTrimsTheSharedLog() throws {
        let cluster = try EmulatorCluster(count: 2)
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        func logLength() throws -> Int {
            Int(
                try run("/usr/bin/env", ["redis-cli", "-p", String(cluster.redis.port), "XLEN", "apns-emulator:log"]).out.trimmingCharacters(
                    in: .whitespacesAndNewlines)) ?? -1
        }
        let batch = try e1.admin("POST", "/api/v1/devices/batch", body: ["bundleId": "com.example.app", "environment": "sandbox", "count": 2000])
        #expect(batch.status == 201 || batch.status == 200, "\(batch.raw.prefix(300))")
        let token = try e1.createDevice().token
        #expect(try eventually(10) { try e2.admin("GET", "/api/v1/tokens/\(token)").status == 200 })
        let before = try logLength()
        #expect(before >= 3, "\(before) entries before the reset")
        #expect(try e2.admin("POST", "/api/v1/reset").status == 200)
        let after = try logLength()
        #expect(after >= 1 && after < before, "\(after) entries after the reset (\(before) before)")
        // Both copies followed it: the batch's devices are gone, and a new device is shared.
        for emulator in [e1, e2] {
            #expect(try eventually(10) { try emulator.admin("GET", "/api/v1/tokens/\(token)").status == 404 }, "the reset reached every copy")
        }
        let fresh = try e1.createDevice().token
        #expect(try eventually(10) { try e2.admin("GET", "/api/v1/tokens/\(fresh)").status == 200 })
    }

    /// Pushes to one device sent one after another (each after the last one's 200) through
    /// every instance in turn reach it in that order, and the newest is the one a device offline
    /// keeps: the owner holds a push it took itself until it has read what the others answered
    /// before it (without that, about one push in four overtook the one before it).
    @Test func aDevicesPushesKeepTheOrderTheyWereAnsweredInThroughEveryInstance() throws {
        let cluster = try EmulatorCluster(count: 3)
        let instances = cluster.instances
        #expect(
            try eventually {
                try instances[0].admin("GET", "/api/v1/info").json["members"]?.arrayValue?.count == 3
            })
        let device = try DeviceProcess(instances[0], deviceID: "ordered-phone", extra: ["--app-state", "foreground"])
        let token = try device.registeredToken()
        let connections = try instances.map { try $0.connect() }
        func push(_ k: Int, to token: String) throws -> String {
            let result = APNsResult(
                try connections[k % 3].send(try instances[k % 3].push(token, payload: #"{"aps":{"alert":"push \#(k)"}}"#).request))
            #expect(result.status == 200)
            return try #require(result.apnsID)
        }
        var sent: [String] = []
        for k in 0..<90 { sent.append(try push(k, to: token)) }
        var received: [String] = []
        for _ in sent {
            guard let id = device.next("notification")?["apnsId"]?.stringValue else { break }
            received.append(id)
        }
        let overtaken = zip(received, sent).filter { $0 != $1 }.count
        #expect(received.count == sent.count && overtaken == 0, "\(received.count) of \(sent.count) received, \(overtaken) out of place")

        // A virtual device offline keeps one notification per app: the newest answered, also
        // when it comes online through the instance that answered that push a moment before
        // (its owner may not have routed it yet: the change under the lease routes it first).
        let offline = try instances[1].createDevice()
        for round in 0..<12 {
            #expect(try instances[round % 3].admin("PATCH", "/api/v1/devices/\(offline.deviceID)", body: ["online": false]).status == 200)
            var stored: [String] = []
            for k in round + 1...round + 4 { stored.append(try push(k, to: offline.token)) }
            #expect(try instances[(round + 4) % 3].admin("PATCH", "/api/v1/devices/\(offline.deviceID)", body: ["online": true]).status == 200)
            let newest = try #require(stored.last)
            #expect(try eventually { try instances[0].admin("GET", "/api/v1/notifications/\(newest)").json["outcome"] == "delivered" })
            for id in stored.dropLast() {
                let outcome = try instances[0].admin("GET", "/api/v1/notifications/\(id)").json["outcome"]
                #expect(outcome == "coalesced", "round \(round): \(id) \(outcome.map { "\($0)" } ?? "none")")
            }
        }

        // A device process that reconnects gets the newest only, through whichever instance.
        for round in 0..<3 {
            let id = "returning-phone-\(round)"
            var phone = try DeviceProcess(instances[round], deviceID: id, extra: ["--app-state", "foreground"])
            let phoneToken = try phone.registeredToken()
            phone.process.terminate()
            phone.process.waitUntilExit()
            for instance in instances {
                #expect(try eventually { try instance.admin("GET", "/api/v1/devices/\(id)").json["connected"] == false })
            }
            var stored: [String] = []
            for k in round + 1...round + 3 { stored.append(try push(k, to: phoneToken)) }
            phone = try DeviceProcess(instances[(round + 3) % 3], deviceID: id, extra: ["--app-state", "foreground"])
            #expect(phone.next("notification")?["apnsId"]?.stringValue == stored.last, "round \(round)")
            #expect(phone.noneBeforePong("notification"), "round \(round): only the newest comes")
        }
    }

    /// Two instances on one Redis and a device process (app in the foreground) on the first,
    /// which the second sees connected; the device's token.
    private func twoInstancesAndADeviceOnTheFirst(_ deviceID: String) throws -> (EmulatorCluster, DeviceProcess, String) {
        let cluster = try EmulatorCluster(count: 2)
        let device = try DeviceProcess(cluster.instances[0], deviceID: deviceID, extra: ["--app-state", "foreground"])
        let token = try device.registeredToken()
        #expect(try eventually { try cluster.instances[1].admin("GET", "/api/v1/devices/\(deviceID)").json["connected"]?.boolValue == true })
        return (cluster, device, token)
    }

    /// An instance paused long enough to be taken for stopped: the others mark its device
    /// disconnected and store its pushes. When it is back, the device's socket (still open,
    /// silent) is attached again: it gets what was stored, and later pushes arrive.
    @Test func aDeviceOnAnInstanceThatWasPausedIsAttachedAgainWhenItIsBack() throws {
        let (cluster, device, token) = try twoInstancesAndADeviceOnTheFirst("paused-phone")
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        Glibc.kill(e1.process.processIdentifier, SIGSTOP)
        #expect(
            try eventually(15) { try e2.admin("GET", "/api/v1/devices/paused-phone").json["connected"]?.boolValue == false },
            "taken for stopped, its device is disconnected")
        let meanwhile = APNsResult(try e2.connect().send(try e2.push(token, payload: #"{"aps":{"alert":"meanwhile"}}"#).request))
        #expect(meanwhile.status == 200)
        Glibc.kill(e1.process.processIdentifier, SIGCONT)
        #expect(device.next("notification", timeout: 20)?["apnsId"]?.stringValue == meanwhile.apnsID, "the stored push, once back")
        #expect(try eventually { try e2.admin("GET", "/api/v1/devices/paused-phone").json["connected"]?.boolValue == true })
        let after = APNsResult(try e2.connect().send(try e2.push(token, payload: #"{"aps":{"alert":"after"}}"#).request))
        #expect(after.status == 200)
        #expect(device.next("notification", timeout: 10)?["apnsId"]?.stringValue == after.apnsID)
    }

    /// Redis paused long enough for every heartbeat to lapse: the device whose socket stayed
    /// open reads connected on every instance afterwards, and a push after reaches it. (Once
    /// the first instance back marked it disconnected, and it stayed so for good, its pushes
    /// stored, answered 200; later the instance holding the socket attached it again when it
    /// read that; now no instance takes another for stopped because Redis was away:
    /// `noInstanceTakesAnotherForStoppedBecauseRedisStopped`.)
    @Test func aDeviceSocketOutlivesARedisPause() throws {
        let (cluster, device, token) = try twoInstancesAndADeviceOnTheFirst("outage-phone")
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        cluster.redis.pause()
        // A push through each finds Redis silent (no answer, or 503): both are cut off.
        let started = Date()
        for taker in [e1, e2] { _ = try? taker.connect().send(try taker.push(token).request) }
        usleep(UInt32(max(0, 5 - Date().timeIntervalSince(started)) * 1_000_000))
        cluster.redis.resume()
        #expect(try eventually(20) { try e1.admin("GET", "/readyz").status == 200 && e2.admin("GET", "/readyz").status == 200 })
        for emulator in [e1, e2] {
            #expect(
                try eventually(10) { try emulator.admin("GET", "/api/v1/devices/outage-phone").json["connected"]?.boolValue == true },
                "connected again on every instance")
        }
        for (n, taker) in [e1, e2].enumerated() {
            let sent = APNsResult(try taker.connect().send(try taker.push(token, payload: #"{"aps":{"alert":"after \#(n)"}}"#).request))
            #expect(sent.status == 200)
            // A push sent during the pause may have reached Redis in its last moment (its write
            // waited in the socket): it may arrive first.
            var arrived = false
            while !arrived, let notification = device.next("notification", timeout: 10) {
                arrived = notification["apnsId"]?.stringValue == sent.apnsID
            }
            #expect(arrived, "through instance \(n + 1)")
        }
    }

    /// Redis paused for 5 s, or killed and started again from its append-only file 5 s later,
    /// with a device connected to each of two instances, and pushes through both before and
    /// once both serve again. (None in between: a device whose ack reaches an instance that
    /// cannot reach Redis yet is told `unavailable` and reconnects, a real disconnection; the
    /// first instance back relays deliveries to the other's sockets under the lease, so that
    /// happens in the moment the other is still reconnecting.) Every heartbeat lapsed in Redis
    /// meanwhile, only because Redis did not run. Once it is back, neither instance takes the
    /// other for stopped, no push for either device is stored for a device offline or
    /// coalesced, and every push answered 200 reaches its device. Before, the first instance
    /// back marked the other's device disconnected (its socket never dropped), and the pushes
    /// that instance answered 200 until it read that were stored, then replaced.
    @Test(arguments: ["paused", "killed and restarted"])
    func noInstanceTakesAnotherForStoppedBecauseRedisStopped(how: String) throws {
        let cluster = try EmulatorCluster(count: 2)
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        let devices = try [e1, e2].enumerated().map { index, emulator in
            try DeviceProcess(emulator, deviceID: "steady-phone-\(index + 1)", extra: ["--app-state", "foreground"])
        }
        let tokens = try devices.map { try $0.registeredToken() }
        for (index, other) in [e2, e1].enumerated() {
            #expect(try eventually { try other.admin("GET", "/api/v1/devices/steady-phone-\(index + 1)").json["connected"]?.boolValue == true })
        }
        let answered = Locked<[(id: String, device: Int)]>([])
        let pushing = Atomic<Bool>(true)
        let finished = Atomic<Bool>(false)
        let group = DispatchGroup()
        for emulator in [e1, e2, e1, e2] {
            DispatchQueue.global().async(group: group) {
                var connection: HTTP2ClientConnection?
                var n = 0
                while !finished.load(ordering: .acquiring) {
                    guard pushing.load(ordering: .acquiring) else {
                        usleep(5_000)
                        continue
                    }
                    n += 1
                    do {
                        if connection == nil { connection = try emulator.connect() }
                        let result = APNsResult(try connection!.send(try emulator.push(tokens[n % 2]).request))
                        if result.status == 200, let id = result.apnsID { answered.withLock { $0.append((id, n % 2)) } }
                    } catch {
                        connection = nil
                        Thread.sleep(forTimeInterval: 0.05)
                    }
                }
            }
        }
        func undelivered() -> [String] {
            let printed = devices.map { Set($0.events("notification").compactMap { $0["apnsId"]?.stringValue }) }
            return answered.withLock { $0 }.filter { !printed[$0.device].contains($0.id) }.map(\.id)
        }
        Thread.sleep(forTimeInterval: 2)
        pushing.store(false, ordering: .releasing)
        // Every push delivered and acked before Redis goes.
        #expect(try eventually(10) { undelivered().isEmpty })
        Thread.sleep(forTimeInterval: 0.5)
        if how == "paused" {
            cluster.redis.pause()
            Thread.sleep(forTimeInterval: 5)
            cluster.redis.resume()
        } else {
            cluster.redis.kill()
            Thread.sleep(forTimeInterval: 5)
            try cluster.redis.restart()
        }
        #expect(try eventually(20) { try e1.admin("GET", "/readyz").status == 200 && e2.admin("GET", "/readyz").status == 200 })
        pushing.store(true, ordering: .releasing)
        Thread.sleep(forTimeInterval: 4)
        finished.store(true, ordering: .releasing)
        group.wait()
        for emulator in [e1, e2] {
            for taken in ["marked disconnected", "connected here", "missed their heartbeat", "disconnected (connection"] {
                let line = emulator.stderr.split(separator: "\n").first { $0.contains(taken) }
                #expect(line == nil, "\(how): \(line ?? "")")
            }
        }
        let pushes = answered.withLock { $0 }
        var missing: [String] = []
        _ = try eventually(20) {
            missing = undelivered()
            return missing.isEmpty
        }
        print("Redis \(how): \(pushes.count) pushes answered 200, \(missing.count) did not reach their device")
        #expect(pushes.count > 100, "\(pushes.count) answered 200")
        #expect(missing.count == 0, "\(how): pushes answered 200 that never reached their connected device, such as \(missing.prefix(3))")
        for token in tokens {
            let coalesced = try e1.notifications(token: token, limit: 100_000).filter { $0["outcome"]?.stringValue == "coalesced" }
                .compactMap { $0["apnsId"]?.stringValue }
            #expect(coalesced.count == 0, "\(how): pushes for a connected device coalesced, such as \(coalesced.prefix(3))")
        }
    }

    /// Redis killed and started again on its port from another Redis's data directory, which
    /// holds another shared state (seeded by an instance that stopped since), while two
    /// instances take pushes: no running instance follows that state, so it is not taken up
    /// (that would drop everything answered here): the instances restore the newest copy among
    /// them in its place. Every push answered 200 is in both journals, the tokens still work,
    /// and an instance started while they restore it waits for the restore, takes a number of
    /// its own and delivers to a device connected to another. Before, both reloaded the other
    /// state: every record, device and token was gone (400 BadDeviceToken), and an instance
    /// started afterwards took the number of a running one.
    @Test func aRedisReplacedByAnotherStatesDataIsNotTakenUp() throws {
        // Another shared state, in another Redis's data directory.
        let other = try RedisServerProcess(persistent: true)
        do {
            let throwaway = try EmulatorProcess(["--redis", other.url])
            _ = try throwaway.createDevice()
        }
        other.stop()

        let cluster = try EmulatorCluster(count: 2)
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        let device = try DeviceProcess(e1, deviceID: "swapped-phone", extra: ["--app-state", "foreground"])
        let tokens = [try device.registeredToken(), try e2.createDevice().token]
        let answered = Locked<[String]>([])
        let refused = Locked<[String]>([])
        let deadline = Date().addingTimeInterval(10)
        let group = DispatchGroup()
        for emulator in [e1, e2, e1, e2] {
            DispatchQueue.global().async(group: group) {
                var connection: HTTP2ClientConnection?
                var n = 0
                while Date() < deadline {
                    n += 1
                    do {
                        if connection == nil { connection = try emulator.connect() }
                        let result = APNsResult(try connection!.send(try emulator.push(tokens[n % 2]).request))
                        if result.status == 200, let id = result.apnsID { answered.withLock { $0.append(id) } }
                        if result.status == 400 { refused.withLock { $0.append(result.reason ?? "") } }
                    } catch {
                        connection = nil
                        Thread.sleep(forTimeInterval: 0.05)
                    }
                }
            }
        }
        Thread.sleep(forTimeInterval: 2)
        cluster.redis.kill()
        let files = FileManager.default
        try files.removeItem(atPath: cluster.redis.directory + "/appendonlydir")
        try files.copyItem(atPath: other.directory + "/appendonlydir", toPath: cluster.redis.directory + "/appendonlydir")
        try cluster.redis.restart()
        #expect(try eventually(20) { [e1, e2].contains { $0.stderr.contains("that no running instance follows") } })
        // Started during the restore (it waits for it, rather than take up the other state).
        let e3 = try EmulatorProcess(["--redis", cluster.redis.url], sharedDirectory: cluster.shared)
        group.wait()
        #expect(try eventually(30) { try e1.admin("GET", "/readyz").status == 200 && e2.admin("GET", "/readyz").status == 200 })
        let pushes = answered.withLock { $0 }
        #expect(pushes.count > 100, "\(pushes.count) answered 200")
        let reasons = refused.withLock { $0 }
        #expect(reasons.count == 0, "pushes to the tokens refused 400 \(Set(reasons))")
        for (index, emulator) in [e1, e2, e3].enumerated() {
            let journaled = Set(try emulator.notifications(limit: 100_000).compactMap { $0["apnsId"]?.stringValue })
            let lost = pushes.filter { !journaled.contains($0) }
            #expect(lost.count == 0, "instance \(index + 1) lacks pushes answered 200, such as \(lost.prefix(3))")
            for token in tokens {
                let result = APNsResult(try emulator.connect().send(try emulator.push(token).request))
                #expect(result.status == 200, "a token made before answers \(result.status) \(result.reason ?? "")")
            }
        }

        let numbers = try [e1, e2, e3].map { try #require(try $0.admin("GET", "/api/v1/info").json["instance"]?.intValue) }
        #expect(Set(numbers).count == 3, "instance numbers \(numbers)")
        let sent = APNsResult(try e3.connect().send(try e3.push(tokens[0], payload: #"{"aps":{"alert":"after"}}"#).request))
        #expect(sent.status == 200)
        var arrived = false
        while !arrived, let notification = device.next("notification", timeout: 10) {
            arrived = notification["apnsId"]?.stringValue == sent.apnsID
        }
        #expect(arrived, "a push through the new instance reaches the device connected to the first")
    }

    @Test func theInstanceHoldingADevicesSocketOwnsTheDevice() throws {
        let cluster = try EmulatorCluster(count: 2)
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        let socketInstance = Int(try #require(try e2.admin("GET", "/api/v1/info").json["instance"]?.intValue))
        var members: [Int] = []
        #expect(
            try eventually {
                members = try e2.admin("GET", "/api/v1/info").json["members"]?.arrayValue?.compactMap(\.intValue).map(Int.init) ?? []
                return members.count == 2
            })
        // A device the hash gives to the first instance, its socket on the second.
        let byHash = DeviceOwnership(members: members, me: 0)
        let deviceID = try #require((0..<64).lazy.map { "socket-phone-\($0)" }.first { byHash.hashOwner(of: $0) != socketInstance })
        let device = try DeviceProcess(e2, deviceID: deviceID, extra: ["--app-state", "foreground"])
        let token = try device.registeredToken()
        for emulator in [e1, e2] {
            #expect(
                try eventually {
                    try emulator.admin("GET", "/api/v1/devices/\(deviceID)").json["ownerInstance"]?.intValue.map(Int.init) == socketInstance
                },
                "every instance takes the socket's instance for the owner")
        }

        let handedOff = try e1.metric("apns_emulator_pushes_handed_off_total")
        let routed = try e2.metric("apns_emulator_handoffs_routed_total")
        let fromFirst = APNsResult(try e1.connect().send(try e1.push(token, payload: #"{"aps":{"alert":"via the first"}}"#).request))
        #expect(fromFirst.status == 200)
        #expect(try #require(device.next("notification"))["apnsId"]?.stringValue == fromFirst.apnsID)
        #expect(try e1.metric("apns_emulator_pushes_handed_off_total") == handedOff + 1)
        #expect(try eventually { try e2.metric("apns_emulator_handoffs_routed_total") == routed + 1 })
        let fromSecond = APNsResult(try e2.connect().send(try e2.push(token, payload: #"{"aps":{"alert":"via the second"}}"#).request))
        #expect(fromSecond.status == 200)
        #expect(try #require(device.next("notification"))["apnsId"]?.stringValue == fromSecond.apnsID)
        #expect(try e2.metric("apns_emulator_pushes_handed_off_total") == 0, "its own device: routed where it was taken")
        for id in [fromFirst.apnsID, fromSecond.apnsID].compactMap({ $0 }) {
            // Acknowledged by the device, on the instance that owns it; every instance sees it.
            #expect(try eventually { try e1.admin("GET", "/api/v1/notifications/\(id)").json["outcome"] == "delivered" })
            #expect(
                try eventually {
                    let log = try e1.admin("GET", "/api/v1/notifications/\(id)/log").json["log"]?.arrayValue ?? []
                    return log.contains { $0["state"] == "acknowledged" }
                }, "\(id): its ack is in the delivery log every instance shows")
            // A priority-10 push on its way to its device's instance was not stored for power.
            let log = try e1.admin("GET", "/api/v1/notifications/\(id)/log").json["log"]?.arrayValue ?? []
            #expect(log.compactMap { $0["state"]?.stringValue } == ["received", "accepted", "delivered", "acknowledged"], "\(log)")
        }

        device.process.terminate()
        #expect(device.exitStatus() != nil)
        for emulator in [e1, e2] {
            #expect(
                try eventually {
                    try emulator.admin("GET", "/api/v1/devices/\(deviceID)").json["ownerInstance"]?.intValue.map(Int.init)
                        == byHash.hashOwner(of: deviceID)
                },
                "without its socket, the hash's owner again")
        }
    }

    /// An instance killed (SIGKILL) while four providers push to it in batches: every push it
    /// answered 200 is in the shared journal the other instance shows, since an answer leaves
    /// only once Redis has the write that holds it.
    @Test func nothingAcknowledgedIsLostWhenAnInstanceIsKilledMidStream() throws {
        let cluster = try EmulatorCluster(count: 2)
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        let token = try e1.createDevice().token
        let pushers = try BatchPushers(e1, token: token, batches: 200, reconnect: false)
        #expect(try eventually(20) { pushers.acknowledged.count >= 400 }, "the providers got under way")
        cluster.kill(0)
        #expect(try eventually(20) { pushers.finished })
        let answered = pushers.acknowledged
        #expect(answered.count < 8_000, "the kill came while they were still pushing")
        print("instance killed mid-stream: \(answered.count) pushes had been answered 200")
        try expectJournaled(answered, token: token, on: e2)
    }

    /// Redis stops answering (SIGSTOP) while four providers push in batches: the writes in
    /// flight and everything queued behind them fail together, those answers are never sent,
    /// and every push that was answered 200 is in the shared journal once Redis is back.
    @Test func nothingAcknowledgedIsLostWhenRedisStopsUnderManyConnections() throws {
        let cluster = try EmulatorCluster(count: 2)
        let (e1, e2) = (cluster.instances[0], cluster.instances[1])
        let token = try e1.createDevice().token
        let pushers = try BatchPushers(e1, token: token, batches: nil, reconnect: true)
        #expect(try eventually(20) { pushers.acknowledged.count >= 400 }, "the providers got under way")
        cluster.redis.pause()
        usleep(3_000_000)
        cluster.redis.resume()
        #expect(try eventually(15) { try e1.admin("GET", "/readyz").status == 200 && e2.admin("GET", "/readyz").status == 200 })
        usleep(300_000)
        pushers.stop()
        #expect(try eventually(30) { pushers.finished })
        let answered = pushers.acknowledged
        try expectJournaled(answered, token: token, on: e2)
        print("Redis paused under four providers: \(answered.count) pushes answered 200, all in the shared journal")
    }

    /// Every one of `answered` is in `emulator`'s journal (within 10 s).
    private func expectJournaled(_ answered: [String], token: String, on emulator: EmulatorProcess) throws {
        var journaled: Set<String> = []
        #expect(
            try eventually(10) {
                journaled = Set(try emulator.notifications(token: token, limit: 100_000).compactMap { $0["apnsId"]?.stringValue })
                return journaled.isSuperset(of: answered)
            }, "\(Set(answered).subtracting(journaled).count) of \(answered.count) acknowledged pushes missing from the shared journal")
    }

    /// A Live Activity update taken by another instance in the moments after the instance
    /// holding its device's socket was killed goes to that dead socket (activity frames are not
    /// acknowledged); the device, back through the balancer, hears of it from its hello.
    @Test func anActivityUpdateSentToADeadSocketReachesTheDeviceWhenItIsBack() throws {
        let cluster = try EmulatorCluster()
        let device = try DeviceProcess(
            cluster.instances[0], deviceID: "la-roaming", extra: ["--live-activity-types", "DeliveryAttributes"], address: cluster.device)
        _ = try #require(device.nextActivity("token"), "no push-to-start token")
        let (victim, survivor) = try cluster.holderAndAnother()
        let started = try survivor.admin(
            "POST", "/api/v1/devices/la-roaming/apps/\(EmulatorProcess.bundleID)/activities",
            body: ["attributesType": "DeliveryAttributes", "contentState": ["eta": 15]])
        #expect(started.status == 201, "\(started.raw)")
        let activityID = try #require(started.json["activityId"]?.stringValue)
        let token = try #require(started.json["pushToken"]?.stringValue)
        _ = try #require(device.nextActivity("started"), "the device did not hear of the start")

        cluster.kill(victim)
        // At once, before the survivor takes the victim for stopped: the frame goes to its socket.
        var push = try survivor.push(
            token, payload: #"{"aps":{"event":"update","timestamp":\#(Int(Date().timeIntervalSince1970)),"content-state":{"eta":3}}}"#,
            topic: EmulatorProcess.bundleID + ".push-type.liveactivity")
        push.pushType = "liveactivity"
        push.priority = "5"
        #expect(APNsResult(try survivor.connect().send(push.request)).status == 200)
        #expect(device.next("disconnected", timeout: 10) != nil)
        var heard: JSONValue?
        #expect(
            try eventually(20) {
                guard let event = device.next("activity", timeout: 1) else { return false }
                if event["activityId"]?.stringValue == activityID, event["activity"]?["contentState"]?["eta"]?.intValue == 3 { heard = event }
                return heard != nil
            }, "the device never heard of the update after reconnecting")
        #expect(["updated", "current"].contains(heard?["change"]?.stringValue ?? ""), "\(heard.map { "\($0)" } ?? "-")")
    }

    /// Keys read from files stay each instance's own: one started without a key another has
    /// (here the demo's) says so at start, since a push signed with it is refused there.
    @Test func anInstanceWithoutAKeyAnotherHasSaysSo() throws {
        let redis = try RedisServerProcess()
        let shared = try makeSharedDirectory()
        defer { try? FileManager.default.removeItem(atPath: shared) }
        let first = try EmulatorProcess(["--redis", redis.url, "--demo", "on"], sharedDirectory: shared)
        let second = try EmulatorProcess(["--redis", redis.url, "--demo", "off"], sharedDirectory: shared)
        #expect(
            second.stderr.contains(
                "instance 1 has key DEMOKEY000 (team DEMOTEAM00) from its configuration and this one does not"), "\(second.stderr)")
        #expect(!first.stderr.contains("from its configuration"), "the first had nobody to compare with")
        // The same configuration: nothing said.
        let third = try EmulatorProcess(["--redis", redis.url, "--demo", "on"], sharedDirectory: shared)
        #expect(!third.stderr.contains("instance 1 has key"), "\(third.stderr)")
    }

    /// Every instance stopped, an app added to the configuration, started again on the same
    /// Redis: the app is there (as over a state directory), and an app the shared state gives
    /// to another team than the configuration does is said in the log.
    @Test func anAppAddedToTheConfigurationWhileEveryInstanceWasStoppedIsThereAfterwards() throws {
        let redis = try RedisServerProcess()
        let shared = try makeSharedDirectory()
        defer { try? FileManager.default.removeItem(atPath: shared) }
        var first: EmulatorProcess? = try EmulatorProcess(
            ["--redis", redis.url, "--app", "OTHERTEAM1:com.example.elsewhere"], sharedDirectory: shared)
        _ = try first?.createDevice()
        first = nil  // stopped (SIGTERM)
        let team = EmulatorProcess.teamID
        let again = try EmulatorProcess(
            ["--redis", redis.url, "--app", "\(team):com.example.added", "--app", "\(team):com.example.elsewhere"],
            sharedDirectory: shared)
        let apps = try again.admin("GET", "/api/v1/apps").json["apps"]?.arrayValue ?? []
        let owners = Dictionary(
            uniqueKeysWithValues: apps.compactMap { app in
                app["bundleId"]?.stringValue.map { ($0, app["teamId"]?.stringValue ?? "") }
            })
        #expect(owners["com.example.added"] == team, "\(owners)")
        #expect(owners["com.example.elsewhere"] == "OTHERTEAM1", "the shared state's owner stays: \(owners)")
        #expect(again.stderr.contains("app com.example.elsewhere belongs to team OTHERTEAM1 in the shared state"), "\(again.stderr)")
        let device = try again.createDevice(bundleID: "com.example.added")
        let answer = APNsResult(try again.connect().send(try again.push(device.token, topic: "com.example.added").request))
        #expect(answer.status == 200, "\(answer)")
        // A later instance finds it in the shared state as any other app.
        let third = try EmulatorProcess(["--redis", redis.url], sharedDirectory: shared)
        #expect(try third.admin("GET", "/api/v1/apps").raw.contains("com.example.added"))
        #expect(!third.stderr.contains("belongs to team"))
    }

    @Test func devicesOfAKilledInstanceReconnectAndGetTheirNotifications() throws {
        let cluster = try EmulatorCluster()
        let e1 = cluster.instances[0]
        let device = try DeviceProcess(e1, deviceID: "roaming-phone", extra: ["--app-state", "foreground"], address: cluster.device)
        let token = try device.registeredToken()
        let (victim, survivor) = try cluster.holderAndAnother()
        let first = APNsResult(try survivor.connect().send(try survivor.push(token).request))
        #expect(first.status == 200)
        #expect(device.next("notification") != nil)
        // Its ack reaches the shared state before the kill: an ack the victim never wrote leaves
        // the notification in flight, sent again after the reconnect (at least once, as a
        // dropped connection at Apple), ahead of the one this test is about.
        #expect(try eventually { try survivor.admin("GET", "/api/v1/notifications/\(first.apnsID!)").json["outcome"] == "delivered" })

        cluster.kill(victim)
        #expect(device.next("disconnected", timeout: 10) != nil)
        // Accepted while the device has no socket anywhere: stored, and delivered once it is back.
        let pushed = APNsResult(try survivor.connect().send(try survivor.push(token, payload: #"{"aps":{"alert":"while away"}}"#).request))
        #expect(pushed.status == 200)
        let event = try #require(device.next("notification", timeout: 20), "the device did not get its notification after reconnecting")
        #expect(event["apnsId"]?.stringValue == pushed.apnsID)
        #expect(try eventually { try survivor.admin("GET", "/api/v1/notifications/\(pushed.apnsID!)").json["outcome"] == "delivered" })
        #expect(try cluster.instanceHoldingDevices() != victim)
    }
}

/// `--redis` on a real Redis Cluster: three master nodes on loopback, joined by
/// `redis-cli --cluster create`. The state's keys share one hash tag, so one node holds all of
/// them, and the scripts (which touch keys they compute) run there.
@Suite("Several instances on a Redis Cluster", .serialized, .requires(.redisServer), .requires(.redisCLI))
struct RedisClusterTests {
    @Test func instancesPointedAtAnyNodeShareTheStateOnTheNodeThatOwnsItsSlot() throws {
        let cluster = try RedisClusterProcess()
        let shared = try makeSharedDirectory()
        defer { try? FileManager.default.removeItem(atPath: shared) }
        let owner = try cluster.owner(of: "{apns-emulator:}state")
        // Each instance starts from another node than the owner (MOVED would answer there).
        let others = cluster.nodes.indices.filter { $0 != owner }
        let e1 = try EmulatorProcess(["--redis", cluster.url(node: others[0])], sharedDirectory: shared)
        let e2 = try EmulatorProcess(["--redis", cluster.url(node: others[1])], sharedDirectory: shared)

        let token = try e1.createDevice().token
        #expect(try eventually { try e2.admin("GET", "/api/v1/devices").json["devices"]?.arrayValue?.count == 1 })
        var accepted: [String] = []
        for emulator in [e1, e2, e1, e2] {
            let result = APNsResult(try emulator.connect().send(try emulator.push(token).request))
            #expect(result.status == 200)
            accepted += result.apnsID.map { [$0] } ?? []
        }
        // At once: a read follows the shared log on the node that owns it first.
        for emulator in [e1, e2] {
            let listed = Set(try emulator.notifications(token: token).compactMap { $0["apnsId"]?.stringValue })
            #expect(listed.isSuperset(of: accepted), "every push on both instances' journals")
        }
        // Every key on the owner, under the hash tag; none on the other nodes.
        for (index, node) in cluster.nodes.enumerated() {
            let keys = try run("/usr/bin/env", ["redis-cli", "-p", String(node.port), "--scan"]).out
                .split(whereSeparator: \.isNewline).map(String.init)
            if index == owner {
                #expect(keys.contains("{apns-emulator:}state") && keys.contains("{apns-emulator:}log"), "\(keys)")
                #expect(keys.allSatisfy { $0.hasPrefix("{apns-emulator:}") }, "\(keys)")
            } else {
                #expect(keys.isEmpty, "node \(index) holds \(keys)")
            }
        }
        // A restart of an instance finds the state there again.
        let restarted = try EmulatorProcess(["--redis", cluster.url(node: owner)], sharedDirectory: shared)
        #expect(APNsResult(try restarted.connect().send(try restarted.push(token).request)).status == 200)
    }

    /// A failover of the node that owns the keys' slot. Graceful (`CLUSTER FAILOVER` on the
    /// owner's replica): the old owner becomes a replica that answers PING but MOVED for the
    /// keys; the instance asks the cluster again and goes on with the new owner (it dialled the
    /// old one every half second for good). The owner killed, with `--redis` naming it: the
    /// instance asks the other nodes it learned of (it stayed 503, dialling the dead node, until
    /// that very node came back). Either way every push answered 200 stays in the journal.
    @Test(arguments: ["graceful", "the owner killed"])
    func anInstanceFollowsItsSlotThroughAFailover(how: String) throws {
        let cluster = try RedisClusterProcess()
        let shared = try makeSharedDirectory()
        defer { try? FileManager.default.removeItem(atPath: shared) }
        let owner = try cluster.owner(of: "{apns-emulator:}state")
        let replica = try cluster.addReplica(of: owner)
        // Graceful: pointed at another node, which answers CLUSTER SLOTS from its own view and
        // learns of the failover a moment after the new owner does.
        let named = how == "graceful" ? (owner + 1) % cluster.nodes.count : owner
        let e1 = try EmulatorProcess(["--redis", cluster.url(node: named)], sharedDirectory: shared)
        let token = try e1.createDevice().token
        var accepted: [String] = []
        func push() throws -> Int? {
            guard let reply = try? e1.connect().send(try e1.push(token).request) else { return nil }
            let result = APNsResult(reply)
            if result.status == 200, let id = result.apnsID { accepted.append(id) }
            return result.status
        }
        #expect(try push() == 200)
        if how == "graceful" {
            let failover = try run("/usr/bin/env", ["redis-cli", "-p", String(replica.port), "cluster", "failover"])
            #expect(failover.out.contains("OK"), "\(failover.out) \(failover.err)")
        } else {
            cluster.nodes[owner].kill()
        }
        #expect(
            try eventually(20) { try run("/usr/bin/env", ["redis-cli", "-p", String(replica.port), "role"]).out.hasPrefix("master") },
            "the replica took over")
        #expect(try eventually(20, pollingEvery: 0.3) { try push() == 200 }, "pushes accepted again after the failover")
        #expect(try push() == 200)
        #expect(try e1.admin("GET", "/readyz").status == 200)
        #expect(
            try eventually {
                Set(try e1.notifications(token: token, limit: 1000).compactMap { $0["apnsId"]?.stringValue }).isSuperset(of: accepted)
            }, "every push answered 200 is in the journal")
    }

    /// The keys' slot moves to another node while two instances run (a reshard): they are
    /// answered MOVED, find the new owner and go on with the same state; nothing they answered
    /// 200 is lost, before or after.
    @Test func instancesFollowTheirSlotToANewOwner() throws {
        let cluster = try RedisClusterProcess()
        let shared = try makeSharedDirectory()
        defer { try? FileManager.default.removeItem(atPath: shared) }
        let key = "{apns-emulator:}state"
        let owner = try cluster.owner(of: key)
        let e1 = try EmulatorProcess(["--redis", cluster.url(node: owner)], sharedDirectory: shared)
        let e2 = try EmulatorProcess(["--redis", cluster.url(node: owner)], sharedDirectory: shared)
        let token = try e1.createDevice().token
        #expect(try eventually { try e2.admin("GET", "/api/v1/devices").json["devices"]?.arrayValue?.count == 1 })
        var accepted: [String] = []
        func push(_ emulator: EmulatorProcess) throws -> Int? {
            // A connection dropped unanswered (a write that failed while the slot moved) is no
            // answer at all: nothing was promised.
            guard let reply = try? emulator.connect().send(try emulator.push(token).request) else { return nil }
            let result = APNsResult(reply)
            if result.status == 200, let id = result.apnsID { accepted.append(id) }
            return result.status
        }
        for emulator in [e1, e2, e1, e2] { #expect(try push(emulator) == 200) }

        let newOwner = cluster.nodes.indices.first { $0 != owner }!
        try cluster.moveSlot(of: key, to: newOwner)
        #expect(try cluster.owner(of: key) == newOwner)
        // Each instance is answered MOVED by the old owner, then works on the new one: a push
        // may meet the switch (503, or a dropped connection) but later ones are 200.
        for emulator in [e1, e2] {
            #expect(try eventually(15, pollingEvery: 0.2) { try push(emulator) == 200 }, "pushes accepted again after the move")
        }
        for emulator in [e1, e2, e1, e2] { #expect(try push(emulator) == 200) }
        let keys = try run("/usr/bin/env", ["redis-cli", "-p", String(cluster.nodes[newOwner].port), "--scan"]).out
        #expect(keys.contains("{apns-emulator:}state") && keys.contains("{apns-emulator:}log"), "\(keys)")
        // The heartbeats follow the slot too (their connection kept the old owner, which
        // answered MOVED for good, and each instance took the other for stopped).
        let newPort = String(cluster.nodes[newOwner].port)
        #expect(
            try eventually(5) {
                let alive = try run("/usr/bin/env", ["redis-cli", "-p", newPort, "--scan", "--pattern", "{apns-emulator:}alive:*"]).out
                return alive.split(separator: "\n").count == 2
            }, "both heartbeats on the new owner")
        Thread.sleep(forTimeInterval: 4)  // two sweeps of the members and their heartbeats
        for emulator in [e1, e2] {
            #expect(!emulator.stderr.contains("missed their heartbeat"), "\(emulator.stderr.suffix(1500))")
        }
        let left = try run("/usr/bin/env", ["redis-cli", "-p", String(cluster.nodes[owner].port), "--scan"]).out
        #expect(left.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty, "the old owner still holds \(left)")
        for emulator in [e1, e2] {
            #expect(
                try eventually {
                    Set(try emulator.notifications(token: token, limit: 1000).compactMap { $0["apnsId"]?.stringValue }).isSuperset(of: accepted)
                }, "every push answered 200, before and after the move, in both journals")
        }
    }
}
