import APNsCore
import EmulatorServer
import Foundation

/// Reads and checks a scenario file before anything runs: every step's kind, fields and
/// types, every device alias, and every `${…}` reference (a variable that is not set is an
/// error now, naming the step and field, rather than a failure halfway through).
public enum ScenarioParser {
    static let topLevelFields = ["name", "description", "bundleId", "variables", "backends", "emulator", "expectedChecks", "steps"]
    static let defaultBundleID = "com.example.app"

    /// - Parameter variables: `--var` values, then the environment (scenario `variables` are
    ///   the defaults below them).
    public static func parse(file path: String, variables: [String: String]) throws(ScenarioFileError) -> Scenario {
        let bytes: [UInt8]
        do { bytes = try InputFile.read(path) } catch { throw ScenarioFileError(file: path, error.description) }
        do {
            return try parse(bytes, variables: variables, directory: (path as NSString).deletingLastPathComponent)
        } catch {
            throw error.inFile(path)
        }
    }

    /// - Parameter directory: where a backend given as a file name is looked for (the
    ///   scenario file's directory; nil: the current directory).
    public static func parse(_ bytes: [UInt8], variables: [String: String], directory: String? = nil) throws(ScenarioFileError) -> Scenario {
        let json: JSONValue
        do { json = try JSONValue.parseFile(bytes) } catch {
            let (line, column) = position(of: error.offset, in: bytes)
            let place = error.path.isEmpty ? "" : " (\(error.path))"
            // YAML is the likeliest other thing a scenario was written in.
            let first = bytes.first { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }
            let yaml = first != nil && first != UInt8(ascii: "{") && first != UInt8(ascii: "[")
            let hint = yaml ? " (scenario files are JSON: YAML converts with `yq -o json FILE`)" : ""
            throw ScenarioFileError("not valid JSON at line \(line), column \(column)\(place): \(error.message)\(hint)")
        }
        guard let top = json.objectValue else { throw ScenarioFileError("a scenario is a JSON object with \"name\" and \"steps\"") }
        try unknownFields(top, allowed: topLevelFields, location: "top level")

        guard let name = top["name"]?.stringValue, !name.isEmpty else {
            let why = top["name"] == nil ? "is required (a string)" : top["name"]?.stringValue == nil ? "must be a string" : "must not be empty"
            throw ScenarioFileError(location: "top level", field: "name", why)
        }
        let description = try optionalString(top, "description", location: "top level")
        let bundleID = try optionalString(top, "bundleId", location: "top level") ?? defaultBundleID

        var defaults: [String: String] = [:]
        if let value = top["variables"] {
            guard let object = value.objectValue else {
                throw ScenarioFileError(location: "top level", field: "variables", "must be an object of NAME: value")
            }
            for (key, value) in object {
                guard Template.isValidName(key), !key.contains(".") else {
                    throw ScenarioFileError(location: "variables", field: key, "is not a variable name (letters, digits, _ and -)")
                }
                guard let text = scalarText(value) else {
                    throw ScenarioFileError(location: "variables", field: key, "must be a string, number or boolean")
                }
                defaults[key] = text
            }
        }
        var known = VariableCheck(fixed: Set(variables.keys).union(defaults.keys))
        let fixed = defaults.merging(variables) { _, given in given }

        var backends: [(bundleID: String, backend: JSONValue)] = []
        if let value = top["backends"] {
            guard let object = value.objectValue else {
                throw ScenarioFileError(location: "top level", field: "backends", "must be an object: {\"BUNDLE_ID\": {\"register\": HOOK, …}}")
            }
            for (bundle, value) in object {
                let location = "backends.\(bundle)"
                let backend = try backendValue(value, directory: directory, location: location)
                try known.check(backend, location: location, field: nil)
                var budget = Template.Budget()
                let filled = try Template.fillKnown(json: backend, budget: &budget, tooLong: { ScenarioFileError(location: location, $0) }) {
                    fixed[$0]
                }
                try checkBackend(filled.value, complete: filled.complete, location: location)
                backends.append((bundle, backend))
            }
        }

        var emulatorArguments: [String] = []
        if let value = top["emulator"] {
            guard let object = value.objectValue else { throw ScenarioFileError(location: "top level", field: "emulator", "must be an object") }
            try unknownFields(object, allowed: ["arguments"], location: "emulator")
            if let arguments = object["arguments"] {
                guard let list = arguments.arrayValue?.compactMap(\.stringValue), list.count == arguments.arrayValue?.count else {
                    throw ScenarioFileError(location: "emulator", field: "arguments", "must be an array of strings (apns-emulator serve options)")
                }
                emulatorArguments = list
                // The emulator's own option check, as the start would make it.
                do throws(StartupError) {
                    let apps = [bundleID] + backends.map(\.bundleID).filter { $0 != bundleID }
                    try InProcessEmulator.check(arguments: list, bundleIDs: apps)
                } catch {
                    throw ScenarioFileError(location: "emulator", field: "arguments", error.description)
                }
            }
        }

        var expectedCrossAccount = 0
        if let value = top["expectedChecks"] {
            guard let object = value.objectValue else {
                throw ScenarioFileError(location: "top level", field: "expectedChecks", "must be an object: {\"crossAccount\": N}")
            }
            try unknownFields(object, allowed: ["crossAccount"], location: "expectedChecks")
            if let count = object["crossAccount"] {
                if let problem = count.numberValue == nil ? "must be a number" : ValueRule.crossAccount.problem(count) {
                    throw ScenarioFileError(location: "expectedChecks", field: "crossAccount", problem)
                }
                expectedCrossAccount = Int(count.intValue ?? 0)
            }
        }

        guard let list = top["steps"]?.arrayValue, !list.isEmpty else {
            throw ScenarioFileError(location: "top level", field: "steps", "is required: a non-empty array of steps")
        }
        let aliases = deviceAliases(list)
        var steps: [Step] = []
        for (offset, value) in list.enumerated() {
            steps.append(try StepParser(index: offset + 1, aliases: aliases, variables: fixed).parse(value, known: &known))
        }
        return Scenario(
            name: name, description: description, bundleID: bundleID,
            variables: fixed, backends: backends,
            emulatorArguments: emulatorArguments, expectedCrossAccount: expectedCrossAccount, steps: steps)
    }

    /// A backend object, or a file holding one (a path relative to the scenario file, such as
    /// `../backend/hooks.json`).
    static func backendValue(_ value: JSONValue, directory: String?, location: String) throws(ScenarioFileError) -> JSONValue {
        if value.objectValue != nil { return value }
        guard let name = value.stringValue else {
            throw ScenarioFileError(location: location, "must be an object (the body of PUT /api/v1/apps/{bundleId}/backend) or a file name")
        }
        let path = name.hasPrefix("/") || directory == nil || directory == "" ? name : "\(directory!)/\(name)"
        let parsed: JSONValue
        do { parsed = try JSONValue.parseFile(try InputFile.read(path)) } catch {
            throw ScenarioFileError(location: location, "the backend file \(path): \(error)")
        }
        guard parsed.objectValue != nil else { throw ScenarioFileError(location: location, "\(path) does not hold a JSON object") }
        return parsed
    }

    /// What `PUT /api/v1/apps/{bundleId}/backend` would refuse, in its words: an empty backend,
    /// an unknown field or hook, a bad hook. A string only the run fills in stands for a value
    /// that fits its place (a URL, a pointer), so the rest is still checked.
    static func checkBackend(_ backend: JSONValue, complete: Bool, location: String) throws(ScenarioFileError) {
        if backend.objectValue?.isEmpty == true {
            throw ScenarioFileError(
                location: location,
                "give the backend: any of \(AppBackend.fields.joined(separator: ", ")) (app-backend.md); an empty one would do nothing")
        }
        func sample(_ value: JSONValue, key: String?) -> JSONValue {
            switch value {
            case .string(let text) where text.contains("${"):
                let fits = ["url": "http://1/", "method": "POST", "addresseePointer": "/1"]
                return .string(key.flatMap { fits[$0] } ?? "1")
            case .array(let items): return .array(items.map { sample($0, key: nil) })
            case .object(let object): return .object(JSONObject(object.members.map { ($0.key, sample($0.value, key: $0.key)) }))
            default: return value
            }
        }
        do throws(BackendConfigError) { _ = try AppBackend.parse(complete ? backend : sample(backend, key: nil)) } catch {
            throw ScenarioFileError(location: location, error.description)
        }
    }

    /// Every alias a `device` or `restore` step makes, in order (for the one-device default).
    static func deviceAliases(_ steps: [JSONValue]) -> [String] {
        var aliases: [String] = []
        for step in steps {
            let made: String?
            switch step["do"]?.stringValue {
            case "device": made = step["alias"]?.stringValue
            case "restore": made = step["device"]?.stringValue
            default: made = nil
            }
            if let made, !aliases.contains(made) { aliases.append(made) }
        }
        return aliases
    }

    static func unknownFields(_ object: JSONObject, allowed: [String], location: String) throws(ScenarioFileError) {
        if let unknown = object.keys.first(where: { !allowed.contains($0) }) {
            throw ScenarioFileError(location: location, field: unknown, "is not a field here (known: \(allowed.joined(separator: ", ")))")
        }
    }

    static func optionalString(_ object: JSONObject, _ name: String, location: String) throws(ScenarioFileError) -> String? {
        guard let value = object[name], value != .null else { return nil }
        guard let text = value.stringValue else { throw ScenarioFileError(location: location, field: name, "must be a string") }
        return text
    }

    /// A string, number or boolean as text (what `${NAME}` becomes).
    static func scalarText(_ value: JSONValue) -> String? {
        switch value {
        case .string(let s): return s
        case .int(let i): return String(i)
        case .double(let d): return d == d.rounded() && abs(d) < 1e15 ? String(Int64(d)) : String(d)
        case .bool(let b): return b ? "true" : "false"
        default: return nil
        }
    }

    static func position(of offset: Int, in bytes: [UInt8]) -> (line: Int, column: Int) {
        var line = 1
        var column = 1
        for byte in bytes.prefix(offset) {
            if byte == UInt8(ascii: "\n") {
                line += 1
                column = 1
            } else {
                column += 1
            }
        }
        return (line, column)
    }
}

/// Which `${…}` names can be filled in at a point of the file: fixed ones (`--var`,
/// environment, `variables`), saved ones (by earlier steps), and runtime ones that refer to
/// something that exists by then (a device alias, a push already sent).
struct VariableCheck {
    var fixed: Set<String>
    var saved: Set<String> = []
    var aliasesSoFar: Set<String> = []
    /// Live Activities and broadcast channels named by earlier steps.
    var activitiesSoFar: Set<String> = []
    var channelsSoFar: Set<String> = []
    var pushed = false, ran = false, requested = false, broadcasted = false

    func check(_ value: JSONValue, location: String, field: String?) throws(ScenarioFileError) {
        let names: [String]
        do { names = try Template.references(in: value) } catch {
            throw ScenarioFileError(location: location, field: field, error.message)
        }
        for name in names {
            do { try check(name) } catch {
                throw ScenarioFileError(location: location, field: field, error.message)
            }
        }
    }

    func check(_ name: String) throws(Template.SyntaxError) {
        if saved.contains(name) || fixed.contains(name) { return }
        guard let runtime = try RuntimeName.parse(name) else {
            throw Template.SyntaxError(
                message: "${\(name)} is not set: pass --var \(name)=VALUE, set it in the environment, "
                    + "give it a default in \"variables\", or save it in an earlier step")
        }
        switch runtime {
        case .device(let alias, _), .pushToStart(let alias, _):
            guard aliasesSoFar.contains(alias) else {
                throw Template.SyntaxError(message: "${\(name)}: no device \"\(alias)\" exists at this point (made by a device or restore step)")
            }
        case .activity(let named, _):
            guard activitiesSoFar.contains(named) else {
                throw Template.SyntaxError(
                    message: "${\(name)}: no activity \"\(named)\" exists at this point (named by startActivity, or a push with startsActivity)")
            }
        case .channel(let named, _):
            guard channelsSoFar.contains(named) else {
                throw Template.SyntaxError(message: "${\(name)}: no channel \"\(named)\" exists at this point (made by a createChannel step)")
            }
        case .lastBroadcast:
            guard broadcasted else { throw Template.SyntaxError(message: "${\(name)}: no broadcast step comes before this one") }
        case .lastPush:
            guard pushed else { throw Template.SyntaxError(message: "${\(name)}: no push step comes before this one") }
        case .lastRun:
            guard ran else { throw Template.SyntaxError(message: "${\(name)}: no run step comes before this one") }
        case .lastHttp, .lastHttpJSON:
            guard requested else { throw Template.SyntaxError(message: "${\(name)}: no http step comes before this one") }
        case .clockNow, .emulator:
            break
        }
    }
}
