// LockingTests: `Thread(named:)` gives the system the thread's name (what `top -H` and
// `ps -L` show), cut to the 15 bytes Linux keeps rather than refused whole.
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

    @Test func aLongNameIsCutToWhatLinuxKeeps() {
        #expect(Self.nameSeen(running: "a-name-of-twenty-one") == "a-name-of-twent")
    }
}
