import HTTPGrammar
import APNsCore
import Foundation
import SQLite
import SQLiteStateStore
import JSON
import Testing

/// A temporary directory removed at the end of the test.
final class TemporaryDirectory {
    let path: String
    init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("apns-state-test-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
    var state: String { path + "/state" }
}

/// Everything a `PersistedState` holds, in one comparable text (records, notifications and
/// fault rules and channels by their codec bytes, so every field counts).
func canonical(_ s: PersistedState) -> String {
    var lines = ["initialized \(s.initialized)", "next \(s.nextRecordSequence)"]
    lines += s.devices.map { d in
        // Dictionaries print in no fixed order: spell the apps out sorted.
        let apps = d.apps.values.sorted { $0.bundleID < $1.bundleID }.map { app in
            "\(app.bundleID) \(app.environment) \(app.tokens.sorted { $0.key.rawValue < $1.key.rawValue }) \(app.installedAtMs) \(app.settings) \(app.uploadPending)"
        }
        return
            "device \(d.id) \(d.isVirtual) \(d.createdAtMs) \(d.lowPowerMode) \(d.forcedOffline) \(d.connectionID as Any) \(d.userID as Any) \(apps)"
    }
    lines += s.tokens.map { "token \($0)" }
    lines += s.keys.map { "key \($0)" }
    lines += s.apps.map { "app \($0.bundleID) \($0.teamID)" }
    lines.append("faults \(s.faults.map { StateCodec.encode($0) } ?? [])")
    lines += s.waiting.map { "waiting \($0.slot) \(StateCodec.encode($0.notification))" }
    lines += s.records.map { "record \(StateCodec.encode($0))" }
    lines += s.channels.map { "channel \(StateCodec.encode($0))" }
    return lines.joined(separator: "\n")
}

/// One of every entity, in every state the store distinguishes.
func everyKindOfChange() -> [StateChange] {
    var changes: [StateChange] = []
    var apps: [String: InstalledApp] = [:]
    apps["com.example.app"] = InstalledApp(
        bundleID: "com.example.app", environment: .sandbox, tokens: [.app: "aa01", .voip: "aa02"],
        installedAtMs: 5, settings: AppSettings(authorization: .provisional, appState: .terminated, backgroundMode: false),
        uploadPending: true)
    apps["com.example.other"] = InstalledApp(bundleID: "com.example.other", environment: .production, tokens: [.widgets: "aa03"], installedAtMs: 6)
    changes.append(
        .deviceSaved(
            Device(
                id: "phone", isVirtual: false, apps: apps, createdAtMs: 1, lowPowerMode: true, forcedOffline: false,
                userID: "alice")))
    changes.append(.deviceSaved(Device(id: "virtual", isVirtual: true, apps: [:], createdAtMs: 2, forcedOffline: true)))
    changes.append(.deviceSaved(Device(id: "gone", isVirtual: true, apps: [:], createdAtMs: 3)))
    changes.append(.deviceRemoved(id: "gone"))
    let states: [TokenState] = [.active, .unregistered(sinceMs: 1_767_225_600_123), .expired, .rateLimited]
    for (i, state) in states.enumerated() {
        changes.append(
            .tokenSaved(
                TokenEntry(
                    token: "aa0\(i + 1)", deviceID: "phone", bundleID: "com.example.app", environment: .sandbox,
                    kind: i == 1 ? .voip : .app, state: state, issuedAtMs: Int64(i),
                    pushesUntilUnregistered: i == 1 ? 3 : nil)))
    }
    changes.append(
        .keySaved(
            StoredKey(
                teamID: "TEAM", keyID: "KEY1", environment: .production, topics: ["com.a", "com.b"],
                relatedKeyID: "KEY2", pem: "-----BEGIN PRIVATE KEY-----\nabc\n", source: "api", addedAtRunTime: true)))
    changes.append(
        .keySaved(
            StoredKey(
                teamID: "TEAM", keyID: "KEY2", environment: nil, topics: nil, relatedKeyID: nil,
                pem: "pem", source: "/keys/k.p8", addedAtRunTime: false)))
    changes.append(
        .keySaved(
            StoredKey(
                teamID: "TEAM", keyID: "KEY3", environment: nil, topics: nil, relatedKeyID: nil,
                pem: "pem", source: "api", addedAtRunTime: true)))
    changes.append(.keyRemoved(keyID: "KEY3"))
    changes.append(.appSaved(bundleID: "com.example.app", teamID: "TEAM"))
    changes.append(.appSaved(bundleID: "com.example.gone", teamID: "TEAM"))
    changes.append(.appRemoved(bundleID: "com.example.gone"))
    var match = FaultMatch()
    match.topic = "com.example.app"
    var rule = FaultInjectionRule(id: "f1", match: match, action: FaultAction(kind: .respond(status: 500, reason: "X")), times: 2)
    rule.restoreCounts(matched: 5, fired: 2)
    changes.append(.faultsSaved(FaultRulesSnapshot(rules: [rule], nextNumber: 2)))
    let slots: [WaitingSlot] = [.stored, .deferred(.lowPower), .batched(releaseAtMs: 99), .inFlight]
    for (i, slot) in slots.enumerated() {
        let n = PendingNotification(
            sequence: UInt64(10 + i), apnsID: "N\(i)", token: "aa01", topic: "com.example.app", deviceID: "phone",
            bundleID: "com.example.app", pushType: .alert, priority: 10, collapseID: i == 0 ? "c" : nil,
            storeUntilMs: i == 3 ? nil : 1000, payload: Array("{}".utf8), content: PushContent(isVisible: true))
        changes.append(.notificationWaiting(WaitingNotification(slot: slot, notification: n)))
    }
    changes.append(
        .notificationWaiting(
            WaitingNotification(
                slot: .stored,
                notification: PendingNotification(
                    sequence: 20, apnsID: "done", token: "aa01", topic: "com.example.app", deviceID: "phone", bundleID: "com.example.app",
                    pushType: .alert, priority: 10, collapseID: nil, storeUntilMs: 1, payload: [], content: PushContent()))))
    changes.append(.notificationDone(sequence: 20))
    for sequence in UInt64(1)...6 {
        var r = NotificationRecord(apnsID: "ID\(sequence)", token: "aa01", environment: .production, receivedAtMs: 1_767_225_600_123)
        r.sequence = sequence
        r.uniqueID = "u"
        r.payload = [0, 1, 255]
        r.requestHeaders = [HeaderField(":method", "POST"), HeaderField("apns-topic", "com.example.app")]
        r.jwtVerified = false
        r.outcome = .stored
        r.callbacks = ["willPresent"]
        r.timestampMs = -1
        changes.append(.recordSaved(r))
    }
    changes.append(.recordRemoved(sequence: 4))
    changes.append(.recordsEvicted(before: 2))
    changes += everyKindOfChannel().map { .channelSaved($0) }
    // A burst of broadcasts: the last row wins.
    var busy = everyKindOfChannel()[2]
    busy.broadcasts += 1
    busy.storedMessage?.key = "later"
    changes.append(.channelSaved(busy))
    changes.append(.channelRemoved(id: "Zm9yZ290dGVu"))
    return changes
}

/// A live channel, a deleted one, one with a stored message, and one whose tombstone is
/// forgotten (removed again by `everyKindOfChange`).
func everyKindOfChannel() -> [BroadcastChannel] {
    let message = StoredBroadcast(
        key: "6E4C4C7A-7D08-4B45-9C44-5B2A4E7E0F00", payload: Array(#"{"aps":{"event":"update"}}"#.utf8),
        priority: 10, receivedAtMs: 1_767_225_600_500, expiresAtMs: 1_767_225_900_000)
    return [
        BroadcastChannel(id: "bGl2ZQ==", bundleID: "com.example.app", environment: .sandbox, policy: .noMessageStored, createdAtMs: 1),
        BroadcastChannel(
            id: "ZGVsZXRlZA==", bundleID: "com.example.app", environment: .production, policy: .noMessageStored, createdAtMs: 2,
            deletedAtMs: 3, broadcasts: 4, lastBroadcastAtMs: -5),
        BroadcastChannel(
            id: "c3RvcmVk", bundleID: "com.example.other", environment: .sandbox, policy: .mostRecentMessageStored,
            createdAtMs: 6, broadcasts: 1, lastBroadcastAtMs: message.receivedAtMs, storedMessage: message),
        BroadcastChannel(
            id: "Zm9yZ290dGVu", bundleID: "com.example.app", environment: .sandbox, policy: .noMessageStored, createdAtMs: 0,
            deletedAtMs: 1),
    ]
}

@Suite("SQLite state store")
struct SQLiteStateStoreTests {
    @Test func everyEntityRoundTripsAsTheReferenceStoreKeepsIt() throws {
        let dir = try TemporaryDirectory()
        let reference = InMemoryStateStore()
        let changes = everyKindOfChange()
        try reference.write(changes)
        do {
            let store = try SQLiteStateStore(directory: dir.state)
            #expect(try store.load().initialized == false, "a new directory holds nothing")
            try store.write(Array(changes.prefix(10)))
            try store.write(Array(changes.dropFirst(10)))
            store.close()
        }
        let reopened = try SQLiteStateStore(directory: dir.state)
        let loaded = try reopened.load()
        let expected = canonical(try reference.load())
        let actual = canonical(loaded)
        #expect(actual == expected, "\(zip(actual.split(separator: "\n"), expected.split(separator: "\n")).filter { $0 != $1 }.prefix(3))")
        #expect(loaded.records.map(\.sequence) == [2, 3, 5, 6])
        #expect(loaded.waiting.map(\.slot) == [.stored, .deferred(.lowPower), .batched(releaseAtMs: 99), .inFlight])
        #expect(loaded.nextRecordSequence == 14, "past every record and waiting notification")
        #expect(loaded.channels.map(\.id) == ["ZGVsZXRlZA==", "bGl2ZQ==", "c3RvcmVk"])
        #expect(loaded.channels.last?.storedMessage?.requestID == "later" && loaded.channels.last?.broadcasts == 2)
    }

    @Test func aResetReplacesEverythingInOneTransaction() throws {
        let dir = try TemporaryDirectory()
        let store = try SQLiteStateStore(directory: dir.state)
        try store.write(everyKindOfChange())
        var start = PersistedState()
        start.initialized = true
        start.devices = [Device(id: "ci", isVirtual: true, apps: [:], createdAtMs: 0)]
        start.apps = [("com.example.app", "TEAM")]
        start.nextRecordSequence = 77
        try store.write([.reset(start), record(77)])
        let loaded = try store.load()
        #expect(loaded.devices.map(\.id) == ["ci"])
        #expect(loaded.tokens.isEmpty && loaded.keys.isEmpty && loaded.waiting.isEmpty && loaded.faults == nil)
        #expect(loaded.channels.isEmpty, "the start state has no channels")
        #expect(loaded.records.map(\.sequence) == [77])
        #expect(loaded.nextRecordSequence == 78)
    }

    @Test func sequenceNumbersCarryOnWhenEveryRecordIsGone() throws {
        let dir = try TemporaryDirectory()
        do {
            let store = try SQLiteStateStore(directory: dir.state)
            try store.write([record(41), record(42)])
            try store.write([.recordRemoved(sequence: 41), .recordRemoved(sequence: 42)])
            store.close()
        }
        let loaded = try SQLiteStateStore(directory: dir.state).load()
        #expect(loaded.records.isEmpty)
        #expect(loaded.nextRecordSequence == 43)
    }

    /// A state directory written before accounts existed (schema 1) is upgraded in place:
    /// its devices load logged out, and accounts are kept from then on.
    @Test func schemaOneIsUpgraded() throws {
        let dir = try TemporaryDirectory()
        let phone = Device(id: "phone", isVirtual: true, apps: [:], createdAtMs: 1)
        do {
            let store = try SQLiteStateStore(directory: dir.state)
            try store.write([.deviceSaved(phone)])
            store.close()
            // Back to schema 1's tables, as an older apns-emulator left them.
            let db = try SQLiteDatabase(path: dir.state + "/state.sqlite")
            try db.execute(
                "ALTER TABLE devices DROP COLUMN attention; ALTER TABLE device_apps DROP COLUMN notifications; ALTER TABLE device_apps DROP COLUMN badge; ALTER TABLE devices DROP COLUMN user_id; ALTER TABLE device_apps DROP COLUMN upload_pending; DROP TABLE channels; DROP TABLE live_activities"
            )
            try db.setUserVersion(1)
            db.close()
        }
        let store = try SQLiteStateStore(directory: dir.state)
        #expect(try store.load().devices.map(\.id) == ["phone"])
        var loggedIn = phone
        loggedIn.userID = "alice"
        loggedIn.apps["com.example.app"] = InstalledApp(
            bundleID: "com.example.app", environment: .sandbox, tokens: [.app: "ab"],
            installedAtMs: 2, uploadPending: true)
        try store.write([.deviceSaved(loggedIn)])
        store.close()
        let reloaded = try SQLiteStateStore(directory: dir.state).load().devices
        #expect(reloaded.first?.userID == "alice")
        #expect(reloaded.first?.apps["com.example.app"]?.uploadPending == true)
        let db = try SQLiteDatabase(path: dir.state + "/state.sqlite")
        #expect(try db.userVersion() == SQLiteStateStore.schemaVersion)
        db.close()
    }

    @Test func schemaTwoIsUpgradedWithNoChannels() throws {
        let dir = try TemporaryDirectory()
        do {
            let store = try SQLiteStateStore(directory: dir.state)
            try store.write([.deviceSaved(Device(id: "phone", isVirtual: true, apps: [:], createdAtMs: 1))])
            store.close()
            // Back to schema 2, as the apns-emulator before broadcast channels left it.
            let db = try SQLiteDatabase(path: dir.state + "/state.sqlite")
            try db.execute(
                "ALTER TABLE devices DROP COLUMN attention; ALTER TABLE device_apps DROP COLUMN notifications; ALTER TABLE device_apps DROP COLUMN badge; DROP TABLE channels; DROP TABLE live_activities"
            )
            try db.setUserVersion(2)
            db.close()
        }
        let store = try SQLiteStateStore(directory: dir.state)
        let loaded = try store.load()
        #expect(loaded.devices.map(\.id) == ["phone"] && loaded.channels.isEmpty)
        try store.write(everyKindOfChannel().map { .channelSaved($0) })
        store.close()
        #expect(try SQLiteStateStore(directory: dir.state).load().channels == everyKindOfChannel().sorted { $0.id < $1.id })
    }

    /// Schema 4 had no notification setup, badges or device switches: they load as the
    /// defaults, and are kept from then on.
    @Test func schemaFourIsUpgradedWithDefaultNotificationSettings() throws {
        let dir = try TemporaryDirectory()
        var phone = Device(id: "phone", isVirtual: true, apps: [:], createdAtMs: 1)
        phone.apps["com.example.app"] = InstalledApp(bundleID: "com.example.app", environment: .sandbox, tokens: [.app: "ab"], installedAtMs: 2)
        do {
            let store = try SQLiteStateStore(directory: dir.state)
            try store.write([.deviceSaved(phone)])
            store.close()
            let db = try SQLiteDatabase(path: dir.state + "/state.sqlite")
            try db.execute(
                "ALTER TABLE devices DROP COLUMN attention; ALTER TABLE device_apps DROP COLUMN notifications; ALTER TABLE device_apps DROP COLUMN badge;"
            )
            try db.setUserVersion(4)
            db.close()
        }
        let store = try SQLiteStateStore(directory: dir.state)
        #expect(try store.load().devices == [phone])
        var set = phone
        let setup: JSONValue = [
            "categories": [["identifier": "MESSAGE", "actions": [["identifier": "REPLY", "title": "Reply", "textInput": ["buttonTitle": "Send"]]]]],
            "foregroundPresentation": ["list"], "timeSensitiveEntitlement": true,
        ]
        try set.apps["com.example.app"]!.settings.notifications.apply(setup.objectValue!)
        set.apps["com.example.app"]!.badge = 7
        let switches: JSONValue = ["focus": ["name": "Work", "allowedApps": ["com.example.chat"]], "muted": true]
        try set.attention.apply(switches.objectValue!)
        try store.write([.deviceSaved(set)])
        store.close()
        #expect(try SQLiteStateStore(directory: dir.state).load().devices == [set])
    }

    @Test func schemaThreeIsUpgradedWithNoLiveActivities() throws {
        let dir = try TemporaryDirectory()
        do {
            let store = try SQLiteStateStore(directory: dir.state)
            try store.write([.deviceSaved(Device(id: "phone", isVirtual: true, apps: [:], createdAtMs: 1))])
            store.close()
            // Back to schema 3, as the apns-emulator before Live Activities were kept left it.
            let db = try SQLiteDatabase(path: dir.state + "/state.sqlite")
            try db.execute(
                "ALTER TABLE devices DROP COLUMN attention; ALTER TABLE device_apps DROP COLUMN notifications; ALTER TABLE device_apps DROP COLUMN badge; DROP TABLE live_activities"
            )
            try db.setUserVersion(3)
            db.close()
        }
        let store = try SQLiteStateStore(directory: dir.state)
        let loaded = try store.load()
        #expect(loaded.devices.map(\.id) == ["phone"] && loaded.liveActivities.isEmpty)
        var book = LiveActivityBook(seed: 1)
        try book.declare(bundleID: "com.example.app", types: ["T"], frequentUpdates: false)
        let row = LiveActivityRow(deviceID: "phone", book: book)
        try store.write([.liveActivitiesSaved(row)])
        store.close()
        let reopened = try SQLiteStateStore(directory: dir.state)
        #expect(try reopened.load().liveActivities.map(StateCodec.encode) == [StateCodec.encode(row)])
        try reopened.write([.liveActivitiesRemoved(deviceID: "phone")])
        #expect(try reopened.load().liveActivities.isEmpty)
        reopened.close()
        let db = try SQLiteDatabase(path: dir.state + "/state.sqlite")
        #expect(try db.userVersion() == SQLiteStateStore.schemaVersion)
        db.close()
    }

    @Test func aNewerSchemaVersionIsRefused() throws {
        let dir = try TemporaryDirectory()
        try SQLiteStateStore(directory: dir.state).close()
        do {
            let db = try SQLiteDatabase(path: dir.state + "/state.sqlite")
            try db.setUserVersion(SQLiteStateStore.schemaVersion + 1)
            db.close()
        }
        let error = try #require(throws: StateStoreError.self) { try SQLiteStateStore(directory: dir.state) }
        #expect(error.description.contains("schema version \(SQLiteStateStore.schemaVersion + 1), written by a newer apns-emulator"))
    }

    @Test func aForeignDatabaseIsRefused() throws {
        let dir = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: dir.state, withIntermediateDirectories: true)
        do {
            let db = try SQLiteDatabase(path: dir.state + "/state.sqlite")
            try db.execute("CREATE TABLE mine (x)")
            db.close()
        }
        let error = try #require(throws: StateStoreError.self) { try SQLiteStateStore(directory: dir.state) }
        #expect(error.description.contains("without an apns-emulator schema version"))
    }

    @Test func aCorruptFileIsAClearError() throws {
        let dir = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: dir.state, withIntermediateDirectories: true)
        try Data(repeating: 0x5A, count: 8192).write(to: URL(fileURLWithPath: dir.state + "/state.sqlite"))
        let error = try #require(throws: StateStoreError.self) { try SQLiteStateStore(directory: dir.state) }
        #expect(error.description.contains("is not an apns-emulator state database or is damaged"))

        // A real database whose pages were overwritten.
        let damaged = try TemporaryDirectory()
        do {
            let store = try SQLiteStateStore(directory: damaged.state)
            try store.write(everyKindOfChange())
            store.close()
        }
        let path = damaged.state + "/state.sqlite"
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.seek(toOffset: 4096)
        handle.write(Data(repeating: 0xA5, count: 4096 * 3))
        try handle.close()
        let damagedError = try #require(throws: StateStoreError.self) {
            let store = try SQLiteStateStore(directory: damaged.state)
            _ = try store.load()
        }
        #expect(damagedError.description.contains("damaged") || damagedError.description.contains("malformed"))
    }

    @Test func aDirectoryThatCannotBeUsedIsAClearError() throws {
        let dir = try TemporaryDirectory()
        let file = dir.path + "/plain-file"
        _ = FileManager.default.createFile(atPath: file, contents: Data("x".utf8))
        let notDirectory = try #require(throws: StateStoreError.self) { try SQLiteStateStore(directory: file) }
        #expect(notDirectory.description.contains("exists and is not a directory"))
        let underFile = try #require(throws: StateStoreError.self) { try SQLiteStateStore(directory: file + "/state") }
        #expect(underFile.description.contains("cannot create the directory"))
    }

    @Test func aSecondEmulatorOnTheSameDirectoryIsRefused() throws {
        let dir = try TemporaryDirectory()
        let first = try SQLiteStateStore(directory: dir.state)
        try first.write([token("a")])
        let error = try #require(throws: StateStoreError.self) { try SQLiteStateStore(directory: dir.state) }
        #expect(error.description.contains("in use by another apns-emulator"))
        first.close()
        #expect(try SQLiteStateStore(directory: dir.state).load().tokens.count == 1)
    }

    // MARK: Damage found at start

    /// The files of a store that is still open, as a kill -9 would leave them.
    private func crashImage(of store: String, into copy: String) throws {
        try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
        for name in ["state.sqlite", "state.sqlite-wal", SQLiteStateStore.markerName]
        where FileManager.default.fileExists(atPath: store + "/" + name) {
            try FileManager.default.copyItem(atPath: store + "/" + name, toPath: copy + "/" + name)
        }
    }

    /// Many small transactions, each in the write-ahead log (no checkpoint yet).
    private func storeWithCommits(_ dir: TemporaryDirectory, count: Int) throws -> SQLiteStateStore {
        let store = try SQLiteStateStore(directory: dir.state)
        for i in 0..<count { try store.write([token(String(format: "%04x", i))]) }
        return store
    }

    @Test func aCrashImageStartsAndKeepsEveryCommit() throws {
        let dir = try TemporaryDirectory()
        let store = try storeWithCommits(dir, count: 50)
        try crashImage(of: dir.state, into: dir.path + "/copy")
        store.close()
        let restarted = try SQLiteStateStore(directory: dir.path + "/copy")
        #expect(try restarted.load().tokens.count == 50)
        restarted.close()
    }

    @Test func anEmptyDatabaseBesideItsWriteAheadLogIsRefused() throws {
        let dir = try TemporaryDirectory()
        let store = try storeWithCommits(dir, count: 20)
        let copy = dir.path + "/copy"
        try crashImage(of: dir.state, into: copy)
        store.close()
        try Data().write(to: URL(fileURLWithPath: copy + "/state.sqlite"))
        let walBytes = try #require(FileManager.default.attributesOfItem(atPath: copy + "/state.sqlite-wal")[.size] as? Int)
        let error = try #require(throws: StateStoreError.self) { try SQLiteStateStore(directory: copy) }
        #expect(error.description.contains("state.sqlite is empty (0 bytes)"))
        #expect(error.description.contains("holds \(walBytes) bytes"))
        #expect(error.description.contains("put the original state.sqlite back"))
        // Refused before SQLite touched anything: the log is still there, whole.
        #expect((try FileManager.default.attributesOfItem(atPath: copy + "/state.sqlite-wal")[.size] as? Int) == walBytes)

        // Moved away entirely, the directory starts afresh (the commit count with it).
        for name in ["state.sqlite", "state.sqlite-wal"] { try FileManager.default.removeItem(atPath: copy + "/" + name) }
        let fresh = try SQLiteStateStore(directory: copy)
        #expect(try fresh.load().tokens.isEmpty)
        fresh.close()
    }

    /// SQLite stops reading its log at the first frame with a bad checksum and loses every
    /// transaction after it without a word; the commit marker beside the database notices.
    @Test func transactionsLostFromADamagedWriteAheadLogAreReported() throws {
        let dir = try TemporaryDirectory()
        let store = try storeWithCommits(dir, count: 400)
        let copy = dir.path + "/copy"
        try crashImage(of: dir.state, into: copy)
        store.close()
        let wal = copy + "/state.sqlite-wal"
        let size = try #require(FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int)
        let handle = try #require(FileHandle(forWritingAtPath: wal))
        try handle.seek(toOffset: UInt64(size / 2))
        var random = SystemRandomNumberGenerator()
        handle.write(Data((0..<512).map { _ in UInt8.random(in: 0...255, using: &random) }))
        try handle.close()

        let error = try #require(throws: StateStoreError.self) { try SQLiteStateStore(directory: copy) }
        #expect(error.description.contains("records 400"))
        #expect(error.description.contains("are missing"))
        #expect(error.description.contains("delete \(copy)/\(SQLiteStateStore.markerName)"))
        // Doing what the message says starts with what is left.
        try FileManager.default.removeItem(atPath: copy + "/" + SQLiteStateStore.markerName)
        let rest = try SQLiteStateStore(directory: copy)
        let kept = try rest.load().tokens.count
        #expect(kept > 0 && kept < 400)
        rest.close()
    }

    @Test func aDatabaseThatFailsTheIntegrityCheckIsRefused() throws {
        let dir = try TemporaryDirectory()
        do {
            let store = try SQLiteStateStore(directory: dir.state)
            // Enough rows for several pages of one table, checkpointed into the file on close.
            try store.write((0..<2000).map { token(String(format: "%06x", $0)) })
            store.close()
        }
        // A leaf page of the tokens table whose header miscounts its fragmented bytes: the file
        // opens and reads, but the page is not what its header says.
        let path = dir.state + "/state.sqlite"
        let pageSize = 4096
        let pages = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int ?? 0) / pageSize
        #expect(pages > 8)
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.seek(toOffset: UInt64((pages - 2) * pageSize + 7))
        handle.write(Data([0x3F]))
        try handle.close()
        let error = try #require(throws: StateStoreError.self) {
            let store = try SQLiteStateStore(directory: dir.state)
            _ = try store.load()
        }
        #expect(error.description.contains("integrity check reports"), "\(error)")
        #expect(error.description.contains("state.sqlite"))
    }
}
