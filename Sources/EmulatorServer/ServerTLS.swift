// ServerTLS: the provider endpoints' certificate (made as TEST ONLY certificates when none
// were given and none exist) and the CA provider client certificates must chain to.
import Foundation
import Lifecycle
import Locking
import OpenSSLCrypto

/// The TLS material, as a service: made or read when started (before the listeners), read
/// by each new connection after.
final class ServerTLS: Service {
    var serviceName: String { "TLS certificates" }
    private let configuration: ServeConfiguration.TLS
    private let needed: Bool
    private let logger: Logger
    private let loaded = Locked<(context: TLSContext?, clientTrust: CertificateTrustStore?)>((nil, nil))

    init(configuration: ServeConfiguration, logger: Logger) {
        self.configuration = configuration.tls
        needed = configuration.listeners.needsServerCertificate
        self.logger = logger
    }

    /// The endpoints' TLS context; nil before `start` or when no listener uses TLS.
    var context: TLSContext? { loaded.withLock { $0.context } }
    /// Trusted issuers of provider client certificates; nil = none configured.
    var clientTrust: CertificateTrustStore? { loaded.withLock { $0.clientTrust } }

    func start() throws {
        guard needed else { return }
        let context = try Self.makeContext(configuration.source, logger: logger)
        let trust = try loadClientTrust()
        loaded.withLock { $0 = (context, trust) }
    }

    func stop(deadlineMs: Int64) {}

    /// The TLS context; makes TEST ONLY certificates when none were given and none exist.
    private static func makeContext(_ source: ServeConfiguration.TLSSource, logger: Logger) throws(StartupError) -> TLSContext {
        let fm = FileManager.default
        var rsa: (certificatePath: String, keyPath: String)?
        if case .generated(let directory) = source {
            try holdingCertificatesLock(directory, logger: logger) { () throws(StartupError) in
                if !(fm.fileExists(atPath: source.certificatePath) && fm.fileExists(atPath: source.keyPath)) {
                    try makeServerCertificate(in: directory, logger: logger)
                } else if !fm.fileExists(atPath: directory + "/ca.pem") {
                    logger.warning(
                        "\(directory)/ has a server certificate but no ca.pem: there is no CA file to give clients to trust (move the directory away, and a new one is made)"
                    )
                }
                rsa = rsaCertificate(in: directory, logger: logger)
            }
        }
        let context: TLSContext
        do {
            context = try TLSContext.server(certificateChainPath: source.certificatePath, privateKeyPath: source.keyPath)
        } catch {
            throw StartupError("--tls-cert \(source.certificatePath) / --tls-key \(source.keyPath): \(error)")
        }
        // The RSA certificate is an extra: one that cannot be read (another user's 0600 key)
        // leaves the EC one alone, as before it existed.
        guard let rsa else { return context }
        do {
            return try TLSContext.server(certificateChainPath: source.certificatePath, privateKeyPath: source.keyPath, also: rsa)
        } catch {
            logger.warning("serving without the RSA server certificate (TLS 1.2 clients limited to RSA cipher suites will fail): \(error)")
            return context
        }
    }

    /// Several instances started at once on one new `--certs-dir` would each make a CA and
    /// certificates over the others' (a server certificate beside another instance's key, or
    /// signed by a CA no client trusts): the first makes them under an exclusive lock on
    /// `.lock` there, the others wait and find them made.
    private static func holdingCertificatesLock<E: Error>(_ directory: String, logger: Logger, _ body: () throws(E) -> Void) throws(E) {
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let fd = open(directory + "/.lock", O_CREAT | O_RDWR | O_CLOEXEC, 0o600)
        if fd >= 0, flock(fd, LOCK_EX | LOCK_NB) != 0 {
            logger.info("waiting for another process holding \(directory)/.lock (an instance making the TEST ONLY certificates)")
            _ = flock(fd, LOCK_EX)
        }
        defer { if fd >= 0 { close(fd) } }
        try body()
    }

    /// The server certificate is missing from `directory`: a new one, signed by the CA there
    /// when its key is there too (providers and devices trust that CA, and provider
    /// certificates were made with it), else a new CA with it, said as a warning when it
    /// replaces a `ca.pem`.
    private static func makeServerCertificate(in directory: String, logger: Logger) throws(StartupError) {
        let fm = FileManager.default
        let caPath = directory + "/ca.pem"
        do {
            if fm.fileExists(atPath: caPath) && fm.fileExists(atPath: directory + "/ca-key.pem") {
                try TestCertificates.generateServerCertificate(into: directory)
                logger.info("generated a TEST ONLY server certificate in \(directory)/, signed by the CA there (\(caPath))")
                return
            }
            if fm.fileExists(atPath: directory + "/ca-key.pem") {
                logger.warning(
                    "replacing the CA key in \(directory)/: its certificate (ca.pem) is missing, so a new server certificate needs a new CA"
                )
            } else if fm.fileExists(atPath: caPath) {
                logger.warning(
                    "replacing the CA in \(directory)/: its key (ca-key.pem) is missing, so a new server certificate needs a new CA; clients trusting the old ca.pem and provider certificates it signed no longer verify"
                )
            }
            let made = try TestCertificates.generate(into: directory)
            logger.info("generated TEST ONLY certificates in \(directory)/ (CA: \(made.caPath))")
        } catch {
            throw StartupError("cannot generate TEST ONLY certificates in \(directory) (--certs-dir)", because: error)
        }
    }

    /// The TEST ONLY certificates also come with an RSA key, as Apple's servers present one: a
    /// TLS 1.2 client limited to RSA cipher suites needs it. Made beside the others when a
    /// directory from before it has the CA's key; without that key, served without it.
    private static func rsaCertificate(in directory: String, logger: Logger) -> (certificatePath: String, keyPath: String)? {
        let fm = FileManager.default
        let certificate = directory + "/server-rsa.pem"
        let key = directory + "/server-rsa-key.pem"
        if fm.fileExists(atPath: certificate) && fm.fileExists(atPath: key) { return (certificate, key) }
        guard fm.fileExists(atPath: directory + "/ca-key.pem") else { return nil }
        do {
            try TestCertificates.generateRSAServerCertificate(into: directory)
            logger.info("generated a TEST ONLY RSA server certificate in \(directory)/ (server-rsa.pem), beside the ECDSA one")
            return (certificate, key)
        } catch {
            logger.warning("no RSA server certificate (TLS 1.2 clients limited to RSA cipher suites will fail): \(error)")
            return nil
        }
    }

    /// The CA provider client certificates must chain to (certificate-based connections).
    private func loadClientTrust() throws(StartupError) -> CertificateTrustStore? {
        let (path, required) = configuration.clientCA
        guard required || FileManager.default.fileExists(atPath: path) else { return nil }
        do {
            return try CertificateTrustStore(pemPath: path)
        } catch {
            throw StartupError("--client-ca \(path): \(error)")
        }
    }
}
