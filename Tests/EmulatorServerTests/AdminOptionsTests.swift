import CommandLineOptions
import EmulatorServer
import Testing

/// The admin listener's access settings, as `serve` reads them.
@Suite("Admin access options")
struct AdminOptionsTests {
    @Test func startingOnANonLoopbackAddressNeedsATokenOrInsecure() throws {
        func resolve(_ arguments: [String], _ environment: [String: String] = [:]) throws -> ServeConfiguration {
            try ServeConfiguration.resolve(arguments: ["--demo", "off"] + arguments, environment: environment)
        }
        #expect(throws: UsageError.self) { try resolve(["--admin-listen", "0.0.0.0:8197"]) }
        do {
            _ = try resolve(["--admin-listen", "0.0.0.0:8197"])
        } catch {
            #expect("\(error)".contains("--admin-token") && "\(error)".contains("--admin-insecure"))
        }
        #expect(try resolve(["--admin-listen", "0.0.0.0:8197", "--admin-token", "t0ken"]).admin.token == "t0ken")
        #expect(try resolve(["--admin-listen", "0.0.0.0:8197", "--admin-insecure"]).admin.insecure)
        #expect(try resolve(["--admin-listen", "0.0.0.0:8197"], ["APNS_EMULATOR_ADMIN_INSECURE": "true"]).admin.insecure)
        #expect(throws: UsageError.self) { try resolve(["--admin-listen", "0.0.0.0:8197"], ["APNS_EMULATOR_ADMIN_INSECURE": "yes please"]) }
        #expect(try resolve(["--admin-listen", "[::1]:8197"]).admin.token == nil)
        #expect(try resolve(["--admin-listen", "localhost:8197"]).admin.token == nil)
        #expect(try resolve(["--admin-allowed-host", "Apns-Emulator"]).admin.allowedHosts == ["apns-emulator"])
        #expect(throws: UsageError.self) { try resolve(["--admin-allowed-host", "apns-emulator:8197"]) }
        #expect(throws: UsageError.self) { try resolve(["--admin-token", "has space"]) }
        #expect(throws: UsageError.self) { try resolve(["--keys-dir", "/nonexistent/keys"]) }
    }
}

/// Switches read from the environment or a config file: a value that is not true or false is a
/// usage error naming where it came from, never a silent "off".
@Suite("Switch values")
struct SwitchValueTests {
    func resolve(_ environment: [String: String]) throws -> ServeConfiguration {
        try ServeConfiguration.resolve(arguments: ["--demo", "off"], environment: environment)
    }

    @Test(arguments: ["APNS_EMULATOR_STRICT_CHECKS", "APNS_EMULATOR_QUIET", "APNS_EMULATOR_DEVICE_TLS"])
    func aValueThatIsNotTrueOrFalseIsRefused(variable: String) throws {
        do {
            _ = try resolve([variable: "banana"])
            Issue.record("\(variable)=banana was taken")
        } catch {
            #expect("\(error)".contains(variable) && "\(error)".contains("'banana' is not true or false"), "\(error)")
        }
    }

    @Test func trueFalseOneZeroYesNoOnOffAreTaken() throws {
        for on in ["true", "1", "yes", "ON"] { #expect(try resolve(["APNS_EMULATOR_STRICT_CHECKS": on]).strictChecks, "\(on)") }
        for off in ["false", "0", "no", "Off"] { #expect(try !resolve(["APNS_EMULATOR_STRICT_CHECKS": off]).strictChecks, "\(off)") }
        #expect(try resolve(["APNS_EMULATOR_QUIET": "1"]).quiet)
    }
}
