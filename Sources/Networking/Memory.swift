import CLinux

public enum Memory {
    /// Hands memory that was freed back to the OS. glibc keeps freed heap pages for reuse, so
    /// without this a process that once held a large state (1,000,000 devices) stays that size
    /// after dropping it. Takes tens of milliseconds on a large heap: call it off any lock.
    public static func returnFreedPages() {
        _ = malloc_trim(0)
    }
}
