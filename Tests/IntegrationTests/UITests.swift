import Foundation
import Testing
import TestSupport

/// What the browser test needs: Chromium, its WebDriver, Selenium for Python and h2load.
enum Browser {
    static let python = "/usr/bin/python3"

    /// Debian packages missing here for the browser test.
    static let missingPackages: [String] = {
        var missing = [ExternalTool.chromium, .chromedriver, .h2load].filter { !$0.isInstalled }.map(\.package)
        if !FileManager.default.isExecutableFile(atPath: python) || (try? run(python, ["-c", "import selenium"]))?.status != 0 {
            missing.append("python3-selenium")
        }
        return missing
    }()

    /// Skips the browser tests where a package they need is missing, naming them.
    static let installed = ConditionTrait.enabled(
        if: missingPackages.isEmpty,
        Comment(rawValue: "the web UI test needs the Debian packages \(missingPackages.joined(separator: ", ")): run scripts/deps.sh test"))
}

/// The web UI in a real headless browser: Tests/ui/test_ui.py drives Debian's Chromium through
/// Selenium against the real binary (live timeline, detail pane, device controls, fault rules,
/// accounts, Live Activities, broadcast channels, presentation: action buttons, a reply, Focus,
/// scheduled summary, badges and Notification Center; the Load tab during a bounded h2load run,
/// reset) and writes screenshots to .build/test-artifacts/ (ui.png, ui-activities.png,
/// ui-channels.png, ui-presentation.png, ui-notification-center.png, ui-load.png, …).
@Suite("Web UI", Browser.installed)
struct UITests {
    static let root = URL(fileURLWithPath: PackageRoot.path)

    /// Runs Tests/ui/test_ui.py against `emulator` with a fresh device and `extra` arguments.
    static func runBrowserTest(_ emulator: EmulatorProcess, _ extra: [String]) throws -> CommandResult {
        let device = try emulator.createDevice()
        let arguments =
            [
                root.appendingPathComponent("Tests/ui/test_ui.py").path,
                "--admin", "http://\(try emulator.address("admin"))",
                "--sandbox", "\(try emulator.address("sandbox"))",
                "--ca", emulator.caPath,
                "--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(emulator.keyPath)",
                "--topic", EmulatorProcess.bundleID,
                "--token", device.token,
                "--binary", EmulatorProcess.binary,
                "--channel-sandbox", "\(try emulator.address("channelSandbox"))",
                "--device", "\(try emulator.address("device"))",
            ] + extra
        let result = try run(Browser.python, arguments, timeout: 180)
        #expect(result.status == 0, "browser test failed:\n\(result.out)\(result.err)\nemulator log:\n\(emulator.stderr)")
        return result
    }

    @Test func browserDrivesTheUI() throws {
        let artifacts = Self.root.appendingPathComponent(".build/test-artifacts")
        try FileManager.default.createDirectory(at: artifacts, withIntermediateDirectories: true)
        let screenshot = artifacts.appendingPathComponent("ui.png").path
        let others = ["load", "activities", "channels", "presentation", "notification-center"].map {
            artifacts.appendingPathComponent("ui-\($0).png").path
        }
        for path in [screenshot] + others { try? FileManager.default.removeItem(atPath: path) }

        // A cleartext HTTP/2 listener for the Load tab's h2load run.
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"])
        let h2c = try emulator.address("h2cSandbox").description
        guard try Self.runBrowserTest(emulator, ["--screenshot", screenshot, "--h2c", h2c]).status == 0 else { return }

        for path in [screenshot] + others {
            let png = try Data(contentsOf: URL(fileURLWithPath: path))
            #expect(png.count > 10_000, "\(path) is only \(png.count) bytes")
            #expect(Array(png.prefix(8)) == [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A], "\(path) is not a PNG")
        }
    }

    /// With `--admin-token` the page asks for the token once (again after a wrong one), and
    /// then the timeline, the event stream and the forms work; a reload does not ask again.
    @Test func browserAsksForTheAdminTokenOnce() throws {
        let token = "ui-test-\(UUID().uuidString)"
        let emulator = try EmulatorProcess(environment: ["APNS_EMULATOR_ADMIN_TOKEN": token])
        emulator.adminToken = token
        _ = try Self.runBrowserTest(emulator, ["--admin-token", token])
    }
}
