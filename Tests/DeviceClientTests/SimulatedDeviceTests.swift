import APNsCore
import DeviceClient
import Foundation
import Glibc
import Networking
import Synchronization
import Testing
import Locking

private let bundle = "com.example.app"

private func makeDevice(
    _ peer: FakePeer, id: String = "iphone-1", apps: [DeviceApp]? = nil,
    lowPowerMode: Bool = false
) -> SimulatedDevice {
    SimulatedDevice(
        address: peer.address, deviceID: id, apps: apps ?? [DeviceApp(bundleID: bundle, environment: .sandbox)],
        lowPowerMode: lowPowerMode)
}

@Suite("SimulatedDevice against a scripted peer")
struct SimulatedDeviceTests {
    @Test("hello spells out every app setting, with the documented defaults")
    func helloContent() throws {
        let hellos = Locked<[JSONObject]>([])
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            let hello = try connection.handshake()
            hellos.withLock { $0.append(hello) }
            _ = try? connection.readLine(timeoutMilliseconds: 2000)
        }
        try peer.run {
            let device = makeDevice(
                peer, id: "iphone_1.test-A",
                apps: [
                    DeviceApp(bundleID: bundle, environment: .sandbox),
                    DeviceApp(
                        bundleID: "com.example.other", environment: .production, authorization: .provisional,
                        appState: .terminated, backgroundMode: false, kinds: [.app, .voip]),
                ], lowPowerMode: true)
            try device.connect()
            device.disconnect()
        }

        let hello = try #require(hellos.withLock { $0.first })
        #expect(hello["type"] == "hello")
        #expect(hello["version"] == 1)
        #expect(hello["deviceId"] == "iphone_1.test-A")
        #expect(hello["lowPowerMode"] == true)
        let apps = try #require(hello["apps"]?.arrayValue)
        #expect(apps.count == 2)
        #expect(
            apps[0] == [
                "bundleId": "com.example.app", "environment": "sandbox", "authorization": "authorized",
                "appState": "background", "backgroundMode": true, "kinds": ["app"],
            ])
        #expect(
            apps[1] == [
                "bundleId": "com.example.other", "environment": "production", "authorization": "provisional",
                "appState": "terminated", "backgroundMode": false, "kinds": ["app", "voip"],
            ])
    }

    @Test("the next hello lists the deliveries acked last (acked), so an ack the emulator could not keep still counts")
    func helloListsTheLastAcks() throws {
        let hellos = Locked<[JSONObject]>([])
        let peer = try FakePeer { peer in
            let first = try peer.accept()
            let hello = try first.handshake()
            hellos.withLock { $0.append(hello) }
            try first.send(FakePeer.notification(id: 5, apnsID: "A-1"))
            try first.send(FakePeer.notification(id: 6, apnsID: "A-2"))
            _ = try first.expect("ack")
            _ = try first.expect("ack")
            try first.expectEOF()
            let second = try peer.accept()
            let again = try second.handshake()
            hellos.withLock { $0.append(again) }
            try second.expectEOF()
        }
        try peer.run {
            let device = makeDevice(peer)
            try device.connect()
            #expect(try device.nextNotification(timeoutMilliseconds: 2000)?.id == 5)
            #expect(try device.nextNotification(timeoutMilliseconds: 2000)?.id == 6)
            device.disconnect()
            try device.connect()
            device.disconnect()
        }
        let sent = hellos.withLock { $0 }
        #expect(sent.count == 2)
        #expect(sent.first?["acked"] == nil, "nothing acked before the first")
        #expect(sent.last?["acked"] == [["id": 5, "apnsId": "A-1"], ["id": 6, "apnsId": "A-2"]])
    }

    @Test("connect waits for welcome and every registered, fills tokens, keeps stored notifications queued")
    func connectFillsTokens() throws {
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            _ = try connection.expect("hello")
            // Split the handshake over several writes, with a pause before the last token.
            try connection.send(["type": "welcome", "version": 1, "deviceId": "iphone-1", "serverTime": 1767225600000])
            try connection.send(FakePeer.registered(bundleID: bundle, kind: "app", token: "aa01"))
            usleep(150_000)
            try connection.send(FakePeer.registered(bundleID: bundle, kind: "voip", token: "bb02"))
            try connection.send(FakePeer.notification(id: 5, apnsID: "A-1", stored: true))
            let ack = try connection.expect("ack")
            guard ack["id"] == 5 else { throw PeerError("ack for \(String(describing: ack["id"]))") }
            try connection.expectEOF()
        }
        try peer.run {
            let device = makeDevice(peer, apps: [DeviceApp(bundleID: bundle, environment: .sandbox, kinds: [.app, .voip])])
            try device.connect()
            #expect(device.isConnected)
            #expect(device.fileDescriptor >= 0)
            #expect(device.welcome?["serverTime"] == 1767225600000)
            #expect(device.tokens == [bundle: [.app: "aa01", .voip: "bb02"]])
            #expect(device.token(for: bundle) == "aa01")
            #expect(device.token(for: bundle, kind: .voip) == "bb02")
            #expect(device.token(for: bundle, kind: .complication) == nil)
            // welcome and registered were taken by connect; the stored notification was not.
            let notification = try #require(try device.nextNotification(timeoutMilliseconds: 2000))
            #expect(notification.id == 5)
            #expect(notification.stored)
            #expect(try device.poll(timeoutMilliseconds: 0).isEmpty)
            device.disconnect()
        }
    }

    @Test("notifications are decoded and auto-acked with {\"type\":\"ack\",\"id\":N}")
    func notificationParsingAndAutoAck() throws {
        let acks = Locked<[String]>([])
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.handshake()
            try connection.send(
                FakePeer.notification(
                    id: 17, apnsID: "29681C4D-79F5-B189-DA27-D1C4A1425C96", token: "4fc1",
                    collapseID: "score", payload: ["aps": ["alert": "Hello"], "x": 1]))
            try connection.send(
                FakePeer.notification(
                    id: 18, apnsID: "B-2", pushType: "background", priority: 5,
                    payload: ["aps": ["content-available": 1]], callbacks: [],
                    display: "none", reason: "the app lacks the background mode"))
            let first = try connection.readLine()
            let second = try connection.readLine()
            acks.withLock { $0 = [String(decoding: first, as: UTF8.self), String(decoding: second, as: UTF8.self)] }
        }
        try peer.run {
            let device = makeDevice(peer)
            try device.connect()
            let n = try #require(try device.nextNotification(timeoutMilliseconds: 2000))
            #expect(n.id == 17)
            #expect(n.apnsID == "29681C4D-79F5-B189-DA27-D1C4A1425C96")
            #expect(n.bundleID == bundle)
            #expect(n.token == "4fc1")
            #expect(n.topic == bundle)
            #expect(n.pushType == "alert")
            #expect(n.priority == 10)
            #expect(n.collapseID == "score")
            #expect(n.payload == ["aps": ["alert": "Hello"], "x": 1])
            #expect(n.callbacks == ["willPresent"])
            #expect(n.display == "banner")
            #expect(n.isDisplayed)
            #expect(n.reason == nil)
            #expect(n.stored == false)
            #expect(n.raw["type"] == "notification")

            let dropped = try #require(try device.nextNotification(timeoutMilliseconds: 2000))
            #expect(dropped.id == 18)
            #expect(dropped.callbacks.isEmpty)
            #expect(dropped.display == "none")
            #expect(!dropped.isDisplayed)
            #expect(dropped.reason == "the app lacks the background mode")
            #expect(dropped.priority == 5)
            #expect(dropped.collapseID == nil)
        }
        #expect(acks.withLock { $0 } == [#"{"type":"ack","id":17}"#, #"{"type":"ack","id":18}"#])
    }

    @Test("a payload APNs accepts but a Swift value cannot hold (a lone surrogate, huge numbers, -0) is acked and kept as sent")
    func payloadKeptAsSent() throws {
        let sent = #"{"aps":{"alert":"\ud800 lone \udc00","badge":1E400},"big":99999999999999999999999,"z":-0,"ok":"\ud83d\ude00"}"#
        let ack = Locked<String>("")
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.handshake()
            try connection.send(FakePeer.notification(id: 5, apnsID: "A-5", payload: .raw(Array(sent.utf8))))
            let line = try connection.readLine()
            ack.withLock { $0 = String(decoding: line, as: UTF8.self) }
        }
        try peer.run {
            let device = makeDevice(peer)
            try device.connect()
            let n = try #require(try device.nextNotification(timeoutMilliseconds: 2000))
            // (A valid pair is text like any other, written as the character.)
            #expect(n.payload.serialized() == sent.replacingOccurrences(of: #"\ud83d\ude00"#, with: "😀"))
            #expect(n.payload["ok"] == "😀")
        }
        #expect(ack.withLock { $0 } == #"{"type":"ack","id":5}"#)
    }

    @Test("a delivery sent again (same id, apns-id and token) is acked again, not returned twice; a new apns-id or token under an old id is")
    func aDeliverySentAgainIsReturnedOnce() throws {
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.handshake()
            // As after a reload or a re-attachment: the frame may not have left, so it goes again.
            // The last: after a reset (ids start over, a new token), a provider's fixed apns-id.
            let token = FakePeer.token("com.example.app/app")
            let afterReset = String(repeating: "5e", count: 32)
            for (id, apnsID, token) in [(Int64(7), "N-7", token), (7, "N-7", token), (8, "N-8", token), (7, "N-9", token), (7, "N-9", afterReset)] {
                try connection.send(FakePeer.notification(id: id, apnsID: apnsID, token: token))
                guard try connection.expect("ack")["id"] == .int(id) else { throw PeerError("ack \(id) \(apnsID)") }
            }
            try connection.expect("ping")
            try connection.send(["type": "pong"])
        }
        try peer.run {
            let device = makeDevice(peer)
            try device.connect()
            var seen: [String] = []
            while let notification = try device.nextNotification(timeoutMilliseconds: 1000) { seen.append(notification.apnsID) }
            #expect(seen == ["N-7", "N-8", "N-9", "N-9"])
            try device.ping()
        }
    }

    @Test("without autoAck a delivery sent again before its ack is returned once, and acked once")
    func aDeliverySentAgainBeforeItsAckIsReturnedOnce() throws {
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.handshake()
            try connection.send(FakePeer.notification(id: 3, apnsID: "M-3"))
            try connection.send(FakePeer.notification(id: 3, apnsID: "M-3"))
            try connection.expect("ping")
            try connection.send(["type": "pong"])
            guard try connection.expect("ack")["id"] == 3 else { throw PeerError("no ack of 3") }
            // Nothing more: the repeat was not acked on its own.
            try connection.expect("ping")
            try connection.send(["type": "pong"])
        }
        try peer.run {
            let device = makeDevice(peer)
            device.autoAck = false
            try device.connect()
            let first = try #require(try device.nextNotification(timeoutMilliseconds: 2000))
            #expect(try device.nextNotification(timeoutMilliseconds: 300) == nil)
            try device.ping()
            try device.ack(first.id)
            try device.ping()
        }
    }

    @Test("without autoAck nothing is acked until ack(_:)")
    func manualAck() throws {
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.handshake()
            try connection.send(FakePeer.notification(id: 3))
            // The device pings before acking: the ping must come first.
            try connection.expect("ping")
            try connection.send(["type": "pong"])
            let ack = try connection.expect("ack")
            guard ack["id"] == 3 else { throw PeerError("wrong ack \(ack)") }
        }
        try peer.run {
            let device = makeDevice(peer)
            device.autoAck = false
            try device.connect()
            let n = try #require(try device.nextNotification(timeoutMilliseconds: 2000))
            try device.ping()
            try device.ack(n.id)
        }
    }

    @Test("commands get their own answers while notifications interleave; nothing is lost")
    func commandsWithInterleavedNotifications() throws {
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.handshake()

            let app = try connection.expect("app")
            guard JSONValue.object(app) == ["type": "app", "bundleId": "com.example.app", "appState": "foreground"] else {
                throw PeerError("app frame \(app)")
            }
            try connection.send(FakePeer.notification(id: 1, apnsID: "N-1"))
            try connection.send([
                "type": "appUpdated", "bundleId": "com.example.app", "authorization": "authorized",
                "appState": "foreground", "backgroundMode": true,
            ])
            try connection.expect("ack")

            let both = try connection.expect("app")
            guard JSONValue.object(both) == ["type": "app", "bundleId": "com.example.app", "authorization": "denied", "backgroundMode": false] else {
                throw PeerError("app frame \(both)")
            }
            try connection.send([
                "type": "appUpdated", "bundleId": "com.example.app", "authorization": "denied",
                "appState": "foreground", "backgroundMode": false,
            ])

            guard JSONValue.object(try connection.expect("device")) == ["type": "device", "lowPowerMode": true] else { throw PeerError("device") }
            try connection.send(FakePeer.notification(id: 2, apnsID: "N-2"))
            try connection.send(["type": "deviceUpdated", "lowPowerMode": true])
            try connection.expect("ack")

            let install = try connection.expect("install")
            guard
                JSONValue.object(install) == [
                    "type": "install", "bundleId": "com.example.watch", "environment": "production",
                    "authorization": "ephemeral", "appState": "foreground", "backgroundMode": true,
                    "kinds": ["app", "complication"],
                ]
            else { throw PeerError("install \(install)") }
            try connection.send(FakePeer.registered(bundleID: "com.example.watch", environment: "production", kind: "app", token: "c1"))
            try connection.send(FakePeer.notification(id: 3, apnsID: "N-3"))
            try connection.send(
                FakePeer.registered(
                    bundleID: "com.example.watch", environment: "production",
                    kind: "complication", token: "c2"))
            try connection.expect("ack")

            guard JSONValue.object(try connection.expect("rotate")) == ["type": "rotate", "bundleId": "com.example.app"] else {
                throw PeerError("rotate")
            }
            try connection.send(FakePeer.registered(bundleID: bundle, kind: "app", token: "a2"))

            guard JSONValue.object(try connection.expect("tap")) == ["type": "tap", "apnsId": "N-1"] else { throw PeerError("tap") }
            try connection.send(FakePeer.notification(id: 4, apnsID: "N-4"))
            try connection.send([
                "type": "tapped", "apnsId": "N-1", "bundleId": "com.example.app",
                "callbacks": ["didReceive"], "launched": false,
            ])
            try connection.expect("ack")

            guard JSONValue.object(try connection.expect("uninstall")) == ["type": "uninstall", "bundleId": "com.example.watch"] else {
                throw PeerError("uninstall")
            }
            try connection.send([
                "type": "uninstalled", "bundleId": "com.example.watch", "unregisteredAt": 1767225600123,
                "tokens": ["c1", "c2"],
            ])

            guard JSONValue.object(try connection.expect("restore")) == ["type": "restore", "fromDeviceId": "old-iphone"] else {
                throw PeerError("restore")
            }
            try connection.send(FakePeer.registered(bundleID: "com.example.old", kind: "app", token: "d1"))
            try connection.send(["type": "restored", "fromDeviceId": "old-iphone", "bundleIds": ["com.example.old"]])

            guard JSONValue.object(try connection.expect("erase")) == ["type": "erase"] else { throw PeerError("erase") }
            try connection.send(FakePeer.notification(id: 5, apnsID: "N-5"))
            try connection.send(["type": "erased"])
            try connection.expect("ack")
            try connection.expectEOF()
        }
        try peer.run {
            let device = makeDevice(peer)
            try device.connect()

            let updated = try device.setApp(bundle, appState: .foreground)
            #expect(updated["appState"] == "foreground")
            #expect(device.apps.first?.appState == .foreground)
            try device.setApp(bundle, authorization: .denied, backgroundMode: false)
            #expect(device.apps.first?.authorization == .denied)
            #expect(device.apps.first?.backgroundMode == false)

            try device.setLowPowerMode(true)
            #expect(device.lowPowerMode)

            let watch = DeviceApp(
                bundleID: "com.example.watch", environment: .production, authorization: .ephemeral,
                appState: .foreground, kinds: [.app, .complication])
            #expect(try device.install(watch) == [.app: "c1", .complication: "c2"])
            #expect(device.apps.contains(watch))
            #expect(device.tokens["com.example.watch"] == [.app: "c1", .complication: "c2"])

            #expect(try device.rotate(bundle) == [.app: "a2"])
            #expect(device.token(for: bundle) == "a2")

            let tapped = try device.tap(apnsID: "N-1")
            #expect(tapped["callbacks"] == ["didReceive"])
            #expect(tapped["launched"] == false)

            let uninstalled = try device.uninstall("com.example.watch")
            #expect(uninstalled["tokens"] == ["c1", "c2"])
            #expect(device.tokens["com.example.watch"] == nil)
            #expect(!device.apps.contains { $0.bundleID == "com.example.watch" })

            let restored = try device.restore(from: "old-iphone")
            #expect(restored["bundleIds"] == ["com.example.old"])
            #expect(device.token(for: "com.example.old") == "d1")
            #expect(device.apps.contains { $0.bundleID == "com.example.old" })

            try device.erase()
            #expect(device.tokens.isEmpty)
            #expect(device.apps.isEmpty)

            // Every notification that arrived while commands waited is still there, in order.
            var ids: [Int64] = []
            while ids.count < 5, let n = try device.nextNotification(timeoutMilliseconds: 2000) { ids.append(n.id) }
            #expect(ids == [1, 2, 3, 4, 5])
            #expect(try device.poll(timeoutMilliseconds: 0).isEmpty)
            device.disconnect()
        }
    }

    @Test("an error frame answering a command makes it throw; the connection stays usable")
    func serverErrorThrows() throws {
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.handshake()
            try connection.expect("app")
            try connection.send(FakePeer.notification(id: 9))
            try connection.send([
                "type": "error", "code": "bad_request", "message": "no app com.example.nope on this device",
                "fatal": false,
            ])
            try connection.expect("ack")
            try connection.expect("tap")
            try connection.send(["type": "error", "code": "bad_request", "message": "no notification X on screen", "fatal": false])
            try connection.expect("ping")
            try connection.send(["type": "pong"])
            try connection.expectEOF()
        }
        try peer.run {
            let device = makeDevice(peer)
            try device.connect()
            let error = #expect(throws: DeviceClientError.self) { try device.setApp("com.example.nope", appState: .foreground) }
            #expect(error?.kind == .server)
            #expect(error?.code == "bad_request")
            #expect(error?.message == "no app com.example.nope on this device")
            #expect(error?.fatal == false)
            #expect(error?.description.contains("bad_request") == true)
            let tapError = #expect(throws: DeviceClientError.self) { try device.tap(apnsID: "X") }
            #expect(tapError?.code == "bad_request")
            try device.ping()
            #expect(device.isConnected)
            #expect(try device.nextNotification(timeoutMilliseconds: 1000)?.id == 9)
            device.disconnect()
        }
    }

    @Test("a fatal error answering hello makes connect throw and leaves the device disconnected")
    func fatalHelloError() throws {
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.expect("hello")
            try connection.send([
                "type": "error", "code": "unsupported_version",
                "message": "this emulator speaks device protocol version 2", "fatal": true,
            ])
            connection.close()
        }
        try peer.run {
            let device = makeDevice(peer)
            let error = #expect(throws: DeviceClientError.self) { try device.connect() }
            #expect(error?.kind == .server)
            #expect(error?.code == "unsupported_version")
            #expect(error?.fatal == true)
            #expect(!device.isConnected)
            #expect(device.fileDescriptor == -1)
        }
    }

    @Test("replaced: the frame is delivered, then the connection is gone and calls throw .replaced")
    func replaced() throws {
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.handshake()
            try connection.send(FakePeer.notification(id: 1))
            try connection.send(["type": "replaced"])
            connection.close()
        }
        try peer.run {
            let device = makeDevice(peer)
            try device.connect()
            #expect(try device.nextNotification(timeoutMilliseconds: 2000)?.id == 1)
            let error = #expect(throws: DeviceClientError.self) { _ = try device.nextNotification(timeoutMilliseconds: 2000) }
            #expect(error?.kind == .replaced)
            #expect(device.wasReplaced)
            #expect(!device.isConnected)
            // The replaced frame itself is still there for whoever polls.
            #expect(try device.poll(timeoutMilliseconds: 0).map { $0["type"] } == ["replaced"])
            #expect(throws: DeviceClientError.self) { _ = try device.poll(timeoutMilliseconds: 0) }
            #expect(throws: DeviceClientError.self) { try device.ping() }
        }
    }

    @Test("the acks of the frames read with replaced still reach the emulator, which half-closed the connection")
    func acksAfterReplacedAreSent() throws {
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.handshake()
            try connection.send(FakePeer.notification(id: 7, apnsID: "L-1"))
            try connection.send(["type": "replaced"])
            // As the emulator does: its side is done, and it reads the last acks.
            Glibc.shutdown(connection.fd, Int32(SHUT_WR))
            let ack = try connection.expect("ack")
            guard ack["id"] == 7 else { throw PeerError("ack for \(String(describing: ack["id"]))") }
            try connection.expectEOF()
        }
        try peer.run {
            let device = makeDevice(peer)
            device.autoAck = false
            try device.connect()
            // Both frames and the end of the stream come in one read.
            usleep(200_000)
            let frames = try device.poll(timeoutMilliseconds: 2000)
            #expect(frames.map { $0["type"] } == ["notification", "replaced"])
            #expect(!device.isConnected)
            try device.ack(7)
            device.disconnect()
        }
    }

    @Test("lines split across reads (even inside a UTF-8 character), several per read, CRLF and blank lines")
    func partialLines() throws {
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.handshake()
            let line = FakePeer.notification(id: 7, payload: ["aps": ["alert": "Grüße 🎉"]]).serializedBytes() + [0x0A]
            let cut = line.firstIndex(of: 0xC3)! + 1  // between the two bytes of "ü"
            try connection.sendRaw(Array(line[..<5]))
            usleep(50_000)
            try connection.sendRaw(Array(line[5..<cut]))
            usleep(50_000)
            try connection.sendRaw(Array(line[cut...]))
            // Two frames and a blank line in one write, CRLF on the first.
            try connection.sendRaw(Array("{\"type\":\"pong\"}\r\n\n   \n{\"type\":\"future\",\"x\":[1,2]}\n{\"type\":\"po".utf8))
            usleep(50_000)
            try connection.sendRaw(Array("ng\"}\n".utf8))
            for _ in 0..<1 { try connection.expect("ack") }
        }
        try peer.run {
            let device = makeDevice(peer)
            try device.connect()
            let n = try #require(try device.nextNotification(timeoutMilliseconds: 2000))
            #expect(n.id == 7)
            #expect(n.payload == ["aps": ["alert": "Grüße 🎉"]])
            var types: [String] = []
            while types.count < 3, let message = try device.nextMessage(timeoutMilliseconds: 2000) {
                types.append(message["type"]?.stringValue ?? "?")
            }
            #expect(types == ["pong", "future", "pong"])
        }
    }

    @Test("a line of exactly 1 MiB is accepted; a longer one is rejected and closes the connection")
    func lineLimit() throws {
        let limit = SimulatedDevice.maxLineBytes
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.handshake()
            let prefix = Array(#"{"type":"big","pad":""#.utf8)
            let suffix = Array(#""}"#.utf8)
            let exact = prefix + [UInt8](repeating: UInt8(ascii: "a"), count: limit - prefix.count - suffix.count) + suffix
            try connection.sendRaw(exact + [0x0A])
            try connection.expect("ping")
            // One byte over, never ended by a newline: the device must give up on its own.
            try connection.sendRaw(prefix + [UInt8](repeating: UInt8(ascii: "b"), count: limit))
            try connection.expectEOF()
        }
        try peer.run {
            let device = makeDevice(peer)
            try device.connect()
            let big = try #require(try device.nextMessage(ofType: "big", timeoutMilliseconds: 5000))
            #expect(big["pad"]?.stringValue?.count == limit - 23)
            try device.send(["type": "ping"])
            let error = #expect(throws: DeviceClientError.self) { _ = try device.nextMessage(timeoutMilliseconds: 5000) }
            #expect(error?.kind == .lineTooLong)
            #expect(!device.isConnected)
        }
    }

    @Test("invalid JSON from the emulator throws .badFrame; frames before and after it still arrive")
    func badFrames() throws {
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.handshake()
            try connection.sendRaw(Array("{\"type\":\"pong\"}\n{not json}\n[1,2]\n{\"no\":\"type\"}\n{\"type\":\"pong\"}\n".utf8))
            try connection.expect("ping")
        }
        try peer.run {
            let device = makeDevice(peer)
            try device.connect()
            var received: [String] = []
            var errors: [DeviceClientError.Kind] = []
            let deadline = Date().addingTimeInterval(5)
            while received.count < 2 && Date() < deadline {
                do {
                    received += try device.poll(timeoutMilliseconds: 500).compactMap { $0["type"]?.stringValue }
                } catch let error as DeviceClientError {
                    errors.append(error.kind)
                }
            }
            #expect(received == ["pong", "pong"])
            #expect(errors == [.badFrame, .badFrame, .badFrame])
            #expect(device.isConnected)
            try device.send(["type": "ping"])
        }
    }

    @Test("timeouts: nextNotification returns nil, commands and connect throw .timeout")
    func timeouts() throws {
        let peer = try FakePeer { peer in
            let first = try peer.accept()
            try first.handshake()
            try first.expect("app")  // never answered
            try first.expectEOF()
            let second = try peer.accept()
            try second.expect("hello")  // never welcomed
            try second.expectEOF()
        }
        try peer.run {
            let device = makeDevice(peer)
            try device.connect()
            // Nothing comes: nil, and the connection is as it was (a timeout, not a lost link).
            #expect(try device.nextNotification(timeoutMilliseconds: 300) == nil)
            #expect(device.isConnected)
            #expect(try device.poll(timeoutMilliseconds: 50).isEmpty)

            device.commandTimeoutMilliseconds = 300
            let error = #expect(throws: DeviceClientError.self) { try device.setApp(bundle, appState: .foreground) }
            #expect(error?.kind == .timeout)
            #expect(error?.description.contains("appUpdated") == true)
            device.disconnect()

            let connectError = #expect(throws: DeviceClientError.self) { try device.connect(timeoutMilliseconds: 300) }
            #expect(connectError?.kind == .timeout)
            #expect(connectError?.description.contains("welcome") == true)
            #expect(!device.isConnected)
        }
    }

    @Test("nothing listening: connect throws .connectFailed; calls before connect throw .notConnected")
    func connectionRefused() throws {
        let (fd, bound) = try Socket.listen(HostPort(host: "127.0.0.1", port: 0))
        close(fd)
        let device = SimulatedDevice(address: bound, deviceID: "x", apps: [])
        #expect(throws: DeviceClientError.self) { try device.ping() }
        let error = #expect(throws: DeviceClientError.self) { try device.connect(timeoutMilliseconds: 1000) }
        #expect(error?.kind == .connectFailed)
        #expect(error?.description.contains("\(bound.port)") == true)
    }

    @Test("the emulator closing the connection: queued frames stay readable, then .notConnected")
    func peerCloses() throws {
        let peer = try FakePeer { peer in
            let connection = try peer.accept()
            try connection.handshake()
            try connection.send(["type": "pong"])
            try connection.sendRaw(Array("{\"type\":\"half".utf8))
            connection.close()
        }
        try peer.run {
            let device = makeDevice(peer)
            try device.connect()
            #expect(try device.nextMessage(ofType: "pong", timeoutMilliseconds: 2000) != nil)
            let error = #expect(throws: DeviceClientError.self) { _ = try device.nextMessage(timeoutMilliseconds: 2000) }
            #expect(error?.kind == .notConnected)
            #expect(!device.isConnected)
            #expect(device.disconnectReason?.contains("closed") == true)
        }
    }

    @Test("reconnecting announces the device as it is now: same id, current apps and settings")
    func reconnect() throws {
        let hellos = Locked<[JSONObject]>([])
        let peer = try FakePeer { peer in
            let first = try peer.accept()
            let hello1 = try first.handshake()
            hellos.withLock { $0.append(hello1) }
            try first.expect("app")
            try first.send([
                "type": "appUpdated", "bundleId": "com.example.app", "authorization": "authorized",
                "appState": "foreground", "backgroundMode": true,
            ])
            try first.expect("device")
            try first.send(["type": "deviceUpdated", "lowPowerMode": true])
            try first.expect("uninstall")
            try first.send(["type": "uninstalled", "bundleId": "com.example.second", "unregisteredAt": 1, "tokens": []])
            try first.expectEOF()
            let second = try peer.accept()
            let hello2 = try second.handshake()
            hellos.withLock { $0.append(hello2) }
            try second.expectEOF()
        }
        try peer.run {
            let device = makeDevice(
                peer,
                apps: [
                    DeviceApp(bundleID: bundle, environment: .sandbox),
                    DeviceApp(bundleID: "com.example.second", environment: .production),
                ])
            try device.connect()
            try device.setApp(bundle, appState: .foreground)
            try device.setLowPowerMode(true)
            try device.uninstall("com.example.second")
            device.disconnect()
            #expect(!device.isConnected)
            try device.connect()
            #expect(device.tokens == [bundle: [.app: FakePeer.token("com.example.app/app")]])
            device.disconnect()
        }

        let second = try #require(hellos.withLock { $0.count == 2 ? $0[1] : nil })
        #expect(second["deviceId"] == "iphone-1")
        #expect(second["lowPowerMode"] == true)
        #expect(
            second["apps"] == [
                [
                    "bundleId": "com.example.app", "environment": "sandbox", "authorization": "authorized",
                    "appState": "foreground", "backgroundMode": true, "kinds": ["app"],
                ]
            ])
    }

    @Test("request frames match the protocol document")
    func requestFrames() {
        #expect(DeviceRequest.app(bundleID: "b", appState: .terminated).frame == ["type": "app", "bundleId": "b", "appState": "terminated"])
        #expect(DeviceRequest.device(lowPowerMode: false).frame == ["type": "device", "lowPowerMode": false])
        #expect(DeviceRequest.uninstall(bundleID: "b").frame == ["type": "uninstall", "bundleId": "b"])
        #expect(DeviceRequest.rotate(bundleID: "b").frame == ["type": "rotate", "bundleId": "b"])
        #expect(DeviceRequest.erase.frame == ["type": "erase"])
        #expect(DeviceRequest.restore(fromDeviceID: "old").frame == ["type": "restore", "fromDeviceId": "old"])
        #expect(DeviceRequest.tap(apnsID: "X").frame == ["type": "tap", "apnsId": "X"])
        #expect(DeviceRequest.ping.frame == ["type": "ping"])
        #expect(DeviceRequest.ack(id: 17).frame.serialized() == #"{"type":"ack","id":17}"#)
    }
}
