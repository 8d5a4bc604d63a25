public import Synchronization

/// A link set once after construction, for the few parts that need each other (the state
/// calls the Redis follower, which applies changes to the state). Setting it twice is a bug
/// and traps; reading it is one atomic load, so the request path may read it. `@inlinable`
/// so a reader's module specializes it: unspecialized, every read looked up the generic box's
/// metadata at run time (about 400 instructions).
public final class SetOnce<Value: Sendable>: Sendable {
    @usableFromInline
    final class Box: Sendable {
        @usableFromInline let value: Value
        @usableFromInline init(_ value: Value) { self.value = value }
    }
    @usableFromInline let slot = AtomicLazyReference<Box>()

    public init() {}

    public func set(_ value: Value, file: StaticString = #fileID, line: UInt = #line) {
        let box = Box(value)
        precondition(slot.storeIfNil(box) === box, "set twice", file: file, line: line)
    }

    /// The value, or nil before it is set.
    @inlinable
    public var value: Value? { slot.load()?.value }
}
