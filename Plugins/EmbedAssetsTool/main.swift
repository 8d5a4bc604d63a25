// embed-assets-tool OUTPUT OPENAPI [UI-FILE...]
// embed-assets-tool --catalogue OUTPUT CATALOGUE
//
// Run by the EmbedAssets build-tool plugin. Writes OUTPUT, a Swift file that embeds the UI
// files (by file name, with their Content-Type) and the OpenAPI document as string literals:
//
//   extension UIAssets {
//       static let files: [String: (String, String)] = ["index.html": ("text/html; ...", ...), ...]
//       static let openAPI = ...
//   }
//
// String literals, not byte arrays (SwiftPM's embedInCode): the type checker takes a literal of
// a few hundred kilobytes in its stride, an array literal of that many elements it does not.
import Foundation

let contentTypes = [
    "html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8", "svg": "image/svg+xml", "json": "application/json",
]

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("embed-assets-tool: \(message)\n".utf8))
    exit(1)
}

func read(_ path: String) -> String {
    guard let data = FileManager.default.contents(atPath: path) else { fail("cannot read \(path)") }
    guard let text = String(data: data, encoding: .utf8) else { fail("\(path) is not UTF-8") }
    return text
}

/// A multi-line raw string literal whose value is exactly `text`. The delimiter has one `#` more
/// than the longest run after a quote or backslash in the text, so nothing in it ends the literal
/// or starts an escape. Characters a literal cannot hold as they are (control characters other
/// than tab and line feed, so also CR, which Swift would turn into LF) become \#u{...} escapes.
func literal(_ text: String) -> String {
    var longest = 0
    var run = -1  // -1: not after a quote or backslash
    for scalar in text.unicodeScalars {
        if scalar == "#", run >= 0 {
            run += 1
            longest = max(longest, run)
        } else {
            run = (scalar == "\"" || scalar == "\\") ? 0 : -1
        }
    }
    let hashes = String(repeating: "#", count: max(4, longest + 1))
    var body = ""
    body.reserveCapacity(text.utf8.count + 64)
    for scalar in text.unicodeScalars {
        switch scalar.value {
        case 0x09, 0x0A: body.unicodeScalars.append(scalar)
        case 0x00...0x1F, 0x7F: body += "\\\(hashes)u{\(String(scalar.value, radix: 16))}"
        default: body.unicodeScalars.append(scalar)
        }
    }
    // The line feed before the closing delimiter is not part of the value, hence one more.
    return hashes + "\"\"\"\n" + body + "\n\"\"\"" + hashes
}

let arguments = CommandLine.arguments.dropFirst()
// embed-assets-tool --catalogue OUTPUT CATALOGUE: the conformance catalogue, for Conformance.
if arguments.first == "--catalogue" {
    guard arguments.count == 3 else { fail("usage: embed-assets-tool --catalogue OUTPUT CATALOGUE") }
    let output = arguments[arguments.startIndex + 1]
    let text =
        "// Generated at build time by the EmbedAssets plugin (Plugins/) from conformance/catalogue.json.\n"
        + "let embeddedCatalogue = \(literal(read(arguments[arguments.startIndex + 2])))\n"
    do { try Data(text.utf8).write(to: URL(fileURLWithPath: output), options: .atomic) } catch { fail("cannot write \(output): \(error)") }
    exit(0)
}
guard arguments.count >= 2 else { fail("usage: embed-assets-tool OUTPUT OPENAPI [UI-FILE...]") }
let output = arguments[arguments.startIndex]
let openAPI = arguments[arguments.startIndex + 1]
let uiFiles = arguments.dropFirst(2).map { URL(fileURLWithPath: $0) }

var lines = [
    "// Generated at build time by the EmbedAssets plugin (Plugins/) from ui/ and docs/openapi.json.",
    "extension UIAssets {",
    "    static let files: [String: (String, String)] = [",
]
for file in uiFiles {
    guard let type = contentTypes[file.pathExtension] else { fail("\(file.lastPathComponent): no Content-Type for this file type") }
    lines.append("        \"\(file.lastPathComponent)\": (\"\(type)\", \(literal(read(file.path)))),")
}
lines.append("    ]")
lines.append("    static let openAPI = \(literal(read(openAPI)))")
lines.append("}")
let text = lines.joined(separator: "\n") + "\n"
do {
    try Data(text.utf8).write(to: URL(fileURLWithPath: output), options: .atomic)
} catch {
    fail("cannot write \(output): \(error)")
}
