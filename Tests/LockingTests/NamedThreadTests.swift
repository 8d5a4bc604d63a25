// LockingTests: `Thread(named:)` gives the system the thread's name (what `top -H` and
// `ps -L` show), every time, cut to the 15 bytes Linux keeps rather than refused whole.
import Foundation
import Locking
import Testing

@Suite("Named threads")
struct NamedThreadTests {
    /// The name the system has for the calling thread.
    private static func systemName() -> String {
        let text = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
        return text.trimmingCharacters(in: .newlines)
    }

    private static func nameSeen(running name: String) -> String {
        let seen = BlockingLock<String?>(nil)
        Thread(named: name) { seen.withLock { $0 = systemName() } }.start()
        return seen.withLock(when: { $0 != nil }, timeoutMilliseconds: 5_000) { value, _ in value ?? "never ran" }
    }

    @Test func theSystemShowsTheThreadsName() {
        #expect(Self.nameSeen(running: "redis-writer") == "redis-writer")
    }

    /// A thread that named itself through `Thread.current.name` before its starter had
    /// recorded it went unnamed, about one start in three: many starts at once (each with a
    /// stack size of its own, as the event loops have), every one named.
    @Test func everyThreadOfABurstIsNamed() {
        let names = (0..<24).map { "burst-\($0)" }
        let seen = BlockingLock<[String: String]>([:])
        for name in names {
            let thread = Thread(named: name) { seen.withLock { $0[name] = Self.systemName() } }
            thread.stackSize = 1 << 20
            thread.start()
        }
        let all = seen.withLock(when: { $0.count == names.count }, timeoutMilliseconds: 5_000) { value, _ in value }
        #expect(all == Dictionary(uniqueKeysWithValues: names.map { ($0, $0) }))
    }

    @Test func aLongNameIsCutToWhatLinuxKeeps() {
        #expect(Self.nameSeen(running: "a-name-of-twenty-one") == "a-name-of-twent")
    }
}
