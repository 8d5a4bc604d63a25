// CommandLineOptions: flags, APNS_EMULATOR_* variables and --config files → option values
// (text, with where each came from). Knows no command's meaning. Imports APNsCore (JSON,
// InputFile) and Foundation only.
public import APNsCore
import Foundation

/// One command-line option. The same table drives parsing, `--help`, environment variables
/// (`APNS_EMULATOR_<NAME>`) and config-file keys (camelCase), so they cannot drift apart.
public struct OptionSpec: Sendable {
    public let name: String
    /// nil for a switch (a flag without a value).
    public let valueName: String?
    public let defaultValue: String?
    public let repeatable: Bool
    public let help: String

    public init(
        _ name: String, _ valueName: String?, default defaultValue: String? = nil, repeatable: Bool = false,
        _ help: String
    ) {
        self.name = name
        self.valueName = valueName
        self.defaultValue = defaultValue
        self.repeatable = repeatable
        self.help = help
    }

    public var flag: String { "--" + name }
    public var environmentVariable: String { "APNS_EMULATOR_" + name.uppercased().replacingOccurrences(of: "-", with: "_") }
    public var configKey: String {
        let parts = name.split(separator: "-")
        return parts.enumerated().map { $0.offset == 0 ? String($0.element) : $0.element.capitalized }.joined()
    }
}

/// Where a value came from, for error messages.
public enum OptionSource: Sendable, Equatable, CustomStringConvertible {
    case flag, environment(String), file(String), defaultValue

    public var description: String {
        switch self {
        case .flag: return "command line"
        case .environment(let name): return "environment variable \(name)"
        case .file(let path): return "config file \(path)"
        case .defaultValue: return "default"
        }
    }
}

public struct UsageError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Values after precedence (flag > environment > config file > default) is applied.
public struct ResolvedOptions: Sendable {
    public var values: [String: (values: [String], source: OptionSource)] = [:]
    /// Structured config-file entries that have no flag form (e.g. `devices`).
    public var fileObjects: JSONObject = JSONObject()
    public var configPath: String?

    public func string(_ name: String) -> String? { values[name]?.values.last }
    public func strings(_ name: String) -> [String] { values[name]?.values ?? [] }
    public func isSet(_ name: String) -> Bool { values[name].map { !$0.values.isEmpty } ?? false }
    public func source(_ name: String) -> OptionSource { values[name]?.source ?? .defaultValue }

    // The same, keyed by the option itself: a command that declares its options as constants
    // cannot misspell one.
    public func string(_ spec: OptionSpec) -> String? { string(spec.name) }
    public func strings(_ spec: OptionSpec) -> [String] { strings(spec.name) }
    public func isSet(_ spec: OptionSpec) -> Bool { isSet(spec.name) }

    /// A switch's state when it was given: `--quiet`, `--quiet=false`, `APNS_EMULATOR_QUIET=true`,
    /// `"quiet": true` in a config file. true, 1, yes and on turn it on; false, 0, no and off
    /// off (any case); anything else is a usage error, not a silent "off".
    public func switchValue(_ spec: OptionSpec) throws(UsageError) -> Bool? {
        guard let text = string(spec) else { return nil }
        switch text.lowercased() {
        case "true", "1", "yes", "on": return true
        case "false", "0", "no", "off": return false
        default: throw UsageError("\(origin(spec)): '\(text)' is not true or false (nor 1/0, yes/no, on/off)")
        }
    }

    /// Gives `spec` this value unless a flag, variable or config file set it (a preset).
    public mutating func preset(_ spec: OptionSpec, _ value: String) {
        if !isSet(spec) { values[spec.name] = ([value], .defaultValue) }
    }

    /// The option's text when it is one of `allowed`, nil when it is not set.
    public func choice(_ spec: OptionSpec, among allowed: [String]) throws(UsageError) -> String? {
        guard let text = string(spec) else { return nil }
        guard allowed.contains(text) else {
            throw UsageError("\(origin(spec)): '\(text)' is not one of \(allowed.joined(separator: ", "))")
        }
        return text
    }

    /// The option as one of an enumeration's cases (their raw values, in declaration order, are
    /// the allowed texts), nil when it is not set.
    public func choice<T: RawRepresentable & CaseIterable>(_ spec: OptionSpec, _ type: T.Type) throws(UsageError) -> T?
    where T.RawValue == String {
        try choice(spec, among: T.allCases.map(\.rawValue)).flatMap(T.init(rawValue:))
    }

    /// The option as a whole number within `range`, nil when it is not set; a bad value is a
    /// usage error that says where it came from.
    public func integer(_ spec: OptionSpec, in range: ClosedRange<Int>) throws(UsageError) -> Int? {
        guard let text = string(spec.name) else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw UsageError("\(origin(spec)): '\(text)' is not a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }

    /// "--sandbox-listen (command line)" for messages.
    public func origin(_ spec: OptionSpec) -> String {
        switch source(spec.name) {
        case .flag: return spec.flag
        case .environment(let name): return "\(spec.flag) (from \(name))"
        case .file(let path): return "\(spec.flag) (\"\(spec.configKey)\" in \(path))"
        case .defaultValue: return "\(spec.flag) (default)"
        }
    }
}

public enum OptionParser {
    /// Parses `arguments` (without the subcommand) against `specs`, then fills in the
    /// environment and, if `--config` was given (or APNS_EMULATOR_CONFIG), the JSON file.
    /// `fillingDefaults: false` leaves unset options unset (their defaults are the caller's own
    /// values, which the table only shows).
    public static func parse(
        _ arguments: [String], specs: [OptionSpec], environment: [String: String],
        configSpec: OptionSpec? = nil, fillingDefaults: Bool = true
    ) throws(UsageError)
        -> (ResolvedOptions, positional: [String])
    {
        var fromFlags: [String: [String]] = [:]
        var positional: [String] = []
        let byName = Dictionary(uniqueKeysWithValues: specs.map { ($0.name, $0) })
        var i = 0
        while i < arguments.count {
            let argument = arguments[i]
            i += 1
            if argument == "--" {
                positional.append(contentsOf: arguments[i...])
                break
            }
            guard argument.hasPrefix("--"), argument.count > 2 else {
                positional.append(argument)
                continue
            }
            var name = String(argument.dropFirst(2))
            var inlineValue: String?
            if let equals = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            guard let spec = byName[name] else {
                let close = specs.map(\.name).filter { $0.hasPrefix(String(name.prefix(3))) }
                let hint = close.isEmpty ? "" : " Did you mean \(close.map { "--" + $0 }.joined(separator: ", "))?"
                throw UsageError("unknown option --\(name).\(hint) See --help.")
            }
            let value: String
            if spec.valueName == nil {
                // The words a variable or config file may give a switch (`switchValue`).
                guard inlineValue == nil || ["true", "false", "1", "0", "yes", "no", "on", "off"].contains(inlineValue!.lowercased()) else {
                    throw UsageError("\(spec.flag) is a switch: give it alone, or as \(spec.flag)=true or =false (1/0, yes/no, on/off)")
                }
                value = inlineValue ?? "true"
            } else if let inlineValue {
                value = inlineValue
            } else {
                guard i < arguments.count else { throw UsageError("\(spec.flag) needs a value: \(spec.flag) \(spec.valueName!)") }
                value = arguments[i]
                // `--token $T --host …` with T empty: the next option is not taken as the value.
                if value.hasPrefix("--"), byName[String(value.dropFirst(2).prefix { $0 != "=" })] != nil {
                    throw UsageError(
                        "\(spec.flag) needs a value: \(spec.flag) \(spec.valueName!) (the word after it is the option \(value.prefix { $0 != "=" }); an empty shell variable?)"
                    )
                }
                i += 1
            }
            if spec.repeatable { fromFlags[name, default: []].append(value) } else { fromFlags[name] = [value] }
        }

        var resolved = ResolvedOptions()
        // Config file: flag, then environment.
        var file: JSONObject?
        if let configSpec {
            // An empty variable counts as not set, as for every other variable (`${VAR:-}`).
            let fromEnvironment = environment[configSpec.environmentVariable].flatMap { $0.isEmpty ? nil : $0 }
            let path = fromFlags[configSpec.name]?.last ?? fromEnvironment
            if let path {
                file = try loadConfigFile(path)
                // One file: a file naming another would be read as if it did not.
                if file?[configSpec.configKey] != nil {
                    throw UsageError(
                        "config file \(path): \"\(configSpec.configKey)\" cannot be given in a config file (one file is read; give its settings in it)"
                    )
                }
                resolved.configPath = path
                resolved.values[configSpec.name] = ([path], fromFlags[configSpec.name] != nil ? .flag : .environment(configSpec.environmentVariable))
            }
        }
        for spec in specs where spec.name != configSpec?.name {
            if let values = fromFlags[spec.name] {
                resolved.values[spec.name] = (values, .flag)
            } else if let text = environment[spec.environmentVariable], !text.isEmpty {
                // Repeatable options take several values separated by whitespace.
                let values = spec.repeatable ? text.split(whereSeparator: \.isWhitespace).map(String.init) : [text]
                resolved.values[spec.name] = (values, .environment(spec.environmentVariable))
            } else if let file, let value = file[spec.configKey], let path = resolved.configPath {
                resolved.values[spec.name] = (try fileValues(value, spec: spec, path: path), .file(path))
            } else if fillingDefaults, let defaultValue = spec.defaultValue {
                resolved.values[spec.name] = ([defaultValue], .defaultValue)
            }
        }
        if let file {
            let known = Set(specs.map(\.configKey))
            resolved.fileObjects = JSONObject(file.members.filter { !known.contains($0.key) })
        }
        return (resolved, positional)
    }

    /// The config file's object. The file is read with a size cap and parsed as a file
    /// (a BOM is skipped; a duplicate key is an error that names it).
    static func loadConfigFile(_ path: String) throws(UsageError) -> JSONObject {
        let value: JSONValue
        do { value = try JSONValue.parseFile(try InputFile.read(path)) } catch {
            throw UsageError("--config \(path): \(error)")
        }
        guard let object = value.objectValue else {
            throw UsageError("--config \(path): the file must hold a JSON object")
        }
        return object
    }

    /// A config-file value as option strings. Objects are kept as JSON text; the option's
    /// own parser understands them (e.g. an `authKeys` entry written as an object).
    static func fileValues(_ value: JSONValue, spec: OptionSpec, path: String) throws(UsageError) -> [String] {
        func scalar(_ value: JSONValue) throws(UsageError) -> String {
            switch value {
            case .string(let s): return s
            case .int(let i): return String(i)
            // 1000.0 and 1e3 (what JSON writers make of numbers held as floats) are 1000.
            case .double(let d):
                if d.rounded() == d, abs(d) < 9e15 { return String(Int64(d)) }
                return String(d)
            case .bool(let b): return b ? "true" : "false"
            // Entries of a list (`authKey`, `app`) may be objects, which their parsers read;
            // any other option would take the object's JSON text as its value (a path, a token).
            case .object where spec.repeatable: return value.serialized()
            case .object:
                throw UsageError("\"\(spec.configKey)\" in \(path) must be a string, number or boolean, not an object")
            case .null, .array, .raw:
                throw UsageError("\"\(spec.configKey)\" in \(path) must be a string, number or boolean")
            }
        }
        if case .array(let items) = value {
            guard spec.repeatable else {
                throw UsageError("\"\(spec.configKey)\" in \(path) takes one value, not a list")
            }
            var out: [String] = []
            for item in items { out.append(try scalar(item)) }
            return out
        }
        return [try scalar(value)]
    }

    /// The option table of docs/configuration.md (a test keeps that page in step with it).
    /// `configOption` names the option that gives the config file: a file cannot name another,
    /// so its row has no config key.
    /// `APNS_EMULATOR_*` variables in `environment` that no option of `specs` reads but that are
    /// one or two letters away from one that does (`APNS_EMULATOR_SANBOX_LISTEN`), each with the
    /// variable meant. Variables of other commands (`known`) are not typos; names further from
    /// every option (a test harness's own) are left alone.
    public static func misspelledVariables(
        in environment: [String: String], specs: [OptionSpec], known: Set<String> = []
    ) -> [(given: String, meant: String)] {
        let read = specs.map(\.environmentVariable)
        var found: [(given: String, meant: String)] = []
        for name in environment.keys.sorted() where name.hasPrefix("APNS_EMULATOR_") && !known.contains(name) && !read.contains(name) {
            if let meant = read.first(where: { editDistance(Array($0.utf8), Array(name.utf8), atMost: 2) <= 2 }) {
                found.append((name, meant))
            }
        }
        return found
    }

    /// The name of `known` closest to `name` by the rule misspelled variables are judged by
    /// (one or two letters away; the nearest, the first of equals), nil when none is that close:
    /// for "did you mean" in messages on an unknown config-file key.
    public static func closest(to name: String, among known: [String]) -> String? {
        let given = Array(name.utf8)
        var best: (name: String, distance: Int)?
        for candidate in known where candidate != name {
            let distance = editDistance(Array(candidate.utf8), given, atMost: 2)
            if distance <= 2, distance < (best?.distance ?? 3) { best = (candidate, distance) }
        }
        return best?.name
    }

    /// `; did you mean "KEY"?` for an unknown key close to one of `known`, else `otherwise`
    /// (the list of known keys, in the message's own words).
    public static func unknownKeyAdvice(_ name: String, among known: [String], otherwise: String) -> String {
        closest(to: name, among: known).map { "; did you mean \"\($0)\"?" } ?? otherwise
    }

    /// Levenshtein distance, or `atMost + 1` once it is known to be larger.
    static func editDistance(_ a: [UInt8], _ b: [UInt8], atMost limit: Int) -> Int {
        guard abs(a.count - b.count) <= limit else { return limit + 1 }
        guard !a.isEmpty, !b.isEmpty else { return max(a.count, b.count) }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            if current.min()! > limit { return limit + 1 }
            previous = current
        }
        return previous[b.count]
    }

    public static func markdownTable(specs: [OptionSpec], configOption: String? = nil) -> String {
        var lines = ["| flag | environment variable | config key | default | meaning |", "|---|---|---|---|---|"]
        for spec in specs {
            let flag = (spec.valueName.map { "`\(spec.flag) \($0)`" } ?? "`\(spec.flag)`")
                .replacingOccurrences(of: "|", with: "\\|")
            let meaning = spec.help.replacingOccurrences(of: "|", with: "\\|") + (spec.repeatable ? " (repeatable)" : "")
            lines.append(
                "| \(flag) | `\(spec.environmentVariable)` | \(spec.name == configOption ? "" : "`\(spec.configKey)`") | \(spec.defaultValue.map { "`\($0)`" } ?? "") | \(meaning) |"
            )
        }
        return lines.joined(separator: "\n")
    }

    /// `--help` text for a command. `configFile` says whether the command reads `--config`
    /// (only `serve` does), so config keys are shown only there.
    public static func help(
        command: String, summary: String, specs: [OptionSpec], configFile: Bool = false,
        environmentVariables: Bool = false, configOption: String? = nil
    ) -> String {
        var lines = ["usage: apns-emulator \(command) [options]", "", summary, "", "options:"]
        for spec in specs {
            let left = spec.valueName.map { "\(spec.flag) \($0)" } ?? spec.flag
            var right = spec.help
            if let value = spec.defaultValue { right += " (default: \(value))" }
            if spec.repeatable { right += " (repeatable)" }
            lines.append("  " + left.padding(toLength: max(34, left.count + 2), withPad: " ", startingAt: 0) + right)
            if environmentVariables {
                lines.append(
                    "  " + String(repeating: " ", count: 34) + "env: \(spec.environmentVariable)"
                        + (configFile && spec.name != configOption ? ", config: \"\(spec.configKey)\"" : ""))
            }
        }
        return lines.joined(separator: "\n")
    }
}
