// ChannelRequestTests: ProviderClient's channel management requests, broadcasts and the
// answers they get, built and read without a server. Imports ProviderClient and JSON values.
import APNsCore
import ProviderClient
import Testing

/// The ProviderClient builders and parser, without a server.
@Suite("ProviderClient: channel management requests, broadcasts, their answers")
struct ChannelRequestTests {
    private func header(_ request: ClientRequest, _ name: String) -> String? { request.headers.first { $0.name == name }?.value }

    @Test func managementRequestsAreApplesMethodsPathsAndHeaders() throws {
        var create = ChannelManagementRequest.create(bundleID: "com.example.app", policy: 0, providerToken: "TOKEN")
        create.requestID = "0b7a9c1e-5d3f-4a2b-8c6d-1e2f3a4b5c6d"
        create.authority = ChannelManagementRequest.sandboxHost
        let request = create.request
        #expect(request.method == "POST" && request.path == "/1/apps/com.example.app/channels")
        #expect(header(request, "authorization") == "bearer TOKEN")
        #expect(header(request, "apns-request-id") == "0b7a9c1e-5d3f-4a2b-8c6d-1e2f3a4b5c6d")
        #expect(request.authority == "api-manage-broadcast.sandbox.push.apple.com")
        let body = try JSONValue.parse(try #require(request.body))
        #expect(body["message-storage-policy"]?.intValue == 0 && body["push-type"]?.stringValue == "LiveActivity")

        let read = ChannelManagementRequest.read(bundleID: "com.example.app", channelID: "abc=", providerToken: nil).request
        #expect(read.method == "GET" && read.path == "/1/apps/com.example.app/channels" && read.body == nil)
        #expect(header(read, "apns-channel-id") == "abc=" && header(read, "authorization") == nil)
        let delete = ChannelManagementRequest.delete(bundleID: "com.example.app", channelID: "abc=", providerToken: nil).request
        #expect(delete.method == "DELETE" && header(delete, "apns-channel-id") == "abc=")
        let list = ChannelManagementRequest.list(bundleID: "com.example.app", providerToken: nil).request
        #expect(list.method == "GET" && list.path == "/1/apps/com.example.app/all-channels" && list.body == nil)
        #expect(header(list, "apns-channel-id") == nil)
    }

    @Test func aBroadcastHasNoTopicAndLiveActivityDefaults() {
        var push = BroadcastPush(bundleID: "com.example.app", channelID: "abc=", payload: Array(#"{"aps":{}}"#.utf8), providerToken: "T")
        push.requestID = "3f1e2d3c-4b5a-4968-8776-655443322110"
        let request = push.request
        #expect(request.method == "POST" && request.path == "/4/broadcasts/apps/com.example.app")
        #expect(header(request, "apns-channel-id") == "abc=" && header(request, "apns-push-type") == "LiveActivity")
        #expect(header(request, "apns-priority") == "10" && header(request, "apns-expiration") == "0")
        #expect(header(request, "apns-request-id") == "3f1e2d3c-4b5a-4968-8776-655443322110")
        #expect(header(request, "apns-topic") == nil && request.body == Array(#"{"aps":{}}"#.utf8))
        push.priority = nil
        #expect(header(push.request, "apns-priority") == nil, "nil leaves a header out")
    }

    @Test func answersAreRead() {
        var created = HTTP2Response(streamID: 1)
        created.status = 201
        created.headers = [HTTP2HeaderField("apns-request-id", "r1"), HTTP2HeaderField("apns-channel-id", "abc=")]
        let createdResult = ChannelResult(created)
        #expect(createdResult.succeeded && createdResult.channelID == "abc=" && createdResult.requestID == "r1")

        var read = HTTP2Response(streamID: 3)
        read.status = 200
        read.body = Array(#"{"message-storage-policy": 1, "push-type": "LiveActivity"}"#.utf8)
        let readResult = ChannelResult(read)
        #expect(readResult.messageStoragePolicy == 1 && readResult.pushType == "LiveActivity" && readResult.channels == nil)

        var list = HTTP2Response(streamID: 5)
        list.status = 200
        list.body = Array(#"{"channels": ["a=", "b="]}"#.utf8)
        #expect(ChannelResult(list).channels == ["a=", "b="])

        var refused = HTTP2Response(streamID: 7)
        refused.status = 400
        refused.body = Array(#"{"reason": "ChannelNotRegistered"}"#.utf8)
        let refusedResult = ChannelResult(refused)
        #expect(!refusedResult.succeeded && refusedResult.reason == "ChannelNotRegistered")
        #expect(!ChannelResult(HTTP2Response(streamID: 9)).succeeded, "no answer is status 0")
    }
}
