// AdminClient: a typed client of the emulator's admin API over HTTP/1.1, for tests (the test
// kit re-exports it), the `load` command and scenarios. Knows the API's paths and JSON, not
// the emulator. Imports JSON, HTTP1Client, Networking and Foundation.

import Foundation
import JSON
import Networking

/// A typed client of the emulator's admin API (`/api/v1`): devices, notifications, faults and
/// reset. It speaks HTTP/1.1 to the admin listener, so it works as well against an emulator in
/// another process or a container as against a `TestEmulator`. Every call blocks until the
/// answer (long polls have their own timeout); an error status throws `EmulatorAdminError`
/// with the emulator's message.
public struct EmulatorAdminClient: Sendable {
    let http: AdminHTTP

    /// - Parameters:
    ///   - address: the admin listener (`--admin-listen`, 127.0.0.1:8197 by default).
    ///   - token: the `--admin-token`, when the emulator was started with one.
    public init(address: HostPort, token: String? = nil) {
        http = AdminHTTP(address: address, token: token)
    }

    // MARK: Devices

    /// Creates a virtual device with one app installed; the device is online and the app
    /// authorized and in the foreground unless said otherwise.
    @discardableResult
    public func createDevice(
        bundleID: String, environment: PushEnvironment = .sandbox, deviceID: String? = nil,
        authorization: String? = nil, appState: String? = nil
    ) throws(EmulatorAdminError) -> DeviceInfo {
        var body = JSONObject([("bundleId", .string(bundleID)), ("environment", .string(environment.rawValue))])
        if let deviceID { body["deviceId"] = .string(deviceID) }
        let created = try http.json("POST", "/api/v1/devices", body: .object(body))
        let id = created["deviceId"]?.stringValue ?? deviceID ?? ""
        if authorization != nil || appState != nil {
            try setApp(deviceID: id, bundleID: bundleID, authorization: authorization, appState: appState)
        }
        return try device(id)
    }

    public func device(_ deviceID: String) throws(EmulatorAdminError) -> DeviceInfo {
        DeviceInfo(try http.json("GET", "/api/v1/devices/\(deviceID.queryEncoded)"))
    }

    /// Every device, oldest first, fetched a page at a time.
    public func devices() throws(EmulatorAdminError) -> [DeviceInfo] {
        var all: [DeviceInfo] = []
        var cursor: String?
        repeat {
            let page = try devicesPage(limit: 10_000, cursor: cursor)
            all += page.items
            cursor = page.nextCursor
        } while cursor != nil
        return all
    }

    /// One page of devices, oldest first: `limit` 1 to 10,000, `cursor` the `nextCursor` of
    /// the page before (nil for the first).
    public func devicesPage(limit: Int = 1000, cursor: String? = nil) throws(EmulatorAdminError) -> AdminPage<DeviceInfo> {
        let reply = try http.json("GET", "/api/v1/devices" + Self.query(Self.paging(limit, cursor)))
        return AdminPage(reply, "devices", DeviceInfo.init)
    }

    public func deleteDevice(_ deviceID: String) throws(EmulatorAdminError) {
        _ = try http.json("DELETE", "/api/v1/devices/\(deviceID.queryEncoded)")
    }

    /// Changes an app's notification permission (`authorized`, `denied`, …), its state
    /// (`foreground`, `background`, `suspended`, `notRunning`, `forceQuit`) or background mode.
    public func setApp(
        deviceID: String, bundleID: String, authorization: String? = nil, appState: String? = nil,
        backgroundMode: Bool? = nil
    ) throws(EmulatorAdminError) {
        var body = JSONObject()
        if let authorization { body["authorization"] = .string(authorization) }
        if let appState { body["appState"] = .string(appState) }
        if let backgroundMode { body["backgroundMode"] = .bool(backgroundMode) }
        _ = try http.json("PATCH", "/api/v1/devices/\(deviceID.queryEncoded)/apps/\(bundleID.queryEncoded)", body: .object(body))
    }

    /// Takes the device offline (pushes are stored, one per app) or back online (delivered).
    public func setOnline(deviceID: String, _ online: Bool) throws(EmulatorAdminError) {
        _ = try http.json("PATCH", "/api/v1/devices/\(deviceID.queryEncoded)", body: ["online": .bool(online)])
    }

    /// Installs an app on an existing device; returns its token.
    @discardableResult
    public func install(deviceID: String, bundleID: String, environment: PushEnvironment = .sandbox) throws(EmulatorAdminError) -> String {
        let body: JSONValue = ["bundleId": .string(bundleID), "environment": .string(environment.rawValue)]
        _ = try http.json("POST", "/api/v1/devices/\(deviceID.queryEncoded)/apps", body: body)
        return try token(deviceID: deviceID, bundleID: bundleID)
    }

    /// Uninstalls an app: later pushes to its token get 410 `Unregistered`.
    public func uninstall(deviceID: String, bundleID: String) throws(EmulatorAdminError) {
        _ = try http.json("DELETE", "/api/v1/devices/\(deviceID.queryEncoded)/apps/\(bundleID.queryEncoded)")
    }

    /// Uninstalls and installs again; returns the new token (the old one becomes invalid).
    public func reinstall(deviceID: String, bundleID: String) throws(EmulatorAdminError) -> String {
        _ = try http.json("POST", "/api/v1/devices/\(deviceID.queryEncoded)/apps/\(bundleID.queryEncoded)/reinstall")
        return try token(deviceID: deviceID, bundleID: bundleID)
    }

    /// Taps a notification shown on the device; returns the callbacks that fired.
    @discardableResult
    public func tap(deviceID: String, apnsID: String) throws(EmulatorAdminError) -> [String] {
        let reply = try http.json("POST", "/api/v1/devices/\(deviceID.queryEncoded)/tap", body: ["apnsId": .string(apnsID)])
        return reply["callbacks"]?.arrayValue?.compactMap(\.stringValue) ?? []
    }

    private func token(deviceID: String, bundleID: String) throws(EmulatorAdminError) -> String {
        guard let token = try device(deviceID).apps.first(where: { $0.bundleID == bundleID })?.token else {
            throw EmulatorAdminError(status: 404, message: "app \(bundleID) has no token on device \(deviceID)")
        }
        return token
    }

    // MARK: Notifications

    /// Records matching `filter`, newest first.
    public func notifications(_ filter: PushFilter = PushFilter(), limit: Int = 1000) throws(EmulatorAdminError) -> [PushRecord] {
        let items = filter.queryItems + [("limit", String(limit))]
        let reply = try http.json("GET", "/api/v1/notifications" + Self.query(items))
        return (reply["notifications"]?.arrayValue ?? []).map(PushRecord.init)
    }

    /// One page of the records matching `filter`, newest first; pass its `nextCursor` (with
    /// the same filter) for the older ones.
    public func notificationsPage(
        _ filter: PushFilter = PushFilter(), limit: Int = 1000, cursor: String? = nil
    )
        throws(EmulatorAdminError) -> AdminPage<PushRecord>
    {
        let reply = try http.json("GET", "/api/v1/notifications" + Self.query(filter.queryItems + Self.paging(limit, cursor)))
        return AdminPage(reply, "notifications", PushRecord.init)
    }

    /// The newest record matching `filter`, or nil.
    public func latestNotification(_ filter: PushFilter = PushFilter()) throws(EmulatorAdminError) -> PushRecord? {
        let reply = try http.send("GET", "/api/v1/notifications/latest" + Self.query(filter.queryItems))
        if reply.status == 404 { return nil }
        guard reply.status == 200 else { throw reply.error }
        return PushRecord(reply.json)
    }

    /// The first record matching `filter` (among those already received when `filter.sinceMs`
    /// is set, e.g. to 0; otherwise the next to arrive). Blocks up to `timeoutSeconds`; nil when
    /// none came. Outcome filters wait for the outcome: `outcome: "delivered"` returns once the
    /// device has the notification.
    public func waitForNotification(_ filter: PushFilter, timeoutSeconds: Double) throws(EmulatorAdminError) -> PushRecord? {
        let timeout = min(max(timeoutSeconds, 0), 600)
        let items = filter.queryItems + [("timeout", String(timeout))]
        let reply = try http.send("GET", "/api/v1/notifications/wait" + Self.query(items), timeoutSeconds: timeout + 5)
        if reply.status == 408 { return nil }
        guard reply.status == 200 else { throw reply.error }
        return PushRecord(reply.json)
    }

    /// Deletes the records matching `filter` (all of them by default).
    public func deleteNotifications(_ filter: PushFilter = PushFilter()) throws(EmulatorAdminError) {
        _ = try http.json("DELETE", "/api/v1/notifications" + Self.query(filter.queryItems))
    }

    // MARK: Faults and reset

    /// Adds a fault rule; returns its id.
    @discardableResult
    public func addFault(_ rule: FaultRule) throws(EmulatorAdminError) -> String {
        try http.json("POST", "/api/v1/faults", body: rule.json)["id"]?.stringValue ?? ""
    }

    public func removeFault(id: String) throws(EmulatorAdminError) {
        _ = try http.json("DELETE", "/api/v1/faults/\(id.queryEncoded)")
    }

    public func removeAllFaults() throws(EmulatorAdminError) {
        _ = try http.json("DELETE", "/api/v1/faults")
    }

    /// Back to the state the emulator started in: records, devices, tokens, faults.
    public func reset() throws(EmulatorAdminError) {
        _ = try http.json("POST", "/api/v1/reset")
    }

    /// A Prometheus sample from `/metrics`, summed over its label sets; 0 when absent.
    public func metric(_ name: String) throws(EmulatorAdminError) -> Double {
        let reply = try http.send("GET", "/metrics")
        var total = 0.0
        for line in String(decoding: reply.body, as: UTF8.self).split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: " ")
            guard parts.count == 2, parts[0] == name || parts[0].hasPrefix(name + "{") else { continue }
            total += Double(parts[1]) ?? 0
        }
        return total
    }

    static func paging(_ limit: Int, _ cursor: String?) -> [(String, String)] {
        [("limit", String(limit))] + (cursor.map { [("cursor", $0)] } ?? [])
    }

    static func query(_ items: [(String, String)]) -> String {
        items.isEmpty ? "" : "?" + items.map { "\($0.0)=\($0.1.queryEncoded)" }.joined(separator: "&")
    }
}

/// One page of a list of the admin API and where the next one starts.
public struct AdminPage<Item: Sendable>: Sendable {
    public var items: [Item]
    /// Pass as `cursor` for the next page; nil on the last one.
    public var nextCursor: String?

    init(_ reply: JSONValue, _ field: String, _ item: (JSONValue) -> Item) {
        items = (reply[field]?.arrayValue ?? []).map(item)
        nextCursor = reply["nextCursor"]?.stringValue
    }
}
