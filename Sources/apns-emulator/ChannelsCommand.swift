import APNsCore
import CommandLineOptions
import Foundation
import Networking
import ProviderClient

/// `apns-emulator channels create|read|delete|list`: Apple's broadcast channel management API
/// (`api-manage-broadcast(.sandbox).push.apple.com`), one call, and the answer.
let channelsCommand = Subcommand(
    name: "channels", listing: "create, read, delete or list an app's broadcast channels",
    summary:
        "apns-emulator channels ACTION --bundle BUNDLEID [options]: one call of the broadcast channel management API.\nACTION is create (a new channel; --policy), read or delete (--channel ID), or list (the app's channel ids).\nPrints status, apns-channel-id, the channel's settings or ids, reason and apns-request-id.\nBroadcasts to a channel are sent with 'apns-emulator send --channel ID --bundle BUNDLEID'.\nExit status: 0 for a 2xx answer, 1 for an APNs error, 2 for a usage or connection problem.",
    specs: [
        OptionSpec("bundle", "BUNDLEID", "the app whose channels these are (required)"),
        OptionSpec("channel", "ID", "the channel (apns-channel-id) to read or delete"),
        OptionSpec("policy", "0|1", "message-storage-policy of a new channel: 0 No Message Stored, 1 Most Recent Message Stored (default: 1)"),
        OptionSpec("request-id", "UUID", "apns-request-id (echoed in the answer)"),
        OptionSpec("key", "TEAMID:KEYID:PATH", "provider signing key (.p8); omit to send without authorization"),
        OptionSpec("cert", "PATH", "a provider client certificate (PEM) for a certificate-based connection, instead of --key"),
        OptionSpec("cert-key", "PATH", "the client certificate's private key (PEM)"),
        OptionSpec(
            "sandbox", nil,
            "the sandbox environment (default host 127.0.0.1:2195; :authority api-manage-broadcast.sandbox.push.apple.com)"),
        OptionSpec(
            "production", nil, "the production environment (default host 127.0.0.1:2196; :authority api-manage-broadcast.push.apple.com)"),
        OptionSpec("host", "HOST:PORT", "where to connect (overrides --sandbox/--production)"),
        OptionSpec("ca", "PATH", "CA certificate to trust (default: certs/ca.pem if present, else the system store)"),
        OptionSpec("insecure", nil, "do not verify the server certificate"),
        OptionSpec("json", nil, "print the answer as one JSON object"),
    ],
    actionHelp: channelsActionHelp,
    run: runChannels
)

/// `channels ACTION --help`: the action's usage and the options it takes.
@Sendable private func channelsActionHelp(_ arguments: [String]) -> String? {
    guard let action = arguments.first(where: { ["create", "read", "delete", "list"].contains($0) }) else { return nil }
    let exitStatus = "Exit status: 0 for a 2xx answer, 1 for an APNs error, 2 for a usage or connection problem."
    let (usage, summary, without): (String, String, [String])
    switch action {
    case "create":
        (usage, summary, without) = (
            "channels create --bundle BUNDLEID",
            "Creates a broadcast channel of the app (POST /1/apps/BUNDLEID/channels); prints status, apns-channel-id and apns-request-id.",
            ["channel"]
        )
    case "read":
        (usage, summary, without) = (
            "channels read --bundle BUNDLEID --channel ID",
            "Reads a channel (GET /1/apps/BUNDLEID/channels with apns-channel-id); prints status, message-storage-policy, push-type and apns-request-id.",
            ["policy"]
        )
    case "delete":
        (usage, summary, without) = (
            "channels delete --bundle BUNDLEID --channel ID",
            "Deletes a channel (DELETE /1/apps/BUNDLEID/channels with apns-channel-id); prints status and apns-request-id.", ["policy"]
        )
    default:
        (usage, summary, without) = (
            "channels list --bundle BUNDLEID",
            "Lists the app's channel ids (GET /1/apps/BUNDLEID/all-channels); prints status, channels and apns-request-id.",
            ["channel", "policy"]
        )
    }
    return OptionParser.help(
        command: usage, summary: summary + "\n" + exitStatus, specs: channelsCommand.specs.filter { !without.contains($0.name) })
}

/// A 404 BadPath (or 405 MethodNotAllowed) is what a port that serves device pushes answers a
/// management request with: where channel management is served, and what a --listen port needs.
let channelManagementHint =
    "hint: channel management is served on serve's --channel-sandbox-listen / --channel-production-listen "
    + "(default 127.0.0.1:2195 / 127.0.0.1:2196); pointed with --host at a --listen port, give --sandbox or --production too "
    + "(they put the api-manage-broadcast host name in :authority)"

private func runChannels(_ command: Subcommand, _ args: [String]) -> Never {
    let (options, positional) = command.parse(args)
    let actions = ["create", "read", "delete", "list"]
    guard positional.count == 1, let action = positional.first, actions.contains(action) else {
        let got = positional.isEmpty ? "none" : positional.joined(separator: " ")
        command.fail("channels takes one of create, read, delete, list; got \(got)")
    }
    guard let bundle = options.string("bundle"), !bundle.isEmpty else { command.fail("channels \(action) needs --bundle BUNDLEID") }
    let operation: ChannelManagementRequest.Operation
    switch action {
    case "create":
        if options.isSet("channel") { command.fail("channels create makes a new channel and takes no --channel") }
        let policy = options.string("policy") ?? "1"
        guard let number = Int(policy), number == 0 || number == 1 else {
            command.fail("--policy is 0 (No Message Stored) or 1 (Most Recent Message Stored), not '\(policy)'")
        }
        operation = .create(policy: number)
    case "read", "delete":
        guard let channel = options.string("channel"), !channel.isEmpty else { command.fail("channels \(action) needs --channel ID") }
        if options.isSet("policy") { command.fail("--policy goes with channels create") }
        operation = action == "read" ? .read(channelID: channel) : .delete(channelID: channel)
    default:
        for name in ["channel", "policy"] where options.isSet(name) { command.fail("channels list takes no --\(name)") }
        operation = .list
    }
    if options.isSet("sandbox") && options.isSet("production") { command.fail("choose one of --sandbox and --production") }
    let production = options.isSet("production")
    let defaultPort = production ? ChannelManagementRequest.productionPort : ChannelManagementRequest.sandboxPort
    let hostText = options.string("host") ?? "127.0.0.1:\(defaultPort)"
    let address: HostPort
    do { address = try HostPort(parsing: hostText) } catch { command.fail("--host: \(error.description)") }

    var request = ChannelManagementRequest(bundleID: bundle, operation: operation, providerToken: signedProviderToken(command, options))
    request.requestID = options.string("request-id")
    // As for `send`: Apple's management host name in :authority picks the environment on any
    // emulator listener, including the Apple-style --listen ones.
    if options.isSet("production") {
        request.authority = ChannelManagementRequest.productionHost
    } else if options.isSet("sandbox") {
        request.authority = ChannelManagementRequest.sandboxHost
    }

    let (response, unanswered) = sendOnce(command, options, address: address, request.request)
    let result = ChannelResult(response)
    if options.isSet("json") {
        let value: JSONValue = [
            "status": .int(Int64(result.status)), "reason": result.reason.map(JSONValue.string) ?? .null,
            "requestId": result.requestID.map(JSONValue.string) ?? .null,
            "channelId": result.channelID.map(JSONValue.string) ?? .null,
            "messageStoragePolicy": result.messageStoragePolicy.map { .int(Int64($0)) } ?? .null,
            "pushType": result.pushType.map(JSONValue.string) ?? .null,
            "channels": result.channels.map { .array($0.map(JSONValue.string)) } ?? .null,
            "unanswered": unanswered.map(JSONValue.string) ?? .null,
        ]
        print(value.serialized())
    } else {
        print("status: \(result.status)")
        if let id = result.channelID { print("apns-channel-id: \(id)") }
        if let policy = result.messageStoragePolicy { print("message-storage-policy: \(policy)") }
        if let type = result.pushType { print("push-type: \(type)") }
        if let channels = result.channels {
            print("channels: \(channels.count)")
            for id in channels { print("  \(id)") }
        }
        if let reason = result.reason { print("reason: \(reason)") }
        if let id = result.requestID { print("apns-request-id: \(id)") }
        if let unanswered { print("no answer: \(unanswered)") }
    }
    if (result.status == 404 && result.reason == "BadPath") || (result.status == 405 && result.reason == "MethodNotAllowed") {
        fflush(nil)
        FileHandle.standardError.write(Data((channelManagementHint + "\n").utf8))
    }
    exit(result.succeeded ? 0 : 1)
}
