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

/// A row of an `OrderedTable`: found by `rowID`, listed by `listKey`.
public protocol ListedRow: Sendable {
    var listKey: ListKey { get }
    /// The id the table finds the row by.
    var rowID: String { get }
    /// What a slot holds while no row is in it: a row no id finds (its `rowID` is empty).
    static var vacant: Self { get }
}

/// A dictionary that also keeps its rows sorted by `listKey`, so a page of the list is found
/// in O(log n + page) rather than by sorting every row (1,000,000 devices take about a second
/// to sort, all of it under the state lock). Changing a row's key through the subscript moves
/// it; the order index holds keys only.
///
/// The rows sit in slots of an array, found by id through a dictionary of slot numbers, and
/// stay in their slot until removed. A row may keep a link beside it, a number its owner
/// gives it (a token's is the slot of its device): what a push reads of a token's device is
/// then found without hashing the device's id again. A link is a hint to check, never a
/// fact: a slot a removed row left is given to the next row added.
public struct OrderedTable<Row: ListedRow>: Sendable {
    private var slotByID: [String: Int] = [:]
    /// `Row.vacant` where no row is (`vacant`). Not optional: an optional row read out of the
    /// array was copied and destroyed through the runtime's generic witnesses.
    private var slots: [Row] = []
    /// Beside each slot: its row's link, or -1.
    private var links: [Int] = []
    private var vacant: [Int] = []
    private var order = SortedKeys()

    public init() {}

    public subscript(id: String) -> Row? {
        get { slotByID[id].map { slots[$0] } }
        _modify {
            if let slot = slotByID[id] {
                // Moved out and back, not copied (its strings and collections stay unshared, so
                // a change in place does not copy them).
                var row: Row? = take(slot)
                let before = row!.listKey
                defer { put(row.take(), in: slot, id: id, before: before) }
                yield &row
            } else {
                var added: Row? = nil
                defer { if let added { add(added, id: id) } }
                yield &added
            }
        }
    }

    @discardableResult
    public mutating func removeValue(forKey id: String) -> Row? {
        guard let slot = slotByID.removeValue(forKey: id) else { return nil }
        let row = take(slot)
        free(slot)
        order.remove(row.listKey)
        return row
    }

    public var count: Int { slotByID.count }
    public var isEmpty: Bool { slotByID.isEmpty }
    public var keys: Dictionary<String, Int>.Keys { slotByID.keys }
    /// In no particular order (use `page` for the listed order).
    public var values: some Sequence<Row> {
        let slots = self.slots
        return slotByID.values.lazy.map { slots[$0] }
    }

    /// The slot of the row `id`.
    public func slot(of id: String) -> Int? { slotByID[id] }

    /// The row in `slot`, which holds one (`slot(of:)`).
    public func row(inSlot slot: Int) -> Row { slots[slot] }

    /// Whether `slot` holds the row `id` (a link checked before it is followed).
    public func slot(_ slot: Int, holds id: String) -> Bool {
        slot >= 0 && slot < slots.count && slots[slot].rowID == id
    }

    /// The link kept beside the row in `slot` (-1: none).
    public func link(ofSlot slot: Int) -> Int { links[slot] }

    public mutating func setLink(_ link: Int, ofSlot slot: Int) { links[slot] = link }

    /// Up to `limit` rows in key order, starting after `after` (from the first when nil), and
    /// whether any follow.
    public func page(after: ListKey?, limit: Int) -> (rows: [Row], more: Bool) {
        let (keys, more) = order.keys(after: after, limit: limit)
        return (keys.compactMap { self[$0.id] }, more)
    }

    /// Drops up to `count` rows, and the order (for a table being thrown away).
    public mutating func discardSome(_ count: Int) {
        order = SortedKeys()
        for id in Array(slotByID.keys.prefix(count)) { removeValue(forKey: id) }
        if slotByID.isEmpty { (slots, links, vacant) = ([], [], []) }
    }

    /// The row in `slot`, moved out; the slot holds `Row.vacant`.
    private mutating func take(_ slot: Int) -> Row {
        var row = Row.vacant
        swap(&row, &slots[slot])
        return row
    }

    private mutating func free(_ slot: Int) {
        links[slot] = -1
        vacant.append(slot)
    }

    private mutating func add(_ row: Row, id: String) {
        let slot: Int
        if let free = vacant.popLast() {
            slot = free
            slots[slot] = row
        } else {
            slot = slots.count
            slots.append(row)
            links.append(-1)
        }
        slotByID[id] = slot
        order.insert(row.listKey)
    }

    /// A row changed in place goes back to its slot, moved in the order; nil: it was removed.
    private mutating func put(_ row: Row?, in slot: Int, id: String, before: ListKey) {
        guard let row else {
            slotByID[id] = nil
            free(slot)
            order.remove(before)
            return
        }
        let after = row.listKey
        slots[slot] = row
        guard before != after else { return }
        order.remove(before)
        order.insert(after)
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
