@testable import EmulatorServer
import Networking
import Testing

@Suite("Banner")
struct BannerTests {
    /// In a container the emulator listens on every interface; the printed commands must
    /// still be ones that work from the same machine.
    @Test func wildcardListenersArePrintedAsLoopback() throws {
        var bound = BoundAddresses()
        bound.listen = [try HostPort(parsing: "0.0.0.0:443"), try HostPort(parsing: "10.0.0.5:2197")]
        bound.admin = try HostPort(parsing: "0.0.0.0:8197")
        bound.device = try HostPort(parsing: "[::]:5223")
        bound.sandbox = try HostPort(parsing: "127.0.0.1:2197")
        let shown = Banner.reachable(bound)
        #expect(shown.listen.map(\.description) == ["127.0.0.1:443", "10.0.0.5:2197"])
        #expect(shown.admin?.description == "127.0.0.1:8197")
        #expect(shown.device?.description == "[::1]:5223")
        #expect(shown.sandbox?.description == "127.0.0.1:2197")
        #expect(shown.production == nil)
    }
}
