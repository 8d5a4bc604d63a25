// Fuzz target: the HTTP/1.1 request parser (the admin listener's). The same bytes must give
// the same requests (or the same refusal) whether they arrive at once or in small pieces.

@testable import HTTP1Server

func fuzzHTTP1(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let piece = Int(data[0] % 16) + 1
    let bytes = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    let whole = parseAll(bytes, pieceSize: bytes.count + 1)
    let pieces = parseAll(bytes, pieceSize: piece)
    if whole != pieces { fatalError("\(piece)-byte pieces parse differently: \(pieces) vs \(whole)") }
    return 0
}

/// Every request (method, target, field count, body) or the failure, as text.
func parseAll(_ bytes: [UInt8], pieceSize: Int) -> [String] {
    var parser = HTTP1RequestParser(
        limits: HTTP1RequestParser.Limits(
            maxHeaderBytes: 2048, maxBodyBytes: 4096,
            maxChunkLineBytes: 256))
    var out: [String] = []
    var offset = 0
    var head: HTTP1RequestHead?
    repeat {
        let end = min(offset + pieceSize, bytes.count)
        parser.append(bytes[offset..<end])
        offset = end
        do {
            while true {
                if head == nil { head = try parser.nextHead() }
                guard let current = head else { break }
                guard let body = try parser.nextBody() else { break }
                out.append("\(current.method) \(current.target) \(current.fields.count) \(body.count)")
                head = nil
            }
        } catch {
            out.append("failure \(error)")
            return out
        }
    } while offset < bytes.count
    return out
}
