import APNsCore
import BackendCalls

extension BackendRequest {
    /// A hook call decided under the state lock, filled in here, outside it (the payload of a
    /// fetch is parsed now, not while the lock is held).
    init(intent: BackendIntent) {
        var values = intent.values
        if let payload = intent.payload { values.payload = try? JSONValue.parse(payload) }
        let hook = intent.backend.hooks[intent.hook]!
        let rendered = HookTemplate.render(hook, values)
        self.init(
            deviceID: values.deviceID, bundleID: values.bundleID, hook: intent.hook.rawValue, method: rendered.method,
            url: rendered.url, headers: rendered.headers.map { BackendHeader($0.name, $0.value) }, body: rendered.body,
            userID: values.userID, token: values.token, timeoutMs: intent.backend.timeoutMs,
            maxAttempts: intent.backend.maxAttempts)
    }
}
