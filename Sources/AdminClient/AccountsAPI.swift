public import JSON

/// The app's half of the chain (issue 10): backends, accounts on devices, the calls apps made
/// to their backends, the cross-account check and the emulator's clock.
extension EmulatorAdminClient {
    /// Sets the hooks the app calls on its own backend (`PUT /api/v1/apps/{bundleId}/backend`):
    /// `{"register": HOOK, "bind": …, "unbind": …, "fetch": …, "addresseePointer": "/uid"}`.
    public func setBackend(bundleID: String, _ backend: JSONValue) throws(EmulatorAdminError) {
        _ = try http.json("PUT", "/api/v1/apps/\(bundleID.queryEncoded)/backend", body: backend)
    }

    public func removeBackend(bundleID: String) throws(EmulatorAdminError) {
        _ = try http.json("DELETE", "/api/v1/apps/\(bundleID.queryEncoded)/backend")
    }

    /// Logs `userID` in on the device (the apps bind; switching accounts unbinds first).
    /// Returns who was logged in before.
    @discardableResult
    public func login(deviceID: String, userID: String) throws(EmulatorAdminError) -> String? {
        let reply = try http.json("POST", "/api/v1/devices/\(deviceID.queryEncoded)/login", body: ["userId": .string(userID)])
        return reply["previousUserId"]?.stringValue
    }

    /// Logs the account out (the apps unbind). Returns who was logged in (nil: nobody).
    @discardableResult
    public func logout(deviceID: String) throws(EmulatorAdminError) -> String? {
        try http.json("POST", "/api/v1/devices/\(deviceID.queryEncoded)/logout")["previousUserId"]?.stringValue
    }

    /// Restores `fromDeviceID`'s backup onto `deviceID`: its apps, with new tokens.
    public func restore(deviceID: String, fromDeviceID: String) throws(EmulatorAdminError) {
        _ = try http.json("POST", "/api/v1/devices/\(deviceID.queryEncoded)/restore", body: ["fromDeviceId": .string(fromDeviceID)])
    }

    /// APNs replaces the app's tokens (the app registers again).
    public func rotate(deviceID: String, bundleID: String) throws(EmulatorAdminError) {
        _ = try http.json("POST", "/api/v1/devices/\(deviceID.queryEncoded)/apps/\(bundleID.queryEncoded)/rotate")
    }

    /// The calls apps made to their backends, oldest first: one device's, or every device's.
    public func backendCalls(deviceID: String? = nil, hook: String? = nil, bundleID: String? = nil) throws(EmulatorAdminError) -> [BackendCall] {
        var items: [(String, String)] = []
        if let hook { items.append(("hook", hook)) }
        if let bundleID { items.append(("bundleId", bundleID)) }
        let path = deviceID.map { "/api/v1/devices/\($0.queryEncoded)/backend-calls" } ?? "/api/v1/backend-calls"
        return (try http.json("GET", path + Self.query(items))["calls"]?.arrayValue ?? []).map(BackendCall.init)
    }

    /// The checks (`GET /api/v1/checks`): cross-account deliveries, pushes devices ignored. Its 409 in strict mode is an answer
    /// here, not an error: `ok` says whether it passed.
    public func checks() throws(EmulatorAdminError) -> CheckReport {
        let reply = try http.send("GET", "/api/v1/checks")
        guard reply.status == 200 || reply.status == 409 else { throw reply.error }
        return CheckReport(reply.json)
    }

    /// The emulator's time: it runs ahead of the real one by what `advanceClock` added.
    public func clock() throws(EmulatorAdminError) -> ClockReading {
        ClockReading(try http.json("GET", "/api/v1/clock"))
    }

    /// Moves the emulator's time ahead (budgets refill, expirations pass, held pushes go out).
    @discardableResult
    public func advanceClock(seconds: Double) throws(EmulatorAdminError) -> ClockReading {
        ClockReading(try http.json("POST", "/api/v1/clock", body: ["advanceSeconds": .double(seconds)]))
    }

    /// `GET /api/v1/info`: version, addresses (`sandbox`, `production`, `listen`, `caFile`), counts.
    /// `GET /api/v1/info`, which must be an emulator's: any server that answers 200 with JSON
    /// to everything would otherwise pass for one (a scenario against it "passed").
    public func info() throws(EmulatorAdminError) -> JSONValue {
        let info = try http.json("GET", "/api/v1/info")
        guard info["version"]?.stringValue != nil, info["addresses"]?.objectValue != nil, info["counts"]?.objectValue != nil else {
            throw EmulatorAdminError(status: 200, message: Self.notInfo(info))
        }
        return info
    }

    /// What `info()` throws for JSON that is not an emulator's information.
    public static func notInfo(_ json: JSONValue) -> String {
        "JSON without the \"version\", \"addresses\" and \"counts\" of an emulator's /api/v1/info: \(json.serialized().prefix(80))"
    }

    /// Any admin request this client has no typed method for; the JSON answer when 2xx.
    public func request(_ method: String, _ path: String, body: JSONValue? = nil) throws(EmulatorAdminError) -> JSONValue {
        try http.json(method, path, body: body)
    }
}

/// One call an app made to its backend (a rendered hook) and how it went.
public struct BackendCall: Sendable, CustomStringConvertible {
    public var id: Int64
    public var deviceID: String?
    public var bundleID: String?
    /// `register`, `bind`, `unbind` or `fetch`.
    public var hook: String
    public var method: String?
    public var url: String
    /// The last answer's status (nil: none yet, or none at all).
    public var status: Int?
    /// `pending`, `retrying`, `done`, `failed` or `dropped` (nil when the emulator did not say).
    public var state: String?
    public var error: String?
    public var attempts: Int
    /// Who was logged in and which token the call was about.
    public var userID: String?
    public var token: String?
    /// When it was queued (ms since the epoch, emulator time).
    public var atMs: Int64?
    /// The call as the admin API sent it, for fields this type does not name.
    public var json: JSONValue

    init(_ value: JSONValue) {
        id = value["id"]?.intValue ?? 0
        deviceID = value["deviceId"]?.stringValue
        bundleID = value["bundleId"]?.stringValue
        hook = value["hook"]?.stringValue ?? ""
        method = value["method"]?.stringValue
        url = value["url"]?.stringValue ?? ""
        status = value["status"]?.intValue.map(Int.init)
        state = value["state"]?.stringValue
        error = value["error"]?.stringValue
        attempts = Int(value["attempts"]?.intValue ?? 0)
        userID = value["userId"]?.stringValue
        token = value["token"]?.stringValue
        atMs = value["atMs"]?.intValue
        json = value
    }

    public var description: String {
        var text = "#\(id) \(hook) \(method ?? "?") \(url)"
        if let token { text += " token \(token.prefix(12))…" }
        if let userID { text += " user \(userID)" }
        text += " → " + (status.map(String.init) ?? "no answer") + " (\(state ?? "state unknown"))"
        if let error { text += ": \(error)" }
        return text
    }
}

/// `GET /api/v1/checks`: the cross-account deliveries the emulator saw, and the pushes devices
/// ignored.
public struct CheckReport: Sendable {
    public struct Failure: Sendable {
        /// `crossAccount` or `ignoredPush`.
        public var check: String
        public var apnsID: String
        public var deviceID: String
        public var bundleID: String
        public var userID: String?
        public var addressee: String
        /// The ignored push's type (nil for a cross-account delivery).
        public var pushType: String?
        public var at: String
        public var message: String
    }

    public var ok: Bool
    /// How many there were (the list keeps the newest ones).
    public var crossAccountDeliveries: Int
    /// Pushes answered 200 that the device ignored (the list keeps the newest ones).
    public var ignoredPushes: Int
    /// Oldest first.
    public var failures: [Failure]

    init(_ value: JSONValue) {
        ok = value["ok"]?.boolValue ?? false
        crossAccountDeliveries = Int(value["crossAccountDeliveries"]?.intValue ?? 0)
        ignoredPushes = Int(value["ignoredPushes"]?.intValue ?? 0)
        failures = (value["failures"]?.arrayValue ?? []).map { f in
            Failure(
                check: f["check"]?.stringValue ?? "", apnsID: f["apnsId"]?.stringValue ?? "",
                deviceID: f["deviceId"]?.stringValue ?? "", bundleID: f["bundleId"]?.stringValue ?? "",
                userID: f["userId"]?.stringValue, addressee: f["addressee"]?.stringValue ?? "",
                pushType: f["pushType"]?.stringValue, at: f["at"]?.stringValue ?? "", message: f["message"]?.stringValue ?? "")
        }
    }
}

/// The emulator's clock.
public struct ClockReading: Sendable {
    public var nowMs: Int64
    /// How far it runs ahead of the real time.
    public var offsetMs: Int64

    init(_ value: JSONValue) {
        nowMs = value["nowMs"]?.intValue ?? 0
        offsetMs = value["offsetMs"]?.intValue ?? 0
    }
}
