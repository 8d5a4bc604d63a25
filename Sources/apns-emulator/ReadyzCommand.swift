import CommandLineOptions
import Foundation
import Glibc
import Networking

/// `apns-emulator readyz`: a health check of a running emulator, for containers.
let readyzCommand = Subcommand(
    name: "readyz", listing: "exit 0 when an emulator's admin API says it is ready (for health checks)",
    summary: "Exits 0 if GET /readyz answers 200, 1 otherwise (2 for a usage error).",
    specs: [OptionSpec("admin", "HOST:PORT", default: "127.0.0.1:8197", "the emulator's admin listener")],
    run: runReadyz
)

private func runReadyz(_ command: Subcommand, _ args: [String]) -> Never {
    let (options, positional) = command.parse(args)
    guard positional.isEmpty else { command.fail("unexpected argument '\(positional[0])'; see --help") }
    // A malformed address is a usage error (2), not an emulator that is not ready (1).
    let address: HostPort
    do { address = try HostPort(parsing: options.string("admin") ?? "127.0.0.1:8197") } catch {
        command.fail("--admin: \(error.description)")
    }
    do {
        let fd = try Socket.connect(to: address, timeoutMilliseconds: 2000)
        defer { close(fd) }
        Socket.setTimeouts(fd, milliseconds: 2000)
        let request = "GET /readyz HTTP/1.1\r\nHost: \(address)\r\nConnection: close\r\n\r\n"
        _ = request.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        var buffer = [UInt8](repeating: 0, count: 512)
        let n = recv(fd, &buffer, buffer.count, 0)
        let head = n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : ""
        if head.hasPrefix("HTTP/1.1 200") {
            print("ready")
            exit(0)
        }
        print("not ready")
        exit(1)
    } catch {
        print("not ready: \(error)")
        exit(1)
    }
}
