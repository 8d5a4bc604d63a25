import APNsCore
import Foundation
import HTTP1Server
import Locking
import Networking

/// How one list request pages: `limit` (1 to `maxLimit`, default `defaultLimit`) and `cursor`,
/// the `nextCursor` a previous page returned. A cursor is opaque to clients: base64url of
/// `LIST:POSITION`, where LIST names the list it came from (a cursor of another list is
/// refused) and POSITION is where the previous page ended (its last row's key), so rows added
/// or removed meanwhile neither repeat nor shift the rest.
struct PageRequest {
    /// The most rows one page may ask for: a page is copied under the state lock, and 10,000
    /// devices take about a millisecond there and about 5 MB of JSON.
    static let maxLimit = 10_000
    static let defaultLimit = 1000
    /// Rows copied under the state lock per hold: about a millisecond's worth (the copy of a
    /// row from a table of 1,000,000 costs about 1 µs), so a page of 10,000 takes ten short
    /// holds, with pushes in between, rather than one of 10 ms.
    static let rowsPerLock = 1000

    var limit: Int
    /// The decoded position, nil for the first page.
    var position: String?

    /// Reads `limit` and `cursor`; 400 for a limit out of range or a cursor not of `list`.
    init(_ request: HTTP1Request, list: String, defaultLimit: Int = Self.defaultLimit) throws(AdminError) {
        limit = try request.wholeNumber("limit", in: 1...Self.maxLimit, note: "; page with \"nextCursor\"") ?? defaultLimit
        if let cursor = request.query["cursor"], !cursor.isEmpty {
            position = try Self.decode(cursor, list: list)
        }
    }

    static func encode(list: String, _ position: String) -> String {
        Data("\(list):\(position)".utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func decode(_ cursor: String, list: String) throws(AdminError) -> String {
        var base64 = cursor.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.utf8.count % 4) % 4)
        guard cursor.utf8.count <= 1024, let data = Data(base64Encoded: base64), let text = String(data: data, encoding: .utf8),
            text.hasPrefix(list + ":")
        else {
            throw AdminError(400, "cursor '\(cursor.prefix(64))' is not a \"nextCursor\" of \(list); start again without one")
        }
        return String(text.dropFirst(list.utf8.count + 1))
    }

    /// A position that is a row key (`ms:id`), as devices and tokens use.
    func listKey(list: String) throws(AdminError) -> ListKey? {
        guard let position else { return nil }
        let parts = position.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let ms = Int64(parts[0]) else {
            throw AdminError(400, "cursor is not a \"nextCursor\" of \(list); start again without one")
        }
        return ListKey(ms: ms, id: String(parts[1]))
    }

    /// A position that is a number (a sequence, an id, an index).
    func number(list: String) throws(AdminError) -> UInt64? {
        guard let position else { return nil }
        guard let value = UInt64(position) else { throw AdminError(400, "cursor is not a \"nextCursor\" of \(list); start again without one") }
        return value
    }

    static func cursor(list: String, _ key: ListKey) -> String { encode(list: list, "\(key.ms):\(key.id)") }

    /// The page of `rows` after the cursor's name, in name order, and the next cursor.
    static func pageByName<C: Collection>(
        _ rows: C, name: (C.Element) -> String, _ page: PageRequest, list: String
    )
        -> ([C.Element], String?)
    {
        var candidates = rows.filter { page.position == nil || name($0) > page.position! }
        candidates.sort { name($0) < name($1) }
        let more = candidates.count > page.limit
        let rows = Array(candidates.prefix(page.limit))
        return (rows, more ? rows.last.map { PageRequest.encode(list: list, name($0)) } : nil)
    }
}

extension HTTP1ServerResponse {
    /// `{NAME: [...], "nextCursor": …}`: null on the last page.
    static func page(_ name: String, _ items: [JSONValue], nextCursor: String?, extra: [(String, JSONValue)] = []) -> HTTP1ServerResponse {
        var body = JSONObject([(name, .array(items))])
        for (key, value) in extra { body[key] = value }
        body["nextCursor"] = nextCursor.map(JSONValue.string) ?? .null
        return .json(200, .object(body))
    }
}

/// Where large answers are built: off the event loops, which provider connections share.
/// The JSON of 10,000 devices takes about 100 ms to make, and a push on the same loop would
/// wait that out. One thread, at a lower priority, so the admin API's big answers take one
/// core at most and give it up to the loops when they need it.
let adminEncoder = BackgroundThread(name: "admin-encoder", nice: 10)

/// The records that list answers carry, counted from their copy under the lock until the
/// answer has left for its client: a client that asks for a whole journal and does not read
/// holds about twice its records' bytes, so the admin API takes at most `limit` of them at once
/// and answers 503 beyond (admin-api.md, "Admin API limits").
final class AnswerBudget: Sendable {
    let limit: Int
    private let held = Locked<Int>(0)

    init(limit: Int) { self.limit = limit }

    /// False when `bytes` more would pass the limit (one answer alone always fits).
    func take(_ bytes: Int) -> Bool {
        guard bytes > 0 else { return true }
        return held.withLock { held in
            guard held == 0 || held + bytes <= limit else { return false }
            held += bytes
            return true
        }
    }

    func giveBack(_ bytes: Int) { held.withLock { $0 -= bytes } }
}

extension AdminResource {
    /// Answers with what `build` makes on the encoder queue (from values copied under the lock
    /// already), then on the connection's loop. Nil: the route answers later. `heldBytes` taken
    /// from the service's `listAnswerBudget` are given back once the answer has left.
    func answerOffLoop(
        _ http: HTTP1Connection, heldBytes: Int = 0, _ build: @escaping @Sendable () -> HTTP1ServerResponse
    ) -> HTTP1ServerResponse? {
        let connection = OnLoop(http)
        let budget = api.listAnswerBudget
        adminEncoder.async {
            var built = build()
            if heldBytes > 0 { built.onSent = { budget.giveBack(heldBytes) } }
            let response = built
            connection.loop.execute { connection.http.respond(response) }
        }
        return nil
    }

    /// A page of a list in row-key order (devices, tokens), read `PageRequest.rowsPerLock`
    /// rows per hold of the state lock, each slice going on after the last row of the one
    /// before (as the next page would); its JSON is made off the loop.
    func keyedPage<Row: ListedRow>(
        _ request: HTTP1Request, _ http: HTTP1Connection, list: String,
        _ take: (borrowing World, ListKey?, Int) -> (rows: [Row], more: Bool),
        json: @escaping @Sendable (Row) -> JSONValue
    ) throws -> HTTP1ServerResponse? {
        let page = try PageRequest(request, list: list)
        var position = try page.listKey(list: list)
        var rows: [Row] = []
        var more = false
        while true {
            let slice = state.readWorld { take($0, position, min(PageRequest.rowsPerLock, page.limit - rows.count)) }
            rows += slice.rows
            more = slice.more
            guard slice.more, rows.count < page.limit, let last = slice.rows.last else { break }
            position = last.listKey
        }
        let next = more ? rows.last.map { PageRequest.cursor(list: list, $0.listKey) } : nil
        let kept = rows
        return answerOffLoop(http) { .page(list, kept.map(json), nextCursor: next) }
    }
}

/// A connection carried to another thread and back, and touched only on its own loop.
private final class OnLoop: @unchecked Sendable {
    let http: HTTP1Connection
    let loop: EventLoop
    init(_ http: HTTP1Connection) {
        self.http = http
        loop = http.connection.loop
    }
}

/// One thread of its own, at a lower priority (`nice`), running tasks in order.
final class BackgroundThread: Sendable {
    private let tasks = Locked<[@Sendable () -> Void]>([])
    private let waiting = DispatchSemaphore(value: 0)

    init(name: String, nice: Int32) {
        // Lives as long as the process: the threads are static.
        let thread = Thread(named: name) { [self] in
            // On Linux 0 means this thread, not the process.
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, nice)
            while true {
                waiting.wait()
                let task = tasks.withLock { $0.removeFirst() }
                task()
            }
        }
        thread.start()
    }

    func async(_ task: @escaping @Sendable () -> Void) {
        tasks.withLock { $0.append(task) }
        waiting.signal()
    }
}
