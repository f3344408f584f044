/* alloc.c — allocation wrappers; every library allocation goes through here. */
#define _DEFAULT_SOURCE /* madvise and MADV_HUGEPAGE (moe_malloc_huge) */
#include "core/alloc.h"
#include "core/checked.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* The test hook (alloc.h): allocations counted on this thread, and which one fails (0: none). */
static _Thread_local uint64_t alloc_calls;
static _Thread_local uint64_t alloc_fail_at;

/* Counts one allocation; true when it is the one the hook fails. */
static bool fail_this_one(void)
{
    alloc_calls++;
    return alloc_fail_at != 0 && alloc_calls == alloc_fail_at;
}

void moe_alloc_fail_nth(uint64_t n)
{
    alloc_calls = 0;
    alloc_fail_at = n;
}

uint64_t moe_alloc_calls(void) { return alloc_calls; }

void *moe_malloc(size_t size)
{
    if (fail_this_one()) return NULL;
    return malloc(size ? size : 1);
}

void *moe_calloc(size_t n, size_t size)
{
    size_t total;
    if (fail_this_one()) return NULL;
    if (moe_mul_overflow_size(n, size, &total)) return NULL;
    return calloc(total ? total : 1, 1);
}

void *moe_realloc(void *ptr, size_t size)
{
    if (fail_this_one()) return NULL;
    return realloc(ptr, size ? size : 1);
}

void *moe_malloc_huge(size_t size)
{
    const size_t huge = (size_t)2 << 20;
    if (fail_this_one()) return NULL;
    if (size < huge) return aligned_alloc(64, (size + 63) & ~(size_t)63);
    if (size > SIZE_MAX - huge) return NULL;
    const size_t bytes = (size + huge - 1) & ~(huge - 1);
    void *p = NULL;
    if (posix_memalign(&p, huge, bytes)) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes, MADV_HUGEPAGE); /* advice: without it the pages are 4 KiB */
#endif
    return p;
}

void moe_free(void *ptr) { free(ptr); }

char *moe_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = moe_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}
