import APNsCore
import HTTP1Server

/// Fault rules (README, "Faults"): what the provider endpoint does instead of its usual answer.
struct FaultRoutes: AdminResource {
    unowned let api: AdminService

    func addRoutes(to r: inout AdminRouter) {
        r.add("GET", "/api/v1/faults", "fault rules in order") { req, _, http in try listFaults(req, http) }
        r.add("POST", "/api/v1/faults", "add a fault rule") { req, _, _ in
            var rule = try FaultJSON.parse(try req.jsonObject())
            let id = try state.withWorld { world throws(AdminError) -> String in
                // Judged under the lock, against the rules there are as the rule goes in.
                let count = world.faults.rules.count
                guard count < FaultRules.maxRules else {
                    throw AdminError(
                        507, "there are \(count) fault rules, as many as the emulator keeps (every push is matched against them); DELETE some first")
                }
                let position = try req.wholeNumber("position", in: 0...count, note: " (0 is first, \(count) after the last rule)")
                guard let id = world.addFault(rule, at: position) else {
                    throw AdminError(
                        409,
                        "a fault rule with id \"\(rule.id)\" exists already; choose another id, leave \"id\" out for one to be given, or DELETE /api/v1/faults/\(rule.id) first"
                    )
                }
                return id
            }
            rule.id = id
            let warnings = FaultJSON.warnings(rule)
            host.log("admin: fault rule \(rule.id) added" + warnings.map { "; " + $0 }.joined())
            var body = FaultJSON.rule(rule)
            if !warnings.isEmpty, case .object(var object) = body {
                object["warnings"] = .array(warnings.map(JSONValue.string))
                body = .object(object)
            }
            return .json(201, body)
        }
        r.add("DELETE", "/api/v1/faults", "remove every fault rule") { _, _, _ in
            state.withWorld { $0.removeAllFaults() }
            return .json(200, ["deleted": true])
        }
        r.add("GET", "/api/v1/faults/{id}", "one fault rule") { _, p, _ in
            let id = p["id"]!
            guard let rule = state.readWorld({ $0.faults.rules.first { $0.id == id } }) else { throw AdminError(404, "no fault rule \(id)") }
            return .json(200, FaultJSON.rule(rule))
        }
        r.add("DELETE", "/api/v1/faults/{id}", "remove a fault rule") { _, p, _ in
            let id = p["id"]!
            guard state.withWorld({ $0.removeFault(id: id) }) else { throw AdminError(404, "no fault rule \(id)") }
            return .json(200, ["id": .string(id), "deleted": true])
        }
    }

    /// In the order they are tried; the cursor is a position in that order, so a rule added or
    /// removed between pages shifts the rest by one.
    private func listFaults(_ request: HTTP1Request, _ http: HTTP1Connection) throws -> HTTP1ServerResponse? {
        let page = try PageRequest(request, list: "faults")
        let start = Int(clamping: try page.number(list: "faults") ?? 0)
        let (rules, more) = state.readWorld { world -> ([FaultInjectionRule], Bool) in
            let all = world.faults.rules
            guard start < all.count else { return ([], false) }
            let end = min(all.count, start + page.limit)
            return (Array(all[start..<end]), end < all.count)
        }
        let next = more ? PageRequest.encode(list: "faults", String(start + rules.count)) : nil
        return answerOffLoop(http) { .page("faults", rules.map(FaultJSON.rule), nextCursor: next) }
    }
}
