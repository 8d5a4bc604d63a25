import HTTP1Client

/// What one attempt got: an answer (any status) or no usable answer.
typealias AttemptResult = Result<HTTP1Response, HTTP1ClientError>

/// What an attempt's result means for its call.
enum AttemptVerdict: Equatable {
    /// The backend answered with a status that ends the call (2xx, 3xx, 4xx but 429).
    case done
    /// It will not get better by asking again (an https URL, a malformed answer; a backend's
    /// answer over 1 MiB is cut, not failed: `BackendCaller` asks for `OversizedAnswer.cut`).
    case failed
    /// No answer, a 5xx or a 429: the backend may be down or busy now.
    case retryable

    init(_ result: AttemptResult) {
        switch result {
        case .success(let response):
            self = response.status >= 500 || response.status == 429 ? .retryable : .done
        case .failure(let error):
            switch error.kind {
            case .cannotConnect, .timedOut, .closedEarly: self = .retryable
            case .invalidRequest, .httpsUnsupported, .malformedResponse, .responseTooLarge: self = .failed
            }
        }
    }
}

extension BackendCallRecord {
    /// The inspection API shows this much of an answer's body.
    static let responseTextLimit = 4096

    /// Notes an attempt's answer or failure. A failure without an answer keeps the previous
    /// answer's status and body: they describe "the last answer".
    mutating func note(_ result: AttemptResult) {
        switch result {
        case .success(let response):
            status = response.status
            responseBody = Self.text(response.body, limit: Self.responseTextLimit)
            error = AttemptVerdict(result) == .retryable ? "the backend answered \(response.status)" : nil
        case .failure(let failure):
            error = failure.message
        }
    }

    /// The body as text, cut at `limit` bytes without splitting a character.
    static func text(_ body: [UInt8], limit: Int) -> String {
        guard body.count > limit else { return String(decoding: body, as: UTF8.self) }
        var cut = limit
        while cut > 0 && body[cut] & 0xC0 == 0x80 { cut -= 1 }
        return String(decoding: body[..<cut], as: UTF8.self)
    }
}
