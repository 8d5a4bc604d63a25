/// One request as the HTTP/2 layer hands it over.
public struct PushRequest: Sendable {
    public var streamID: Int32
    /// All header fields in arrival order, pseudo-headers included; duplicates kept.
    public var headers: [(name: String, value: String)]
    /// The body, possibly cut at the transport's buffering cap.
    public var body: [UInt8]
    /// The body's true length.
    public var bodyLength: Int

    public init(streamID: Int32, headers: [(name: String, value: String)], body: [UInt8], bodyLength: Int? = nil) {
        self.streamID = streamID
        self.headers = headers
        self.body = body
        self.bodyLength = bodyLength ?? body.count
    }
}

/// The header fields APNs looks at, picked out in one pass, plus the first duplicated name.
struct APNsHeaderFields {
    var method: String?
    var path: String?
    var authority: String?
    var authorization: String?
    var apnsID: String?
    var expiration: String?
    var priority: String?
    var topic: String?
    var pushType: String?
    var collapseID: String?
    /// The first header name that appears more than once.
    var duplicate: String?

    init(_ headers: [(name: String, value: String)]) {
        var seen: UInt32 = 0
        var others: [Substring.UTF8View] = []
        for (name, value) in headers {
            let bit: UInt32
            switch name {
            case ":method": bit = 1 << 0; method = value
            case ":path": bit = 1 << 1; path = value
            case ":authority": bit = 1 << 2; authority = value
            case ":scheme": bit = 1 << 3
            case "authorization": bit = 1 << 4; authorization = value
            case "apns-id": bit = 1 << 5; apnsID = value
            case "apns-expiration": bit = 1 << 6; expiration = value
            case "apns-priority": bit = 1 << 7; priority = value
            case "apns-topic": bit = 1 << 8; topic = value
            case "apns-push-type": bit = 1 << 9; pushType = value
            case "apns-collapse-id": bit = 1 << 10; collapseID = value
            default:
                // Rare and few: a linear scan is cheaper than hashing.
                let utf8 = Substring(name).utf8
                if duplicate == nil, others.contains(where: { $0.elementsEqual(utf8) }) { duplicate = name }
                others.append(utf8)
                continue
            }
            if seen & bit != 0, duplicate == nil { duplicate = name }
            seen |= bit
        }
    }
}
