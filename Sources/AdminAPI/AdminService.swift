// AdminAPI: the admin/inspection HTTP API (docs/admin-api.md; docs/openapi.json) and its web
// UI, served through HTTP1Server: access rules, routes (one file per resource), paging, event
// streams and long polls, /metrics text. Handlers decode a request, call one World command (or
// one of the emulator's, through `AdminHost`), and encode the answer. Paths and JSON field
// names are a public contract. Imports APNsCore, BackendCalls, HTTP1Server, HTTPGrammar,
// Networking, Locking and Foundation; not the server that hosts it.

import APNsCore
import Foundation
public import HTTP1Server

/// The admin API as an HTTP/1.1 service: the access rules judge each request head, the route
/// table answers, and with `--state-dir` an answer to a change waits for its commit.
public final class AdminService: HTTP1Service, @unchecked Sendable {
    /// The resources, each adding its routes (AdminRouter.swift). A new one is listed here.
    static let resources: [any AdminResource.Type] = [
        SystemRoutes.self, NotificationRoutes.self, DeviceRoutes.self, TokenRoutes.self, CredentialRoutes.self,
        FaultRoutes.self, AccountRoutes.self, ClockRoutes.self, ChannelRoutes.self, LiveActivityRoutes.self,
        ValidationRoutes.self,
    ]

    /// The emulator behind the API (which holds the emulator itself unowned: the emulator owns
    /// its admin server, which owns this).
    let host: any AdminHost
    let events: EventHub
    let metrics: AdminMetrics
    let policy: AdminAccessPolicy
    let settings: AdminSettings
    /// What list answers not yet read by their clients hold (AdminPaging.swift): one budget
    /// per emulator, so emulators sharing a process (tests, the library) do not refuse each
    /// other's lists.
    let listAnswerBudget = AnswerBudget(limit: 64 << 20)
    private(set) var router = AdminRouter()

    public init(host: any AdminHost, events: EventHub, metrics: AdminMetrics, policy: AdminAccessPolicy, settings: AdminSettings) {
        self.host = host
        self.events = events
        self.metrics = metrics
        self.policy = policy
        self.settings = settings
        var router = AdminRouter()
        for resource in Self.resources { resource.init(api: self).addRoutes(to: &router) }
        self.router = router
    }

    var state: EmulatorState { host.state }
    var now: Int64 { host.clock.nowMilliseconds() }

    /// With `--redis`, changes wait for Redis (the lease, the write): they run here, one at
    /// a time, so the admin loop keeps answering reads from this instance's copy meanwhile.
    private let sharedChanges = DispatchQueue(label: "apns-admin-shared-changes")
    /// Where a read waits until this copy has followed the shared log as far as it went, has
    /// read what other instances journaled (`--redis-follow lazy` leaves it for later) and
    /// decoded it (`EmulatorState.followOthersForRead`): the admin loop serves other requests
    /// meanwhile.
    private let journalCatchUps = DispatchQueue(label: "apns-admin-journal-catch-ups")

    // MARK: HTTP1Service

    /// The access rules for a request head, judged before its body is read.
    public func screen(_ head: HTTP1RequestHead, path: String, query: [String: String]) -> HTTP1ServerResponse? {
        var open = false
        var isEventStream = false
        if case .found(let route, _) = router.match(method: head.method, path: path) {
            open = route.open
            isEventStream = route.pattern == "/api/v1/events"
        }
        guard let denial = policy.check(head, open: open, queryToken: query["access_token"], acceptsQueryToken: isEventStream) else {
            return nil
        }
        metrics.refused(denial.reason)
        var response = HTTP1ServerResponse.error(denial.status, denial.message)
        response.headers += denial.headers
        return response
    }

    public func handle(_ request: HTTP1Request, on http: HTTP1Connection) {
        if state.coordinator != nil, request.method != "GET", request.method != "HEAD" {
            let loop = http.connection.loop
            let confined = ConfinedConnection(http: http)
            sharedChanges.async { [self] in
                let (response, ran) = answer(request, confined.http)
                loop.execute { [self] in deliver(response, to: request, changed: ran, confined.http) }
            }
            return
        }
        // A read sees every change the other instances made before it (what they journaled
        // included, which `--redis-follow lazy` leaves for now), and finds their records
        // decoded: all done first, off this loop (after a burst it takes a few hundred ms,
        // which /readyz and the rest must not wait for); the route itself still runs on the
        // loop, which streams and long polls need.
        if state.coordinator != nil, !servesFromReserve(request.path) {
            let loop = http.connection.loop
            let confined = ConfinedConnection(http: http)
            journalCatchUps.async { [self] in
                state.followOthersForRead()
                loop.execute { [self] in
                    let (response, ran) = answer(request, confined.http)
                    deliver(response, to: request, changed: ran, confined.http)
                }
            }
            return
        }
        let (response, ran) = answer(request, http)
        deliver(response, to: request, changed: ran, http)
    }

    /// Paths a connection from the health-check reserve may ask for.
    public func servesFromReserve(_ path: String) -> Bool { path == "/livez" || path == "/readyz" || path == "/metrics" }

    public func answer(_ refusal: HTTP1Refusal) -> HTTP1ServerResponse {
        let crowded = "too many admin connections (--admin-max-connections \(settings.maxConnections)), none of them idle"
        let seconds = settings.readTimeoutMs / 1000
        switch refusal {
        case .malformed(let failure): return .error(failure.status, failure.message)
        case .noPlace: return .error(503, "\(crowded); try again later")
        case .reserveOnly: return .error(503, "\(crowded); only /livez, /readyz and /metrics are answered now; try again later")
        case .bodyBudgetSpent:
            return .error(503, "the admin API is reading \(HTTP1Syntax.size(HTTP1Server.bodyBudgetBytes)) of request bodies already; try again later")
        case .headTooSlow: return .error(408, "the request head did not arrive within \(seconds) s (--admin-read-timeout)")
        case .bodyTooSlow: return .error(408, "the request body did not arrive within \(seconds) s (--admin-read-timeout)")
        }
    }

    public func count(_ event: HTTP1ServerEvent) { metrics.count(event) }

    // MARK: Answering

    /// The connection taken to the change queue and back. Only its own loop uses it: change
    /// routes never touch the connection (only GET routes stream or wait on it).
    private struct ConfinedConnection: @unchecked Sendable { let http: HTTP1Connection }

    /// A DELETE removes what its path names and nothing else: a body or a query parameter
    /// (`DELETE /api/v1/faults?id=x1`, meant for one rule) would otherwise be ignored and the
    /// whole collection removed. `DELETE /api/v1/notifications` reads its filters itself.
    static func refuseWhatADeleteDoesNotTake(_ request: HTTP1Request, _ route: AdminRoute) throws(AdminError) {
        if route.pattern != "/api/v1/notifications", let name = request.query.keys.sorted().first {
            throw AdminError(
                400, "DELETE \(route.pattern) takes no query parameters; got \"\(name)\" (nothing was removed)")
        }
        try request.refuseBody()
    }

    /// The route's answer (nil when the route answers by itself: streams, long polls), and
    /// whether its handler ran (only then may a change have been made).
    private func answer(_ request: HTTP1Request, _ http: HTTP1Connection) -> (HTTP1ServerResponse?, ran: Bool) {
        var ran = false
        do {
            switch router.match(method: request.method, path: request.path) {
            case .found(let route, let parameters):
                if request.method != "GET", request.method != "HEAD", let reason = state.unavailableReason {
                    // --redis: a change now would be this instance's alone (and lost at the
                    // reload); --state-dir: it could not be kept.
                    throw AdminError(503, "the emulator cannot take changes now: \(reason)")
                }
                if request.method == "DELETE" { try Self.refuseWhatADeleteDoesNotTake(request, route) }
                ran = true
                return (try route.handler(request, parameters, http), true)
            case .wrongMethod(let allowed):
                let unique = Array(Set(allowed)).sorted()
                var error = HTTP1ServerResponse.error(
                    405, "\(request.method) is not allowed on \(request.path); use \(unique.joined(separator: " or "))")
                error.headers.append(("Allow", unique.joined(separator: ", ")))
                return (error, false)
            case .notFound:
                throw AdminError(404, "no such endpoint: \(request.path); see /api/v1/openapi.json")
            case .emptySegment:
                throw AdminError(
                    404,
                    "no such endpoint: \(request.path) has an empty path segment (an id left empty, or a '/' too many); see /api/v1/openapi.json")
            }
        } catch let error as AdminError {
            return (.error(error.status, error.message), ran)
        } catch {
            return (.error(500, "\(error)"), ran)
        }
    }

    /// Sends the answer on the connection's loop; with `--state-dir` an answer to a change
    /// waits until the change (and everything before it) is committed.
    private func deliver(_ response: HTTP1ServerResponse?, to request: HTTP1Request, changed: Bool, _ http: HTTP1Connection) {
        guard let response else { return }
        let waits =
            changed && request.method != "GET"
            && host.afterCommit(on: http.connection.loop) { failure in
                guard let failure else { return http.respond(response) }
                http.respond(
                    .error(
                        503,
                        "the change was made in memory but is not in the state directory: \(failure). It is written once the directory takes writes again, unless the emulator stops first"
                    ))
            }
        if !waits { http.respond(response) }
    }
}

/// What every resource's handlers use: the state, the time, the host, and the checks shared
/// by their paths and bodies.
extension AdminResource {
    var state: EmulatorState { api.state }
    var host: any AdminHost { api.host }
    var now: Int64 { api.now }

    /// Runs a device command under the state lock; its refusal becomes 404 (unknown device or
    /// app), 409 (too many apps), 507 (`--max-devices` or `--max-tokens` reached) or 400.
    func deviceCall<T: Sendable>(_ body: (inout World, Int64) throws(DeviceRequestError) -> T) throws -> T {
        let now = self.now
        do {
            return try state.withWorld { world throws(DeviceRequestError) in try body(&world, now) }
        } catch {
            let status =
                error.isNotFound
                ? 404
                : error.code == DeviceRequestError.tooManyApps || error.code == DeviceRequestError.notConnected
                    ? 409 : error.code == DeviceRequestError.registryFull ? 507 : 400
            throw AdminError(status, error.message)
        }
    }

    /// A connected device hears about a change made from outside (its CLI prints it).
    func tellDevice(_ id: String, _ message: JSONValue) { tellDevice(id, [message]) }

    func tellDevice(_ id: String, _ messages: [JSONValue]) {
        guard !messages.isEmpty, let connection = state.readWorld({ $0.registry.devices[id]?.connectionID }) else { return }
        host.dispatch(messages.map { DeviceFrame(deviceID: id, connectionID: connection, message: $0) })
    }
}
