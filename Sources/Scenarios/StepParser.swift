import APNsCore

/// Checks one step object against `StepCatalog` and the variables known at that point.
struct StepParser {
    let index: Int
    /// Every alias the scenario makes (the default device when there is only one).
    let aliases: [String]
    /// The values the file alone gives `${…}` (`--var`, the environment, `variables`).
    let variables: [String: String]

    static let environments = ["sandbox", "production"]
    static let hooks = BackendHookKind.allCases.map(\.rawValue)
    static let callStates = ["pending", "retrying", "done", "failed", "dropped"]
    static let outcomes = [
        "any", "rejected", "pending", "stored", "delivered", "expired", "coalesced", "throttled", "deferred", "dropped-by-system", "ignored",
    ]
    static let activityStates = LiveActivityState.allCases.map(\.rawValue)
    static let starters = ["app", "push"]

    func parse(_ value: JSONValue, known: inout VariableCheck) throws(ScenarioFileError) -> Step {
        guard let object = value.objectValue else {
            throw ScenarioFileError(location: "step \(index)", "must be an object such as {\"do\": \"login\", …}")
        }
        let kinds = StepKind.allCases.map(\.rawValue).joined(separator: ", ")
        guard let kindText = object["do"]?.stringValue else {
            throw ScenarioFileError(location: "step \(index)", field: "do", "is required: the step kind (\(kinds))")
        }
        guard let kind = StepKind(rawValue: kindText) else {
            let hint = StepKind.allCases.first { $0.rawValue.lowercased() == kindText.lowercased() }.map { " Did you mean \"\($0.rawValue)\"?" } ?? ""
            throw ScenarioFileError(location: "step \(index)", field: "do", "unknown step kind \"\(kindText)\".\(hint) Known: \(kinds)")
        }
        let location = "step \(index) (\(kind.rawValue))"
        func fail(_ field: String?, _ message: String) -> ScenarioFileError {
            ScenarioFileError(location: location, field: field, message)
        }

        let specs = StepKind.commonFields + kind.fields
        try Self.checkFields(object, specs, fail: fail)
        try checkKindRules(kind, object, fail: fail)
        if kind == .device, let made = object["alias"]?.stringValue, known.aliasesSoFar.contains(made) {
            throw fail("alias", "a device \"\(made)\" exists already (give this one another alias)")
        }
        let knownFields = try knownValues(object, known, fail: fail)
        if let (field, problem) = kind.valueProblem(in: knownFields) { throw fail(field, problem) }
        if kind == .scheduledSummary, object["off"]?.boolValue != true, let problem = Self.summaryProblem(object, known: knownFields) {
            throw fail(nil, problem)
        }

        // The device the step acts on.
        var alias: String?
        if let named = object["device"]?.stringValue, kind != .restore {
            guard known.aliasesSoFar.contains(named) else {
                throw fail(
                    "device",
                    "no device \"\(named)\" exists at this point (a \"device\" step makes one: {\"do\": \"device\", \"alias\": \"\(named)\"})")
            }
            alias = named
        } else if needsDevice(kind, object) {
            guard aliases.count == 1, let only = aliases.first, known.aliasesSoFar.contains(only) else {
                throw fail(
                    "device",
                    aliases.count > 1
                        ? "is required: the scenario has several devices (\(aliases.joined(separator: ", ")))"
                        : "is required: no device exists at this point (add a {\"do\": \"device\", \"alias\": …} step first)")
            }
            alias = only
        }
        if kind == .restore, let from = object["from"]?.stringValue, !known.aliasesSoFar.contains(from) {
            throw fail("from", "no device \"\(from)\" exists at this point")
        }
        if kind == .restore, let made = object["device"]?.stringValue, !known.aliasesSoFar.contains(made) {
            try Self.checkAlias(made, field: "device", isDeviceID: true, fail: fail)  // a new device, its id the alias
        }
        for field in ["delivery", "backendCall", "deliveries", "backendCalls"] {
            if let named = object[field]?["device"]?.stringValue, !known.aliasesSoFar.contains(named) {
                throw fail("\(field).device", "no device \"\(named)\" exists at this point")
            }
        }
        try checkNames(kind, object, known, fail: fail)

        for member in object.members where member.key != "save" && member.key != "do" {
            try known.check(member.value, location: location, field: member.key)
        }
        switch kind {
        case .device: if let made = object["alias"]?.stringValue { known.aliasesSoFar.insert(made) }
        case .restore: if let made = object["device"]?.stringValue { known.aliasesSoFar.insert(made) }
        case .push:
            known.pushed = true
            if let made = object["startsActivity"]?.stringValue { known.activitiesSoFar.insert(made) }
        case .startActivity: if let made = object["activity"]?.stringValue { known.activitiesSoFar.insert(made) }
        case .createChannel: if let made = object["channel"]?.stringValue { known.channelsSoFar.insert(made) }
        case .broadcast: known.broadcasted = true
        case .run: known.ran = true
        case .http: known.requested = true
        default: break
        }

        var save: [(name: String, template: String)] = []
        if let entries = object["save"]?.objectValue {
            for (name, value) in entries {
                guard Template.isValidName(name), !name.contains(".") else {
                    throw fail("save", "\"\(name)\" is not a variable name (letters, digits, _ and -)")
                }
                guard let template = ScenarioParser.scalarText(value) else {
                    throw fail("save", "\"\(name)\" must be a string such as \"${device.phone.token}\"")
                }
                try known.check(.string(template), location: location, field: "save.\(name)")
                save.append((name, template))
            }
            var budget = Template.Budget()
            for entry in save {
                _ = try Template.fillKnown(
                    json: .string(entry.template), budget: &budget, tooLong: { fail("save.\(entry.name)", $0) }, fixedValue(known))
            }
            for entry in save { known.saved.insert(entry.name) }
        } else if kind == .save {
            throw fail("save", "is required: {\"NAME\": \"${…}\"}")
        }
        return Step(index: index, kind: kind, fields: object, save: save, deviceAlias: alias)
    }

    /// The step's fields with `${…}` filled in where the file alone says the value; strings
    /// with others (saved by an earlier step, about devices and pushes) are left out: the run
    /// checks them once they are known. A value the filling in makes too long is refused now,
    /// in the run's words.
    private func knownValues(
        _ object: JSONObject, _ known: VariableCheck, fail: (String?, String) -> ScenarioFileError
    ) throws(ScenarioFileError) -> JSONObject {
        var out = JSONObject()
        var budget = Template.Budget()
        let value = fixedValue(known)
        for member in object.members where member.key != "save" {
            let filled = try Template.fillKnown(json: member.value, budget: &budget, tooLong: { fail(member.key, $0) }, value)
            if Self.isTemplate(member.value) && !filled.complete { continue }
            out.members.append((member.key, filled.value))
        }
        return out
    }

    /// What the emulator would refuse in a scheduled summary, judged by its own rules on the
    /// values known now (a `times` only the run knows stands in as one valid time: the run
    /// judges it once known, and the other fields are judged now).
    static func summaryProblem(_ object: JSONObject, known: JSONObject) -> String? {
        var summary = JSONObject()
        for name in ["times", "apps", "utcOffsetMinutes"] where object[name] != nil {
            if let value = known[name], !value.serialized().contains("${") {
                summary[name] = value
            } else if name == "times" {
                summary[name] = ["00:00"]
            }
        }
        var attention = DeviceAttention()
        do throws(NotificationSettingsError) { try attention.apply(JSONObject([("scheduledSummary", .object(summary))])) } catch {
            return error.description
        }
        return nil
    }

    /// The value the file alone gives `${name}` at this point (nil: only the run knows it; a
    /// value saved by an earlier step comes before a fixed one).
    private func fixedValue(_ known: VariableCheck) -> (String) -> String? {
        { name in known.saved.contains(name) ? nil : variables[name] }
    }

    /// Steps that act on a device even when they do not name one.
    private func needsDevice(_ kind: StepKind, _ object: JSONObject) -> Bool {
        switch kind {
        case .push: return object["token"] == nil && object["activity"] == nil
        case .expect:
            return object["deliveries"] == nil && object["backendCalls"] == nil && object["checks"] == nil && object["activity"] == nil
        default: return kind.usesDevice
        }
    }

    // MARK: Fields and types

    /// `criteria`: the kind of criteria object `object` is (nil: a step), for the values its
    /// enumerated fields may take (`state` means another thing in each).
    static func checkFields(
        _ object: JSONObject, _ specs: [FieldSpec], criteria: CriteriaKind? = nil,
        fail: (String?, String) -> ScenarioFileError
    ) throws(ScenarioFileError) {
        let names = specs.map(\.name)
        if let unknown = object.keys.first(where: { !names.contains($0) }) {
            throw fail(unknown, "is not a field of this step (known: \(names.joined(separator: ", ")))")
        }
        for spec in specs {
            guard let value = object[spec.name] else {
                if spec.required { throw fail(spec.name, "is required: \(spec.help)") }
                continue
            }
            guard Self.matches(value, spec.type) else { throw fail(spec.name, "must be \(spec.type.words)") }
            if case .criteria(let kind) = spec.type, let inner = value.objectValue {
                try checkFields(inner, kind.fields, criteria: kind) { field, message in
                    fail(field.map { "\(spec.name).\($0)" } ?? spec.name, message)
                }
            }
        }
        try checkChoices(object, criteria: criteria, fail: fail)
    }

    /// A string with `${…}`: its value is known, and checked, only when the step runs.
    static func isTemplate(_ value: JSONValue) -> Bool {
        if case .string(let text) = value { return text.contains("${") }
        return false
    }

    static func matches(_ value: JSONValue, _ type: FieldType) -> Bool {
        if isTemplate(value), type != .object, type != .array {
            return true  // checked again once substituted
        }
        switch type {
        case .string: return value.stringValue != nil
        case .number: return value.numberValue != nil
        case .bool: return value.boolValue != nil
        case .object, .criteria: return value.objectValue != nil
        case .array: return value.arrayValue != nil
        case .any: return true
        case .stringOrNull: return value.stringValue != nil || value == .null
        }
    }

    /// Literal values of enumerated fields (templates are checked when they run).
    static func checkChoices(_ object: JSONObject, criteria: CriteriaKind?, fail: (String?, String) -> ScenarioFileError) throws(ScenarioFileError) {
        let states: [String]
        switch criteria {
        case nil, .delivery?: states = AppState.allCases.map(\.rawValue)
        case .backendCall?: states = callStates
        case .activity?: states = activityStates
        }
        let choices: [(String, [String])] = [
            ("environment", environments), ("authorization", Authorization.allCases.map(\.rawValue)),
            ("appState", AppState.allCases.map(\.rawValue)),
            ("state", states),
            ("hook", hooks), ("outcome", outcomes), ("startedBy", starters),
        ]
        for (field, allowed) in choices {
            guard let text = object[field]?.stringValue, !text.contains("${") else { continue }
            if !allowed.contains(text) {
                throw fail(field, "\"\(text)\" is not one of \(allowed.joined(separator: ", "))")
            }
        }
    }

    // MARK: Rules of single kinds

    private func checkKindRules(_ kind: StepKind, _ object: JSONObject, fail: (String?, String) -> ScenarioFileError) throws(ScenarioFileError) {
        switch kind {
        case .device:
            if let alias = object["alias"]?.stringValue {
                try Self.checkAlias(alias, field: "alias", isDeviceID: object["deviceId"] == nil, fail: fail)
            }
        case .waitFor:
            let subjects = ["delivery", "backendCall", "activity"].filter { object[$0] != nil }
            guard subjects.count == 1 else {
                throw fail(
                    nil,
                    "give exactly one of \"delivery\", \"backendCall\" and \"activity\" (got "
                        + (subjects.isEmpty ? "none" : subjects.count == 2 ? "both \(subjects[0]) and \(subjects[1])" : "all three") + ")")
            }
            if object["activity"] != nil, let extra = ["count", "since"].first(where: { object[$0] != nil }) {
                throw fail(extra, "goes with delivery or backendCall (an activity is waited for until it is as described)")
            }
            try checkSince(object, fail: fail)
        case .expectNone:
            let subjects = ["delivery", "backendCall"].filter { object[$0] != nil }
            guard subjects.count == 1 else {
                throw fail(nil, "give exactly one of \"delivery\" and \"backendCall\" (got \(subjects.isEmpty ? "neither" : "both"))")
            }
            try checkSince(object, fail: fail)
        case .expect:
            let deviceFields = ["userId", "token", "tokenNot", "tokenUploadPending", "authorization", "appState", "installed"]
            let subjects =
                ["deliveries", "backendCalls", "checks", "activity"].filter { object[$0] != nil }
                + (deviceFields.contains { object[$0] != nil } ? ["device fields"] : [])
            guard subjects.count == 1 else {
                throw fail(
                    nil,
                    subjects.isEmpty
                        ? "say what to expect: device fields (\(deviceFields.joined(separator: ", "))), \"deliveries\", \"backendCalls\", "
                            + "\"checks\" or \"activity\""
                        : "expect one thing per step, not \(subjects.joined(separator: " and "))")
            }
            if object["activity"] != nil, let extra = ["device", "bundleId", "since"].first(where: { object[$0] != nil }) {
                throw fail(extra, "does not go with \"activity\" (the activity's name says where it is)")
            }
            if object["deliveries"] != nil || object["backendCalls"] != nil {
                guard object["count"] != nil else { throw fail("count", "is required with deliveries/backendCalls: how many exactly") }
            } else if object["count"] != nil {
                throw fail("count", "goes with deliveries or backendCalls")
            }
            if let checks = object["checks"]?.objectValue {
                try ScenarioParser.unknownFields(checks, allowed: ["crossAccount"], location: "step \(index) (expect) checks")
                guard let value = checks["crossAccount"], Self.matches(value, .number) else {
                    throw fail("checks.crossAccount", "is required: a number")
                }
                if !Self.isTemplate(value), let problem = ValueRule.crossAccount.problem(value) {
                    throw fail("checks.crossAccount", problem)
                }
            }
            try checkSince(object, fail: fail)
        case .push:
            let targets = ["device", "token", "activity"].filter { object[$0] != nil }
            if targets.count > 1 { throw fail(targets[1], "give one of device, token and activity, not \(targets.joined(separator: " and "))") }
            if object["pushToStart"] != nil, object["token"] != nil || object["activity"] != nil {
                throw fail("pushToStart", "is a token of the device: it goes with device (or the only device), not with token or activity")
            }
            if object["startsActivity"] != nil, object["pushToStart"] == nil {
                throw fail("startsActivity", "goes with pushToStart: the activity a push to the device's push-to-start token starts")
            }
            try Self.checkDateOffsets(object, fail: fail)
            try Self.checkOneExpiration(object, fail: fail)
            try Self.checkAnswerExpectation(object, fail: fail)
        case .declareActivities:
            if let types = object["types"]?.arrayValue,
                types.contains(where: { $0.stringValue == nil || ($0.stringValue?.isEmpty ?? true) })
            {
                throw fail("types", "must be an array of ActivityAttributes type names: [\"DeliveryAttributes\"]")
            }
        case .startActivity:
            let ways = ["pushToken", "channel", "channelId"].filter { object[$0] != nil }
            if ways.count > 1 {
                throw fail(
                    ways[1],
                    "give one of pushToken, channel and channelId (how the activity takes its updates), not \(ways.joined(separator: " and "))")
            }
        case .createChannel:
            try Self.checkAnswerExpectation(object, fail: fail)
        case .broadcast:
            let channels = ["channel", "channelId"].filter { object[$0] != nil }
            guard channels.count == 1 else {
                throw fail(
                    nil,
                    "give exactly one of \"channel\" (a createChannel step's name) and \"channelId\" (got \(channels.isEmpty ? "neither" : "both"))")
            }
            try Self.checkDateOffsets(object, fail: fail)
            try Self.checkOneExpiration(object, fail: fail)
            try Self.checkAnswerExpectation(object, fail: fail)
        case .http:
            if let expect = object["expect"]?.objectValue {
                try Self.checkFields(expect, [FieldSpec("status", .any, "status or \"2xx\""), FieldSpec("json", .object, "pointer → value")]) {
                    field, message in
                    fail("expect." + (field ?? ""), message)
                }
                try Self.checkStatus(expect, fail: fail)
                for key in expect["json"]?.objectValue?.keys ?? [] where !key.contains("{{") && JSONPointer(key) == nil {
                    throw fail("expect.json", "\"\(key)\" is not a JSON pointer such as /tokens/0")
                }
            }
        case .focus, .scheduledSummary:
            let others = (kind == .focus ? ["mode", "allowedApps", "allowedPeople", "allowTimeSensitive"] : ["times", "apps", "utcOffsetMinutes"])
                .filter { object[$0] != nil }
            if object["off"]?.boolValue == true, let other = others.first {
                throw fail(other, "does not go with \"off\": true (\"off\" turns the \(kind == .focus ? "Focus" : "summary") off)")
            }
            if kind == .scheduledSummary, object["off"]?.boolValue != true, object["times"] == nil {
                throw fail("times", "is required (or \"off\": true)")
            }

        case .deviceSwitches:
            guard object["muted"] != nil || object["locked"] != nil else { throw fail(nil, "give \"muted\" and/or \"locked\"") }
        case .run:
            guard let argv = object["argv"]?.arrayValue, !argv.isEmpty, argv.allSatisfy({ $0.stringValue != nil }) else {
                throw fail("argv", "must be a non-empty array of strings: [\"python3\", \"notify.py\", …]")
            }
            if let env = object["env"]?.objectValue, env.contains(where: { ScenarioParser.scalarText($0.value) == nil }) {
                throw fail("env", "values must be strings")
            }
        default:
            break
        }
    }

    /// `expiration` is a time, `expiresIn` one from the emulator's now: not both.
    private static func checkOneExpiration(_ object: JSONObject, fail: (String?, String) -> ScenarioFileError) throws(ScenarioFileError) {
        if object["expiration"] != nil && object["expiresIn"] != nil {
            throw fail("expiresIn", "give expiration (a UNIX time) or expiresIn (seconds from the emulator's now), not both")
        }
    }

    /// `staleIn` and `dismissIn` write into the payload's `aps`, so it must be a JSON object.
    private static func checkDateOffsets(_ object: JSONObject, fail: (String?, String) -> ScenarioFileError) throws(ScenarioFileError) {
        guard let offset = ["staleIn", "dismissIn"].first(where: { object[$0] != nil }) else { return }
        guard let payload = object["payload"], let aps = payload["aps"], aps.objectValue != nil else {
            throw fail(offset, "sets a date in the payload's aps, so give a \"payload\" object with an \"aps\" object")
        }
    }

    /// A push-like step's `expect`: `status` and `reason` only.
    private static func checkAnswerExpectation(_ object: JSONObject, fail: (String?, String) -> ScenarioFileError) throws(ScenarioFileError) {
        guard let expect = object["expect"]?.objectValue else { return }
        try checkFields(expect, [FieldSpec("status", .any, "status or \"4xx\""), FieldSpec("reason", .stringOrNull, "reason")]) { field, message in
            fail("expect." + (field ?? ""), message)
        }
        try checkStatus(expect, fail: fail)
    }

    /// `expect.status` as the run reads it (a template is known only then).
    private static func checkStatus(_ expect: JSONObject, fail: (String?, String) -> ScenarioFileError) throws(ScenarioFileError) {
        guard let status = expect["status"], !isTemplate(status) else { return }
        do throws(StepFailure) { _ = try StatusPattern(status) } catch { throw fail("expect.status", error.message) }
    }

    /// Live Activity and channel names: a new one is a plain name not taken yet, one used must
    /// exist by then.
    private func checkNames(
        _ kind: StepKind, _ object: JSONObject, _ known: VariableCheck,
        fail: (String?, String) -> ScenarioFileError
    ) throws(ScenarioFileError) {
        func made(_ field: String, _ taken: Set<String>, _ what: String) throws(ScenarioFileError) {
            guard let name = object[field]?.stringValue else { return }
            if let problem = AliasRule.problem(name, what: "a name") { throw fail(field, problem) }
            if taken.contains(name) { throw fail(field, "\(what) \"\(name)\" exists already (give this one another name)") }
        }
        func used(_ field: String, _ value: JSONValue?, _ known: Set<String>, _ what: String, _ maker: String) throws(ScenarioFileError) {
            guard let name = value?.stringValue, !Self.isTemplate(.string(name)) else { return }
            guard known.contains(name) else { throw fail(field, "no \(what) \"\(name)\" exists at this point (\(maker) names one)") }
        }
        let activityMaker = "startActivity, or a push with startsActivity,"
        switch kind {
        case .startActivity:
            try made("activity", known.activitiesSoFar, "an activity")
            try used("channel", object["channel"], known.channelsSoFar, "channel", "a createChannel step")
        case .createChannel:
            try made("channel", known.channelsSoFar, "a channel")
        case .push:
            try made("startsActivity", known.activitiesSoFar, "an activity")
            try used("activity", object["activity"], known.activitiesSoFar, "activity", activityMaker)
        case .endActivity, .dismissActivity:
            try used("activity", object["activity"], known.activitiesSoFar, "activity", activityMaker)
        case .broadcast:
            try used("channel", object["channel"], known.channelsSoFar, "channel", "a createChannel step")
        case .waitFor, .expect:
            try used("activity.name", object["activity"]?["name"], known.activitiesSoFar, "activity", activityMaker)
        default:
            break
        }
    }

    /// A new device's alias; `isDeviceID`: the emulator's id for it too (no `deviceId` given).
    private static func checkAlias(
        _ alias: String, field: String, isDeviceID: Bool,
        fail: (String?, String) -> ScenarioFileError
    ) throws(ScenarioFileError) {
        if let problem = AliasRule.problem(alias) { throw fail(field, problem) }
        if isDeviceID, !DeviceRegistry.isValidDeviceID(alias) {
            throw fail(field, "is also the device id when no \"deviceId\" is given, and \(DeviceRegistry.deviceIDRule)")
        }
    }

    private func checkSince(_ object: JSONObject, fail: (String?, String) -> ScenarioFileError) throws(ScenarioFileError) {
        guard let since = object["since"] else { return }
        if since.intValue != nil { return }
        if let text = since.stringValue, text == "start" || text == "step" || text.contains("${") || Int64(text) != nil { return }
        throw fail("since", "must be \"start\", \"step\", a time in ms, or a ${variable} holding one")
    }
}
