@testable import RedisStore
import Testing

/// The tickets `--redis` numbers changes with, and what a thread's next answer waits for.
@Suite("Redis commit tickets")
struct RedisTicketsTests {
    @Test func aThreadIsToldOfItsOwnFailedChangeOnceAndOthersAreNot() {
        var tickets = RedisCoordinator.Tickets()
        tickets.laterThreads.append(7)
        #expect(tickets.number(7, hasRows: true) == (1, true))
        #expect(tickets.number(8, hasRows: true) == (2, false))
        #expect(tickets.number(7, hasRows: false) == (0, true), "a change without rows takes no ticket")
        #expect(tickets.number(7, hasRows: true) == (3, true))
        #expect(tickets.takeFailedTicket(of: 7) == nil, "nothing failed")
        // Thread 7's last change (3) fails; thread 8's (2) was written.
        tickets.resolvedTicket = 3
        tickets.failedTickets = [3...3]
        #expect(tickets.takeFailedTicket(of: 8) == nil)
        #expect(tickets.takeFailedTicket(of: 7) == 3)
        #expect(tickets.takeFailedTicket(of: 7) == nil, "told once")
        #expect(tickets.number(7, hasRows: true) == (4, true))
        #expect(tickets.takeFailedTicket(of: 7) == nil, "its newest change has not failed")
    }
}
