/// Reads one answer as its bytes arrive: the head, then the body by its framing
/// (Content-Length, chunked, or the end of the connection). Every step resumes where the
/// previous one stopped, so a large or trickled answer costs linear time.
struct ResponseReader {
    enum Failure: Error {
        case malformed(String)
        /// The connection ended before the answer did.
        case cutShort
    }

    private enum Framing {
        case empty, length(Int), chunked, untilClose
    }

    private struct Head {
        var status: Int
        var reason: String
        var headers: [HTTP1Header]
        var bodyStart: Int
        var framing: Framing
    }

    /// A HEAD request's answer has a head only, whatever its Content-Length says.
    let isHeadRequest: Bool
    private(set) var bytes: [UInt8] = []
    private var head: Head?
    private var searchedUpTo = 0
    private var chunks = ChunkedDecoder()

    init(isHeadRequest: Bool) { self.isHeadRequest = isHeadRequest }

    var hasHead: Bool { head != nil }

    mutating func append(_ data: ArraySlice<UInt8>) { bytes.append(contentsOf: data) }

    /// The answer once it is complete; nil while more must be read. `atEnd`: the peer closed.
    mutating func response(atEnd: Bool) throws(Failure) -> HTTP1Response? {
        guard try readHead(), let head else {
            if atEnd { throw .cutShort }
            return nil
        }
        let body = bytes[head.bodyStart...]
        func answer(_ body: [UInt8]) -> HTTP1Response {
            HTTP1Response(status: head.status, reason: head.reason, headers: head.headers, body: body)
        }
        switch head.framing {
        case .empty:
            return answer([])
        case .length(let length):
            if body.count >= length { return answer(Array(body.prefix(length))) }
        case .untilClose:
            if atEnd { return answer(Array(body)) }
        case .chunked:
            try chunks.advance(body)
            // The final CRLF after the last chunk is as good as read when the peer closes.
            if chunks.isComplete || (atEnd && chunks.hasLastChunk) { return answer(chunks.body) }
        }
        if atEnd { throw .cutShort }
        return nil
    }

    /// The answer as far as it has come, its body at most `bodyLimit` bytes and marked cut;
    /// nil while the head has not come whole.
    mutating func cutResponse(bodyLimit: Int) throws(Failure) -> HTTP1Response? {
        guard try readHead(), let head else { return nil }
        let body: [UInt8]
        switch head.framing {
        case .empty: body = []
        case .length, .untilClose: body = Array(bytes[head.bodyStart...].prefix(bodyLimit))
        case .chunked:
            try chunks.advance(bytes[head.bodyStart...])
            body = Array(chunks.bodySoFar(bytes[head.bodyStart...]).prefix(bodyLimit))
        }
        return HTTP1Response(status: head.status, reason: head.reason, headers: head.headers, body: body, bodyCut: true)
    }

    /// Parses the head once its blank line has come; interim 1xx answers are skipped.
    private mutating func readHead() throws(Failure) -> Bool {
        while head == nil {
            let from = max(0, searchedUpTo - 3)
            guard let end = bytes[from...].firstRange(of: [13, 10, 13, 10]) else {
                searchedUpTo = bytes.count
                return false
            }
            let text = String(decoding: bytes[..<end.lowerBound], as: UTF8.self)
            // "\r\n" is a single Character in Swift, so this splits on line ends.
            let lines = text.split(separator: "\r\n", omittingEmptySubsequences: false)
            let statusLine = lines.first ?? ""
            let parts = statusLine.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), parts[1].count == 3, let status = Int(parts[1]) else {
                throw .malformed("not an HTTP response: \(statusLine.prefix(80))")
            }
            var headers: [HTTP1Header] = []
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":"), colon > line.startIndex,
                    !line[..<colon].contains(where: { $0 == " " || $0 == "\t" })
                else {
                    throw .malformed("a header line that is not 'name: value': \(line.prefix(80))")
                }
                let value = line[line.index(after: colon)...].trimmingSpacesAndTabs
                headers.append(HTTP1Header(String(line[..<colon]), String(value)))
            }
            if (100..<200).contains(status) && status != 101 {
                bytes.removeFirst(end.upperBound)
                searchedUpTo = 0
                continue
            }
            let reason = parts.count > 2 ? String(parts[2]) : ""
            head = Head(
                status: status, reason: reason, headers: headers, bodyStart: end.upperBound,
                framing: try Self.framing(status: status, headers: headers, isHeadRequest: isHeadRequest))
        }
        return true
    }

    /// RFC 9112 §6.3, for a client: no body for HEAD, 1xx, 204 and 304; chunked when it is the
    /// last transfer coding; else Content-Length; else everything up to the close.
    private static func framing(status: Int, headers: [HTTP1Header], isHeadRequest: Bool) throws(Failure) -> Framing {
        if isHeadRequest || status < 200 || status == 204 || status == 304 { return .empty }
        let codings = headers.filter { $0.name.lowercased() == "transfer-encoding" }
            .flatMap { $0.value.split(separator: ",") }
            .map { $0.trimmingSpacesAndTabs.lowercased() }
        if let last = codings.last { return last == "chunked" ? .chunked : .untilClose }
        let lengths = headers.filter { $0.name.lowercased() == "content-length" }
            .flatMap { $0.value.split(separator: ",", omittingEmptySubsequences: false) }
            .map { String($0.trimmingSpacesAndTabs) }
        guard let first = lengths.first else { return .untilClose }
        guard lengths.allSatisfy({ $0 == first }), first.count <= 18, first.allSatisfy(\.isASCIIDigit), let length = Int(first) else {
            throw .malformed("an invalid or conflicting Content-Length: \(lengths.joined(separator: ", "))")
        }
        return .length(length)
    }
}

/// The body of a chunked message, decoded as far as it has arrived.
struct ChunkedDecoder {
    private enum Step {
        case size
        case data(Int)
        /// After the last (empty) chunk: trailer lines up to a blank one.
        case trailer
        case done
    }

    private var step = Step.size
    /// Where decoding resumes, from the start of the body.
    private var offset = 0
    private(set) var body: [UInt8] = []

    var isComplete: Bool { if case .done = step { true } else { false } }

    var hasLastChunk: Bool {
        switch step {
        case .trailer, .done: true
        case .size, .data: false
        }
    }

    /// The chunks decoded and the part of the current one that has come (`input` as last
    /// passed to `advance`).
    func bodySoFar(_ input: ArraySlice<UInt8>) -> [UInt8] {
        guard case .data(let size) = step else { return body }
        let rest = input[(input.startIndex + offset)...]
        return body + rest.prefix(size)
    }

    mutating func advance(_ input: ArraySlice<UInt8>) throws(ResponseReader.Failure) {
        while true {
            let rest = input[(input.startIndex + offset)...]
            switch step {
            case .done:
                return
            case .size:
                guard let lineEnd = rest.firstRange(of: [13, 10]) else { return }
                let digits = rest[..<lineEnd.lowerBound].prefix { $0 != UInt8(ascii: ";") }
                    .filter { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") }
                guard !digits.isEmpty, digits.count <= 15, digits.allSatisfy(\.isHexDigit),
                    let size = Int(String(decoding: digits, as: UTF8.self), radix: 16)
                else {
                    throw .malformed("a chunk size that is not a hexadecimal number")
                }
                offset = lineEnd.upperBound - input.startIndex
                step = size == 0 ? .trailer : .data(size)
            case .data(let size):
                guard rest.count >= size + 2 else { return }
                let end = rest.startIndex + size
                guard rest[end] == 13, rest[end + 1] == 10 else { throw .malformed("a chunk longer than its size") }
                body.append(contentsOf: rest[..<end])
                offset += size + 2
                step = .size
            case .trailer:
                guard let lineEnd = rest.firstRange(of: [13, 10]) else { return }
                offset = lineEnd.upperBound - input.startIndex
                if lineEnd.lowerBound == rest.startIndex { step = .done }
            }
        }
    }
}

extension UInt8 {
    fileprivate var isHexDigit: Bool {
        (48...57).contains(self) || (65...70).contains(self) || (97...102).contains(self)
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}

extension Substring {
    fileprivate var trimmingSpacesAndTabs: Substring {
        guard let first = firstIndex(where: { $0 != " " && $0 != "\t" }),
            let last = lastIndex(where: { $0 != " " && $0 != "\t" })
        else { return self[endIndex...] }
        return self[first...last]
    }
}
