// TLS+Options: the certificate flags (generated TEST ONLY certificates or the operator's files,
// the client CA) and their mapping. Imports CommandLineOptions, and Foundation to look at the
// certificate directory.
import CommandLineOptions
import Foundation

extension ServeConfiguration.TLS {
    enum Flag {
        static let certificate = OptionSpec("tls-cert", "PATH", "server certificate chain, PEM (default: CERTS-DIR/server.pem, generated if missing)")
        static let key = OptionSpec("tls-key", "PATH", "server private key, PEM (default: CERTS-DIR/server-key.pem)")
        static let certsDirectory = OptionSpec(
            "certs-dir", "PATH", default: ServeConfiguration.TLS().source.certsDirectory,
            "where the default TEST ONLY certificates are read or generated (several instances may share one: the first to start makes them, holding a lock on .lock there)"
        )
        static let clientCA = OptionSpec(
            "client-ca", "PATH",
            "CA certificates (PEM) that provider client certificates must chain to (default: CERTS-DIR/ca.pem)")
    }

    init(_ options: ResolvedOptions, over base: Self) throws(UsageError) {
        let directory = options.string(Flag.certsDirectory) ?? base.source.certsDirectory
        if options.string(Flag.certsDirectory) != nil {
            // Created at the start when missing; a file in its place or an empty name is a usage error.
            guard !directory.isEmpty else { throw UsageError("\(options.origin(Flag.certsDirectory)): give a directory") }
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), !isDirectory.boolValue {
                throw UsageError("\(options.origin(Flag.certsDirectory)): \(directory) is a file, not a directory")
            }
        }
        if options.isSet(Flag.certificate) != options.isSet(Flag.key) {
            throw UsageError("--tls-cert and --tls-key go together: give both, or neither to use \(directory)/")
        }
        if let certificate = options.string(Flag.certificate), let key = options.string(Flag.key) {
            source = .files(certificate: certificate, key: key, certsDirectory: directory)
        } else if case .files(let certificate, let key, _) = base.source {
            source = .files(certificate: certificate, key: key, certsDirectory: directory)
        } else {
            source = .generated(certsDirectory: directory)
        }
        clientCAPath = options.string(Flag.clientCA) ?? base.clientCAPath
    }
}
