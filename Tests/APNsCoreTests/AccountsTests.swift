import APNsCore
import Locking
import Testing

/// A device fixture whose app has a backend; the hook calls the world decides are collected
/// as `EmulatorState` hands them out (after the lock).
final class BackendFixture: @unchecked Sendable {
    let device: DeviceFixture
    private let collected = Locked<[BackendIntent]>([])

    static let hooks: JSONValue = [
        "register": ["url": "http://127.0.0.1:9/devices/{{deviceId}}", "body": ["token": "{{token}}", "user": "{{userId}}"]],
        "bind": ["url": "http://127.0.0.1:9/bind", "body": ["token": "{{token}}", "user": "{{userId}}"]],
        "unbind": ["url": "http://127.0.0.1:9/unbind", "body": ["token": "{{token}}", "user": "{{userId}}"]],
        "fetch": ["url": "http://127.0.0.1:9/messages/{{payload:/messageId}}", "method": "GET"],
        "addresseePointer": "/uid",
    ]

    init(settings: AppSettings = AppSettings(), options: DeliveryOptions = DeliveryOptions(), connect: Bool = true) throws {
        device = try DeviceFixture(options: options, settings: settings) { [collected] intents in collected.withLock { $0 += intents } }
        let backend = try AppBackend.parse(Self.hooks)
        try device.base.state.withWorld { world throws(RegistryError) in try world.setBackend(backend, bundleID: "com.example.app") }
    }

    var state: EmulatorState { device.base.state }
    var now: Int64 { device.now }

    /// The hooks called since the last look, as `hook user token` lines.
    func calls() -> [String] {
        collected.withLock { intents in
            defer { intents.removeAll() }
            return intents.map { "\($0.hook.rawValue) \($0.values.userID ?? "-") \($0.values.token ?? "-")" }
        }
    }

    /// The `{{apnsId}}` each hook called since the last look was given.
    func apnsIDs() -> [String?] {
        collected.withLock { intents in
            defer { intents.removeAll() }
            return intents.map(\.values.apnsID)
        }
    }

    func rendered() -> [RenderedHook] {
        collected.withLock { intents in
            defer { intents.removeAll() }
            return intents.map { intent in
                var values = intent.values
                if let payload = intent.payload { values.payload = try? JSONValue.parse(payload) }
                return HookTemplate.render(intent.backend.hooks[intent.hook]!, values)
            }
        }
    }

    func login(_ user: String) throws {
        try state.withWorld { world throws(DeviceRequestError) in _ = try world.login(deviceID: "phone", userID: user) }
    }

    func logout() throws -> String? {
        try state.withWorld { world throws(DeviceRequestError) in try world.logout(deviceID: "phone") }
    }

    func setApp(_ appState: AppState? = nil, authorization: Authorization? = nil) throws {
        let now = self.now
        _ = try state.withWorld { world throws(DeviceRequestError) in
            try world.updateApp(
                deviceID: "phone", bundleID: "com.example.app", appState: appState, authorization: authorization,
                backgroundMode: nil, nowMs: now)
        }
    }

    var token: String {
        state.withWorld { $0.registry.devices["phone"]?.apps["com.example.app"]?.tokens[.app] ?? "" }
    }
}

@Suite("Accounts and the app's backend hooks (docs/device-model.md)")
struct AccountsTests {
    @Test func aTokenReceivedWhileLoggedOutIsUploadedAtLogin() throws {
        let f = try BackendFixture()
        let token = f.token
        #expect(f.calls().isEmpty, "registered while logged out: nothing is uploaded yet")
        #expect(f.state.withWorld { $0.registry.devices["phone"]?.apps["com.example.app"]?.uploadPending } == true)
        try f.login("alice")
        #expect(f.calls() == ["register alice \(token)", "bind alice \(token)"])
        #expect(f.state.withWorld { $0.registry.devices["phone"]?.apps["com.example.app"]?.uploadPending } == false)
    }

    @Test func everyLaunchRegistersAgainWhileLoggedIn() throws {
        let f = try BackendFixture()
        try f.login("alice")
        _ = f.calls()
        try f.setApp(.terminated)
        try f.setApp(.suspended)
        #expect(f.calls().isEmpty, "quitting and suspending are not launches")
        try f.setApp(.notRunning)
        try f.setApp(.foreground)
        #expect(f.calls() == ["register alice \(f.token)"])
        try f.device.connect()
        #expect(f.calls() == ["register alice \(f.token)"], "a reconnect registers the device's apps again")
    }

    @Test func anAppInstalledButNeverOpenedRegistersAtItsFirstLaunch() throws {
        let f = try BackendFixture()
        try f.login("alice")
        _ = f.calls()
        let now = f.now
        let notOpened = AppRegistration(
            bundleID: "com.example.app", environment: .sandbox,
            settings: AppSettings(appState: .notRunning), kinds: [.app])
        _ = try f.state.withWorld { world throws(DeviceRequestError) in try world.install(notOpened, deviceID: "phone", nowMs: now) }
        #expect(f.calls().isEmpty)
        try f.setApp(.background)
        #expect(f.calls() == ["register alice \(f.token)"])
    }

    @Test func deniedPermissionStillRegistersAndUploads() throws {
        let f = try BackendFixture(settings: AppSettings(authorization: .denied))
        try f.login("alice")
        #expect(f.calls() == ["register alice \(f.token)", "bind alice \(f.token)"])
    }

    @Test func switchingAccountsIsUnbindThenBind() throws {
        let f = try BackendFixture()
        try f.login("alice")
        _ = f.calls()
        try f.login("bob")
        #expect(f.calls() == ["unbind alice \(f.token)", "bind bob \(f.token)"])
        try f.login("bob")
        #expect(f.calls().isEmpty, "logging in again as the same account changes nothing")
        #expect(try f.logout() == "bob")
        #expect(f.calls() == ["unbind bob \(f.token)"])
        #expect(try f.logout() == nil)
        #expect(f.calls().isEmpty)
    }

    @Test func aRotatedTokenIsUploadedAtOnce() throws {
        let f = try BackendFixture()
        try f.login("alice")
        let old = f.token
        _ = f.calls()
        let now = f.now
        _ = try f.state.withWorld { world throws(DeviceRequestError) in
            try world.rotateTokens(deviceID: "phone", bundleID: "com.example.app", nowMs: now)
        }
        #expect(f.token != old)
        #expect(f.calls() == ["register alice \(f.token)"])
    }

    @Test func aBackgroundPushThatRunsFetchesWhatItPointsTo() throws {
        let f = try BackendFixture()
        try f.login("alice")
        _ = f.calls()
        let response = try f.device.push(
            #"{"aps":{"content-available":1},"messageId":"m 1"}"#,
            headers: [("apns-push-type", "background"), ("apns-priority", "5")])
        #expect(f.calls().isEmpty, "no fetch before the device has it")
        try f.device.ack(response.deviceFrames)
        let fetch = f.rendered()
        #expect(fetch.map(\.url) == ["http://127.0.0.1:9/messages/m%201"])
        #expect(fetch.first?.method == "GET" && fetch.first?.body == nil)
        // An alert that runs no app code does not fetch.
        try f.device.ack(try f.device.push(#"{"aps":{"alert":"hi"},"messageId":"m2"}"#).deviceFrames)
        #expect(f.calls().isEmpty)
    }

    @Test func throttledBackgroundPushesNeverFetch() throws {
        var options = DeliveryOptions()
        options.backgroundBudgetPerHour = 1
        let f = try BackendFixture(options: options)
        try f.login("alice")
        _ = f.calls()
        let background = [("apns-push-type", "background"), ("apns-priority", "5")]
        try f.device.ack(try f.device.push(#"{"aps":{"content-available":1},"messageId":"a"}"#, headers: background).deviceFrames)
        let held = try f.device.push(#"{"aps":{"content-available":1},"messageId":"b"}"#, headers: background)
        #expect(f.device.record(held)?.outcome == .deferred)
        #expect(f.rendered().map(\.url) == ["http://127.0.0.1:9/messages/a"])
    }

    @Test func aTapFetches() throws {
        let f = try BackendFixture()
        try f.login("alice")
        let response = try f.device.push(#"{"aps":{"alert":"hi"},"messageId":"m9","uid":"alice"}"#)
        try f.device.ack(response.deviceFrames)
        _ = f.calls()
        let now = f.now
        _ = try f.state.withWorld { world throws(DeviceRequestError) in
            try world.tap(deviceID: "phone", apnsID: response.apnsID, nowMs: now)
        }
        #expect(f.rendered().map(\.url) == ["http://127.0.0.1:9/messages/m9"])
        // The tap's fetch names the notification tapped (`{{apnsId}}`).
        let second = try f.device.push(#"{"aps":{"alert":"again"},"messageId":"m10","uid":"alice"}"#)
        try f.device.ack(second.deviceFrames)
        _ = f.calls()
        _ = try f.state.withWorld { world throws(DeviceRequestError) in
            try world.tap(deviceID: "phone", apnsID: second.apnsID, nowMs: now)
        }
        #expect(f.apnsIDs() == [second.apnsID])
    }

    @Test func aPushForAnotherAccountIsFlagged() throws {
        let f = try BackendFixture()
        try f.login("bob")
        let forAlice = try f.device.push(#"{"aps":{"alert":"for alice"},"uid":"alice"}"#)
        try f.device.ack(forAlice.deviceFrames)
        let record = try #require(f.device.record(forAlice))
        #expect(record.userID == "bob" && record.addressee == "alice" && record.crossAccount)
        let forBob = try f.device.push(#"{"aps":{"alert":"for bob"},"uid":"bob"}"#)
        try f.device.ack(forBob.deviceFrames)
        #expect(f.device.record(forBob)?.crossAccount == false)
        #expect(f.device.record(forBob)?.userID == "bob")
        // An empty addressee names nobody.
        for nobody in ["\"\"", "\"  \""] {
            let forNobody = try f.device.push(#"{"aps":{"alert":"for whom?"},"uid":"# + nobody + "}")
            try f.device.ack(forNobody.deviceFrames)
            #expect(f.device.record(forNobody)?.crossAccount == false && f.device.record(forNobody)?.addressee == nil, "\(nobody)")
        }
        let (count, kept) = f.state.withWorld { ($0.counters.crossAccountDeliveries, $0.crossAccountDeliveries) }
        #expect(count == 1)
        #expect(kept.map(\.apnsID) == [forAlice.apnsID])
        // Nobody logged in: a push that names someone still lands on a stranger's screen.
        _ = try f.logout()
        let loggedOut = try f.device.push(#"{"aps":{"alert":"x"},"uid":7}"#)
        try f.device.ack(loggedOut.deviceFrames)
        #expect(f.device.record(loggedOut)?.crossAccount == true)
        #expect(f.device.record(loggedOut)?.addressee == "7")
    }

    @Test func withoutABackendNothingIsCalledAndNothingFlagged() throws {
        let intents = Locked<Int>(0)
        let f = try DeviceFixture { list in intents.withLock { $0 += list.count } }
        try f.base.state.withWorld { world throws(DeviceRequestError) in _ = try world.login(deviceID: "phone", userID: "alice") }
        let response = try f.push(#"{"aps":{"alert":"x"},"uid":"bob"}"#)
        try f.ack(response.deviceFrames)
        #expect(intents.withLock { $0 } == 0)
        #expect(f.record(response)?.userID == "alice")
        #expect(f.record(response)?.crossAccount == false)
    }

    @Test func badAccountsAreRefused() throws {
        let f = try BackendFixture()
        #expect(throws: DeviceRequestError.self) { try f.login("") }
        #expect(throws: DeviceRequestError.self) { try f.login("a\nb") }
        let error = #expect(throws: DeviceRequestError.self) {
            try f.state.withWorld { world throws(DeviceRequestError) in _ = try world.login(deviceID: "nope", userID: "alice") }
        }
        #expect(error?.isNotFound == true)
    }
}

@Suite("Hook templates")
struct HookTemplateTests {
    let values = HookValues(
        token: "ab01", deviceID: "phone-1", bundleID: "com.example.app", environment: .production,
        userID: "ann lee", payload: ["messageId": 42, "nested": ["list": ["x", "y"]], "a/b": "slash"])

    @Test func placeholdersAreFilledByWhereTheyAre() throws {
        let hook = try AppBackend.parse([
            "fetch": [
                "url": "http://h:1/u/{{userId}}/m/{{payload:/messageId}}?t={{ token }}",
                "method": "put",
                "headers": ["X-User": "{{userId}}", "Content-Type": "text/json"],
                "body": [
                    "id": "{{payload:/messageId}}", "text": "#{{payload:/messageId}} for {{userId}}", "second": "{{payload:/nested/list/1}}",
                    "slash": "{{payload:/a~1b}}", "missing": "{{payload:/nope}}", "env": "{{environment}}",
                    "list": ["{{deviceId}}", 1, true], "device": "{{bundleId}}",
                ],
            ]
        ]).hooks[.fetch]!
        let out = HookTemplate.render(hook, values)
        #expect(out.method == "PUT")
        #expect(out.url == "http://h:1/u/ann%20lee/m/42?t=ab01")
        #expect(out.headers.map(\.name) == ["X-User", "Content-Type"], "a Content-Type given is not doubled")
        #expect(out.headers.first?.value == "ann lee")
        let body = try JSONValue.parse(out.body ?? [])
        #expect(body["id"] == .int(42), "a whole-string placeholder keeps the value's type")
        #expect(body["text"] == "#42 for ann lee")
        #expect(body["second"] == "y")
        #expect(body["slash"] == "slash")
        #expect(body["missing"] == .null)
        #expect(body["env"] == "production")
        #expect(body["list"] == ["phone-1", 1, true])
        #expect(body["device"] == "com.example.app")
    }

    @Test func aBodyGetsJSONContentTypeAndNoBodyNone() throws {
        let backend = try AppBackend.parse(["bind": ["url": "http://h/b", "body": ["u": "{{userId}}"]], "unbind": ["url": "http://h/u"]])
        var loggedOut = values
        loggedOut.userID = nil
        let bind = HookTemplate.render(backend.hooks[.bind]!, loggedOut)
        #expect(bind.method == "POST")
        #expect(bind.headers.map(\.name) == ["Content-Type"])
        #expect(try JSONValue.parse(bind.body ?? [])["u"] == .null)
        #expect(HookTemplate.render(backend.hooks[.unbind]!, values).body == nil)
    }

    @Test func badConfigurationsSayWhatIsWrong() {
        func message(_ json: JSONValue) -> String {
            do {
                _ = try AppBackend.parse(json)
                return "accepted"
            } catch {
                return error.description
            }
        }
        #expect(message(["register": ["url": "http://h/{{tokn}}"]]).contains("unknown placeholder {{tokn}}"))
        #expect(message(["register": ["url": "https://h/x"]]).contains("https backends are not supported"))
        #expect(message(["register": ["url": "ftp://h/x"]]).contains("must start with http://"))
        #expect(message(["register": ["url": "http://h/{{payload:x}}"]]).contains("not a JSON pointer"))
        #expect(message(["register": ["url": "http://h/", "body": "{{token"]]).contains("without"))
        #expect(message(["register": ["url": "http://h/", "method": "TRACE"]]).contains("\"method\""))
        #expect(message(["register": ["url": "http://h/", "headers": ["Bad Name": "x"]]]).contains("header"))
        #expect(message(["register": ["url": "http://h/", "extra": 1]]).contains("unknown field \"extra\""))
        #expect(message(["regster": ["url": "http://h/"]]).contains("unknown field \"regster\""))
        #expect(message(["addresseePointer": "uid"]).contains("JSON pointer"))
        #expect(message(["timeoutMs": 0]).contains("timeoutMs"))
        #expect(message(["maxAttempts": 50]).contains("maxAttempts"))
        #expect(message([]).contains("JSON object"))
        #expect(message(["addresseePointer": "/uid"]) == "accepted", "a backend may only name the addressee field")
    }

    @Test func theJSONFormRoundTrips() throws {
        let backend = try AppBackend.parse(BackendFixture.hooks)
        #expect(try AppBackend.parse(backend.json) == backend)
        #expect(backend.json["addresseePointer"] == "/uid")
        #expect(backend.json["timeoutMs"] == .int(Int64(AppBackend.defaultTimeoutMs)))
    }

    @Test func jsonPointers() {
        let doc: JSONValue = ["a": ["b": [10, 20]], "": "empty", "~t": 1]
        #expect(JSONPointer("")?.resolve(in: doc) == doc)
        #expect(JSONPointer("/a/b/1")?.resolve(in: doc) == .int(20))
        #expect(JSONPointer("/a/b/01")?.resolve(in: doc) == nil, "no leading zeros in indexes")
        #expect(JSONPointer("/")?.resolve(in: doc) == "empty")
        #expect(JSONPointer("/~0t")?.resolve(in: doc) == .int(1))
        #expect(JSONPointer("a") == nil)
        #expect(JSONPointer("/~2") == nil)
    }
}

@Suite("Histograms")
struct HistogramTests {
    @Test func bucketsQuantilesAndSums() {
        var h = Histogram(bounds: [1, 2, 5])
        #expect(h.quantile(0.5) == nil)
        for value in [0.5, 1, 1.5, 3, 4, 9] { h.record(value) }
        #expect(h.counts == [2, 1, 2, 1])
        #expect(h.cumulative == [2, 3, 5, 6])
        #expect(h.count == 6 && h.sum == 19)
        #expect(h.quantile(0.5) == 2)
        #expect(h.quantile(0.8) == 5)
        #expect(h.quantile(1) == .infinity)
        var other = Histogram(bounds: [1, 2, 5])
        other.record(2)
        h.add(other)
        #expect(h.cumulative == [2, 4, 6, 7])
    }
}
