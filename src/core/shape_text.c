/* shape_text.c — a tensor's shape as "[2, 3]" for messages. */
#include "core/shape_text.h"

#include <stdio.h>

const char *moe_shape_text(const int64_t *shape, int ndim, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}
