/* alloc.h — internal: the library's only allocation entry points (one place for test hooks). */
#ifndef MOE_CORE_ALLOC_H
#define MOE_CORE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

/* Like malloc/calloc/realloc/free. moe_calloc checks n * size for overflow. They do not set
 * the last-error message: callers report MOE_ENOMEM with what they were allocating. */
void *moe_malloc(size_t size);
void *moe_calloc(size_t n, size_t size);
void *moe_realloc(void *ptr, size_t size);
void moe_free(void *ptr);

/* For the packed weights, read by every forward and written once at creation: memory aligned
 * to 2 MiB for sizes of 2 MiB and more (64 bytes below), with transparent huge pages asked
 * for (madvise MADV_HUGEPAGE; the system's "madvise" mode honours it). Faulting in fresh
 * memory 4 KiB at a time ran at 0.3-1.2 GB/s on the development VM and bounded packing;
 * 2 MiB pages fault at 3-6 GB/s there (in memory the guest used recently: its first touch
 * of a page is a host fault whatever the size), and streaming forwards need fewer TLB
 * entries.
 * Counts as one allocation for the hook below; freed with moe_free. */
void *moe_malloc_huge(size_t size);

/* strdup through moe_malloc; NULL on failure. */
char *moe_strdup(const char *s);

/* ---- Test hook: a failing allocation ---------------------------------------------------
 * Error paths are tested by failing one allocation at a time (tests/layer/test_alloc_failure.c
 * walks every n an operation reaches). After moe_alloc_fail_nth(n) with n >= 1, the calling
 * thread's n-th allocation from then on (moe_malloc, moe_calloc, moe_realloc and moe_strdup
 * each count once) returns NULL, as if memory ran out (a failed realloc leaves its block
 * as it was); every other allocation behaves normally. n = 0 disarms the hook.
 *
 * The state is thread-local, the one mutable state the library keeps besides capability
 * detection: a test arming it affects no other thread, and it costs an allocation one
 * thread-local increment. Allocations made by worker threads a call starts (OpenMP) are not
 * counted, so tests run such calls with one thread. Callers outside the library's own tests
 * have no reason to use it. */
void moe_alloc_fail_nth(uint64_t n);

/* The number of allocations the calling thread made since its last moe_alloc_fail_nth (so a
 * test can tell whether the n-th was reached: calls >= n). */
uint64_t moe_alloc_calls(void);

/* ---- Test hook: peak bytes ------------------------------------------------------------
 * The calling thread's allocations are also counted in bytes (malloc_usable_size: what
 * malloc gave, its own header left out), so a test can bound an operation's peak heap:
 * moe_alloc_peak_reset(), the operation, then moe_alloc_peak_bytes() is the most that was
 * live at once in between, counting from 0 at the reset. Thread-local like the hook above,
 * so only single-threaded operations are measured whole; a test can send a dependency's
 * allocations through here too (jansson: json_set_alloc_funcs(moe_malloc, moe_free)). */
void moe_alloc_peak_reset(void);
int64_t moe_alloc_peak_bytes(void);

#endif
