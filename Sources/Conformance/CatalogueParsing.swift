import JSON

/// Reading conformance/catalogue.json. Strict: an unknown field, a missing one or a case whose
/// `needs` does not say what its request uses is an error naming the case, so the data cannot
/// quietly say something the tool does not do.
extension ConformanceCatalogue {
    public static func parse(_ bytes: [UInt8]) throws(CatalogueError) -> ConformanceCatalogue {
        let root = try CatalogueError.object(bytes, "the catalogue")
        try allowOnly(["about", "version", "defaults", "endpoints", "notCovered", "cases", "connectionCases"], in: root, "the catalogue")
        guard root["version"]?.intValue == 1 else { throw CatalogueError("the catalogue's version is not 1") }
        let defaults = try parseDefaults(root["defaults"], "defaults")
        var endpoints: [String: RequestDefaults] = [:]
        for (name, value) in root["endpoints"]?.objectValue ?? JSONObject() {
            endpoints[name] = try parseDefaults(value, "endpoints.\(name)")
        }
        var notCovered: [(String, String)] = []
        for (reason, why) in root["notCovered"]?.objectValue ?? JSONObject() {
            guard let text = why.stringValue else { throw CatalogueError("notCovered.\(reason) is not a string") }
            notCovered.append((reason, text))
        }
        guard let caseValues = root["cases"]?.arrayValue else { throw CatalogueError("the catalogue has no cases array") }
        var cases: [ConformanceCase] = []
        var ids = Set<String>()
        for (index, value) in caseValues.enumerated() {
            let item = try parseCase(value, index: index, defaults: defaults, endpoints: endpoints)
            guard ids.insert(item.id).inserted else { throw CatalogueError("case \(item.id) appears twice") }
            cases.append(item)
        }
        for (index, value) in (root["connectionCases"]?.arrayValue ?? []).enumerated() {
            let item = try parseConnectionCase(value, index: index, defaults: defaults)
            guard ids.insert(item.id).inserted else { throw CatalogueError("case \(item.id) appears twice") }
            cases.append(item)
        }
        return ConformanceCatalogue(defaults: defaults, endpoints: endpoints, notCovered: notCovered, cases: cases)
    }

    /// A connection case: `{"id", "title", "evidence", "unconfirmed", "request"?, "expect":
    /// {"firstSettings"?: {NAME: value}, "settingsAfterFirstRequest"?: {NAME: value}}}`, sent
    /// on a connection of its own with the run's token.
    private static func parseConnectionCase(_ value: JSONValue, index: Int, defaults: RequestDefaults) throws(CatalogueError) -> ConformanceCase {
        guard let object = value.objectValue, let id = object["id"]?.stringValue, !id.isEmpty else {
            throw CatalogueError("connection case \(index + 1) has no id")
        }
        let name = "case \(id)"
        try allowOnly(["id", "title", "evidence", "unconfirmed", "needs", "request", "expect"], in: object, name)
        guard let title = object["title"]?.stringValue, let evidence = object["evidence"]?.stringValue,
            let unconfirmed = object["unconfirmed"]?.boolValue, let expect = object["expect"]?.objectValue
        else { throw CatalogueError("\(name) needs title, evidence, unconfirmed and expect") }
        try allowOnly(["firstSettings", "settingsAfterFirstRequest"], in: expect, "\(name).expect")
        func values(_ field: String) throws(CatalogueError) -> [HTTP2SettingName: UInt32] {
            var out: [HTTP2SettingName: UInt32] = [:]
            for (key, number) in expect[field]?.objectValue ?? JSONObject() {
                guard let setting = HTTP2SettingName(rawValue: key) else {
                    throw CatalogueError(
                        "\(name).expect.\(field): \(key) is not one of \(HTTP2SettingName.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                guard let value = number.intValue, let exact = UInt32(exactly: value) else {
                    throw CatalogueError("\(name).expect.\(field).\(key) is not a whole number from 0 to 2^32-1")
                }
                out[setting] = exact
            }
            return out
        }
        let settings = SettingsExpectation(first: try values("firstSettings"), afterFirstRequest: try values("settingsAfterFirstRequest"))
        guard !settings.first.isEmpty || !settings.afterFirstRequest.isEmpty else { throw CatalogueError("\(name) expects no SETTINGS") }
        let request = try parseRequest(object["request"], name)
        guard request.auth == .valid, request.before == nil, request.endpoint == nil else {
            throw CatalogueError("\(name): a connection case sends one request with the run's token")
        }
        var item = ConformanceCase(
            id: id, title: title, stage: 0, evidence: evidence, unconfirmed: unconfirmed, needs: [], request: request,
            expect: Expectation(status: 0, reason: nil, checks: []), settings: settings)
        item.needs = item.neededByRequest(defaults: defaults)
        let declared = try parseNeeds(object["needs"] ?? .array([]), name)
        guard declared == item.needs else {
            throw CatalogueError(
                "\(name): needs says [\(declared.sorted().map { $0.rawValue }.joined(separator: ", "))] but its request uses [\(item.needs.sorted().map { $0.rawValue }.joined(separator: ", "))]"
            )
        }
        return item
    }

    /// The device defaults, or an endpoint's (which may name its `host` and have a null body).
    private static func parseDefaults(_ value: JSONValue?, _ name: String) throws(CatalogueError) -> RequestDefaults {
        guard let object = value?.objectValue else { throw CatalogueError("the catalogue has no \(name) object") }
        try allowOnly(["host", "method", "path", "headers", "body"], in: object, name)
        guard let method = object["method"]?.stringValue, let path = object["path"]?.stringValue,
            let body = object["body"], body.stringValue != nil || body == .null
        else { throw CatalogueError("\(name) needs method and path strings, and a body string (or null)") }
        var defaults = RequestDefaults(
            method: method, path: path, headers: try headerPairs(object["headers"], "\(name).headers"), body: body.stringValue)
        if let host = try optionalString(object["host"], "\(name).host") {
            guard let parsed = TargetHost(rawValue: host) else { throw CatalogueError("\(name).host is \"push\" or \"channel-management\"") }
            defaults.host = parsed
        }
        return defaults
    }

    private static func parseCase(
        _ value: JSONValue, index: Int, defaults deviceDefaults: RequestDefaults, endpoints: [String: RequestDefaults]
    ) throws(CatalogueError) -> ConformanceCase {
        guard let object = value.objectValue, let id = object["id"]?.stringValue, !id.isEmpty else {
            throw CatalogueError("case \(index + 1) has no id")
        }
        let name = "case \(id)"
        try allowOnly(["id", "title", "stage", "evidence", "unconfirmed", "needs", "request", "expect"], in: object, name)
        guard let title = object["title"]?.stringValue, let evidence = object["evidence"]?.stringValue,
            let stage = object["stage"]?.intValue, let unconfirmed = object["unconfirmed"]?.boolValue
        else { throw CatalogueError("\(name) needs title, evidence, stage and unconfirmed") }
        guard let needValues = object["needs"] else { throw CatalogueError("\(name) has no needs array") }
        let needs = try parseNeeds(needValues, name)
        let request = try parseRequest(object["request"], name)
        var defaults = deviceDefaults
        if let endpoint = request.endpoint {
            guard let found = endpoints[endpoint] else {
                throw CatalogueError("\(name): endpoint \(endpoint) is not one of \(endpoints.keys.sorted().joined(separator: ", "))")
            }
            defaults = found
        }
        // A device push's stage is one of §3's (9: accepted); a channel or broadcast one of §14a's (12: accepted).
        let stages = request.endpoint == nil ? 1...9 : 1...12
        guard stages.contains(Int(stage)) else { throw CatalogueError("\(name): stage \(stage) is not \(stages.lowerBound) to \(stages.upperBound)") }
        let expect = try parseExpectation(object["expect"], name)
        var item = ConformanceCase(
            id: id, title: title, stage: Int(stage), evidence: evidence, unconfirmed: unconfirmed, needs: needs, request: request,
            expect: expect)
        item.usesRunChannel = item.texts(defaults: defaults).contains { $0.contains(Placeholder.channelID) }
        let used = item.neededByRequest(defaults: defaults)
        guard used == needs else {
            let says = needs.sorted().map { $0.rawValue }.joined(separator: ", ")
            let uses = used.sorted().map { $0.rawValue }.joined(separator: ", ")
            throw CatalogueError("\(name): needs says [\(says)] but its request uses [\(uses)]")
        }
        return item
    }

    private static func parseNeeds(_ value: JSONValue, _ name: String) throws(CatalogueError) -> Set<Need> {
        guard let values = value.arrayValue else { throw CatalogueError("\(name): needs is not an array") }
        var needs = Set<Need>()
        for need in values {
            guard let text = need.stringValue, let parsed = Need(rawValue: text) else {
                throw CatalogueError("\(name): need \(need.serialized()) is not one of \(Need.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            needs.insert(parsed)
        }
        return needs
    }

    private static func parseRequest(_ value: JSONValue?, _ name: String) throws(CatalogueError) -> CaseRequest {
        var request = CaseRequest()
        guard let value else { return request }
        guard let object = value.objectValue else { throw CatalogueError("\(name): request is not an object") }
        try allowOnly(
            ["endpoint", "method", "path", "set", "remove", "append", "body", "bodySize", "auth", "before", "environment"], in: object,
            "\(name).request")
        request.endpoint = try optionalString(object["endpoint"], "\(name).request.endpoint")
        request.method = try optionalString(object["method"], "\(name).request.method")
        request.path = try optionalString(object["path"], "\(name).request.path")
        if let set = object["set"] {
            guard let members = set.objectValue else { throw CatalogueError("\(name).request.set is not an object") }
            for (header, text) in members {
                guard let text = text.stringValue else { throw CatalogueError("\(name).request.set.\(header) is not a string") }
                request.set.append((header, text))
            }
        }
        if let remove = object["remove"] {
            guard let names = remove.arrayValue?.compactMap(\.stringValue), names.count == remove.arrayValue?.count else {
                throw CatalogueError("\(name).request.remove is not an array of header names")
            }
            request.remove = names
        }
        if object["append"] != nil { request.append = try headerPairs(object["append"], "\(name).request.append") }
        switch (object["body"], object["bodySize"]) {
        case (nil, nil): break
        case (.some(.null), nil): request.body = .none
        case (.some(.string(let text)), nil): request.body = .text(text)
        case (nil, .some(let size)):
            guard let bytes = size.intValue, (32...65_536).contains(bytes) else {
                throw CatalogueError("\(name).request.bodySize is not a whole number from 32 to 65536")
            }
            request.body = .size(Int(bytes))
        default: throw CatalogueError("\(name).request: body is a string or null, and goes without bodySize")
        }
        if let auth = try optionalString(object["auth"], "\(name).request.auth") {
            guard let parsed = Auth(rawValue: auth) else {
                throw CatalogueError("\(name): auth \(auth) is not one of \(Auth.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            request.auth = parsed
        }
        if let before = try optionalString(object["before"], "\(name).request.before") {
            guard before == Auth.valid.rawValue else { throw CatalogueError("\(name): before can only be \"valid\"") }
            request.before = .valid
        }
        if let environment = try optionalString(object["environment"], "\(name).request.environment") {
            guard let parsed = CaseRequest.Environment(rawValue: environment) else {
                throw CatalogueError("\(name): environment is \"same\" or \"other\"")
            }
            request.environment = parsed
        }
        return request
    }

    private static func parseExpectation(_ value: JSONValue?, _ name: String) throws(CatalogueError) -> Expectation {
        guard let object = value?.objectValue, let status = object["status"]?.intValue, (200...599).contains(status) else {
            throw CatalogueError("\(name) needs expect.status (an HTTP status)")
        }
        try allowOnly(["status", "reason", "checks"], in: object, "\(name).expect")
        let reason = try optionalString(object["reason"], "\(name).expect.reason")
        guard (200...299).contains(status) == (reason == nil) else {
            throw CatalogueError("\(name): a success (2xx) has no reason, and an error has one")
        }
        var checks: [Check] = []
        for check in object["checks"]?.arrayValue ?? [] {
            guard let text = check.stringValue, let parsed = Check(rawValue: text) else {
                throw CatalogueError("\(name): check \(check.serialized()) is not one of \(Check.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            checks.append(parsed)
        }
        return Expectation(status: Int(status), reason: reason, checks: checks)
    }

    private static func headerPairs(_ value: JSONValue?, _ name: String) throws(CatalogueError) -> [(name: String, value: String)] {
        guard let array = value?.arrayValue else { throw CatalogueError("\(name) is not an array of [name, value] pairs") }
        var pairs: [(String, String)] = []
        for pair in array {
            guard let items = pair.arrayValue, items.count == 2, let header = items[0].stringValue, let text = items[1].stringValue else {
                throw CatalogueError("\(name): \(pair.serialized()) is not a [name, value] pair")
            }
            pairs.append((header, text))
        }
        return pairs
    }

    private static func optionalString(_ value: JSONValue?, _ name: String) throws(CatalogueError) -> String? {
        guard let value else { return nil }
        guard let text = value.stringValue else { throw CatalogueError("\(name) is not a string") }
        return text
    }

    private static func allowOnly(_ fields: Set<String>, in object: JSONObject, _ name: String) throws(CatalogueError) {
        if let unknown = object.keys.first(where: { !fields.contains($0) }) {
            throw CatalogueError("\(name) has an unknown field \(unknown) (known: \(fields.sorted().joined(separator: ", ")))")
        }
    }
}

extension CatalogueError {
    /// The JSON object a file holds, or an error naming `what` it was meant to be.
    static func object(_ bytes: [UInt8], _ what: String) throws(CatalogueError) -> JSONObject {
        let value: JSONValue
        do { value = try JSONValue.parse(bytes) } catch { throw CatalogueError("\(what) is not valid JSON: \(error)") }
        guard let object = value.objectValue else { throw CatalogueError("\(what) is not a JSON object") }
        return object
    }
}

extension ConformanceCase {
    /// What the request needs, read from it: the placeholders its path and headers use, its
    /// credentials, a request sent before it.
    /// The path and header values it sends.
    func texts(defaults: RequestDefaults) -> [String] {
        var texts = [request.path ?? defaults.path]
        let removed = Set(request.remove)
        let replaced = Set(request.set.map(\.name))
        texts += defaults.headers.filter { !removed.contains($0.name) && !replaced.contains($0.name) }.map(\.value)
        texts += request.set.map(\.value) + request.append.map(\.value)
        return texts
    }

    func neededByRequest(defaults: RequestDefaults) -> Set<Need> {
        var needs = Set<Need>()
        // The run's channel is created on the channel-management target.
        if defaults.host == .channelManagement { needs.insert(.channelManagement) }
        for text in texts(defaults: defaults) {
            if text.contains(Placeholder.deviceToken) || text.contains(Placeholder.deviceTokenUpperCase) { needs.insert(.deviceToken) }
            if text.contains(Placeholder.uninstalledToken) { needs.insert(.uninstalledToken) }
            if text.contains(Placeholder.channelID) { needs.insert(.channelManagement) }
            if text.contains(Placeholder.topicWithoutBroadcast) { needs.insert(.topicWithoutBroadcast) }
            if text.contains(Placeholder.topicAtChannelLimit) { needs.insert(.topicAtChannelLimit) }
            if text.contains(Placeholder.voipToken) { needs.insert(.voipToken) }
        }
        if let need = request.auth.need { needs.insert(need) }
        // The request sent before goes to the defaults' path: a valid token.
        if request.before != nil, defaults.path.contains(Placeholder.deviceToken) { needs.insert(.deviceToken) }
        return needs
    }
}

/// The placeholders a catalogue's paths, headers and bodies may use.
enum Placeholder {
    static let deviceToken = "{device-token}"
    static let deviceTokenUpperCase = "{DEVICE-TOKEN}"
    static let uninstalledToken = "{uninstalled-token}"
    static let unknownToken = "{unknown-token}"
    static let topic = "{topic}"
    static let caseID = "{case}"
    /// The broadcast channel the run creates (and deletes at its end).
    static let channelID = "{channel-id}"
    /// A well-formed channel id nobody created (random per run).
    static let unknownChannelID = "{unknown-channel-id}"
    static let topicWithoutBroadcast = "{topic-without-broadcast}"
    static let topicAtChannelLimit = "{topic-at-channel-limit}"
    static let voipToken = "{voip-token}"
    /// The run's clock in UNIX seconds (a Live Activity's `timestamp`).
    static let now = "{now}"
}
