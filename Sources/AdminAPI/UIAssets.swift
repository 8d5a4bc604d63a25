import HTTP1Server

/// Files served by the admin listener, embedded in the binary: the EmbedAssets build-tool plugin
/// (Plugins/) generates `files` (ui/*: name -> (Content-Type, text)) and `openAPI`
/// (docs/openapi.json) from the repository's files at build time.
enum UIAssets {
    static func response(for name: String) -> HTTP1ServerResponse {
        guard let (type, text) = files[name] else { return .error(404, "no such file: \(name)") }
        return HTTP1ServerResponse(status: 200, headers: [("Content-Type", type), ("Cache-Control", "no-cache")], body: Array(text.utf8))
    }
}
