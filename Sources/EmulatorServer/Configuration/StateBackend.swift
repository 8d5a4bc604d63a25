// StateBackend: where the state lives (memory, a directory, Redis): one of three, so a state
// directory and Redis cannot both be chosen. A value with its defaults; its flags are in
// StateBackend+Options.swift. Imports Redis (RedisURL), RedisStore (the default prefix) and
// StatePersistence (the failure policy).
public import Redis
public import RedisStore
public import StatePersistence

extension ServeConfiguration {
    /// Where the state lives. One of three: a state directory and Redis cannot both be chosen.
    public enum StateBackend: Sendable, Equatable {
        /// This process only, gone at exit.
        case memory
        /// Survives restarts in a directory (SQLite).
        case directory(Directory)
        /// Shared with other instances through Redis.
        case redis(Redis)

        public struct Directory: Sendable, Equatable {
            public static let defaultJournalLag = 0
            public static let defaultOnFailure = StateFailurePolicy.refuse
            public var path: String
            /// Journal records a 200 may be sent ahead of their commit.
            public var journalLag: Int
            /// While the directory cannot commit: refuse work (503) or go on in memory.
            public var onFailure: StateFailurePolicy

            public init(path: String, journalLag: Int = defaultJournalLag, onFailure: StateFailurePolicy = defaultOnFailure) {
                self.path = path
                self.journalLag = journalLag
                self.onFailure = onFailure
            }
        }

        public struct Redis: Sendable, Equatable {
            public var url: RedisURL
            /// Every key's prefix (several emulators in one Redis database).
            public var prefix: String
            /// How the others' journal records are followed (`--redis-follow`).
            public var follow: RedisFollow

            public init(url: RedisURL, prefix: String = RedisStateStore.defaultPrefix, follow: RedisFollow = .lazy) {
                self.url = url
                self.prefix = prefix
                self.follow = follow
            }
        }

        /// `--redis-follow`: `lazy` reads the other instances' journal-only writes when this
        /// instance's journal is read (its admin API, a change under the lease) rather than as
        /// they come; `eager` reads every write as it comes.
        public enum RedisFollow: String, Sendable, CaseIterable {
            case lazy, eager
        }

        public var directory: Directory? {
            guard case .directory(let directory) = self else { return nil }
            return directory
        }

        public var redis: Redis? {
            guard case .redis(let redis) = self else { return nil }
            return redis
        }
    }
}
