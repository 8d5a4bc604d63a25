import APNsCore
import AdminClient
import Foundation
import ProviderClient

/// Broadcast channels: `createChannel` through Apple's channel management API (the emulator's
/// channel listener, as `api-manage-broadcast(.sandbox).push.apple.com`), and `broadcast` on
/// the push endpoint (`POST /4/broadcasts/apps/<bundle>`), both signed with the provider key.
extension StepRunner {
    func createChannel() throws(StepFailure) -> String? {
        let name = try fields.requiredString("channel")
        let bundle = fields.string("bundleId") ?? context.scenario.bundleID
        let environment = fields.string("environment") ?? "sandbox"
        let provider = context.target.provider
        guard let address = environment == "production" ? provider.channelProduction : provider.channelSandbox else {
            throw StepFailure(
                "no \(environment) channel management endpoint is known (the emulator's channel\(environment == "production" ? "Production" : "Sandbox") "
                    + "listener; pass --channel-\(environment) HOST:PORT)")
        }
        let policy = try fields.int("messageStoragePolicy") ?? 1
        var request = ChannelManagementRequest.create(bundleID: bundle, policy: policy, providerToken: try providerToken())
        request.authority = environment == "production" ? ChannelManagementRequest.productionHost : ChannelManagementRequest.sandboxHost
        let result = ChannelResult(try send(request.request, to: address, what: "creating a channel"))
        let answer = try checkAnswer(
            status: result.status, reason: result.reason, defaultStatus: 201, id: result.requestID.map { "apns-request-id \($0)" })
        guard result.status == 201, let id = result.channelID else { return "→ \(answer), no channel made" }
        context.channels[name] = RunContext.ChannelRef(id: id, bundleID: bundle, environment: environment)
        return "→ \(answer), channel \(name) is \(id)"
    }

    /// One broadcast to the channel's subscribers. Delivery is the emulator's business: what
    /// it came to is seen on the activities (`expect`/`waitFor` with `activity`).
    func broadcast() throws(StepFailure) -> String? {
        var channelID = fields.string("channelId") ?? ""
        var bundle = fields.string("bundleId") ?? context.scenario.bundleID
        var environment = fields.string("environment") ?? "sandbox"
        if let name = fields.string("channel") {
            let ref = try context.channel(name)
            channelID = ref.id
            bundle = fields.string("bundleId") ?? ref.bundleID
            environment = fields.string("environment") ?? ref.environment
        }
        let provider = context.target.provider
        guard let address = environment == "production" ? provider.production : provider.sandbox else {
            throw StepFailure("no \(environment) endpoint is known: pass --\(environment) HOST:PORT")
        }
        let nowMs = try context.emulatorNow()
        var request = BroadcastPush(
            bundleID: bundle, channelID: channelID, payload: try payloadBytes(nowMs: nowMs), providerToken: try providerToken())
        request.pushType = fields.string("pushType") ?? "LiveActivity"
        request.priority = fields.string("priority") ?? "10"
        request.expiration = try fields.int("expiresIn").map { String(nowMs / 1000 + Int64($0)) } ?? fields.string("expiration") ?? "0"
        request.authority = environment == "production" ? "api.push.apple.com" : "api.sandbox.push.apple.com"
        let result = ChannelResult(try send(request.request, to: address, what: "broadcast"))
        context.lastBroadcast = ["requestId": result.requestID ?? "", "status": String(result.status), "reason": result.reason ?? ""]
        let answer = try checkAnswer(
            status: result.status, reason: result.reason, defaultStatus: 200, id: result.requestID.map { "apns-request-id \($0)" })
        return "→ \(answer), apns-request-id \(short(result.requestID))"
    }
}
