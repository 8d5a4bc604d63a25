// RecordLimits: what is kept for inspection (notification records, app backend calls). A value
// with its defaults; its flags are in RecordLimits+Options.swift. Imports BackendCalls (its
// default capacity).
public import APNsCore
public import BackendCalls

extension ServeConfiguration {
    /// What is kept for inspection; beyond it the oldest go first.
    public struct RecordLimits: Sendable, Equatable {
        public var maxRecords: Int
        /// Bytes the kept notification records may take in all.
        public var maxRecordBytes: Int
        /// App backend calls kept, and queued at most.
        public var maxBackendCalls: Int
        /// Live broadcast channels per app per environment (Apple's limit is 10,000).
        public var maxChannels: Int
        /// Broadcasts one channel takes per second before 429 (0 = no limit).
        public var channelBroadcastRate: Int = ChannelDirectory.defaultMaxBroadcastsPerSecond

        public init(
            maxRecords: Int = 50_000, maxRecordBytes: Int = 256 << 20, maxBackendCalls: Int = BackendCaller.defaultCapacity,
            maxChannels: Int = ChannelDirectory.defaultMaxLivePerApp
        ) {
            self.maxRecords = maxRecords
            self.maxRecordBytes = maxRecordBytes
            self.maxBackendCalls = maxBackendCalls
            self.maxChannels = maxChannels
        }
    }
}
