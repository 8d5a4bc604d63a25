/// The newest `capacity` call records, oldest first. Ids are consecutive (every call gets the
/// next one, dropped calls too), so a record is found by its distance from the oldest.
struct RecordLog {
    let capacity: Int
    private var records = FIFO<BackendCallRecord>()

    init(capacity: Int) { self.capacity = max(0, capacity) }

    mutating func append(_ record: BackendCallRecord) {
        records.append(record)
        while records.count > capacity { records.popFirst() }
    }

    /// Replaces the record with the same id; a record already evicted stays gone.
    mutating func update(_ record: BackendCallRecord) {
        guard let oldest = records.first?.id, record.id >= oldest else { return }
        let offset = Int(record.id - oldest)
        guard offset < records.count, records[offset].id == record.id else { return }
        records[offset] = record
    }

    func matching(deviceID: String?, hook: String?) -> [BackendCallRecord] {
        records.elements.filter { record in
            (deviceID == nil || record.request.deviceID == deviceID) && (hook == nil || record.request.hook == hook)
        }
    }

    /// Up to `limit` records with ids above `after` that pass `matches`, oldest first, and
    /// whether more follow. Ids are consecutive, so the start is found without a scan.
    func page(after: UInt64?, limit: Int, where matches: (BackendCallRecord) -> Bool) -> (records: [BackendCallRecord], more: Bool) {
        guard let oldest = records.first?.id, limit > 0 else { return ([], false) }
        var index = 0
        if let after, after >= oldest { index = after - oldest >= UInt64(records.count) ? records.count : Int(after - oldest) + 1 }
        var out: [BackendCallRecord] = []
        while index < records.count {
            let record = records[index]
            index += 1
            guard matches(record) else { continue }
            if out.count == limit { return (out, true) }
            out.append(record)
        }
        return (out, false)
    }

    mutating func removeAll() { records.removeAll() }
}
