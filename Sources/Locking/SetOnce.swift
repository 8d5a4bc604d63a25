import Synchronization

/// A link set once after construction, for the few parts that need each other (the state
/// calls the Redis follower, which applies changes to the state). Setting it twice is a bug
/// and traps; reading it is one atomic load, so the request path may read it.
public final class SetOnce<Value: Sendable>: Sendable {
    private final class Box: Sendable {
        let value: Value
        init(_ value: Value) { self.value = value }
    }
    private let slot = AtomicLazyReference<Box>()

    public init() {}

    public init(_ value: Value) { _ = slot.storeIfNil(Box(value)) }

    public func set(_ value: Value, file: StaticString = #fileID, line: UInt = #line) {
        let box = Box(value)
        precondition(slot.storeIfNil(box) === box, "set twice", file: file, line: line)
    }

    /// The value, or nil before it is set.
    @inline(__always)
    public var value: Value? { slot.load()?.value }
}
