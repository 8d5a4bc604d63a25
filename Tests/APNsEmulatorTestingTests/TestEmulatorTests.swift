import APNsEmulatorTesting
import DeviceClient
import Foundation
import Glibc
import Networking
import ProviderClient
import Testing

/// The test kit as a provider team uses it: an emulator inside the test process, a real
/// HTTP/2 provider connection to it, and the typed admin client to look and steer.
@Suite("APNsEmulatorTesting: an emulator inside swift test")
struct TestEmulatorTests {
    /// A provider connection to the emulator's sandbox endpoint, trusting its CA.
    func connect(_ apns: TestEmulator) throws -> HTTP2ClientConnection {
        var options = HTTP2ClientConnection.Options(address: apns.sandbox)
        options.caPath = apns.caCertificatePath
        return try HTTP2ClientConnection(options)
    }

    func push(_ apns: TestEmulator, to token: String, payload: String = #"{"aps":{"alert":"hello"}}"#) throws -> APNsPush {
        let key = try ProviderSigningKey(
            teamID: apns.signingKey.teamID, keyID: apns.signingKey.keyID,
            privateKey: ES256PrivateKey(pem: apns.signingKey.pem))
        // One issue time for the whole run: a token signed a second later on the same
        // connection is a new token within 20 minutes (429 TooManyProviderTokenUpdates).
        return APNsPush(
            token: token, topic: apns.bundleID, payload: Array(payload.utf8), providerToken: try key.token(issuedAt: Self.issuedAt))
    }

    static let issuedAt = Int64(Date().timeIntervalSince1970)

    /// The test kit's emulator serves channel management on its own free port; a channel made
    /// there with ProviderClient's request is listed by the typed admin client.
    @Test func aChannelMadeOnTheChannelListenerIsListedByTheAdminClient() throws {
        let apns = try TestEmulator.start()
        defer { apns.stop() }
        var options = HTTP2ClientConnection.Options(address: try #require(apns.channelSandbox))
        options.caPath = apns.caCertificatePath
        let connection = try HTTP2ClientConnection(options)
        let key = try ProviderSigningKey(
            teamID: apns.signingKey.teamID, keyID: apns.signingKey.keyID, privateKey: ES256PrivateKey(pem: apns.signingKey.pem))
        let token = try key.token(issuedAt: Int64(Date().timeIntervalSince1970))
        let created = ChannelResult(try connection.send(ChannelManagementRequest.create(bundleID: apns.bundleID, providerToken: token).request))
        #expect(created.status == 201)
        let id = try #require(created.channelID)
        let channels = try apns.api.channels(bundleID: apns.bundleID)
        #expect(channels.map(\.id) == [id])
        #expect(channels.first?.environment == "sandbox" && channels.first?.messageStoragePolicy == 1 && channels.first?.live == true)
    }

    /// Live Activities through the typed client and the device handle: declared types and
    /// their push-to-start tokens, a start by push, starts by the app (token, channel, none),
    /// the user's dismissal, and the emulator's refusals as typed errors.
    @Test func liveActivitiesAreDeclaredStartedListedAndDismissed() throws {
        let apns = try TestEmulator.start()
        defer { apns.stop() }
        let device = try apns.createDevice()
        let tokens = try device.declareLiveActivities(["DeliveryAttributes", "ScoreAttributes"], frequentUpdates: true)
        let startToken = try #require(tokens["DeliveryAttributes"])
        #expect(tokens.count == 2 && tokens["ScoreAttributes"] != startToken)
        let apps = try apns.api.liveActivityApps(deviceID: device.deviceID)
        #expect(apps.map(\.bundleID) == [apns.bundleID] && apps.first?.frequentUpdates == true)
        #expect(apps.first?.types == ["DeliveryAttributes", "ScoreAttributes"] && apps.first?.pushToStartTokens == tokens)

        var start = try push(
            apns, to: startToken,
            payload:
                #"{"aps":{"event":"start","timestamp":1,"attributes-type":"DeliveryAttributes","attributes":{"orderId":"42"},"content-state":{"eta":15},"alert":"Order 42","input-push-token":1}}"#
        )
        start.topic = apns.bundleID + ".push-type.liveactivity"
        start.pushType = "liveactivity"
        #expect(APNsResult(try connect(apns).send(start.request)).status == 200)
        let pushed = try #require(try device.activities().first)
        #expect(pushed.startedBy == "push" && pushed.state == "active" && pushed.attributesType == "DeliveryAttributes")
        #expect(pushed.attributes["orderId"] == "42" && pushed.contentState["eta"]?.intValue == 15 && pushed.updates == 0)
        #expect(pushed.pushToken != nil && pushed.channel == nil && pushed.startedAt != nil && pushed.endedAt == nil)

        var options = HTTP2ClientConnection.Options(address: try #require(apns.channelSandbox))
        options.caPath = apns.caCertificatePath
        let key = try ProviderSigningKey(
            teamID: apns.signingKey.teamID, keyID: apns.signingKey.keyID, privateKey: ES256PrivateKey(pem: apns.signingKey.pem))
        let created = ChannelResult(
            try HTTP2ClientConnection(options).send(
                ChannelManagementRequest.create(bundleID: apns.bundleID, providerToken: try key.token(issuedAt: Int64(Date().timeIntervalSince1970)))
                    .request))
        let channel = try #require(created.channelID)
        let onChannel = try device.startActivity("ScoreAttributes", attributes: ["match": "7"], contentState: ["home": 0], updates: .channel(channel))
        #expect(onChannel.startedBy == "app" && onChannel.channel == channel && onChannel.pushToken == nil)
        #expect(onChannel.contentState == ["home": 0] && onChannel.attributes == ["match": "7"])
        let quiet = try device.startActivity("DeliveryAttributes", updates: .none)
        #expect(quiet.pushToken == nil && quiet.channel == nil)
        #expect(try device.startActivity("DeliveryAttributes").pushToken != nil)

        let rotated = try apns.api.rotateActivityToken(deviceID: device.deviceID, activityID: pushed.activityID)
        #expect(rotated.pushToken != nil && rotated.pushToken != pushed.pushToken)
        let newStart = try apns.api.rotatePushToStartToken(deviceID: device.deviceID, bundleID: apns.bundleID, attributesType: "DeliveryAttributes")
        #expect(newStart["DeliveryAttributes"] != nil && newStart["DeliveryAttributes"] != startToken)
        let ended = try device.endActivity(pushed.activityID, contentState: ["eta": 0], dismissalDate: Date().timeIntervalSince1970 + 600)
        #expect(ended.state == "ended" && ended.contentState == ["eta": 0] && ended.dismissalDate != nil && ended.endedAt != nil)
        #expect { try device.endActivity(pushed.activityID) } throws: { ($0 as? EmulatorAdminError)?.status == 409 }

        try device.dismissActivity(onChannel.activityID)
        #expect(try apns.api.activity(deviceID: device.deviceID, activityID: onChannel.activityID)?.state == "dismissed")
        #expect(try device.activities().map(\.activityID).contains(onChannel.activityID))
        #expect(try apns.api.activity(deviceID: device.deviceID, activityID: "NO-SUCH-ACTIVITY") == nil)

        #expect {
            try device.startActivity("PizzaAttributes")
        } throws: { error in
            let error = error as? EmulatorAdminError
            return error?.status == 400 && error?.message.contains("PizzaAttributes") == true
        }
        #expect(throws: EmulatorAdminError.self) { try device.startActivity("DeliveryAttributes", updates: .channel("bm90LWEtY2hhbm5lbA==")) }
        #expect { try device.dismissActivity("NO-SUCH-ACTIVITY") } throws: { ($0 as? EmulatorAdminError)?.status == 404 }
        #expect {
            try apns.api.declareLiveActivities(deviceID: "no-such-device", bundleID: apns.bundleID, types: ["DeliveryAttributes"])
        } throws: { ($0 as? EmulatorAdminError)?.status == 404 }
        #expect { try apns.api.activities(deviceID: "no-such-device") } throws: { ($0 as? EmulatorAdminError)?.status == 404 }
    }

    @Test func aPushIsAcceptedDeliveredAndInspectable() async throws {
        let apns = try TestEmulator.start()
        defer { apns.stop() }
        let device = try apns.createDevice()
        let connection = try connect(apns)
        let result = APNsResult(try connection.send(try push(apns, to: device.token, payload: #"{"aps":{"alert":"hi"},"orderId":42}"#).request))
        #expect(result.status == 200)
        let record = try await apns.waitForNotification(matching: PushFilter(token: device.token, outcome: "delivered"))
        #expect(record.status == 200)
        #expect(record.apnsID.lowercased() == result.apnsID?.lowercased())
        #expect(record.deviceID == device.deviceID)
        #expect(record.display != nil && record.display != "none")
        struct Order: Decodable { let orderId: Int }
        #expect(try record.payload(as: Order.self).orderId == 42)
    }

    @Test func uninstalledAppsGet410AndFaultsAnswerAsConfigured() async throws {
        let apns = try TestEmulator.start()
        defer { apns.stop() }
        let device = try apns.createDevice()
        try device.uninstall()
        let connection = try connect(apns)
        let gone = APNsResult(try connection.send(try push(apns, to: device.token).request))
        #expect(gone.status == 410)
        #expect(gone.reason == "Unregistered")
        #expect(gone.timestampMs != nil)

        let other = try apns.createDevice(deviceID: "second-phone")
        try apns.api.addFault(FaultRule(token: other.token, action: .respond(status: 500, reason: "InternalServerError"), times: 1))
        let failed = APNsResult(try connection.send(try push(apns, to: other.token).request))
        #expect(failed.status == 500)
        #expect(failed.reason == "InternalServerError")
        let retried = APNsResult(try connection.send(try push(apns, to: other.token).request))
        #expect(retried.status == 200)
        #expect(try apns.api.notifications(PushFilter(token: other.token)).map(\.status) == [200, 500])
    }

    @Test func adminErrorsAreTypedAndWaitsRunOut() async throws {
        let apns = try TestEmulator.start()
        defer { apns.stop() }
        #expect(throws: EmulatorAdminError.self) { try apns.api.device("no-such-phone") }
        do {
            _ = try apns.api.device("no-such-phone")
        } catch {
            #expect(error.status == 404)
        }
        await #expect(throws: TestEmulatorError.self) {
            try await apns.waitForNotification(matching: PushFilter(token: String(repeating: "ab", count: 32)), timeout: .milliseconds(200))
        }
    }

    @Test func emulatorsAreIndependentAndStopFreesTheirPorts() throws {
        let first = try TestEmulator.start()
        let second = try TestEmulator.start(TestEmulator.Options(bundleIDs: ["com.example.other"]))
        defer { second.stop() }
        #expect(first.sandbox != second.sandbox)
        _ = try first.createDevice()
        #expect(try first.api.devices().count == 1)
        #expect(try second.api.devices().isEmpty)
        let address = first.admin
        first.stop()
        #expect(throws: EmulatorAdminError.self) { try EmulatorAdminClient(address: address).devices() }
        #expect(!FileManager.default.fileExists(atPath: first.directory))
    }

    /// The client pages like the API: `devicesPage` a page at a time, `devices()` all of them.
    @Test func listsPage() throws {
        let apns = try TestEmulator.start()
        defer { apns.stop() }
        for n in 1...5 { try apns.api.createDevice(bundleID: apns.bundleID, deviceID: "page-\(n)") }
        let first = try apns.api.devicesPage(limit: 2)
        #expect(first.items.map(\.deviceID) == ["page-1", "page-2"])
        let cursor = try #require(first.nextCursor)
        let rest = try apns.api.devicesPage(limit: 10, cursor: cursor)
        #expect(rest.items.map(\.deviceID) == ["page-3", "page-4", "page-5"] && rest.nextCursor == nil)
        #expect(try apns.api.devices().map(\.deviceID) == (1...5).map { "page-\($0)" })
        #expect(throws: EmulatorAdminError.self) { try apns.api.devicesPage(limit: 10_001) }
        #expect(try apns.api.notificationsPage(limit: 5).nextCursor == nil)
    }

    /// A stopped emulator closes everything: its listeners refuse connections, and the
    /// provider and device connections it had are closed by it, so a suite can start hundreds.
    @Test func stoppingClosesListenersAndConnections() throws {
        let apns = try TestEmulator.start()
        let device = try apns.createDevice()
        let connection = try connect(apns)
        #expect(APNsResult(try connection.send(try push(apns, to: device.token).request)).status == 200)
        let phone = SimulatedDevice(
            address: apns.device, deviceID: "socket-phone",
            apps: [DeviceApp(bundleID: apns.bundleID, environment: .sandbox)])
        try phone.connect()
        apns.stop()
        for address in [apns.sandbox, apns.production, apns.admin, apns.device] {
            #expect(throws: (any Error).self, "\(address) still accepts") { close(try Socket.connect(to: address)) }
        }
        // The device sees its connection end (reading gives end of file, not a timeout).
        #expect(throws: DeviceClientError.self) { _ = try phone.nextNotification(timeoutMilliseconds: 5000) }
        #expect(!phone.isConnected)
        #expect(throws: (any Error).self) { _ = try connection.send(try push(apns, to: device.token).request, timeoutMilliseconds: 5000) }
    }

    @Test func withStopsTheEmulatorWhenTheBodyThrows() async throws {
        struct Failure: Error {}
        var admin: HostPort?
        await #expect(throws: Failure.self) {
            try await TestEmulator.with { apns in
                admin = apns.admin
                _ = try apns.createDevice()
                throw Failure()
            }
        }
        let address = try #require(admin)
        #expect(throws: (any Error).self) { close(try Socket.connect(to: address)) }
    }

    /// A start that fails half-way (the admin port is taken) leaves nothing bound: the
    /// sandbox listener it had opened before refuses connections afterwards.
    @Test func aFailedStartReleasesWhatItBound() throws {
        let holder = try TestEmulator.start()
        defer { holder.stop() }
        let probe = try Socket.listen(HostPort(host: "127.0.0.1", port: 0))
        close(probe.fd)
        let sandbox = probe.bound
        let options = TestEmulator.Options(arguments: ["--sandbox-listen", sandbox.description, "--admin-listen", holder.admin.description])
        #expect(throws: TestEmulatorError.self) { try TestEmulator.start(options) }
        #expect(throws: (any Error).self, "the failed start left \(sandbox) open") { close(try Socket.connect(to: sandbox)) }
    }

    @Test func badOptionsAreReportedNotCrashed() {
        #expect(throws: TestEmulatorError.self) { try TestEmulator.start(TestEmulator.Options(arguments: ["--no-such-flag"])) }
        #expect(throws: TestEmulatorError.self) { try TestEmulator.start(TestEmulator.Options(arguments: ["--max-records", "lots"])) }
    }

    @Test func aSocketDeviceFromDeviceClientReceivesPushes() throws {
        let apns = try TestEmulator.start()
        defer { apns.stop() }
        let phone = SimulatedDevice(
            address: apns.device, deviceID: "socket-phone",
            apps: [DeviceApp(bundleID: apns.bundleID, environment: .sandbox)])
        try phone.connect()
        guard let token = phone.tokens[apns.bundleID]?[.app] else {
            Issue.record("no token registered")
            return
        }
        let connection = try connect(apns)
        #expect(APNsResult(try connection.send(try push(apns, to: token).request)).status == 200)
        let delivered = try phone.nextNotification(timeoutMilliseconds: 5000)
        #expect(delivered?.token == token)
        #expect(delivered?.isDisplayed == true)
    }
}

/// Configuring the test kit in Swift instead of with `arguments`.
@Suite("APNsEmulatorTesting: a configuration in Swift")
struct TestEmulatorConfigurationTests {
    @Test func configureSetsAnyPartAndArgumentsApplyAfter() throws {
        var options = TestEmulator.Options(arguments: ["--admin-token", "from-arguments"]) { configuration in
            configuration.admin.token = "from-swift"
            configuration.delivery.deviceWindow = 10
        }
        options.bundleIDs = ["com.example.configured"]
        let apns = try TestEmulator.start(options)
        defer { apns.stop() }
        #expect(try apns.createDevice().bundleID == "com.example.configured", "the kit's client knows the token")
        #expect(throws: EmulatorAdminError.self) { try EmulatorAdminClient(address: apns.admin, token: "from-swift").devices() }
        #expect(try EmulatorAdminClient(address: apns.admin, token: "from-arguments").devices().count == 1)
    }
}
