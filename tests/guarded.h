/* guarded.h — tests: buffers that end at a PROT_NONE page, so a read or write past them faults. */
#ifndef MOE_TEST_GUARDED_H
#define MOE_TEST_GUARDED_H

#include <stdint.h>
#include <sys/mman.h> /* MAP_ANONYMOUS: the includer defines _DEFAULT_SOURCE first */
#include <unistd.h>

#include "test.h"

typedef struct guarded {
    uint8_t *map, *end; /* end: the first byte of the PROT_NONE page */
    size_t len, data;   /* the whole mapping; the accessible bytes before end */
} guarded;

/* Room for CAPACITY bytes right before the guard page, and 256 more before them for the
 * placements' alignment. */
static inline void guarded_init(guarded *g, size_t capacity)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    g->data = (capacity + 256 + page - 1) / page * page;
    g->len = g->data + page;
    void *p = mmap(NULL, g->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    g->map = p;
    g->end = g->map + g->data;
    REQUIRE(mprotect(g->end, page, PROT_NONE) == 0);
}

static inline void guarded_free(guarded *g)
{
    if (g->map) munmap(g->map, g->len);
    g->map = NULL;
}

/* BYTES ending right at the guard page, the start rounded down to ALIGN (a power of two). */
static inline void *guarded_tail(const guarded *g, size_t bytes, size_t align)
{
    return (void *)((uintptr_t)(g->end - bytes) & ~(uintptr_t)(align - 1));
}

/* A fresh guarded buffer of exactly BYTES: the last one right before the guard page. */
static inline void *guarded_alloc(guarded *g, size_t bytes)
{
    guarded_init(g, bytes);
    return guarded_tail(g, bytes, 1);
}

/* Placements 0..3: 64-byte aligned plus that many elements of ELSIZE bytes, ending within a few
 * dozen bytes of the guard page; PLACE_END: the last byte right before the guard page, so any
 * read past the row faults. */
enum { PLACE_END = 4, NPLACES = 5 };

static inline uint8_t *guarded_place(const guarded *g, size_t bytes, size_t elsize, int place)
{
    if (place == PLACE_END) return g->end - bytes;
    uintptr_t start = ((uintptr_t)(g->end - bytes - 3 * elsize)) & ~(uintptr_t)63;
    return (uint8_t *)start + (size_t)place * elsize;
}

#endif
