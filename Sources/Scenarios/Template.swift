import APNsCore

/// `${NAME}` references in scenario strings. `$${` stands for a literal `${`; the emulator's
/// own `{{token}}` placeholders are plain text here (the emulator fills them per call).
enum Template {
    enum Piece: Equatable {
        case text(String)
        case variable(String)
    }

    struct SyntaxError: Error, Equatable {
        let message: String
    }

    /// Letters, digits, `_`, `-`, `.`, `:` and `/` (for `lastHttp.json:/a/b`).
    static func isValidName(_ name: String) -> Bool {
        !name.isEmpty
            && name.unicodeScalars.allSatisfy {
                ($0.value < 128 && ($0.properties.isAlphabetic || $0.properties.numericType != nil)) || "_-.:/".unicodeScalars.contains($0)
            }
    }

    static func pieces(_ text: String) throws(SyntaxError) -> [Piece] {
        var out: [Piece] = []
        var literal = ""
        var rest = Substring(text)
        while let dollar = rest.firstIndex(of: "$") {
            literal += rest[..<dollar]
            let after = rest[dollar...]
            if after.hasPrefix("$${") {
                literal += "${"
                rest = after.dropFirst(3)
            } else if after.hasPrefix("${") {
                guard let close = after.firstIndex(of: "}") else {
                    throw SyntaxError(message: "\"${\" without a closing \"}\" in \"\(text)\" (write $${ for a literal ${)")
                }
                let name = String(after[after.index(dollar, offsetBy: 2)..<close])
                guard isValidName(name) else {
                    throw SyntaxError(message: "\"${\(name)}\" is not a variable name (letters, digits, _ - . : /)")
                }
                if !literal.isEmpty { out.append(.text(literal)) }
                literal = ""
                out.append(.variable(name))
                rest = after[after.index(after: close)...]
            } else {
                literal += "$"
                rest = after.dropFirst()
            }
        }
        literal += rest
        if !literal.isEmpty { out.append(.text(literal)) }
        return out
    }

    /// Every variable named in `value`'s strings (object keys are not templates).
    static func references(in value: JSONValue) throws(SyntaxError) -> [String] {
        var names: [String] = []
        try collect(value, into: &names)
        return names
    }

    private static func collect(_ value: JSONValue, into names: inout [String]) throws(SyntaxError) {
        switch value {
        case .string(let text):
            for case .variable(let name) in try pieces(text) { names.append(name) }
        case .array(let items):
            for item in items { try collect(item, into: &names) }
        case .object(let object):
            for member in object.members { try collect(member.value, into: &names) }
        default:
            break
        }
    }

    /// The most bytes one string may have once its `${…}` are filled in: a field's value, a
    /// saved value (1 MiB).
    static let maxValueBytes = 1 << 20
    /// The most bytes the strings with `${…}` of one step (or one backend) may have together.
    static let maxFilledBytes = 16 << 20

    /// What `${…}` may still fill in: one step's strings share it.
    struct Budget {
        var left = Template.maxFilledBytes
    }

    /// Why a filled-in string is refused; the file check and the run say the same.
    static func tooLongMessage(bytes: Int, overBudget: Bool) -> String {
        overBudget
            ? "the strings with ${…} filled in come to over \(maxFilledBytes) bytes (16 MiB) together, the most one step may have"
            : "with ${…} filled in it would be over \(maxValueBytes) bytes (1 MiB), the most a value may have (\(bytes) bytes at least)"
    }

    /// `text` with its `${…}` filled in by `resolve`, refused (`tooLong`, with the message) once
    /// it would grow over `maxValueBytes`, or the strings filled in under `budget` over theirs.
    /// A string without `${…}` is returned as it is.
    static func substitute<E: Error>(
        _ text: String, budget: inout Budget, tooLong: (String) -> E, _ resolve: (String) throws(E) -> String
    ) throws(E) -> String {
        // Syntax was checked when the file was read; a string that fails now is kept as is.
        guard text.contains("${"), let pieces = try? pieces(text) else { return text }
        var out = ""
        for piece in pieces {
            let part: String
            switch piece {
            case .text(let literal): part = literal
            case .variable(let name): part = try resolve(name)
            }
            let bytes = out.utf8.count + part.utf8.count
            if bytes > maxValueBytes { throw tooLong(tooLongMessage(bytes: bytes, overBudget: false)) }
            if bytes > budget.left { throw tooLong(tooLongMessage(bytes: bytes, overBudget: true)) }
            out += part
        }
        budget.left -= out.utf8.count
        return out
    }

    /// `value` with every string substituted (object keys untouched), under one budget.
    static func substitute<E: Error>(
        json value: JSONValue, budget: inout Budget, tooLong: (String) -> E, _ resolve: (String) throws(E) -> String
    ) throws(E) -> JSONValue {
        switch value {
        case .string(let text):
            return .string(try substitute(text, budget: &budget, tooLong: tooLong, resolve))
        case .array(let items):
            var out: [JSONValue] = []
            for item in items { out.append(try substitute(json: item, budget: &budget, tooLong: tooLong, resolve)) }
            return .array(out)
        case .object(let object):
            var out = JSONObject()
            for member in object.members {
                out.members.append((member.key, try substitute(json: member.value, budget: &budget, tooLong: tooLong, resolve)))
            }
            return .object(out)
        default:
            return value
        }
    }

    /// `value` with the strings whose every `${…}` `known` gives filled in, the others left as
    /// they are, and whether there were none of those (the file check fills in what it knows).
    static func fillKnown(
        json value: JSONValue, budget: inout Budget, tooLong: (String) -> ScenarioFileError, _ known: (String) -> String?
    ) throws(ScenarioFileError) -> (value: JSONValue, complete: Bool) {
        switch value {
        case .string(let text):
            guard text.contains("${") else { return (value, true) }
            // Bad syntax is the file check's to report: nothing is filled in.
            guard let names = try? references(in: value), names.allSatisfy({ known($0) != nil }) else { return (value, false) }
            let filled = try substitute(text, budget: &budget, tooLong: tooLong) { (name: String) throws(ScenarioFileError) -> String in
                known(name) ?? ""
            }
            return (.string(filled), true)
        case .array(let items):
            var out: [JSONValue] = []
            var complete = true
            for item in items {
                let filled = try fillKnown(json: item, budget: &budget, tooLong: tooLong, known)
                out.append(filled.value)
                complete = complete && filled.complete
            }
            return (.array(out), complete)
        case .object(let object):
            var out = JSONObject()
            var complete = true
            for member in object.members {
                let filled = try fillKnown(json: member.value, budget: &budget, tooLong: tooLong, known)
                out.members.append((member.key, filled.value))
                complete = complete && filled.complete
            }
            return (.object(out), complete)
        default:
            return (value, true)
        }
    }
}
