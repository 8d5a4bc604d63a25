// LifecycleTests: the service group's order (start in order, stop in reverse, a failed start
// stops what began) and the logger's levels. Imports Lifecycle, Locking and Testing.
import Lifecycle
import Locking
import Testing

/// Writes what happens to it into a shared diary.
private final class Recorder: Service {
    let serviceName: String
    let diary: Locked<[String]>
    let fails: Bool

    init(_ name: String, _ diary: Locked<[String]>, fails: Bool = false) {
        serviceName = name
        self.diary = diary
        self.fails = fails
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    func start() throws {
        diary.withLock { $0.append("start \(serviceName)") }
        if fails { throw Failure(description: "\(serviceName) cannot bind 127.0.0.1:1") }
    }

    func stop(deadlineMs: Int64) { diary.withLock { $0.append("stop \(serviceName)") } }
}

@Suite("Lifecycle: services start in order and stop in reverse")
struct ServiceGroupTests {
    @Test func servicesStartInOrderAndStopInReverseOnce() throws {
        let diary = Locked<[String]>([])
        let group = ServiceGroup(["state", "loops", "listeners"].map { Recorder($0, diary) })
        try group.start()
        #expect(diary.withLock { $0 } == ["start state", "start loops", "start listeners"])
        group.stop(within: 100)
        group.stop(within: 100)
        #expect(diary.withLock { $0 } == ["start state", "start loops", "start listeners", "stop listeners", "stop loops", "stop state"])
    }

    @Test func aFailedStartStopsItAndThoseBeforeItAndSaysWhy() {
        let diary = Locked<[String]>([])
        let group = ServiceGroup([Recorder("state", diary), Recorder("listeners", diary, fails: true), Recorder("loops", diary)])
        #expect {
            try group.start()
        } throws: { error in
            let failure = error as? ServiceStartError
            return failure?.serviceName == "listeners" && failure?.description == "listeners cannot bind 127.0.0.1:1"
        }
        #expect(diary.withLock { $0 } == ["start state", "start listeners", "stop listeners", "stop state"])
        group.stop(within: 100)
        #expect(diary.withLock { $0 }.count == 4)
    }

    @Test func aGroupNeverStartedStopsNothing() {
        let diary = Locked<[String]>([])
        ServiceGroup([Recorder("state", diary)]).stop(within: 0)
        #expect(diary.withLock { $0 }.isEmpty)
    }
}

@Suite("Lifecycle: one logger with levels")
struct LoggerTests {
    @Test func linesBelowTheMinimumAreDroppedAndNotBuilt() {
        let lines = Locked<[String]>([])
        let quiet = Logger(minimum: .warning, stamp: { "T" }) { line in lines.withLock { $0.append(line) } }
        var built = false
        quiet.info(
            {
                built = true; return "connection 1 opened"
            }())
        quiet.warning("state: writing failed")
        quiet.error("cannot listen")
        #expect(!built)
        // Warnings and errors say so; a line break inside a message stays in its line.
        quiet.warning("fault rule a\nb added")
        #expect(lines.withLock { $0 } == ["T warning: state: writing failed\n", "T error: cannot listen\n", "T warning: fault rule a\\nb added\n"])
        #expect(quiet.willLog(.warning) && !quiet.willLog(.info))
    }
}

@Suite("Locking: SetOnce")
struct SetOnceTests {
    @Test func itIsEmptyUntilSetAndKeepsItsValue() {
        let link = SetOnce<Int>()
        #expect(link.value == nil)
        link.set(7)
        #expect(link.value == 7)
    }

    @Test func settingItTwiceTraps() async {
        await #expect(processExitsWith: .failure) {
            let link = SetOnce<Int>()
            link.set(1)
            link.set(2)
        }
    }
}
