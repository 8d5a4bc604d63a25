// SQLite: the thin SQLite wrapper (a connection, statements, bindings, transactions). The
// only place SQLite's pointers are touched. Imports CSQLite only.
import CSQLite

/// A failed SQLite call: the operation, SQLite's result code and its message.
public struct SQLiteError: Error, CustomStringConvertible, Sendable {
    public let operation: String
    /// The primary result code (SQLITE_BUSY, SQLITE_CORRUPT, SQLITE_NOTADB…).
    public let code: Int32
    public let message: String

    public var description: String { "\(operation): \(message) (\(Self.name(of: code)))" }

    public var isBusy: Bool { code == SQLITE_BUSY || code == SQLITE_LOCKED }
    /// The file is not a database, or its pages are damaged.
    public var isCorrupt: Bool { code == SQLITE_CORRUPT || code == SQLITE_NOTADB }
    public var isCannotOpen: Bool { code == SQLITE_CANTOPEN || code == SQLITE_PERM || code == SQLITE_READONLY }

    static func name(of code: Int32) -> String {
        switch code {
        case SQLITE_BUSY: return "SQLITE_BUSY"
        case SQLITE_LOCKED: return "SQLITE_LOCKED"
        case SQLITE_CORRUPT: return "SQLITE_CORRUPT"
        case SQLITE_NOTADB: return "SQLITE_NOTADB"
        case SQLITE_CANTOPEN: return "SQLITE_CANTOPEN"
        case SQLITE_PERM: return "SQLITE_PERM"
        case SQLITE_READONLY: return "SQLITE_READONLY"
        case SQLITE_FULL: return "SQLITE_FULL"
        case SQLITE_IOERR: return "SQLITE_IOERR"
        case SQLITE_MISUSE: return "SQLITE_MISUSE"
        default: return "SQLite error \(code)"
        }
    }
}

/// One open database connection. Not thread-safe by design: the owner uses it from one
/// thread at a time (the state writer thread, or start-up before it runs).
public final class SQLiteDatabase {
    private var handle: OpaquePointer?
    public let path: String

    /// Opens (and creates, when `create`) the database file.
    public init(path: String, create: Bool = true) throws(SQLiteError) {
        self.path = path
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
            sqlite3_close(db)
            throw SQLiteError(operation: "open \(path)", code: rc & 0xFF, message: message)
        }
        handle = db
        sqlite3_extended_result_codes(db, 0)
    }

    deinit { close() }

    public func close() {
        if let handle {
            sqlite3_close_v2(handle)
            self.handle = nil
        }
    }

    func error(_ operation: String, _ rc: Int32) -> SQLiteError {
        let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
        return SQLiteError(operation: operation, code: rc & 0xFF, message: message)
    }

    /// Runs one or more statements that return nothing of interest.
    public func execute(_ sql: String) throws(SQLiteError) {
        let rc = sqlite3_exec(handle, sql, nil, nil, nil)
        guard rc == SQLITE_OK else { throw error(sql, rc) }
    }

    public func prepare(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        var statement: OpaquePointer?
        let rc = sqlite3_prepare_v2(handle, sql, -1, &statement, nil)
        guard rc == SQLITE_OK, let statement else { throw error("prepare \(sql)", rc) }
        return SQLiteStatement(statement, database: self, sql: sql)
    }

    /// The first column of the first row, as text (PRAGMAs that answer with one value).
    public func scalarText(_ sql: String) throws(SQLiteError) -> String? {
        let statement = try prepare(sql)
        guard try statement.step() else { return nil }
        return statement.text(0)
    }

    public func scalarInt(_ sql: String) throws(SQLiteError) -> Int64? {
        let statement = try prepare(sql)
        guard try statement.step() else { return nil }
        return statement.isNull(0) ? nil : statement.int64(0)
    }

    /// `PRAGMA user_version`: the schema version this file was written with.
    public func userVersion() throws(SQLiteError) -> Int64 { try scalarInt("PRAGMA user_version") ?? 0 }

    public func setUserVersion(_ version: Int64) throws(SQLiteError) { try execute("PRAGMA user_version = \(version)") }

    /// How long a statement waits for another connection's lock before SQLITE_BUSY.
    public func setBusyTimeout(milliseconds: Int32) { sqlite3_busy_timeout(handle, milliseconds) }
}

/// A prepared statement. Bind by 1-based index, step, read columns by 0-based index.
public final class SQLiteStatement {
    private let statement: OpaquePointer
    private unowned let database: SQLiteDatabase
    let sql: String
    /// SQLite copies bound text and blobs (SQLITE_TRANSIENT), so Swift buffers may go away.
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    init(_ statement: OpaquePointer, database: SQLiteDatabase, sql: String) {
        self.statement = statement
        self.database = database
        self.sql = sql
    }

    deinit { sqlite3_finalize(statement) }

    private func check(_ rc: Int32, _ what: String) throws(SQLiteError) {
        guard rc == SQLITE_OK else { throw database.error("\(what) for \(sql)", rc) }
    }

    public func bind(_ index: Int32, _ value: Int64) throws(SQLiteError) {
        try check(sqlite3_bind_int64(statement, index, value), "bind")
    }

    public func bind(_ index: Int32, _ value: Int64?) throws(SQLiteError) {
        if let value { try bind(index, value) } else { try bindNull(index) }
    }

    public func bind(_ index: Int32, _ value: Bool) throws(SQLiteError) { try bind(index, Int64(value ? 1 : 0)) }

    public func bind(_ index: Int32, _ value: String) throws(SQLiteError) {
        let length = Int32(value.utf8.count)
        let rc = value.withCString { sqlite3_bind_text(statement, index, $0, length, Self.transient) }
        try check(rc, "bind")
    }

    public func bind(_ index: Int32, _ value: String?) throws(SQLiteError) {
        if let value { try bind(index, value) } else { try bindNull(index) }
    }

    public func bind(_ index: Int32, blob: [UInt8]) throws(SQLiteError) {
        let rc = blob.withUnsafeBytes { bytes in
            // A zero-length blob still needs a non-null pointer to be a blob rather than NULL.
            sqlite3_bind_blob(statement, index, bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(bytes.count), Self.transient)
        }
        try check(rc, "bind")
    }

    public func bindNull(_ index: Int32) throws(SQLiteError) { try check(sqlite3_bind_null(statement, index), "bind") }

    /// Runs to the next row: true when a row is available, false when done.
    @discardableResult
    public func step() throws(SQLiteError) -> Bool {
        let rc = sqlite3_step(statement)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        let error = database.error("step \(sql)", rc)
        sqlite3_reset(statement)
        throw error
    }

    /// Ready to run again with new bindings.
    public func reset() {
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
    }

    /// Binds, runs to completion and resets: for INSERT/UPDATE/DELETE.
    public func run(_ bind: (SQLiteStatement) throws(SQLiteError) -> Void) throws(SQLiteError) {
        defer { reset() }
        try bind(self)
        while try step() {}
    }

    public func isNull(_ column: Int32) -> Bool { sqlite3_column_type(statement, column) == SQLITE_NULL }
    public func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(statement, column) }
    public func optionalInt64(_ column: Int32) -> Int64? { isNull(column) ? nil : int64(column) }
    public func bool(_ column: Int32) -> Bool { int64(column) != 0 }

    public func text(_ column: Int32) -> String {
        guard let pointer = sqlite3_column_text(statement, column) else { return "" }
        let count = Int(sqlite3_column_bytes(statement, column))
        return String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
    }

    public func optionalText(_ column: Int32) -> String? { isNull(column) ? nil : text(column) }

    public func blob(_ column: Int32) -> [UInt8] {
        let count = Int(sqlite3_column_bytes(statement, column))
        guard count > 0, let pointer = sqlite3_column_blob(statement, column) else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }
}
