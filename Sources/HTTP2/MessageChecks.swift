// The RFC 9113 §8 message checks nghttp2's "HTTP messaging" makes on a request, made here
// instead (the server session turns nghttp2's off, `nghttp2_option_set_no_http_messaging`):
// nghttp2 scans every byte of every field on every request, while a field equal to the one
// the connection's last request had at its position is judged here by the class noted for it
// (`RecentHeaderFields`), without looking at its bytes again. Same rules, same outcomes
// (nghttp2 1.52's lib/nghttp2_http.c, with its leading/trailing whitespace check off).

import Glibc

/// What a header field is, as far as the message checks go: judged from its bytes alone, so
/// it can be kept with the field's bytes and reused for the same field later.
struct FieldClass: Equatable {
    var token: UInt8
    /// `MessageCheck` flags the field's value brings (a method, a kind of path or scheme).
    var valueFlags: UInt16

    static let regular: UInt8 = 0
    static let authority: UInt8 = 1
    static let method: UInt8 = 2
    static let path: UInt8 = 3
    static let scheme: UInt8 = 4
    static let protocolHeader: UInt8 = 5
    static let host: UInt8 = 6
    static let contentLength: UInt8 = 7
    /// Not allowed anywhere: a bad name or value, a connection-specific field, `te` other than
    /// "trailers", an unknown or empty pseudo-header, a content-length that is no number.
    static let invalid: UInt8 = 8

    static let invalidField = FieldClass(token: invalid, valueFlags: 0)

    var isPseudo: Bool { token >= Self.authority && token <= Self.protocolHeader }

    /// A field's class from its bytes (nghttp2_http_on_header's byte checks).
    static func of(
        name: UnsafePointer<UInt8>?, nameLength: Int, value: UnsafePointer<UInt8>?, valueLength: Int
    ) -> FieldClass {
        guard nameLength > 0, let name else { return .invalidField }
        let value = value ?? UnsafePointer(bitPattern: 1)!
        if name[0] == UInt8(ascii: ":") {
            switch nameLength {
            case 5 where same(name, ":path"):
                guard valueLength > 0, all(value, valueLength, ByteClass.path) else { return .invalidField }
                let flags =
                    value[0] == UInt8(ascii: "/")
                    ? MessageCheck.pathRegular : valueLength == 1 && value[0] == UInt8(ascii: "*") ? MessageCheck.pathAsterisk : 0
                return FieldClass(token: path, valueFlags: flags)
            case 7 where same(name, ":method"):
                guard valueLength > 0, all(value, valueLength, ByteClass.method) else { return .invalidField }
                var flags: UInt16 = 0
                if valueLength == 4, same(value, "HEAD") { flags = MessageCheck.methodHead }
                if valueLength == 7, same(value, "CONNECT") { flags = MessageCheck.methodConnect }
                if valueLength == 7, same(value, "OPTIONS") { flags = MessageCheck.methodOptions }
                return FieldClass(token: method, valueFlags: flags)
            case 7 where same(name, ":scheme"):
                guard isScheme(value, valueLength) else { return .invalidField }
                let http = (valueLength == 4 && sameIgnoringCase(value, "http")) || (valueLength == 5 && sameIgnoringCase(value, "https"))
                return FieldClass(token: scheme, valueFlags: http ? MessageCheck.schemeHTTP : 0)
            case 9 where same(name, ":protocol"):
                // Not blank (nghttp2's check when surrounding whitespace is allowed), valid bytes.
                var blank = true
                for i in 0..<valueLength where value[i] != 0x20 && value[i] != 0x09 { blank = false }
                guard !blank, all(value, valueLength, ByteClass.value) else { return .invalidField }
                return FieldClass(token: protocolHeader, valueFlags: 0)
            case 10 where same(name, ":authority"):
                guard valueLength > 0, all(value, valueLength, ByteClass.authority) else { return .invalidField }
                return FieldClass(token: authority, valueFlags: 0)
            default:
                return .invalidField
            }
        }
        guard all(name, nameLength, ByteClass.name) else { return .invalidField }
        switch nameLength {
        case 2 where same(name, "te"):
            guard valueLength == 8, sameIgnoringCase(value, "trailers") else { return .invalidField }
        case 4 where same(name, "host"):
            guard valueLength > 0, all(value, valueLength, ByteClass.authority) else { return .invalidField }
            return FieldClass(token: host, valueFlags: 0)
        case 14 where same(name, "content-length"):
            guard parseContentLength(value, valueLength) >= 0 else { return .invalidField }
            return FieldClass(token: contentLength, valueFlags: 0)
        case 7 where same(name, "upgrade"), 10 where same(name, "connection"), 10 where same(name, "keep-alive"),
            16 where same(name, "proxy-connection"), 17 where same(name, "transfer-encoding"):
            return .invalidField
        default:
            break
        }
        guard all(value, valueLength, ByteClass.value) else { return .invalidField }
        return FieldClass(token: regular, valueFlags: 0)
    }

    /// nghttp2's `parse_uint`: decimal digits only, at least one, no overflow; -1 otherwise.
    static func parseContentLength(_ bytes: UnsafePointer<UInt8>?, _ count: Int) -> Int64 {
        guard count > 0, let bytes else { return -1 }
        var n: Int64 = 0
        for i in 0..<count {
            let digit = Int64(bytes[i]) - 0x30
            guard digit >= 0, digit <= 9 else { return -1 }
            let (times, o1) = n.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(digit)
            if o1 || o2 { return -1 }
            n = sum
        }
        return n
    }

    @inline(__always)
    private static func same(_ bytes: UnsafePointer<UInt8>, _ literal: StaticString) -> Bool {
        memcmp(bytes, literal.utf8Start, literal.utf8CodeUnitCount) == 0
    }

    private static func sameIgnoringCase(_ bytes: UnsafePointer<UInt8>, _ lowercase: StaticString) -> Bool {
        let expected = lowercase.utf8Start
        for i in 0..<lowercase.utf8CodeUnitCount {
            let c = bytes[i]
            if (c >= 0x41 && c <= 0x5A ? c | 0x20 : c) != expected[i] { return false }
        }
        return true
    }

    /// nghttp2's `check_scheme`: a letter, then letters, digits, "+", "-" or ".".
    private static func isScheme(_ bytes: UnsafePointer<UInt8>, _ count: Int) -> Bool {
        guard count > 0 else { return false }
        for i in 0..<count {
            let c = bytes[i]
            if (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) { continue }
            if i == 0 { return false }
            if !((c >= 0x30 && c <= 0x39) || c == 0x2B || c == 0x2D || c == 0x2E) { return false }
        }
        return true
    }

    @inline(__always)
    private static func all(_ bytes: UnsafePointer<UInt8>, _ count: Int, _ bit: UInt8) -> Bool {
        ByteClass.table.withUnsafeBufferPointer { table in
            var seen: UInt8 = 0xFF
            for i in 0..<count { seen &= table[Int(bytes[i])] }
            return seen & bit != 0
        }
    }
}

/// The byte classes of nghttp2 1.52's lib/nghttp2_helper.c tables, one bit each.
enum ByteClass {
    /// A header name's characters (lower-case tchar).
    static let name: UInt8 = 0x01
    /// A value's characters (HTAB, SP, VCHAR, obs-text).
    static let value: UInt8 = 0x02
    /// A method's characters (tchar).
    static let method: UInt8 = 0x04
    /// `:path` characters (VCHAR, obs-text).
    static let path: UInt8 = 0x08
    /// `:authority` and `host` characters.
    static let authority: UInt8 = 0x10

    static let table: [UInt8] = [
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x02, 0x1f, 0x0a, 0x0f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1a, 0x1a, 0x1f, 0x1f, 0x1a, 0x1f, 0x1f, 0x0a,
        0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1a, 0x1a, 0x0a, 0x1a, 0x0a, 0x0a,
        0x1a, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e,
        0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1e, 0x1a, 0x0a, 0x1a, 0x0f, 0x1f,
        0x0f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f,
        0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x0a, 0x0f, 0x0a, 0x1f, 0x00,
        0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a,
        0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a,
        0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a,
        0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a,
        0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a,
        0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a,
        0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a,
        0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a,
    ]
}

/// What nghttp2's HTTP messaging kept of a request stream (its `http_flags`, content-length
/// and the body bytes received).
struct MessageCheck {
    var flags: UInt16 = 0
    var contentLength: Int64 = -1
    var received: Int64 = 0
    /// Reset for a body longer or shorter than its content-length: nothing more of it counts.
    var bodyRefused = false

    static let authority: UInt16 = 1 << 0
    static let method: UInt16 = 1 << 1
    static let path: UInt16 = 1 << 2
    static let scheme: UInt16 = 1 << 3
    static let protocolHeader: UInt16 = 1 << 4
    static let host: UInt16 = 1 << 5
    static let pseudoDisallowed: UInt16 = 1 << 6
    static let methodHead: UInt16 = 1 << 7
    static let methodConnect: UInt16 = 1 << 8
    static let methodOptions: UInt16 = 1 << 9
    static let pathRegular: UInt16 = 1 << 10
    static let pathAsterisk: UInt16 = 1 << 11
    static let schemeHTTP: UInt16 = 1 << 12

    /// Takes one field of the request's header block (or of its trailers); false when nghttp2
    /// would reset the stream for it (`http_request_on_header`).
    @inline(__always)
    mutating func accept(
        _ field: FieldClass, value: UnsafePointer<UInt8>?, valueLength: Int, trailer: Bool, connectProtocol: Bool
    ) -> Bool {
        let token = field.token
        if token == FieldClass.regular {
            flags |= Self.pseudoDisallowed
            return true
        }
        if field.isPseudo {
            if trailer || flags & Self.pseudoDisallowed != 0 { return false }
            if token == FieldClass.protocolHeader, !connectProtocol { return false }
        }
        if token <= FieldClass.host {
            // A pseudo-header or host, once each (an empty value is an invalid class).
            let bit: UInt16 = 1 << (token - 1)
            if flags & bit != 0 { return false }
            flags |= bit | field.valueFlags
        } else if token == FieldClass.contentLength {
            if contentLength != -1 { return false }
            contentLength = FieldClass.parseContentLength(value, valueLength)
        } else {
            return false
        }
        if !field.isPseudo { flags |= Self.pseudoDisallowed }
        return true
    }

    /// The request's header block has ended (`nghttp2_http_on_request_headers`): false when it
    /// lacks what a request needs.
    mutating func acceptRequestHeaders() -> Bool {
        if flags & Self.protocolHeader == 0 && flags & Self.methodConnect != 0 {
            if flags & (Self.scheme | Self.path) != 0 || flags & Self.authority == 0 { return false }
            // A CONNECT's content-length says nothing about its DATA.
            contentLength = -1
            return true
        }
        let required = Self.method | Self.path | Self.scheme
        if flags & required != required || flags & (Self.authority | Self.host) == 0 { return false }
        if flags & Self.protocolHeader != 0, flags & Self.methodConnect == 0 || flags & Self.authority == 0 { return false }
        // For http(s) the path starts with "/", or is "*" for OPTIONS.
        if flags & Self.schemeHTTP != 0, flags & Self.pathRegular == 0,
            flags & Self.methodOptions == 0 || flags & Self.pathAsterisk == 0
        {
            return false
        }
        return true
    }

    /// The stream's END_STREAM came (`nghttp2_http_on_remote_end_stream`).
    var bodyMatchesLength: Bool { contentLength == -1 || contentLength == received }

    /// DATA arrived (`nghttp2_http_on_data_chunk`): false once the body is over its length.
    @inline(__always)
    mutating func acceptData(_ count: Int) -> Bool {
        received += Int64(count)
        return contentLength == -1 || received <= contentLength
    }
}
