// TEMPORARY stub with the agreed API; the real implementation comes from the backend-calls branch.
public import APNsCore
import Locking

public final class BackendCaller: Sendable {
    private let log = Locked<[BackendCallRecord]>([])
    private let now: @Sendable () -> Int64
    nonisolated(unsafe) public var onChange: (@Sendable (BackendCallRecord) -> Void)?
    public init(now: @escaping @Sendable () -> Int64, maxQueued: Int = 10_000, logCapacity: Int = 10_000,
                retryBaseDelayMs: Int = 200, retryMaxDelayMs: Int = 5_000) { self.now = now }
    public func enqueue(_ requests: [BackendRequest]) {
        let t = now()
        log.withLock { l in for r in requests { l.append(BackendCallRecord(id: UInt64(l.count + 1), request: r, atMs: t)) } }
    }
    public func calls(deviceID: String? = nil, hook: String? = nil) -> [BackendCallRecord] {
        log.withLock { $0.filter { (deviceID == nil || $0.request.deviceID == deviceID) && (hook == nil || $0.request.hook == hook) } }
    }
    public func reset() { log.withLock { $0.removeAll() } }
    public func shutdown() {}
    public var counts: (sent: Int, failed: Int, dropped: Int) { (0, 0, 0) }
}
extension BackendCallRecord {
    public var json: JSONValue { ["id": .int(Int64(id)), "hook": .string(request.hook), "url": .string(request.url)] }
}
