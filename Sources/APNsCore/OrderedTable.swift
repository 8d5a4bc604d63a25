/// Where a row stands in a list that pages: its time, then its id (the order the admin API
/// lists devices and tokens in). A cursor is the key of the last row of a page.
public struct ListKey: Comparable, Hashable, Sendable {
    public var ms: Int64
    public var id: String

    public init(ms: Int64, id: String) {
        self.ms = ms
        self.id = id
    }

    public static func < (a: ListKey, b: ListKey) -> Bool { a.ms < b.ms || (a.ms == b.ms && a.id < b.id) }
}

/// A row of an `OrderedTable`: found by `id`, listed by `listKey`.
public protocol ListedRow: Sendable {
    var listKey: ListKey { get }
}

/// A dictionary that also keeps its rows sorted by `listKey`, so a page of the list is found
/// in O(log n + page) rather than by sorting every row (1,000,000 devices take about a second
/// to sort, all of it under the state lock). Changing a row's key through the subscript moves
/// it; the order index holds keys only, the rows stay in the dictionary.
public struct OrderedTable<Row: ListedRow>: Sendable {
    private var rows: [String: Row] = [:]
    private var order = SortedKeys()

    public init() {}

    public subscript(id: String) -> Row? {
        get { rows[id] }
        _modify {
            let before = rows[id]?.listKey
            defer { reorder(from: before, to: rows[id]?.listKey) }
            yield &rows[id]
        }
    }

    @discardableResult
    public mutating func removeValue(forKey id: String) -> Row? {
        guard let row = rows.removeValue(forKey: id) else { return nil }
        order.remove(row.listKey)
        return row
    }

    public var count: Int { rows.count }
    public var isEmpty: Bool { rows.isEmpty }
    public var keys: Dictionary<String, Row>.Keys { rows.keys }
    /// In no particular order (use `page` for the listed order).
    public var values: Dictionary<String, Row>.Values { rows.values }

    /// Up to `limit` rows in key order, starting after `after` (from the first when nil), and
    /// whether any follow.
    public func page(after: ListKey?, limit: Int) -> (rows: [Row], more: Bool) {
        let (keys, more) = order.keys(after: after, limit: limit)
        return (keys.compactMap { rows[$0.id] }, more)
    }

    /// Drops up to `count` rows, and the order (for a table being thrown away).
    public mutating func discardSome(_ count: Int) {
        order = SortedKeys()
        for id in Array(rows.keys.prefix(count)) { rows.removeValue(forKey: id) }
    }

    private mutating func reorder(from before: ListKey?, to after: ListKey?) {
        guard before != after else { return }
        if let before { order.remove(before) }
        if let after { order.insert(after) }
    }
}

/// Keys in order, in chunks of at most `maxChunk`: inserting or removing touches one chunk
/// (plus, rarely, the chunk list), and a copy of the world shares the chunks it does not
/// change. Appending at the end, the usual case (keys carry the time of creation), stays cheap.
struct SortedKeys: Sendable {
    private var chunks: [[ListKey]] = []
    static let maxChunk = 1024

    /// The chunk that holds `key` or should: the first whose last key is not below it, else the last.
    private func chunkIndex(for key: ListKey) -> Int {
        var low = 0
        var high = chunks.count - 1
        while low < high {
            let mid = (low + high) / 2
            if chunks[mid][chunks[mid].count - 1] < key { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// The first index in `chunk` whose key is not below `key` (or above it, with `strictly`).
    private static func position(of key: ListKey, in chunk: [ListKey], strictly: Bool) -> Int {
        var low = 0
        var high = chunk.count
        while low < high {
            let mid = (low + high) / 2
            if chunk[mid] < key || (strictly && chunk[mid] == key) { low = mid + 1 } else { high = mid }
        }
        return low
    }

    mutating func insert(_ key: ListKey) {
        guard !chunks.isEmpty else {
            chunks = [[key]]
            return
        }
        let c = chunkIndex(for: key)
        let i = Self.position(of: key, in: chunks[c], strictly: false)
        if i < chunks[c].count, chunks[c][i] == key { return }
        chunks[c].insert(key, at: i)
        if chunks[c].count > Self.maxChunk {
            let upper = Array(chunks[c][(Self.maxChunk / 2)...])
            chunks[c].removeLast(upper.count)
            chunks.insert(upper, at: c + 1)
        }
    }

    mutating func remove(_ key: ListKey) {
        guard !chunks.isEmpty else { return }
        let c = chunkIndex(for: key)
        let i = Self.position(of: key, in: chunks[c], strictly: false)
        guard i < chunks[c].count, chunks[c][i] == key else { return }
        chunks[c].remove(at: i)
        if chunks[c].isEmpty { chunks.remove(at: c) }
    }

    func keys(after: ListKey?, limit: Int) -> (keys: [ListKey], more: Bool) {
        guard !chunks.isEmpty, limit > 0 else { return ([], false) }
        var c = 0
        var i = 0
        if let after {
            c = chunkIndex(for: after)
            i = Self.position(of: after, in: chunks[c], strictly: true)
        }
        var out: [ListKey] = []
        out.reserveCapacity(min(limit, 4096))
        while c < chunks.count {
            let chunk = chunks[c]
            while i < chunk.count {
                if out.count == limit { return (out, true) }
                out.append(chunk[i])
                i += 1
            }
            c += 1
            i = 0
        }
        return (out, false)
    }
}
