import HTTP2
@testable import ProviderClient
import Testing

/// The load generator's parts that need no network: latency histogram, push-type mix,
/// pacer and outcome classification.
@Suite("Load generator parts")
struct LoadGeneratorPartsTests {
    @Test func histogramBucketsHoldTheirValuesWithinOneSixtyFourth() {
        var value: UInt64 = 1
        while value < UInt64(1) << 62 {
            for v in [value - 1, value, value + 1, value + value / 3] {
                let index = LatencyHistogram.index(of: v)
                let upper = LatencyHistogram.upperBound(of: index)
                let lower = index == 0 ? 0 : LatencyHistogram.upperBound(of: index - 1) + 1
                #expect(lower <= v && v <= upper, "\(v) in bucket \(index) [\(lower), \(upper)]")
                #expect(Double(upper - lower) <= Double(max(v, 64)) / 64, "bucket \(index) is too wide for \(v)")
            }
            value = value * 3 / 2 + 1
        }
        #expect(LatencyHistogram.index(of: .max) == LatencyHistogram.bucketCount - 1)
        #expect(LatencyHistogram.upperBound(of: LatencyHistogram.bucketCount - 1) == .max)
    }

    @Test func percentilesOfAUniformSpreadAreWithinTheBucketPrecision() {
        var histogram = LatencyHistogram()
        for microseconds in 1...100_000 { histogram.record(nanoseconds: UInt64(microseconds) * 1000) }
        #expect(histogram.count == 100_000)
        #expect(histogram.minimum == 1000)
        #expect(histogram.maximum == 100_000_000)
        for (fraction, expected) in [(0.5, 50_000_000.0), (0.9, 90_000_000.0), (0.99, 99_000_000.0), (0.999, 99_900_000.0)] {
            let value = Double(histogram.percentile(fraction))
            #expect(value >= expected && value <= expected * (1 + 1.0 / 64), "p\(fraction * 100): \(value)")
        }
        #expect(histogram.percentile(1) == histogram.maximum)
        #expect(histogram.percentile(0) >= histogram.minimum && histogram.percentile(0) <= histogram.minimum + histogram.minimum / 64)
        #expect(abs(histogram.mean - 50_000_500) < 1)
        let fractions = stride(from: 0.0, through: 1.0, by: 0.001).map { histogram.percentile($0) }
        #expect(fractions == fractions.sorted())
    }

    @Test func percentilesStayWithinTheSamplesAndHistogramsMerge() {
        var empty = LatencyHistogram()
        #expect(empty.percentile(0.5) == 0)
        var one = LatencyHistogram()
        one.record(nanoseconds: 1_234_567)
        #expect(one.percentile(0.5) == 1_234_567 && one.percentile(0.999) == 1_234_567)

        var a = LatencyHistogram(), b = LatencyHistogram(), all = LatencyHistogram()
        for i in 0..<5000 {
            let value = UInt64((i * 7919) % 5000 + 1) * 10_000
            if i % 3 == 0 { a.record(nanoseconds: value) } else { b.record(nanoseconds: value) }
            all.record(nanoseconds: value)
        }
        a.merge(b)
        empty.merge(a)
        for fraction in [0.1, 0.5, 0.9, 0.99, 0.999] { #expect(empty.percentile(fraction) == all.percentile(fraction)) }
        #expect(empty.count == all.count && empty.sum == all.sum && empty.minimum == all.minimum && empty.maximum == all.maximum)
    }

    @Test func mixParsesAndCountsExactlyOverWholeCycles() throws {
        let mix = try PushMix(parsing: "alert=75,background=25")
        #expect(mix.cycle.count == 4)  // 75:25 is 3:1
        let kinds = (0..<2000).map(mix.kind(ofRequest:))
        #expect(kinds.filter { $0 == .alert }.count == 1500)
        #expect(kinds.filter { $0 == .background }.count == 500)
        // Interleaved: never more than three alerts in a row.
        #expect(!kinds.map(\.rawValue).joined(separator: ",").contains("alert,alert,alert,alert"))
        #expect(mix.description == "alert=75,background=25")

        let even = try PushMix(parsing: " background = 1 , alert ")
        #expect(even.cycle == [.background, .alert])
        #expect(try PushMix(parsing: "alert").cycle == [.alert])
        #expect(try PushMix(parsing: "alert=1,background=0").cycle == [.alert])
        let skewed = try PushMix(parsing: "alert=999,background=1")
        #expect(skewed.cycle.count == 1000 && skewed.cycle.filter { $0 == .background }.count == 1)
    }

    @Test(arguments: ["", "voip=1", "alert=-1", "alert=x", "alert=1001", "alert=0", "alert,alert", "alert=1,,background=1"])
    func mixRefusesWhatItCannotSend(_ text: String) {
        #expect(throws: ClientError.self) { try PushMix(parsing: text) }
    }

    @Test func pacerLetsABurstThroughThenSpacesSlots() {
        let pacer = RequestPacer(perSecond: 1000, burst: 3)  // a slot every millisecond
        let start: UInt64 = 10_000_000_000
        let dues = (0..<6).map { _ in pacer.reserve(now: start) }
        #expect(dues == [start, start, start, start + 1_000_000, start + 2_000_000, start + 3_000_000])
        // After a long pause, no more than the burst goes at once.
        let later = start + 5_000_000_000
        let after = (0..<4).map { _ in pacer.reserve(now: later) }
        #expect(after == [later, later, later, later + 1_000_000])
    }

    @Test func outcomesSayHowAStreamEnded() {
        var ok = HTTP2Response(streamID: 1)
        ok.status = 200
        #expect(LoadOutcome(ok) == .answered(status: 200, reason: nil))
        var rejected = HTTP2Response(streamID: 3)
        rejected.status = 429
        rejected.body = Array(#"{"reason":"TooManyRequests"}"#.utf8)
        #expect(LoadOutcome(rejected).description == "429 TooManyRequests")
        var reset = HTTP2Response(streamID: 5)
        reset.resetErrorCode = HTTP2ErrorCode.refusedStream
        #expect(LoadOutcome(reset).description == "RST_STREAM REFUSED_STREAM")
        var refused = HTTP2Response(streamID: 7)
        refused.closeErrorCode = HTTP2ErrorCode.refusedStream
        #expect(LoadOutcome(refused) == .refusedByGoAway)
        var unsent = HTTP2Response(streamID: 9)
        unsent.notSentError = -529
        #expect(LoadOutcome(unsent) == .notSent)
        let order: [LoadOutcome] = [.connectionLost, .answered(status: 429, reason: "TooManyRequests"), .answered(status: 200, reason: nil)]
        #expect(order.sorted().first == .answered(status: 200, reason: nil))

        var stats = LoadStats()
        stats.count(.answered(status: 200, reason: nil), .alert)
        stats.count(.notSent, .background)
        var other = LoadStats()
        other.count(.answered(status: 200, reason: nil), .alert)
        other.goAways = 1
        stats.merge(other)
        #expect(stats.succeeded == 2 && stats.sent == 2 && stats.answered == 2 && stats.goAways == 1)
        #expect(stats.pushTypes == [.alert: 2, .background: 1])
    }
}
