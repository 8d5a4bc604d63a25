import Glibc

/// OpenSSL writes with write(2), which raises SIGPIPE when the peer has gone. Block SIGPIPE on
/// this thread for the call and discard one raised meanwhile, so the call reports an error
/// instead of killing the process, without changing the process-wide disposition.
public func withSIGPIPEBlocked<T>(_ body: () -> T) -> T {
    var pipeOnly = sigset_t()
    sigemptyset(&pipeOnly)
    sigaddset(&pipeOnly, SIGPIPE)
    var pendingBefore = sigset_t()
    sigpending(&pendingBefore)
    let alreadyPending = sigismember(&pendingBefore, SIGPIPE) == 1
    var previous = sigset_t()
    pthread_sigmask(SIG_BLOCK, &pipeOnly, &previous)
    let result = body()
    if !alreadyPending {
        var pending = sigset_t()
        sigpending(&pending)
        if sigismember(&pending, SIGPIPE) == 1 {
            var zero = timespec(tv_sec: 0, tv_nsec: 0)
            _ = sigtimedwait(&pipeOnly, nil, &zero)
        }
    }
    pthread_sigmask(SIG_SETMASK, &previous, nil)
    return result
}
