import APNsCore
import AdminClient
import Foundation

/// Device, app and account steps: each is one or two admin API calls on a virtual device.
extension StepRunner {
    func createDevice() throws(StepFailure) -> String? {
        let alias = try fields.requiredString("alias")
        let bundle = fields.string("bundleId") ?? context.scenario.bundleID
        let environment = fields.string("environment") ?? "sandbox"
        let deviceID = fields.string("deviceId") ?? alias
        let created = try installAndLaunch(path: "/api/v1/devices", bundle: bundle, environment: environment, deviceID: deviceID)
        let id = created["deviceId"]?.stringValue ?? deviceID
        context.devices[alias] = RunContext.DeviceRef(deviceID: id, bundleID: bundle, environment: environment)
        return "device \(id), token \(short(created["token"]?.stringValue))"
    }

    func install() throws(StepFailure) -> String? {
        let (ref, bundle) = (try context.device(alias), try bundleID())
        let created = try installAndLaunch(
            path: "/api/v1/devices/\(ref.deviceID.pathEncoded)/apps", bundle: bundle,
            environment: fields.string("environment") ?? ref.environment, deviceID: nil)
        return "token \(short(created["token"]?.stringValue))"
    }

    /// Installs the app not running, then launches it into the state asked for (background by
    /// default), as a user opening a freshly installed app: the launch is what makes the app
    /// register for notifications (and call `register`, or keep its token for the next login).
    /// `appState` notRunning or terminated leaves it installed and never opened.
    private func installAndLaunch(path: String, bundle: String, environment: String, deviceID: String?) throws(StepFailure) -> JSONValue {
        var body = JSONObject([("bundleId", .string(bundle)), ("environment", .string(environment)), ("appState", "notRunning")])
        if let deviceID { body["deviceId"] = .string(deviceID) }
        if let authorization = fields.string("authorization") { body["authorization"] = .string(authorization) }
        if let mode = try fields.bool("backgroundMode") { body["backgroundMode"] = .bool(mode) }
        let created: JSONValue
        do { created = try api.request("POST", path, body: .object(body)) } catch {
            var failure = StepFailure(error, doing: "installing \(bundle)" + (deviceID.map { " on a new device \($0)" } ?? ""))
            // An emulator the runner did not start may have the device from an earlier run.
            if error.status == 409, deviceID != nil { failure.message += " (run with --reset, or give the step a \"deviceId\")" }
            throw failure
        }
        let id = created["deviceId"]?.stringValue ?? deviceID ?? ""
        let state = fields.string("appState") ?? "background"
        // A launch goes to foreground or background; suspended is a launched app sent there.
        let steps = state == "suspended" ? ["background", "suspended"] : state == "notRunning" ? [] : [state]
        for next in steps {
            try admin("launching \(bundle) on \(id) (\(next))") { () throws(EmulatorAdminError) in
                try api.setApp(deviceID: id, bundleID: bundle, appState: next)
            }
        }
        return created
    }

    func uninstall() throws(StepFailure) -> String? {
        let (ref, bundle) = (try context.device(alias), try bundleID())
        try admin("uninstalling \(bundle) from \(ref.deviceID)") { () throws(EmulatorAdminError) in
            try api.uninstall(deviceID: ref.deviceID, bundleID: bundle)
        }
        return nil
    }

    /// The emulator's reinstall (uninstall and install again, settings kept, the app
    /// registers with its new token); after an uninstall step, an install and launch.
    func reinstall() throws(StepFailure) -> String? {
        let (ref, bundle) = (try context.device(alias), try bundleID())
        guard let old = try context.app(alias, bundleID: bundle)?.token else {
            return "was not installed: " + (try install() ?? "")
        }
        let token = try admin("reinstalling \(bundle) on \(ref.deviceID)") { () throws(EmulatorAdminError) in
            try api.reinstall(deviceID: ref.deviceID, bundleID: bundle)
        }
        return "token \(short(old)) → \(short(token))"
    }

    /// Restores `from`'s backup onto `device`, making that device first when it is new.
    func restore() throws(StepFailure) -> String? {
        let target = try fields.requiredString("device")
        let source = try context.device(try fields.requiredString("from"))
        if context.devices[target] == nil {
            let body: JSONValue = ["bundleId": .string(source.bundleID), "environment": .string(source.environment), "deviceId": .string(target)]
            let created = try admin("creating device \(target) to restore onto") { () throws(EmulatorAdminError) in
                try api.request("POST", "/api/v1/devices", body: body)
            }
            context.devices[target] = RunContext.DeviceRef(
                deviceID: created["deviceId"]?.stringValue ?? target,
                bundleID: source.bundleID, environment: source.environment)
        }
        let ref = try context.device(target)
        try admin("restoring \(source.deviceID)'s backup onto \(ref.deviceID)") { () throws(EmulatorAdminError) in
            try api.restore(deviceID: ref.deviceID, fromDeviceID: source.deviceID)
        }
        return "token \(short(try context.app(target)?.token))"
    }

    func rotate() throws(StepFailure) -> String? {
        let (ref, bundle) = (try context.device(alias), try bundleID())
        let old = try context.app(alias, bundleID: bundle)?.token
        try admin("rotating the tokens of \(bundle) on \(ref.deviceID)") { () throws(EmulatorAdminError) in
            try api.rotate(deviceID: ref.deviceID, bundleID: bundle)
        }
        return "token \(short(old)) → \(short(try context.app(alias, bundleID: bundle)?.token))"
    }

    func setAuthorization(_ authorization: String) throws(StepFailure) -> String? {
        try patchApp(authorization: authorization)
        return nil
    }

    func setAppState(_ state: String) throws(StepFailure) -> String? {
        try patchApp(appState: state)
        return nil
    }

    private func patchApp(authorization: String? = nil, appState: String? = nil) throws(StepFailure) {
        let (ref, bundle) = (try context.device(alias), try bundleID())
        try admin("changing \(bundle) on \(ref.deviceID)") { () throws(EmulatorAdminError) in
            try api.setApp(deviceID: ref.deviceID, bundleID: bundle, authorization: authorization, appState: appState)
        }
    }

    func setOnline(_ online: Bool) throws(StepFailure) -> String? {
        let ref = try context.device(alias)
        try admin("taking \(ref.deviceID) \(online ? "online" : "offline")") { () throws(EmulatorAdminError) in
            try api.setOnline(deviceID: ref.deviceID, online)
        }
        return nil
    }

    func login() throws(StepFailure) -> String? {
        let (ref, user) = (try context.device(alias), try fields.requiredString("user"))
        let previous = try admin("logging \(user) in on \(ref.deviceID)") { () throws(EmulatorAdminError) in
            try api.login(deviceID: ref.deviceID, userID: user)
        }
        return previous.map { "was \($0)" }
    }

    func logout() throws(StepFailure) -> String? {
        let ref = try context.device(alias)
        let previous = try admin("logging out on \(ref.deviceID)") { () throws(EmulatorAdminError) in try api.logout(deviceID: ref.deviceID) }
        return previous.map { "was \($0)" } ?? "nobody was logged in"
    }

    /// Logout, then login: two calls, as an app that signs out and back in makes them.
    func switchAccount() throws(StepFailure) -> String? {
        let previous = try logout()
        _ = try login()
        return previous
    }

    /// Taps `apnsId`, or the newest notification on screen or in Notification Center.
    func tap() throws(StepFailure) -> String? {
        let ref = try context.device(alias)
        var apnsID = fields.string("apnsId")
        if apnsID == nil {
            let records = try admin("listing \(ref.deviceID)'s notifications") { () throws(EmulatorAdminError) in
                try api.notifications(PushFilter(outcome: "delivered", deviceID: ref.deviceID), limit: 200)
            }
            apnsID = records.first { $0.display != nil && $0.display != "none" && !$0.callbacks.contains("didReceive") }?.apnsID
            guard apnsID != nil else { throw StepFailure("nothing to tap: no notification is shown on \(try alias)") }
        }
        let id = apnsID ?? ""
        let callbacks = try admin("tapping \(id) on \(ref.deviceID)") { () throws(EmulatorAdminError) in
            try api.tap(deviceID: ref.deviceID, apnsID: id)
        }
        return "\(id.prefix(8))… callbacks [\(callbacks.joined(separator: ", "))]"
    }
}

extension String {
    /// Percent-encoded for a path segment (aliases and ids are usually plain already).
    var pathEncoded: String {
        addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? self
    }
}

/// A token or id shortened for the report.
func short(_ text: String?) -> String {
    guard let text else { return "none" }
    return text.count > 12 ? String(text.prefix(12)) + "…" : text
}
