/* alloc.c — allocation wrappers; every library allocation goes through here. */
#define _DEFAULT_SOURCE /* madvise and MADV_HUGEPAGE (moe_malloc_huge) */
#include "core/alloc.h"
#include "core/checked.h"

#include <malloc.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* The test hook (alloc.h): allocations counted on this thread, and which one fails (0: none). */
static _Thread_local uint64_t alloc_calls;
static _Thread_local uint64_t alloc_fail_at;

/* The byte accounting (alloc.h): the calling thread's live and peak bytes since the last reset,
 * as malloc's usable sizes. Signed, since a thread may free what another allocated. */
static _Thread_local int64_t live_bytes;
static _Thread_local int64_t peak_bytes;

static void *counted(void *p)
{
    if (p) {
        live_bytes += (int64_t)malloc_usable_size(p);
        if (live_bytes > peak_bytes) peak_bytes = live_bytes;
    }
    return p;
}

static void uncount(void *p)
{
    if (p) live_bytes -= (int64_t)malloc_usable_size(p);
}

void moe_alloc_peak_reset(void)
{
    live_bytes = 0;
    peak_bytes = 0;
}

int64_t moe_alloc_peak_bytes(void) { return peak_bytes; }

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
    return counted(malloc(size ? size : 1));
}

void *moe_calloc(size_t n, size_t size)
{
    size_t total;
    if (fail_this_one()) return NULL;
    if (moe_mul_overflow_size(n, size, &total)) return NULL;
    return counted(calloc(total ? total : 1, 1));
}

void *moe_realloc(void *ptr, size_t size)
{
    if (fail_this_one()) return NULL;
    const int64_t before = ptr ? (int64_t)malloc_usable_size(ptr) : 0;
    void *p = realloc(ptr, size ? size : 1);
    if (p) live_bytes -= before;
    return counted(p);
}

void *moe_malloc_huge(size_t size)
{
    const size_t huge = (size_t)2 << 20;
    if (fail_this_one()) return NULL;
    if (size < huge) return counted(aligned_alloc(64, (size + 63) & ~(size_t)63));
    if (size > SIZE_MAX - huge) return NULL;
    const size_t bytes = (size + huge - 1) & ~(huge - 1);
    void *p = NULL;
    if (posix_memalign(&p, huge, bytes)) return NULL;
    counted(p);
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes, MADV_HUGEPAGE); /* advice: without it the pages are 4 KiB */
#endif
    return p;
}

void moe_free(void *ptr)
{
    uncount(ptr);
    free(ptr);
}

char *moe_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = moe_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}
