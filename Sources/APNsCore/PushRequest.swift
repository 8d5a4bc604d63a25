public import HTTPGrammar

/// One request as the HTTP/2 layer hands it over.
public struct PushRequest: Sendable {
    public var streamID: Int32
    /// All header fields in arrival order, pseudo-headers included; duplicates kept.
    public var headers: [HeaderField]
    /// The body, possibly cut at the transport's buffering cap.
    public var body: [UInt8]
    /// The body's true length (so far, when the request is not complete).
    public var bodyLength: Int
    /// False when the request is judged before its body has all arrived (the body already
    /// outgrew every payload limit; the rest is not read).
    public var isComplete: Bool
    /// The header list's size as the HTTP/2 layer counted it (RFC 9113: name + value + 32 per
    /// field), when it did; the journal's byte budget uses it instead of counting again.
    public var headerListSize: Int?

    public init(
        streamID: Int32, headers: [HeaderField], body: [UInt8], bodyLength: Int? = nil,
        isComplete: Bool = true, headerListSize: Int? = nil
    ) {
        self.streamID = streamID
        self.headers = headers
        self.body = body
        self.bodyLength = bodyLength ?? body.count
        self.isComplete = isComplete
        self.headerListSize = headerListSize
    }
}

/// The header names of the last request on a connection, with what `APNsHeaderFields` made
/// of them (see `APNsHeaderFields.init(_:names:)`).
public struct HeaderNames: Sendable {
    struct Entry: Sendable {
        var name: String
        var bit: UInt32
    }
    var entries: [Entry] = []
    var duplicate: String?

    public init() {}
}

/// The header fields APNs looks at, picked out in one pass, plus the first duplicated name.
///
/// Values are read leniently (docs/apns-behaviour.md, "Leniencies"): spaces and tabs around a
/// value are not part of it, and an optional `apns-*` header sent empty counts as absent.
struct APNsHeaderFields {
    var method: String?
    var path: String?
    /// `:authority`, or the `host` header some clients send instead (aioapns does).
    var authority: String?
    var authorization: String?
    /// `apns-id`, `apns-expiration`, `apns-priority`, `apns-topic`, `apns-push-type`, `apns-collapse-id`.
    var apnsID, expiration, priority, topic, pushType, collapseID: String?
    /// The first header name that appears more than once.
    var duplicate: String?
    /// Where `authorization` is in the list (its signature is not kept in records).
    var authorizationIndex: Int?

    init(_ headers: [HeaderField]) {
        var names = HeaderNames()
        Self.read(headers, names: &names, into: &self)
    }

    /// `names`: the last request's names on this connection. A client sends the same names
    /// in the same order on every request, and the HTTP/2 layer hands them over as the same
    /// Strings (`RecentHeaderFields`), so a name equal to the one remembered at its position
    /// is one machine-word compare: its class and the list's first duplicate are reused.
    /// Fills `fields` (all nil) in place: returned from an init or a function, the value was
    /// copied whole and the original destroyed (about 550 instructions).
    static func read(_ headers: [HeaderField], names: inout HeaderNames, into fields: inout APNsHeaderFields) {
        let count = headers.count
        var same = count == names.entries.count
        var host: String?
        for position in 0..<count {
            let name = headers[position].name
            let bit: UInt32
            if position < names.entries.count, names.entries[position].name == name {
                bit = names.entries[position].bit
            } else {
                same = false
                bit = Self.classify(name)
                if position < names.entries.count {
                    names.entries[position] = HeaderNames.Entry(name: name, bit: bit)
                } else {
                    names.entries.append(HeaderNames.Entry(name: name, bit: bit))
                }
            }
            if bit == 0 { continue }
            let value = headers[position].value
            switch bit {
            case 1 << 0: fields.method = value
            case 1 << 1: fields.path = value
            case 1 << 2: fields.authority = value
            case 1 << 4:
                fields.authorization = Self.trimmed(value)
                fields.authorizationIndex = position
            case 1 << 5: fields.apnsID = Self.optional(value)
            case 1 << 6: fields.expiration = Self.optional(value)
            case 1 << 7: fields.priority = Self.optional(value)
            case 1 << 8: fields.topic = Self.trimmed(value)
            case 1 << 9: fields.pushType = Self.optional(value)
            case 1 << 10: fields.collapseID = Self.optional(value)
            case Self.hostBit: if host == nil { host = value }
            default: break  // :scheme
            }
        }
        if !same {
            if names.entries.count > count { names.entries.removeLast(names.entries.count - count) }
            names.duplicate = Self.firstDuplicate(headers, names.entries)
        }
        if fields.authority == nil, let host { fields.authority = host }
        if let duplicate = names.duplicate { fields.duplicate = duplicate }
    }

    init() {}

    /// The first name that appears more than once, in the order of its second appearance.
    /// Another name (user-agent, content-length…) is compared with the names before it: few
    /// are, so a scan is cheaper than hashing. Byte equality, as nghttp2 compares names.
    /// `cookie` may come in several fields, one per pair (RFC 9113 §8.2.3): not a repeat.
    private static func firstDuplicate(_ headers: [HeaderField], _ entries: [HeaderNames.Entry]) -> String? {
        var seen: UInt32 = 0
        for position in headers.indices {
            let name = headers[position].name
            let bit = entries[position].bit
            if bit == 0 || bit == hostBit {
                if !(name.utf8.count == 6 && name == "cookie"),
                    headers[..<position].contains(where: { $0.name.utf8.count == name.utf8.count && $0.name.utf8.elementsEqual(name.utf8) })
                {
                    return name
                }
                continue
            }
            if seen & bit != 0 { return name }
            seen |= bit
        }
        return nil
    }

    /// `host`: not an APNs header, but read in place of a missing `:authority`.
    static let hostBit: UInt32 = 1 << 11

    /// The value without surrounding spaces and tabs; the same string when there are none
    /// (the usual case, checked with two byte reads).
    @inline(__always)
    static func trimmed(_ value: String) -> String {
        let utf8 = value.utf8
        // Native strings are contiguous UTF-8: two byte reads, no index walking.
        let padded =
            utf8.withContiguousStorageIfAvailable { bytes in
                guard let first = bytes.first, let last = bytes.last else { return false }
                return first == 0x20 || first == 0x09 || last == 0x20 || last == 0x09
            } ?? (utf8.first.map { $0 == 0x20 || $0 == 0x09 } ?? false || utf8.last.map { $0 == 0x20 || $0 == 0x09 } ?? false)
        guard padded else { return value }
        let inner = utf8.drop { $0 == 0x20 || $0 == 0x09 }.reversed().drop { $0 == 0x20 || $0 == 0x09 }
        return String(decoding: inner.reversed(), as: UTF8.self)
    }

    /// `apns-priority` as APNs takes it, on the device API and for broadcasts: exactly 10, 5 or 1.
    @inline(__always)
    static func priority(_ text: String) -> Int? {
        switch text {
        case "10": return 10
        case "5": return 5
        case "1": return 1
        default: return nil
        }
    }

    /// `apns-expiration`: whole seconds since 1970 in ASCII digits (no sign, no spaces); 0 means
    /// never stored. A past time is taken (it is simply already expired).
    static func expirationSeconds(_ text: String) -> Int64? {
        guard text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int64(text)
    }

    /// An optional header: trimmed, and nil when nothing is left.
    @inline(__always)
    static func optional(_ value: String) -> String? {
        let value = trimmed(value)
        return value.isEmpty ? nil : value
    }

    /// A bit per header APNs reads, 0 for any other. Dispatches on the length first so each
    /// name costs one or two comparisons (these names are small strings: comparing them is
    /// comparing two machine words).
    @inline(__always)
    static func classify(_ name: String) -> UInt32 {
        switch name.utf8.count {
        case 5: return name == ":path" ? 1 << 1 : 0
        case 7: return name == ":method" ? 1 << 0 : name == "apns-id" ? 1 << 5 : name == ":scheme" ? 1 << 3 : 0
        case 10: return name == "apns-topic" ? 1 << 8 : name == ":authority" ? 1 << 2 : 0
        case 13: return name == "authorization" ? 1 << 4 : name == "apns-priority" ? 1 << 7 : 0
        case 14: return name == "apns-push-type" ? 1 << 9 : 0
        case 15: return name == "apns-expiration" ? 1 << 6 : 0
        case 16: return name == "apns-collapse-id" ? 1 << 10 : 0
        case 4: return name == "host" ? hostBit : 0
        default: return 0
        }
    }
}
