/// A call the simulated app makes to its backend, decided under the state lock and made
/// outside it: the hook (with the backend's settings as they were) and what fills it in.
public struct BackendIntent: Sendable {
    public var hook: BackendHookKind
    public var backend: AppBackend
    public var values: HookValues
    /// fetch: the push's payload bytes, parsed for `{{payload:…}}` outside the lock.
    public var payload: [UInt8]?
}

/// A delivery whose payload named another account than the one logged in on the device.
public struct CrossAccountDelivery: Sendable, Equatable {
    public var sequence: UInt64
    public var apnsID: String
    public var deviceID: String
    public var bundleID: String
    public var userID: String?
    public var addressee: String
    public var atMs: Int64
}

/// Accounts on devices and the app's calls to its backend (docs/device-model.md, "The app's
/// backend"). The rules live here, once, for virtual devices and device sockets alike:
/// - `register` on every registration callback (install, launch, reinstall, restore, token
///   rotation, reconnect), whether notifications are permitted or not, but only while an
///   account is logged in; a token received while logged out is uploaded at login;
/// - `bind` on login, `unbind` on logout (switching accounts is both, in that order);
/// - `fetch` when the app's code runs for a push (a background push that ran, a tap).
extension World {
    /// At most this many cross-account deliveries are kept for `GET /api/v1/checks` (the
    /// counter keeps counting).
    public static let crossAccountKeep = 1_000

    public mutating func setBackend(_ backend: AppBackend?, bundleID: String) throws(RegistryError) {
        guard DeviceRegistry.isValidBundleID(bundleID) else { throw .invalidBundleID(bundleID) }
        backends[bundleID] = backend
    }

    /// False when the app had no backend.
    public mutating func removeBackend(bundleID: String) -> Bool { backends.removeValue(forKey: bundleID) != nil }

    /// Logs `userID` in on the device (after logging out whoever was). Returns who was logged in.
    @discardableResult
    public mutating func login(deviceID: String, userID: String) throws(DeviceRequestError) -> String? {
        guard Self.isValidUserID(userID) else {
            throw DeviceRequestError("bad_request", "\"userId\" must be 1 to 256 characters without control characters")
        }
        // The bundle ids, not a copy of the device: changing the device while a copy of it is
        // held copies its whole app dictionary, once per app.
        guard let bundleIDs = registry.devices[deviceID]?.apps.keys.sorted() else {
            throw DeviceRequestError(RegistryError.unknownDevice(deviceID))
        }
        let previous = registry.devices[deviceID]?.userID
        if previous == userID { return previous }
        if previous != nil { try logout(deviceID: deviceID) }
        try? registry.updateDevice(deviceID) { $0.userID = userID }
        for bundleID in bundleIDs {
            if registry.devices[deviceID]?.apps[bundleID]?.uploadPending == true {
                try? registry.updateDevice(deviceID) { $0.apps[bundleID]?.uploadPending = false }
                call(.register, deviceID: deviceID, bundleID: bundleID)
            }
            call(.bind, deviceID: deviceID, bundleID: bundleID)
        }
        return previous
    }

    /// Logs the account out (unbind for each app). Returns who was logged in (nil: nobody).
    @discardableResult
    public mutating func logout(deviceID: String) throws(DeviceRequestError) -> String? {
        guard let device = registry.devices[deviceID] else { throw DeviceRequestError(RegistryError.unknownDevice(deviceID)) }
        guard let previous = device.userID else { return nil }
        for bundleID in device.apps.keys.sorted() { call(.unbind, deviceID: deviceID, bundleID: bundleID) }
        try? registry.updateDevice(deviceID) { $0.userID = nil }
        return previous
    }

    /// The app's `didRegisterForRemoteNotifications` ran with its current token (installs,
    /// launches, rotations and reconnects call this).
    mutating func didRegister(deviceID: String, bundleID: String) {
        // Only the values are read: a copy of the device held while it is changed would make
        // the change copy its whole app dictionary.
        guard let pending = registry.devices[deviceID]?.apps[bundleID]?.uploadPending else { return }
        if registry.devices[deviceID]?.userID == nil {
            if !pending { try? registry.updateDevice(deviceID) { $0.apps[bundleID]?.uploadPending = true } }
            return
        }
        call(.register, deviceID: deviceID, bundleID: bundleID)
    }

    /// Whether a change of run state launches the app (and so registers again). An app
    /// installed not running registers at its first launch.
    static func isLaunch(from old: AppState, to new: AppState) -> Bool {
        (old == .notRunning || old == .terminated) && (new == .foreground || new == .background)
    }

    /// Queues a hook call when the app's backend has that hook.
    mutating func call(
        _ hook: BackendHookKind, deviceID: String, bundleID: String, payload: [UInt8]? = nil, response: (apnsID: String, NotificationResponse)? = nil,
        apnsID: String? = nil
    ) {
        guard let backend = backends[bundleID], backend.hooks[hook] != nil,
            let device = registry.devices[deviceID], let app = device.apps[bundleID]
        else { return }
        let token = app.tokens[.app] ?? app.tokens.values.sorted().first
        var values = HookValues(
            token: token, deviceID: deviceID, bundleID: bundleID, environment: app.environment,
            userID: device.userID)
        values.apnsID = apnsID
        if let (apnsID, answer) = response {
            values.apnsID = apnsID
            values.actionIdentifier = answer.actionIdentifier
            values.userText = answer.userText
        }
        backendOutbox.append(BackendIntent(hook: hook, backend: backend, values: values, payload: payload))
    }

    /// The app hands a new Live Activity token to its backend (`register`, with `{{tokenKind}}`
    /// `pushToStart` or `update`, `{{activityId}}` and `{{attributesType}}`). Unlike the app's
    /// device token it is sent whether or not someone is logged in (`{{userId}}` is then empty).
    mutating func accountsCallRegister(
        deviceID: String, bundleID: String, token: String, kind: LiveActivityTokenKind, attributesType: String, activityID: String?
    ) {
        guard let backend = backends[bundleID], backend.hooks[.register] != nil,
            let device = registry.devices[deviceID], let app = device.apps[bundleID]
        else { return }
        var values = HookValues(token: token, deviceID: deviceID, bundleID: bundleID, environment: app.environment, userID: device.userID)
        values.tokenKind = kind.rawValue
        values.activityID = activityID
        values.attributesType = attributesType
        backendOutbox.append(BackendIntent(hook: .register, backend: backend, values: values, payload: nil))
    }

    public mutating func takeBackendIntents() -> [BackendIntent] {
        defer { backendOutbox.removeAll() }
        return backendOutbox
    }

    /// At delivery: who was logged in, whom the payload names, and the fetch the app makes.
    /// Parses the payload only for apps whose backend names an addressee field.
    mutating func noteAccount(
        _ notification: PendingNotification, verdict: DeliveryVerdict, nowMs: Int64,
        userID known: String?? = nil
    ) {
        // A virtual device's push passes its device's user in (`.some(nil)`: nobody logged
        // in): one hash lookup, and one copy of the device, fewer per request.
        guard let userID = known ?? registry.devices[notification.deviceID].map(\.userID) else { return }
        var addressee: String?
        if verdict.outcome == .delivered, let pointer = backends[notification.bundleID]?.addresseePointer.flatMap(JSONPointer.init),
            let payload = try? JSONValue.parse(notification.payload), let value = pointer.resolve(in: payload), value != .null,
            value.stringValue?.allSatisfy({ $0 == " " || $0 == "\t" }) != true
        {
            // null, "" or spaces name nobody: no one to deliver to the wrong account.
            addressee = HookTemplate.text(value)
        }
        let crossAccount = addressee != nil && addressee != userID
        if userID != nil || addressee != nil {
            records.update(sequence: notification.sequence) {
                $0.userID = userID
                $0.addressee = addressee
                $0.crossAccount = crossAccount
            }
        }
        if crossAccount, let addressee {
            noteCrossAccountDelivery(
                CrossAccountDelivery(
                    sequence: notification.sequence, apnsID: notification.apnsID, deviceID: notification.deviceID,
                    bundleID: notification.bundleID, userID: userID, addressee: addressee, atMs: nowMs))
        }
        if verdict.outcome == .delivered, verdict.callbacks.contains(AppCallback.didReceiveRemoteNotification) {
            call(.fetch, deviceID: notification.deviceID, bundleID: notification.bundleID, payload: notification.payload)
        }
    }

    /// Counts a cross-account delivery and keeps it (the newest `crossAccountKeep`) for the checks.
    mutating func noteCrossAccountDelivery(_ delivery: CrossAccountDelivery) {
        counters.crossAccountDeliveries += 1
        if crossAccountDeliveries.count >= Self.crossAccountKeep { crossAccountDeliveries.removeFirst() }
        crossAccountDeliveries.append(delivery)
    }

    public static func isValidUserID(_ id: String) -> Bool {
        !id.isEmpty && id.count <= 256 && !id.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
    }
}
