// EndpointOptions+Options: the flags for the provider endpoint's answers (invalid payloads, the
// wrong-environment reason's spelling, provider-token clock skew) and their mapping. Imports
// APNsCore (EndpointOptions) and CommandLineOptions only.
import APNsCore
import CommandLineOptions

extension EndpointOptions {
    enum Flag {
        private static let defaults = EndpointOptions()
        static let invalidPayload = OptionSpec(
            "invalid-payload", "reject|accept", default: defaults.invalidPayload.rawValue,
            "body that is not a JSON object: 400 BadRequestPayload, or 200 and dropped by the device")
        static let badEnvironmentReason = OptionSpec(
            "bad-environment-reason", "NAME", default: defaults.badEnvironmentKeySpelling,
            "spelling of the wrong-environment key reason (BadEnvironmentKeyIdInToken or BadEnvironmentKeyInToken)")
        static let jwtClockSkew = OptionSpec(
            "jwt-clock-skew", "SECONDS", default: String(defaults.tokenPolicy.allowedFutureSkewSeconds),
            "how far in the future a provider token's iat may be")
    }

    /// The spellings of the wrong-environment reason seen from Apple.
    static let badEnvironmentSpellings = ["BadEnvironmentKeyIdInToken", "BadEnvironmentKeyInToken"]

    init(_ options: ResolvedOptions, over base: Self) throws(UsageError) {
        self = base
        invalidPayload = try options.choice(Flag.invalidPayload, InvalidPayloadPolicy.self) ?? invalidPayload
        badEnvironmentKeySpelling =
            try options.choice(Flag.badEnvironmentReason, among: Self.badEnvironmentSpellings)
            ?? badEnvironmentKeySpelling
        tokenPolicy.allowedFutureSkewSeconds =
            try options.integer(Flag.jwtClockSkew, in: 0...86_400).map(Int64.init)
            ?? tokenPolicy.allowedFutureSkewSeconds
    }
}
