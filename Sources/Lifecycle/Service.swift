import Locking
import MonotonicClock

/// A long-lived part of the server: state writer, shared-state follower, event loops,
/// listeners. Built with everything it needs and without side effects; `start` is where
/// threads, sockets and writes begin, `stop` where they end.
public protocol Service: AnyObject, Sendable {
    /// Names the part in errors and logs ("state directory", "listeners").
    var serviceName: String { get }
    /// Begins its work. When it throws, `stop` is still called: it ends what was begun.
    func start() throws
    /// Ends its work. A part with work in flight (open connections, queued writes) may use
    /// the time until `deadlineMs` (Monotonic milliseconds) to finish it, and no more.
    func stop(deadlineMs: Int64)
}

/// A service that failed to start, and why, in the service's own words.
public struct ServiceStartError: Error, CustomStringConvertible, Sendable {
    public let serviceName: String
    /// The service's error as it described it (shown as is: it names the flag and the fix).
    public let description: String
}

/// Services started in the order given and stopped in reverse, as swift-service-lifecycle
/// does: a part may rely on those before it while it runs and while it stops.
public final class ServiceGroup: Sendable {
    public let services: [any Service]
    /// How many have started, from the first.
    private let started = Locked(0)

    public init(_ services: [any Service]) { self.services = services }

    /// Starts each in turn. When one fails, it and those before it are stopped (in reverse)
    /// before the error is thrown.
    public func start() throws(ServiceStartError) {
        for service in services {
            started.withLock { $0 += 1 }
            do {
                try service.start()
            } catch {
                stop(deadlineMs: Monotonic.nowMilliseconds())
                throw ServiceStartError(serviceName: service.serviceName, description: "\(error)")
            }
        }
    }

    /// Stops the services whose `start` was called, in reverse order, all within
    /// `deadlineMs`; those never started are left alone. Later calls return at once.
    public func stop(deadlineMs: Int64) {
        let count = started.withLock { count in
            defer { count = 0 }
            return count
        }
        for service in services.prefix(count).reversed() { service.stop(deadlineMs: deadlineMs) }
    }

    /// `stop` with a deadline `milliseconds` from now.
    public func stop(within milliseconds: Int64) { stop(deadlineMs: Monotonic.nowMilliseconds() + milliseconds) }
}
