// ServeConfiguration+StartState: what exists from the start (provider keys, apps and their
// backends, devices, fault rules) read from its text forms: `--auth-key` and `--app` values
// (or their config-file objects), the config file's "devices", the `--faults` file (in the
// admin API's rule form, FaultJSON). Imports APNsCore (its model and JSON), AdminAPI
// (FaultJSON) and CommandLineOptions (UsageError) only.
import APNsCore
import AdminAPI
public import CommandLineOptions

extension ServeConfiguration {
    static func loadFaults(_ path: String, origin: String) throws(UsageError) -> [FaultInjectionRule] {
        let value: JSONValue
        do { value = try JSONValue.parseFile(try InputFile.read(path)) } catch { throw UsageError("\(origin): \(path): \(error)") }
        guard let list = value.arrayValue ?? value["faults"]?.arrayValue else {
            throw UsageError("\(origin): \(path) must hold a list of fault rules or {\"faults\": [...]}")
        }
        if let unknown = value.objectValue?.keys.first(where: { $0 != "faults" }) {
            throw UsageError("\(origin): \(path): unknown key \"\(unknown)\" (the file holds {\"faults\": [...]} or a list of rules)")
        }
        guard list.count <= FaultRules.maxRules else {
            throw UsageError("\(origin): \(path) holds \(list.count) fault rules; the emulator keeps at most \(FaultRules.maxRules)")
        }
        var rules: [FaultInjectionRule] = []
        for (index, item) in list.enumerated() {
            guard let object = item.objectValue else { throw UsageError("\(origin): rule \(index + 1) in \(path) is not an object") }
            let rule: FaultInjectionRule
            do { rule = try FaultJSON.parse(object) } catch let error as AdminError {
                throw UsageError("\(origin): rule \(index + 1) in \(path): \(error.message)")
            } catch {
                throw UsageError("\(origin): rule \(index + 1) in \(path): \(error)")
            }
            // The admin API reaches a rule by its id: two with one id would be one rule there.
            if !rule.id.isEmpty, let first = rules.firstIndex(where: { $0.id == rule.id }) {
                throw UsageError("\(origin): rule \(index + 1) in \(path): id \"\(rule.id)\" is rule \(first + 1)'s already; ids must be unique")
            }
            rules.append(rule)
        }
        // Numbered here, skipping the ids the file gives: at start a rule's id is never taken.
        let named = Set(rules.map(\.id))
        var number = 1
        for index in rules.indices where rules[index].id.isEmpty {
            while named.contains("f\(number)") { number += 1 }
            rules[index].id = "f\(number)"
            number += 1
        }
        return rules
    }

    static func isTeamOrKeyID(_ text: Substring) -> Bool {
        // Apple's team and key ids are 10 uppercase letters and digits; accept any short
        // alphanumeric id so made-up test ids work too.
        !text.isEmpty && text.count <= 64 && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) }
    }

    public static func parseAuthKey(_ text: String) throws(UsageError) -> AuthKeySpec {
        if text.hasPrefix("{") {
            guard let object = (try? JSONValue.parse(text))?.objectValue else {
                throw UsageError("auth key \(text) is not a JSON object")
            }
            return try authKey(fromObject: object)
        }
        let main: Substring
        var query: Substring = ""
        if let mark = text.firstIndex(of: "?") {
            main = text[..<mark]
            query = text[text.index(after: mark)...]
        } else {
            main = Substring(text)
        }
        let parts = main.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, isTeamOrKeyID(parts[0]), isTeamOrKeyID(parts[1]), !parts[2].isEmpty else {
            throw UsageError("'\(text)' is not TEAMID:KEYID:PATH (for example ABCDE12345:KEY1234567:AuthKey_KEY1234567.p8)")
        }
        var spec = AuthKeySpec(teamID: String(parts[0]), keyID: String(parts[1]), path: String(parts[2]))
        for pair in query.split(separator: "&") where !pair.isEmpty {
            let kv = pair.split(separator: "=", maxSplits: 1)
            let key = kv[0]
            let value = kv.count > 1 ? String(kv[1]) : ""
            switch key {
            case "environment":
                guard let env = APNsEnvironment(rawValue: value) else {
                    throw UsageError("'\(text)': environment must be sandbox or production, not '\(value)'")
                }
                spec.environment = env
            case "topics":
                let topics = value.split(separator: ",").map(String.init)
                guard !topics.isEmpty, topics.allSatisfy(DeviceRegistry.isValidBundleID) else {
                    throw UsageError("'\(text)': topics must be a comma-separated list of bundle ids")
                }
                spec.topics = topics
            case "related":
                guard isTeamOrKeyID(Substring(value)) else { throw UsageError("'\(text)': related must be a key id") }
                spec.relatedKeyID = value
            default:
                throw UsageError("'\(text)': unknown key option '\(key)'; use environment, topics or related")
            }
        }
        return spec
    }

    /// ` (unknown key "teamID"; did you mean "teamId"?)` for the first key of `object` that is
    /// none of `known` but close to one: a required key misspelt is named, not only missed.
    static func misspeltKeyHint(_ object: JSONObject?, known: [String]) -> String {
        guard let object else { return "" }
        for key in object.keys where !known.contains(key) {
            if let meant = OptionParser.closest(to: key, among: known) { return " (unknown key \"\(key)\"; did you mean \"\(meant)\"?)" }
        }
        return ""
    }

    /// The key of an object (a config file's, or the admin API's, which sends the key text as
    /// "pem" and names no "path"). Refusals name the field and what it takes, never echo the
    /// object: it may carry a private key.
    static func authKey(fromObject object: JSONObject, pathRequired: Bool = true) throws(UsageError) -> AuthKeySpec {
        let idRule = "1 to 64 letters and digits, e.g. ABCDE12345"
        let fields = ["teamId", "keyId", "path", "environment", "topics", "relatedKeyId"] + (pathRequired ? [] : ["pem"])
        guard let team = object["teamId"]?.stringValue, isTeamOrKeyID(Substring(team)) else {
            throw UsageError("auth key: \"teamId\" (the team id) is required: \(idRule)\(misspeltKeyHint(object, known: fields))")
        }
        guard let key = object["keyId"]?.stringValue, isTeamOrKeyID(Substring(key)) else {
            throw UsageError("auth key of team \(team): \"keyId\" (the key id) is required: \(idRule)\(misspeltKeyHint(object, known: fields))")
        }
        let name = "auth key \(team):\(key)"
        // A misspelled restriction ("enviroment") would leave the key unrestricted without a word.
        if let unknown = object.keys.first(where: { !fields.contains($0) }) {
            throw UsageError(
                "\(name): unknown field \"\(unknown)\"\(OptionParser.unknownKeyAdvice(unknown, among: fields, otherwise: " (expected \(fields.joined(separator: ", ")))"))"
            )
        }
        let path = object["path"]?.stringValue
        if path == nil, pathRequired || object["path"] != nil {
            throw UsageError("\(name): \"path\" (a string: the .p8 file) is required")
        }
        var spec = AuthKeySpec(teamID: team, keyID: key, path: path ?? "")
        if let env = object["environment"] {
            guard let value = env.stringValue.flatMap(APNsEnvironment.init(rawValue:)) else {
                throw UsageError("\(name): \"environment\" must be \"sandbox\" or \"production\" (or left out for both)")
            }
            spec.environment = value
        }
        if let topics = object["topics"] {
            guard let list = topics.arrayValue?.compactMap(\.stringValue), !list.isEmpty,
                list.count == topics.arrayValue?.count, list.allSatisfy(DeviceRegistry.isValidBundleID)
            else {
                throw UsageError(
                    "\(name): \"topics\" must be a non-empty list of bundle ids, e.g. [\"com.example.app\"] (or left out for a team-scoped key)")
            }
            spec.topics = list
        }
        if let related = object["relatedKeyId"] {
            guard let value = related.stringValue, isTeamOrKeyID(Substring(value)) else {
                throw UsageError("\(name): \"relatedKeyId\" must be a key id: \(idRule)")
            }
            spec.relatedKeyID = value
        }
        return spec
    }

    /// The `"backend"` of an app written as an object in the config file.
    static func parseAppBackend(_ text: String) throws(UsageError) -> AppBackend? {
        guard text.hasPrefix("{"), let object = (try? JSONValue.parse(text))?.objectValue, let backend = object["backend"],
            backend != .null
        else { return nil }
        do { return try AppBackend.parse(backend) } catch {
            throw UsageError("app \(object["bundleId"]?.stringValue ?? text): \"backend\": \(error.description)")
        }
    }

    /// The app spec without its capability, and whether the app has the Broadcast capability:
    /// `TEAM:BUNDLE?broadcast=off`, or `"broadcast": false` in a config-file object.
    static func parseBroadcastCapability(_ text: String) throws(UsageError) -> (spec: String, broadcast: Bool) {
        if text.hasPrefix("{") {
            guard var object = (try? JSONValue.parse(text))?.objectValue else { return (text, true) }
            guard let value = object["broadcast"] else { return (text, true) }
            guard case .bool(let on) = value else { throw UsageError("app \(text): \"broadcast\" must be true or false") }
            object.members.removeAll { $0.key == "broadcast" }
            return (JSONValue.object(object).serialized(), on)
        }
        guard let mark = text.firstIndex(of: "?") else { return (text, true) }
        switch text[text.index(after: mark)...] {
        case "broadcast=off": return (String(text[..<mark]), false)
        case "broadcast=on": return (String(text[..<mark]), true)
        default: throw UsageError("'\(text)': after ? only broadcast=off or broadcast=on")
        }
    }

    public static func parseApp(_ text: String) throws(UsageError) -> (teamID: String, bundleID: String) {
        if text.hasPrefix("{") {
            let fields = ["teamId", "bundleId", "backend", "broadcast"]
            let parsed = (try? JSONValue.parse(text))?.objectValue
            guard let object = parsed, let team = object["teamId"]?.stringValue, let bundle = object["bundleId"]?.stringValue else {
                throw UsageError("app \(text) needs \"teamId\" and \"bundleId\"\(misspeltKeyHint(parsed, known: fields))")
            }
            if let unknown = object.keys.first(where: { !fields.contains($0) }) {
                throw UsageError(
                    "app \(bundle): unknown field \"\(unknown)\"\(OptionParser.unknownKeyAdvice(unknown, among: fields, otherwise: " (expected teamId, bundleId, backend, broadcast)"))"
                )
            }
            return try parseApp("\(team):\(bundle)")
        }
        let parts = text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, isTeamOrKeyID(parts[0]), DeviceRegistry.isValidBundleID(String(parts[1])) else {
            throw UsageError("'\(text)' is not TEAMID:BUNDLEID (for example ABCDE12345:com.example.app)")
        }
        return (String(parts[0]), String(parts[1]))
    }

    static func parseDevices(_ value: JSONValue?, path: String) throws(UsageError) -> [DeviceSpec] {
        guard let value else { return [] }
        guard let list = value.arrayValue else { throw UsageError("\"devices\" in \(path) must be a list") }
        var out: [DeviceSpec] = []
        for item in list {
            let text = item.serialized()
            if let object = item.objectValue, object["count"] != nil {
                out += try parseDeviceBatch(object, text: text, path: path)
                continue
            }
            guard let object = item.objectValue, let id = object["deviceId"]?.stringValue, !id.isEmpty,
                let apps = object["apps"]?.arrayValue
            else {
                // A misspelt "deviceId" or "apps" is named (`"deviceID"`, `"app"`).
                throw UsageError(
                    "device \(text) in \(path) needs \"deviceId\" and \"apps\"\(misspeltKeyHint(item.objectValue, known: Self.deviceKeys))")
            }
            guard DeviceRegistry.isValidDeviceID(id) else {
                throw UsageError("device \(text) in \(path): \(DeviceRegistry.deviceIDRule)")
            }
            if let unknown = object.keys.first(where: { !Self.deviceKeys.contains($0) }) {
                let advice = OptionParser.unknownKeyAdvice(
                    unknown, among: Self.deviceKeys, otherwise: " (known: \(Self.deviceKeys.joined(separator: ", ")))")
                throw UsageError("device \(id) in \(path): unknown key \"\(unknown)\"\(advice)")
            }
            var spec = DeviceSpec(deviceID: id, apps: [])
            do throws(NotificationSettingsError) { try spec.attention.apply(object) } catch {
                throw UsageError("device \(id) in \(path): \(error.description)")
            }
            for (index, app) in apps.enumerated() {
                if let unknown = app.objectValue?.keys.first(where: { !Self.deviceAppKeys.contains($0) }) {
                    let advice = OptionParser.unknownKeyAdvice(
                        unknown, among: Self.deviceAppKeys, otherwise: " (known: \(Self.deviceAppKeys.joined(separator: ", ")))")
                    throw UsageError("device \(id) in \(path): apps[\(index)]: unknown key \"\(unknown)\"\(advice)")
                }
                guard let bundle = app["bundleId"]?.stringValue, DeviceRegistry.isValidBundleID(bundle),
                    let env = app["environment"]?.stringValue.flatMap(APNsEnvironment.init(rawValue:))
                else {
                    throw UsageError("device \(id) in \(path): each app needs a valid \"bundleId\" and \"environment\" (sandbox or production)")
                }
                let kindText = app["kind"]?.stringValue ?? "app"
                guard let kind = TokenKind(rawValue: kindText) else {
                    throw UsageError(
                        "device \(id) in \(path): kind '\(kindText)' is not one of \(TokenKind.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                let token = app["token"]?.stringValue
                if let token, !Hex.isEvenLengthHex(Substring(token)) {
                    throw UsageError("device \(id) in \(path): token '\(token)' is not even-length hex")
                }
                spec.apps.append((bundle, env, kind, token))
                if let settings = app["notificationSettings"], settings != .null {
                    guard let fields = settings.objectValue else {
                        throw UsageError("device \(id) in \(path): apps[\(index)].notificationSettings must be an object")
                    }
                    if let unknown = fields.keys.first(where: { !NotificationSetup.mentions(JSONObject([($0, .null)])) }) {
                        let advice = OptionParser.unknownKeyAdvice(
                            unknown, among: NotificationSetup.fields, otherwise: " (known: \(NotificationSetup.fieldList))")
                        throw UsageError("device \(id) in \(path): apps[\(index)].notificationSettings: unknown key \"\(unknown)\"\(advice)")
                    }
                    var setup = spec.notificationSettings[bundle] ?? NotificationSetup()
                    do throws(NotificationSettingsError) { try setup.apply(fields) } catch {
                        throw UsageError("device \(id) in \(path): apps[\(index)].notificationSettings: \(error.description)")
                    }
                    spec.notificationSettings[bundle] = setup
                }
                if let declaration = try parseLiveActivities(app, bundleID: bundle, environment: env, at: "device \(id) in \(path): apps[\(index)]") {
                    guard !spec.liveActivities.contains(where: { $0.bundleID == bundle }) else {
                        throw UsageError(
                            "device \(id) in \(path): apps[\(index)]: \(bundle) declares \"liveActivityTypes\" in another entry already; list all its types in one"
                        )
                    }
                    spec.liveActivities.append(declaration)
                }
            }
            out.append(spec)
        }
        return out
    }

    /// What a configured device entry may hold (a `count` batch has its own keys).
    static let deviceKeys = ["deviceId", "apps", "focus", "scheduledSummary", "muted", "locked"]

    /// What an app entry of a configured device may hold.
    static let deviceAppKeys = ["bundleId", "environment", "kind", "token", "liveActivityTypes", "frequentUpdates", "notificationSettings"]

    /// An app entry's `"liveActivityTypes"` and `"frequentUpdates"` (nil: it declares none).
    /// The names are judged by the same rule as `PUT …/live-activities`; `at` says where the
    /// entry is, for messages.
    static func parseLiveActivities(
        _ app: JSONValue, bundleID: String, environment: APNsEnvironment, at place: String
    ) throws(UsageError) -> LiveActivityDeclaration? {
        let frequent: Bool
        switch app["frequentUpdates"] {
        case nil: frequent = false
        case .bool(let on)?: frequent = on
        case let other?: throw UsageError("\(place).frequentUpdates: must be true or false, not \(other.serialized())")
        }
        guard let value = app["liveActivityTypes"] else {
            guard app["frequentUpdates"] == nil else {
                throw UsageError("\(place).frequentUpdates: needs \"liveActivityTypes\" (the ActivityAttributes types it applies to)")
            }
            return nil
        }
        guard let list = value.arrayValue, !list.isEmpty, list.count <= maxLiveActivityTypes else {
            throw UsageError(
                "\(place).liveActivityTypes: must be a list of 1 to \(maxLiveActivityTypes) ActivityAttributes type names, e.g. [\"DeliveryAttributes\"]"
            )
        }
        var types: [String] = []
        for (index, item) in list.enumerated() {
            guard let name = item.stringValue else {
                throw UsageError("\(place).liveActivityTypes[\(index)]: \(item.serialized()) is not a type name (a string)")
            }
            types.append(name)
        }
        // The book's own rule, on a scratch book: the messages are the admin API's.
        var scratch = LiveActivityBook()
        do { try scratch.declare(bundleID: bundleID, types: types, frequentUpdates: frequent) } catch {
            throw UsageError("\(place).liveActivityTypes: \(error.description)")
        }
        return LiveActivityDeclaration(bundleID: bundleID, environment: environment, types: types, frequentUpdates: frequent)
    }

    /// ActivityAttributes types one app may declare in the config file (an app has a handful).
    static let maxLiveActivityTypes = 100

    /// `{"count": N, "idPrefix": "load-", "bundleId", "environment"}`: N devices PREFIX1…PREFIXN
    /// with that app (a load test's population, created at start).
    static func parseDeviceBatch(_ object: JSONObject, text: String, path: String) throws(UsageError) -> [DeviceSpec] {
        guard let count = object["count"]?.intValue, (1...Int64(World.maxBatchDevices * 10)).contains(count) else {
            throw UsageError("device batch \(text) in \(path): \"count\" must be a whole number from 1 to \(World.maxBatchDevices * 10)")
        }
        if let unknown = object.keys.first(where: { !Self.deviceBatchKeys.contains($0) }) {
            let advice = OptionParser.unknownKeyAdvice(
                unknown, among: Self.deviceBatchKeys, otherwise: " (known: \(Self.deviceBatchKeys.joined(separator: ", ")))")
            throw UsageError("device batch \(text) in \(path): unknown key \"\(unknown)\"\(advice)")
        }
        if let given = object["idPrefix"], given.stringValue == nil {
            throw UsageError("device batch \(text) in \(path): \"idPrefix\" must be a string")
        }
        let prefix = object["idPrefix"]?.stringValue ?? "device-"
        guard DeviceRegistry.isValidDeviceID(prefix + String(count)) else {
            throw UsageError("device batch \(text) in \(path): \"idPrefix\": \(DeviceRegistry.deviceIDRule)")
        }
        guard let bundle = object["bundleId"]?.stringValue, DeviceRegistry.isValidBundleID(bundle),
            let environment = object["environment"]?.stringValue.flatMap(APNsEnvironment.init(rawValue:))
        else {
            throw UsageError("device batch \(text) in \(path) needs a valid \"bundleId\" and \"environment\" (sandbox or production)")
        }
        return (1...count).map { n in DeviceSpec(deviceID: "\(prefix)\(n)", apps: [(bundle, environment, .app, nil)]) }
    }

    /// The keys of a population entry; any other is a mistake that would go unnoticed.
    static let deviceBatchKeys = ["count", "idPrefix", "bundleId", "environment"]

    /// Keys and apps given in Swift (not as text) pass the checks `--auth-key` and `--app` make.
    func checkAccounts() throws(UsageError) {
        for key in authKeys where !(Self.isTeamOrKeyID(Substring(key.teamID)) && Self.isTeamOrKeyID(Substring(key.keyID)) && !key.path.isEmpty) {
            throw UsageError("auth key \(key.teamID):\(key.keyID):\(key.path): team and key ids are 1 to 64 letters and digits, and a path is needed")
        }
        for app in apps where !(Self.isTeamOrKeyID(Substring(app.teamID)) && DeviceRegistry.isValidBundleID(app.bundleID)) {
            throw UsageError("'\(app.teamID):\(app.bundleID)' is not TEAMID:BUNDLEID (for example ABCDE12345:com.example.app)")
        }
    }
}
