public import APNsCore

/// Prometheus text exposition (format 0.0.4).
public struct PrometheusText {
    public private(set) var text = ""

    public init() {}

    public mutating func family(_ name: String, _ type: String, _ help: String) {
        text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
    }

    public mutating func sample(_ name: String, _ labels: [(String, String)] = [], _ value: Double) {
        text += name
        if !labels.isEmpty {
            text += "{" + labels.map { "\($0.0)=\"\(Self.escape($0.1))\"" }.joined(separator: ",") + "}"
        }
        text += " " + Self.format(value) + "\n"
    }

    /// A family with one sample and no labels.
    public mutating func single(_ name: String, _ type: String, _ help: String, _ value: Double) {
        family(name, type, help)
        sample(name, [], value)
    }

    /// A histogram family: cumulative `_bucket`s by `le`, then `_sum` and `_count`.
    public mutating func histogram(_ name: String, _ help: String, _ h: Histogram) {
        family(name, "histogram", help)
        for (index, bucket) in h.cumulative.enumerated() {
            let le = index < h.bounds.count ? Self.format(h.bounds[index]) : "+Inf"
            sample(name + "_bucket", [("le", le)], Double(bucket))
        }
        sample(name + "_sum", [], h.sum)
        sample(name + "_count", [], Double(h.count))
    }

    /// A family with one sample per value of the label `label`, in the order given.
    public mutating func labelled(
        _ name: String, _ type: String, _ help: String, by label: String,
        _ samples: some Sequence<(String, Double)>
    ) {
        family(name, type, help)
        for (labelValue, value) in samples { sample(name, [(label, labelValue)], value) }
    }

    static func escape(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }

    static func format(_ value: Double) -> String {
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}
