import Foundation

// One libFuzzer binary for every target (the sources compile once); FUZZ_TARGET picks the
// target when it starts.
let fuzzTarget: @Sendable (UnsafePointer<UInt8>, Int) -> CInt = {
    switch ProcessInfo.processInfo.environment["FUZZ_TARGET"] {
    case "json": return fuzzJSON
    case "jwt": return fuzzJWT
    case "request": return fuzzRequest
    case "preface": return fuzzPreface
    case "http1": return fuzzHTTP1
    case let other:
        fatalError("FUZZ_TARGET must be json, jwt, request, preface or http1, not \(other ?? "unset")")
    }
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    fuzzTarget(data, size)
}
