import APNsCore

/// Long polls (`/api/v1/notifications/wait`) filed under their most selective filter, so a
/// changed record is compared only with the waiters that could want it: thousands of tests
/// waiting on their own tokens cost a push a few dictionary look-ups, not thousands of
/// comparisons. No I/O.
struct WaiterIndex<Value> {
    enum Key: Hashable {
        case apnsID(String)
        case uniqueID(String)
        case token(String)
        case deviceID(String)
        case topic(String)
        /// Filters none of the above (e.g. only `status`): compared with every record.
        case any
    }

    private struct Entry {
        var query: NotificationQuery
        var value: Value
    }

    private var buckets: [Key: [UInt64: Entry]] = [:]
    private var keys: [UInt64: Key] = [:]

    var count: Int { keys.count }

    /// The bucket of a query: the filter that matches the fewest records. Values are
    /// normalised as `NotificationQuery.matches` compares them (ids and hex case-insensitively).
    static func key(for query: NotificationQuery) -> Key {
        if let value = query.apnsID { return .apnsID(value.lowercased()) }
        if let value = query.uniqueID { return .uniqueID(value.lowercased()) }
        if let value = query.token { return .token(value.lowercased()) }
        if let value = query.deviceID { return .deviceID(value) }
        if let value = query.topic { return .topic(value) }
        return .any
    }

    /// Every bucket a waiter for `record` can be in.
    static func keys(for record: NotificationRecord) -> [Key] {
        var keys: [Key] = [.apnsID(record.apnsID.lowercased()), .token(record.token.lowercased()), .any]
        if let value = record.uniqueID { keys.append(.uniqueID(value.lowercased())) }
        if let value = record.deviceID { keys.append(.deviceID(value)) }
        if let value = record.topic { keys.append(.topic(value)) }
        // A broadcast's record names no device: a `deviceId` filter matches the devices its
        // deliveries list (NotificationQuery.matches), so their buckets are looked in too.
        if record.deviceID == nil, let reach = record.broadcast {
            var seen = Set<String>()
            for delivery in reach.deliveries where seen.insert(delivery.deviceID).inserted { keys.append(.deviceID(delivery.deviceID)) }
        }
        return keys
    }

    mutating func insert(_ id: UInt64, query: NotificationQuery, value: Value) {
        let key = Self.key(for: query)
        keys[id] = key
        buckets[key, default: [:]][id] = Entry(query: query, value: value)
    }

    @discardableResult
    mutating func remove(_ id: UInt64) -> Value? {
        guard let key = keys.removeValue(forKey: id) else { return nil }
        let entry = buckets[key]?.removeValue(forKey: id)
        if buckets[key]?.isEmpty == true { buckets.removeValue(forKey: key) }
        return entry?.value
    }

    /// Removes and returns the waiters `record` satisfies (each is answered once), and how
    /// many waiters were compared with it.
    mutating func takeMatches(for record: NotificationRecord) -> (matches: [Value], examined: Int) {
        guard !keys.isEmpty else { return ([], 0) }
        var matched: [UInt64] = []
        var examined = 0
        for key in Self.keys(for: record) {
            guard let bucket = buckets[key] else { continue }
            examined += bucket.count
            for (id, entry) in bucket where entry.query.matches(record) { matched.append(id) }
        }
        return (matched.compactMap { remove($0) }, examined)
    }
}
