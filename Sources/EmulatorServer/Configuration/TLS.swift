// TLS: where the server certificate comes from (TEST ONLY certificates generated in a
// directory, or the operator's files) and the client CA. A value with its defaults; its flags
// are in TLS+Options.swift. Imports nothing.

extension ServeConfiguration {
    /// Where the server certificate comes from.
    public enum TLSSource: Sendable, Equatable {
        /// TEST ONLY certificates in the directory (made when missing); its CA is the one to trust.
        case generated(certsDirectory: String)
        /// The operator's own chain and key. The directory still holds the demo key and the
        /// default client CA.
        case files(certificate: String, key: String, certsDirectory: String)

        public static let defaultCertsDirectory = "certs"

        public var certsDirectory: String {
            switch self {
            case .generated(let directory), .files(_, _, let directory): return directory
            }
        }

        public var certificatePath: String {
            switch self {
            case .generated(let directory): return "\(directory)/server.pem"
            case .files(let certificate, _, _): return certificate
            }
        }

        public var keyPath: String {
            switch self {
            case .generated(let directory): return "\(directory)/server-key.pem"
            case .files(_, let key, _): return key
            }
        }

        /// The CA of the generated certificates, what providers must trust; nil for the operator's own.
        public var generatedCAPath: String? {
            guard case .generated(let directory) = self else { return nil }
            return "\(directory)/ca.pem"
        }
    }

    public struct TLS: Sendable, Equatable {
        public var source: TLSSource
        /// The CA provider (client) certificates must chain to; nil = CERTS-DIR/ca.pem when present.
        public var clientCAPath: String?

        public init(source: TLSSource = .generated(certsDirectory: TLSSource.defaultCertsDirectory), clientCAPath: String? = nil) {
            self.source = source
            self.clientCAPath = clientCAPath
        }

        /// The client CA to load, and whether it must exist (given) or is used only when present.
        public var clientCA: (path: String, required: Bool) {
            (clientCAPath ?? "\(source.certsDirectory)/ca.pem", clientCAPath != nil)
        }
    }
}
