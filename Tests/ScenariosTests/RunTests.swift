import APNsCore
import Foundation
import Scenarios
import Testing

/// Scenarios run end to end against an emulator the runner starts in this process: virtual
/// devices, accounts, pushes through our HTTP/2 client, waits on records, the checks.
@Suite("Scenarios: runs against an in-process emulator")
struct RunTests {
    func run(_ text: String, strict: Bool = true) throws -> ScenarioReport {
        let scenario = try ScenarioParser.parse(Array(text.utf8), variables: [:])
        return ScenarioRunner.run(scenario, options: ScenarioRunner.Options(strict: strict))
    }

    /// The whole text report, as the command prints it (plain ASCII).
    func text(_ report: ScenarioReport) -> String {
        let printer = ReportPrinter(ascii: true)
        return (report.steps.map(printer.step) + [printer.footer(report)]).joined(separator: "\n")
    }

    /// alice is logged in on the phone; a push names whom it is for in "uid" (the
    /// addresseePointer of a backend without hooks: the detector needs no backend calls).
    static let prelude = #"""
        "backends": {"com.example.app": {"addresseePointer": "/uid"}},
        "steps": [
          {"do": "device", "alias": "phone", "appState": "foreground"},
          {"do": "login", "device": "phone", "user": "alice"},
        """#

    @Test func aScenarioThatHoldsPasses() throws {
        let report = try run(
            #"{"name": "push to alice", "# + Self.prelude + #"""
                  {"do": "expect", "device": "phone", "userId": "alice", "tokenUploadPending": false},
                  {"do": "push", "device": "phone", "payload": {"aps": {"alert": "hi"}, "uid": "alice"}, "save": {"first": "${lastPush.apnsId}"}},
                  {"do": "waitFor", "delivery": {"device": "phone", "apnsId": "${first}", "userId": "alice", "callback": "willPresent", "crossAccount": false}, "timeoutMs": 5000},
                  {"do": "expect", "deliveries": {"device": "phone"}, "count": 1},
                  {"do": "save", "save": {"old": "${device.phone.token}"}},
                  {"do": "reinstall"},
                  {"do": "expect", "device": "phone", "tokenNot": "${old}"},
                  {"do": "push", "token": "${old}", "expect": {"status": 410, "reason": "Unregistered"}},
                  {"do": "expect", "checks": {"crossAccount": 0}}
                ]}
                """#)
        #expect(report.passed, "\(text(report))")
        #expect(report.steps.count == 11)
        #expect(report.checks?.crossAccount == 0)
        #expect(ReportPrinter(ascii: true).summary(report).hasPrefix("PASS push to alice: 11 steps"))
    }

    @Test func aFailedWaitSaysWhatWasExpectedAndSeen() throws {
        let report = try run(
            #"{"name": "wrong callback", "# + Self.prelude + #"""
                  {"do": "push", "device": "phone", "payload": {"aps": {"alert": "hi"}, "uid": "alice"}},
                  {"do": "waitFor", "delivery": {"device": "phone", "callback": "didReceiveRemoteNotification"}, "timeoutMs": 300},
                  {"do": "logout"}
                ]}
                """#)
        #expect(!report.passed)
        let failed = try #require(report.failedStep)
        #expect(failed.index == 4)
        #expect(failed.failure == "none arrived within 300 ms")
        #expect(failed.expected == "notification record to phone with outcome delivered, callback didReceiveRemoteNotification")
        #expect(failed.seen?.contains("outcome delivered callbacks [willPresent] display banner userId alice") == true)
        let printed = text(report)
        #expect(printed.contains("  4 FAIL waitFor delivery {device phone, callback didReceiveRemoteNotification}"))
        #expect(printed.contains("      expected: notification record to phone"))
        #expect(printed.contains("(1 more step not run)"))
        #expect(printed.contains("FAIL wrong callback: step 4 of 5 failed (waitFor)"))
    }

    @Test func aCrossAccountDeliveryFailsTheRunUnlessExpected() throws {
        let steps =
            Self.prelude + #"""
                  {"do": "push", "device": "phone", "payload": {"aps": {"alert": "for bob"}, "uid": "bob"}},
                  {"do": "waitFor", "delivery": {"device": "phone", "crossAccount": true, "addressee": "bob", "userId": "alice"}}
                ]}
                """#
        let strict = try run(#"{"name": "leak", "# + steps)
        #expect(strict.steps.allSatisfy { $0.passed })
        #expect(!strict.passed)
        #expect(strict.checks?.crossAccount == 1)
        let printed = text(strict)
        #expect(printed.contains("checks: crossAccount 1 (expected 0) FAIL"))
        #expect(printed.contains("crossAccount: a push for bob was delivered to phone while alice was logged in"))
        #expect(printed.contains("FAIL leak: crossAccount 1, expected 0"))

        let reported = try run(#"{"name": "leak", "# + steps, strict: false)
        #expect(reported.passed)
        #expect(
            ReportPrinter(ascii: true).summary(reported).contains("cross-account deliveries 1, expected 0 (not strict: reported only)"),
            "a run that reports a leak does not call the check clean")
        #expect(text(reported).contains("checks: crossAccount 1 (expected 0) (not strict: reported, not failed)"), "\(text(reported))")
        let expected = try run(#"{"name": "leak", "expectedChecks": {"crossAccount": 1}, "# + steps)
        #expect(expected.passed)
        #expect(ReportPrinter(ascii: true).summary(expected).contains("cross-account deliveries as expected (1)"))
    }

    /// A chain whose backend refuses every call may be what a scenario means, so it still
    /// passes, but the report says which calls failed.
    @Test func failedBackendCallsAreReported() throws {
        /// A backend nobody listens on; `more` steps after its register call has failed.
        func backendDown(_ more: String = "") throws -> ScenarioReport {
            try run(
                #"""
                {"name": "backend down",
                 "backends": {"com.example.app": {"register": {"url": "http://127.0.0.1:9/r"}, "maxAttempts": 1, "timeoutMs": 2000}},
                 "steps": [
                   {"do": "device", "alias": "phone"},
                   {"do": "login", "device": "phone", "user": "alice"},
                   {"do": "waitFor", "backendCall": {"device": "phone", "hook": "register", "state": "failed"}, "timeoutMs": 5000}
                """# + more + "]}")
        }
        let report = try backendDown()
        #expect(report.passed, "\(text(report))")
        let failed = report.checks?.failedBackendCalls ?? []
        #expect(failed.count == 1 && failed.first?.contains("register POST http://127.0.0.1:9/r from phone") == true, "\(failed)")
        #expect(text(report).contains("backend calls failed: 1"))
        #expect(ReportPrinter(ascii: true).summary(report).hasSuffix("1 backend call failed"))
        // A run that fails names them too.
        let failing = try backendDown(#", {"do": "expect", "device": "phone", "userId": "bob"}"#)
        #expect(!failing.passed)
        #expect(ReportPrinter(ascii: true).summary(failing).contains("step 4 of 4 failed (expect); 1 backend call failed"))
    }

    /// A backend that refuses a call with a 4xx (its final answer: the call is `done`, not
    /// retried) is reported as a failed one is: a backend that rejects the app's body went unseen.
    @Test func aBackendCallRefusedWithA4xxIsReported() throws {
        let report = try run(
            #"""
            {"name": "backend refuses",
             "backends": {"com.example.app": {"register": {"url": "${emulator.adminUrl}/no-such-hook"}}},
             "steps": [
               {"do": "device", "alias": "phone"},
               {"do": "login", "device": "phone", "user": "alice"},
               {"do": "waitFor", "backendCall": {"device": "phone", "hook": "register", "state": "done"}, "timeoutMs": 5000}
             ]}
            """#)
        #expect(report.passed, "\(text(report))")
        let failed = report.checks?.failedBackendCalls ?? []
        #expect(failed.count == 1 && failed.first?.contains("refused, answered 404 after 1 attempt") == true, "\(failed)")
        #expect(text(report).contains("backend calls failed: 1"))
    }

    /// A call still being retried when the run ends (or dropped by a full queue) never reached
    /// its backend either: listed as not done, and named in the summary (a run passed without a
    /// word about it).
    @Test func unfinishedBackendCallsAreReported() throws {
        let report = try run(
            #"""
            {"name": "backend down, run short",
             "backends": {"com.example.app": {"register": {"url": "http://127.0.0.1:9/r"}, "maxAttempts": 5}},
             "steps": [
               {"do": "device", "alias": "phone"},
               {"do": "login", "device": "phone", "user": "alice"},
               {"do": "sleep", "ms": 300}
             ]}
            """#)
        #expect(report.passed, "\(text(report))")
        let unfinished = report.checks?.unfinishedBackendCalls ?? []
        let line = unfinished.first ?? ""
        #expect(unfinished.count == 1, "\(unfinished)")
        #expect(["retrying", "pending"].contains { line.contains("register POST http://127.0.0.1:9/r from phone: \($0)") }, "\(line)")
        #expect(text(report).contains("backend calls not done: 1"), "\(text(report))")
        #expect(ReportPrinter(ascii: true).summary(report).hasSuffix("1 backend call not done"))
        #expect(report.json["checks"]?["unfinishedBackendCalls"]?.arrayValue?.count == 1)
    }

    @Test func expectNoneAndTheClock() throws {
        let report = try run(
            #"{"name": "quiet phone", "# + Self.prelude + #"""
                  {"do": "expectNone", "delivery": {"device": "phone", "outcome": "any"}, "withinMs": 200},
                  {"do": "advanceClock", "seconds": 60, "save": {"t": "${clock.nowMs}"}},
                  {"do": "push", "device": "phone", "payload": {"aps": {"alert": "late"}, "uid": "alice"}},
                  {"do": "expectNone", "delivery": {"device": "phone"}, "withinMs": 300, "since": "${t}"}
                ]}
                """#)
        let failed = try #require(report.failedStep)
        #expect(failed.index == 6)
        #expect(failed.failure == "one arrived")
        #expect(failed.expected == "no notification record to phone with outcome delivered within 300 ms")
    }

    /// The emulator judges provider tokens on the real clock: a push step after the emulator's
    /// clock ran an hour ahead still signs a token it takes.
    @Test func aPushAfterTheClockRanAheadIsStillAccepted() throws {
        let report = try run(
            #"{"name": "later", "# + Self.prelude + #"""
                  {"do": "advanceClock", "seconds": 3600},
                  {"do": "push", "device": "phone", "payload": {"aps": {"alert": "an hour on"}, "uid": "alice"}}
                ]}
                """#)
        #expect(report.passed, "\(text(report))")
    }

    /// `expiresIn` is from the emulator's now: a day after `advanceClock`, a push to an offline
    /// device that expires in an hour is stored, not expired as a real-clock time would be.
    @Test func expiresInCountsFromTheEmulatorsNow() throws {
        let report = try run(
            #"{"name": "later", "# + Self.prelude + #"""
                  {"do": "advanceClock", "seconds": 86400},
                  {"do": "offline", "device": "phone"},
                  {"do": "push", "device": "phone", "expiresIn": 3600, "payload": {"aps": {"alert": "in an hour"}, "uid": "alice"},
                   "save": {"kept": "${lastPush.apnsId}"}},
                  {"do": "waitFor", "delivery": {"apnsId": "${kept}", "outcome": "stored"}, "timeoutMs": 5000},
                  {"do": "advanceClock", "seconds": 3700},
                  {"do": "waitFor", "delivery": {"apnsId": "${kept}", "outcome": "expired"}, "timeoutMs": 5000}
                ]}
                """#)
        #expect(report.passed, "\(text(report))")
        let both = ParserTests().error(#"{"name": "t", "steps": [{"do": "push", "token": "ab", "expiration": 1, "expiresIn": 2}]}"#)
        #expect(both?.message.contains("give expiration (a UNIX time) or expiresIn (seconds from the emulator's now), not both") == true)
    }

    /// A value the file check could not know (saved by a step) is checked by the same rule
    /// when the step runs, and fails it in the check's words.
    @Test func aValueKnownOnlyAtTheRunIsCheckedByTheSameRule() throws {
        let report = try run(
            #"""
            {"name": "late values", "steps": [
              {"do": "save", "save": {"big": "${clock.nowMs}", "negative": "-1"}},
              {"do": "sleep", "ms": "${negative}"}
            ]}
            """#)
        let failed = try #require(report.failedStep)
        #expect(failed.index == 2)
        #expect(failed.failure == #""ms" must be a whole number from 0 to 3600000 (1 hour), not -1"#)
        // A value with a line break (a command's stdout) is quoted, so the message keeps its line.
        let stdout = try run(
            #"""
            {"name": "late values", "steps": [
              {"do": "run", "argv": ["printf", "a\\nbc\\n\\n"]},
              {"do": "sleep", "ms": "${lastRun.stdout}"}
            ]}
            """#)
        #expect(
            stdout.failedStep?.failure == #""ms" must be a whole number from 0 to 3600000 (1 hour), not "a\nbc""#,
            "\(stdout.failedStep?.failure ?? "")")
        // Trailing line breaks go, as in the shell's `$(…)`.
        let number = try run(
            #"""
            {"name": "late values", "steps": [
              {"do": "run", "argv": ["echo", "5"]},
              {"do": "sleep", "ms": "${lastRun.stdout}"}
            ]}
            """#)
        #expect(number.failedStep == nil, "\(number.failedStep?.failure ?? "")")
        let clock = try run(
            #"""
            {"name": "late values", "steps": [
              {"do": "save", "save": {"big": "${clock.nowMs}"}},
              {"do": "advanceClock", "seconds": "${big}"}
            ]}
            """#)
        #expect(clock.failedStep?.failure?.hasPrefix(#""seconds" must be a number from 0 to 34560000 (400 days), not "#) == true)
    }
}
