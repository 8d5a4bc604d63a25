import HTTPGrammar

/// An app's own backend, as the simulated app calls it (issue: "the app's half of the chain"):
/// upload the token (`register`), tie it to the account (`bind`/`unbind`), fetch what a push
/// points to (`fetch`). Each hook is an HTTP template; `addresseePointer` names the payload
/// field that says whom a push is for (the cross-account check).
public struct AppBackend: Sendable, Equatable {
    public var hooks: [BackendHookKind: BackendHook]
    /// A JSON pointer into the payload (e.g. `/uid`); nil: no cross-account check.
    public var addresseePointer: String?
    /// Per attempt (connect, send, answer).
    public var timeoutMs: Int
    /// Attempts per call while the backend is down or answers 5xx/429 (1: no retry).
    public var maxAttempts: Int

    public static let defaultTimeoutMs = 5_000
    public static let defaultMaxAttempts = 5

    public init(
        hooks: [BackendHookKind: BackendHook] = [:], addresseePointer: String? = nil,
        timeoutMs: Int = AppBackend.defaultTimeoutMs, maxAttempts: Int = AppBackend.defaultMaxAttempts
    ) {
        self.hooks = hooks
        self.addresseePointer = addresseePointer
        self.timeoutMs = timeoutMs
        self.maxAttempts = maxAttempts
    }
}

public enum BackendHookKind: String, Sendable, CaseIterable, Comparable {
    case register, bind, unbind, fetch
    /// The user acted on a notification (a custom action, typed text, a heard dismiss).
    case action
    public static func < (a: Self, b: Self) -> Bool { allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)! }
}

/// One hook: where and how the app calls its backend. `url`, header values and string values
/// in `body` may hold placeholders (`HookTemplate`).
public struct BackendHook: Sendable, Equatable {
    public var url: String
    public var method: String
    public var headers: [(name: String, value: String)]
    public var body: JSONValue?

    public init(url: String, method: String = "POST", headers: [(name: String, value: String)] = [], body: JSONValue? = nil) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
    }

    public static func == (a: Self, b: Self) -> Bool {
        a.url == b.url && a.method == b.method && a.body == b.body
            && a.headers.map(\.name) == b.headers.map(\.name) && a.headers.map(\.value) == b.headers.map(\.value)
    }
}

public struct BackendConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

// MARK: - JSON form (the admin API's and the --config file's)

extension AppBackend {
    /// The fields of the JSON form, in order.
    public static let fields = BackendHookKind.allCases.map(\.rawValue) + ["addresseePointer", "timeoutMs", "maxAttempts"]

    /// Parses `{"register": HOOK, "bind": HOOK, "unbind": HOOK, "fetch": HOOK, "action": HOOK,
    /// "addresseePointer": "/uid", "timeoutMs": 5000, "maxAttempts": 5}`; every template is
    /// checked here, so a bad placeholder is a 400 rather than a failed call later.
    public static func parse(_ json: JSONValue) throws(BackendConfigError) -> AppBackend {
        guard let object = json.objectValue else { throw BackendConfigError("the backend must be a JSON object") }
        let known = Set(fields)
        if let unknown = object.keys.first(where: { !known.contains($0) }) {
            throw BackendConfigError("unknown field \"\(unknown)\" (expected \(known.sorted().joined(separator: ", ")))")
        }
        var backend = AppBackend()
        for kind in BackendHookKind.allCases {
            guard let value = object[kind.rawValue], value != .null else { continue }
            do throws(BackendConfigError) { backend.hooks[kind] = try BackendHook.parse(value) } catch {
                throw BackendConfigError("\"\(kind.rawValue)\": \(error.description)")
            }
        }
        if let pointer = object["addresseePointer"], pointer != .null {
            guard let text = pointer.stringValue, JSONPointer(text) != nil else {
                throw BackendConfigError("\"addresseePointer\" must be a JSON pointer such as \"/uid\"")
            }
            backend.addresseePointer = text
        }
        if let value = object["timeoutMs"], value != .null {
            guard let ms = value.intValue, (1...120_000).contains(ms) else {
                throw BackendConfigError("\"timeoutMs\" must be a whole number of milliseconds from 1 to 120000")
            }
            backend.timeoutMs = Int(ms)
        }
        if let value = object["maxAttempts"], value != .null {
            guard let n = value.intValue, (1...20).contains(n) else {
                throw BackendConfigError("\"maxAttempts\" must be from 1 to 20")
            }
            backend.maxAttempts = Int(n)
        }
        return backend
    }

    public var json: JSONValue {
        var members: [(key: String, value: JSONValue)] = BackendHookKind.allCases.map { kind in
            (kind.rawValue, hooks[kind]?.json ?? .null)
        }
        members.append(("addresseePointer", addresseePointer.map(JSONValue.string) ?? .null))
        members.append(("timeoutMs", .int(Int64(timeoutMs))))
        members.append(("maxAttempts", .int(Int64(maxAttempts))))
        return .object(JSONObject(members))
    }
}

extension BackendHook {
    static let methods: Set<String> = ["GET", "POST", "PUT", "PATCH", "DELETE"]

    static func parse(_ json: JSONValue) throws(BackendConfigError) -> BackendHook {
        guard let object = json.objectValue else { throw BackendConfigError("a hook must be an object with \"url\"") }
        if let unknown = object.keys.first(where: { !["url", "method", "headers", "body"].contains($0) }) {
            throw BackendConfigError("unknown field \"\(unknown)\" (expected url, method, headers, body)")
        }
        guard let url = object["url"]?.stringValue else { throw BackendConfigError("\"url\" (a string) is required") }
        let lowered = url.lowercased()
        if lowered.hasPrefix("https://") {
            throw BackendConfigError("https backends are not supported; use http:// (the emulator calls backends on a local network)")
        }
        guard lowered.hasPrefix("http://"), url.count > 7 else { throw BackendConfigError("\"url\" must start with http://") }
        var hook = BackendHook(url: url)
        if let method = object["method"], method != .null {
            guard let text = method.stringValue?.uppercased(), methods.contains(text) else {
                throw BackendConfigError("\"method\" must be one of \(methods.sorted().joined(separator: ", "))")
            }
            hook.method = text
        }
        if let headers = object["headers"], headers != .null {
            guard let fields = headers.objectValue else { throw BackendConfigError("\"headers\" must be an object of strings") }
            for (name, value) in fields {
                // Scalars, not Characters: "\r\n" is one Character, equal to neither "\r" nor "\n".
                guard let text = value.stringValue, HTTPSyntax.isToken(name),
                    !text.unicodeScalars.contains(where: { ($0.value < 0x20 && $0 != "\t") || $0.value == 0x7F })
                else {
                    throw BackendConfigError("header \"\(name)\" must have a valid name and a single-line string value (no control characters)")
                }
                hook.headers.append((name, text))
            }
        }
        if let body = object["body"], body != .null { hook.body = body }
        try HookTemplate.check(hook)
        // What every call would fail on (no host, a port over 65535, an unclosed IPv6 address…),
        // with each placeholder standing for a value that fits anywhere in a URL.
        do throws(PlainHTTPURL.Problem) { _ = try PlainHTTPURL.parse(HookTemplate.sample(url)) } catch {
            throw BackendConfigError("\"url\" \(error.message(url))")
        }
        return hook
    }

    var json: JSONValue {
        .object(
            JSONObject([
                ("url", .string(url)), ("method", .string(method)),
                ("headers", .object(JSONObject(headers.map { ($0.name, JSONValue.string($0.value)) }))),
                ("body", body ?? .null),
            ]))
    }
}
