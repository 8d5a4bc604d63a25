// StateBackend+Options: the state flags (--state-dir and its journal lag and failure policy,
// --redis and its prefix) and their mapping. Both backends given is a usage error, so the
// resulting value names one. Imports CommandLineOptions, Redis (RedisURL) and StatePersistence.
import CommandLineOptions
import Redis
import RedisStore
import StatePersistence

extension ServeConfiguration.StateBackend {
    enum Flag {
        static let directory = OptionSpec(
            "state-dir", "DIR",
            "keep devices, tokens, runtime keys/apps/fault rules, stored notifications and the journal in DIR (SQLite) across restarts; see docs/state.md (default: memory only)"
        )
        static let redis = OptionSpec(
            "redis", "URL",
            "share devices, tokens, stored notifications, budgets and the journal with other instances through Redis (redis://[:PASSWORD@]HOST[:PORT][/DB]; a single Redis, or any node of a Redis Cluster); see docs/several-instances.md (default: this process only)"
        )
        static let redisPrefix = OptionSpec(
            "redis-prefix", "PREFIX", default: RedisStateStore.defaultPrefix,
            "with --redis: the prefix of every key this emulator uses (on a Redis Cluster, its hash tag: {PREFIX})")
        static let redisFollow = OptionSpec(
            "redis-follow", "lazy|eager", default: RedisFollow.lazy.rawValue,
            "with --redis: lazy leaves the other instances' pushes (their journal records) unread until this instance's journal is read (admin API, web UI) or a change needs them, so instances do not slow each other down; eager reads every one as it comes"
        )
        static let journalLag = OptionSpec(
            "state-journal-lag", "N", default: String(Directory.defaultJournalLag),
            "with --state-dir: journal records a 200 may be sent ahead of their commit (a kill -9 loses at most these, the newest; beyond, answers wait for the disk); 0 = every 200 waits for its record"
        )
        static let failure = OptionSpec(
            "state-failure", "refuse|memory", default: Directory.defaultOnFailure.rawValue,
            "with --state-dir, while the directory cannot commit (disk full, read-only, I/O errors): refuse (providers get 503, admin changes 503, /readyz 503, until a retry commits) or memory (go on unpersisted, logged)"
        )
    }

    /// A backend the options name replaces the base's; the journal lag, failure policy and prefix
    /// apply to whichever backend it is (and are checked even when it is another).
    init(_ options: ResolvedOptions, over base: Self) throws(UsageError) {
        let path = options.string(Flag.directory)
        let journalLag = try options.integer(Flag.journalLag, in: 0...100_000)
        let onFailure = try options.choice(Flag.failure, StateFailurePolicy.self)
        if path?.isEmpty == true {
            throw UsageError("\(options.origin(Flag.directory)): give a directory (it is created when missing)")
        }
        var url: RedisURL?
        if let text = options.string(Flag.redis) {
            do { url = try RedisURL(parsing: text) } catch {
                throw UsageError("\(options.origin(Flag.redis)): \(error)")
            }
            if path != nil {
                throw UsageError("--state-dir and --redis cannot be combined: with --redis the state lives in Redis")
            }
        }
        let follow = try options.choice(Flag.redisFollow, RedisFollow.self)
        let prefix = options.string(Flag.redisPrefix)
        if let prefix, prefix.isEmpty || prefix.utf8.count > 200 {
            throw UsageError("\(options.origin(Flag.redisPrefix)): give 1 to 200 characters")
        }

        if let path { self = .directory(Directory(path: path)) } else if let url { self = .redis(Redis(url: url)) } else { self = base }
        switch self {
        case .memory:
            break
        case .directory(var directory):
            directory.journalLag = journalLag ?? directory.journalLag
            directory.onFailure = onFailure ?? directory.onFailure
            self = .directory(directory)
        case .redis(var redis):
            redis.prefix = prefix ?? redis.prefix
            redis.follow = follow ?? redis.follow
            self = .redis(redis)
        }
    }

    /// The state flags given for a backend other than the one in use: they are read and checked,
    /// but do nothing, which a typo in a deployment would otherwise hide.
    static func settingsWithoutEffect(_ options: ResolvedOptions, backend: Self) -> [String] {
        var unused: [(OptionSpec, needs: OptionSpec)] = []
        if backend.redis == nil { unused += [(Flag.redisPrefix, Flag.redis), (Flag.redisFollow, Flag.redis)] }
        if backend.directory == nil { unused += [(Flag.journalLag, Flag.directory), (Flag.failure, Flag.directory)] }
        return unused.filter { options.string($0.0) != nil }.map { spec, needs in
            "\(options.origin(spec)) has no effect without \(needs.flag)"
        }
    }
}
