/* alloc.c — allocation wrappers; every library allocation goes through here. */
#include "core/alloc.h"
#include "core/checked.h"

#include <stdlib.h>
#include <string.h>

void *moe_malloc(size_t size) { return malloc(size ? size : 1); }

void *moe_calloc(size_t n, size_t size)
{
    size_t total;
    if (moe_mul_overflow_size(n, size, &total)) return NULL;
    return calloc(total ? total : 1, 1);
}

void *moe_realloc(void *ptr, size_t size) { return realloc(ptr, size ? size : 1); }

void moe_free(void *ptr) { free(ptr); }

char *moe_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = moe_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}
