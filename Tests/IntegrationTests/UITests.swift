import Foundation
import Testing

/// The web UI in a real headless browser: Tests/ui/test_ui.py drives Debian's Chromium through
/// Selenium against the real binary (live timeline, detail pane, device controls, fault rules,
/// accounts, the Load tab during a bounded h2load run, reset) and writes screenshots to
/// .build/test-artifacts/ (ui.png, ui-load.png, …).
@Suite("Web UI")
struct UITests {
    static let python = "/usr/bin/python3"

    /// What the browser test needs and is missing, as Debian package names.
    static func missingPackages() -> [String] {
        var missing: [String] = []
        let fm = FileManager.default
        if !fm.isExecutableFile(atPath: "/usr/bin/chromium") && which("chromium") == nil { missing.append("chromium") }
        if !fm.isExecutableFile(atPath: "/usr/bin/chromedriver") && which("chromedriver") == nil { missing.append("chromium-driver") }
        if !fm.isExecutableFile(atPath: python) || (try? run(python, ["-c", "import selenium"]))?.status != 0 {
            missing.append("python3-selenium")
        }
        if !fm.isExecutableFile(atPath: "/usr/bin/h2load") && which("h2load") == nil { missing.append("nghttp2-client") }
        return missing
    }

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Runs Tests/ui/test_ui.py against `emulator` with a fresh device and `extra` arguments;
    /// nil (with an issue recorded) when the browser packages are missing.
    static func runBrowserTest(_ emulator: EmulatorProcess, _ extra: [String]) throws -> (status: Int32, out: String, err: String)? {
        let missing = missingPackages()
        guard missing.isEmpty else {
            Issue.record("the web UI test needs the Debian packages \(missing.joined(separator: ", ")): run scripts/deps.sh test")
            return nil
        }
        let device = try emulator.createDevice()
        let arguments = [
            root.appendingPathComponent("Tests/ui/test_ui.py").path,
            "--admin", "http://\(try emulator.address("admin"))",
            "--sandbox", "\(try emulator.address("sandbox"))",
            "--ca", emulator.caPath,
            "--key", "\(EmulatorProcess.teamID):\(EmulatorProcess.keyID):\(emulator.keyPath)",
            "--topic", EmulatorProcess.bundleID,
            "--token", device.token,
            "--binary", EmulatorProcess.binary,
        ] + extra
        let result = try run(python, arguments, timeout: 180)
        #expect(result.status == 0, "browser test failed:\n\(result.out)\(result.err)\nemulator log:\n\(emulator.stderr)")
        return result
    }

    @Test func browserDrivesTheUI() throws {
        let artifacts = Self.root.appendingPathComponent(".build/test-artifacts")
        try FileManager.default.createDirectory(at: artifacts, withIntermediateDirectories: true)
        let screenshot = artifacts.appendingPathComponent("ui.png").path
        let loadScreenshot = artifacts.appendingPathComponent("ui-load.png").path
        for path in [screenshot, loadScreenshot] { try? FileManager.default.removeItem(atPath: path) }

        // A cleartext HTTP/2 listener for the Load tab's h2load run.
        let emulator = try EmulatorProcess(["--h2c-sandbox-listen", "127.0.0.1:0"])
        let h2c = try emulator.address("h2cSandbox").description
        guard let result = try Self.runBrowserTest(emulator, ["--screenshot", screenshot, "--h2c", h2c]), result.status == 0 else { return }

        for path in [screenshot, loadScreenshot] {
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
