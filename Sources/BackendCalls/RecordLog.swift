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

    mutating func removeAll() { records.removeAll() }
}
