/// A fixed-bucket histogram (Prometheus style): counts per upper bound, plus the sum.
public struct Histogram: Sendable {
    public let bounds: [Double]
    /// Per bucket, not cumulative; the last one is over every bound.
    public private(set) var counts: [UInt64]
    public private(set) var sum: Double = 0
    public var count: UInt64 { counts.reduce(0, +) }

    /// Seconds, from 100 µs to 5 s: request and delivery latency.
    public static let latencyBounds: [Double] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5]
    /// Bytes, up to the largest payload APNs takes.
    public static let payloadBounds: [Double] = [128, 256, 512, 1024, 2048, 3072, 4096, 5120]

    public init(bounds: [Double]) {
        self.bounds = bounds
        counts = [UInt64](repeating: 0, count: bounds.count + 1)
    }

    public mutating func record(_ value: Double) {
        counts[bounds.firstIndex { value <= $0 } ?? bounds.count] += 1
        sum += value
    }

    /// Counts at or under each bound, then the total (Prometheus `_bucket` values).
    public var cumulative: [UInt64] {
        var running: UInt64 = 0
        return counts.map {
            running += $0; return running
        }
    }

    public mutating func add(_ other: Histogram) {
        precondition(other.bounds == bounds, "only histograms with the same buckets add up")
        for i in counts.indices { counts[i] += other.counts[i] }
        sum += other.sum
    }

    /// The value under which `fraction` of the samples fall, as the bucket's upper bound
    /// (nil: no samples; +infinity: in the last bucket).
    public func quantile(_ fraction: Double) -> Double? {
        let total = count
        guard total > 0 else { return nil }
        let rank = UInt64((Double(total) * fraction).rounded(.up))
        var running: UInt64 = 0
        for (index, c) in counts.enumerated() {
            running += c
            if running >= max(rank, 1) { return index < bounds.count ? bounds[index] : .infinity }
        }
        return .infinity
    }
}
