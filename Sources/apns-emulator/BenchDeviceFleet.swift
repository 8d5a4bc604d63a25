import APNsCore
import Glibc
import Locking
import Networking
import Synchronization

/// What every bench device reports, from any loop.
final class BenchTally: Sendable {
    let connected = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    let notifications = Atomic<Int>(0)
    let errors = Atomic<Int>(0)
    let dropped = Atomic<Int>(0)
    let tokens = Locked<[String]>([])
    let firstError = Locked<String?>(nil)

    func error(_ message: String) {
        errors.add(1, ordering: .relaxed)
        firstError.withLock { if $0 == nil { $0 = message } }
    }
}

/// The devices of one event loop: opened a few at a time (a burst of thousands of connects
/// would overflow the listener's accept queue and wait for SYN retries), each the next once one
/// is registered or has failed.
final class BenchDeviceFleet: @unchecked Sendable {
    let loop: EventLoop
    let address: HostPort
    let hello: (Int) -> [UInt8]
    let tally: BenchTally
    private var numbers: [Int]
    private var opening = 0
    private static let maxOpening = 128

    init(loop: EventLoop, address: HostPort, numbers: [Int], tally: BenchTally, hello: @escaping (Int) -> [UInt8]) {
        self.loop = loop
        self.address = address
        self.numbers = numbers.reversed()
        self.tally = tally
        self.hello = hello
    }

    /// On the loop.
    func fill() {
        while opening < Self.maxOpening, let n = numbers.popLast() {
            opening += 1
            open(n)
        }
    }

    func settled(registered: Bool) {
        opening -= 1
        if registered { tally.connected.add(1, ordering: .relaxed) } else { tally.failed.add(1, ordering: .relaxed) }
        fill()
    }

    private func open(_ n: Int) {
        let fd: Int32
        do {
            fd = try Socket.connect(to: address, timeoutMilliseconds: 10_000)
        } catch {
            tally.error("connect: \(error.description)")
            settled(registered: false)
            return
        }
        Socket.setBlocking(fd, false)
        let connection = Connection(id: UInt64(n), loop: loop, fd: fd, peer: address.description, tls: nil)
        connection.handler = BenchDevice(fleet: self, hello: hello(n))
        connection.start()
    }
}

/// One device socket: says hello, takes its token from `registered`, acks every notification.
/// Acks for the frames of one read go out in one write.
final class BenchDevice: ConnectionHandler {
    let fleet: BenchDeviceFleet
    let hello: [UInt8]
    private var buffer: [UInt8] = []
    private var registered = false
    /// The emulator writes a notification's members in this order; the id is read from the
    /// line's start without parsing its payload (anything else is parsed in full).
    private static let notificationPrefix = Array(#"{"type":"notification","id":"#.utf8)

    init(fleet: BenchDeviceFleet, hello: [UInt8]) {
        self.fleet = fleet
        self.hello = hello
    }

    func connectionDidBecomeReady(_ connection: Connection) {
        connection.write(hello)
    }

    func connection(_ connection: Connection, didRead bytes: UnsafeRawBufferPointer) {
        buffer.append(contentsOf: bytes)
        var acks: [UInt8] = []
        var notifications = 0
        var start = 0
        while let newline = buffer[start...].firstIndex(of: 0x0A) {
            let line = buffer[start..<newline]
            start = newline + 1
            if let id = Self.notificationID(line) {
                notifications += 1
                acks.append(contentsOf: #"{"type":"ack","id":"#.utf8)
                acks.append(contentsOf: line[id])
                acks.append(contentsOf: "}\n".utf8)
            } else {
                handle(frame: line, connection)
            }
        }
        buffer.removeFirst(start)
        if notifications > 0 { fleet.tally.notifications.add(notifications, ordering: .relaxed) }
        if !acks.isEmpty { connection.write(acks) }
    }

    /// The digits of the `id` when the line is a notification.
    private static func notificationID(_ line: ArraySlice<UInt8>) -> Range<Int>? {
        guard line.starts(with: notificationPrefix) else { return nil }
        let digits = line.startIndex + notificationPrefix.count
        var end = digits
        while end < line.endIndex, line[end] >= 0x30, line[end] <= 0x39 { end += 1 }
        return end > digits ? digits..<end : nil
    }

    private func handle(frame line: ArraySlice<UInt8>, _ connection: Connection) {
        guard let object = try? JSONValue.parseKeepingText(Array(line)).objectValue else {
            fleet.tally.error("not a JSON object: \(String(decoding: line.prefix(200), as: UTF8.self))")
            return
        }
        switch object["type"]?.stringValue {
        case "registered":
            guard !registered, let token = object["token"]?.stringValue else { return }
            registered = true
            fleet.tally.tokens.withLock { $0.append(token) }
            fleet.settled(registered: true)
        case "error":
            fleet.tally.error("\(object["code"]?.stringValue ?? "error"): \(object["message"]?.stringValue ?? "")")
        default:
            break
        }
    }

    func connectionDidClose(_ connection: Connection) {
        if registered { fleet.tally.dropped.add(1, ordering: .relaxed) } else { fleet.settled(registered: false) }
    }
}
