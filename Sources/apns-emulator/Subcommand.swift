import CommandLineOptions
import Foundation
import JSON

/// One `apns-emulator` subcommand: its line in the top-level help, what its `--help` prints,
/// its options, and what it runs. `start` answers `--help`; `parse` reads the options and ends
/// the process with status 2 on a usage error, as every subcommand does.
struct Subcommand: Sendable {
    let name: String
    /// Its line in `apns-emulator --help`; nil for the benchmark helpers, which are not listed.
    var listing: String?
    /// What `--help` prints above the options.
    let summary: String
    let specs: [OptionSpec]
    /// The arguments that ask for help (the benchmark helpers take `--help` only).
    var helpFlags = ["--help", "-h"]
    /// `--help` tells of a `--config` file and of APNS_EMULATOR_* variables.
    var configFile = false
    var environmentVariables = false
    /// `--help-markdown` prints the options as a Markdown table (serve's, for docs/configuration.md).
    var markdownHelp = false
    /// How its error messages start (`apns-emulator: …`, `apns-emulator load: …`).
    var errorPrefix = "apns-emulator"
    /// A failure also prints `{"error": …, "exitCode": …}` on standard output, for a run asked
    /// for JSON (its reader gets an object, not nothing).
    var failsInJSON = false
    /// The help of an action named in the arguments (`channels create --help`), nil for the
    /// command's own.
    var actionHelp: @Sendable ([String]) -> String? = { _ in nil }
    /// Runs with the arguments after the subcommand's name, once `--help` is ruled out.
    let run: @Sendable (Subcommand, [String]) -> Never

    func start(_ arguments: [String]) -> Never {
        if markdownHelp, arguments.contains("--help-markdown") {
            print(OptionParser.markdownTable(specs: specs, configOption: configFile ? "config" : nil))
            exit(0)
        }
        if arguments.contains(where: helpFlags.contains) {
            if let help = actionHelp(arguments) {
                print(help)
                exit(0)
            }
            print(
                OptionParser.help(
                    command: name, summary: summary, specs: specs, configFile: configFile,
                    environmentVariables: environmentVariables, configOption: configFile ? "config" : nil))
            exit(0)
        }
        run(self, arguments)
    }

    /// The options and the positional arguments; `environment` is read for options that have
    /// a variable (the `device` command reads the process's).
    func parse(_ arguments: [String], environment: [String: String] = [:]) -> (ResolvedOptions, positional: [String]) {
        do { return try OptionParser.parse(arguments, specs: specs, environment: environment) } catch { fail(error.description) }
    }

    /// `PREFIX: message` on standard error, then exit (2: a usage error).
    func fail(_ message: String, code: Int32 = 2) -> Never {
        fflush(nil)  // what was printed before goes first
        if failsInJSON {
            let object = JSONValue.object(JSONObject([("error", .string(message)), ("exitCode", .int(Int64(code)))]))
            FileHandle.standardOutput.write(Data((object.serialized() + "\n").utf8))
        }
        FileHandle.standardError.write(Data("\(errorPrefix): \(message)\n".utf8))
        exit(code)
    }

    /// Runs `body`, which ends the process itself; an error it throws ends it through `fail`
    /// (status 2 for a usage error, 1 for any other).
    func failing(_ body: () throws -> Never) -> Never {
        do { try body() } catch let error as UsageError { fail(error.description) } catch { fail("\(error)", code: 1) }
    }

    /// The spec of one of its options.
    func spec(_ name: String) -> OptionSpec { specs.first { $0.name == name }! }
}
