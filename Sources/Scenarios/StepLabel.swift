import APNsCore

/// A step's line in the report, from its fields as written (`${device.phone.token}` reads
/// better than the hex it becomes).
extension Step {
    public var label: String {
        if let name { return name }
        let f = fields
        func s(_ key: String) -> String? { f[key].flatMap { ScenarioParser.scalarText($0) } }
        let on = deviceAlias.map { " on \($0)" } ?? ""
        switch kind {
        case .device:
            let details = [s("bundleId"), s("environment"), s("authorization"), s("appState")].compactMap { $0 }
            return "device \(s("alias") ?? "?")" + (details.isEmpty ? "" : " (\(details.joined(separator: ", ")))")
        case .login: return "login \(s("user") ?? "?")\(on)"
        case .switchAccount: return "switch to \(s("user") ?? "?")\(on)"
        case .restore: return "restore \(s("from") ?? "?")'s backup onto \(s("device") ?? "?")"
        case .permit: return "permit \(s("authorization") ?? "authorized")\(on)"
        case .appState: return "appState \(s("state") ?? "?")\(on)"
        case .tap: return "tap \(s("apnsId") ?? "the newest notification")\(on)"
        case .advanceClock: return "advanceClock \(s("seconds") ?? "?") s"
        case .sleep: return "sleep \(s("ms") ?? "?") ms"
        case .push:
            let liveActivity = f["activity"] != nil || f["pushToStart"] != nil
            let event = f["payload"]?["aps"]?["event"].flatMap { ScenarioParser.scalarText($0) }
            let type =
                s("pushType") ?? (liveActivity ? "liveactivity" : f["payload"]?["aps"]?["content-available"] != nil ? "background" : "alert")
            let to =
                s("activity").map { "activity \($0)" } ?? s("pushToStart").map { "\(deviceAlias ?? "?")'s push-to-start token (\($0))" }
                ?? deviceAlias ?? s("token").map { short($0) } ?? "?"
            return "push \(type)\(event.map { " \($0)" } ?? "") to \(to)" + (s("priority").map { " priority \($0)" } ?? "")
        case .declareActivities:
            let types = (f["types"]?.arrayValue ?? []).compactMap { ScenarioParser.scalarText($0) }
            return "declareActivities \(types.joined(separator: ", "))\(on)"
        case .startActivity:
            let how = s("channel").map { " on channel \($0)" } ?? s("channelId").map { " on channel \(short($0))" } ?? ""
            return "startActivity \(s("activity") ?? "?") (\(s("attributesType") ?? "?"))\(how)\(on)"
        case .endActivity, .dismissActivity: return "\(kind.rawValue) \(s("activity") ?? "?")"
        case .createChannel: return "createChannel \(s("channel") ?? "?")" + (s("messageStoragePolicy").map { " policy \($0)" } ?? "")
        case .broadcast:
            let event = f["payload"]?["aps"]?["event"].flatMap { ScenarioParser.scalarText($0) }
            return "broadcast\(event.map { " \($0)" } ?? "") on \(s("channel") ?? s("channelId").map { short($0) } ?? "?")"
        case .run:
            let argv = (f["argv"]?.arrayValue ?? []).compactMap { ScenarioParser.scalarText($0) }.joined(separator: " ")
            return "run " + (argv.count > 90 ? String(argv.prefix(89)) + "…" : argv)
        case .http: return "http \((s("method") ?? "GET").uppercased()) \(s("url") ?? "?")"
        case .waitFor where f["activity"] != nil, .expect where f["activity"] != nil:
            return "\(kind.rawValue) \(activityCriteria())"
        case .waitFor, .expectNone:
            let count = s("count").map { $0 == "1" ? "" : "\($0) × " } ?? ""
            return "\(kind.rawValue) \(count)\(criteria("delivery", "backendCall"))"
        case .expect:
            if let checks = f["checks"] {
                return "expect checks crossAccount \(checks["crossAccount"].flatMap { ScenarioParser.scalarText($0) } ?? "?")"
            }
            if f["deliveries"] != nil || f["backendCalls"] != nil {
                return "expect \(s("count") ?? "?") × \(criteria("deliveries", "backendCalls"))"
            }
            let names = ["userId", "token", "tokenNot", "tokenUploadPending", "authorization", "appState", "installed"]
            let parts = names.compactMap { name in f[name].map { "\(name) \(ScenarioParser.scalarText($0) ?? "null")" } }
            return "expect\(on): " + parts.joined(separator: ", ")
        case .save: return "save " + save.map(\.name).joined(separator: ", ")
        default: return kind.rawValue + on
        }
    }

    /// `activity delivery {state stale}` from an `activity` field.
    private func activityCriteria() -> String {
        let object = fields["activity"]?.objectValue ?? JSONObject()
        let parts = object.filter { $0.key != "name" }.map { "\($0.key) \(ScenarioParser.scalarText($0.value) ?? $0.value.serialized())" }
        return "activity \(object["name"].flatMap { ScenarioParser.scalarText($0) } ?? "?")"
            + (parts.isEmpty ? "" : " {" + parts.joined(separator: ", ") + "}")
    }

    /// `delivery {device phone, outcome deferred}` from a criteria field.
    private func criteria(_ deliveryKey: String, _ callKey: String) -> String {
        let (word, object) = fields[deliveryKey].map { ("delivery", $0) } ?? ("backendCall", fields[callKey] ?? .null)
        let parts = (object.objectValue ?? JSONObject()).map { "\($0.key) \(ScenarioParser.scalarText($0.value) ?? $0.value.serialized())" }
        return word + (parts.isEmpty ? "" : " {" + parts.joined(separator: ", ") + "}")
    }
}
