// Fuzz target: the payload validator and the JSON reader must agree, a value written out
// must read back as itself, and the file reading must read what it takes as the payload one.

@testable import APNsCore

public func fuzzJSON(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let verdict = JSONValidator.check(bytes)
    let parsed = try? JSONValue.parse(bytes)
    if parsed != nil && !verdict.isValid { fatalError("parse accepted what the validator refused") }
    if let parsed {
        let written = parsed.serializedBytes()
        guard let again = try? JSONValue.parse(written) else { fatalError("written JSON does not parse back") }
        // Non-finite doubles are written as null; everything else must survive the round trip
        // (a whole double may come back as an integer: the same number).
        if !containsNonFinite(parsed), !sameJSON(again, parsed) { fatalError("round trip changed the value") }
    }
    if verdict.isValid { _ = JSONValue.raw(bytes).serializedBytes() }
    // The file reading is the same reading with refusals: what it takes (after a byte order
    // mark) reads as `parse` reads it.
    let body = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? Array(bytes.dropFirst(3)) : bytes
    if let file = try? JSONValue.parseFile(bytes), (try? JSONValue.parse(body)) != file { fatalError("parseFile and parse disagree") }
    return 0
}

func containsNonFinite(_ value: JSONValue) -> Bool {
    switch value {
    case .double(let d): return !d.isFinite
    case .array(let items): return items.contains(where: containsNonFinite)
    case .object(let object): return object.members.contains { containsNonFinite($0.value) }
    default: return false
    }
}

/// Equal as JSON: numbers compare by value, whatever case holds them.
func sameJSON(_ a: JSONValue, _ b: JSONValue) -> Bool {
    switch (a, b) {
    case (.array(let x), .array(let y)): return x.count == y.count && zip(x, y).allSatisfy(sameJSON)
    case (.object(let x), .object(let y)):
        return x.members.count == y.members.count
            && zip(x.members, y.members).allSatisfy { $0.key == $1.key && sameJSON($0.value, $1.value) }
    default:
        if let x = a.numberValue, let y = b.numberValue { return x == y }
        return a == b
    }
}
