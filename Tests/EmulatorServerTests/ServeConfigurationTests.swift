import APNsCore
import CommandLineOptions
@testable import EmulatorServer
import Foundation
import Networking
import Testing

/// The typed configuration: the option table shows the parts' own defaults, options apply over
/// a base, and the state backend is one of three.
@Suite("serve configuration")
struct ServeConfigurationTests {
    func resolve(_ arguments: [String], over base: ServeConfiguration = ServeConfiguration()) throws -> ServeConfiguration {
        try ServeConfiguration.resolve(arguments: arguments, environment: [:], over: base)
    }

    /// A default in `--help` is the one the parts use: giving it explicitly changes nothing.
    @Test func everyDefaultInTheTableIsThePartsOwn() throws {
        let plain = String(describing: try resolve([]))
        #expect(plain == String(describing: ServeConfiguration()))
        for spec in ServeConfiguration.specs {
            guard let value = spec.defaultValue else { continue }
            var resolved = try resolve([spec.flag, value])
            // A state flag of a backend not in use is named as doing nothing (a warning at start).
            resolved.settingsWithoutEffect = []
            #expect(String(describing: resolved) == plain, "\(spec.flag) \(value)")
        }
    }

    /// A window that is not a finite number of seconds is a usage error, never a crash.
    @Test func aRateWindowMustBeFinite() throws {
        for flag in ["--too-many-requests", "--connection-churn"] {
            for value in ["1/inf", "1/nan", "1/-1", "1/1e30"] {
                let error = #expect(throws: UsageError.self) { try resolve([flag, value]) }
                #expect(error?.description.contains("is not N/SECONDS") == true, "\(flag) \(value): \(String(describing: error))")
            }
        }
        #expect(try resolve(["--too-many-requests", "100/10"]).delivery.tooManyRequests != nil)
    }

    /// Each part of `--profile realistic` can be turned off on its own, as its flag's default is.
    @Test func aPresetsPartsTurnOffOneByOne() throws {
        let realistic = try resolve(["--profile", "realistic"]).load
        #expect(realistic.connectionChurn != nil && realistic.errorDisconnect != nil && realistic.answersPerSecondPerConnection != nil)
        let off = try resolve([
            "--profile", "realistic", "--connection-churn", "off", "--error-disconnect", "off", "--connection-rate", "off",
            "--too-many-requests", "off",
        ])
        #expect(off.load.connectionChurn == nil && off.load.errorDisconnect == nil && off.load.answersPerSecondPerConnection == nil)
        #expect(off.delivery.tooManyRequests == nil)
        #expect(off.load.streamLimitDrop == realistic.streamLimitDrop, "the other parts stay")
        for bad in [["--too-many-requests", "5/0x10"], ["--too-many-requests", "5/0.0001"], ["--connection-rate", "0"]] {
            let error = #expect(throws: UsageError.self) { try resolve(bad) }
            #expect(error?.description.contains("or off") == true, "\(bad): \(String(describing: error))")
        }
    }

    /// A key object in a config file with a misspelled field is refused, naming it: left out, the
    /// restriction it meant (`environment`, `topics`) would silently make the key unrestricted.
    @Test func aKeyObjectWithAnUnknownFieldIsRefused() throws {
        let typo = #"{"teamId":"ABCDE12345","keyId":"KEY7654321","path":"k.p8","enviroment":"production"}"#
        let error = #expect(throws: UsageError.self) { try ServeConfiguration.parseAuthKey(typo) }
        #expect(error?.description.contains(#"unknown field "enviroment""#) == true, "\(String(describing: error))")
        let fine = try ServeConfiguration.parseAuthKey(
            #"{"teamId":"ABCDE12345","keyId":"KEY7654321","path":"k.p8","environment":"production","topics":["com.a"]}"#)
        #expect(fine.environment == .production && fine.topics == ["com.a"])
    }

    /// A setting that acts only through another one that is off is named at the start.
    @Test func settingsThatNeedAnotherAreNamed() throws {
        let warned = try resolve([
            "--unregistered-after-pushes", "3", "--device-listen", "off", "--device-tls", "--admin-listen", "off", "--admin-token", "t",
        ]).settingsWithoutEffect
        #expect(warned.count == 3, "\(warned)")
        #expect(warned.contains { $0.hasPrefix("--unregistered-after-pushes has no effect without --unregistered-delay") })
        #expect(warned.contains("--device-tls has no effect with --device-listen off"))
        #expect(warned.contains("--admin-token has no effect with --admin-listen off"))
        #expect(try resolve(["--unregistered-after-pushes", "3", "--unregistered-delay", "60", "--device-tls"]).settingsWithoutEffect.isEmpty)
    }

    /// A switch takes the same words as a flag as it does from a variable or config file.
    @Test func switchesTakeTheSameWordsEverywhere() throws {
        for word in ["no", "0", "off", "FALSE"] { #expect(try resolve(["--quiet=\(word)"]).quiet == false, "\(word)") }
        for word in ["yes", "1", "on", "True"] { #expect(try resolve(["--quiet=\(word)"]).quiet == true, "\(word)") }
        #expect(throws: UsageError.self) { try resolve(["--quiet=maybe"]) }
        let fromVariable = #expect(throws: UsageError.self) {
            try ServeConfiguration.resolve(arguments: [], environment: ["APNS_EMULATOR_QUIET": "maybe"])
        }
        #expect(fromVariable?.description.contains("1/0, yes/no, on/off") == true)
    }

    /// `--ready-file $F --quiet` with F empty: the option after it is not taken as the value.
    @Test func anOptionIsNotTakenAsTheValueOfTheOneBefore() throws {
        let error = #expect(throws: UsageError.self) { try resolve(["--ready-file", "--quiet"]) }
        #expect(error?.description.contains("--ready-file needs a value") == true, "\(String(describing: error))")
        #expect(error?.description.contains("the option --quiet") == true)
        #expect(throws: UsageError.self) { try resolve(["--ready-file", "--threads=2"]) }
        // A value that only looks like an option, but names none, is a value.
        #expect(try resolve(["--ready-file", "--not-an-option"]).readyFile == "--not-an-option")
    }

    /// An empty variable is not set (compose's `${VAR:-}`), the config file's included.
    @Test func anEmptyConfigVariableIsNotSet() throws {
        let configuration = try ServeConfiguration.resolve(
            arguments: ["--quiet"], environment: ["APNS_EMULATOR_CONFIG": "", "APNS_EMULATOR_THREADS": ""])
        #expect(configuration.quiet)
    }

    /// A variable one or two letters from one serve reads is named with the one meant; other
    /// commands' variables and names further off are not.
    @Test func misspelledVariablesAreFound() {
        let environment = [
            "APNS_EMULATOR_SANBOX_LISTEN": "127.0.0.1:1", "APNS_EMULATOR_THREAD": "2", "APNS_EMULATOR_CONNECT": "x",
            "APNS_EMULATOR_BIN": "/x", "APNS_EMULATOR_SANDBOX_LISTEN": "127.0.0.1:2", "PATH": "/bin",
        ]
        let found = OptionParser.misspelledVariables(in: environment, specs: ServeConfiguration.specs, known: ["APNS_EMULATOR_CONNECT"])
        #expect(found.map(\.given) == ["APNS_EMULATOR_SANBOX_LISTEN", "APNS_EMULATOR_THREAD"])
        #expect(found.map(\.meant) == ["APNS_EMULATOR_SANDBOX_LISTEN", "APNS_EMULATOR_THREADS"])
    }

    @Test func optionsApplyOverABase() throws {
        var base = ServeConfiguration()
        base.listeners.sandbox = HostPort(host: "127.0.0.1", port: 0)
        base.delivery.deviceWindow = 7
        base.apps = [("TEAM1", "com.example.one")]
        base.admin.token = "t0ken"
        let resolved = try resolve(["--device-window", "9", "--app", "TEAM1:com.example.two", "--production-listen", "off"], over: base)
        #expect(resolved.delivery.deviceWindow == 9)
        #expect(resolved.apps.map(\.bundleID) == ["com.example.one", "com.example.two"], "a repeatable option adds to the base's list")
        #expect(resolved.listeners.sandbox == base.listeners.sandbox && resolved.listeners.production == nil)
        #expect(resolved.admin.token == "t0ken")
        #expect(try resolve([], over: base).delivery.deviceWindow == 7)
    }

    /// The Live Activity budgets reach the policy; frequent updates never get less than the
    /// ordinary budget, and a frequent figure below it is refused.
    @Test func liveActivityBudgetsMapOntoThePolicy() throws {
        let defaults = try resolve([]).liveActivities
        #expect(defaults == LiveActivityPolicy())
        let set = try resolve([
            "--live-activity-budget-per-hour", "4", "--live-activity-frequent-budget-per-hour", "9", "--widget-push-budget-per-day", "0",
        ]).liveActivities
        #expect((set.updatesPerWindow, set.updatesPerWindowWithFrequentUpdates, set.widgetPushesPerWindow) == (4, 9, 0))
        #expect(set.updateWindowMs == LiveActivityPolicy.hourMs && set.widgetWindowMs == LiveActivityPolicy.dayMs)
        let raised = try resolve(["--live-activity-budget-per-hour", "100"]).liveActivities
        #expect(raised.updatesPerWindowWithFrequentUpdates == 100, "the frequent budget follows an ordinary one raised above it")
        #expect(try resolve(["--live-activity-budget-per-hour", "0"]).liveActivities.updatesPerWindowWithFrequentUpdates == 60)
        var base = ServeConfiguration()
        base.liveActivities.widgetPushesPerWindow = 7
        #expect(try resolve(["--live-activity-budget-per-hour", "3"], over: base).liveActivities.widgetPushesPerWindow == 7)
        for bad in [
            ["--live-activity-budget-per-hour", "-1"], ["--widget-push-budget-per-day", "1.5"], ["--live-activity-frequent-budget-per-hour", "14"],
        ] {
            #expect(throws: UsageError.self, "\(bad)") { try resolve(bad) }
        }
    }

    /// A config-file app's Live Activity keys, checked where they are.
    @Test func configFileAppsDeclareLiveActivities() throws {
        let app: JSONValue = ["bundleId": "com.example.app", "environment": "sandbox", "liveActivityTypes": ["A", "B"], "frequentUpdates": true]
        let devices = try ServeConfiguration.parseDevices([["deviceId": "d1", "apps": [app]]] as JSONValue, path: "c.json")
        #expect(
            devices.first?.liveActivities == [
                ServeConfiguration.LiveActivityDeclaration(
                    bundleID: "com.example.app", environment: .sandbox, types: ["A", "B"], frequentUpdates: true)
            ])
        let plain: JSONValue = ["bundleId": "com.example.app", "environment": "sandbox"]
        #expect(try ServeConfiguration.parseDevices([["deviceId": "d1", "apps": [plain]]] as JSONValue, path: "c.json").first?.liveActivities == [])
        let twice: JSONValue = ["deviceId": "d1", "apps": [app, app]]
        let error = #expect(throws: UsageError.self) { try ServeConfiguration.parseDevices([twice] as JSONValue, path: "c.json") }
        #expect(error?.description.contains("device d1 in c.json: apps[1]: com.example.app declares \"liveActivityTypes\" in another entry") == true)
    }

    /// A population entry (`count`) refuses a key it does not know, as a device entry does: a
    /// misspelt `idPrefix` used to give devices named `device-N` without a word.
    @Test func aPopulationEntryRefusesUnknownKeys() throws {
        let good: JSONValue = ["count": 2, "idPrefix": "load-", "bundleId": "com.example.app", "environment": "sandbox"]
        #expect(try ServeConfiguration.parseDevices([good] as JSONValue, path: "c.json").map(\.deviceID) == ["load-1", "load-2"])
        for (entry, expected) in [
            (["count": 2, "idPrefx": "load-", "bundleId": "com.example.app", "environment": "sandbox"] as JSONValue, #"unknown key "idPrefx""#),
            (["count": 2, "kind": "voip", "bundleId": "com.example.app", "environment": "sandbox"] as JSONValue, #"unknown key "kind""#),
            (["count": 2, "idPrefix": 7, "bundleId": "com.example.app", "environment": "sandbox"] as JSONValue, #""idPrefix" must be a string"#),
        ] {
            let error = #expect(throws: UsageError.self) { try ServeConfiguration.parseDevices([entry] as JSONValue, path: "c.json") }
            #expect(error?.description.contains(expected) == true, "\(error?.description ?? "")")
        }
    }

    /// An object for an option that takes one value (a path, a token) is refused: taken as its
    /// JSON text it made a directory named `{"path":"/x"}`, or an admin token of that text.
    /// Entries of `authKey` and `app` may still be objects.
    @Test func anObjectForAnOptionOfOneValueIsRefused() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("config-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        for key in ["stateDir", "adminToken", "redisPrefix"] {
            try #"{"\#(key)": {"path": "/tmp/x"}}"#.write(toFile: path, atomically: true, encoding: .utf8)
            let error = #expect(throws: UsageError.self) { try resolve(["--config", path]) }
            #expect(
                error?.description == #""\#(key)" in \#(path) must be a string, number or boolean, not an object"#, "\(String(describing: error))")
        }
        try #"{"app": {"teamId": "TEAM123456", "bundleId": "com.example.objects"}}"#.write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try resolve(["--config", path]).apps.contains { $0.bundleID == "com.example.objects" })
    }

    /// A misspelled config-file key names the key meant, as a misspelled flag or variable does
    /// (one or two letters away, a singular for a plural), at the top and inside entries; the
    /// whole list only when no key is that close.
    @Test func aMisspelledConfigKeyNamesTheKeyMeant() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("config-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let app = #"{"bundleId": "com.example.app", "environment": "sandbox"}"#
        for (file, expected) in [
            (#"{"maxRecord": 1}"#, #"unknown key "maxRecord"; did you mean "maxRecords"?"#),
            (#"{"apps": "ABCDE12345:com.example.app"}"#, #"unknown key "apps"; did you mean "app"?"#),
            (#"{"authKeys": "ABCDE12345:KEY1234567:k.p8"}"#, #"unknown key "authKeys"; did you mean "authKey"?"#),
            (#"{"device": []}"#, #"unknown key "device"; did you mean "devices"?"#),
            (
                #"{"devices": [{"deviceId": "d1", "apps": [\#(app)], "lockd": true}]}"#,
                #"device d1 in \#(path): unknown key "lockd"; did you mean "locked"?"#
            ),
            (
                #"{"devices": [{"deviceId": "d1", "apps": [{"bundleID": "com.example.app", "environment": "sandbox"}]}]}"#,
                #"apps[0]: unknown key "bundleID"; did you mean "bundleId"?"#
            ),
            (
                #"{"devices": [{"count": 2, "idPrefx": "load-", "bundleId": "com.example.app", "environment": "sandbox"}]}"#,
                #"unknown key "idPrefx"; did you mean "idPrefix"?"#
            ),
            (
                #"{"devices": [{"deviceID": "d1", "apps": [\#(app)]}]}"#,
                #"needs "deviceId" and "apps" (unknown key "deviceID"; did you mean "deviceId"?)"#
            ),
            (
                #"{"authKey": [{"teamID": "TEAM123456", "keyId": "KEY1234567", "path": "k.p8"}]}"#,
                #""teamId" (the team id) is required: 1 to 64 letters and digits, e.g. ABCDE12345 (unknown key "teamID"; did you mean "teamId"?)"#
            ),
            (
                #"{"app": [{"teamId": "TEAM123456", "bundleID": "com.example.app"}]}"#,
                #"needs "teamId" and "bundleId" (unknown key "bundleID"; did you mean "bundleId"?)"#
            ),
            (#"{"colour": 1}"#, #"unknown key "colour"; known keys: "listen""#),
        ] {
            try file.write(toFile: path, atomically: true, encoding: .utf8)
            let error = #expect(throws: UsageError.self) { try resolve(["--config", path]) }
            #expect(error?.description.contains(expected) == true, "\(file): \(String(describing: error))")
            #expect(error?.description.contains("did you mean") != expected.contains("known keys"), "\(file): \(String(describing: error))")
        }
    }

    /// A config-file key written as its flag is refused with the key meant; any other unknown key
    /// lists the known ones.
    @Test func aConfigKeyWrittenAsItsFlagNamesTheKeyMeant() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("config-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        for (key, expected) in [
            ("max-devices", #"the key for --max-devices is "maxDevices""#), ("--idle-timeout", #"the key for --idle-timeout is "idleTimeout""#),
            ("MAXTOKENS", #"the key for --max-tokens is "maxTokens""#), ("colour", #"known keys: "listen""#),
        ] {
            try #"{"\#(key)": 10}"#.write(toFile: path, atomically: true, encoding: .utf8)
            let error = #expect(throws: UsageError.self) { try resolve(["--config", path]) }
            #expect(error?.description.contains("unknown key \"\(key)\"; \(expected)") == true, "\(key): \(String(describing: error))")
        }
        try #"{"maxDevices": 10}"#.write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try resolve(["--config", path]).registryLimits.maxDevices == 10)
        // A whole number as a JSON writer holding floats writes it.
        for written in ["1000.0", "1e3"] {
            try #"{"maxDevices": \#(written)}"#.write(toFile: path, atomically: true, encoding: .utf8)
            #expect(try resolve(["--config", path]).registryLimits.maxDevices == 1000, "\(written)")
        }
        try #"{"maxDevices": 10.5}"#.write(toFile: path, atomically: true, encoding: .utf8)
        #expect(throws: UsageError.self) { try resolve(["--config", path]) }
    }

    /// What comes in Swift gets the checks options get.
    @Test func aBaseIsCheckedToo() {
        var exposed = ServeConfiguration()
        exposed.listeners.admin = HostPort(host: "0.0.0.0", port: 0)
        #expect(throws: UsageError.self) { try resolve([], over: exposed) }
        var badApp = ServeConfiguration()
        badApp.apps = [("TEAM1", "not a bundle")]
        #expect(throws: UsageError.self) { try resolve([], over: badApp) }
    }

    @Test func theStateLivesInOnePlace() throws {
        #expect(try resolve([]).state == .memory)
        #expect(try resolve(["--state-journal-lag", "5"]).state == .memory, "checked, but there is no directory to apply it to")
        #expect(
            try resolve(["--state-dir", "/tmp/state", "--state-journal-lag", "5", "--state-failure", "memory"]).state
                == .directory(.init(path: "/tmp/state", journalLag: 5, onFailure: .memory)))
        let redis = try resolve(["--redis", "redis://127.0.0.1", "--state-journal-lag", "5"]).state.redis
        #expect(redis?.url.port == 6379 && redis?.prefix == "apns-emulator:")
    }

    @Test func theCertificatesComeFromTheCertsDirectoryOrFiles() throws {
        #expect(try resolve(["--certs-dir", "/tmp/c"]).tls.source == .generated(certsDirectory: "/tmp/c"))
        let files = try resolve(["--tls-cert", "a.pem", "--tls-key", "b.pem", "--certs-dir", "/tmp/c"]).tls
        #expect(files.source == .files(certificate: "a.pem", key: "b.pem", certsDirectory: "/tmp/c"))
        #expect(files.source.generatedCAPath == nil && files.clientCA.path == "/tmp/c/ca.pem" && !files.clientCA.required)
    }
}
