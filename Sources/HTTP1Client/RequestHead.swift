/// The bytes of a request: request line, header fields, body. The client owns the framing
/// (`Content-Length`, `Connection: close`), so callers' fields of those names are left out;
/// a caller's `Host` replaces the one made from the URL.
enum RequestHead {
    static func bytes(method: String, url: HTTPURL, headers: [HTTP1Header], body: [UInt8]?) throws(HTTP1ClientError) -> [UInt8] {
        func invalid(_ why: String) -> HTTP1ClientError { HTTP1ClientError(.invalidRequest, phase: .preparing, why) }
        guard isToken(method) else { throw invalid("'\(method)' is not an HTTP method") }
        guard !url.target.isEmpty, url.target.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw invalid("the request target '\(url.target)' has spaces, control or non-ASCII characters")
        }
        let framing: Set<String> = ["content-length", "transfer-encoding", "connection"]
        var fields = headers.filter { !framing.contains($0.name.lowercased()) }
        for field in fields {
            guard isToken(field.name) else { throw invalid("'\(field.name)' is not a header field name") }
            // A line break in a value would start a field (or a request) of its own.
            guard !field.value.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) else {
                throw invalid("the value of header field '\(field.name)' has a line break")
            }
        }
        if !fields.contains(where: { $0.name.lowercased() == "host" }) {
            fields.insert(HTTP1Header("Host", url.hostHeader), at: 0)
        }
        fields.append(HTTP1Header("Connection", "close"))
        // Methods that carry a body say how long it is even when it is empty (some servers
        // answer 411 otherwise).
        if body != nil || ["POST", "PUT", "PATCH"].contains(method) {
            fields.append(HTTP1Header("Content-Length", String(body?.count ?? 0)))
        }
        var head = "\(method) \(url.target) HTTP/1.1\r\n"
        for field in fields { head += "\(field.name): \(field.value)\r\n" }
        head += "\r\n"
        return Array(head.utf8) + (body ?? [])
    }

    /// RFC 9110 token: what methods and field names are made of.
    private static func isToken(_ text: String) -> Bool {
        !text.isEmpty
            && text.unicodeScalars.allSatisfy { scalar in
                scalar.isASCII
                    && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "!#$%&'*+-.^_`|~".unicodeScalars.contains(scalar))
            }
    }
}
