// swift-tools-version:6.0
import PackageDescription

// A provider team's package that tests its push code against the emulator, using only the
// emulator's public library products. Here the emulator is this repository, two levels up; in
// your own package depend on it by URL instead:
//     .package(url: "https://example.com/your-fork/apns-emulator.git", branch: "main")
// and name it `package: "apns-emulator"` in the products below.
//
// A path dependency's identity is its directory's name, so it is read from the path here (a
// clone may live in a directory with any name).
let emulatorPackage = Context.packageDirectory.split(separator: "/").dropLast(2).last.map { String($0).lowercased() } ?? "apns-emulator"

let package = Package(
    name: "ProviderTests",
    dependencies: [
        .package(path: "../..")
    ],
    targets: [
        // The code under test: how this team's server sends pushes and reacts to APNs' answers.
        .target(name: "PushService", dependencies: [.product(name: "ProviderClient", package: emulatorPackage)]),
        .testTarget(
            name: "PushServiceTests",
            dependencies: [
                "PushService",
                .product(name: "APNsEmulatorTesting", package: emulatorPackage),
            ]),
    ]
)
