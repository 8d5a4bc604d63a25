@testable import APNsCore
import HTTPGrammar
import Testing

@Suite("Push exports (curl, .apns)")
struct PushExportTests {
    static func record(payload: String, topic: String? = "com.example.app") -> NotificationRecord {
        var r = NotificationRecord(apnsID: "A", token: "abcd", environment: .sandbox, receivedAtMs: 0)
        r.topic = topic
        r.payload = Array(payload.utf8)
        r.payloadSize = r.payload.count
        r.method = "POST"
        r.path = "/3/device/abcd"
        r.requestHeaders = [
            HeaderField(":method", "POST"), HeaderField(":path", "/3/device/abcd"), HeaderField("authorization", "bearer x.y.(signature not kept)"),
            HeaderField("apns-topic", "com.example.app"), HeaderField("user-agent", "test"), HeaderField("apns-collapse-id", "it's"),
        ]
        return r
    }

    @Test func quotingSurvivesEverythingAShellExpands() {
        #expect(PushExport.quoted("plain") == "'plain'")
        #expect(PushExport.quoted("it's") == #"'it'\''s'"#)
        #expect(PushExport.quoted("$HOME `x` \\ \"") == #"'$HOME `x` \ "'"#)
    }

    @Test func theCommandCarriesTheApnsHeadersAndAPlaceholderToken() throws {
        let command = try PushExport.curlCommand(Self.record(payload: "@{}"), to: .apple(.production))
        #expect(command.hasPrefix("curl -v --http2 \\\n"))
        #expect(command.contains(#"--header "authorization: bearer $APNS_JWT""#))
        #expect(command.contains("--header 'apns-topic: com.example.app'"))
        #expect(command.contains(#"--header 'apns-collapse-id: it'\''s'"#))
        #expect(!command.contains("user-agent") && !command.contains(":path"))
        #expect(command.contains("--data-raw '@{}'"))  // --data would read a file named {}
        #expect(command.hasSuffix("'https://api.push.apple.com/3/device/abcd'\n"))
    }

    @Test func theEmulatorTargetIsTheListenerTheBannerWouldShow() {
        let direct = PushExport.CurlTarget.emulator(.sandbox, direct: "0.0.0.0:2197", listen: "127.0.0.1:443", h2c: nil, caFile: "/c a.pem")
        #expect(direct == PushExport.CurlTarget(baseURL: "https://127.0.0.1:2197", options: ["--cacert", "'/c a.pem'"]))
        let listen = PushExport.CurlTarget.emulator(.production, direct: nil, listen: "[::]:12197", h2c: nil, caFile: nil)
        #expect(listen?.baseURL == "https://api.push.apple.com:12197")
        #expect(listen?.options == ["--resolve", "api.push.apple.com:12197:[::1]", "--cacert", "\"$APNS_EMULATOR_CA\""])
        let h2c = PushExport.CurlTarget.emulator(.sandbox, direct: nil, listen: nil, h2c: "127.0.0.1:2198", caFile: nil)
        #expect(h2c == PushExport.CurlTarget(baseURL: "http://127.0.0.1:2198", http2Option: "--http2-prior-knowledge"))
        #expect(PushExport.CurlTarget.emulator(.sandbox, direct: nil, listen: nil, h2c: nil, caFile: nil) == nil)
    }

    @Test(arguments: [
        ("{}", #"{"Simulator Target Bundle":"com.example.app"}"#),
        (" { } ", #"{"Simulator Target Bundle":"com.example.app" } "#),
        (#"{"aps":{"badge":1}}"#, #"{"Simulator Target Bundle":"com.example.app","aps":{"badge":1}}"#),
        (#"{"Simulator Target Bundle":"other","aps":{}}"#, #"{"Simulator Target Bundle":"other","aps":{}}"#),
    ])
    func theSimulatorFileAddsTheBundleFirst(payload: String, file: String) throws {
        #expect(String(decoding: try PushExport.simulatorFile(Self.record(payload: payload)), as: UTF8.self) == file)
    }

    @Test func theSimulatorFileNamesTheBundleWithoutTheTopicsSuffix() throws {
        let file = try PushExport.simulatorFile(Self.record(payload: "{}", topic: "com.example.app.push-type.liveactivity"))
        #expect(String(decoding: file, as: UTF8.self) == #"{"Simulator Target Bundle":"com.example.app"}"#)
        #expect(throws: PushExport.Refusal.self) { try PushExport.simulatorFile(Self.record(payload: "{}", topic: nil)) }
    }

    @Test func aBroadcastIsNoSimulatorFile() {
        // The file would be taken as a push to the app, not as the Live Activity update it was.
        var broadcast = Self.record(payload: #"{"aps":{"event":"update","timestamp":1,"content-state":{}}}"#, topic: nil)
        broadcast.bundleID = "com.example.app"
        broadcast.broadcast = BroadcastReach(channelID: "c")
        #expect(throws: PushExport.Refusal.self) { try PushExport.simulatorFile(broadcast) }
    }
}
