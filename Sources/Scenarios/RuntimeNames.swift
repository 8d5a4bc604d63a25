/// The `${…}` names the runner fills in from what happened so far, as opposed to `--var`,
/// environment, scenario `variables` and saved values. The file check knows them too, so a
/// misspelt one is a file error, not a failure halfway through.
enum RuntimeName: Equatable {
    /// `device.ALIAS.FIELD`: the device as the emulator has it now.
    case device(alias: String, field: String)
    /// `device.ALIAS.pushToStart.TYPE`: the push-to-start token of an ActivityAttributes type
    /// its apps declared.
    case pushToStart(alias: String, attributesType: String)
    /// `activity.NAME.FIELD`: a named Live Activity as the device has it now.
    case activity(name: String, field: String)
    /// `channel.NAME.FIELD`: a broadcast channel a createChannel step made.
    case channel(name: String, field: String)
    /// `lastBroadcast.FIELD`: the last broadcast step's answer.
    case lastBroadcast(String)
    /// `lastPush.FIELD`, `lastRun.FIELD`, `lastHttp.FIELD`.
    case lastPush(String), lastRun(String), lastHttp(String)
    /// `lastHttp.json:/pointer`: a value in the last HTTP answer's JSON body.
    case lastHttpJSON(pointer: String)
    /// `clock.nowMs`: the emulator's time now.
    case clockNow
    /// `emulator.FIELD`: where the emulator is (adminUrl, host, port, …).
    case emulator(String)

    static let deviceFields = ["token", "id", "userId", "bundleId", "environment", "pushToStart.TYPE"]
    static let activityFields = ["id", "pushToken", "channel", "state", "deviceId", "bundleId"]
    static let channelFields = ["id", "bundleId", "environment"]
    static let broadcastFields = ["requestId", "status", "reason"]
    static let pushFields = ["apnsId", "uniqueId", "status", "reason", "token"]
    static let runFields = ["exitStatus", "stdout", "stderr"]
    static let httpFields = ["status", "body"]
    static let emulatorFields = ["adminUrl", "adminToken", "host", "port", "productionPort", "ca", "keyPath", "keyId", "teamId", "topic"]
    static let namespaces = ["device", "activity", "channel", "lastPush", "lastBroadcast", "lastRun", "lastHttp", "clock", "emulator"]

    /// nil: not a runtime name (a plain variable). Throws for a runtime namespace with a field
    /// it does not have.
    static func parse(_ name: String) throws(Template.SyntaxError) -> RuntimeName? {
        guard let dot = name.firstIndex(of: "."), namespaces.contains(String(name[..<dot])) else { return nil }
        let space = String(name[..<dot])
        let rest = String(name[name.index(after: dot)...])
        func field(_ allowed: [String]) throws(Template.SyntaxError) -> String {
            guard allowed.contains(rest) else {
                throw Template.SyntaxError(message: "${\(name)}: \(space) has \(allowed.joined(separator: ", "))")
            }
            return rest
        }
        switch space {
        case "device":
            // Aliases have no dots, so the first one ends it; a type name may have some.
            guard let dot = rest.firstIndex(of: "."), !rest[..<dot].isEmpty else {
                throw Template.SyntaxError(message: "${\(name)}: write ${device.ALIAS.FIELD} (FIELD: \(deviceFields.joined(separator: ", ")))")
            }
            let alias = String(rest[..<dot])
            let field = String(rest[rest.index(after: dot)...])
            if field.hasPrefix("pushToStart.") && field.count > "pushToStart.".count {
                return .pushToStart(alias: alias, attributesType: String(field.dropFirst("pushToStart.".count)))
            }
            guard deviceFields.contains(field) else {
                throw Template.SyntaxError(message: "${\(name)}: a device has \(deviceFields.joined(separator: ", "))")
            }
            return .device(alias: alias, field: field)
        case "activity", "channel":
            let fields = space == "activity" ? activityFields : channelFields
            guard let dot = rest.firstIndex(of: "."), !rest[..<dot].isEmpty, fields.contains(String(rest[rest.index(after: dot)...])) else {
                throw Template.SyntaxError(
                    message: "${\(name)}: write ${\(space).NAME.FIELD} (FIELD: \(fields.joined(separator: ", ")))")
            }
            let (named, field) = (String(rest[..<dot]), String(rest[rest.index(after: dot)...]))
            return space == "activity" ? .activity(name: named, field: field) : .channel(name: named, field: field)
        case "lastBroadcast": return .lastBroadcast(try field(broadcastFields))
        case "lastPush": return .lastPush(try field(pushFields))
        case "lastRun": return .lastRun(try field(runFields))
        case "lastHttp":
            if rest.hasPrefix("json:") { return .lastHttpJSON(pointer: String(rest.dropFirst(5))) }
            return .lastHttp(try field(httpFields + ["json:/POINTER"]))
        case "clock":
            _ = try field(["nowMs"])
            return .clockNow
        default:
            return .emulator(try field(emulatorFields))
        }
    }
}
