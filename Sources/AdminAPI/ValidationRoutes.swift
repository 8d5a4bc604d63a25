import APNsCore
import HTTP1Server

/// What the Push Notifications Console's validators tell: what APNs would make of a device
/// token, or of a provider token on a fresh connection. Judged by the endpoint's own rules
/// (DeviceTokenRules, ConnectionAuthenticator, TopicRules), changing nothing.
struct ValidationRoutes: AdminResource {
    unowned let api: AdminService

    func addRoutes(to r: inout AdminRouter) {
        r.add("POST", "/api/v1/validate/token", "what APNs would make of a push to a device token") { req, _, _ in
            try validateToken(req)
        }
        r.add("POST", "/api/v1/validate/jwt", "whether a provider token would be accepted on a fresh connection") { req, _, _ in
            try validateJWT(req)
        }
    }

    /// `{"token", "bundleId", "environment", "topic"?}`: the topic defaults to the bundle's
    /// topic for the token's kind (`.voip` for a VoIP token of that bundle…).
    private func validateToken(_ request: HTTP1Request) throws -> HTTP1ServerResponse {
        let body = try request.jsonObject()
        try body.refuseUnknownFields(["token", "bundleId", "environment", "topic"])
        guard let token = try Self.string(body, "token") else {
            throw AdminError(
                400,
                "\"token\" is required: the device token as hex, e.g. {\"token\":\"…\",\"bundleId\":\"com.example.app\",\"environment\":\"sandbox\"}")
        }
        guard let bundle = try Self.string(body, "bundleId") else { throw AdminError(400, "\"bundleId\" is required, e.g. \"com.example.app\"") }
        guard DeviceRegistry.isValidBundleID(bundle) else { throw AdminError(400, RegistryError.invalidBundleID(bundle).description) }
        let environment = try Self.environment(body, required: true)
        var topic: String?
        if let value = body["topic"], value != .null {
            guard let text = value.stringValue, !text.isEmpty else { throw AdminError(400, "\"topic\" must be a non-empty string") }
            topic = text
        }

        let text = Substring(token)
        let shape = Hex.shape(ofToken: text)
        let normalized = shape.hasUppercase ? Hex.lowercased(text) : token
        // As the endpoint does: a Live Activity's token is judged by the Live Activity rules for
        // any topic (another topic than its app's Live Activity topic is `wrong-topic`).
        if DeviceTokenRules.refusal(ofText: text, shape: shape) == nil,
            let owner = state.readWorld({ $0.registry.token(normalized) == nil ? $0.liveActivities.tokens[normalized] : nil })
        {
            let ended = state.readWorld { $0.liveActivities.book(deviceID: owner.deviceID)?.endedExplanation(ofToken: normalized) }
            return validateLiveActivityToken(token, owner, ended: ended, bundle: bundle, environment: environment, topic: topic)
        }
        var found: TokenEntry?
        let verdict: Result<TokenEntry, DeviceTokenRules.Refusal>
        if let refusal = DeviceTokenRules.refusal(ofText: text, shape: shape) {
            verdict = .failure(refusal)
        } else {
            found = state.readWorld { $0.registry.token(normalized) }
            if topic == nil, let found, found.bundleID == bundle { topic = found.topic }
            let judged = topic ?? bundle
            do {
                verdict = .success(try DeviceTokenRules.judge(found, topic: judged, environment: environment, nowMs: now) { $0.state })
            } catch {
                verdict = .failure(state.readWorld { error.sayingWhy(found, in: $0.registry) })
            }
        }
        let judgedTopic = topic ?? bundle
        var o = JSONObject()
        switch verdict {
        case .success(let entry):
            if entry.state == .rateLimited {
                o["verdict"] = "rate-limited"
                o["accepted"] = false
                o["status"] = .int(Int64(APNsReason.tooManyRequests.status))
                o["reason"] = .string(APNsReason.tooManyRequests.rawValue)
                o["explanation"] = "the token is set to rate-limited (admin API): pushes to it get 429 until its state is set back"
            } else {
                o["verdict"] = "valid"
                o["accepted"] = true
                o["status"] = 200
                o["reason"] = .null
                var explanation = "a push to topic \(judgedTopic) in \(environment.rawValue) passes the device-token stage"
                if case .unregistered(let since) = entry.state {
                    let why = state.readWorld { $0.registry.whyInvalidated(entry) }
                    explanation += "; \(why), and pushes get 410 Unregistered from \(since) ms"
                }
                o["explanation"] = .string(explanation)
            }
        case .failure(let refusal):
            o["verdict"] = .string(refusal.kind.rawValue)
            o["accepted"] = false
            o["status"] = .int(Int64(refusal.reason.status))
            o["reason"] = .string(api.host.endpointOptions.reasonText(refusal.reason))
            if let timestamp = refusal.timestampMs { o["timestamp"] = .int(timestamp) }
            o["explanation"] = .string(refusal.explanation)
        }
        o["token"] = .string(token)
        o["bundleId"] = .string(bundle)
        o["environment"] = .string(environment.rawValue)
        o["topic"] = .string(judgedTopic)
        o["deviceId"] = found.map { .string($0.deviceID) } ?? .null
        o["issued"] = found.map(AdminJSON.token) ?? .null
        return .json(200, .object(o))
    }

    /// A push-to-start or update token of a Live Activity: judged for the app's
    /// `.push-type.liveactivity` topic unless a topic is given, by the endpoint's rule.
    private func validateLiveActivityToken(
        _ token: String, _ owner: LiveActivityWorld.TokenOwner, ended: String?, bundle: String, environment: APNsEnvironment, topic: String?
    ) -> HTTP1ServerResponse {
        let judgedTopic = topic ?? bundle + PushType.liveactivity.topicSuffix
        var o = JSONObject()
        do {
            try DeviceTokenRules.judge(liveActivityToken: owner, topic: judgedTopic, environment: environment)
            o["verdict"] = "valid"
            o["accepted"] = true
            o["status"] = 200
            o["reason"] = .null
            let kind = owner.kind == .update ? "an update" : "a push-to-start"
            // APNs answers 200; the device is what ignores it.
            let after = ended.map { "; but the token ended, so the push is answered 200 and recorded: \($0)" } ?? ""
            o["explanation"] = .string(
                "\(kind) token of a Live Activity: a liveactivity push to \(judgedTopic) in \(environment.rawValue) passes the device-token stage\(after)"
            )
        } catch {
            o["verdict"] = .string(error.kind.rawValue)
            o["accepted"] = false
            o["status"] = .int(Int64(error.reason.status))
            o["reason"] = .string(api.host.endpointOptions.reasonText(error.reason))
            // A topic without the suffix never reaches this stage with a liveactivity push.
            let suffix = PushType.liveactivity.topicSuffix
            let note =
                error.kind == .wrongTopic && !judgedTopic.hasSuffix(suffix)
                ? " (a push of another type to it; a liveactivity push with topic \(judgedTopic) is 400 InvalidPushType: its topic must end in \(suffix))"
                : ""
            o["explanation"] = .string(error.explanation + note)
        }
        o["token"] = .string(token)
        o["bundleId"] = .string(bundle)
        o["environment"] = .string(environment.rawValue)
        o["topic"] = .string(judgedTopic)
        o["deviceId"] = .string(owner.deviceID)
        o["issued"] = .null
        o["liveActivityToken"] = [
            "kind": .string(owner.kind.rawValue), "bundleId": .string(owner.bundleID), "environment": .string(owner.environment.rawValue),
        ]
        return .json(200, .object(o))
    }

    /// `{"jwt", "environment"? (default sandbox), "topic"?}`: the provider token as the first one
    /// on a new connection, then, when a topic is given, whether it may push to that topic.
    private func validateJWT(_ request: HTTP1Request) throws -> HTTP1ServerResponse {
        let body = try request.jsonObject()
        try body.refuseUnknownFields(["jwt", "environment", "topic"])
        guard let jwt = try Self.string(body, "jwt") else {
            throw AdminError(400, "\"jwt\" is required: the provider token, with or without \"bearer \" before it")
        }
        let environment = try Self.environment(body, required: false)
        var topic: String?
        if let value = body["topic"], value != .null {
            guard let text = value.stringValue, !text.isEmpty else { throw AdminError(400, "\"topic\" must be a non-empty string") }
            topic = text
        }
        let options = api.host.endpointOptions
        let authorization = ConnectionAuthenticator.bearerToken(Substring(jwt)) == nil ? "bearer " + jwt : jwt
        // Provider-token ages run on the real clock, as the endpoint judges them.
        let nowMs = host.clock.nowMilliseconds() - host.clock.offsetMilliseconds
        let state = self.state
        var fresh = ConnectionAuthenticator(policy: options.tokenPolicy)
        let result = fresh.authenticate(
            authorization: authorization, environment: environment, nowMs: nowMs,
            credentialsGeneration: state.currentCredentialsGeneration,
            lookUpKey: { id in state.readWorld { $0.credentials.keys[id] } })

        var refusal: (reason: APNsReason, explanation: String)?
        var token: ProviderToken?
        var explanation = "the provider token would be accepted on a new \(environment.rawValue) connection"
        switch result {
        case .authenticated(let provider, _):
            token = provider.token
            if let topic { refusal = topicRefusal(topic, provider) }
            if let topic, refusal == nil { explanation += " and may push to topic \(topic)" }
        case .rejected(let reason, let why, let parsed):
            token = parsed ?? Self.parse(authorization)
            refusal = (reason, why)
        }

        var o = JSONObject()
        o["accepted"] = .bool(refusal == nil)
        o["status"] = .int(Int64(refusal?.reason.status ?? 200))
        o["reason"] = refusal.map { .string(options.reasonText($0.reason)) } ?? .null
        o["explanation"] = .string(refusal?.explanation ?? explanation)
        o["environment"] = .string(environment.rawValue)
        o["topic"] = topic.map(JSONValue.string) ?? .null
        o["alg"] = token?.algorithm.map(JSONValue.string) ?? .null
        o["kid"] = token?.keyID.map(JSONValue.string) ?? .null
        o["iss"] = token?.issuer.map(JSONValue.string) ?? .null
        o["iat"] = token?.issuedAt.map(JSONValue.int) ?? .null
        o["ageSeconds"] = token?.issuedAt.map { .int(nowMs / 1000 - $0) } ?? .null
        o["header"] = token.map { AdminJSON.parsedOrText($0.headerJSON) } ?? .null
        o["claims"] = token.map { AdminJSON.parsedOrText($0.claimsJSON) } ?? .null
        let key = token?.keyID.flatMap { id in state.readWorld { $0.credentials.keys[id] } }
        o["keyRegistered"] = .bool(key != nil)
        o["teamId"] = key.map { .string($0.teamID) } ?? .null
        o["key"] = key.map(AdminJSON.key) ?? .null
        return .json(200, .object(o))
    }

    /// The topic stage of a token-based push for a verified provider token, as for a push
    /// without `apns-push-type` (an MDM topic's is `mdm`, which tokens cannot send).
    private func topicRefusal(_ topic: String, _ provider: AuthenticatedProvider) -> (reason: APNsReason, explanation: String)? {
        if let refusal = TopicRules.syntaxRefusal(topic) { return refusal }
        let credentials = state.readWorld { $0.credentials }
        let pushType = TopicRules.pushTypeWithoutHeader(
            topic: Substring(topic), implied: TopicRules.impliedPushType(ofTopic: topic, credentials: credentials))
        let bundle = TopicRules.bundleID(ofTopic: topic, pushType: pushType)
        return TopicRules.tokenRefusal(pushType: pushType, bundleID: bundle, topic: topic, provider: provider, credentials: credentials)
    }

    /// What a rejected token names, when it is a JWT at all (nil for an empty or unparsable one).
    private static func parse(_ authorization: String) -> ProviderToken? {
        guard let text = ConnectionAuthenticator.bearerToken(Substring(authorization)) else { return nil }
        return try? ProviderToken.parse(text).get()
    }

    private static func environment(_ body: JSONObject, required: Bool) throws -> APNsEnvironment {
        guard let value = body["environment"], value != .null else {
            if required { throw AdminError(400, "\"environment\" is required: \"sandbox\" or \"production\"") }
            return .sandbox
        }
        guard let text = value.stringValue, let environment = APNsEnvironment(rawValue: text) else {
            throw AdminError(400, "\"environment\" must be \"sandbox\" or \"production\", not \(value.serialized())")
        }
        return environment
    }
}
