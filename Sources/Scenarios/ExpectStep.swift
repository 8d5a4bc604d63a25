import APNsCore
import AdminClient

/// `expect`: the state right now, no waiting. A device's account, token and app settings;
/// an exact count of records or backend calls; or the cross-account detector's count.
extension StepRunner {
    func expect() throws(StepFailure) -> String? {
        if fields["deliveries"] != nil || fields["backendCalls"] != nil {
            guard let wanted = try fields.int("count") else { throw StepFailure("\"count\" is required") }
            let watch = try Watch(fields, context: context, since: try since())
            let found = try watch.matches()
            guard found.count == wanted else {
                throw StepFailure(
                    "\(found.count) instead of \(wanted)", expected: "exactly \(wanted) × \(watch.description)",
                    seen: found.isEmpty ? "none" : "\(found.count):\n" + found.joined(separator: "\n"))
            }
            return "\(wanted) as expected"
        }
        if let checks = fields.nested("checks") {
            if let value = checks["crossAccount"], let problem = ValueRule.crossAccount.problem(value) {
                throw StepFailure("\"checks.crossAccount\" \(problem)")
            }
            guard let wanted = try checks.int("crossAccount") else { throw StepFailure("\"checks.crossAccount\" is required") }
            let failures = try CheckSummary.crossAccount(context)
            guard failures.count == wanted else {
                throw StepFailure(
                    "the detector counted \(failures.count)", expected: "crossAccount \(wanted)",
                    seen: failures.isEmpty ? "crossAccount 0" : failures.joined(separator: "\n"))
            }
            return "crossAccount \(wanted)"
        }
        return try expectDevice()
    }

    private func expectDevice() throws(StepFailure) -> String? {
        let alias = try alias
        let bundle = try bundleID()
        let info = try context.info(alias)
        let app = info.apps.first { $0.bundleID == bundle }
        var expected: [String] = []
        var seen: [String] = []
        func compare(_ name: String, _ want: String, _ have: String, _ ok: Bool) {
            if !ok {
                expected.append("\(name) \(want)")
                seen.append("\(name) \(have)")
            }
        }
        if fields.has("userId") {
            let want = fields.string("userId")
            compare("userId", want ?? "null (nobody)", info.userID ?? "null (nobody)", info.userID == want)
        }
        let token = app?.token
        if let want = fields.string("token") {
            compare("token", short(want), short(token), token?.lowercased() == want.lowercased())
        }
        if let other = fields.string("tokenNot") {
            compare("token", "≠ \(short(other))", short(token), token != nil && token?.lowercased() != other.lowercased())
        }
        if let want = try fields.bool("tokenUploadPending") {
            let have = app?.tokenUploadPending ?? false
            compare("tokenUploadPending", String(want), String(have), have == want)
        }
        if let want = fields.string("authorization") {
            compare("authorization", want, app?.authorization ?? "not installed", app?.authorization == want)
        }
        if let want = fields.string("appState") {
            compare("appState", want, app?.appState ?? "not installed", app?.appState == want)
        }
        if let want = try fields.bool("installed") {
            compare("installed", String(want), String(app != nil), (app != nil) == want)
        }
        guard expected.isEmpty else {
            throw StepFailure("\(alias) is not as expected", expected: expected.joined(separator: ", "), seen: seen.joined(separator: ", "))
        }
        return nil
    }
}
