#ifndef CNGHTTP2_SHIM_H
#define CNGHTTP2_SHIM_H
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stddef.h>

/* Flood protections that upstream nghttp2 added after 1.52 (rapid reset: 1.57, CONTINUATION
   flood: 1.61) and Debian backported into its 1.52 security updates. Declared weak so the
   package also builds and runs against a 1.52 without them; the setters then report 0. */
extern void nghttp2_option_set_stream_reset_rate_limit(nghttp2_option *option, uint64_t burst,
                                                       uint64_t rate) __attribute__((weak));
extern void nghttp2_option_set_max_continuations(nghttp2_option *option, size_t val)
    __attribute__((weak));

static inline int cnghttp2_set_stream_reset_rate_limit(nghttp2_option *option, uint64_t burst,
                                                       uint64_t rate) {
    if (!nghttp2_option_set_stream_reset_rate_limit) return 0;
    nghttp2_option_set_stream_reset_rate_limit(option, burst, rate);
    return 1;
}

static inline int cnghttp2_set_max_continuations(nghttp2_option *option, size_t val) {
    if (!nghttp2_option_set_max_continuations) return 0;
    nghttp2_option_set_max_continuations(option, val);
    return 1;
}
#endif
