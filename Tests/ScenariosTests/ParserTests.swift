import APNsCore
import Foundation
import Scenarios
import Testing

/// The file check: what a broken scenario is told, before anything runs.
@Suite("Scenario files: parsing and checking")
struct ParserTests {
    func parse(_ text: String, variables: [String: String] = [:]) throws(ScenarioFileError) -> Scenario {
        try ScenarioParser.parse(Array(text.utf8), variables: variables)
    }

    /// The error for `text`, or a test failure when it parses.
    func error(_ text: String, variables: [String: String] = [:]) -> ScenarioFileError? {
        do {
            _ = try parse(text, variables: variables)
            Issue.record("expected an error for \(text)")
            return nil
        } catch {
            return error
        }
    }

    func steps(_ steps: String) -> String { #"{"name": "t", "steps": [\#(steps)]}"# }

    @Test func aSmallScenarioParsesWithItsDefaults() throws {
        let scenario = try parse(
            steps(
                #"""
                {"do": "device", "alias": "phone"},
                {"do": "login", "user": "alice"},
                {"do": "push", "payload": {"aps": {"alert": "hi"}}, "save": {"id": "${lastPush.apnsId}"}},
                {"do": "waitFor", "delivery": {"device": "phone", "apnsId": "${id}"}}
                """#))
        #expect(scenario.name == "t")
        #expect(scenario.bundleID == "com.example.app")
        #expect(scenario.steps.map(\.kind) == [.device, .login, .push, .waitFor])
        // One device: steps that do not name it act on it.
        #expect(scenario.steps[1].deviceAlias == "phone")
        #expect(scenario.steps[2].deviceAlias == "phone")
        #expect(scenario.steps[2].save.map(\.name) == ["id"])
        #expect(scenario.steps[1].label == "login alice on phone")
        #expect(scenario.expectedCrossAccount == 0)
    }

    @Test func notJSONSaysWhere() {
        let found = error("{\"name\": \"t\",\n \"steps\": [}")
        #expect(found?.message.hasPrefix("not valid JSON at line 2, column") == true)
        #expect(found?.message.contains("YAML") == false)
    }

    @Test func aYAMLFileIsToldScenariosAreJSON() {
        let found = error("name: t\nsteps:\n  - do: sleep\n    ms: 1\n")
        #expect(found?.message.hasSuffix("(scenario files are JSON: YAML converts with `yq -o json FILE`)") == true, "\(String(describing: found))")
    }

    @Test func anUnknownStepKindIsNamedWithAHint() {
        let found = error(steps(#"{"do": "device", "alias": "phone"}, {"do": "Login", "user": "a"}"#))
        #expect(found?.location == "step 2")
        #expect(found?.field == "do")
        #expect(found?.description.contains("unknown step kind \"Login\". Did you mean \"login\"?") == true)
    }

    @Test func aMissingFieldNamesTheStepAndTheField() {
        let found = error(steps(#"{"do": "device", "alias": "phone"}, {"do": "login", "device": "phone"}"#))
        #expect(found?.description == #"step 2 (login), field "user": is required: the account"#)
    }

    @Test func anUnknownFieldIsRefused() {
        let found = error(steps(#"{"do": "device", "alias": "phone", "colour": "red"}"#))
        #expect(found?.location == "step 1 (device)")
        #expect(found?.field == "colour")
        #expect(found?.message.contains("known: do, name, save, alias") == true)
    }

    @Test func aWrongTypeOrValueIsRefused() {
        #expect(
            error(steps(#"{"do": "advanceClock", "seconds": "soon"}"#))?.description
                == #"step 1 (advanceClock), field "seconds": must be a number"#)
        let state = error(steps(#"{"do": "device", "alias": "p", "appState": "asleep"}"#))
        #expect(state?.field == "appState")
        #expect(state?.message.contains("foreground, background") == true)
        let hook = error(steps(#"{"do": "waitFor", "backendCall": {"hook": "upload"}}"#))
        #expect(hook?.field == "backendCall.hook")
    }

    @Test func aVariableThatIsNotSetIsAnError() {
        let found = error(steps(#"{"do": "http", "url": "${BACKEND}/state"}"#))
        #expect(found?.location == "step 1 (http)")
        #expect(found?.field == "url")
        #expect(found?.message.contains("${BACKEND} is not set: pass --var BACKEND=VALUE") == true)
        // Given, or defaulted in the file, it is fine.
        #expect((try? parse(steps(#"{"do": "http", "url": "${BACKEND}/state"}"#), variables: ["BACKEND": "http://x"])) != nil)
        let defaulted = #"{"name": "t", "variables": {"BACKEND": "http://x"}, "steps": [{"do": "http", "url": "${BACKEND}"}]}"#
        #expect((try? parse(defaulted)) != nil)
        // $${ is a literal ${, not a reference.
        #expect((try? parse(steps(#"{"do": "http", "url": "http://x/$${LITERAL}"}"#))) != nil)
    }

    @Test func runtimeValuesMustExistAtTheirStep() {
        let early = error(steps(#"{"do": "device", "alias": "p"}, {"do": "expect", "token": "${lastPush.token}"}"#))
        #expect(early?.message.contains("no push step comes before this one") == true)
        let alias = error(steps(#"{"do": "device", "alias": "p"}, {"do": "expect", "token": "${device.tablet.token}"}"#))
        #expect(alias?.message.contains("no device \"tablet\" exists at this point") == true)
        let field = error(steps(#"{"do": "device", "alias": "p"}, {"do": "expect", "token": "${device.p.colour}"}"#))
        #expect(field?.message.contains("a device has token, id, userId") == true)
        let saved = error(steps(#"{"do": "device", "alias": "p"}, {"do": "expect", "tokenNot": "${old}"}, {"do": "save", "save": {"old": "x"}}"#))
        #expect(saved?.message.contains("${old} is not set") == true)
        let syntax = error(steps(#"{"do": "http", "url": "${BACKEND"}"#))
        #expect(syntax?.message.contains("without a closing") == true)
    }

    @Test func devicesMustBeNamedWhenThereAreSeveral() {
        let found = error(steps(#"{"do": "device", "alias": "a"}, {"do": "device", "alias": "b"}, {"do": "logout"}"#))
        #expect(found?.description.contains("the scenario has several devices (a, b)") == true)
        let unknown = error(steps(#"{"do": "device", "alias": "a"}, {"do": "logout", "device": "b"}"#))
        #expect(unknown?.field == "device")
        let beforeMade = error(steps(#"{"do": "logout"}, {"do": "device", "alias": "a"}"#))
        #expect(beforeMade?.message.contains("no device exists at this point") == true)
    }

    @Test func stepRulesAreChecked() {
        #expect(error(steps(#"{"do": "waitFor", "delivery": {}, "backendCall": {}}"#))?.message.contains("got both") == true)
        #expect(error(steps(#"{"do": "expect", "checks": {"crossAccount": 0}, "count": 1}"#))?.field == "count")
        #expect(error(steps(#"{"do": "run", "argv": []}"#))?.field == "argv")
        #expect(error(steps(#"{"do": "waitFor", "delivery": {}, "since": "yesterday"}"#))?.field == "since")
        #expect(error(#"{"steps": [{"do": "sleep", "ms": 1}]}"#)?.field == "name")
        #expect(error(#"{"name": 5, "steps": [{"do": "sleep", "ms": 1}]}"#)?.message.contains("must be a string") == true)
        #expect(error(#"{"name": "t", "steps": []}"#)?.field == "steps")
    }

    @Test func aBackendMayComeFromAFile() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("scenario-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try #"{"register": {"url": "${BACKEND}/r"}}"#.write(toFile: "\(directory)/hooks.json", atomically: true, encoding: .utf8)
        let text = #"{"name": "t", "backends": {"com.example.app": "hooks.json"}, "steps": [{"do": "sleep", "ms": 1}]}"#
        try text.write(toFile: "\(directory)/s.json", atomically: true, encoding: .utf8)
        let scenario = try ScenarioParser.parse(file: "\(directory)/s.json", variables: ["BACKEND": "http://b"])
        #expect(scenario.backends.first?.backend["register"]?["url"]?.stringValue == "${BACKEND}/r")
        #expect(throws: ScenarioFileError.self) { try ScenarioParser.parse(file: "\(directory)/s.json", variables: [:]) }
    }

    /// Values a run would refuse are refused by the file check, in the run's words.
    @Test(arguments: [
        (#"{"do": "sleep", "ms": 1e30}"#, #"step 2 (sleep), field "ms": must be a whole number from 0 to 3600000 (1 hour), not 1e+30"#),
        (#"{"do": "sleep", "ms": -1}"#, #"step 2 (sleep), field "ms": must be a whole number from 0 to 3600000 (1 hour), not -1"#),
        (#"{"do": "sleep", "ms": 2.5}"#, #"step 2 (sleep), field "ms": must be a whole number from 0 to 3600000 (1 hour), not 2.5"#),
        (
            #"{"do": "advanceClock", "seconds": 1e308}"#,
            #"step 2 (advanceClock), field "seconds": must be a number from 0 to 34560000 (400 days), not 1e+308"#
        ),
        (
            #"{"do": "run", "argv": ["true"], "timeoutMs": 1e30}"#,
            #"step 2 (run), field "timeoutMs": must be a whole number from 1 to 3600000 (1 hour), not 1e+30"#
        ),
        (#"{"do": "run", "argv": ["true"], "expectExit": 256}"#, #"step 2 (run), field "expectExit": must be a whole number from 0 to 255, not 256"#),
        (
            #"{"do": "http", "url": "http://x/", "timeoutMs": 0}"#,
            #"step 2 (http), field "timeoutMs": must be a whole number from 1 to 3600000 (1 hour), not 0"#
        ),
        (
            #"{"do": "push", "priority": 11}"#,
            #"step 2 (push), field "priority": must be a whole number from 0 to 10 (APNs takes 10, 5 and 1), not 11"#
        ),
        (
            #"{"do": "push", "expiration": -5}"#,
            #"step 2 (push), field "expiration": must be a whole number from 0 to 9999999999 (a UNIX time in seconds), not -5"#
        ),
        (#"{"do": "waitFor", "delivery": {}, "count": 1001}"#, #"step 2 (waitFor), field "count": must be a whole number from 0 to 1000, not 1001"#),
        (
            #"{"do": "expectNone", "delivery": {}, "withinMs": 3600001}"#,
            #"step 2 (expectNone), field "withinMs": must be a whole number from 0 to 3600000 (1 hour), not 3600001"#
        ),
        (
            #"{"do": "expect", "checks": {"crossAccount": -1}}"#,
            #"step 2 (expect), field "checks.crossAccount": must be a whole number from 0 to 1000, not -1"#
        ),
        (
            #"{"do": "login", "user": "tab\tbed"}"#,
            #"step 2 (login), field "user": must be 1 to 256 characters without control characters (the emulator's rule for an account)"#
        ),
        (
            #"{"do": "device", "alias": "b", "deviceId": "has space"}"#,
            #"step 2 (device), field "deviceId": is not a device id: a device id is 1 to 128 letters, digits, '-', '_' or '.', not dots alone"#
        ),
        (
            #"{"do": "device", "alias": "my phone"}"#,
            #"step 2 (device), field "alias": is also the device id when no "deviceId" is given, and a device id is 1 to 128 letters, digits, '-', '_' or '.', not dots alone"#
        ),
        (
            #"{"do": "device", "alias": "\#(String(repeating: "a", count: 100_000))", "deviceId": "b"}"#,
            #"step 2 (device), field "alias": an alias is at most 128 characters; this one has 100000"#
        ),
        (
            #"{"do": "restore", "device": "my tablet", "from": "p"}"#,
            #"step 2 (restore), field "device": is also the device id when no "deviceId" is given, and a device id is 1 to 128 letters, digits, '-', '_' or '.', not dots alone"#
        ),
        (
            #"{"do": "push", "expect": {"status": "6xx"}}"#,
            #"step 2 (push), field "expect.status": a status is a number such as 200 or a class such as "2xx", not "6xx""#
        ),
        (
            #"{"do": "http", "url": "http://127.0.0.1:9/x", "expect": {"json": {"nopointer": 1}}}"#,
            #"step 2 (http), field "expect.json": "nopointer" is not a JSON pointer such as /tokens/0"#
        ),
        (#"{"do": "deviceSwitches"}"#, #"step 2 (deviceSwitches): give "muted" and/or "locked""#),
        (#"{"do": "scheduledSummary"}"#, #"step 2 (scheduledSummary), field "times": is required (or "off": true)"#),
        (
            #"{"do": "focus", "off": true, "mode": "Work"}"#,
            #"step 2 (focus), field "mode": does not go with "off": true ("off" turns the Focus off)"#
        ),
    ])
    func valuesARunRefusesAreRefusedByTheCheck(step: String, expected: String) {
        #expect(error(steps(#"{"do": "device", "alias": "p"}, "# + step))?.description == expected)
    }

    @Test func valuesWithinTheBoundsAndAliasesWithADeviceIdPass() throws {
        let scenario = try parse(
            steps(
                #"""
                {"do": "device", "alias": "my phone", "deviceId": "phone-1"},
                {"do": "sleep", "ms": 3600000}, {"do": "advanceClock", "seconds": 0.5}, {"do": "advanceClock", "seconds": 34560000},
                {"do": "push", "priority": 5, "expiration": 0}, {"do": "push", "priority": 7, "expect": {"status": 400, "reason": "BadPriority"}},
                {"do": "waitFor", "delivery": {}, "count": 1000, "timeoutMs": 0}, {"do": "expect", "checks": {"crossAccount": 1000}}
                """#))
        #expect(scenario.steps.count == 8)
    }

    @Test func aValueFromAVariableIsCheckedOnceTheFileSaysIt() throws {
        let file = steps(#"{"do": "sleep", "ms": "${MS}"}"#)
        #expect(
            error(file, variables: ["MS": "1e30"])?.description
                == #"step 1 (sleep), field "ms": must be a whole number from 0 to 3600000 (1 hour), not 1e30"#)
        #expect(error(#"{"name": "t", "variables": {"MS": -1}, "steps": [{"do": "sleep", "ms": "${MS}"}]}"#)?.field == "ms")
        _ = try parse(file, variables: ["MS": "10"])
        // A value known only when the run gets there (saved, the clock) waits for the run.
        _ = try parse(steps(#"{"do": "save", "save": {"MS": "${clock.nowMs}"}}, {"do": "sleep", "ms": "${MS}"}"#), variables: ["MS": "1e30"])
    }

    @Test func theFileItselfIsRead() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("scenario-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // A byte order mark is skipped.
        let bom = "\(directory)/bom.json"
        try Data([0xEF, 0xBB, 0xBF] + Array(steps(#"{"do": "sleep", "ms": 1}"#).utf8)).write(to: URL(fileURLWithPath: bom))
        #expect(try ScenarioParser.parse(file: bom, variables: [:]).steps.count == 1)
        // A key twice is named; so is a number beyond a double.
        #expect(
            error(steps(#"{"do": "sleep", "ms": 1,\#n "ms": 2}"#))?.description
                == #"not valid JSON at line 2, column 2 (steps[0].ms): duplicate key "ms""#)
        #expect(
            error(steps(#"{"do": "push", "priority": 1e400}"#))?.description
                == #"not valid JSON at line 1, column 52 (steps[0].priority): the number 1e400 is out of range (beyond ±1.8e308)"#)
        // Too large: refused from the size (a sparse file), never read.
        let big = "\(directory)/big.json"
        _ = FileManager.default.createFile(atPath: big, contents: nil)
        let handle = try #require(FileHandle(forWritingAtPath: big))
        try handle.truncate(atOffset: 200 << 20)
        try handle.close()
        #expect(throws: ScenarioFileError(file: big, "the file is 209715200 bytes (200 MiB), over the limit of 16777216 bytes (16 MiB)")) {
            try ScenarioParser.parse(file: big, variables: [:])
        }
    }

    @Test func theExamplesParse() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let folder = root.appendingPathComponent("examples/scenarios").path
        let files = try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasSuffix(".json") }
        #expect(files.count >= 4)
        for file in files {
            _ = try ScenarioParser.parse(file: "\(folder)/\(file)", variables: ["BACKEND": "http://127.0.0.1:1"])
        }
    }
}
