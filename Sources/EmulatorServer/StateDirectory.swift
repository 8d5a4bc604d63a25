import APNsCore
public import Networking
import OpenSSLCrypto
import SQLiteStateStore
public import StatePersistence

/// Event loops run the answers that waited for a commit.
extension EventLoop: CommitExecutor {}

/// `--state-dir`: opens the store, works out the world to start with and starts the writer.
enum StateDirectory {
    /// The world to serve: `configured` for a new directory (which is then written in full),
    /// else the persisted state laid over it (docs/state.md, "Start-up").
    /// `log` is for what was loaded (quiet with `--quiet`); the writer's failures are always
    /// logged.
    static func open(_ directory: String, configured: World, journalLag: Int, onFailure: StateFailurePolicy, clock: any EmulatorClock,
                     log: @escaping @Sendable (String) -> Void) throws(StartupError) -> (World, StateWriter)
    {
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
            do {
                world = try World.restoring(persisted, over: configured, nowMs: clock.nowMilliseconds(), loadKey: loadKey)
            } catch {
                throw StartupError("--state-dir \(directory): \(error.description)")
            }
            changes = world.takeStateChanges(recordSequences: world.records.takeChanges())
            world.records.trackChanges = false
            log("state: loaded \(persisted.devices.count) device(s), \(persisted.tokens.count) token(s), \(persisted.waiting.count) waiting notification(s) and \(persisted.records.count) record(s) from \(store.location)")
        } else {
            world = configured
            world.startTrackingChanges()
            changes = [.reset(world.persistedState)]
            log("state: new state in \(store.location)")
        }
        // Written before any listener opens, so what is served is already on disk.
        do { try store.write(changes) } catch { throw StartupError("--state-dir \(directory): \(error.description)") }
        let writer = StateWriter(store: store, limits: StateWriterLimits().with(journalLag: journalLag), onFailure: onFailure) {
            ProviderConnections.logLine($0)
        }
        writer.start()
        return (world, writer)
    }

    /// A key added at run time, from the PEM kept in the state.
    static func loadKey(_ stored: StoredKey) throws(StateStoreError) -> ProviderKey {
        let key: ES256PublicKey
        do { key = try ES256PublicKey(pemPrivateOrPublic: stored.pem) } catch {
            throw StateStoreError("stored key \(stored.teamID):\(stored.keyID) cannot be loaded: \(error)")
        }
        return ProviderKey(teamID: stored.teamID, keyID: stored.keyID, environment: stored.environment,
                           topics: stored.topics.map(Set.init), relatedKeyID: stored.relatedKeyID,
                           verifier: ES256SignatureVerifier(key: key), source: stored.source, pem: stored.pem,
                           addedAtRunTime: true)
    }
}
