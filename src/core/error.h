/* error.h — internal: set the per-thread last-error message and return a status. */
#ifndef MOE_CORE_ERROR_H
#define MOE_CORE_ERROR_H

#include "moe.h"

/* Formats the message (printf-style) into the calling thread's last-error buffer and returns
 * status, so a check reads `return moe_error(MOE_EINVAL, "argument 'x' is NULL");`.
 * Messages longer than the buffer (1 KiB) are truncated. */
moe_status moe_error(moe_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends context ("shard 'a.safetensors': ") to the current message, for callers that
 * know more than the check that failed. Returns status unchanged. */
moe_status moe_error_context(moe_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clears the calling thread's message. */
void moe_error_clear(void);

#endif
