import APNsCore
import HTTP1Server

/// Broadcast channels as the emulator keeps them (made through the channel management API):
/// live and deleted, with what was published on them.
struct ChannelRoutes: AdminResource {
    unowned let api: AdminService

    func addRoutes(to r: inout AdminRouter) {
        r.add(
            "GET", "/api/v1/channels", "broadcast channels, live and deleted, oldest first (?bundleId=, ?environment=, ?limit=, ?cursor=)"
        ) { req, _, _ in
            try req.refuseUnknownQueryParameters(["bundleId", "environment", "limit", "cursor"])
            let bundle = req.query["bundleId"]
            let environment = req.query["environment"]
            if let environment, APNsEnvironment(rawValue: environment) == nil {
                throw AdminError(400, "environment must be sandbox or production, not '\(environment)'")
            }
            // A page, as every list: an app may have 10,000 live channels per environment (and
            // as many deleted), each with a stored message of up to 5 KB.
            let page = try PageRequest(req, list: "channels")
            let after = try page.listKey(list: "channels")
            let (rows, more) = state.readWorld { world in
                let matching = world.channels.all.lazy.filter {
                    (bundle == nil || $0.bundleID == bundle) && (environment == nil || $0.environment.rawValue == environment)
                        && (after == nil || ListKey(ms: $0.createdAtMs, id: $0.id) > after!)
                }
                let taken = Array(matching.prefix(page.limit + 1))
                let rows = taken.prefix(page.limit).map { ($0, world.liveActivities.subscriberCount(channelID: $0.id)) }
                return (rows, taken.count > page.limit)
            }
            let next = more ? rows.last.map { PageRequest.cursor(list: "channels", ListKey(ms: $0.0.createdAtMs, id: $0.0.id)) } : nil
            return .page("channels", rows.map { Self.json($0.0, subscribers: $0.1) }, nextCursor: next)
        }
    }

    /// `subscribers`: Live Activities subscribed to it now (not dismissed), on any device.
    static func json(_ channel: BroadcastChannel, subscribers: Int) -> JSONValue {
        func time(_ ms: Int64?) -> JSONValue { ms.map { .string(RFC3339.format(milliseconds: $0)) } ?? .null }
        var stored: JSONValue = .null
        if let message = channel.storedMessage {
            stored = [
                "requestId": .string(message.requestID), "priority": .int(Int64(message.priority)),
                "receivedAt": time(message.receivedAtMs), "expiresAt": time(message.expiresAtMs),
                "payload": (try? JSONValue.parse(message.payload)) ?? .string(String(decoding: message.payload, as: UTF8.self)),
            ]
        }
        return [
            "id": .string(channel.id), "bundleId": .string(channel.bundleID), "environment": .string(channel.environment.rawValue),
            "messageStoragePolicy": .int(Int64(channel.policy.rawValue)), "pushType": "LiveActivity",
            "createdAt": time(channel.createdAtMs), "deletedAt": time(channel.deletedAtMs), "live": .bool(channel.isLive),
            "broadcasts": .int(Int64(channel.broadcasts)), "lastBroadcastAt": time(channel.lastBroadcastAtMs),
            "storedMessage": stored, "subscribers": .int(Int64(subscribers)),
        ]
    }
}
