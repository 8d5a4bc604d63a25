import APNsCore
import HTTP1Client

/// `http`: a plain request to any URL (the example backend's `/state`, `/fail`, `/reset`),
/// with the status and JSON values it should answer.
extension StepRunner {
    func httpRequest() throws(StepFailure) -> String? {
        let url = try fields.requiredString("url")
        let method = (fields.string("method") ?? "GET").uppercased()
        var headers: [HTTP1Header] = []
        for (name, value) in fields["headers"]?.objectValue ?? JSONObject() {
            headers.append(HTTP1Header(name, ScenarioParser.scalarText(value) ?? value.serialized()))
        }
        var body: [UInt8]?
        if let value = fields["body"] {
            if case .string(let text) = value {
                body = Array(text.utf8)
            } else {
                body = value.serializedBytes()
                if !headers.contains(where: { $0.name.lowercased() == "content-type" }) {
                    headers.append(HTTP1Header("Content-Type", "application/json"))
                }
            }
        } else if ["POST", "PUT", "PATCH"].contains(method) {
            body = []
        }
        let timeoutMs = try fields.int("timeoutMs") ?? 10_000
        let response: HTTP1Response
        do {
            response = try HTTP1Client.exchange(
                url: url, method: method, headers: headers, body: body, timeoutMs: timeoutMs,
                maxResponseBytes: 16 << 20)
        } catch {
            throw StepFailure("\(method) \(url): \(error.message)")
        }
        context.lastHTTP = (response.status, response.body)
        let text = String(decoding: response.body.prefix(300), as: UTF8.self)

        let expect = fields.nested("expect")
        let status = try StatusPattern(expect?["status"] ?? .string("2xx"))
        guard status.matches(response.status) else {
            throw StepFailure(
                "\(method) \(url) answered \(response.status)", expected: "status \(status)",
                seen: "status \(response.status): \(text)")
        }
        if let pointers = expect?["json"]?.objectValue {
            guard let json = try? JSONValue.parse(response.body) else {
                throw StepFailure("the answer is not JSON", expected: "a JSON body", seen: text)
            }
            var wrong: [(String, String)] = []
            for (pointerText, wanted) in pointers {
                guard let pointer = JSONPointer(pointerText) else { throw StepFailure("\"\(pointerText)\" is not a JSON pointer such as /tokens/0") }
                let found = pointer.resolve(in: json)
                if !Self.sameJSON(found, wanted) {
                    wrong.append(("\(pointerText) = \(wanted.serialized())", "\(pointerText) = \(found?.serialized() ?? "nothing")"))
                }
            }
            guard wrong.isEmpty else {
                throw StepFailure(
                    "the answer's JSON differs", expected: wrong.map(\.0).joined(separator: "; "),
                    seen: wrong.map(\.1).joined(separator: "; "))
            }
        }
        return "→ \(response.status)"
    }

    /// Equal JSON, with 1 and 1.0 the same number; an expected null also matches nothing
    /// there at all (`"/tokens/1": null`: no second token).
    static func sameJSON(_ a: JSONValue?, _ b: JSONValue) -> Bool {
        guard let a else { return b == .null }
        if let x = a.numberValue, let y = b.numberValue { return x == y }
        return a == b
    }
}
