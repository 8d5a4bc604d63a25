import Foundation
import TestSupport

/// A real Redis Cluster for tests: three master nodes on loopback (`--cluster-enabled yes`),
/// joined by `redis-cli --cluster create`, every slot covered before `init` returns.
public final class RedisClusterProcess: @unchecked Sendable {
    public let nodes: [RedisServerProcess]
    /// Replicas added with `addReplica`.
    public private(set) var replicas: [RedisServerProcess] = []

    /// redis://127.0.0.1:port of one node (any node: a client finds the one that owns its slot).
    public func url(node: Int = 0) -> String { nodes[node].url }

    public init() throws {
        var started: [RedisServerProcess] = []
        for _ in 0..<3 {
            started.append(
                try RedisServerProcess(extraArguments: [
                    "--cluster-enabled", "yes", "--cluster-config-file", "nodes-{port}.conf", "--cluster-node-timeout", "2000",
                ]))
        }
        nodes = started
        let create = try run(
            "/usr/bin/env",
            ["redis-cli", "--cluster", "create"] + nodes.map { "127.0.0.1:\($0.port)" } + ["--cluster-replicas", "0", "--cluster-yes"],
            timeout: 30)
        guard create.status == 0 else {
            throw RedisServerProcess.Failure(description: "redis-cli --cluster create failed: \(create.out) \(create.err)")
        }
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            let info = try run("/usr/bin/env", ["redis-cli", "-p", String(nodes[0].port), "cluster", "info"]).out
            if info.contains("cluster_state:ok") { return }
            usleep(100_000)
        }
        throw RedisServerProcess.Failure(description: "the cluster did not reach cluster_state:ok within 20 s")
    }

    /// Moves `key`'s slot, with every key in it, to node `target`, as `redis-cli --cluster
    /// reshard` does for one slot: IMPORTING on the target, MIGRATING on the owner, MIGRATE the
    /// keys, then every node told the new owner. Clients of the old owner get MOVED afterwards
    /// (ASK or TRYAGAIN while it runs).
    public func moveSlot(of key: String, to target: Int) throws {
        let source = try owner(of: key)
        guard source != target else { return }
        func cli(_ node: Int, _ arguments: [String]) throws -> String {
            let result = try run("/usr/bin/env", ["redis-cli", "-p", String(nodes[node].port)] + arguments, timeout: 30)
            let out = result.out.trimmingCharacters(in: .whitespacesAndNewlines)
            guard result.status == 0, !out.hasPrefix("ERR") else {
                throw RedisServerProcess.Failure(description: "redis-cli \(arguments.joined(separator: " ")): \(out) \(result.err)")
            }
            return out
        }
        let slot = try cli(0, ["cluster", "keyslot", key])
        let sourceID = try cli(source, ["cluster", "myid"])
        let targetID = try cli(target, ["cluster", "myid"])
        _ = try cli(target, ["cluster", "setslot", slot, "importing", sourceID])
        _ = try cli(source, ["cluster", "setslot", slot, "migrating", targetID])
        while true {
            let keys = try cli(source, ["cluster", "getkeysinslot", slot, "100"]).split(whereSeparator: \.isNewline).map(String.init)
            if keys.isEmpty { break }
            _ = try cli(source, ["migrate", "127.0.0.1", String(nodes[target].port), "", "0", "5000", "keys"] + keys)
        }
        for node in nodes.indices { _ = try cli(node, ["cluster", "setslot", slot, "node", targetID]) }
    }

    /// Starts one more node and makes it a replica of node `master`, in sync before it returns.
    public func addReplica(of master: Int) throws -> RedisServerProcess {
        let replica = try RedisServerProcess(extraArguments: [
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes-{port}.conf", "--cluster-node-timeout", "2000",
        ])
        replicas.append(replica)
        let masterID = try run("/usr/bin/env", ["redis-cli", "-p", String(nodes[master].port), "cluster", "myid"]).out
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let add = try run(
            "/usr/bin/env",
            [
                "redis-cli", "--cluster", "add-node", "127.0.0.1:\(replica.port)", "127.0.0.1:\(nodes[master].port)", "--cluster-slave",
                "--cluster-master-id", masterID,
            ], timeout: 30)
        guard add.status == 0 else {
            throw RedisServerProcess.Failure(description: "redis-cli --cluster add-node failed: \(add.out) \(add.err)")
        }
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            let info = try run("/usr/bin/env", ["redis-cli", "-p", String(replica.port), "info", "replication"]).out
            if info.contains("master_link_status:up") { return replica }
            usleep(100_000)
        }
        throw RedisServerProcess.Failure(description: "the replica on \(replica.port) did not sync with its master within 20 s")
    }

    /// The node that owns `key`'s slot, as `CLUSTER KEYSLOT` and `CLUSTER SLOTS` say.
    public func owner(of key: String) throws -> Int {
        let slot =
            Int(
                try run("/usr/bin/env", ["redis-cli", "-p", String(nodes[0].port), "cluster", "keyslot", key]).out
                    .trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
        for (index, node) in nodes.enumerated() {
            let table = try run("/usr/bin/env", ["redis-cli", "-p", String(node.port), "cluster", "nodes"]).out
            for line in table.split(whereSeparator: \.isNewline) where line.contains("myself") {
                for range in line.split(separator: " ").dropFirst(8) {
                    let bounds = range.split(separator: "-").compactMap { Int($0) }
                    if bounds.count == 2, (bounds[0]...bounds[1]).contains(slot) { return index }
                    if bounds.count == 1, bounds[0] == slot { return index }
                }
            }
        }
        throw RedisServerProcess.Failure(description: "no node owns slot \(slot)")
    }
}
