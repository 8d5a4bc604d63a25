import Lifecycle
import Testing

@Suite("Log allowance")
struct LogAllowanceTests {
    @Test func linesPastTheAllowanceAreCountedAndTheNextWindowSaysHowMany() {
        let allowance = LogAllowance(lines: 3, windowMilliseconds: 10_000)
        let first = (0..<5).map { allowance.take(nowMs: 1_000 + Int64($0)) }
        #expect(first == ["", "", "", nil, nil])
        #expect(allowance.take(nowMs: 10_999) == nil, "still the first window")
        #expect(allowance.take(nowMs: 11_000) == " (3 more lines like it not logged: at most 3 every 10 s)")
        #expect(allowance.take(nowMs: 11_001) == "")
        // A window without anything left out says nothing more.
        #expect(allowance.take(nowMs: 30_000) == "")
    }
}
