public import Synchronization

/// A link set once after construction, for the few parts that need each other (the state
/// calls the Redis follower, which applies changes to the state). Setting it twice is a bug
/// and traps. The value is published with a release store and read after an acquire load of
/// the flag, so a read is one inlined atomic load: the request path reads these. (A generic
/// `AtomicLazyReference` is not specialized across modules; its reads looked up generic
/// metadata at run time, some 400 instructions each.)
public final class SetOnce<Value: Sendable>: @unchecked Sendable {
    @usableFromInline let published = Atomic<Bool>(false)
    private let claimed = Atomic<Bool>(false)
    /// Written once, before `published` is set; read only after it is seen set.
    @usableFromInline nonisolated(unsafe) var stored: Value?

    public init() {}

    public func set(_ value: Value, file: StaticString = #fileID, line: UInt = #line) {
        precondition(claimed.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged, "set twice", file: file, line: line)
        stored = value
        published.store(true, ordering: .releasing)
    }

    /// The value, or nil before it is set.
    @inlinable
    public var value: Value? { published.load(ordering: .acquiring) ? stored : nil }
}
