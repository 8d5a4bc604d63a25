// Fuzz target: telling HTTP/2 from HTTP/1.x by a connection's first bytes.

import HTTP2

public func fuzzPreface(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if case .http1 = ConnectionPreface.classify(bytes) {
        guard let space = bytes.firstIndex(of: 0x20), space > 0,
            bytes[..<space].allSatisfy({ $0 >= 0x41 && $0 <= 0x5A })
        else { fatalError("HTTP/1 without a method and a space") }
    }
    return 0
}
