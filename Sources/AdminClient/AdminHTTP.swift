import JSON
import Foundation
import HTTP1Client
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
/// (`Connection: close`), blocking with a deadline: `HTTP1Client` with the admin API's
/// token, JSON bodies and error messages.
struct AdminHTTP: Sendable {
    let address: HostPort
    let token: String?

    /// Listing answers (a thousand records with their payloads) are far larger than what a
    /// backend call accepts; this only keeps a broken peer from filling memory.
    static let maxResponseBytes = 256 << 20

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
        var headers: [HTTP1Header] = []
        if let token { headers.append(HTTP1Header("Authorization", "Bearer \(token)")) }
        if body != nil { headers.append(HTTP1Header("Content-Type", "application/json")) }
        do {
            let response = try HTTP1Client.exchange(
                host: address.host, port: address.port, method: method, target: path, headers: headers,
                body: body?.serializedBytes() ?? [], timeoutMs: Int(timeoutSeconds * 1000) + 1000,
                maxResponseBytes: Self.maxResponseBytes)
            return Reply(status: response.status, body: response.body)
        } catch {
            throw adminError(error, what: "\(method) \(path)")
        }
    }

    /// Sends one request and returns its JSON body when the status is 2xx.
    func json(_ method: String, _ path: String, body: JSONValue? = nil, timeoutSeconds: Double = 15) throws(EmulatorAdminError) -> JSONValue {
        let reply = try send(method, path, body: body, timeoutSeconds: timeoutSeconds)
        guard (200..<300).contains(reply.status) else { throw reply.error }
        return reply.json
    }

    /// A transport failure in the words the admin client has always used (status 0).
    private func adminError(_ error: HTTP1ClientError, what: String) -> EmulatorAdminError {
        let message: String
        switch (error.phase, error.kind) {
        case (.connecting, _):
            message = "cannot reach the admin API at \(address): \(error.message)"
        case (.sending, .closedEarly):
            message = "\(what): the admin API closed the connection while the request was sent"
        case (_, .malformedResponse), (_, .responseTooLarge), (.preparing, _), (.sending, _):
            message = "\(what): \(error.message)"
        case (.receivingHead, _):
            message = "\(what): no complete answer from the admin API (\(error.bytesReceived) bytes)"
        case (.receivingBody, _):
            message = "\(what): the answer ended early (a timeout or a dropped connection)"
        }
        return EmulatorAdminError(status: 0, message: message)
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
