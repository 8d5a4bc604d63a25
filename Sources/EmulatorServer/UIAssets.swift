/// Files served by the admin listener, embedded in the binary (see scripts/embed-assets).
enum UIAssets {
    static func response(for name: String) -> AdminResponse {
        guard let (type, text) = files[name] else { return .error(404, "no such file: \(name)") }
        return AdminResponse(status: 200, headers: [("Content-Type", type), ("Cache-Control", "no-cache")], body: Array(text.utf8))
    }
}
