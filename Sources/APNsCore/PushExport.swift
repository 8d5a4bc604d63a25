/// A recorded push written out again, as Apple's Push Notifications Console offers: a curl
/// command that sends the same request, and the `.apns` file `xcrun simctl push` and the
/// Simulator take. Pure text building; the admin API chooses the target and answers.
public enum PushExport {
    /// Why a record cannot be exported faithfully.
    public struct Refusal: Error, Sendable, Equatable {
        public enum Kind: Sendable {
            /// The journal kept only part of the request (409: what it sent is not known).
            case incomplete
            /// The request cannot be written in the asked form (422).
            case unsuitable
        }
        public var kind: Kind
        public var message: String
    }

    /// Where a curl command sends: the base URL (scheme and authority) and the options reaching it needs.
    public struct CurlTarget: Sendable, Equatable {
        public var baseURL: String
        public var options: [String]
        /// `--http2`, or `--http2-prior-knowledge` for a cleartext listener.
        public var http2Option = "--http2"

        public init(baseURL: String, options: [String] = [], http2Option: String = "--http2") {
            self.baseURL = baseURL
            self.options = options
            self.http2Option = http2Option
        }

        /// Apple's host for the environment.
        public static func apple(_ environment: APNsEnvironment) -> CurlTarget {
            CurlTarget(baseURL: "https://\(environment.appleHost)")
        }

        /// The emulator's own listener for the environment, as its banner picks one: the
        /// environment's TLS listener, else a `--listen` one reached by Apple's name
        /// (`--resolve`, so SNI and `:authority` choose the environment), else cleartext
        /// h2c. `caFile` is the CA to trust (nil: a placeholder for the one you gave it).
        /// Addresses are `HOST:PORT`; a wildcard host is reached on loopback. Nil when no
        /// listener serves the environment.
        public static func emulator(
            _ environment: APNsEnvironment, direct: String?, listen: String?, h2c: String?, caFile: String?
        ) -> CurlTarget? {
            let caOption = ["--cacert", caFile.map(PushExport.quoted) ?? "\"$APNS_EMULATOR_CA\""]
            if let direct = direct.map(reachable) {
                return CurlTarget(baseURL: "https://\(direct)", options: caOption)
            }
            if let listen = listen.map(reachable), let colon = listen.lastIndex(of: ":") {
                let host = listen[..<colon]
                let port = listen[listen.index(after: colon)...]
                let name = environment.appleHost
                return CurlTarget(baseURL: "https://\(name):\(port)", options: ["--resolve", "\(name):\(port):\(host)"] + caOption)
            }
            if let h2c = h2c.map(reachable) {
                return CurlTarget(baseURL: "http://\(h2c)", http2Option: "--http2-prior-knowledge")
            }
            return nil
        }

        static func reachable(_ address: String) -> String {
            if address.hasPrefix("0.0.0.0:") { return "127.0.0.1" + address.dropFirst(7) }
            if address.hasPrefix("[::]:") { return "[::1]" + address.dropFirst(4) }
            return address
        }
    }

    /// A POSIX shell command for curl that sends `record`'s request again: its method, path,
    /// every `apns-*` header and its payload as recorded, with `$APNS_JWT` for the provider
    /// token (records never keep its signature) or `$APNS_CERT` for a client certificate.
    public static func curlCommand(_ record: NotificationRecord, to target: CurlTarget) throws(Refusal) -> String {
        guard record.broadcast == nil else {
            throw Refusal(kind: .unsuitable, message: "a broadcast to a channel is not a push to a device token; only device pushes are exported")
        }
        guard !record.headersTruncated else {
            throw Refusal(
                kind: .incomplete, message: "the journal kept only part of this request's headers, so the command would not send the same request")
        }
        let payload = try completePayload(record)
        guard !payload.contains(0), let text = String(validating: payload, as: UTF8.self) else {
            throw Refusal(kind: .unsuitable, message: "the payload is not UTF-8 text without NUL bytes, which a shell argument cannot carry")
        }
        var lines = ["curl -v \(target.http2Option)"]
        if !target.options.isEmpty { lines.append(target.options.joined(separator: " ")) }
        if record.certificateSubject != nil {
            lines.append("--cert \"$APNS_CERT\"")
        } else if record.requestHeaders.contains(where: { $0.name.lowercased() == "authorization" }) {
            lines.append("--header \"authorization: bearer $APNS_JWT\"")
        }
        for header in record.requestHeaders where header.name.lowercased().hasPrefix("apns-") {
            lines.append("--header \(quoted("\(header.name): \(header.value)"))")
        }
        if let method = record.method, method != "POST" { lines.append("--request \(quoted(method))") }
        // `--data` would read a file for a payload starting with '@'; `--data-raw` never does.
        lines.append("\(text.hasPrefix("@") ? "--data-raw" : "--data") \(quoted(text))")
        let path = record.path ?? "/3/device/\(record.token)"
        lines.append(quoted(target.baseURL + path))
        return lines.joined(separator: " \\\n  ") + "\n"
    }

    /// The top-level key the Simulator reads the app to notify from.
    public static let simulatorBundleKey = "Simulator Target Bundle"
    /// What `simctl push` and the Simulator take (the payload limit of an alert push).
    public static let simulatorFileLimit = 4096

    /// The `.apns` file for `record`: its payload object with `Simulator Target Bundle` set to
    /// the bundle the topic addresses, the payload's own bytes otherwise kept as sent.
    public static func simulatorFile(_ record: NotificationRecord) throws(Refusal) -> [UInt8] {
        // Its bundle is known (the path names it), but the file would be taken as a push to
        // the app, not as the Live Activity update it was.
        guard record.broadcast == nil else {
            throw Refusal(kind: .unsuitable, message: "a broadcast to a channel is not a push to a device token; only device pushes are exported")
        }
        let payload = try completePayload(record)
        guard JSONValidator.check(payload) == .object, let object = (try? JSONValue.parse(payload))?.objectValue else {
            throw Refusal(kind: .unsuitable, message: "the payload is not a JSON object, which is what an .apns file holds")
        }
        guard let bundle = record.bundleID ?? record.topic.map(bundleID(ofTopic:)) else {
            throw Refusal(kind: .unsuitable, message: "the request had no apns-topic, so the app to notify is not known")
        }
        var file = payload
        if object[simulatorBundleKey] == nil { file = inserting(bundle, into: payload) }
        guard file.count <= simulatorFileLimit else {
            throw Refusal(
                kind: .unsuitable,
                message:
                    "the .apns file would be \(file.count) bytes; the Simulator takes at most \(simulatorFileLimit) (the payload is \(payload.count) bytes)"
            )
        }
        return file
    }

    /// The payload as sent, when the journal kept all of it.
    private static func completePayload(_ record: NotificationRecord) throws(Refusal) -> [UInt8] {
        guard record.payloadSize > 0 else { throw Refusal(kind: .unsuitable, message: "the request had no payload") }
        guard record.payload.count == record.payloadSize else {
            throw Refusal(
                kind: .incomplete,
                message:
                    "the journal kept the first \(record.payload.count) of the payload's \(record.payloadSize) bytes, so the rest is not known"
            )
        }
        return record.payload
    }

    private static func bundleID(ofTopic topic: String) -> String {
        TopicRules.bundleID(ofTopic: topic, pushType: PushType.implied(byTopic: Substring(topic)) ?? .alert)
    }

    /// `{"Simulator Target Bundle":"<bundle>",` spliced in after the object's opening brace.
    private static func inserting(_ bundle: String, into object: [UInt8]) -> [UInt8] {
        let isSpace: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }
        guard let brace = object.firstIndex(of: UInt8(ascii: "{")) else { return object }
        let rest = object[(brace + 1)...]
        var out = Array("{".utf8)
        JSONValue.writeString(simulatorBundleKey, into: &out)
        out.append(UInt8(ascii: ":"))
        JSONValue.writeString(bundle, into: &out)
        if rest.first(where: { !isSpace($0) }) != UInt8(ascii: "}") { out.append(UInt8(ascii: ",")) }
        out += rest
        return out
    }

    /// Single-quoted for a POSIX shell: nothing inside is expanded; a quote is written `'\''`.
    public static func quoted(_ text: String) -> String {
        "'" + text.replacingAll("'", with: "'\\''") + "'"
    }
}

extension String {
    fileprivate func replacingAll(_ target: Character, with replacement: String) -> String {
        var out = ""
        for character in self {
            if character == target { out += replacement } else { out.append(character) }
        }
        return out
    }
}
