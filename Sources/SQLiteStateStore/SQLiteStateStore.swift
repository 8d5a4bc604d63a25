// SQLiteStateStore: `--state-dir`: the StateStore on SQLite: schema and its versions, rows,
// damage checks at start, the last-commit marker. Imports APNsCore, SQLite and Foundation.
public import APNsCore
import Foundation
import SQLite

/// The `--state-dir` backend: one SQLite database, `DIR/state.sqlite`, in WAL mode with
/// `synchronous=NORMAL`. A committed transaction survives a crash of the process (kill -9);
/// after a power loss the newest transactions may be missing, but the file stays consistent.
/// The connection holds an exclusive lock, so a second emulator on the same directory is
/// refused at start-up instead of corrupting it.
///
/// Devices, apps, tokens and keys are plain columns (readable with the sqlite3 shell);
/// journal records, waiting notifications, fault rules, broadcast channels and each
/// device's Live Activities are `StateCodec` blobs (a channel's id, app, environment and
/// deletion time also as columns; a Live Activity row's device id).
public final class SQLiteStateStore: StateStore, @unchecked Sendable {
    /// `PRAGMA user_version` of the schema this build writes. A file with a higher number
    /// was written by a newer apns-emulator and is refused.
    /// 4 added Live Activities; 3 added broadcast channels; 2 added accounts on devices.
    public static let schemaVersion: Int64 = 5
    public static let fileName = "state.sqlite"
    /// Beside the database: how many transactions were committed, written after each commit.
    /// SQLite stops reading its write-ahead log at the first frame whose checksum fails and
    /// silently loses every transaction after it; this file, which that damage cannot reach,
    /// lets the next start notice (`commits` in the database is behind it) and say so.
    public static let markerName = "last-commit"

    public let directory: String
    public let location: String
    private let db: SQLiteDatabase
    /// nil once closed: statements are finalized before the connection, or the connection
    /// (and its lock on the file) would linger.
    private var prepared: Statements?
    /// Transactions committed in the database's life (`meta.commits`), and the marker file.
    private var commits: Int64 = 0
    private let marker: CommitMarker

    /// Opens (creating when needed) the state in `directory`. Every failure is an error
    /// whose message says what to do; nothing here traps.
    public init(directory: String) throws(StateStoreError) {
        self.directory = directory
        location = (directory as NSString).appendingPathComponent(Self.fileName)
        try Self.prepareDirectory(directory)
        marker = CommitMarker(path: (directory as NSString).appendingPathComponent(Self.markerName))
        try Self.checkFiles(directory: directory, location: location, marker: marker)
        // A marker that cannot be rewritten stops counting, and a damaged log would then go
        // unnoticed: it must be writable, as the database is.
        if FileManager.default.fileExists(atPath: marker.path), access(marker.path, W_OK) != 0 {
            let reason = String(cString: strerror(errno))
            if let unwritable = Self.unwritable(directory, location) {
                throw StateStoreError(
                    "--state-dir \(directory): cannot write to \(unwritable): the state directory must be writable; make it writable (remount it read-write), or use another --state-dir"
                )
            }
            throw StateStoreError(
                "--state-dir \(directory): cannot write to \(marker.path) (\(reason)): it counts the committed transactions that the next start checks the database against; make it writable (or delete it: it is made again), or use another --state-dir"
            )
        }
        let logWasThere = FileManager.default.fileExists(atPath: location + "-wal")
        do {
            db = try SQLiteDatabase(path: location)
        } catch {
            throw StateStoreError(
                "--state-dir \(directory): cannot open \(location): \(error.message)"
                    + (error.isCannotOpen ? "; check that the directory exists and is writable" : ""))
        }
        let location = self.location
        func explain(_ error: SQLiteError) -> StateStoreError {
            if error.isCorrupt {
                return StateStoreError(
                    "--state-dir \(directory): \(location) is not an apns-emulator state database or is damaged (\(error.message)); move it away, or use another --state-dir, to start afresh"
                )
            }
            if error.isBusy {
                return StateStoreError(
                    "--state-dir \(directory): \(location) is in use by another apns-emulator; stop it, or use another --state-dir")
            }
            // A read-only directory or file system surfaces as an I/O error from the first write.
            if let unwritable = Self.unwritable(directory, location) {
                return StateStoreError(
                    "--state-dir \(directory): cannot write to \(unwritable): the state directory must be writable; make it writable (remount it read-write), or use another --state-dir (SQLite said: \(error))"
                )
            }
            return StateStoreError("--state-dir \(directory): \(location): \(error)")
        }
        do {
            db.setBusyTimeout(milliseconds: 500)
            // Exclusive before WAL: the lock is kept for the life of the connection and the
            // WAL index lives in memory, not in a shared-memory file.
            try db.execute("PRAGMA locking_mode = EXCLUSIVE")
            let mode = try db.scalarText("PRAGMA journal_mode = WAL")
            guard mode?.lowercased() == "wal" else {
                throw StateStoreError("--state-dir \(directory): \(location) cannot be put in WAL mode (journal mode is \(mode ?? "unknown"))")
            }
            try db.execute("PRAGMA synchronous = NORMAL")
            try db.execute("PRAGMA journal_size_limit = 67108864")
            try db.execute("PRAGMA cache_size = -16384")
            try Self.checkOrCreateSchema(db, directory: directory, location: location)
            try Self.checkIntegrity(db, directory: directory, location: location)
            commits = try db.scalarInt("SELECT value FROM meta WHERE key = 'commits'") ?? 0
            try Self.checkNothingLost(commits: commits, marker: marker, directory: directory, location: location, logWasThere: logWasThere)
            prepared = try Statements(db)
        } catch let error as SQLiteError {
            throw explain(error)
        } catch let error as StateStoreError {
            throw error
        } catch {
            throw StateStoreError("--state-dir \(directory): \(error)")
        }
    }

    public func close() {
        prepared = nil
        db.close()
        marker.close()
    }

    /// The directory or database file this process cannot write to, with why; nil when both
    /// can be written (or the file does not exist yet).
    private static func unwritable(_ directory: String, _ location: String) -> String? {
        if access(directory, W_OK) != 0 { return "\(directory) (\(String(cString: strerror(errno))))" }
        if FileManager.default.fileExists(atPath: location), access(location, W_OK) != 0 {
            return "\(location) (\(String(cString: strerror(errno))))"
        }
        return nil
    }

    private static func prepareDirectory(_ directory: String) throws(StateStoreError) {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else {
                throw StateStoreError("--state-dir \(directory): exists and is not a directory")
            }
            return
        }
        // Foundation's error says "error 512"; errno says what is wrong.
        var made = ""
        for component in directory.split(separator: "/", omittingEmptySubsequences: true) {
            made += (made.isEmpty && !directory.hasPrefix("/") ? "" : "/") + component
            if FileManager.default.fileExists(atPath: made, isDirectory: &isDirectory) {
                guard isDirectory.boolValue else {
                    throw StateStoreError("--state-dir \(directory): cannot create the directory: \(made) is a file, not a directory")
                }
                continue
            }
            guard mkdir(made, 0o755) == 0 || errno == EEXIST else {
                let reason = String(cString: strerror(errno))
                throw StateStoreError(
                    "--state-dir \(directory): cannot create the directory \(made) (\(reason)); check the path and permissions")
            }
        }
    }

    /// A database file that is missing or empty while its write-ahead log (or the commit
    /// marker) says there was data: SQLite would start a new database and overwrite the log.
    private static func checkFiles(directory: String, location: String, marker: CommitMarker) throws(StateStoreError) {
        let databaseBytes = fileSize(location)
        let walBytes = fileSize(location + "-wal") ?? 0
        if databaseBytes == nil, walBytes == 0 {
            // No database at all (a new directory, or moved away to start afresh): its count
            // starts again from zero.
            try? FileManager.default.removeItem(atPath: marker.path)
            return
        }
        guard databaseBytes ?? 0 == 0 else { return }
        let what = databaseBytes == nil ? "is missing" : "is empty (0 bytes)"
        if walBytes > 0 {
            throw StateStoreError(
                "--state-dir \(directory): \(location) \(what), but its write-ahead log \(location)-wal holds \(walBytes) bytes: the database file was deleted, truncated or replaced, and starting now would discard the log and everything in it. To recover, put the original \(fileName) back (from a backup); to start afresh, move \(fileName), \(fileName)-wal and \(markerName) away, or use another --state-dir"
            )
        }
        if databaseBytes == 0, let committed = marker.read(), committed > 0 {
            throw StateStoreError(
                "--state-dir \(directory): \(location) is empty (0 bytes), but \(marker.path) records \(committed) committed transactions: the database file was truncated. To recover, put the original \(fileName) back (from a backup); to start afresh, move \(fileName) and \(markerName) away, or use another --state-dir"
            )
        }
    }

    private static func fileSize(_ path: String) -> Int64? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else { return nil }
        return (attributes[.size] as? NSNumber)?.int64Value
    }

    /// SQLite's quick check (every page and index entry readable and well formed, without the
    /// slower cross-checks of integrity_check): a database damaged on disk is refused at start
    /// rather than failing, or answering wrongly, later.
    private static func checkIntegrity(_ db: SQLiteDatabase, directory: String, location: String) throws {
        let check = try db.prepare("PRAGMA quick_check(5)")
        var problems: [String] = []
        while try check.step() { problems.append(check.text(0)) }
        guard problems != ["ok"] else { return }
        throw StateStoreError(
            "--state-dir \(directory): \(location) is damaged: SQLite's integrity check reports \(problems.joined(separator: "; ")). Move \(fileName)* and \(markerName) away (keep them to inspect with sqlite3, whose .recover command salvages what is readable), or use another --state-dir, to start afresh"
        )
    }

    /// Transactions the marker saw committed but the database no longer has: SQLite dropped
    /// them from a damaged write-ahead log (or a power loss took them before they reached the
    /// disk). Either way answers were given for them; the start stops and says so.
    private static func checkNothingLost(
        commits: Int64, marker: CommitMarker, directory: String, location: String, logWasThere: Bool
    ) throws {
        guard let committed = marker.read(), committed > commits else { return }
        if !logWasThere {
            // The usual way there: a copy of the directory made of the database file alone
            // (after a clean stop most of the data is still in the log).
            throw StateStoreError(
                "--state-dir \(directory): \(location) holds \(committed - commits) fewer committed transactions than \(marker.path) records, and its write-ahead log \(fileName)-wal is missing: a copy of the directory without it? Put every file of the directory back (\(fileName), \(fileName)-wal, \(markerName)); to start with what is left, delete \(marker.path)"
            )
        }
        throw StateStoreError(
            "--state-dir \(directory): \(location) holds \(commits) committed transactions, but \(marker.path) records \(committed): the newest \(committed - commits) are missing. SQLite drops every transaction after a damaged frame of the write-ahead log \(fileName)-wal (a power loss can also take the newest ones), so what they held (accepted pushes, devices, tokens) is gone. To start with what is left, delete \(marker.path); to keep the evidence, copy the directory first"
        )
    }

    private static func checkOrCreateSchema(_ db: SQLiteDatabase, directory: String, location: String) throws {
        let version = try db.userVersion()
        if version > schemaVersion {
            throw StateStoreError(
                "--state-dir \(directory): \(location) has schema version \(version), written by a newer apns-emulator; this one reads version \(schemaVersion). Use that newer apns-emulator, or another --state-dir"
            )
        }
        if version == schemaVersion { return }
        // Version 2 added accounts on devices (older rows load logged out), 3 broadcast
        // channels, 4 Live Activities, 5 notification settings, badges and device switches
        // (older rows load with the defaults).
        let migrations = [migrationFrom1, migrationFrom2, migrationFrom3, migrationFrom4]
        if (1...4).contains(version) {
            try upgrade(db, running: migrations[Int(version - 1)...].joined())
            return
        }
        // Version 0: a new file, unless someone else's tables are in it.
        let tables = try db.scalarInt("SELECT count(*) FROM sqlite_master") ?? 0
        guard tables == 0 else {
            throw StateStoreError(
                "--state-dir \(directory): \(location) is a SQLite database without an apns-emulator schema version (tables but user_version 0); move it away, or use another --state-dir"
            )
        }
        try upgrade(db, running: schema)
    }

    /// A setting kept as JSON text (nil: the default).
    static func storedText(_ bytes: [UInt8]) -> String? { bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self) }

    static func stored<T>(_ what: String, _ text: String?, _ read: ([UInt8]) throws(NotificationSettingsError) -> T) throws -> T {
        do throws(NotificationSettingsError) { return try read(Array((text ?? "").utf8)) } catch {
            throw StateStoreError("\(what): its stored notification settings are damaged (\(error.description))")
        }
    }

    /// Runs `sql` and sets the current schema version, in one transaction.
    private static func upgrade(_ db: SQLiteDatabase, running sql: String) throws {
        try db.execute("BEGIN IMMEDIATE")
        do {
            try db.execute(sql)
            try db.setUserVersion(schemaVersion)
            try db.execute("COMMIT")
        } catch {
            try? db.execute("ROLLBACK")
            throw error
        }
    }

    static let migrationFrom1 = """
        ALTER TABLE devices ADD COLUMN user_id TEXT;
        ALTER TABLE device_apps ADD COLUMN upload_pending INTEGER NOT NULL DEFAULT 0;
        """

    static let migrationFrom2 = channelsTable

    static let migrationFrom3 = liveActivitiesTable

    static let migrationFrom4 = """
        ALTER TABLE devices ADD COLUMN attention TEXT;
        ALTER TABLE device_apps ADD COLUMN notifications TEXT;
        ALTER TABLE device_apps ADD COLUMN badge INTEGER NOT NULL DEFAULT 0;
        """

    static let liveActivitiesTable = """
        CREATE TABLE live_activities (device_id TEXT PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID;
        """

    static let channelsTable = """
        CREATE TABLE channels (id TEXT PRIMARY KEY, bundle_id TEXT NOT NULL, environment TEXT NOT NULL,
            deleted_at_ms INTEGER, data BLOB NOT NULL) WITHOUT ROWID;
        """

    static let schema = """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
        CREATE TABLE devices (id TEXT PRIMARY KEY, virtual INTEGER NOT NULL, created_at_ms INTEGER NOT NULL,
            low_power INTEGER NOT NULL, forced_offline INTEGER NOT NULL, user_id TEXT, attention TEXT) WITHOUT ROWID;
        CREATE TABLE device_apps (device_id TEXT NOT NULL, bundle_id TEXT NOT NULL, environment TEXT NOT NULL,
            installed_at_ms INTEGER NOT NULL, authorization TEXT NOT NULL, app_state TEXT NOT NULL,
            background_mode INTEGER NOT NULL, tokens TEXT NOT NULL, upload_pending INTEGER NOT NULL DEFAULT 0,
            notifications TEXT, badge INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (device_id, bundle_id)) WITHOUT ROWID;
        CREATE TABLE tokens (token TEXT PRIMARY KEY, device_id TEXT NOT NULL, bundle_id TEXT NOT NULL,
            environment TEXT NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL, since_ms INTEGER,
            issued_at_ms INTEGER NOT NULL, pushes_until_unregistered INTEGER) WITHOUT ROWID;
        CREATE TABLE keys (key_id TEXT PRIMARY KEY, team_id TEXT NOT NULL, environment TEXT, topics TEXT,
            related_key_id TEXT, pem TEXT NOT NULL, source TEXT NOT NULL, added_at_run_time INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE apps (bundle_id TEXT PRIMARY KEY, team_id TEXT NOT NULL) WITHOUT ROWID;
        CREATE TABLE waiting (seq INTEGER PRIMARY KEY, slot TEXT NOT NULL, defer_reason TEXT, release_at_ms INTEGER,
            device_id TEXT NOT NULL, bundle_id TEXT NOT NULL, data BLOB NOT NULL);
        CREATE TABLE records (seq INTEGER PRIMARY KEY, data BLOB NOT NULL);
        """ + channelsTable + liveActivitiesTable

    // MARK: Writing

    public func write(_ changes: [StateChange]) throws(StateStoreError) {
        guard let statements = prepared else { throw StateStoreError("\(location) is closed") }
        do {
            try db.execute("BEGIN IMMEDIATE")
            do {
                try statements.setMeta.run { s throws(SQLiteError) in
                    try s.bind(1, "initialized")
                    try s.bind(2, Int64(1))
                }
                var next: UInt64 = 0
                for change in changes {
                    try apply(change)
                    if case .recordSaved(let record) = change { next = max(next, record.sequence + 1) }
                }
                // Sequence numbers never repeat, even when every record is deleted later.
                if next > 0 {
                    try statements.raiseNextSequence.run { q throws(SQLiteError) in try q.bind(1, Int64(bitPattern: next)) }
                }
                // Last, so that a reset's emptying of `meta` cannot lose it.
                try statements.setMeta.run { q throws(SQLiteError) in
                    try q.bind(1, "commits")
                    try q.bind(2, commits + 1)
                }
                try db.execute("COMMIT")
                commits += 1
                // After the commit, so the marker is never ahead of the database.
                marker.write(commits)
            } catch {
                try? db.execute("ROLLBACK")
                throw error
            }
        } catch let error as StateStoreError {
            throw error
        } catch {
            throw StateStoreError("writing \(location): \(error)")  // an SQLiteError
        }
    }

    private func apply(_ change: StateChange) throws(SQLiteError) {
        guard let s = prepared else { return }
        switch change {
        case .deviceSaved(let device):
            try s.saveDevice.run { q throws(SQLiteError) in
                try q.bind(1, device.id)
                try q.bind(2, device.isVirtual)
                try q.bind(3, device.createdAtMs)
                try q.bind(4, device.lowPowerMode)
                try q.bind(5, device.forcedOffline)
                try q.bind(6, device.userID)
                try q.bind(7, Self.storedText(device.attention.storedJSON))
            }
            try s.deleteDeviceApps.run { q throws(SQLiteError) in try q.bind(1, device.id) }
            for app in device.apps.values.sorted(by: { $0.bundleID < $1.bundleID }) {
                try s.saveDeviceApp.run { q throws(SQLiteError) in
                    try q.bind(1, device.id)
                    try q.bind(2, app.bundleID)
                    try q.bind(3, app.environment.rawValue)
                    try q.bind(4, app.installedAtMs)
                    try q.bind(5, app.settings.authorization.rawValue)
                    try q.bind(6, app.settings.appState.rawValue)
                    try q.bind(7, app.settings.backgroundMode)
                    try q.bind(8, Self.tokensText(app.tokens))
                    try q.bind(9, app.uploadPending)
                    try q.bind(10, Self.storedText(app.settings.notifications.storedJSON))
                    try q.bind(11, Int64(app.badge))
                }
            }
        case .deviceRemoved(let id):
            try s.deleteDevice.run { q throws(SQLiteError) in try q.bind(1, id) }
            try s.deleteDeviceApps.run { q throws(SQLiteError) in try q.bind(1, id) }
        case .tokenSaved(let entry):
            try s.saveToken.run { q throws(SQLiteError) in
                try q.bind(1, entry.token)
                try q.bind(2, entry.deviceID)
                try q.bind(3, entry.bundleID)
                try q.bind(4, entry.environment.rawValue)
                try q.bind(5, entry.kind.rawValue)
                let (state, since) = Self.stateText(entry.state)
                try q.bind(6, state)
                try q.bind(7, since)
                try q.bind(8, entry.issuedAtMs)
                try q.bind(9, entry.pushesUntilUnregistered.map(Int64.init))
            }
        case .keySaved(let key):
            try s.saveKey.run { q throws(SQLiteError) in
                try q.bind(1, key.keyID)
                try q.bind(2, key.teamID)
                try q.bind(3, key.environment?.rawValue)
                try q.bind(4, key.topics?.joined(separator: ","))
                try q.bind(5, key.relatedKeyID)
                try q.bind(6, key.pem)
                try q.bind(7, key.source)
                try q.bind(8, key.addedAtRunTime)
            }
        case .keyRemoved(let id):
            try s.deleteKey.run { q throws(SQLiteError) in try q.bind(1, id) }
        case .appSaved(let bundle, let team):
            try s.saveApp.run { q throws(SQLiteError) in
                try q.bind(1, bundle)
                try q.bind(2, team)
            }
        case .appRemoved(let bundle):
            try s.deleteApp.run { q throws(SQLiteError) in try q.bind(1, bundle) }
        case .faultsSaved(let faults):
            try s.setMeta.run { q throws(SQLiteError) in
                try q.bind(1, "faults")
                try q.bind(2, blob: StateCodec.encode(faults))
            }
        case .notificationWaiting(let waiting):
            let n = waiting.notification
            try s.saveWaiting.run { q throws(SQLiteError) in
                try q.bind(1, Int64(bitPattern: n.sequence))
                switch waiting.slot {
                case .stored:
                    try q.bind(2, "stored")
                case .deferred(let reason):
                    try q.bind(2, "deferred")
                    try q.bind(3, reason.rawValue)
                case .batched(let releaseAt):
                    try q.bind(2, "batched")
                    try q.bind(4, releaseAt)
                case .inFlight:
                    try q.bind(2, "in-flight")
                case .handedOff:
                    try q.bind(2, "handed-off")
                }
                try q.bind(5, n.deviceID)
                try q.bind(6, n.bundleID)
                try q.bind(7, blob: StateCodec.encode(n))
            }
        case .notificationDone(let sequence):
            try s.deleteWaiting.run { q throws(SQLiteError) in try q.bind(1, Int64(bitPattern: sequence)) }
        case .recordSaved(let record):
            // One column: every bound value costs on the hot path; the admin API reads them.
            try s.saveRecord.run { q throws(SQLiteError) in
                try q.bind(1, Int64(bitPattern: record.sequence))
                try q.bind(2, blob: StateCodec.encode(record))
            }
        case .recordRemoved(let sequence):
            try s.deleteRecord.run { q throws(SQLiteError) in try q.bind(1, Int64(bitPattern: sequence)) }
        case .recordDelivered(let sequence, let delivery):
            // Only instances sharing Redis write these (a state directory is given whole
            // records); read, patched and written back all the same.
            let read = try db.prepare("SELECT data FROM records WHERE seq = ?")
            try read.bind(1, Int64(bitPattern: sequence))
            guard try read.step(), let record = try? StateCodec.decodeRecord(read.blob(0)) else { return }
            let patched = record.applying(delivery)
            try s.saveRecord.run { q throws(SQLiteError) in
                try q.bind(1, Int64(bitPattern: sequence))
                try q.bind(2, blob: StateCodec.encode(patched))
            }
        case .recordsEvicted(let before):
            try s.evictRecords.run { q throws(SQLiteError) in try q.bind(1, Int64(bitPattern: before)) }
        case .budgetSaved:
            break  // not kept across restarts: budgets refill, as after a reboot
        case .channelSaved(let channel):
            try s.saveChannel.run { q throws(SQLiteError) in
                try q.bind(1, channel.id)
                try q.bind(2, channel.bundleID)
                try q.bind(3, channel.environment.rawValue)
                try q.bind(4, channel.deletedAtMs)
                try q.bind(5, blob: StateCodec.encode(channel))
            }
        case .channelRemoved(let id):
            try s.deleteChannel.run { q throws(SQLiteError) in try q.bind(1, id) }
        case .liveActivitiesSaved(let row):
            try s.saveLiveActivities.run { q throws(SQLiteError) in
                try q.bind(1, row.deviceID)
                try q.bind(2, blob: StateCodec.encode(row))
            }
        case .liveActivitiesRemoved(let id):
            try s.deleteLiveActivities.run { q throws(SQLiteError) in try q.bind(1, id) }
        case .clockOffsetSaved(let offset):
            try s.setMeta.run { q throws(SQLiteError) in
                try q.bind(1, "clock_offset")
                try q.bind(2, offset)
            }
        case .reset(let state):
            try db.execute(
                "DELETE FROM meta; DELETE FROM devices; DELETE FROM device_apps; DELETE FROM tokens; DELETE FROM keys; DELETE FROM apps; DELETE FROM waiting; DELETE FROM records; DELETE FROM channels; DELETE FROM live_activities;"
            )
            try s.setMeta.run { q throws(SQLiteError) in
                try q.bind(1, "initialized")
                try q.bind(2, Int64(1))
            }
            try s.setMeta.run { q throws(SQLiteError) in
                try q.bind(1, "next_sequence")
                try q.bind(2, Int64(bitPattern: state.nextRecordSequence))
            }
            for device in state.devices { try apply(.deviceSaved(device)) }
            for entry in state.tokens { try apply(.tokenSaved(entry)) }
            for key in state.keys { try apply(.keySaved(key)) }
            for app in state.apps { try apply(.appSaved(bundleID: app.bundleID, teamID: app.teamID)) }
            if let faults = state.faults { try apply(.faultsSaved(faults)) }
            for waiting in state.waiting { try apply(.notificationWaiting(waiting)) }
            for record in state.records { try apply(.recordSaved(record)) }
            for channel in state.channels { try apply(.channelSaved(channel)) }
            for row in state.liveActivities { try apply(.liveActivitiesSaved(row)) }
            if state.clockOffsetMs != 0 { try apply(.clockOffsetSaved(milliseconds: state.clockOffsetMs)) }
        }
    }

    static func tokensText(_ tokens: [TokenKind: String]) -> String {
        tokens.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue)=\($0.value)" }.joined(separator: " ")
    }

    static func stateText(_ state: TokenState) -> (String, Int64?) {
        switch state {
        case .active: return ("active", nil)
        case .unregistered(let since): return ("unregistered", since)
        case .expired: return ("expired", nil)
        case .rateLimited: return ("rate-limited", nil)
        }
    }

    // MARK: Loading

    public func load() throws(StateStoreError) -> PersistedState {
        do {
            return try loadAll()
        } catch let error as SQLiteError {
            if error.isCorrupt {
                throw StateStoreError(
                    "--state-dir \(directory): \(location) is damaged (\(error.message)); move it away, or use another --state-dir, to start afresh")
            }
            throw StateStoreError("--state-dir \(directory): reading \(location): \(error)")
        } catch let error as StateStoreError {
            throw StateStoreError("--state-dir \(directory): \(location): \(error.description)")
        } catch {
            throw StateStoreError("--state-dir \(directory): reading \(location): \(error)")
        }
    }

    private func loadAll() throws -> PersistedState {
        var state = PersistedState()
        var nextSequence: UInt64 = 1
        let meta = try db.prepare("SELECT key, value FROM meta")
        while try meta.step() {
            switch meta.text(0) {
            case "initialized": state.initialized = meta.int64(1) != 0
            case "next_sequence": nextSequence = UInt64(bitPattern: meta.int64(1))
            case "faults": state.faults = try StateCodec.decodeFaults(meta.blob(1))
            case "clock_offset": state.clockOffsetMs = max(0, meta.int64(1))
            default: break
            }
        }

        var apps: [String: [String: InstalledApp]] = [:]
        let appRows = try db.prepare(
            "SELECT device_id, bundle_id, environment, installed_at_ms, authorization, app_state, background_mode, tokens, upload_pending, notifications, badge FROM device_apps"
        )
        while try appRows.step() {
            let bundle = appRows.text(1)
            var tokens: [TokenKind: String] = [:]
            for pair in appRows.text(7).split(separator: " ") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                guard parts.count == 2, let kind = TokenKind(rawValue: String(parts[0])) else {
                    throw StateStoreError("device app \(bundle): bad tokens column '\(appRows.text(7))'")
                }
                tokens[kind] = String(parts[1])
            }
            let settings = AppSettings(
                authorization: try Self.value(Authorization.self, appRows.text(4)),
                appState: try Self.value(AppState.self, appRows.text(5)),
                backgroundMode: appRows.bool(6),
                notifications: try Self.stored("device app \(bundle)", appRows.optionalText(9)) { bytes throws(NotificationSettingsError) in
                    try NotificationSetup(storedJSON: bytes)
                })
            var app = InstalledApp(
                bundleID: bundle, environment: try Self.value(APNsEnvironment.self, appRows.text(2)), tokens: tokens,
                installedAtMs: appRows.int64(3), settings: settings, uploadPending: appRows.bool(8))
            app.badge = Int(appRows.int64(10))
            apps[appRows.text(0), default: [:]][bundle] = app
        }
        let devices = try db.prepare("SELECT id, virtual, created_at_ms, low_power, forced_offline, user_id, attention FROM devices ORDER BY id")
        while try devices.step() {
            let id = devices.text(0)
            var device = Device(
                id: id, isVirtual: devices.bool(1), apps: apps[id] ?? [:], createdAtMs: devices.int64(2),
                lowPowerMode: devices.bool(3), forcedOffline: devices.bool(4),
                userID: devices.optionalText(5))
            device.attention = try Self.stored("device \(id)", devices.optionalText(6)) { bytes throws(NotificationSettingsError) in
                try DeviceAttention(storedJSON: bytes)
            }
            state.devices.append(device)
        }

        let tokens = try db.prepare(
            "SELECT token, device_id, bundle_id, environment, kind, state, since_ms, issued_at_ms, pushes_until_unregistered FROM tokens ORDER BY token"
        )
        while try tokens.step() {
            let tokenState: TokenState
            switch tokens.text(5) {
            case "active": tokenState = .active
            case "unregistered": tokenState = .unregistered(sinceMs: tokens.int64(6))
            case "expired": tokenState = .expired
            case "rate-limited": tokenState = .rateLimited
            case let other: throw StateStoreError("token \(tokens.text(0)): unknown state '\(other)'")
            }
            state.tokens.append(
                TokenEntry(
                    token: tokens.text(0), deviceID: tokens.text(1), bundleID: tokens.text(2),
                    environment: try Self.value(APNsEnvironment.self, tokens.text(3)), kind: try Self.value(TokenKind.self, tokens.text(4)),
                    state: tokenState, issuedAtMs: tokens.int64(7), pushesUntilUnregistered: tokens.optionalInt64(8).map { Int($0) }))
        }

        let keys = try db.prepare(
            "SELECT key_id, team_id, environment, topics, related_key_id, pem, source, added_at_run_time FROM keys ORDER BY key_id")
        while try keys.step() {
            state.keys.append(
                StoredKey(
                    teamID: keys.text(1), keyID: keys.text(0),
                    environment: try keys.optionalText(2).map { (text: String) throws -> APNsEnvironment in try Self.value(APNsEnvironment.self, text)
                    },
                    topics: keys.optionalText(3).map { $0.split(separator: ",").map(String.init) }, relatedKeyID: keys.optionalText(4),
                    pem: keys.text(5), source: keys.text(6), addedAtRunTime: keys.bool(7)))
        }

        let owners = try db.prepare("SELECT bundle_id, team_id FROM apps ORDER BY bundle_id")
        while try owners.step() { state.apps.append((owners.text(0), owners.text(1))) }

        let waiting = try db.prepare("SELECT seq, slot, defer_reason, release_at_ms, data FROM waiting ORDER BY seq")
        while try waiting.step() {
            let slot: WaitingSlot
            switch waiting.text(1) {
            case "stored": slot = .stored
            case "deferred": slot = .deferred(try Self.value(DeferReason.self, waiting.text(2)))
            case "batched": slot = .batched(releaseAtMs: waiting.int64(3))
            case "in-flight": slot = .inFlight
            case "handed-off": slot = .handedOff
            case let other: throw StateStoreError("waiting notification \(waiting.int64(0)): unknown slot '\(other)'")
            }
            let notification = try StateCodec.decodeNotification(waiting.blob(4))
            state.waiting.append(WaitingNotification(slot: slot, notification: notification))
            nextSequence = max(nextSequence, notification.sequence + 1)
        }

        let records = try db.prepare("SELECT data FROM records ORDER BY seq")
        while try records.step() {
            state.records.append(try StateCodec.decodeRecord(records.blob(0)))
        }
        if let last = state.records.last { nextSequence = max(nextSequence, last.sequence + 1) }
        let channels = try db.prepare("SELECT data FROM channels ORDER BY id")
        while try channels.step() {
            state.channels.append(try StateCodec.decodeChannel(channels.blob(0)))
        }
        let liveActivities = try db.prepare("SELECT data FROM live_activities ORDER BY device_id")
        while try liveActivities.step() {
            state.liveActivities.append(try StateCodec.decodeLiveActivities(liveActivities.blob(0)))
        }
        state.nextRecordSequence = nextSequence
        if !state.initialized {
            state.initialized = !state.devices.isEmpty || !state.tokens.isEmpty || !state.records.isEmpty
        }
        return state
    }

    static func value<T: RawRepresentable>(_: T.Type, _ text: String) throws(StateStoreError) -> T where T.RawValue == String {
        guard let value = T(rawValue: text) else { throw StateStoreError("unknown \(T.self) '\(text)'") }
        return value
    }
}

/// `last-commit`: one line with the number of committed transactions, rewritten in place after
/// every commit (fixed width, so an overwrite never needs a new block of a full disk).
final class CommitMarker: @unchecked Sendable {
    let path: String
    private var handle: FileHandle?

    init(path: String) { self.path = path }

    /// nil when there is none or it cannot be read (then nothing is checked against it).
    func read() -> Int64? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let digits = String(decoding: data, as: UTF8.self).filter(\.isNumber)
        return Int64(digits)
    }

    func write(_ commits: Int64) {
        if handle == nil {
            if !FileManager.default.fileExists(atPath: path) { _ = FileManager.default.createFile(atPath: path, contents: nil) }
            handle = FileHandle(forWritingAtPath: path)
        }
        guard let handle else { return }
        let number = String(commits)
        let line = "\(String(repeating: "0", count: max(0, 19 - number.count)))\(number) transactions committed\n"
        do {
            try handle.seek(toOffset: 0)
            try handle.write(contentsOf: Data(line.utf8))
        } catch {
            // A marker that lags the database is harmless; only one ahead of it would be wrong.
        }
    }

    func close() {
        try? handle?.close()
        handle = nil
    }
}

/// The statements every write uses, prepared once.
private final class Statements {
    let setMeta, raiseNextSequence, saveDevice, deleteDevice, deleteDeviceApps, saveDeviceApp, saveToken, saveKey, deleteKey, saveApp,
        deleteApp, saveWaiting, deleteWaiting, saveRecord, deleteRecord, evictRecords, saveChannel, deleteChannel,
        saveLiveActivities, deleteLiveActivities: SQLiteStatement

    init(_ db: SQLiteDatabase) throws(SQLiteError) {
        setMeta = try db.prepare("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)")
        raiseNextSequence = try db.prepare(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('next_sequence', max(?1, coalesce((SELECT value FROM meta WHERE key = 'next_sequence'), 0)))"
        )
        saveDevice = try db.prepare(
            "INSERT OR REPLACE INTO devices (id, virtual, created_at_ms, low_power, forced_offline, user_id, attention) VALUES (?, ?, ?, ?, ?, ?, ?)")
        deleteDevice = try db.prepare("DELETE FROM devices WHERE id = ?")
        deleteDeviceApps = try db.prepare("DELETE FROM device_apps WHERE device_id = ?")
        saveDeviceApp = try db.prepare(
            "INSERT INTO device_apps (device_id, bundle_id, environment, installed_at_ms, authorization, app_state, background_mode, tokens, upload_pending, notifications, badge) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        saveToken = try db.prepare(
            "INSERT OR REPLACE INTO tokens (token, device_id, bundle_id, environment, kind, state, since_ms, issued_at_ms, pushes_until_unregistered) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        saveKey = try db.prepare(
            "INSERT OR REPLACE INTO keys (key_id, team_id, environment, topics, related_key_id, pem, source, added_at_run_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        )
        deleteKey = try db.prepare("DELETE FROM keys WHERE key_id = ?")
        saveApp = try db.prepare("INSERT OR REPLACE INTO apps (bundle_id, team_id) VALUES (?, ?)")
        deleteApp = try db.prepare("DELETE FROM apps WHERE bundle_id = ?")
        saveWaiting = try db.prepare(
            "INSERT OR REPLACE INTO waiting (seq, slot, defer_reason, release_at_ms, device_id, bundle_id, data) VALUES (?, ?, ?, ?, ?, ?, ?)")
        deleteWaiting = try db.prepare("DELETE FROM waiting WHERE seq = ?")
        saveRecord = try db.prepare("INSERT OR REPLACE INTO records (seq, data) VALUES (?, ?)")
        deleteRecord = try db.prepare("DELETE FROM records WHERE seq = ?")
        evictRecords = try db.prepare("DELETE FROM records WHERE seq < ?")
        saveChannel = try db.prepare(
            "INSERT OR REPLACE INTO channels (id, bundle_id, environment, deleted_at_ms, data) VALUES (?, ?, ?, ?, ?)")
        deleteChannel = try db.prepare("DELETE FROM channels WHERE id = ?")
        saveLiveActivities = try db.prepare("INSERT OR REPLACE INTO live_activities (device_id, data) VALUES (?, ?)")
        deleteLiveActivities = try db.prepare("DELETE FROM live_activities WHERE device_id = ?")
    }
}
