// StateDirectory: `--state-dir`: the store read at construction, written and followed by the
// writer thread once started.
import APNsCore
import Lifecycle
import Locking
public import Networking
import OpenSSLCrypto
import SQLiteStateStore
public import StatePersistence

/// Event loops run the answers that waited for a commit.
extension EventLoop: CommitExecutor {}

/// `--state-dir`: opens the store and works out the world to start with; the writer is
/// started with the other services.
enum StateDirectory {
    /// The world to serve: `configured` for a new directory (which is then written in full),
    /// else the persisted state laid over it (docs/state.md, "Start-up"). Reads the store;
    /// writes nothing until the returned service starts.
    static func open(
        _ directory: String, configured: World, journalLag: Int, onFailure: StateFailurePolicy, clock: OffsetClock,
        logger: Logger
    ) throws(StartupError) -> (World, StateDirectoryService) {
        let store: SQLiteStateStore
        let persisted: PersistedState
        do {
            store = try SQLiteStateStore(directory: directory)
            persisted = try store.load()
        } catch {
            throw StartupError(error.description)
        }
        var world: World
        var changes: [StateChange]
        if persisted.initialized {
            // The time goes on from where it was moved to (`POST /api/v1/clock`).
            if persisted.clockOffsetMs > 0, !clock.advance(milliseconds: persisted.clockOffsetMs) {
                throw StartupError("--state-dir \(directory): the clock offset it keeps (\(persisted.clockOffsetMs) ms) is out of range")
            }
            for stored in persisted.keys where stored.addedAtRunTime {
                if let configuredKey = configured.credentials.keys[stored.keyID], StoredKey(configuredKey)?.pem != stored.pem {
                    logger.warning(
                        "state: key \(stored.keyID) added at run time and kept in \(directory) is used instead of the configured one (\(configuredKey.source)); to use the configured key, DELETE /api/v1/keys/\(stored.keyID) and restart, or POST /api/v1/reset"
                    )
                }
            }
            do {
                world = try World.restoring(persisted, over: configured, nowMs: clock.nowMilliseconds(), loadKey: loadKey)
            } catch {
                throw StartupError("--state-dir \(directory): \(error.description)")
            }
            // The state's owner wins for a bundle in both (docs/state.md): said, since every
            // push signed by the configured team's keys is then refused.
            for (bundle, configuredOwner) in configured.credentials.apps.sorted(by: { $0.key < $1.key }) {
                guard let kept = world.credentials.apps[bundle]?.teamID, kept != configuredOwner.teamID else { continue }
                logger.warning(
                    "state: app \(bundle) belongs to team \(kept) in \(directory), not to team \(configuredOwner.teamID) as configured; the kept owner stays, so pushes to it signed by team \(configuredOwner.teamID)'s keys get 400 TopicDisallowed. To give it to team \(configuredOwner.teamID): DELETE /api/v1/apps/\(bundle) and restart, or POST /api/v1/reset"
                )
            }
            for warning in world.configuredDevicesKeptDifferently(from: configured, stateName: directory) {
                logger.warning("state: " + warning)
            }
            // The state's fault rules are used; `--faults` counts for a new directory and a reset.
            let configuredRules = configured.faults.rules.map(\.id)
            if !configuredRules.isEmpty, persisted.faults != nil, world.faults.rules.map(\.id) != configuredRules {
                logger.warning(
                    "state: the \(world.faults.rules.count) fault rule(s) kept in \(directory) are used, not the \(configuredRules.count) configured (--faults): configured rules count for a new state directory and after POST /api/v1/reset"
                )
            }
            changes = world.takeStateChanges(recordSequences: world.records.takeChanges())
            world.records.trackChanges = false
            logger.info(
                "state: loaded \(persisted.devices.count) device(s), \(persisted.tokens.count) token(s), \(persisted.waiting.count) waiting notification(s) and \(persisted.records.count) record(s) from \(store.location)"
            )
            let limits = world.registry.limits
            if world.registry.devices.count > limits.maxDevices || world.registry.tokens.count > limits.maxTokens {
                logger.warning(
                    "state: \(directory) holds \(world.registry.devices.count) device(s) and \(world.registry.tokens.count) token(s), more than --max-devices \(limits.maxDevices) or --max-tokens \(limits.maxTokens) allow: all are kept, and new ones are refused (507) until enough go"
                )
            }
            if world.records.count < persisted.records.count {
                logger.warning(
                    "state: the journal keeps the newest \(world.records.count) of the \(persisted.records.count) records kept in \(directory) (--max-records, --max-record-bytes); the older ones are removed from it"
                )
            }
        } else {
            world = configured
            world.startTrackingChanges()
            changes = [.reset(world.persistedState)]
            logger.info("state: new state in \(store.location)")
        }
        let writer = StateWriter(
            store: store, limits: StateWriterLimits().with(journalLag: journalLag), onFailure: onFailure,
            logger: logger)
        return (world, StateDirectoryService(directory: directory, store: store, firstChanges: changes, writer: writer))
    }

    /// A key added at run time, from the PEM kept in the state.
    static func loadKey(_ stored: StoredKey) throws(StateStoreError) -> ProviderKey {
        let key: ES256PublicKey
        do { key = try ES256PublicKey(pemPrivateOrPublic: stored.pem) } catch {
            throw StateStoreError("stored key \(stored.teamID):\(stored.keyID) cannot be loaded: \(error)")
        }
        return ProviderKey(
            teamID: stored.teamID, keyID: stored.keyID, environment: stored.environment,
            topics: stored.topics.map(Set.init), relatedKeyID: stored.relatedKeyID,
            verifier: ES256SignatureVerifier(key: key), source: stored.source, pem: stored.pem,
            addedAtRunTime: true)
    }
}

/// The state directory as a service: starting writes the world about to be served (before
/// any listener opens, so what is served is already on disk) and starts the writer thread;
/// stopping commits what is queued.
final class StateDirectoryService: Service {
    var serviceName: String { "state directory" }
    let writer: StateWriter
    private let directory: String
    private let store: any StateStore
    /// Released once written.
    private let firstChanges: Locked<[StateChange]>

    init(directory: String, store: any StateStore, firstChanges: [StateChange], writer: StateWriter) {
        self.directory = directory
        self.store = store
        self.firstChanges = Locked(firstChanges)
        self.writer = writer
    }

    func start() throws {
        let changes = firstChanges.withLock { changes in
            defer { changes = [] }
            return changes
        }
        do { try store.write(changes) } catch { throw StartupError("--state-dir \(directory): \(error.description)") }
        writer.start()
    }

    func stop(deadlineMs: Int64) { writer.stop(deadlineMs: deadlineMs) }
}
