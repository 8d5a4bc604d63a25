import Foundation
import HTTP1Server

/// One admin API route. The table of routes is the contract the OpenAPI document
/// (`docs/openapi.json`) describes; a test keeps the two in step.
struct AdminRoute {
    let method: String
    /// Path with `{name}` placeholders, e.g. `/api/v1/devices/{deviceId}`.
    let pattern: String
    let summary: String
    /// Served without the admin token: health checks and the web UI's files (AdminAccess.swift).
    let open: Bool
    /// Returns a response, or nil when it will answer later through the connection.
    let handler: Handler

    typealias Handler = (HTTP1Request, [String: String], HTTP1Connection) throws -> HTTP1ServerResponse?

    var segments: [Substring] { pattern.split(separator: "/") }
}

struct AdminRouter {
    private(set) var routes: [AdminRoute] = []

    mutating func add(
        _ method: String, _ pattern: String, _ summary: String, open: Bool = false,
        _ handler: @escaping AdminRoute.Handler
    ) {
        routes.append(AdminRoute(method: method, pattern: pattern, summary: summary, open: open, handler: handler))
    }

    enum Match {
        case found(AdminRoute, [String: String])
        case wrongMethod(allowed: [String])
        case notFound
        /// `//` or a trailing `/`: an id left empty (`DELETE /api/v1/faults/$ID` with ID
        /// unset), never taken for the path without it (which would delete every rule).
        case emptySegment
    }

    func match(method: String, path: String) -> Match {
        var parts = path.split(separator: "/", omittingEmptySubsequences: false)
        if parts.first?.isEmpty == true { parts.removeFirst() }
        if parts.count == 1, parts[0].isEmpty { parts = [] }  // "/" itself
        if parts.contains(where: \.isEmpty) { return .emptySegment }
        var allowed: [String] = []
        for route in routes {
            guard let parameters = Self.bind(route.segments, parts) else { continue }
            if route.method == method || (method == "HEAD" && route.method == "GET") { return .found(route, parameters) }
            allowed.append(route.method)
        }
        return allowed.isEmpty ? .notFound : .wrongMethod(allowed: allowed)
    }

    /// Matches literal segments exactly and binds `{name}` segments (percent-decoded). The
    /// literals are compared first, so a route that does not match decodes nothing (a request
    /// is matched against every route until one fits).
    static func bind(_ pattern: [Substring], _ parts: [Substring]) -> [String: String]? {
        guard pattern.count == parts.count else { return nil }
        for (p, value) in zip(pattern, parts) where !isParameter(p) && p != value { return nil }
        var parameters: [String: String] = [:]
        for (p, value) in zip(pattern, parts) where isParameter(p) {
            parameters[String(p.dropFirst().dropLast())] = String(value).removingPercentEncoding ?? String(value)
        }
        return parameters
    }

    private static func isParameter(_ segment: Substring) -> Bool {
        segment.utf8.first == UInt8(ascii: "{") && segment.utf8.last == UInt8(ascii: "}")
    }
}

/// One resource of the admin API (devices, tokens, faults, …): a file of its own that adds its
/// routes to the table. A new resource is a new conforming type, listed in
/// `AdminService.resources`.
protocol AdminResource: Sendable {
    /// The service the handlers answer for (unowned: it owns the table that holds them).
    var api: AdminService { get }
    init(api: AdminService)
    func addRoutes(to router: inout AdminRouter)
}
