import APNsEmulatorTesting
import PushService
import Testing

/// The push code of a provider team, tested end to end against an emulator started inside
/// `swift test`: real TLS, real HTTP/2, Apple's rules and answers.
@Suite("PushService against the APNs emulator")
struct PushServiceTests {
    func service(_ apns: TestEmulator, _ store: TokenStore) throws -> PushService {
        try PushService(
            settings: APNsSettings(
                address: apns.sandbox, caPath: apns.caCertificatePath,
                teamID: apns.signingKey.teamID, keyID: apns.signingKey.keyID,
                keyPEM: apns.signingKey.pem, topic: apns.bundleID), store: store)
    }

    @Test func everyDeviceOfTheUserGetsTheShippingNotice() async throws {
        let apns = try TestEmulator.start()
        defer { apns.stop() }
        let phone = try apns.createDevice(deviceID: "alices-phone")
        let tablet = try apns.createDevice(deviceID: "alices-ipad")
        let store = TokenStore()
        store.add(phone.token, for: "alice")
        store.add(tablet.token, for: "alice")

        let outcomes = try service(apns, store).notifyOrderShipped(user: "alice", orderID: 1042)

        #expect(outcomes.map(\.status) == [200, 200])
        for device in [phone, tablet] {
            let record = try await apns.waitForNotification(matching: PushFilter(token: device.token, outcome: "delivered"))
            #expect(record.pushType == "alert")
            #expect(record.display == "banner")
            struct Shipped: Decodable { let orderId: Int }
            #expect(try record.payload(as: Shipped.self).orderId == 1042)
        }
    }

    /// A store in which `user` has one phone on `apns`.
    func store(_ apns: TestEmulator, user: String) throws -> (TokenStore, DeviceHandle) {
        let phone = try apns.createDevice()
        let store = TokenStore()
        store.add(phone.token, for: user)
        return (store, phone)
    }

    @Test func tokensOfUninstalledAppsAreForgotten() async throws {
        try await TestEmulator.with { apns in
            let (store, phone) = try store(apns, user: "bob")
            try phone.uninstall()

            let outcomes = try service(apns, store).notifyOrderShipped(user: "bob", orderID: 7)

            #expect(outcomes.first?.status == 410)
            #expect(outcomes.first?.reason == "Unregistered")
            #expect(outcomes.first?.tokenRemoved == true)
            #expect(store.tokens(for: "bob").isEmpty)
        }
    }

    @Test func aServerErrorKeepsTheToken() async throws {
        try await TestEmulator.with { apns in
            let (store, phone) = try store(apns, user: "carol")
            try apns.api.addFault(FaultRule(token: phone.token, action: .respond(status: 503, reason: "ServiceUnavailable"), times: 1))

            let outcomes = try service(apns, store).notifyOrderShipped(user: "carol", orderID: 9)

            #expect(outcomes.first?.status == 503)
            #expect(outcomes.first?.tokenRemoved == false)
            #expect(store.tokens(for: "carol") == [phone.token])
        }
    }
}
