import APNsCore
import Foundation
import Glibc
import Networking

/// An admin API request that did not succeed: the status and the emulator's error message
/// (its `{"error": …}` body), or a transport failure (status 0).
public struct EmulatorAdminError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The HTTP status; 0 when no answer came (connection refused, timeout, bad response).
    public let status: Int
    public let message: String

    public init(status: Int, message: String) {
        self.status = status
        self.message = message
    }

    public var description: String { status == 0 ? message : "\(status): \(message)" }
}

/// One HTTP/1.1 exchange with the admin listener per call, on its own connection
/// (`Connection: close`), blocking with a deadline. Small and dependency-free on purpose:
/// the admin API is plain JSON over HTTP/1.1 on loopback.
struct AdminHTTP: Sendable {
    let address: HostPort
    let token: String?

    struct Reply {
        var status: Int
        var body: [UInt8]
        var json: JSONValue { (try? JSONValue.parse(body)) ?? .null }
        /// The answer as an error: the emulator's `{"error": …}` message, else the body's text.
        var error: EmulatorAdminError {
            EmulatorAdminError(status: status, message: json["error"]?.stringValue ?? String(decoding: body, as: UTF8.self))
        }
    }

    /// Sends one request; `timeout` bounds the whole exchange (long polls pass their own).
    func send(_ method: String, _ path: String, body: JSONValue? = nil, timeoutSeconds: Double = 15) throws(EmulatorAdminError) -> Reply {
        let bytes = body?.serializedBytes() ?? []
        var head = "\(method) \(path) HTTP/1.1\r\nHost: \(address)\r\nConnection: close\r\n"
        if let token { head += "Authorization: Bearer \(token)\r\n" }
        if body != nil { head += "Content-Type: application/json\r\n" }
        head += "Content-Length: \(bytes.count)\r\n\r\n"
        let fd: Int32
        do { fd = try Socket.connect(to: address) } catch {
            throw EmulatorAdminError(status: 0, message: "cannot reach the admin API at \(address): \(error)")
        }
        defer { close(fd) }
        Socket.setTimeouts(fd, milliseconds: Int(timeoutSeconds * 1000) + 1000)
        guard Self.writeAll(fd, Array(head.utf8) + bytes) else {
            throw EmulatorAdminError(status: 0, message: "\(method) \(path): the admin API closed the connection while the request was sent")
        }
        let response = Self.readToEnd(fd)
        return try Self.parse(response, what: "\(method) \(path)")
    }

    /// Sends one request and returns its JSON body when the status is 2xx.
    func json(_ method: String, _ path: String, body: JSONValue? = nil, timeoutSeconds: Double = 15) throws(EmulatorAdminError) -> JSONValue {
        let reply = try send(method, path, body: body, timeoutSeconds: timeoutSeconds)
        guard (200..<300).contains(reply.status) else { throw reply.error }
        return reply.json
    }

    private static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return false }
            offset += n
        }
        return true
    }

    private static func readToEnd(_ fd: Int32) -> [UInt8] {
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            response.append(contentsOf: buffer[0..<n])
        }
        return response
    }

    /// Status and body of a complete `Connection: close` response (Content-Length or chunked).
    static func parse(_ response: [UInt8], what: String) throws(EmulatorAdminError) -> Reply {
        let separator: [UInt8] = [13, 10, 13, 10]
        guard let headEnd = response.firstRange(of: separator) else {
            throw EmulatorAdminError(status: 0, message: "\(what): no complete answer from the admin API (\(response.count) bytes)")
        }
        let head = String(decoding: response[..<headEnd.lowerBound], as: UTF8.self)
        let lines = head.split(separator: "\r\n")
        let statusWords = lines.first?.split(separator: " ") ?? []
        guard statusWords.count >= 2, let status = Int(statusWords[1]) else {
            throw EmulatorAdminError(status: 0, message: "\(what): not an HTTP response: \(lines.first ?? "")")
        }
        let fields = lines.dropFirst().map { $0.lowercased() }
        let body = Array(response[headEnd.upperBound...])
        let cut = EmulatorAdminError(status: 0, message: "\(what): the answer ended early (a timeout or a dropped connection)")
        if fields.contains(where: { $0.hasPrefix("transfer-encoding:") && $0.contains("chunked") }) {
            guard let whole = dechunk(body) else { throw cut }
            return Reply(status: status, body: whole)
        }
        let length = fields.first { $0.hasPrefix("content-length:") }
            .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) }
        if let length {
            guard body.count >= length else { throw cut }
            return Reply(status: status, body: Array(body.prefix(length)))
        }
        return Reply(status: status, body: body)
    }

    /// The body of a chunked message; nil when it ends before its last (empty) chunk.
    private static func dechunk(_ bytes: [UInt8]) -> [UInt8]? {
        var out: [UInt8] = []
        var index = 0
        while let lineEnd = bytes[index...].firstRange(of: [13, 10]) {
            let sizeText = String(decoding: bytes[index..<lineEnd.lowerBound], as: UTF8.self).split(separator: ";").first ?? ""
            guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16) else { return nil }
            if size == 0 { return out }
            let start = lineEnd.upperBound
            guard start + size + 2 <= bytes.count else { return nil }
            out.append(contentsOf: bytes[start..<start + size])
            index = start + size + 2
        }
        return nil
    }
}

extension String {
    /// Percent-encoded for a query value or a path segment.
    var queryEncoded: String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return addingPercentEncoding(withAllowedCharacters: allowed) ?? self
    }
}
