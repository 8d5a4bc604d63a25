@testable import APNsCore
@testable import JSON
import Foundation
import Testing

/// Files people write (config, scenario, fault-rule files) are parsed with `parseFile`:
/// stricter than payloads, which stay as lenient as APNs.
@Suite("JSON files: duplicates, BOM, range, size cap")
struct JSONFileTests {
    func fileError(_ text: String) -> JSONParseError? {
        do {
            _ = try JSONValue.parseFile(Array(text.utf8))
            Issue.record("expected an error for \(text)")
            return nil
        } catch {
            return error
        }
    }

    @Test func aDuplicateKeyInAFileIsNamedWithItsPath() {
        let text = #"{"devices": [{"deviceId": "a"}, {"deviceId": "b", "apps": [{"bundleId": "x", "bundleId": "y"}]}]}"#
        let error = fileError(text)
        #expect(error?.message == #"duplicate key "bundleId""#)
        #expect(error?.path == "devices[1].apps[0].bundleId")
        // The offset is the second key's opening quote.
        #expect(error?.offset == text.utf8.count - #""bundleId": "y"}]}]}"#.utf8.count)
        #expect(error?.description.hasPrefix("invalid JSON at byte ") == true)
        #expect(error?.description.hasSuffix(#" (devices[1].apps[0].bundleId): duplicate key "bundleId""#) == true)
        #expect(fileError(#"{"a": 1, "a": 1}"#)?.path == "a")
        #expect(fileError(#"[[1], [{"k": 1, "k": 2}]]"#)?.path == "[1][0].k")
    }

    @Test func aPayloadKeepsItsDuplicateKeysAsAPNsDoes() throws {
        let value = try JSONValue.parse(#"{"aps": {}, "k": 1, "k": 2}"#)
        #expect(value.objectValue?.keys == ["aps", "k", "k"])
        #expect(value["k"] == 2, "the last one counts")
    }

    @Test func aByteOrderMarkStartsAFileButNotAPayload() throws {
        let bytes: [UInt8] = [0xEF, 0xBB, 0xBF] + Array(#"{"maxRecords": 2}"#.utf8)
        #expect(try JSONValue.parseFile(bytes)["maxRecords"] == 2)
        #expect(throws: JSONParseError(offset: 0, message: "unexpected byte 0xEF where a value should start")) { try JSONValue.parse(bytes) }
        // Only at the start: a mark later is still an error, at its own byte.
        let inside = Array("[1, ".utf8) + [0xEF, 0xBB, 0xBF] + Array("2]".utf8)
        #expect(throws: JSONParseError(offset: 4, message: "unexpected byte 0xEF where a value should start", path: "[1]")) {
            try JSONValue.parseFile(inside)
        }
    }

    @Test(arguments: ["1e400", "-1e400", String(repeating: "9", count: 400)])
    func aNumberBeyondADoubleIsAnErrorInAFile(number: String) throws {
        let error = fileError(#"{"priority": \#(number)}"#)
        #expect(error?.offset == 13)
        #expect(error?.path == "priority")
        #expect(error?.message.hasSuffix("is out of range (beyond ±1.8e308)") == true, "\(String(describing: error))")
        #expect(error?.message.contains("…") == (number.count > 40), "a long number is cut short")
        // A payload's stays what it always was: infinity (written out as null).
        #expect(try JSONValue.parse(#"{"priority": \#(number)}"#)["priority"]?.numberValue?.isInfinite == true)
    }

    @Test func errorsInAPayloadSayNoPath() {
        #expect(throws: JSONParseError(offset: 13, message: "invalid literal")) { try JSONValue.parse(#"{"a": [1, tru]}"#) }
        #expect(fileError(#"{"a": [1, tru]}"#) == JSONParseError(offset: 13, message: "invalid literal", path: "a[1]"))
    }
}

@Suite("Input files: the size cap")
struct InputFileTests {
    func temporaryFile(_ bytes: [UInt8]) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("input-\(UUID().uuidString)").path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test func aFileWithinTheCapIsReadWhole() throws {
        let bytes = (0..<200_000).map { UInt8(truncatingIfNeeded: $0) }
        let path = try temporaryFile(bytes)
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(try InputFile.read(path) == bytes)
        #expect(try InputFile.read(path, limit: bytes.count) == bytes, "exactly the cap is allowed")
    }

    @Test func aLargerFileIsRefusedFromItsSize() throws {
        let path = try temporaryFile([])
        defer { try? FileManager.default.removeItem(atPath: path) }
        // Sparse: 200 MiB that take no disk and, refused from the size, are never read.
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.truncate(atOffset: 200 << 20)
        try handle.close()
        #expect(throws: InputFile.ReadError.tooLarge(size: 200 << 20, limit: InputFile.maxBytes)) { try InputFile.read(path) }
        #expect(
            InputFile.ReadError.tooLarge(size: 200 << 20, limit: InputFile.maxBytes).description
                == "the file is 209715200 bytes (200 MiB), over the limit of 16777216 bytes (16 MiB)")
        let small = try temporaryFile(Array(repeating: 0x20, count: 11))
        defer { try? FileManager.default.removeItem(atPath: small) }
        #expect(throws: InputFile.ReadError.tooLarge(size: 11, limit: 10)) { try InputFile.read(small, limit: 10) }
    }

    @Test func aPipeIsCutOffOnceOverTheCap() throws {
        // No size to go by: the reading stops once past the cap. 5000 bytes fit the pipe's buffer.
        let pipe = Pipe()
        try pipe.fileHandleForWriting.write(contentsOf: Data(repeating: 0x20, count: 5000))
        try pipe.fileHandleForWriting.close()
        let path = "/proc/self/fd/\(pipe.fileHandleForReading.fileDescriptor)"
        #expect(throws: InputFile.ReadError.tooLarge(size: nil, limit: 1000)) { try InputFile.read(path, limit: 1000) }
        #expect(InputFile.ReadError.tooLarge(size: nil, limit: 1000).description == "the file holds more than the limit of 1000 bytes")
    }

    @Test func aMissingFileOrADirectorySaysWhy() {
        #expect(throws: InputFile.ReadError.unreadable("No such file or directory")) { try InputFile.read("/does/not/exist.json") }
        #expect(throws: InputFile.ReadError.unreadable("it is a directory")) { try InputFile.read(NSTemporaryDirectory()) }
        #expect(InputFile.ReadError.unreadable("it is a directory").description == "cannot read the file (it is a directory)")
    }
}

@Suite("JSON strings: ASCII, other UTF-8, invalid bytes")
struct JSONStringTests {
    @Test func plainAndNonASCIIStringsParseAndInvalidUTF8IsRefused() throws {
        #expect(try JSONValue.parse(Array(#"{"a":"plain","b":"über ☃"}"#.utf8)) == ["a": "plain", "b": "über ☃"])
        // An escape takes the other path; the text must be the same.
        #expect(try JSONValue.parse(Array(#"["a\u00fcb"]"#.utf8)) == ["aüb"])
        var bytes = Array(#"{"k":"ab"#.utf8)
        bytes.append(0xFF)
        bytes += Array(#""}"#.utf8)
        #expect(throws: JSONParseError.self) { try JSONValue.parse(bytes) }
        var key = Array(#"{"a"#.utf8)
        key += [0xC3]  // a lead byte without its continuation
        key += Array(#"":1}"#.utf8)
        #expect(throws: JSONParseError.self) { try JSONValue.parse(key) }
    }

    @Test func parseKeepingTextKeepsWhatAValueCannotHold() throws {
        let text = #"["\ud800","a\udc00b","\ud800\u0041",12345678901234567890,1e400,-0,0,-1,1.5,"\u00fc",-0.0,1e-400,12345678901234567890.5]"#
        let value = try JSONValue.parseKeepingText(Array(text.utf8))
        #expect(value.serialized() == text.replacingOccurrences(of: #""\u00fc""#, with: #""ü""#))
        #expect(value.arrayValue?[6] == 0)
        #expect(value.arrayValue?[7] == -1)
        #expect(value.arrayValue?[8] == 1.5)
        // The plain parser reads an unpaired surrogate as U+FFFD, as a payload's reader must
        // (APNs takes it); a file someone wrote refuses it.
        #expect(try JSONValue.parse(Array(#"["a\ud800b"]"#.utf8)) == ["a\u{FFFD}b"])
        #expect(throws: JSONParseError.self) { try JSONValue.parseFile(Array(#"["\ud800"]"#.utf8)) }
    }
}
