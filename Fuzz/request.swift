@testable import APNsCore
import Foundation
import HTTPGrammar

// Fuzz target: the request rules. The input is split into header lines ("name: value") and,
// after a blank line, the body; every request must get an APNs answer and one record.
struct AcceptAll: SignatureVerifier {
    func verify(signature: [UInt8], message: [UInt8]) -> Bool { signature.first.map { $0 & 1 == 0 } ?? false }
}

let fuzzState: EmulatorState = {
    var credentials = Credentials()
    credentials.add(ProviderKey(teamID: "TEAMAAAAAA", keyID: "KEYAAAAAAA", verifier: AcceptAll(), source: "fuzz"))
    credentials.add(
        ProviderKey(
            teamID: "TEAMAAAAAA", keyID: "KEYTOPIC01", environment: .sandbox, topics: ["com.example.app"],
            relatedKeyID: nil, verifier: AcceptAll(), source: "fuzz"))
    credentials.addApp(teamID: "TEAMAAAAAA", bundleID: "com.example.app")
    var registry = DeviceRegistry(seed: 1)
    _ = try? registry.addDevice(id: "d1", isVirtual: true, nowMs: 0)
    _ = try? registry.register(
        deviceID: "d1", bundleID: "com.example.app", environment: .sandbox,
        fixedToken: "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", nowMs: 0)
    return EmulatorState(start: World(credentials: credentials, registry: registry, records: RecordStore(capacity: 64)))
}()
let fuzzEndpoint = ProviderEndpoint(state: fuzzState, clock: ManualClock(milliseconds: 1_767_225_600_000))

public func fuzzRequest(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let split = bytes.firstRange(of: [0x0A, 0x0A])
    let head = String(decoding: bytes[..<(split?.lowerBound ?? bytes.endIndex)], as: UTF8.self)
    let body = split.map { Array(bytes[$0.upperBound...]) } ?? []
    var headers: [HeaderField] = [HeaderField(":method", "POST"), HeaderField(":scheme", "https")]
    for line in head.split(separator: "\n") {
        guard let colon = line.dropFirst().firstIndex(of: ":") else { continue }
        headers.append(HeaderField(String(line[..<colon]), String(line[line.index(after: colon)...])))
    }
    var connection = ProviderConnectionContext(
        connectionID: 1, listenerEnvironment: .sandbox, serverName: nil,
        tokenPolicy: TokenPolicy(), random: FastRandom(seed: 3))
    let before = fuzzState.withWorld { $0.records.nextSequence }
    let response = fuzzEndpoint.handle(PushRequest(streamID: 1, headers: headers, body: body), connection: &connection)
    let after = fuzzState.withWorld { $0.records.nextSequence }
    guard [200, 400, 403, 404, 405, 410, 413, 429, 500, 503].contains(response.status) else {
        fatalError("status \(response.status) is not one APNs sends")
    }
    if (response.status == 200) != (response.reasonText == nil) { fatalError("a reason goes with every error, only errors") }
    if after != before + 1 { fatalError("\(after - before) records for one request") }
    return 0
}
