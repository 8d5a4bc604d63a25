/// One header field, as HTTP/2 carries it and as the emulator keeps it: the same value from
/// the wire (`HTTP2`) through the request path into the journal record (`APNsCore`), so a
/// request's fields are one array, handed on rather than copied field by field.
///
/// `name` should be lower-case (HTTP/2 sends names lower-case). Strings are UTF-8.
public struct HeaderField: Sendable, Hashable {
    public var name: String
    public var value: String
    /// Encode as "literal header field never indexed" (RFC 7541 §6.2.3). On received fields
    /// this reports whether the peer sent the field that way. Not kept in stored records.
    public var neverIndex: Bool

    public init(name: String, value: String, neverIndex: Bool = false) {
        self.name = name
        self.value = value
        self.neverIndex = neverIndex
    }

    public init(_ name: String, _ value: String, neverIndex: Bool = false) {
        self.init(name: name, value: value, neverIndex: neverIndex)
    }
}
