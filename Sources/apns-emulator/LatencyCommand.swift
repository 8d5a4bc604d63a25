import APNsCore
import DeviceClient
import CommandLineOptions
import Foundation
import Glibc
import MonotonicClock
import Networking
import ProviderClient

/// `apns-emulator bench-latency`: push-to-device latency on a running emulator. One process
/// plays both ends, so one clock times each push from the provider's first byte to the
/// device reading the notification. Used by scripts/bench-latency.
let benchLatencyCommand = Subcommand(
    name: "bench-latency", summary: "Times pushes from provider to a simulated device.",
    specs: [
        OptionSpec("admin", "HOST:PORT", default: "127.0.0.1:8197", "the emulator's admin listener"),
        OptionSpec("provider", "HOST:PORT", default: "127.0.0.1:2197", "the sandbox provider listener"),
        OptionSpec("device", "HOST:PORT", default: "127.0.0.1:5223", "the device listener"),
        OptionSpec("ca", "PATH", default: "certs/ca.pem", "CA to trust for the provider listener"),
        OptionSpec("key", "TEAMID:KEYID:PATH", "provider signing key (.p8) whose team owns --bundle"),
        OptionSpec("bundle", "BUNDLEID", default: "com.example.app", "app bundle id"),
        OptionSpec("count", "N", default: "2000", "pushes to time (one at a time)"),
    ],
    helpFlags: ["--help"],
    run: runLatencyBenchmark
)

private func runLatencyBenchmark(_ command: Subcommand, _ args: [String]) -> Never {
    command.failing {
        let (options, _) = command.parse(args)
        guard let keySpec = options.string("key") else { throw UsageError("bench-latency needs --key TEAMID:KEYID:PATH") }
        guard let count = Int(options.string("count") ?? ""), count > 0, count <= 1_000_000 else {
            throw UsageError("--count must be a whole number from 1 to 1000000")
        }
        let bundle = options.string("bundle") ?? "com.example.app"
        let key = try ProviderSigningKey(spec: keySpec)
        let providerToken = try key.token(issuedAt: SystemClock().nowSeconds())

        let device = SimulatedDevice(
            address: try HostPort(parsing: options.string("device")!),
            deviceID: "latency-\(getpid())",
            apps: [DeviceApp(bundleID: bundle, environment: .sandbox, appState: .foreground)])
        try device.connect()
        guard let token = device.token(for: bundle) else { throw UsageError("the device got no token") }

        var connectionOptions = HTTP2ClientConnection.Options(address: try HostPort(parsing: options.string("provider")!))
        connectionOptions.caPath = options.string("ca")
        let connection = try HTTP2ClientConnection(connectionOptions)
        let request = APNsPush(
            token: token, topic: bundle, payload: Array(#"{"aps":{"alert":"latency"}}"#.utf8),
            providerToken: providerToken
        ).request
        // Warm up: authenticate the connection and fill caches.
        for _ in 0..<50 {
            _ = try connection.send(request)
            _ = try device.nextNotification(timeoutMilliseconds: 2000)
        }
        var samples: [Double] = []
        samples.reserveCapacity(count)
        for _ in 0..<count {
            let start = Monotonic.nowNanoseconds()
            let stream = try connection.submit(request)
            try connection.flushOutput()
            guard try device.nextNotification(timeoutMilliseconds: 5000) != nil else {
                throw UsageError("a push did not reach the device within 5 s")
            }
            samples.append(Double(Monotonic.nowNanoseconds() - start) / 1e6)
            try connection.waitFor(streams: [stream])
            guard connection.response(for: stream)?.status == 200 else { throw UsageError("a push was not accepted") }
        }
        samples.sort()
        func percentile(_ p: Double) -> Double { samples[min(samples.count - 1, Int(Double(samples.count) * p))] }
        let result: JSONValue = [
            "pushes": .int(Int64(count)), "medianMs": .double(percentile(0.5)), "p90Ms": .double(percentile(0.9)),
            "p99Ms": .double(percentile(0.99)), "maxMs": .double(samples.last ?? 0),
        ]
        print(result.serialized())
        device.disconnect()
        exit(0)
    }
}
