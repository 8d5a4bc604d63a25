@testable import AdminAPI
import APNsCore
@testable import EmulatorServer
import Foundation
import Testing

@Suite("Admin API contract")
struct AdminContractTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    func routes() throws -> [(method: String, pattern: String)] {
        let configuration = try ServeConfiguration.resolve(arguments: ["--demo", "off", "--quiet"], environment: [:])
        let emulator = try Emulator(configuration: configuration)
        return emulator.adminService.router.routes.map { ($0.method, $0.pattern) }
    }

    /// docs/openapi.json describes exactly the routes the server has.
    @Test func openAPIDocumentMatchesTheRoutes() throws {
        let text = try String(contentsOf: Self.root.appendingPathComponent("docs/openapi.json"), encoding: .utf8)
        let document = try JSONValue.parse(text)
        var documented = Set<String>()
        for (path, item) in try #require(document["paths"]?.objectValue) {
            for (method, _) in try #require(item.objectValue) { documented.insert("\(method.uppercased()) \(path)") }
        }
        let served = Set(try routes().map { "\($0.method) \($0.pattern)" })
        #expect(served.subtracting(documented).isEmpty, "routes missing from docs/openapi.json")
        #expect(documented.subtracting(served).isEmpty, "docs/openapi.json documents routes the server lacks")
        // The served copy is the repository's.
        #expect(UIAssets.openAPI == text)
    }
}
