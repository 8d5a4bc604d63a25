/// What a hook's placeholders stand for in one call.
public struct HookValues: Sendable {
    public var token: String?
    public var deviceID: String
    public var bundleID: String
    public var environment: APNsEnvironment
    public var userID: String?
    /// The push's payload (fetch only).
    public var payload: JSONValue?
    /// What kind of token `token` is: `app` (the app's own device token), or for Live
    /// Activities `pushToStart` and `update`.
    public var tokenKind = "app"
    /// Live Activity tokens: the activity an update token belongs to, the attributes type.
    public var activityID: String?
    public var attributesType: String?
    /// `action`: the user's response to a notification (its apns-id, the action, typed text).
    public var apnsID: String?
    public var actionIdentifier: String?
    public var userText: String?

    public init(
        token: String?, deviceID: String, bundleID: String, environment: APNsEnvironment, userID: String?,
        payload: JSONValue? = nil
    ) {
        self.token = token
        self.deviceID = deviceID
        self.bundleID = bundleID
        self.environment = environment
        self.userID = userID
        self.payload = payload
    }
}

/// A hook with its placeholders filled in: what goes on the wire.
public struct RenderedHook: Sendable, Equatable {
    public var method: String
    public var url: String
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]?

    public static func == (a: Self, b: Self) -> Bool {
        a.method == b.method && a.url == b.url && a.body == b.body
            && a.headers.map(\.name) == b.headers.map(\.name) && a.headers.map(\.value) == b.headers.map(\.value)
    }
}

/// `{{token}}`, `{{deviceId}}`, `{{bundleId}}`, `{{environment}}`, `{{userId}}` and
/// `{{payload:/json/pointer}}` in a hook's URL, header values and body strings.
///
/// In the URL a value is percent-encoded (it may be a user id with a space); in a header it is
/// the text. In the body, a string that is nothing but one placeholder becomes that value
/// with its JSON type (`"{{payload:/count}}"` stays a number; a missing value is null); a
/// placeholder inside longer text is replaced by the value's text. Missing values are empty
/// text (a logged-out `{{userId}}`, a payload field that is not there).
public enum HookTemplate {
    static let names: Set<String> = [
        "token", "deviceId", "bundleId", "environment", "userId", "tokenKind", "activityId", "attributesType", "apnsId", "actionIdentifier",
        "userText",
    ]

    enum Placeholder: Equatable {
        case name(String)
        case payload(JSONPointer)
    }

    /// Refuses unknown placeholders and bad pointers, and unclosed `{{`.
    static func check(_ hook: BackendHook) throws(BackendConfigError) {
        var texts = [hook.url] + hook.headers.map(\.value)
        if let body = hook.body { collectStrings(body, into: &texts) }
        for text in texts { _ = try pieces(of: text) }
    }

    public static func render(_ hook: BackendHook, _ values: HookValues) -> RenderedHook {
        let url = fill(hook.url, values, encode: percentEncoded)
        let headers = hook.headers.map { (name: $0.name, value: fill($0.value, values, encode: { $0.filter { $0 != "\r" && $0 != "\n" } })) }
        var out = RenderedHook(method: hook.method, url: url, headers: headers, body: nil)
        if let body = hook.body {
            let contentType = headers.first { $0.name.lowercased() == "content-type" }?.value
            if case .string(let text) = body, let contentType, !isJSON(contentType) {
                // Another type than JSON: the string is the body, its placeholders filled in as text.
                out.body = Array(fill(text, values, encode: { $0 }).utf8)
            } else {
                out.body = fill(json: body, values).serializedBytes()
                if contentType == nil { out.headers.append(("Content-Type", "application/json")) }
            }
        }
        return out
    }

    /// `application/json` or a `+json` type (`application/problem+json`), parameters aside.
    public static func isJSON(_ contentType: String) -> Bool {
        let type = (contentType.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
            .drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed()
        let name = String(type).lowercased()
        return name == "application/json" || name.hasSuffix("+json")
    }

    /// `template` with every placeholder standing for "1", which fits a host, a port and a path
    /// alike: what a URL is whatever the values, for the checks made when a hook is set.
    static func sample(_ template: String) -> String {
        guard let pieces = try? pieces(of: template) else { return template }
        var out = ""
        for piece in pieces {
            switch piece {
            case .text(let text): out += text
            case .placeholder: out += "1"
            }
        }
        return out
    }

    // MARK: Pieces

    private enum Piece {
        case text(Substring)
        case placeholder(Placeholder)
    }

    private static func pieces(of text: String) throws(BackendConfigError) -> [Piece] {
        var result: [Piece] = []
        var rest = text[...]
        while let open = rest.range(of: "{{") {
            if open.lowerBound > rest.startIndex { result.append(.text(rest[..<open.lowerBound])) }
            guard let close = rest[open.upperBound...].range(of: "}}") else {
                throw BackendConfigError("\"{{\" without \"}}\" in \"\(text)\"")
            }
            let inside = rest[open.upperBound..<close.lowerBound].trimmingSpaces
            if inside.hasPrefix("payload:") {
                let pointer = String(inside.dropFirst("payload:".count))
                guard let parsed = JSONPointer(pointer) else {
                    throw BackendConfigError("{{\(inside)}}: \"\(pointer)\" is not a JSON pointer (e.g. /messageId)")
                }
                result.append(.placeholder(.payload(parsed)))
            } else {
                guard names.contains(String(inside)) else {
                    throw BackendConfigError(
                        "unknown placeholder {{\(inside)}} (known: \(names.sorted().map { "{{\($0)}}" }.joined(separator: ", ")), {{payload:/pointer}})"
                    )
                }
                result.append(.placeholder(.name(String(inside))))
            }
            rest = rest[close.upperBound...]
        }
        if !rest.isEmpty { result.append(.text(rest)) }
        return result
    }

    private static func value(_ placeholder: Placeholder, _ values: HookValues) -> JSONValue {
        switch placeholder {
        case .name("token"): return values.token.map(JSONValue.string) ?? .null
        case .name("deviceId"): return .string(values.deviceID)
        case .name("bundleId"): return .string(values.bundleID)
        case .name("environment"): return .string(values.environment.rawValue)
        case .name("userId"): return values.userID.map(JSONValue.string) ?? .null
        case .name("tokenKind"): return .string(values.tokenKind)
        case .name("activityId"): return values.activityID.map(JSONValue.string) ?? .null
        case .name("attributesType"): return values.attributesType.map(JSONValue.string) ?? .null
        case .name("apnsId"): return values.apnsID.map(JSONValue.string) ?? .null
        case .name("actionIdentifier"): return values.actionIdentifier.map(JSONValue.string) ?? .null
        case .name("userText"): return values.userText.map(JSONValue.string) ?? .null
        case .name: return .null
        case .payload(let pointer): return values.payload.flatMap { pointer.resolve(in: $0) } ?? .null
        }
    }

    /// A value as text: strings as they are, null as nothing, anything else as its JSON.
    public static func text(_ value: JSONValue) -> String {
        switch value {
        case .string(let s): return s
        case .null: return ""
        default: return String(decoding: value.serializedBytes(), as: UTF8.self)
        }
    }

    private static func fill(_ template: String, _ values: HookValues, encode: (String) -> String) -> String {
        guard let pieces = try? pieces(of: template) else { return template }  // checked when configured
        var out = ""
        for piece in pieces {
            switch piece {
            case .text(let t): out += t
            case .placeholder(let p): out += encode(text(value(p, values)))
            }
        }
        return out
    }

    private static func fill(json: JSONValue, _ values: HookValues) -> JSONValue {
        switch json {
        case .string(let s):
            guard s.contains("{{"), let pieces = try? pieces(of: s) else { return json }
            if pieces.count == 1, case .placeholder(let p) = pieces[0] { return value(p, values) }
            return .string(fill(s, values, encode: { $0 }))
        case .array(let items): return .array(items.map { fill(json: $0, values) })
        case .object(let object): return .object(JSONObject(object.members.map { ($0.key, fill(json: $0.value, values)) }))
        default: return json
        }
    }

    private static func collectStrings(_ json: JSONValue, into texts: inout [String]) {
        switch json {
        case .string(let s): texts.append(s)
        case .array(let items): items.forEach { collectStrings($0, into: &texts) }
        case .object(let object): object.members.forEach { collectStrings($0.value, into: &texts) }
        default: break
        }
    }

    private static let hexDigits = Array("0123456789ABCDEF".utf8)

    /// Unreserved characters (RFC 3986) stay; every other byte becomes `%XX`.
    static func percentEncoded(_ text: String) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(byte)
            default:
                out += [UInt8(ascii: "%"), hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 15)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// An RFC 6901 JSON pointer (`/a/0/b`, with `~1` for `/` and `~0` for `~`).
public struct JSONPointer: Sendable, Equatable {
    public let tokens: [String]

    public init?(_ text: String) {
        if text.isEmpty {
            tokens = []
            return
        }
        guard text.hasPrefix("/") else { return nil }
        var parsed: [String] = []
        for raw in text.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
            var token = ""
            var escaped = false
            for c in raw {
                if escaped {
                    guard c == "0" || c == "1" else { return nil }
                    token.append(c == "0" ? "~" : "/")
                    escaped = false
                } else if c == "~" {
                    escaped = true
                } else {
                    token.append(c)
                }
            }
            guard !escaped else { return nil }
            parsed.append(token)
        }
        tokens = parsed
    }

    public func resolve(in root: JSONValue) -> JSONValue? {
        var current = root
        for token in tokens {
            switch current {
            case .object(let object):
                guard let next = object[token] else { return nil }
                current = next
            case .array(let items):
                guard let index = Int(token), token == String(index), items.indices.contains(index) else { return nil }
                current = items[index]
            default:
                return nil
            }
        }
        return current
    }
}

extension Substring {
    var trimmingSpaces: Substring {
        var s = self
        while s.first == " " { s = s.dropFirst() }
        while s.last == " " { s = s.dropLast() }
        return s
    }
}
