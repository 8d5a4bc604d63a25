// Changing an app's notification setup (and its badge) and a device's switches (Focus, the
// scheduled summary, the ring switch, the lock): one entry point for the admin API and the
// device protocol, so both refuse the same things in the same words.

extension World {
    /// Applies the setup fields of `object` (and `badge`, the app setting its own badge count)
    /// to an installed app; returns the app as it is now.
    public mutating func changeNotifications(
        deviceID: String, bundleID: String, _ object: JSONObject
    ) throws(DeviceRequestError) -> InstalledApp {
        guard var app = registry.devices[deviceID]?.apps[bundleID] else {
            throw DeviceRequestError(RegistryError.appNotInstalled(deviceID: deviceID, bundleID: bundleID))
        }
        do throws(NotificationSettingsError) {
            try app.settings.notifications.apply(object)
        } catch {
            throw DeviceRequestError("bad_request", error.description)
        }
        if let value = object["badge"], value != .null {
            guard let badge = value.intValue, (0...99_999).contains(badge) else {
                throw DeviceRequestError("bad_request", "\"badge\" must be a whole number from 0 (none) to 99999")
            }
            app.badge = Int(badge)
        }
        try? registry.updateDevice(deviceID) { [app] in $0.apps[bundleID] = app }
        return app
    }

    /// Applies the switch fields of `object` (`focus`, `scheduledSummary`, `muted`, `locked`).
    public mutating func changeAttention(deviceID: String, _ object: JSONObject) throws(DeviceRequestError) -> DeviceAttention {
        guard var attention = registry.devices[deviceID]?.attention else {
            throw DeviceRequestError(RegistryError.unknownDevice(deviceID))
        }
        do throws(NotificationSettingsError) { try attention.apply(object) } catch {
            throw DeviceRequestError("bad_request", error.description)
        }
        try? registry.updateDevice(deviceID) { [attention] in $0.attention = attention }
        return attention
    }
}
