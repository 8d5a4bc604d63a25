// StartCredentials: the provider keys, apps and devices the configuration names, read into the
// world the emulator starts with, and the demo setup. Reads key files; writes only the demo key.
import APNsCore
import Foundation
import OpenSSLCrypto

/// ES256 verification from OpenSSL, plugged into Core's verifier slot.
struct ES256SignatureVerifier: SignatureVerifier {
    let key: ES256PublicKey
    func verify(signature: [UInt8], message: [UInt8]) -> Bool { key.verify(signature: signature, message: message) }
    func verify(signature: [UInt8], message: [UInt8], algorithm: TokenAlgorithm) -> Bool {
        let jose: JOSEAlgorithm
        switch algorithm {
        case .es256: jose = .es256
        case .es384: jose = .es384
        case .es512: jose = .es512
        }
        return key.verify(signature: signature, message: message, as: jose)
    }
    var publicKeyPEM: String? { key.pem }
}

/// What exists from the start: configured keys (read from their files at every start), apps,
/// devices, and with `makesDemo` the demo team, key, app and device.
enum StartCredentials {
    /// Tokens the config file pins that a kept state gives their device otherwise (the state's
    /// token stays, docs/state.md): said at start, since a suite that pushes to the pinned one
    /// gets 400 BadDeviceToken with nothing else in the log.
    static func pinnedTokensNotKept(_ devices: [ServeConfiguration.DeviceSpec], in world: World, stateName: String) -> [String] {
        devices.flatMap { device in
            device.apps.compactMap { app -> String? in
                guard let pinned = app.token?.lowercased(),
                    let kept = world.registry.devices[device.deviceID]?.apps[app.bundleID]?.tokens[app.kind], kept != pinned
                else { return nil }
                return
                    "configured device \(device.deviceID) keeps token \(kept) for \(app.bundleID) as \(stateName) has it, not the pinned \(pinned), which answers 400 BadDeviceToken; to take the pinned one, DELETE /api/v1/devices/\(device.deviceID) and restart, or POST /api/v1/reset"
            }
        }
    }

    /// Where the demo key lives (made once, kept across restarts).
    static func demoKeyPath(_ configuration: ServeConfiguration) -> String {
        "\(configuration.tls.source.certsDirectory)/demo-AuthKey_\(Emulator.demoKeyID).p8"
    }

    /// Loads keys and apps, makes the demo setup if asked, and creates configured devices. True
    /// when the demo device was made here (not named by the configuration's devices).
    static func configure(
        _ configuration: ServeConfiguration, into world: inout World,
        clock: any EmulatorClock
    ) throws(StartupError) -> Bool {
        // A key id or a bundle given twice differently: the last would win without a word, and
        // pushes signed with the other key would get 403.
        var keyIDs: [String: String] = [:]
        for spec in configuration.authKeys {
            let named = "\(spec.teamID):\(spec.keyID):\(spec.path)"
            if let earlier = keyIDs.updateValue(named, forKey: spec.keyID), earlier != named {
                throw StartupError("--auth-key: key id \(spec.keyID) is given twice (\(earlier) and \(named)); a key id names one key")
            }
        }
        var owners: [String: String] = [:]
        for app in configuration.apps {
            if let earlier = owners.updateValue(app.teamID, forKey: app.bundleID), earlier != app.teamID {
                throw StartupError("--app: \(app.bundleID) is given for two teams (\(earlier) and \(app.teamID)); a bundle id belongs to one team")
            }
        }
        for spec in configuration.authKeys {
            guard let pem = try? String(contentsOfFile: spec.path, encoding: .utf8) else {
                throw StartupError("--auth-key \(spec.teamID):\(spec.keyID):\(spec.path): cannot read \(spec.path)")
            }
            let key: ES256PublicKey
            do {
                key = try ES256PublicKey(pemPrivateOrPublic: pem)
            } catch {
                throw StartupError(
                    "--auth-key \(spec.teamID):\(spec.keyID):\(spec.path): \(error); expected the .p8 file Apple issued (PKCS#8 EC P-256 private key) or a PEM public key"
                )
            }
            // No PEM kept: configured keys are read from their files at every start.
            world.credentials.add(
                ProviderKey(
                    teamID: spec.teamID, keyID: spec.keyID, environment: spec.environment, topics: spec.topics.map(Set.init),
                    relatedKeyID: spec.relatedKeyID, verifier: ES256SignatureVerifier(key: key), source: absolutePath(spec.path)))
        }
        for app in configuration.apps { world.credentials.addApp(teamID: app.teamID, bundleID: app.bundleID) }

        let now = clock.nowMilliseconds()
        var madeDemoDevice = false
        if configuration.makesDemo {
            let path = demoKeyPath(configuration)
            let key = try loadOrCreateDemoKey(path: path)
            world.credentials.add(
                ProviderKey(
                    teamID: Emulator.demoTeamID, keyID: Emulator.demoKeyID, verifier: ES256SignatureVerifier(key: key.publicKey),
                    source: absolutePath(path)))
            if world.credentials.owner(ofBundle: Emulator.demoBundleID) == nil {
                world.credentials.addApp(teamID: Emulator.demoTeamID, bundleID: Emulator.demoBundleID)
            }
            if !configuration.devices.contains(where: { $0.deviceID == Emulator.demoDeviceID }) {
                do {
                    try world.registry.addDevice(id: Emulator.demoDeviceID, isVirtual: true, nowMs: now)
                    _ = try world.installApp(
                        deviceID: Emulator.demoDeviceID, bundleID: Emulator.demoBundleID, environment: .sandbox, kinds: [.app],
                        settings: AppSettings(), nowMs: now)
                    madeDemoDevice = true
                } catch {
                    throw StartupError("demo device: \(error)")
                }
            }
        }
        for device in configuration.devices {
            do {
                try world.registry.addDevice(id: device.deviceID, isVirtual: true, nowMs: now)
                // Installed and launched as through the admin API: the app registers, and with
                // nobody logged in yet its token waits for the first login (tokenUploadPending).
                for app in device.apps {
                    _ = try world.installApp(
                        deviceID: device.deviceID, bundleID: app.bundleID, environment: app.environment, kinds: [app.kind],
                        fixedToken: app.token, settings: AppSettings(), nowMs: now)
                }
                try world.registry.updateDevice(device.deviceID) { stored in
                    stored.attention = device.attention
                    for (bundle, setup) in device.notificationSettings { stored.apps[bundle]?.settings.notifications = setup }
                }
                for declaration in device.liveActivities {
                    try world.liveActivities.declare(
                        deviceID: device.deviceID, bundleID: declaration.bundleID, environment: declaration.environment,
                        types: declaration.types, frequentUpdates: declaration.frequentUpdates)
                }
            } catch RegistryError.tooManyDevices(let limit, _) {
                // Nothing runs yet to delete devices from: the configuration asks for too many.
                let demo = madeDemoDevice ? ", the demo device included (--demo off leaves it out)" : ""
                throw StartupError(
                    "config device \(device.deviceID): the configuration asks for \(configuration.devices.count + (madeDemoDevice ? 1 : 0)) devices\(demo), more than --max-devices \(limit) allows; start with a higher --max-devices or fewer devices"
                )
            } catch {
                throw StartupError("config device \(device.deviceID): \(error)")
            }
        }
        return madeDemoDevice
    }

    static func loadOrCreateDemoKey(path: String) throws(StartupError) -> ES256PrivateKey {
        if let pem = try? String(contentsOfFile: path, encoding: .utf8) {
            do { return try ES256PrivateKey(pem: pem) } catch {
                throw StartupError("demo key \(path) is unreadable (\(error)); delete it to make a new one")
            }
        }
        do {
            let key = try ES256PrivateKey.generate()
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent,
                withIntermediateDirectories: true)
            // Written aside, then linked into place: instances started together on one new
            // --certs-dir keep the first key made (each kept its own and wrote it over the
            // others', so the key in the file verified on one instance only).
            let aside = "\(path).\(getpid()).tmp"
            defer { unlink(aside) }
            guard
                FileManager.default.createFile(
                    atPath: aside, contents: Data(key.pkcs8PEM.utf8),
                    attributes: [.posixPermissions: 0o600])
            else { throw StartupError("cannot write \(path)") }
            if link(aside, path) != 0 {
                if errno == EEXIST {
                    guard let pem = try? String(contentsOfFile: path, encoding: .utf8), let made = try? ES256PrivateKey(pem: pem)
                    else { throw StartupError("cannot read \(path), which another instance was writing") }
                    return made
                }
                // A file system without hard links: moved into place instead.
                guard rename(aside, path) == 0 else { throw StartupError("cannot write \(path)") }
            }
            return key
        } catch let error as StartupError {
            throw error
        } catch {
            throw StartupError("cannot create demo key \(path) (--certs-dir)", because: error)
        }
    }
}
