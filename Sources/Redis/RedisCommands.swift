/// Commands in Redis's wire form (RESP: each an array of bulk strings, each with its length),
/// built in one buffer and sent as it is: a pipeline is one write of these bytes.
///
/// A command may carry one large argument that its caller writes into the buffer itself
/// (`init(bulkAfter:capacity:)`): the journal rows of a write, about a kilobyte a push, go
/// to the socket from where they were encoded rather than being copied into a command, into
/// a wire buffer and into hiredis's output buffer (three copies of every push's row).
public struct RedisCommands: Sendable {
    /// The wire form, from `start`: the room a large argument's caller left ahead of it may be
    /// longer than the command's head that fills its end.
    private(set) var wire: [UInt8]
    private(set) var start = 0
    public private(set) var count = 0

    public init() { wire = [] }

    public init(_ commands: [[RedisArgument]]) {
        wire = []
        wire.reserveCapacity(commands.reduce(0) { $0 + Self.wireSize(of: $1) })
        for command in commands { append(command) }
    }

    /// Starts a command of `head` and then one large argument, which the caller writes with
    /// `writeBulk` and ends with `endBulk`. Room for the command's head is left ahead of the
    /// argument, filled in once its length is known. `capacity`: about what the argument and
    /// the commands after it take (the buffer then need not grow).
    public init(bulkAfter head: [RedisArgument], capacity: Int) {
        bulkHead = head
        let room = Self.wireSize(of: head) + 32
        wire = []
        wire.reserveCapacity(room + capacity)
        wire.append(contentsOf: repeatElement(0, count: room))
        start = room
    }

    /// The head of the command whose large argument is being written (nil: none).
    private var bulkHead: [RedisArgument]?

    /// Runs `body` on the buffer the large argument is written to, at its end.
    public mutating func writeBulk<R>(_ body: (inout [UInt8]) -> R) -> R {
        precondition(bulkHead != nil, "a large argument being written")
        return body(&wire)
    }

    /// Ends the large argument: its command has `tail` after it.
    public mutating func endBulk(tail: [RedisArgument]) {
        guard let head = bulkHead else { preconditionFailure("a large argument being written") }
        bulkHead = nil
        var lead: [UInt8] = []
        lead.reserveCapacity(start)
        Self.line(UInt8(ascii: "*"), head.count + 1 + tail.count, into: &lead)
        for argument in head { Self.append(argument, to: &lead) }
        Self.line(UInt8(ascii: "$"), wire.count - start, into: &lead)
        // Right before the argument (the room was made for the longest head it can have).
        let room = start
        start = room - lead.count
        for (i, byte) in lead.enumerated() { wire[start + i] = byte }
        wire.append(13)
        wire.append(10)
        for argument in tail { Self.append(argument, to: &wire) }
        count += 1
    }

    /// The large argument's bytes instead (to send otherwise), and no command.
    public mutating func takeBulk() -> [UInt8] {
        precondition(bulkHead != nil, "a large argument being written")
        bulkHead = nil
        defer { self = RedisCommands() }
        return Array(wire[start...])
    }

    public mutating func append(_ command: [RedisArgument]) {
        Self.line(UInt8(ascii: "*"), command.count, into: &wire)
        for argument in command { Self.append(argument, to: &wire) }
        count += 1
    }

    /// `$<length>\r\n<bytes>\r\n`.
    private static func append(_ argument: RedisArgument, to wire: inout [UInt8]) {
        switch argument {
        case .bytes(let bytes):
            line(UInt8(ascii: "$"), bytes.count, into: &wire)
            wire += bytes
        case .text(let text):
            var text = text
            text.withUTF8 { utf8 in
                line(UInt8(ascii: "$"), utf8.count, into: &wire)
                wire.append(contentsOf: utf8)
            }
        }
        wire.append(13)
        wire.append(10)
    }

    /// `<marker><number>\r\n` (a number is never negative here), its digits written one by one
    /// (`String(number)` cost an allocation each: about 40 numbers a write of pushes).
    private static func line(_ marker: UInt8, _ number: Int, into wire: inout [UInt8]) {
        wire.append(marker)
        var divisor = 1
        while divisor <= number / 10 { divisor *= 10 }
        while divisor > 0 {
            wire.append(UInt8(ascii: "0") + UInt8(number / divisor % 10))
            divisor /= 10
        }
        wire.append(13)
        wire.append(10)
    }

    private static func wireSize(of command: [RedisArgument]) -> Int {
        var size = 16
        for argument in command {
            switch argument {
            case .bytes(let bytes): size += bytes.count + 24
            case .text(let text): size += text.utf8.count + 24
            }
        }
        return size
    }
}
