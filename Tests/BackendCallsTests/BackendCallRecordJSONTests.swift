import APNsCore
import BackendCalls
import Testing

@Suite struct BackendCallRecordJSONTests {
    @Test func aFinishedCallShowsEveryField() {
        var record = BackendCallRecord(id: 7, request: call("http://127.0.0.1:9/register", body: #"{"token":"ab"}"#), atMs: 1_700_000_000_000)
        record.state = .done
        record.status = 201
        record.responseBody = "created"
        record.attempts = 2
        record.finishedAtMs = 1_700_000_000_250
        let json = record.json
        #expect(
            json.objectValue?.keys == [
                "id", "deviceId", "bundleId", "hook", "state", "method", "url", "headers", "body", "status",
                "response", "error", "attempts", "at", "atMs", "finishedAt", "finishedAtMs", "durationMs",
                "userId", "token",
            ])
        #expect(json["id"] == 7 && json["deviceId"] == "phone-1" && json["bundleId"] == "com.example.app" && json["hook"] == "register")
        #expect(json["state"] == "done" && json["method"] == "POST" && json["url"] == "http://127.0.0.1:9/register")
        #expect(json["headers"] == ["Content-Type": "application/json"])
        #expect(json["body"] == ["token": "ab"], "a JSON body is shown as JSON")
        #expect(json["status"] == 201 && json["response"] == "created" && json["error"] == .null && json["attempts"] == 2)
        #expect(json["at"] == "2023-11-14T22:13:20.000Z" && json["atMs"] == 1_700_000_000_000)
        #expect(json["finishedAt"] == "2023-11-14T22:13:20.250Z" && json["durationMs"] == 250)
        #expect(json["userId"] == "user-1" && json["token"] == "ab")
    }

    @Test func aPendingCallHasNullsWhereNothingIsKnownYet() {
        let json = BackendCallRecord(id: 1, request: call("http://h/x", body: "token=ab"), atMs: 0).json
        #expect(json["body"] == "token=ab", "a body that is not JSON is shown as text")
        for field in ["status", "response", "error", "finishedAt", "finishedAtMs", "durationMs"] {
            #expect(json[field] == .null, "\(field)")
        }
        #expect(BackendCallRecord(id: 1, request: call("http://h/x", body: nil), atMs: 0).json["body"] == .null)
    }
}
