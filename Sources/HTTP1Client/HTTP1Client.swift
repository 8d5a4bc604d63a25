// HTTP1Client: a small blocking HTTP/1.1 client (the admin client, the apps' backend calls).
// Imports Networking, MonotonicClock and Glibc.

import Glibc
import MonotonicClock
import Networking

/// A small blocking HTTP/1.1 client: one request per connection (`Connection: close`), the
/// whole exchange (connect, send, answer) bounded by one timeout, the answer's size bounded.
/// Plain http only (see `HTTPURL`). Used for the admin API client and for calls to an app's
/// own backend; neither needs keep-alive, pipelining or TLS.
///
/// Host names are resolved with getaddrinfo (IPv4, IPv6 and names like localhost), which the
/// timeout cannot interrupt: a name that takes long to resolve takes longer than the timeout.
/// When a name has several addresses each connect attempt may use what is left of the timeout.
public enum HTTP1Client {
    /// Answers larger than this are refused unless the caller asks for more.
    public static let defaultMaxResponseBytes = 1 << 20

    /// Sends one request and returns the complete answer, whatever its status (one larger than
    /// `maxResponseBytes` fails, or is cut there, as `whenLarger` says).
    public static func exchange(
        url: HTTPURL, method: String = "GET", headers: [HTTP1Header] = [], body: [UInt8]? = nil,
        timeoutMs: Int, maxResponseBytes: Int = defaultMaxResponseBytes, whenLarger: OversizedAnswer = .fail
    ) throws(HTTP1ClientError) -> HTTP1Response {
        let request = try RequestHead.bytes(method: method, url: url, headers: headers, body: body)
        let deadline = Deadline(afterMs: timeoutMs)
        let connection = try DeadlineConnection.open(to: HostPort(host: url.host, port: url.port), deadline: deadline, timeoutMs: timeoutMs)
        defer { connection.close() }
        try connection.send(request)
        return try connection.receive(isHeadRequest: method == "HEAD", maxResponseBytes: maxResponseBytes, whenLarger: whenLarger)
    }

    /// `exchange(url:…)` with the URL as text (`http://host[:port]/path?query`).
    public static func exchange(
        url: String, method: String = "GET", headers: [HTTP1Header] = [], body: [UInt8]? = nil,
        timeoutMs: Int, maxResponseBytes: Int = defaultMaxResponseBytes, whenLarger: OversizedAnswer = .fail
    ) throws(HTTP1ClientError) -> HTTP1Response {
        try exchange(
            url: HTTPURL(string: url), method: method, headers: headers, body: body, timeoutMs: timeoutMs,
            maxResponseBytes: maxResponseBytes, whenLarger: whenLarger)
    }

    /// `exchange(url:…)` with the parts of the URL given one by one (`target`: path and query).
    public static func exchange(
        host: String, port: UInt16, method: String, target: String, headers: [HTTP1Header] = [],
        body: [UInt8]? = nil, timeoutMs: Int, maxResponseBytes: Int = defaultMaxResponseBytes
    ) throws(HTTP1ClientError) -> HTTP1Response {
        try exchange(
            url: HTTPURL(host: host, port: port, target: target), method: method, headers: headers, body: body,
            timeoutMs: timeoutMs, maxResponseBytes: maxResponseBytes)
    }
}

/// A point in monotonic time that every wait of one exchange counts down to.
struct Deadline {
    let endMs: Int64

    init(afterMs: Int) { endMs = Monotonic.nowMilliseconds() + Int64(max(0, afterMs)) }

    var remainingMs: Int32 { Int32(clamping: max(0, endMs - Monotonic.nowMilliseconds())) }
}
