import HTTP1Server
import APNsCore

/// An admin API failure with the status and message to send.
public struct AdminError: Error {
    public var status: Int
    public var message: String
    public init(_ status: Int, _ message: String) {
        self.status = status
        self.message = message
    }
}

extension HTTP1Request {
    /// The body as a JSON object; an empty body counts as `{}`.
    /// For an endpoint that takes no body: none, or an empty JSON object; anything else is 400
    /// (a field sent to it would otherwise be ignored without a word).
    func refuseBody() throws(AdminError) {
        guard let field = try jsonObject().keys.first else { return }
        throw AdminError(400, "this endpoint takes no body fields; got \"\(field)\"")
    }

    func jsonObject() throws(AdminError) -> JSONObject {
        if body.isEmpty || body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) { return JSONObject() }
        do {
            guard let object = try JSONValue.parse(body).objectValue else {
                throw AdminError(400, "the request body must be a JSON object")
            }
            return Self.leavingOutNulls(object)
        } catch let error as JSONParseError {
            throw AdminError(400, "the request body is not valid JSON: \(error)")
        } catch let error as AdminError {
            throw error
        } catch {
            throw AdminError(400, "\(error)")
        }
    }
}

extension HTTP1Request {
    /// Fields whose `null` says something (docs/admin-api.md): a device's `focus` and
    /// `scheduledSummary` off, an app's `senderKey` cleared.
    static let nullMeansSomething: Set<String> = ["focus", "scheduledSummary", "senderKey"]

    /// Fields whose value is the app's own data, kept exactly as given (a Live Activity's
    /// `attributes` and `contentState`, a backend hook's `body` template, a `payload`): a
    /// `null` there is a value, which the device's decoding judges.
    static let appData: Set<String> = ["attributes", "contentState", "body", "payload"]

    /// A field given as `null` is the same as leaving it out (clients that build bodies from
    /// optional values send such fields), in nested objects too; arrays keep their elements.
    static func leavingOutNulls(_ object: JSONObject) -> JSONObject {
        guard object.members.contains(where: { $0.value.objectValue != nil || $0.value.arrayValue != nil || $0.value == .null }) else {
            return object
        }
        var kept = JSONObject()
        for (key, value) in object.members {
            if value == .null, !nullMeansSomething.contains(key) { continue }
            kept.members.append((key, appData.contains(key) ? value : leavingOutNulls(value)))
        }
        return kept
    }

    private static func leavingOutNulls(_ value: JSONValue) -> JSONValue {
        if let object = value.objectValue { return .object(leavingOutNulls(object)) }
        if let array = value.arrayValue, array.contains(where: { $0.objectValue != nil || $0.arrayValue != nil }) {
            return .array(array.map(leavingOutNulls))
        }
        return value
    }
}

/// " (did you mean "x"?)" when `name` is one of `allowed` in another case, else "".
private func nearSpelling(of name: String, among allowed: [String]) -> String {
    allowed.first { $0.lowercased() == name.lowercased() }.map { " (did you mean \"\($0)\"?)" } ?? ""
}

extension JSONObject {
    /// 400 for a key not in `allowed`: a misspelt field would be ignored, and the request would
    /// quietly do less than asked.
    func refuseUnknownFields(_ allowed: [String], in place: String? = nil) throws(AdminError) {
        guard let unknown = keys.first(where: { !allowed.contains($0) }) else { return }
        let near = nearSpelling(of: unknown, among: allowed)
        throw AdminError(
            400, "unknown field \"\(unknown)\"\(place.map { " in \($0)" } ?? "")\(near); allowed: \(allowed.joined(separator: ", "))")
    }
}

extension HTTP1Request {
    /// 400 for a query parameter not in `allowed`: a misspelt filter would be ignored, and the
    /// list would quietly hold more than asked. `hint` follows the list of allowed ones.
    func refuseUnknownQueryParameters(_ allowed: [String], hint: String = "") throws(AdminError) {
        guard let unknown = query.keys.sorted().first(where: { !allowed.contains($0) }) else { return }
        let near = nearSpelling(of: unknown, among: allowed)
        throw AdminError(400, "unknown query parameter \"\(unknown)\"\(near); allowed: \(allowed.joined(separator: ", "))\(hint)")
    }

    /// The query parameter `name` as a whole number in `range`, nil when absent; anything else
    /// is 400 saying the range, not a silent default.
    func wholeNumber(_ name: String, in range: ClosedRange<Int>, note: String = "") throws(AdminError) -> Int? {
        guard let text = query[name] else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw AdminError(400, "\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound), not '\(text)'\(note)")
        }
        return value
    }
}

extension HTTP1ServerResponse {
    static func json(_ status: Int, _ value: JSONValue) -> HTTP1ServerResponse {
        var body = value.serializedBytes()
        body.append(0x0A)
        return HTTP1ServerResponse(status: status, headers: [("Content-Type", "application/json")], body: body)
    }

    static func error(_ status: Int, _ message: String) -> HTTP1ServerResponse {
        json(status, ["error": .string(shortened(message)), "status": .int(Int64(status))])
    }

    /// Messages quote the value they refuse; a value of megabytes (a 7 MiB bundle id) would
    /// come back whole. The start names the field, the end what is allowed: both are kept.
    static func shortened(_ message: String, keeping ends: Int = 1024) -> String {
        let utf8 = message.utf8
        guard utf8.count > 2 * ends + 64 else { return message }
        let head = String(decoding: utf8.prefix(ends), as: UTF8.self)
        let tail = String(decoding: utf8.suffix(ends), as: UTF8.self)
        return head + "…(\(utf8.count - 2 * ends) bytes left out)…" + tail
    }
}
