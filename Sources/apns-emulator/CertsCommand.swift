import APNsCore
import CommandLineOptions
import Foundation
import OpenSSLCrypto

/// `apns-emulator certs`: TEST ONLY certificates for the endpoints, or a provider's.
let certsCommand = Subcommand(
    name: "certs", listing: "write TEST ONLY CA and server certificates",
    summary: "Writes TEST ONLY certificates (never trust them outside a test machine).",
    specs: [
        OptionSpec(
            "dir", "PATH", default: "certs",
            "directory to write ca.pem, ca-key.pem, server.pem, server-key.pem (and server-rsa.pem, server-rsa-key.pem for RSA-only clients)"),
        OptionSpec(
            "provider", "BUNDLEID",
            "instead, issue a provider (client) certificate for this app, signed by DIR/ca.pem: DIR/provider-BUNDLEID[-ENVIRONMENT].pem and -key.pem"),
        OptionSpec("environment", "sandbox|production|both", default: "both", "with --provider: where the certificate is valid"),
        OptionSpec("days", "N", default: "365", "with --provider: validity in days"),
        OptionSpec(
            "key-type", "ec|rsa", default: "ec",
            "with --provider: the key; rsa is RSA-2048 as Apple issues (for libraries that read a PEM key as RSA only)"),
        OptionSpec(
            "single-topic", nil,
            "with --provider: the app's own topic alone (no topic list), the topic of a push without apns-topic; by default the bundle, .voip and .complication"
        ),
    ],
    run: runCerts
)

private func runCerts(_ command: Subcommand, _ args: [String]) -> Never {
    let (options, positional) = command.parse(args)
    guard positional.isEmpty else { command.fail("unexpected argument '\(positional[0])'; see --help") }
    let dir = options.string("dir") ?? "certs"
    do {
        guard let bundle = options.string("provider") else {
            if let given = ["environment", "days", "key-type", "single-topic"].first(where: { options.source($0) != .defaultValue }) {
                command.fail("--\(given) goes with --provider (the CA and server certificates take no such setting)")
            }
            if FileManager.default.fileExists(atPath: "\(dir)/ca.pem") {
                FileHandle.standardError.write(
                    Data(
                        "apns-emulator certs: replacing the CA in \(dir): certificates it signed (provider certificates, the server certificate a running emulator uses) no longer verify against the new one\n"
                            .utf8))
            }
            let made = try TestCertificates.generate(into: dir)
            print("wrote TEST ONLY certificates: CA \(made.caPath), server \(made.certificatePath), key \(made.keyPath)")
            exit(0)
        }
        // The bundle id names the file and goes into the certificate's subject.
        guard DeviceRegistry.isValidBundleID(bundle) else { command.fail("--provider: \(RegistryError.invalidBundleID(bundle))") }
        let environment = options.string("environment") ?? "both"
        guard ["sandbox", "production", "both"].contains(environment) else {
            command.fail("--environment must be sandbox, production or both, not '\(environment)'")
        }
        guard let days = Int(options.string("days") ?? ""), (1...36_500).contains(days) else {
            command.fail("--days must be a whole number from 1 to 36500")
        }
        let keyType = options.string("key-type") ?? "ec"
        guard keyType == "ec" || keyType == "rsa" else { command.fail("--key-type must be ec or rsa, not '\(keyType)'") }
        guard FileManager.default.fileExists(atPath: "\(dir)/ca.pem") else {
            command.fail(
                "no CA in \(dir) to sign it: run 'apns-emulator certs --dir \(dir)' first, or give --dir the emulator's certificates directory")
        }
        let made = try TestCertificates.generateProviderCertificate(
            // One file per environment choice and kind, so a sandbox and a production
            // certificate, or a universal and a single-topic one, for the same app live side
            // by side.
            into: dir,
            name: "provider-\(bundle)" + (options.isSet("single-topic") ? "-single-topic" : "")
                + (environment == "both" ? "" : "-\(environment)"),
            caPath: "\(dir)/ca.pem",
            caKeyPath: "\(dir)/ca-key.pem", bundleID: bundle,
            development: environment != "production", production: environment != "sandbox",
            topics: options.isSet("single-topic") ? [] : nil, validityDays: days, rsa: keyType == "rsa")
        let covers = options.isSet("single-topic") ? "the topic \(bundle) alone" : "\(bundle), .voip and .complication"
        print("wrote a TEST ONLY provider certificate for \(covers) (\(environment)): \(made.certificatePath), key \(made.keyPath)")
        exit(0)
    } catch let error as CryptoError {
        command.fail(error.message)
    } catch {
        command.fail("\(error)")
    }
}
