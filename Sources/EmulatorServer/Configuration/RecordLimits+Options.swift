// RecordLimits+Options: the flags for what is kept for inspection (notification records, app
// backend calls) and the channel limit, and their mapping. Imports APNsCore (the channel
// limit) and CommandLineOptions.
import APNsCore
import CommandLineOptions

extension ServeConfiguration.RecordLimits {
    enum Flag {
        private static let defaults = ServeConfiguration.RecordLimits()
        static let maxRecords = OptionSpec(
            "max-records", "N", default: String(defaults.maxRecords),
            "notification records kept for inspection (oldest dropped first)")
        static let maxRecordBytes = OptionSpec(
            "max-record-bytes", "BYTES", default: String(defaults.maxRecordBytes),
            "bytes the kept records may take in all (payloads, headers, texts; oldest dropped first); a number with an optional K, M or G suffix")
        static let maxBackendCalls = OptionSpec(
            "max-backend-calls", "N", default: String(defaults.maxBackendCalls),
            "app backend calls kept for inspection, and queued at most, half of them for one backend host:port (beyond, a call is dropped and counted)"
        )
        static let maxChannels = OptionSpec(
            "max-channels", "N", default: String(defaults.maxChannels),
            "live broadcast channels per app per environment (Apple's limit; beyond, CannotCreateChannelConfig)")
        static let channelBroadcastRate = OptionSpec(
            "channel-broadcast-rate", "N", default: String(defaults.channelBroadcastRate),
            "broadcasts one channel takes per second; more get 429 TooManyRequests (Apple publishes no figure; 0 = no limit)")
    }

    init(_ options: ResolvedOptions, over base: Self) throws(UsageError) {
        self = base
        maxRecords = try options.integer(Flag.maxRecords, in: 1...10_000_000) ?? maxRecords
        if let text = options.string(Flag.maxRecordBytes) {
            guard let value = Self.byteCount(text), value >= 64 << 10 else {
                // Digits that do not fit are a size too large, not a malformed one.
                let digits = text.uppercased().last.map { "KMG".contains($0) } == true ? text.dropLast() : Substring(text)
                let tooLarge =
                    !digits.isEmpty && digits.allSatisfy(\.isASCII) && digits.allSatisfy(\.isNumber)
                    && Self.byteCount(text) == nil
                throw UsageError(
                    "\(options.origin(Flag.maxRecordBytes)): '\(text)' is "
                        + (tooLarge ? "too large" : "not a size of at least 64K") + " (for example 268435456, 256M or 1G)")
            }
            maxRecordBytes = value
        }
        maxBackendCalls = try options.integer(Flag.maxBackendCalls, in: 1...1_000_000) ?? maxBackendCalls
        maxChannels = try options.integer(Flag.maxChannels, in: 1...ChannelDirectory.defaultMaxLivePerApp) ?? maxChannels
        channelBroadcastRate = try options.integer(Flag.channelBroadcastRate, in: 0...1_000_000) ?? channelBroadcastRate
    }

    /// `123`, `64K`, `256M`, `1G` (binary multiples).
    static func byteCount(_ text: String) -> Int? {
        let multipliers: [Character: Int] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30]
        guard let last = text.uppercased().last else { return nil }
        if let multiplier = multipliers[last] {
            guard let value = Int(text.dropLast()), value >= 0, value <= Int.max / multiplier else { return nil }
            return value * multiplier
        }
        return Int(text).flatMap { $0 >= 0 ? $0 : nil }
    }
}
