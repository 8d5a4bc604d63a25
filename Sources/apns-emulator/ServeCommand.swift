import APNsCore
import CommandLineOptions
import EmulatorServer
import Foundation
import Glibc
import Networking
import Synchronization

/// `apns-emulator serve` (the default command): runs the emulator until SIGTERM or SIGINT.
let serveCommand = Subcommand(
    name: "serve", listing: "run the emulator (the default command)",
    summary: "Runs the emulator: APNs provider endpoints, device socket, admin API and web UI.",
    specs: ServeConfiguration.specs, configFile: true, environmentVariables: true, markdownHelp: true,
    run: runServe
)

/// Whether `serve` is still starting, for the thread that takes SIGTERM and SIGINT.
private final class ServePhase: Sendable {
    let starting = Mutex(true)
}

private func runServe(_ command: Subcommand, _ args: [String]) -> Never {
    let configuration: ServeConfiguration
    do {
        configuration = try ServeConfiguration.resolve(arguments: args, environment: ProcessInfo.processInfo.environment)
    } catch {
        command.fail(error.description)
    }
    // SIGTERM and SIGINT end the emulator gracefully: they are blocked on every thread (the
    // event loops inherit this mask) and the main thread waits for them below.
    var stopSignals = sigset_t()
    sigemptyset(&stopSignals)
    sigaddset(&stopSignals, SIGTERM)
    sigaddset(&stopSignals, SIGINT)
    pthread_sigmask(SIG_BLOCK, &stopSignals, nil)
    // One thread takes them from here on, so that a signal while starting (a Redis waited
    // for up to 10 s, a large state directory read) ends the start at once instead of
    // waiting for it; once started, it asks the main thread for a graceful stop.
    let phase = ServePhase()
    let stopRequested = DispatchSemaphore(value: 0)
    Thread { [stopSignals] in
        var signals = stopSignals
        var received: Int32 = 0
        sigwait(&signals, &received)
        if phase.starting.withLock({ $0 }) {
            let name = received == SIGINT ? "SIGINT" : "SIGTERM"
            FileHandle.standardError.write(Data("apns-emulator: \(name) while starting; stopped before the start finished\n".utf8))
            _exit(0)
        }
        stopRequested.signal()
    }.start()
    // Thousands of connections need more than the usual soft limit of 1024 descriptors.
    let files = OpenFileLimit.raiseToHardLimit()
    let emulator: Emulator
    do {
        emulator = try Emulator(configuration: configuration)
        if files.after > files.before { emulator.logger.info("open-file limit raised from \(files.before) to \(files.after)") }
        // A misspelled variable would otherwise be ignored without a word (a flag or config key is refused).
        let otherCommands = Set(subcommands.filter { $0.name != command.name }.flatMap { $0.specs.map(\.environmentVariable) })
        for (given, meant) in OptionParser.misspelledVariables(
            in: ProcessInfo.processInfo.environment, specs: command.specs, known: otherCommands)
        {
            emulator.logger.warning("\(given) is not read by serve; did you mean \(meant)?")
        }
        try emulator.start()
        phase.starting.withLock { $0 = false }
    } catch {
        command.fail(error.description, code: 1)
    }
    if !configuration.quiet { print(Banner.text(for: emulator)) }
    fflush(nil)
    // Providers get GOAWAY Shutdown before the process exits, and up to 3 s to close: a client
    // still reading its answers when the process exits (its socket then resets) loses them.
    stopRequested.wait()
    emulator.stop(drainMilliseconds: 3000)
    // _exit, not exit: the event-loop threads have closed everything but may still be running
    // their thread-exit destructors (OpenSSL's per-thread state), and exit's OpenSSL clean-up
    // would free the same memory under them.
    fflush(nil)
    _exit(0)
}
