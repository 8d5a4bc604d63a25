// apns-emulator: the command-line tool. Each subcommand is a `Subcommand` (Subcommand.swift)
// in a file of its own; this file picks one. Imports the emulator's modules, the clients and
// Scenarios; not the test kit.

import EmulatorServer
import Foundation
import Glibc

/// `apns-emulator [serve|send|channels|device|scenario|load|conformance|jwt|readyz|certs|help|version] [options]`
let arguments = Array(CommandLine.arguments.dropFirst())

// A parent may start us with signals blocked (Foundation's Process inherits the spawning
// thread's mask); unblock them before any thread starts, so SIGTERM and SIGINT stop us.
var noSignals = sigset_t()
sigemptyset(&noSignals)
pthread_sigmask(SIG_SETMASK, &noSignals, nil)
// Stopped by a signal is not success: a CI job cancelled or timed out mid-run must not read
// as passed (128 + the signal's number, as a shell reports it).
signal(SIGTERM) { _ in _exit(143) }
signal(SIGINT) { _ in _exit(130) }

/// Every subcommand; those with a listing appear in `--help` in this order.
let subcommands = [
    serveCommand, sendCommand, channelsCommand, deviceCommand, loadCommand, scenarioCommand, conformanceCommand, jwtCommand, readyzCommand,
    certsCommand,
    benchLatencyCommand, benchDevicesCommand,
]
let listed: [(name: String, summary: String)] =
    subcommands.compactMap { command in command.listing.map { (name: command.name, summary: $0) } }
    + [("version", "print the version")]

func topLevelHelp() -> String {
    var lines = [
        "apns-emulator \(Emulator.version): a local emulator of Apple's Push Notification service", "",
        "usage: apns-emulator [COMMAND] [options]   (COMMAND defaults to serve)", "", "commands:",
    ]
    // The longest name and two spaces: a long name (conformance) never runs into its summary.
    let width = (listed.map(\.name.count).max() ?? 0) + 2
    for command in listed { lines.append("  " + command.name.padding(toLength: width, withPad: " ", startingAt: 0) + command.summary) }
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
if arguments.first == "--version" {
    command = "version"
    rest = Array(arguments.dropFirst())
}

switch command {
case "version":
    if rest == ["--help"] || rest == ["-h"] {
        print("usage: apns-emulator version (or --version): prints the version")
    } else if let stray = rest.first {
        FileHandle.standardError.write(Data("apns-emulator version: takes no arguments (got '\(stray)')\n".utf8))
        exit(2)
    } else {
        print("apns-emulator \(Emulator.version)")
    }
case "help":
    print(topLevelHelp())
default:
    guard let subcommand = subcommands.first(where: { $0.name == command }) else {
        FileHandle.standardError.write(
            Data("apns-emulator: unknown command '\(command)'. Commands: \(listed.map(\.name).joined(separator: ", ")). See --help.\n".utf8))
        exit(2)
    }
    subcommand.start(rest)
}
