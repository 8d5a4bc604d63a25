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

    /// The document says `3.0.3`, so it keeps to 3.0's forms, which code generators and strict
    /// validators read: `nullable` beside a `type` (3.1's `"type": [..., "null"]` is refused,
    /// and `nullable` without a `type` means nothing); and every operation that changes
    /// something lists the 415 a wrong Content-Type gets.
    @Test func openAPIDocumentKeepsToVersion303() throws {
        let text = try String(contentsOf: Self.root.appendingPathComponent("docs/openapi.json"), encoding: .utf8)
        let document = try JSONValue.parse(text)
        #expect(document["openapi"]?.stringValue == "3.0.3")
        var problems: [String] = []
        func walk(_ value: JSONValue, _ path: String) {
            if let object = value.objectValue {
                if object["type"]?.arrayValue != nil { problems.append("\(path): a list of types") }
                if object["nullable"] != nil, object["type"] == nil { problems.append("\(path): nullable without a type") }
                for (key, member) in object { walk(member, path + "/" + key) }
            } else if let array = value.arrayValue {
                for (index, member) in array.enumerated() { walk(member, path + "/\(index)") }
            }
        }
        walk(document, "")
        for (path, item) in try #require(document["paths"]?.objectValue) {
            for (method, operation) in try #require(item.objectValue) where ["post", "put", "patch", "delete"].contains(method) {
                if operation["responses"]?["415"] == nil { problems.append("\(method.uppercased()) \(path): no 415") }
            }
        }
        #expect(problems.isEmpty, "\(problems)")
    }
}
