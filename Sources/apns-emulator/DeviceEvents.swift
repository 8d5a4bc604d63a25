import DeviceClient
import Foundation

/// The emulator's frames as the `device` command's events on stdout: one JSON object a line,
/// `{"event": TYPE, …}`; notifications are acked once printed.
extension DeviceCLI {
    func handle(_ frame: JSONObject) {
        let type = frame["type"]?.stringValue ?? ""
        switch type {
        case "welcome":
            welcomed = true
            everWelcomed = true
            welcomeDeadline = nil
            outageAnnounced = false
            backoffMilliseconds = 100
            if announceOnline {
                announceOnline = false
                emit(["event": "online", "deviceId": .string(device.deviceID)])
            }
        case "registered":
            var event = JSONObject([("event", "registered")])
            event["token"] = frame["token"] ?? .null
            event["bundleId"] = frame["bundleId"] ?? .null
            event["environment"] = frame["environment"] ?? .null
            event["kind"] = frame["kind"] ?? "app"
            event["topic"] = frame["topic"] ?? .null
            emit(.object(event))
        case "notification":
            handleNotification(frame)
        case "error":
            var event = errorEvent(code: frame["code"]?.stringValue ?? "unknown", message: frame["message"]?.stringValue ?? "")
            event["fatal"] = .bool(frame["fatal"]?.boolValue ?? false)
            emit(.object(event))
            if !welcomed, frame["code"]?.stringValue != "unavailable" {
                // The emulator answers hello before anything else: an error before welcome
                // means it rejects this device, and retrying would only repeat that (except
                // `unavailable`: instances sharing their state through Redis that cannot reach
                // it; the connection closes and the device tries again).
                let why = "\(frame["code"]?.stringValue ?? "error"): \(frame["message"]?.stringValue ?? "")"
                releaseHeld()
                FileHandle.standardError.write(Data("apns-emulator: the emulator rejected device \(device.deviceID): \(why)\n".utf8))
                device.disconnect()
                exit(1)
            }
            // A flow waiting for an answer stops at an error (the emulator answers in order).
            reinstallAfterErase = false
            installAfterUninstall = false
        case "replaced":
            replaced()
        case "removed":
            removed()
        case "appUpdated":
            if frame["bundleId"]?.stringValue == app.bundleID {
                if let value = frame["appState"]?.stringValue.flatMap(AppState.init(rawValue:)) { app.appState = value }
                if let value = frame["authorization"]?.stringValue.flatMap(Authorization.init(rawValue:)) { app.authorization = value }
                if let value = frame["backgroundMode"]?.boolValue { app.backgroundMode = value }
                // Kept for the next hello, so a reconnect declares the setup the emulator has.
                if let value = frame["notificationSettings"]?.objectValue { app.notificationSettings = value }
            }
            emit(.object(event(from: frame)))
        case "uninstalled":
            emit(.object(event(from: frame)))
            if installAfterUninstall && frame["bundleId"]?.stringValue == app.bundleID {
                installAfterUninstall = false
                sendRequest(.install(app))
            }
        case "erased":
            emit(.object(event(from: frame)))
            if reinstallAfterErase {
                reinstallAfterErase = false
                sendRequest(.install(app))
            }
        case "deviceUpdated":
            // Its own request's answer, or a change made through the admin API: the next hello
            // says what the emulator has.
            if let on = frame["lowPowerMode"]?.boolValue { device.lowPowerMode = on }
            emit(.object(event(from: frame)))
        default:
            // appUpdated, tapped, restored, pong, and anything a later version adds.
            emit(.object(event(from: frame)))
        }
    }

    func handleNotification(_ frame: JSONObject) {
        let notification: DeliveredNotification
        do {
            notification = try DeliveredNotification(frame: frame)
        } catch {
            emit(.object(errorEvent(code: "bad_frame", message: error.message)))
            return
        }
        if isRepeated(notification) {
            if held != nil {
                acks.append(notification.id)
            } else {
                do { try device.ack(notification.id) } catch { /* the connection is gone; handled by the loop */  }
            }
            return
        }
        // Built in order, not through the keyed setter (which looks each key up first).
        var members: [(key: String, value: JSONValue)] = [
            ("event", "notification"), ("apnsId", .string(notification.apnsID)), ("pushType", .string(notification.pushType)),
            ("payload", notification.payload), ("callbacks", .array(notification.callbacks.map { .string($0) })),
            ("display", .string(notification.display)),
        ]
        if let reason = notification.reason { members.append(("reason", .string(reason))) }
        if let presentation = frame["presentation"] { members.append(("presentation", presentation)) }
        members += [
            ("id", .int(notification.id)), ("bundleId", .string(notification.bundleID)), ("priority", .int(Int64(notification.priority))),
            ("collapseId", notification.collapseID.map { .string($0) } ?? .null), ("stored", .bool(notification.stored)),
            ("topic", .string(notification.topic)), ("token", .string(notification.token)),
        ]
        let event = JSONObject(members)
        emit(.object(event))
        if notification.isDisplayed { lastDisplayedAPNsID = notification.apnsID }
        if held != nil {
            acks.append(notification.id)
        } else {
            do { try device.ack(notification.id) } catch { /* the connection is gone; handled by the loop */  }
        }
    }

    /// Whether this delivery (its id, apns-id and token: ids start over when the emulator does)
    /// came before; notes it when not. A bounded ring of the newest.
    private func isRepeated(_ notification: DeliveredNotification) -> Bool {
        let key = DeliveryKey(id: notification.id, apnsID: notification.apnsID, token: notification.token)
        guard recentDeliveries.insert(key).inserted else { return true }
        if recentDeliveryOrder.count < Self.recentDeliveriesKept {
            recentDeliveryOrder.append(key)
        } else {
            recentDeliveries.remove(recentDeliveryOrder[recentDeliveryNext])
            recentDeliveryOrder[recentDeliveryNext] = key
            recentDeliveryNext = (recentDeliveryNext + 1) % Self.recentDeliveriesKept
        }
        return false
    }

    /// `{"event": <type>, …the frame's other fields}`.
    func event(from frame: JSONObject) -> JSONObject {
        var event = JSONObject([("event", frame["type"] ?? .null)])
        event.members.append(contentsOf: frame.members.filter { $0.key != "type" && $0.key != "event" })
        return event
    }

    func errorEvent(code: String, message: String) -> JSONObject {
        JSONObject([("event", "error"), ("code", .string(code)), ("message", .string(message))])
    }

    func emit(_ event: JSONValue) {
        if held != nil {
            event.append(to: &held!)
            held!.append(UInt8(ascii: "\n"))
            return
        }
        var line = event.serializedBytes()
        line.append(UInt8(ascii: "\n"))
        write(line)
    }
}
