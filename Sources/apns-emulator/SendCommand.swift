import APNsCore
import CommandLineOptions
import Conformance
import Foundation
import HTTP2
import Networking
import OpenSSLCrypto
import ProviderClient

/// `apns-emulator send`: one push over HTTP/2, as a provider sends it, and the answer; with
/// `--channel`, a broadcast to a channel's subscribers instead.
let sendCommand = Subcommand(
    name: "send", listing: "send one push over HTTP/2, like a provider, and print the answer",
    summary:
        "Sends one push (PAYLOAD is JSON text, or @FILE) and prints status, reason and apns-id.\nWith --channel it sends a broadcast (POST /4/broadcasts/apps/BUNDLEID) instead: no --token, no apns-topic;\n--expiration defaults to 0, --priority to 10, --push-type to LiveActivity; it prints status, reason and apns-request-id.\nExit status: 0 for 200, 1 for an APNs error, 2 for a usage or connection problem.",
    specs: [
        OptionSpec("token", "HEX", "device token"),
        OptionSpec("topic", "BUNDLEID", "apns-topic (required, except over a single-topic --cert)"),
        OptionSpec("channel", "ID", "broadcast to this channel (apns-channel-id) instead of pushing to a device"),
        OptionSpec("bundle", "BUNDLEID", "the app a broadcast is for (with --channel; default: --topic)"),
        OptionSpec("key", "TEAMID:KEYID:PATH", "provider signing key (.p8); omit to send without authorization"),
        OptionSpec("cert", "PATH", "a provider client certificate (PEM) for a certificate-based connection, instead of --key"),
        OptionSpec("cert-key", "PATH", "the client certificate's private key (PEM)"),
        OptionSpec("push-type", "TYPE", "apns-push-type (alert, background, voip, …; a broadcast's is LiveActivity)"),
        OptionSpec("priority", "10|5|1", "apns-priority (a broadcast's default: 10)"),
        OptionSpec("expiration", "SECONDS", "apns-expiration (UNIX seconds; 0 = do not store; a broadcast's default: 0)"),
        OptionSpec("collapse-id", "ID", "apns-collapse-id"),
        OptionSpec("apns-id", "UUID", "apns-id"),
        OptionSpec("request-id", "UUID", "apns-request-id of a broadcast (with --channel)"),
        OptionSpec("sandbox", nil, "send to the sandbox environment (default host 127.0.0.1:2197; :authority api.sandbox.push.apple.com)"),
        OptionSpec("production", nil, "send to the production environment (default host 127.0.0.1:2198; :authority api.push.apple.com)"),
        OptionSpec("host", "HOST:PORT", "where to connect (overrides --sandbox/--production)"),
        OptionSpec("ca", "PATH", "CA certificate to trust (default: certs/ca.pem if present, else the system store)"),
        OptionSpec("insecure", nil, "do not verify the server certificate"),
        OptionSpec("h2c", nil, "cleartext HTTP/2 with prior knowledge (for --h2c-*-listen)"),
        OptionSpec("no-alpn", nil, "TLS without ALPN: HTTP/2 with prior knowledge, as pushy does by default"),
        OptionSpec("json", nil, "print the answer as one JSON object"),
    ],
    run: runSend
)

private func runSend(_ command: Subcommand, _ args: [String]) -> Never {
    let (options, positional) = command.parse(args)
    guard positional.count <= 1 else { command.fail("send takes one PAYLOAD argument; got \(positional.count)") }
    if let channel = options.string("channel") { runBroadcast(command, options, payload: positional.first, channel: channel) }
    for name in ["bundle", "request-id"] where options.isSet(name) {
        command.fail("--\(name) goes with --channel (a broadcast)")
    }
    guard let token = options.string("token") else { command.fail("send needs --token HEX") }
    // Over a certificate the topic may be left out: a single-topic certificate's app is the
    // topic then (as APNs takes it); with a provider token APNs needs one.
    let topic = options.string("topic")
    if topic == nil, !options.isSet("cert") { command.fail("send needs --topic BUNDLEID (with --cert it may be left out: the certificate's app)") }
    if options.isSet("sandbox") && options.isSet("production") { command.fail("choose one of --sandbox and --production") }
    let production = options.isSet("production")
    let hostText = options.string("host") ?? (production ? "127.0.0.1:2198" : "127.0.0.1:2197")
    let address: HostPort
    do { address = try HostPort(parsing: hostText) } catch { command.fail("--host: \(error.description)") }

    let payloadText = readPayload(command, positional.first ?? #"{"aps":{"alert":"Hello from apns-emulator"}}"#)
    let providerToken = signedProviderToken(command, options)
    var push = APNsPush(token: token, topic: topic, payload: Array(payloadText.utf8), providerToken: providerToken)
    push.pushType = options.string("push-type")
    push.priority = options.string("priority")
    push.expiration = options.string("expiration")
    push.collapseID = options.string("collapse-id")
    push.apnsID = options.string("apns-id")
    push.authority = appleAuthority(options)

    let (response, unanswered) = sendOnce(command, options, address: address, push.request)
    let result = APNsResult(response)
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
    warnIfChannelManagementPort(result.status, result.reason)
    exit(result.status == 200 ? 0 : 1)
}

/// `send --channel ID`: a broadcast (`POST /4/broadcasts/apps/<bundle>`) to the channel's
/// subscribers, on the same provider hosts as device pushes.
private func runBroadcast(_ command: Subcommand, _ options: ResolvedOptions, payload: String?, channel: String) -> Never {
    for name in ["token", "collapse-id", "apns-id"] where options.isSet(name) {
        command.fail("--\(name) is for device pushes; a broadcast (--channel) takes none\(name == "apns-id" ? " (use --request-id)" : "")")
    }
    if let bundle = options.string("bundle"), let topic = options.string("topic"), bundle != topic {
        command.fail("--bundle \(bundle) and --topic \(topic) differ; a broadcast names one app")
    }
    guard let bundle = options.string("bundle") ?? options.string("topic") else {
        command.fail("send --channel needs --bundle BUNDLEID (or --topic)")
    }
    guard !channel.isEmpty else { command.fail("--channel needs a channel id") }
    if options.isSet("sandbox") && options.isSet("production") { command.fail("choose one of --sandbox and --production") }
    let production = options.isSet("production")
    let hostText = options.string("host") ?? (production ? "127.0.0.1:2198" : "127.0.0.1:2197")
    let address: HostPort
    do { address = try HostPort(parsing: hostText) } catch { command.fail("--host: \(error.description)") }

    let defaultPayload = #"{"aps":{"event":"update","timestamp":\#(SystemClock().nowSeconds()),"content-state":{}}}"#
    let payloadText = readPayload(command, payload ?? defaultPayload)
    var push = BroadcastPush(
        bundleID: bundle, channelID: channel, payload: Array(payloadText.utf8), providerToken: signedProviderToken(command, options))
    if let type = options.string("push-type") { push.pushType = type }
    if let priority = options.string("priority") { push.priority = priority }
    if let expiration = options.string("expiration") { push.expiration = expiration }
    push.requestID = options.string("request-id")
    push.authority = appleAuthority(options)

    let (response, unanswered) = sendOnce(command, options, address: address, push.request)
    let result = ChannelResult(response)
    if options.isSet("json") {
        let value: JSONValue = [
            "status": .int(Int64(result.status)), "reason": result.reason.map(JSONValue.string) ?? .null,
            "requestId": result.requestID.map(JSONValue.string) ?? .null, "channelId": .string(channel),
            "unanswered": unanswered.map(JSONValue.string) ?? .null,
        ]
        print(value.serialized())
    } else {
        print("status: \(result.status)")
        if let reason = result.reason { print("reason: \(reason)") }
        if let id = result.requestID { print("apns-request-id: \(id)") }
        if let unanswered { print("no answer: \(unanswered)") }
    }
    warnIfChannelManagementPort(result.status, result.reason)
    exit(result.status == 200 ? 0 : 1)
}

/// A 404 BadPath is what a channel-management port answers a push (and a device push is not
/// journaled there): where pushes are served.
private func warnIfChannelManagementPort(_ status: Int, _ reason: String?) {
    guard status == 404, reason == "BadPath" else { return }
    fflush(nil)
    FileHandle.standardError.write(
        Data(
            ("hint: a channel-management port (serve's --channel-sandbox-listen / --channel-production-listen, default "
                + "127.0.0.1:2195 / 127.0.0.1:2196) answers pushes 404 BadPath; pushes and broadcasts go to --sandbox-listen / "
                + "--production-listen (default 127.0.0.1:2197 / 127.0.0.1:2198) or a --listen port\n").utf8))
}

// MARK: Shared by the provider-side commands (send, channels)

/// The payload text: itself, or the contents of the file after `@`.
func readPayload(_ command: Subcommand, _ text: String) -> String {
    guard text.hasPrefix("@") else { return text }
    let path = String(text.dropFirst())
    do { return String(decoding: try InputFile.read(path), as: UTF8.self) } catch {
        command.fail("payload file \(path): \(error)")
    }
}

/// A provider token signed now with `--key`, or nil without one.
func signedProviderToken(_ command: Subcommand, _ options: ResolvedOptions) -> String? {
    guard let spec = options.string("key") else { return nil }
    do {
        let key = try ProviderSigningKey(spec: spec)
        return try key.token(issuedAt: SystemClock().nowSeconds())
    } catch {
        command.fail("\(error)")
    }
}

/// `--ca` and a client certificate's two options loaded once before anything is sent: a missing
/// file, one that is not a certificate, or a key of another certificate is a usage error (exit
/// 2) naming the file, not a target that "answered nothing" or OpenSSL's error stack.
func checkTLSFiles(_ command: Subcommand, _ options: ResolvedOptions, certificate: String? = nil, key: String? = nil) {
    for name in ["ca", certificate, key].compactMap({ $0 }) {
        guard let path = options.string(name) else { continue }
        if access(path, R_OK) != 0 { command.fail("--\(name) \(path): \(String(cString: strerror(errno)))") }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            command.fail("--\(name) \(path): a directory, not a PEM file")
        }
    }
    if let ca = options.string("ca") {
        do { _ = try TLSContext.client(trustedCAPath: ca, verifyPeer: true, alpnProtocols: []) } catch {
            command.fail("--ca \(ca): not a PEM CA certificate (\(error))")
        }
    }
    if let certificate, let key, let certificatePath = options.string(certificate), let keyPath = options.string(key) {
        do {
            _ = try TLSContext.client(
                trustedCAPath: options.string("ca"), verifyPeer: true, alpnProtocols: [], clientCertificatePath: certificatePath,
                clientKeyPath: keyPath)
        } catch {
            command.fail("--\(certificate) \(certificatePath), --\(key) \(keyPath): \(error)")
        }
    }
}

/// The connection `--ca`, `--insecure`, `--cert`/`--cert-key` (and, where the command has
/// them, `--h2c` and `--no-alpn`) ask for.
func providerConnectionOptions(_ command: Subcommand, _ options: ResolvedOptions, address: HostPort) -> HTTP2ClientConnection.Options {
    var connectionOptions = HTTP2ClientConnection.Options(address: address)
    connectionOptions.tls = !options.isSet("h2c")
    connectionOptions.alpn = !options.isSet("no-alpn")
    connectionOptions.verifyPeer = !options.isSet("insecure")
    connectionOptions.caPath = options.string("ca") ?? (FileManager.default.fileExists(atPath: "certs/ca.pem") ? "certs/ca.pem" : nil)
    if options.isSet("cert") != options.isSet("cert-key") { command.fail("--cert and --cert-key go together") }
    if connectionOptions.tls { checkTLSFiles(command, options, certificate: "cert", key: "cert-key") }
    connectionOptions.clientCertificatePath = options.string("cert")
    connectionOptions.clientKeyPath = options.string("cert-key")
    return connectionOptions
}

/// A target that speaks another protocol, said with what to change on the command line.
func protocolMismatchAdvice(_ error: ClientError) -> String {
    switch error.mismatch {
    case .answeredWithTLS: return "\(error.description): drop --h2c"
    case .notTLS: return "\(error.description); a cleartext HTTP/2 listener takes --h2c"
    case .noHTTP2InALPN, .notHTTP2, nil: return error.description
    }
}

/// A server certificate the connection could not verify, said with what to give instead:
/// `send`, `channels` and `conformance` all take `--ca` and `--insecure`. Other errors as they are.
func certificateAdvice(_ error: ClientError, address: HostPort? = nil) -> String {
    guard error.certificateNotVerified else { return error.description }
    // OpenSSL's "IP address mismatch" / "hostname mismatch": the CA was trusted, the name was not
    // on the certificate, and another CA would not help.
    if error.description.contains("address mismatch)") || error.description.contains("hostname mismatch)") {
        let host = address.map { " \($0.host)" } ?? ""
        return "\(error.description); the server's certificate does not name the host\(host): connect with a host name it carries "
            + "(e.g. localhost, or Apple's names mapped to 127.0.0.1 in /etc/hosts)"
    }
    return "\(error.description); trust the emulator's CA with --ca PATH (its certs/ca.pem, the \"trust this CA\" line serve prints) "
        + "or skip the check with --insecure"
}

/// Apple's push host for `--production` or `--sandbox`, for `:authority`: it picks the
/// environment on any emulator listener, including the Apple-style `--listen` ones that serve
/// both; nil leaves it to the listener.
func appleAuthority(_ options: ResolvedOptions) -> String? {
    if options.isSet("production") { return "api.push.apple.com" }
    if options.isSet("sandbox") { return "api.sandbox.push.apple.com" }
    return nil
}

/// Sends one request on a connection of its own and closes it: the answer, and why none came
/// when none did (the server's GOAWAY or a stream reset). A connection that cannot be made
/// ends the command (status 2).
func sendOnce(
    _ command: Subcommand, _ options: ResolvedOptions, address: HostPort, _ request: ClientRequest
)
    -> (response: HTTP2Response, unanswered: String?)
{
    let connection: HTTP2ClientConnection
    // A command without --h2c (channels: channel management has no cleartext listener) is
    // not told to add it.
    let takesH2C = command.specs.contains { $0.name == "h2c" }
    func advice(_ error: ClientError) -> String {
        guard error.mismatch != nil else { return certificateAdvice(error, address: address) }
        return takesH2C ? protocolMismatchAdvice(error) : error.description
    }
    do { connection = try HTTP2ClientConnection(providerConnectionOptions(command, options, address: address)) } catch {
        command.fail(advice(error))
    }
    defer { connection.close() }
    // A server of another protocol (a TLS port given --h2c, an HTTP/1.1 server) is named as
    // such, not as a connection closed without an answer.
    do { try connection.confirmHTTP2() } catch {
        command.fail(advice(error))
    }
    do {
        let response = try connection.send(request)
        return (response, response.status == nil ? unansweredReason(connection, response) : nil)
    } catch {
        // Connected, then no answer (a GOAWAY, the connection closed, a timeout): reported as
        // an unanswered request (status 0, exit 1), as a stream reset is, not as no connection.
        let why = unansweredReason(connection, HTTP2Response(streamID: 0)) ?? "\(error)"
        return (HTTP2Response(streamID: 0), connection.isClosed && connection.session.goAway == nil ? "the connection closed without an answer" : why)
    }
}

/// Why a request got no answer: the server's GOAWAY or a stream reset (nil if neither is known).
func unansweredReason(_ connection: HTTP2ClientConnection, _ response: HTTP2Response) -> String? {
    // A refused stream is often followed by the GOAWAY that explains it (the emulator sends
    // it once the streams it covers are answered): a moment's wait to name it.
    if response.resetErrorCode == HTTP2ErrorCode.refusedStream, connection.session.goAway == nil, !connection.isClosed {
        try? connection.pump(timeoutMilliseconds: 300) { connection.session.goAway != nil }
    }
    if let goAway = connection.session.goAway {
        let reset = response.resetErrorCode.map { " (the stream reset: \(HTTP2ErrorCode.name($0)))" } ?? ""
        return NoAnswer.describe(goAway: goAway, closed: connection.isClosed, error: "") + reset
    }
    if let code = response.resetErrorCode { return "stream reset by the server (RST_STREAM \(HTTP2ErrorCode.name(code)) (\(code)))" }
    return nil
}
