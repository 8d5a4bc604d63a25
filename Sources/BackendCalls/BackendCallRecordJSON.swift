public import APNsCore

public extension BackendCallRecord {
    /// The record as the inspection API (`GET /api/v1/devices/{deviceId}/backend-calls`) and
    /// the event stream show it. The field names are part of the API.
    var json: JSONValue {
        let headers = JSONObject(request.headers.map { (key: $0.name, value: JSONValue.string($0.value)) })
        return .object(
            JSONObject([
                ("id", .int(Int64(id))),
                ("deviceId", .string(request.deviceID)),
                ("bundleId", .string(request.bundleID)),
                ("hook", .string(request.hook)),
                ("state", .string(state.rawValue)),
                ("method", .string(request.method)),
                ("url", .string(request.url)),
                ("headers", .object(headers)),
                ("body", Self.bodyJSON(request.body, contentType: request.headers.first { $0.name.lowercased() == "content-type" }?.value)),
                ("status", status.map { .int(Int64($0)) } ?? .null),
                ("response", responseBody.map(JSONValue.string) ?? .null),
                ("error", error.map(JSONValue.string) ?? .null),
                ("attempts", .int(Int64(attempts))),
                ("at", .string(RFC3339.format(milliseconds: atMs))),
                ("atMs", .int(atMs)),
                ("finishedAt", finishedAtMs.map { .string(RFC3339.format(milliseconds: $0)) } ?? .null),
                ("finishedAtMs", finishedAtMs.map(JSONValue.int) ?? .null),
                ("durationMs", finishedAtMs.map { .int($0 - atMs) } ?? .null),
                ("userId", request.userID.map(JSONValue.string) ?? .null),
                ("token", request.token.map(JSONValue.string) ?? .null),
            ]))
    }

    /// Exactly what was sent: a JSON body (no Content-Type, or a JSON one) as JSON, anything
    /// else as its text (`"hello zed"` sent as text/plain is that text, not a JSON string).
    private static func bodyJSON(_ body: [UInt8]?, contentType: String?) -> JSONValue {
        guard let body else { return .null }
        let text = JSONValue.string(String(decoding: body, as: UTF8.self))
        if let contentType, !HookTemplate.isJSON(contentType) { return text }
        return (try? JSONValue.parse(body)) ?? text
    }
}
