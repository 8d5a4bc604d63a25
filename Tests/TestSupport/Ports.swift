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
    guard let port = bindLoopback(port: 0) else {
        throw NoFreePort(description: "bind 127.0.0.1:0: \(String(cString: strerror(errno)))")
    }
    return port
}

/// A free loopback port below the kernel's ephemeral range (`ip_local_port_range`), for a
/// server a test kills and starts again on the same port: every `127.0.0.1:0` bind of the
/// suites running beside it draws from the ephemeral range, and one of them took a port in
/// the moment between a kill and the restart (the restart then failed with "address in use").
/// Chosen at random and checked free; falls back to `freePort()` when the range starts too low.
public func freePortOutsideEphemeralRange() throws -> Int {
    let range = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
    let ephemeralLow = range.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } ?? 32_768
    let low = 10_000
    guard ephemeralLow - low >= 1_000 else { return try freePort() }
    for _ in 0..<200 {
        let port = Int.random(in: low..<ephemeralLow)
        if isFree(port) { return port }
    }
    return try freePort()
}

private func isFree(_ port: Int) -> Bool { bindLoopback(port: port) != nil }

/// Binds a new socket to 127.0.0.1:`port` (0: any the kernel picks) and closes it again: the
/// port it got, or nil when the bind failed (`errno` says why).
private func bindLoopback(port: Int) -> Int? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = UInt16(port).bigEndian
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    return bound ? Int(UInt16(bigEndian: address.sin_port)) : nil
}
