import Foundation
import PackagePlugin

/// Build-tool plugin of AdminAPI and Conformance. For AdminAPI it embeds the web UI (ui/*) and the OpenAPI document
/// (docs/openapi.json) in the binary. It runs embed-assets-tool, which writes one Swift file of
/// string literals (UIAssets.files, UIAssets.openAPI) into the build directory. The files are
/// the command's inputs, so editing one rebuilds; nothing generated is committed. Which files
/// there are is read when SwiftPM plans the build, and it plans again only when the package's
/// structure changes (ui/ is no target's directory): after adding or removing a file in ui/,
/// `touch Package.swift` (else the new file is missing, or the build stops at the removed one;
/// AdminContractTests.embeddedAssetsAreTheRepositorysFiles tells).
@main
struct EmbedAssets: BuildToolPlugin {
    /// The file types the UI may use; others in ui/ are not served.
    static let extensions: Set<String> = ["html", "js", "css", "svg", "json"]

    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let root = context.package.directoryURL
        if target.name == "Conformance" { return try catalogueCommand(context: context, root: root) }
        let ui = root.appending(path: "ui", directoryHint: .isDirectory)
        let openAPI = root.appending(path: "docs/openapi.json", directoryHint: .notDirectory)
        let files = try FileManager.default.contentsOfDirectory(atPath: ui.path(percentEncoded: false))
            .sorted()
            .map { ui.appending(path: $0, directoryHint: .notDirectory) }
            .filter { Self.extensions.contains($0.pathExtension) }
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedAssets.swift", directoryHint: .notDirectory)
        return [
            .buildCommand(
                displayName: "Embedding ui/ and docs/openapi.json in \(target.name)",
                executable: try context.tool(named: "embed-assets-tool").url,
                arguments: [output.path(percentEncoded: false), openAPI.path(percentEncoded: false)]
                    + files.map { $0.path(percentEncoded: false) },
                inputFiles: [openAPI] + files,
                outputFiles: [output])
        ]
    }

    /// Conformance: conformance/catalogue.json as `embeddedCatalogue`, so the binary carries the
    /// catalogue it was built with.
    private func catalogueCommand(context: PluginContext, root: URL) throws -> [Command] {
        let catalogue = root.appending(path: "conformance/catalogue.json", directoryHint: .notDirectory)
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedCatalogue.swift", directoryHint: .notDirectory)
        return [
            .buildCommand(
                displayName: "Embedding conformance/catalogue.json in Conformance",
                executable: try context.tool(named: "embed-assets-tool").url,
                arguments: ["--catalogue", output.path(percentEncoded: false), catalogue.path(percentEncoded: false)],
                inputFiles: [catalogue],
                outputFiles: [output])
        ]
    }
}
