import APNsCore
import EmulatorServer
import CommandLineOptions
import Foundation
import Glibc
import Networking
import OpenSSLCrypto
import ProviderClient

/// `apns-emulator [serve|send|device|scenario|load|jwt|readyz|certs|help|version] [options]`
let arguments = Array(CommandLine.arguments.dropFirst())

// A parent may start us with signals blocked (Foundation's Process inherits the spawning
// thread's mask); unblock them before any thread starts, so SIGTERM and SIGINT stop us.
var noSignals = sigset_t()
sigemptyset(&noSignals)
pthread_sigmask(SIG_SETMASK, &noSignals, nil)
signal(SIGTERM) { _ in _exit(0) }
signal(SIGINT) { _ in _exit(0) }
let environment = ProcessInfo.processInfo.environment

func fail(_ message: String, code: Int32 = 2) -> Never {
    FileHandle.standardError.write(Data("apns-emulator: \(message)\n".utf8))
    exit(code)
}

let commands: [(name: String, summary: String)] = [
    ("serve", "run the emulator (the default command)"),
    ("send", "send one push over HTTP/2, like a provider, and print the answer"),
    ("device", "run one simulated device (JSON events on stdout, commands on stdin)"),
    ("load", "load an emulator like providers do: N connections × M streams, then throughput and latency"),
    ("scenario", "run a scenario file: devices, accounts, pushes, waits and checks (docs/scenarios.md)"),
    ("jwt", "print a provider token (JWT) signed with a .p8 key"),
    ("readyz", "exit 0 when an emulator's admin API says it is ready (for health checks)"),
    ("certs", "write TEST ONLY CA and server certificates"),
    ("version", "print the version"),
]

func topLevelHelp() -> String {
    var lines = ["apns-emulator \(Emulator.version): a local emulator of Apple's Push Notification service", "",
                 "usage: apns-emulator [COMMAND] [options]   (COMMAND defaults to serve)", "", "commands:"]
    for command in commands { lines.append("  " + command.name.padding(toLength: 10, withPad: " ", startingAt: 0) + command.summary) }
    lines.append("")
    lines.append("Run 'apns-emulator COMMAND --help' for a command's options.")
    return lines.joined(separator: "\n")
}

var command = "serve"
var rest = arguments
if let first = arguments.first, !first.hasPrefix("-") {
    command = first
    rest = Array(arguments.dropFirst())
}
if arguments.first == "--help" || arguments.first == "-h" {
    print(topLevelHelp())
    exit(0)
}
if arguments.first == "--version" { command = "version" }

switch command {
case "serve": runServe(rest)
case "send": runSend(rest)
case "device": runDevice(rest)
case "scenario": runScenario(rest)
case "load": runLoad(rest)
case "bench-latency": runLatencyBenchmark(rest)
case "bench-devices": runBenchDevices(rest)
case "jwt": runJWT(rest)
case "readyz": runReadyz(rest)
case "certs": runCerts(rest)
case "version":
    print("apns-emulator \(Emulator.version)")
case "help":
    print(topLevelHelp())
default:
    fail("unknown command '\(command)'. Commands: \(commands.map(\.name).joined(separator: ", ")). See --help.")
}

// MARK: serve

func runServe(_ args: [String]) -> Never {
    if args.contains("--help-markdown") {
        print(OptionParser.markdownTable(specs: ServeConfiguration.specs))
        exit(0)
    }
    if args.contains("--help") || args.contains("-h") {
        print(OptionParser.help(command: "serve", summary: "Runs the emulator: APNs provider endpoints, device socket, admin API and web UI.",
                                specs: ServeConfiguration.specs, configFile: true, environmentVariables: true))
        exit(0)
    }
    let configuration: ServeConfiguration
    do {
        configuration = try ServeConfiguration.resolve(arguments: args, environment: environment)
    } catch {
        fail(error.description)
    }
    // SIGTERM and SIGINT end the emulator gracefully: they are blocked on every thread (the
    // event loops inherit this mask) and the main thread waits for them below.
    var stopSignals = sigset_t()
    sigemptyset(&stopSignals)
    sigaddset(&stopSignals, SIGTERM)
    sigaddset(&stopSignals, SIGINT)
    pthread_sigmask(SIG_BLOCK, &stopSignals, nil)
    // Thousands of connections need more than the usual soft limit of 1024 descriptors.
    let files = OpenFileLimit.raiseToHardLimit()
    if !configuration.quiet, files.after > files.before {
        FileHandle.standardError.write(Data("open-file limit raised from \(files.before) to \(files.after)\n".utf8))
    }
    let emulator: Emulator
    do {
        emulator = try Emulator(configuration: configuration)
        try emulator.start()
    } catch {
        fail(error.description, code: 1)
    }
    if !configuration.quiet { print(Banner.text(for: emulator)) }
    fflush(nil)
    // Providers get GOAWAY Shutdown before the process exits.
    var received: Int32 = 0
    sigwait(&stopSignals, &received)
    emulator.shutDown()
    // _exit, not exit: the event-loop threads have closed everything but may still be running
    // their thread-exit destructors (OpenSSL's per-thread state), and exit's OpenSSL clean-up
    // would free the same memory under them.
    fflush(nil)
    _exit(0)
}

// MARK: send

func runSend(_ args: [String]) -> Never {
    let specs = [
        OptionSpec("token", "HEX", "device token"),
        OptionSpec("topic", "BUNDLEID", "apns-topic"),
        OptionSpec("key", "TEAMID:KEYID:PATH", "provider signing key (.p8); omit to send without authorization"),
        OptionSpec("cert", "PATH", "a provider client certificate (PEM) for a certificate-based connection, instead of --key"),
        OptionSpec("cert-key", "PATH", "the client certificate's private key (PEM)"),
        OptionSpec("push-type", "TYPE", "apns-push-type (alert, background, voip, …)"),
        OptionSpec("priority", "10|5|1", "apns-priority"),
        OptionSpec("expiration", "SECONDS", "apns-expiration (UNIX seconds; 0 = do not store)"),
        OptionSpec("collapse-id", "ID", "apns-collapse-id"),
        OptionSpec("apns-id", "UUID", "apns-id"),
        OptionSpec("sandbox", nil, "send to the sandbox environment (default host 127.0.0.1:2197; :authority api.sandbox.push.apple.com)"),
        OptionSpec("production", nil, "send to the production environment (default host 127.0.0.1:2198; :authority api.push.apple.com)"),
        OptionSpec("host", "HOST:PORT", "where to connect (overrides --sandbox/--production)"),
        OptionSpec("ca", "PATH", "CA certificate to trust (default: certs/ca.pem if present, else the system store)"),
        OptionSpec("insecure", nil, "do not verify the server certificate"),
        OptionSpec("h2c", nil, "cleartext HTTP/2 with prior knowledge (for --h2c-*-listen)"),
        OptionSpec("no-alpn", nil, "TLS without ALPN: HTTP/2 with prior knowledge, as pushy does by default"),
        OptionSpec("json", nil, "print the answer as one JSON object"),
    ]
    if args.contains("--help") || args.contains("-h") {
        print(OptionParser.help(command: "send", summary: "Sends one push (PAYLOAD is JSON text, or @FILE) and prints status, reason and apns-id.\nExit status: 0 for 200, 1 for an APNs error, 2 for a usage or connection problem.",
                                specs: specs))
        exit(0)
    }
    let options: ResolvedOptions
    let positional: [String]
    do {
        (options, positional) = try OptionParser.parse(args, specs: specs, environment: [:])
    } catch {
        fail(error.description)
    }
    guard positional.count <= 1 else { fail("send takes one PAYLOAD argument; got \(positional.count)") }
    guard let token = options.string("token") else { fail("send needs --token HEX") }
    guard let topic = options.string("topic") else { fail("send needs --topic BUNDLEID") }
    if options.isSet("sandbox") && options.isSet("production") { fail("choose one of --sandbox and --production") }
    let production = options.isSet("production")
    let hostText = options.string("host") ?? (production ? "127.0.0.1:2198" : "127.0.0.1:2197")
    let address: HostPort
    do { address = try HostPort(parsing: hostText) } catch { fail("--host: \(error.description)") }

    var payloadText = positional.first ?? #"{"aps":{"alert":"Hello from apns-emulator"}}"#
    if payloadText.hasPrefix("@") {
        let path = String(payloadText.dropFirst())
        do { payloadText = String(decoding: try InputFile.read(path), as: UTF8.self) } catch {
            fail("payload file \(path): \(error)")
        }
    }
    var providerToken: String?
    if let spec = options.string("key") {
        do {
            let key = try ProviderSigningKey(spec: spec)
            providerToken = try key.token(issuedAt: SystemClock().nowSeconds())
        } catch {
            fail("\(error)")
        }
    }
    var push = APNsPush(token: token, topic: topic, payload: Array(payloadText.utf8), providerToken: providerToken)
    push.pushType = options.string("push-type")
    push.priority = options.string("priority")
    push.expiration = options.string("expiration")
    push.collapseID = options.string("collapse-id")
    push.apnsID = options.string("apns-id")
    // Apple's host name in :authority picks the environment on any emulator listener,
    // including the Apple-style --listen ones that serve both.
    if options.isSet("production") { push.authority = "api.push.apple.com" }
    else if options.isSet("sandbox") { push.authority = "api.sandbox.push.apple.com" }

    var connectionOptions = HTTP2ClientConnection.Options(address: address)
    connectionOptions.tls = !options.isSet("h2c")
    connectionOptions.alpn = !options.isSet("no-alpn")
    connectionOptions.verifyPeer = !options.isSet("insecure")
    connectionOptions.caPath = options.string("ca") ?? (FileManager.default.fileExists(atPath: "certs/ca.pem") ? "certs/ca.pem" : nil)
    if options.isSet("cert") != options.isSet("cert-key") { fail("--cert and --cert-key go together") }
    connectionOptions.clientCertificatePath = options.string("cert")
    connectionOptions.clientKeyPath = options.string("cert-key")
    let result: APNsResult
    /// Why no answer came, when none did: the server's GOAWAY or a stream reset.
    var unanswered: String?
    do {
        let connection = try HTTP2ClientConnection(connectionOptions)
        result = APNsResult(try connection.send(push.request))
        if result.status == 0 {
            if let goAway = connection.session.goAway {
                unanswered = "connection ended by GOAWAY (error code \(goAway.errorCode), last stream \(goAway.lastStreamID))"
                    + (goAway.debugData.isEmpty ? "" : ": " + String(decoding: goAway.debugData, as: UTF8.self))
            } else if let code = result.response.resetErrorCode {
                unanswered = "stream reset by the server (RST_STREAM error code \(code))"
            }
        }
        connection.close()
    } catch {
        fail("\(error)")
    }
    if options.isSet("json") {
        let value: JSONValue = [
            "status": .int(Int64(result.status)), "reason": result.reason.map(JSONValue.string) ?? .null,
            "apnsId": result.apnsID.map(JSONValue.string) ?? .null,
            "uniqueId": result.uniqueID.map(JSONValue.string) ?? .null,
            "timestamp": result.timestampMs.map(JSONValue.int) ?? .null,
            "unanswered": unanswered.map(JSONValue.string) ?? .null,
        ]
        print(value.serialized())
    } else {
        print("status: \(result.status)")
        if let reason = result.reason { print("reason: \(reason)") }
        if let timestamp = result.timestampMs { print("timestamp: \(timestamp)") }
        if let id = result.apnsID { print("apns-id: \(id)") }
        if let id = result.uniqueID { print("apns-unique-id: \(id)") }
        if let unanswered { print("no answer: \(unanswered)") }
    }
    exit(result.status == 200 ? 0 : 1)
}

// MARK: jwt

func runJWT(_ args: [String]) -> Never {
    let specs = [
        OptionSpec("key", "TEAMID:KEYID:PATH", "provider signing key (.p8)"),
        OptionSpec("iat", "SECONDS", "issue time in UNIX seconds (default: now)"),
    ]
    if args.contains("--help") || args.contains("-h") {
        print(OptionParser.help(command: "jwt", summary: "Prints a provider token for `authorization: bearer …`.", specs: specs))
        exit(0)
    }
    do {
        let (options, positional) = try OptionParser.parse(args, specs: specs, environment: [:])
        guard positional.isEmpty else { fail("unexpected argument '\(positional[0])'") }
        guard let spec = options.string("key") else { fail("jwt needs --key TEAMID:KEYID:PATH") }
        var iat = SystemClock().nowSeconds()
        if let text = options.string("iat") {
            guard let value = Int64(text) else { fail("--iat '\(text)' is not a whole number of seconds") }
            iat = value
        }
        print(try ProviderSigningKey(spec: spec).token(issuedAt: iat))
        exit(0)
    } catch {
        fail("\(error)")
    }
}

// MARK: readyz

func runReadyz(_ args: [String]) -> Never {
    let specs = [OptionSpec("admin", "HOST:PORT", default: "127.0.0.1:8197", "the emulator's admin listener")]
    if args.contains("--help") || args.contains("-h") {
        print(OptionParser.help(command: "readyz", summary: "Exits 0 if GET /readyz answers 200, 1 otherwise.", specs: specs))
        exit(0)
    }
    do {
        let (options, _) = try OptionParser.parse(args, specs: specs, environment: [:])
        let address = try HostPort(parsing: options.string("admin") ?? "127.0.0.1:8197")
        let fd = try Socket.connect(to: address, timeoutMilliseconds: 2000)
        defer { close(fd) }
        Socket.setTimeouts(fd, milliseconds: 2000)
        let request = "GET /readyz HTTP/1.1\r\nHost: \(address)\r\nConnection: close\r\n\r\n"
        _ = request.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        var buffer = [UInt8](repeating: 0, count: 512)
        let n = recv(fd, &buffer, buffer.count, 0)
        let head = n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : ""
        if head.hasPrefix("HTTP/1.1 200") {
            print("ready")
            exit(0)
        }
        print("not ready")
        exit(1)
    } catch let error as UsageError {
        fail(error.description)
    } catch {
        print("not ready: \(error)")
        exit(1)
    }
}

// MARK: certs

func runCerts(_ args: [String]) -> Never {
    let specs = [
        OptionSpec("dir", "PATH", default: "certs", "directory to write ca.pem, ca-key.pem, server.pem, server-key.pem"),
        OptionSpec("provider", "BUNDLEID", "instead, issue a provider (client) certificate for this app, signed by DIR/ca.pem: DIR/provider-BUNDLEID[-ENVIRONMENT].pem and -key.pem"),
        OptionSpec("environment", "sandbox|production|both", default: "both", "with --provider: where the certificate is valid"),
        OptionSpec("days", "N", default: "365", "with --provider: validity in days"),
    ]
    if args.contains("--help") || args.contains("-h") {
        print(OptionParser.help(command: "certs", summary: "Writes TEST ONLY certificates (never trust them outside a test machine).", specs: specs))
        exit(0)
    }
    do {
        let (options, _) = try OptionParser.parse(args, specs: specs, environment: [:])
        let dir = options.string("dir") ?? "certs"
        guard let bundle = options.string("provider") else {
            let made = try TestCertificates.generate(into: dir)
            print("wrote TEST ONLY certificates: CA \(made.caPath), server \(made.certificatePath), key \(made.keyPath)")
            exit(0)
        }
        let environment = options.string("environment") ?? "both"
        guard ["sandbox", "production", "both"].contains(environment) else {
            fail("--environment must be sandbox, production or both, not '\(environment)'")
        }
        guard let days = Int(options.string("days") ?? ""), days > 0 else { fail("--days must be a whole number > 0") }
        let made = try TestCertificates.generateProviderCertificate(
            // One file per environment choice, so a sandbox and a production certificate
            // for the same app can live side by side.
            into: dir, name: environment == "both" ? "provider-\(bundle)" : "provider-\(bundle)-\(environment)", caPath: "\(dir)/ca.pem", caKeyPath: "\(dir)/ca-key.pem", bundleID: bundle,
            development: environment != "production", production: environment != "sandbox", validityDays: days)
        print("wrote a TEST ONLY provider certificate for \(bundle) (\(environment)): \(made.certificatePath), key \(made.keyPath)")
        exit(0)
    } catch {
        fail("\(error)")
    }
}
