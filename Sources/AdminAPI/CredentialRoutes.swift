import APNsCore
import HTTP1Server

/// Provider keys and the apps teams own: what provider tokens are checked against.
struct CredentialRoutes: AdminResource {
    unowned let api: AdminService

    func addRoutes(to r: inout AdminRouter) {
        r.add("GET", "/api/v1/keys", "provider keys") { req, _, http in try listKeys(req, http) }
        r.add("POST", "/api/v1/keys", "add a provider key") { req, _, _ in try addKey(req) }
        r.add("DELETE", "/api/v1/keys/{keyId}", "remove a provider key") { _, p, _ in
            let id = p["keyId"]!
            guard state.withWorld({ $0.removeKey(id: id) }) != nil else { throw AdminError(404, "no key \(id)") }
            return .json(200, ["keyId": .string(id), "deleted": true])
        }
        r.add("GET", "/api/v1/apps", "which team owns which bundle") { req, _, http in try listApps(req, http) }
        r.add("POST", "/api/v1/apps", "add an app to a team") { req, _, _ in try addApp(req) }
        r.add("DELETE", "/api/v1/apps/{bundleId}", "remove an app") { _, p, _ in
            let bundle = try Self.bundleID(p)
            guard state.withWorld({ $0.removeApp(bundleID: bundle) }) != nil else { throw AdminError(404, "no app \(bundle)") }
            return .json(200, ["bundleId": .string(bundle), "deleted": true])
        }
    }

    /// By key id. The lock is held only to take the dictionary (a reference); keys are few,
    /// so they are sorted per page, outside it.
    private func listKeys(_ request: HTTP1Request, _ http: HTTP1Connection) throws -> HTTP1ServerResponse? {
        let page = try PageRequest(request, list: "keys")
        let all = state.readWorld { $0.credentials.keys }
        return answerOffLoop(http) {
            let (keys, next) = PageRequest.pageByName(all.values, name: \.keyID, page, list: "keys")
            return .page("keys", keys.map(AdminJSON.key), nextCursor: next)
        }
    }

    /// `POST /api/v1/keys` with `teamId`, `keyId`, the key as `pem` (a .p8 or a public key PEM)
    /// or `path` (inside `--keys-dir` only), and optional `environment`, `topics`, `relatedKeyId`.
    private func addKey(_ request: HTTP1Request) throws -> HTTP1ServerResponse {
        let body = try request.jsonObject()
        try body.refuseUnknownFields(["teamId", "keyId", "pem", "path", "environment", "topics", "relatedKeyId"])
        let pem: String
        let (text, path) = (try Self.string(body, "pem"), try Self.string(body, "path"))
        if text != nil, path != nil {
            throw AdminError(400, "give the key as \"pem\" or as \"path\", not both")
        } else if let text {
            pem = text
        } else if let path {
            pem = try KeyFiles.read(path, keysDirectory: api.settings.keysDirectory)
        } else {
            throw AdminError(400, "give the key as \"pem\" (the .p8 text or a PEM public key), or a \"path\" inside --keys-dir")
        }
        let key = try host.providerKey(from: body, pem: pem)
        let existing = state.withWorld { world -> ProviderKey? in
            if let existing = world.credentials.keys[key.keyID] { return existing }
            world.addKey(key)
            return nil
        }
        // The same key again changes nothing; another one under its id is not swapped in
        // unasked (the providers signing with the old one would all fail at once).
        if let existing {
            let differences = key.differences(from: existing)
            guard differences.isEmpty else {
                throw AdminError(
                    409,
                    "key \(key.keyID) exists already (team \(existing.teamID)) with another \(differences.joined(separator: ", ")); to replace it, DELETE /api/v1/keys/\(key.keyID) first"
                )
            }
            return .json(201, AdminJSON.key(existing))
        }
        host.log("admin: key \(key.teamID):\(key.keyID) added")
        return .json(201, AdminJSON.key(key))
    }

    /// By bundle id, paged as keys are.
    private func listApps(_ request: HTTP1Request, _ http: HTTP1Connection) throws -> HTTP1ServerResponse? {
        let page = try PageRequest(request, list: "apps")
        let all = state.readWorld { $0.credentials.apps }
        return answerOffLoop(http) {
            let (apps, next) = PageRequest.pageByName(all, name: \.key, page, list: "apps")
            return .page("apps", apps.map { ["bundleId": .string($0.key), "teamId": .string($0.value.teamID)] }, nextCursor: next)
        }
    }

    private func addApp(_ request: HTTP1Request) throws -> HTTP1ServerResponse {
        let body = try request.jsonObject()
        try body.refuseUnknownFields(["teamId", "bundleId"])
        guard let team = try Self.string(body, "teamId"), let bundle = try Self.string(body, "bundleId") else {
            throw AdminError(400, "\"teamId\" and \"bundleId\" are required")
        }
        try host.checkApp(teamID: team, bundleID: bundle)
        let owner = state.withWorld { world -> String? in
            if let owner = world.credentials.apps[bundle]?.teamID { return owner }
            world.addApp(teamID: team, bundleID: bundle)
            return nil
        }
        // Moving an app to another team would cut off its team's keys without a word.
        if let owner, owner != team {
            throw AdminError(
                409, "app \(bundle) belongs to team \(owner) already; to give it to team \(team), DELETE /api/v1/apps/\(bundle) first")
        }
        return .json(201, ["bundleId": .string(bundle), "teamId": .string(team)])
    }
}
