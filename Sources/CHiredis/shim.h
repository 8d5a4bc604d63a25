#ifndef CHIREDIS_SHIM_H
#define CHIREDIS_SHIM_H
#include <hiredis/hiredis.h>

// Debian bookworm ships hiredis 0.14, which predates RESP3 and the timeout error code. The
// values are hiredis 1.x's, so the same Swift code builds against either version.
#ifndef REDIS_ERR_TIMEOUT
#define REDIS_ERR_TIMEOUT 6
#endif
#ifndef REDIS_REPLY_DOUBLE
#define REDIS_REPLY_DOUBLE 7
#define REDIS_REPLY_BOOL 8
#define REDIS_REPLY_MAP 9
#define REDIS_REPLY_SET 10
#define REDIS_REPLY_ATTR 11
#define REDIS_REPLY_PUSH 12
#define REDIS_REPLY_BIGNUM 13
#define REDIS_REPLY_VERB 14
#endif

#endif
