import APNsCore
public import HTTP2

/// One call of Apple's channel management API (`api-manage-broadcast(.sandbox).push.apple.com`):
/// create, read or delete a broadcast channel of an app, or list its channels. Optional
/// headers are sent only when set; nothing here is specific to the emulator.
public struct ChannelManagementRequest: Sendable, Equatable {
    /// Apple's channel management hosts and ports.
    public static let sandboxHost = "api-manage-broadcast.sandbox.push.apple.com"
    public static let productionHost = "api-manage-broadcast.push.apple.com"
    public static let sandboxPort = 2195
    public static let productionPort = 2196

    public enum Operation: Sendable, Equatable {
        /// `POST /1/apps/<bundle>/channels` with `{"message-storage-policy": policy, "push-type": "LiveActivity"}`:
        /// 201 and `apns-channel-id`. Policy 0 is No Message Stored, 1 Most Recent Message Stored.
        case create(policy: Int)
        /// `GET /1/apps/<bundle>/channels` with `apns-channel-id`: 200 and the channel's settings.
        case read(channelID: String)
        /// `DELETE /1/apps/<bundle>/channels` with `apns-channel-id`: 204.
        case delete(channelID: String)
        /// `GET /1/apps/<bundle>/all-channels`: 200 and `{"channels": [ids]}`.
        case list
    }

    public var bundleID: String
    public var operation: Operation
    /// `apns-request-id` (a UUID); APNs echoes it, or makes one up.
    public var requestID: String?
    /// The provider token (without "bearer "); nil on a certificate-based connection.
    public var providerToken: String?
    public var extraHeaders: [HTTP2HeaderField] = []
    /// `:authority` (default: the address connected to). Apple's host names pick the environment.
    public var authority: String?

    public init(bundleID: String, operation: Operation, providerToken: String?) {
        self.bundleID = bundleID
        self.operation = operation
        self.providerToken = providerToken
    }

    public static func create(bundleID: String, policy: Int = 1, providerToken: String?) -> ChannelManagementRequest {
        ChannelManagementRequest(bundleID: bundleID, operation: .create(policy: policy), providerToken: providerToken)
    }

    public static func read(bundleID: String, channelID: String, providerToken: String?) -> ChannelManagementRequest {
        ChannelManagementRequest(bundleID: bundleID, operation: .read(channelID: channelID), providerToken: providerToken)
    }

    public static func delete(bundleID: String, channelID: String, providerToken: String?) -> ChannelManagementRequest {
        ChannelManagementRequest(bundleID: bundleID, operation: .delete(channelID: channelID), providerToken: providerToken)
    }

    public static func list(bundleID: String, providerToken: String?) -> ChannelManagementRequest {
        ChannelManagementRequest(bundleID: bundleID, operation: .list, providerToken: providerToken)
    }

    public var method: String {
        switch operation {
        case .create: return "POST"
        case .read, .list: return "GET"
        case .delete: return "DELETE"
        }
    }

    public var path: String {
        switch operation {
        case .list: return "/1/apps/\(bundleID)/all-channels"
        case .create, .read, .delete: return "/1/apps/\(bundleID)/channels"
        }
    }

    public var request: ClientRequest {
        var headers: [HTTP2HeaderField] = []
        if let providerToken { headers.append(HTTP2HeaderField("authorization", "bearer \(providerToken)")) }
        var body: [UInt8]?
        switch operation {
        case .create(let policy):
            headers.append(HTTP2HeaderField("content-type", "application/json"))
            let object: JSONValue = ["message-storage-policy": .int(Int64(policy)), "push-type": "LiveActivity"]
            body = object.serializedBytes()
        case .read(let channelID), .delete(let channelID):
            headers.append(HTTP2HeaderField("apns-channel-id", channelID))
        case .list:
            break
        }
        if let requestID { headers.append(HTTP2HeaderField("apns-request-id", requestID)) }
        headers.append(contentsOf: extraHeaders)
        return ClientRequest(method: method, path: path, headers: headers, body: body, authority: authority)
    }
}

/// A broadcast to the subscribers of a channel (`POST /4/broadcasts/apps/<bundle>` on the push
/// hosts, `api(.sandbox).push.apple.com`). It takes no device token and no `apns-topic`.
/// Optional headers are sent only when set; the defaults are what a Live Activity update needs.
public struct BroadcastPush: Sendable, Equatable {
    public var bundleID: String
    public var channelID: String
    /// The payload, at most 5,120 bytes, with an `aps` dictionary
    /// (`{"aps":{"event":"update","timestamp":…,"content-state":{…}}}`).
    public var payload: [UInt8]
    /// `apns-push-type`; Apple's broadcasts are Live Activities.
    public var pushType: String? = "LiveActivity"
    /// `apns-priority`: 10, 5 or 1.
    public var priority: String? = "10"
    /// `apns-expiration`: 0, or UNIX seconds (a No Message Stored channel takes 0 only).
    public var expiration: String? = "0"
    /// `apns-request-id` (a UUID); APNs echoes it, or makes one up.
    public var requestID: String?
    /// The provider token (without "bearer "); nil on a certificate-based connection.
    public var providerToken: String?
    public var extraHeaders: [HTTP2HeaderField] = []
    /// `:authority` (default: the address connected to). Apple's host names pick the environment.
    public var authority: String?

    public init(bundleID: String, channelID: String, payload: [UInt8], providerToken: String?) {
        self.bundleID = bundleID
        self.channelID = channelID
        self.payload = payload
        self.providerToken = providerToken
    }

    public var path: String { "/4/broadcasts/apps/\(bundleID)" }

    public var request: ClientRequest {
        var headers: [HTTP2HeaderField] = []
        if let providerToken { headers.append(HTTP2HeaderField("authorization", "bearer \(providerToken)")) }
        headers.append(HTTP2HeaderField("apns-channel-id", channelID))
        if let pushType { headers.append(HTTP2HeaderField("apns-push-type", pushType)) }
        if let priority { headers.append(HTTP2HeaderField("apns-priority", priority)) }
        if let expiration { headers.append(HTTP2HeaderField("apns-expiration", expiration)) }
        if let requestID { headers.append(HTTP2HeaderField("apns-request-id", requestID)) }
        headers.append(contentsOf: extraHeaders)
        return ClientRequest(method: "POST", path: path, headers: headers, body: payload, authority: authority)
    }
}

/// The answer to a channel management call or a broadcast, read back from an HTTP/2 response.
public struct ChannelResult: Sendable {
    public var status: Int
    /// `apns-request-id`: the request's, echoed, or one APNs made up.
    public var requestID: String?
    /// `apns-channel-id` of a channel just created.
    public var channelID: String?
    /// Why it was refused (`{"reason": "…"}`).
    public var reason: String?
    /// A read's `message-storage-policy`.
    public var messageStoragePolicy: Int?
    /// A read's `push-type`.
    public var pushType: String?
    /// A list's `channels`.
    public var channels: [String]?
    public var response: HTTP2Response

    /// 2xx: created (201), read or listed or broadcast (200), deleted (204).
    public var succeeded: Bool { (200...299).contains(status) }

    public init(_ response: HTTP2Response) {
        self.response = response
        status = response.status ?? 0
        requestID = response.headers.first { $0.name == "apns-request-id" }?.value
        channelID = response.headers.first { $0.name == "apns-channel-id" }?.value
        if !response.body.isEmpty, let body = try? JSONValue.parse(response.body) {
            reason = body["reason"]?.stringValue
            messageStoragePolicy = body["message-storage-policy"]?.intValue.map { Int($0) }
            pushType = body["push-type"]?.stringValue
            channels = body["channels"]?.arrayValue?.compactMap(\.stringValue)
        }
    }
}
