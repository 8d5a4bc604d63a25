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
        let scenario = try parse(steps(#"""
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
        #expect(error(steps(#"{"do": "advanceClock", "seconds": "soon"}"#))?.description
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
