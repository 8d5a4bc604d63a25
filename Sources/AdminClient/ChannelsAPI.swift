public import JSON

/// A broadcast channel as the emulator keeps it (`GET /api/v1/channels`).
public struct ChannelInfo: Sendable, Equatable {
    /// `apns-channel-id`.
    public var id: String
    public var bundleID: String
    /// `sandbox` or `production`.
    public var environment: String
    /// 0: No Message Stored; 1: Most Recent Message Stored.
    public var messageStoragePolicy: Int
    public var live: Bool
    /// Broadcasts accepted on it.
    public var broadcasts: Int
    /// The message a policy-1 channel keeps (its `aps` payload), if any.
    public var storedPayload: JSONValue?
    /// Live Activities subscribed to it now (nil: the emulator does not say).
    public var subscribers: Int?
    /// The whole JSON object, for fields not named here.
    public var json: JSONValue

    public init(_ json: JSONValue) {
        let o = json.objectValue
        id = o?["id"]?.stringValue ?? ""
        bundleID = o?["bundleId"]?.stringValue ?? ""
        environment = o?["environment"]?.stringValue ?? ""
        messageStoragePolicy = Int(o?["messageStoragePolicy"]?.intValue ?? 0)
        live = o?["live"]?.boolValue ?? false
        broadcasts = Int(o?["broadcasts"]?.intValue ?? 0)
        storedPayload = o?["storedMessage"]?.objectValue?["payload"]
        subscribers = o?["subscribers"]?.intValue.map { Int($0) }
        self.json = json
    }
}

/// Broadcast channels made through the channel management API.
extension EmulatorAdminClient {
    /// Channels, live and deleted, oldest first; of one app and/or environment when given.
    public func channels(bundleID: String? = nil, environment: String? = nil) throws(EmulatorAdminError) -> [ChannelInfo] {
        var query = ["limit=10000"]
        if let bundleID { query.append("bundleId=\(bundleID.queryEncoded)") }
        if let environment { query.append("environment=\(environment.queryEncoded)") }
        // Every page: the emulator answers one page per request.
        var all: [ChannelInfo] = []
        var cursor: String?
        repeat {
            let path = "/api/v1/channels?" + (query + (cursor.map { ["cursor=\($0.queryEncoded)"] } ?? [])).joined(separator: "&")
            let reply = try http.json("GET", path)
            all += (reply["channels"]?.arrayValue ?? []).map(ChannelInfo.init)
            cursor = reply["nextCursor"]?.stringValue
        } while cursor != nil
        return all
    }
}
