import APNsCore
import CommandLineOptions
import Foundation
import ProviderClient

/// `apns-emulator jwt`: a provider token signed with a .p8 key.
let jwtCommand = Subcommand(
    name: "jwt", listing: "print a provider token (JWT) signed with a .p8 key",
    summary: "Prints a provider token for `authorization: bearer …`.",
    specs: [
        OptionSpec("key", "TEAMID:KEYID:PATH", "provider signing key (.p8)"),
        OptionSpec("iat", "SECONDS", "issue time in UNIX seconds (default: now)"),
    ],
    run: runJWT
)

private func runJWT(_ command: Subcommand, _ args: [String]) -> Never {
    let (options, positional) = command.parse(args)
    guard positional.isEmpty else { command.fail("unexpected argument '\(positional[0])'") }
    guard let spec = options.string("key") else { command.fail("jwt needs --key TEAMID:KEYID:PATH") }
    var iat = SystemClock().nowSeconds()
    if let text = options.string("iat") {
        guard let value = Int64(text) else { command.fail("--iat '\(text)' is not a whole number of seconds") }
        iat = value
    }
    do {
        print(try ProviderSigningKey(spec: spec).token(issuedAt: iat))
        exit(0)
    } catch {
        command.fail("\(error)")
    }
}
