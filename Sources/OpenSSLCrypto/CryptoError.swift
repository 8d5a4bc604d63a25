import COpenSSL

/// Error thrown by every fallible operation in this module. `message` says what failed and,
/// where OpenSSL was involved, carries the text of its (thread-local) error queue.
public struct CryptoError: Error, CustomStringConvertible, Sendable {
    public let message: String

    public init(message: String) {
        self.message = message
    }

    public var description: String { "CryptoError: \(message)" }

    /// `context` followed by everything on this thread's OpenSSL error queue, which is emptied
    /// so that stale entries cannot confuse a later `SSL_get_error` on the same thread.
    static func openSSL(_ context: String) -> CryptoError {
        let details = drainOpenSSLErrors()
        return CryptoError(message: details.isEmpty ? context : "\(context): \(details)")
    }
}

/// Pops every entry off this thread's OpenSSL error queue and renders them as one line.
func drainOpenSSLErrors() -> String {
    var parts: [String] = []
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        parts.append(stringFromCString(buffer))
    }
    return parts.joined(separator: "; ")
}

/// Decodes a NUL-terminated C string held in a buffer, without the deprecated
/// `String(cString: [CChar])` overload.
func stringFromCString(_ buffer: [CChar]) -> String {
    buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}

// MARK: - Memory BIO helpers

/// Runs `body` with a read-only memory BIO over `text`'s UTF-8 bytes.
func withReadBIO<T>(_ text: String, _ body: (OpaquePointer) throws -> T) throws -> T {
    var bytes = Array(text.utf8)
    guard bytes.count < Int(Int32.max) else { throw CryptoError(message: "PEM input too large") }
    // BIO_new_mem_buf does not copy: the array must outlive the BIO, hence the closure scope.
    return try bytes.withUnsafeMutableBytes { raw -> T in
        guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else {
            throw CryptoError.openSSL("BIO_new_mem_buf failed")
        }
        defer { BIO_free(bio) }
        return try body(bio)
    }
}

/// Creates a writable memory BIO, lets `body` fill it, and returns its contents as a string.
func stringFromWriteBIO(_ what: String, _ body: (OpaquePointer) -> Bool) throws -> String {
    guard let bio = BIO_new(BIO_s_mem()) else { throw CryptoError.openSSL("BIO_new failed") }
    defer { BIO_free(bio) }
    guard body(bio) else { throw CryptoError.openSSL("writing \(what) failed") }
    var contents: UnsafeMutablePointer<CChar>? = nil
    let length = copenssl_BIO_get_mem_data(bio, &contents)
    guard length > 0, let contents else { throw CryptoError.openSSL("writing \(what) produced no output") }
    let bytes = UnsafeRawBufferPointer(start: contents, count: length)
    return String(decoding: bytes, as: UTF8.self)
}

/// Password callback that always refuses. Without it, OpenSSL's default callback would try to
/// prompt on the controlling terminal when handed an encrypted PEM key.
let refusePassphrase: @convention(c) (UnsafeMutablePointer<CChar>?, Int32, Int32, UnsafeMutableRawPointer?) -> Int32 = { _, _, _, _ in
    -1
}
