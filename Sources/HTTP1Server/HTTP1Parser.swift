// HTTP/1.1 request parsing (RFC 9112), without I/O: bytes go in as they arrive, a request
// head and then its body come out. Everything that makes message framing ambiguous is
// refused, because the emulator may sit behind proxies that frame differently (request
// smuggling): duplicate or malformed `Content-Length`, `Transfer-Encoding` next to
// `Content-Length`, obsolete line folding, whitespace before a field's colon, bare CRs.

import HTTPGrammar

/// A request line and its header fields.
public struct HTTP1RequestHead: Sendable {
    public enum Framing: Equatable, Sendable {
        case none
        case length(Int)
        case chunked
    }

    public var method: String
    /// As sent: origin-form (`/path?query`), absolute-form or `*`.
    public var target: String
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    public var minorVersion: Int
    /// Field lines in the order received, names lowercased.
    public var fields: [(name: String, value: String)]
    public var framing: Framing

    public init(method: String, target: String, minorVersion: Int, fields: [(name: String, value: String)], framing: Framing) {
        self.method = method
        self.target = target
        self.minorVersion = minorVersion
        self.fields = fields
        self.framing = framing
    }

    public func field(_ name: String) -> String? { fields.first { $0.name == name }?.value }
    public func fields(_ name: String) -> [String] { fields.filter { $0.name == name }.map(\.value) }

    /// Comma-separated list elements of every `name` field, lowercased (RFC 9110 §5.6.1).
    public func tokens(_ name: String) -> [String] {
        fields(name).flatMap { $0.split(separator: ",") }.map { HTTP1Syntax.trimmed($0).lowercased() }.filter { !$0.isEmpty }
    }

    public var keepAlive: Bool {
        let connection = tokens("connection")
        return minorVersion == 1 ? !connection.contains("close") : connection.contains("keep-alive")
    }

    public var expectsContinue: Bool { minorVersion == 1 && tokens("expect").contains("100-continue") }

    /// Where the client sent the request: the authority of an absolute-form target, which
    /// replaces `Host` (RFC 9112 §3.2.2), else the `Host` field.
    public var authority: String? {
        if let (_, authority, _) = HTTP1Syntax.absoluteForm(target) { return authority }
        return field("host")
    }

    /// The origin-form part of the target (`/path?query`).
    public var originForm: String {
        if let (_, _, rest) = HTTP1Syntax.absoluteForm(target) { return rest }
        return target
    }
}

/// Why a request cannot be read: the status to answer with, then the connection closes.
public struct HTTP1Failure: Error, Equatable, Sendable {
    public let status: Int
    public let message: String
    public init(_ status: Int, _ message: String) {
        self.status = status
        self.message = message
    }
}

public struct HTTP1RequestParser {
    public struct Limits: Sendable {
        /// Request line plus fields (and, separately, a chunked body's trailer section).
        public var maxHeaderBytes = 64 * 1024
        public var maxBodyBytes = 8 * 1024 * 1024
        /// A chunk-size line with its extensions.
        public var maxChunkLineBytes = 4096

        public init(maxHeaderBytes: Int = 64 * 1024, maxBodyBytes: Int = 8 * 1024 * 1024, maxChunkLineBytes: Int = 4096) {
            self.maxHeaderBytes = maxHeaderBytes
            self.maxBodyBytes = maxBodyBytes
            self.maxChunkLineBytes = maxChunkLineBytes
        }
    }

    private enum Phase {
        case head
        case body(Int)
        case chunked(ChunkPhase)
    }

    private enum ChunkPhase {
        case size
        case data(remaining: Int)
        case dataEnd
        case trailers(bytes: Int)
    }

    public let limits: Limits
    private var buffer: [UInt8] = []
    /// Bytes before this index are consumed.
    private var start = 0
    /// Where the search for the next line feed resumes (so bytes are looked at once, however
    /// they arrive).
    private var scan = 0
    private var phase = Phase.head
    private var decoded: [UInt8] = []
    /// Head parsing: where the current line starts, and whether a non-empty line was seen.
    private var headLineStart = 0
    private var sawRequestLine = false

    public init(limits: Limits = Limits()) { self.limits = limits }

    public mutating func append(_ bytes: some Sequence<UInt8>) { buffer.append(contentsOf: bytes) }

    /// Bytes received and not yet consumed.
    public var bufferedCount: Int { buffer.count - start }

    /// Body bytes held for the request being read (decoded and still raw).
    public var bodyBytesHeld: Int {
        if case .head = phase { return 0 }
        return decoded.count + bufferedCount
    }

    /// The next request head, nil until it is complete. After a head, call `nextBody()`.
    public mutating func nextHead() throws(HTTP1Failure) -> HTTP1RequestHead? {
        guard case .head = phase else { return nil }
        while true {
            guard let lf = buffer[scan...].firstIndex(of: 0x0A) else {
                scan = buffer.count
                if buffer.count - start > limits.maxHeaderBytes { throw Self.headTooLarge(limits) }
                return nil
            }
            scan = lf + 1
            if lf + 1 - start > limits.maxHeaderBytes { throw Self.headTooLarge(limits) }
            let lineStart = headLineStart
            headLineStart = lf + 1
            let isEmpty = lf == lineStart || (lf == lineStart + 1 && buffer[lineStart] == 0x0D)
            guard isEmpty else {
                sawRequestLine = true
                continue
            }
            // RFC 9112 §2.2: empty lines before the request line are ignored (they count
            // towards the size limit, so a stream of them cannot go on forever).
            guard sawRequestLine else { continue }
            let first = min(Self.firstNonEmptyLine(buffer, from: start), lineStart)
            let head = try Self.parseHead(buffer[first..<lineStart], limits: limits)
            consume(lf + 1 - start)
            sawRequestLine = false
            switch head.framing {
            case .none: phase = .body(0)
            case .length(let n): phase = .body(n)
            case .chunked: phase = .chunked(.size)
            }
            decoded = []
            return head
        }
    }

    /// The body of the request whose head came last, nil until it is complete.
    public mutating func nextBody() throws(HTTP1Failure) -> [UInt8]? {
        switch phase {
        case .head:
            return nil
        case .body(let length):
            guard bufferedCount >= length else { return nil }
            let body = Array(buffer[start..<(start + length)])
            consume(length)
            phase = .head
            return body
        case .chunked:
            return try decodeChunks()
        }
    }

    private mutating func decodeChunks() throws(HTTP1Failure) -> [UInt8]? {
        while case .chunked(let chunk) = phase {
            switch chunk {
            case .size:
                guard
                    let line = try takeLine(
                        limit: limits.maxChunkLineBytes,
                        tooLong: HTTP1Failure(400, "a chunk-size line is longer than \(limits.maxChunkLineBytes) bytes"))
                else { return nil }
                let size = try Self.chunkSize(line)
                guard size <= limits.maxBodyBytes - decoded.count else {
                    throw HTTP1Failure(413, "request body larger than \(HTTP1Syntax.size(limits.maxBodyBytes))")
                }
                phase = .chunked(size == 0 ? .trailers(bytes: 0) : .data(remaining: size))
            case .data(let remaining):
                let n = min(remaining, bufferedCount)
                guard n > 0 else { return nil }
                decoded.append(contentsOf: buffer[start..<(start + n)])
                consume(n)
                phase = .chunked(remaining == n ? .dataEnd : .data(remaining: remaining - n))
            case .dataEnd:
                guard let line = try takeLine(limit: 2, tooLong: HTTP1Failure(400, "chunk data is not followed by CRLF")) else { return nil }
                guard line.isEmpty else { throw HTTP1Failure(400, "chunk data is not followed by CRLF") }
                phase = .chunked(.size)
            case .trailers(let bytes):
                let room = limits.maxHeaderBytes - bytes
                guard
                    let line = try takeLine(
                        limit: room, tooLong: HTTP1Failure(431, "the trailer section is larger than \(HTTP1Syntax.size(limits.maxHeaderBytes))"))
                else { return nil }
                if line.isEmpty {
                    phase = .head
                    let body = decoded
                    decoded = []
                    return body
                }
                // Trailer fields are read and dropped (nothing here needs them), but must be well-formed.
                _ = try HTTP1Syntax.fieldLine(line)
                phase = .chunked(.trailers(bytes: bytes + line.count + 2))
            }
        }
        return nil
    }

    /// The next line without its terminator (CRLF, or a bare LF: RFC 9112 §2.2), nil until
    /// one is complete. Throws `tooLong` when `limit` bytes pass without a line feed.
    private mutating func takeLine(limit: Int, tooLong: HTTP1Failure) throws(HTTP1Failure) -> ArraySlice<UInt8>? {
        let from = max(scan, start)
        guard let lf = buffer[from...].firstIndex(of: 0x0A) else {
            scan = buffer.count
            if buffer.count - start > limit { throw tooLong }
            return nil
        }
        if lf - start > limit { throw tooLong }
        var end = lf
        if end > start && buffer[end - 1] == 0x0D { end -= 1 }
        let line = buffer[start..<end]
        if line.contains(0x0D) { throw HTTP1Failure(400, "a bare CR in the message") }
        consume(lf + 1 - start)
        return line
    }

    private mutating func consume(_ count: Int) {
        start += count
        scan = max(scan, start)
        headLineStart = start
        // Compact now and then rather than shifting the buffer for every request.
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.capacity <= 1 << 20)
            start = 0
            scan = 0
            headLineStart = 0
        } else if start > 64 * 1024 && start > buffer.count / 2 {
            buffer.removeFirst(start)
            scan -= start
            start = 0
            headLineStart = 0
        }
    }

    // MARK: Pure helpers

    static func headTooLarge(_ limits: Limits) -> HTTP1Failure {
        HTTP1Failure(431, "request line and header fields are larger than \(HTTP1Syntax.size(limits.maxHeaderBytes))")
    }

    /// Skips the empty lines (LF or CRLF) before a request line, and nothing else: a line of
    /// bare CRs is not empty, and must reach the request-line check.
    static func firstNonEmptyLine(_ buffer: [UInt8], from start: Int) -> Int {
        var i = start
        while true {
            if i < buffer.count, buffer[i] == 0x0A {
                i += 1
            } else if i + 1 < buffer.count, buffer[i] == 0x0D, buffer[i + 1] == 0x0A {
                i += 2
            } else {
                return i
            }
        }
    }

    /// Parses the head (request line and field lines, without the empty line ending it).
    static func parseHead(_ bytes: ArraySlice<UInt8>, limits: Limits) throws(HTTP1Failure) -> HTTP1RequestHead {
        var lines: [ArraySlice<UInt8>] = []
        var lineStart = bytes.startIndex
        for i in bytes.indices where bytes[i] == 0x0A {
            lines.append(bytes[lineStart..<i])
            lineStart = i + 1
        }
        if lineStart < bytes.endIndex { lines.append(bytes[lineStart..<bytes.endIndex]) }
        lines = lines.map { $0.last == 0x0D ? $0.dropLast() : $0 }
        guard let requestLine = lines.first else { throw HTTP1Failure(400, "empty request") }
        let (method, target, minor) = try HTTP1Syntax.requestLine(requestLine)
        var fields: [(name: String, value: String)] = []
        for line in lines.dropFirst() {
            if line.first == 0x20 || line.first == 0x09 {
                throw HTTP1Failure(400, "obsolete line folding (a field line starting with whitespace) is not accepted")
            }
            fields.append(try HTTP1Syntax.fieldLine(line))
        }
        var head = HTTP1RequestHead(method: method, target: target, minorVersion: minor, fields: fields, framing: .none)
        try checkHost(head)
        head.framing = try framing(head, limits: limits)
        return head
    }

    /// RFC 9112 §3.2: exactly one Host in HTTP/1.1 (at most one in 1.0), and a valid one.
    static func checkHost(_ head: HTTP1RequestHead) throws(HTTP1Failure) {
        let hosts = head.fields("host")
        if hosts.count > 1 { throw HTTP1Failure(400, "more than one Host header field") }
        if hosts.isEmpty && head.minorVersion == 1 && HTTP1Syntax.absoluteForm(head.target) == nil {
            throw HTTP1Failure(400, "an HTTP/1.1 request needs a Host header field")
        }
        if let host = hosts.first, HostName.parse(authority: host) == nil {
            throw HTTP1Failure(400, "the Host header field is not a valid host[:port]")
        }
    }

    /// RFC 9112 §6: how long the body is.
    static func framing(_ head: HTTP1RequestHead, limits: Limits) throws(HTTP1Failure) -> HTTP1RequestHead.Framing {
        let lengths = head.fields("content-length")
        let codings = head.tokens("transfer-encoding")
        if !head.fields("transfer-encoding").isEmpty {
            if head.minorVersion == 0 {
                throw HTTP1Failure(400, "Transfer-Encoding is not allowed in an HTTP/1.0 request")
            }
            if !lengths.isEmpty {
                throw HTTP1Failure(400, "a request must not have both Transfer-Encoding and Content-Length")
            }
            // §6.3: unless chunked is the final coding the length cannot be known.
            guard codings.last == "chunked", codings.filter({ $0 == "chunked" }).count == 1 else {
                throw HTTP1Failure(400, "Transfer-Encoding must end with chunked, once; send the body with Content-Length, or chunked")
            }
            guard codings.count == 1 else {
                throw HTTP1Failure(
                    501,
                    "Transfer-Encoding '\(HTTP1Syntax.printable(codings.joined(separator: ", ")))' is not supported; send the body with Content-Length, or just chunked"
                )
            }
            return .chunked
        }
        guard let text = lengths.first else { return .none }
        if lengths.count > 1 { throw HTTP1Failure(400, "more than one Content-Length header field") }
        guard !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let length = Int(text) else {
            throw HTTP1Failure(400, "invalid Content-Length '\(HTTP1Syntax.printable(text))'")
        }
        guard length <= limits.maxBodyBytes else {
            throw HTTP1Failure(413, "request body larger than \(HTTP1Syntax.size(limits.maxBodyBytes))")
        }
        return length == 0 ? .none : .length(length)
    }

    /// `1*HEXDIG [BWS ";" chunk-ext]` (RFC 9112 §7.1); extensions are ignored.
    static func chunkSize(_ line: ArraySlice<UInt8>) throws(HTTP1Failure) -> Int {
        var size = 0
        var digits = 0
        var i = line.startIndex
        while i < line.endIndex, let digit = HTTP1Syntax.hexValue(line[i]) {
            guard digits < 15 else { throw HTTP1Failure(413, "chunk size too large") }
            size = size * 16 + digit
            digits += 1
            i += 1
        }
        guard digits > 0 else { throw HTTP1Failure(400, "malformed chunk size") }
        while i < line.endIndex && (line[i] == 0x20 || line[i] == 0x09) { i += 1 }
        guard i == line.endIndex || line[i] == 0x3B else { throw HTTP1Failure(400, "malformed chunk size") }
        return size
    }
}

/// Byte-level grammar of RFC 9110/9112.
public enum HTTP1Syntax {

    static func hexValue(_ c: UInt8) -> Int? {
        switch c {
        case 0x30...0x39: return Int(c - 0x30)
        case 0x41...0x46: return Int(c - 0x41 + 10)
        case 0x61...0x66: return Int(c - 0x61 + 10)
        default: return nil
        }
    }

    /// `method SP request-target SP HTTP-version`.
    static func requestLine(_ line: ArraySlice<UInt8>) throws(HTTP1Failure) -> (String, String, Int) {
        let parts = line.split(separator: 0x20, omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, parts[0].allSatisfy(HTTPSyntax.isTokenChar),
            !parts[1].isEmpty, parts[1].allSatisfy({ $0 > 0x20 && $0 < 0x7F })
        else {
            throw HTTP1Failure(400, "malformed request line")
        }
        let version = Array(parts[2])
        guard version.count == 8, version.starts(with: Array("HTTP/".utf8)), version[6] == UInt8(ascii: "."),
            (0x30...0x39).contains(version[5]), (0x30...0x39).contains(version[7])
        else {
            throw HTTP1Failure(400, "malformed request line")
        }
        guard version[5] == UInt8(ascii: "1"), version[7] <= UInt8(ascii: "1") else {
            throw HTTP1Failure(505, "only HTTP/1.1 and HTTP/1.0 are spoken here")
        }
        return (String(decoding: parts[0], as: UTF8.self), String(decoding: parts[1], as: UTF8.self), Int(version[7] - 0x30))
    }

    /// `field-name ":" OWS field-value OWS`, with no whitespace before the colon (RFC 9112 §5.1).
    static func fieldLine(_ line: ArraySlice<UInt8>) throws(HTTP1Failure) -> (name: String, value: String) {
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { throw HTTP1Failure(400, "a header line without a colon") }
        let name = line[line.startIndex..<colon]
        guard !name.isEmpty else { throw HTTP1Failure(400, "a header field without a name") }
        guard name.allSatisfy(HTTPSyntax.isTokenChar) else {
            if name.last == 0x20 || name.last == 0x09 {
                throw HTTP1Failure(400, "whitespace between a header field name and its colon")
            }
            throw HTTP1Failure(400, "a header field name with characters other than letters, digits and !#$%&'*+-.^_`|~")
        }
        var value = line[(colon + 1)...]
        while let first = value.first, first == 0x20 || first == 0x09 { value = value.dropFirst() }
        while let last = value.last, last == 0x20 || last == 0x09 { value = value.dropLast() }
        // VCHAR, SP, HTAB and obs-text only: no NUL, CR, LF or other controls (RFC 9110 §5.5).
        guard value.allSatisfy({ $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }) else {
            throw HTTP1Failure(400, "a control character in the value of \(String(decoding: name, as: UTF8.self))")
        }
        return (String(decoding: name, as: UTF8.self).lowercased(), String(decoding: value, as: UTF8.self))
    }

    /// `http://authority/rest` → (scheme, authority, rest); nil for other forms.
    static func absoluteForm(_ target: String) -> (String, String, String)? {
        let lower = target.lowercased()
        for scheme in ["http", "https"] where lower.hasPrefix(scheme + "://") {
            let afterScheme = target.dropFirst(scheme.count + 3)
            let end = afterScheme.firstIndex { $0 == "/" || $0 == "?" } ?? afterScheme.endIndex
            let authority = String(afterScheme[..<end])
            var rest = String(afterScheme[end...])
            if !rest.hasPrefix("/") { rest = "/" + rest }
            return (scheme, authority, rest)
        }
        return nil
    }

    public static func trimmed(_ text: Substring) -> String {
        String(text.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }

    /// For messages: control characters shown as `?`.
    public static func printable(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.prefix(64).map { $0.value < 0x20 || $0.value == 0x7F ? "?" : $0 }))
    }

    public static func size(_ bytes: Int) -> String {
        bytes % (1 << 20) == 0 ? "\(bytes >> 20) MiB" : bytes % 1024 == 0 ? "\(bytes >> 10) KiB" : "\(bytes) bytes"
    }
}
