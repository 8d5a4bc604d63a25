public import APNsCore

/// Fault rules as JSON (README, "Faults"):
/// `{"match": {"token", "topic", "pushType", "priority", "environment", "connectionId"},
///   "action": {"status", "reason"} | {"rstStream": CODE} | {"goAway": {"reason", "lastStreamId", "errorCode"}}
///             | {"close": true} | {"maxConcurrentStreams": N} | {"unavailable": true}, plus "delayMs", "jitterMs",
///   "times", "after", "probability", "seed"}`
public enum FaultJSON {
    public static func rule(_ r: FaultInjectionRule) -> JSONValue {
        var match = JSONObject()
        if let v = r.match.token { match["token"] = .string(v) }
        if let v = r.match.topic { match["topic"] = .string(v) }
        if let v = r.match.pushType { match["pushType"] = .string(v) }
        if let v = r.match.priority { match["priority"] = .int(Int64(v)) }
        if let v = r.match.environment { match["environment"] = .string(v.rawValue) }
        if let v = r.match.connectionID { match["connectionId"] = .int(Int64(v)) }
        var action = JSONObject()
        switch r.action.kind {
        case .none: break
        case .respond(let status, let reason):
            action["status"] = .int(Int64(status))
            action["reason"] = .string(reason)
        case .resetStream(let code): action["rstStream"] = .int(Int64(code))
        case .goAway(let reason, let last, let code):
            var goAway = JSONObject()
            if let reason { goAway["reason"] = .string(reason) }
            if let last { goAway["lastStreamId"] = .int(Int64(last)) }
            goAway["errorCode"] = .int(Int64(code))
            action["goAway"] = .object(goAway)
        case .closeConnection: action["close"] = true
        case .maxConcurrentStreams(let n): action["maxConcurrentStreams"] = .int(Int64(n))
        }
        if r.action.delayMs > 0 { action["delayMs"] = .int(Int64(r.action.delayMs)) }
        if r.action.jitterMs > 0 { action["jitterMs"] = .int(Int64(r.action.jitterMs)) }
        return [
            "id": .string(r.id), "match": .object(match), "action": .object(action),
            "times": r.times.map { .int(Int64($0)) } ?? .null, "after": .int(Int64(r.after)),
            "probability": r.probability.map(JSONValue.double) ?? .null,
            "seed": r.seed.map { .int(Int64(bitPattern: $0)) } ?? .null,
            "matched": .int(Int64(r.matched)), "fired": .int(Int64(r.fired)),
        ]
    }

    /// A rule from its JSON (the admin API's and `--faults` files'); throws `AdminError` (400).
    public static func parse(_ o: JSONObject) throws -> FaultInjectionRule {
        try o.refuseUnknownFields(["id", "match", "action", "times", "after", "probability", "seed"], in: "a fault rule")
        var match = FaultMatch()
        if let m = o["match"] {
            guard let object = m.objectValue else { throw AdminError(400, "\"match\" must be an object") }
            for (key, value) in object {
                switch key {
                case "token": match.token = try string(value, "match.token")
                case "topic": match.topic = try string(value, "match.topic")
                case "pushType":
                    let text = try string(value, "match.pushType")
                    guard PushType(rawValue: text) != nil else {
                        throw AdminError(400, "match.pushType must be one of \(PushType.allCases.map(\.rawValue).joined(separator: ", "))")
                    }
                    match.pushType = text
                case "priority":
                    guard let p = value.intValue, [1, 5, 10].contains(p) else { throw AdminError(400, "match.priority must be 10, 5 or 1") }
                    match.priority = Int(p)
                case "environment":
                    guard let env = value.stringValue.flatMap(APNsEnvironment.init(rawValue:)) else {
                        throw AdminError(400, "match.environment must be sandbox or production")
                    }
                    match.environment = env
                case "connectionId":
                    guard let id = value.intValue, id > 0 else { throw AdminError(400, "match.connectionId must be a positive number") }
                    match.connectionID = UInt64(id)
                default:
                    try object.refuseUnknownFields(["token", "topic", "pushType", "priority", "environment", "connectionId"], in: "match")
                }
            }
        }
        guard let a = o["action"]?.objectValue else {
            throw AdminError(400, "\"action\" (an object) is required, e.g. {\"status\": 500, \"reason\": \"InternalServerError\"}")
        }
        try a.refuseUnknownFields(
            ["status", "reason", "rstStream", "goAway", "close", "maxConcurrentStreams", "unavailable", "delayMs", "jitterMs"], in: "action")
        let delay = try milliseconds(a["delayMs"], "action.delayMs")
        let jitter = try milliseconds(a["jitterMs"], "action.jitterMs")
        var kinds: [FaultAction.Kind] = []
        if a["status"] != nil || a["reason"] != nil {
            guard let status = a["status"]?.intValue, (400...599).contains(status) else {
                throw AdminError(400, "action.status must be an error status from 400 to 599 (a success needs no rule)")
            }
            let reason = try a["reason"].map { try text($0, "action.reason") } ?? defaultReason(Int(status))
            kinds.append(.respond(status: Int(status), reason: reason))
        }
        if let value = a["rstStream"] {
            guard let code = value.intValue, code >= 0, code <= Int64(UInt32.max) else {
                throw AdminError(400, "action.rstStream must be an HTTP/2 error code (e.g. 2 INTERNAL_ERROR, 7 REFUSED_STREAM)")
            }
            kinds.append(.resetStream(errorCode: UInt32(code)))
        }
        if let value = a["goAway"] {
            guard let g = value.objectValue else { throw AdminError(400, "action.goAway must be an object") }
            try g.refuseUnknownFields(["reason", "lastStreamId", "errorCode"], in: "action.goAway")
            let reason = try g["reason"].map { try text($0, "action.goAway.reason") }
            var last: Int32?
            if let l = g["lastStreamId"] {
                guard let v = l.intValue, v >= 0, v <= Int64(Int32.max) else {
                    throw AdminError(400, "action.goAway.lastStreamId must be a stream id")
                }
                // A client opens odd streams; a GOAWAY naming an even one is not sent by nghttp2.
                guard v == 0 || v % 2 == 1 else {
                    throw AdminError(
                        400, "action.goAway.lastStreamId must be 0 or odd (a stream a client opens: 1, 3, 5, …), not \(v)")
                }
                last = Int32(v)
            }
            var code: Int64 = 0
            if let value = g["errorCode"] {
                guard let v = value.intValue, v >= 0, v <= Int64(UInt32.max) else {
                    throw AdminError(400, "action.goAway.errorCode must be an HTTP/2 error code (a whole number, e.g. 0 NO_ERROR)")
                }
                code = v
            }
            kinds.append(.goAway(reason: reason, lastStreamID: last, errorCode: UInt32(code)))
        }
        if try flag(a["close"], "action.close") { kinds.append(.closeConnection) }
        if let value = a["maxConcurrentStreams"] {
            guard let n = value.intValue, n >= 0, n <= Int64(UInt32.max) else {
                throw AdminError(400, "action.maxConcurrentStreams must be a number ≥ 0")
            }
            kinds.append(.maxConcurrentStreams(UInt32(n)))
        }
        if try flag(a["unavailable"], "action.unavailable") { kinds.append(.respond(status: 503, reason: "ServiceUnavailable")) }
        guard kinds.count <= 1 else {
            throw AdminError(
                400, "choose one of status/reason, rstStream, goAway, close, maxConcurrentStreams, unavailable (delayMs combines with any)")
        }
        guard !kinds.isEmpty || delay > 0 || jitter > 0 else {
            throw AdminError(
                400, "the action does nothing: give status/reason, rstStream, goAway, close, maxConcurrentStreams, unavailable, delayMs or jitterMs")
        }
        var times: Int?
        if let t = o["times"], t != .null {
            guard let v = t.intValue, v > 0 else { throw AdminError(400, "\"times\" must be a whole number > 0") }
            times = Int(v)
        }
        var after = 0
        if let t = o["after"], t != .null {
            guard let v = t.intValue, v >= 0 else { throw AdminError(400, "\"after\" must be a whole number ≥ 0") }
            after = Int(v)
        }
        var probability: Double?
        if let p = o["probability"], p != .null {
            guard let v = p.numberValue, v >= 0, v <= 1 else { throw AdminError(400, "\"probability\" must be between 0 and 1") }
            probability = v
        }
        var seed: UInt64?
        if let sv = o["seed"], sv != .null {
            guard let v = sv.intValue else { throw AdminError(400, "\"seed\" must be a whole number") }
            seed = UInt64(bitPattern: v)
        }
        let id = try o["id"].map { try string($0, "id") } ?? ""
        // Ids go into log lines, /metrics labels and paths: no control characters, not too long.
        guard id.utf8.count <= 128, !hasControlCharacters(id) else {
            throw AdminError(400, "\"id\" is at most 128 bytes, without control characters (line breaks, tabs)")
        }
        return FaultInjectionRule(
            id: id, match: match, action: FaultAction(kind: kinds.first ?? .none, delayMs: delay, jitterMs: jitter),
            times: times, after: after, probability: probability, seed: seed)
    }

    /// What a rule answers that APNs never would: a reason it does not send (a misspelling is
    /// the likely cause), or one it sends with another status. Taken all the same (a rule may
    /// mean it), and said: in the answer that adds the rule and in the log.
    public static func warnings(_ rule: FaultInjectionRule) -> [String] {
        guard case .respond(let status, let reason) = rule.action.kind else { return [] }
        guard let known = APNsReason(appleName: reason) else {
            let near = APNsReason.allCases.first { $0.rawValue.lowercased() == reason.lowercased() }
            return [
                "APNs sends no reason \"\(reason)\"" + (near.map { " (did you mean \($0.rawValue)?)" } ?? "")
                    + "; a client that knows Apple's reasons may not recognise it"
            ]
        }
        guard known.status == status else {
            // The reason the emulator gives a rule without one: which to give instead.
            if reason == defaultReason(status), let example = APNsReason.allCases.first(where: { $0.status == status }) {
                return [
                    "APNs sends \(reason) with status \(known.status), not \(status) (the default for a rule without a reason): give one of Apple's for \(status), such as \(example.rawValue)"
                ]
            }
            return ["APNs sends \(reason) with status \(known.status), not \(status)"]
        }
        return []
    }

    private static func string(_ value: JSONValue, _ name: String) throws -> String {
        guard let text = value.stringValue else { throw AdminError(400, "\(name) must be a string") }
        return text
    }

    /// A reason goes into the answer's body, log lines and /metrics labels: no control characters.
    private static func text(_ value: JSONValue, _ name: String) throws -> String {
        let text = try string(value, name)
        guard !hasControlCharacters(text), text.utf8.count <= 256 else {
            throw AdminError(
                400, "\(name) must be at most 256 bytes, without control characters (line breaks, tabs, NUL): APNs's reasons are short names")
        }
        return text
    }

    private static func hasControlCharacters(_ text: String) -> Bool {
        text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
    }

    /// A switch of an action: absent is off; a string "true" is not taken for true.
    private static func flag(_ value: JSONValue?, _ name: String) throws -> Bool {
        guard let value, value != .null else { return false }
        guard let on = value.boolValue else { throw AdminError(400, "\(name) must be true or false") }
        return on
    }

    private static func milliseconds(_ value: JSONValue?, _ name: String) throws -> Int {
        guard let value, value != .null else { return 0 }
        guard let ms = value.intValue, ms >= 0, ms <= 600_000 else { throw AdminError(400, "\(name) must be milliseconds from 0 to 600000") }
        return Int(ms)
    }

    /// Apple's reason for a status when a rule gives only the status.
    static func defaultReason(_ status: Int) -> String {
        switch status {
        case 500: return "InternalServerError"
        case 503: return "ServiceUnavailable"
        case 429: return "TooManyRequests"
        case 410: return "Unregistered"
        case 413: return "PayloadTooLarge"
        case 403: return "Forbidden"
        case 405: return "MethodNotAllowed"
        case 404: return "BadPath"
        default: return "InternalServerError"
        }
    }
}
