// TestSupport: a free loopback port, for a server a test starts on a port it has to name.
// Imports Foundation and Glibc only.
import Foundation
import Glibc

public struct NoFreePort: Error, CustomStringConvertible {
    public let description: String
}

/// A port the kernel just handed out for 127.0.0.1 and that nobody listens on now (another
/// process can still take it before the test binds it: retry on "address in use").
public func freePort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw NoFreePort(description: "socket: \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw NoFreePort(description: "bind 127.0.0.1:0: \(String(cString: strerror(errno)))") }
    return Int(UInt16(bigEndian: address.sin_port))
}
