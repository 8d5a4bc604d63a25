import Foundation

/// The push types of a load run and their weights (`alert=80,background=20`), as a fixed
/// cycle: request number k gets `cycle[k % cycle.count]`. Deterministic, so a run of a whole
/// number of cycles has exactly the asked proportions whatever the threads' interleaving, and
/// interleaved (smooth weighted round robin), so any stretch of requests is mixed too.
public struct PushMix: Sendable, Equatable, CustomStringConvertible {
    /// The push types a load run can send: they need nothing but an app token and the bare
    /// bundle id as topic (VoIP and the other suffixed types need tokens of their own kind).
    public enum Kind: String, Sendable, CaseIterable {
        case alert, background
    }

    public let weights: [(kind: Kind, weight: Int)]
    public let cycle: [Kind]

    public static func == (a: PushMix, b: PushMix) -> Bool {
        a.weights.map(\.kind) == b.weights.map(\.kind) && a.weights.map(\.weight) == b.weights.map(\.weight)
    }

    /// Each weight at most this, so the cycle stays small.
    public static let maxWeight = 1000

    /// Parses `TYPE=WEIGHT,…` (a bare `TYPE` weighs 1). Throws a message for the user.
    public init(parsing text: String) throws(ClientError) {
        var weights: [(kind: Kind, weight: Int)] = []
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = parts[0].trimmingCharacters(in: .whitespaces)
            guard let kind = Kind(rawValue: name) else {
                throw ClientError("--mix: '\(name)' is not a push type it can send (\(Kind.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            guard !weights.contains(where: { $0.kind == kind }) else { throw ClientError("--mix: \(name) is given twice") }
            var weight = 1
            if parts.count == 2 {
                guard let value = Int(parts[1].trimmingCharacters(in: .whitespaces)), value >= 0, value <= Self.maxWeight else {
                    throw ClientError("--mix: the weight of \(name) must be a whole number from 0 to \(Self.maxWeight), not '\(parts[1])'")
                }
                weight = value
            }
            weights.append((kind, weight))
        }
        guard weights.contains(where: { $0.weight > 0 }) else { throw ClientError("--mix: at least one weight must be above 0") }
        self.init(weights: weights)
    }

    public init(weights: [(kind: Kind, weight: Int)]) {
        self.weights = weights
        cycle = Self.cycle(weights.map(\.weight).reduced).map { weights[$0].kind }
    }

    /// The push type of request number `index` (0-based, counted over the whole run).
    public func kind(ofRequest index: Int) -> Kind { cycle[index % cycle.count] }

    /// `alert=80,background=20`
    public var description: String { weights.map { "\($0.kind.rawValue)=\($0.weight)" }.joined(separator: ",") }

    /// Smooth weighted round robin: each step every entry gains its weight, the richest is
    /// picked and pays the total. Over one cycle (the sum of the weights) each entry is
    /// picked exactly its weight's number of times, spread out.
    static func cycle(_ weights: [Int]) -> [Int] {
        let total = weights.reduce(0, +)
        var credit = [Int](repeating: 0, count: weights.count)
        var order: [Int] = []
        order.reserveCapacity(total)
        for _ in 0..<total {
            for i in weights.indices { credit[i] += weights[i] }
            let pick = credit.indices.max { credit[$0] < credit[$1] || (credit[$0] == credit[$1] && $0 > $1) }!
            credit[pick] -= total
            order.append(pick)
        }
        return order
    }
}

extension Array where Element == Int {
    /// Divided by their greatest common divisor: 75/25 becomes 3/1, a cycle of 4, not 100.
    fileprivate var reduced: [Int] {
        func gcd(_ a: Int, _ b: Int) -> Int { b == 0 ? a : gcd(b, a % b) }
        let divisor = reduce(0, gcd)
        return divisor > 1 ? map { $0 / divisor } : self
    }
}
