import APNsCore
import CommandLineOptions
import Foundation
import Glibc
import MonotonicClock
import Networking

/// `apns-emulator bench-devices`: many device sockets from one process (thousands of `device`
/// processes would weigh more than the emulator). Connects N devices over a few event loops,
/// acks every notification, writes their tokens to a file (one a line) and a ready file, then
/// holds them until SIGTERM/SIGINT or --hold seconds and prints a JSON summary. Used by
/// scripts/bench.
let benchDevicesCommand = Subcommand(
    name: "bench-devices", summary: "Holds many simulated device sockets that ack every push.",
    specs: [
        OptionSpec("device", "HOST:PORT", default: "127.0.0.1:5223", "the device listener"),
        OptionSpec("count", "N", default: "1000", "devices (sockets) to connect"),
        OptionSpec("bundle", "BUNDLEID", default: "com.example.app", "the app every device has"),
        OptionSpec("id-prefix", "PREFIX", default: "bench-", "device ids PREFIX1…PREFIXN"),
        OptionSpec("loops", "N", default: "2", "event loops (threads)"),
        OptionSpec("tokens-file", "PATH", "write the devices' tokens here, one a line, once all are connected"),
        OptionSpec("ready-file", "PATH", "write {connected, failed, connectSeconds} here once all are connected"),
        OptionSpec("connect-timeout", "SECONDS", default: "120", "give up waiting for the connections after this long"),
        OptionSpec("hold", "SECONDS", default: "600", "keep the sockets this long at most, then print the summary"),
    ],
    helpFlags: ["--help"],
    run: runBenchDevices
)

private func runBenchDevices(_ command: Subcommand, _ args: [String]) -> Never {
    command.failing {
        let (options, _) = command.parse(args)
        // Every one of these has a default, so it is always set.
        func number(_ name: String, _ range: ClosedRange<Int>) throws -> Int {
            try options.integer(command.spec(name), in: range)!
        }
        let count = try number("count", 1...1_000_000)
        let loopCount = try number("loops", 1...64)
        let connectTimeout = try number("connect-timeout", 1...3600)
        let hold = try number("hold", 0...86_400)
        let address = try HostPort(parsing: options.string("device")!)
        let bundle = options.string("bundle")!
        let prefix = options.string("id-prefix")!

        // SIGTERM/SIGINT end the hold (then the summary); blocked before the loops start so
        // only this thread takes them.
        var stopSignals = sigset_t()
        sigemptyset(&stopSignals)
        sigaddset(&stopSignals, SIGTERM)
        sigaddset(&stopSignals, SIGINT)
        pthread_sigmask(SIG_BLOCK, &stopSignals, nil)
        OpenFileLimit.raiseToHardLimit()

        let app: JSONValue = ["bundleId": .string(bundle), "environment": "sandbox"]
        let hello: (Int) -> [UInt8] = { n in
            var line = JSONValue.object(
                JSONObject([
                    ("type", "hello"), ("version", 1), ("deviceId", .string("\(prefix)\(n)")), ("apps", .array([app])),
                ])
            ).serializedBytes()
            line.append(0x0A)
            return line
        }
        let tally = BenchTally()
        let group = try EventLoopGroup(count: loopCount, namePrefix: "bench-devices")
        let fleets = group.loops.map { loop in
            BenchDeviceFleet(
                loop: loop, address: address, numbers: Array(stride(from: loop.index + 1, through: count, by: loopCount)),
                tally: tally, hello: hello)
        }
        let started = Monotonic.nowNanoseconds()
        group.start()
        for fleet in fleets { fleet.loop.execute { fleet.fill() } }
        let connectDeadline = Monotonic.nowMilliseconds() + Int64(connectTimeout) * 1000
        while tally.connected.load(ordering: .relaxed) + tally.failed.load(ordering: .relaxed) < count,
            Monotonic.nowMilliseconds() < connectDeadline
        {
            usleep(5000)
        }
        let connectSeconds = Double(Monotonic.nowNanoseconds() - started) / 1e9
        let connected = tally.connected.load(ordering: .relaxed)
        if let path = options.string("tokens-file") {
            let lines = tally.tokens.withLock { $0.joined(separator: "\n") } + "\n"
            try Data(lines.utf8).write(to: URL(fileURLWithPath: path))
        }
        let ready: JSONValue = [
            "connected": .int(Int64(connected)), "failed": .int(Int64(tally.failed.load(ordering: .relaxed))),
            "connectSeconds": .double((connectSeconds * 1000).rounded() / 1000),
        ]
        if let path = options.string("ready-file") {
            // Renamed into place, so a reader never sees half a file.
            try Data(ready.serializedBytes()).write(to: URL(fileURLWithPath: path), options: .atomic)
        }

        var limit = timespec(tv_sec: hold, tv_nsec: 0)
        _ = sigtimedwait(&stopSignals, nil, &limit)
        let summary: JSONValue = [
            "devices": .int(Int64(count)), "connected": .int(Int64(connected)),
            "failed": .int(Int64(tally.failed.load(ordering: .relaxed))), "connectSeconds": ready.objectValue!["connectSeconds"]!,
            "notifications": .int(Int64(tally.notifications.load(ordering: .relaxed))),
            "droppedConnections": .int(Int64(tally.dropped.load(ordering: .relaxed))),
            "errors": .int(Int64(tally.errors.load(ordering: .relaxed))),
            "firstError": tally.firstError.withLock { $0 }.map(JSONValue.string) ?? .null,
        ]
        print(summary.serialized())
        fflush(nil)
        // The sockets close with the process: tearing down thousands of connections one by
        // one would only make the emulator log them.
        _exit(0)
    }
}
