import HTTP1Server

/// Files served by the admin listener, embedded in the binary: the EmbedAssets build-tool plugin
/// (Plugins/) generates `files` (ui/*: name -> (Content-Type, text)) and `openAPI`
/// (docs/openapi.json) from the repository's files at build time.
enum UIAssets {
    static func response(for name: String) -> HTTP1ServerResponse {
        guard let (type, text) = files[name] else { return .error(404, "no such file: \(name)") }
        // Never inside another site's frame: a page on any origin (another localhost port
        // included) could frame the UI and have the user click Reset or Uninstall (clickjacking);
        // the UI's own requests carry its own Origin, so the admin API's Origin check would pass.
        return HTTP1ServerResponse(
            status: 200,
            headers: [
                ("Content-Type", type), ("Cache-Control", "no-cache"), ("X-Frame-Options", "DENY"), ("X-Content-Type-Options", "nosniff"),
                ("Content-Security-Policy", "frame-ancestors 'none'"),
            ],
            body: Array(text.utf8))
    }
}
