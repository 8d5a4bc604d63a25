@testable import AdminAPI
import Foundation
import Testing

@Suite("Admin API routes and assets")
struct AdminRouterTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The EmbedAssets plugin serves every file of ui/, as it is, with its type.
    @Test func embeddedAssetsAreTheRepositorysFiles() throws {
        let ui = Self.root.appendingPathComponent("ui")
        let names = try FileManager.default.contentsOfDirectory(atPath: ui.path)
            .filter { ["html", "js", "css", "svg", "json"].contains(URL(fileURLWithPath: $0).pathExtension) }
        #expect(names.count >= 4)
        #expect(Set(UIAssets.files.keys) == Set(names))
        for name in names {
            let text = try String(contentsOf: ui.appendingPathComponent(name), encoding: .utf8)
            #expect(UIAssets.files[name]?.1 == text, "ui/\(name)")
        }
        #expect(UIAssets.files["index.html"]?.0 == "text/html; charset=utf-8")
        #expect(UIAssets.files["app.js"]?.0 == "text/javascript; charset=utf-8")
        #expect(UIAssets.files["style.css"]?.0 == "text/css; charset=utf-8")
        #expect(UIAssets.files["favicon.svg"]?.0 == "image/svg+xml")
    }

    @Test func routerBindsParametersAndTellsWrongMethods() throws {
        var router = AdminRouter()
        router.add("GET", "/api/v1/notifications/latest", "") { _, _, _ in nil }
        router.add("GET", "/api/v1/notifications/{id}", "") { _, _, _ in nil }
        router.add("DELETE", "/api/v1/devices/{deviceId}/apps/{bundleId}", "") { _, _, _ in nil }
        guard case .found(let latest, _) = router.match(method: "GET", path: "/api/v1/notifications/latest") else {
            Issue.record("latest should match")
            return
        }
        #expect(latest.pattern == "/api/v1/notifications/latest")
        guard case .found(_, let parameters) = router.match(method: "DELETE", path: "/api/v1/devices/phone%201/apps/com.example.app") else {
            Issue.record("uninstall should match")
            return
        }
        #expect(parameters == ["deviceId": "phone 1", "bundleId": "com.example.app"])
        guard case .wrongMethod(let allowed) = router.match(method: "POST", path: "/api/v1/notifications/x") else {
            Issue.record("expected wrong method")
            return
        }
        #expect(allowed == ["GET"])
        guard case .notFound = router.match(method: "GET", path: "/api/v2/x") else {
            Issue.record("expected not found")
            return
        }
    }

    /// An id left empty (`DELETE /api/v1/faults/$ID` with ID unset) is not the path without
    /// it: `DELETE /api/v1/faults` removes every rule.
    @Test func anEmptyPathSegmentMatchesNoRoute() {
        var router = AdminRouter()
        router.add("DELETE", "/api/v1/faults", "") { _, _, _ in nil }
        router.add("DELETE", "/api/v1/faults/{id}", "") { _, _, _ in nil }
        router.add("DELETE", "/api/v1/apps/{bundleId}/backend", "") { _, _, _ in nil }
        router.add("GET", "/", "") { _, _, _ in nil }
        for path in ["/api/v1/faults/", "/api/v1/apps//backend", "/api/v1//faults", "//api/v1/faults"] {
            guard case .emptySegment = router.match(method: "DELETE", path: path) else {
                Issue.record("\(path) should match no route")
                continue
            }
        }
        guard case .found(let route, _) = router.match(method: "DELETE", path: "/api/v1/faults") else {
            Issue.record("the path itself matches")
            return
        }
        #expect(route.pattern == "/api/v1/faults")
        guard case .found(let root, _) = router.match(method: "GET", path: "/") else {
            Issue.record("/ matches")
            return
        }
        #expect(root.pattern == "/")
    }
}
