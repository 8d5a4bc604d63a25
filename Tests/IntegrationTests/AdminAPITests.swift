import APNsCore
import Foundation
import ProviderClient
import Testing

@Suite("Admin API")
struct AdminAPITests {
    @Test func healthEndpoints() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        #expect(try emulator.admin("GET", "/livez").status == 200)
        let ready = try emulator.admin("GET", "/readyz")
        #expect(ready.status == 200)
        #expect(ready.json["status"]?.stringValue == "ready")
    }

    @Test func deviceCreationValidatesItsInput() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        #expect(try emulator.admin("POST", "/api/v1/devices", body: ["environment": "sandbox"]).status == 400)
        #expect(try emulator.admin("POST", "/api/v1/devices", body: ["bundleId": "com.example.app"]).status == 400)
        let badEnv = try emulator.admin("POST", "/api/v1/devices", body: ["bundleId": "com.example.app", "environment": "staging"])
        #expect(badEnv.status == 400)
        #expect(badEnv.json["error"]?.stringValue?.contains("sandbox") == true)
        let notJSON = try emulator.admin("POST", "/api/v1/devices", body: .string("x"))
        #expect(notJSON.status == 400)
        let created = try emulator.admin(
            "POST", "/api/v1/devices",
            body: ["bundleId": "com.example.app", "environment": "sandbox", "deviceId": "phone-1"])
        #expect(created.status == 201)
        #expect(created.json["deviceId"]?.stringValue == "phone-1")
        #expect(created.json["token"]?.stringValue?.count == 64)
        let again = try emulator.admin(
            "POST", "/api/v1/devices",
            body: ["bundleId": "com.example.app", "environment": "sandbox", "deviceId": "phone-1"])
        #expect(again.status == 409)
        #expect(try emulator.admin("DELETE", "/api/v1/devices/phone-1/apps/com.nope.app").status == 404)
        #expect(try emulator.admin("DELETE", "/api/v1/devices/nobody/apps/com.example.app").status == 404)
        #expect(try emulator.admin("GET", "/api/v1/nothing-here").status == 404)
        #expect(try emulator.admin("PUT", "/api/v1/devices").status == 405)
    }

    @Test func fieldsOfTheWrongTypeAreRefusedNotTakenAsAbsent() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let (device, _) = try emulator.createDevice()
        let app = "/api/v1/devices/\(device)/apps/\(EmulatorProcess.bundleID)"
        let declared = try emulator.admin("PUT", app + "/live-activities", body: ["types": ["DeliveryAttributes"]])
        #expect(declared.status == 200)
        let cases: [(String, String, JSONValue, String)] = [
            ("POST", "/api/v1/devices", ["bundleId": "com.example.app", "environment": "sandbox", "kind": 12345], "\"kind\" must be one of app,"),
            ("POST", "/api/v1/devices", ["bundleId": "com.example.app", "environment": "sandbox", "kind": []], "\"kind\" must be one of app,"),
            ("POST", "/api/v1/devices", ["bundleId": "com.example.app", "environment": "sandbox", "kind": [:]], "\"kind\" must be one of app,"),
            ("POST", "/api/v1/devices", ["bundleId": 7, "environment": "sandbox"], "\"bundleId\" must be a string, not 7"),
            (
                "PUT", app + "/live-activities", ["types": ["DeliveryAttributes"], "frequentUpdates": "true"],
                "\"frequentUpdates\" must be true or false"
            ),
            ("POST", app + "/activities", ["attributesType": "DeliveryAttributes", "pushToken": "no"], "\"pushToken\" must be true or false"),
            ("POST", app + "/activities", ["attributesType": "DeliveryAttributes", "channel": 1], "\"channel\" must be a string"),
            ("POST", "/api/v1/devices/\(device)/tap", ["apnsId": 12], "\"apnsId\" must be a string"),
            ("PUT", "/api/v1/tokens/00ff/state", ["state": ["active"]], "\"state\" must be a string"),
            ("POST", "/api/v1/faults", ["action": ["close": "yes"]], "action.close must be true or false"),
            ("POST", "/api/v1/faults", ["action": ["goAway": ["errorCode": "2"]]], "action.goAway.errorCode must be an HTTP/2 error code"),
        ]
        for (method, path, body, says) in cases {
            let reply = try emulator.admin(method, path, body: body)
            #expect(reply.status == 400, "\(method) \(path) \(body.serialized()): \(reply.raw)")
            #expect(reply.json["error"]?.stringValue?.contains(says) == true, "\(reply.raw)")
        }
        // Nothing was made meanwhile: one device, no activity, no fault rule.
        #expect(try emulator.admin("GET", "/api/v1/devices").json["devices"]?.arrayValue?.count == 1)
        #expect(try emulator.admin("GET", "/api/v1/devices/\(device)/activities").json["activities"]?.arrayValue?.isEmpty == true)
        #expect(try emulator.admin("GET", "/api/v1/faults").json["faults"]?.arrayValue?.isEmpty == true)
    }

    /// A field given as `null` is the same as leaving it out, nested ones too; where `null`
    /// means something (`focus`, `scheduledSummary`: off) it still does.
    @Test func nullFieldsAreTakenAsLeftOut() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let cases: [(String, String, JSONValue, Int)] = [
            ("POST", "/api/v1/devices", ["bundleId": "com.example.app", "environment": "sandbox", "token": .null, "deviceId": .null], 201),
            ("POST", "/api/v1/faults", ["id": .null, "match": .null, "action": ["status": 500, "reason": .null]], 201),
            ("POST", "/api/v1/faults", ["action": ["goAway": ["reason": .null]]], 201),
            ("POST", "/api/v1/clock", ["advanceSeconds": .null, "advanceMs": 5], 200),
        ]
        for (method, path, body, status) in cases {
            let reply = try emulator.admin(method, path, body: body)
            #expect(reply.status == status, "\(method) \(path) \(body.serialized()): \(reply.raw)")
        }
        let rule = try emulator.admin("GET", "/api/v1/faults").json["faults"]?.arrayValue?.first
        #expect(rule?["action"]?["reason"]?.stringValue == "InternalServerError", "the status's own reason, as when left out")
        let (device, _) = try emulator.createDevice()
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(device)", body: ["focus": true]).json["focus"] != .null)
        #expect(try emulator.admin("PATCH", "/api/v1/devices/\(device)", body: ["focus": .null]).json["focus"] == .null, "null turns Focus off")
        // The app's own data is kept as given: a null in a Live Activity's attributes is a value.
        let app = "/api/v1/devices/\(device)/apps/\(EmulatorProcess.bundleID)"
        #expect(try emulator.admin("PUT", app + "/live-activities", body: ["types": ["DeliveryAttributes"]]).status == 200)
        let started = try emulator.admin(
            "POST", app + "/activities",
            body: ["attributesType": "DeliveryAttributes", "attributes": ["order": "42", "note": .null], "contentState": ["eta": .null]])
        #expect(started.status == 201, "\(started.raw)")
        #expect(started.json["attributes"]?.objectValue?["note"] == .null && started.json["attributes"]?["note"] != nil, "\(started.raw)")
        #expect(started.json["contentState"]?.objectValue?["eta"] != nil, "\(started.raw)")
    }

    @Test func unknownFieldsAreRefusedWithTheAllowedOnes() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let (device, _) = try emulator.createDevice()
        let app = "/api/v1/devices/\(device)/apps/\(EmulatorProcess.bundleID)"
        let cases: [(String, String, JSONValue, String)] = [
            ("POST", "/api/v1/devices", ["bundleId": "com.example.app", "environment": "sandbox", "authorisation": "denied"], "\"authorisation\""),
            ("PATCH", "/api/v1/devices/\(device)", ["online": false, "lowpowermode": true], "\"lowpowermode\" (did you mean \"lowPowerMode\"?)"),
            ("PATCH", app, ["badge": 1, "appstate": "background"], "\"appstate\" (did you mean \"appState\"?)"),
            ("POST", "/api/v1/devices/batch", ["bundleId": "com.example.app", "environment": "sandbox", "count": 2, "idPrefx": "zz"], "\"idPrefx\""),
            ("POST", "/api/v1/devices/\(device)/apps", ["bundleId": "com.example.other", "environment": "sandbox", "tokn": "00ff"], "\"tokn\""),
            ("POST", "/api/v1/clock", ["advanceSeconds": 0, "advanceHours": 5], "\"advanceHours\""),
            ("POST", "/api/v1/faults", ["action": ["status": 500, "resaon": "Oops"]], "\"resaon\" in action"),
            ("POST", "/api/v1/keys", ["teamId": "TEAM000001", "keyId": "KEY0000009", "pem": "x", "enviroment": "sandbox"], "\"enviroment\""),
        ]
        for (method, path, body, says) in cases {
            let reply = try emulator.admin(method, path, body: body)
            #expect(reply.status == 400, "\(method) \(path) \(body.serialized()): \(reply.raw)")
            let message = reply.json["error"]?.stringValue ?? ""
            #expect(message.hasPrefix("unknown field \(says)") && message.contains("; allowed: "), "\(message)")
        }
        let allowed = try emulator.admin("PATCH", "/api/v1/devices/\(device)", body: ["lowPowerMode": 1]).json["error"]
        #expect(allowed == "\"lowPowerMode\" must be true or false, not 1")
        let listed = try emulator.admin("PATCH", "/api/v1/devices/\(device)", body: ["airplaneMode": true]).json["error"]
        #expect(listed == "unknown field \"airplaneMode\"; allowed: online, lowPowerMode, focus, scheduledSummary, muted, locked")
        // Nothing changed meanwhile.
        let after = try emulator.admin("GET", "/api/v1/devices").json["devices"]?.arrayValue ?? []
        #expect(after.count == 1)
        #expect(after.first?["online"] == true && after.first?["lowPowerMode"] == false)
        #expect(after.first?["apps"]?.arrayValue?.first?["badge"] == 0)
        #expect(try emulator.admin("GET", "/api/v1/clock").json["offsetMs"] == 0)
        #expect(try emulator.admin("GET", "/api/v1/faults").json["faults"]?.arrayValue?.isEmpty == true)

        // One of the two clock fields, not both: one would go unused.
        let both = try emulator.admin("POST", "/api/v1/clock", body: ["advanceSeconds": 1, "advanceMs": 1])
        #expect(both.status == 400 && both.json["error"] == "give \"advanceSeconds\" or \"advanceMs\", not both")
        // A backend PUT with nothing in it would replace the backend with one that does nothing.
        let backend = "/api/v1/apps/\(EmulatorProcess.bundleID)/backend"
        #expect(try emulator.admin("PUT", backend, body: ["addresseePointer": "/uid"]).status == 200)
        let empty = try emulator.admin("PUT", backend)
        #expect(empty.status == 400 && empty.json["error"]?.stringValue?.contains("to remove it, DELETE") == true, "\(empty.raw)")
        #expect(try emulator.admin("GET", backend).json["addresseePointer"] == "/uid")
    }

    /// Moves of the clock add up to at most 100 years ahead (times stay four-digit years);
    /// past that the move is refused and nothing changes; a reset sets it back.
    @Test func theClockGoesAtMostAHundredYearsAhead() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        for _ in 0..<91 { #expect(try emulator.admin("POST", "/api/v1/clock", body: ["advanceSeconds": .int(400 * 86_400)]).status == 200) }
        let before = try emulator.admin("GET", "/api/v1/clock").json["offsetMs"]?.intValue
        let refused = try emulator.admin("POST", "/api/v1/clock", body: ["advanceSeconds": .int(400 * 86_400)])
        #expect(refused.status == 400 && refused.json["error"]?.stringValue?.contains("100 years") == true, "\(refused.raw)")
        #expect(try emulator.admin("GET", "/api/v1/clock").json["offsetMs"]?.intValue == before)
        let now = try #require(try emulator.admin("GET", "/api/v1/clock").json["now"]?.stringValue)
        #expect(now.prefix(4).allSatisfy(\.isNumber) && now.dropFirst(4).first == "-", "\(now)")
        #expect(try emulator.admin("POST", "/api/v1/reset").status == 200)
        #expect(try emulator.admin("GET", "/api/v1/clock").json["offsetMs"] == 0)
    }

    @Test func notificationsAreNewestFirstWithTheDocumentedFieldsAndALimit() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        for i in 0..<5 {
            var push = try emulator.push(device.token, payload: #"{"aps":{"alert":"n\#(i)"}}"#)
            push.pushType = "alert"
            push.priority = "5"
            _ = try connection.send(push.request)
        }
        _ = try connection.send(try emulator.push("abcd").request)  // rejected, for another token

        let all = try emulator.notifications(token: device.token)
        #expect(all.count == 5)
        #expect(all.map { $0["payload"]?["aps"]?["alert"]?.stringValue } == ["n4", "n3", "n2", "n1", "n0"])
        let first = try #require(all.first)
        for field in ["apnsId", "token", "topic", "pushType", "priority", "environment", "status", "reason", "payload", "receivedAt"] {
            #expect(first.objectValue?.keys.contains(field) == true, "missing \(field)")
        }
        #expect(first["pushType"]?.stringValue == "alert")
        #expect(first["priority"]?.intValue == 5)
        #expect(first["environment"]?.stringValue == "sandbox")
        #expect(first["reason"] == .null)
        #expect(try emulator.notifications(token: device.token, limit: 2).count == 2)
        #expect(try emulator.notifications(token: device.token.uppercased()).count == 5)
        let everything = try emulator.notifications()
        #expect(everything.count == 6)
        #expect(everything.first?["token"]?.stringValue == "abcd")
        #expect(everything.first?["reason"]?.stringValue == "BadDeviceToken")
        #expect(try emulator.admin("GET", "/api/v1/notifications?limit=-1").status == 400)
    }

    @Test func resetGoesBackToTheStartStateAtomically() throws {
        let emulator = try EmulatorProcess(inProcess: true)
        let device = try emulator.createDevice()
        let connection = try emulator.connect()
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).status == 200)
        #expect(try emulator.admin("POST", "/api/v1/reset").status == 200)
        #expect(try emulator.notifications().isEmpty)
        #expect(try emulator.admin("GET", "/api/v1/devices/\(device.deviceID)").status == 404)
        // The token is gone with its device: a push now is a bad token, on the same connection.
        #expect(APNsResult(try connection.send(try emulator.push(device.token).request)).reason == "BadDeviceToken")
    }
}
