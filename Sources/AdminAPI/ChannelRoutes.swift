import APNsCore
import HTTP1Server

/// Broadcast channels as the emulator keeps them (made through the channel management API):
/// live and deleted, with what was published on them.
struct ChannelRoutes: AdminResource {
    unowned let api: AdminService

    func addRoutes(to r: inout AdminRouter) {
        r.add("GET", "/api/v1/channels", "broadcast channels, live and deleted, oldest first (?bundleId=, ?environment=)") { req, _, _ in
            try req.refuseUnknownQueryParameters(["bundleId", "environment"])
            let bundle = req.query["bundleId"]
            let environment = req.query["environment"]
            if let environment, APNsEnvironment(rawValue: environment) == nil {
                throw AdminError(400, "environment must be sandbox or production, not '\(environment)'")
            }
            let channels = state.readWorld { world in
                world.channels.all.filter {
                    (bundle == nil || $0.bundleID == bundle) && (environment == nil || $0.environment.rawValue == environment)
                }.map { Self.json($0, subscribers: world.liveActivities.subscriberCount(channelID: $0.id)) }
            }
            return .json(200, ["channels": .array(channels)])
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
