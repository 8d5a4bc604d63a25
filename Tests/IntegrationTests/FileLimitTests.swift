import APNsCore
import Foundation
import Testing
import TestSupport

/// The files the binary reads (scenario and config files) and the values in them, through the
/// real `apns-emulator` process: exit status and the message a person sees.
@Suite("Files: scenario values, duplicate keys, BOM, size cap")
struct FileLimitTests {
    let directory: String

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("files-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    func write(_ name: String, _ bytes: [UInt8]) throws -> String {
        let path = "\(directory)/\(name)"
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// A file of `size` bytes that takes no disk space (and is refused before it is read).
    func sparse(_ name: String, size: UInt64) throws -> String {
        let path = try write(name, [])
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.truncate(atOffset: size)
        try handle.close()
        return path
    }

    /// `expected` follows the file's name (", step …" or ": not valid JSON …").
    @Test(arguments: [
        (#"{"do": "sleep", "ms": 1e30}"#, #", step 2 (sleep), field "ms": must be a whole number from 0 to 3600000 (1 hour), not 1e+30"#),
        (#"{"do": "sleep", "ms": -1}"#, #", step 2 (sleep), field "ms": must be a whole number from 0 to 3600000 (1 hour), not -1"#),
        (
            #"{"do": "advanceClock", "seconds": 1e308}"#,
            #", step 2 (advanceClock), field "seconds": must be a number from 0 to 34560000 (400 days), not 1e+308"#
        ),
        (
            #"{"do": "run", "argv": ["true"], "timeoutMs": 1e30}"#,
            #", step 2 (run), field "timeoutMs": must be a whole number from 1 to 3600000 (1 hour), not 1e+30"#
        ),
        (
            #"{"do": "waitFor", "delivery": {}, "timeoutMs": 1e30}"#,
            #", step 2 (waitFor), field "timeoutMs": must be a whole number from 0 to 3600000 (1 hour), not 1e+30"#
        ),
        (
            #"{"do": "push", "priority": 1e400}"#,
            #": not valid JSON at line 1, column 88 (steps[1].priority): the number 1e400 is out of range (beyond ±1.8e308)"#
        ),
        (
            #"{"do": "push", "priority": 1e30}"#,
            #", step 2 (push), field "priority": must be a whole number from 0 to 10 (APNs takes 10, 5 and 1), not 1e+30"#
        ),
        (
            #"{"do": "device", "alias": "\#(String(repeating: "a", count: 100_000))", "deviceId": "tablet"}"#,
            #", step 2 (device), field "alias": an alias is at most 128 characters; this one has 100000"#
        ),
        (
            #"{"do": "device", "alias": "\#(String(repeating: "a", count: 100_000))"}"#,
            #", step 2 (device), field "alias": an alias is at most 128 characters; this one has 100000"#
        ),
    ])
    func scenarioCheckRefusesWhatARunWouldRefuse(step: String, expected: String) throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = try write("s.json", Array(#"{"name": "t", "steps": [{"do": "device", "alias": "phone"}, \#(step)]}"#.utf8))
        let result = try run(EmulatorProcess.binary, ["scenario", "--check", path])
        #expect(result.status == 2)
        #expect(result.err == "apns-emulator scenario: \(path)\(expected)\n", "\(result.err.prefix(400))")
        #expect(!result.out.contains("ok"), "\(result.out)")
    }

    /// The same rule holds for a value given with --var: --check refuses it, and without
    /// --check the run refuses it in the same words before any step runs.
    @Test func aVariableValueIsCheckedByCheckAndRunAlike() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = try write("v.json", Array(#"{"name": "t", "steps": [{"do": "sleep", "ms": "${MS}"}]}"#.utf8))
        let expected = "apns-emulator scenario: \(path), step 1 (sleep), field \"ms\": must be a whole number from 0 to 3600000 (1 hour), not 1e30\n"
        let check = try run(EmulatorProcess.binary, ["scenario", "--check", path, "--var", "MS=1e30"])
        #expect(check.status == 2)
        #expect(check.err == expected)
        let runResult = try run(EmulatorProcess.binary, ["scenario", path, "--var", "MS=1e30"])
        #expect(runResult.status == 2)
        #expect(runResult.err == expected)
        let fine = try run(EmulatorProcess.binary, ["scenario", "--check", path, "--var", "MS=5"])
        #expect(fine.status == 0)
        #expect(fine.out == "\(path): ok (1 steps)\n")
    }

    @Test func scenarioFilesTakeABOMAndRefuseDuplicatesAndHugeFiles() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let text = #"{"name": "t", "steps": [{"do": "sleep", "ms": 1}]}"#
        let bom = try write("bom.json", [0xEF, 0xBB, 0xBF] + Array(text.utf8))
        let ok = try run(EmulatorProcess.binary, ["scenario", "--check", bom])
        #expect(ok.status == 0, "\(ok.err)")
        #expect(ok.out == "\(bom): ok (1 steps)\n")

        let twice = try write("twice.json", Array(#"{"name": "t", "name": "u", "steps": [{"do": "sleep", "ms": 1}]}"#.utf8))
        let duplicate = try run(EmulatorProcess.binary, ["scenario", "--check", twice])
        #expect(duplicate.status == 2)
        #expect(duplicate.err == "apns-emulator scenario: \(twice): not valid JSON at line 1, column 15 (name): duplicate key \"name\"\n")

        let big = try sparse("big.json", size: 200 << 20)
        let started = Date()
        let huge = try run(EmulatorProcess.binary, ["scenario", "--check", big])
        #expect(huge.status == 2)
        #expect(huge.err == "apns-emulator scenario: \(big): the file is 209715200 bytes (200 MiB), over the limit of 16777216 bytes (16 MiB)\n")
        #expect(Date().timeIntervalSince(started) < 10, "refused from its size, not read")
    }

    @Test func aConfigFileWithADuplicateKeyIsRefusedNamingIt() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = try write(
            "config.json",
            Array(
                #"""
                {"maxRecords": 2,
                 "devices": [{"deviceId": "pinned", "apps": [{"bundleId": "com.example.app", "environment": "sandbox",
                                                             "bundleId": "com.example.other"}]}]}
                """#.utf8))
        let result = try run(EmulatorProcess.binary, ["serve", "--config", config, "--quiet"])
        #expect(result.status == 2)
        #expect(result.err.hasPrefix("apns-emulator: --config \(config): invalid JSON at byte "), "\(result.err)")
        #expect(result.err.hasSuffix(" (devices[0].apps[0].bundleId): duplicate key \"bundleId\"\n"), "\(result.err)")
    }

    @Test func aConfigFileWithABOMStarts() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = try write("config.json", [0xEF, 0xBB, 0xBF] + Array(#"{"maxRecords": 2, "tokenBytes": 8}"#.utf8))
        let emulator = try EmulatorProcess(["--config", config])
        #expect(try emulator.createDevice().token.count == 16, "the file's tokenBytes applies")
    }

    @Test func aConfigFileOverTheCapIsRefusedAtOnce() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = try sparse("huge.json", size: 200 << 20)
        let started = Date()
        let result = try run(EmulatorProcess.binary, ["serve", "--config", config, "--quiet"])
        #expect(result.status == 2)
        #expect(result.err == "apns-emulator: --config \(config): the file is 209715200 bytes (200 MiB), over the limit of 16777216 bytes (16 MiB)\n")
        #expect(Date().timeIntervalSince(started) < 10, "refused from its size, not read")

        // Just over the cap is refused too; a number beyond a double is named.
        let over = try sparse("over.json", size: UInt64(InputFile.maxBytes + 1))
        let overResult = try run(EmulatorProcess.binary, ["serve", "--config", over, "--quiet"])
        #expect(overResult.err.contains("the file is 16777217 bytes (16.0 MiB), over the limit of 16777216 bytes (16 MiB)"), "\(overResult.err)")
        let infinite = try write("infinite.json", Array(#"{"maxRecords": 1e400}"#.utf8))
        let infiniteResult = try run(EmulatorProcess.binary, ["serve", "--config", infinite, "--quiet"])
        #expect(infiniteResult.status == 2)
        #expect(
            infiniteResult.err
                == "apns-emulator: --config \(infinite): invalid JSON at byte 15 (maxRecords): the number 1e400 is out of range (beyond ±1.8e308)\n")
    }

    @Test func aFaultFileIsReadLikeAConfigFile() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let faults = try write("faults.json", Array(#"[{"match": {"priority": 5}, "match": {}, "action": {"rstStream": 2}}]"#.utf8))
        let result = try run(EmulatorProcess.binary, ["serve", "--faults", faults, "--quiet"])
        #expect(result.status == 2)
        #expect(result.err == "apns-emulator: --faults: \(faults): invalid JSON at byte 28 ([0].match): duplicate key \"match\"\n", "\(result.err)")
    }
}
