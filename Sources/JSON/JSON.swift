// JSON: a JSON value type with its parser and writer, for every module that reads or writes
// JSON (the core, the admin API, the device protocol and its client). Imports nothing.

/// A small JSON value type with a parser and a writer. Objects keep their key order, so
/// payloads and records are shown the way they were written. Used off the request hot path
/// (JWT header/claims, payload inspection, admin API bodies); the hot path only runs
/// `JSONValidator`.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)
    /// JSON text that is written exactly as it is: a payload already checked by
    /// `JSONValidator`, spliced into device frames and records without being parsed and
    /// written again (which would change numbers like `1e99999` or `12345678901234567890`
    /// and choke on escapes like a lone `\ud800`). Never produced by `parse`.
    case raw([UInt8])

    public subscript(key: String) -> JSONValue? {
        if case .object(let object) = self { return object[key] }
        return nil
    }

    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    public var boolValue: Bool? { if case .bool(let b) = self { return b } else { return nil } }
    public var objectValue: JSONObject? { if case .object(let o) = self { return o } else { return nil } }
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a } else { return nil } }
    /// Whole numbers only (an `int`, or a `double` with no fraction).
    public var intValue: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d) where d.isFinite && d == d.rounded() && abs(d) < 9.0e15: return Int64(d)
        default: return nil
        }
    }
    public var numberValue: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        default: return nil
        }
    }
}

/// An ordered JSON object. Lookups are linear: objects here are small.
public struct JSONObject: Sendable, Equatable, Sequence {
    public var members: [(key: String, value: JSONValue)]

    public init(_ members: [(key: String, value: JSONValue)] = []) { self.members = members }

    public subscript(key: String) -> JSONValue? {
        get { members.last(where: { $0.key == key })?.value }
        set {
            if let index = members.lastIndex(where: { $0.key == key }) {
                if let newValue { members[index].value = newValue } else { members.remove(at: index) }
            } else if let newValue {
                members.append((key, newValue))
            }
        }
    }

    /// Adds a member for a key the object does not have yet, without looking for it (the
    /// subscript looks at every member first: building a 40-member record with it compared
    /// keys about 800 times).
    public mutating func append(_ key: String, _ value: JSONValue) { members.append((key, value)) }

    public var keys: [String] { members.map(\.key) }
    public var isEmpty: Bool { members.isEmpty }
    public func makeIterator() -> IndexingIterator<[(key: String, value: JSONValue)]> { members.makeIterator() }

    public static func == (a: JSONObject, b: JSONObject) -> Bool {
        a.members.count == b.members.count
            && zip(a.members, b.members).allSatisfy { $0.key == $1.key && $0.value == $1.value }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral, ExpressibleByFloatLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(JSONObject(elements.map { (key: $0.0, value: $0.1) }))
    }
    public init(nilLiteral: ()) { self = .null }
    public init(floatLiteral value: Double) { self = .double(value) }
}

// MARK: - Parsing

public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public let offset: Int
    public let message: String
    /// Where in the document, such as `devices[2].apps[0].bundleId` (empty: the top level).
    /// Only `parseFile` says.
    public var path: String = ""

    public var description: String { "invalid JSON at byte \(offset)\(path.isEmpty ? "" : " (\(path))"): \(message)" }

    /// The error one level further out: inside the member `key` or the item `index`.
    func inside(key: String? = nil, index: Int? = nil) -> JSONParseError {
        let outer = key ?? "[\(index ?? 0)]"
        let joined = path.isEmpty ? outer : path.hasPrefix("[") ? outer + path : outer + "." + path
        return JSONParseError(offset: offset, message: message, path: joined)
    }
}

extension JSONValue {
    public static func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        try parse(Array(text.utf8))
    }

    /// As lenient as APNs is with payloads: a key given twice counts once (the last one), a
    /// number too large for a Double becomes infinity, and an unpaired surrogate escape
    /// (`"\ud800"`) is read as U+FFFD.
    public static func parse(_ bytes: [UInt8]) throws(JSONParseError) -> JSONValue {
        try parse(bytes, isFile: false)
    }

    /// A file someone wrote (a config, scenario or fault-rule file): a leading UTF-8 byte
    /// order mark is skipped, and a key given twice in one object or a number too large for
    /// a Double is an error, since the file would not mean what its author thinks. Errors
    /// say where (`path`).
    public static func parseFile(_ bytes: [UInt8]) throws(JSONParseError) -> JSONValue {
        try parse(bytes, isFile: true)
    }

    /// As `parse`, but a value `JSONValue` cannot hold as it was sent is kept as its text
    /// (`.raw`): a string with an unpaired surrogate escape (`"\ud800"`), an integer beyond
    /// Int64, a number beyond a Double's range, `-0`. Writing the value again gives the bytes
    /// that came, as the device client shows a payload.
    public static func parseKeepingText(_ bytes: [UInt8]) throws(JSONParseError) -> JSONValue {
        try parse(bytes, isFile: false, keepsText: true)
    }

    private static func parse(_ bytes: [UInt8], isFile: Bool, keepsText: Bool = false) throws(JSONParseError) -> JSONValue {
        var parser = JSONParser(bytes: bytes, isFile: isFile, keepsText: keepsText)
        if isFile, bytes.starts(with: [0xEF, 0xBB, 0xBF]) { parser.index = 3 }
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        if parser.index != bytes.count { throw parser.error("trailing characters after the JSON value") }
        return value
    }
}

private struct JSONParser {
    let bytes: [UInt8]
    /// `JSONValue.parseFile`'s checks; payloads and API bodies skip them.
    let isFile: Bool
    /// `JSONValue.parseKeepingText`: values a `JSONValue` cannot hold become `.raw`.
    var keepsText = false
    /// Set by `parseString` when `keepsText` let an unpaired surrogate through (as U+FFFD).
    var sawLoneSurrogate = false
    var index = 0

    func error(_ message: String) -> JSONParseError { JSONParseError(offset: index, message: message) }

    mutating func skipWhitespace() {
        while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 {
            index += 1
        }
    }

    mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth < 128 else { throw error("nesting deeper than 128") }
        skipWhitespace()
        guard index < bytes.count else { throw error("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"):
            if isFile { return try parseFileObject(depth: depth) }
            var object = JSONObject()
            try parseItems(upTo: "}", of: "object") { (p) throws(JSONParseError) in
                let key = try p.parseKey()
                object.members.append((key, try p.parseValue(depth: depth + 1)))
            }
            return .object(object)
        case UInt8(ascii: "["):
            var array = [JSONValue]()
            try parseItems(upTo: "]", of: "array") { (p) throws(JSONParseError) in
                guard p.isFile else { return array.append(try p.parseValue(depth: depth + 1)) }
                do throws(JSONParseError) { array.append(try p.parseValue(depth: depth + 1)) } catch { throw error.inside(index: array.count) }
            }
            return .array(array)
        case UInt8(ascii: "\""):
            guard keepsText else { return .string(try parseString()) }
            let start = index
            sawLoneSurrogate = false
            let text = try parseString()
            return sawLoneSurrogate ? .raw(Array(bytes[start..<index])) : .string(text)
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            return .null
        case UInt8(ascii: "-"), 0x30...0x39:
            return try parseNumber()
        default:
            let byte = bytes[index]
            let shown =
                byte >= 0x20 && byte < 0x7F
                ? "'\(Character(Unicode.Scalar(byte)))'" : "byte 0x\(byte < 0x10 ? "0" : "")\(String(byte, radix: 16, uppercase: true))"
            throw error("unexpected \(shown) where a value should start")
        }
    }

    /// A member's key and the ':' after it.
    mutating func parseKey() throws(JSONParseError) -> String {
        skipWhitespace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a string key") }
        let key = try parseString()
        skipWhitespace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
        index += 1
        return key
    }

    /// An object of a file: a key given twice is an error, and errors inside say the key.
    /// Apart from payloads, so their parse costs nothing more.
    mutating func parseFileObject(depth: Int) throws(JSONParseError) -> JSONValue {
        var object = JSONObject()
        var seen = Set<String>()
        try parseItems(upTo: "}", of: "object") { (p) throws(JSONParseError) in
            p.skipWhitespace()
            let keyOffset = p.index
            let key = try p.parseKey()
            guard seen.insert(key).inserted else {
                throw JSONParseError(offset: keyOffset, message: "duplicate key \"\(key)\"", path: key)
            }
            do throws(JSONParseError) { object.members.append((key, try p.parseValue(depth: depth + 1))) } catch { throw error.inside(key: key) }
        }
        return .object(object)
    }

    /// The items of an object or array, from its opening byte to `close`, separated by ','
    /// (`item` parses one).
    mutating func parseItems(
        upTo close: Unicode.Scalar, of what: String,
        _ item: (inout JSONParser) throws(JSONParseError) -> Void
    ) throws(JSONParseError) {
        let close = UInt8(ascii: close)
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == close { index += 1; return }
        while true {
            try item(&self)
            skipWhitespace()
            guard index < bytes.count else { throw error("unterminated \(what)") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == close { index += 1; return }
            throw error("expected ',' or '\(Character(Unicode.Scalar(close)))'")
        }
    }

    mutating func expectLiteral(_ word: String) throws(JSONParseError) {
        for c in word.utf8 {
            guard index < bytes.count, bytes[index] == c else { throw error("invalid literal") }
            index += 1
        }
    }

    mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = index
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        let digitsStart = index
        while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 { index += 1 }
        guard index > digitsStart else { throw error("invalid number") }
        if bytes[digitsStart] == 0x30, index - digitsStart > 1 { throw JSONParseError(offset: start, message: "leading zero in number") }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let fractionStart = index
            while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 { index += 1 }
            guard index > fractionStart else { throw error("invalid number") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            let expStart = index
            while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 { index += 1 }
            guard index > expStart else { throw error("invalid number") }
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if isInteger, let value = Int64(text) {
            if keepsText, value == 0, bytes[start] == UInt8(ascii: "-") { return .raw(Array(bytes[start..<index])) }
            return .int(value)
        }
        guard let value = Double(text) else { throw error("invalid number") }
        if keepsText, isInteger || !value.isFinite || !Self.doubleKeepsValue(value, bytes[start..<index]) {
            return .raw(Array(bytes[start..<index]))
        }
        if isFile, !value.isFinite {
            let shown = text.count > 40 ? String(text.prefix(40)) + "…" : text
            throw JSONParseError(offset: start, message: "the number \(shown) is out of range (beyond ±1.8e308)")
        }
        return .double(value)
    }

    /// Whether `value`, read from the number `text`, still says what the text says, within a
    /// Double's 17 significant digits: not a sign lost (`-0.0`), a value lost to underflow
    /// (`1e-400`), or digits beyond 17 (`12345678901234567890.5`).
    static func doubleKeepsValue(_ value: Double, _ text: ArraySlice<UInt8>) -> Bool {
        var significant = 0
        var leading = true
        for byte in text {
            if byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") { break }
            guard byte >= 0x30, byte <= 0x39 else { continue }
            if leading, byte == 0x30 { continue }
            leading = false
            significant += 1
        }
        if value == 0 { return significant == 0 && text.first != UInt8(ascii: "-") }
        return significant <= 17
    }

    mutating func parseString() throws(JSONParseError) -> String {
        index += 1  // opening quote
        // Most strings have no escapes: find the run of plain bytes and take it whole (a
        // 4 KB payload string byte by byte was most of a device client's time).
        let start = index
        var bits: UInt8 = 0
        index = bytes.withUnsafeBufferPointer { buffer in
            var i = start
            while i < buffer.count, buffer[i] >= 0x20, buffer[i] != UInt8(ascii: "\""), buffer[i] != UInt8(ascii: "\\") {
                bits |= buffer[i]
                i += 1
            }
            return i
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "\"") {
            index += 1
            let end = index - 1
            // ASCII (most keys and values) needs no validation; the generic validating
            // initializer looks up type metadata at run time on every call.
            if bits < 0x80 {
                return bytes.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[start..<end]), as: UTF8.self) }
            }
            let s = bytes.withUnsafeBufferPointer { String(validating: UnsafeBufferPointer(rebasing: $0[start..<end]), as: UTF8.self) }
            guard let s else { throw JSONParseError(offset: start - 1, message: "the string starting here is not valid UTF-8") }
            return s
        }
        var out = Array(bytes[start..<index])
        while index < bytes.count {
            let c = bytes[index]
            if c == UInt8(ascii: "\"") {
                index += 1
                guard let s = String(validating: out, as: UTF8.self) else {
                    throw JSONParseError(offset: start - 1, message: "the string starting here is not valid UTF-8")
                }
                return s
            }
            if c < 0x20 { throw error("control character in string") }
            if c != UInt8(ascii: "\\") {
                out.append(c)
                index += 1
                continue
            }
            index += 1
            guard index < bytes.count else { break }
            let e = bytes[index]
            index += 1
            switch e {
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5C)
            case UInt8(ascii: "/"): out.append(0x2F)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try parseHex4()
                if (0xD800..<0xDC00).contains(scalar) {
                    // A high surrogate must be followed by an escaped low surrogate.
                    let lowStart = index
                    if index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") {
                        index += 2
                        let low = try parseHex4()
                        if (0xDC00..<0xE000).contains(low) {
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else {
                            index = lowStart  // the next escape is read on its own
                            scalar = try loneSurrogate()
                        }
                    } else {
                        scalar = try loneSurrogate()
                    }
                } else if (0xDC00..<0xE000).contains(scalar) {
                    scalar = try loneSurrogate()
                }
                guard let u = Unicode.Scalar(scalar) else { throw error("invalid escape") }
                out.append(contentsOf: String(Character(u)).utf8)
            default:
                throw error("invalid escape")
            }
        }
        throw error("unterminated string")
    }

    /// An unpaired surrogate: an error in a file; else U+FFFD, as Swift strings cannot hold one
    /// (APNs takes such payloads), and with `keepsText` noted for the caller to keep the text.
    mutating func loneSurrogate() throws(JSONParseError) -> UInt32 {
        if isFile { throw error("unpaired surrogate") }
        if keepsText { sawLoneSurrogate = true }
        return 0xFFFD
    }

    mutating func parseHex4() throws(JSONParseError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw error("short \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let c = bytes[index]
            let digit: UInt32
            switch c {
            case 0x30...0x39: digit = UInt32(c - 0x30)
            case 0x41...0x46: digit = UInt32(c - 0x41 + 10)
            case 0x61...0x66: digit = UInt32(c - 0x61 + 10)
            default: throw error("invalid \\u escape")
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }
}

// MARK: - Writing

extension JSONValue {
    /// Compact JSON text. With `pretty`, two-space indentation.
    public func serialized(pretty: Bool = false) -> String {
        var out = [UInt8]()
        write(into: &out, pretty: pretty, indent: 0)
        return String(decoding: out, as: UTF8.self)
    }

    public func serializedBytes() -> [UInt8] {
        var out = [UInt8]()
        write(into: &out, pretty: false, indent: 0)
        return out
    }

    /// Appends compact JSON text to `out`.
    public func append(to out: inout [UInt8]) {
        write(into: &out, pretty: false, indent: 0)
    }

    func write(into out: inout [UInt8], pretty: Bool, indent: Int) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .int(let i): out.append(contentsOf: String(i).utf8)
        case .double(let d):
            if d.isFinite {
                if d == d.rounded(), abs(d) < 1e15 { out.append(contentsOf: String(Int64(d)).utf8) } else { out.append(contentsOf: "\(d)".utf8) }
            } else {
                out.append(contentsOf: "null".utf8)
            }
        case .string(let s): JSONValue.writeString(s, into: &out)
        case .raw(let bytes):
            // Valid JSON has line breaks only as whitespace between tokens: written as
            // spaces, so the text also fits in one line of the device protocol.
            JSONValue.appendRuns(bytes, into: &out, stoppingAt: { $0 == 0x0A || $0 == 0x0D }) { _, out in out.append(0x20) }
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                if pretty { newline(&out, indent + 1) }
                item.write(into: &out, pretty: pretty, indent: indent + 1)
            }
            if pretty && !items.isEmpty { newline(&out, indent) }
            out.append(UInt8(ascii: "]"))
        case .object(let object):
            out.append(UInt8(ascii: "{"))
            for (i, member) in object.members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                if pretty { newline(&out, indent + 1) }
                JSONValue.writeString(member.key, into: &out)
                out.append(UInt8(ascii: ":"))
                if pretty { out.append(0x20) }
                member.value.write(into: &out, pretty: pretty, indent: indent + 1)
            }
            if pretty && !object.isEmpty { newline(&out, indent) }
            out.append(UInt8(ascii: "}"))
        }
    }

    private func newline(_ out: inout [UInt8], _ indent: Int) {
        out.append(0x0A)
        out.append(contentsOf: repeatElement(0x20, count: indent * 2))
    }

    static let hexDigits = Array("0123456789abcdef".utf8)

    public static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(0x22)
        var s = s
        s.withUTF8 { utf8 in
            appendRuns(utf8, into: &out, stoppingAt: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }, escape)
        }
        out.append(0x22)
    }

    /// Copies `bytes` in runs, handing each byte `special` picks to `replace`: appending a run
    /// at once instead of byte by byte saves a uniqueness and capacity check per byte.
    @inline(__always)
    static func appendRuns<C: Collection<UInt8>>(
        _ bytes: C, into out: inout [UInt8], stoppingAt special: (UInt8) -> Bool,
        _ replace: (UInt8, inout [UInt8]) -> Void
    ) where C.Index == Int {
        var runStart = bytes.startIndex
        var i = runStart
        while i < bytes.endIndex {
            let c = bytes[i]
            if special(c) {
                out.append(contentsOf: bytes[runStart..<i])
                replace(c, &out)
                runStart = i + 1
            }
            i += 1
        }
        out.append(contentsOf: bytes[runStart..<bytes.endIndex])
    }

    private static func escape(_ c: UInt8, _ out: inout [UInt8]) {
        switch c {
        case 0x22: out.append(contentsOf: [0x5C, 0x22])
        case 0x5C: out.append(contentsOf: [0x5C, 0x5C])
        case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
        case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
        case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
        case 0x00..<0x20:
            out.append(contentsOf: [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hexDigits[Int(c >> 4)], hexDigits[Int(c & 0xF)]])
        default: out.append(c)
        }
    }
}
