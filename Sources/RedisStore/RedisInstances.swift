public import APNsCore
import Foundation
import Locking
import Redis

// The instances as a group: heartbeats and the devices of stopped instances, and frames for
// device sockets another instance holds (relayed over pub/sub).
extension RedisCoordinator {
    func heartbeat(_ redis: RedisConnection) throws(RedisError) {
        _ = try redis.command("SET", store.key("alive:\(instance)"), "1", "PX", .text(String(Self.instanceTTLMilliseconds)))
    }

    /// Devices whose socket was on an instance that stopped (killed, or cut off from Redis for
    /// longer than its heartbeat lasts) are disconnected, so their in-flight notifications go
    /// back to the store for when they reconnect to another instance.
    func sweepStoppedInstances() {
        guard unavailableReason == nil else { return }
        let others = state.readWorld { world -> [(device: String, connection: UInt64)] in
            world.registry.devices.values.compactMap { device in
                guard let id = device.connectionID, DeviceOwnership.instance(ofConnection: id) != instance else { return nil }
                return (device.id, id)
            }
        }
        guard !others.isEmpty else { return }
        let instances = Array(Set(others.map { DeviceOwnership.instance(ofConnection: $0.connection) })).sorted()
        let alive: [Bool]
        do {
            alive = try heartbeatsAlive(instances)
        } catch {
            return
        }
        let stopped = Set(zip(instances, alive).filter { !$0.1 }.map(\.0))
        guard !stopped.isEmpty else { return }
        let now = clock.nowMilliseconds()
        let gone = others.filter { stopped.contains(DeviceOwnership.instance(ofConnection: $0.connection)) }
        _ = state.withSharedWorld { world in
            for (device, connection) in gone { world.disconnectDevice(device, connectionID: connection, nowMs: now) }
        }
        logger.info("instance(s) \(stopped.sorted().map(String.init).joined(separator: ", ")) stopped: \(gone.count) device(s) marked disconnected")
    }

    // MARK: Frames for devices on other instances

    /// The first connection id this instance hands out.
    public var firstConnectionID: UInt64 { UInt64(instance) << DeviceOwnership.instanceShift | 1 }

    /// Sends frames for sockets held by other instances to those instances (pub/sub). A frame
    /// lost on the way is like a dropped connection: the notification stays in flight until
    /// the device reconnects, then it is delivered again.
    public func relay(_ frames: [DeviceFrame]) {
        var byInstance: [Int: [DeviceFrame]] = [:]
        for frame in frames {
            let owner = DeviceOwnership.instance(ofConnection: frame.connectionID)
            if owner != instance, owner != 0 { byInstance[owner, default: []].append(frame) }
        }
        guard !byInstance.isEmpty else { return }
        do {
            try withPublisher { (redis: RedisConnection) throws(RedisError) in
                _ = try redis.pipeline(
                    byInstance.map { owner, frames in
                        ["PUBLISH", store.key("frames:\(owner)"), .bytes(StateCodec.encode(frames: frames))]
                    })
            }
        } catch {
            logger.warning("cannot relay \(frames.count) frame(s) to another instance: \(error)")
        }
    }

    func publishingConnection(_ connection: inout RedisConnection?) throws(RedisError) -> RedisConnection {
        if let existing = connection, !existing.isBroken { return existing }
        let fresh = try store.connect()
        connection = fresh
        return fresh
    }

    /// Runs `body` on the publishing connection (heartbeats, liveness checks, relayed frames).
    /// An answer that the keys' slot moved (a Redis Cluster resharded) drops the connection,
    /// and the next one asks the cluster where the keys are now: kept, it sent every heartbeat
    /// to the old owner for good, and the other instances took this one for stopped.
    func withPublisher<T>(_ body: (RedisConnection) throws(RedisError) -> T) throws(RedisError) -> T {
        try publisher.withLock { (connection: inout RedisConnection?) throws(RedisError) -> T in
            let redis = try publishingConnection(&connection)
            do throws(RedisError) {
                return try body(redis)
            } catch {
                if error.movedSlot {
                    store.slotMoved()
                    connection?.close()
                    connection = nil
                }
                throw error
            }
        }
    }

    /// Whether each instance's heartbeat key exists. An error reply (the slot moved, a node
    /// loading) is an error, not "stopped": it once marked live instances' devices disconnected.
    func heartbeatsAlive(_ instances: [Int]) throws(RedisError) -> [Bool] {
        try withPublisher { (redis: RedisConnection) throws(RedisError) -> [Bool] in
            try redis.pipeline(instances.map { ["EXISTS", store.key("alive:\($0)")] }).map { (reply: RedisReply) throws(RedisError) -> Bool in
                if case .error(let text) = reply { throw RedisError(.server, text) }
                return reply.int == 1
            }
        }
    }

    func receiveFrames() {
        var subscriber: RedisSubscriber?
        while isRunning {
            do {
                if subscriber == nil {
                    subscriber = try RedisSubscriber(url: store.url, channels: [prefixed("frames:\(instance)")])
                }
                guard let (_, message) = try subscriber!.next(timeoutMs: 1_000) else { continue }
                let frames = try StateCodec.decodeFrames(message)
                deliverFrames.value?(frames)
            } catch {
                subscriber?.close()
                subscriber = nil
                usleep(200_000)
            }
        }
        subscriber?.close()
    }

    private func prefixed(_ name: String) -> String { store.prefix + name }
}
