// ChannelCommandTests: `apns-emulator channels create|read|delete|list` and
// `apns-emulator send --channel` against the real binary, as a provider runs them: the human
// output, `--json`, exit statuses (0, 1 for a refusal, 2 for a usage error). Imports the
// harness's modules.
import APNsCore
import Foundation
import Testing
import TestSupport

/// Runs `channels ACTION` or `send` against one emulator with the harness key and CA.
private struct ChannelCommand {
    let emulator: EmulatorProcess

    var key: [String] { ["--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(emulator.keyPath)", "--ca", emulator.caPath] }

    func channels(_ action: String, _ arguments: [String], listener: String = "channelSandbox") throws -> CommandResult {
        try run(
            EmulatorProcess.binary,
            ["channels", action, "--bundle", EmulatorProcess.bundleID, "--host", try emulator.address(listener).description] + key
                + arguments)
    }

    func broadcast(_ channel: String, _ arguments: [String]) throws -> CommandResult {
        try run(
            EmulatorProcess.binary,
            ["send", "--channel", channel, "--bundle", EmulatorProcess.bundleID, "--host", try emulator.address("sandbox").description]
                + key + arguments)
    }
}

extension CommandResult {
    /// The value of a `name: value` line of the human output.
    fileprivate func line(_ name: String) -> String? {
        out.split(separator: "\n").first { $0.hasPrefix(name + ": ") }.map { String($0.dropFirst(name.count + 2)) }
    }

    fileprivate var json: JSONObject? { (try? JSONValue.parse(out))?.objectValue }
}

@Suite("apns-emulator channels and send --channel")
struct ChannelCommandTests {
    @Test func aChannelIsCreatedReadListedAndDeletedThroughTheCommand() throws {
        let emulator = try EmulatorProcess()
        let cli = ChannelCommand(emulator: emulator)
        let requestID = "0b7a9c1e-5d3f-4a2b-8c6d-1e2f3a4b5c6d"
        let created = try cli.channels("create", ["--request-id", requestID])
        #expect(created.status == 0, "\(created.out) \(created.err)")
        #expect(created.line("status") == "201")
        #expect(created.line("apns-request-id") == requestID)
        let id = try #require(created.line("apns-channel-id"))
        #expect(ChannelDirectory.isWellFormedID(id))

        let read = try cli.channels("read", ["--channel", id])
        #expect(read.status == 0, "\(read.out) \(read.err)")
        #expect(read.line("status") == "200")
        #expect(read.line("message-storage-policy") == "1", "the default policy is 1")
        #expect(read.line("push-type") == "LiveActivity")
        #expect(read.line("apns-request-id") != nil)

        let second = try #require(try cli.channels("create", ["--policy", "0"]).line("apns-channel-id"))
        let list = try cli.channels("list", [])
        #expect(list.status == 0 && list.line("channels") == "2", "\(list.out)")
        #expect(list.out.contains("  \(id)\n") && list.out.contains("  \(second)\n"), "\(list.out)")

        let deleted = try cli.channels("delete", ["--channel", id])
        #expect(deleted.status == 0 && deleted.line("status") == "204", "\(deleted.out) \(deleted.err)")
        let gone = try cli.channels("read", ["--channel", id])
        #expect(gone.status == 1)
        #expect(gone.line("status") == "400" && gone.line("reason") == "ChannelNotRegistered", "\(gone.out)")
        #expect(gone.line("apns-request-id") != nil)
    }

    @Test func jsonOutputCarriesEveryField() throws {
        let emulator = try EmulatorProcess()
        let cli = ChannelCommand(emulator: emulator)
        let created = try #require(try cli.channels("create", ["--policy", "0", "--json"]).json)
        #expect(created["status"]?.intValue == 201)
        let id = try #require(created["channelId"]?.stringValue)
        #expect(created["requestId"]?.stringValue != nil)
        #expect(created["reason"] == .null && created["channels"] == .null)

        let read = try #require(try cli.channels("read", ["--channel", id, "--json"]).json)
        #expect(read["status"]?.intValue == 200)
        #expect(read["messageStoragePolicy"]?.intValue == 0 && read["pushType"]?.stringValue == "LiveActivity")

        let list = try #require(try cli.channels("list", ["--json"]).json)
        #expect(list["channels"]?.arrayValue?.compactMap(\.stringValue) == [id])

        // Production channels are apart from sandbox ones.
        let production = try #require(try cli.channels("list", ["--json", "--production"], listener: "channelProduction").json)
        #expect(production["channels"]?.arrayValue?.isEmpty == true, "\(production)")

        let refused = try cli.channels("read", ["--channel", "dW5rbm93bg==", "--json"])
        #expect(refused.status == 1)
        #expect(refused.json?["status"]?.intValue == 400 && refused.json?["reason"]?.stringValue == "ChannelNotRegistered")
        #expect(refused.json?["requestId"]?.stringValue != nil)
    }

    @Test func sendWithChannelBroadcasts() throws {
        let emulator = try EmulatorProcess()
        let cli = ChannelCommand(emulator: emulator)
        let stored = try #require(try cli.channels("create", []).line("apns-channel-id"))
        let noStore = try #require(try cli.channels("create", ["--policy", "0"]).line("apns-channel-id"))

        let requestID = "3f1e2d3c-4b5a-4968-8776-655443322110"
        let payload = #"{"aps":{"event":"update","timestamp":1700000000,"content-state":{"eta":5}}}"#
        let sent = try cli.broadcast(stored, ["--request-id", requestID, payload])
        #expect(sent.status == 0, "\(sent.out) \(sent.err)")
        #expect(sent.line("status") == "200" && sent.line("apns-request-id") == requestID, "\(sent.out)")
        // The defaults (expiration 0, priority 10, a Live Activity update now) suit either policy.
        let defaults = try cli.broadcast(noStore, [])
        #expect(defaults.status == 0 && defaults.line("status") == "200", "\(defaults.out) \(defaults.err)")
        let later = try cli.broadcast(stored, ["--expiration", "1900000000", "--priority", "5", "--json", payload])
        #expect(later.status == 0 && later.json?["status"]?.intValue == 200, "\(later.out) \(later.err)")
        #expect(later.json?["channelId"]?.stringValue == stored)

        let refused = try cli.broadcast(noStore, ["--expiration", "1900000000", payload])
        #expect(refused.status == 1)
        #expect(refused.line("status") == "400" && refused.line("reason") == "BadExpirationDate", "\(refused.out)")
        #expect(refused.line("apns-request-id") != nil)

        // --topic names the app when --bundle is absent.
        let byTopic = try run(
            EmulatorProcess.binary,
            ["send", "--channel", stored, "--topic", EmulatorProcess.bundleID, "--host", try emulator.address("sandbox").description]
                + cli.key)
        #expect(byTopic.status == 0, "\(byTopic.out) \(byTopic.err)")

        let channels = try emulator.admin("GET", "/api/v1/channels").json["channels"]?.arrayValue ?? []
        let shown = channels.first { $0.objectValue?["id"]?.stringValue == stored }?.objectValue
        #expect(shown?["broadcasts"]?.intValue == 3)
    }

    /// A certificate-based connection instead of a provider token, for channels and broadcasts alike.
    @Test func aClientCertificateWorksInsteadOfAKey() throws {
        let emulator = try EmulatorProcess()
        let made = try run(
            EmulatorProcess.binary,
            ["certs", "--dir", emulator.directory + "/certs", "--provider", EmulatorProcess.bundleID, "--environment", "sandbox"])
        #expect(made.status == 0, "\(made.err)")
        let certificate = [
            "--cert", emulator.directory + "/certs/provider-\(EmulatorProcess.bundleID)-sandbox.pem",
            "--cert-key", emulator.directory + "/certs/provider-\(EmulatorProcess.bundleID)-sandbox-key.pem",
            "--ca", emulator.caPath, "--bundle", EmulatorProcess.bundleID,
        ]
        let created = try run(
            EmulatorProcess.binary,
            ["channels", "create", "--host", try emulator.address("channelSandbox").description] + certificate)
        #expect(created.status == 0, "\(created.out) \(created.err)")
        let id = try #require(created.line("apns-channel-id"))
        let sent = try run(
            EmulatorProcess.binary, ["send", "--channel", id, "--host", try emulator.address("sandbox").description] + certificate)
        #expect(sent.status == 0 && sent.line("status") == "200", "\(sent.out) \(sent.err)")
    }

    /// `channels ACTION --help` prints the action's usage and the options it takes, not the
    /// command's generic usage.
    @Test func eachActionHasItsOwnHelp() throws {
        for (action, usage, takes, takesNot) in [
            ("create", "usage: apns-emulator channels create --bundle BUNDLEID [options]", "--policy 0|1", "--channel ID"),
            ("read", "usage: apns-emulator channels read --bundle BUNDLEID --channel ID [options]", "--channel ID", "--policy"),
            ("delete", "usage: apns-emulator channels delete --bundle BUNDLEID --channel ID [options]", "--channel ID", "--policy"),
            ("list", "usage: apns-emulator channels list --bundle BUNDLEID [options]", "--bundle BUNDLEID", "--channel ID"),
        ] {
            for arguments in [["channels", action, "--help"], ["channels", "--help", action], ["channels", action, "-h"]] {
                let result = try run(EmulatorProcess.binary, arguments)
                #expect(result.status == 0, "\(arguments): \(result.err)")
                #expect(result.out.hasPrefix(usage + "\n"), "\(arguments): \(result.out)")
                #expect(result.out.contains(takes) && !result.out.contains(takesNot), "\(arguments): \(result.out)")
                #expect(result.out.contains("--host HOST:PORT") && result.out.contains("--insecure"), "\(arguments): \(result.out)")
            }
        }
        let generic = try run(EmulatorProcess.binary, ["channels", "--help"])
        #expect(generic.status == 0 && generic.out.hasPrefix("usage: apns-emulator channels [options]\n"), "\(generic.out)")
    }

    /// Aimed at a --listen port without --sandbox or --production, the request is a device push
    /// to a wrong path (404 BadPath): one line says where channel management is served.
    @Test func aBadPathAnswerSaysWhereChannelManagementIsServed() throws {
        let emulator = try EmulatorProcess(["--listen", "127.0.0.1:0"])
        let cli = ChannelCommand(emulator: emulator)
        let listen = try #require(emulator.ready["listen"]?.arrayValue?.first?.stringValue)
        let hint =
            "hint: channel management is served on serve's --channel-sandbox-listen / --channel-production-listen "
            + "(default 127.0.0.1:2195 / 127.0.0.1:2196); pointed with --host at a --listen port, give --sandbox or --production too"
        let wrong = try run(EmulatorProcess.binary, ["channels", "create", "--bundle", EmulatorProcess.bundleID, "--host", listen] + cli.key)
        #expect(wrong.status == 1, "\(wrong.out) \(wrong.err)")
        #expect(wrong.line("status") == "404" && wrong.line("reason") == "BadPath", "\(wrong.out)")
        #expect(wrong.err.contains(hint) && wrong.err.split(separator: "\n").count == 1, "\(wrong.err)")
        // With --sandbox the same port serves it, and there is nothing to hint at.
        let right = try run(
            EmulatorProcess.binary, ["channels", "create", "--bundle", EmulatorProcess.bundleID, "--host", listen, "--sandbox"] + cli.key)
        #expect(right.status == 0 && right.line("status") == "201", "\(right.out) \(right.err)")
        #expect(!right.err.contains("hint:"), "\(right.err)")
        // Another refusal is not a wrong place either.
        let unknown = try cli.channels("read", ["--channel", "dW5rbm93bg=="])
        #expect(unknown.status == 1 && !unknown.err.contains("hint:"), "\(unknown.out) \(unknown.err)")
    }

    @Test func usageErrorsExitTwo() throws {
        let emulator = try EmulatorProcess()
        let cli = ChannelCommand(emulator: emulator)
        let cases: [([String], String)] = [
            (["channels", "read", "--bundle", EmulatorProcess.bundleID], "needs --channel"),
            (["channels", "delete", "--bundle", EmulatorProcess.bundleID], "needs --channel"),
            (["channels", "list"], "needs --bundle"),
            (["channels", "--bundle", EmulatorProcess.bundleID], "create, read, delete, list"),
            (["channels", "rename", "--bundle", EmulatorProcess.bundleID], "create, read, delete, list"),
            (["channels", "create", "--bundle", EmulatorProcess.bundleID, "--policy", "2"], "--policy"),
            (["channels", "list", "--bundle", EmulatorProcess.bundleID, "--sandbox", "--production"], "choose one"),
            (["send", "--channel", "dW5rbm93bg=="], "needs --bundle"),
            (["send", "--channel", "dW5rbm93bg==", "--bundle", EmulatorProcess.bundleID, "--token", "ab"], "--token"),
            (["send", "--bundle", EmulatorProcess.bundleID, "--token", "ab", "--topic", EmulatorProcess.bundleID], "--channel"),
        ]
        for (arguments, message) in cases {
            let result = try run(EmulatorProcess.binary, arguments + cli.key)
            #expect(result.status == 2, "\(arguments): \(result.status) \(result.out) \(result.err)")
            #expect(result.err.contains(message), "\(arguments): \(result.err)")
        }
        let help = try run(EmulatorProcess.binary, ["channels", "--help"])
        #expect(help.status == 0 && help.out.contains("--policy 0|1"))
        let top = try run(EmulatorProcess.binary, ["--help"])
        #expect(top.out.contains("  channels  "))
    }
}
