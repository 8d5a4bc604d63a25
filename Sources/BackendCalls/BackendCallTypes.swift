import APNsCore
public import HTTP1Client

/// One call an app makes to its own backend (a hook, rendered): what `BackendCaller` sends.
public struct BackendRequest: Sendable, Equatable {
    public var deviceID: String
    public var bundleID: String
    /// register, bind, unbind or fetch.
    public var hook: String
    public var method: String
    /// `http://host[:port]/path[?query]`.
    public var url: String
    public var headers: [BackendHeader]
    /// nil: no body.
    public var body: [UInt8]?
    /// Who was logged in and which token the call is about (for the record).
    public var userID: String?
    public var token: String?
    /// Per attempt: connect, send and answer together.
    public var timeoutMs: Int
    /// 1 = no retries.
    public var maxAttempts: Int

    public init(
        deviceID: String, bundleID: String, hook: String, method: String, url: String, headers: [BackendHeader] = [],
        body: [UInt8]? = nil, userID: String? = nil, token: String? = nil, timeoutMs: Int = 5000, maxAttempts: Int = 5
    ) {
        self.deviceID = deviceID
        self.bundleID = bundleID
        self.hook = hook
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.userID = userID
        self.token = token
        self.timeoutMs = timeoutMs
        self.maxAttempts = maxAttempts
    }
}

/// A header of a hook call: the HTTP client's own type.
public typealias BackendHeader = HTTP1Header

/// Where a call is.
public enum BackendCallState: String, Sendable {
    /// Waiting behind earlier calls of the same device, or being sent.
    case pending
    /// An attempt failed (no answer, 5xx or 429); the next one is scheduled.
    case retrying
    /// The backend answered with a status that is not retried (2xx, or a 4xx other than 429).
    case done
    /// Every attempt failed.
    case failed
    /// Not sent: the queue was full, or a reset cleared it.
    case dropped
}

/// A call and its answer, as the inspection API shows it.
public struct BackendCallRecord: Sendable, Equatable {
    public var id: UInt64
    public var request: BackendRequest
    public var state: BackendCallState
    /// The last answer's status (nil: no HTTP answer yet, or none at all).
    public var status: Int?
    /// The last answer's body as text, cut at 4 KiB.
    public var responseBody: String?
    /// Why the last attempt failed (connection refused, timeout, …).
    public var error: String?
    public var attempts: Int
    /// When the call was queued (ms since the epoch).
    public var atMs: Int64
    public var finishedAtMs: Int64?

    public init(
        id: UInt64, request: BackendRequest, state: BackendCallState = .pending, status: Int? = nil,
        responseBody: String? = nil, error: String? = nil, attempts: Int = 0, atMs: Int64, finishedAtMs: Int64? = nil
    ) {
        self.id = id
        self.request = request
        self.state = state
        self.status = status
        self.responseBody = responseBody
        self.error = error
        self.attempts = attempts
        self.atMs = atMs
        self.finishedAtMs = finishedAtMs
    }
}
