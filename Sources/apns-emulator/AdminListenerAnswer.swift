import AdminClient
import Foundation
import Networking

/// What an `--admin` request that failed says, for `load` and `scenario`. A server that is not
/// an emulator's admin listener (another HTTP server, a TLS or HTTP/2 port) is named as such,
/// with its status and at most a short excerpt of its answer: not a whole HTML page.
enum AdminListenerAnswer {
    static let hint = "--admin is the emulator's admin listener (serve's --admin-listen, 127.0.0.1:8197 by default)"

    /// `request` is the call that failed ("GET /api/v1/info").
    static func problem(_ admin: HostPort, request: String, _ error: EmulatorAdminError) -> String {
        if error.status == 0 {
            // Nothing to connect to is said as such; no HTTP/1.1 answer at all (a TLS or
            // HTTP/2 port) already names the request.
            if error.message.hasPrefix("cannot reach") { return error.message }
            return "\(admin) did not answer as an apns-emulator admin listener: \(error.message); \(hint)"
        }
        // A 200 that is not the emulator's answer (a server answering JSON to everything).
        if error.status == 200 {
            return "\(admin) did not answer as an apns-emulator admin listener: \(request) was answered 200 with \(error.message); \(hint)"
        }
        // The emulator's own words name serve's flag; the fix is this command's.
        if error.status == 401, isEmulatorMessage(error) { return "--admin \(admin): \(request): 401: \(tokenAdvice(error))" }
        if isEmulatorMessage(error) { return "--admin \(admin): \(request): \(error.description)" }
        return "\(admin) did not answer as an apns-emulator admin listener: \(request) was answered \(error.status) "
            + "\(excerpt(error.message)); \(hint)"
    }

    /// A 401 of an admin API started with --admin-token, said with the option of `load` and
    /// `scenario` (both take --admin-token TOKEN and read APNS_EMULATOR_ADMIN_TOKEN).
    static func tokenAdvice(_ error: EmulatorAdminError) -> String {
        let give = "--admin-token TOKEN (or APNS_EMULATOR_ADMIN_TOKEN) with the token the emulator was started with (its --admin-token)"
        if error.message.hasPrefix("wrong admin token") { return "wrong admin token; give \(give)" }
        return "this admin API needs a token; give \(give)"
    }

    /// The emulator's errors are one short line of JSON's `error`; another server's are a page.
    /// A 404 for one of the admin API's own paths is never the emulator's.
    static func isEmulatorMessage(_ error: EmulatorAdminError) -> Bool {
        error.status != 404 && !error.message.isEmpty && error.message.count <= 300 && !error.message.contains("\n")
            && !error.message.hasPrefix("<")
    }

    /// A page's title, else its first line, at most 60 characters, quoted.
    static func excerpt(_ text: String) -> String {
        if let open = text.range(of: "<title>", options: .caseInsensitive),
            let close = text.range(of: "</title>", options: .caseInsensitive, range: open.upperBound..<text.endIndex)
        {
            return "(a page titled \"\(String(text[open.upperBound..<close.lowerBound].prefix(60)))\")"
        }
        let line = text.split(whereSeparator: \.isNewline).first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
        guard !line.isEmpty else { return "(an empty body)" }
        return "\"\(line.prefix(60))\(line.count > 60 || text.trimmingCharacters(in: .whitespacesAndNewlines).count > line.count ? "…" : "")\""
    }
}
