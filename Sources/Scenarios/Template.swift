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

    static func substitute<E: Error>(_ text: String, _ resolve: (String) throws(E) -> String) throws(E) -> String {
        // Syntax was checked when the file was read; a string that fails now is kept as is.
        guard let pieces = try? pieces(text) else { return text }
        var out = ""
        for piece in pieces {
            switch piece {
            case .text(let literal): out += literal
            case .variable(let name): out += try resolve(name)
            }
        }
        return out
    }

    /// `value` with every string substituted (object keys untouched).
    static func substitute<E: Error>(json value: JSONValue, _ resolve: (String) throws(E) -> String) throws(E) -> JSONValue {
        switch value {
        case .string(let text):
            return .string(try substitute(text, resolve))
        case .array(let items):
            var out: [JSONValue] = []
            for item in items { out.append(try substitute(json: item, resolve)) }
            return .array(out)
        case .object(let object):
            var out = JSONObject()
            for member in object.members { out.members.append((member.key, try substitute(json: member.value, resolve))) }
            return .object(out)
        default:
            return value
        }
    }
}
