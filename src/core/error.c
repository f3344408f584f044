/* error.c — status strings and the per-thread last-error message. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MOE_ERROR_CAP 1024

static _Thread_local char last_error[MOE_ERROR_CAP];

const char *moe_version_string(void) { return MOE_VERSION_STRING; }

const char *moe_status_string(moe_status status)
{
    switch (status) {
    case MOE_OK: return "success";
    case MOE_EINVAL: return "invalid argument";
    case MOE_ENOMEM: return "out of memory";
    case MOE_EIO: return "input/output error";
    case MOE_ESTATE: return "call in the wrong state";
    case MOE_EUNSUPPORTED: return "not supported";
    case MOE_EOVERFLOW: return "size overflow";
    case MOE_ERANGE: return "value out of range";
    case MOE_EMISSING: return "missing file, tensor or field";
    case MOE_ETRUNCATED: return "truncated file";
    case MOE_EHEADER: return "malformed header";
    case MOE_EJSON: return "malformed JSON";
    case MOE_EDUPLICATE: return "duplicate name";
    case MOE_EOFFSET: return "bad tensor offsets";
    case MOE_EDTYPE: return "bad dtype";
    case MOE_ESHAPE: return "bad shape";
    case MOE_EPATH: return "unsafe path";
    case MOE_ECONFIG: return "inconsistent config";
    case MOE_EVALUE: return "bad value in tensor data";
    }
    return "unknown status";
}

const char *moe_last_error(void) { return last_error; }

void moe_error_clear(void) { last_error[0] = '\0'; }

moe_status moe_error(moe_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

moe_status moe_error_context(moe_status status, const char *fmt, ...)
{
    char prefix[MOE_ERROR_CAP];
    char old[MOE_ERROR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t n = strlen(prefix);
    memcpy(old, last_error, sizeof old);
    memcpy(last_error, prefix, n + 1);
    /* Truncation is intended: the message is capped at the buffer. */
    strncat(last_error, old, sizeof last_error - n - 1);
    return status;
}
